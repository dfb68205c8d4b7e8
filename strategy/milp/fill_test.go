package milp_test

import (
	"testing"

	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/hetgen"
)

// het/6/s18 is a small instance of the kind that lost most in bench milp -hetero
// (bandwidth-tight, 2026-11-25: het/128/s9 ended 21 % below the bound on the greedy plan):
// the greedy places the minimum parallelism, and the routing LP cannot keep the traffic of
// so few instances local. Topping every node up into a local pipeline (fill) lets the
// same routing LP more than double the throughput; prune then leaves no launch the
// routing does not use.
func TestFillRouteOnTightCluster(t *testing.T) {
	p, routed, filled := hetStarts(t, 6, 18)
	if filled == nil {
		t.Fatal("fill added nothing")
	}
	if err := milp.Validate(p, filled); err != nil {
		t.Fatalf("filled plan rejected: %v", err)
	}
	if filled.Objective < 2*routed.Objective {
		t.Errorf("filled objective %.6g, want at least twice the routed greedy's %.6g", filled.Objective, routed.Objective)
	}
	// prune: every launched instance carries routed rate (one fewer would not do)
	for i, o := range p.Operators {
		for n := range p.Nodes {
			pl := filled.PerNode[i][n]
			if pl.Total() == 0 {
				continue
			}
			cur := 0
			if p.Current != nil {
				cur = p.Current[i][n].Total()
			}
			if pl.Total() <= cur || pl.Current == 0 {
				continue
			}
			if o.Capacity*float64(pl.Current-1)+candidateRate(o, pl.Candidate) >= filled.Rate[i][n]*(1+1e-9)+1e-9 {
				t.Errorf("%s on %s: %d instances, rate %.6g: an unused launch was kept", o.Name, p.Nodes[n].Name, pl.Total(), filled.Rate[i][n])
			}
		}
	}
}

// hetStarts generates het/<nodes>/s<seed> and returns its problem, its greedy plan
// re-routed by the routing LP, and that plan topped up by fill (nil when fill adds
// nothing): the start plans the solver's later steps improve on.
func hetStarts(t *testing.T, nodes int, seed uint64) (p *milp.Problem, routed, filled *milp.Solution) {
	t.Helper()
	in, err := hetgen.Generate(hetgen.Spec{Nodes: nodes, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	routed, filled, err = milp.GreedyFilled(in.Problem)
	if err != nil {
		t.Fatal(err)
	}
	return in.Problem, routed, filled
}

// candidateRate is an upper bound on what k candidate-configuration instances of o process.
func candidateRate(o milp.Operator, k int) float64 {
	if k == 0 || o.Candidate == nil {
		return 0
	}
	return float64(k) * o.Candidate.Capacity
}

// Solve keeps what fill finds: on het/6/s18 its plan is at least the filled greedy plan.
func TestSolveUsesFill(t *testing.T) {
	p, _, filled := hetStarts(t, 6, 18)
	if filled == nil {
		t.Fatal("fill added nothing")
	}
	s := mustSolve(t, milp.HiGHS{}, p, milp.Options{})
	if s.Objective < filled.Objective*(1-1e-9) {
		t.Errorf("Solve objective %.6g below the filled greedy plan's %.6g", s.Objective, filled.Objective)
	}
}
