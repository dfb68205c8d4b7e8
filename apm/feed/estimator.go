package feed

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trident-sched/trident/apm/observe"
	"github.com/trident-sched/trident/planner/fsm"
)

// Snapshot is one scrape of every instance of an operator.
type Snapshot struct {
	Time      time.Time
	Instances map[string]Instance // by allocation ID
}

// Instance is one instance's scraped counters and gauges (the operator metrics contract).
type Instance struct {
	RecordsIn, RecordsOut, BusySeconds, UsefulSeconds float64
	QueueLength                                       float64
	// QueueCapacity is the instance's share of its input queue's bound (0: unbounded) and
	// OutputBlockedSeconds the counter of time its output waited on a full downstream
	// queue; both optional (see observe.Sample).
	QueueCapacity, OutputBlockedSeconds float64
	// Utilization is accelerator utilisation for accelerator operators, else CPU, 0..1.
	Utilization float64
	// EngineReported marks Running and Waiting as exported by a serving engine (vLLM's
	// num_requests_running and num_requests_waiting); AdmissionLimit is the most requests
	// it runs at once (max_num_seqs; 0 unknown). All optional (see observe.EngineGauges).
	EngineReported   bool
	Running, Waiting float64
	AdmissionLimit   float64
	DeviceMemPeak    float64
	OOMRestarts      float64
	// Pool is the working pool the instance's engine sized at start-up relative to the
	// least it starts with (opcontract.PoolSize over PoolNeed; 0: not reported): the
	// tuner's model of start failures (bo.Measurement.Pool).
	Pool        float64
	FeatureMean map[string]float64
	FeatureStd  map[string]float64
	Epoch       float64
}

// Estimator feeds the observation layer (apm/observe): every instance's scrape
// interval becomes one sample (input records, busy/useful time, queue, utilisation,
// workload feature means, config epoch) of its operator, and capacity is the two-stage
// filtered GP estimate (EMA during cold start) at the group's current features.
type Estimator struct {
	layer *observe.Layer
	log   *slog.Logger

	mu       sync.Mutex
	features map[string][]string  // key -> declared feature names
	latest   map[string][]float64 // key -> feature means of the latest snapshot
	rate     map[string]epochRate // key -> EMA of the newest epoch's useful-time rate (fallback)
	// fill holds, per batched operator, the decaying maximum of its newest epoch's rate
	// per instance scaled up by its batch fill (the fallback of a starved batching engine).
	fill map[string]epochRate
	sync map[string]bool // key -> declared synchronous
	// sel holds, per operator, the EMA of its observed selectivity (records out per record
	// in over its instances), the amplification the planner uses instead of the declared
	// one.
	sel map[string]float64
	// held holds, per operator and instance, the scrape an interval too short for a
	// sample (too few records) started at: the next sample spans from there.
	held  map[string]map[string]heldScrape
	stats map[string]*Counters // key -> accepted/rejected counts by reason
	// accepted holds, per operator, the scrape time of its newest accepted sample.
	accepted map[string]time.Time
	snaps    map[string]Snapshot // key -> latest snapshot offered to Observe
	// starts holds, per operator, when each instance was seen to (re)start: it was missing
	// from the previous scrape, or its counters went back (the scrape that shows it, a
	// conservative bound). Instances present in the first scrape have no entry (uptime
	// unknown).
	starts map[string]map[string]time.Time
	// ratesOnly answers every estimate from the observed rates, not the model
	// (SetRatesOnly).
	ratesOnly bool
	// decl holds each operator's declaration (key -> declaration), for trial lanes
	// registered on demand; lanes maps each operator's trial epochs to the trial model
	// (lane) their instances feed (key -> epoch -> lane, see trialLanes).
	decl  map[string]Declaration
	lanes map[string]map[uint64]int
}

// SetRatesOnly makes the estimator answer every estimate from the operator's observed
// rates instead of the two-stage filtered GP model: its useful-time rate (DS2's "true
// processing rate"), or for a batched operator its rate scaled by its batch fill where
// that is higher (the model's fallback, see rateEstimate), marked SourceRate. It is the
// "w/o observation layer" ablation of the paper (§8.6), which `trident bench e2e` runs on
// the shipped loop. Call it before the first Observe.
func (e *Estimator) SetRatesOnly(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ratesOnly = on
}

// Counters counts the samples an operator's filter accepted and rejected (by reason).
type Counters struct {
	Accepted int
	Rejected map[string]int
}

// NewEstimator returns an estimator over a new observation layer.
func NewEstimator(log *slog.Logger) *Estimator {
	if log == nil {
		log = slog.Default()
	}
	return &Estimator{
		layer:    observe.NewLayer(log),
		log:      log,
		features: map[string][]string{},
		latest:   map[string][]float64{},
		rate:     map[string]epochRate{},
		fill:     map[string]epochRate{},
		sync:     map[string]bool{},
		sel:      map[string]float64{},
		held:     map[string]map[string]heldScrape{},
		stats:    map[string]*Counters{},
		accepted: map[string]time.Time{},
		snaps:    map[string]Snapshot{},
		starts:   map[string]map[string]time.Time{},
		decl:     map[string]Declaration{},
		lanes:    map[string]map[uint64]int{},
	}
}

// Declaration is how an operator is modelled: its workload features (group meta
// trident_features) and whether it is synchronous (trident_synchronous).
type Declaration struct {
	Features    []string
	Synchronous bool
}

// Declare registers job/group with the observation layer (idempotent: the first
// declaration stays).
func (e *Estimator) Declare(job, group string, d Declaration) error {
	k := key(job, group)
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.features[k]; ok {
		return nil
	}
	// The operator's tuning trials get models of their own (trialKey, one per trial
	// running at once): a trial's instance runs another config beside the production
	// instances, and neither must be taken for the other.
	e.decl[k] = d
	for _, kk := range []string{k, trialKey(k, 0)} {
		if err := e.register(kk, d); err != nil {
			return err
		}
	}
	return nil
}

// register adds model kk with declaration d to the layer. The caller holds e.mu.
func (e *Estimator) register(kk string, d Declaration) error {
	features := d.Features
	if len(features) == 0 {
		// An operator without declared features still gets a (constant-input) model.
		features = []string{"const"}
	}
	if err := e.layer.Register(kk, observe.OperatorSpec{Features: features, Config: EstimatorConfig(d)}); err != nil {
		return err
	}
	e.features[kk] = features
	e.sync[kk] = d.Synchronous
	e.stats[kk] = &Counters{Rejected: map[string]int{}}
	return nil
}

// trialKey is the observation-layer key of trial lane j of the operator keyed k: the
// model of one of its tuning trials running at once.
func trialKey(k string, j int) string {
	if j == 0 {
		return k + "#trial"
	}
	return k + "#trial" + strconv.Itoa(j)
}

// laneSnaps is one trial lane's share of two snapshots.
type laneSnaps struct {
	key       string
	prev, cur Snapshot
}

// trialLanes splits the trial instances of prev and cur (both trial instances only) of
// the operator keyed k among its trial models, one per trial epoch running at once: an
// epoch keeps its lane while its instances are scraped, and a new epoch takes the lowest
// lane no epoch of cur holds (a lane's model then resets to the newer epoch, as trial
// epochs only grow). One trial at a time always uses lane 0. Lanes are registered on
// first use.
func (e *Estimator) trialLanes(k string, prev, cur Snapshot) ([]laneSnaps, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lanes := e.lanes[k]
	if lanes == nil {
		lanes = map[uint64]int{}
		e.lanes[k] = lanes
	}
	prevLane := map[string]int{}
	for id, m := range prev.Instances {
		if j, ok := lanes[uint64(m.Epoch)]; ok {
			prevLane[id] = j
		}
	}
	var epochs []uint64
	held := map[int]bool{}
	for _, m := range cur.Instances {
		ep := uint64(m.Epoch)
		if j, ok := lanes[ep]; ok {
			held[j] = true
		} else if !slices.Contains(epochs, ep) {
			epochs = append(epochs, ep)
		}
	}
	slices.Sort(epochs)
	for _, ep := range epochs {
		j := 0
		for held[j] {
			j++
		}
		maps.DeleteFunc(lanes, func(_ uint64, l int) bool { return l == j }) // epochs gone from the scrape
		lanes[ep], held[j] = j, true
		if kk := trialKey(k, j); e.features[kk] == nil {
			if err := e.register(kk, e.decl[k]); err != nil {
				return nil, fmt.Errorf("trial lane %d: %w", j, err)
			}
		}
	}
	by := map[int]*laneSnaps{}
	lane := func(j int) *laneSnaps {
		if by[j] == nil {
			by[j] = &laneSnaps{key: trialKey(k, j), prev: Snapshot{Time: prev.Time, Instances: map[string]Instance{}}, cur: Snapshot{Time: cur.Time, Instances: map[string]Instance{}}}
		}
		return by[j]
	}
	for id, j := range prevLane {
		lane(j).prev.Instances[id] = prev.Instances[id]
	}
	for id, m := range cur.Instances {
		lane(lanes[uint64(m.Epoch)]).cur.Instances[id] = m
	}
	out := make([]laneSnaps, 0, len(by))
	for _, j := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[j])
	}
	return out, nil
}

// splitTrials returns the instances of s that run a tuning trial (fsm.IsTrialEpoch) and
// the others, as two snapshots of s's time.
func splitTrials(s Snapshot) (trial, prod Snapshot) {
	trial = Snapshot{Time: s.Time, Instances: map[string]Instance{}}
	prod = Snapshot{Time: s.Time, Instances: map[string]Instance{}}
	for id, m := range s.Instances {
		if m.Epoch >= 0 && fsm.IsTrialEpoch(uint64(m.Epoch)) {
			trial.Instances[id] = m
		} else {
			prod.Instances[id] = m
		}
	}
	return trial, prod
}

// SourceUsefulTime marks an estimate taken from the useful-time rate because the
// observation layer has no accepted sample yet.
const SourceUsefulTime = "useful-time"

// SourceRate marks an estimate of an estimator set to rates only (SetRatesOnly): the
// observed rates stand for the capacity model, and are not a fallback.
const SourceRate = "rate"

// SourceBatchFill marks the estimate of a batched operator with no accepted sample yet:
// its rate per instance scaled up by its batch fill (see Estimator.Estimate).
const SourceBatchFill = "batch-fill"

// Fallback reports whether an estimate's source is a fallback for an operator the
// observation layer has no accepted sample of (not a measurement of its capacity).
func Fallback(source string) bool { return source == SourceUsefulTime || source == SourceBatchFill }

// maxFillScale bounds how far a starved batched operator's observed rate is scaled up: a
// batch fill below a third counts as a third.
const maxFillScale = 3

// fillDecay is the per-scrape decay of the batch-fill fallback's running maximum: a
// starved interval says little about capacity, so the estimate only slowly forgets a
// higher one.
const fillDecay = 0.995

// batchFillRate is the rate per instance and second over the interval of the newest
// epoch's instances present in both snapshots, divided by their batch fill (running
// requests over the admission limit from engine gauges, else the queue over the admission
// limit), the fill floored at 1/maxFillScale. It reports false when the fill is unknown.
func batchFillRate(prev, cur Snapshot) (float64, float64, bool) {
	dt := cur.Time.Sub(prev.Time).Seconds()
	var recs, fill float64
	n := 0
	newest := newestEpochIntervals(prev, cur, func(old, m Instance) {
		if !(m.AdmissionLimit > 0) {
			return
		}
		f := m.QueueLength / m.AdmissionLimit
		if m.EngineReported {
			f = m.Running / m.AdmissionLimit
		}
		recs += m.RecordsIn - old.RecordsIn
		fill += math.Min(1, math.Max(f, 1.0/maxFillScale))
		n++
	})
	if n == 0 || dt <= 0 || recs <= 0 {
		return 0, newest, false
	}
	return recs / float64(n) / dt / (fill / float64(n)), newest, true
}

// usefulTimeRate is the per-instance processing rate over the interval: records consumed
// per second of useful (processing) time, over instances present in both snapshots.
//
// Only instances of the newest config epoch of cur count (returned with the rate): while
// a candidate config runs beside the current one (a canary, a rolling batch), the rate of
// the mix would be labelled with the candidate's epoch and taken for its measurement.
func usefulTimeRate(prev, cur Snapshot) (float64, float64, bool) {
	recs, useful := 0.0, 0.0
	newest := newestEpochIntervals(prev, cur, func(old, m Instance) {
		if m.UsefulSeconds < old.UsefulSeconds {
			return
		}
		recs += m.RecordsIn - old.RecordsIn
		useful += m.UsefulSeconds - old.UsefulSeconds
	})
	if recs <= 0 || useful <= 0 {
		return 0, newest, false
	}
	return recs / useful, newest, true
}

// instanceIDs returns s's instance IDs in order. The estimator walks instances in this
// order wherever the order shows: the observation layer's sample sequence (its filters
// and the GP's window depend on it) and floating-point sums over instances. Map order
// would make two runs on the same input differ.
func instanceIDs(s Snapshot) []string { return slices.Sorted(maps.Keys(s.Instances)) }

// newestEpochIntervals calls f with the previous and current counters of every instance
// of cur's newest config epoch that prev shows on the same epoch, its records counter not
// gone back (a restart), and returns that epoch.
func newestEpochIntervals(prev, cur Snapshot, f func(old, m Instance)) float64 {
	newest := 0.0
	for _, m := range cur.Instances {
		newest = math.Max(newest, m.Epoch)
	}
	for _, id := range instanceIDs(cur) {
		m := cur.Instances[id]
		if old, ok := prev.Instances[id]; ok && m.Epoch == newest && old.Epoch == m.Epoch && m.RecordsIn >= old.RecordsIn {
			f(old, m)
		}
	}
	return newest
}

// epochRate is the EMA of the useful-time rate of one config epoch's instances.
type epochRate struct {
	rate  float64
	epoch float64
}

// EstimatorConfig is the observation layer configuration of a declared operator: the
// configuration the benchmarks measure (observe.DefaultConfig), with the operator's
// Synchronous declaration. There is no separate live configuration.
func EstimatorConfig(d Declaration) observe.Config {
	cfg := observe.DefaultConfig()
	cfg.Synchronous = d.Synchronous
	return cfg
}

// featureVector picks the declared features' means from an instance's metrics; a feature
// the instance does not report is 0 ("const" is always 1).
func featureVector(names []string, m Instance) []float64 {
	v := make([]float64, len(names))
	for i, n := range names {
		if n == "const" {
			v[i] = 1
			continue
		}
		if x, ok := m.FeatureMean[n]; ok {
			v[i] = x
		} else if base, ok := strings.CutSuffix(n, "_std"); ok {
			v[i] = m.FeatureStd[base]
		} else if base, ok := strings.CutSuffix(n, "_mean"); ok {
			v[i] = m.FeatureMean[base]
		}
	}
	return v
}

// counterDelta is a counter's increase from old to cur; after a reset (cur < old) the
// counter restarted from zero, so its increase is cur (the Prometheus convention).
func counterDelta(old, cur float64) float64 {
	if cur < old {
		return cur
	}
	return cur - old
}

// heldScrape is an instance's scrape that starts its next sample.
type heldScrape struct {
	m Instance
	t time.Time
}

// maxHeldSpan bounds how long an instance's sample may span while it waits for enough
// records: a slower instance's intervals are dropped, not pooled further.
const maxHeldSpan = 5 * time.Minute

// Observe offers one sample per instance present in both snapshots. An interval the
// observation layer finds too short (a synchronous operator's instance completing fewer
// records than a sample needs, as one processing minute-long videos does in a scrape
// period) is not dropped: the instance's next sample spans both, up to maxHeldSpan.
//
// The instances of a tuning trial (their epoch is a trial epoch) are modelled apart
// (TrialEstimate); Latest returns every instance.
func (e *Estimator) Observe(job, group string, prev, cur Snapshot) {
	k := key(job, group)
	prevT, prevP := splitTrials(prev)
	curT, curP := splitTrials(cur)
	if !e.observe(k, prevP, curP) {
		return
	}
	if len(curT.Instances) > 0 || len(prevT.Instances) > 0 {
		lanes, err := e.trialLanes(k, prevT, curT)
		if err != nil {
			e.log.Warn("feed: trial instances not observed", "operator", k, "err", err)
		}
		for _, l := range lanes {
			e.observe(l.key, l.prev, l.cur)
		}
	}
	e.mu.Lock()
	e.snaps[k] = cur
	e.mu.Unlock()
}

// observe offers the intervals of the instances of prev and cur to the model keyed k. It
// reports false, offering nothing, for an undeclared key or an interval that does not
// move forward.
func (e *Estimator) observe(k string, prev, cur Snapshot) bool {
	e.mu.Lock()
	names, ok := e.features[k]
	st := e.stats[k]
	batched := !e.sync[k]
	ratesOnly := e.ratesOnly
	e.mu.Unlock()
	if !ok {
		return false
	}
	dt := cur.Time.Sub(prev.Time)
	if dt <= 0 {
		return false
	}
	e.mu.Lock()
	starts := e.starts[k]
	if starts == nil {
		starts = map[string]time.Time{}
		e.starts[k] = starts
	}
	for id, m := range cur.Instances {
		if old, ok := prev.Instances[id]; !ok || m.RecordsIn < old.RecordsIn {
			starts[id] = cur.Time // launched since the previous scrape, or restarted
		}
	}
	for id := range starts {
		if _, ok := cur.Instances[id]; !ok {
			delete(starts, id)
		}
	}
	up := map[string]time.Duration{}
	for id, t := range starts {
		up[id] = cur.Time.Sub(t)
	}
	held := e.held[k]
	if held == nil {
		held = map[string]heldScrape{}
		e.held[k] = held
	}
	for id := range held {
		if _, ok := cur.Instances[id]; !ok {
			delete(held, id)
		}
	}
	e.mu.Unlock()
	mean := make([]float64, len(names))
	count := 0
	for _, id := range instanceIDs(cur) {
		m := cur.Instances[id]
		fv := featureVector(names, m)
		for i := range mean {
			mean[i] += fv[i]
		}
		count++
		if ratesOnly {
			continue // no model to feed: the rates below are the estimate
		}
		old, ok := prev.Instances[id]
		if !ok || m.RecordsIn < old.RecordsIn { // new or restarted instance: no interval
			e.mu.Lock()
			delete(held, id)
			e.mu.Unlock()
			continue
		}
		from := prev.Time
		e.mu.Lock()
		if h, ok := held[id]; ok && h.m.Epoch == m.Epoch && h.m.RecordsIn <= old.RecordsIn && cur.Time.Sub(h.t) <= maxHeldSpan {
			old, from = h.m, h.t
		}
		delete(held, id)
		e.mu.Unlock()
		s := observe.Sample{
			Time:                 cur.Time,
			Interval:             cur.Time.Sub(from),
			Records:              m.RecordsIn - old.RecordsIn,
			BusySeconds:          math.Max(0, m.BusySeconds-old.BusySeconds),
			UsefulSeconds:        math.Max(0, m.UsefulSeconds-old.UsefulSeconds),
			QueueStart:           old.QueueLength,
			QueueEnd:             m.QueueLength,
			QueueCap:             m.QueueCapacity,
			OutputBlockedSeconds: counterDelta(old.OutputBlockedSeconds, m.OutputBlockedSeconds),
			Utilization:          m.Utilization,
			Uptime:               up[id],
			Features:             fv,
			Epoch:                uint64(math.Max(0, m.Epoch)),
		}
		s.Engine.AdmissionLimit = m.AdmissionLimit
		if m.EngineReported && old.EngineReported {
			s.Engine.Reported = true
			s.Engine.RunningStart, s.Engine.RunningEnd = old.Running, m.Running
			s.Engine.WaitingStart, s.Engine.WaitingEnd = old.Waiting, m.Waiting
		}
		accepted, reason := e.layer.Observe(k, s)
		e.mu.Lock()
		if reason == observe.ReasonFewRecords {
			held[id] = heldScrape{m: old, t: from}
		}
		if accepted {
			st.Accepted++
			e.accepted[k] = cur.Time
		} else {
			st.Rejected[reason]++
		}
		e.mu.Unlock()
	}
	if in, out := recordsDelta(prev, cur); in > 0 {
		e.mu.Lock()
		if old, ok := e.sel[k]; ok {
			e.sel[k] = (1-selAlpha)*old + selAlpha*out/in
		} else {
			e.sel[k] = out / in
		}
		e.mu.Unlock()
	}
	if r, epoch, ok := batchFillRate(prev, cur); ok && batched {
		e.mu.Lock()
		if old, seen := e.fill[k]; seen && old.epoch == epoch {
			e.fill[k] = epochRate{math.Max(fillDecay*old.rate, r), epoch}
		} else {
			e.fill[k] = epochRate{r, epoch}
		}
		e.mu.Unlock()
	}
	if r, epoch, ok := usefulTimeRate(prev, cur); ok {
		e.mu.Lock()
		if old, seen := e.rate[k]; seen && old.epoch == epoch {
			e.rate[k] = epochRate{0.7*old.rate + 0.3*r, epoch}
		} else {
			e.rate[k] = epochRate{r, epoch} // a new epoch starts its own average
		}
		e.mu.Unlock()
	}
	if count > 0 {
		for i := range mean {
			mean[i] /= float64(count)
		}
		e.mu.Lock()
		e.latest[k] = mean
		e.mu.Unlock()
	}
	return true
}

// Capacity returns the layer's per-instance estimate at the latest features.
func (e *Estimator) Capacity(job, group string) (float64, error) {
	est, err := e.Estimate(job, group)
	return est.Capacity, err
}

// Estimate returns the layer's full estimate (capacity, std, epoch) at the latest features.
func (e *Estimator) Estimate(job, group string) (observe.Estimate, error) {
	return e.estimate(key(job, group))
}

// TrialEstimate returns the estimate of job/group's tuning trial at config epoch epoch
// (its Epoch is the trial's epoch once the trial's model has a sample of it), at the
// features its instance saw, on the same terms as Estimate.
func (e *Estimator) TrialEstimate(job, group string, epoch uint64) (observe.Estimate, error) {
	k := key(job, group)
	e.mu.Lock()
	j, ok := e.lanes[k][epoch]
	e.mu.Unlock()
	if !ok {
		return observe.Estimate{}, fmt.Errorf("no instance of trial epoch %d scraped", epoch)
	}
	return e.estimate(trialKey(k, j))
}

func (e *Estimator) estimate(k string) (observe.Estimate, error) {
	e.mu.Lock()
	fv, ok := e.latest[k]
	ratesOnly := e.ratesOnly
	e.mu.Unlock()
	if !ok {
		return observe.Estimate{}, errors.New("no capacity estimate yet: the operator has not been scraped twice")
	}
	if ratesOnly {
		est, ok := e.rateEstimate(k, false)
		if !ok {
			return observe.Estimate{}, errors.New("no rate yet: the operator processed nothing between two scrapes of its newest epoch")
		}
		est.Source = SourceRate
		return est, nil
	}
	est, err := e.layer.Capacity(k, fv)
	if errors.Is(err, observe.ErrNoData) {
		// No sample passed the filter: typically an operator that is not the bottleneck
		// (starved, empty queue).
		if fb, ok := e.rateEstimate(k, true); ok {
			return fb, nil
		}
	}
	if err != nil {
		return observe.Estimate{}, err
	}
	if math.IsNaN(est.Capacity) || math.IsInf(est.Capacity, 0) || est.Capacity <= 0 {
		return observe.Estimate{}, fmt.Errorf("no capacity estimate yet (%d accepted samples)", est.Samples)
	}
	if math.IsNaN(est.StdDev) || math.IsInf(est.StdDev, 0) || est.StdDev < 0 {
		est.StdDev = 0
	}
	return est, nil
}

// rateEstimate is the estimate of operator k from its observed rates rather than the
// model: its useful-time rate (records per second of processing, DS2's "true processing
// rate"), exact for a synchronous operator.
//
// For a batched one that is a lower bound, and a lower bound locks the pipeline in: the
// planner, believing the operator slow, sizes everything upstream to it, and it stays
// starved. Its rate per instance scaled up by its batch fill (at most maxFillScale times,
// as a slowly decaying maximum) is used instead when it is higher: an estimate that errs
// high makes the operator the bottleneck, it then runs saturated, and (with the model)
// its first accepted samples replace the estimate.
//
// With modelEpoch the rates must be of the model's epoch (the fallback of the model);
// without, the rates of the newest epoch seen count.
func (e *Estimator) rateEstimate(k string, modelEpoch bool) (observe.Estimate, bool) {
	e.mu.Lock()
	r, ok := e.rate[k]
	f, fok := e.fill[k]
	e.mu.Unlock()
	var epoch uint64
	switch {
	case modelEpoch:
		epoch, _ = e.layer.Epoch(k)
	case ok:
		epoch = uint64(math.Max(0, r.epoch))
	case fok:
		epoch = uint64(math.Max(0, f.epoch))
	}
	if fok && f.rate > 0 && uint64(math.Max(0, f.epoch)) == epoch && (!ok || uint64(math.Max(0, r.epoch)) != epoch || f.rate > r.rate) {
		return observe.Estimate{Capacity: f.rate, Source: SourceBatchFill, Epoch: epoch}, true
	}
	if ok && r.rate > 0 && uint64(math.Max(0, r.epoch)) == epoch {
		return observe.Estimate{Capacity: r.rate, Source: SourceUsefulTime, Epoch: epoch}, true
	}
	return observe.Estimate{}, false
}

// selAlpha is the weight of a new interval in the selectivity EMA.
const selAlpha = 0.5

// recordsDelta sums records in and out over the instances present in both snapshots whose
// counters did not go back (restarts).
func recordsDelta(prev, cur Snapshot) (in, out float64) {
	for _, id := range instanceIDs(cur) {
		m := cur.Instances[id]
		old, ok := prev.Instances[id]
		if !ok || m.RecordsIn < old.RecordsIn || m.RecordsOut < old.RecordsOut {
			continue
		}
		in += m.RecordsIn - old.RecordsIn
		out += m.RecordsOut - old.RecordsOut
	}
	return in, out
}

// Selectivity returns job/group's observed records out per record in (an EMA over
// scrapes), and false before an interval with input.
func (e *Estimator) Selectivity(job, group string) (float64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sel[key(job, group)]
	return s, ok
}

// Latest returns the newest snapshot of job/group offered to Observe (the Tuner reads
// peak device memory, OOM restarts and config epochs per instance from it). Callers must
// not modify its maps.
func (e *Estimator) Latest(job, group string) (Snapshot, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.snaps[key(job, group)]
	return s, ok
}

// Backlog returns the records waiting for the operator in snapshot s: each instance
// reports its share of the stage's input queue, so the shares add up.
func Backlog(s Snapshot) float64 {
	b := 0.0
	for _, id := range instanceIDs(s) {
		m := s.Instances[id]
		if m.QueueLength > 0 && !math.IsInf(m.QueueLength, 0) {
			b += m.QueueLength
		}
	}
	return b
}

// Invalidate resets the operator's samples after a committed config change.
func (e *Estimator) Invalidate(job, group string) { e.layer.Invalidate(key(job, group)) }

// SaturatedWithin reports whether the observation layer accepted a sample of job/group's
// production instances (one that proves them saturated) in the scrapes of the last d
// before its newest scrape.
func (e *Estimator) SaturatedWithin(job, group string, d time.Duration) bool {
	k := key(job, group)
	e.mu.Lock()
	defer e.mu.Unlock()
	at, ok := e.accepted[k]
	return ok && !e.snaps[k].Time.After(at.Add(d))
}

// Stats returns a copy of the filter counters of job/group.
func (e *Estimator) Stats(job, group string) Counters {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := Counters{Rejected: map[string]int{}}
	if st, ok := e.stats[key(job, group)]; ok {
		c.Accepted = st.Accepted
		for r, n := range st.Rejected {
			c.Rejected[r] = n
		}
	}
	return c
}

// key names an operator of a job.
func key(job, op string) string { return job + "/" + op }
