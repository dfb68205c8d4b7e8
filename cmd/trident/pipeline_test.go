package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/nomadact"
)

// soloPlanner starts one in-process planner server with the Nomad actuator (pointed at an
// address nothing listens on: registration from a job file needs no Nomad) and a
// committed one-node inventory; it returns the API address.
func soloPlanner(t *testing.T, token string) string {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = "http://" + harness.FreeAddr(t)
	nc, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	httpAddr := harness.FreeAddr(t)
	s, err := planner.New(planner.Config{ID: "solo", RaftAddr: harness.FreeAddr(t), HTTPAddr: httpAddr, DataDir: t.TempDir(),
		Bootstrap: true, Token: token, Logger: log,
		Loop: &planner.LoopConfig{Interval: time.Hour, Actuator: nomadact.New(nc, nomadact.Options{Logger: log})}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	pc, err := client.New(client.Config{Address: httpAddr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	// The client retries 503 until the single server has elected itself.
	if _, err := pc.SetInventory(ctx, []fsm.Node{{Name: "n1", CPU: 8, MemoryMB: 16384}}); err != nil {
		t.Fatal(err)
	}
	return "http://" + httpAddr
}

func ptrTo[T any](v T) *T { return &v }

// TestPipelineCommands drives register / list / status / delete against a real planner,
// with the address and token from the environment as the HashiCorp CLIs take them.
func TestPipelineCommands(t *testing.T) {
	addr := soloPlanner(t, "tok")
	t.Setenv(client.EnvAddr, addr)
	t.Setenv(client.EnvToken, "tok")
	group := func(name, order string) *api.TaskGroup {
		return &api.TaskGroup{Name: ptrTo(name), Count: ptrTo(1),
			Meta: map[string]string{"trident_order": order, "trident_cpu": "0.5", "trident_memory_mb": "256", "trident_config": "mode=a"},
			Tasks: []*api.Task{{Name: "run", Driver: "raw_exec", Config: map[string]any{"command": "/bin/sleep", "args": []string{"60"}},
				Resources: &api.Resources{CPU: ptrTo(100), MemoryMB: ptrTo(256)}}}}
	}
	job := &api.Job{ID: ptrTo("pdf"), Name: ptrTo("pdf"), Type: ptrTo("service"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{group("parse", "0"), group("ocr", "1")}}
	raw, _ := json.Marshal(job)
	file := filepath.Join(t.TempDir(), "pdf.json")
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := runPipeline(context.Background(), args, &out, &errOut)
		return out.String(), err
	}

	out, err := run("register", "-file", file, "pdf")
	if err != nil || !strings.Contains(out, `Pipeline "pdf" registered`) || !strings.Contains(out, "parse") || !strings.Contains(out, "ocr") {
		t.Fatalf("register: %v\n%s", err, out)
	}
	if _, err := run("register", "-file", file, "other"); err == nil || !strings.Contains(err.Error(), "HTTP 422") {
		// The planner parses the job under the ID it is registered as; a file of
		// another job is refused, by name.
		t.Fatalf("register under another ID: %v", err)
	}
	out, err = run("list")
	if err != nil || !strings.Contains(out, "pdf") || !strings.Contains(out, "no decision yet") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, err = run("list", "-json")
	var rows []struct {
		Job       string            `json:"job"`
		Operators []client.Operator `json:"operators"`
	}
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].Job != "pdf" || len(rows[0].Operators) != 2 {
		t.Fatalf("list -json: %v\n%s", err, out)
	}
	out, err = run("status", "pdf")
	if err != nil || !strings.Contains(out, "Decision       = none yet") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if _, err := run("status", "nope"); !client.IsNotFound(err) {
		t.Fatalf("status of an unknown job: %v, want the planner's 404", err)
	}
	out, err = run("delete", "pdf")
	if err != nil || !strings.Contains(out, `Pipeline "pdf" deleted`) {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if out, err = run("list"); err != nil || !strings.Contains(out, "No pipelines registered") {
		t.Fatalf("list after delete: %v\n%s", err, out)
	}
	t.Setenv(client.EnvToken, "wrong")
	if _, err := run("list"); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("wrong token: %v", err)
	}
}

// TestPipelineMisuse: subcommands and their arguments are checked before any request.
func TestPipelineMisuse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"frobnicate"}, `unknown subcommand "frobnicate"`},
		{[]string{"status"}, "want exactly one job ID"},
		{[]string{"delete", "a", "b"}, "want exactly one job ID"},
		{[]string{"list", "x"}, "takes flags only"},
		{[]string{"list", "-address", "ftp://x"}, "is not an http(s) URL"},
		{[]string{"register", "-file", "/nonexistent.json", "pdf"}, "read -file"},
	} {
		err := runPipeline(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pipeline %q: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestSecret: tokens come from the flag, else a file, else the environment, so that they
// need not appear in the process list; a flag and a file together, or an empty file, are
// refused by name.
func TestSecret(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tok")
	if err := os.WriteFile(file, []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TRIDENT_TOKEN", "from-env")
	for _, tc := range []struct {
		flag, file, want, err string
	}{
		{flag: "from-flag", want: "from-flag"},
		{file: file, want: "from-file"},
		{want: "from-env"},
		{flag: "x", file: file, err: "-token and -token-file are exclusive"},
		{file: empty, err: "is empty"},
		{file: filepath.Join(dir, "missing"), err: "-token-file: open"},
	} {
		got, err := secret("token", tc.flag, tc.file, "TRIDENT_TOKEN")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v", tc, got, err)
		}
	}
}

// TestCanaryTable: `trident pipeline status` lists the newest decision's canaries with
// their verdict, who gave it and the capacities behind it.
// The operators table shows each operator's candidate and tuning trial, "-" for none, and
// how many more trial slots run.
func TestPlanTable(t *testing.T) {
	var b strings.Builder
	c := &pipelineCmd{out: &b}
	err := c.planTable([]client.Operator{{Name: "parse"}, {Name: "ocr"}, {Name: "embed"}}, map[string]client.PlanGroup{
		"parse": {Count: 2, Config: "threads=2", Nodes: map[string]fsm.Placement{"cpu1": {Current: 2}}},
		"embed": {Count: 4, Config: "batch=8", TrialConfig: "batch=16", Trials: []fsm.Trial{{Config: "batch=16"}, {Config: "batch=32", Slot: 1}}, Nodes: map[string]fsm.Placement{"gpu1": {Current: 4}}},
		"ocr":   {Count: 3, Config: "max_num_seqs=8", TrialConfig: "max_num_seqs=16", CandidateConfig: "max_num_seqs=12", Nodes: map[string]fsm.Placement{"gpu1": {Current: 2, Candidate: 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^Name\s+Count\s+Config\s+Candidate\s+Trial\s+Placement$`,
		`(?m)^parse\s+2\s+threads=2\s+-\s+-\s+cpu1=2$`,
		`(?m)^ocr\s+3\s+max_num_seqs=8\s+max_num_seqs=12\s+max_num_seqs=16\s+gpu1=2\+1$`,
		`(?m)^embed\s+4\s+batch=8\s+-\s+batch=16 \(\+1 slots\)\s+gpu1=4$`,
	} {
		if !regexp.MustCompile(re).MatchString(b.String()) {
			t.Errorf("operators table lacks %s:\n%s", re, b.String())
		}
	}
}

// TestTrialTable lists every running trial by operator and slot, a failed one with the
// planner's reason, and prints nothing without trials.
func TestTrialTable(t *testing.T) {
	var b strings.Builder
	c := &pipelineCmd{out: &b}
	ops := []client.Operator{{Name: "parse"}, {Name: "embed"}}
	err := c.trialTable(ops, map[string]client.PlanGroup{
		"embed": {Trials: []fsm.Trial{{Config: "batch=16", Epoch: 7}, {Config: "batch=64", Slot: 1, Epoch: 9, Failed: "task run exited 2 times"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^Operator\s+Slot\s+Config\s+Epoch\s+Status$`,
		`(?m)^embed\s+0\s+batch=16\s+7\s+running$`,
		`(?m)^embed\s+1\s+batch=64\s+9\s+failed: task run exited 2 times$`,
	} {
		if !regexp.MustCompile(re).MatchString(b.String()) {
			t.Errorf("trials table lacks %s:\n%s", re, b.String())
		}
	}
	b.Reset()
	if err := c.trialTable(ops, map[string]client.PlanGroup{"parse": {}}); err != nil || b.Len() != 0 {
		t.Errorf("no trials printed %q (%v)", b.String(), err)
	}
}

// TestEgressCell names the busiest nodes first, in MB/s, and counts the rest.
func TestEgressCell(t *testing.T) {
	got := egressCell(map[string]float64{"a": 1e6, "b": 250e6, "c": 2e6, "d": 3e6, "e": 4e6, "f": 5e6})
	if want := "b 250 MB/s, f 5 MB/s, e 4 MB/s, d 3 MB/s, and 2 more nodes"; got != want {
		t.Errorf("egress %q, want %q", got, want)
	}
}

// TestShareCell: throughput, accelerators per class (a class of unknown model as GPU) and
// the link share only when the links bind.
func TestShareCell(t *testing.T) {
	got := shareCell(client.Share{Throughput: 45.953, Link: 0.0785,
		Devices: []fsm.Device{{Model: "A10G", Count: 13}, {Count: 2}}})
	if want := "45.95 records/s, A10G ×13 + GPU ×2, 7.8 % of every link until planned"; got != want {
		t.Errorf("share %q, want %q", got, want)
	}
	if got, want := shareCell(client.Share{Throughput: 3}), "3.00 records/s"; got != want {
		t.Errorf("share %q, want %q", got, want)
	}
}

func TestCanaryTable(t *testing.T) {
	var b strings.Builder
	c := &pipelineCmd{out: &b}
	if err := c.canaryTable(map[string]client.Canary{
		"ocr-text":  {Config: "max_num_seqs=64", Node: "gpu-1", Deployment: "8ef7b76a-1234", Verdict: "promoted", By: "planner", CurrentCapacity: 3.1, CandidateCapacity: 4.2, Detail: "gain"},
		"ocr-table": {Config: "max_num_seqs=32", Deployment: "77", CurrentCapacity: 2},
	}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, re := range []string{
		`(?m)^Operator\s+Config\s+Node\s+Deployment\s+Verdict\s+By\s+Capacity`,
		`(?m)^ocr-table\s+max_num_seqs=32\s+-\s+77\s+measuring\s+-\s+2 -> \?\s+-$`,
		`(?m)^ocr-text\s+max_num_seqs=64\s+gpu-1\s+8ef7b76a\s+promoted\s+planner\s+3.1 -> 4.2\s+gain$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("canary table lacks %s:\n%s", re, out)
		}
	}
	b.Reset()
	if err := c.canaryTable(nil); err != nil || b.Len() != 0 {
		t.Errorf("no canaries printed %q (%v)", b.String(), err)
	}
}
