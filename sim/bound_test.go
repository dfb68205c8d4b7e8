package sim

import (
	"context"
	"testing"
)

// The bound must hold: no scheduler, Static included, beats it, and tuning and
// reallocation can only raise it.
func TestFluidBoundBoundsStatic(t *testing.T) {
	for _, p := range []*Pipeline{PDFPipeline(1), VideoPipeline(1)} {
		b, err := ComputeFluidBound(p, PaperCluster(8), 100, 300, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !(b.StaticDefaultRecPerS <= b.DefaultRecPerS && b.DefaultRecPerS <= b.TunedRecPerS) {
			t.Fatalf("%s: bounds out of order: %+v", p.Name, b)
		}
		if testing.Short() {
			continue
		}
		c := PaperCluster(8)
		dem := make([]float64, len(p.Ops))
		for i := range dem {
			dem[i] = 1
		}
		need := make([]Resources, len(p.Ops))
		for i := range need {
			need[i] = p.Ops[i].Need
		}
		per := PlaceStriped(c, need, Balance(c, p, dem))
		res, err := Run(context.Background(), p, c, &fixedSched{plan: PlanFromCounts(per)}, RunConfig{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		// 2%: the bound is estimated from 100 sampled records per regime.
		if res.Throughput > b.TunedRecPerS*1.02 {
			t.Fatalf("%s: a simulated run (%.4f rec/s) beats the fluid bound %.4f", p.Name, res.Throughput, b.TunedRecPerS)
		}
		t.Logf("%s: run %.4f rec/s, bounds %+v", p.Name, res.Throughput, b)
	}
}
