package gp

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// testFunc is a smooth 2-D target used across tests.
func testFunc(x []float64) float64 {
	return 10 + 3*math.Sin(3*x[0]) + 2*math.Cos(2*x[1]) + x[0]*x[1]
}

func randomData(seed uint64, n, dim int, noise float64) ([][]float64, []float64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	xs := make([][]float64, n)
	ys := make([]float64, n)
	for i := range xs {
		xs[i] = make([]float64, dim)
		for d := range xs[i] {
			xs[i][d] = rng.Float64() * 2
		}
		if dim >= 2 {
			ys[i] = testFunc(xs[i])
		} else {
			ys[i] = 5 + 2*math.Sin(3*xs[i][0])
		}
		ys[i] += noise * rng.NormFloat64()
	}
	return xs, ys
}

func mustGP(t *testing.T, dim int, h Hyper, opts ...Option) *GP {
	t.Helper()
	g, err := New(dim, h, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return g
}

// TestGradientFiniteDifference checks the analytic gradient against central differences.
// Tolerance: relative 1e-5 (plus 1e-6 absolute); central differences with step 1e-5 in
// log-space have truncation error O(h²)≈1e-10 relative and rounding error ≈1e-16/1e-5 · |lml|,
// so 1e-5 leaves ample margin while a wrong term (off by a factor or missing) fails by >1e-2.
func TestGradientFiniteDifference(t *testing.T) {
	xs, ys := randomData(7, 25, 3, 0.1)
	h := Hyper{Mean: 9, SignalVar: 2.5, NoiseVar: 0.2, LengthScales: []float64{0.7, 1.3, 0.4}}
	_, grad, err := LogMarginalLikelihoodGrad(xs, ys, h)
	if err != nil {
		t.Fatal(err)
	}
	perturb := func(i int, eps float64) Hyper {
		p := h.Clone()
		switch {
		case i == GradMean:
			p.Mean += eps
		case i == GradLogSignalVar:
			p.SignalVar *= math.Exp(eps)
		case i == GradLogNoiseVar:
			p.NoiseVar *= math.Exp(eps)
		default:
			p.LengthScales[i-GradLogLength0] *= math.Exp(eps)
		}
		return p
	}
	const eps = 1e-5
	for i := range grad {
		lp, _, err1 := LogMarginalLikelihoodGrad(xs, ys, perturb(i, eps))
		lm, _, err2 := LogMarginalLikelihoodGrad(xs, ys, perturb(i, -eps))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		fd := (lp - lm) / (2 * eps)
		if math.Abs(fd-grad[i]) > 1e-5*math.Abs(fd)+1e-6 {
			t.Errorf("grad[%d] = %.9g, finite difference %.9g", i, grad[i], fd)
		}
	}
}

// TestIncrementalMatchesBatch checks that Add's one-row Cholesky extension gives the same
// posterior and likelihood as a full refactorisation. Tolerance 1e-8 relative: both are
// exact algebra, differing only by floating-point rounding on well-conditioned matrices.
func TestIncrementalMatchesBatch(t *testing.T) {
	xs, ys := randomData(3, 60, 2, 0.05)
	h := Hyper{Mean: 10, SignalVar: 4, NoiseVar: 0.01, LengthScales: []float64{0.5, 0.8}}
	inc := mustGP(t, 2, h)
	for i := range xs {
		if err := inc.Add(xs[i], ys[i]); err != nil {
			t.Fatal(err)
		}
	}
	batch := mustGP(t, 2, h)
	for i := range xs {
		batch.xs = append(batch.xs, xs[i])
		batch.ys = append(batch.ys, ys[i])
	}
	if err := batch.refactor(); err != nil {
		t.Fatal(err)
	}
	lmlRef, _, err := LogMarginalLikelihoodGrad(xs, ys, h)
	if err != nil {
		t.Fatal(err)
	}
	if got := inc.LogMarginalLikelihood(); math.Abs(got-lmlRef) > 1e-8*math.Abs(lmlRef) {
		t.Errorf("incremental LML %v, batch %v", got, lmlRef)
	}
	probe, _ := randomData(99, 20, 2, 0)
	for _, x := range probe {
		m1, v1 := inc.Predict(x)
		m2, v2 := batch.Predict(x)
		if math.Abs(m1-m2) > 1e-8*math.Abs(m2) || math.Abs(v1-v2) > 1e-8*h.SignalVar {
			t.Errorf("at %v: incremental (%v, %v), batch (%v, %v)", x, m1, v1, m2, v2)
		}
	}
}

// TestPosteriorInterpolates checks textbook posterior behaviour: near-zero variance and the
// observed value at a training point when noise is tiny, and the prior far from all data.
func TestPosteriorInterpolates(t *testing.T) {
	h := Hyper{Mean: 1, SignalVar: 2, NoiseVar: 1e-8, LengthScales: []float64{0.3}}
	g := mustGP(t, 1, h)
	if m, v := g.Predict([]float64{0}); m != 1 || v != 2 {
		t.Fatalf("empty GP predicts (%v, %v), want prior (1, 2)", m, v)
	}
	for _, p := range [][2]float64{{0, 3}, {0.5, -1}, {1, 2}} {
		if err := g.Add([]float64{p[0]}, p[1]); err != nil {
			t.Fatal(err)
		}
	}
	// Noise 1e-8 against signal 2: the posterior at a datum is within ~1e-6 of it.
	if m, v := g.Predict([]float64{0.5}); math.Abs(m+1) > 1e-5 || v > 1e-6 {
		t.Errorf("at training point: (%v, %v), want (-1, ~0)", m, v)
	}
	// 100 length scales away the kernel is ~e^-223: the prior exactly, to rounding.
	if m, v := g.Predict([]float64{31}); math.Abs(m-1) > 1e-12 || math.Abs(v-2) > 1e-12 {
		t.Errorf("far away: (%v, %v), want prior (1, 2)", m, v)
	}
}

// TestWindowEvictionDowndate checks that a full window keeps its size, that the O(n²)
// downdate equals a fresh factorisation (1e-8 relative, rounding only), and that the sole
// sample of an isolated region survives while redundant old samples are evicted.
func TestWindowEvictionDowndate(t *testing.T) {
	h := Hyper{Mean: 0, SignalVar: 1, NoiseVar: 0.01, LengthScales: []float64{0.2}}
	g := mustGP(t, 1, h, WithWindow(10))
	// The first sample sits alone at x=5, far from the stream of samples in [0, 1).
	if err := g.Add([]float64{5}, 7); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		x := rng.Float64()
		if err := g.Add([]float64{x}, math.Sin(6*x)); err != nil {
			t.Fatal(err)
		}
	}
	if g.Len() != 10 {
		t.Fatalf("Len = %d, want window 10", g.Len())
	}
	xs, ys := g.Data()
	if xs[0][0] != 5 {
		t.Errorf("isolated sample evicted; oldest kept is %v", xs[0])
	}
	ref := mustGP(t, 1, h)
	for i := range xs {
		ref.xs = append(ref.xs, xs[i])
		ref.ys = append(ref.ys, ys[i])
	}
	if err := ref.refactor(); err != nil {
		t.Fatal(err)
	}
	for _, x := range []float64{0.1, 0.5, 0.9, 5, 2} {
		m1, v1 := g.Predict([]float64{x})
		m2, v2 := ref.Predict([]float64{x})
		if math.Abs(m1-m2) > 1e-8*(1+math.Abs(m2)) || math.Abs(v1-v2) > 1e-8 {
			t.Errorf("x=%v: windowed (%v, %v), refactorised (%v, %v)", x, m1, v1, m2, v2)
		}
	}
	if math.Abs(g.LogMarginalLikelihood()-ref.LogMarginalLikelihood()) > 1e-8*math.Abs(ref.LogMarginalLikelihood()) {
		t.Errorf("LML after downdates %v, refactorised %v", g.LogMarginalLikelihood(), ref.LogMarginalLikelihood())
	}
}

// TestFitImprovesAndPredicts fits a 2-D smooth function from deliberately poor starting
// hyperparameters. The fitted LML must not be below the LML at the starting point or at
// hand-picked sensible hyperparameters, and the fit must predict held-out points with RMSE
// below 0.25 (noise sd is 0.1 and the function spans ~10 units; the start gives RMSE > 1).
func TestFitImprovesAndPredicts(t *testing.T) {
	xs, ys := randomData(11, 80, 2, 0.1)
	start := Hyper{Mean: 0, SignalVar: 0.01, NoiseVar: 5, LengthScales: []float64{20, 0.01}}
	g := mustGP(t, 2, start)
	for i := range xs {
		if err := g.Add(xs[i], ys[i]); err != nil {
			t.Fatal(err)
		}
	}
	l0 := g.LogMarginalLikelihood()
	sensible, _, err := LogMarginalLikelihoodGrad(xs, ys, Hyper{Mean: 10, SignalVar: 4, NoiseVar: 0.01, LengthScales: []float64{0.5, 0.8}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := g.Fit(context.Background(), FitOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	l1 := g.LogMarginalLikelihood()
	if l1 < l0 || l1 < sensible-1e-6 {
		t.Errorf("fitted LML %v; start %v, sensible %v", l1, l0, sensible)
	}
	if h.NoiseVar < 0.001 || h.NoiseVar > 0.05 {
		t.Errorf("fitted noise variance %v, true 0.01", h.NoiseVar)
	}
	test, truth := randomData(12, 200, 2, 0)
	var se float64
	for i, x := range test {
		m, _ := g.Predict(x)
		se += (m - truth[i]) * (m - truth[i])
	}
	if rmse := math.Sqrt(se / float64(len(test))); rmse > 0.25 {
		t.Errorf("held-out RMSE %v, want <= 0.25", rmse)
	}
}

func TestFitHonoursContext(t *testing.T) {
	xs, ys := randomData(5, 30, 2, 0.1)
	h := DefaultHyper(2)
	g := mustGP(t, 2, h)
	for i := range xs {
		if err := g.Add(xs[i], ys[i]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Fit(ctx, FitOptions{}); err == nil {
		t.Fatal("Fit with a cancelled context succeeded")
	}
	if got := g.Hyper(); got.SignalVar != h.SignalVar || got.LengthScales[0] != h.LengthScales[0] {
		t.Errorf("cancelled Fit changed hyperparameters to %+v", got)
	}
}

func TestFitFixMeanKeepsMean(t *testing.T) {
	xs, ys := randomData(5, 30, 2, 0.1)
	h := DefaultHyper(2)
	h.Mean = 42
	g := mustGP(t, 2, h)
	for i := range xs {
		if err := g.Add(xs[i], ys[i]); err != nil {
			t.Fatal(err)
		}
	}
	got, err := g.Fit(context.Background(), FitOptions{FixMean: true, Restarts: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got.Mean != 42 {
		t.Errorf("FixMean fit moved the mean to %v", got.Mean)
	}
}

func TestInvalidInput(t *testing.T) {
	if _, err := New(0, Hyper{}); err == nil {
		t.Error("New(0) succeeded")
	}
	if _, err := New(2, DefaultHyper(1)); err == nil {
		t.Error("New with 1 length scale for 2 inputs succeeded")
	}
	bad := DefaultHyper(1)
	bad.SignalVar = -1
	if _, err := New(1, bad); err == nil {
		t.Error("New with negative signal variance succeeded")
	}
	if _, err := New(1, DefaultHyper(1), WithWindow(1)); err == nil {
		t.Error("WithWindow(1) accepted")
	}
	g := mustGP(t, 2, DefaultHyper(2))
	if err := g.Add([]float64{1}, 1); err == nil {
		t.Error("Add with wrong dimension succeeded")
	}
	if err := g.Add([]float64{1, math.NaN()}, 1); err == nil {
		t.Error("Add with NaN input succeeded")
	}
	if err := g.Add([]float64{1, 2}, math.Inf(1)); err == nil {
		t.Error("Add with infinite output succeeded")
	}
	if g.Len() != 0 {
		t.Errorf("rejected samples were kept: Len = %d", g.Len())
	}
	if _, err := g.Fit(context.Background(), FitOptions{}); err == nil {
		t.Error("Fit without data succeeded")
	}
}

// TestDuplicateInputs adds the same input repeatedly with zero noise; the jitter must keep
// the factorisation usable and the mean must equal the repeated value (to 1e-6: the jitter
// 1e-10·σ_f² perturbs the solve by far less).
func TestDuplicateInputs(t *testing.T) {
	h := Hyper{Mean: 0, SignalVar: 1, NoiseVar: 0, LengthScales: []float64{1}}
	g := mustGP(t, 1, h)
	for i := 0; i < 5; i++ {
		if err := g.Add([]float64{0.3}, 2); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	if m, _ := g.Predict([]float64{0.3}); math.Abs(m-2) > 1e-6 {
		t.Errorf("mean at duplicated input %v, want 2", m)
	}
}

func BenchmarkAddPredictWindow200(b *testing.B) {
	xs, ys := randomData(1, 400, 4, 0.1)
	h := Hyper{Mean: 10, SignalVar: 4, NoiseVar: 0.01, LengthScales: []float64{0.5, 0.8, 1, 1}}
	g, err := New(4, h, WithWindow(200))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		_ = g.Add(xs[i], ys[i])
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := 200 + i%200
		if err := g.Add(xs[j], ys[j]); err != nil {
			b.Fatal(err)
		}
		g.Predict(xs[j])
	}
}

// TestFitOnSubsample checks MaxSamples: hyperparameters fitted on 40 of 80 samples still
// predict held-out points with RMSE below 0.3 (full fit: < 0.25; noise sd 0.1), and the
// installed model keeps all 80 samples.
func TestFitOnSubsample(t *testing.T) {
	xs, ys := randomData(11, 80, 2, 0.1)
	g := mustGP(t, 2, DefaultHyper(2))
	for i := range xs {
		if err := g.Add(xs[i], ys[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Fit(context.Background(), FitOptions{Seed: 2, MaxSamples: 40}); err != nil {
		t.Fatal(err)
	}
	if g.Len() != 80 {
		t.Fatalf("Len after subsampled fit %d, want 80", g.Len())
	}
	test, truth := randomData(12, 200, 2, 0)
	var se float64
	for i, x := range test {
		m, _ := g.Predict(x)
		se += (m - truth[i]) * (m - truth[i])
	}
	if rmse := math.Sqrt(se / float64(len(test))); rmse > 0.3 {
		t.Errorf("held-out RMSE %v after subsampled fit, want <= 0.3", rmse)
	}
}

// TestLOOResiduals compares the closed-form leave-one-out residuals with explicitly refitting
// without each sample (1e-6 relative: exact algebra, rounding only), and checks that Remove
// agrees with a GP built without the sample.
func TestLOOResiduals(t *testing.T) {
	xs, ys := randomData(31, 25, 2, 0.1)
	ys[7] += 3 // an outlier
	h := Hyper{Mean: 10, SignalVar: 4, NoiseVar: 0.01, LengthScales: []float64{0.5, 0.8}}
	g := mustGP(t, 2, h)
	for i := range xs {
		if err := g.Add(xs[i], ys[i]); err != nil {
			t.Fatal(err)
		}
	}
	loo := g.LOOResiduals()
	for i := range xs {
		other := mustGP(t, 2, h)
		for j := range xs {
			if j != i {
				if err := other.Add(xs[j], ys[j]); err != nil {
					t.Fatal(err)
				}
			}
		}
		m, v := other.Predict(xs[i])
		want := (ys[i] - m) / math.Sqrt(v+h.NoiseVar)
		if math.Abs(loo[i]-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("LOO residual %d = %v, explicit %v", i, loo[i], want)
		}
		if i == 7 {
			if err := g.Remove(7); err != nil {
				t.Fatal(err)
			}
			m2, v2 := g.Predict(xs[7])
			if math.Abs(m2-m) > 1e-8*math.Abs(m) || math.Abs(v2-v) > 1e-8 {
				t.Errorf("after Remove(7): (%v, %v), GP without it (%v, %v)", m2, v2, m, v)
			}
		}
	}
	if math.Abs(loo[7]) < 10 {
		t.Errorf("outlier LOO residual %v, want large (it is 3 units off with noise sd 0.1)", loo[7])
	}
}

// BenchmarkRefit100 measures a periodic hyperparameter refit (30 L-BFGS iterations at
// most, warm start) of a 100-sample, 3-feature GP; -benchmem shows the allocations the
// likelihood workspace saves.
func BenchmarkRefit100(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	g, err := New(3, Hyper{Mean: 0, SignalVar: 1, NoiseVar: 0.01, LengthScales: []float64{0.5, 0.5, 0.5}})
	if err != nil {
		b.Fatal(err)
	}
	for range 100 {
		x := []float64{rng.Float64(), rng.Float64(), rng.Float64()}
		if err := g.Add(x, math.Sin(3*x[0])+x[1]*x[2]+0.05*rng.NormFloat64()); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Fit(ctx, FitOptions{Restarts: -1, MaxIter: 30}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWindowKeepsSparseRegions checks window eviction with length scales longer than the
// distance between two regions: ten samples of an early region at x≈100, then 300 of a
// later one at x≈150. Every sample is within the coverage radius of every other in
// length-scale units, so without WithRelativeCoverage the window evicts the oldest, the
// early region first; with a relative coverage of 0.25 the two regions are told apart and
// the crowded later one gives up its oldest samples instead.
func TestWindowKeepsSparseRegions(t *testing.T) {
	h := Hyper{Mean: 0, SignalVar: 1, NoiseVar: 0.01, LengthScales: []float64{1000}}
	count := func(opts ...Option) int {
		g := mustGP(t, 1, h, append([]Option{WithWindow(50)}, opts...)...)
		rng := rand.New(rand.NewPCG(3, 4))
		for i := 0; i < 310; i++ {
			x := 150.0
			if i < 10 {
				x = 100
			}
			if err := g.Add([]float64{x * (1 + 0.02*rng.NormFloat64())}, 0); err != nil {
				t.Fatal(err)
			}
		}
		xs, _ := g.Data()
		n := 0
		for _, x := range xs {
			if x[0] < 125 {
				n++
			}
		}
		return n
	}
	if n := count(); n != 0 {
		t.Errorf("without relative coverage %d early samples kept, want 0 (the premise)", n)
	}
	if n := count(WithRelativeCoverage(0.25)); n != 10 {
		t.Errorf("with relative coverage %d of the 10 early samples kept, want all", n)
	}
	if _, err := New(1, h, WithRelativeCoverage(-1)); err == nil {
		t.Error("negative relative coverage accepted")
	}
}

// A feature that does not move y is fitted a long length scale (switched off); with
// MaxLengthScales the fit stays at or below the bound, and a bound per input is checked.
func TestFitHonoursMaxLengthScales(t *testing.T) {
	g := mustGP(t, 2, DefaultHyper(2))
	for i := range 40 {
		x := []float64{float64(i%8) / 8, float64(i) / 40}
		if err := g.Add(x, math.Sin(6*x[0])); err != nil { // x[1] does not matter
			t.Fatal(err)
		}
	}
	free, err := g.Fit(context.Background(), FitOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if free.LengthScales[1] < 5 {
		t.Fatalf("unbounded fit: length scale %.3g of the irrelevant feature, want a long one", free.LengthScales[1])
	}
	got, err := g.Fit(context.Background(), FitOptions{Seed: 1, MaxLengthScales: []float64{0, 2}})
	if err != nil {
		t.Fatal(err)
	}
	if got.LengthScales[1] > 2*(1+1e-9) {
		t.Errorf("bounded fit: length scale %.3g above the bound 2", got.LengthScales[1])
	}
	if _, err := g.Fit(context.Background(), FitOptions{MaxLengthScales: []float64{1}}); err == nil {
		t.Error("one bound for two inputs was accepted")
	}
}

// TestFitToleranceStopsNearTheOptimum: a fit with Tolerance 1e-3 nats ends within 0.05 nats
// of the tight fit's likelihood from the same bad start, and its posterior means agree with
// the tight fit's to 1 % of the function's spread (RMS over held-out points). Each start
// stops only after three iterations that gain less than the tolerance, and L-BFGS is
// superlinear near the optimum, so the likelihood left is a small multiple of 1e-3 nats;
// 0.05 leaves a margin of 50, while searches cut off early fail by far more (tolerance 30
// nats ends 3.2 nats below, 1000 nats 14 below).
func TestFitToleranceStopsNearTheOptimum(t *testing.T) {
	xs, ys := randomData(21, 80, 2, 0.1)
	start := Hyper{Mean: 0, SignalVar: 0.01, NoiseVar: 5, LengthScales: []float64{20, 0.01}}
	fit := func(tol float64) *GP {
		g := mustGP(t, 2, start)
		for i := range xs {
			if err := g.Add(xs[i], ys[i]); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := g.Fit(context.Background(), FitOptions{Seed: 3, Tolerance: tol}); err != nil {
			t.Fatal(err)
		}
		return g
	}
	tight, loose := fit(0), fit(1e-3)
	lt, ll := tight.LogMarginalLikelihood(), loose.LogMarginalLikelihood()
	if ll < lt-0.05 {
		t.Errorf("LML with tolerance 1e-3: %.4f, tight fit %.4f (allowed 0.05 below)", ll, lt)
	}
	test, _ := randomData(22, 200, 2, 0)
	var se float64
	for _, x := range test {
		mt, _ := tight.Predict(x)
		ml, _ := loose.Predict(x)
		se += (mt - ml) * (mt - ml)
	}
	// testFunc spans about 10 (±3 ±2 and x0·x1 up to 4): 1 % is 0.1.
	if rms := math.Sqrt(se / float64(len(test))); rms > 0.1 {
		t.Errorf("posterior means differ by %.4f RMS between the tolerant and the tight fit, want <= 0.1", rms)
	}
	t.Logf("LML tight %.4f, tolerance 1e-3 %.4f", lt, ll)
}

// TestFitRaceKeepsTheBetterStart: a refit whose current hyperparameters sit in the
// noise-explains-everything basin, with the data-derived guess as the second start. Raced
// for four iterations, the guess must take over and end within 0.05 nats of the full
// search from both starts (the estimator's likelihood tolerance is 1e-3 nats per
// iteration; 0.05 leaves room for the continuation's fresh L-BFGS memory), well above
// the warm start searched alone.
func TestFitRaceKeepsTheBetterStart(t *testing.T) {
	xs, ys := randomData(21, 80, 2, 0.1)
	start := Hyper{Mean: 0, SignalVar: 0.01, NoiseVar: 5, LengthScales: []float64{20, 20}}
	fit := func(o FitOptions) float64 {
		g := mustGP(t, 2, start)
		for i := range xs {
			if err := g.Add(xs[i], ys[i]); err != nil {
				t.Fatal(err)
			}
		}
		o.Restarts, o.MaxIter, o.Tolerance = -1, 30, 1e-3
		if _, err := g.Fit(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		return g.LogMarginalLikelihood()
	}
	full, raced, warm := fit(FitOptions{}), fit(FitOptions{RaceIterations: 4}), fit(FitOptions{WarmOnly: true})
	t.Logf("LML full %.4f, raced %.4f, warm start alone %.4f", full, raced, warm)
	if raced < full-0.05 {
		t.Errorf("raced fit LML %.4f, full search %.4f (allowed 0.05 below)", raced, full)
	}
	if raced < warm+10 {
		t.Errorf("raced fit LML %.4f, warm start alone %.4f: the better start did not take over", raced, warm)
	}
}

// BenchmarkLMLGrad75 measures one likelihood-and-gradient evaluation at the size of a
// simulated pipeline's refits (75 samples, 3 features): the unit a hyperparameter fit
// repeats dozens of times.
func BenchmarkLMLGrad75(b *testing.B) {
	xs, ys := randomData(11, 75, 3, 0.1)
	h := Hyper{Mean: 9, SignalVar: 2.5, NoiseVar: 0.2, LengthScales: []float64{0.7, 1.3, 0.4}}
	var w LMLWorkspace
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := w.LogMarginalLikelihoodGrad(xs, ys, h); err != nil {
			b.Fatal(err)
		}
	}
}
