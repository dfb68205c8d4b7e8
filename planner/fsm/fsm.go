package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"

	"github.com/hashicorp/raft"
)

// Op names a command kind.
type Op string

// Command kinds.
const (
	OpRegisterPipeline Op = "register_pipeline"
	OpDeletePipeline   Op = "delete_pipeline"
	OpSetInventory     Op = "set_inventory"
	OpObserve          Op = "observe"
	OpSetCandidate     Op = "set_candidate"
	OpDropCandidate    Op = "drop_candidate"
	OpDecide           Op = "decide"
	OpProgress         Op = "progress"
	OpPlanError        Op = "plan_error"
	OpCanary           Op = "canary"
	OpQueue            Op = "queue"
	OpSetTrial         Op = "set_trial"
	OpDropTrial        Op = "drop_trial"
	OpFailTrial        Op = "fail_trial"
)

// Command is one raft log entry.
type Command struct {
	Op Op `json:"op"`
	// Pipeline for OpRegisterPipeline.
	Pipeline *Pipeline `json:"pipeline,omitempty"`
	// Job for every per-job command.
	Job string `json:"job,omitempty"`
	// Operator for OpObserve, OpSetCandidate, OpDropCandidate.
	Operator string `json:"operator,omitempty"`
	// Nodes for OpSetInventory.
	Nodes []Node `json:"nodes,omitempty"`
	// Observation for OpObserve (single, with Job and Operator).
	Observation *Observation `json:"observation,omitempty"`
	// Observations for OpObserve (a batch, applied atomically).
	Observations []ObservationEntry `json:"observations,omitempty"`
	// Candidate for OpSetCandidate.
	Candidate *Candidate `json:"candidate,omitempty"`
	// Decision for OpDecide.
	Decision *Decision `json:"decision,omitempty"`
	// Progress for OpProgress.
	Progress *Progress `json:"progress,omitempty"`
	// Deployed for OpProgress with status done: the observed placement per operator/node.
	Deployed map[string]map[string]Placement `json:"deployed,omitempty"`
	// PlanError for OpPlanError: why the newest round found no plan (nil clears it).
	PlanError *PlanError `json:"plan_error,omitempty"`
	// Canary for OpCanary (with Job and Operator).
	Canary *Canary `json:"canary,omitempty"`
	// Queue for OpQueue: the whole admission queue (job -> entry), replacing the last.
	Queue map[string]Queued `json:"queue,omitempty"`
	// Trial for OpSetTrial (with Job and Operator; its epoch and index are set on apply),
	// for OpDropTrial the slot to end (nil: every slot of the operator), and for
	// OpFailTrial the slot, the index of the trial that failed and why (Failed).
	Trial *Trial `json:"trial,omitempty"`
}

// ObservationEntry is one element of an observation batch.
type ObservationEntry struct {
	Job         string      `json:"job"`
	Operator    string      `json:"operator"`
	Observation Observation `json:"observation"`
}

// Encode serialises c for raft.Apply.
func (c Command) Encode() ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode %s command: %w", c.Op, err)
	}
	return b, nil
}

// Result is what Apply returns for one command (the raft ApplyFuture's Response).
type Result struct {
	// Index is the raft index of the command.
	Index uint64
	// Err is non-nil when the command was rejected; the state is then unchanged.
	Err error
}

// ErrRejected wraps every validation failure inside Apply.
var ErrRejected = errors.New("command rejected")

// FSM implements raft.FSM over State.
type FSM struct {
	mu sync.RWMutex
	st *State
	// onCommit, if set, is called (outside the lock) after each successful command.
	onCommit func(Command, uint64)
}

// New returns an FSM with empty state. onCommit (may be nil) observes committed commands;
// it must not block.
func New(onCommit func(Command, uint64)) *FSM {
	return &FSM{st: NewState(), onCommit: onCommit}
}

// Read calls f with the state under a read lock. f must not retain or modify it.
func (f *FSM) Read(fn func(*State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st)
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return Result{Index: l.Index}
	}
	var c Command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return Result{Index: l.Index, Err: fmt.Errorf("%w: decode command at index %d: %v", ErrRejected, l.Index, err)}
	}
	f.mu.Lock()
	err := apply(f.st, c, l.Index)
	f.mu.Unlock()
	if err != nil {
		return Result{Index: l.Index, Err: fmt.Errorf("%w: %s: %w", ErrRejected, c.Op, err)}
	}
	if f.onCommit != nil {
		f.onCommit(c, l.Index)
	}
	return Result{Index: l.Index}
}

// Check reports why c would be rejected if it were applied to the state now, or nil; it
// changes nothing. The planner checks every command before proposing it, so that a refused
// write leaves no raft entry; Apply runs the same check against the state it applies to
// (which may have moved on meanwhile). The error is wrapped in ErrRejected.
func (f *FSM) Check(c Command) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := check(f.st, c, true); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRejected, c.Op, err)
	}
	return nil
}

// Snapshot implements raft.FSM: the state is serialised under the read lock.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := json.Marshal(f.st)
	if err != nil {
		return nil, fmt.Errorf("snapshot planner state: %w", err)
	}
	return snapshot(b), nil
}

// Restore implements raft.FSM.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st := NewState()
	if err := json.NewDecoder(rc).Decode(st); err != nil {
		return fmt.Errorf("restore planner state: %w", err)
	}
	st.fill()
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	return nil
}

func (s *State) fill() {
	n := NewState()
	if s.Pipelines == nil {
		s.Pipelines = n.Pipelines
	}
	if s.Nodes == nil {
		s.Nodes = n.Nodes
	}
	if s.Deployed == nil {
		s.Deployed = n.Deployed
	}
	if s.Rollouts == nil {
		s.Rollouts = n.Rollouts
	}
	if s.Candidates == nil {
		s.Candidates = n.Candidates
	}
	if s.Epochs == nil {
		s.Epochs = n.Epochs
	}
	if s.Trials == nil {
		s.Trials = n.Trials
	}
	if s.Observations == nil {
		s.Observations = n.Observations
	}
	if s.Progress == nil {
		s.Progress = n.Progress
	}
	if s.PlanErrors == nil {
		s.PlanErrors = n.PlanErrors
	}
	if s.Canaries == nil {
		s.Canaries = n.Canaries
	}
	if s.Queue == nil {
		s.Queue = n.Queue
	}
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write planner snapshot: %w", err)
	}
	return sink.Close()
}

func (snapshot) Release() {}

// apply validates c against st and, only when valid, mutates st. It dispatches on the
// command kind to one applyXxx function per command; each returns before its first
// mutation when the command is invalid.
func apply(st *State, c Command, idx uint64) error {
	if err := check(st, c, false); err != nil {
		return err
	}
	switch c.Op {
	case OpRegisterPipeline:
		return applyRegisterPipeline(st, c, idx)
	case OpDeletePipeline:
		return applyDeletePipeline(st, c)
	case OpSetInventory:
		return applySetInventory(st, c)
	case OpObserve:
		return applyObserve(st, c, idx)
	case OpSetCandidate:
		return applySetCandidate(st, c, idx)
	case OpDropCandidate:
		return applyDropCandidate(st, c)
	case OpDecide:
		return applyDecision(st, c.Decision, idx)
	case OpProgress:
		return applyProgress(st, c, idx)
	case OpPlanError:
		return applyPlanError(st, c, idx)
	case OpCanary:
		return applyCanary(st, c, idx)
	case OpQueue:
		return applyQueue(st, c, idx)
	case OpSetTrial:
		return applySetTrial(st, c, idx)
	case OpDropTrial:
		return applyDropTrial(st, c)
	case OpFailTrial:
		return applyFailTrial(st, c)
	default:
		return fmt.Errorf("unknown command %q", c.Op)
	}
}

// check validates c against st without changing it: every rule a command must pass before
// its applyXxx function mutates the state. With admit (Check, before a command is
// proposed) a registration must also pass ValidatePipeline's ranges; applying a committed
// entry checks only committedPipeline, so that an entry replays alike under every version.
func check(st *State, c Command, admit bool) error {
	switch c.Op {
	case OpRegisterPipeline:
		if admit {
			return ValidatePipeline(c.Pipeline)
		}
		return committedPipeline(c.Pipeline)
	case OpDeletePipeline, OpPlanError:
		return registered(st, c.Job)
	case OpSetInventory:
		return checkInventory(c.Nodes)
	case OpObserve:
		return checkObserve(st, c)
	case OpSetCandidate:
		return checkCandidate(st, c)
	case OpDropCandidate:
		return checkDropCandidate(st, c)
	case OpDecide:
		return CheckDecision(st, c.Decision)
	case OpProgress:
		return checkProgress(st, c)
	case OpCanary:
		return checkCanary(st, c)
	case OpQueue:
		return checkQueue(st, c)
	case OpSetTrial:
		return checkTrial(st, c)
	case OpDropTrial:
		return checkDropTrial(st, c)
	case OpFailTrial:
		return checkFailTrial(st, c)
	default:
		return fmt.Errorf("unknown command %q", c.Op)
	}
}

// committedPipeline is the rule a committed registration is applied under. Log entries
// are replayed by whatever version a server runs (after a restart, by a new server), so
// this rule never changes: ranges and other admission limits go into ValidatePipeline,
// which runs before a registration is proposed. A registration an older version committed
// that today's limits refuse stays registered.
func committedPipeline(p *Pipeline) error {
	if p == nil || p.Job == "" {
		return fmt.Errorf("pipeline: job is empty")
	}
	if len(p.Operators) == 0 {
		return fmt.Errorf("pipeline %q: no operator groups", p.Job)
	}
	seen := map[string]bool{}
	for i, o := range p.Operators {
		switch {
		case o.Name == "":
			return fmt.Errorf("pipeline %q: operator name is empty", p.Job)
		case seen[o.Name]:
			return fmt.Errorf("pipeline %q: duplicate operator %q", p.Job, o.Name)
		case i > 0 && p.Operators[i-1].Order > o.Order:
			return fmt.Errorf("pipeline %q: operators not sorted by trident_order at %q", p.Job, o.Name)
		case o.Order < 0 || !finite(o.CPU) || o.CPU <= 0 || o.MemoryMB <= 0 || o.GPUs < 0 || o.GPUMemoryMB < 0,
			!finite(o.OutputBytes) || o.OutputBytes < 0, !finite(o.Amplification) || o.Amplification <= 0,
			!finite(o.ColdStartSec) || o.ColdStartSec < 0, !finite(o.CapacityHint) || o.CapacityHint < 0,
			o.MinInstances < 0 || o.MaxInstances < 0 || (o.MaxInstances > 0 && o.MinInstances > o.MaxInstances):
			return fmt.Errorf("pipeline %q: operator %q: a value out of its sign or finiteness range", p.Job, o.Name)
		}
		seen[o.Name] = true
	}
	return nil
}

func registered(st *State, job string) error {
	if _, ok := st.Pipelines[job]; !ok {
		return fmt.Errorf("pipeline %q is not registered", job)
	}
	return nil
}

// applyRegisterPipeline registers c.Pipeline (or replaces its registration), keeping the
// rollouts of operators it already had and starting new operators on their declared config.
func applyRegisterPipeline(st *State, c Command, idx uint64) error {
	p := c.Pipeline
	cp := *p
	cp.RegisteredIndex = idx
	st.Pipelines[p.Job] = &cp
	ro := map[string]*Rollout{}
	old := st.Rollouts[p.Job]
	for _, o := range p.Operators {
		if r, ok := old[o.Name]; ok {
			ro[o.Name] = r
			continue
		}
		ro[o.Name] = &Rollout{Config: o.Config}
	}
	st.Rollouts[p.Job] = ro
	if st.Epochs[p.Job] == nil {
		st.Epochs[p.Job] = map[string]uint64{}
	}
	return nil
}

// applyDeletePipeline removes the registered pipeline c.Job and everything recorded for
// it except its epochs.
func applyDeletePipeline(st *State, c Command) error {
	delete(st.Pipelines, c.Job)
	delete(st.Rollouts, c.Job)
	delete(st.Candidates, c.Job)
	delete(st.Observations, c.Job)
	delete(st.Deployed, c.Job)
	delete(st.Progress, c.Job)
	delete(st.Stable, c.Job)
	delete(st.PlanErrors, c.Job)
	delete(st.Canaries, c.Job)
	delete(st.Queue, c.Job)
	delete(st.Trials, c.Job)
	// The job's logs go too: a pipeline registered again under the same ID starts
	// without a latest decision, and jobs that come and go do not grow the state.
	// Epochs stay, so that a re-registered operator's epochs keep increasing.
	st.Decisions = slices.DeleteFunc(st.Decisions, func(d Decision) bool { return d.Job == c.Job })
	st.Invalidations = slices.DeleteFunc(st.Invalidations, func(v Invalidation) bool { return v.Job == c.Job })
	return nil
}

// checkQueue validates an admission queue: every job is a registered batch pipeline
// without a decision, and positions are 1..n, each once.
func checkQueue(st *State, c Command) error {
	seen := make([]bool, len(c.Queue)+1)
	for job, q := range c.Queue {
		p, ok := st.Pipelines[job]
		switch {
		case !ok:
			return fmt.Errorf("queue: pipeline %q is not registered", job)
		case !p.Batch:
			return fmt.Errorf("queue: pipeline %q is not a batch pipeline (only batch pipelines queue)", job)
		case q.Position < 1 || q.Position > len(c.Queue) || seen[q.Position]:
			return fmt.Errorf("queue: pipeline %q: position %d: want each of 1..%d once", job, q.Position, len(c.Queue))
		}
		if _, has := st.LatestDecision(job); has {
			return fmt.Errorf("queue: pipeline %q already has a decision (admission never preempts)", job)
		}
		seen[q.Position] = true
	}
	return nil
}

// applyQueue replaces the admission queue with c.Queue.
func applyQueue(st *State, c Command, idx uint64) error {
	st.Queue = map[string]Queued{}
	for job, q := range c.Queue {
		q.Index = idx
		st.Queue[job] = q
	}
	return nil
}

// checkInventory validates every node of an inventory.
func checkInventory(nodes []Node) error {
	seen := map[string]bool{}
	for i, n := range nodes {
		switch {
		case n.Name == "":
			return fmt.Errorf("nodes[%d]: name is empty", i)
		case seen[n.Name]:
			return fmt.Errorf("nodes[%d]: duplicate node %q", i, n.Name)
		case !finite(n.CPU) || n.CPU < 0:
			return fmt.Errorf("node %q: cpu=%v must be a finite number >= 0", n.Name, n.CPU)
		case n.MemoryMB < 0 || n.GPUs < 0 || n.GPUMemoryMB < 0:
			return fmt.Errorf("node %q: memory_mb, gpus and gpu_memory_mb must be >= 0", n.Name)
		case !finite(n.EgressBps) || n.EgressBps < 0:
			return fmt.Errorf("node %q: egress_bps=%v must be a finite number >= 0", n.Name, n.EgressBps)
		}
		seen[n.Name] = true
	}
	return nil
}

// applySetInventory replaces the node inventory with c.Nodes.
func applySetInventory(st *State, c Command) error {
	st.Nodes = map[string]Node{}
	for _, n := range c.Nodes {
		st.Nodes[n.Name] = n
	}
	return nil
}

// observeEntries is the single observation of c followed by its batch.
func observeEntries(c Command) []ObservationEntry {
	if c.Observation != nil {
		return append([]ObservationEntry{{Job: c.Job, Operator: c.Operator, Observation: *c.Observation}}, c.Observations...)
	}
	return c.Observations
}

// checkObserve validates every observation of c: one invalid entry rejects them all.
func checkObserve(st *State, c Command) error {
	entries := observeEntries(c)
	if len(entries) == 0 {
		return fmt.Errorf("observation is missing")
	}
	for i, e := range entries {
		if err := CheckObservation(st, e); err != nil {
			return fmt.Errorf("observations[%d]: %w", i, err)
		}
	}
	return nil
}

// applyObserve records the single observation and the batch of c atomically. Each entry
// updates what its epoch measures (see ObservationTarget); stale entries are ignored.
func applyObserve(st *State, c Command, idx uint64) error {
	for _, e := range observeEntries(c) {
		o := e.Observation
		o.Index = idx
		switch ObservationTarget(st, e) {
		case TargetCurrent:
			setIn(st.Observations, e.Job, e.Operator, o)
		case TargetCandidate:
			if !o.Fallback {
				// A fallback is not a measurement of the candidate: a canary is judged
				// on the observation layer's estimate under load only.
				cand := st.Candidates[e.Job][e.Operator]
				cand.Capacity = o.Capacity
				cand.MeasuredIndex = idx
				st.Candidates[e.Job][e.Operator] = cand
			}
			// The backlog and selectivity are the operator's whatever config measured
			// them.
			if cur, ok := st.Observations[e.Job][e.Operator]; ok {
				cur.Backlog = o.Backlog
				if o.Amplification > 0 {
					cur.Amplification = o.Amplification
				}
				setIn(st.Observations, e.Job, e.Operator, cur)
			}
		default: // stale or ahead of the config epochs: ignored (reported by the API)
		}
	}
	return nil
}

// checkCandidate validates c.Candidate for operator c.Operator: at most one transition per
// operator is pending at a time.
func checkCandidate(st *State, c Command) error {
	if err := knownOp(st, c.Job, c.Operator); err != nil {
		return err
	}
	cand := c.Candidate
	if cand == nil || cand.Config == "" {
		return fmt.Errorf("operator %q: candidate config is empty", c.Operator)
	}
	if !finite(cand.Capacity) || cand.Capacity < 0 {
		return fmt.Errorf("operator %q: candidate capacity=%v must be a finite number >= 0", c.Operator, cand.Capacity)
	}
	if !finite(cand.ColdStartSec) || cand.ColdStartSec < 0 {
		return fmt.Errorf("operator %q: candidate cold_start_s=%v must be a finite number >= 0", c.Operator, cand.ColdStartSec)
	}
	r := st.Rollouts[c.Job][c.Operator]
	if aborts(r, cand) {
		return nil
	}
	if r.CandidateConfig != "" && r.CandidateConfig != cand.Config {
		return fmt.Errorf("operator %q: transition to %q still in flight (at most one pending transition per operator)", c.Operator, r.CandidateConfig)
	}
	if cand.Config == r.Config {
		return fmt.Errorf("operator %q: candidate %q equals the current config", c.Operator, cand.Config)
	}
	return nil
}

// applySetCandidate records c.Candidate as the pending candidate config of operator
// c.Operator.
// aborts reports whether cand reverts the transition in flight of rollout r: a revert
// (Candidate.Revert) to the config the transition replaces, which the OOM guard proposes
// when the config being rolled out fails with OOM.
func aborts(r *Rollout, cand *Candidate) bool {
	return r != nil && cand != nil && cand.Revert && r.CandidateConfig != "" && cand.Config == r.Config
}

func applySetCandidate(st *State, c Command, idx uint64) error {
	if r := st.Rollouts[c.Job][c.Operator]; aborts(r, c.Candidate) {
		// The transition in flight is aborted: a decision being applied is superseded
		// (failed: the job is back at its stable version, which the next decision
		// replaces, as a newer Nomad job version cancels a running deployment); the
		// config the transition rolls out becomes the current one (at its epoch) and the
		// config it replaces the candidate, at the next epoch, so that every instance
		// moves back to it in the next decision.
		if pr := st.Progress[c.Job]; pr.Status == StatusApplying {
			latest, _ := st.LatestDecision(c.Job)
			st.Progress[c.Job] = Progress{Decision: pr.Decision, Status: StatusFailed, Index: idx,
				Detail: fmt.Sprintf("superseded by the revert of operator %q's transition (its config fails with OOM)", c.Operator)}
			revertRollout(st, c, latest)
		}
		r.Config, r.CandidateConfig = r.CandidateConfig, r.Config
		r.Epoch++
		r.OnCurrent, r.OnCandidate = r.OnCandidate, r.OnCurrent
		for n, pl := range st.Deployed[c.Job][c.Operator] {
			st.Deployed[c.Job][c.Operator][n] = Placement{Current: pl.Candidate, Candidate: pl.Current}
		}
	}
	cp := *c.Candidate
	cp.Index = idx
	setIn(st.Candidates, c.Job, c.Operator, cp)
	return nil
}

// checkDropCandidate allows dropping operator c.Operator's candidate only while no
// instance runs it.
func checkDropCandidate(st *State, c Command) error {
	if err := knownOp(st, c.Job, c.Operator); err != nil {
		return err
	}
	if r := st.Rollouts[c.Job][c.Operator]; r.OnCandidate > 0 {
		return fmt.Errorf("operator %q: %d instances already run the candidate; it cannot be dropped", c.Operator, r.OnCandidate)
	}
	return nil
}

// applyDropCandidate drops the pending candidate of operator c.Operator.
func applyDropCandidate(st *State, c Command) error {
	delete(st.Candidates[c.Job], c.Operator)
	st.Rollouts[c.Job][c.Operator].CandidateConfig = ""
	return nil
}

// applyPlanError records why the newest planning round of c.Job found no plan, or clears
// the record when c.PlanError is nil or empty.
func applyPlanError(st *State, c Command, idx uint64) error {
	if c.PlanError == nil || c.PlanError.Error == "" {
		delete(st.PlanErrors, c.Job)
		return nil
	}
	pe := *c.PlanError
	pe.Index = idx
	st.PlanErrors[c.Job] = pe
	return nil
}

// Observation targets (see ObservationTarget).
const (
	TargetCurrent   = "current"
	TargetCandidate = "candidate"
	TargetStale     = "stale"
)

// ObservationTarget says what an observation measures from its epoch (the config
// generation label its instances export): the current config (epoch == the rollout's
// epoch), the pending candidate (epoch+1 while a transition is in flight; it updates the
// candidate's capacity), or nothing (stale or unknown epoch: ignored).
func ObservationTarget(st *State, e ObservationEntry) string {
	r := st.Rollouts[e.Job][e.Operator]
	if r == nil {
		return TargetStale
	}
	switch {
	case e.Observation.Epoch == r.Epoch:
		return TargetCurrent
	case e.Observation.Epoch == r.Epoch+1 && r.CandidateConfig != "":
		if _, ok := st.Candidates[e.Job][e.Operator]; ok {
			return TargetCandidate
		}
	}
	return TargetStale
}

// CheckObservation validates one observation against the state.
func CheckObservation(st *State, e ObservationEntry) error {
	if err := knownOp(st, e.Job, e.Operator); err != nil {
		return err
	}
	o := e.Observation
	if !finite(o.Capacity) || o.Capacity < 0 {
		return fmt.Errorf("operator %q: capacity=%v must be a finite number >= 0", e.Operator, o.Capacity)
	}
	if !finite(o.Std) || o.Std < 0 {
		return fmt.Errorf("operator %q: std=%v must be a finite number >= 0", e.Operator, o.Std)
	}
	if !finite(o.Backlog) || o.Backlog < 0 {
		return fmt.Errorf("operator %q: backlog=%v must be a finite number >= 0", e.Operator, o.Backlog)
	}
	return nil
}

func knownOp(st *State, job, op string) error {
	p, ok := st.Pipelines[job]
	if !ok {
		return fmt.Errorf("pipeline %q is not registered", job)
	}
	if _, ok := p.Operator(op); !ok {
		return fmt.Errorf("pipeline %q has no operator %q", job, op)
	}
	return nil
}

func setIn[V any](m map[string]map[string]V, a, b string, v V) {
	if m[a] == nil {
		m[a] = map[string]V{}
	}
	m[a][b] = v
}

// CheckDecision validates d against the state without changing it.
func CheckDecision(st *State, d *Decision) error {
	if d == nil {
		return fmt.Errorf("decision is missing")
	}
	p, ok := st.Pipelines[d.Job]
	if !ok {
		return fmt.Errorf("pipeline %q is not registered", d.Job)
	}
	if !finite(d.Throughput) || d.Throughput < 0 {
		return fmt.Errorf("throughput=%v must be a finite number >= 0", d.Throughput)
	}
	for node, b := range d.Egress {
		if node == "" || !finite(b) || b < 0 {
			return fmt.Errorf("egress_bps[%q]=%v must be a finite number >= 0 on a named node", node, b)
		}
	}
	if prog, ok := st.Progress[d.Job]; ok && prog.Status == StatusApplying {
		return fmt.Errorf("decision %d of %q is still being applied", prog.Decision, d.Job)
	}
	for _, o := range p.Operators {
		if _, ok := d.Operators[o.Name]; !ok {
			return fmt.Errorf("operator %q has no target in the decision", o.Name)
		}
	}
	for name, t := range d.Operators {
		if _, ok := p.Operator(name); !ok {
			return fmt.Errorf("pipeline %q has no operator %q", d.Job, name)
		}
		r := st.Rollouts[d.Job][name]
		if t.Config != r.Config || t.Epoch != r.Epoch {
			return fmt.Errorf("operator %q: decision is for config %q epoch %d but the current config is %q epoch %d", name, t.Config, t.Epoch, r.Config, r.Epoch)
		}
		cand, onCand := 0, 0
		for node, pl := range t.Nodes {
			if node == "" {
				return fmt.Errorf("operator %q: empty node name", name)
			}
			if pl.Current < 0 || pl.Candidate < 0 {
				return fmt.Errorf("operator %q on %q: negative instance count", name, node)
			}
			cand += pl.Candidate
		}
		onCand = r.OnCandidate
		if cand > 0 || t.Transitions > 0 {
			if t.CandidateConfig == "" {
				return fmt.Errorf("operator %q: candidate instances without a candidate config", name)
			}
			pending, ok := st.Candidates[d.Job][name]
			if !ok || pending.Config != t.CandidateConfig {
				return fmt.Errorf("operator %q: candidate config %q is not the pending candidate", name, t.CandidateConfig)
			}
		}
		if r.CandidateConfig != "" && t.CandidateConfig != "" && t.CandidateConfig != r.CandidateConfig {
			return fmt.Errorf("operator %q: transition to %q still in flight", name, r.CandidateConfig)
		}
		if cand < onCand {
			return fmt.Errorf("operator %q: decision rolls back %d transitioned instances (never allowed)", name, onCand-cand)
		}
		if t.Transitions != cand-onCand {
			return fmt.Errorf("operator %q: transitions=%d but candidate instances go from %d to %d", name, t.Transitions, onCand, cand)
		}
	}
	return nil
}

func applyDecision(st *State, d *Decision, idx uint64) error {
	delete(st.PlanErrors, d.Job) // a round found a plan
	delete(st.Queue, d.Job)      // admitted
	cp := *d
	cp.Index = idx
	if st.ClusterID == "" {
		st.ClusterID = d.Planner
	}
	cp.Planner = st.ClusterID
	cp.Operators = map[string]OpTarget{}
	for name, t := range d.Operators {
		nodes := map[string]Placement{}
		cur, cand := 0, 0
		for n, pl := range t.Nodes {
			if pl.Total() > 0 {
				nodes[n] = pl
			}
			cur += pl.Current
			cand += pl.Candidate
		}
		t.Nodes = nodes
		if cand == 0 && t.Transitions == 0 {
			t.CandidateConfig = ""
		}
		cp.Operators[name] = t
		r := st.Rollouts[d.Job][name]
		r.OnCurrent, r.OnCandidate = cur, cand
		if t.CandidateConfig != "" {
			r.CandidateConfig = t.CandidateConfig
		}
	}
	// The stable decision (the revert target) is kept whatever its age.
	stable := st.Stable[d.Job]
	st.Decisions = pruneOldest(append(st.Decisions, cp), KeepDecisions,
		func(x Decision) bool { return x.Job == d.Job }, func(x Decision) bool { return x.Index == stable })
	st.Progress[d.Job] = Progress{Decision: idx, Status: StatusApplying, Index: idx}
	return nil
}

// Retention of the per-job logs held in the replicated state (and so in every snapshot).
// The planner needs only a job's latest decision, its stable one (a failed rollout reverts
// to it) and the invalidations of the latest decision; the rest is history for
// operators, kept to a bound so that a pipeline running for months does not grow every
// snapshot without limit. Every replica applies the same bounds, so pruning is
// deterministic.
const (
	// KeepDecisions is the number of newest decisions kept per job.
	KeepDecisions = 256
	// KeepInvalidations is the number of newest invalidations kept per job.
	KeepInvalidations = 1024
)

// pruneOldest drops the oldest elements matching mine until at most keep of them remain,
// never dropping one that pinned matches (a newer one goes instead), and preserves the
// order of the rest.
func pruneOldest[T any](xs []T, keep int, mine, pinned func(T) bool) []T {
	n := 0
	for _, x := range xs {
		if mine(x) {
			n++
		}
	}
	if n <= keep {
		return xs
	}
	drop := n - keep
	out := make([]T, 0, len(xs)-drop)
	for _, x := range xs {
		if drop > 0 && mine(x) && !pinned(x) {
			drop--
			continue
		}
		out = append(out, x)
	}
	return out
}

// checkProgress validates a progress report: for the job's latest decision, with a known
// status, not contradicting an outcome already recorded (a duplicate report is valid).
func checkProgress(st *State, c Command) error {
	pr := c.Progress
	if pr == nil {
		return fmt.Errorf("progress is missing")
	}
	if err := registered(st, c.Job); err != nil {
		return err
	}
	latest, ok := st.LatestDecision(c.Job)
	if !ok || latest.Index != pr.Decision {
		return fmt.Errorf("progress for decision %d of %q is stale (latest decision is %d)", pr.Decision, c.Job, latest.Index)
	}
	switch pr.Status {
	case StatusApplying, StatusDone, StatusFailed:
	default:
		return fmt.Errorf("progress status %q is not applying|done|failed", pr.Status)
	}
	if prev := st.Progress[c.Job]; prev.Decision == pr.Decision && prev.Status != StatusApplying && prev.Status != pr.Status {
		return fmt.Errorf("decision %d of %q already finished as %s", pr.Decision, c.Job, prev.Status)
	}
	return nil
}

// applyProgress records a progress report and, for an outcome, finishes or reverts the
// rollout; a duplicate report changes nothing.
func applyProgress(st *State, c Command, idx uint64) error {
	pr := c.Progress
	latest, _ := st.LatestDecision(c.Job)
	if prev := st.Progress[c.Job]; prev.Decision == pr.Decision && prev.Status != StatusApplying && prev.Status == pr.Status {
		return nil // duplicate report: idempotent
	}
	cp := *pr
	cp.Index = idx
	st.Progress[c.Job] = cp
	switch pr.Status {
	case StatusDone:
		finishRollout(st, c, latest, idx)
	case StatusFailed:
		revertRollout(st, c, latest)
	}
	return nil
}

// finishRollout records that the latest decision of c.Job is deployed (as c.Deployed
// when given, else as decided) and becomes the stable one; it starts a new observation
// epoch for every operator whose candidate's first instances now run, and makes a
// candidate that every instance runs the current config.
func finishRollout(st *State, c Command, latest Decision, idx uint64) {
	dep := map[string]map[string]Placement{}
	for name, t := range latest.Operators {
		dep[name] = map[string]Placement{}
		for n, pl := range t.Nodes {
			dep[name][n] = pl
		}
	}
	if c.Deployed != nil {
		dep = c.Deployed
	}
	st.Deployed[c.Job] = dep
	if st.Stable == nil { // state restored from a snapshot that predates the field
		st.Stable = map[string]uint64{}
	}
	st.Stable[c.Job] = latest.Index
	names := make([]string, 0, len(latest.Operators))
	for n := range latest.Operators {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t := latest.Operators[name]
		r := st.Rollouts[c.Job][name]
		if r == nil {
			continue // the operator left the pipeline (re-registered) after the decision
		}
		if t.Transitions > 0 && st.Epochs[c.Job][name] < r.Epoch+1 {
			// The candidate's first instances run now, exporting epoch r.Epoch+1:
			// the observation layer starts a new epoch for this operator.
			if st.Epochs[c.Job] == nil {
				st.Epochs[c.Job] = map[string]uint64{}
			}
			st.Epochs[c.Job][name] = r.Epoch + 1
			st.Invalidations = pruneOldest(append(st.Invalidations, Invalidation{
				Job: c.Job, Operator: name, Epoch: st.Epochs[c.Job][name],
				Config: t.CandidateConfig, Decision: latest.Index, Index: idx,
			}), KeepInvalidations,
				func(x Invalidation) bool { return x.Job == c.Job }, func(Invalidation) bool { return false })
		}
		if r.CandidateConfig != "" && r.OnCurrent == 0 && r.OnCandidate > 0 {
			// Every instance runs the candidate: it becomes the current config, in the
			// deployment recorded as stable too (a later failed decision reverts to it).
			r.Config, r.Epoch = r.CandidateConfig, r.Epoch+1
			r.OnCurrent, r.OnCandidate, r.CandidateConfig = r.OnCandidate, 0, ""
			delete(st.Candidates[c.Job], name)
			for n, pl := range st.Deployed[c.Job][name] {
				st.Deployed[c.Job][name][n] = Placement{Current: pl.Total()}
			}
		}
	}
}

// revertRollout records that the latest decision of c.Job failed: the rollouts' instance
// counts go back to the last deployment that finished (st.Deployed).
func revertRollout(st *State, c Command, latest Decision) {
	// Nomad reverted to the last stable version, the one the last successful decision
	// left (recorded in Deployed when it finished; not simply the previous decision,
	// which may have failed too): its instances run again, and the candidate that
	// failed is dropped.
	dep := st.Deployed[c.Job]
	for name, t := range latest.Operators {
		r := st.Rollouts[c.Job][name]
		if r == nil {
			continue // the operator left the pipeline (re-registered) after the decision
		}
		cur, cand := 0, 0
		for _, pl := range dep[name] {
			cur += pl.Current
			cand += pl.Candidate
		}
		r.OnCurrent, r.OnCandidate = cur, cand
		if t.Transitions > 0 && cand == 0 {
			r.CandidateConfig = ""
			delete(st.Candidates[c.Job], name)
		}
	}
}
