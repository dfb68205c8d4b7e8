package planner

import (
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
)

// TestCommitDropsAnOverlappingPlan: the safety invariant checked on every decision before
// it is committed (issue #24). Two pipelines share one node's four GPUs and run their
// joint shares; a solve result of "a" that counts on all four GPUs (as when "b"'s decision
// was committed while a's solve ran) is not committed, "a" is marked to solve again, and
// the committed decisions still hold no more GPUs than the node has.
func TestCommitDropsAnOverlappingPlan(t *testing.T) {
	clk := &virtualClock{t: time.Unix(1_000_000, 0)}
	p := testPipeline()
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, live: &p,
		nodes: []fsm.Node{{Name: "n1", CPU: 16, MemoryMB: 32768, GPUs: 4, GPUMemoryMB: 16000}}}
	act := &finder{fakeCluster: fc, ids: []string{"a", "b"}, parses: map[string]int{}}
	srv, ctx := manualServer(t, "inv", act, clk)

	gpus := func(st *fsm.State, job string) int {
		d, ok := st.LatestDecision(job)
		if !ok {
			return 0
		}
		n := 0
		for _, pl := range d.Operators["embed"].Nodes {
			n += pl.Total()
		}
		return n
	}
	split := false
	for i := 0; i < 30 && !split; i++ {
		if err := srv.Round(ctx, true); err != nil {
			t.Fatal(err)
		}
		clk.advance(10 * time.Second)
		srv.FSM().Read(func(st *fsm.State) {
			split = gpus(st, "a") > 0 && gpus(st, "b") > 0 && st.Progress["a"].Status == fsm.StatusDone && st.Progress["b"].Status == fsm.StatusDone
		})
	}
	if !split {
		t.Fatal("the two pipelines did not both get GPUs within 30 rounds")
	}
	var in sched.PlanInput
	var before fsm.Decision
	var held int
	var err error
	srv.FSM().Read(func(st *fsm.State) {
		in, err = srv.loop.stateInput(st, "a")
		before, _ = st.LatestDecision("a")
		held = gpus(st, "b")
	})
	if err != nil {
		t.Fatal(err)
	}
	greedy := sched.Plan{Source: "test", Reason: "all four GPUs", Throughput: 4, Targets: map[string]map[string]fsm.Placement{
		"parse": {"n1": {Current: 1}}, "embed": {"n1": {Current: 4}}}}
	if srv.loop.commit(ctx, solveResult{job: "a", in: in, plan: greedy}) {
		t.Fatalf("a plan on all 4 GPUs was committed while b holds %d", held)
	}
	if !srv.loop.stale["a"] {
		t.Error("the dropped plan's pipeline is not marked to solve again")
	}
	srv.FSM().Read(func(st *fsm.State) {
		if after, _ := st.LatestDecision("a"); after.Index != before.Index {
			t.Errorf("a's latest decision moved from %d to %d", before.Index, after.Index)
		}
		if a, b := gpus(st, "a"), gpus(st, "b"); a+b > 4 {
			t.Errorf("the decisions hold %d + %d GPUs of 4", a, b)
		}
	})
}
