package bo

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/trident-sched/trident/strategy/configspace"
)

func TestRadicalInverseAndPrimes(t *testing.T) {
	for _, tc := range []struct {
		i, b int
		want float64
	}{{1, 2, 0.5}, {2, 2, 0.25}, {3, 2, 0.75}, {1, 3, 1.0 / 3}, {3, 3, 1.0 / 9}, {5, 3, 2.0/3 + 1.0/9}} {
		if got := radicalInverse(tc.i, tc.b); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("radicalInverse(%d,%d) = %v, want %v", tc.i, tc.b, got, tc.want)
		}
	}
	for n, want := range []int{2, 3, 5, 7, 11, 13} {
		if got := nthPrime(n); got != want {
			t.Errorf("nthPrime(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestExpectedImprovement(t *testing.T) {
	// At m = best, EI = s·φ(0) = 0.3989423·s.
	if got := expectedImprovement(1, 2, 1); math.Abs(got-2*0.3989422804014327) > 1e-12 {
		t.Fatalf("EI = %v", got)
	}
	// No uncertainty: EI = max(m − best, 0).
	if expectedImprovement(3, 0, 1) != 2 || expectedImprovement(0, 0, 1) != 0 {
		t.Fatal("deterministic EI wrong")
	}
}

func TestObserveValidates(t *testing.T) {
	s := configspace.MustParse("a=float[0,1]; b=int[1,4]")
	o, err := New(s, Options{MemLimit: 10}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Observe(configspace.Config{"a": configspace.Num(2), "b": configspace.Num(1)}, 1, 1, false); err == nil {
		t.Fatal("out-of-range config accepted")
	}
	if err := o.Observe(configspace.Config{"a": configspace.Num(0.5), "b": configspace.Num(1)}, math.NaN(), 1, false); err == nil {
		t.Fatal("NaN throughput accepted")
	}
	if err := o.Observe(configspace.Config{"a": configspace.Num(0.5), "b": configspace.Num(2)}, 7, 3, true); err != nil {
		t.Fatal(err)
	}
	ob := o.Observations()[0]
	if !ob.OOM || ob.Throughput != 0 || ob.PeakMem != 10 || o.OOMs() != 1 {
		t.Fatalf("OOM observation recorded as %+v", ob)
	}
	if _, err := New(s, Options{}, rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Fatal("constrained BO without a memory limit accepted")
	}
}

// toy is a 2-parameter problem whose throughput a+b grows towards the corner (1,1) while
// memory 40(a+b) crosses the 60 GB limit at a+b = 1.5: the best feasible value is about
// 1.5 − margin/40.
func toy(ctx context.Context, c configspace.Config) (Measurement, error) {
	s := c.Float("a") + c.Float("b")
	mem := 40 * s
	if mem > 60 {
		return Measurement{PeakMem: 60, OOM: true}, nil
	}
	return Measurement{Throughput: s, PeakMem: mem}, nil
}

func TestConstrainedBOFindsFeasibleOptimum(t *testing.T) {
	s := configspace.MustParse("a=float[0,1]; b=float[0,1]")
	for seed := uint64(1); seed <= 3; seed++ {
		opts := Options{Method: Constrained, MemLimit: 60, Margin: 2, Delta: 0.8}
		res, err := Run(context.Background(), s, opts, rand.New(rand.NewPCG(seed, 0)), toy, 20)
		if err != nil {
			t.Fatal(err)
		}
		rec := res.Recommendation.Config
		sum := rec.Float("a") + rec.Float("b")
		// Feasible, and within 0.1 (7%) of the constrained optimum 1.45 = (60−2)/40.
		if 40*sum > 60 || sum < 1.35 {
			t.Errorf("seed %d: recommended %s (a+b = %.3f), want a feasible a+b >= 1.35", seed, rec, sum)
		}
		if res.Recommendation.PFeasible < 0.8 {
			t.Errorf("seed %d: recommendation has PF %.2f < delta", seed, res.Recommendation.PFeasible)
		}
		seen := map[string]bool{}
		for _, ob := range res.Observations {
			if seen[ob.Config.String()] {
				t.Errorf("seed %d: %s evaluated twice", seed, ob.Config)
			}
			seen[ob.Config.String()] = true
		}
	}
}

func TestBaselinesRespectConstraintsAndBudget(t *testing.T) {
	s := configspace.MustParse("a=int[1,100]; b=int[1,100]; c=bool; constraint: b >= a")
	for _, m := range []Method{Random, Grid, Unconstrained, UnconstrainedZero, Constrained} {
		obj := func(ctx context.Context, c configspace.Config) (Measurement, error) {
			return Measurement{Throughput: c.Float("a"), PeakMem: c.Float("b")}, nil
		}
		res, err := Run(context.Background(), s, Options{Method: m, MemLimit: 1000}, rand.New(rand.NewPCG(5, 5)), obj, 12)
		if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if len(res.Observations) != 12 {
			t.Fatalf("%s: %d evaluations, want 12", m, len(res.Observations))
		}
		for _, ob := range res.Observations {
			if !s.Satisfies(ob.Config) {
				t.Fatalf("%s evaluated %s, which violates b >= a", m, ob.Config)
			}
		}
	}
}

func TestSuggestHonoursContext(t *testing.T) {
	s := configspace.MustParse("a=float[0,1]")
	o, _ := New(s, Options{MemLimit: 1}, rand.New(rand.NewPCG(1, 1)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := o.Suggest(ctx); err == nil {
		t.Fatal("Suggest with a cancelled context succeeded")
	}
}

func TestWarmStartIsSuggestedFirst(t *testing.T) {
	s := configspace.MustParse("a=int[1,100]; b=int[1,100]; constraint: b >= a")
	good := configspace.Config{"a": configspace.Num(10), "b": configspace.Num(20)}
	bad := configspace.Config{"a": configspace.Num(50), "b": configspace.Num(5)} // violates b >= a
	o, err := New(s, Options{MemLimit: 10, Initial: []configspace.Config{good, bad, good}}, rand.New(rand.NewPCG(3, 3)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := o.Suggest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.String() != good.String() {
		t.Fatalf("first suggestion %s, want the warm start %s", c, good)
	}
	if err := o.Observe(c, 1, 1, false); err != nil {
		t.Fatal(err)
	}
	// The constraint-violating entry and the repeat of an evaluated one are skipped.
	c, err = o.Suggest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.String() == good.String() || c.String() == bad.String() || !s.Satisfies(c) {
		t.Fatalf("second suggestion %s: want a fresh design point satisfying the constraints", c)
	}
}

// TestPredict checks the surrogates' prediction: an error before any evaluation, no
// throughput while only OOM evaluations exist, and after safe and OOM evaluations a high
// P(feasible) at a safe configuration, a low one at an OOM configuration, and a throughput
// mean near the measurement at an evaluated configuration.
func TestPredict(t *testing.T) {
	o, cfg := intOptimizer(t, 64, Options{MemLimit: 100}, 7)
	ctx := context.Background()
	if _, err := o.Predict(ctx, cfg(4)); err == nil {
		t.Fatal("predict before any evaluation must fail")
	}
	if err := o.Observe(cfg(64), 0, 100, true); err != nil {
		t.Fatal(err)
	}
	p, err := o.Predict(ctx, cfg(64))
	if err != nil || p.HaveThroughput {
		t.Fatalf("only OOM evaluations: %+v, %v; want no throughput", p, err)
	}
	for _, b := range []int{1, 4, 8} {
		if err := o.Observe(cfg(b), float64(b), float64(5*b), false); err != nil {
			t.Fatal(err)
		}
	}
	safe, err := o.Predict(ctx, cfg(4))
	if err != nil {
		t.Fatal(err)
	}
	oom, err := o.Predict(ctx, cfg(64))
	if err != nil {
		t.Fatal(err)
	}
	if !safe.HaveThroughput || math.Abs(safe.Throughput-4) > 1 || safe.PFeasible < 0.9 || oom.PFeasible > 0.5 {
		t.Errorf("safe %+v oom %+v: want throughput ≈ 4 and PF ≥ 0.9 at b=4, PF ≤ 0.5 at b=64", safe, oom)
	}
	if o.Delta() != 0.9 {
		t.Errorf("default delta %v, want 0.9", o.Delta())
	}
}

// TestSuggestPendingRunsAsynchronousBatches runs constrained BO with four evaluations in
// flight at a time (each finishing in turn, as parallel probes do): no configuration is
// proposed twice, neither while pending nor after, a suggestion keeps BatchSpacing from
// the pending ones, and the recommendation meets the same
// bound as the sequential search in TestConstrainedBOFindsFeasibleOptimum with the same
// 20 evaluations (feasible, a+b ≥ 1.35 of the optimum 1.45).
func TestSuggestPendingRunsAsynchronousBatches(t *testing.T) {
	s := configspace.MustParse("a=float[0,1]; b=float[0,1]")
	ctx := context.Background()
	for seed := uint64(1); seed <= 3; seed++ {
		o, err := New(s, Options{Method: Constrained, MemLimit: 60, Margin: 2, Delta: 0.8}, rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		var pending []configspace.Config
		for evals := 0; evals < 20; {
			for len(pending) < 4 && evals+len(pending) < 20 {
				c := suggestFresh(t, o, pending, seen)
				if len(o.Observations()) >= 5 { // past the quasi-random design
					for _, q := range pending {
						if d := math.Max(math.Abs(c.Float("a")-q.Float("a")), math.Abs(c.Float("b")-q.Float("b"))); d < 0.1 {
							t.Fatalf("seed %d: %s within %.3f of pending %s, want the default spacing 0.1", seed, c, d, q)
						}
					}
				}
				pending = append(pending, c)
			}
			m, _ := toy(ctx, pending[0])
			if err := o.ObserveMeasurement(pending[0], m); err != nil {
				t.Fatal(err)
			}
			pending, evals = pending[1:], evals+1
		}
		rec, err := o.Recommend(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sum := rec.Config.Float("a") + rec.Config.Float("b"); 40*sum > 60 || sum < 1.35 {
			t.Errorf("seed %d: recommended %s (a+b = %.3f), want a feasible a+b >= 1.35", seed, rec.Config, sum)
		}
	}
}

// TestSuggestPendingLeavesTheModelUnchanged checks that the fantasies of pending points do
// not outlive the call: the prediction at a pending point is the same before and after,
// and its uncertainty is not collapsed.
func TestSuggestPendingLeavesTheModelUnchanged(t *testing.T) {
	o, cfg := intOptimizer(t, 64, Options{MemLimit: 100}, 7)
	ctx := context.Background()
	for _, b := range []int{1, 8, 16, 40, 64} {
		if err := o.Observe(cfg(b), float64(b), float64(b), false); err != nil {
			t.Fatal(err)
		}
	}
	before, err := o.Predict(ctx, cfg(28))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.SuggestPending(ctx, []configspace.Config{cfg(28)}); err != nil {
		t.Fatal(err)
	}
	after, err := o.Predict(ctx, cfg(28))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(before.Throughput-after.Throughput) > 1e-6*math.Abs(before.Throughput) || math.Abs(before.ThroughputStd-after.ThroughputStd) > 1e-6*before.ThroughputStd {
		t.Fatalf("prediction at the pending point changed: before %+v after %+v", before, after)
	}
	if len(o.Observations()) != 5 {
		t.Fatalf("%d observations after SuggestPending, want 5", len(o.Observations()))
	}
}

// TestSuggestPendingFillsASmallSpace fills a space of eight configurations, three of them
// evaluated, with pending trials: each suggestion is one not evaluated and not pending
// (the posterior there is near its maximum, so without the exclusion the acquisition
// would propose a pending point again).
func TestSuggestPendingFillsASmallSpace(t *testing.T) {
	o, cfg := intOptimizer(t, 8, Options{MemLimit: 100, InitPoints: 3}, 2)
	for _, b := range []int{1, 4, 8} {
		if err := o.Observe(cfg(b), float64(b*(12-b)), 10, false); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{"b=1": true, "b=4": true, "b=8": true}
	var pending []configspace.Config
	for range 5 {
		pending = append(pending, suggestFresh(t, o, pending, seen))
	}
}

// suggestFresh returns o's suggestion with pending in flight, failing the test when it
// is in seen (evaluated or proposed before), and records it there.
func suggestFresh(t *testing.T, o *Optimizer, pending []configspace.Config, seen map[string]bool) configspace.Config {
	t.Helper()
	c, err := o.SuggestPending(context.Background(), pending)
	if err != nil {
		t.Fatal(err)
	}
	if seen[c.String()] {
		t.Fatalf("suggested %s again (pending %v)", c, pending)
	}
	seen[c.String()] = true
	return c
}

// intOptimizer returns a BO optimiser over one integer parameter b in [1, hi] and a
// constructor of its configurations.
func intOptimizer(t *testing.T, hi int, opts Options, seed uint64) (*Optimizer, func(int) configspace.Config) {
	t.Helper()
	o, err := New(configspace.MustParse(fmt.Sprintf("b=int[1,%d]", hi)), opts, rand.New(rand.NewPCG(seed, seed)))
	if err != nil {
		t.Fatal(err)
	}
	return o, func(b int) configspace.Config { return configspace.Config{"b": configspace.Num(float64(b))} }
}

// stubMem is a memory surrogate with a fixed prediction and noise.
type stubMem struct{ m, v, noise float64 }

func (s stubMem) Fit(context.Context, [][]float64, []float64) error { return nil }
func (s stubMem) Predict([]float64) (float64, float64)              { return s.m, s.v }
func (s stubMem) NoiseVar() float64                                 { return s.noise }

// TestPeakKModelsTheSustainedPeak checks the sustained-peak allowance on a memory surrogate
// that predicts a log peak 2% below the usable memory M − μ with latent sd 1%: judged on
// short-run peaks (PeakK 0, as the live tuner judged before issue #21) P(feasible) is
// Φ(2) ≈ 0.98; with PeakK 2 the sustained peak sits 2 noise deviations higher — a 1%
// floor when the surrogate fits less noise, 3% when it fits 1.5% or with the default
// 1.5% floor — and P(feasible) drops to Φ(0) = 0.5 and Φ(−1) ≈ 0.16.
func TestPeakKModelsTheSustainedPeak(t *testing.T) {
	ctx := context.Background()
	lim := math.Log(90.0)
	pf := func(k, noiseSD, floor float64) float64 {
		mem := stubMem{m: lim - 0.02, v: 0.01 * 0.01, noise: noiseSD * noiseSD}
		o, cfg := intOptimizer(t, 64, Options{MemLimit: 100, Margin: 10, PeakK: k, PeakNoiseFloor: floor,
			MemSurrogate: func(int) Surrogate { return mem }}, 7)
		if err := o.Observe(cfg(4), 4, 80, false); err != nil {
			t.Fatal(err)
		}
		p, err := o.Predict(ctx, cfg(16))
		if err != nil {
			t.Fatal(err)
		}
		return p.PFeasible
	}
	for _, c := range []struct{ k, noise, floor, want float64 }{
		{0, 0.001, 0.01, normCDF(2)}, {2, 0.001, 0.01, 0.5}, {2, 0.015, 0.01, normCDF(-1)},
		{2, 0.001, 0, normCDF(-1)}, // the default floor, 1.5 %
	} {
		if got := pf(c.k, c.noise, c.floor); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("k %v, noise sd %v, floor %v: P(feasible) %.4f, want %.4f", c.k, c.noise, c.floor, got, c.want)
		}
	}
	if _, err := New(configspace.MustParse("b=int[1,8]"), Options{MemLimit: 100, PeakK: -1}, rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Error("negative PeakK accepted")
	}
}

// TestShortRunPeakIsNotExact checks that the memory surrogate of constrained BO with a
// sustained-peak allowance does not take a short-run peak as the configuration's exact
// peak: on peaks that lie exactly on a smooth curve (which a GP would otherwise
// interpolate with almost no noise) its fitted noise is at least PeakNoiseFloor and its
// posterior deviation at a measured configuration at least half of it. Before the floor
// the fitted noise fell to 0.03–0.06 % and a peak that read 2–3 % low passed as safe.
func TestShortRunPeakIsNotExact(t *testing.T) {
	ctx := context.Background()
	for _, floor := range []float64{0, 0.02} {
		o, cfg := intOptimizer(t, 64, Options{MemLimit: 100, Margin: 1, PeakK: 2, PeakNoiseFloor: floor}, 3)
		want := floor
		if want == 0 {
			want = 0.015
		}
		for _, b := range []int{2, 8, 16, 24, 32, 40, 48, 56} {
			if err := o.Observe(cfg(b), float64(b), 30+float64(b), false); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := o.Predict(ctx, cfg(56)); err != nil {
			t.Fatal(err)
		}
		nv := o.mem.(NoiseModel).NoiseVar()
		if math.Sqrt(nv) < want*(1-1e-6) {
			t.Errorf("floor %v: memory surrogate noise sd %.5f < %v", floor, math.Sqrt(nv), want)
		}
		x, err := o.space.Encode(cfg(56))
		if err != nil {
			t.Fatal(err)
		}
		if _, v := o.mem.Predict(x); math.Sqrt(v) < want/2 {
			t.Errorf("floor %v: posterior sd %.5f at a measured peak < %v", floor, math.Sqrt(v), want/2)
		}
	}
}

// startToy is a 2-parameter engine that refuses to start when its working pool, (a − 0.6b +
// 0.2)/0.3 of what it needs, falls below 1 (a < 0.1 + 0.6b): throughput b + 0.3(1 − a)
// grows towards that edge, while memory 40a + 10 stays below the 60 GB limit everywhere,
// so the memory surrogate cannot foresee a failure. The best configuration that starts is
// about a = 0.7, b = 1 (throughput 1.09). With reportPool the engine reports its pool, as
// vLLM reports its KV cache (a start failure states the shortfall).
func startToy(reportPool bool) Objective {
	return func(ctx context.Context, c configspace.Config) (Measurement, error) {
		a, b := c.Float("a"), c.Float("b")
		pool := (a - 0.6*b + 0.2) / 0.3
		m := Measurement{Throughput: b + 0.3*(1-a), PeakMem: 40*a + 10}
		if pool < 1 {
			m = Measurement{OOM: true, StartFailed: true}
		}
		if reportPool {
			m.Pool = math.Max(pool, 0)
		}
		return m, nil
	}
}

// TestPoolModelForeseesStartFailures checks that constrained BO learns the engine's
// reported pool: from the default (a = 0.9, b = 0.2), over seeds 1..5 of 20 evaluations,
// it starts at most 1 engine per run on average that refuses to start with the pool
// reported, against at least twice as many blind to it (measured 2026-12-07: 0 against 37
// over the 5 runs), and its recommendation starts and reaches within 10 % of the best
// that does (1.09; the surrogates' noise and δ keep it off the edge).
func TestPoolModelForeseesStartFailures(t *testing.T) {
	s := configspace.MustParse("a=float[0,1] default 0.9; b=float[0,1] default 0.2")
	fails := map[bool]int{}
	for _, report := range []bool{true, false} {
		for seed := uint64(1); seed <= 5; seed++ {
			opts := Options{Method: Constrained, MemLimit: 60, Margin: 1, PeakK: 2, Delta: 0.95, InitPoints: 1,
				Initial: []configspace.Config{s.Default()}}
			res, err := Run(context.Background(), s, opts, rand.New(rand.NewPCG(seed, 7)), startToy(report), 20)
			if err != nil {
				t.Fatal(err)
			}
			for _, ob := range res.Observations {
				if ob.StartFailed {
					fails[report]++
				}
			}
			if !report {
				continue
			}
			rec := res.Recommendation.Config
			a, b := rec.Float("a"), rec.Float("b")
			if a < 0.1+0.6*b {
				t.Errorf("seed %d: recommended %s, which does not start", seed, rec)
			} else if thr := b + 0.3*(1-a); thr < 0.9*1.09 {
				t.Errorf("seed %d: recommended %s (throughput %.3f), want at least %.3f", seed, rec, thr, 0.9*1.09)
			}
		}
	}
	t.Logf("start failures over 5 runs: %d with the pool reported, %d blind to it", fails[true], fails[false])
	if fails[true] > 5 {
		t.Errorf("%d start failures over 5 runs with the pool reported, want at most 5", fails[true])
	}
	if fails[false] < 2*max(fails[true], 1) {
		t.Errorf("%d start failures blind to the pool against %d with it: want at least twice as many", fails[false], fails[true])
	}
}

// TestStartFailureWithAFullPoolStaysAMemoryFailure: an engine that reported a pool it
// could start with (3 times its need) and then failed did not fail for the pool: the
// failure stays in the memory surrogate, at the limit, as an OOM does, so its
// neighbourhood is as unsafe as when no pool is reported at all (PF below 0.5 at a point
// 0.02 away in both coordinates, in both cases), while the successes far from it stay
// safe.
func TestStartFailureWithAFullPoolStaysAMemoryFailure(t *testing.T) {
	s := configspace.MustParse("a=float[0,1]; b=float[0,1]")
	near := configspace.Config{"a": configspace.Num(0.88), "b": configspace.Num(0.88)}
	for _, pool := range []float64{0, 3} {
		o, err := New(s, Options{Method: Constrained, MemLimit: 60, Margin: 1, PeakK: 2, Delta: 0.95}, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatal(err)
		}
		for _, ab := range [][2]float64{{0.1, 0.1}, {0.2, 0.3}, {0.3, 0.1}, {0.4, 0.4}} {
			c := configspace.Config{"a": configspace.Num(ab[0]), "b": configspace.Num(ab[1])}
			if err := o.ObserveMeasurement(c, Measurement{Throughput: ab[0] + ab[1], PeakMem: 20 + 10*(ab[0]+ab[1]), Pool: pool}); err != nil {
				t.Fatal(err)
			}
		}
		failed := configspace.Config{"a": configspace.Num(0.9), "b": configspace.Num(0.9)}
		if err := o.ObserveMeasurement(failed, Measurement{OOM: true, StartFailed: true, Pool: pool}); err != nil {
			t.Fatal(err)
		}
		p, err := o.Predict(context.Background(), near)
		if err != nil {
			t.Fatal(err)
		}
		far, err := o.Predict(context.Background(), configspace.Config{"a": configspace.Num(0.2), "b": configspace.Num(0.2)})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pool %v: PF %.3f beside the failure, %.3f among the successes", pool, p.PFeasible, far.PFeasible)
		if p.PFeasible >= 0.5 {
			t.Errorf("pool %v: PF %.3f beside a failed start that reported a full pool, want below 0.5", pool, p.PFeasible)
		}
		if far.PFeasible < 0.95 {
			t.Errorf("pool %v: PF %.3f among the successes, want at least 0.95", pool, far.PFeasible)
		}
	}
}
