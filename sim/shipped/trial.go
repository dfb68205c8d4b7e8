package shipped

import (
	"context"
	"fmt"
	"slices"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/sim"
)

// trialRun is one operator's tuning trial as the simulated cluster runs it.
type trialRun struct {
	cfg    sim.OpConfig
	config string
	epoch  uint64
}

// TrialSlots implements planner.TrialActuator: the engine runs any number of probe slots
// per operator, each on one instance that takes a production instance's place.
func (a actuator) TrialSlots() int { return fsm.MaxTrialSlots }

// SetTrials implements planner.TrialActuator: an operator's trial in slot k runs on the
// engine's probe slot k (one instance of the trial config that takes a production
// instance's place, as a canary does), except that a canary of the operator holds slot 0;
// its instance exports the trial's epoch.
func (a actuator) SetTrials(_ context.Context, job string, trials map[string]fsm.TrialSlots) error {
	s := a.s
	if job != Job {
		return fmt.Errorf("shipped: trials of unknown job %q", job)
	}
	run := make([][]*trialRun, len(s.env.Pipeline.Ops))
	for op, ts := range trials {
		i := s.opIndex(op)
		if i < 0 {
			return fmt.Errorf("shipped: trial of unknown operator %q", op)
		}
		for _, t := range ts {
			cfg, err := s.simConfig(i, t.Config)
			if err != nil {
				return fmt.Errorf("shipped: trial of %s in slot %d: %w", op, t.Slot, err)
			}
			for len(run[i]) <= t.Slot {
				run[i] = append(run[i], nil)
			}
			run[i][t.Slot] = &trialRun{cfg: cfg, config: t.Config, epoch: t.Epoch}
		}
	}
	s.mu.Lock()
	s.trials = run
	s.mu.Unlock()
	return nil
}

// probeKey is the instance key of probe slot k's instance: the canary's (slot 0 without a
// trial), or the trial's (one per trial, as each trial is a new allocation).
func probeKey(k int, t *trialRun) string {
	switch {
	case t != nil:
		return fmt.Sprintf("trial:%d", t.epoch)
	case k == 0:
		return canaryKey
	}
	return fmt.Sprintf("probe:%d", k)
}

// canaryOf returns operator i's canary while its decision is in the canary phase.
func (s *Scheduler) canaryOf(i int) *canaryState {
	if s.applying.final {
		return nil
	}
	if c := s.applying.canaries[i]; c != nil && !c.failed {
		return c
	}
	return nil
}

// trialOf returns operator i's trial in slot k when it holds the probe slot (a canary
// holds slot 0 while it runs).
func (s *Scheduler) trialOf(i, k int) *trialRun {
	if i >= len(s.trials) || k >= len(s.trials[i]) || k == 0 && s.canaryOf(i) != nil {
		return nil
	}
	return s.trials[i][k]
}

// probes returns operator i's probe slots as the engine should run them: the canary or
// the trial in slot 0, the trials in the others (nil entries: none), trailing empty
// slots left out.
func (s *Scheduler) probes(i int) []sim.OpConfig {
	n := 1
	if i < len(s.trials) {
		n = max(n, len(s.trials[i]))
	}
	out := make([]sim.OpConfig, n)
	c := s.canaryOf(i)
	for k := range out {
		if k == 0 && c != nil {
			out[k] = c.cfg
		} else if t := s.trialOf(i, k); t != nil {
			out[k] = t.cfg
		}
	}
	for len(out) > 0 && out[len(out)-1] == nil {
		out = out[:len(out)-1]
	}
	return out
}

// probed returns the version to hand the engine with every operator's probe slots set
// (probes). A nil pl (no new version) becomes the last version handed with its probes
// changed when they differ, else stays nil.
func (s *Scheduler) probed(pl *sim.Plan) *sim.Plan {
	want := make([][]sim.OpConfig, len(s.env.Pipeline.Ops))
	for i := range want {
		want[i] = s.probes(i)
	}
	if pl == nil {
		if s.handed == nil || slices.EqualFunc(want, s.handed.Ops, func(w []sim.OpConfig, o sim.OpPlan) bool {
			return slices.EqualFunc(w, o.Probes, sim.OpConfig.Equal)
		}) {
			return nil
		}
		pl = &sim.Plan{Ops: make([]sim.OpPlan, len(s.handed.Ops))}
		for i, o := range s.handed.Ops {
			// The same counts and target: no transition restarts, only the probes change.
			pl.Ops[i] = sim.OpPlan{PerNode: slices.Clone(o.PerNode)}
		}
	}
	for i := range pl.Ops {
		pl.Ops[i].Probes = want[i]
	}
	s.handed = pl
	return pl
}
