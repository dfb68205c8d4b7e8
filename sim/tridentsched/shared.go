package tridentsched

import (
	"context"
	"fmt"
	"slices"

	"github.com/trident-sched/trident/sim"
)

// Shared gives a baseline scheduler Trident's observation and adaptation layers for the
// controlled comparison of paper §8.3: capacities come from the observation layer and
// configuration recommendations from the adaptation layer, applied by restarting every
// instance of the operator at once (the baselines have no transition planning). It
// implements baseline.CapacitySource and baseline.Advisor.
type Shared struct {
	t       *Trident
	next    float64
	probes  [][]sim.OpConfig
	applied [][]sim.OpConfig
}

// NewShared returns shared layers configured like Trident with opt.
func NewShared(opt Options) *Shared { return &Shared{t: New(opt)} }

// Init implements baseline.CapacitySource and baseline.Advisor (idempotent).
func (h *Shared) Init(ctx context.Context, env *sim.Env) error {
	if h.t.env != nil {
		return nil
	}
	if _, err := h.t.Init(ctx, env); err != nil {
		return fmt.Errorf("shared layers: %w", err)
	}
	h.next = h.t.opt.SampleS
	h.probes = make([][]sim.OpConfig, len(env.Pipeline.Ops))
	h.applied = make([][]sim.OpConfig, len(env.Pipeline.Ops))
	return nil
}

// Observe implements baseline.CapacitySource and baseline.Advisor; it runs the layers'
// control loop every SampleS. A baseline wired to both interfaces calls it twice per tick,
// so only the first call for a given time counts.
func (h *Shared) Observe(s *sim.Snapshot) {
	if h.t.lastSnap == s {
		return
	}
	h.t.Observe(s)
	if s.Time < h.next-1e-9 {
		return
	}
	h.next += h.t.opt.SampleS
	h.t.Stats.Invocations++
	h.t.flushWindow(s)
	probes, _, err := h.t.adapt(context.Background(), s)
	if err != nil {
		h.t.opt.Logger.Warn("shared layers: adaptation failed", "err", err)
		return
	}
	h.probes = probes
}

// PerInstance implements baseline.CapacitySource.
func (h *Shared) PerInstance(op int, _ *sim.Snapshot) (float64, bool) {
	return h.t.capacity(op), true
}

// Apply implements baseline.Advisor: probes for BO trials, and every new recommendation
// committed at once on all instances (the observation layer is invalidated).
func (h *Shared) Apply(_ context.Context, s *sim.Snapshot, plan *sim.Plan) bool {
	changed := false
	for i, o := range h.t.ops {
		op := &plan.Ops[i]
		op.Probes = h.probes[i]
		if !slices.EqualFunc(h.probes[i], h.applied[i], sim.OpConfig.Equal) {
			changed = true
			h.applied[i] = h.probes[i]
		}
		if o.revert {
			op.Config, op.Transition = o.current, sim.TransitionAll
			o.revert = false
			changed = true
			continue
		}
		if o.candidate != nil && !o.committed {
			op.Config, op.Transition = o.candidate.cfg, sim.TransitionAll
			h.t.commit(i)
			changed = true
		}
	}
	return changed
}
