package obsbench

import (
	"testing"

	"github.com/trident-sched/trident/apm/gp"
	"github.com/trident-sched/trident/apm/observe"
	"github.com/trident-sched/trident/apm/trace"
)

func TestZZDiag(t *testing.T) {
	tr, _ := trace.Generate(trace.Config{Kind: trace.Video, Seed: 4, Samples: 300})
	e, _ := observe.NewGPEstimator(2, observe.FilterTwoStage, observe.Config{Fit: gp.FitOptions{Seed: 4}})
	for i, p := range tr.Points {
		est, _ := e.Estimate(p.Sample.Features)
		ok, r := e.Observe(p.Sample)
		if i < 300 && (r == "" || r == observe.ReasonResidual) {
			t.Logf("%3d %-12v f=%4.0f,%4.1f truth %6.1f obs %6.1f est %6.1f±%5.1f %s ok=%v %s", i, p.Regime, p.Sample.Features[0], p.Sample.Features[1], p.Capacity, p.Sample.Rate(), est.Capacity, est.StdDev, est.Source, ok, r)
		}
	}
}
