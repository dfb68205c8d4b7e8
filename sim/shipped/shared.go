package shipped

import (
	"context"
	"fmt"
	"slices"

	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/sim"
)

// Shared gives a baseline scheduler the shipped observation and adaptation layers, for
// the controlled comparison of the paper's §8.3: capacities are the estimates the feed
// (apm/feed.Estimator, the two-stage observation layer) published to the planner, and
// configurations come from the feed's tuner measuring trials beside production, with its
// recommendations decided by the planner's round as in the shipped loop. The baseline
// keeps its own parallelism and placement; a configuration the planner decides is
// applied to every instance of the operator at once (the baselines have no transition
// planning). It implements baseline.CapacitySource and baseline.Advisor, and io.Closer
// (the baseline closes it).
type Shared struct {
	s   *Scheduler
	ctx context.Context
	// next is the virtual time of the next feed and planner round.
	next float64
	// applied is each operator's config as the baseline was last handed it (nil: the job
	// file's), probes its trial configs by slot (nil: none).
	applied []sim.OpConfig
	probes  [][]sim.OpConfig
}

// NewShared returns the shared layers: the shipped feed with its tuner on, measuring
// trials, and the planner deciding its recommendations (o's tuning and observation
// settings apply; Tune, Tuning.Trials and AllAtOnce are set).
func NewShared(o Options) *Shared {
	o.Tune, o.Tuning.Trials, o.AllAtOnce = true, true, true
	s := New(o)
	s.advisor = true
	return &Shared{s: s}
}

// Init implements baseline.CapacitySource and baseline.Advisor (idempotent: a baseline
// wired to both calls it twice). It starts the shipped planner and feed on the pipeline.
func (h *Shared) Init(ctx context.Context, env *sim.Env) error {
	if h.ctx != nil {
		return nil
	}
	if _, err := h.s.Init(ctx, env); err != nil {
		return fmt.Errorf("shared layers: %w", err)
	}
	h.ctx = context.WithoutCancel(ctx)
	h.next = h.s.opt.IntervalS
	h.applied = make([]sim.OpConfig, len(env.Pipeline.Ops))
	h.probes = make([][]sim.OpConfig, len(env.Pipeline.Ops))
	return nil
}

// Observe implements baseline.CapacitySource and baseline.Advisor: every tick's metrics
// accumulate, and every interval the engine is scraped, the feed publishes and tunes, and
// the planner runs its round. A baseline wired to both interfaces calls it twice per
// tick; only the first call for a snapshot counts.
func (h *Shared) Observe(snap *sim.Snapshot) {
	h.s.mu.Lock()
	seen := h.s.last == snap
	h.s.mu.Unlock()
	if seen {
		return
	}
	h.s.Observe(snap)
	if snap.Time < h.next-1e-9 {
		return
	}
	h.next += h.s.opt.IntervalS
	if _, err := h.s.Decide(h.ctx, snap); err != nil {
		h.s.opt.Logger.Warn("shared layers: round failed", "t", snap.Time, "err", err)
	}
}

// PerInstance implements baseline.CapacitySource: the capacity of one instance of
// operator op as the feed last published it to the planner, the figure the shipped loop
// plans with (ok false: none yet).
func (h *Shared) PerInstance(op int, _ *sim.Snapshot) (rate float64, ok bool) {
	name := h.s.env.Pipeline.Ops[op].Name
	h.s.srv.FSM().Read(func(st *fsm.State) {
		o, found := st.Observations[Job][name]
		rate, ok = o.Capacity, found && o.Capacity > 0
	})
	return rate, ok
}

// Apply implements baseline.Advisor: every operator's trial on its probe slot, and a
// config the planner decided since the last call on all its instances at once. It
// reports whether either changed.
func (h *Shared) Apply(_ context.Context, _ *sim.Snapshot, plan *sim.Plan) bool {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for i := range plan.Ops {
		op := &plan.Ops[i]
		op.Probes = nil
		if i < len(s.trials) {
			for k := range s.trials[i] {
				if t := s.trialOf(i, k); t != nil {
					for len(op.Probes) < k {
						op.Probes = append(op.Probes, nil)
					}
					op.Probes = append(op.Probes, t.cfg)
				}
			}
		}
		if !slices.EqualFunc(op.Probes, h.probes[i], sim.OpConfig.Equal) {
			h.probes[i] = op.Probes
			changed = true
		}
		if a := s.advice[i]; a != nil && !a.Equal(h.applied[i]) {
			op.Config, op.Transition = a, sim.TransitionAll
			h.applied[i] = a
			changed = true
		}
	}
	return changed
}

// Close implements io.Closer: it stops the planner.
func (h *Shared) Close() error { return h.s.Close() }

// adviseStep is the actuator's Step in the shared layers: decision d's candidate configs
// become the advice the baseline applies at its next decision, and the decision is done
// (its counts are the baseline's to decide).
func (s *Scheduler) adviseStep(d fsm.Decision) (planner.StepResult, error) {
	for i, op := range s.env.Pipeline.Ops {
		t, ok := d.Operators[op.Name]
		if !ok || t.CandidateConfig == "" || t.Transitions == 0 || s.space(i) == nil {
			continue
		}
		cfg, err := s.simConfig(i, t.CandidateConfig)
		if err != nil {
			return planner.StepResult{}, fmt.Errorf("shipped: decision %d: operator %s: %w", d.Index, op.Name, err)
		}
		s.advice[i] = cfg
	}
	s.Stats.Decisions++
	return planner.StepResult{Status: fsm.StatusDone, Detail: "configs handed to the baseline"}, nil
}
