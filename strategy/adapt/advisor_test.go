package adapt

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/bo"
	"github.com/trident-sched/trident/strategy/cluster"
	"github.com/trident-sched/trident/strategy/opmodel"
)

// textOCRAdvisor is an Advisor for the simulated TextOCR operator e: two log-scaled
// features, a 3 GB margin, delta 0.9, 12 evaluations per cluster.
func textOCRAdvisor(t *testing.T, e opmodel.Engine) *Advisor {
	t.Helper()
	a, err := New(opmodel.Space(), 2, Options{
		Cluster: cluster.Options{Log: []bool{true, true}},
		BO:      bo.Options{MemLimit: e.DeviceMemGB, Margin: 3, Delta: 0.9},
		Budget:  12,
	}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAdvisorTunesEachRegimeOnce runs the loop on the simulated TextOCR operator: academic
// papers, then slides, then papers again. Each new regime is tuned within the budget; the
// return of papers reuses their tuned configuration without new evaluations.
func TestAdvisorTunesEachRegimeOnce(t *testing.T) {
	e := opmodel.TextOCR()
	a := textOCRAdvisor(t, e)
	env := rand.New(rand.NewPCG(2, 2))
	ctx := context.Background()
	type regime struct {
		in, out float64
	}
	papers, slides := regime{2200, 1000}, regime{900, 150}
	evals := map[int]int{}
	var finals []Advice
	for _, r := range []regime{papers, slides, papers} {
		w := opmodel.DocumentWorkload(r.in, r.out)
		// 300 requests per regime; after each batch of 10 the operator asks for advice.
		for i := range 300 {
			x := []float64{r.in * math.Exp(0.12*env.NormFloat64()), r.out * math.Exp(0.25*env.NormFloat64())}
			if _, err := a.ObserveRequest(x); err != nil {
				t.Fatal(err)
			}
			if i%10 != 9 {
				continue
			}
			adv, ok, err := a.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				continue
			}
			if adv.Evaluate {
				m, err := e.Evaluate(adv.Config, w, 2*time.Minute, env)
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Report(adv.Cluster, adv.Config, bo.Measurement{Throughput: m.Throughput, PeakMem: m.PeakMemGB, OOM: m.OOM}); err != nil {
					t.Fatal(err)
				}
				evals[adv.Cluster]++
			} else if i == 299 {
				finals = append(finals, adv)
			}
		}
	}
	// Two clusters were tuned with exactly the budget each; the third regime needed none.
	if len(evals) != 2 {
		t.Fatalf("evaluations per cluster %v, want two clusters", evals)
	}
	for id, n := range evals {
		if n != 12 {
			t.Errorf("cluster %d: %d evaluations, want the budget 12", id, n)
		}
	}
	if len(finals) != 3 || finals[0].Cluster != finals[2].Cluster || finals[0].Config.String() != finals[2].Config.String() {
		t.Fatalf("final advice per regime %+v: want papers' tuned config reused", finals)
	}
	// Slides (short requests) support more concurrent sequences than papers.
	if finals[1].Config.Int(opmodel.ParamMaxNumSeqs) <= finals[0].Config.Int(opmodel.ParamMaxNumSeqs) {
		t.Errorf("max_num_seqs papers %d, slides %d: want more for slides", finals[0].Config.Int(opmodel.ParamMaxNumSeqs), finals[1].Config.Int(opmodel.ParamMaxNumSeqs))
	}
	for _, f := range finals {
		c, _ := a.Clusterer().Cluster(f.Cluster)
		if c.Status != cluster.Tuned {
			t.Errorf("cluster %d status %s, want tuned", f.Cluster, c.Status)
		}
	}
}

// TestRecordAndPredict checks the live-loop additions: Record refuses before a cluster
// dominates, then starts the dominant cluster's session with an unadvised measurement,
// and Predict answers for that session (an OOM configuration is predicted infeasible).
func TestRecordAndPredict(t *testing.T) {
	a, err := New(opmodel.Space(), 1, Options{
		Cluster: cluster.Options{WarmUp: 3},
		BO:      bo.Options{MemLimit: 100, Delta: 0.9},
		Budget:  3,
	}, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	def := opmodel.Space().Default()
	if _, ok, err := a.Record(def, bo.Measurement{Throughput: 10, PeakMem: 20}); ok || err != nil {
		t.Fatalf("record before any cluster dominates: ok=%v err=%v", ok, err)
	}
	if _, err := a.Predict(ctx, 0, def); err == nil {
		t.Fatal("predict without a session must fail")
	}
	for range 5 {
		if _, err := a.ObserveRequest([]float64{1000}); err != nil {
			t.Fatal(err)
		}
	}
	id, ok, err := a.Record(def, bo.Measurement{Throughput: 10, PeakMem: 20})
	if err != nil || !ok {
		t.Fatalf("record: ok=%v err=%v", ok, err)
	}
	p, err := a.Predict(ctx, id, def)
	if err != nil || !p.HaveThroughput || p.PFeasible < 0.9 {
		t.Fatalf("prediction at the recorded safe config: %+v, %v", p, err)
	}
	// The budget bounds recorded evaluations too.
	for i := range 4 {
		_, ok, err := a.Record(def, bo.Measurement{Throughput: 10, PeakMem: 20})
		if err != nil || ok != (i < 2) {
			t.Fatalf("record %d: ok=%v err=%v (budget 3)", i+2, ok, err)
		}
	}
	adv, ok, err := a.Next(ctx)
	if err != nil || !ok || adv.Evaluate || adv.PFeasible < 0.9 || adv.Predicted <= 0 {
		t.Fatalf("advice after the budget: %+v ok=%v err=%v, want the recommendation", adv, ok, err)
	}
}

// TestWarmStartFromTheLastTunedCluster: with WarmStart, a new regime's session first
// evaluates the recommendation of the regime tuned before it; without, it does not.
func TestWarmStartFromTheLastTunedCluster(t *testing.T) {
	for _, warm := range []int{0, 1} {
		e := opmodel.TextOCR()
		a, err := New(opmodel.Space(), 2, Options{
			Cluster: cluster.Options{Log: []bool{true, true}},
			BO:      bo.Options{MemLimit: e.DeviceMemGB, Margin: 3, Delta: 0.9},
			Budget:  6, WarmStart: warm,
		}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		env := rand.New(rand.NewPCG(2, 2))
		ctx := context.Background()
		var tuned, first Advice
		for k, r := range [][2]float64{{2200, 1000}, {900, 150}} {
			w := opmodel.DocumentWorkload(r[0], r[1])
			for i := range 400 {
				if _, err := a.ObserveRequest([]float64{r[0] * math.Exp(0.12*env.NormFloat64()), r[1] * math.Exp(0.25*env.NormFloat64())}); err != nil {
					t.Fatal(err)
				}
				if i%10 != 9 {
					continue
				}
				adv, ok, err := a.Next(ctx)
				if err != nil || !ok {
					continue
				}
				if !adv.Evaluate {
					if k == 0 {
						tuned = adv
					}
					continue
				}
				if k == 1 && first.Config == nil {
					first = adv
				}
				m, err := e.Evaluate(adv.Config, w, 2*time.Minute, env)
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Report(adv.Cluster, adv.Config, bo.Measurement{Throughput: m.Throughput, PeakMem: m.PeakMemGB, OOM: m.OOM}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if tuned.Config == nil || first.Config == nil {
			t.Fatalf("warm %d: the first regime was not tuned (%v) or the second not started (%v)", warm, tuned.Config, first.Config)
		}
		if same := first.Config.String() == tuned.Config.String(); same != (warm == 1) {
			t.Errorf("warm %d: the second regime's first evaluation %s, the first's recommendation %s", warm, first.Config, tuned.Config)
		}
	}
}

// TestConcludeEndsTheSessionEarly: Conclude has nothing to end before a session runs; once
// one runs, it finishes it with the evaluations made so far (the best measured config),
// the cluster counts as tuned, and Next returns that recommendation without evaluations.
func TestConcludeEndsTheSessionEarly(t *testing.T) {
	e := opmodel.TextOCR()
	a := textOCRAdvisor(t, e)
	ctx := context.Background()
	if _, ok, err := a.Conclude(ctx); ok || err != nil {
		t.Fatalf("Conclude before any workload: ok %v, err %v; want nothing to conclude", ok, err)
	}
	env := rand.New(rand.NewPCG(2, 2))
	w := opmodel.DocumentWorkload(2200, 1000)
	for range 50 {
		if _, err := a.ObserveRequest([]float64{2200 * math.Exp(0.1*env.NormFloat64()), 1000 * math.Exp(0.2*env.NormFloat64())}); err != nil {
			t.Fatal(err)
		}
	}
	best, bestCfg := 0.0, ""
	for range 3 {
		adv, ok, err := a.Next(ctx)
		if err != nil || !ok || !adv.Evaluate {
			t.Fatalf("Next: %+v ok %v err %v; want an evaluation", adv, ok, err)
		}
		m, err := e.Evaluate(adv.Config, w, 2*time.Minute, env)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Report(adv.Cluster, adv.Config, bo.Measurement{Throughput: m.Throughput, PeakMem: m.PeakMemGB, OOM: m.OOM}); err != nil {
			t.Fatal(err)
		}
		if !m.OOM && m.Throughput > best {
			best, bestCfg = m.Throughput, adv.Config.String()
		}
	}
	if bestCfg == "" {
		t.Fatal("no feasible evaluation among the first three")
	}
	adv, ok, err := a.Conclude(ctx)
	if err != nil || !ok || adv.Evaluate {
		t.Fatalf("Conclude: %+v ok %v err %v; want the session's recommendation", adv, ok, err)
	}
	// Three evaluations: the recommendation is the best measured one (the surrogate's
	// optimum among what was measured).
	if adv.Config.String() != bestCfg {
		t.Errorf("recommended %s, want the best measured %s (%.3g)", adv.Config, bestCfg, best)
	}
	next, ok, err := a.Next(ctx)
	if err != nil || !ok || next.Evaluate || next.Config.String() != adv.Config.String() {
		t.Errorf("Next after Conclude: %+v ok %v err %v; want the tuned recommendation, no evaluation", next, ok, err)
	}
}
