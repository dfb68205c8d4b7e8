// Package shipped runs the shipped planner inside the simulator: a planner.Server (raft in
// memory, its HTTP API on loopback) whose rescheduling loop, scheduler (sched.MILP on
// HiGHS, the joint round, admission) and rolling decisions are the code `trident planner`
// runs, fed by apm/feed's Feeder and Estimator (the two-stage observation layer as the
// APM plugin runs it) over the API. The simulated cluster stands in for Nomad behind the
// planner's Actuator interface: a committed decision becomes a job version, applied by
// the engine (launches with cold starts, stops, OOM restarts), done once every instance
// of the decision runs, failed when some cannot be placed within the progress deadline.
//
// The loop runs on the simulator's virtual clock (planner.LoopConfig.Clock and Manual):
// every interval of simulated time the Scheduler scrapes the engine's metrics, runs one
// feed round and one planner round, and hands the engine what the actuator was asked to
// apply. An hour of pipeline time simulates in seconds of wall time, solves aside.
package shipped

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trident-sched/trident/apm/feed"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/strategy/configspace"
	"github.com/trident-sched/trident/strategy/milp"
)

// unlimitedBps is a node's egress as the network-agnostic ablation (Options.NoPlacement)
// reports it, and noNetWeight the MILP's co-location weight then (0 is the default
// weight, not none).
const (
	unlimitedBps = 1e15
	noNetWeight  = 1e-300
)

// Job is the simulated pipeline's Nomad job ID.
const Job = "pipeline"

// Options configures the shipped planner in the simulator. The defaults are the
// defaults of `trident planner` and of the APM plugin's feed.
type Options struct {
	// IntervalS is the loop's interval and the feed's scrape period in simulated seconds
	// (default 10, the planner's -interval).
	IntervalS float64
	// SolveTimeout bounds one solve in wall time (default 5 s: the simulator's rounds
	// are many; `trident planner` allows 20 s).
	SolveTimeout time.Duration
	// MaxBatch caps config transitions per operator and round (default 1, the planner's
	// -max-batch).
	MaxBatch int
	// CatchUpSec is the planner's -catch-up in seconds (default 0: steady state only).
	CatchUpSec float64
	// ProgressDeadlineS is how long a decision may have unplaced instances before it
	// fails, as Nomad's update progress_deadline (default 600).
	ProgressDeadlineS float64
	// ProfileSamples is the size of the pilot sample the job file's declarations
	// (amplification, output size) are measured on (default 240, as Static's profile).
	ProfileSamples int
	// Initial returns the job as submitted (per operator, instances per node), which the
	// planner takes over at its first round. Nil: an even split of every pool.
	Initial func(env *sim.Env) ([][]int, error)
	// Tune runs the feed's tuner (the APM plugin's `tune = "true"`): it proposes
	// configurations of the tunable operators, which the planner rolls out through
	// canaries. Tuning configures it (zero: the plugin's defaults).
	Tune   bool
	Tuning feed.TunerOptions
	// NoCanary starts config transitions without a canary (the planner's -canary=false).
	NoCanary bool
	// Ablations of the paper's §8.6, run on the shipped loop:
	//   - NoObservation: the feed's estimator answers with the observed rates it falls
	//     back to, never the two-stage GP model (feed.Estimator.SetRatesOnly), "w/o
	//     observation layer";
	//   - NoPlacement: the planner sees unlimited links and co-location is worth nothing
	//     to its MILP (network-agnostic placement), "w/o placement-aware scheduling";
	//   - AllAtOnce: config transitions start without a canary and without a cap on the
	//     instances switched per round, "w/o rolling update".
	// "w/o adaptation layer" is Tune off.
	NoObservation, NoPlacement, AllAtOnce bool
	// Label overrides Name.
	Label string
	// Logger receives the planner's and the feed's logs (default: discard).
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.IntervalS <= 0 {
		o.IntervalS = 10
	}
	if o.SolveTimeout <= 0 {
		o.SolveTimeout = 5 * time.Second
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 1
	}
	if o.ProgressDeadlineS <= 0 {
		o.ProgressDeadlineS = 600
	}
	if o.ProfileSamples <= 0 {
		o.ProfileSamples = 240
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Stats counts what the shipped loop did during a run.
type Stats struct {
	// Rounds counts planner rounds; Decisions the decisions committed; Failed those
	// that failed (unplaced past the progress deadline).
	Rounds, Decisions, Failed int
	// Observations counts the capacity estimates the feed published.
	Observations int
	// FeedWall is the wall time spent in the feed's rounds (scrape, observation layer,
	// tuner), RoundWall in the planner's (solves included).
	FeedWall, RoundWall time.Duration
}

// Scheduler is the shipped planner as a sim.Scheduler. It implements io.Closer: the run
// closes its planner server.
type Scheduler struct {
	opt Options

	env    *sim.Env
	pipe   fsm.Pipeline
	nodeIx map[string]int
	epoch  time.Time

	srv    *planner.Server
	thread *milp.Thread
	cancel context.CancelFunc
	served chan error
	est    *feed.Estimator
	feeder *feed.Feeder

	mu sync.Mutex
	// now is the virtual time in seconds; simNow the same as float64 bits, read without
	// the lock (SimTime).
	now    float64
	simNow atomic.Uint64
	// win accumulates each operator's metrics since the last scrape; inst holds each
	// operator's scraped instances (counters) by instance key; scrape and prev are the
	// last two scrapes.
	win    []opWindow
	inst   []map[string]feed.Instance
	scrape []feed.Snapshot
	prev   []feed.Snapshot
	last   *sim.Snapshot
	// pending is the version the actuator asked for and the engine has not been given
	// yet; deployed the counts of the last version handed to the engine; applying the
	// decision being applied; slot each operator's canary slot config after its last
	// promotion.
	pending  *sim.Plan
	deployed [][]int
	applying applyState
	slot     []string
	// trials are the operators' tuning trials by slot (planner.TrialActuator); handed is
	// the last version handed to the engine.
	trials [][]*trialRun
	handed *sim.Plan
	// advisor marks the shared layers (Shared): decisions only decide configs, which
	// advice holds per operator (nil: the job file's) for the baseline to apply.
	advisor bool
	advice  []sim.OpConfig

	// Stats is filled during the run.
	Stats Stats
}

// opWindow is one operator's metrics accumulated over the ticks since the last scrape.
type opWindow struct {
	ticks           int
	blocked         float64
	queue, queueCap float64
	// processed and emitted are the operator's records in and out.
	processed, emitted float64
	feat               []float64
	featW              float64
	// insts are the operator's instance groups by instance key: one per configuration
	// its production instances run, and the canary slot's probe.
	insts map[string]*instWindow
}

// instWindow is one instance group's metrics since the last scrape.
type instWindow struct {
	cfg    sim.OpConfig
	canary bool
	// trial is the tuning trial the probe ran when the group was created (nil: not one).
	trial *trialRun
	// ticks counts the ticks it ran, running sums its instances over them.
	ticks                   int
	running                 float64
	processed, busy, useful float64
	peakGB                  float64
	ooms                    int
	// endInFlight and endRunning are its last tick's requests in flight and instances
	// (gauges are read at the scrape, not averaged); last is that tick's number.
	endInFlight, endRunning float64
	// endEngine and endWaiting are its last tick's requests its engines ran and held
	// waiting, engineLimit an engine's limit on the running ones (0: not a sim.Batcher).
	endEngine, endWaiting, engineLimit float64
	last                               int
}

// canaryKey is the instance key of the canary slot's probe.
const canaryKey = "canary"

// applyState is the decision the actuator applies: since when some of its instances found
// no room, and its canaries (by operator index) while it is in its canary phase.
type applyState struct {
	decision     uint64
	since        float64 // when an instance was last seen to start running (progress)
	ready        int     // the most instances seen running the decision's config since
	unplacedFrom float64 // -1: everything placed
	canaries     map[int]*canaryState
	final        bool
}

// canaryState is one operator's canary in a decision's canary phase.
type canaryState struct {
	cfg              sim.OpConfig
	config           string
	promoted, failed bool
}

// New returns the shipped planner as a simulator scheduler.
func New(o Options) *Scheduler {
	o.defaults()
	return &Scheduler{opt: o}
}

// SetLogger makes the planner and the feed log to l (the default discards); it has effect
// only before Init.
func (s *Scheduler) SetLogger(l *slog.Logger) {
	if l != nil {
		s.opt.Logger = l
	}
}

// SetTuneParallel sets how many trials of one operator the tuner runs at once
// (feed.TunerOptions.Parallel; 0: its default); it has effect only before Init.
func (s *Scheduler) SetTuneParallel(n int) { s.opt.Tuning.Parallel = n }

// SetTuneExposureHours sets the production exposure the tuner extrapolates a trial's peak
// memory to (feed.TunerOptions.ExposureHours; 0: its default, negative: none); it has
// effect only before Init.
func (s *Scheduler) SetTuneExposureHours(h float64) { s.opt.Tuning.ExposureHours = h }

// SetTunePeakK sets the tuner's sustained-peak allowance (feed.TunerOptions.PeakK; 0: its
// default, negative: none); it has effect only before Init.
func (s *Scheduler) SetTunePeakK(k float64) { s.opt.Tuning.PeakK = k }

// Options returns the scheduler's options, defaults applied.
func (s *Scheduler) Options() Options { return s.opt }

// Name implements sim.Scheduler.
func (s *Scheduler) Name() string {
	if s.opt.Label != "" {
		return s.opt.Label
	}
	return "trident"
}

// SimTime returns the virtual time of the newest round in seconds (safe to call from a
// log handler while the scheduler holds its lock).
func (s *Scheduler) SimTime() float64 { return math.Float64frombits(s.simNow.Load()) }

// Interval implements sim.Scheduler.
func (s *Scheduler) Interval() float64 { return s.opt.IntervalS }

// clock is the loop's virtual clock.
func (s *Scheduler) clock() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at(s.now)
}

func (s *Scheduler) at(sec float64) time.Time {
	return s.epoch.Add(time.Duration(sec * float64(time.Second)))
}

// Init implements sim.Scheduler: it declares the pipeline as its job file would (resources,
// features, parameter spaces, cold starts, and the amplification and output size of a
// pilot profile), starts the planner with the simulated cluster as its actuator, and
// returns the job as submitted, which the planner takes over at its first round.
func (s *Scheduler) Init(ctx context.Context, env *sim.Env) (*sim.Plan, error) {
	s.env = env
	s.epoch = time.Unix(1_700_000_000, 0)
	p := env.Pipeline
	s.nodeIx = map[string]int{}
	for i, n := range env.Cluster.Nodes {
		s.nodeIx[n.Name] = i
	}
	s.pipe = declare(env, s.opt.ProfileSamples)
	s.win = make([]opWindow, len(p.Ops))
	s.inst = make([]map[string]feed.Instance, len(p.Ops))
	for i := range s.inst {
		s.inst[i] = map[string]feed.Instance{}
	}
	s.scrape = make([]feed.Snapshot, len(p.Ops))
	s.prev = make([]feed.Snapshot, len(p.Ops))
	s.slot = make([]string, len(p.Ops))
	s.advice = make([]sim.OpConfig, len(p.Ops))
	for i, o := range s.pipe.Operators {
		s.slot[i] = o.Config
	}
	s.applying.unplacedFrom = -1

	per, err := s.submitted(env)
	if err != nil {
		return nil, err
	}
	s.deployed = per
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	s.handed = sim.PlanFromCounts(per)
	return s.handed, nil
}

// submitted returns the job as submitted: Options.Initial, else an even split of every
// pool.
func (s *Scheduler) submitted(env *sim.Env) ([][]int, error) {
	if s.opt.Initial != nil {
		per, err := s.opt.Initial(env)
		if err != nil {
			return nil, fmt.Errorf("shipped: the submitted job: %w", err)
		}
		return per, nil
	}
	p := env.Pipeline
	dem := make([]float64, len(p.Ops))
	need := make([]sim.Resources, len(p.Ops))
	for i := range dem {
		dem[i] = 1
		need[i] = p.Ops[i].Need
	}
	per := sim.PlaceStriped(env.Cluster, need, sim.Balance(env.Cluster, p, dem))
	if per == nil {
		return nil, errors.New("shipped: the submitted job does not fit the cluster")
	}
	return per, nil
}

// declare is the job file of the simulated pipeline: one task group per operator with its
// resources, features, parameter space (trident_params) and default config, cold start
// and synchronous flag, and the amplification and output record size measured on a
// pilot sample (what an operator author declares in trident_amplification and
// trident_output_bytes).
func declare(env *sim.Env, samples int) fsm.Pipeline {
	p := env.Pipeline
	attrs := env.Profiler.Sample(samples)
	out := fsm.Pipeline{Job: Job}
	accMemMB := 0
	for _, n := range env.Cluster.Nodes {
		if n.Cap.Acc > 0 && (accMemMB == 0 || int(n.AccMemGB*1024) < accMemMB) {
			accMemMB = int(math.Round(n.AccMemGB * 1024))
		}
	}
	for i := range p.Ops {
		spec := &p.Ops[i]
		var amp, outMB float64
		for _, a := range attrs {
			amp += spec.Model.Amplification(a)
			outMB += spec.Model.OutMB(a)
		}
		amp /= float64(len(attrs))
		outMB /= float64(len(attrs))
		o := fsm.Operator{
			Name: spec.Name, Order: i, CPU: spec.Need.CPU, MemoryMB: int(math.Round(spec.Need.MemGB * 1024)), GPUs: spec.Need.Acc,
			OutputBytes: outMB * 1e6, Amplification: amp, Features: append([]string(nil), spec.FeatureNames...),
			ColdStartSec: spec.ColdStartS, Synchronous: !spec.Async, MinInstances: 1,
		}
		if spec.Need.Acc > 0 {
			o.GPUMemoryMB = accMemMB
		}
		if spec.Tunable() {
			o.Params = spec.Space.String()
			o.Config = spec.Space.Default().String()
		}
		out.Operators = append(out.Operators, o)
	}
	return out
}

// space is operator i's parameter space, nil for an operator without parameters.
func (s *Scheduler) space(i int) *configspace.Space {
	if spec := &s.env.Pipeline.Ops[i]; spec.Tunable() {
		return spec.Space
	}
	return nil
}

// configString is operator i's configuration cfg as the planner names it ("" for an
// operator without parameters).
func (s *Scheduler) configString(i int, cfg sim.OpConfig) string {
	spec := &s.env.Pipeline.Ops[i]
	if !spec.Tunable() || cfg == nil {
		return ""
	}
	return cfg.Format(spec.Space)
}

// simConfig is operator i's configuration named config, in the simulator's form.
func (s *Scheduler) simConfig(i int, config string) (sim.OpConfig, error) {
	if s.space(i) == nil {
		return nil, fmt.Errorf("operator %s has no parameters", s.env.Pipeline.Ops[i].Name)
	}
	c, err := s.space(i).ParseConfig(config)
	if err != nil {
		return nil, err
	}
	return sim.ConfigOf(s.space(i), c), nil
}

// start starts the planner server (raft in memory, API served in process, loop driven by Round)
// and the feed that publishes the observation layer's estimates to it (and tunes, with
// Options.Tune).
func (s *Scheduler) start(ctx context.Context) error {
	s.thread = milp.NewThread()
	sc := sched.MILP{Solver: milp.HiGHS{Thread: s.thread}, Options: milp.Options{TimeLimit: s.opt.SolveTimeout}}
	if s.opt.NoPlacement {
		sc.Params.NetWeight = noNetWeight
	}
	maxBatch := s.opt.MaxBatch
	if s.opt.AllAtOnce {
		maxBatch = 0 // no cap: every instance may switch in one round
	}
	lc := &planner.LoopConfig{
		Interval:     time.Duration(s.opt.IntervalS * float64(time.Second)),
		Scheduler:    sc,
		SolverThread: s.thread,
		SolveTimeout: s.opt.SolveTimeout,
		MaxBatch:     maxBatch,
		CatchUpSec:   s.opt.CatchUpSec,
		AutoRegister: true,
		Clock:        s.clock,
		Manual:       true,
	}
	if s.opt.NoCanary || s.opt.AllAtOnce {
		lc.Actuator = actuator{s}
	} else {
		lc.Actuator = canaryActuator{actuator{s}}
	}
	srv, err := planner.New(planner.Config{ID: "sim", InMemory: true,
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, Loop: lc, Logger: s.opt.Logger})
	if err != nil {
		s.thread.Close()
		return fmt.Errorf("shipped: start planner: %w", err)
	}
	s.srv = srv
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel, s.served = cancel, make(chan error, 1)
	go func() { s.served <- srv.Serve(sctx) }()
	for wait := time.Now().Add(10 * time.Second); !srv.IsLeader(); {
		if time.Now().After(wait) {
			_ = s.Close()
			return errors.New("shipped: the in-memory planner elected no leader within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The feed reaches the planner's API in process (no listener: the simulation serves
	// no one else).
	pc, err := client.New(client.Config{Address: "http://planner.sim", HTTPClient: &http.Client{Transport: inProcess{srv.Handler()}}})
	if err != nil {
		_ = s.Close()
		return fmt.Errorf("shipped: planner client: %w", err)
	}
	s.est = feed.NewEstimator(s.opt.Logger)
	s.est.SetRatesOnly(s.opt.NoObservation)
	tuning := s.opt.Tuning
	if tuning.Logger == nil {
		tuning.Logger = s.opt.Logger
	}
	s.feeder, err = feed.New(s.est, feed.Options{Client: pc, Refresh: s.refresh, Logger: s.opt.Logger, Tune: s.opt.Tune, Tuning: tuning})
	if err != nil {
		_ = s.Close()
		return fmt.Errorf("shipped: feed: %w", err)
	}
	return nil
}

// Close stops the planner server.
func (s *Scheduler) Close() error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	err := <-s.served
	s.cancel = nil
	s.thread.Close()
	return err
}

var _ io.Closer = (*Scheduler)(nil)

// Observe implements sim.Scheduler: it accumulates every operator's metrics, per
// configuration and for the canary, until the next scrape.
func (s *Scheduler) Observe(snap *sim.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = snap
	for i := range snap.Ops {
		st := &snap.Ops[i]
		w := &s.win[i]
		if w.insts == nil {
			w.insts = map[string]*instWindow{}
		}
		w.ticks++
		w.blocked += st.BlockedSec
		w.processed += st.Processed
		w.emitted += st.Emitted
		w.queue, w.queueCap = st.Queue, st.QueueCap
		if st.Processed > 0 && len(st.Features) > 0 {
			if w.feat == nil {
				w.feat = make([]float64, len(st.Features))
			}
			for k, v := range st.Features {
				w.feat[k] += v * st.Processed
			}
			w.featW += st.Processed
		}
		group := func(key string, cfg sim.OpConfig, canary bool) *instWindow {
			iw := w.insts[key]
			if iw == nil {
				iw = &instWindow{cfg: cfg, canary: canary}
				w.insts[key] = iw
			}
			iw.ticks++
			iw.last = w.ticks
			return iw
		}
		for _, cs := range st.Configs {
			if cs.Running == 0 {
				continue
			}
			iw := group("cfg:"+s.configString(i, cs.Config), cs.Config, false)
			iw.running += float64(cs.Running)
			iw.processed += cs.Processed
			iw.busy += cs.BusySec
			iw.useful += cs.UsefulSec
			iw.peakGB = math.Max(iw.peakGB, cs.PeakMemGB)
			iw.ooms += cs.OOMs
			iw.endInFlight, iw.endRunning = cs.InFlight, float64(cs.Running)
			iw.endEngine, iw.endWaiting, iw.engineLimit = cs.EngineRunning, cs.EngineWaiting, cs.EngineLimit
		}
		for k, ps := range st.Probes {
			t := s.trialOf(i, k)
			if t == nil && k > 0 {
				continue // a slot being emptied: no trial's and no canary's
			}
			key := probeKey(k, t)
			if ps.OOM {
				if iw := w.insts[key]; iw != nil {
					iw.ooms++
				}
			}
			if ps.Running {
				iw := group(key, nil, t == nil)
				iw.trial = t
				iw.running++
				iw.processed += ps.Processed
				iw.busy += ps.BusySec
				iw.useful += ps.BusySec
				iw.peakGB = math.Max(iw.peakGB, ps.PeakMemGB)
				iw.endInFlight, iw.endRunning = ps.InFlight, 1
				iw.endEngine, iw.endWaiting, iw.engineLimit = ps.EngineRunning, ps.EngineWaiting, ps.EngineLimit
			}
		}
	}
}

// Decide implements sim.Scheduler: one interval of the shipped system. The engine is
// scraped as Prometheus would scrape the operators, the feed publishes its estimates to
// the planner (and, with Options.Tune, proposes configurations), the planner runs one
// round on the virtual clock, and the version the actuator was asked to apply goes to the
// engine.
func (s *Scheduler) Decide(ctx context.Context, snap *sim.Snapshot) (*sim.Plan, error) {
	start := time.Now()
	s.mu.Lock()
	s.now = snap.Time
	s.simNow.Store(math.Float64bits(snap.Time))
	s.takeScrape(snap)
	s.mu.Unlock()
	if err := s.feeder.Round(ctx); err != nil {
		s.opt.Logger.Warn("shipped: feed round", "t", snap.Time, "err", err)
	}
	s.Stats.Observations = s.feeder.Published()
	fed := time.Now()
	s.Stats.FeedWall += fed.Sub(start)
	err := s.srv.Round(ctx, true)
	s.Stats.RoundWall += time.Since(fed)
	if err != nil {
		return nil, fmt.Errorf("shipped: planner round at t=%.0fs: %w", snap.Time, err)
	}
	s.Stats.Rounds++
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.advisor {
		return nil, nil // the baseline hands the engine its versions (Shared.Apply)
	}
	pl := s.probed(s.pending)
	s.pending = nil
	return pl, nil
}

// takeScrape turns each operator's window into one scrape of its instances: one
// instance per configuration its production instances run (standing for their mean
// instance: its counters advance by the per-instance share of their work) and one for the
// canary, each labelled with its config epoch as the planner's rollout names it, and
// absent when it did not run at the last tick (it restarts when it returns).
// Asynchronous operators report their engine's running and waiting requests and admission
// limit, as vLLM does.
func (s *Scheduler) takeScrape(snap *sim.Snapshot) {
	at := s.at(snap.Time)
	rollouts := map[string]fsm.Rollout{}
	s.srv.FSM().Read(func(st *fsm.State) {
		for op, r := range st.Rollouts[Job] {
			rollouts[op] = *r
		}
	})
	for i := range s.win {
		w := s.win[i]
		s.win[i] = opWindow{}
		s.prev[i] = s.scrape[i]
		spec := &s.env.Pipeline.Ops[i]
		ro := rollouts[spec.Name]
		cur := feed.Snapshot{Time: at, Instances: map[string]feed.Instance{}}
		endRun := 0.0
		for _, iw := range w.insts {
			if iw.last == w.ticks {
				endRun += iw.endRunning
			}
		}
		endRun = math.Max(endRun, 1)
		var feat map[string]float64
		if w.featW > 0 {
			feat = map[string]float64{}
			for k, name := range spec.FeatureNames {
				feat[name] = w.feat[k] / w.featW
			}
		}
		insts := map[string]feed.Instance{}
		for key, iw := range w.insts {
			if iw.last != w.ticks || iw.ticks == 0 {
				continue // not running at the scrape: gone
			}
			run := iw.running / float64(iw.ticks)
			m := s.inst[i][key]
			m.RecordsIn += iw.processed / run
			if w.processed > 0 {
				// The operator's selectivity over the window, shared by its instances.
				m.RecordsOut += iw.processed / run * w.emitted / w.processed
			}
			m.BusySeconds += iw.busy / run
			m.UsefulSeconds += iw.useful / run
			m.OutputBlockedSeconds += w.blocked
			// Gauges are read at the scrape: the instance's share of the queue then.
			m.QueueLength = w.queue / endRun
			m.QueueCapacity = w.queueCap / endRun
			m.Utilization = math.Min(1, iw.busy/(iw.running*snap.Tick))
			m.DeviceMemPeak = iw.peakGB * (1 << 30)
			m.OOMRestarts += float64(iw.ooms)
			m.Epoch = float64(ro.Epoch)
			cfg := iw.cfg
			if iw.canary || ro.CandidateConfig != "" && key == "cfg:"+ro.CandidateConfig {
				m.Epoch = float64(ro.Epoch + 1)
			}
			if iw.canary && s.applying.canaries[i] != nil {
				cfg = s.applying.canaries[i].cfg
			}
			if iw.trial != nil {
				m.Epoch, cfg = float64(iw.trial.epoch), iw.trial.cfg
			}
			if spec.Async {
				m.EngineReported = true
				inst := math.Max(iw.endRunning, 1)
				// Request counts: fractional records round to them.
				if iw.engineLimit > 0 {
					// A serving engine counts its own requests, as vLLM's gauges do: the
					// running batch (max_num_seqs, or what the KV cache holds) and the
					// requests waiting for it; records without a request are neither.
					m.AdmissionLimit = iw.engineLimit
					m.Running = math.Round(iw.endEngine / inst)
					m.Waiting = math.Round(iw.endWaiting / inst)
				} else {
					// The engine's queue holds the requests in flight; the rest wait for
					// a slot.
					m.AdmissionLimit = spec.AdmissionLimit(cfg)
					m.Running = math.Round(math.Min(iw.endInFlight/inst, m.AdmissionLimit))
					m.Waiting = math.Max(0, math.Round(m.QueueLength-m.Running))
				}
			}
			if feat != nil {
				m.FeatureMean = feat
			}
			insts[key] = m
			cur.Instances[spec.Name+"/"+key] = m
		}
		s.inst[i] = insts
		s.scrape[i] = cur
	}
}

// refresh is the feed's scrape of job/op: the interval between the last two scrapes goes
// to the estimator.
func (s *Scheduler) refresh(_ context.Context, job, op string, d feed.Declaration) error {
	if err := s.est.Declare(job, op, d); err != nil {
		return fmt.Errorf("shipped: declare %s/%s: %w", job, op, err)
	}
	i := s.opIndex(op)
	if i < 0 {
		return fmt.Errorf("shipped: unknown operator %q", op)
	}
	s.mu.Lock()
	prev, cur := s.prev[i], s.scrape[i]
	s.mu.Unlock()
	if prev.Instances != nil {
		s.est.Observe(job, op, prev, cur)
	}
	return nil
}

func (s *Scheduler) opIndex(name string) int {
	for i := range s.env.Pipeline.Ops {
		if s.env.Pipeline.Ops[i].Name == name {
			return i
		}
	}
	return -1
}

// actuator is the simulated cluster behind the planner's Actuator interface.
type actuator struct{ s *Scheduler }

// Pipeline implements planner.Actuator: the simulated job file.
func (a actuator) Pipeline(_ context.Context, jobID string, _ json.RawMessage) (*fsm.Pipeline, error) {
	if jobID != Job {
		return nil, fmt.Errorf("shipped: no job %q in the simulated cluster", jobID)
	}
	p := a.s.pipe
	p.Operators = append([]fsm.Operator(nil), p.Operators...)
	return &p, nil
}

// PipelineJobs implements planner.PipelineFinder: the simulated job marks itself as a
// pipeline.
func (a actuator) PipelineJobs(context.Context) ([]string, error) { return []string{Job}, nil }

// CheckConfig implements planner.Actuator: config must be a point of the operator's
// parameter space.
func (a actuator) CheckConfig(op fsm.Operator, config string) error {
	i := a.s.opIndex(op.Name)
	if i < 0 {
		return fmt.Errorf("shipped: unknown operator %q", op.Name)
	}
	if a.s.space(i) == nil {
		if config != "" && config != op.Config {
			return fmt.Errorf("shipped: operator %s has no tunable parameters", op.Name)
		}
		return nil
	}
	c, err := a.s.space(i).ParseConfig(config)
	if err != nil {
		return fmt.Errorf("shipped: operator %s: %w", op.Name, err)
	}
	if _, err := a.s.space(i).Check(c); err != nil {
		return fmt.Errorf("shipped: operator %s: %w", op.Name, err)
	}
	return nil
}

// Inventory implements planner.Actuator: the simulated nodes as Nomad fingerprints them.
func (a actuator) Inventory(context.Context) ([]fsm.Node, error) {
	var out []fsm.Node
	for _, n := range a.s.env.Cluster.Nodes {
		fn := fsm.Node{Name: n.Name, CPU: n.Cap.CPU, MemoryMB: int(math.Round(n.Cap.MemGB * 1024)), GPUs: n.Cap.Acc,
			EgressBps: n.EgressMBps * 1e6}
		if a.s.opt.NoPlacement {
			fn.EgressBps = unlimitedBps
		}
		if n.Cap.Acc > 0 {
			fn.GPUMemoryMB = int(math.Round(n.AccMemGB * 1024))
		}
		out = append(out, fn)
	}
	return out, nil
}

// Step implements planner.Actuator with the Nomad semantics that matter here, as
// planner/nomadact applies a decision:
//   - a decision that moves instances of a tunable operator to a candidate config starts
//     with a canary version (unless Options.NoCanary): only the operator's canary slot
//     changes, to one instance of the candidate (the simulator's probe, which takes an
//     instance's place as the canary does on a packed node); the canary is reported
//     healthy once it runs, and waits for the planner's promotion or failure; an OOM of
//     the canary fails the decision at once (the actuator's OOM abort). A slot already on
//     the candidate needs no canary;
//   - the decision's final version runs its per-node counts, the candidate instances
//     restarted onto the candidate config; it is done when every operator runs its counts
//     (its candidate instances on the candidate) with nothing starting or restarting;
//   - until then the engine is handed the version again (Nomad places blocked
//     allocations as room frees), and instances unplaced for longer than the progress
//     deadline fail the decision.
func (a actuator) Step(_ context.Context, _ *fsm.Pipeline, d fsm.Decision) (planner.StepResult, error) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.advisor {
		return s.adviseStep(d)
	}
	if s.applying.decision != d.Index {
		s.applying = applyState{decision: d.Index, unplacedFrom: -1, canaries: a.canaries(d), since: s.now}
		s.Stats.Decisions++
		s.applying.final = len(s.applying.canaries) == 0
	}
	if !s.applying.final {
		if res, canary := s.canaryStep(d); canary {
			return res, nil
		}
	}
	target := s.counts(d)
	pl := sim.PlanFromCounts(target)
	want := make([]int, len(target))
	for i, op := range s.env.Pipeline.Ops {
		t, ok := d.Operators[op.Name]
		if !ok || t.CandidateConfig == "" || s.space(i) == nil {
			continue
		}
		cfg, err := s.simConfig(i, t.CandidateConfig)
		if err != nil {
			return planner.StepResult{}, fmt.Errorf("shipped: decision %d: operator %s: %w", d.Index, op.Name, err)
		}
		for _, p := range t.Nodes {
			want[i] += p.Candidate
		}
		pl.Ops[i].Config = cfg
		if st := s.lastOp(i); st != nil {
			pl.Ops[i].Transition = max(0, want[i]-st.OnTarget)
		}
	}
	s.pending = pl
	if res, failed := s.oomAbort(d); failed {
		return res, nil
	}
	snap := s.last
	if snap == nil {
		return planner.StepResult{Status: fsm.StatusApplying, Detail: "job version submitted"}, nil
	}
	done, unplaced, ready := true, 0, 0
	for i := range snap.Ops {
		st := &snap.Ops[i]
		unplaced += st.Unplaced
		ready += st.RunningOnTarget
		// An instance restarting in place (a running allocation's OOM restart) does not
		// hold a deployment in Nomad; one restarting onto the candidate is counted by
		// OnTarget. A trial's probe starting onto its next config is not part of the job
		// version either (a trial runs beside it).
		down := len(st.Probes) - st.RunningProbes()
		if st.Starting > down || !slices.Equal(st.PerNode, target[i]) || want[i] > 0 && st.OnTarget < want[i] {
			done = false
		}
	}
	switch {
	case done:
		s.deployed = target
		s.pending = nil
		return planner.StepResult{Status: fsm.StatusDone, Detail: "deployment successful"}, nil
	case unplaced == 0:
		s.applying.unplacedFrom = -1
	case s.applying.unplacedFrom < 0:
		s.applying.unplacedFrom = s.now
	case s.now-s.applying.unplacedFrom >= s.opt.ProgressDeadlineS:
		return s.revert(d, fmt.Sprintf("%d instances unplaced for %.0fs: progress deadline exceeded", unplaced, s.now-s.applying.unplacedFrom)), nil
	}
	if ready > s.applying.ready {
		s.applying.ready, s.applying.since = ready, s.now
	}
	if unplaced == 0 && s.now-s.applying.since >= s.opt.ProgressDeadlineS {
		// Nomad fails a deployment in which no allocation became healthy within its
		// progress deadline, which restarts whenever one does (here: no instance more
		// running the decision's config; a config transition replaces instances, so the
		// count of running ones does not grow while it progresses).
		return s.revert(d, fmt.Sprintf("deployment not healthy after %.0fs: progress deadline exceeded", s.now-s.applying.since)), nil
	}
	return planner.StepResult{Status: fsm.StatusApplying, Detail: "deployment running"}, nil
}

// canaries returns decision d's canaries: one per tunable operator it moves to a
// candidate config its canary slot does not run yet.
func (a actuator) canaries(d fsm.Decision) map[int]*canaryState {
	s := a.s
	if s.opt.NoCanary {
		return nil
	}
	out := map[int]*canaryState{}
	for i, op := range s.env.Pipeline.Ops {
		t, ok := d.Operators[op.Name]
		if !ok || s.space(i) == nil || t.CandidateConfig == "" || t.Transitions == 0 || t.NoCanary || s.slot[i] == t.CandidateConfig {
			continue
		}
		cfg, err := s.simConfig(i, t.CandidateConfig)
		if err != nil {
			continue // the final version reports it
		}
		out[i] = &canaryState{cfg: cfg, config: t.CandidateConfig}
	}
	return out
}

// canaryStep advances decision d's canary version: the deployed counts with each canary
// operator's probe on its candidate. It reports false once every canary is promoted (the
// final version follows).
func (s *Scheduler) canaryStep(d fsm.Decision) (planner.StepResult, bool) {
	pl := sim.PlanFromCounts(s.deployed)
	var cs []planner.CanaryStatus
	promoted := true
	for i, c := range s.applying.canaries {
		name := s.env.Pipeline.Ops[i].Name
		if c.failed {
			s.pending = sim.PlanFromCounts(s.deployed) // the stable version: the canary stops
			return planner.StepResult{Status: fsm.StatusFailed, Detail: fmt.Sprintf("canary deployment %d of %s failed", d.Index, name)}, true
		}
		if st := s.lastOp(i); st != nil && len(st.Probes) > 0 && st.Probes[0].OOM {
			c.failed = true
			s.pending = sim.PlanFromCounts(s.deployed)
			return planner.StepResult{Status: fsm.StatusFailed, Detail: fmt.Sprintf("canary of %s: candidate config OOM", name)}, true
		}
		pl.Ops[i].Probes = []sim.OpConfig{c.cfg}
		healthy := false
		if st := s.lastOp(i); st != nil && len(st.Probes) > 0 {
			healthy = st.Probes[0].Running
		}
		cs = append(cs, planner.CanaryStatus{Operator: name, Group: name + "@canary", Config: c.config,
			Deployment: fmt.Sprint(d.Index), Healthy: healthy, Promoted: c.promoted})
		promoted = promoted && c.promoted
	}
	if promoted {
		for i, c := range s.applying.canaries {
			s.slot[i] = c.config
		}
		s.applying.final = true
		return planner.StepResult{}, false
	}
	s.pending = pl
	return planner.StepResult{Status: fsm.StatusApplying, Detail: fmt.Sprintf("canary deployment %d", d.Index), Canaries: cs}, true
}

// lastOp returns operator i's metrics of the last tick (nil before the first).
func (s *Scheduler) lastOp(i int) *sim.OpStats {
	if s.last == nil || i >= len(s.last.Ops) {
		return nil
	}
	return &s.last.Ops[i]
}

// canaryActuator is the actuator with Nomad's canary promotion and failure.
type canaryActuator struct{ actuator }

// PromoteCanary implements planner.CanaryActuator: nomad deployment promote.
func (a canaryActuator) PromoteCanary(_ context.Context, _, deployment string) error {
	return a.verdict(deployment, func(c *canaryState) { c.promoted = true })
}

// FailCanary implements planner.CanaryActuator: nomad deployment fail (the stable version
// is restored).
func (a canaryActuator) FailCanary(_ context.Context, _, deployment string) error {
	return a.verdict(deployment, func(c *canaryState) { c.failed = true })
}

func (a canaryActuator) verdict(deployment string, f func(*canaryState)) error {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if deployment != fmt.Sprint(s.applying.decision) || s.applying.final {
		return fmt.Errorf("shipped: deployment %s is not in its canary phase", deployment)
	}
	for _, c := range s.applying.canaries {
		f(c)
	}
	return nil
}

// counts returns decision d's instances per operator and node, in the engine's order.
func (s *Scheduler) counts(d fsm.Decision) [][]int {
	out := make([][]int, len(s.env.Pipeline.Ops))
	for i := range out {
		out[i] = make([]int, len(s.env.Cluster.Nodes))
		t, ok := d.Operators[s.env.Pipeline.Ops[i].Name]
		if !ok {
			continue
		}
		for name, pl := range t.Nodes {
			if n, ok := s.nodeIx[name]; ok {
				out[i][n] = pl.Total()
			}
		}
	}
	return out
}

// failed counts a failed decision and reports it with detail.
func (s *Scheduler) failed(detail string) planner.StepResult {
	s.Stats.Failed++
	return planner.StepResult{Status: fsm.StatusFailed, Detail: detail}
}

// oomAbort fails decision d, as Nomad fails a deployment whose new allocations are
// OOM-killed and auto-reverts the job to its stable version, when an instance on a
// candidate config of d restarted out of device memory at the last tick: the engine is
// handed the stable version (the deployed counts, every instance back on the running
// config).
func (s *Scheduler) oomAbort(d fsm.Decision) (planner.StepResult, bool) {
	for i, op := range s.env.Pipeline.Ops {
		t, ok := d.Operators[op.Name]
		st := s.lastOp(i)
		if !ok || t.CandidateConfig == "" || s.space(i) == nil || st == nil {
			continue
		}
		cand, err := s.simConfig(i, t.CandidateConfig)
		if err != nil {
			continue
		}
		for _, cs := range st.Configs {
			if cs.OOMs == 0 || !cs.Config.Equal(cand) {
				continue
			}
			return s.revert(d, fmt.Sprintf("an allocation of %s on its candidate config was OOM-killed", op.Name)), true
		}
	}
	return planner.StepResult{}, false
}

// revert fails decision d as Nomad fails a deployment and, with the auto_revert the
// actuator sets, reverts the job to its stable version: the engine is handed the deployed
// counts with every instance of d's tunable operators back on its running config. Without
// it a failed transition would leave instances on a candidate config that the planner and
// the tuner no longer attribute to any decision.
func (s *Scheduler) revert(d fsm.Decision, cause string) planner.StepResult {
	pl := sim.PlanFromCounts(s.deployed)
	for k, o := range s.env.Pipeline.Ops {
		if tk, ok := d.Operators[o.Name]; ok && tk.CandidateConfig != "" && s.space(k) != nil {
			if cur, err := s.simConfig(k, tk.Config); err == nil {
				pl.Ops[k].Config, pl.Ops[k].Transition = cur, sim.TransitionAll
			}
		}
	}
	s.pending = pl
	return s.failed(cause + ": deployment failed, job reverted to its stable version")
}
