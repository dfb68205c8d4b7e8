package planner

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/sdk"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	splugin "github.com/trident-sched/trident/strategy/plugin"
	tplugin "github.com/trident-sched/trident/target/plugin"
)

// TestAutoscalerPluginsContract runs the real trident strategy and trident-target
// plugins' client code against a follower of a 3-server cluster: the strategy reads the
// committed count and decision index of GET /v1/plan/<job>; the target's POST
// /v1/pipelines/<job>/apply is accepted (202) when the decision is finished and answered
// as a no-op (409) while it is being applied.
func TestAutoscalerPluginsContract(t *testing.T) {
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 1 << 30, nodes: []fsm.Node{{Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000}}}
	c := newTestCluster(t, 3, func(int) *LoopConfig {
		return &LoopConfig{Interval: 100 * time.Millisecond, Actuator: fc}
	})
	li, _ := c.leader(10 * time.Second)
	f := c.peers[(li+1)%3].HTTPAddr
	raw, _ := json.Marshal(testPipeline())
	if code, body := c.do(http.MethodPut, f+"/v1/pipelines/pdf", map[string]json.RawMessage{"job": raw}); code != 200 {
		t.Fatalf("register: HTTP %d %s", code, body)
	}
	var plan client.PlanResponse
	waitFor(t, "a decision", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		return code == 200 && json.Unmarshal(body, &plan) == nil
	})
	strat := splugin.New(hclog.NewNullLogger())
	eval := &sdk.ScalingCheckEvaluation{
		Check:  &sdk.ScalingPolicyCheck{Strategy: &sdk.ScalingPolicyStrategy{Config: map[string]string{"planner": f, "token": c.token, "job": "pdf", "group": "embed"}}},
		Action: &sdk.ScalingAction{},
	}
	out, err := strat.Run(eval, 0)
	if err != nil {
		t.Fatal(err)
	}
	if out.Action.Count != int64(plan.Groups["embed"].Count) || out.Action.Meta[splugin.MetaDecisionIndex] != plan.DecisionIndex || out.Action.Direction != sdk.ScaleDirectionUp {
		t.Fatalf("strategy action %+v, plan %+v", out.Action, plan.Groups["embed"])
	}
	tgt := tplugin.New(hclog.NewNullLogger())
	cfg := map[string]string{"Job": "pdf", "Group": "embed", "planner_addr": f, "token": c.token}
	if err := tgt.SetConfig(map[string]string{}); err != nil {
		t.Fatal(err)
	}
	// The fake actuator never finishes: apply is a no-op error (409 -> NoOp).
	err = tgt.Scale(sdk.ScalingAction{Count: out.Action.Count, Reason: "test", Meta: out.Action.Meta}, cfg)
	if err == nil || !strings.Contains(err.Error(), "planner busy") {
		t.Fatalf("apply while the decision is being applied: %v, want the 409 no-op", err)
	}
	fc.mu.Lock()
	fc.delay = 0
	fc.mu.Unlock()
	waitFor(t, "decision done", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		return code == 200 && json.Unmarshal(body, &plan) == nil && plan.Status == fsm.StatusDone
	})
	if err := tgt.Scale(sdk.ScalingAction{Count: out.Action.Count, Reason: "test", Meta: out.Action.Meta}, cfg); err != nil {
		t.Fatalf("apply after the decision finished: %v", err)
	}
}

// TestTLSAPI: with a certificate the API speaks HTTPS only and verifies against the CA.
func TestTLSAPI(t *testing.T) {
	pki := testPKI(t, "api")
	addr := harness.FreeAddr(t)
	s, err := New(Config{ID: "solo", RaftAddr: harness.FreeAddr(t), HTTPAddr: addr, DataDir: t.TempDir(), Bootstrap: true,
		TLSCert: pki.cert, TLSKey: pki.key, TLSCA: pki.ca, Token: "tok", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	if s.HTTPAddr() != "https://"+addr {
		t.Fatalf("HTTPAddr %q", s.HTTPAddr())
	}
	pemBytes, _ := os.ReadFile(pki.ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := cl.Get(s.HTTPAddr() + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTPS status: %d", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + addr + "/v1/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered 200 on the TLS listener")
		}
	}
}
