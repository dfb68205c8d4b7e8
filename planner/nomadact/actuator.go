package nomadact

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
)

// Options configure the actuator.
type Options struct {
	// MinHealthyTime, HealthyDeadline and ProgressDeadline go into every rendered group's
	// update block (defaults 5s, 2m, HealthyDeadline+1m).
	MinHealthyTime, HealthyDeadline, ProgressDeadline time.Duration
	// KillTimeout is set on tasks that have none (default 30s): scale-down drains.
	KillTimeout time.Duration
	// Namespace of the pipeline jobs ("" = default).
	Namespace string
	// OOMAbortAfter fails a running deployment as soon as one of its candidate-config
	// instances has been OOM-killed this many times (default 2; negative disables), instead
	// of waiting for the healthy deadline: a config that does not fit the accelerator's
	// memory will not start fitting, and auto_revert then restores the stable version.
	OOMAbortAfter int
	// OOMLogPattern, when set, also counts a candidate-config task's non-zero exits as
	// OOM kills when the tail of its stderr matches it: CUDA and framework OOMs exit 1 and
	// say so in stderr (e.g. "CUDA out of memory"), they are not killed with 137.
	OOMLogPattern *regexp.Regexp
	// ApplyTimeout bounds how long a submitted job version may wait (default twice
	// ProgressDeadline) with a group of its deployment unplaced, or, without a running
	// deployment, with its allocations not converged (lost on a node that went down).
	// Nomad's progress deadline starts only once a group has a placed allocation, so a
	// group that cannot be placed (its pinned node drained or full) would keep the
	// deployment running, and the decision applying, for ever; past ApplyTimeout the
	// actuator fails the deployment (auto_revert restores the stable version) and the
	// decision, and the planner plans again.
	ApplyTimeout time.Duration
	// NodePool and Datacenters, when set, restrict the inventory to the nodes the
	// pipeline jobs can run on (their node_pool and datacenters): the planner must not pin
	// groups to nodes Nomad will never place them on.
	NodePool    string
	Datacenters []string
	// Canary makes a candidate config's first instance a Nomad canary of the operator's
	// canary slot group, judged by the planner before the rest roll (see canary.go;
	// operators with a parameter space only). Off, transitions go straight to the surge.
	Canary bool
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Actuator implements planner.Actuator and planner.Invalidator against a Nomad cluster.
type Actuator struct {
	c   *api.Client
	o   Options
	log *slog.Logger

	mu   sync.Mutex
	jobs map[string]jobKind // namespace/job ID -> whether the planner renders it
}

var (
	_ planner.Actuator    = (*Actuator)(nil)
	_ planner.Invalidator = (*Actuator)(nil)
)

// New returns an actuator using client c.
func New(c *api.Client, o Options) *Actuator {
	if o.MinHealthyTime <= 0 {
		o.MinHealthyTime = 5 * time.Second
	}
	if o.HealthyDeadline <= 0 {
		o.HealthyDeadline = 2 * time.Minute
	}
	if o.ProgressDeadline <= o.HealthyDeadline {
		o.ProgressDeadline = o.HealthyDeadline + time.Minute
	}
	if o.KillTimeout <= 0 {
		o.KillTimeout = 30 * time.Second
	}
	if o.OOMAbortAfter == 0 {
		o.OOMAbortAfter = 2
	}
	if o.ApplyTimeout <= 0 {
		o.ApplyTimeout = 2 * o.ProgressDeadline
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Actuator{c: c, o: o, log: o.Logger.With("component", "nomadact"), jobs: map[string]jobKind{}}
}

func (a *Actuator) q(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: a.o.Namespace}).WithContext(ctx)
}

func (a *Actuator) w(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: a.o.Namespace}).WithContext(ctx)
}

// Pipeline implements planner.Actuator.
func (a *Actuator) Pipeline(ctx context.Context, jobID string, raw json.RawMessage) (*fsm.Pipeline, error) {
	var job *api.Job
	if len(raw) == 0 || string(raw) == "null" {
		j, _, err := a.c.Jobs().Info(jobID, a.q(ctx))
		if err != nil {
			return nil, fmt.Errorf("read job %q from nomad: %w", jobID, err)
		}
		job = j
	} else {
		j, err := DecodeJob(raw)
		if err != nil {
			return nil, err
		}
		job = j
	}
	if *job.ID != jobID {
		return nil, fmt.Errorf("job ID %q in the body does not match %q in the path", *job.ID, jobID)
	}
	p, err := ParseJob(job)
	if err != nil {
		return nil, err
	}
	if p.Template, err = json.Marshal(job); err != nil {
		return nil, fmt.Errorf("encode job template: %w", err)
	}
	return p, nil
}

// CheckConfig implements planner.Actuator.
func (a *Actuator) CheckConfig(op fsm.Operator, config string) error { return CheckConfig(op, config) }

// Invalidate implements planner.Invalidator. The new epoch reaches the operators through
// the trident_config_epoch group meta of the next version; here it is logged for the
// observation layer's operators to correlate.
func (a *Actuator) Invalidate(ctx context.Context, job, op string, epoch uint64) error {
	a.log.Info("observation epoch advanced: samples of older epochs are invalid", "job", job, "operator", op, "epoch", epoch)
	return nil
}

// Inventory implements planner.Actuator: ready, eligible nodes (of Options.NodePool and
// Options.Datacenters when set) with their unreserved cores, memory, egress and healthy
// accelerators (gpu devices of any vendor, by device group), less what allocations of
// jobs the planner does not manage hold on them (subtractOthers); meta
// trident_cpu_cores / trident_memory_mb size a node as declared.
func (a *Actuator) Inventory(ctx context.Context) ([]fsm.Node, error) {
	stubs, _, err := a.c.Nodes().List(a.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("list nomad nodes: %w", err)
	}
	allocs, err := a.runningAllocs(ctx)
	if err != nil {
		return nil, err
	}
	var out []fsm.Node
	for _, s := range stubs {
		if s.Status != "ready" || s.SchedulingEligibility != "eligible" || s.Drain {
			continue
		}
		if a.o.NodePool != "" && s.NodePool != a.o.NodePool || len(a.o.Datacenters) > 0 && !slices.Contains(a.o.Datacenters, s.Datacenter) {
			continue
		}
		n, _, err := a.c.Nodes().Info(s.ID, a.q(ctx))
		if err != nil {
			return nil, fmt.Errorf("read nomad node %s: %w", s.Name, err)
		}
		node, err := a.inventoryNode(ctx, n, allocs[n.ID])
		if err != nil {
			return nil, err
		}
		out = append(out, node)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func nodeOf(n *api.Node) fsm.Node {
	out := fsm.Node{Name: n.Name, Class: n.NodeClass}
	if r := n.NodeResources; r != nil {
		cores := float64(r.Cpu.TotalCpuCores)
		if cores == 0 {
			cores = float64(r.Cpu.CpuShares) / 1000
		}
		mem := r.Memory.MemoryMB
		if rr := n.ReservedResources; rr != nil {
			mem -= int64(rr.Memory.MemoryMB)
			if r.Cpu.CpuShares > 0 {
				cores *= 1 - float64(rr.Cpu.CpuShares)/float64(r.Cpu.CpuShares)
			}
		}
		out.CPU, out.MemoryMB = math.Floor(cores*100)/100, int(mem)
		// Node meta can declare the node's modelled size (demos and tests that run several
		// Nomad clients on one small host model bigger nodes than the host has).
		if v, err := strconv.ParseFloat(n.Meta[opcontract.MetaNodeCPUCores], 64); err == nil && v > 0 {
			out.CPU = v
		}
		if v, err := strconv.Atoi(n.Meta[opcontract.MetaNodeMemoryMB]); err == nil && v > 0 {
			out.MemoryMB = v
		}
		out = withDevices(out, gpuClasses(r.Devices, nil))
	}
	return out
}

// Step implements planner.Actuator.
func (a *Actuator) Step(ctx context.Context, p *fsm.Pipeline, d fsm.Decision) (planner.StepResult, error) {
	applying := planner.StepResult{Status: fsm.StatusApplying}
	job, _, err := a.c.Jobs().Info(p.Job, a.q(ctx))
	if err != nil && !isNotFound(err) {
		return applying, fmt.Errorf("read job %q: %w", p.Job, err)
	}
	if err != nil {
		job = nil
	}
	if job != nil {
		if failed, why, err := a.failedFor(ctx, p.Job, d); err != nil {
			return applying, err
		} else if failed {
			return planner.StepResult{Status: fsm.StatusFailed, Detail: why}, nil
		}
	}
	cur := DecisionOf(job)
	if cur > d.Index && d.Planner != "" && PlannerOf(job) != d.Planner {
		// Another planner cluster wrote the job (this one was rebuilt after losing its
		// state, and its raft indexes started again): its indexes do not compare with
		// ours, and this cluster's decision is the one in force. A higher index from
		// this cluster is refused below: only a deposed leader would hold an older one.
		a.log.Warn("nomad job carries a decision of another planner cluster; taking it over", "job", p.Job,
			"job_decision", cur, "job_planner", PlannerOf(job), "decision", d.Index, "planner", d.Planner)
		cur = 0
	}
	switch {
	case job == nil || cur < d.Index:
		return a.submit(ctx, p, d, firstPhase(d, job, a.o), job)
	case cur > d.Index:
		return applying, fmt.Errorf("nomad job %q carries decision %d, newer than the committed decision %d", p.Job, cur, d.Index)
	}
	phase := PhaseOf(job)
	version := uint64(0)
	if job.Version != nil {
		version = *job.Version
	}
	deps, _, err := a.c.Jobs().Deployments(p.Job, false, a.q(ctx))
	if err != nil {
		return applying, fmt.Errorf("list deployments of %q: %w", p.Job, err)
	}
	seen := false
	for _, dep := range deps {
		if dep.JobVersion != version {
			continue
		}
		seen = seen || dep.Status == "successful"
		switch dep.Status {
		case "running", "pending", "paused", "initializing", "blocked", "unblocking":
			why, err := a.abortOOMing(ctx, dep, candidateGroups(d, job))
			if err != nil {
				return applying, err
			}
			if why != "" {
				return planner.StepResult{Status: fsm.StatusFailed, Detail: why}, nil
			}
			// Groups with allocations placed are under Nomad's own deadlines.
			if late, after := a.overdue(job); late {
				if waiting := unplaced(dep); waiting != "" {
					if _, _, err := a.c.Deployments().Fail(dep.ID, a.w(ctx)); err != nil {
						return applying, fmt.Errorf("fail deployment %s of a version not applied within %s: %w", dep.ID, a.o.ApplyTimeout, err)
					}
					why := fmt.Sprintf("job version %d not applied within %s (submitted %s ago; %s); deployment %s failed", version, a.o.ApplyTimeout, after, waiting, dep.ID[:8])
					a.log.Warn("rollout timed out", "job", p.Job, "decision", d.Index, "why", why)
					return planner.StepResult{Status: fsm.StatusFailed, Detail: why}, nil
				}
			}
			if phase == PhaseCanary {
				applying.Canaries = canaryStatus(dep, job)
				applying.Detail = "canary deployment " + dep.ID
			}
			return applying, nil
		}
	}
	if phase == PhaseCanary && !seen {
		// The canary slot's old allocation runs until the promotion, so the version
		// looks converged before Nomad has even created its deployment: only the
		// deployment's success (promoted, canary healthy) ends the canary phase.
		if late, after := a.overdue(job); late {
			return planner.StepResult{Status: fsm.StatusFailed, Detail: fmt.Sprintf("canary version %d has no successful deployment within %s (submitted %s ago)", version, a.o.ApplyTimeout, after)}, nil
		}
		return applying, nil
	}
	converged, why, err := a.converged(ctx, job, version)
	if err != nil || !converged {
		if why != "" {
			a.log.Debug("waiting for convergence", "job", p.Job, "decision", d.Index, "why", why)
			if late, after := a.overdue(job); late {
				why = fmt.Sprintf("job version %d not converged within %s (submitted %s ago): %s", version, a.o.ApplyTimeout, after, why)
				a.log.Warn("rollout timed out", "job", p.Job, "decision", d.Index, "why", why)
				return planner.StepResult{Status: fsm.StatusFailed, Detail: why}, nil
			}
		}
		return applying, err
	}
	if next := nextPhase(phase, job, d); next != "" {
		return a.submit(ctx, p, d, next, job)
	}
	return planner.StepResult{Status: fsm.StatusDone, Detail: fmt.Sprintf("job version %d", version)}, nil
}

// firstPhase is the phase of the first version of decision d over the registered job
// existing (nil: none): a decision with transitions over a running job starts with its
// canary (Options.Canary) or surge version, any other with its final version.
func firstPhase(d fsm.Decision, existing *api.Job, o Options) string {
	transitions := 0
	for _, t := range d.Operators {
		transitions += t.Transitions
	}
	switch {
	case transitions == 0 || existing == nil:
		return PhaseFinal
	case o.Canary:
		return PhaseCanary
	}
	return PhaseSurge
}

// nextPhase is the phase of the version that follows job, decision d's version in phase,
// once it has converged (a canary version: once its canary is promoted); "" when d is
// done. A canary that already runs every candidate instance of d is followed by the final
// version, any other by the surge.
func nextPhase(phase string, job *api.Job, d fsm.Decision) string {
	switch {
	case phase == PhaseSurge || phase == PhaseCanary && pendingCandidates(job, d) == 0:
		return PhaseFinal
	case phase == PhaseCanary:
		return PhaseSurge
	}
	return ""
}

// overdue reports whether the job version was submitted more than ApplyTimeout ago, and
// how long ago. Nomad's submit time keeps this right across planner leaders.
func (a *Actuator) overdue(job *api.Job) (bool, time.Duration) {
	if job.SubmitTime == nil || *job.SubmitTime <= 0 {
		return false, 0
	}
	after := time.Since(time.Unix(0, *job.SubmitTime)).Round(time.Second)
	return after > a.o.ApplyTimeout, after
}

// unplaced names the groups of a running deployment that want allocations but have none
// placed ("" when there are none). Nomad's progress deadline starts at a group's first
// placement, so only these can keep a deployment running for ever: a deployment that
// places allocations, however slowly, is left to Nomad's deadlines.
func unplaced(dep *api.Deployment) string {
	var names []string
	for g, st := range dep.TaskGroups {
		if st != nil && st.DesiredTotal > 0 && st.PlacedAllocs == 0 {
			names = append(names, g)
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return "no allocation placed for group " + fsm.ShortList(names, 5)
}

func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) && ue.StatusCode() == 404 {
		return true
	}
	return strings.Contains(err.Error(), "Unexpected response code: 404")
}

// PipelineJobs implements planner.PipelineFinder: the IDs of the running jobs of the
// namespace whose job meta trident_pipeline (opcontract.MetaPipeline) is true.
func (a *Actuator) PipelineJobs(ctx context.Context) ([]string, error) {
	stubs, _, err := a.c.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, a.q(ctx))
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	var out []string
	for _, j := range stubs {
		if j.Stop || j.Status == "dead" {
			continue
		}
		if on, err := strconv.ParseBool(j.Meta[opcontract.MetaPipeline]); err == nil && on {
			out = append(out, j.ID)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Resubmitted implements planner.ResubmitDetector: the job runs a version the planner did
// not render (no anchor carries its decision meta), so a user ran the job file again.
func (a *Actuator) Resubmitted(ctx context.Context, jobID string) (bool, error) {
	job, _, err := a.c.Jobs().Info(jobID, a.q(ctx))
	if err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("read job %q: %w", jobID, err)
	}
	return !rendered(job), nil
}

// failedFor reports whether a deployment of a version carrying decision d failed (versions
// of another planner cluster with the same index do not count).
func (a *Actuator) failedFor(ctx context.Context, jobID string, d fsm.Decision) (bool, string, error) {
	versions, _, _, err := a.c.Jobs().Versions(jobID, false, a.q(ctx))
	if err != nil {
		return false, "", fmt.Errorf("list versions of %q: %w", jobID, err)
	}
	ours := map[uint64]bool{}
	for _, v := range versions {
		if v.Version != nil && DecisionOf(v) == d.Index && (d.Planner == "" || PlannerOf(v) == d.Planner) {
			ours[*v.Version] = true
		}
	}
	deps, _, err := a.c.Jobs().Deployments(jobID, false, a.q(ctx))
	if err != nil {
		return false, "", fmt.Errorf("list deployments of %q: %w", jobID, err)
	}
	for _, dep := range deps {
		if ours[dep.JobVersion] && dep.Status == "failed" {
			return true, fmt.Sprintf("deployment %s of job version %d failed: %s", dep.ID, dep.JobVersion, dep.StatusDescription), nil
		}
	}
	return false, "", nil
}

// pendingCandidates is how many of decision d's candidate-config instances job does not
// run yet (its canary slots count as the instances of their config).
func pendingCandidates(job *api.Job, d fsm.Decision) int {
	want := 0
	for _, t := range d.Operators {
		for _, pl := range t.Nodes {
			want += pl.Candidate
		}
	}
	for _, g := range job.TaskGroups {
		t, ok := d.Operators[g.Meta[MetaOperator]]
		if ok && g.Meta[MetaAnchor] != "true" && t.CandidateConfig != "" && g.Count != nil &&
			g.Meta[MetaConfigEpoch] == strconv.FormatUint(t.Epoch+1, 10) {
			want -= *g.Count
		}
	}
	return max(0, want)
}

// candidateGroups names the groups of d that run a candidate config: the rendered ones and
// the canary slots of job (may be nil) that run it.
func candidateGroups(d fsm.Decision, job *api.Job) map[string]bool {
	out := map[string]bool{}
	if job != nil {
		for _, g := range job.TaskGroups {
			t, ok := d.Operators[g.Meta[MetaOperator]]
			if ok && g.Name != nil && g.Meta[MetaCanarySlot] == "true" && t.CandidateConfig != "" &&
				g.Meta[MetaConfigEpoch] == strconv.FormatUint(t.Epoch+1, 10) {
				out[*g.Name] = true
			}
		}
	}
	for op, t := range d.Operators {
		if t.CandidateConfig == "" {
			continue
		}
		for node, pl := range t.Nodes {
			if pl.Candidate > 0 {
				out[GroupName(op, node, t.Epoch+1)] = true
			}
		}
	}
	return out
}

// abortOOMing fails deployment dep when an allocation of a candidate group has been
// OOM-killed Options.OOMAbortAfter times, and says why; "" when it leaves dep running.
func (a *Actuator) abortOOMing(ctx context.Context, dep *api.Deployment, candidates map[string]bool) (string, error) {
	if a.o.OOMAbortAfter < 0 || len(candidates) == 0 {
		return "", nil
	}
	allocs, _, err := a.c.Deployments().Allocations(dep.ID, a.q(ctx))
	if err != nil {
		return "", fmt.Errorf("list allocations of deployment %s: %w", dep.ID, err)
	}
	for _, al := range allocs {
		if al.DesiredStatus != "run" || !candidates[al.TaskGroup] {
			continue
		}
		for task, ts := range al.TaskStates {
			n, how := oomKills(ts), "was OOM-killed"
			if exits := failedExits(ts); n < a.o.OOMAbortAfter && n+exits >= a.o.OOMAbortAfter && a.o.OOMLogPattern != nil {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				matches, line, err := a.stderrMatches(rctx, al.ID, task, a.o.OOMLogPattern)
				cancel()
				if err != nil {
					// E.g. a Nomad token without the read-fs capability.
					a.log.Warn("cannot read a failing candidate's stderr for OOM messages", "alloc", al.ID, "task", task, "err", err)
				}
				if matches > 0 {
					// Each OOM prints its message once: count the exits it explains.
					n, how = n+min(exits, matches), fmt.Sprintf("ran out of memory (stderr: %q)", fsm.Clip(line, 160))
				}
			}
			if n < a.o.OOMAbortAfter {
				continue
			}
			why := fmt.Sprintf("candidate config OOM: task %s of allocation %s (group %s on %s) %s %d times; deployment %s failed early",
				task, al.ID[:8], al.TaskGroup, al.NodeName, how, n, dep.ID[:8])
			if _, _, err := a.c.Deployments().Fail(dep.ID, a.w(ctx)); err != nil {
				return "", fmt.Errorf("fail deployment %s after %s: %w", dep.ID, why, err)
			}
			a.log.Warn("rollout aborted", "job", dep.JobID, "why", why)
			return why, nil
		}
	}
	return "", nil
}

// oomKills counts the task's terminations by an out-of-memory kill: Nomad's oom_killed flag
// (drivers that see the kernel's cgroup OOM kill), or exit status 137, the SIGKILL status an
// OOM-killed raw_exec process and the simulated operators report.
func oomKills(ts *api.TaskState) int {
	if ts == nil {
		return 0
	}
	n := 0
	for _, ev := range ts.Events {
		if ev == nil || ev.Type != api.TaskTerminated {
			continue
		}
		if ev.Details["oom_killed"] == "true" || ev.Details["exit_code"] == "137" {
			n++
		}
	}
	return n
}

// failedExits counts the task's terminations with a non-zero exit status that oomKills
// does not count.
func failedExits(ts *api.TaskState) int {
	if ts == nil {
		return 0
	}
	n := 0
	for _, ev := range ts.Events {
		if ev == nil || ev.Type != api.TaskTerminated || ev.Details["oom_killed"] == "true" {
			continue
		}
		if c := ev.Details["exit_code"]; c != "" && c != "0" && c != "137" {
			n++
		}
	}
	return n
}

// stderrTail is how much of a task's newest stderr file stderrMatches reads.
const stderrTail = 64 << 10

// stderrMatches counts the matches of re in the tail of the task's newest stderr file
// (Nomad's alloc/logs/<task>.stderr.<n>; reading it needs the read-fs capability) and
// returns the line holding the last one.
func (a *Actuator) stderrMatches(ctx context.Context, allocID, task string, re *regexp.Regexp) (int, string, error) {
	alloc, _, err := a.c.Allocations().Info(allocID, a.q(ctx))
	if err != nil {
		return 0, "", fmt.Errorf("read allocation: %w", err)
	}
	files, _, err := a.c.AllocFS().List(alloc, "alloc/logs", a.q(ctx))
	if err != nil {
		return 0, "", fmt.Errorf("list logs: %w", err)
	}
	newest, idx := "", -1
	for _, f := range files {
		rest, ok := strings.CutPrefix(f.Name, task+".stderr.")
		if n, err := strconv.Atoi(rest); ok && err == nil && n > idx {
			newest, idx = f.Name, n
		}
	}
	if newest == "" {
		return 0, "", nil
	}
	path := "alloc/logs/" + newest
	st, _, err := a.c.AllocFS().Stat(alloc, path, a.q(ctx))
	if err != nil {
		return 0, "", fmt.Errorf("stat %s: %w", path, err)
	}
	off := max(0, st.Size-stderrTail)
	rc, err := a.c.AllocFS().ReadAt(alloc, path, off, st.Size-off, a.q(ctx))
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", path, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, stderrTail))
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", path, err)
	}
	locs := re.FindAllIndex(b, -1)
	if len(locs) == 0 {
		return 0, "", nil
	}
	m := locs[len(locs)-1]
	start := bytes.LastIndexByte(b[:m[0]], '\n') + 1
	end := bytes.IndexByte(b[m[1]:], '\n')
	if end < 0 {
		end = len(b) - m[1]
	}
	return len(locs), strings.TrimSpace(string(b[start : m[1]+end])), nil
}

// DefaultOOMLogPattern matches the out-of-memory messages of CUDA, PyTorch, TensorFlow and
// JAX/XLA in an operator's stderr.
const DefaultOOMLogPattern = `(?i)CUDA out of memory|CUDA error: out of memory|OutOfMemoryError|RESOURCE_EXHAUSTED: Out of memory|out of memory while trying to allocate`

// converged reports whether every group of job version runs exactly its count and no
// stopped allocation is still draining.
func (a *Actuator) converged(ctx context.Context, job *api.Job, version uint64) (bool, string, error) {
	allocs, _, err := a.c.Jobs().Allocations(*job.ID, false, a.q(ctx))
	if err != nil {
		return false, "", fmt.Errorf("list allocations of %q: %w", *job.ID, err)
	}
	running := map[string]int{}
	for _, al := range allocs {
		switch {
		case al.DesiredStatus == "run" && al.ClientStatus == "running":
			// Allocations of unchanged groups keep an older JobVersion; they count.
			running[al.TaskGroup]++
		case al.DesiredStatus == "run" && al.ClientStatus == "pending":
			return false, "allocation " + al.ID[:8] + " of " + al.TaskGroup + " pending", nil
		case al.DesiredStatus != "run" && (al.ClientStatus == "running" || al.ClientStatus == "pending"):
			return false, "allocation " + al.ID[:8] + " of " + al.TaskGroup + " draining", nil
		}
	}
	for _, g := range job.TaskGroups {
		want := 0
		if g.Count != nil {
			want = *g.Count
		}
		if running[*g.Name] != want {
			return false, fmt.Sprintf("group %s runs %d of %d", *g.Name, running[*g.Name], want), nil
		}
	}
	return true, "", nil
}

// submit registers the version; a job Nomad refuses as invalid fails the decision (a retry
// cannot succeed), any other error is returned for a retry.
func (a *Actuator) submit(ctx context.Context, p *fsm.Pipeline, d fsm.Decision, phase string, existing *api.Job) (planner.StepResult, error) {
	err := a.register(ctx, p, d, phase, existing)
	if err != nil && strings.Contains(err.Error(), "validation failed") {
		return planner.StepResult{Status: fsm.StatusFailed, Detail: err.Error()}, nil
	}
	return planner.StepResult{Status: fsm.StatusApplying}, err
}

// register submits the rendered version for decision d. A surge version is fitted to the
// nodes of the current inventory (see Render).
func (a *Actuator) register(ctx context.Context, p *fsm.Pipeline, d fsm.Decision, phase string, existing *api.Job) error {
	var nodes map[string]fsm.Node
	if phase == PhaseSurge || phase == PhaseCanary {
		inv, err := a.Inventory(ctx)
		if err != nil {
			return fmt.Errorf("fit the surge version of decision %d: %w", d.Index, err)
		}
		nodes = map[string]fsm.Node{}
		for _, n := range inv {
			nodes[n.Name] = n
		}
	}
	job, rendered, canaried, err := renderPhase(p, d, phase, existing, nodes, a.o)
	if err != nil {
		return err
	}
	switch {
	case phase == PhaseCanary && rendered == PhaseSurge:
		// No operator of d has a slot whose canary fits: straight to the surge.
		a.log.Info("no canary fits; the transition starts with its surge version", "job", p.Job, "decision", d.Index)
	case rendered == PhaseCanary:
		a.log.Info("canary version", "job", p.Job, "decision", d.Index, "operators", canaried)
	}
	phase = rendered
	var modify uint64
	if existing != nil && existing.JobModifyIndex != nil {
		modify = *existing.JobModifyIndex
	}
	resp, _, err := a.c.Jobs().EnforceRegister(job, modify, a.w(ctx))
	if err != nil {
		return fmt.Errorf("register job %q for decision %d (%s): %w", p.Job, d.Index, phase, err)
	}
	a.log.Info("job version submitted", "job", p.Job, "decision", d.Index, "phase", phase, "eval", resp.EvalID)
	return nil
}

// renderPhase builds decision d's version of phase over the registered job existing,
// fitted to nodes (see Render and renderCanary). A canary version no operator qualifies
// for is rendered as the surge: it returns the phase rendered and the operators canaried.
func renderPhase(p *fsm.Pipeline, d fsm.Decision, phase string, existing *api.Job, nodes map[string]fsm.Node, o Options) (*api.Job, string, []string, error) {
	if phase == PhaseCanary {
		j, ops, err := renderCanary(p, d, existing, nodes)
		if err != nil {
			return nil, "", nil, err
		}
		if j != nil {
			return j, PhaseCanary, ops, nil
		}
		phase = PhaseSurge
	}
	j, err := Render(p, d, phase, existing, nodes, o)
	if err != nil {
		return nil, "", nil, err
	}
	return j, phase, nil, nil
}

// Version is one job version the actuator submits for a decision.
type Version struct {
	// Phase is PhaseCanary, PhaseSurge or PhaseFinal.
	Phase string
	// Job is the rendered job version.
	Job *api.Job
}

// RenderVersions returns, in order, the job versions Step submits for decision d over the
// registered job existing (nil: none) when each converges and every canary is promoted:
// the same phases and rendering as the actuator, without Nomad (benchmarks and tests of
// the rendering). nodes is the inventory the canary and surge versions are fitted to; nil
// renders them unfitted, as the actuator did before the surge was fitted. o.Canary
// selects the canary phase as in New.
func RenderVersions(p *fsm.Pipeline, d fsm.Decision, existing *api.Job, nodes map[string]fsm.Node, o Options) ([]Version, error) {
	var out []Version
	for phase := firstPhase(d, existing, o); phase != ""; {
		job, rendered, _, err := renderPhase(p, d, phase, existing, nodes, o)
		if err != nil {
			return out, fmt.Errorf("decision %d, %s version: %w", d.Index, phase, err)
		}
		out = append(out, Version{Phase: rendered, Job: job})
		existing, phase = job, nextPhase(rendered, job, d)
		if phase != "" && len(out) == 3 {
			// canary, surge, final: nextPhase ends every sequence there.
			return out, fmt.Errorf("decision %d: a %s version after %s", d.Index, phase, rendered)
		}
	}
	return out, nil
}

// Render builds the job version of decision d in phase from the pipeline's template.
// existing (may be nil) is the job currently registered; in the surge phase its
// old-config groups of transitioning operators keep their counts where the node has room
// for them beside the new-config instances. nodes (may be nil: no fitting) are the
// planner's model of each node: on a node the surge would overfill (an operator holding
// every GPU of its node, the normal state of a throughput-maximising plan), old-config
// instances are replaced in place instead: the surge keeps only as many as fit, down to
// the decision's own count, whose placement the scheduler already fitted.
func Render(p *fsm.Pipeline, d fsm.Decision, phase string, existing *api.Job, nodes map[string]fsm.Node, o Options) (*api.Job, error) {
	var job api.Job
	if err := json.Unmarshal(p.Template, &job); err != nil {
		return nil, fmt.Errorf("decode job template of %q: %w", p.Job, err)
	}
	tpl := map[string]*api.TaskGroup{}
	var groups []*api.TaskGroup
	for _, g := range job.TaskGroups {
		if g == nil || g.Name == nil {
			return nil, fmt.Errorf("job template of %q has a group without a name", p.Job)
		}
		if _, ok := p.Operator(*g.Name); ok {
			tpl[*g.Name] = g
			continue
		}
		groups = append(groups, g) // not an operator: kept as written
	}
	plans := map[string]map[string]groupWant{}
	for _, op := range p.Operators {
		t := d.Operators[op.Name]
		ws := map[string]groupWant{}
		for node, pl := range t.Nodes {
			if pl.Current > 0 {
				ws[GroupName(op.Name, node, t.Epoch)] = groupWant{node: node, config: t.Config, gen: t.Epoch, count: pl.Current, final: pl.Current}
			}
			if pl.Candidate > 0 {
				ws[GroupName(op.Name, node, t.Epoch+1)] = groupWant{node: node, config: t.CandidateConfig, gen: t.Epoch + 1, count: pl.Candidate, final: pl.Candidate}
			}
		}
		if o.Canary && op.Params != "" {
			takeSlot(op.Name, t, ws, existing)
		}
		carryTrialGroups(op.Name, ws, existing)
		if phase == PhaseSurge && t.Transitions > 0 && existing != nil {
			for _, g := range existing.TaskGroups {
				if g.Meta[MetaOperator] != op.Name || g.Count == nil || *g.Count == 0 || g.Meta[MetaCanarySlot] == "true" || g.Meta[MetaTrialSlot] != "" {
					continue
				}
				gen, _ := strconv.ParseUint(g.Meta[MetaConfigEpoch], 10, 64)
				if w, ok := ws[*g.Name]; !ok || w.count < *g.Count {
					ws[*g.Name] = groupWant{node: g.Meta[MetaNode], config: g.Meta[opcontract.MetaConfig], gen: gen, count: *g.Count, final: w.final}
				}
			}
		}
		plans[op.Name] = ws
	}
	if phase == PhaseSurge && nodes != nil {
		fitSurge(p, plans, nodes)
	}
	for _, op := range p.Operators {
		base, ok := tpl[op.Name]
		if !ok {
			return nil, fmt.Errorf("job template of %q lost group %q", p.Job, op.Name)
		}
		a, err := anchor(base)
		if err != nil {
			return nil, err
		}
		groups = append(groups, a)
		t := d.Operators[op.Name]
		ws := plans[op.Name]
		names := make([]string, 0, len(ws))
		for n := range ws {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			w := ws[name]
			if w.count == 0 {
				continue
			}
			g, err := renderGroup(base, *job.ID, op, name, w, t, o)
			if err != nil {
				return nil, fmt.Errorf("job %q group %q: %w", p.Job, name, err)
			}
			if w.slot {
				g.Meta[MetaCanarySlot] = "true"
			}
			if w.trialSlot > 0 {
				g.Meta[MetaTrialSlot] = strconv.Itoa(w.trialSlot)
			}
			if w.trial != nil {
				if err := startTrial(g, *w.trial); err != nil {
					return nil, fmt.Errorf("job %q: %w", p.Job, err)
				}
			}
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		if g.Meta[MetaAnchor] == "true" {
			// Count-0 groups: their meta changes restart nothing (see MetaDecision).
			g.Meta[MetaDecision] = strconv.FormatUint(d.Index, 10)
			g.Meta[MetaPhase] = phase
			if d.Planner != "" {
				g.Meta[MetaPlanner] = d.Planner
			}
		}
	}
	job.TaskGroups = groups
	job.Update = nil
	return &job, nil
}

// renderGroup builds the rendered group name of operator op from its template group base:
// w.count instances pinned to w.node, running w.config at generation w.gen, with the
// planner's update block (t is the decision's target of op).
func renderGroup(base *api.TaskGroup, jobID string, op fsm.Operator, name string, w groupWant, t fsm.OpTarget, o Options) (*api.TaskGroup, error) {
	g, err := cloneGroup(base)
	if err != nil {
		return nil, err
	}
	g.Name = ptr(name)
	g.Count = ptr(w.count)
	g.Scaling = nil
	g.Constraints = append(g.Constraints, api.NewConstraint("${node.unique.name}", "=", w.node))
	if g.Meta == nil {
		g.Meta = map[string]string{}
	}
	g.Meta[MetaOperator] = op.Name
	g.Meta[MetaNode] = w.node
	g.Meta[opcontract.MetaConfig] = w.config
	if err := setParamMeta(g.Meta, w.config); err != nil {
		return nil, err
	}
	g.Meta[MetaConfigEpoch] = strconv.FormatUint(w.gen, 10)
	g.Update = &api.UpdateStrategy{
		MaxParallel:      ptr(max(1, t.Transitions)),
		HealthCheck:      ptr("task_states"),
		MinHealthyTime:   ptr(o.MinHealthyTime),
		HealthyDeadline:  ptr(o.HealthyDeadline),
		ProgressDeadline: ptr(o.ProgressDeadline),
		AutoRevert:       ptr(true),
		Canary:           ptr(0),
	}
	nameServices(g, jobID, op.Name)
	main := mainTask(g)
	for i, task := range g.Tasks {
		if task.KillTimeout == nil {
			task.KillTimeout = ptr(o.KillTimeout)
		}
		if i == main && op.GPUs > 0 {
			if task.Resources == nil {
				task.Resources = &api.Resources{}
			}
			dev := &api.RequestedDevice{Name: fsm.VendorOf(op.GPUVendor) + "/" + accelType, Count: ptr(uint64(op.GPUs))}
			if op.GPUMemoryMB > 0 {
				dev.Constraints = []*api.Constraint{api.NewConstraint("${device.attr.memory}", ">=", fmt.Sprintf("%d MiB", op.GPUMemoryMB))}
			}
			if len(op.GPUModels) > 0 {
				// The models the operator accepts (trident_gpu_models), as the scheduler
				// planned them: Nomad must not hand it another model on the node.
				quoted := make([]string, len(op.GPUModels))
				for i, m := range op.GPUModels {
					quoted[i] = regexp.QuoteMeta(m)
				}
				dev.Constraints = append(dev.Constraints, api.NewConstraint("${device.model}", "regexp", "^("+strings.Join(quoted, "|")+")$"))
			}
			task.Resources.Devices = []*api.RequestedDevice{dev}
		}
	}
	return g, nil
}

// groupWant is one rendered group of an operator: its node, config and generation, the
// count this version runs, and the count the decision's final version runs.
type groupWant struct {
	node, config string
	gen          uint64
	count, final int
	// slot marks the operator's canary slot (SlotGroupName): one of its instances, in a
	// group of its own so that a config change is a canary Nomad recognises.
	slot bool
	// trial, on a slot or a trial slot group, is the tuning trial it keeps running over
	// config and gen; trialSlot marks a trial slot group (TrialGroupName) with its slot.
	trial     *fsm.Trial
	trialSlot int
}

// fitSurge lowers, on every node the surge version would overfill in the planner's model
// (cores, memory, and devices per class an operator accepts: sched.Ledger), the counts of old-config groups the surge keeps beyond the
// decision's final count, one instance at a time (GPU operators first when GPUs are
// short), until the node fits or every group is at its final count. The final version
// fits by construction (the scheduler planned it within each node), so a surge lowered
// to it fits too: the old instances are then replaced in place, in one version.
func fitSurge(p *fsm.Pipeline, plans map[string]map[string]groupWant, nodes map[string]fsm.Node) {
	onNode := map[string]bool{}
	for _, op := range p.Operators {
		for _, w := range plans[op.Name] {
			onNode[w.node] = true
		}
	}
	// over reports whether the groups on n overfill it (cores, memory, or the devices of
	// the classes each operator accepts, by the scheduler's own accounting) and whether
	// devices are what is short.
	over := func(n string) (bool, bool) {
		node, ok := nodes[n]
		if !ok {
			return false, false // not in the inventory: Nomad decides
		}
		led := sched.NewLedger([]fsm.Node{node})
		isOver, gpuShort := false, false
		for _, op := range p.Operators {
			for _, name := range slices.Sorted(maps.Keys(plans[op.Name])) {
				if w := plans[op.Name][name]; w.node == n && w.count > 0 {
					if short := led.Take(op, n, w.count); short != "" {
						isOver, gpuShort = true, gpuShort || strings.Contains(short, "GPU")
					}
				}
			}
		}
		return isOver, gpuShort
	}
	for _, n := range slices.Sorted(maps.Keys(onNode)) {
		for {
			isOver, gpuShort := over(n)
			if !isOver {
				break
			}
			// The kept old-config group to shrink: GPU operators first when GPUs are
			// short, then the operator with the largest CPU need; names break ties.
			prefer := func(a fsm.Operator, an string, b fsm.Operator, bn string) bool {
				if gpuShort && (a.GPUs > 0) != (b.GPUs > 0) {
					return a.GPUs > 0
				}
				if a.CPU != b.CPU {
					return a.CPU > b.CPU
				}
				return an < bn
			}
			var bestOp, bestGroup string
			var best fsm.Operator
			for _, op := range p.Operators {
				for name, w := range plans[op.Name] {
					if w.node == n && w.count > w.final && (bestGroup == "" || prefer(op, name, best, bestGroup)) {
						bestOp, bestGroup, best = op.Name, name, op
					}
				}
			}
			if bestGroup == "" {
				break // nothing left to replace in place on this node
			}
			w := plans[bestOp][bestGroup]
			w.count--
			plans[bestOp][bestGroup] = w
		}
	}
}

// setParamMeta renders every parameter of config as its own group meta key next to
// trident_config: opcontract.ParamMetaKey(name) = value ("trident_param_<name>", the name
// sanitised to letters, digits and '_'), so that a task can pass the parameters as
// command-line flags by interpolation, e.g. "${NOMAD_META_trident_param_max_num_seqs}".
// Keys of the template's meta that config does not set are kept (a job file's defaults).
// The keys derive from the config alone, so they change exactly when the config does.
func setParamMeta(meta map[string]string, config string) error {
	pm, err := opcontract.ParamMeta(config)
	if err != nil {
		return fmt.Errorf("render per-parameter meta: %w", err)
	}
	for k, v := range pm {
		meta[k] = v
	}
	return nil
}

// anchor returns the operator's anchor group: the user's group as written, with count 0,
// keeping its scaling policy. The instances run in the pinned groups; the anchor keeps the
// policy (and its ID) alive across versions, so the autoscaler keeps evaluating it (the
// trident-target plugin reports the operator's instances over its pinned groups) instead
// of seeing it deleted by the first decision. A policy minimum above 0 is lowered to 0
// (Nomad refuses a count below the minimum) and recorded in meta trident_scaling_min.
func anchor(base *api.TaskGroup) (*api.TaskGroup, error) {
	g, err := cloneGroup(base)
	if err != nil {
		return nil, err
	}
	g.Count = ptr(0)
	if g.Meta == nil {
		g.Meta = map[string]string{}
	}
	g.Meta[MetaAnchor] = "true"
	if sc := g.Scaling; sc != nil && sc.Min != nil && *sc.Min > 0 {
		g.Meta[MetaScalingMin] = strconv.FormatInt(*sc.Min, 10)
		sc.Min = ptr(int64(0))
	}
	return g, nil
}

// nameServices gives every service of rendered group g of operator op an explicit name:
// Nomad names an unnamed service after the group (${JOB}-${TASKGROUP}, plus -${TASK} for
// task services) and interpolates ${TASKGROUP} in names, and a rendered group's name
// (op@node.gN) is not a valid service name. Services keep the name they would have had in
// the user's group, so discovery (trident-apm finds <job>-<group>) sees one service per
// operator.
func nameServices(g *api.TaskGroup, job, op string) {
	fix := func(s *api.Service, def string) {
		if s == nil {
			return
		}
		if s.Name == "" {
			s.Name = def
		}
		s.Name = strings.ReplaceAll(s.Name, "${TASKGROUP}", op)
		s.Name = strings.ReplaceAll(s.Name, "${NOMAD_GROUP_NAME}", op)
	}
	for _, s := range g.Services {
		fix(s, job+"-"+op)
	}
	for _, t := range g.Tasks {
		for _, s := range t.Services {
			fix(s, job+"-"+op+"-"+t.Name)
		}
	}
}

// mainTask is the index of g's main task, the one an accelerator request goes to: the
// first task that is not a lifecycle hook (prestart, poststart or sidecar), else the first.
func mainTask(g *api.TaskGroup) int {
	for i, t := range g.Tasks {
		if t.Lifecycle == nil || t.Lifecycle.Hook == "" {
			return i
		}
	}
	return 0
}

func cloneGroup(g *api.TaskGroup) (*api.TaskGroup, error) {
	b, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("clone group: %w", err)
	}
	var out api.TaskGroup
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("clone group: %w", err)
	}
	return &out, nil
}

func ptr[T any](v T) *T { return &v }
