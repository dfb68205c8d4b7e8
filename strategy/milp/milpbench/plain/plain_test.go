package plain_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/hetgen"
	"github.com/trident-sched/trident/strategy/milp/milpbench/plain"
)

// The plain formulation and milp's model describe the same problem: solved to a 1e-9 gap,
// their optimal throughputs agree within 1e-6 and their objectives within 1e-5 on small
// heterogeneous instances (device classes, zero and slow egress, running rounds
// mid-transition, batch caps, min/max instances, shrunk nodes). The looser objective
// tolerance is the tie-breakers': their weights are ~1e-7 per second or per unit of egress,
// at HiGHS's cost tolerance and below its absolute gap (1e-6), so neither solver resolves
// them exactly.
func TestSameOptimumAsMilp(t *testing.T) {
	checked := 0
	for seed := uint64(1); seed <= 40 && checked < 12; seed++ {
		in, err := hetgen.Generate(hetgen.Spec{Nodes: 3, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		p := in.Problem
		if len(p.Operators) > 8 {
			continue // keep the exact solves short
		}
		ctx := context.Background()
		pr, err := plain.Solve(ctx, p, plain.Options{RelGap: 1e-9, TimeLimit: 60 * time.Second})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		ms, err := milp.HiGHS{}.Solve(ctx, p, milp.Options{RelGap: 1e-9, TimeLimit: 60 * time.Second})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if pr.Status != "Optimal" || ms.Status != milp.StatusOptimal {
			t.Logf("seed %d: not both proven (plain %s, milp %s); skipped", seed, pr.Status, ms.Status)
			continue
		}
		checked++
		dT := math.Abs(pr.Throughput - ms.Throughput)
		if d := math.Abs(pr.Objective - ms.Objective); d > 1e-5*math.Max(1, math.Abs(ms.Objective)) || dT > 1e-6*math.Max(1, ms.Throughput) {
			t.Errorf("seed %d (%s): plain optimum %.9g, milp %.9g (T %.9g vs %.9g, E %.6g vs %.6g, C %.6g vs %.6g)", seed, in.Describe(),
				pr.Objective, ms.Objective, pr.Throughput, ms.Throughput, pr.PeakEgress, ms.PeakEgress, pr.MigrationCost, ms.MigrationCost)
		} else {
			t.Logf("seed %d (%s): %.9g = %.9g", seed, in.Describe(), pr.Objective, ms.Objective)
		}
	}
	if checked < 8 {
		t.Fatalf("only %d instances compared", checked)
	}
}
