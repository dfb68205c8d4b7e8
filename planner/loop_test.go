package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
)

// fakeCluster is a shared in-memory "Nomad" for the fake actuators of all servers: Step
// needs `delay` calls per decision before it reports done, and records every decision it
// saw finish.
type fakeCluster struct {
	mu          sync.Mutex
	down        bool
	nodes       []fsm.Node
	steps       map[uint64]int
	delay       int
	applied     []uint64
	invalidated []string
	// events records each decision's first Step ("step:<index>") and its completion
	// ("done:<index>"), in order.
	events []string
	// resubmitted imitates a user running the job file again (cleared when a decision is
	// applied, as the rendered version replaces it); live is what Pipeline reads from the
	// cluster then, liveErr its parse error.
	resubmitted bool
	live        *fsm.Pipeline
	liveErr     error
}

func (f *fakeCluster) Resubmitted(ctx context.Context, job string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resubmitted, nil
}

func (f *fakeCluster) Pipeline(ctx context.Context, job string, raw json.RawMessage) (*fsm.Pipeline, error) {
	if len(raw) == 0 {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.liveErr != nil {
			return nil, f.liveErr
		}
		cp := *f.live
		cp.Job = job
		return &cp, nil
	}
	var p fsm.Pipeline
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	p.Job = job
	return &p, fsm.ValidatePipeline(&p)
}

func (f *fakeCluster) CheckConfig(op fsm.Operator, config string) error {
	if strings.Contains(config, "invalid") {
		return errors.New("config invalid")
	}
	return nil
}

func (f *fakeCluster) Inventory(ctx context.Context) ([]fsm.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errors.New("dial tcp 127.0.0.1:1: connection refused")
	}
	return append([]fsm.Node(nil), f.nodes...), nil
}

func (f *fakeCluster) Step(ctx context.Context, p *fsm.Pipeline, d fsm.Decision) (StepResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return StepResult{}, errors.New("nomad unreachable")
	}
	f.steps[d.Index]++
	if f.steps[d.Index] == 1 {
		f.events = append(f.events, "step:"+itoa(d.Index))
	}
	if f.steps[d.Index] < f.delay {
		return StepResult{Status: fsm.StatusApplying}, nil
	}
	if f.steps[d.Index] == f.delay {
		f.events = append(f.events, "done:"+itoa(d.Index))
		f.applied = append(f.applied, d.Index)
		f.resubmitted = false
	}
	return StepResult{Status: fsm.StatusDone}, nil
}

func (f *fakeCluster) Invalidate(ctx context.Context, job, op string, epoch uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.invalidated = append(f.invalidated, job+"/"+op+"@"+itoa(epoch))
	return nil
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// gate is a scheduler that blocks while closed, to make a solve outlast several rounds.
type gate struct {
	mu    sync.Mutex
	open  bool
	calls int
}

func (g *gate) Plan(ctx context.Context, in sched.PlanInput) (sched.Plan, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	for {
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		if open {
			return sched.Proportional{}.Plan(ctx, in)
		}
		select {
		case <-ctx.Done():
			return sched.Plan{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func testPipeline() fsm.Pipeline {
	return fsm.Pipeline{Operators: []fsm.Operator{
		{Name: "parse", Order: 0, CPU: 1, MemoryMB: 1024, Amplification: 1, Config: "threads=1"},
		{Name: "embed", Order: 1, CPU: 1, MemoryMB: 1024, GPUs: 1, GPUMemoryMB: 8000, Amplification: 1, Config: "batch=8"},
	}}
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitProgress waits for cond like waitFor, but bounds the wait by progress: it fails when
// the state cond reports has not changed for stall, or after limit in all. For waits on
// work that moves in steps (a rollout's batches) whose total time grows with the load.
func waitProgress(t testing.TB, what string, stall, limit time.Duration, cond func() (bool, string)) {
	t.Helper()
	start := time.Now()
	changed, last := start, ""
	for {
		done, state := cond()
		if done {
			return
		}
		now := time.Now()
		if state != last {
			changed, last = now, state
		}
		switch {
		case now.Sub(changed) > stall:
			t.Fatalf("waiting for %s: no progress for %v (state %s)", what, stall, last)
		case now.Sub(start) > limit:
			t.Fatalf("timed out after %v waiting for %s (state %s)", limit, what, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLoopCommitsAppliesAndTransitions runs Algorithm 2 on a 3-node cluster with a fake
// actuator: the first decision is committed and applied once; a slow solve keeps the
// committed plan; a candidate config becomes a transition whose completion bumps the
// observation epoch and calls the invalidator exactly once; bad input is refused with the
// state unchanged; an unreachable cluster changes nothing.
func TestLoopCommitsAppliesAndTransitions(t *testing.T) {
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 3, nodes: []fsm.Node{
		{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000},
	}}
	g := &gate{open: true}
	c := newTestCluster(t, 3, func(int) *LoopConfig {
		return &LoopConfig{Interval: 100 * time.Millisecond, Scheduler: g, Actuator: fc, Invalidator: fc, SolveTimeout: 10 * time.Second}
	})
	li, _ := c.leader(10 * time.Second)
	f := c.peers[(li+1)%3].HTTPAddr
	plan := registerApplied(t, c, f, testPipeline())
	// proportional on 2 GPUs (embed cap 1/s default) and 8 cores: embed 2, parse 2.
	if plan.Groups["embed"].Count != 2 || plan.Groups["parse"].Count != 2 || plan.Groups["embed"].Nodes["gpu1"].Current != 2 {
		t.Fatalf("first plan: %+v", plan)
	}
	first := plan.DecisionIndex

	// A solve that does not finish leaves the committed plan in force.
	g.mu.Lock()
	g.open = false
	calls := g.calls
	g.mu.Unlock()
	if code, body := c.do(http.MethodPost, f+"/v1/observations", []client.ObservationRequest{{Job: "pdf", Operator: "parse", Capacity: 0.25}}); code != 200 {
		t.Fatalf("observe: HTTP %d %s", code, body)
	}
	waitFor(t, "a blocked solve", 5*time.Second, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.calls > calls })
	time.Sleep(500 * time.Millisecond) // five rounds
	_, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
	_ = json.Unmarshal(body, &plan)
	if plan.DecisionIndex != first {
		t.Fatalf("decision changed while the solve was blocked: %d -> %d", first, plan.DecisionIndex)
	}
	g.mu.Lock()
	g.open = true
	g.mu.Unlock()
	// parse is now 4x slower: the next plan gives it more instances (8 cores: 6 parse fit).
	waitFor(t, "re-plan after the slow solve", 10*time.Second, func() bool {
		_, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		return json.Unmarshal(body, &plan) == nil && plan.DecisionIndex > first && plan.Status == fsm.StatusDone
	})
	if plan.Groups["parse"].Count <= 2 {
		t.Fatalf("plan after slower parse: %+v", plan.Groups["parse"])
	}

	// Bad input: NaN is not JSON, negative and unknown operators are refused; state unchanged.
	before := stateOf(c.servers[li])
	req, _ := http.NewRequest(http.MethodPost, f+"/v1/observations", strings.NewReader(`{"job":"pdf","operator":"parse","capacity":NaN}`))
	req.Header.Set(client.HeaderToken, c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("NaN observation: HTTP %d, want 400", resp.StatusCode)
	}
	for _, bad := range []any{
		[]client.ObservationRequest{{Job: "pdf", Operator: "parse", Capacity: 1}, {Job: "pdf", Operator: "parse", Capacity: -3}},
		client.ObservationRequest{Job: "pdf", Operator: "nope", Capacity: 1},
	} {
		if code, body := c.do(http.MethodPost, f+"/v1/observations", bad); code != http.StatusUnprocessableEntity {
			t.Fatalf("bad observation %v: HTTP %d %s", bad, code, body)
		}
	}
	if code, body := c.do(http.MethodPut, f+"/v1/candidates/pdf/embed", client.CandidateRequest{Config: "invalid", Capacity: 2}); code != http.StatusUnprocessableEntity {
		t.Fatalf("invalid candidate: HTTP %d %s", code, body)
	}
	huge := testPipeline()
	huge.Operators[1].GPUs = 8
	raw, _ := json.Marshal(huge)
	code, body := c.do(http.MethodPut, f+"/v1/pipelines/big", map[string]json.RawMessage{"job": raw})
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "trident_gpus=8") {
		t.Fatalf("impossible pipeline: HTTP %d %s", code, body)
	}
	// Each operator fits a node, but three embed instances need three of the two GPUs.
	crowded := testPipeline()
	crowded.Operators[1].MinInstances = 3
	raw, _ = json.Marshal(crowded)
	code, body = c.do(http.MethodPut, f+"/v1/pipelines/crowded", map[string]json.RawMessage{"job": raw})
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "need 3 GPUs with at least 8000 MB (embed 3 × 1) but the inventory has 2") {
		t.Fatalf("pipeline whose minimums exceed the inventory: HTTP %d %s", code, body)
	}
	if after := stateOf(c.servers[li]); after != before {
		t.Fatalf("bad input changed the state")
	}

	// Nomad unreachable: rounds fail, nothing is committed.
	fc.mu.Lock()
	fc.down = true
	fc.mu.Unlock()
	before = stateOf(c.servers[li])
	time.Sleep(500 * time.Millisecond)
	if after := stateOf(c.servers[li]); after != before {
		t.Fatalf("state changed while the cluster was unreachable")
	}
	fc.mu.Lock()
	fc.down = false
	fc.mu.Unlock()

	// A faster candidate config for embed becomes a transition; completion bumps the
	// epoch once and calls the invalidator once.
	if code, body := c.do(http.MethodPut, f+"/v1/candidates/pdf/embed", client.CandidateRequest{Config: "batch=32", Capacity: 3}); code != 200 {
		t.Fatalf("candidate: HTTP %d %s", code, body)
	}
	waitFor(t, "transition applied", 10*time.Second, func() bool {
		_, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		return json.Unmarshal(body, &plan) == nil && plan.Groups["embed"].ObservationEpoch == 1 && plan.Status == fsm.StatusDone
	})
	waitFor(t, "invalidation", 5*time.Second, func() bool { fc.mu.Lock(); defer fc.mu.Unlock(); return len(fc.invalidated) == 1 })
	fc.mu.Lock()
	inv := append([]string(nil), fc.invalidated...)
	applied := append([]uint64(nil), fc.applied...)
	fc.mu.Unlock()
	if inv[0] != "pdf/embed@1" {
		t.Fatalf("invalidations %v", inv)
	}
	// Every committed decision was applied exactly once, in order.
	var decs []fsm.Decision
	_, body = c.do(http.MethodGet, f+"/v1/decisions?job=pdf", nil)
	_ = json.Unmarshal(body, &decs)
	seen := map[uint64]int{}
	for _, a := range applied {
		seen[a]++
	}
	for _, d := range decs {
		if seen[d.Index] != 1 {
			t.Fatalf("decision %d applied %d times (applied %v, decisions %d)", d.Index, seen[d.Index], applied, len(decs))
		}
	}
	if len(applied) != len(decs) {
		t.Fatalf("applied %v but %d decisions", applied, len(decs))
	}
}

// TestRollingTransitionInBatches: with MaxBatch 1, a candidate reaches the two embed
// instances in two decisions (one transition each), is promoted after the second, and
// the observation epoch advances once (one invalidation).
func TestRollingTransitionInBatches(t *testing.T) {
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 2, nodes: []fsm.Node{
		{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000},
	}}
	c := newTestCluster(t, 3, func(int) *LoopConfig {
		return &LoopConfig{Interval: 100 * time.Millisecond, Actuator: fc, Invalidator: fc, MaxBatch: 1}
	})
	li, _ := c.leader(10 * time.Second)
	ld := c.peers[li].HTTPAddr
	plan := registerApplied(t, c, ld, testPipeline())
	if code, body := c.do(http.MethodPut, ld+"/v1/candidates/pdf/embed", client.CandidateRequest{Config: "batch=32", Capacity: 3}); code != 200 {
		t.Fatalf("candidate: HTTP %d %s", code, body)
	}
	waitFor(t, "promotion", 15*time.Second, func() bool {
		_, body := c.do(http.MethodGet, ld+"/v1/plan/pdf", nil)
		return json.Unmarshal(body, &plan) == nil && plan.Groups["embed"].Config == "batch=32" && plan.Status == fsm.StatusDone
	})
	var decs []fsm.Decision
	_, body := c.do(http.MethodGet, ld+"/v1/decisions?job=pdf", nil)
	_ = json.Unmarshal(body, &decs)
	var batches []int
	for _, d := range decs {
		if n := d.Operators["embed"].Transitions; n > 0 {
			batches = append(batches, n)
		}
	}
	if fmt.Sprint(batches) != "[1 1]" {
		t.Fatalf("transition batches %v, want [1 1]", batches)
	}
	fc.mu.Lock()
	inv := append([]string(nil), fc.invalidated...)
	fc.mu.Unlock()
	if fmt.Sprint(inv) != "[pdf/embed@1]" || plan.Groups["embed"].ObservationEpoch != 1 || plan.Groups["embed"].ConfigEpoch != 1 {
		t.Fatalf("invalidations %v, plan %+v", inv, plan.Groups["embed"])
	}
}

// TestSupportedSeesCatchUp: the hysteresis check compares a plan with what the current
// deployment supports under the same amplifications. With a backlog of 600 records at
// the second operator, a 60 s catch-up and the steady-state reference of 10 records/s,
// that operator must serve 10 + 600/60 = 20 records/s per 10 of input: the deployment
// that sustains 10 in steady state sustains 5 with catch-up.
func TestSupportedSeesCatchUp(t *testing.T) {
	in := sched.PlanInput{Job: "p", Operators: []sched.OperatorInput{
		{Operator: fsm.Operator{Name: "a", CPU: 1, MemoryMB: 1, Amplification: 1}, Capacity: 10},
		{Operator: fsm.Operator{Name: "b", CPU: 1, MemoryMB: 1, Amplification: 1}, Capacity: 5, Backlog: 600},
	}}
	dep := map[string]map[string]fsm.Placement{"a": {"n": {Current: 1}}, "b": {"n": {Current: 2}}}
	if got := supported(in, dep); got != 10 {
		t.Fatalf("steady state: supported %v, want 10", got)
	}
	in.CatchUpSec, in.RefThroughput = 60, 10
	if got := supported(in, dep); math.Abs(got-5) > 1e-12 {
		t.Fatalf("with catch-up: supported %v, want 5", got)
	}
}

// An operator's declared trident_capacity stands in for its estimate until it has one,
// while it runs the configuration the job file declares it for; otherwise the loop's
// DefaultCapacity does.
func TestPriorCapacity(t *testing.T) {
	o := fsm.Operator{Name: "ocr", Config: "batch=8", CapacityHint: 42}
	for running, want := range map[string]float64{"": 42, "batch=8": 42, "batch=32": 1} {
		if got := priorCapacity(o, running, 1); got != want {
			t.Errorf("declared 42 for batch=8, running %q: prior %v, want %v", running, got, want)
		}
	}
	if got := priorCapacity(fsm.Operator{Name: "ocr"}, "", 1); got != 1 {
		t.Errorf("undeclared: prior %v, want the default 1", got)
	}
}

// A deployment outside an operator's scaling bounds (the job was re-registered with a
// lower max) is not "within bounds", so the loop applies a plan that restores them even
// when it gains no throughput.
func TestWithinBounds(t *testing.T) {
	in := sched.PlanInput{Operators: []sched.OperatorInput{
		{Operator: fsm.Operator{Name: "a", MinInstances: 1, MaxInstances: 4}},
		{Operator: fsm.Operator{Name: "b"}},
	}, Current: map[string]map[string]fsm.Placement{
		"a": {"n1": {Current: 3}, "n2": {Candidate: 1}},
		"b": {"n1": {Current: 9}},
	}}
	if !withinBounds(in) {
		t.Fatal("a at 4 of max 4, b unbounded: reported out of bounds")
	}
	in.Operators[0].MaxInstances = 3
	if withinBounds(in) {
		t.Error("a at 4 above max 3: reported within bounds")
	}
	in.Operators[0].MaxInstances, in.Operators[1].MinInstances = 0, 10
	if withinBounds(in) {
		t.Error("b at 9 below min 10: reported within bounds")
	}
}

// switchable fails every round with err while it is set, else plans proportionally.
type switchable struct {
	mu  sync.Mutex
	err error
}

func (s *switchable) set(err error) { s.mu.Lock(); s.err = err; s.mu.Unlock() }

func (s *switchable) Plan(ctx context.Context, in sched.PlanInput) (sched.Plan, error) {
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return sched.Plan{}, err
	}
	return sched.Proportional{}.Plan(ctx, in)
}

// TestLoopShowsWhyNoPlanIsFound: a round that finds no plan is recorded once in the
// replicated state and shown by every server — in the "no decision yet" answer before the
// first decision, as plan_error beside the plan that stays in force after it — and the
// next round that finds a plan clears it, with or without a new decision.
func TestLoopShowsWhyNoPlanIsFound(t *testing.T) {
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, nodes: []fsm.Node{
		{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000},
	}}
	sw := &switchable{}
	sw.set(fmt.Errorf("%w: first-fit could not place the minimum instances", sched.ErrImpossible))
	c := newTestCluster(t, 3, func(int) *LoopConfig {
		return &LoopConfig{Interval: 100 * time.Millisecond, Scheduler: sw, Actuator: fc, Invalidator: fc, SolveTimeout: 10 * time.Second}
	})
	li, _ := c.leader(10 * time.Second)
	f := c.peers[(li+1)%3].HTTPAddr
	pl := testPipeline()
	pl.Operators[1].MinInstances = 2 // both GPUs of gpu1
	raw, _ := json.Marshal(pl)
	if code, body := c.do(http.MethodPut, f+"/v1/pipelines/pdf", map[string]json.RawMessage{"job": raw}); code != 200 {
		t.Fatalf("register: HTTP %d %s", code, body)
	}
	want := "has no committed decision yet: the newest scheduling round found no plan: impossible resources: first-fit could not place the minimum instances"
	waitFor(t, "the round's failure in the plan answer", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		return code == http.StatusNotFound && strings.Contains(string(body), want)
	})
	recorded := func() (fsm.PlanError, bool) {
		var pe fsm.PlanError
		var ok bool
		c.servers[li].FSM().Read(func(st *fsm.State) { pe, ok = st.PlanErrors["pdf"] })
		return pe, ok
	}
	first, ok := recorded()
	if !ok {
		t.Fatal("the failure shown is not in the leader's state")
	}
	time.Sleep(600 * time.Millisecond) // six rounds, each failing the same way
	if again, _ := recorded(); again.Index != first.Index {
		t.Fatalf("the same failure was committed again (index %d -> %d)", first.Index, again.Index)
	}

	sw.set(nil)
	var plan client.PlanResponse
	waitFor(t, "first decision", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		return code == 200 && json.Unmarshal(body, &plan) == nil && plan.Status == fsm.StatusDone
	})
	if plan.PlanError != "" {
		t.Fatalf("plan error %q after a decision was committed", plan.PlanError)
	}
	if _, ok := recorded(); ok {
		t.Fatal("a committed decision left the plan error in the state")
	}
	decided := plan.DecisionIndex

	// (A scheduler error that is not ErrImpossible goes to the fallback, which plans.)
	sw.set(fmt.Errorf("%w: node gpu1 drained", sched.ErrImpossible))
	waitFor(t, "plan_error beside the plan in force", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		return code == 200 && json.Unmarshal(body, &plan) == nil && plan.PlanError == "impossible resources: node gpu1 drained"
	})
	if plan.DecisionIndex != decided {
		t.Fatalf("decision %d, want %d to stay in force", plan.DecisionIndex, decided)
	}
	sw.set(nil) // the same plan again: no new decision, but the error clears
	waitFor(t, "plan_error cleared", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		plan = client.PlanResponse{} // plan_error is omitted when empty
		return code == 200 && json.Unmarshal(body, &plan) == nil && plan.PlanError == ""
	})
	if plan.DecisionIndex != decided {
		t.Fatalf("decision %d, want %d (nothing to move)", plan.DecisionIndex, decided)
	}

	// The real check: a GPU of gpu1 disappears from the inventory, so embed's minimum of
	// two no longer fits; the round's input is refused before any solve, and shown.
	setGPUs := func(n int) {
		fc.mu.Lock()
		fc.nodes[1].GPUs = n
		fc.mu.Unlock()
	}
	setGPUs(1)
	waitFor(t, "the shrunk inventory's failure", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		plan = client.PlanResponse{}
		return code == 200 && json.Unmarshal(body, &plan) == nil &&
			strings.Contains(plan.PlanError, "need 2 GPUs with at least 8000 MB (embed 2 × 1) but the inventory has 1")
	})
	if plan.DecisionIndex != decided {
		t.Fatalf("decision %d, want %d to stay in force", plan.DecisionIndex, decided)
	}
	setGPUs(2)
	waitFor(t, "plan_error cleared with the GPU back", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		plan = client.PlanResponse{}
		return code == 200 && json.Unmarshal(body, &plan) == nil && plan.PlanError == ""
	})
}

// TestLoopAdoptsAResubmittedJob: after a decision was applied, a user runs the job file
// again. The loop registers the running version again (the user's change becomes the
// template, once) and commits a decision even though nothing moves, so that a rendered
// version replaces the unpinned one. A new version that does not parse is left running,
// unplanned, with the reason in plan_error.
func TestLoopAdoptsAResubmittedJob(t *testing.T) {
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, nodes: []fsm.Node{
		{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000},
	}}
	c := newTestCluster(t, 3, func(int) *LoopConfig {
		return &LoopConfig{Interval: 100 * time.Millisecond, Actuator: fc, Invalidator: fc, SolveTimeout: 10 * time.Second}
	})
	li, _ := c.leader(10 * time.Second)
	f := c.peers[(li+1)%3].HTTPAddr
	plan := registerApplied(t, c, f, testPipeline())
	first := plan.DecisionIndex
	registered := func() (uint64, int) {
		var idx uint64
		var mem int
		c.servers[li].FSM().Read(func(st *fsm.State) {
			p := st.Pipelines["pdf"]
			idx = p.RegisteredIndex
			if o, ok := p.Operator("parse"); ok {
				mem = o.MemoryMB
			}
		})
		return idx, mem
	}
	before, _ := registered()

	changed := testPipeline()
	changed.Operators[0].MemoryMB = 2048
	fc.mu.Lock()
	fc.live, fc.resubmitted = &changed, true
	fc.mu.Unlock()
	waitFor(t, "a rendered version after the adoption", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		plan = client.PlanResponse{}
		return code == 200 && json.Unmarshal(body, &plan) == nil && plan.DecisionIndex > first && plan.Status == fsm.StatusDone
	})
	after, mem := registered()
	if after == before || mem != 2048 {
		t.Fatalf("registration index %d -> %d, parse memory %d MB: want the re-submitted version (2048 MB) registered", before, after, mem)
	}
	time.Sleep(500 * time.Millisecond) // five rounds: no further registration
	if again, _ := registered(); again != after {
		t.Fatalf("registered again at %d after %d: the adoption must happen once", again, after)
	}
	adopted := plan.DecisionIndex

	fc.mu.Lock()
	fc.resubmitted, fc.liveErr = true, errors.New(`group "parse": meta trident_cpu="lots": not a number`)
	fc.mu.Unlock()
	waitFor(t, "plan_error naming the version that cannot be adopted", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil)
		plan = client.PlanResponse{}
		return code == 200 && json.Unmarshal(body, &plan) == nil &&
			strings.Contains(plan.PlanError, `run again outside the planner and its new version cannot be adopted (it keeps running as submitted): group "parse": meta trident_cpu="lots"`)
	})
	time.Sleep(500 * time.Millisecond)
	if _, body := c.do(http.MethodGet, f+"/v1/plan/pdf", nil); json.Unmarshal(body, &plan) != nil || plan.DecisionIndex != adopted {
		t.Fatalf("decision %d committed over a version that could not be adopted (want %d)", plan.DecisionIndex, adopted)
	}
}

// registerApplied registers pipeline p as job "pdf" through addr and waits until its first
// decision is applied.
func registerApplied(t testing.TB, c *testCluster, addr string, p fsm.Pipeline) client.PlanResponse {
	t.Helper()
	raw, _ := json.Marshal(p)
	if code, body := c.do(http.MethodPut, addr+"/v1/pipelines/pdf", map[string]json.RawMessage{"job": raw}); code != 200 {
		t.Fatalf("register: HTTP %d %s", code, body)
	}
	var plan client.PlanResponse
	waitFor(t, "first decision applied", 10*time.Second, func() bool {
		code, body := c.do(http.MethodGet, addr+"/v1/plan/pdf", nil)
		return code == 200 && json.Unmarshal(body, &plan) == nil && plan.Status == fsm.StatusDone
	})
	return plan
}

// TestIdleLeaderIdles: once a pipeline's decision is applied and nothing changes, the
// leader runs one round per interval (and at most one solve per pipeline and round), not a
// round per solve result; a burst of apply requests makes one debounced round, not one
// each. Before the fix this measured 80-96 rounds/s at a 2 s interval.
func TestIdleLeaderIdles(t *testing.T) {
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, nodes: []fsm.Node{
		{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000},
	}}
	const interval = 200 * time.Millisecond
	c := newTestCluster(t, 1, func(int) *LoopConfig {
		return &LoopConfig{Interval: interval, Actuator: fc, SolveTimeout: 10 * time.Second}
	})
	li, _ := c.leader(10 * time.Second)
	addr := c.peers[li].HTTPAddr
	registerApplied(t, c, addr, testPipeline())
	loop := c.servers[li].loop
	time.Sleep(2 * interval) // let the decision's follow-up rounds settle
	before := loop.Stats()
	const window = 10 * interval
	time.Sleep(window)
	idle := loop.Stats()
	rounds, solves := idle.Rounds-before.Rounds, idle.Solves-before.Solves
	// 10 intervals: 10 ticks, +1 for the tick phase against the window's edges. An input
	// that found nothing worth moving is not solved again for 10 intervals: at most 2.
	if rounds > 11 || solves > 2 {
		t.Fatalf("idle: %d rounds and %d solves in %v at a %v interval; want at most 11 rounds and 2 solves (the unchanged input is settled)", rounds, solves, window, interval)
	}
	if rounds < 5 {
		t.Fatalf("idle: only %d rounds in %v at a %v interval: the ticker stopped", rounds, window, interval)
	}
	// A burst of 20 nudges (what the apply requests of 20 autoscaler policies in one
	// evaluation send) within one debounce gap (50 ms here) adds at most two rounds: one
	// per gap it spans. The nudges are sent directly, so HTTP latency on a loaded machine
	// cannot spread the burst over more gaps.
	for range 20 {
		loop.nudge()
	}
	time.Sleep(interval)
	after := loop.Stats()
	if extra := after.Rounds - idle.Rounds; extra > 4 {
		// One interval (1 tick, +1 phase) plus at most 2 debounced rounds for the burst.
		t.Fatalf("20 apply requests cost %d rounds in one interval; want at most 4", extra)
	}
}

// finder is a fakeCluster that marks jobs as pipelines (PipelineFinder).
type finder struct {
	*fakeCluster
	mu  sync.Mutex
	ids []string
	// bad jobs fail to parse; parses counts Pipeline calls per job.
	bad    map[string]bool
	parses map[string]int
}

func (f *finder) PipelineJobs(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...), nil
}

func (f *finder) Pipeline(ctx context.Context, job string, raw json.RawMessage) (*fsm.Pipeline, error) {
	f.mu.Lock()
	f.parses[job]++
	bad := f.bad[job]
	f.mu.Unlock()
	if bad {
		return nil, errors.New(`group "x": meta trident_cpu="lots": not a number`)
	}
	return f.fakeCluster.Pipeline(ctx, job, raw)
}

// countingHandler counts the log records whose message starts with prefix.
type countingHandler struct {
	mu     sync.Mutex
	prefix string
	n      int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count() int                         { h.mu.Lock(); defer h.mu.Unlock(); return h.n }

// TestAutoRegister: with AutoRegister the leader registers the jobs marked as pipelines
// (and plans them); a job that cannot be registered is tried again every solving round
// (its cause may pass) and its reason logged once, not every round; once it parses it is
// registered; without AutoRegister nothing is registered.
func TestAutoRegister(t *testing.T) {
	live := testPipeline()
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, live: &live, nodes: []fsm.Node{
		{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000},
	}}
	f := &finder{fakeCluster: fc, ids: []string{"pdf", "broken"}, bad: map[string]bool{"broken": true}, parses: map[string]int{}}
	logs := &countingHandler{prefix: "auto-register: job marked as a pipeline not registered"}
	for _, on := range []bool{false, true} {
		c := newTestClusterLogs(t, 1, func(int) *LoopConfig {
			return &LoopConfig{Interval: 50 * time.Millisecond, Actuator: f, AutoRegister: on, SolveTimeout: 10 * time.Second}
		}, false, logs)
		li, _ := c.leader(10 * time.Second)
		addr := c.peers[li].HTTPAddr
		if !on {
			time.Sleep(500 * time.Millisecond) // ten rounds
			if code, _ := c.do(http.MethodGet, addr+"/v1/pipelines/pdf", nil); code != http.StatusNotFound {
				t.Fatalf("auto-registration off: pipeline pdf answered HTTP %d", code)
			}
			continue
		}
		waitFor(t, "pdf auto-registered and planned", 10*time.Second, func() bool {
			code, body := c.do(http.MethodGet, addr+"/v1/plan/pdf", nil)
			var plan client.PlanResponse
			return code == 200 && json.Unmarshal(body, &plan) == nil && plan.Status == fsm.StatusDone
		})
		waitFor(t, "the broken job tried in several rounds", 10*time.Second, func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.parses["broken"] >= 5
		})
		if n := logs.count(); n != 1 {
			t.Fatalf("the same reason was logged %d times over many rounds; want once", n)
		}
		if code, _ := c.do(http.MethodGet, addr+"/v1/pipelines/broken", nil); code != http.StatusNotFound {
			t.Fatalf("an unparsable job was registered (HTTP %d)", code)
		}
		f.mu.Lock()
		f.bad["broken"] = false // the user fixes the job file
		f.mu.Unlock()
		waitFor(t, "the fixed job registered", 10*time.Second, func() bool {
			code, _ := c.do(http.MethodGet, addr+"/v1/pipelines/broken", nil)
			return code == http.StatusOK
		})
	}
}

// An operator's observed selectivity (ObservationRequest.Amplification) replaces its
// declared amplification in the scheduling input; without one the declaration holds.
func TestObservedAmplificationReplacesTheDeclared(t *testing.T) {
	st := fsm.NewState()
	p := testPipeline()
	p.Job = "pdf"
	p.Operators[0].Amplification = 3
	st.Pipelines["pdf"] = &p
	st.Observations["pdf"] = map[string]fsm.Observation{"parse": {Capacity: 4, Amplification: 12.5}, "embed": {Capacity: 2}}
	l := &Loop{cfg: LoopConfig{DefaultCapacity: 1}}
	in, err := l.stateInput(st, "pdf")
	if err != nil {
		t.Fatal(err)
	}
	if a := in.Operators[0].Operator.Amplification; a != 12.5 {
		t.Errorf("parse's amplification %v, want the observed 12.5", a)
	}
	if a := in.Operators[1].Operator.Amplification; a != 1 {
		t.Errorf("embed's amplification %v, want the declared 1 (no observation of it)", a)
	}
	if amps := in.Amplifications(); amps[1] != 12.5 {
		t.Errorf("embed serves %v records per pipeline record, want 12.5", amps[1])
	}
}

// A revert candidate (the tuner's OOM guard) makes the running config count as failing in
// the scheduling input (1 % of its estimate) and lifts the transition cap, so that every
// instance moves in one round; an ordinary candidate leaves both alone.
func TestRevertCandidateMovesEveryInstance(t *testing.T) {
	st := fsm.NewState()
	p := testPipeline()
	p.Job = "pdf"
	st.Pipelines["pdf"] = &p
	st.Observations["pdf"] = map[string]fsm.Observation{"parse": {Capacity: 4}, "embed": {Capacity: 2}}
	st.Candidates["pdf"] = map[string]fsm.Candidate{"embed": {Config: "batch=16", Capacity: 2.5}}
	l := &Loop{cfg: LoopConfig{DefaultCapacity: 1, MaxBatch: 1}}
	in, err := l.stateInput(st, "pdf")
	if err != nil {
		t.Fatal(err)
	}
	if in.MaxBatch != 1 || in.Operators[1].Capacity != 2 {
		t.Fatalf("ordinary candidate: MaxBatch %d, embed capacity %v; want 1 and the observed 2", in.MaxBatch, in.Operators[1].Capacity)
	}
	st.Candidates["pdf"] = map[string]fsm.Candidate{"embed": {Config: "batch=8", Capacity: 2, Revert: true}}
	if in, err = l.stateInput(st, "pdf"); err != nil {
		t.Fatal(err)
	}
	if in.MaxBatch != 0 || math.Abs(in.Operators[1].Capacity-0.02) > 1e-12 || in.Operators[0].Capacity != 4 {
		t.Errorf("revert: MaxBatch %d, capacities %v / %v; want no cap, embed at 1 %% (0.02), parse unchanged", in.MaxBatch, in.Operators[0].Capacity, in.Operators[1].Capacity)
	}
}
