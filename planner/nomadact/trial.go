package nomadact

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
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
// exactly trials (operator -> trial), and whether it differs from existing. An operator
// with a trial but no running slot is an error: only an operator with a parameter space
// and at least one instance has one.
func renderTrials(existing *api.Job, trials map[string]fsm.Trial) (*api.Job, bool, error) {
	raw, err := json.Marshal(existing)
	if err != nil {
		return nil, false, fmt.Errorf("copy job: %w", err)
	}
	var job api.Job
	if err := json.Unmarshal(raw, &job); err != nil {
		return nil, false, fmt.Errorf("copy job: %w", err)
	}
	ops := make([]string, 0, len(trials))
	for op := range trials {
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
		want, wanted := trials[g.Meta[MetaOperator]]
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
	return &job, changed, nil
}

// TrialSlots implements planner.TrialActuator: one trial per operator, in its canary slot
// group (the planner refuses trials in slots above 0).
func (a *Actuator) TrialSlots() int { return 1 }

// slotZero returns the trial in slot 0 of every operator of trials, or an error naming a
// trial in a higher slot, which no group of the job can run.
func slotZero(trials map[string]fsm.TrialSlots) (map[string]fsm.Trial, error) {
	out := make(map[string]fsm.Trial, len(trials))
	for op, ts := range trials {
		for _, t := range ts {
			if t.Slot != 0 {
				return nil, fmt.Errorf("operator %q: trial slot %d: the Nomad actuator runs one trial per operator, in its canary slot group (slot 0)", op, t.Slot)
			}
			out[op] = t
		}
	}
	return out, nil
}

// SetTrials implements planner.TrialActuator: it registers a version of job whose canary
// slots run exactly trials (slot 0 of each operator; a trial in another slot is an
// error), when the registered version does not already (a no-op otherwise). The version
// keeps the decision meta of the one it replaces.
func (a *Actuator) SetTrials(ctx context.Context, job string, slots map[string]fsm.TrialSlots) error {
	trials, err := slotZero(slots)
	if err != nil {
		return fmt.Errorf("job %q: %w", job, err)
	}
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
	for op, t := range trials {
		names = append(names, op+"="+t.Config)
	}
	sort.Strings(names)
	a.log.Info("trials set", "job", job, "trials", names, "eval", resp.EvalID)
	return nil
}
