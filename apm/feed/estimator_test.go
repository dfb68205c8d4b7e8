package feed

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/trident-sched/trident/apm/observe"
	"github.com/trident-sched/trident/planner/fsm"
)

// steady builds snapshots of one instance processing rate records/s with noise, a stable
// queue and high utilisation: the conditions under which the filter accepts samples.
func steady(n int, rate float64, epoch float64, rng *rand.Rand) []Snapshot {
	t0 := time.Unix(1_000_000, 0)
	var out []Snapshot
	in, busy, useful := 0.0, 0.0, 0.0
	for i := 0; i < n; i++ {
		out = append(out, Snapshot{Time: t0.Add(time.Duration(i) * 5 * time.Second), Instances: map[string]Instance{
			"a1": {RecordsIn: in, BusySeconds: busy, UsefulSeconds: useful, QueueLength: 100, Utilization: 0.9,
				FeatureMean: map[string]float64{"tokens": 512}, Epoch: epoch},
		}})
		in += rate * 5 * (1 + 0.02*rng.NormFloat64())
		busy += 5
		useful += 5
	}
	return out
}

func TestObservationEstimatorConverges(t *testing.T) {
	e := NewEstimator(nil)
	if err := e.Declare("pdf", "ocr", Declaration{Features: []string{"tokens"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Capacity("pdf", "ocr"); err == nil {
		t.Fatal("capacity before any scrape should be an error")
	}
	snaps := steady(40, 12, 0, rand.New(rand.NewPCG(1, 2)))
	for i := 1; i < len(snaps); i++ {
		e.Observe("pdf", "ocr", snaps[i-1], snaps[i])
	}
	got, err := e.Capacity("pdf", "ocr")
	if err != nil {
		t.Fatal(err)
	}
	// 2% per-interval noise averaged over 39 samples: 5% is > 10 standard errors of slack.
	if math.Abs(got-12)/12 > 0.05 {
		t.Errorf("capacity = %.3f, want 12 ± 5%%", got)
	}
	if st := e.Stats("pdf", "ocr"); st.Accepted < 30 {
		t.Errorf("accepted %d of 39 clean samples (rejections %v)", st.Accepted, st.Rejected)
	}
	// A committed config change starts a new epoch: old-epoch samples are then rejected.
	e.Invalidate("pdf", "ocr")
	old := steady(3, 30, 0, rand.New(rand.NewPCG(3, 4)))
	before := e.Stats("pdf", "ocr").Rejected["stale epoch"]
	e.Observe("pdf", "ocr", old[0], old[1])
	if after := e.Stats("pdf", "ocr").Rejected["stale epoch"]; after != before+1 {
		t.Errorf("stale-epoch rejections %d -> %d, want +1", before, after)
	}
}

func TestFeatureVector(t *testing.T) {
	m := Instance{FeatureMean: map[string]float64{"in": 3}, FeatureStd: map[string]float64{"in": 0.5}}
	got := featureVector([]string{"in", "in_std", "in_mean", "missing", "const"}, m)
	want := []float64{3, 0.5, 3, 0, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("feature %d = %v, want %v", i, got[i], want[i])
		}
	}
}

// A starved operator (empty queue) never passes the signal filter; its estimate falls back
// to the useful-time rate: 40 records per 10 s of processing = 4 records/s.
func TestStarvedOperatorFallsBackToUsefulTimeRate(t *testing.T) {
	e := NewEstimator(nil)
	if err := e.Declare("pdf", "parse", Declaration{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_000_000, 0)
	var prev Snapshot
	for i := 0; i < 6; i++ {
		cur := Snapshot{Time: t0.Add(time.Duration(i) * 5 * time.Second), Instances: map[string]Instance{
			"a": {RecordsIn: float64(40 * i), UsefulSeconds: float64(10 * i), QueueLength: 0, Utilization: 0.2},
		}}
		if i > 0 {
			e.Observe("pdf", "parse", prev, cur)
		}
		prev = cur
	}
	est, err := e.Estimate("pdf", "parse")
	if err != nil {
		t.Fatal(err)
	}
	if est.Source != SourceUsefulTime || math.Abs(est.Capacity-4) > 1e-9 {
		t.Errorf("estimate = %+v, want 4 rec/s from %s", est, SourceUsefulTime)
	}
	if st := e.Stats("pdf", "parse"); st.Accepted != 0 {
		t.Errorf("starved samples accepted: %+v", st)
	}
}

// A synchronous operator (trident_synchronous) is modelled by its useful-time rate, so
// starved intervals the throughput model rejects are accepted: 8 records in 2 useful
// seconds of each 5 s interval (empty queue, 40% busy) is a capacity of 4 records/s,
// where the interval's throughput is 1.6/s.
func TestSynchronousOperatorLearnsFromStarvedIntervals(t *testing.T) {
	e := NewEstimator(nil)
	if err := e.Declare("pdf", "parse", Declaration{Synchronous: true}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_000_000, 0)
	var prev Snapshot
	for i := 0; i < 12; i++ {
		cur := Snapshot{Time: t0.Add(time.Duration(i) * 5 * time.Second), Instances: map[string]Instance{
			"a": {RecordsIn: float64(8 * i), UsefulSeconds: float64(2 * i), BusySeconds: float64(2 * i), QueueLength: 0, Utilization: 0.4},
		}}
		if i > 0 {
			e.Observe("pdf", "parse", prev, cur)
		}
		prev = cur
	}
	st := e.Stats("pdf", "parse")
	if st.Accepted != 11 {
		t.Fatalf("accepted %d of 11 starved synchronous samples (rejections %v)", st.Accepted, st.Rejected)
	}
	est, err := e.Estimate("pdf", "parse")
	if err != nil {
		t.Fatal(err)
	}
	// Every sample is exactly 4 rec/s: the EMA (first 10) and GP agree to rounding.
	if est.Source == SourceUsefulTime || math.Abs(est.Capacity-4) > 0.01 {
		t.Errorf("estimate = %+v, want 4 rec/s from the observation layer", est)
	}
}

// An instance that reports its queue bound (trident_queue_capacity) and sits at it with a
// small batch is saturated: its samples are accepted whatever its utilisation. The same
// instance reporting its output blocked (trident_output_blocked_seconds_total grows by
// 2 s of every 5) is backpressured: rejected.
func TestQueueBoundAndBlockedOutput(t *testing.T) {
	for _, c := range []struct {
		name     string
		capacity float64
		blockedS float64 // per 5 s interval
		accept   bool
		reason   string
	}{
		{"bound not reported", 0, 0, false, "low utilization"},
		{"held at its queue bound", 105, 0, true, ""},
		{"queue full, output blocked", 105, 2, false, "output blocked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := NewEstimator(nil)
			if err := e.Declare("pdf", "ocr", Declaration{Features: []string{"tokens"}}); err != nil {
				t.Fatal(err)
			}
			snaps := steady(12, 12, 0, rand.New(rand.NewPCG(1, 2)))
			for i := range snaps {
				m := snaps[i].Instances["a1"]
				m.Utilization, m.QueueCapacity, m.OutputBlockedSeconds = 0.3, c.capacity, c.blockedS*float64(i)
				snaps[i].Instances["a1"] = m
			}
			for i := 1; i < len(snaps); i++ {
				e.Observe("pdf", "ocr", snaps[i-1], snaps[i])
			}
			st := e.Stats("pdf", "ocr")
			if c.accept && st.Accepted != len(snaps)-1 {
				t.Errorf("accepted %d of %d (rejections %v)", st.Accepted, len(snaps)-1, st.Rejected)
			}
			if !c.accept && (st.Accepted != 0 || st.Rejected[c.reason] != len(snaps)-1) {
				t.Errorf("accepted %d, rejections %v: want all %d rejected as %q", st.Accepted, st.Rejected, len(snaps)-1, c.reason)
			}
		})
	}
}

func TestCounterDelta(t *testing.T) {
	for _, c := range []struct{ old, cur, want float64 }{{10, 12.5, 2.5}, {10, 3, 3}, {0, 0, 0}} {
		if got := counterDelta(c.old, c.cur); got != c.want {
			t.Errorf("counterDelta(%v, %v) = %v, want %v (a reset counts from zero)", c.old, c.cur, got, c.want)
		}
	}
}

// The live plugin registers every operator with the configuration the benchmarks measure:
// no separate live settings (the old LiveConfig accepted draining queues with MaxDrain 1.5,
// a setting no benchmark ran).
func TestEstimatorConfigIsTheBenchmarkedOne(t *testing.T) {
	for _, sync := range []bool{false, true} {
		got := EstimatorConfig(Declaration{Synchronous: sync})
		want := observe.DefaultConfig()
		want.Synchronous = sync
		if !reflect.DeepEqual(got, want) {
			t.Errorf("synchronous=%v: live config %+v, benchmarked %+v", sync, got, want)
		}
	}
}

// An instance launched after the operator's first scrape is warming up: its samples of the
// first two minutes (observe.SignalConfig.WarmUp) are rejected, later ones accepted. The
// engine's running/waiting gauges reach the filter: with requests waiting at both ends,
// a small batch at low utilisation is saturated.
func TestFeedUptimeAndEngineGauges(t *testing.T) {
	e := NewEstimator(nil)
	if err := e.Declare("pdf", "ocr", Declaration{Features: []string{"tokens"}}); err != nil {
		t.Fatal(err)
	}
	snaps := steady(60, 12, 0, rand.New(rand.NewPCG(1, 2)))
	for i := range snaps {
		m := snaps[i].Instances["a1"]
		// Utilisation as a small batch would report it: the engine's gauges show 8 of 64
		// running with 20 waiting.
		m.Utilization, m.EngineReported, m.Running, m.Waiting, m.AdmissionLimit = 0.3, true, 8, 20, 64
		if i == 0 {
			snaps[i].Instances = map[string]Instance{"a0": m} // a1 is launched after this scrape
		} else {
			snaps[i].Instances["a1"] = m
		}
	}
	for i := 1; i < len(snaps); i++ {
		e.Observe("pdf", "ocr", snaps[i-1], snaps[i])
	}
	st := e.Stats("pdf", "ocr")
	// a1 appears at scrape 1 (t = 5 s), so its 58 samples end at 10 s, 15 s, ... 295 s;
	// those whose interval began before 2 min of uptime (ending before 130 s: 24) are
	// rejected, the other 34 accepted.
	if st.Rejected[observe.ReasonWarmUp] != 24 || st.Accepted != 34 {
		t.Errorf("accepted %d, rejections %v: want 24 warming up and 34 accepted", st.Accepted, st.Rejected)
	}
}

// TestUsefulTimeRateOfNewestEpoch: while a canary runs a candidate config (epoch 1) beside
// the current one (epoch 0), the useful-time rate is the canary's alone, so that the
// fallback estimate labelled with epoch 1 measures the candidate, not the mix.
func TestUsefulTimeRateOfNewestEpoch(t *testing.T) {
	prev := Snapshot{Instances: map[string]Instance{
		"old": {RecordsIn: 100, UsefulSeconds: 10, Epoch: 0},
		"can": {RecordsIn: 10, UsefulSeconds: 10, Epoch: 1},
	}}
	cur := Snapshot{Instances: map[string]Instance{
		"old": {RecordsIn: 200, UsefulSeconds: 20, Epoch: 0}, // 10 records/s
		"can": {RecordsIn: 40, UsefulSeconds: 20, Epoch: 1},  // 3 records/s
	}}
	r, epoch, ok := usefulTimeRate(prev, cur)
	if !ok || epoch != 1 || math.Abs(r-3) > 1e-12 {
		t.Fatalf("rate %v epoch %v ok %v, want the canary's 3 records/s at epoch 1", r, epoch, ok)
	}
	// An instance whose epoch changed between the snapshots (restarted onto the
	// candidate) has no interval of one config.
	cur.Instances["old"] = Instance{RecordsIn: 200, UsefulSeconds: 20, Epoch: 1}
	if r, _, _ := usefulTimeRate(prev, cur); math.Abs(r-3) > 1e-12 {
		t.Fatalf("rate %v, want 3 (the restarted instance's interval spans two configs)", r)
	}
}

// A starved batching engine (vLLM-style gauges: 4 requests running of 64 admitted, none
// waiting) is never sampled, and its useful-time rate is a lower bound: 2 records per
// second of processing where each record spends 2 s in a batch of 4. Its estimate is
// instead its rate per instance, 8 records/s, scaled by its batch fill (4/64, floored at
// 1/3): 24 records/s. Erring high makes the operator the bottleneck, where it runs
// saturated and is measured; the useful-time rate would make the planner size everything
// upstream to 2 records/s and keep it starved. A burst then a lull: the estimate keeps
// the burst's level, decaying by 0.5 % per interval.
func TestStarvedBatchingEngineEstimateErrsHigh(t *testing.T) {
	e := NewEstimator(nil)
	if err := e.Declare("pdf", "ocr", Declaration{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_000_000, 0)
	var prev Snapshot
	var in, useful float64
	for i := 0; i < 8; i++ {
		cur := Snapshot{Time: t0.Add(time.Duration(i) * 5 * time.Second), Instances: map[string]Instance{
			"a": {RecordsIn: in, UsefulSeconds: useful, BusySeconds: 5 * float64(i), QueueLength: 4, Utilization: 1,
				EngineReported: true, Running: 4, Waiting: 0, AdmissionLimit: 64},
		}}
		if i > 0 {
			e.Observe("pdf", "ocr", prev, cur)
		}
		prev = cur
		in += 40 // 8 records/s
		useful += 40 * 2
	}
	est, err := e.Estimate("pdf", "ocr")
	if err != nil {
		t.Fatal(err)
	}
	if est.Source != SourceBatchFill || math.Abs(est.Capacity-24) > 1e-6 {
		t.Errorf("estimate = %+v, want 24 rec/s from %s", est, SourceBatchFill)
	}
	if st := e.Stats("pdf", "ocr"); st.Accepted != 0 {
		t.Errorf("starved samples accepted: %+v", st)
	}
	// Two lull intervals at 2 records/s: the running maximum decays, it does not follow.
	in, useful = prev.Instances["a"].RecordsIn, prev.Instances["a"].UsefulSeconds
	for range 2 {
		in += 10
		useful += 20
		cur := Snapshot{Time: prev.Time.Add(5 * time.Second), Instances: map[string]Instance{
			"a": {RecordsIn: in, UsefulSeconds: useful, QueueLength: 1, Utilization: 1, EngineReported: true, Running: 1, AdmissionLimit: 64},
		}}
		e.Observe("pdf", "ocr", prev, cur)
		prev = cur
	}
	if est, _ := e.Estimate("pdf", "ocr"); math.Abs(est.Capacity-24*fillDecay*fillDecay) > 1e-6 {
		t.Errorf("after the lull the estimate is %.4f, want 24 decayed twice (%.4f)", est.Capacity, 24*fillDecay*fillDecay)
	}
	if !Fallback(SourceBatchFill) || !Fallback(SourceUsefulTime) || Fallback("gp") {
		t.Error("Fallback must name exactly the two fallback sources")
	}
}

// Selectivity is the EMA (weight 0.5 per interval) of records out per record in over the
// instances present in both scrapes: 30/10 then 10/10 gives 3 then 2; a restarted
// instance's interval (counters back to 0) does not count.
func TestSelectivityFollowsRecordsOutPerIn(t *testing.T) {
	e := NewEstimator(nil)
	if err := e.Declare("pdf", "split", Declaration{Synchronous: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Selectivity("pdf", "split"); ok {
		t.Fatal("selectivity before any interval")
	}
	t0 := time.Unix(1_000_000, 0)
	snap := func(s int, in, out float64) Snapshot {
		return Snapshot{Time: t0.Add(time.Duration(s) * 5 * time.Second), Instances: map[string]Instance{"a": {RecordsIn: in, RecordsOut: out, UsefulSeconds: float64(s)}}}
	}
	e.Observe("pdf", "split", snap(0, 0, 0), snap(1, 10, 30))
	if s, _ := e.Selectivity("pdf", "split"); s != 3 {
		t.Errorf("after 30 out of 10 in: %v, want 3", s)
	}
	e.Observe("pdf", "split", snap(1, 10, 30), snap(2, 20, 40))
	if s, _ := e.Selectivity("pdf", "split"); s != 2 {
		t.Errorf("after 10 out of 10 in: %v, want the EMA 2", s)
	}
	e.Observe("pdf", "split", snap(2, 20, 40), snap(3, 1, 50))
	if s, _ := e.Selectivity("pdf", "split"); s != 2 {
		t.Errorf("a restarted instance's interval moved the selectivity to %v", s)
	}
}

// A synchronous instance completing fewer records per scrape than a sample needs (5) is
// not lost: its intervals pool until they carry enough, and the pooled sample measures it
// (2 records per 5 s interval, 2.5 useful seconds each: 0.8 records per useful second).
func TestSlowInstanceIntervalsPool(t *testing.T) {
	e := NewEstimator(nil)
	if err := e.Declare("video", "scene", Declaration{Synchronous: true}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_000_000, 0)
	var prev Snapshot
	for i := 0; i < 13; i++ {
		cur := Snapshot{Time: t0.Add(time.Duration(i) * 5 * time.Second), Instances: map[string]Instance{
			"a": {RecordsIn: float64(2 * i), UsefulSeconds: 2.5 * float64(i), BusySeconds: 2.5 * float64(i), Utilization: 0.5},
		}}
		if i > 0 {
			e.Observe("video", "scene", prev, cur)
		}
		prev = cur
	}
	st := e.Stats("video", "scene")
	// 12 intervals of 2 records: every third closes a pooled sample of 6 records.
	if st.Accepted != 4 || st.Rejected[observe.ReasonFewRecords] != 8 {
		t.Fatalf("accepted %d, too few records %d: want 4 pooled samples of 3 intervals each (%v)", st.Accepted, st.Rejected[observe.ReasonFewRecords], st.Rejected)
	}
	est, err := e.Estimate("video", "scene")
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(est.Capacity-0.8) > 1e-6 {
		t.Errorf("capacity %.4f, want 0.8 records per useful second", est.Capacity)
	}
}

// SaturatedWithin follows the newest accepted sample: true while one came within the
// window before the newest scrape, false once the queue has been empty for longer, and
// false for an operator never seen saturated.
func TestSaturatedWithin(t *testing.T) {
	e := NewEstimator(nil)
	if err := e.Declare("pdf", "ocr", Declaration{Features: []string{"tokens"}}); err != nil {
		t.Fatal(err)
	}
	if e.SaturatedWithin("pdf", "ocr", time.Minute) {
		t.Error("saturated before any scrape")
	}
	snaps := steady(40, 12, 0, rand.New(rand.NewPCG(1, 2)))
	for i := 1; i < len(snaps); i++ {
		e.Observe("pdf", "ocr", snaps[i-1], snaps[i])
	}
	if !e.SaturatedWithin("pdf", "ocr", time.Minute) {
		t.Fatal("not saturated after 39 clean saturated samples")
	}
	// Then the queue empties: 20 scrapes (100 s) of samples the filter rejects.
	prev := snaps[len(snaps)-1]
	for i := range 20 {
		m := prev.Instances["a1"]
		m.RecordsIn += 5
		m.BusySeconds += 0.5
		m.UsefulSeconds += 0.5
		m.QueueLength, m.Utilization = 0, 0.1
		cur := Snapshot{Time: prev.Time.Add(5 * time.Second), Instances: map[string]Instance{"a1": m}}
		e.Observe("pdf", "ocr", prev, cur)
		prev = cur
		if i == 5 && !e.SaturatedWithin("pdf", "ocr", time.Minute) {
			t.Error("30 s after the last saturated sample: not saturated within a minute")
		}
	}
	if e.SaturatedWithin("pdf", "ocr", time.Minute) {
		t.Error("100 s of an empty queue: still saturated within a minute")
	}
}

// An estimator set to rates only answers with the useful-time rate even where the model
// has accepted samples: 12 records/s saturated, of which every 5 s interval is 5 useful
// seconds, is a useful-time rate of 12 (EMA of noisy intervals: 2 % noise, 5 % slack),
// marked SourceRate (not a fallback), at the samples' epoch.
func TestRatesOnlySkipsTheModel(t *testing.T) {
	e := NewEstimator(nil)
	e.SetRatesOnly(true)
	if err := e.Declare("pdf", "ocr", Declaration{Features: []string{"tokens"}}); err != nil {
		t.Fatal(err)
	}
	snaps := steady(20, 12, 3, rand.New(rand.NewPCG(1, 2)))
	for i := 1; i < len(snaps); i++ {
		e.Observe("pdf", "ocr", snaps[i-1], snaps[i])
	}
	est, err := e.Estimate("pdf", "ocr")
	if err != nil {
		t.Fatal(err)
	}
	if est.Source != SourceRate || Fallback(est.Source) || est.Epoch != 3 || math.Abs(est.Capacity-12)/12 > 0.05 {
		t.Errorf("estimate = %+v, want 12 ± 5%% rec/s from %s at epoch 3", est, SourceRate)
	}
	e2 := NewEstimator(nil)
	e2.SetRatesOnly(true)
	if err := e2.Declare("pdf", "ocr", Declaration{}); err != nil {
		t.Fatal(err)
	}
	idle := Snapshot{Time: snaps[0].Time, Instances: map[string]Instance{"a1": {}}}
	next := Snapshot{Time: snaps[1].Time, Instances: map[string]Instance{"a1": {}}}
	e2.Observe("pdf", "ocr", idle, next)
	if _, err := e2.Estimate("pdf", "ocr"); err == nil {
		t.Error("an operator that processed nothing has no rate: want an error")
	}
}

// Trials running at once are modelled apart, each by its epoch: beside a production
// instance, two trial instances at different rates get their own estimates; a trial that
// replaces one of them takes its model (lane) and the other's estimate is untouched.
func TestConcurrentTrialsAreModelledApart(t *testing.T) {
	e := NewEstimator(nil)
	if err := e.Declare("pdf", "ocr", Declaration{Features: []string{"tokens"}}); err != nil {
		t.Fatal(err)
	}
	e1, e2, e3 := fsm.TrialEpochBase+10, fsm.TrialEpochBase+11, fsm.TrialEpochBase+12
	rng := rand.New(rand.NewPCG(5, 6))
	prod := steady(80, 12, 0, rng)
	tr := map[string][]Snapshot{"t1": steady(40, 6, float64(e1), rng), "t2": steady(80, 20, float64(e2), rng), "t3": steady(40, 9, float64(e3), rng)}
	snap := func(i int, trials ...string) Snapshot {
		s := Snapshot{Time: prod[i].Time, Instances: map[string]Instance{"a1": prod[i].Instances["a1"]}}
		for _, id := range trials {
			j := i
			if id == "t3" {
				j = i - 40 // started when t1 ended
			}
			s.Instances[id] = tr[id][j].Instances["a1"]
		}
		return s
	}
	check := func(epoch uint64, want float64) {
		t.Helper()
		est, err := e.TrialEstimate("pdf", "ocr", epoch)
		if err != nil || est.Epoch != epoch || math.Abs(est.Capacity-want)/want > 0.05 {
			t.Errorf("trial epoch %d: estimate %+v (%v), want %.0f ± 5%% at its epoch", epoch, est, err, want)
		}
	}
	for i := 1; i < 40; i++ {
		e.Observe("pdf", "ocr", snap(i-1, "t1", "t2"), snap(i, "t1", "t2"))
	}
	check(e1, 6)
	check(e2, 20)
	if est, err := e.Estimate("pdf", "ocr"); err != nil || math.Abs(est.Capacity-12)/12 > 0.05 {
		t.Errorf("production estimate %+v (%v), want 12 ± 5%%", est, err)
	}
	e.Observe("pdf", "ocr", snap(39, "t1", "t2"), snap(40, "t2", "t3"))
	for i := 41; i < 80; i++ {
		e.Observe("pdf", "ocr", snap(i-1, "t2", "t3"), snap(i, "t2", "t3"))
	}
	check(e2, 20)
	check(e3, 9)
	if _, err := e.TrialEstimate("pdf", "ocr", e1); err == nil {
		t.Error("the replaced trial's epoch still has an estimate")
	}
}
