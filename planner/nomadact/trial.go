package nomadact

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/fsm"
)

// Tuning trials through the canary slot.
//
// A trial (fsm.Trial) runs one instance of an operator on a trial config beside its
// production instances, taking the place of one of them. On Nomad that instance is the
// operator's canary slot group (SlotGroupName): a trial version changes only the slot's
// config and generation (the trial's epoch, which its instance exports, so the
// observation layer keeps its samples apart) and records what the slot ran before in the
// group meta MetaTrialBase. The change is a plain destructive update of a count-1 group:
// Nomad stops the slot's allocation and places the trial's on the same node, so it needs
// no room beside it. Ending the trial restores the recorded config.
//
// The decisions' versions carry a running trial (takeSlot keeps the slot on its node with
// the trial's config when the decision keeps an instance of the slot's production
// generation there); a canary takes the slot over. The planner hands the trials to the
// actuator only between decisions and again after each one, so a trial a decision could
// not carry is started again on the new version.

// MetaTrialBase (group meta) marks a canary slot that runs a tuning trial: a JSON record
// of the production config, generation and per-parameter meta the slot ran before it.
const MetaTrialBase = "trident_trial_base"

var _ planner.TrialActuator = (*Actuator)(nil)

// trialBase is what a slot ran before its trial (MetaTrialBase).
type trialBase struct {
	Config string            `json:"config"`
	Epoch  uint64            `json:"epoch"`
	Params map[string]string `json:"params,omitempty"`
}

// slotTrial returns the trial slot group g runs and what it ran before; ok is false when
// g runs no trial.
func slotTrial(g *api.TaskGroup) (tr fsm.Trial, base trialBase, ok bool, err error) {
	raw, has := g.Meta[MetaTrialBase]
	if !has {
		return fsm.Trial{}, trialBase{}, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &base); err != nil {
		return fsm.Trial{}, trialBase{}, false, fmt.Errorf("group %q: decode %s: %w", *g.Name, MetaTrialBase, err)
	}
	epoch, err := strconv.ParseUint(g.Meta[MetaConfigEpoch], 10, 64)
	if err != nil {
		return fsm.Trial{}, trialBase{}, false, fmt.Errorf("group %q: trial epoch %q: %w", *g.Name, g.Meta[MetaConfigEpoch], err)
	}
	return fsm.Trial{Config: g.Meta[opcontract.MetaConfig], Epoch: epoch}, base, true, nil
}

// paramMeta returns the per-parameter meta keys of meta.
func paramMeta(meta map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range meta {
		if strings.HasPrefix(k, opcontract.MetaParamPrefix) {
			out[k] = v
		}
	}
	return out
}

// setConfig makes slot group g run config at generation gen, replacing its per-parameter
// meta by params (nil: config's own keys over none).
func setConfig(g *api.TaskGroup, config string, gen uint64, params map[string]string) error {
	maps.DeleteFunc(g.Meta, func(k, _ string) bool { return strings.HasPrefix(k, opcontract.MetaParamPrefix) })
	maps.Copy(g.Meta, params)
	g.Meta[opcontract.MetaConfig] = config
	g.Meta[MetaConfigEpoch] = strconv.FormatUint(gen, 10)
	return setParamMeta(g.Meta, config)
}

// startTrial makes slot group g (running its production config, or another trial) run
// trial tr. A trial's failure must not revert the pipeline's job: the slot's update block
// has no auto-revert while it runs one.
func startTrial(g *api.TaskGroup, tr fsm.Trial) error {
	_, base, running, err := slotTrial(g)
	if err != nil {
		return err
	}
	if !running {
		gen, err := strconv.ParseUint(g.Meta[MetaConfigEpoch], 10, 64)
		if err != nil {
			return fmt.Errorf("group %q: generation %q: %w", *g.Name, g.Meta[MetaConfigEpoch], err)
		}
		base = trialBase{Config: g.Meta[opcontract.MetaConfig], Epoch: gen, Params: paramMeta(g.Meta)}
	}
	raw, err := json.Marshal(base)
	if err != nil {
		return fmt.Errorf("group %q: encode %s: %w", *g.Name, MetaTrialBase, err)
	}
	params := base.Params
	if err := setConfig(g, tr.Config, tr.Epoch, params); err != nil {
		return fmt.Errorf("group %q: %w", *g.Name, err)
	}
	g.Meta[MetaTrialBase] = string(raw)
	u := api.UpdateStrategy{}
	if g.Update != nil {
		u = *g.Update
	}
	u.AutoRevert, u.Canary = ptr(false), ptr(0)
	g.Update = &u
	return nil
}

// endTrial gives slot group g, running a trial that started over base, its production
// config back.
func endTrial(g *api.TaskGroup, base trialBase) error {
	if err := setConfig(g, base.Config, base.Epoch, base.Params); err != nil {
		return fmt.Errorf("group %q: %w", *g.Name, err)
	}
	delete(g.Meta, MetaTrialBase)
	if g.Update != nil {
		u := *g.Update
		u.AutoRevert = ptr(true)
		g.Update = &u
	}
	return nil
}

// renderTrials returns a copy of the registered job existing whose canary slots run
// exactly the trials in slot 0 of trials (operator -> trials by slot) and whose trial
// slot groups run exactly those in higher slots (renderTrialGroups), and whether it
// differs from existing. An operator with a trial in slot 0 but no running canary slot is
// an error: only an operator with a parameter space and at least one instance has one.
func renderTrials(existing *api.Job, trials map[string]fsm.TrialSlots) (*api.Job, bool, error) {
	raw, err := json.Marshal(existing)
	if err != nil {
		return nil, false, fmt.Errorf("copy job: %w", err)
	}
	var job api.Job
	if err := json.Unmarshal(raw, &job); err != nil {
		return nil, false, fmt.Errorf("copy job: %w", err)
	}
	zero := map[string]fsm.Trial{}
	for op, ts := range trials {
		if t, ok := ts.Slot(0); ok {
			zero[op] = t
		}
	}
	ops := make([]string, 0, len(zero))
	for op := range zero {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		if slotGroup(&job, op) == nil {
			return nil, false, fmt.Errorf("operator %q has no canary slot to run its trial on (it needs trident_params and at least one instance)", op)
		}
	}
	changed := false
	for _, g := range job.TaskGroups {
		if g == nil || g.Name == nil || g.Meta[MetaCanarySlot] != "true" || g.Count == nil || *g.Count == 0 {
			continue
		}
		running, base, has, err := slotTrial(g)
		if err != nil {
			return nil, false, err
		}
		want, wanted := zero[g.Meta[MetaOperator]]
		switch {
		case wanted && has && running.Config == want.Config && running.Epoch == want.Epoch:
		case wanted:
			if err := startTrial(g, want); err != nil {
				return nil, false, err
			}
			changed = true
		case has:
			if err := endTrial(g, base); err != nil {
				return nil, false, err
			}
			changed = true
		}
	}
	more, err := renderTrialGroups(&job, trials)
	if err != nil {
		return nil, false, err
	}
	return &job, changed || more, nil
}

// Trials in slots above 0 run in trial slot groups.
//
// The trial in slot k >= 1 of an operator runs in the group TrialGroupName(op, k) (group
// meta MetaTrialSlot = k): one instance taken from the operator's production group with
// the most instances (its count less one), on the same node, running the trial as the
// canary slot does (startTrial: the trial's config and epoch, MetaTrialBase recording the
// production config and generation it replaces, no auto_revert). Ending it removes the
// group and gives the instance back to the production group of its node and generation
// (the group becomes that one when a decision left it out at count 0).
// The decisions' versions carry it while they keep an instance of that generation on its
// node (carryTrialGroups) and drop it otherwise; the loop hands the trials to the
// actuator again after each decision, which starts a dropped one elsewhere.

// MetaTrialSlot (group meta) marks a trial slot group with its slot (1 and above).
const MetaTrialSlot = "trident_trial_slot"

// TrialGroupName is the group that runs operator op's trial in slot k >= 1.
func TrialGroupName(op string, k int) string { return op + "@trial" + strconv.Itoa(k) }

// trialSlotOf returns the slot trial slot group g runs, or false for any other group.
func trialSlotOf(g *api.TaskGroup) (int, bool) {
	if g == nil || g.Name == nil {
		return 0, false
	}
	k, err := strconv.Atoi(g.Meta[MetaTrialSlot])
	return k, err == nil && k >= 1
}

// donorGroup returns the production group of op in job with the most instances (names
// break ties), nil when none runs one.
func donorGroup(job *api.Job, op string) *api.TaskGroup {
	var best *api.TaskGroup
	for _, g := range job.TaskGroups {
		if g == nil || g.Name == nil || g.Meta[MetaOperator] != op || g.Meta[MetaCanarySlot] == "true" || g.Meta[MetaAnchor] == "true" ||
			g.Meta[MetaTrialBase] != "" || g.Count == nil || *g.Count < 1 {
			continue
		}
		if best == nil || *g.Count > *best.Count || *g.Count == *best.Count && *g.Name < *best.Name {
			best = g
		}
	}
	return best
}

// groupNamed returns job's group name, nil when it has none.
func groupNamed(job *api.Job, name string) *api.TaskGroup {
	for _, g := range job.TaskGroups {
		if g != nil && g.Name != nil && *g.Name == name {
			return g
		}
	}
	return nil
}

// renderTrialGroups makes job's trial slot groups run exactly the trials of trials in
// slots above 0, and reports whether it changed job.
func renderTrialGroups(job *api.Job, trials map[string]fsm.TrialSlots) (bool, error) {
	changed := false
	have := map[string]bool{}
	kept := make([]*api.TaskGroup, 0, len(job.TaskGroups))
	var ended []*api.TaskGroup
	for _, g := range job.TaskGroups {
		k, ok := trialSlotOf(g)
		if !ok {
			kept = append(kept, g)
			continue
		}
		want, wanted := trials[g.Meta[MetaOperator]].Slot(k)
		running, _, has, err := slotTrial(g)
		if err != nil {
			return false, err
		}
		switch {
		case wanted && has && running.Config == want.Config && running.Epoch == want.Epoch:
		case wanted:
			if err := startTrial(g, want); err != nil {
				return false, err
			}
			changed = true
		default:
			ended = append(ended, g)
			changed = true
			continue
		}
		have[*g.Name] = true
		kept = append(kept, g)
	}
	job.TaskGroups = kept
	for _, g := range ended {
		// The instance goes back to the production group it was taken from; when the job
		// no longer has that group (a decision rendered it at count 0), the trial's group
		// becomes it.
		_, base, _, err := slotTrial(g)
		if err != nil {
			return false, err
		}
		name := GroupName(g.Meta[MetaOperator], g.Meta[MetaNode], base.Epoch)
		if pg := groupNamed(job, name); pg != nil && pg.Count != nil {
			pg.Count = ptr(*pg.Count + 1)
			continue
		}
		if err := endTrial(g, base); err != nil {
			return false, err
		}
		delete(g.Meta, MetaTrialSlot)
		g.Name = ptr(name)
		job.TaskGroups = append(job.TaskGroups, g)
	}
	ops := make([]string, 0, len(trials))
	for op := range trials {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		for _, t := range trials[op] {
			if t.Slot < 1 || have[TrialGroupName(op, t.Slot)] {
				continue
			}
			donor := donorGroup(job, op)
			if donor == nil {
				return false, fmt.Errorf("operator %q: no production instance to run the trial in slot %d on", op, t.Slot)
			}
			g, err := cloneGroup(donor)
			if err != nil {
				return false, err
			}
			donor.Count = ptr(*donor.Count - 1)
			g.Name, g.Count = ptr(TrialGroupName(op, t.Slot)), ptr(1)
			g.Meta[MetaTrialSlot] = strconv.Itoa(t.Slot)
			if err := startTrial(g, t); err != nil {
				return false, err
			}
			job.TaskGroups = append(job.TaskGroups, g)
			changed = true
		}
	}
	return changed, nil
}

// carryTrialGroups keeps the trial slot groups of op that existing runs in the decision's
// groups ws: each takes one instance of the production group of its node and generation
// when ws keeps one there (the instance it replaced), and is dropped otherwise.
func carryTrialGroups(op string, ws map[string]groupWant, existing *api.Job) {
	if existing == nil {
		return
	}
	for _, g := range existing.TaskGroups {
		k, ok := trialSlotOf(g)
		if !ok || g.Meta[MetaOperator] != op || g.Count == nil || *g.Count < 1 {
			continue
		}
		tr, base, has, err := slotTrial(g)
		if err != nil || !has {
			continue
		}
		name := GroupName(op, g.Meta[MetaNode], base.Epoch)
		w, ok := ws[name]
		if !ok || w.slot || w.count < 1 || w.final < 1 {
			continue
		}
		w.count--
		w.final--
		ws[name] = w
		ws[TrialGroupName(op, k)] = groupWant{node: w.node, config: w.config, gen: w.gen, count: 1, final: 1, trial: &tr, trialSlot: k}
	}
}

// TrialSlots implements planner.TrialActuator: slot 0 in the operator's canary slot
// group, the others in trial slot groups.
func (a *Actuator) TrialSlots() int { return fsm.MaxTrialSlots }

// SetTrials implements planner.TrialActuator: it registers a version of job whose canary
// slots and trial slot groups run exactly trials, when the registered version does not
// already (a no-op otherwise). The version keeps the decision meta of the one it replaces.
func (a *Actuator) SetTrials(ctx context.Context, job string, trials map[string]fsm.TrialSlots) error {
	existing, _, err := a.c.Jobs().Info(job, a.q(ctx))
	if err != nil {
		if isNotFound(err) && len(trials) == 0 {
			return nil
		}
		return fmt.Errorf("read job %q: %w", job, err)
	}
	if !rendered(existing) {
		if len(trials) == 0 {
			return nil
		}
		return fmt.Errorf("job %q runs a version the planner did not render: trials wait for its first decision", job)
	}
	next, changed, err := renderTrials(existing, trials)
	if err != nil {
		return fmt.Errorf("job %q: %w", job, err)
	}
	if !changed {
		return nil
	}
	var modify uint64
	if existing.JobModifyIndex != nil {
		modify = *existing.JobModifyIndex
	}
	resp, _, err := a.c.Jobs().EnforceRegister(next, modify, a.w(ctx))
	if err != nil {
		return fmt.Errorf("register job %q with its trials: %w", job, err)
	}
	names := make([]string, 0, len(trials))
	for op, ts := range trials {
		for _, t := range ts {
			names = append(names, fmt.Sprintf("%s/%d=%s", op, t.Slot, t.Config))
		}
	}
	sort.Strings(names)
	a.log.Info("trials set", "job", job, "trials", names, "eval", resp.EvalID)
	return nil
}

// trialFailExits is how many non-zero exits of a trial's task make it a failed trial: one
// may be a transient fault the restart policy absorbs, a second on the same config is not.
const trialFailExits = 2

// TrialFailures implements planner.TrialWatcher: a trial failed when its slot group's
// allocation running the trial's epoch has a task OOM-killed (Nomad's oom_killed flag or
// exit status 137) or exiting with a non-zero status trialFailExits times. The allocation's job version tells its epoch (the group meta
// trident_config_epoch), so the slot's allocation from before the trial does not count.
func (a *Actuator) TrialFailures(ctx context.Context, job string, trials map[string]fsm.TrialSlots) (map[string]map[int]string, error) {
	type want struct {
		op    string
		trial fsm.Trial
	}
	groups := map[string]want{}
	for op, ts := range trials {
		for _, t := range ts {
			name := SlotGroupName(op)
			if t.Slot > 0 {
				name = TrialGroupName(op, t.Slot)
			}
			groups[name] = want{op, t}
		}
	}
	if len(groups) == 0 {
		return nil, nil
	}
	allocs, _, err := a.c.Jobs().Allocations(job, false, a.q(ctx))
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list allocations of %q: %w", job, err)
	}
	var out map[string]map[int]string
	for _, al := range allocs {
		w, ok := groups[al.TaskGroup]
		if !ok || al.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		why := allocFailure(al)
		if why == "" {
			continue
		}
		full, _, err := a.c.Allocations().Info(al.ID, a.q(ctx))
		if err != nil {
			return out, fmt.Errorf("read allocation %s of %q: %w", al.ID, job, err)
		}
		if full.Job == nil {
			continue
		}
		if g := full.Job.LookupTaskGroup(al.TaskGroup); g == nil || g.Meta[MetaConfigEpoch] != strconv.FormatUint(w.trial.Epoch, 10) {
			continue // the slot's instance from before the trial
		}
		if out == nil {
			out = map[string]map[int]string{}
		}
		if out[w.op] == nil {
			out[w.op] = map[int]string{}
		}
		out[w.op][w.trial.Slot] = fmt.Sprintf("allocation %s on %s: %s", al.ID[:min(8, len(al.ID))], al.NodeName, why)
	}
	return out, nil
}

// allocFailure says how an allocation's config failed to run ("" when it did not): a task
// OOM-killed, or a task that exited non-zero trialFailExits times (with its last message).
// Only the task's own terminations count: an allocation that failed without them (an
// image that did not pull, a driver or device plugin fault) says nothing of the config,
// and the tuner would never try the config again.
func allocFailure(al *api.AllocationListStub) string {
	for _, task := range slices.Sorted(maps.Keys(al.TaskStates)) {
		ts := al.TaskStates[task]
		if n := oomKills(ts); n > 0 {
			return fmt.Sprintf("task %s %s %d times", task, fsm.TrialOOMKilled, n)
		}
		if n := failedExits(ts); n >= trialFailExits {
			return fmt.Sprintf("task %s exited %d times with a non-zero status (%s)", task, n, lastTermination(ts))
		}
	}
	return ""
}

// lastTermination describes the task's last termination: its exit code and message.
func lastTermination(ts *api.TaskState) string {
	for i := len(ts.Events) - 1; i >= 0; i-- {
		if ev := ts.Events[i]; ev != nil && ev.Type == api.TaskTerminated {
			msg := ev.DisplayMessage
			if msg == "" {
				msg = "exit code " + ev.Details["exit_code"]
			}
			return fsm.Clip(msg, 160)
		}
	}
	return "no termination event"
}
