package faulttest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/nomadact"
)

// TestBadInputWithNomadUnreachable: a planner whose Nomad address is a closed loopback
// port answers a registration that needs Nomad with an error naming the job and the
// connection failure; malformed meta is refused naming group and key; a valid job is
// registered but no decision is taken (no inventory); the state never changes on errors.
func TestBadInputWithNomadUnreachable(t *testing.T) {
	dead := harness.FreeAddr(t) // nothing listens here
	cfg := api.DefaultConfig()
	cfg.Address = "http://" + dead
	cl, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	act := nomadact.New(cl, nomadact.Options{Logger: log})
	httpAddr := harness.FreeAddr(t)
	s, err := planner.New(planner.Config{ID: "solo", RaftAddr: harness.FreeAddr(t), HTTPAddr: httpAddr, DataDir: t.TempDir(), Bootstrap: true,
		Token: token, Logger: log, Loop: &planner.LoopConfig{Interval: 100 * time.Millisecond, Actuator: act}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !s.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	state := func() string {
		var b []byte
		s.FSM().Read(func(st *fsm.State) { b, _ = json.Marshal(st) })
		return string(b)
	}
	before := state()
	code, body := call(http.MethodPut, httpAddr, "/v1/pipelines/pipe", nil, nil)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `read job "pipe" from nomad`) || !strings.Contains(body, "connection refused") {
		t.Fatalf("register with Nomad down: HTTP %d %s", code, body)
	}
	bad := pipelineJob("pipe")
	bad.TaskGroups[1].Meta["trident_memory_mb"] = "lots"
	raw, _ := json.Marshal(bad)
	code, body = call(http.MethodPut, httpAddr, "/v1/pipelines/pipe", map[string]json.RawMessage{"job": raw}, nil)
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `group "work": meta trident_memory_mb="lots": not an integer`) {
		t.Fatalf("malformed meta: HTTP %d %s", code, body)
	}
	code, body = call(http.MethodPost, httpAddr, "/v1/observations", json.RawMessage(`{"job":"pipe","operator":"src","capacity":1e999}`), nil)
	if code != http.StatusBadRequest {
		t.Fatalf("overflowing capacity: HTTP %d %s", code, body)
	}
	if after := state(); after != before {
		t.Fatalf("state changed by rejected requests:\n%s\n%s", before, after)
	}
	raw, _ = json.Marshal(pipelineJob("pipe"))
	if code, body = call(http.MethodPut, httpAddr, "/v1/pipelines/pipe", map[string]json.RawMessage{"job": raw}, nil); code != 200 {
		t.Fatalf("valid job: HTTP %d %s", code, body)
	}
	time.Sleep(500 * time.Millisecond) // five rounds against the dead Nomad
	var st fsm.State
	s.FSM().Read(func(x *fsm.State) { b, _ := json.Marshal(x); _ = json.Unmarshal(b, &st) })
	if len(st.Decisions) != 0 || len(st.Nodes) != 0 || len(st.Pipelines) != 1 {
		t.Fatalf("with Nomad unreachable: %d decisions, %d nodes, %d pipelines", len(st.Decisions), len(st.Nodes), len(st.Pipelines))
	}
}
