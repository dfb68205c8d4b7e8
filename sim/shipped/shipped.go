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
	"sync"
	"time"

	"github.com/trident-sched/trident/apm/feed"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/strategy/milp"
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
	// Wall is the wall time spent in the feed and the planner rounds.
	Wall time.Duration
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
	// now is the virtual time in seconds.
	now float64
	// win accumulates each operator's metrics since the last scrape; inst holds each
	// operator's scraped instance (counters), scrapes the current and previous scrapes.
	win    []window
	inst   []feed.Instance
	scrape []feed.Snapshot
	prev   []feed.Snapshot
	last   *sim.Snapshot
	// pending is the plan the actuator asked for and the engine has not been given yet;
	// applying tracks the decision being applied.
	pending  *sim.Plan
	applying applyState

	// Stats is filled during the run.
	Stats Stats
}

// window is one operator's metrics accumulated over the ticks since the last scrape.
type window struct {
	ticks                                  int
	processed, busy, useful, blocked, util float64
	running, queue, queueCap, peakMB       float64
	// endInFlight and endRunning are the last tick's requests in flight and running
	// instances: gauges are read at the scrape, not averaged.
	endInFlight, endRunning float64
	feat                    []float64
	featW                   float64
	ooms                    int
}

// applyState is the decision the actuator applies and since when some of its instances
// found no room.
type applyState struct {
	decision     uint64
	unplacedFrom float64 // -1: everything placed
}

// New returns the shipped planner as a simulator scheduler.
func New(o Options) *Scheduler {
	o.defaults()
	return &Scheduler{opt: o}
}

// Name implements sim.Scheduler.
func (s *Scheduler) Name() string {
	if s.opt.Label != "" {
		return s.opt.Label
	}
	return "trident-shipped"
}

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
// features, cold starts, and the amplification and output size of a pilot profile),
// starts the planner with the simulated cluster as its actuator, and returns the job as
// submitted: an even split of every pool, which the planner takes over at its first round.
func (s *Scheduler) Init(ctx context.Context, env *sim.Env) (*sim.Plan, error) {
	s.env = env
	s.epoch = time.Unix(1_700_000_000, 0)
	p := env.Pipeline
	s.nodeIx = map[string]int{}
	for i, n := range env.Cluster.Nodes {
		s.nodeIx[n.Name] = i
	}
	s.pipe = declare(env, s.opt.ProfileSamples)
	s.win = make([]window, len(p.Ops))
	s.inst = make([]feed.Instance, len(p.Ops))
	s.scrape = make([]feed.Snapshot, len(p.Ops))
	s.prev = make([]feed.Snapshot, len(p.Ops))
	s.applying.unplacedFrom = -1

	if err := s.start(ctx); err != nil {
		return nil, err
	}
	if s.opt.Initial != nil {
		per, err := s.opt.Initial(env)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("shipped: the submitted job: %w", err)
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
		_ = s.Close()
		return nil, errors.New("shipped: the submitted job does not fit the cluster")
	}
	return sim.PlanFromCounts(per), nil
}

// declare is the job file of the simulated pipeline: one task group per operator with its
// resources, features, cold start and synchronous flag, and the amplification and output
// record size measured on a pilot sample (what an operator author declares in
// trident_amplification and trident_output_bytes).
func declare(env *sim.Env, samples int) fsm.Pipeline {
	p := env.Pipeline
	attrs := env.Profiler.Sample(samples)
	out := fsm.Pipeline{Job: Job}
	for i := range p.Ops {
		spec := &p.Ops[i]
		var amp, outMB float64
		for _, a := range attrs {
			amp += spec.Model.Amplification(a)
			outMB += spec.Model.OutMB(a)
		}
		amp /= float64(len(attrs))
		outMB /= float64(len(attrs))
		out.Operators = append(out.Operators, fsm.Operator{
			Name: spec.Name, Order: i, CPU: spec.Need.CPU, MemoryMB: int(math.Round(spec.Need.MemGB * 1024)), GPUs: spec.Need.Acc,
			OutputBytes: outMB * 1e6, Amplification: amp, Features: append([]string(nil), spec.FeatureNames...),
			ColdStartSec: spec.ColdStartS, Synchronous: !spec.Async, MinInstances: 1,
		})
	}
	return out
}

// start starts the planner server (raft in memory, API on loopback, loop driven by Round)
// and the feed that publishes the observation layer's estimates to it.
func (s *Scheduler) start(ctx context.Context) error {
	s.thread = milp.NewThread()
	lc := &planner.LoopConfig{
		Interval:     time.Duration(s.opt.IntervalS * float64(time.Second)),
		Scheduler:    sched.MILP{Solver: milp.HiGHS{Thread: s.thread}, Options: milp.Options{TimeLimit: s.opt.SolveTimeout}},
		SolverThread: s.thread,
		SolveTimeout: s.opt.SolveTimeout,
		MaxBatch:     s.opt.MaxBatch,
		CatchUpSec:   s.opt.CatchUpSec,
		Actuator:     actuator{s},
		AutoRegister: true,
		Clock:        s.clock,
		Manual:       true,
	}
	srv, err := planner.New(planner.Config{ID: "sim", InMemory: true, HTTPAddr: "127.0.0.1:0",
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
	pc, err := client.New(client.Config{Address: srv.HTTPAddr()})
	if err != nil {
		_ = s.Close()
		return fmt.Errorf("shipped: planner client: %w", err)
	}
	s.est = feed.NewEstimator(s.opt.Logger)
	s.feeder, err = feed.New(s.est, feed.Options{Client: pc, Refresh: s.refresh, Logger: s.opt.Logger})
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

// Observe implements sim.Scheduler: it accumulates every operator's metrics until the next
// scrape.
func (s *Scheduler) Observe(snap *sim.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = snap
	for i := range snap.Ops {
		st := &snap.Ops[i]
		w := &s.win[i]
		w.ticks++
		w.processed += st.Processed
		w.busy += st.BusySec
		w.useful += st.UsefulSec
		w.blocked += st.BlockedSec
		w.util += st.Util * float64(st.Running)
		w.running += float64(st.Running)
		w.endInFlight, w.endRunning = st.InFlight, float64(st.Running)
		w.queue, w.queueCap = st.Queue, st.QueueCap
		w.peakMB = math.Max(w.peakMB, st.PeakMemGB*1024)
		w.ooms += st.OOMs
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
}

// Decide implements sim.Scheduler: one interval of the shipped system. The engine is
// scraped as Prometheus would scrape the operators, the feed publishes its estimates to
// the planner, the planner runs one round on the virtual clock, and the plan the actuator
// was asked to apply goes to the engine.
func (s *Scheduler) Decide(ctx context.Context, snap *sim.Snapshot) (*sim.Plan, error) {
	start := time.Now()
	defer func() { s.Stats.Wall += time.Since(start) }()
	s.mu.Lock()
	s.now = snap.Time
	s.takeScrape(snap)
	s.mu.Unlock()
	if err := s.feeder.Round(ctx); err != nil {
		s.opt.Logger.Warn("shipped: feed round", "t", snap.Time, "err", err)
	}
	s.Stats.Observations = s.feeder.Published()
	if err := s.srv.Round(ctx, true); err != nil {
		return nil, fmt.Errorf("shipped: planner round at t=%.0fs: %w", snap.Time, err)
	}
	s.Stats.Rounds++
	s.mu.Lock()
	defer s.mu.Unlock()
	pl := s.pending
	s.pending = nil
	return pl, nil
}

// takeScrape turns each operator's window into one scrape of its instances: one
// instance standing for the operator's mean running instance (its counters advance by the
// per-instance share of the work), absent while none runs. Asynchronous operators report
// their engine's running and waiting requests and admission limit, as vLLM does.
func (s *Scheduler) takeScrape(snap *sim.Snapshot) {
	at := s.at(snap.Time)
	var epochs map[string]uint64
	s.srv.FSM().Read(func(st *fsm.State) {
		epochs = map[string]uint64{}
		for op, r := range st.Rollouts[Job] {
			epochs[op] = r.Epoch
		}
	})
	for i := range s.win {
		w := s.win[i]
		s.win[i] = window{}
		s.prev[i] = s.scrape[i]
		spec := &s.env.Pipeline.Ops[i]
		cur := feed.Snapshot{Time: at, Instances: map[string]feed.Instance{}}
		if w.ticks == 0 || w.running/float64(w.ticks) < 0.5 {
			s.scrape[i] = cur // nothing ran: the instance is gone (restarts when it returns)
			s.inst[i] = feed.Instance{}
			continue
		}
		run := w.running / float64(w.ticks)
		m := s.inst[i]
		m.RecordsIn += w.processed / run
		m.RecordsOut = m.RecordsIn
		m.BusySeconds += w.busy / run
		m.UsefulSeconds += w.useful / run
		m.OutputBlockedSeconds += w.blocked
		// Gauges are read at the scrape: the instance's share of the queue then.
		endRun := math.Max(w.endRunning, 1)
		m.QueueLength = w.queue / endRun
		m.QueueCapacity = w.queueCap / endRun
		m.Utilization = math.Min(1, w.util/w.running)
		m.DeviceMemPeak = w.peakMB
		m.OOMRestarts += float64(w.ooms)
		m.Epoch = float64(epochs[spec.Name])
		if spec.Async {
			m.EngineReported = true
			m.AdmissionLimit = spec.AdmissionLimit(snap.Ops[i].Config)
			// The engine's queue holds the requests in flight; the rest wait for a slot.
			// Both are request counts: the simulator's fractional records round to them.
			m.Running = math.Round(math.Min(w.endInFlight/endRun, m.AdmissionLimit))
			m.Waiting = math.Max(0, math.Round(m.QueueLength-m.Running))
		}
		if w.featW > 0 {
			m.FeatureMean = map[string]float64{}
			for k, name := range spec.FeatureNames {
				m.FeatureMean[name] = w.feat[k] / w.featW
			}
		} else if old := s.inst[i].FeatureMean; old != nil {
			m.FeatureMean = old
		}
		s.inst[i] = m
		if spec.Name == "text_ocr" && debugScrape {
			fmt.Printf("t=%.0f q=%.1f run=%.2f endRun=%.0f inflight=%.1f R=%.0f W=%.0f lim=%.0f util=%.2f recs=%.1f\n", snap.Time, m.QueueLength, run, w.endRunning, w.endInFlight, m.Running, m.Waiting, m.AdmissionLimit, m.Utilization, w.processed/run)
		}
		cur.Instances[spec.Name+"-0"] = m
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

// CheckConfig implements planner.Actuator: the simulated operators declare no parameters.
func (a actuator) CheckConfig(op fsm.Operator, config string) error {
	if config != "" && config != op.Config {
		return fmt.Errorf("shipped: operator %s has no tunable parameters", op.Name)
	}
	return nil
}

// Inventory implements planner.Actuator: the simulated nodes as Nomad fingerprints them.
func (a actuator) Inventory(context.Context) ([]fsm.Node, error) {
	var out []fsm.Node
	for _, n := range a.s.env.Cluster.Nodes {
		fn := fsm.Node{Name: n.Name, CPU: n.Cap.CPU, MemoryMB: int(math.Round(n.Cap.MemGB * 1024)), GPUs: n.Cap.Acc,
			EgressBps: n.EgressMBps * 1e6}
		if n.Cap.Acc > 0 {
			fn.GPUMemoryMB = int(math.Round(n.AccMemGB * 1024))
		}
		out = append(out, fn)
	}
	return out, nil
}

// Step implements planner.Actuator with Nomad's semantics that matter here: the decision
// becomes the job's new version (the engine is handed its per-node counts once), and it
// is done when every operator runs its counts with no instance starting or restarting;
// instances that find no room for longer than the progress deadline fail it.
func (a actuator) Step(_ context.Context, _ *fsm.Pipeline, d fsm.Decision) (planner.StepResult, error) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	target := s.counts(d)
	if s.applying.decision != d.Index {
		s.applying = applyState{decision: d.Index, unplacedFrom: -1}
		s.pending = sim.PlanFromCounts(target)
		s.Stats.Decisions++
		return planner.StepResult{Status: fsm.StatusApplying, Detail: fmt.Sprintf("job version of decision %d submitted", d.Index)}, nil
	}
	// Nomad's scheduler places blocked allocations as soon as room frees (stopping
	// instances drain): the engine is handed the version again until it is done.
	s.pending = sim.PlanFromCounts(target)
	snap := s.last
	if snap == nil {
		return planner.StepResult{Status: fsm.StatusApplying}, nil
	}
	done, unplaced := true, 0
	for i := range snap.Ops {
		st := &snap.Ops[i]
		unplaced += st.Unplaced
		if st.Starting > 0 || st.Restarting > 0 || !equalCounts(st.PerNode, target[i]) {
			done = false
		}
	}
	switch {
	case done:
		return planner.StepResult{Status: fsm.StatusDone, Detail: "deployment successful"}, nil
	case unplaced == 0:
		s.applying.unplacedFrom = -1
	case s.applying.unplacedFrom < 0:
		s.applying.unplacedFrom = s.now
	case s.now-s.applying.unplacedFrom >= s.opt.ProgressDeadlineS:
		s.Stats.Failed++
		return planner.StepResult{Status: fsm.StatusFailed, Detail: fmt.Sprintf("%d instances unplaced for %.0fs: progress deadline exceeded", unplaced, s.now-s.applying.unplacedFrom)}, nil
	}
	return planner.StepResult{Status: fsm.StatusApplying, Detail: "deployment running"}, nil
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

func equalCounts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var debugScrape = false
