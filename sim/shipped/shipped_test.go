package shipped

import (
	"context"
	"testing"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/sim/baseline"
)

// The shipped planner, driven on the virtual clock, takes over the submitted PDF job and
// outruns Static's profiled allocation. Static is deterministic; the planner's HiGHS
// solves stop on wall-clock limits, so the bound is loose: the full-size run measures
// 1.34x (docs/benchmarks.md), this 0.3-size one (an hour), where the first minutes weigh
// more, 1.20x; 1.1x leaves room for a loaded machine's shorter solves. At a tenth of the
// size (30 minutes) the cold start still dominates and the two are even.
func TestShippedPlannerOutrunsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates an hour of pipeline time")
	}
	p := sim.PDFPipeline(0.3)
	c := sim.PaperCluster(8)
	s := New(Options{Initial: baseline.SubmittedJob})
	r, err := sim.Run(context.Background(), p, c, s, sim.RunConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sim.Run(context.Background(), p, c, &baseline.Static{}, sim.RunConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shipped %.3f records/s (%.0f s), static %.3f; %+v", r.Throughput, r.SimSeconds, st.Throughput, s.Stats)
	if !r.Done {
		t.Fatalf("dataset not finished in %.0f s", r.SimSeconds)
	}
	if r.Throughput < 1.1*st.Throughput {
		t.Errorf("shipped planner %.3f records/s, want at least 1.1x Static's %.3f", r.Throughput, st.Throughput)
	}
	if s.Stats.Decisions < 2 || s.Stats.Observations == 0 || s.Stats.Failed != 0 {
		t.Errorf("loop statistics %+v: want several decisions, published observations, no failure", s.Stats)
	}
}

// The actuator reports a decision done only once every operator runs its counts with
// nothing starting, hands the engine the decision's version until then (Nomad places
// blocked allocations when room frees), and fails it when instances stay unplaced past
// the progress deadline.
func TestActuatorFollowsDeploymentSemantics(t *testing.T) {
	p := &sim.Pipeline{Ops: []sim.OpSpec{{Name: "a"}, {Name: "b"}}}
	s := New(Options{ProgressDeadlineS: 100})
	s.env = &sim.Env{Pipeline: p, Cluster: sim.Cluster{Nodes: []sim.Node{{Name: "n1"}, {Name: "n2"}}}}
	s.nodeIx = map[string]int{"n1": 0, "n2": 1}
	s.applying.unplacedFrom = -1
	a := actuator{s}
	d := fsm.Decision{Index: 7, Operators: map[string]fsm.OpTarget{
		"a": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}}},
		"b": {Nodes: map[string]fsm.Placement{"n1": {Current: 1}, "n2": {Current: 1}}},
	}}
	step := func(now float64, ops ...sim.OpStats) string {
		t.Helper()
		s.now = now
		if ops != nil {
			s.last = &sim.Snapshot{Ops: ops}
		}
		res, err := a.Step(context.Background(), nil, d)
		if err != nil {
			t.Fatal(err)
		}
		return res.Status
	}
	if got := step(0); got != fsm.StatusApplying || s.pending == nil || s.pending.Ops[1].PerNode[1] != 1 {
		t.Fatalf("first step: %s, pending %+v; want applying with the decision's counts", got, s.pending)
	}
	s.pending = nil
	starting := []sim.OpStats{{PerNode: []int{2, 0}, Starting: 1}, {PerNode: []int{1, 1}}}
	if got := step(10, starting...); got != fsm.StatusApplying || s.pending == nil {
		t.Errorf("an instance still starting: %s (pending %v), want applying with the version handed again", got, s.pending != nil)
	}
	unplaced := []sim.OpStats{{PerNode: []int{2, 0}}, {PerNode: []int{1, 0}, Unplaced: 1}}
	if got := step(20, unplaced...); got != fsm.StatusApplying {
		t.Errorf("unplaced for 0 s: %s, want applying", got)
	}
	if got := step(119, unplaced...); got != fsm.StatusApplying {
		t.Errorf("unplaced for 99 s of a 100 s deadline: %s, want applying", got)
	}
	if got := step(120, unplaced...); got != fsm.StatusFailed || s.Stats.Failed != 1 {
		t.Errorf("unplaced for 100 s: %s, want failed", got)
	}
	d.Index = 8
	step(130)
	if got := step(140, []sim.OpStats{{PerNode: []int{2, 0}}, {PerNode: []int{1, 1}}}...); got != fsm.StatusDone {
		t.Errorf("every count running: %s, want done", got)
	}
}
