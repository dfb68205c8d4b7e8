package milp_test

import (
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/hetgen"
)

// het/8/s22 is a small instance of the kind of het/64/s1, which ended 21 % below the
// bound in bench milp -hetero (2026-11-25): a running round on a bandwidth-bound cluster
// whose throughput is capped by an operator at its MaxInstances (op01, 14 instances).
// The greedy places that operator's instances where its traffic cannot stay local, and
// fill cannot add any; only moving them helps. From the best start plan (the routed greedy
// or its fill, 7.71) the move search reaches the proven optimum (39.587) within 0.1 %.
func TestMoveOnInstanceCappedCluster(t *testing.T) {
	p, routed, filled := hetStarts(t, 8, 22)
	start := routed
	if filled != nil && filled.Objective > start.Objective {
		start = filled
	}
	capped := false
	for i, o := range p.Operators {
		P := 0
		for n := range p.Nodes {
			P += start.PerNode[i][n].Total()
		}
		capped = capped || (o.MaxInstances > 0 && P == o.MaxInstances)
	}
	if !capped {
		t.Fatal("no operator of the start plan is at its MaxInstances: the instance lost its kind")
	}
	// a generous limit: the search stops on its own (in milliseconds on an idle machine)
	moved, err := milp.MoveFrom(p, start, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if moved == nil {
		t.Fatal("the move search found nothing")
	}
	if err := milp.Validate(p, moved); err != nil {
		t.Fatalf("moved plan rejected: %v", err)
	}
	if moved.Objective < 2*start.Objective {
		t.Errorf("moved objective %.6g, want at least twice the start's %.6g", moved.Objective, start.Objective)
	}
	// the optimum proven by HiGHS on the model without starts (at most the 1e-6 gap;
	// under heavy load an unproven incumbent only weakens the check)
	opt, raw, err := milp.SolveRaw(p, milp.Options{RelGap: 1e-6}, time.Minute)
	if err != nil || raw == nil {
		t.Fatalf("raw solve: %v", err)
	}
	if moved.Objective < opt*(1-1e-3) {
		t.Errorf("moved objective %.6g more than 0.1 %% below the optimum %.6g", moved.Objective, opt)
	}
}

// het/16/s9 (ample, running): the move search stalls 0.7 % below the optimum, inside the
// 1 % gap, where HiGHS from the moved plan proves the optimum in about 0.1 s. Solve runs
// HiGHS from a move plan just inside the gap for a tighter gap (moveGap), so that a peer
// overshooting the gap is not ahead: the plan is within 0.1 % of the proven optimum.
func TestSolvePolishesMovePlan(t *testing.T) {
	in, err := hetgen.Generate(hetgen.Spec{Nodes: 16, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	p := in.Problem
	// a long limit: the polish has a share of the remaining time, ample under load
	s := mustSolve(t, milp.HiGHS{}, p, milp.Options{TimeLimit: time.Minute})
	opt, raw, err := milp.SolveRaw(p, milp.Options{RelGap: 1e-6}, time.Minute)
	if err != nil || raw == nil {
		t.Fatalf("raw solve: %v", err)
	}
	if s.Objective < opt*(1-1e-3) {
		t.Errorf("Solve objective %.6g (%s) more than 0.1 %% below the optimum %.6g", s.Objective, s.Source, opt)
	}
}
