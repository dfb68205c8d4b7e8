package tridentsched

import (
	"context"
	"testing"

	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/strategy/milp"
)

// A short video run exercises all three layers: observation samples, BO probes and MILP
// rounds. With the greedy MILP solver (HiGHS stops on wall-clock limits) it is
// deterministic.
func TestTridentClosesTheLoop(t *testing.T) {
	p := sim.VideoPipeline(0.01)
	run := func() (*sim.Result, *Trident) {
		tr := New(Options{Seed: 3, Solver: milp.Greedy{}})
		r, err := sim.Run(context.Background(), p, sim.PaperCluster(8), tr, sim.RunConfig{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return r, tr
	}
	r1, tr := run()
	r2, _ := run()
	if !r1.Done {
		t.Fatalf("dataset not finished after %.0f s", r1.SimSeconds)
	}
	if r1.SimSeconds != r2.SimSeconds || r1.Completed != r2.Completed {
		t.Fatalf("same seed, different runs: %v vs %v s", r1.SimSeconds, r2.SimSeconds)
	}
	if tr.Stats.Rounds == 0 || tr.Stats.Invocations < tr.Stats.Rounds {
		t.Fatalf("layer statistics not recorded: %+v", tr.Stats)
	}
	// The MILP must move away from the even initial split: the accelerator operators end
	// with different instance counts.
	var counts []int
	for i, op := range p.Ops {
		if op.Need.Acc > 0 {
			n := 0
			for _, k := range r1.Ops[i].FinalPerNode {
				n += k
			}
			counts = append(counts, n)
		}
	}
	if counts[0] == counts[1] && counts[1] == counts[2] {
		t.Fatalf("accelerator operators still evenly split: %v", counts)
	}
}

func TestSpaceConversionRoundTrips(t *testing.T) {
	s := sim.LLMSpace(64, 4096)
	cs, err := toSpace(s)
	if err != nil {
		t.Fatal(err)
	}
	def := fromConfig(s, cs.Default())
	if !def.Equal(s.Default()) {
		t.Fatalf("default %v, want %v", def, s.Default())
	}
}
