package observe_test

import (
	"log/slog"
	"math"
	"slices"
	"testing"

	"github.com/trident-sched/trident/apm/enginesim"
	"github.com/trident-sched/trident/apm/gp"
	"github.com/trident-sched/trident/apm/observe"
)

// These tests replay segments of apm/enginesim traces — an engine model the filter was not
// developed on — through the two-stage estimator and check that each failure mode of issue
// #21 is handled. Tolerances are stated per test; every trace is seeded.

// step is one replayed interval: the estimate made before its sample, and the verdict.
type step struct {
	p        enginesim.Point
	est      float64 // capacity estimate before the sample (0: none)
	accepted bool
	reason   string
}

func replay(t *testing.T, kind enginesim.Kind, seed uint64, intervals int) []step {
	t.Helper()
	tr, err := enginesim.Generate(enginesim.Config{Kind: kind, Seed: seed, Intervals: intervals})
	if err != nil {
		t.Fatal(err)
	}
	cfg := observe.DefaultConfig()
	cfg.Fit = gp.FitOptions{Seed: seed}
	cfg.Logger = slog.New(slog.DiscardHandler)
	e, err := observe.NewGPEstimator(len(tr.Features), observe.FilterTwoStage, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []step
	var epoch uint64
	for _, p := range tr.Points {
		if p.Sample.Epoch != epoch {
			epoch = p.Sample.Epoch
			e.Reset()
		}
		st := step{p: p}
		if est, err := e.Estimate(p.Sample.Features); err == nil {
			st.est = est.Capacity
		}
		st.accepted, st.reason = e.Observe(p.Sample)
		out = append(out, st)
	}
	return out
}

// rejectedShare returns the fraction of the intervals with one of conds that were rejected.
func rejectedShare(steps []step, conds ...enginesim.Condition) (share float64, n int) {
	rej := 0
	for _, s := range steps {
		for _, c := range conds {
			if s.p.Condition == c {
				n++
				if !s.accepted {
					rej++
				}
			}
		}
	}
	return float64(rej) / math.Max(float64(n), 1), n
}

// checkNoDrift checks every starved episode of at least 10 intervals after the warm-up
// (the GP fitted, the estimate within 10% of the truth when it starts, the capacity
// unchanged through it): 10 intervals in, the estimate must not have fallen more than tol
// below the truth. An estimator that learns from starved samples follows the starved rate
// (here 20-90% of capacity) down; the GP's own feature noise moves it both ways.
func checkNoDrift(t *testing.T, steps []step, tol float64) {
	t.Helper()
	checked := 0
	for i := 100; i+10 < len(steps); i++ {
		s := steps[i]
		if s.p.Condition != enginesim.Starved || steps[i-1].p.Condition == enginesim.Starved {
			continue
		}
		if math.Abs(s.est-s.p.Capacity) > 0.1*s.p.Capacity {
			continue
		}
		ok := true
		for j := i; j <= i+10; j++ {
			ok = ok && steps[j].p.Condition == enginesim.Starved && steps[j].p.Capacity == s.p.Capacity
		}
		if !ok {
			continue
		}
		checked++
		end := steps[i+10]
		if drop := (end.p.Capacity - end.est) / end.p.Capacity; drop > tol {
			t.Errorf("starved episode from interval %d: estimate %.2f after 10 intervals, truth %.2f (%.0f%% below, tolerance %.0f%%)",
				i, end.est, end.p.Capacity, 100*drop, 100*tol)
		}
	}
	if checked == 0 {
		t.Fatal("no starved episode to check")
	}
	t.Logf("%d starved episodes checked", checked)
}

// acceptedClean returns the fraction of truly saturated intervals accepted.
func acceptedClean(steps []step) float64 {
	share, _ := rejectedShare(steps, enginesim.Saturated)
	return 1 - share
}

// A batching engine behind a bounded client semaphore: its queue gauge counts the requests
// in flight (never empty while anything runs) and its utilisation is a busy fraction (~1
// whenever anything runs), so neither the empty-queue nor the utilisation rule can see it
// starve; the queue-trend rules caught 91% of the starved intervals but also rejected half
// of the saturated ones (a draining or growing queue with a backlog throughout). Its own
// gauges tell: nothing waits. Every starved interval must be rejected (99%), at least 80%
// of the saturated ones accepted, and across each long starved episode the estimate must
// not fall more than 10% below the truth.
func TestStarvationBehindBoundedQueue(t *testing.T) {
	steps := replay(t, enginesim.LongStarvation, 1, 1200)
	share, n := rejectedShare(steps, enginesim.Starved)
	if share < 0.99 {
		t.Errorf("rejected %.1f%% of %d starved intervals, want >= 99%%", 100*share, n)
	}
	if a := acceptedClean(steps); a < 0.8 {
		t.Errorf("accepted %.1f%% of the saturated intervals, want >= 80%%", 100*a)
	}
	checkNoDrift(t, steps, 0.10)
}

// Documents arrive in bursts of heavy-tailed size below capacity: the queue fills and
// empties within an interval, so few intervals are empty at both ends of a whole window,
// which the old rule needed. At least 95% of the intermittently and fully starved intervals
// must be rejected and at least 80% of the saturated ones accepted.
func TestIntermittentStarvation(t *testing.T) {
	steps := replay(t, enginesim.BurstyStarvation, 1, 1200)
	share, n := rejectedShare(steps, enginesim.Intermittent, enginesim.Starved)
	if share < 0.95 {
		t.Errorf("rejected %.1f%% of %d starved or intermittently starved intervals, want >= 95%%", 100*share, n)
	}
	if a := acceptedClean(steps); a < 0.8 {
		t.Errorf("accepted %.1f%% of the saturated intervals, want >= 80%%", 100*a)
	}
	checkNoDrift(t, steps, 0.10)
}

// Neither the queue bound nor engine gauges are exported: only the queue gauge (counting
// requests in flight), the admission limit and counters. Fewer requests held than one full
// batch is starvation whatever the gauge counts, unless the queue stands above the running
// batch throughout (TestKVCappedBatchWithoutGauges), and a queue sitting at a plateau is at
// its (inferred) bound. Every starved interval must be rejected (99%) and at least 70% of
// the saturated ones accepted.
func TestStarvationWithoutEngineGauges(t *testing.T) {
	steps := replay(t, enginesim.UnreportedBound, 1, 1200)
	share, n := rejectedShare(steps, enginesim.Starved)
	if share < 0.99 {
		t.Errorf("rejected %.1f%% of %d starved intervals, want >= 99%%", 100*share, n)
	}
	if a := acceptedClean(steps); a < 0.7 {
		t.Errorf("accepted %.1f%% of the saturated intervals, want >= 70%%", 100*a)
	}
}

// Without engine gauges or a queue bound, a population of long requests whose KV cache caps
// the batch far below the admission limit (seed 45: prompts of 3,400 tokens, about 65
// requests running against a limit of 192) is saturated with fewer requests in flight than
// the limit. Taking "fewer than the limit" for starvation rejected every such interval
// (0 of the 60 clean ones below the limit at both readings), so for 27 intervals the
// estimate at the new features was the GP's prior, 18 against a truth of 3.3. The queue
// standing above the running batch (useful seconds per second) throughout the window shows
// requests waiting: at least 40% of those intervals must now be accepted (measured 32 of
// 60, 53%, with the residual filter's verdicts on top of the signal filter's), and no more
// than 1% of the starved intervals (measured: none of 482).
func TestKVCappedBatchWithoutGauges(t *testing.T) {
	steps := replay(t, enginesim.UnreportedBound, 45, 2000)
	var n, acc int
	for _, s := range steps {
		lim := s.p.Sample.Engine.AdmissionLimit
		if s.p.Clean && s.p.Sample.QueueStart < lim && s.p.Sample.QueueEnd < lim {
			n++
			if s.accepted {
				acc++
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d KV-capped clean intervals below the admission limit, want >= 30", n)
	}
	if share := float64(acc) / float64(n); share < 0.4 {
		t.Errorf("accepted %d of %d KV-capped clean intervals (%.0f%%), want >= 40%%", acc, n, 100*share)
	}
	if share, n := rejectedShare(steps, enginesim.Starved); share < 0.99 {
		t.Errorf("rejected %.1f%% of %d starved intervals, want >= 99%%", 100*share, n)
	}
}

// The workload switches between request populations whose token lengths differ by 10% at
// most but whose prompt cost differs up to 4.5×: the capacity moves while the features
// barely do. The residual filter used to lock the new regime out (one sample in ten
// accepted, the next refit waiting for the accepted count to double). After every capacity
// change of more than 20%, the estimate must be within 10% of the new truth once 8 clean
// intervals of the new regime have been observed (4 for the run test, 4 to settle).
func TestHiddenWorkloadShift(t *testing.T) {
	steps := replay(t, enginesim.WorkloadShift, 1, 1500)
	checked := 0
	for i := 150; i < len(steps); i++ {
		prev, cur := steps[i-1].p.Capacity, steps[i].p.Capacity
		if math.Abs(cur-prev) < 0.2*prev {
			continue
		}
		clean := 0
		for j := i; j < len(steps) && steps[j].p.Capacity == cur; j++ {
			if steps[j].p.Clean {
				clean++
			}
			if clean == 8 && j+1 < len(steps) {
				checked++
				next := steps[j+1]
				if err := math.Abs(next.est-cur) / cur; err > 0.1 {
					t.Errorf("capacity %.2f -> %.2f at interval %d: estimate %.2f after 8 clean intervals (%.0f%% off, tolerance 10%%)",
						prev, cur, i, next.est, 100*err)
				}
				break
			}
		}
	}
	if checked == 0 {
		t.Fatal("no capacity change to check")
	}
	t.Logf("%d capacity changes checked", checked)
}

// settleErrors returns, for every capacity change of more than 20% after interval 150,
// the estimate's relative error once `clean` clean intervals of the new level have been
// observed, and the interval of the change.
func settleErrors(steps []step, clean int) (errs []float64, at []int) {
	for i := 150; i < len(steps); i++ {
		prev, cur := steps[i-1].p.Capacity, steps[i].p.Capacity
		if math.Abs(cur-prev) < 0.2*prev || steps[i].p.Sample.Epoch != steps[i-1].p.Sample.Epoch {
			continue
		}
		n := 0
		for j := i; j+1 < len(steps) && steps[j+1].p.Capacity == cur; j++ {
			if steps[j].p.Clean {
				n++
			}
			if n == clean {
				errs, at = append(errs, math.Abs(steps[j+1].est-cur)/cur), append(at, i)
				break
			}
		}
	}
	return errs, at
}

// scoredMAPE is the mean relative error of the estimates as `trident bench observe
// -robust` scores them: from interval 20 on, once a clean interval of the same regime
// (configuration and request population) has been seen in the current epoch.
func scoredMAPE(steps []step) float64 {
	sum, n := 0.0, 0
	seen := map[[2]int]bool{}
	for i, s := range steps {
		if i > 0 && s.p.Sample.Epoch != steps[i-1].p.Sample.Epoch {
			clear(seen)
		}
		if i >= 20 && seen[s.p.Regime] {
			sum += math.Abs(s.est-s.p.Capacity) / s.p.Capacity
			n++
		}
		seen[s.p.Regime] = seen[s.p.Regime] || s.p.Clean
	}
	return sum / math.Max(float64(n), 1)
}

// TestWorkloadReturnsAfterShift replays traces whose workload alternates between request
// populations of different token lengths, with starvation between them. The regime-shift
// path used to drop every old sample within one fitted length scale of the run; with
// long length scales that was every workload's samples, so when an earlier workload
// returned the GP extrapolated the last one's level to it (long starvation seed 2: 53
// against a truth of 11.3, then 17 against 52). Its refit after a shift rested on the
// few samples left, and the next refit waited for the count of all samples since the
// reset to double (up to RefitEvery): bursty starvation seed 9 kept a fit with 60% noise
// and reported 20 against a truth of 16.4 for 450 intervals. After every capacity change
// of more than 20% within an epoch, the estimate must be within 25% of the new truth
// once 20 clean intervals of it have been observed (the engine drains the old requests
// first: its rate lags the new truth for about 15 intervals; the tolerance was 15% until
// the warm-up release changed seed 9's first fits, after which two changes settle to 16%
// and 22% off where the clean floor is 6% and 4% off: a new workload next to a well-sampled
// one is learnt over about 40 intervals, as the long length scales make it look covered
// and the residual filter rejects part of its samples), and on seed 9's long regime
// (intervals 1500–1900) the mean error must stay below 3% (20% before). Over the whole
// trace, scored as the benchmark scores it, the error must stay below 5% on long
// starvation seed 2 (7.9% with the refit schedule fixed alone; the clean-sample floor is
// 2.9%) and below 12% on bursty starvation seed 9 (15.1% before, 12.2% with the refit
// schedule fixed alone, 11.6% after it; floor 9.1%). The figures in parentheses were
// measured under the benchmark's earlier mask, which also scored workloads never seen
// saturated.
func TestWorkloadReturnsAfterShift(t *testing.T) {
	for _, tc := range []struct {
		kind enginesim.Kind
		seed uint64
		tol  float64
	}{{enginesim.LongStarvation, 2, 0.05}, {enginesim.BurstyStarvation, 9, 0.12}} {
		steps := replay(t, tc.kind, tc.seed, 2000)
		if m := scoredMAPE(steps); m > tc.tol {
			t.Errorf("%s seed %d: MAPE %.1f%% over the trace (tolerance %.0f%%)", tc.kind, tc.seed, 100*m, 100*tc.tol)
		}
		errs, at := settleErrors(steps, 20)
		if len(errs) == 0 {
			t.Fatalf("%s seed %d: no capacity change to check", tc.kind, tc.seed)
		}
		for k, e := range errs {
			if e > 0.25 {
				t.Errorf("%s seed %d: capacity change at interval %d: estimate %.0f%% off after 20 clean intervals (tolerance 25%%)", tc.kind, tc.seed, at[k], 100*e)
			}
		}
		t.Logf("%s seed %d: %d capacity changes checked", tc.kind, tc.seed, len(errs))
		if tc.kind != enginesim.BurstyStarvation {
			continue
		}
		sum, n := 0.0, 0
		for _, s := range steps[1500:1900] {
			sum += math.Abs(s.est-s.p.Capacity) / s.p.Capacity
			n++
		}
		if m := sum / float64(n); m > 0.03 {
			t.Errorf("%s seed %d: mean error %.1f%% over intervals 1500-1900 (tolerance 3%%)", tc.kind, tc.seed, 100*m)
		}
	}
}

// returnErrors returns, for every return of a regime (configuration and request population)
// last seen saturated at least `absent` intervals before, the estimate's relative error at
// the first interval of the return whose features are within 10% of those of that last
// saturated sample (the features of a returning workload move to it over several
// intervals), and the interval of the return.
func returnErrors(steps []step, absent int) (errs []float64, at []int) {
	type seen struct {
		i int
		x []float64
	}
	last := map[[2]int]seen{}
	near := func(a, b []float64) bool {
		for k := range a {
			if math.Abs(a[k]-b[k]) > 0.1*math.Abs(b[k]) {
				return false
			}
		}
		return true
	}
	for i := 1; i < len(steps); i++ {
		p, prev := steps[i].p, steps[i-1].p
		if p.Sample.Epoch != prev.Sample.Epoch {
			clear(last)
		}
		if l, ok := last[p.Regime]; ok && p.Regime != prev.Regime && i-l.i >= absent {
			for j := i; j < len(steps) && steps[j].p.Regime == p.Regime; j++ {
				if near(steps[j].p.Sample.Features, l.x) {
					s := steps[j]
					errs, at = append(errs, math.Abs(s.est-s.p.Capacity)/s.p.Capacity), append(at, i)
					break
				}
			}
		}
		if prev.Clean {
			last[prev.Regime] = seen{i - 1, prev.Sample.Features}
		}
	}
	return errs, at
}

// TestReturningWorkloadKeepsItsSamples replays traces in which a workload returns after
// hundreds of intervals of another one. The GP's 200-sample window used to evict the
// oldest sample that had a neighbour, so the early workload's samples went one by one
// (each still had a neighbour) while the current workload filled the window; when the
// early one returned, starved, the GP had nothing of it and reverted to its prior mean
// (unreported bound seed 9: 20 against a truth of 5.9; bursty starvation seed 9: 15.6
// against 3.4). The window now evicts the oldest sample of its crowded regions, with
// regions measured in relative feature distance as well as in length scales. At every
// return of a workload last seen saturated 300 or more intervals before, once the reported
// features are back within 10% of that sample's, the estimate must be within 20% of the
// truth.
func TestReturningWorkloadKeepsItsSamples(t *testing.T) {
	for _, tc := range []struct {
		kind enginesim.Kind
		seed uint64
	}{{enginesim.BurstyStarvation, 9}, {enginesim.BurstyStarvation, 5}} {
		steps := replay(t, tc.kind, tc.seed, 2000)
		errs, at := returnErrors(steps, 300)
		if len(errs) == 0 {
			t.Fatalf("%s seed %d: no returning workload to check", tc.kind, tc.seed)
		}
		for k, e := range errs {
			if e > 0.2 {
				t.Errorf("%s seed %d: workload returning at interval %d: estimate %.0f%% off once its features are back (tolerance 20%%)", tc.kind, tc.seed, at[k], 100*e)
			}
		}
		t.Logf("%s seed %d: %d returns checked", tc.kind, tc.seed, len(errs))
	}
}

// TestLaggingRateIsNoShift replays a workload switch behind a deep queue: long
// starvation seed 4 switches at interval 205 from a workload of capacity 6.3 to one of
// 23.8 that the GP already knows, while the engine holds 450 requests of the old one. The
// reported features (of the requests received) reach the new workload within four
// intervals, but the engine completes the old requests at the old rate for about seven
// (Little's law: 450 requests at 6.5/s). Those four samples used to be taken for a regime
// shift at the new workload's features: the shift dropped its correct samples and the GP
// reported 6-9 against the truth of 23.8 through the 80 starved intervals that followed.
// Samples whose features moved within the time their requests spent in the operator are
// now no evidence of a shift. Over intervals 210-300 the mean error must stay below 5%.
func TestLaggingRateIsNoShift(t *testing.T) {
	steps := replay(t, enginesim.LongStarvation, 4, 320)
	sum := 0.0
	for _, s := range steps[210:300] {
		sum += math.Abs(s.est-s.p.Capacity) / s.p.Capacity
	}
	if m := sum / 90; m > 0.05 {
		t.Errorf("mean error %.1f%% over intervals 210-300 (tolerance 5%%)", 100*m)
	}
}

// TestWarmEngineAfterStart replays configuration changes whose engine was saturated only
// within the first two minutes after a (re)start, the window the warm-up rule rejects, and
// starved afterwards. Configuration changes seed 7 starts warm (no slow-down), saturated
// for 11 intervals, then starves until interval 86: the estimator used to have no
// estimate at all there. Seed 1's last epoch serves a workload of capacity 7.5 that is
// saturated only in its warm-up window; the estimator, without a sample of it, reported
// 25 for 35 intervals (1743-1777). Warm-up samples are now admitted once the next two
// at their features are not faster. Over intervals 20-85 of seed 7 the mean error must
// stay below 3%, and over intervals 1745-1777 of seed 1 below 15% (one warm-up sample of
// that workload is admitted, at 8.8 against the truth of 7.5; the clean floor holds four
// and is about 3% off).
func TestWarmEngineAfterStart(t *testing.T) {
	for _, tc := range []struct {
		seed     uint64
		from, to int
		tol      float64
	}{{7, 20, 86, 0.03}, {1, 1745, 1778, 0.15}} {
		steps := replay(t, enginesim.ConfigChange, tc.seed, 2000)
		sum := 0.0
		for _, s := range steps[tc.from:tc.to] {
			sum += math.Abs(s.est-s.p.Capacity) / s.p.Capacity
		}
		if m := sum / float64(tc.to-tc.from); m > tc.tol {
			t.Errorf("config changes seed %d: mean error %.1f%% over intervals %d-%d (tolerance %.0f%%)", tc.seed, 100*m, tc.from, tc.to, 100*tc.tol)
		}
	}
}

// TestNewWorkloadNextToAKnownOne replays unreported bound seed 19 (a seed none of the
// filter's tuning looked at): for 740 intervals the engine serves workloads of prompts
// near 300 tokens, then one of prompts near 3600 (capacity 7.8 against 12.3) arrives.
// Fitted to prompts that hardly vary, the length scale of the prompt feature had grown to
// about 60 000 tokens, a model in which the prompt does not matter: the GP predicted 36
// at the new prompts, confidently enough for the residual filter to reject their samples
// until a shift run formed (intervals 747-752). Length scales are now capped at three
// times their feature's spread over the samples held (Config.MaxLengthScale), so the new
// prompts are new ground and their first saturated sample is admitted unjudged. Over
// intervals 748-753, the six after that first sample, the mean error must stay below
// 15 % (old code: about 365 %; the clean floor is 2-8 % off there, this code 7.7 % on
// average, and one interval's rate carries about 10 % noise).
func TestNewWorkloadNextToAKnownOne(t *testing.T) {
	steps := replay(t, enginesim.UnreportedBound, 19, 800)
	sum := 0.0
	for _, s := range steps[748:754] {
		if s.p.Regime != steps[747].p.Regime {
			t.Fatalf("regime %v is not the new workload %v", s.p.Regime, steps[747].p.Regime)
		}
		sum += math.Abs(s.est-s.p.Capacity) / s.p.Capacity
	}
	m := sum / 6
	if m > 0.15 {
		t.Errorf("mean error %.0f%% over intervals 748-753 (tolerance 15%%)", 100*m)
	}
	t.Logf("mean error %.1f%% over intervals 748-753", 100*m)
}

// saturatedErrors returns the relative errors of the estimates at the saturated intervals
// from..to (inclusive), checking that the regime does not change in between.
func saturatedErrors(t *testing.T, steps []step, from, to int) (errs, ests []float64) {
	t.Helper()
	for i := from; i <= to; i++ {
		s := steps[i]
		if s.p.Regime != steps[from].p.Regime {
			t.Fatalf("interval %d: regime %v, want the stretch's %v (trace changed?)", i, s.p.Regime, steps[from].p.Regime)
		}
		if s.p.Condition != enginesim.Saturated {
			continue
		}
		if s.est == 0 {
			t.Fatalf("interval %d: no estimate", i)
		}
		errs = append(errs, math.Abs(s.est-s.p.Capacity)/s.p.Capacity)
		ests = append(ests, s.est)
	}
	if len(errs) < 30 {
		t.Fatalf("only %d saturated intervals in %d..%d", len(errs), from, to)
	}
	return errs, ests
}

// TestModerateHiddenShift replays a hidden workload change too small for the run rule
// (workload-shift seed 14, interval 827: capacity 6.07 -> 4.93, about two noise
// deviations of the model, with identical features). Its samples fall on both sides of
// the residual threshold, so no four rejections come in a row; the old code averaged the
// accepted half with 150 samples of the old level and reported 5.5-6.3 for the next 100
// intervals. The CUSUM test (Config.DriftLimit) must take it for a shift: over the
// saturated intervals 10-108 intervals after the change (837-935) the estimate must be
// within 15 % of the truth at every interval and within 5 % on average.
func TestModerateHiddenShift(t *testing.T) {
	steps := replay(t, enginesim.WorkloadShift, 14, 1000)
	if steps[826].p.Capacity == steps[827].p.Capacity {
		t.Fatal("no workload change at interval 827 (trace changed?)")
	}
	errs, _ := saturatedErrors(t, steps, 837, 935)
	sum := 0.0
	for i, e := range errs {
		sum += e
		if e > 0.15 {
			t.Errorf("saturated interval #%d after 837: %.0f%% off (tolerance 15%%)", i, 100*e)
		}
	}
	if m := sum / float64(len(errs)); m > 0.05 {
		t.Errorf("mean error %.1f%% over %d saturated intervals, tolerance 5%%", 100*m, len(errs))
	}
}

// TestFeatureJitterIsNoEffect replays a stationary stretch of the same trace (intervals
// 891-935: one request population, capacity 4.93, since interval 827, after the shift has
// been handled). Its features are per-interval means that scatter by about 100 prompt
// tokens around 2200 while the capacity stays put, and the rates carry about 10 % noise.
// Every estimate must stay within 10 % of the truth, and the estimates' range within
// 12 % of it. Without the JitterLengthScale floor the GP fitted a prompt length scale of
// about 110 tokens, read single intervals' rate noise as a steep feature effect and swung
// between 4.5 and 6.1 from interval to interval.
func TestFeatureJitterIsNoEffect(t *testing.T) {
	steps := replay(t, enginesim.WorkloadShift, 14, 1000)
	errs, ests := saturatedErrors(t, steps, 891, 935)
	for i, e := range errs {
		if e > 0.10 {
			t.Errorf("saturated interval #%d after 891: estimate %.2f, %.0f%% off (tolerance 10%%)", i, ests[i], 100*e)
		}
	}
	if r := (slices.Max(ests) - slices.Min(ests)) / steps[891].p.Capacity; r > 0.12 {
		t.Errorf("estimates range over %.0f%% of the truth (%.2f-%.2f), tolerance 12%%", 100*r, slices.Min(ests), slices.Max(ests))
	}
}

// TestSmallDriftIsNoShift replays one workload of bursty-starvation seed 20 (intervals
// 0-459, capacity 28.57 throughout). Its rates run a few percent below the estimate for
// tens of intervals at a time, as the batch's composition drifts: around interval 254 the
// CUSUM test crossed its limit on a run 3.5 % below a correct estimate, and the shift
// dropped the workload's 150 samples (the trace's MAPE went from 3.9 to 5.3 %). Such a
// drift is below Config.DriftMinShift: no regime shift may be registered in the stretch.
func TestSmallDriftIsNoShift(t *testing.T) {
	tr, err := enginesim.Generate(enginesim.Config{Kind: enginesim.BurstyStarvation, Seed: 20, Intervals: 460})
	if err != nil {
		t.Fatal(err)
	}
	cfg := observe.DefaultConfig()
	cfg.Fit = gp.FitOptions{Seed: 20}
	cfg.Logger = slog.New(slog.DiscardHandler)
	e, err := observe.NewGPEstimator(len(tr.Features), observe.FilterTwoStage, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range tr.Points {
		if p.Regime != tr.Points[0].Regime || p.Capacity != tr.Points[0].Capacity || p.Sample.Epoch != tr.Points[0].Sample.Epoch {
			t.Fatalf("interval %d: regime %v, capacity %.2f: the stretch changed (trace changed?)", i, p.Regime, p.Capacity)
		}
		e.Observe(p.Sample)
	}
	if n := e.Shifts(); n != 0 {
		t.Errorf("%d regime shifts registered on one workload of constant capacity, want 0", n)
	}
}

// TestWorkloadReturnsInStints replays unreported-bound seed 34: a request population six
// times faster than the others (45.45 against 7.5-15 records/s, features far from theirs)
// comes back in short stints between them, mostly starved, with two or three saturated
// intervals each time. Its saturated intervals are rejected by the model residual, and
// with one run of residual rejections, ended by any sample accepted elsewhere, no run ever
// reached four: the estimate stayed at 8.3 (82 % low) until interval 1323. Runs kept per
// place (GPEstimator.addToRun) take the population's fourth rejection, at interval 1006,
// for a shift. Every saturated interval of the population in 1030-1200 must be estimated
// within 10 % (they are within 5 %; the old code was 80 % off).
func TestWorkloadReturnsInStints(t *testing.T) {
	steps := replay(t, enginesim.UnreportedBound, 34, 1200)
	n := 0
	for i := 1030; i < 1200; i++ {
		s := steps[i]
		if s.p.Regime[1] != 1 || s.p.Condition != enginesim.Saturated {
			continue
		}
		n++
		if e := math.Abs(s.est-s.p.Capacity) / s.p.Capacity; e > 0.10 {
			t.Errorf("interval %d: estimate %.2f, truth %.2f (%.0f%% off, tolerance 10%%)", i, s.est, s.p.Capacity, 100*e)
		}
	}
	if n < 4 {
		t.Fatalf("%d saturated intervals of the fast population in 1030-1200, want at least 4 (trace changed?)", n)
	}
}

// TestResidualFilterKeepsCleanSamples replays backpressure seed 14 over one workload
// (intervals 460-999, capacity 3.17). The GP's fitted noise there runs well below the
// rates' scatter (the fit explains part of it with the features), and the residual
// filter, judging by the fitted noise alone, rejected 33 % of the saturated intervals.
// Judged by the residuals' own robust scale as well (GPEstimator.residualScale), at most
// 5 % of them may be rejected by the model residual (0.9 % are), with the mean error over
// them within 3 % (1.9 %; 1.8 % before).
func TestResidualFilterKeepsCleanSamples(t *testing.T) {
	steps := replay(t, enginesim.Backpressure, 14, 1000)
	n, rejected, sum := 0, 0, 0.0
	for i := 460; i < 1000; i++ {
		s := steps[i]
		if s.p.Capacity != steps[460].p.Capacity || s.p.Regime != steps[460].p.Regime {
			t.Fatalf("interval %d: capacity %.2f, want the stretch's %.2f (trace changed?)", i, s.p.Capacity, steps[460].p.Capacity)
		}
		if s.p.Condition != enginesim.Saturated {
			continue
		}
		n++
		if s.reason == observe.ReasonResidual {
			rejected++
		}
		sum += math.Abs(s.est-s.p.Capacity) / s.p.Capacity
	}
	if n < 100 {
		t.Fatalf("%d saturated intervals, want at least 100 (trace changed?)", n)
	}
	if share := float64(rejected) / float64(n); share > 0.05 {
		t.Errorf("%.1f%% of %d saturated intervals rejected by the model residual, tolerance 5%%", 100*share, n)
	}
	if m := sum / float64(n); m > 0.03 {
		t.Errorf("mean error %.1f%% over %d saturated intervals, tolerance 3%%", 100*m, n)
	}
}

// Unreported bound seed 59 starts with one population (49 records/s) for 40 intervals, so
// the first fits see one region and length scales of its scatter. A second population
// (4.2 records/s, ten times longer requests) then has its first saturated samples accepted
// at 43-46. With the early refit waiting for NMin (10) such samples, the GP kept the first
// region's length scales, and a few tokens from the new samples it reverted to 49: the
// estimate swung between 6 and 45 through interval 63. Refitting after UncoveredRefit (4)
// of them, every estimate of 47-63 must be within 15% of the truth (measured: within
// 7.7%; the tolerance is twice that, for the GP's noise).
func TestNewRegionRefitsEarly(t *testing.T) {
	steps := replay(t, enginesim.UnreportedBound, 59, 70)
	for i := 47; i <= 63; i++ {
		s := steps[i]
		if s.p.Capacity != steps[47].p.Capacity {
			t.Fatalf("interval %d: capacity %.2f, want the second population's %.2f throughout", i, s.p.Capacity, steps[47].p.Capacity)
		}
		if off := math.Abs(s.est-s.p.Capacity) / s.p.Capacity; off > 0.15 {
			t.Errorf("interval %d: estimate %.2f, truth %.2f (%.0f%% off, tolerance 15%%)", i, s.est, s.p.Capacity, 100*off)
		}
	}
}
