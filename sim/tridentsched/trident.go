// Package tridentsched drives Trident's three layers inside the simulator: the observation
// layer (apm/observe: two-stage filtered GP capacity per operator), the adaptation layer
// (strategy/cluster online clustering + strategy/bo memory-constrained BO evaluated on a
// probe instance) and the scheduling layer (strategy/milp: parallelism, placement and
// rolling configuration transitions). Options switch off single layers for the ablation
// study (paper §8.6) and select unconstrained BO for the OOM comparison (Table 6).
package tridentsched

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/trident-sched/trident/apm/gp"
	"github.com/trident-sched/trident/apm/observe"
	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/strategy/bo"
	"github.com/trident-sched/trident/strategy/cluster"
	"github.com/trident-sched/trident/strategy/configspace"
	"github.com/trident-sched/trident/strategy/milp"
)

// Options configures Trident and its ablations.
type Options struct {
	// NoObservation replaces the GP capacity model by DS2's useful-time rate
	// (ablation "w/o observation layer").
	NoObservation bool
	// NoAdaptation disables clustering and configuration tuning ("w/o adaptation layer").
	NoAdaptation bool
	// NoPlacement removes network modelling and co-location incentives from the MILP
	// ("w/o placement-aware scheduling").
	NoPlacement bool
	// AllAtOnce switches every instance of an operator at once ("w/o rolling update").
	AllAtOnce bool
	// ThroughputOnly models every operator's filtered throughput, synchronous ones
	// included (by default a synchronous operator's capacity is its useful-time rate).
	ThroughputOnly bool
	// Unconstrained tunes with plain-EI BO, blind to memory (Table 6 comparison).
	Unconstrained bool
	// NoShiftInvalidation keeps an operator's capacity samples across workload regime
	// shifts (the paper invalidates only on configuration commits).
	NoShiftInvalidation bool
	// RoundS is the MILP rescheduling period (default 120 s); SampleS the observation
	// interval (default 10 s, also the control-loop period).
	RoundS, SampleS float64
	// EvalS is how long a BO trial is measured once its probe runs (default 80 s).
	EvalS float64
	// Budget is the number of BO evaluations per workload cluster (default 16).
	Budget int
	// ParallelTrials is the number of BO trials an operator measures at once, each on
	// its own probe instance (asynchronous batch BO; default 4: a 16-evaluation session
	// takes four rounds of trials instead of sixteen). An operator keeps at least two
	// production instances, so it runs at most (instances − 2) probes.
	ParallelTrials int
	// WarmStart is the number of recent clusters' recommendations a new cluster's tuning
	// session evaluates first (default 2; negative: none).
	WarmStart int
	// MarginGB is the BO memory safety margin μ (default 6 GB: an 80 s evaluation sees
	// about 2.5 standard deviations of the per-second peak, a sustained run four or more);
	// Delta the minimum probability of feasibility δ (0: strategy/bo's default).
	MarginGB, Delta float64
	// WindowS is the MILP scheduling window W of Eq. (11) (default 900 s).
	WindowS float64
	// MaxBatchFrac caps rolling batches at this fraction of an operator's instances
	// (default 0.25).
	MaxBatchFrac float64
	// NoTailCompletion leaves a committed transition where the MILP stops it (by default
	// the rest proceeds one rolling batch per round).
	NoTailCompletion bool
	// NoQueueSignal withholds the queue bound and output blocking from the observation
	// layer's samples, so a low batch fill is read as starvation even with the queue full.
	NoQueueSignal bool
	// StaleAfter is the number of consecutive model-filter rejections after which an
	// operator's capacity model is invalidated (default 6).
	StaleAfter int
	// OOMGuard is the number of production OOMs of one operator within 120 s that makes
	// it fall back to its default configuration at once (default 3).
	OOMGuard int
	// Solver solves the MILP (default milp.HiGHS).
	Solver milp.Solver
	// Seed seeds the BO.
	Seed uint64
	// Initial returns the deployment the scheduler takes over (per operator, instances per
	// node), as the planner takes over a Nomad job as submitted. Nil: an even split of
	// every pool (nothing is known about the operators yet).
	Initial func(env *sim.Env) ([][]int, error)
	// Label overrides Name.
	Label string
	// Logger receives layer logs (default: discard).
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.RoundS == 0 {
		o.RoundS = 120
	}
	if o.SampleS == 0 {
		o.SampleS = 10
	}
	if o.EvalS == 0 {
		o.EvalS = 80
	}
	if o.Budget == 0 {
		o.Budget = 16
	}
	if o.ParallelTrials == 0 {
		o.ParallelTrials = 4
	}
	if o.WarmStart == 0 {
		o.WarmStart = 2
	}
	if o.MarginGB == 0 {
		o.MarginGB = 6
	}
	if o.WindowS == 0 {
		o.WindowS = 900
	}
	if o.MaxBatchFrac == 0 {
		o.MaxBatchFrac = 0.25
	}
	if o.StaleAfter == 0 {
		o.StaleAfter = 6
	}
	if o.OOMGuard == 0 {
		o.OOMGuard = 3
	}
	if o.Solver == nil {
		o.Solver = milp.HiGHS{Logger: o.Logger}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Overhead accumulates the wall time each layer spends.
type Overhead struct {
	// Invocations counts control-loop invocations (every SampleS).
	Invocations int
	// Observe and Adapt are the observation and adaptation layers' total time.
	Observe, Adapt time.Duration
	// Rounds counts MILP solves; Solve is their total time.
	Rounds int
	Solve  time.Duration
}

// Trident is the full scheduler.
type Trident struct {
	opt   Options
	env   *sim.Env
	layer *observe.Layer
	ds2   []*observe.DS2
	ops   []*opState
	rng   *rand.Rand
	// Stats is filled during the run.
	Stats    Overhead
	nextRnd  float64
	lastSnap *sim.Snapshot
	// TuneOOMs counts OOMs of probe trials (exploration) during the run.
	TuneOOMs int
	// Reverts counts OOM-guard fallbacks to the default configuration.
	Reverts int
	// Shifts counts regime shifts that invalidated an operator's capacity samples.
	Shifts int
	// Stale counts models invalidated after StaleAfter consecutive residual rejections.
	Stale int
	// Parked counts tuning sessions interrupted by a regime shift (resumed when their
	// workload cluster is dominant again).
	Parked int
	// TailBatches counts rolling batches that continued a committed transition the MILP
	// had stopped.
	TailBatches int
}

// blockedFill is the fill of the downstream queue at which an operator counts as blocked
// by backpressure (the engine stops an operator's output when the next queue is full).
const blockedFill = 0.95

type window struct {
	processed, busy, useful, occ, running, src, emitted, outMB float64
	ticks                                                      int
	// blocked counts ticks whose end found the downstream queue full: the operator's
	// output was throttled by backpressure. blockedSec sums the time the output was
	// blocked.
	blocked    int
	blockedSec float64
	q0         float64
	feat       []float64
	featW      float64
}

type opState struct {
	spec  *sim.OpSpec
	epoch uint64
	w     window
	// last window's values
	feat []float64
	// scaled is the decaying maximum of per-instance rate divided by occupancy: the
	// capacity fallback for an operator the observation layer has no estimate for.
	scaled float64
	amp    float64
	// sel is the operator's own selectivity (records out per record in), an EMA.
	sel   float64
	outMB float64
	// adaptation
	space     *configspace.Space
	cl        *cluster.Clusterer
	dominant  int
	tune      *tuning
	cands     map[int]candidate // best configuration per workload cluster
	parked    map[int]*tuning   // tuning sessions interrupted by a regime shift, by cluster
	current   sim.OpConfig      // configuration most instances run
	candidate *candidate        // pending transition target
	committed bool              // candidate transition started (observation invalidated)
	// prodOOMs holds the times of recent OOMs of production (non-probe) instances.
	prodOOMs []float64
	revert   bool
	// residuals counts consecutive samples rejected by the model filter.
	residuals int
}

type candidate struct {
	cfg  sim.OpConfig
	rate float64
	cs   configspace.Config // cfg in the adaptation layer's form (nil for reverts)
	// seen holds what the recommending session assessed each configuration it evaluated
	// on a probe at (by configKey; see assessed), the running one included: configurations
	// are compared under the same measurement conditions.
	seen map[string]float64
	// session is the finished tuning session (nil for reverts): it assesses a running
	// configuration it did not evaluate (one another cluster's recommendation put in place
	// since) by its surrogate's mean.
	session *bo.Optimizer
}

// restartS is how long an instance serves nothing when its configuration changes: the
// simulator's restart downtime (sim.RunConfig.OOMRestartS, default 33 s; a run with another
// value should change this too).
const restartS = 33

type tuning struct {
	cluster int
	opt     *bo.Optimizer
	evals   int
	// trials are the running trials by probe slot (nil: a free slot).
	trials []*trial
}

// trial is one BO evaluation in flight on a probe instance.
type trial struct {
	cfg      configspace.Config
	simCfg   sim.OpConfig
	measured float64 // seconds measured
	done     float64 // records processed by the probe while measured
	peak     float64
	oom      bool
}

// reset discards the trial's measurement (it is measured afresh).
func (tr *trial) reset() { tr.measured, tr.done, tr.peak, tr.oom = 0, 0, 0, false }

// pending returns the configurations of the running trials.
func (tu *tuning) pending() []configspace.Config {
	var out []configspace.Config
	for _, tr := range tu.trials {
		if tr != nil {
			out = append(out, tr.cfg)
		}
	}
	return out
}

// New returns a Trident scheduler.
func New(opt Options) *Trident {
	opt.defaults()
	return &Trident{opt: opt}
}

// Name implements sim.Scheduler.
func (t *Trident) Name() string {
	if t.opt.Label != "" {
		return t.opt.Label
	}
	return "trident"
}

// Interval implements sim.Scheduler: the control loop runs every SampleS.
func (t *Trident) Interval() float64 { return t.opt.SampleS }

// Init implements sim.Scheduler: register operators with the layers and start from
// Options.Initial, or else from an even split of every pool (no capacity is known yet).
func (t *Trident) Init(_ context.Context, env *sim.Env) (*sim.Plan, error) {
	t.env = env
	t.rng = rand.New(rand.NewPCG(t.opt.Seed, 0x7472696465))
	t.layer = observe.NewLayer(t.opt.Logger)
	p := env.Pipeline
	for i := range p.Ops {
		spec := &p.Ops[i]
		o := &opState{spec: spec, amp: math.NaN(), sel: math.NaN(), cands: map[int]candidate{}, parked: map[int]*tuning{}, dominant: -1}
		if len(spec.FeatureNames) == 0 {
			return nil, fmt.Errorf("trident: operator %q declares no workload features", spec.Name)
		}
		// Hyperparameters are fitted on at most 32 of the window's samples: every regime
		// shift restarts an operator's fit schedule, and the fits dominated the layer's
		// per-round cost (the installed model still uses every sample).
		cfg := observe.Config{Signal: observe.SignalConfig{MinUtilization: 0.6}, Fit: gp.FitOptions{MaxSamples: 32}, Logger: t.opt.Logger,
			Synchronous: !spec.Async && !t.opt.ThroughputOnly}
		if err := t.layer.Register(spec.Name, observe.OperatorSpec{Features: spec.FeatureNames, Config: cfg}); err != nil {
			return nil, fmt.Errorf("trident: %w", err)
		}
		t.ds2 = append(t.ds2, &observe.DS2{})
		if spec.Tunable() {
			o.current = spec.Space.Default()
		}
		if !t.opt.NoAdaptation {
			// Every operator's workload is clustered online; tunable operators also get a
			// BO session per cluster.
			// Per-tick feature samples: a two-minute half-life and a wider threshold keep
			// cohort-to-cohort variation within a regime from flapping the dominant cluster.
			// The features are per-interval means, so the scale is floored at a tenth of
			// the range seen (cluster.Options.RangeFraction).
			cl, err := cluster.New(len(spec.FeatureNames), cluster.Options{Threshold: 4, RecentHalfLife: 120, WarmUp: 60, RangeFraction: 0.1})
			if err != nil {
				return nil, fmt.Errorf("trident: operator %q: clustering: %w", spec.Name, err)
			}
			o.cl = cl
			if spec.Tunable() {
				sp, err := toSpace(spec.Space)
				if err != nil {
					return nil, fmt.Errorf("trident: operator %q: %w", spec.Name, err)
				}
				o.space = sp
			}
		}
		t.ops = append(t.ops, o)
	}
	t.nextRnd = t.opt.RoundS
	if t.opt.Initial != nil {
		per, err := t.opt.Initial(env)
		if err != nil {
			return nil, fmt.Errorf("trident: initial deployment: %w", err)
		}
		return sim.PlanFromCounts(per), nil
	}
	dem := make([]float64, len(p.Ops))
	for i := range dem {
		dem[i] = 1
	}
	n := sim.Balance(env.Cluster, p, dem)
	need := make([]sim.Resources, len(p.Ops))
	for i := range need {
		need[i] = p.Ops[i].Need
	}
	per := sim.PlaceStriped(env.Cluster, need, n)
	if per == nil {
		return nil, fmt.Errorf("trident: initial deployment does not fit")
	}
	return sim.PlanFromCounts(per), nil
}

// Observe implements sim.Scheduler: accumulate the observation window, feed workload
// features to the clusterers and measure running BO trials.
func (t *Trident) Observe(s *sim.Snapshot) {
	t.lastSnap = s
	start := time.Now()
	for i, o := range t.ops {
		st := &s.Ops[i]
		w := &o.w
		if w.ticks == 0 {
			w.q0 = st.Queue - st.Arrived + st.Processed
		}
		w.ticks++
		w.blockedSec += st.BlockedSec
		if i+1 < len(s.Ops) && s.Ops[i+1].Queue >= blockedFill*s.Ops[i+1].QueueCap {
			w.blocked++
		}
		w.processed += st.Processed
		w.busy += st.BusySec
		w.useful += st.UsefulSec
		w.occ += st.Occupancy
		w.running += float64(st.Running)
		w.src += st.SrcRecords
		w.emitted += st.Emitted
		w.outMB += st.OutMB * st.Emitted
		if st.Processed > 0 && len(st.Features) > 0 {
			if w.feat == nil {
				w.feat = make([]float64, len(st.Features))
			}
			for k, v := range st.Features {
				w.feat[k] += v * st.Processed
			}
			w.featW += st.Processed
		}
	}
	t.Stats.Observe += time.Since(start)
	start = time.Now()
	for i, o := range t.ops {
		st := &s.Ops[i]
		if o.cl != nil && st.Processed > 0 && len(st.Features) > 0 {
			ev, err := o.cl.Observe(st.Features)
			if err == nil && ev.Shift != nil {
				t.shift(i, *ev.Shift, s.Time)
			}
		}
		if tu := o.tune; tu != nil {
			for k, ps := range st.Probes {
				if k >= len(tu.trials) || tu.trials[k] == nil {
					continue
				}
				tr := tu.trials[k]
				if ps.Running {
					if ps.BusySec > 0 {
						tr.measured += s.Tick
						tr.done += ps.Processed
					}
					tr.peak = math.Max(tr.peak, ps.PeakMemGB)
				}
				if ps.OOM {
					tr.oom = true
					t.TuneOOMs++
				}
			}
		}
		if n := st.OOMs - st.ProbeOOMs(); n > 0 && o.spec.Tunable() {
			for range n {
				o.prodOOMs = append(o.prodOOMs, s.Time)
			}
		}
	}
	t.Stats.Adapt += time.Since(start)
}

// shift handles a change of operator i's dominant workload cluster: a tuning session of
// another cluster is parked (its trials would now measure a different workload) and the
// capacity samples are invalidated.
func (t *Trident) shift(i int, sh cluster.Shift, now float64) {
	o := t.ops[i]
	o.dominant = sh.To
	if tu := o.tune; tu != nil && o.cl.Resolve(tu.cluster) != o.cl.Resolve(sh.To) {
		// The interrupted trials are measured afresh when the session resumes.
		for _, tr := range tu.trials {
			if tr != nil {
				tr.reset()
			}
		}
		o.parked[tu.cluster] = tu
		o.tune = nil
		t.Parked++
	}
	o.pruneParked()
	if sh.From >= 0 && !t.opt.NoShiftInvalidation {
		// A regime shift invalidates the operator's capacity samples: the GP (constant
		// mean) cannot extrapolate to the new workload and its residual filter would
		// reject the new regime's samples.
		t.opt.Logger.Debug("regime shift", "t", now, "op", o.spec.Name, "from", sh.From, "to", sh.To)
		t.invalidate(i, 0)
		t.Shifts++
	}
}

// resumeParked makes the parked tuning session of cluster d (after merges) the running
// one and reports whether there was one. Of several (clusters merged into d) the oldest
// resumes; the others are dropped.
func (o *opState) resumeParked(d int) bool {
	pick := -1
	for id := range o.parked {
		if o.cl.Resolve(id) == d && (pick < 0 || id < pick) {
			pick = id
		}
	}
	if pick < 0 {
		return false
	}
	tu := o.parked[pick]
	for id := range o.parked {
		if o.cl.Resolve(id) == d {
			delete(o.parked, id)
		}
	}
	tu.cluster = d
	o.tune = tu
	_ = o.cl.SetStatus(d, cluster.Tuning)
	return true
}

// pruneParked drops parked sessions whose workload cluster has faded away (it can never
// become dominant again).
func (o *opState) pruneParked() {
	for id := range o.parked {
		if _, ok := o.cl.Cluster(id); !ok {
			delete(o.parked, id)
		}
	}
}

// flushWindow turns the accumulated window into one observation sample per operator.
func (t *Trident) flushWindow(s *sim.Snapshot) {
	for i, o := range t.ops {
		w := o.w
		o.w = window{}
		if w.ticks == 0 {
			continue
		}
		runMean := w.running / float64(w.ticks)
		if w.src > 0 {
			o.amp = ema(o.amp, w.processed/w.src, 0.3)
		}
		if w.emitted > 0 {
			o.outMB = w.outMB / w.emitted
		}
		if w.processed > 0 {
			o.sel = ema(o.sel, w.emitted/w.processed, 0.5)
		}
		if w.featW > 0 {
			o.feat = make([]float64, len(w.feat))
			for k := range w.feat {
				o.feat[k] = w.feat[k] / w.featW
			}
		}
		if runMean < 0.5 || o.feat == nil {
			continue
		}
		interval := float64(w.ticks) * s.Tick
		perInst := w.processed / runMean
		if occ := w.occ / float64(w.ticks); perInst > 0 {
			// Utilisation-scaled rate (at most three times the observed rate), as a slowly
			// decaying maximum: a starved or backpressured window says little about capacity.
			// A window mostly blocked by a full downstream queue does not decay it: there
			// the scaled rate is three times the throttled rate, and decaying towards it
			// made a blocked operator look slow, drew instances to it and starved the
			// operator that blocked it.
			v := perInst / interval / math.Max(occ, 1.0/3)
			if 2*w.blocked > w.ticks {
				o.scaled = math.Max(o.scaled, v)
			} else {
				o.scaled = math.Max(o.scaled*0.995, v)
			}
		}
		sample := observe.Sample{
			Time:          time.Unix(0, 0).Add(time.Duration(s.Time * float64(time.Second))),
			Interval:      time.Duration(interval * float64(time.Second)),
			Records:       perInst,
			BusySeconds:   math.Min(interval, w.busy/runMean),
			UsefulSeconds: w.useful / runMean,
			// The operator's instances share one input queue; the sample describes one
			// instance, so it carries the instance's share of the queue (the signal
			// filter compares the queue change with the records processed).
			QueueStart:  math.Max(0, w.q0) / runMean,
			QueueEnd:    s.Ops[i].Queue / runMean,
			Utilization: math.Min(1, w.occ/float64(w.ticks)),
			Features:    o.feat,
			Epoch:       o.epoch,
		}
		if !t.opt.NoQueueSignal {
			sample.QueueCap = s.Ops[i].QueueCap / runMean
			sample.OutputBlockedSeconds = w.blockedSec
		}
		if t.opt.NoObservation {
			t.ds2[i].Observe(sample)
		} else {
			_, why := t.layer.Observe(o.spec.Name, sample)
			// A model that rejects every new sample as an outlier no longer describes the
			// operator (a workload shift the GP cannot extrapolate to): start it afresh.
			if why == observe.ReasonResidual {
				o.residuals++
				if o.residuals >= t.opt.StaleAfter {
					o.residuals = 0
					t.opt.Logger.Debug("stale model", "t", s.Time, "op", o.spec.Name)
					t.invalidate(i, 0)
					t.Stale++
				}
			} else if why == "" {
				o.residuals = 0
			}
		}
	}
}

// ema folds x into the average old with weight alpha (x itself when old is NaN).
func ema(old, x, alpha float64) float64 {
	if math.IsNaN(old) {
		return x
	}
	return (1-alpha)*old + alpha*x
}

// invalidate starts operator i's capacity model afresh (new observation epoch): the
// observation layer's samples, the DS2 window and the occupancy-scaled fallback all
// describe a workload or configuration the operator no longer runs. prior (0: none) is the
// per-instance capacity to assume until the new epoch's first estimate: a committed
// configuration's capacity as its BO trials measured it. Without one, the operator's
// capacity is unknown until its first window.
func (t *Trident) invalidate(i int, prior float64) {
	o := t.ops[i]
	o.epoch++
	o.scaled = math.Max(prior, 0)
	t.layer.Invalidate(o.spec.Name)
	t.ds2[i].Reset()
}

// commit records that operator i's candidate transition has started. Committing a
// transition invalidates the operator's samples (paper §6.6); the candidate's capacity as
// its BO trials measured it stands until the new epoch's first estimate.
func (t *Trident) commit(i int) {
	o := t.ops[i]
	o.committed = true
	t.invalidate(i, o.candidate.rate)
}

// switchCostS is the serving time one instance loses to a configuration change: its
// restart plus the sample interval before the new configuration is observed. The MILP
// weighs a candidate's gain against it, and the adaptation layer holds a recommendation
// whose gain it does not repay (holds).
func (t *Trident) switchCostS() float64 { return restartS + t.opt.SampleS }

// capacity returns operator i's per-instance capacity for the current workload.
func (t *Trident) capacity(i int) float64 {
	o := t.ops[i]
	var est observe.Estimate
	var err error
	if t.opt.NoObservation {
		est, err = t.ds2[i].Estimate(o.feat)
	} else {
		est, err = t.layer.Capacity(o.spec.Name, o.feat)
	}
	if err == nil && est.Capacity > 0 && !math.IsNaN(est.Capacity) {
		return est.Capacity
	}
	// Never observed under sustained load (every sample rejected as starved or
	// backpressured): scale the observed rate by the occupancy. This overestimates batched
	// operators (throughput is concave in batch fill); the operator then becomes a
	// bottleneck, runs saturated, and the observation layer takes over.
	if o.scaled > 0 {
		return o.scaled
	}
	return 1
}

// Decide implements sim.Scheduler: the control loop. Every SampleS it feeds the
// observation layer and advances BO trials; every RoundS it solves the MILP.
func (t *Trident) Decide(ctx context.Context, s *sim.Snapshot) (*sim.Plan, error) {
	t.Stats.Invocations++
	start := time.Now()
	t.flushWindow(s)
	t.Stats.Observe += time.Since(start)

	start = time.Now()
	probes, newCand, err := t.adapt(ctx, s)
	t.Stats.Adapt += time.Since(start)
	if err != nil {
		return nil, err
	}
	round := s.Time >= t.nextRnd-1e-9 || newCand
	plan := sim.PlanFromCounts(perNode(s))
	for i, o := range t.ops {
		plan.Ops[i].Probes = probes[i]
		if o.revert {
			plan.Ops[i].Config = o.current
			plan.Ops[i].Transition = sim.TransitionAll
			o.revert = false
		}
	}
	if !round {
		return plan, nil
	}
	t.nextRnd = s.Time + t.opt.RoundS
	sol, err := t.solve(ctx, s)
	if err != nil {
		t.opt.Logger.Warn("trident: MILP round failed; keeping the deployment", "err", err)
		return plan, nil
	}
	for i, o := range t.ops {
		op := &plan.Ops[i]
		if op.Transition == sim.TransitionAll {
			// A revert is in flight: keep the deployment this round.
			continue
		}
		op.PerNode = make([]int, len(t.env.Cluster.Nodes))
		for n, pl := range sol.PerNode[i] {
			op.PerNode[n] = pl.Total()
		}
		// A plan that shrinks the operator keeps two production instances beside its
		// probes: trials beyond that wait (adapt sized them on the old count).
		if keep := max(sumRow(op.PerNode)-2, 0); len(op.Probes) > keep {
			op.Probes = op.Probes[:keep]
		}
		if o.candidate != nil && sol.Transitions != nil && sol.Transitions[i] > 0 {
			op.Config = o.candidate.cfg
			op.Transition = sol.Transitions[i]
			if t.opt.AllAtOnce {
				op.Transition = sim.TransitionAll
			}
			if !o.committed {
				t.commit(i)
			}
		} else if o.committed && o.candidate != nil && !t.opt.NoTailCompletion {
			// A committed transition completes: until then the operator runs two
			// configurations, which its capacity model (one configuration per epoch)
			// cannot describe, and its next recommendation waits. The MILP sets the pace;
			// when it stops (the gain moved to another bottleneck) the rest proceeds one
			// rolling batch per round.
			st := &s.Ops[i]
			if off := st.OffTarget(); off > 0 {
				op.Config = o.candidate.cfg
				op.Transition = min(off, t.batchOf(sumRow(st.PerNode)))
				t.TailBatches++
			}
		}
	}
	return plan, nil
}

func sumRow(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

func perNode(s *sim.Snapshot) [][]int {
	out := make([][]int, len(s.Ops))
	for i, o := range s.Ops {
		out[i] = append([]int(nil), o.PerNode...)
	}
	return out
}

// solve builds and solves one MILP round.
func (t *Trident) solve(ctx context.Context, s *sim.Snapshot) (*milp.Solution, error) {
	p := t.env.Pipeline
	prob := &milp.Problem{Params: milp.Params{WindowSec: t.opt.WindowS}}
	for _, n := range t.env.Cluster.Nodes {
		bw := n.EgressMBps * 1e6
		if t.opt.NoPlacement {
			bw = 1e15 // network-agnostic: no bandwidth constraint
		}
		prob.Nodes = append(prob.Nodes, milp.Node{Name: n.Name, CPU: n.Cap.CPU, MemMB: n.Cap.MemGB * 1024, GPUs: n.Cap.Acc, EgressBps: bw})
	}
	if t.opt.NoPlacement {
		prob.Params.NetWeight = 1e-300 // no co-location incentive
	}
	cur := make(milp.Deployment, len(p.Ops))
	// Amplification into each operator is the product of the upstream operators' own
	// selectivities (DS2's selectivity chain), which reflects a new workload regime as soon
	// as the upstream operators process it; the ratio of an operator's processed records
	// to source records lags behind its queue.
	amp := 1.0
	for i, o := range t.ops {
		spec := o.spec
		a := amp
		if i > 0 {
			if up := t.ops[i-1]; !math.IsNaN(up.sel) && up.sel > 0 {
				a = amp * up.sel
			} else if !math.IsNaN(o.amp) && o.amp > 0 {
				a = o.amp
			}
		}
		amp = a
		out := o.outMB
		if out <= 0 {
			out = 0.01
		}
		op := milp.Operator{
			Name: spec.Name, CPU: spec.Need.CPU, MemMB: spec.Need.MemGB * 1024, GPUs: spec.Need.Acc,
			Capacity: t.capacity(i), Amplification: a, OutputBytes: out * 1e6,
			LaunchSec: spec.ColdStartS, TerminateSec: spec.StopS,
		}
		st := &s.Ops[i]
		cur[i] = make([]milp.Placement, len(t.env.Cluster.Nodes))
		for n := range cur[i] {
			cur[i][n] = milp.Placement{Current: st.PerNode[n]}
		}
		if o.candidate != nil {
			op.Candidate = &milp.Candidate{Capacity: o.candidate.rate, ColdStartSec: t.switchCostS()}
			if o.committed {
				for n := range cur[i] {
					c := st.PerNodeOnTarget[n]
					cur[i][n] = milp.Placement{Current: st.PerNode[n] - c, Candidate: c}
				}
			}
		}
		prob.Operators = append(prob.Operators, op)
	}
	prob.Current = cur
	prob.Params.MaxBatch = t.maxBatch(s)
	if t.opt.AllAtOnce {
		prob.Params.MaxBatch = 0
	}
	start := time.Now()
	sol, err := t.opt.Solver.Solve(ctx, prob, milp.Options{TimeLimit: 5 * time.Second})
	t.Stats.Solve += time.Since(start)
	t.Stats.Rounds++
	if err != nil {
		return nil, fmt.Errorf("trident: MILP at t=%.0fs: %w", s.Time, err)
	}
	if t.opt.Logger.Enabled(ctx, slog.LevelDebug) {
		for i, op := range prob.Operators {
			n := 0
			for _, pl := range sol.PerNode[i] {
				n += pl.Total()
			}
			cand := 0.0
			if op.Candidate != nil {
				cand = op.Candidate.Capacity
			}
			t.opt.Logger.Debug("round", "t", s.Time, "op", op.Name, "mu", op.Capacity, "cand", cand, "amp", op.Amplification,
				"cur", sumRow(s.Ops[i].PerNode), "new", n, "trans", sol.Transitions[i], "T", sol.Throughput, "observed", s.Ops[i].Processed)
		}
	}
	return sol, nil
}

// maxBatch returns the rolling batch cap: MaxBatchFrac of the largest tunable operator.
func (t *Trident) maxBatch(s *sim.Snapshot) int {
	m := 1
	for i, o := range t.ops {
		if o.spec.Tunable() {
			m = max(m, t.batchOf(sumRow(s.Ops[i].PerNode)))
		}
	}
	return m
}

// batchOf returns the rolling batch of an operator with n instances: MaxBatchFrac of
// them, rounded up.
func (t *Trident) batchOf(n int) int { return int(math.Ceil(t.opt.MaxBatchFrac * float64(n))) }
