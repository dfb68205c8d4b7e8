package milp_test

import (
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/milp"
)

// het/8/s23 and het/10/s3 are small instances of the kind of het/64/s5, which ended 17 %
// below the bound in bench milp -hetero (2026-11-26): running rounds on bandwidth-bound
// clusters ("tight") where a better plan moves several operators' instances between nodes
// at once. The move search stalls (het/8/s23: 33.2375 -> 33.2386) or stops short
// (het/10/s3: 193.70) because no single move pays on its own; the node-neighbourhood
// search from the moved plan reaches the optimum HiGHS proves without starts (44.3176;
// 203.631), within 0.1 %.
func TestNeighbourhoodSearchOnTightClusters(t *testing.T) {
	for _, c := range []struct {
		nodes int
		seed  uint64
		gain  float64 // the least relative gain over the moved plan
	}{{8, 23, 0.25}, {10, 3, 0.04}} {
		moved, got, opt := searchFrom(t, c.nodes, c.seed)
		if got.Objective < moved.Objective*(1+c.gain) {
			t.Errorf("het/%d/s%d: objective %.6g, want at least %.0f %% above the moved plan's %.6g",
				c.nodes, c.seed, got.Objective, 100*c.gain, moved.Objective)
		}
		if got.Objective < opt*(1-1e-3) {
			t.Errorf("het/%d/s%d: objective %.6g more than 0.1 %% below the optimum %.6g", c.nodes, c.seed, got.Objective, opt)
		}
	}
}

// het/8/s10 (tight, startup) is a small instance of het/128/s10, where the plain peer
// ended 0.6 % ahead in bench milp -hetero (2026-11-28): the neighbourhood search stopped
// after 6 sub-MIPs in a row without gain, 6.7 % below the optimum on het/8/s10 (26.12),
// and later ones reach it. From the moved plan the search must end within 0.5 % of the
// optimum that HiGHS proves without starts.
func TestNeighbourhoodSearchPersists(t *testing.T) {
	moved, got, opt := searchFrom(t, 8, 10)
	if got.Objective < opt*(1-5e-3) {
		t.Errorf("objective %.6g (from the moved %.6g) more than 0.5 %% below the optimum %.6g", got.Objective, moved.Objective, opt)
	}
}

// movedStart returns het/nodes/s<seed> and the move search's plan from the better of its
// routed and filled starts (the start itself when the moves find nothing).
func movedStart(t *testing.T, nodes int, seed uint64) (*milp.Problem, *milp.Solution) {
	t.Helper()
	p, routed, filled := hetStarts(t, nodes, seed)
	start := routed
	if filled != nil && filled.Objective > start.Objective {
		start = filled
	}
	moved, err := milp.MoveFrom(p, start, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if moved == nil {
		moved = start
	}
	return p, moved
}

// searchFrom runs the move search and then the node-neighbourhood search from the better
// of the routed and filled starts of het/nodes/s<seed>, and returns the moved plan, the
// searched plan (validated) and the optimum HiGHS proves without starts.
func searchFrom(t *testing.T, nodes int, seed uint64) (moved, got *milp.Solution, opt float64) {
	t.Helper()
	// generous limits: both searches stop on their own (well under a second on an idle
	// machine)
	p, moved := movedStart(t, nodes, seed)
	got, err := milp.LNSFrom(p, moved, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil {
		t.Fatalf("het/%d/s%d: the neighbourhood search found nothing from %.6g", nodes, seed, moved.Objective)
	}
	if err := milp.Validate(p, got); err != nil {
		t.Fatalf("het/%d/s%d: plan rejected: %v", nodes, seed, err)
	}
	opt, raw, err := milp.SolveRaw(p, milp.Options{RelGap: 1e-6}, time.Minute)
	if err != nil || raw == nil {
		t.Fatalf("raw solve: %v", err)
	}
	return moved, got, opt
}

// het/12/s38 (its moved plan is held by a two-GPU operator whose every instance is busy,
// with no node that can take one more without evictions) is a small instance of the kind
// of het/64/s5, whose plan stalled 8.6 % below the bound in bench milp -hetero: one more
// instance of the four-GPU bottleneck needs a whole node cleared and its chains moved. A
// grow round clears a node for one more instance of the bottleneck, re-homes what it
// evicts, and lets HiGHS re-place the neighbourhood from there: the plan keeps the extra
// instance on the cleared node and is at least 20 % above the moved plan (22.78 -> 27.84
// measured, the optimum of the ordinary search from there).
func TestGrowRoundClearsANode(t *testing.T) {
	p, moved := movedStart(t, 12, 38)
	got, b, target, err := milp.GrowFrom(p, moved, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b < 0 || target < 0 || got == nil {
		t.Fatalf("no grow round: bottleneck %d, cleared node %d, plan %v", b, target, got != nil)
	}
	if err := milp.Validate(p, got); err != nil {
		t.Fatalf("plan rejected: %v", err)
	}
	if p.Operators[b].GPUs == 0 {
		t.Errorf("bottleneck %d (%s) has no accelerators", b, p.Operators[b].Name)
	}
	if before, after := moved.PerNode[b][target].Total(), got.PerNode[b][target].Total(); after <= before {
		t.Errorf("operator %d on the cleared node %d: %d instances, want more than the moved plan's %d", b, target, after, before)
	}
	if got.Objective < 1.2*moved.Objective {
		t.Errorf("objective %.6g, want at least 20 %% above the moved plan's %.6g", got.Objective, moved.Objective)
	}
}
