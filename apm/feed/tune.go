package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/trident-sched/trident/apm/observe"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/adapt"
	"github.com/trident-sched/trident/strategy/bo"
	"github.com/trident-sched/trident/strategy/cluster"
	"github.com/trident-sched/trident/strategy/configspace"
	"github.com/trident-sched/trident/strategy/exposure"
)

// TunerOptions configure a Tuner. Zero values take the defaults in brackets, which are
// strategy/adapt.LiveTuning(): the configuration `trident bench adapt` measures as its
// live-tuner row.
type TunerOptions struct {
	// Budget is the number of evaluations per workload cluster [20]; after it the
	// cluster's recommendation is proposed, and only if it beats the running config.
	Budget int
	// Delta is the minimum probability of feasibility (sustained peak device memory below
	// the limit less MarginMB) of every proposed configuration [0.95].
	Delta float64
	// MarginMB is the safety margin below the device memory, in MiB [0: 5 % of the
	// device memory, at least 1024 (strategy/adapt.LiveTuning); negative:
	// none]. Plugin config key tune_margin_mb.
	MarginMB float64
	// PeakK is the sustained-peak allowance in noise deviations of the memory surrogate
	// (strategy/bo.Options.PeakK) [2; negative: none, feasibility judged on the evaluations'
	// own peaks]. An evaluation lasts minutes; the configuration then runs for hours and
	// peaks higher. Plugin config key tune_peak_k.
	PeakK float64
	// ExposureHours is the production exposure a measured peak is extrapolated to, in
	// hours of every planned instance of the operator [4; negative: none, feasibility
	// judged on the measured peaks as they are]. An evaluation's peak device memory is
	// recorded as the level its production exposure (the operator's planned instances ×
	// ExposureHours) is expected to reach about once, by an extreme-value fit to the peak
	// gauge's scrapes (strategy/exposure), never below the measured peak. A trial runs
	// minutes on one instance; its recommendation then runs for hours on many, and
	// peaks above every peak of the trial. Plugin config key tune_exposure_hours.
	ExposureHours float64
	// InitPoints is the BO's quasi-random initial design [1]: live, the running
	// configuration is the first evaluation and the acquisition (gated by Delta) explores
	// from there, instead of jumping to space-filling points of unknown memory use.
	InitPoints int
	// MinSamples is the number of samples an epoch's capacity estimate must rest on before
	// it is recorded as an evaluation [6] (see Tuner for the rule).
	MinSamples int
	// MaxRelStd is the largest relative standard deviation of a recordable
	// observation-layer estimate [0.15].
	MaxRelStd float64
	// PendingRounds is how many rounds a proposal may wait for the planner to start
	// rolling it out before the Tuner gives up on it and proposes another [24].
	PendingRounds int
	// MaxTries bounds the BO suggestions drawn per round while looking for a proposable
	// one [8].
	MaxTries int
	// Optimism is κ of the capacity sent with an exploratory proposal, the surrogate's
	// upper confidence bound mean + κ·sd [1.5; negative: the mean]. The planner starts a
	// transition only when the proposed capacity repays the cold start; with the posterior
	// mean a barely-explored space never looks better than what runs, so no trial would
	// ever be rolled out. Once it runs, the measurement replaces the optimistic figure.
	Optimism float64
	// Trials measures BO evaluations as tuning trials (PUT /v1/trials): one instance of
	// the configuration beside the production instances, so the pipeline keeps being
	// rescheduled while it is measured, and only a tuned cluster's recommendation is
	// rolled out (as trialled: without a canary, in one decision). A planner that
	// answers 501 turns trials off for the job. Off, every evaluation is a candidate the
	// planner rolls out. Plugin config key tune_trials (the plugin's default: on).
	Trials bool
	// Parallel is how many trials of one operator run at once (trial slots), each a BO
	// suggestion made with the others pending, so a session needs about Budget/Parallel
	// trial rounds [1]. A trial takes a production instance's place: an operator runs at
	// most half its planned instances (at least one) as trials. The session's first trial
	// (the running config) runs alone. A planner that refuses a slot (HTTP 501: its
	// actuator runs fewer) caps it at the slots it accepted. Plugin config key
	// tune_parallel.
	Parallel int
	// WarmStart is how many recommendations of recently tuned workload clusters a new
	// cluster's session evaluates first (adapt.Options.WarmStart) [2; negative: none].
	WarmStart int
	// OOMGuard is the number of OOM restarts of the running config's production instances
	// after which the Tuner proposes to revert the operator to its job file's config [3;
	// negative: never] (see Tuner.guard).
	OOMGuard int
	// TrialRounds bounds the rounds one trial may take to be measured [60]; a trial not
	// measured by then is set aside.
	TrialRounds int
	// StallRounds bounds the rounds a session may stall [60]: a round stalls when every
	// suggestion drawn falls below Delta (the optimiser offers an unsafe configuration
	// only when none of its candidates meets Delta). A stalled session draws one
	// suggestion per round, since its memory model changes only with a new evaluation
	// (e.g. the running config measured again); after StallRounds stalled rounds in a
	// row it concludes with what it measured and its recommendation follows.
	StallRounds int
	// Cluster configures the workload clustering [WarmUp 10: one feature sample per
	// instance and round is a window mean, far less noisy than one request;
	// RangeFraction 0.1: window means of a uniform regime can be near constant].
	Cluster cluster.Options
	// MemoryBlind tunes with plain-EI BO that ignores device memory (an OOM evaluation is a
	// failed trial left out of the surrogate): the unconstrained baseline of the paper's
	// Table 6, which `trident bench e2e` runs on the shipped loop. Not a plugin setting.
	MemoryBlind bool
	// Seed seeds the tuning sessions.
	Seed uint64

	// marginFrac is the default margin's fraction of the device memory (set by
	// withDefaults when MarginMB is left at 0).
	marginFrac float64
	// Logger (default discard).
	Logger *slog.Logger
}

// tuning is the BO session configuration the options (defaults applied) describe.
func (o TunerOptions) tuning() adapt.Tuning {
	return adapt.Tuning{Budget: o.Budget, InitPoints: o.InitPoints, Delta: o.Delta, MarginMiB: o.MarginMB, MarginFrac: o.marginFrac, PeakK: o.PeakK}
}

func (o TunerOptions) withDefaults() TunerOptions {
	live := adapt.LiveTuning()
	if o.Budget <= 0 {
		o.Budget = live.Budget
	}
	if o.Delta == 0 {
		o.Delta = live.Delta
	}
	if o.InitPoints <= 0 {
		o.InitPoints = live.InitPoints
	}
	switch {
	case o.MarginMB == 0:
		o.MarginMB, o.marginFrac = live.MarginMiB, live.MarginFrac
	case o.MarginMB < 0:
		o.MarginMB = 0
	}
	switch {
	case o.PeakK == 0:
		o.PeakK = live.PeakK
	case o.PeakK < 0:
		o.PeakK = 0
	}
	switch {
	case o.ExposureHours == 0:
		o.ExposureHours = DefaultExposureHours
	case o.ExposureHours < 0:
		o.ExposureHours = 0
	}
	if o.MinSamples <= 0 {
		o.MinSamples = 6
	}
	if o.MaxRelStd <= 0 {
		o.MaxRelStd = 0.15
	}
	if o.PendingRounds <= 0 {
		o.PendingRounds = 24
	}
	if o.Optimism == 0 {
		o.Optimism = 1.5
	}
	if o.Optimism < 0 {
		o.Optimism = 0
	}
	if o.MaxTries <= 0 {
		o.MaxTries = 8
	}
	if o.TrialRounds <= 0 {
		o.TrialRounds = 60
	}
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.StallRounds <= 0 {
		o.StallRounds = 60
	}
	if o.OOMGuard == 0 {
		o.OOMGuard = 3
	}
	switch {
	case o.WarmStart == 0:
		o.WarmStart = 2
	case o.WarmStart < 0:
		o.WarmStart = 0
	}
	if o.Cluster.WarmUp == 0 {
		o.Cluster.WarmUp = 10
	}
	if o.Cluster.RangeFraction == 0 {
		// The tuner clusters per-scrape feature means (see cluster.Options.RangeFraction).
		o.Cluster.RangeFraction = 0.1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// DefaultExposureHours is TunerOptions.ExposureHours's default: a recommendation is
// judged on the peak its planned instances reach about once in 4 hours, i.e. about one
// OOM restart (33 s of one instance) per 4 hours of the operator at the device's limit
// less the margin. On `trident sim` (7 seeds of each pipeline) 24 hours, 1.8 fitted
// scales higher, kept PDF's gain but cost video 6 % of its median records/s: its
// recommendations, judged against a day, were cut back further than the runs' hours
// needed (docs/benchmarks.md).
const DefaultExposureHours = 4

// Evaluation is one measurement the Tuner recorded into an operator's BO session.
type Evaluation struct {
	Epoch   uint64
	Config  string
	Cluster int
	// Throughput is the per-instance sustainable capacity (0 after OOM).
	Throughput float64
	// PeakMiB is the peak device memory recorded into the memory model, in MiB: the
	// measured peak extrapolated to the production exposure (TunerOptions.ExposureHours),
	// or the device memory after an OOM.
	PeakMiB float64
	// MeasuredPeakMiB is the largest peak device memory the epoch's instances reported.
	MeasuredPeakMiB float64
	// OOM is true when an instance of the epoch exited out of device memory: the
	// evaluation is infeasible.
	OOM bool
	// StartFailed is true when the epoch's trial instance exited by itself before it
	// served (an engine refusing its config; OOM is true too), and Pool is the smallest
	// start-up pool its instances reported relative to their need (0: none).
	StartFailed bool
	Pool        float64
}

// Proposal is one candidate the Tuner PUT to the planner.
type Proposal struct {
	Config string
	// Capacity is the throughput surrogate's predicted per-instance capacity.
	Capacity float64
	// PFeasible is the surrogates' probability of feasibility at Config: its sustained
	// peak fits and, once the engine reported a start-up pool, it starts.
	PFeasible float64
	// Recommendation is true for a tuned cluster's recommendation (false for a BO trial).
	Recommendation bool
	// Trial is true for a configuration put as a tuning trial (PUT /v1/trials), not
	// proposed for a rollout; Trialled for a recommendation measured on trials (rolled out
	// without a canary); Revert for the OOM guard's revert to the job file's config.
	Trial, Trialled, Revert bool
}

// TunerStats is what the Tuner did for one operator.
type TunerStats struct {
	Evaluations []Evaluation
	Proposals   []Proposal
}

// Tuner closes the adaptation loop live. Per (job, operator) that declares tunable
// parameters (group meta trident_params) it keeps one strategy/adapt Advisor (online
// workload clustering plus one memory-constrained BO session per dominant cluster) and,
// every feed round:
//
//  1. maps config epochs to configs from the planner's plan (config_epoch runs config;
//     config_epoch+1 runs candidate_config during a transition);
//  2. reads the operator's newest scrape (Estimator.Latest): per epoch the maximum of
//     trident_device_memory_peak_bytes over its instances (over all rounds), and whether
//     trident_oom_restarts_total rose on an instance of that epoch (a counter higher than
//     in the previous scrape of the same allocation, or non-zero on an allocation first
//     seen after the Tuner's first scrape: new allocations count from zero);
//  3. feeds every instance's workload feature means to the clustering;
//  4. records at most one evaluation per epoch of the current (newest running) epoch's
//     config: at once as infeasible (throughput 0) when an OOM was seen, otherwise when
//     its capacity estimate is stable — the observation layer's estimate of that epoch
//     resting on at least MinSamples accepted samples with a relative standard deviation of
//     at most MaxRelStd, or, for synchronous operators whose samples the signal filter
//     rejects (starved, not the bottleneck), the epoch's own useful-time rate (records per
//     second of processing, summed over its instances) over at least MinSamples
//     intervals. A batched operator's useful-time rate is a lower bound of its capacity
//     (requests overlap), not a measurement of it: its evaluation waits for the
//     observation layer. An
//     OOM seen after a feasible record of the same epoch is recorded once more, as
//     infeasible;
//  5. once the running config has been recorded and no transition is in flight, asks the
//     Advisor for the next configuration and PUTs it to /v1/candidates/{job}/{op} with
//     the throughput surrogate's predicted capacity. A trial is never the running
//     config, a config seen to OOM, or one whose predicted P(feasible) is below Delta;
//     after the budget the recommendation is proposed only if its throughput beats the
//     running config's measured one.
//
// The planner decides whether and when a candidate runs; a proposal it does not start
// rolling out within PendingRounds rounds is set aside and another is proposed.
//
// With TunerOptions.Trials, steps 4 and 5 measure on tuning trials instead (trialStep):
// each evaluation runs as a trial beside the production instances, and only a tuned
// cluster's recommendation becomes a candidate. In both modes the OOM guard (guard)
// reverts a config whose production instances restart out of memory. The Tuner is not
// safe for concurrent rounds; Stats may be called concurrently.
type Tuner struct {
	o       TunerOptions
	est     *Estimator
	planner *client.Client
	rng     *rand.Rand

	mu  sync.Mutex
	ops map[string]*opTuner // key job/op
}

// NewTuner returns a Tuner over est that talks to the planner through pc (the Feeder's
// planner client).
func NewTuner(est *Estimator, pc *client.Client, o TunerOptions) (*Tuner, error) {
	if est == nil || pc == nil {
		return nil, errors.New("feed: tuner: an estimator and a planner client are required")
	}
	o = o.withDefaults()
	if err := o.tuning().Validate(); err != nil {
		return nil, fmt.Errorf("feed: tuner: %w", err)
	}
	return &Tuner{o: o, est: est, planner: pc, rng: rand.New(rand.NewPCG(o.Seed, 0x7475)), ops: map[string]*opTuner{}}, nil
}

// Stats returns a copy of what the Tuner recorded and proposed for job/op.
func (t *Tuner) Stats(job, op string) TunerStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	ot, ok := t.ops[key(job, op)]
	if !ok {
		return TunerStats{}
	}
	return TunerStats{Evaluations: append([]Evaluation(nil), ot.evals...), Proposals: append([]Proposal(nil), ot.proposals...)}
}

// Round runs one tuning step for every tunable operator of pipes (already refreshed by
// the Feeder this round). Errors of single operators are joined; the others still run.
func (t *Tuner) Round(ctx context.Context, pipes []client.Pipeline) error {
	var errs []error
	for _, p := range pipes {
		tunable := false
		for _, op := range p.Operators {
			tunable = tunable || op.Params != ""
		}
		if !tunable {
			continue
		}
		groups, err := t.plan(ctx, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, op := range p.Operators {
			if op.Params == "" {
				continue
			}
			if err := t.operator(ctx, p.Job, op, groups[op.Name]); err != nil {
				errs = append(errs, fmt.Errorf("feed: tune %s/%s: %w", p.Job, op.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// plan reads the pipeline's committed plan; before the first decision (404) every operator
// runs its registered config at epoch 0.
func (t *Tuner) plan(ctx context.Context, p client.Pipeline) (map[string]client.PlanGroup, error) {
	resp, err := t.planner.Plan(ctx, p.Job)
	if client.IsNotFound(err) {
		resp.Groups, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("feed: tune %s: read plan: %w", p.Job, err)
	}
	out := map[string]client.PlanGroup{}
	for _, op := range p.Operators {
		g, ok := resp.Groups[op.Name]
		if !ok {
			g = client.PlanGroup{Config: op.Config}
		}
		out[op.Name] = g
	}
	return out, nil
}

// opTuner is the tuning state of one operator.
type opTuner struct {
	job, op  string
	space    *configspace.Space
	adv      *adapt.Advisor
	sync     bool // declared synchronous: its useful-time rate is its capacity
	features []string
	memMiB   float64 // device memory limit; 0 = CPU operator (unconstrained BO)
	// count is the operator's planned instances in the latest plan (the production
	// exposure's width); origin is the time of the first snapshot absorbed (the peak
	// series' clock).
	count  int
	origin time.Time

	epochCfg map[uint64]string // canonical config per epoch
	epochs   map[uint64]*epochState
	allocs   map[string]allocState
	prev     *Snapshot // previous snapshot processed
	measured map[string]float64
	oomCfg   map[string]bool
	declined map[string]bool
	pending  *pendingProposal
	round    int
	// noTrials is set once the planner refused a trial (501): configurations are then
	// measured by rolling them out. trials are the trials the Tuner put and waits on, by
	// slot; slots caps the slots used once the planner refused a higher one (0: none
	// refused).
	noTrials bool
	trials   map[int]*trialWait
	slots    int
	// stalled counts the rounds in a row whose suggestions all fell below Delta, since
	// the last evaluation was recorded.
	stalled int

	evals     []Evaluation
	proposals []Proposal
}

type epochState struct {
	peakBytes float64
	// pool is the smallest working pool the epoch's instances reported relative to their
	// need (Instance.Pool; 0: none reported); startFailed is set when its trial's
	// instance exited by itself (not OOM-killed) before it served an interval or reported
	// a peak: an engine that refused its config at start-up.
	pool        float64
	startFailed bool
	// peaks are the epoch's instances' peak-gauge readings by allocation, kept while the
	// epoch may still be recorded as an evaluation (exposure extrapolation).
	peaks map[string]*exposure.Series
	// seen is the last round an instance reported the epoch.
	seen int
	oom  bool
	// ooms counts the OOM restarts seen on the epoch's instances; reverted is set once
	// the OOM guard proposed to replace its config.
	ooms                int
	reverted            bool
	recorded, oomRecord bool
	// cluster is the workload cluster the epoch's measurement was recorded in.
	cluster         int
	records, useful float64
	intervals       int
}

type allocState struct {
	epoch uint64
	ooms  float64
}

type pendingProposal struct {
	config string
	round  int
}

// trialWait is a trial the Tuner put: its config, the epoch its instance exports and the
// round it was put in.
type trialWait struct {
	config string
	epoch  uint64
	round  int
}

// setup returns job/op's tuning state, creating it on first use.
func (t *Tuner) setup(job string, op fsm.Operator) (*opTuner, error) {
	k := key(job, op.Name)
	t.mu.Lock()
	ot, ok := t.ops[k]
	t.mu.Unlock()
	if ok {
		return ot, nil
	}
	space, err := configspace.Parse(op.Params)
	if err != nil {
		return nil, fmt.Errorf("params %q: %w", op.Params, err)
	}
	features := op.Features
	if len(features) == 0 {
		features = []string{"const"}
	}
	if op.GPUs > 0 && !(op.GPUMemoryMB > 0) {
		return nil, fmt.Errorf("accelerator operator without a device memory size (group meta trident_gpu_memory_mb): cannot bound its peak memory")
	}
	mem := float64(op.GPUMemoryMB)
	if op.GPUs == 0 {
		mem = 0 // a CPU operator has no device memory to exceed: unconstrained BO
	}
	tuning := t.o.tuning()
	if m := tuning.Margin(mem); mem > 0 && m >= mem {
		return nil, fmt.Errorf("tuning margin %v MiB leaves nothing of the %v MiB device memory (plugin config tune_margin_mb)", m, mem)
	}
	bopts := tuning.BOOptions(mem)
	bopts.Logger = t.o.Logger
	if t.o.MemoryBlind {
		bopts.Method = bo.Unconstrained
	}
	adv, err := adapt.New(space, len(features), adapt.Options{Cluster: t.o.Cluster, BO: bopts, Budget: t.o.Budget, WarmStart: t.o.WarmStart, Logger: t.o.Logger},
		rand.New(rand.NewPCG(t.rng.Uint64(), t.rng.Uint64())))
	if err != nil {
		return nil, err
	}
	ot = &opTuner{job: job, op: op.Name, space: space, adv: adv, sync: op.Synchronous, features: features, memMiB: bopts.MemLimit,
		epochCfg: map[uint64]string{}, epochs: map[uint64]*epochState{}, allocs: map[string]allocState{},
		measured: map[string]float64{}, oomCfg: map[string]bool{}, declined: map[string]bool{}}
	t.mu.Lock()
	t.ops[k] = ot
	t.mu.Unlock()
	return ot, nil
}

// canonical returns the canonical string of config s in space, or "" if s does not parse.
func canonical(space *configspace.Space, s string) string {
	if s == "" {
		return ""
	}
	c, err := space.ParseConfig(s)
	if err != nil {
		return ""
	}
	return c.String()
}

// operator runs one tuning step of job/op.
func (t *Tuner) operator(ctx context.Context, job string, op fsm.Operator, g client.PlanGroup) error {
	ot, err := t.setup(job, op)
	if err != nil {
		return err
	}
	ot.round++
	running := canonical(ot.space, g.Config)
	if running == "" {
		return fmt.Errorf("plan config %q does not fit params %q", g.Config, op.Params)
	}
	ot.epochCfg[g.ConfigEpoch] = running
	ot.count = g.Count
	candidate := canonical(ot.space, g.CandidateConfig)
	if candidate != "" {
		ot.epochCfg[g.ConfigEpoch+1] = candidate
	}
	trs := planTrials(g)
	for _, tr := range trs {
		if c := canonical(ot.space, tr.Config); c != "" {
			ot.epochCfg[tr.Epoch] = c
		}
	}
	trial := len(trs) > 0

	snap, ok := t.est.Latest(job, op.Name)
	if !ok || len(snap.Instances) == 0 || (ot.prev != nil && !snap.Time.After(ot.prev.Time)) {
		return nil // no new scrape
	}
	cur := t.absorb(ot, snap)
	if acted, err := t.guard(ctx, ot, op, running, candidate, trial, cur); acted || err != nil {
		return err
	}
	if !t.trialMode(ot) {
		if err := t.evaluate(ot, cur); err != nil {
			return err
		}
		return t.propose(ctx, ot, op, g, running, candidate, cur)
	}
	if st := ot.epoch(cur); st.oom {
		// What runs fails: that is a measurement however tuning measures the rest.
		if err := t.evaluate(ot, cur); err != nil {
			return err
		}
	}
	for _, tr := range trs {
		if st := ot.epoch(tr.Epoch); tr.Failed != "" && !st.oom {
			// The planner saw the trial's instance fail to run (it exited or was
			// OOM-killed before serving, so its metrics show nothing): a failed
			// evaluation, recorded at the device limit as an OOM is.
			t.o.Logger.Info("tune: trial failed to run", "job", job, "operator", op.Name, "config", tr.Config, "slot", tr.Slot, "why", tr.Failed)
			// An instance that exited by itself before it served (no interval, no peak)
			// refused its config at start-up; one that served and then exited did not.
			st.oom = true
			st.startFailed = !fsm.TrialFailedOOM(tr.Failed) && st.intervals == 0 && st.peakBytes == 0
		}
		if err := t.evaluate(ot, tr.Epoch); err != nil {
			return err
		}
	}
	return t.trialStep(ctx, ot, op, g, running, candidate, trs)
}

// absorb folds a new snapshot into the per-epoch state, feeds the workload features to the
// clustering and returns the newest epoch any production instance runs (trial epochs
// excluded).
func (t *Tuner) absorb(ot *opTuner, snap Snapshot) uint64 {
	first := ot.prev == nil
	if first {
		ot.origin = snap.Time
	}
	var cur uint64
	ids := make([]string, 0, len(snap.Instances))
	for id := range snap.Instances {
		ids = append(ids, id)
	}
	sort.Strings(ids) // deterministic clustering order
	for _, id := range ids {
		m := snap.Instances[id]
		e := uint64(math.Max(0, m.Epoch))
		if !fsm.IsTrialEpoch(e) {
			cur = max(cur, e)
		}
		st := ot.epoch(e)
		st.seen = ot.round
		st.peakBytes = math.Max(st.peakBytes, m.DeviceMemPeak)
		if m.Pool > 0 && (st.pool == 0 || m.Pool < st.pool) {
			st.pool = m.Pool
		}
		t.trackPeak(ot, e, st, id, snap.Time, m.DeviceMemPeak)
		a, seen := ot.allocs[id]
		switch {
		case seen && m.OOMRestarts > a.ooms, !seen && !first && m.OOMRestarts > 0:
			if !st.oom {
				t.o.Logger.Info("tune: OOM restart", "job", ot.job, "operator", ot.op, "epoch", e, "alloc", id, "oom_restarts", m.OOMRestarts)
			}
			st.oom = true
			if seen {
				st.ooms += int(m.OOMRestarts - a.ooms)
			} else {
				st.ooms += int(m.OOMRestarts)
			}
		}
		ot.allocs[id] = allocState{epoch: e, ooms: m.OOMRestarts}
		if ot.prev != nil {
			if old, ok := ot.prev.Instances[id]; ok && old.Epoch == m.Epoch && m.RecordsIn >= old.RecordsIn && m.UsefulSeconds > old.UsefulSeconds {
				st.records += m.RecordsIn - old.RecordsIn
				st.useful += m.UsefulSeconds - old.UsefulSeconds
				st.intervals++
			}
		}
		if len(m.FeatureMean) > 0 || (len(ot.features) == 1 && ot.features[0] == "const") {
			if _, err := ot.adv.ObserveRequest(featureVector(ot.features, m)); err != nil {
				t.o.Logger.Debug("tune: feature sample skipped", "job", ot.job, "operator", ot.op, "error", err)
			}
		}
	}
	for id := range ot.allocs {
		if _, ok := snap.Instances[id]; !ok {
			delete(ot.allocs, id)
		}
	}
	t.dropGonePeaks(ot)
	ot.prev = &snap
	return cur
}

func (ot *opTuner) epoch(e uint64) *epochState {
	st, ok := ot.epochs[e]
	if !ok {
		st = &epochState{}
		ot.epochs[e] = st
	}
	return st
}

// dropGonePeaks forgets the peak series of every epoch no instance has reported for
// TrialRounds rounds (a trial not measured in that time is set aside): an epoch is
// recorded while its instances are measured, and one that is gone would otherwise keep
// its series for the Tuner's lifetime. A shorter absence (an instance restarting) keeps
// them.
func (t *Tuner) dropGonePeaks(ot *opTuner) {
	for _, st := range ot.epochs {
		if st.peaks != nil && ot.round-st.seen > t.o.TrialRounds {
			st.peaks = nil
		}
	}
}

// trackPeak adds instance id's peak-gauge reading v at time at to epoch e's series, while
// the epoch may still be recorded as a feasible evaluation: a trial's epoch, or any epoch
// when evaluations are rolled out. A device-less operator (no limit) keeps none.
func (t *Tuner) trackPeak(ot *opTuner, e uint64, st *epochState, id string, at time.Time, v float64) {
	if ot.memMiB <= 0 || t.o.ExposureHours <= 0 || st.recorded || st.oom || !(v > 0) || t.trialMode(ot) && !fsm.IsTrialEpoch(e) {
		return
	}
	if st.peaks == nil {
		st.peaks = map[string]*exposure.Series{}
	}
	s, ok := st.peaks[id]
	if !ok {
		s = &exposure.Series{}
		st.peaks[id] = s
	}
	s.Add(at.Sub(ot.origin).Seconds(), v)
}

// productionPeak returns the peak device memory (MiB) epoch e's measured peak peakMiB
// extrapolates to over the production exposure (every planned instance of the operator for
// ExposureHours; strategy/exposure): the level about one per-second peak of that exposure
// exceeds, by an extreme-value fit to the epoch's peak-gauge scrapes. It is peakMiB when
// extrapolation is off or the scrapes show no growth of the peak to fit.
func (t *Tuner) productionPeak(ot *opTuner, e uint64, st *epochState, peakMiB float64) float64 {
	if len(st.peaks) == 0 {
		return peakMiB
	}
	ids := slices.Sorted(maps.Keys(st.peaks))
	series := make([]*exposure.Series, len(ids))
	for i, id := range ids {
		series[i] = st.peaks[id]
	}
	fit, err := exposure.FitSeries(series...)
	exposureS := float64(max(1, ot.count)) * t.o.ExposureHours * 3600
	if err != nil {
		t.o.Logger.Debug("tune: peak not extrapolated", "job", ot.job, "operator", ot.op, "epoch", e, "err", err)
		return peakMiB
	}
	out := math.Max(peakMiB, fit.Level(exposureS)/(1<<20))
	t.o.Logger.Info("tune: peak extrapolated to the production exposure", "job", ot.job, "operator", ot.op, "epoch", e,
		"measured_mib", peakMiB, "production_mib", out, "scale_mib", fit.Scale/(1<<20), "exact_blocks", fit.Exact, "censored_blocks", fit.Censored,
		"observed_s", fit.Seconds, "exposure_instance_h", exposureS/3600)
	return out
}

// stable returns epoch e's recordable capacity (see Tuner); a trial epoch's comes from the
// trial's own model (Estimator.TrialEstimate).
func (t *Tuner) stable(ot *opTuner, e uint64, st *epochState) (float64, bool) {
	estimate := t.est.Estimate
	if fsm.IsTrialEpoch(e) {
		estimate = func(job, op string) (observe.Estimate, error) { return t.est.TrialEstimate(job, op, e) }
	}
	if est, err := estimate(ot.job, ot.op); err == nil && est.Epoch == e && !Fallback(est.Source) &&
		est.Samples >= t.o.MinSamples && est.StdDev <= t.o.MaxRelStd*est.Capacity {
		return est.Capacity, true
	}
	if ot.sync && st.intervals >= t.o.MinSamples && st.useful > 0 && st.records > 0 {
		return st.records / st.useful, true
	}
	return 0, false
}

// evaluate records epoch e's measurement once it is an OOM or stable (a trial's epoch:
// once its trial's model is).
func (t *Tuner) evaluate(ot *opTuner, e uint64) error {
	cfgStr, ok := ot.epochCfg[e]
	if !ok {
		t.o.Logger.Debug("tune: waiting for the plan to show the epoch's config", "job", ot.job, "operator", ot.op, "epoch", e)
		return nil // the plan has not shown this epoch's config yet
	}
	st := ot.epoch(e)
	if st.oom && st.oomRecord || !st.oom && st.recorded {
		return nil
	}
	cfg, err := ot.space.ParseConfig(cfgStr)
	if err != nil {
		return fmt.Errorf("config of epoch %d: %w", e, err)
	}
	measuredMiB := st.peakBytes / (1 << 20)
	peakMiB, thr := measuredMiB, 0.0
	if !st.oom {
		c, ok := t.stable(ot, e, st)
		if !ok {
			t.o.Logger.Debug("tune: waiting for a stable capacity", "job", ot.job, "operator", ot.op, "epoch", e, "intervals", st.intervals)
			return nil
		}
		thr = c
		peakMiB = t.productionPeak(ot, e, st, measuredMiB)
	} else {
		peakMiB = math.Max(peakMiB, ot.memMiB)
	}
	if st.oom && !ot.oomCfg[cfgStr] {
		// Never proposed again, measured or not. A tuned cluster whose recommendation
		// this is is tuned again (the OOM is its new session's first evaluation).
		ot.oomCfg[cfgStr] = true
		delete(ot.measured, cfgStr)
		if dom, ok := ot.adv.Clusterer().Dominant(); ok && dom.Status == cluster.Tuned && dom.Best != nil && dom.Best.String() == cfgStr {
			if err := ot.adv.Retune(); err != nil {
				return err
			}
		}
	}
	id, recorded, err := ot.adv.Record(cfg, bo.Measurement{Throughput: thr, PeakMem: peakMiB, OOM: st.oom, StartFailed: st.startFailed, Pool: st.pool})
	if err != nil {
		return fmt.Errorf("record epoch %d: %w", e, err)
	}
	if !recorded {
		t.o.Logger.Debug("tune: measurement not recorded (no dominant workload cluster, cluster tuned, or budget spent)", "job", ot.job, "operator", ot.op, "epoch", e, "cluster", id)
		return nil
	}
	st.recorded = true
	st.peaks = nil // recorded: no further extrapolation
	st.cluster = id
	if st.oom {
		st.oomRecord = true
		ot.oomCfg[cfgStr] = true
		delete(ot.measured, cfgStr)
	} else {
		ot.measured[cfgStr] = thr
	}
	ev := Evaluation{Epoch: e, Config: cfgStr, Cluster: id, Throughput: thr, PeakMiB: peakMiB, MeasuredPeakMiB: measuredMiB, OOM: st.oom,
		StartFailed: st.startFailed, Pool: st.pool}
	t.mu.Lock()
	ot.evals = append(ot.evals, ev)
	t.mu.Unlock()
	ot.stalled = 0 // the memory model changes: suggestions may meet Delta again
	t.o.Logger.Info("tune: evaluation recorded", "job", ot.job, "operator", ot.op, "epoch", e, "config", cfgStr,
		"cluster", id, "throughput", thr, "peak_mib", peakMiB, "measured_peak_mib", measuredMiB, "oom", st.oom)
	return nil
}

// propose PUTs the next candidate when the running config has been measured, no
// transition is in flight and no earlier proposal is still waiting.
func (t *Tuner) propose(ctx context.Context, ot *opTuner, op fsm.Operator, g client.PlanGroup, running, candidate string, cur uint64) error {
	if candidate != "" {
		ot.pending = nil // the planner is rolling out a candidate: wait for it
		return nil
	}
	if t.awaitPending(ot, running) {
		return nil
	}
	if cur != g.ConfigEpoch || !ot.epoch(cur).recorded {
		return nil // measure what runs first
	}
	cl := ot.adv.Clusterer()
	if dom, ok := cl.Dominant(); ok && dom.Status != cluster.Tuned && cl.Resolve(ot.epoch(cur).cluster) != dom.ID && !ot.epoch(cur).oom {
		// The workload moved to another cluster since the running config was measured:
		// its session starts from the running config's measurement under the new
		// workload, as the first did.
		ot.epoch(cur).recorded = false
		return nil
	}
	unsafe, tries := 0, t.tries(ot) // unsafe: suggestions skipped as below Delta while a feasible evaluation exists
	for range tries {
		adv, ok, err := ot.adv.Next(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		cfgStr := adv.Config.String()
		if !adv.Evaluate {
			return t.recommend(ctx, ot, op, adv, running)
		}
		if cfgStr == running || ot.oomCfg[cfgStr] || ot.declined[cfgStr] {
			continue
		}
		pred, err := ot.adv.Predict(ctx, adv.Cluster, adv.Config)
		if errors.Is(err, bo.ErrNoEvaluation) {
			return nil // the session has nothing to predict from yet: measure what runs
		}
		if err != nil {
			return err
		}
		if pred.PFeasible < t.o.Delta || !pred.HaveThroughput {
			t.o.Logger.Debug("tune: suggestion skipped", "job", ot.job, "operator", ot.op, "config", cfgStr,
				"p_feasible", pred.PFeasible, "have_throughput", pred.HaveThroughput)
			if pred.HaveThroughput {
				unsafe++
			}
			continue
		}
		ot.stalled = 0
		return t.put(ctx, ot, op, Proposal{Config: cfgStr, Capacity: math.Max(0, pred.Throughput+t.o.Optimism*pred.ThroughputStd), PFeasible: pred.PFeasible})
	}
	adv, ok, err := t.conclude(ctx, ot, unsafe == tries)
	if err != nil || !ok {
		return err
	}
	return t.recommend(ctx, ot, op, adv, running)
}

// tries is how many suggestions ot may draw this round: MaxTries, one while it stalls.
func (t *Tuner) tries(ot *opTuner) int {
	if ot.stalled > 0 {
		return 1
	}
	return t.o.MaxTries
}

// conclude counts a stalled round (every suggestion drawn fell below Delta) and ends ot's
// tuning session once StallRounds such rounds came in a row: the optimiser offers an
// unsafe configuration only when none of its candidates meets Delta, and with no new
// evaluation its memory model keeps that verdict, so the session would spin on it. The
// session's recommendation follows, as when its budget is spent.
func (t *Tuner) conclude(ctx context.Context, ot *opTuner, stalled bool) (adapt.Advice, bool, error) {
	if !stalled {
		ot.stalled = 0
		return adapt.Advice{}, false, nil
	}
	if ot.stalled++; ot.stalled < t.o.StallRounds {
		return adapt.Advice{}, false, nil
	}
	ot.stalled = 0
	t.o.Logger.Info("tune: no suggestion has met the memory-safety threshold for StallRounds rounds; concluding the session", "job", ot.job, "operator", ot.op, "rounds", t.o.StallRounds, "delta", t.o.Delta)
	adv, ok, err := ot.adv.Conclude(ctx)
	if err != nil {
		return adapt.Advice{}, false, fmt.Errorf("conclude tuning: %w", err)
	}
	return adv, ok, nil
}

// awaitPending settles ot's pending proposal: it is done once the plan runs it, and set
// aside (never proposed again) when the planner has not started rolling it out within
// PendingRounds rounds. It reports whether the Tuner still waits for it.
func (t *Tuner) awaitPending(ot *opTuner, running string) bool {
	p := ot.pending
	switch {
	case p == nil:
		return false
	case p.config == running:
		ot.pending = nil
		return false
	case ot.round-p.round < t.o.PendingRounds:
		return true
	}
	t.o.Logger.Info("tune: proposal not adopted; setting it aside", "job", ot.job, "operator", ot.op, "config", p.config)
	ot.declined[p.config] = true
	ot.pending = nil
	return false
}

// put sends p to the planner and remembers it as pending.
func (t *Tuner) put(ctx context.Context, ot *opTuner, op fsm.Operator, p Proposal) error {
	req := client.CandidateRequest{Config: p.Config, Capacity: p.Capacity, ColdStartSec: op.ColdStartSec, Trialled: p.Trialled, Revert: p.Revert}
	if _, err := t.planner.PutCandidate(ctx, ot.job, ot.op, req); err != nil {
		return fmt.Errorf("propose %s: %w", p.Config, err)
	}
	ot.pending = &pendingProposal{config: p.Config, round: ot.round}
	t.mu.Lock()
	ot.proposals = append(ot.proposals, p)
	t.mu.Unlock()
	t.o.Logger.Info("tune: candidate proposed", "job", ot.job, "operator", ot.op, "config", p.Config,
		"capacity", p.Capacity, "p_feasible", p.PFeasible, "recommendation", p.Recommendation)
	return nil
}

// trialMode reports whether ot's evaluations run as trials (TunerOptions.Trials, and the
// planner has not answered 501).
func (t *Tuner) trialMode(ot *opTuner) bool { return t.o.Trials && !ot.noTrials }

// recommend proposes a tuned cluster's recommendation adv as a candidate when it beats
// the running config's measurement (and is not the running config, nor seen to OOM).
func (t *Tuner) recommend(ctx context.Context, ot *opTuner, op fsm.Operator, adv adapt.Advice, running string) error {
	cfgStr := adv.Config.String()
	base, measured := ot.measured[running]
	if cfgStr == running || ot.oomCfg[cfgStr] || measured && adv.Predicted <= base || !(adv.Predicted > 0) || adv.PFeasible < t.o.Delta {
		return nil
	}
	capacity := adv.Predicted
	if est, err := t.est.Estimate(ot.job, ot.op); measured && base > 0 && err == nil && !Fallback(est.Source) && t.trialMode(ot) {
		// Trials measure every config of a session on one instance that runs at its
		// admission limit; the planner compares candidates with the production instances'
		// estimate, which runs at their share of the queue. The session's ratio carries
		// over: the candidate is offered at the running config's production estimate
		// scaled by the trials' ratio of the two.
		capacity = est.Capacity * adv.Predicted / base
	}
	return t.put(ctx, ot, op, Proposal{Config: cfgStr, Capacity: capacity, PFeasible: adv.PFeasible, Recommendation: true,
		Trialled: t.trialMode(ot)})
}

// trialStep advances tuning by trials: while no transition is in flight and the
// operator runs saturated, it waits for the trials it put to be measured (evaluate records
// them) or to time out, and puts the next ones into the free slots (slotCount): the
// running config first in a new session, alone (so every configuration of a session is
// measured alike, on a trial's instance), then the BO's suggestions, each drawn with the
// trials still running as pending points. A tuned cluster's recommendation ends the
// trials and is proposed as a trialled candidate, which the planner rolls out without a
// canary.
func (t *Tuner) trialStep(ctx context.Context, ot *opTuner, op fsm.Operator, g client.PlanGroup, running, candidate string, trs []fsm.Trial) error {
	trial := len(trs) > 0
	if candidate != "" {
		ot.pending = nil // a transition runs: its canary holds the slot
		return t.dropTrials(ctx, ot, trial)
	}
	if t.awaitPending(ot, running) {
		return nil
	}
	if est, err := t.est.Estimate(ot.job, ot.op); err != nil || Fallback(est.Source) || !t.est.SaturatedWithin(ot.job, ot.op, trialSaturation) {
		// Not saturated now (or never measured): a trial would not be saturated either, so
		// it would measure nothing, and a faster config would not raise the pipeline's
		// throughput.
		return t.dropTrials(ctx, ot, trial)
	}
	for _, slot := range slices.Sorted(maps.Keys(ot.trials)) {
		tr := ot.trials[slot]
		st := ot.epoch(tr.epoch)
		shown := slices.ContainsFunc(trs, func(r fsm.Trial) bool { return r.Slot == slot && r.Epoch == tr.epoch })
		switch {
		case shown && (st.recorded || st.oomRecord):
			delete(ot.trials, slot) // measured: put the next
		case ot.round-tr.round < t.o.TrialRounds:
			// starting, or being measured
		default:
			t.o.Logger.Info("tune: trial not measured in time; setting it aside", "job", ot.job, "operator", ot.op, "config", tr.config, "slot", slot, "rounds", t.o.TrialRounds)
			ot.declined[tr.config] = true
			delete(ot.trials, slot)
		}
	}
	for slot := range t.slotCount(ot, g) {
		if ot.trials[slot] != nil {
			continue
		}
		if more, err := t.fillSlot(ctx, ot, op, running, trial, slot); err != nil || !more {
			return err
		}
	}
	return nil
}

// slotCount is how many trial slots ot uses: Parallel, capped by the slots the planner
// accepted and by half the operator's planned instances (at least one).
func (t *Tuner) slotCount(ot *opTuner, g client.PlanGroup) int {
	n := t.o.Parallel
	if ot.slots > 0 {
		n = min(n, ot.slots)
	}
	return max(1, min(n, g.Count/2))
}

// fillSlot puts the next trial into the free slot: the running config when the session
// has recorded nothing yet and no trial runs, else the first of the BO's suggestions
// (drawn with the running trials pending) that is proposable. It reports whether another
// slot may be filled this round. When every suggestion drawn fails and no trial runs,
// the round counts towards concluding a stalled session (conclude), whose recommendation
// follows.
func (t *Tuner) fillSlot(ctx context.Context, ot *opTuner, op fsm.Operator, running string, trial bool, slot int) (bool, error) {
	pending := make([]configspace.Config, 0, len(ot.trials))
	for _, s := range slices.Sorted(maps.Keys(ot.trials)) {
		if c, err := ot.space.ParseConfig(ot.trials[s].config); err == nil {
			pending = append(pending, c)
		}
	}
	if len(pending) == 0 {
		pending = nil // Next's own draw: one slot behaves as before slots existed
	}
	unsafe, tries := 0, t.tries(ot) // unsafe: suggestions skipped as below Delta
	for range tries {
		adv, ok, err := ot.adv.NextPending(ctx, pending)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, nil // no dominant workload yet
		}
		if !adv.Evaluate {
			// The dominant workload is tuned (it may have moved while trials run): end
			// every trial, those the plan shows and those put this round.
			if err := t.dropTrials(ctx, ot, trial || len(ot.trials) > 0); err != nil {
				return false, err
			}
			return false, t.recommend(ctx, ot, op, adv, running)
		}
		if len(ot.trials) >= adv.Remaining {
			return false, nil // the running trials take the rest of the budget
		}
		cfgStr := adv.Config.String()
		if adv.Remaining == t.o.Budget {
			if ot.declined[running] || len(ot.trials) > 0 {
				return false, nil // what runs could not be measured on a trial, or is being measured
			}
			cfgStr = running // a new session measures what runs first
		} else if ot.oomCfg[cfgStr] || ot.declined[cfgStr] {
			continue
		} else if pred, err := ot.adv.Predict(ctx, adv.Cluster, adv.Config); err != nil {
			return false, err
		} else if pred.PFeasible < t.o.Delta {
			t.o.Logger.Debug("tune: suggestion skipped", "job", ot.job, "operator", ot.op, "config", cfgStr, "p_feasible", pred.PFeasible)
			if pred.HaveThroughput {
				unsafe++
			}
			continue
		}
		resp, err := t.planner.PutTrial(ctx, ot.job, ot.op, slot, client.TrialRequest{Config: cfgStr})
		if err != nil {
			if !client.IsNotImplemented(err) {
				return false, fmt.Errorf("trial %s in slot %d: %w", cfgStr, slot, err)
			}
			if slot > 0 {
				t.o.Logger.Info("tune: the planner runs fewer trial slots; running fewer trials at once", "job", ot.job, "operator", ot.op, "slots", slot, "err", err)
				ot.slots = slot
				return false, nil
			}
			t.o.Logger.Info("tune: the planner runs no trials; measuring configurations by rolling them out", "job", ot.job, "operator", ot.op)
			ot.noTrials = true
			return false, nil
		}
		if ot.trials == nil {
			ot.trials = map[int]*trialWait{}
		}
		ot.trials[slot] = &trialWait{config: cfgStr, epoch: fsm.TrialEpochBase + resp.Index, round: ot.round}
		ot.stalled = 0
		t.mu.Lock()
		ot.proposals = append(ot.proposals, Proposal{Config: cfgStr, Trial: true})
		t.mu.Unlock()
		t.o.Logger.Info("tune: trial put", "job", ot.job, "operator", ot.op, "config", cfgStr, "slot", slot, "cluster", adv.Cluster, "remaining", adv.Remaining)
		return true, nil
	}
	if len(ot.trials) > 0 {
		// The running trials' measurements will change the memory model: not a stall.
		return false, nil
	}
	adv, ok, err := t.conclude(ctx, ot, unsafe == tries)
	if err != nil || !ok {
		return false, err
	}
	if err := t.dropTrials(ctx, ot, trial); err != nil {
		return false, err
	}
	return false, t.recommend(ctx, ot, op, adv, running)
}

// trialSaturation is how recently an operator's production instances must have been seen
// saturated for a trial to run (the observation layer's warm-up: a trial's own first
// samples are rejected for that long anyway).
const trialSaturation = 2 * time.Minute

// dropTrials forgets the trials the Tuner waits on and ends the operator's trials in every
// slot when the plan shows one (trial).
func (t *Tuner) dropTrials(ctx context.Context, ot *opTuner, trial bool) error {
	ot.trials = nil
	if !trial {
		return nil
	}
	if _, err := t.planner.DropTrials(ctx, ot.job, ot.op); err != nil {
		return fmt.Errorf("end trials: %w", err)
	}
	return nil
}

// planTrials returns the trials plan group g shows, by slot; a planner that predates
// slots shows its one trial as TrialConfig only (slot 0).
func planTrials(g client.PlanGroup) []fsm.Trial {
	if len(g.Trials) == 0 && g.TrialConfig != "" {
		return []fsm.Trial{{Config: g.TrialConfig, Epoch: g.TrialEpoch}}
	}
	return g.Trials
}

// guard is the OOM guard. A config that ran within the device memory while it was
// measured can exceed it later (the workload moved to longer requests): its production
// instances then restart out of memory instead of serving. Once those of the newest
// epoch restarted OOMGuard times, the Tuner records the epoch infeasible (evaluate: the
// config is set aside for good, and a tuned cluster it was recommended for is tuned
// again), ends its trial and proposes a revert (fsm.Candidate.Revert: every instance
// moves at once, without a canary): to the config a transition in flight replaces when
// the failing config is that transition's candidate, else to the job file's config. It
// reports whether it acted. The job file's config itself failing, or an epoch already
// reverted, leave it to the planner and the user.
func (t *Tuner) guard(ctx context.Context, ot *opTuner, op fsm.Operator, running, candidate string, trial bool, cur uint64) (bool, error) {
	st := ot.epoch(cur)
	if t.o.OOMGuard < 0 || st.ooms < t.o.OOMGuard || st.reverted {
		return false, nil
	}
	failing, to := ot.epochCfg[cur], canonical(ot.space, op.Config)
	switch {
	case candidate != "" && failing == candidate:
		to = running // abort the transition in flight (fsm: the candidate becomes current and back)
	case candidate == "" && failing == running && to != "" && running != to:
	default:
		return false, nil
	}
	if err := t.evaluate(ot, cur); err != nil {
		return false, err
	}
	st.reverted = true
	ot.pending = nil
	if err := t.dropTrials(ctx, ot, trial); err != nil {
		return false, err
	}
	capacity := op.CapacityHint
	if est, err := t.est.Estimate(ot.job, ot.op); err == nil && est.Capacity > 0 {
		capacity = est.Capacity
	}
	if v, ok := ot.measured[to]; ok && !t.trialMode(ot) {
		capacity = v
	}
	if !(capacity > 0) {
		capacity = 1
	}
	t.o.Logger.Warn("tune: a config fails with OOM in production; reverting",
		"job", ot.job, "operator", ot.op, "config", failing, "oom_restarts", st.ooms, "revert_to", to)
	if err := t.put(ctx, ot, op, Proposal{Config: to, Capacity: capacity, PFeasible: 1, Revert: true}); err != nil {
		st.reverted = false // the planner did not take it (unreachable, not the leader): next round
		t.o.Logger.Info("tune: revert not accepted yet", "job", ot.job, "operator", ot.op, "err", err)
	}
	return true, nil
}
