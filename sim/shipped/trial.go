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

// SetTrials implements planner.TrialActuator: each operator's trial runs on its probe slot
// (one instance of the trial config that takes a production instance's place, as a
// canary does), unless a canary of the operator holds the slot; its instance exports the
// trial's epoch.
func (a actuator) SetTrials(_ context.Context, job string, trials map[string]fsm.Trial) error {
	s := a.s
	if job != Job {
		return fmt.Errorf("shipped: trials of unknown job %q", job)
	}
	run := make([]*trialRun, len(s.env.Pipeline.Ops))
	for op, t := range trials {
		i := s.opIndex(op)
		if i < 0 {
			return fmt.Errorf("shipped: trial of unknown operator %q", op)
		}
		cfg, err := s.simConfig(i, t.Config)
		if err != nil {
			return fmt.Errorf("shipped: trial of %s: %w", op, err)
		}
		run[i] = &trialRun{cfg: cfg, config: t.Config, epoch: t.Epoch}
	}
	s.mu.Lock()
	s.trials = run
	s.mu.Unlock()
	return nil
}

// probeKey is the instance key of the probe slot's instance: the canary's, or the
// trial's (one per trial, as each trial is a new allocation).
func probeKey(t *trialRun) string {
	if t == nil {
		return canaryKey
	}
	return fmt.Sprintf("trial:%d", t.epoch)
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

// trialOf returns operator i's trial when it holds the probe slot (no canary does).
func (s *Scheduler) trialOf(i int) *trialRun {
	if i >= len(s.trials) || s.canaryOf(i) != nil {
		return nil
	}
	return s.trials[i]
}

// probed returns the version to hand the engine with every operator's probe slot set: the
// canary, else the trial, else none. A nil pl (no new version) becomes the last version
// handed with its probes changed when they differ, else stays nil.
func (s *Scheduler) probed(pl *sim.Plan) *sim.Plan {
	want := make([]sim.OpConfig, len(s.env.Pipeline.Ops))
	for i := range want {
		if c := s.canaryOf(i); c != nil {
			want[i] = c.cfg
		} else if t := s.trialOf(i); t != nil {
			want[i] = t.cfg
		}
	}
	if pl == nil {
		if s.handed == nil || slices.EqualFunc(want, s.handed.Ops, func(c sim.OpConfig, o sim.OpPlan) bool {
			return len(o.Probes) == 0 && c == nil || len(o.Probes) == 1 && c.Equal(o.Probes[0])
		}) {
			return nil
		}
		pl = &sim.Plan{Ops: make([]sim.OpPlan, len(s.handed.Ops))}
		for i, o := range s.handed.Ops {
			// The same counts and target: no transition restarts, only the probe changes.
			pl.Ops[i] = sim.OpPlan{PerNode: slices.Clone(o.PerNode)}
		}
	}
	for i := range pl.Ops {
		pl.Ops[i].Probes = nil
		if want[i] != nil {
			pl.Ops[i].Probes = []sim.OpConfig{want[i]}
		}
	}
	s.handed = pl
	return pl
}
