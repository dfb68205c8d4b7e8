package observe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

var quiet = slog.New(slog.DiscardHandler)

// capacityAt is the synthetic ground truth of these tests: 100 records/s at x=0, rising to
// 200 at x=1.
func capacityAt(x float64) float64 { return 100 + 100*x }

// steady returns a steady-state sample at feature x with relative rate error rel: a stable
// backlog of 500 records and 90% utilisation.
func steady(x, rel float64) Sample {
	rate := capacityAt(x) * (1 + rel)
	return Sample{
		Interval: 10 * time.Second, Records: rate * 10, BusySeconds: 10, UsefulSeconds: 25,
		QueueStart: 500, QueueEnd: 500, Utilization: 0.9, Features: []float64{x},
	}
}

func mustEstimator(t *testing.T, mode Mode, cfg Config) *GPEstimator {
	t.Helper()
	cfg.Logger = quiet
	e, err := NewGPEstimator(1, mode, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestSignalFilterReasons(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Sample)
		want string
	}{
		{"steady", func(*Sample) {}, ""},
		{"starved accelerator", func(s *Sample) { s.Utilization = 0.3 }, ReasonLowUtilization},
		// Queue shrinks by 300 while 1000 records are processed: trend -0.3 < -0.1.
		{"draining", func(s *Sample) { s.QueueEnd = 200 }, ReasonQueueDraining},
		// Queue grows by 500 while 1000 records are processed: trend 0.5 > 0.2.
		{"backlog growing", func(s *Sample) { s.QueueEnd = 1000 }, ReasonQueueGrowing},
		// Queue empty at both ends: the operator outpaces its input.
		{"empty queue", func(s *Sample) { s.QueueStart, s.QueueEnd = 0, 3 }, ReasonQueueEmpty},
		// 5% growth is normal jitter of a pipeline at its bottleneck.
		{"small growth", func(s *Sample) { s.QueueEnd = 550 }, ""},
		// A batching engine whose bounded queue (which also holds its requests in flight)
		// stays full runs a small batch because of the bound, not for want of work.
		{"small batch, queue full", func(s *Sample) { s.Utilization, s.QueueCap = 0.3, 520 }, ""},
		// 500 of 600 is below the 0.9 fill: low utilisation still means starved.
		{"small batch, queue not full", func(s *Sample) { s.Utilization, s.QueueCap = 0.3, 600 }, ReasonLowUtilization},
		// Output blocked 2 s of 10: the rate is the downstream operator's.
		{"output blocked", func(s *Sample) { s.OutputBlockedSeconds = 2 }, ReasonOutputBlocked},
		// 1 s of 10 is within MaxBlocked.
		{"output briefly blocked", func(s *Sample) { s.OutputBlockedSeconds = 1 }, ""},
		// A full queue behind a blocked output is backpressure, not saturation.
		{"queue full, output blocked", func(s *Sample) { s.Utilization, s.QueueCap, s.OutputBlockedSeconds = 0.3, 520, 5 }, ReasonOutputBlocked},
		// Issue #21: an engine with requests waiting at both ends is saturated, so a
		// draining or growing queue does not bias its rate (it used to be rejected).
		{"engine backlog, draining", func(s *Sample) {
			s.QueueEnd, s.Engine = 200, EngineGauges{Reported: true, RunningStart: 64, RunningEnd: 64, WaitingStart: 436, WaitingEnd: 136, AdmissionLimit: 64}
		}, ""},
		{"engine backlog, growing", func(s *Sample) {
			s.QueueEnd, s.Engine = 1000, EngineGauges{Reported: true, RunningStart: 64, RunningEnd: 64, WaitingStart: 436, WaitingEnd: 936, AdmissionLimit: 64}
		}, ""},
		// Without proof of saturation at both ends the trend rules still apply.
		{"bounded queue growing, not yet full", func(s *Sample) { s.QueueStart, s.QueueEnd, s.QueueCap = 470, 1000, 2000 }, ReasonQueueGrowing},
		// Issue #21: the queue gauge counts requests in flight and utilisation is a busy
		// fraction, so neither sees starvation; the engine's own gauges do: nothing waits.
		{"in-flight queue, busy fraction, nothing waiting", func(s *Sample) {
			s.QueueStart, s.QueueEnd, s.Utilization = 40, 38, 1
			s.Engine = EngineGauges{Reported: true, RunningStart: 40, RunningEnd: 38, AdmissionLimit: 128}
		}, ReasonStarved},
		// One starved reading (here the end) is enough: bursty input empties the queue
		// within intervals whose other end shows a backlog.
		{"starved at one end", func(s *Sample) {
			s.Engine = EngineGauges{Reported: true, RunningStart: 128, RunningEnd: 90, WaitingStart: 372, WaitingEnd: 0, AdmissionLimit: 128}
		}, ReasonStarved},
		// Without engine gauges, fewer requests held than one full batch is starvation,
		// whatever the queue gauge counts.
		{"fewer than a batch held", func(s *Sample) { s.QueueStart, s.QueueEnd, s.Engine.AdmissionLimit = 100, 100, 128 }, ReasonStarved},
		{"more than a batch held", func(s *Sample) { s.QueueStart, s.QueueEnd, s.Engine.AdmissionLimit = 500, 500, 128 }, ""},
		// A restarted engine warms up: the first two minutes are not its capacity.
		{"warming up", func(s *Sample) { s.Uptime = 100 * time.Second }, ReasonWarmUp},
		{"warm", func(s *Sample) { s.Uptime = 10 * time.Minute }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newSignalFilter(SignalConfig{}.withDefaults())
			s := steady(0, 0)
			c.mod(&s)
			if got := f.check(s); got != c.want {
				t.Errorf("reason %q, want %q", got, c.want)
			}
		})
	}
}

func TestSignalConfigValidation(t *testing.T) {
	for _, c := range []SignalConfig{{FullQueue: 1.5}, {FullQueue: -0.1}, {MaxBlocked: 2}, {MaxBlocked: -1}} {
		if err := c.withDefaults().validate(); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
	if err := (SignalConfig{}).withDefaults().validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestSignalFilterWindow checks the sliding queue window: after a strongly growing interval,
// a flat interval is still rejected because the window trend stays above the threshold,
// and once the episode leaves the window samples pass again.
func TestSignalFilterWindow(t *testing.T) {
	f := newSignalFilter(SignalConfig{}.withDefaults())
	grow := steady(0, 0)
	grow.QueueStart, grow.QueueEnd = 500, 2000 // +1500 over 1000 records
	if r := f.check(grow); r != ReasonQueueGrowing {
		t.Fatalf("growing interval: %q", r)
	}
	// Window of 2: +1500 over 2000 records = 0.75.
	if r := f.check(steady(0, 0)); r != ReasonQueueGrowing {
		t.Errorf("flat interval after growth: %q, want %q (window trend)", r, ReasonQueueGrowing)
	}
	f.check(steady(0, 0))
	if r := f.check(steady(0, 0)); r != "" {
		t.Errorf("after the episode left the 3-interval window: %q, want accepted", r)
	}
}

// TestColdStartEMAThenGP checks the EMA during cold start and the switch to the GP at NMin.
func TestColdStartEMAThenGP(t *testing.T) {
	e := mustEstimator(t, FilterTwoStage, Config{NMin: 5, EMAAlpha: 0.5})
	if _, err := e.Estimate([]float64{0}); !errors.Is(err, ErrNoData) {
		t.Fatalf("estimate without data: %v, want ErrNoData", err)
	}
	xs := []float64{0, 1, 0.5, 0.25}
	for _, x := range xs {
		if ok, r := e.Observe(steady(x, 0)); !ok {
			t.Fatalf("steady sample rejected: %s", r)
		}
	}
	est, err := e.Estimate([]float64{0.7})
	if err != nil {
		t.Fatal(err)
	}
	// EMA with alpha 0.5 over 100, 200, 150, 125: 100 -> 150 -> 150 -> 137.5.
	if est.Source != SourceEMA || math.Abs(est.Capacity-137.5) > 1e-9 || est.Samples != 4 {
		t.Errorf("cold start estimate %+v, want EMA 137.5 from 4 samples", est)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 40; i++ {
		e.Observe(steady(rng.Float64(), 0.02*rng.NormFloat64()))
	}
	est, err = e.Estimate([]float64{0.7})
	if err != nil {
		t.Fatal(err)
	}
	// 44 samples with 2% noise along a straight line: the GP is within 3% of the truth 170,
	// while the feature-blind EMA sits near the mean capacity (~150) and could not be.
	if est.Source != SourceGP || math.Abs(est.Capacity-170)/170 > 0.03 {
		t.Errorf("GP estimate %+v, want ~170 from the GP", est)
	}
	if !(est.StdDev > 0 && est.StdDev < 10) {
		t.Errorf("GP standard deviation %v, want small and positive", est.StdDev)
	}
}

// TestResidualFilter checks that stage 2 rejects a contention outlier that passes stage 1,
// that the GP-only mode accepts it, and that it does not reject ordinary noise.
func TestResidualFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	two := mustEstimator(t, FilterTwoStage, Config{})
	sig := mustEstimator(t, FilterSignal, Config{})
	for i := 0; i < 60; i++ {
		s := steady(rng.Float64(), 0.03*rng.NormFloat64())
		ok1, r1 := two.Observe(s)
		ok2, _ := sig.Observe(s)
		if !ok2 {
			t.Fatalf("signal filter rejected a steady sample")
		}
		// 3% noise: |z| > 3 has probability 0.3% per sample, i.e. <20% over 60 samples;
		// with the lock-out guard it would take 10 in a row to be accepted anyway.
		if !ok1 && r1 != ReasonResidual {
			t.Fatalf("two-stage rejected a steady sample for %q", r1)
		}
	}
	if two.Accepted() < 55 {
		t.Errorf("two-stage accepted %d of 60 clean samples, want >= 55", two.Accepted())
	}
	outlier := steady(0.5, -0.5) // a GC pause halves the rate; queue and utilisation look normal
	if ok, r := two.Observe(outlier); ok || r != ReasonResidual {
		t.Errorf("two-stage on a 50%% outlier: accepted=%v reason=%q, want residual rejection", ok, r)
	}
	if ok, _ := sig.Observe(outlier); !ok {
		t.Errorf("signal-only filter rejected an outlier that looks steady")
	}
}

// TestResidualLockoutGuard checks the guard against a model that is too confident: after
// MaxResidualRejects consecutive rejections of mixed sign the next sample is accepted.
func TestResidualLockoutGuard(t *testing.T) {
	e := mustEstimator(t, FilterTwoStage, Config{MaxResidualRejects: 4, ShiftRun: 10})
	for i := 0; i < 30; i++ {
		e.Observe(steady(float64(i%10)/10, 0))
	}
	before := e.Accepted()
	var accepted int
	for i := 0; i < 4; i++ {
		rel := 1.0 // capacity doubled, then halved: no consistent side
		if i%2 == 1 {
			rel = -0.5
		}
		if ok, _ := e.Observe(steady(0.5, rel)); ok {
			accepted++
		}
	}
	if accepted != 1 || e.Accepted() != before+1 {
		t.Errorf("accepted %d of 4 outliers of mixed sign, want exactly the 4th", accepted)
	}
}

// TestResidualRunIsARegimeShift checks the run test: ShiftRun consecutive rejections on
// the same side are a regime shift. The old guard accepted one sample in ten and refitted
// when the accepted count doubled, so a capacity that moved while the features did not
// stayed locked out; now the run is admitted, the old regime's samples dropped, and the
// estimate is the new level's at once (the run's EMA: 2% noise, so within 5%).
func TestResidualRunIsARegimeShift(t *testing.T) {
	e := mustEstimator(t, FilterTwoStage, Config{})
	rng := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 60; i++ {
		e.Observe(steady(float64(i%10)/10, 0.02*rng.NormFloat64()))
	}
	for i := 0; i < 3; i++ {
		if ok, r := e.Observe(steady(0.5, -0.5+0.02*rng.NormFloat64())); ok || r != ReasonResidual {
			t.Fatalf("shifted sample %d: accepted=%v reason %q, want a residual rejection until the run is long enough", i, ok, r)
		}
	}
	if ok, _ := e.Observe(steady(0.5, -0.5+0.02*rng.NormFloat64())); !ok {
		t.Fatal("the 4th consecutive low sample was rejected: no regime shift detected")
	}
	if e.Shifts() != 1 {
		t.Errorf("%d shifts, want 1", e.Shifts())
	}
	est, err := e.Estimate([]float64{0.5})
	if err != nil {
		t.Fatal(err)
	}
	if want := capacityAt(0.5) / 2; math.Abs(est.Capacity-want)/want > 0.05 {
		t.Errorf("estimate after the shift %.1f, want %.1f ± 5%%", est.Capacity, want)
	}
	// The estimator keeps learning the new level: ten more samples, and the GP takes over.
	// The backlog is halved with the capacity (the same seconds of work as before): 500
	// records at half capacity would be a full interval's work at x=0, and the jump of the
	// features from 0.5 to 0 would put that interval in transit (GPEstimator.inTransit),
	// which is no evidence of a shift.
	for i := 0; i < 10; i++ {
		s := steady(float64(i%10)/10, -0.5+0.02*rng.NormFloat64())
		s.QueueStart, s.QueueEnd = 250, 250
		e.Observe(s)
	}
	if est, _ := e.Estimate([]float64{0.3}); est.Source != SourceGP || math.Abs(est.Capacity-capacityAt(0.3)/2)/(capacityAt(0.3)/2) > 0.1 {
		t.Errorf("estimate at 0.3 after 10 more samples %+v, want the GP at %.1f ± 10%%", est, capacityAt(0.3)/2)
	}
}

func TestInvalidSamples(t *testing.T) {
	e := mustEstimator(t, FilterNone, Config{})
	bad := []Sample{
		func() Sample { s := steady(0, 0); s.Interval = 0; return s }(),
		func() Sample { s := steady(0, 0); s.Records = math.NaN(); return s }(),
		func() Sample { s := steady(0, 0); s.Features = []float64{1, 2}; return s }(),
		func() Sample { s := steady(0, 0); s.Features = []float64{math.Inf(1)}; return s }(),
		func() Sample { s := steady(0, 0); s.QueueEnd = -1; return s }(),
		func() Sample { s := steady(0, 0); s.Records = 0; return s }(),
	}
	for i, s := range bad {
		if ok, r := e.Observe(s); ok || !strings.HasPrefix(r, ReasonInvalid) {
			t.Errorf("bad sample %d: accepted=%v reason=%q", i, ok, r)
		}
	}
	if e.Accepted() != 0 {
		t.Errorf("accepted %d invalid samples", e.Accepted())
	}
}

func TestBaselines(t *testing.T) {
	ds2 := &DS2{Window: 2}
	for _, useful := range []float64{20, 40, 40} {
		s := steady(0, 0) // 1000 records
		s.UsefulSeconds = useful
		if ok, r := ds2.Observe(s); !ok {
			t.Fatalf("DS2 rejected: %s", r)
		}
	}
	// Window 2 keeps 1000/40 twice: 25 records/s.
	if e, err := ds2.Estimate(nil); err != nil || e.Capacity != 25 {
		t.Errorf("DS2 estimate %+v, %v; want 25", e, err)
	}
	ema, err := NewEMA(0.5)
	if err != nil {
		t.Fatal(err)
	}
	ema.Observe(steady(0, 0))
	ema.Observe(steady(1, 0))
	if e, _ := ema.Estimate(nil); e.Capacity != 150 {
		t.Errorf("EMA estimate %v, want 150", e.Capacity)
	}
	ema.Reset()
	if _, err := ema.Estimate(nil); !errors.Is(err, ErrNoData) {
		t.Errorf("EMA after reset: %v, want ErrNoData", err)
	}
	if _, err := NewEMA(0); err == nil {
		t.Error("NewEMA(0) succeeded")
	}
}

func TestLayerEpochsAndErrors(t *testing.T) {
	l := NewLayer(quiet)
	if err := l.Register("llm", OperatorSpec{Features: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Register("llm", OperatorSpec{Features: []string{"x"}}); err == nil {
		t.Error("duplicate registration succeeded")
	}
	if err := l.Register("vision", OperatorSpec{}); err == nil {
		t.Error("registration without features succeeded")
	}
	if _, err := l.Capacity("nope", []float64{0}); !errors.Is(err, ErrUnknownOperator) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown operator error %v", err)
	}
	if ok, r := l.Observe("nope", steady(0, 0)); ok || r != ReasonUnknownOperator {
		t.Errorf("observe unknown operator: %v %q", ok, r)
	}
	if _, err := l.Capacity("llm", []float64{0}); !errors.Is(err, ErrNoData) {
		t.Errorf("capacity before samples: %v, want ErrNoData", err)
	}
	for i := 0; i < 3; i++ {
		l.Observe("llm", steady(0, 0))
	}
	e, err := l.Capacity("llm", []float64{0})
	if err != nil || e.Epoch != 0 || e.Capacity != 100 || e.Source != SourceEMA {
		t.Fatalf("capacity %+v, %v", e, err)
	}

	l.Invalidate("llm")
	if ep, _ := l.Epoch("llm"); ep != 1 {
		t.Errorf("epoch after invalidate %d, want 1", ep)
	}
	if _, err := l.Capacity("llm", []float64{0}); !errors.Is(err, ErrNoData) {
		t.Errorf("capacity right after invalidate: %v, want ErrNoData (samples dropped)", err)
	}
	old := steady(0, 0) // still from epoch 0
	if ok, r := l.Observe("llm", old); ok || r != ReasonStaleEpoch {
		t.Errorf("stale sample: %v %q", ok, r)
	}
	fresh := steady(1, 0)
	fresh.Epoch = 1
	if ok, r := l.Observe("llm", fresh); !ok {
		t.Fatalf("fresh sample rejected: %s", r)
	}
	if e, _ := l.Capacity("llm", []float64{1}); e.Capacity != 200 || e.Epoch != 1 || e.Samples != 1 {
		t.Errorf("capacity after new-epoch sample %+v, want 200 from 1 sample at epoch 1", e)
	}
	// A sample from a newer epoch than the layer knows resets to that epoch.
	newer := steady(0, 0)
	newer.Epoch = 5
	l.Observe("llm", newer)
	if e, _ := l.Capacity("llm", []float64{0}); e.Epoch != 5 || e.Samples != 1 || e.Capacity != 100 {
		t.Errorf("after a newer-epoch sample: %+v", e)
	}
	// Once the GP is in use, invalidation returns the operator to the EMA cold start.
	for i := 0; i < 30; i++ {
		s := steady(float64(i%10)/10, 0)
		s.Epoch = 5
		l.Observe("llm", s)
	}
	if e, _ := l.Capacity("llm", []float64{0.5}); e.Source != SourceGP {
		t.Fatalf("after 31 samples: source %q, want gp", e.Source)
	}
	l.Invalidate("llm")
	s := steady(0.5, 0)
	s.Epoch = 6
	l.Observe("llm", s)
	if e, _ := l.Capacity("llm", []float64{0.5}); e.Source != SourceEMA || e.Epoch != 6 || e.Samples != 1 {
		t.Errorf("after invalidating a GP-backed operator: %+v, want EMA of 1 sample at epoch 6", e)
	}
	l.Invalidate("nope") // must not panic
	if got := l.Operators(); len(got) != 1 || got[0] != "llm" {
		t.Errorf("operators %v", got)
	}
}

// TestLayerConcurrent exercises the layer from several goroutines; run with -race.
func TestLayerConcurrent(t *testing.T) {
	l := NewLayer(quiet)
	const ops = 4
	for i := 0; i < ops; i++ {
		if err := l.Register(fmt.Sprint("op", i), OperatorSpec{Features: []string{"x"}, Config: Config{NMin: 5}}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for i := 0; i < 50; i++ {
				op := fmt.Sprint("op", rng.IntN(ops))
				l.Observe(op, steady(rng.Float64(), 0.02*rng.NormFloat64()))
				_, _ = l.Capacity(op, []float64{0.5})
				if i == 25 && g == 0 {
					l.Invalidate(op)
				}
			}
		}()
	}
	wg.Wait()
	for i := 0; i < ops; i++ {
		e, err := l.Capacity(fmt.Sprint("op", i), []float64{0.5})
		if err != nil && !errors.Is(err, ErrNoData) {
			t.Fatal(err)
		}
		// Truth at x=0.5 is 150; estimates from ~100 samples with 2% noise (or an EMA over
		// x in [0,1], mean 150) are within 15%.
		if err == nil && math.Abs(e.Capacity-150)/150 > 0.15 {
			t.Errorf("op%d estimate %+v, want ~150", i, e)
		}
	}
}

// TestObserveCancelledRefit checks that a cancelled context stops the first fit: the sample
// is accepted, the estimator stays on the EMA, and a later sample with a live context fits.
func TestObserveCancelledRefit(t *testing.T) {
	e := mustEstimator(t, FilterTwoStage, Config{NMin: 3})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 3; i++ {
		if ok, r := e.ObserveContext(ctx, steady(float64(i)/2, 0)); !ok {
			t.Fatalf("sample %d rejected: %s", i, r)
		}
	}
	if est, _ := e.Estimate([]float64{0.5}); est.Source != SourceEMA {
		t.Errorf("after a cancelled first fit the source is %q, want ema", est.Source)
	}
	// The next scheduled fit (at 6 accepted samples) runs with a live context.
	for i := 0; i < 3; i++ {
		e.Observe(steady(0.25+float64(i)/4, 0))
	}
	if est, _ := e.Estimate([]float64{0.5}); est.Source != SourceGP {
		t.Errorf("after the next fit the source is %q, want gp", est.Source)
	}
}

// TestScreeningDropsColdStartOutlier checks the retroactive residual filter: a contention
// outlier accepted during the cold start (stage 2 off) is removed at the first fit, so the
// GP is not bent around it. Without screening the GP would hold all 20 samples and
// predict well below the truth near x=0.5.
func TestScreeningDropsColdStartOutlier(t *testing.T) {
	e := mustEstimator(t, FilterTwoStage, Config{NMin: 20})
	for i := 0; i < 20; i++ {
		x := float64(i) / 19
		rel := 0.01 * float64(i%3-1)
		if i == 10 {
			rel = -0.5 // a GC pause that passes stage 1
		}
		if ok, r := e.Observe(steady(x, rel)); !ok {
			t.Fatalf("cold-start sample %d rejected: %s", i, r)
		}
	}
	if n := e.model.Len(); n != 19 {
		t.Errorf("GP holds %d samples after the first fit, want 19 (outlier screened out)", n)
	}
	x := 10.0 / 19
	est, err := e.Estimate([]float64{x})
	if err != nil {
		t.Fatal(err)
	}
	// Neighbours at ±1/19 with 1% noise pin the line: within 3% of the truth.
	if want := capacityAt(x); est.Source != SourceGP || math.Abs(est.Capacity-want)/want > 0.03 {
		t.Errorf("estimate at the outlier's features %+v, want ~%.1f from the GP", est, want)
	}
}

// TestSynchronousUsesUsefulTime checks that a synchronous operator's capacity is learned
// from starved and backpressured intervals alike (records per useful second), and that the
// throughput model rejects those intervals instead.
func TestSynchronousUsesUsefulTime(t *testing.T) {
	sync := mustEstimator(t, FilterTwoStage, Config{NMin: 5, Synchronous: true})
	tput := mustEstimator(t, FilterTwoStage, Config{NMin: 5})
	rng := rand.New(rand.NewPCG(2, 2))
	for i := 0; i < 40; i++ {
		x := rng.Float64()
		// An instance busy 40% of the interval (starved, empty queue): it completes
		// 40% of what it could, in 4 useful seconds.
		c := capacityAt(x) * (1 + 0.02*rng.NormFloat64())
		s := Sample{Interval: 10 * time.Second, Records: 0.4 * c * 10, BusySeconds: 4, UsefulSeconds: 4,
			Utilization: 0.4, Features: []float64{x}}
		if ok, r := sync.Observe(s); !ok {
			t.Fatalf("synchronous sample %d rejected: %s", i, r)
		}
		if ok, _ := tput.Observe(s); ok {
			t.Fatalf("starved throughput sample %d accepted", i)
		}
	}
	est, err := sync.Estimate([]float64{0.7})
	if err != nil {
		t.Fatal(err)
	}
	// 40 samples with 2% noise along a line, as in TestColdStartEMAThenGP: within 3% of 170.
	// A throughput model of the same samples would sit at 40% of it.
	if math.Abs(est.Capacity-170)/170 > 0.03 {
		t.Errorf("synchronous estimate %+v, want ~170", est)
	}
	sync5 := mustEstimator(t, FilterTwoStage, Config{NMin: 5, Synchronous: true, MinSyncRecords: 5})
	few := Sample{Interval: 10 * time.Second, Records: 4, BusySeconds: 1, UsefulSeconds: 1, Utilization: 0.1, Features: []float64{0.5}}
	if ok, r := sync5.Observe(few); ok || r != ReasonFewRecords {
		t.Errorf("sample of %v records: accepted=%v reason %q, want %q", few.Records, ok, r, ReasonFewRecords)
	}
	if ok, r := sync.Observe(Sample{Interval: 10 * time.Second, Features: []float64{0.5}}); ok || !strings.HasPrefix(r, ReasonInvalid) {
		t.Errorf("sample without useful time: accepted=%v reason %q, want invalid", ok, r)
	}
}

// TestPartlyBlockedRate checks that an interval whose output was blocked for part of it
// (less than MaxBlocked) is measured over its unblocked time: 900 records in 10 s, 1 s of
// them blocked, is 100 records/s of capacity, not 90.
func TestPartlyBlockedRate(t *testing.T) {
	e := mustEstimator(t, FilterTwoStage, Config{})
	s := steady(0, 0)
	s.Records, s.OutputBlockedSeconds = 900, 0.9
	if ok, r := e.Observe(s); !ok {
		t.Fatalf("rejected: %s", r)
	}
	est, err := e.Estimate([]float64{0})
	if err != nil {
		t.Fatal(err)
	}
	if want := 900 / 9.1; math.Abs(est.Capacity-want) > 1e-9 {
		t.Errorf("capacity %v, want %v (records over the unblocked 9.1 s)", est.Capacity, want)
	}
}

// TestRefitsFollowTheNewRegime checks the refit schedule after a regime shift that keeps
// a few old samples (here those of another workload): the fit made at once rests on the
// run and those few samples, so the next refits must follow the doubling of the samples
// the model now holds. The schedule used to count every sample accepted since the reset
// and wait for that count to double (up to RefitEvery, 400): a fit on 17 samples that
// took two regimes for 60% noise then stood for 450 intervals (bench observe -robust,
// bursty starvation seed 9). Within 40 samples after the shift the hyperparameters must
// be refitted at least twice more.
func TestRefitsFollowTheNewRegime(t *testing.T) {
	e := mustEstimator(t, FilterTwoStage, Config{})
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 300; i++ {
		x := 0.5 + 0.02*rng.NormFloat64()
		if i%30 == 0 {
			x = 0.95 // another workload, far from the shift
		}
		e.Observe(steady(x, 0.02*rng.NormFloat64()))
	}
	for i := 0; i < 4; i++ {
		e.Observe(steady(0.5, -0.5+0.02*rng.NormFloat64()))
	}
	if e.Shifts() != 1 {
		t.Fatalf("%d shifts, want 1", e.Shifts())
	}
	if n := e.model.Len(); n >= 50 {
		t.Fatalf("%d samples kept after the shift, want only the other workload's and the run", n)
	}
	refits, prev := 0, e.Hyper()
	for i := 0; i < 40; i++ {
		e.Observe(steady(0.5+0.02*rng.NormFloat64(), -0.5+0.02*rng.NormFloat64()))
		if h := e.Hyper(); !reflect.DeepEqual(h, prev) {
			refits, prev = refits+1, h
		}
	}
	if refits < 2 {
		t.Errorf("%d refits in the 40 samples after the shift, want at least 2", refits)
	}
}

// TestWarmUpRelease checks the release of samples rejected only by the warm-up rule: a
// flat series (a warm engine) is admitted as soon as two later samples at the same
// features are not faster, and a rising series (an engine warming up, 8% faster each
// interval) is never admitted.
func TestWarmUpRelease(t *testing.T) {
	series := func(rel func(i int) float64) *GPEstimator {
		e := mustEstimator(t, FilterTwoStage, Config{})
		for i := 0; i < 6; i++ {
			s := steady(0.5, rel(i))
			s.Uptime = time.Duration(10*(i+1)) * time.Second
			if ok, r := e.Observe(s); ok || r != ReasonWarmUp {
				t.Fatalf("sample %d: accepted=%v reason %q, want a warm-up rejection", i, ok, r)
			}
		}
		return e
	}
	if n := series(func(i int) float64 { return 0.01 * float64(i%2) }).Accepted(); n != 4 {
		t.Errorf("flat series: %d samples admitted, want the first 4", n)
	}
	if n := series(func(i int) float64 { return -0.4 + 0.08*float64(i) }).Accepted(); n != 0 {
		t.Errorf("rising series: %d samples admitted, want none", n)
	}
}
