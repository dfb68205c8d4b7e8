package planner

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/trident-sched/trident/apm/observe"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
	"github.com/trident-sched/trident/strategy/milp"
)

// StepResult is the actuator's view of one decision after a Step.
type StepResult struct {
	// Status is fsm.StatusApplying, fsm.StatusDone or fsm.StatusFailed.
	Status string
	// Detail explains it (deployment ID, failure reason).
	Detail string
	// Canaries are the decision's canaries while it is applying in its canary phase.
	Canaries []CanaryStatus
}

// CanaryStatus is one operator's canary in a decision's canary phase: the first instance
// of its candidate config, placed as a Nomad canary and waiting for the planner's verdict.
type CanaryStatus struct {
	// Operator, Group, Node and Config name the canary's operator, Nomad task group, node
	// and candidate config.
	Operator, Group, Node, Config string
	// Deployment is the Nomad deployment that holds the canary.
	Deployment string
	// Healthy reports that the canary allocation passed Nomad's health checks.
	Healthy bool
	// Promoted reports that the deployment's group was promoted (by the planner or by a
	// user's nomad deployment promote).
	Promoted bool
}

// CanaryActuator is an optional Actuator extension: Step reports canaries
// (StepResult.Canaries) that the loop judges and then promotes or fails.
type CanaryActuator interface {
	// PromoteCanary promotes the canaries of deployment of job.
	PromoteCanary(ctx context.Context, job, deployment string) error
	// FailCanary fails deployment of job (the cluster reverts to the stable version).
	FailCanary(ctx context.Context, job, deployment string) error
}

// Actuator turns committed decisions into cluster changes. Every method must be safe to
// call again after a crash at any point: Step reads the cluster's state and performs only
// the next missing action of the decision.
type Actuator interface {
	// Pipeline parses job (Nomad job JSON) or, when job is empty, the job registered in
	// the cluster under jobID. Errors name the offending group and meta key.
	Pipeline(ctx context.Context, jobID string, job json.RawMessage) (*fsm.Pipeline, error)
	// CheckConfig validates a configuration string against the operator's parameter space.
	CheckConfig(op fsm.Operator, config string) error
	// Inventory lists the schedulable nodes.
	Inventory(ctx context.Context) ([]fsm.Node, error)
	// Step advances the cluster towards decision d of pipeline p.
	Step(ctx context.Context, p *fsm.Pipeline, d fsm.Decision) (StepResult, error)
}

// ResubmitDetector is an optional Actuator extension: Resubmitted reports whether the
// cluster runs a version of job the planner did not render (a user ran the job file again).
type ResubmitDetector interface {
	Resubmitted(ctx context.Context, job string) (bool, error)
}

// PipelineFinder is an optional Actuator extension used with LoopConfig.AutoRegister: it
// lists the running jobs that mark themselves as pipelines (job meta trident_pipeline).
type PipelineFinder interface {
	PipelineJobs(ctx context.Context) ([]string, error)
}

// Estimator supplies capacity estimates (records/s per instance on the current config).
type Estimator interface {
	// Capacities returns an estimate per operator name; missing operators use the loop's
	// default capacity.
	Capacities(ctx context.Context, job string, ops []fsm.Operator) (map[string]float64, error)
}

// Invalidator tells the observation layer that an operator's configuration changed.
type Invalidator interface {
	// Invalidate is called once per committed transition batch with the new observation
	// epoch (recorded in the FSM before the call).
	Invalidate(ctx context.Context, job, operator string, epoch uint64) error
}

// LoopConfig configures the leader's rescheduling loop.
type LoopConfig struct {
	// Interval between rounds (default 10s).
	Interval time.Duration
	// Scheduler is the primary scheduler (default sched.Proportional).
	Scheduler sched.Scheduler
	// Fallback runs when Scheduler fails (default sched.Proportional).
	Fallback sched.Scheduler
	// SolveTimeout bounds one solve (default 30s).
	SolveTimeout time.Duration
	// Actuator applies decisions (nil: decisions are committed but not applied).
	Actuator Actuator
	// Estimator supplies capacities (nil: the latest POST /v1/observations per operator).
	Estimator Estimator
	// Invalidator is told about committed transitions (may be nil).
	Invalidator Invalidator
	// DefaultCapacity is used for operators without an estimate that declare no
	// trident_capacity (default 1 record/s).
	DefaultCapacity float64
	// MinGain is the relative throughput improvement needed to move instances that are
	// not part of a config transition (default 0.05).
	MinGain float64
	// MaxBatch caps transitions per operator and round (0 = no cap).
	MaxBatch int
	// AutoRegister makes the leader register, every interval, the running jobs the
	// Actuator's PipelineFinder reports that are not registered yet (off by default).
	AutoRegister bool
	// CanaryProbe is a canary's probe window beyond its candidate's cold start and
	// CanaryWarmUp: how long it is measured before its verdict (default
	// DefaultCanaryProbe).
	CanaryProbe time.Duration
	// CanaryWarmUp is the observation layer's warm-up included in every probe window
	// (default observe.DefaultWarmUp; negative: none, for tests whose observations are
	// posted directly).
	CanaryWarmUp time.Duration
	// CatchUpSec, when positive, sizes operators to also process their published backlog
	// within this many seconds (sched.PlanInput.CatchUpSec; 0 = steady state only).
	CatchUpSec float64
	// Objective weighs pipelines against each other in the joint round (default
	// milp.ObjectiveMaxMin).
	Objective milp.Objective
	// NoJoint turns the joint round off: every pipeline is planned on what the others'
	// decisions leave, uncapped (first come, first served).
	NoJoint bool
	// NoMarginalAdmission admits every waiting batch pipeline whose minimums fit; by
	// default one is admitted beside running batch pipelines only when the joint round
	// with it carries more normalised work (admit.Policy.Marginal).
	NoMarginalAdmission bool
	// SolverThread, when set, runs the joint round's and the admission's HiGHS calls (the
	// Scheduler's own solves take theirs from milp.HiGHS.Thread; share one).
	SolverThread *milp.Thread
	// Clock, when set, is the loop's time: decision and error stamps, settled inputs,
	// canary probe windows and admission aging read it (default time.Now). A simulator
	// sets a virtual clock and drives the rounds with Server.Round.
	Clock func() time.Time
	// Manual stops the leader from running rounds by itself: the caller runs them with
	// Server.Round (a simulator on a virtual clock). Off in every deployed planner.
	Manual bool
}

// Loop is the leader's rescheduling loop (Algorithm 2 of the Trident paper): observe,
// solve asynchronously, commit the decision to raft, apply the delta.
type Loop struct {
	s   *Server
	cfg LoopConfig
	log *slog.Logger
	// kickCh asks for a round that also solves (the input changed); nudgeCh for one that
	// only advances in-flight decisions. Both are coalesced and debounced (runLeader).
	kickCh  chan struct{}
	nudgeCh chan struct{}
	// rounds and solves count this server's rounds and started solves (LoopStats).
	rounds, solves atomic.Uint64
	results        chan solveResult
	solving        map[string]bool
	// settled holds, per job, the last input that found nothing worth moving.
	settled map[string]settledInput
	// joint caches the joint round's shares of every registered pipeline, by input; it
	// is published for the API (GET /v1/plan) and never modified once stored.
	joint atomic.Pointer[jointCache]
	// queued are the batch pipelines the last solving round's admission queued (not
	// planned); fitsCache remembers the admission's resource checks by input.
	queued    map[string]bool
	fitsCache map[[sha256.Size]byte]fitsAnswer
	// stale marks jobs a solving round skipped because their previous solve still ran:
	// that solve's input predates the round, so its result is followed by another solve.
	stale map[string]bool
	// refused remembers, per job, why auto-registration last failed, so that a reason is
	// logged once, not every round (the job is tried again every round: the cause may be
	// transient, or the inventory may grow).
	refused map[string]string
	// adopted marks jobs whose re-submitted version was registered again: their next
	// plan is committed even when it moves nothing, so that a rendered version replaces
	// the user's unpinned one.
	adopted map[string]bool
	// trials holds, per job, the trials the TrialActuator last applied this term.
	trials map[string]map[string]fsm.TrialSlots
}

type solveResult struct {
	job    string
	in     sched.PlanInput
	plan   sched.Plan
	err    error
	digest [sha256.Size]byte // of inputShape(in)
}

// settledInput is a solve's input that found nothing worth moving, with the job's latest
// decision then: the same input, or one whose figures are within settleTolerance of it,
// is not solved again until settleFor has passed.
type settledInput struct {
	digest   [sha256.Size]byte // of inputShape(in)
	in       sched.PlanInput
	decision uint64
	at       time.Time
}

// settleTolerance is the relative change in an operator's capacity estimate, observed
// selectivity and, with catch-up, backlog within which a settled input stays settled. The
// estimates of a steady pipeline move by about a percent from one round to the next, so
// without it every round solved again; moving running instances needs MinGain (5 % by
// default) over the running plan, which changes of 2 % do not create, and settleFor bounds
// the wait when they add up. A candidate config's capacity, which decides a transition
// against its restarts, is compared exactly.
const settleTolerance = 0.02

// inputShape is in without the figures settleTolerance covers, and without the backlog
// when catch-up is off (the schedulers read it only for catch-up): two inputs of one
// shape differ only in those figures.
func inputShape(in sched.PlanInput) sched.PlanInput {
	out := in
	out.Operators = make([]sched.OperatorInput, len(in.Operators))
	for i, o := range in.Operators {
		o.Capacity, o.Backlog, o.Operator.Amplification = 0, 0, 0
		out.Operators[i] = o
	}
	out.RefThroughput = 0
	return out
}

// nearFigures reports whether the figures inputShape leaves out of a and b (inputs of
// one shape) are within settleTolerance of each other.
func nearFigures(a, b sched.PlanInput) bool {
	within := func(x, y float64) bool {
		return math.Abs(x-y) <= settleTolerance*math.Max(math.Abs(x), math.Abs(y))
	}
	if len(a.Operators) != len(b.Operators) || !within(a.RefThroughput, b.RefThroughput) {
		return false
	}
	for i, x := range a.Operators {
		y := b.Operators[i]
		if !within(x.Capacity, y.Capacity) || !within(x.Operator.Amplification, y.Operator.Amplification) ||
			a.CatchUpSec > 0 && !within(x.Backlog, y.Backlog) {
			return false
		}
	}
	return true
}

// settleFor is how long an input that found nothing worth moving is not solved again:
// ten intervals, so that a scheduler whose answer varies (time limits) is asked again.
func (l *Loop) settleFor() time.Duration { return 10 * l.cfg.Interval }

// inputDigest identifies a scheduling input (its JSON encoding: map keys sorted).
func inputDigest(in sched.PlanInput) [sha256.Size]byte {
	b, err := json.Marshal(in)
	if err != nil {
		return [sha256.Size]byte{} // never equal to a real digest's settled entry by chance
	}
	return sha256.Sum256(b)
}

func newLoop(s *Server, cfg LoopConfig) *Loop {
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Scheduler == nil {
		cfg.Scheduler = sched.Proportional{}
	}
	if cfg.Fallback == nil {
		cfg.Fallback = sched.Proportional{}
	}
	if cfg.SolveTimeout <= 0 {
		cfg.SolveTimeout = 30 * time.Second
	}
	if cfg.DefaultCapacity <= 0 {
		cfg.DefaultCapacity = 1
	}
	if cfg.MinGain <= 0 {
		cfg.MinGain = 0.05
	}
	if cfg.CanaryProbe <= 0 {
		cfg.CanaryProbe = DefaultCanaryProbe
	}
	switch {
	case cfg.CanaryWarmUp == 0:
		cfg.CanaryWarmUp = observe.DefaultWarmUp
	case cfg.CanaryWarmUp < 0:
		cfg.CanaryWarmUp = 0
	}
	return &Loop{s: s, cfg: cfg, log: s.log.With("component", "loop"),
		kickCh: make(chan struct{}, 1), nudgeCh: make(chan struct{}, 1)}
}

// LoopStats counts a server's rescheduling rounds and the solves they started, over every
// term it led.
type LoopStats struct {
	Rounds uint64
	Solves uint64
}

// now returns the loop's time (LoopConfig.Clock, else the wall clock).
func (l *Loop) now() time.Time {
	if l.cfg.Clock != nil {
		return l.cfg.Clock()
	}
	return time.Now()
}

// Stats returns the loop's counters.
func (l *Loop) Stats() LoopStats {
	return LoopStats{Rounds: l.rounds.Load(), Solves: l.solves.Load()}
}

// kick asks for a round that solves every pipeline soon: the scheduling input changed
// (a registration, a candidate).
func (l *Loop) kick() { signal(l.kickCh) }

// nudge asks for a round that advances in-flight decisions soon, without new solves (an
// apply request of the target plugin).
func (l *Loop) nudge() { signal(l.nudgeCh) }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// debounce is the shortest gap between rounds that kicks and nudges start: a burst of
// requests (every autoscaler policy applies each evaluation) makes one round.
func (l *Loop) debounce() time.Duration {
	return min(time.Second, l.cfg.Interval/4)
}

// runLeader runs rounds until ctx is done (leadership lost or shutdown).
func (l *Loop) runLeader(ctx context.Context) {
	if err := l.beginTerm(); err != nil {
		l.log.Warn("barrier failed; continuing", "err", err)
	}
	l.log.Info("rescheduling loop started", "interval", l.cfg.Interval)
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	// One round per interval solves every pipeline. A kick or nudge runs one more round
	// after at most the debounce gap; a solve's result runs one only when it committed a
	// decision (to start applying it), so an idle leader idles.
	var pending <-chan time.Time
	wantSolve := false
	last := time.Now()
	run := func(solve bool) {
		l.round(ctx, solve)
		last = time.Now()
	}
	schedule := func() {
		if pending == nil {
			pending = time.After(max(0, l.debounce()-time.Since(last)))
		}
	}
	run(true)
	for {
		select {
		case <-ctx.Done():
			l.log.Info("rescheduling loop stopped")
			return
		case <-t.C:
			run(true)
			wantSolve, pending = false, nil
		case <-l.kickCh:
			wantSolve = true
			schedule()
		case <-l.nudgeCh:
			schedule()
		case <-pending:
			pending = nil
			run(wantSolve)
			wantSolve = false
		case r := <-l.results:
			committed, stale := l.finishSolve(ctx, r)
			if stale {
				// A solving round passed the job while this solve ran: solve again
				// on the newer input.
				wantSolve = true
				schedule()
			} else if committed {
				run(false)
			}
		}
	}
}

// beginTerm starts a leadership term: its per-term state is reset, and every committed
// entry is applied before the loop acts on the state (raft barrier; its error is
// returned, the state is reset either way).
func (l *Loop) beginTerm() error {
	l.startTerm()
	return l.s.raft.Barrier(10 * time.Second).Error()
}

// startTerm resets the per-term state of a new leadership term.
func (l *Loop) startTerm() {
	l.results = make(chan solveResult, 16)
	l.solving = map[string]bool{}
	l.stale = map[string]bool{}
	l.adopted = map[string]bool{}
	l.refused = map[string]string{}
	l.settled = map[string]settledInput{}
	l.queued = map[string]bool{}
	l.fitsCache = map[[sha256.Size]byte]fitsAnswer{}
	l.joint.Store(&jointCache{})
	l.trials = map[string]map[string]fsm.TrialSlots{}
}

// Share returns job's share of this leader's newest joint round (false when fewer than
// two pipelines are planned, the joint round is off or failed, or it has not run in this
// leadership term). Safe to call from any goroutine.
func (l *Loop) Share(job string) (sched.Share, bool) {
	sh, ok := l.jointShares()[job]
	return sh, ok
}

// jointShares returns the newest joint round's shares (nil when there are none).
func (l *Loop) jointShares() map[string]sched.Share {
	if j := l.joint.Load(); j != nil {
		return j.shares
	}
	return nil
}

// roundSync runs one round and then waits for the solves it started, commits their
// results as runLeader does, and runs the round that starts applying what was committed:
// one interval of the loop, with no goroutine left behind (Server.Round).
func (l *Loop) roundSync(ctx context.Context, solve bool) {
	l.round(ctx, solve)
	committed := false
	for len(l.solving) > 0 {
		select {
		case <-ctx.Done():
			return
		case r := <-l.results:
			c, _ := l.finishSolve(ctx, r)
			committed = committed || c
		}
	}
	if committed {
		l.round(ctx, false)
	}
}

// finishSolve handles a solve's result: the job no longer solves, the result is committed when
// worth it and settled. It reports whether a decision was committed and whether a solving
// round passed the job meanwhile (its stale mark, cleared here).
func (l *Loop) finishSolve(ctx context.Context, r solveResult) (committed, stale bool) {
	delete(l.solving, r.job)
	committed = l.commit(ctx, r)
	l.settle(r, committed)
	stale = l.stale[r.job]
	delete(l.stale, r.job)
	return committed, stale
}

// round runs one pass: refresh the inventory, advance in-flight decisions and, with solve,
// start a solve for every pipeline that has no decision in flight.
func (l *Loop) round(ctx context.Context, solve bool) {
	if ctx.Err() != nil {
		return
	}
	l.rounds.Add(1)
	if a := l.cfg.Actuator; a != nil {
		nodes, err := a.Inventory(ctx)
		if err != nil {
			l.log.Warn("inventory unavailable; keeping the committed inventory", "err", err)
		} else if l.inventoryChanged(nodes) {
			if _, err := l.s.Propose(ctx, fsm.Command{Op: fsm.OpSetInventory, Nodes: nodes}); err != nil {
				l.log.Warn("commit inventory", "err", err)
			} else {
				l.log.Info("inventory committed", "nodes", len(nodes))
			}
		}
	}
	if solve && l.cfg.AutoRegister {
		l.autoRegister(ctx)
	}
	var jobs []string
	l.s.fsm.Read(func(st *fsm.State) {
		for j := range st.Pipelines {
			jobs = append(jobs, j)
		}
	})
	sort.Strings(jobs)
	if solve {
		l.queued = l.admission(ctx)
		l.refreshJoint(ctx)
	}
	for _, job := range jobs {
		if ctx.Err() != nil {
			return
		}
		l.pipeline(ctx, job, solve && !l.queued[job])
	}
}

// releasing returns the pipeline whose decision d must wait for ("" when none): another
// pipeline's earlier decision, still applying, that takes instances off a node where d adds
// some. The commit check (sched.Conflicts) keeps committed decisions within every node, but
// the earlier decision's instances hold their devices, cores and memory until Nomad stops
// them: applied at once, d's new instances would not fit there yet. Only earlier decisions
// are waited for, so two pipelines never wait for each other.
func releasing(st *fsm.State, d fsm.Decision) string {
	now, before := nodeTotals(d), nodeTotals(previousDecision(st, d))
	var grows []string
	for n, k := range now {
		if k > before[n] {
			grows = append(grows, n)
		}
	}
	if len(grows) == 0 {
		return ""
	}
	for job, prog := range st.Progress {
		if _, ok := st.Pipelines[job]; !ok || job == d.Job || prog.Status != fsm.StatusApplying || prog.Decision >= d.Index {
			continue
		}
		other, ok := st.Decision(prog.Decision)
		if !ok {
			continue
		}
		after, was := nodeTotals(other), nodeTotals(previousDecision(st, other))
		for _, n := range grows {
			if after[n] < was[n] {
				return job
			}
		}
	}
	return ""
}

// previousDecision returns the decision of d's pipeline before d (zero when none).
func previousDecision(st *fsm.State, d fsm.Decision) fsm.Decision {
	for i := len(st.Decisions) - 1; i >= 0; i-- {
		if e := st.Decisions[i]; e.Job == d.Job && e.Index < d.Index {
			return e
		}
	}
	return fsm.Decision{}
}

// nodeTotals returns the instances d places on each node, over every operator.
func nodeTotals(d fsm.Decision) map[string]int {
	out := map[string]int{}
	for _, t := range d.Operators {
		for n, p := range t.Nodes {
			out[n] += p.Total()
		}
	}
	return out
}

// autoRegister registers the running jobs marked as pipelines that are not registered yet.
// A job that cannot be registered (its meta does not parse, it does not fit, Nomad or raft
// failed) is tried again every solving round; each distinct reason is logged once.
func (l *Loop) autoRegister(ctx context.Context) {
	f, ok := l.cfg.Actuator.(PipelineFinder)
	if !ok {
		return
	}
	ids, err := f.PipelineJobs(ctx)
	if err != nil {
		l.log.Warn("auto-register: cannot list the jobs marked as pipelines", "err", err)
		return
	}
	for _, id := range ids {
		var known bool
		l.s.fsm.Read(func(st *fsm.State) { _, known = st.Pipelines[id] })
		if known {
			continue
		}
		p, idx, err := l.s.register(ctx, id, nil)
		if err != nil {
			if l.refused[id] != err.Error() {
				l.refused[id] = err.Error()
				l.log.Warn("auto-register: job marked as a pipeline not registered; trying again every interval", "job", id, "err", err)
			}
			continue
		}
		delete(l.refused, id)
		l.log.Info("auto-registered pipeline", "job", id, "index", idx, "operators", len(p.Operators))
	}
}

func (l *Loop) inventoryChanged(nodes []fsm.Node) bool {
	changed := false
	l.s.fsm.Read(func(st *fsm.State) {
		if len(st.Nodes) != len(nodes) {
			changed = true
			return
		}
		for _, n := range nodes {
			if st.Nodes[n.Name] != n {
				changed = true
				return
			}
		}
	})
	return changed
}

func (l *Loop) pipeline(ctx context.Context, job string, solve bool) {
	var p *fsm.Pipeline
	var prog fsm.Progress
	var dec fsm.Decision
	var hasDec bool
	var waitFor string
	l.s.fsm.Read(func(st *fsm.State) {
		if pp, ok := st.Pipelines[job]; ok {
			cp := *pp
			p = &cp
		}
		prog = st.Progress[job]
		dec, hasDec = st.LatestDecision(job)
		if hasDec && prog.Status == fsm.StatusApplying {
			waitFor = releasing(st, dec)
		}
	})
	if p == nil {
		return
	}
	if hasDec && prog.Status == fsm.StatusApplying {
		if l.cfg.Actuator == nil {
			return
		}
		if waitFor != "" {
			// Nomad would fail to place what the other pipeline still holds (a failed
			// placement, then a blocked evaluation until its instances stop).
			l.log.Debug("decision waits for another pipeline to release its nodes", "job", job, "decision", dec.Index, "waiting_for", waitFor)
			return
		}
		// Fence: Nomad checks a job's modify index when the register RPC arrives, not
		// when it commits, so two concurrent writers could both pass. Only a server that
		// a quorum still follows acts.
		if err := l.s.raft.VerifyLeader().Error(); err != nil {
			l.log.Warn("not acting: leadership not confirmed", "job", job, "err", err)
			return
		}
		res, err := l.cfg.Actuator.Step(ctx, p, dec)
		if err != nil {
			l.log.Warn("apply decision", "job", job, "decision", dec.Index, "err", err)
			return
		}
		if res.Status == fsm.StatusApplying {
			if len(res.Canaries) > 0 {
				l.judgeCanaries(ctx, job, dec, res.Canaries)
			}
			return
		}
		res.Detail = fsm.Clip(l.canaryOutcome(ctx, job, dec, res.Status, res.Detail), 2048)
		_, err = l.s.Propose(ctx, fsm.Command{Op: fsm.OpProgress, Job: job, Progress: &fsm.Progress{Decision: dec.Index, Status: res.Status, Detail: res.Detail}})
		if err != nil {
			l.log.Warn("commit progress", "job", job, "decision", dec.Index, "err", err)
			return
		}
		l.log.Info("decision applied", "job", job, "decision", dec.Index, "status", res.Status, "detail", res.Detail)
		// The decision's versions may have ended a trial (a canary took its slot, or the
		// slot moved): the next round hands the trials to the actuator again.
		delete(l.trials, job)
		if res.Status == fsm.StatusDone {
			l.invalidate(ctx, job, dec)
		}
		return
	}
	// Trials change the job only between decisions: a version the actuator registered
	// for them would otherwise replace the decision's version in flight.
	l.syncTrials(ctx, job)
	if !solve {
		return
	}
	if l.solving[job] {
		l.stale[job] = true
		return // the previous solve still runs: the committed plan stays in force
	}
	if !l.adoptResubmitted(ctx, job) {
		return
	}
	in, err := l.input(ctx, job)
	if err != nil {
		// An input no deployment can satisfy (the inventory shrank below the minimums, an
		// operator fits no node) or estimates that cannot be read are why this round
		// finds no plan; a pipeline deleted meanwhile has nothing to record.
		if ctx.Err() == nil && !errors.Is(err, errGone) {
			l.planError(ctx, job, err)
		}
		return
	}
	digest := inputDigest(inputShape(in))
	if st, ok := l.settled[job]; ok && st.digest == digest && nearFigures(st.in, in) && (!hasDec || st.decision == dec.Index) && l.now().Sub(st.at) < l.settleFor() {
		return // (nearly) the same input found nothing worth moving: so would this one
	}
	l.solving[job] = true
	l.solves.Add(1)
	results := l.results // this term's channel: a later term makes a new one
	go func() {
		sctx, cancel := context.WithTimeout(ctx, l.cfg.SolveTimeout)
		defer cancel()
		plan, err := l.cfg.Scheduler.Plan(sctx, in)
		if err != nil && !errors.Is(err, sched.ErrImpossible) && ctx.Err() == nil {
			l.log.Warn("scheduler failed; using the fallback", "job", job, "err", err)
			fctx, fcancel := context.WithTimeout(ctx, l.cfg.SolveTimeout)
			plan, err = l.cfg.Fallback.Plan(fctx, in)
			fcancel()
		}
		select {
		case results <- solveResult{job: job, in: in, plan: plan, err: err, digest: digest}:
		case <-ctx.Done():
		}
	}()
}

func (l *Loop) invalidate(ctx context.Context, job string, dec fsm.Decision) {
	if l.cfg.Invalidator == nil {
		return
	}
	var invs []fsm.Invalidation
	l.s.fsm.Read(func(st *fsm.State) {
		for _, inv := range st.Invalidations {
			if inv.Job == job && inv.Decision == dec.Index {
				invs = append(invs, inv)
			}
		}
	})
	for _, inv := range invs {
		if err := l.cfg.Invalidator.Invalidate(ctx, job, inv.Operator, inv.Epoch); err != nil {
			l.log.Warn("invalidate observations", "job", job, "operator", inv.Operator, "err", err)
		}
	}
}

// priorCapacity is operator o's capacity before any estimate: its declared
// trident_capacity while it runs the job file's configuration (running is the config it
// runs now, "" when unknown), else def.
func priorCapacity(o fsm.Operator, running string, def float64) float64 {
	if o.CapacityHint > 0 && (running == "" || running == o.Config) {
		return o.CapacityHint
	}
	return def
}

// jointCache is the last joint round: the digest of its input and the shares it found
// (nil when fewer than two pipelines are planned, the joint round is off, or it failed).
type jointCache struct {
	digest [sha256.Size]byte
	shares map[string]sched.Share
}

// refreshJoint brings the joint round's shares up to date, once per solving round: when two
// or more pipelines are planned (queued ones aside) and the joint round is on, the pooled
// joint model of all of them (sched.Shares), solved again only when a pipeline, a weight,
// a capacity estimate or the inventory changes. When their minimums do not fit together,
// or the solve fails, no pipeline is capped (first come, first served) and the reason is
// logged once per input.
func (l *Loop) refreshJoint(ctx context.Context) {
	var ins []sched.PlanInput
	l.s.fsm.Read(func(st *fsm.State) {
		if l.cfg.NoJoint || len(st.Pipelines) < 2 {
			return
		}
		jobs := make([]string, 0, len(st.Pipelines))
		for j := range st.Pipelines {
			jobs = append(jobs, j)
		}
		sort.Strings(jobs)
		for _, j := range jobs {
			if l.queued[j] {
				continue
			}
			if in, err := l.stateInput(st, j); err == nil {
				ins = append(ins, in)
			}
		}
	})
	if len(ins) < 2 {
		l.joint.Store(&jointCache{})
		return
	}
	digest := jointDigest(ins, l.cfg.Objective)
	if j := l.joint.Load(); j != nil && digest == j.digest {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, l.cfg.SolveTimeout)
	j, err := sched.Shares(sctx, ins, ins[0].Nodes, l.cfg.Objective, milp.Options{TimeLimit: l.cfg.SolveTimeout}.OnThread(l.cfg.SolverThread))
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		l.joint.Store(&jointCache{digest: digest})
		l.log.Warn("joint round: no shares; pipelines are planned first come, first served", "pipelines", len(ins), "err", err)
		return
	}
	l.joint.Store(&jointCache{digest: digest, shares: j.Shares})
	l.log.Info("joint round", "pipelines", len(ins), "objective", j.Objective, "bound", j.Bound, "solve", j.SolveTime.Round(time.Millisecond))
}

// jointDigest identifies a joint round's input: the pipelines' operators, capacities,
// candidates, weights and minimums, the inventory and the objective (not the current
// deployments or backlogs, which the shares do not depend on).
func jointDigest(ins []sched.PlanInput, obj milp.Objective) [sha256.Size]byte {
	type op struct {
		O fsm.Operator
		C float64
		K *fsm.Candidate
	}
	type pipe struct {
		J    string
		W, M float64
		Ops  []op
	}
	v := struct {
		P   []pipe
		N   []fsm.Node
		Obj milp.Objective
	}{N: ins[0].Nodes, Obj: obj}
	for _, in := range ins {
		p := pipe{J: in.Job, W: in.Weight, M: in.MinThroughput}
		for _, o := range in.Operators {
			p.Ops = append(p.Ops, op{O: o.Operator, C: o.Capacity, K: o.Candidate})
		}
		v.P = append(v.P, p)
	}
	b, _ := json.Marshal(v) // plain structs with finite numbers always encode
	return sha256.Sum256(b)
}

// revertCapacity is the share of its estimate a running config keeps in the scheduling
// input while a revert candidate replaces it (fsm.Candidate.Revert).
const revertCapacity = 0.01

// stateInput builds job's scheduling input from the committed state st on the whole
// inventory (nodes sorted by name), with capacities from the latest observations or the
// operators' priors.
func (l *Loop) stateInput(st *fsm.State, job string) (sched.PlanInput, error) {
	in := sched.PlanInput{Job: job, MaxBatch: l.cfg.MaxBatch, CatchUpSec: l.cfg.CatchUpSec}
	p := st.Pipelines[job]
	if p == nil {
		return in, fmt.Errorf("pipeline %q: %w", job, errGone)
	}
	in.Weight, in.MinThroughput = p.Weight, p.MinThroughput
	for _, n := range st.Nodes {
		in.Nodes = append(in.Nodes, n)
	}
	sort.Slice(in.Nodes, func(i, j int) bool { return in.Nodes[i].Name < in.Nodes[j].Name })
	in.Current = currentDeployment(st, job)
	for _, o := range p.Operators {
		running := ""
		if r := st.Rollouts[job][o.Name]; r != nil {
			running = r.Config
		}
		oi := sched.OperatorInput{Operator: o, Capacity: priorCapacity(o, running, l.cfg.DefaultCapacity)}
		if ob, ok := st.Observations[job][o.Name]; ok {
			if ob.Capacity > 0 {
				oi.Capacity = ob.Capacity
			}
			oi.Backlog = ob.Backlog
			if ob.Amplification > 0 {
				// Observed selectivity replaces the declaration: the workload decides it.
				oi.Operator.Amplification = ob.Amplification
			}
		}
		if c, ok := st.Candidates[job][o.Name]; ok {
			cp := c
			oi.Candidate = &cp
			if c.Revert {
				// The running config fails with OOM: its instances restart instead of
				// serving.
				oi.Capacity *= revertCapacity
			}
			if c.Revert || c.Trialled {
				// A candidate that ran already moves in one decision, not in batches: a
				// config can exceed the device memory later (the workload moves), and
				// one deployment is all Nomad can revert to the config that ran before.
				in.MaxBatch = 0
			}
		}
		in.Operators = append(in.Operators, oi)
	}
	return in, nil
}

// input builds the scheduling input from the committed state: the pipeline is planned on
// what the other pipelines' decisions in force leave (first come, first served), capped
// at its joint share when several pipelines are registered (see docs/planner.md).
func (l *Loop) input(ctx context.Context, job string) (sched.PlanInput, error) {
	var in sched.PlanInput
	var ops []fsm.Operator
	var err error
	var others []sched.Holding
	l.s.fsm.Read(func(st *fsm.State) {
		in, err = l.stateInput(st, job)
		if err != nil {
			return
		}
		for _, o := range in.Operators {
			ops = append(ops, o.Operator)
		}
		others = othersHoldings(st, job)
	})
	if err != nil {
		return in, err
	}
	shares := l.jointShares()
	if _, ok := shares[job]; ok {
		in = sched.OnShare(in, in.Nodes, shares, others)
	} else {
		in = sched.Beside(in, in.Nodes, others)
	}
	if l.cfg.Estimator != nil {
		caps, err := l.cfg.Estimator.Capacities(ctx, job, ops)
		if err != nil {
			return in, fmt.Errorf("capacity estimates: %w", err)
		}
		for i := range in.Operators {
			if c, ok := caps[in.Operators[i].Name]; ok && c > 0 && !math.IsInf(c, 0) {
				in.Operators[i].Capacity = c
			}
		}
	}
	if in.CatchUpSec > 0 {
		// The catch-up reference: what the current deployment sustains at the current
		// estimates, in steady state (0 before the first deployment: catch-up off).
		steady := in
		steady.CatchUpSec = 0
		in.RefThroughput = supported(steady, in.Current)
	}
	return in, in.Validate()
}

// currentDeployment is the committed deployment the next decision starts from: the
// placement of the latest decision that finished (done), with instances counted on the
// current config once a transition has been promoted.
func currentDeployment(st *fsm.State, job string) map[string]map[string]fsm.Placement {
	dep := st.Deployed[job]
	if dep == nil {
		return nil
	}
	out := map[string]map[string]fsm.Placement{}
	for op, nodes := range dep {
		r := st.Rollouts[job][op]
		out[op] = map[string]fsm.Placement{}
		for n, pl := range nodes {
			if r != nil && r.CandidateConfig == "" {
				pl = fsm.Placement{Current: pl.Total()}
			}
			out[op][n] = pl
		}
	}
	return out
}

// supported is the throughput a deployment sustains at the input's capacities and
// amplifications (catch-up included, as the scheduler sees them).
func supported(in sched.PlanInput, dep map[string]map[string]fsm.Placement) float64 {
	T := math.Inf(1)
	amps := in.Amplifications()
	for i, o := range in.Operators {
		amp := amps[i]
		c := 0.0
		// In node order: a sum in map order may differ in its last bit between two
		// identical rounds, and the loop compares this figure with the plan's.
		for _, n := range slices.Sorted(maps.Keys(dep[o.Name])) {
			pl := dep[o.Name][n]
			c += float64(pl.Current) * o.Capacity
			if o.Candidate != nil {
				c += float64(pl.Candidate) * o.Candidate.Capacity
			}
		}
		T = math.Min(T, c/amp)
	}
	if math.IsInf(T, 0) {
		return 0
	}
	return T
}

// newClusterID returns a random planner cluster ID for a cluster that has none yet; the
// FSM keeps the first one a decision brings (State.ClusterID) and stamps it on every
// decision.
func newClusterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// adoptResubmitted handles a job a user ran again with `nomad job run` after the planner
// had applied a decision: the planner renders every decision from the registered job, so
// the next decision would silently undo the user's change. It registers the running
// version again instead (the user's change becomes the template; the rollout state stays)
// and reports whether the round may plan. A version it cannot adopt (its meta no longer
// parses) is left running and shown as the pipeline's plan_error. Only after a decision
// finished done: before that, and after Nomad reverts a failed first decision, the
// running version is the user's original.
func (l *Loop) adoptResubmitted(ctx context.Context, job string) bool {
	det, ok := l.cfg.Actuator.(ResubmitDetector)
	if !ok {
		return true
	}
	var stable uint64
	l.s.fsm.Read(func(st *fsm.State) { stable = st.Stable[job] })
	if stable == 0 {
		return true
	}
	re, err := det.Resubmitted(ctx, job)
	if err != nil {
		l.log.Warn("cannot tell whether the job was re-submitted", "job", job, "err", err)
		return false
	}
	if !re || l.adopted[job] {
		return true
	}
	p, err := l.cfg.Actuator.Pipeline(ctx, job, nil)
	if err != nil {
		l.planError(ctx, job, fmt.Errorf("the job was run again outside the planner and its new version cannot be adopted (it keeps running as submitted): %w", err))
		return false
	}
	idx, err := l.s.Propose(ctx, fsm.Command{Op: fsm.OpRegisterPipeline, Pipeline: p})
	if err != nil {
		l.planError(ctx, job, fmt.Errorf("the job was run again outside the planner; registering its new version: %w", err))
		return false
	}
	l.log.Info("job run again outside the planner: its new version is the pipeline's template now", "job", job, "index", idx)
	l.adopted[job] = true
	return true
}

// errGone marks a pipeline deleted while its round was prepared.
var errGone = errors.New("deleted")

// commit turns a solve result into a decision and commits it when it is worth acting on;
// it reports whether it committed one.
func (l *Loop) commit(ctx context.Context, r solveResult) bool {
	if r.err != nil {
		if ctx.Err() == nil {
			l.planError(ctx, r.job, r.err)
		}
		return false
	}
	d := fsm.Decision{Job: r.job, Operators: map[string]fsm.OpTarget{}, Throughput: r.plan.Throughput,
		Egress: r.plan.Egress, Source: r.plan.Source, Reason: r.plan.Reason, UnixMilli: l.now().UnixMilli()}
	transitions := 0
	var hasDec bool
	l.s.fsm.Read(func(st *fsm.State) {
		_, hasDec = st.LatestDecision(r.job)
		d.Planner = st.ClusterID
		for _, o := range r.in.Operators {
			ro := st.Rollouts[r.job][o.Name]
			if ro == nil {
				continue
			}
			t := fsm.OpTarget{Nodes: r.plan.Targets[o.Name], Config: ro.Config, Epoch: ro.Epoch}
			cand := 0
			for _, pl := range t.Nodes {
				cand += pl.Candidate
			}
			if cand > 0 {
				t.CandidateConfig = ro.CandidateConfig
				if c, ok := st.Candidates[r.job][o.Name]; ok {
					t.CandidateConfig, t.NoCanary = c.Config, c.Trialled || c.Revert
				}
			}
			t.Transitions = cand - ro.OnCandidate
			transitions += t.Transitions
			d.Operators[o.Name] = t
		}
	})
	if hasDec && transitions == 0 && !l.adopted[r.job] {
		cur := supported(r.in, r.in.Current)
		if r.plan.Throughput <= cur*(1+l.cfg.MinGain) && fits(r.in) && withinBounds(r.in) {
			l.planError(ctx, r.job, nil) // a plan was found; nothing worth moving
			return false
		}
	}
	if reflect.DeepEqual(normalise(d.Operators), normalise(targetsOf(r.in.Current))) && hasDec && !l.adopted[r.job] {
		l.planError(ctx, r.job, nil)
		return false
	}
	if d.Planner == "" {
		d.Planner = newClusterID() // the first decision names the cluster
	}
	if !r.plan.Routed && len(r.in.Nodes) > 1 {
		// a scheduler that does not route (the fallback): the routing of its placement
		// says what its decision takes of the links other pipelines share (its planned
		// throughput stays the scheduler's: the routing only adds the egress); only a
		// plan worth committing is routed
		if routed, err := sched.Routed(ctx, r.in, r.plan); err != nil {
			l.log.Warn("plan egress unknown: its decision counts no egress against shared links", "job", r.job, "source", r.plan.Source, "err", err)
		} else {
			d.Egress = routed.Egress
		}
	}
	// Another pipeline's decision committed while this one was solved may hold what this
	// plan counted on: such a plan is dropped and solved again on what is left.
	var over []string
	l.s.fsm.Read(func(st *fsm.State) {
		nodes := make([]fsm.Node, 0, len(st.Nodes))
		for _, n := range st.Nodes {
			nodes = append(nodes, n)
		}
		sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
		if p := st.Pipelines[r.job]; p != nil {
			over = sched.Conflicts(nodes, othersHoldings(st, r.job), sched.Holding{Pipeline: p, Targets: d.Operators, Egress: d.Egress})
		}
	})
	if len(over) > 0 {
		l.log.Info("plan dropped: other pipelines hold part of what it needs; solving again", "job", r.job, "nodes", fsm.ShortList(over, 3))
		l.stale[r.job] = true
		return false
	}
	idx, err := l.s.Propose(ctx, fsm.Command{Op: fsm.OpDecide, Decision: &d})
	if err != nil {
		l.log.Warn("decision not committed", "job", r.job, "err", err)
		return false
	}
	delete(l.adopted, r.job)
	l.log.Info("decision committed", "job", r.job, "index", idx, "source", d.Source, "throughput", d.Throughput, "transitions", transitions, "reason", d.Reason)
	return true
}

// planError records in the replicated state why job's round found no plan (err), or that
// it found one (nil), when that differs from what is recorded: every server then shows it
// with the job's plan, and a failure repeated every round is logged and committed once.
func (l *Loop) planError(ctx context.Context, job string, err error) {
	var old fsm.PlanError
	var had bool
	l.s.fsm.Read(func(st *fsm.State) { old, had = st.PlanErrors[job] })
	var pe *fsm.PlanError
	switch {
	case err == nil && !had:
		return
	case err != nil:
		if had && old.Error == err.Error() {
			l.log.Debug("no feasible plan this round; keeping the committed plan", "job", job, "err", err)
			return
		}
		l.log.Warn("no feasible plan this round; keeping the committed plan", "job", job, "err", err)
		pe = &fsm.PlanError{Error: err.Error(), UnixMilli: l.now().UnixMilli()}
	default:
		l.log.Info("scheduling rounds find a plan again", "job", job, "previous_error", old.Error)
	}
	if _, perr := l.s.Propose(ctx, fsm.Command{Op: fsm.OpPlanError, Job: job, PlanError: pe}); perr != nil {
		l.log.Warn("record the round's outcome", "job", job, "err", perr)
	}
}

// fits reports whether the current deployment only uses nodes of the inventory.
func fits(in sched.PlanInput) bool {
	known := map[string]bool{}
	for _, n := range in.Nodes {
		known[n.Name] = true
	}
	for _, nodes := range in.Current {
		for n, pl := range nodes {
			if pl.Total() > 0 && !known[n] {
				return false
			}
		}
	}
	return true
}

// withinBounds reports whether the current deployment keeps every operator within its
// scaling policy's min and max (a re-registered job may have changed them): a plan that
// restores them is applied even when it gains no throughput.
func withinBounds(in sched.PlanInput) bool {
	for _, o := range in.Operators {
		if !o.Admits(fsm.OpTarget{Nodes: in.Current[o.Name]}.Count()) {
			return false
		}
	}
	return true
}

func targetsOf(dep map[string]map[string]fsm.Placement) map[string]fsm.OpTarget {
	out := map[string]fsm.OpTarget{}
	for op, n := range dep {
		out[op] = fsm.OpTarget{Nodes: n}
	}
	return out
}

func normalise(m map[string]fsm.OpTarget) map[string]map[string]fsm.Placement {
	out := map[string]map[string]fsm.Placement{}
	for op, t := range m {
		out[op] = map[string]fsm.Placement{}
		for n, pl := range t.Nodes {
			if pl.Total() > 0 {
				out[op][n] = pl
			}
		}
	}
	return out
}

// inForce is the decision of job that Nomad runs or is moving to: the latest one, or,
// when it failed (Nomad reverted), the stable one.
func inForce(st *fsm.State, job string) (fsm.Decision, bool) {
	d, ok := st.LatestDecision(job)
	if !ok {
		return d, false
	}
	if pr := st.Progress[job]; pr.Decision == d.Index && pr.Status == fsm.StatusFailed {
		return st.Decision(st.Stable[job])
	}
	return d, true
}

// othersHoldings is what the decisions in force of every pipeline but job hold.
func othersHoldings(st *fsm.State, job string) []sched.Holding {
	jobs := make([]string, 0, len(st.Pipelines))
	for j := range st.Pipelines {
		if j != job {
			jobs = append(jobs, j)
		}
	}
	sort.Strings(jobs)
	var out []sched.Holding
	for _, j := range jobs {
		if d, ok := inForce(st, j); ok {
			out = append(out, sched.Holding{Pipeline: st.Pipelines[j], Targets: d.Operators, Egress: d.Egress})
		}
	}
	return out
}

// settle records r's input as settled when it found a plan and nothing worth committing,
// and forgets the job's settled input otherwise.
func (l *Loop) settle(r solveResult, committed bool) {
	if committed || r.err != nil || r.digest == ([sha256.Size]byte{}) || l.stale[r.job] {
		delete(l.settled, r.job)
		return
	}
	var dec uint64
	l.s.fsm.Read(func(st *fsm.State) {
		if d, ok := st.LatestDecision(r.job); ok {
			dec = d.Index
		}
	})
	l.settled[r.job] = settledInput{digest: r.digest, in: r.in, decision: dec, at: l.now()}
}
