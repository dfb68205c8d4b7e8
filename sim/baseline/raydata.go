package baseline

import (
	"context"
	"math"

	"github.com/trident-sched/trident/sim"
)

// RayData is Ray Data's default streaming-executor autoscaling (v2.4x DefaultAutoscaler
// and ReservationOpResourceAllocator):
//
//   - accelerator operators are autoscaling actor pools (min 1): pool utilisation is
//     in-flight tasks / (actors * max_tasks_in_flight_per_actor, 4), a task being one
//     batch (the operator's batch size in records, 1 for request-level engines); Ray
//     keeps dispatching queued input bundles into free task slots, so the in-flight tasks
//     are the batches in service plus the queued ones, up to the slots; at utilisation >= 0.95
//     the pool grows by one actor unless an actor is still pending or the operator is over
//     its resource budget; at <= 0.5 it shrinks by one; a backpressured operator stops
//     dispatching, so its utilisation falls;
//   - CPU operators are task pools: tasks are launched for queued inputs while the
//     operator is within its budget, and stop being relaunched when inputs dry up (we
//     grow/shrink by a quarter of the pool per step with the same thresholds);
//   - budgets: half of each resource is reserved evenly among the operators that use it,
//     the other half is shared first come, first served;
//   - placement is Ray's default hybrid policy (pack a node up to 50 %, then spread).
//
// Configurations are never tuned (the operator's defaults), unless Advisor is set (the
// controlled comparison of paper §8.3, applied all-at-once).
type RayData struct {
	// StepS is the autoscaler period (default 5 s).
	StepS float64
	// Up and Down are the utilisation thresholds (defaults 0.95 and 0.5).
	Up, Down float64
	// MaxTasksInFlight per actor (default 4).
	MaxTasksInFlight float64
	// Advisor, if set, supplies configuration recommendations (controlled setup).
	Advisor Advisor
	// Label overrides Name.
	Label string

	env *sim.Env
	acc Window
	// cfg is each operator's deployed configuration (nil: defaults); pool sums each actor
	// pool's per-tick utilisation over the window (see poolUtil).
	cfg  []sim.OpConfig
	pool []float64
}

// Name implements sim.Scheduler.
func (r *RayData) Name() string {
	if r.Label != "" {
		return r.Label
	}
	return "ray-data"
}

func (r *RayData) defaults() {
	if r.StepS == 0 {
		r.StepS = 5
	}
	if r.Up == 0 {
		r.Up = 0.95
	}
	if r.Down == 0 {
		r.Down = 0.5
	}
	if r.MaxTasksInFlight == 0 {
		r.MaxTasksInFlight = 4
	}
}

// Interval implements sim.Scheduler.
func (r *RayData) Interval() float64 { r.defaults(); return r.StepS }

// Init implements sim.Scheduler: one actor / task slot per operator.
func (r *RayData) Init(ctx context.Context, env *sim.Env) (*sim.Plan, error) {
	r.defaults()
	r.env = env
	k := len(env.Pipeline.Ops)
	r.acc.Reset(k)
	r.cfg = make([]sim.OpConfig, k)
	r.pool = make([]float64, k)
	per := make([][]int, k)
	free := freeOf(env, nil)
	for i := range per {
		per[i] = sim.Resize(env.Cluster, free, env.Pipeline.Ops[i].Need, make([]int, len(env.Cluster.Nodes)), 1, sim.Hybrid)
	}
	if r.Advisor != nil {
		if err := r.Advisor.Init(ctx, env); err != nil {
			return nil, err
		}
	}
	return sim.PlanFromCounts(per), nil
}

// Observe implements sim.Scheduler.
func (r *RayData) Observe(s *sim.Snapshot) {
	r.acc.Add(s)
	for i := range s.Ops {
		r.pool[i] += r.poolUtil(s, i)
	}
	if r.Advisor != nil {
		r.Advisor.Observe(s)
	}
}

// poolUtil is one tick's utilisation of operator i's actor pool: in-flight tasks over the
// pool's task slots. Ray keeps dispatching queued input bundles into free task slots
// unless the operator is backpressured (its output queue is full), so the in-flight tasks
// are the batches in service plus, when the output has room, the queued ones.
func (r *RayData) poolUtil(s *sim.Snapshot, i int) float64 {
	o := &s.Ops[i]
	if o.Running == 0 {
		return 0
	}
	work := o.InFlight
	if i+1 == len(s.Ops) || s.Ops[i+1].Queue < 0.95*s.Ops[i+1].QueueCap {
		work += o.Queue
	}
	batch := r.env.Pipeline.Ops[i].BatchSize(r.cfg[i])
	return math.Min(1, work/batch/(float64(o.Running)*r.MaxTasksInFlight))
}

// budgets returns each operator's resource limit: an even share of half of each pool
// among the operators that use it plus whatever of the shared half is unused.
func (r *RayData) budgets(per [][]int) []sim.Resources {
	p := r.env.Pipeline
	total := r.env.Cluster.Total()
	var nCPU, nAcc int
	for i := range p.Ops {
		if p.Ops[i].Need.Acc > 0 {
			nAcc++
		}
		if p.Ops[i].Need.CPU > 0 {
			nCPU++
		}
	}
	reserve := make([]sim.Resources, len(p.Ops))
	var over sim.Resources
	for i := range p.Ops {
		need := p.Ops[i].Need
		if need.CPU > 0 {
			reserve[i].CPU = total.CPU / 2 / float64(nCPU)
			reserve[i].MemGB = total.MemGB / 2 / float64(nCPU)
		}
		if need.Acc > 0 {
			reserve[i].Acc = total.Acc / 2 / nAcc
		}
		use := need.Scale(sumInts(per[i]))
		over.CPU += math.Max(0, use.CPU-reserve[i].CPU)
		over.MemGB += math.Max(0, use.MemGB-reserve[i].MemGB)
		over.Acc += max(0, use.Acc-reserve[i].Acc)
	}
	shared := sim.Resources{CPU: total.CPU / 2, MemGB: total.MemGB / 2, Acc: total.Acc - total.Acc/2}
	left := shared.Sub(over)
	out := make([]sim.Resources, len(p.Ops))
	for i := range p.Ops {
		use := p.Ops[i].Need.Scale(sumInts(per[i]))
		out[i] = sim.Resources{
			CPU:   math.Max(reserve[i].CPU, use.CPU) + math.Max(0, left.CPU),
			MemGB: math.Max(reserve[i].MemGB, use.MemGB) + math.Max(0, left.MemGB),
			Acc:   max(reserve[i].Acc, use.Acc) + max(0, left.Acc),
		}
	}
	return out
}

// Decide implements sim.Scheduler.
func (r *RayData) Decide(ctx context.Context, s *sim.Snapshot) (*sim.Plan, error) {
	p := r.env.Pipeline
	k := len(p.Ops)
	per := currentPerNode(s)
	free := freeOf(r.env, per)
	budget := r.budgets(per)
	plan := sim.PlanFromCounts(per)
	changed := false
	inputsComplete := s.SourceDone
	for i := range k {
		o := s.Ops[i]
		w := r.acc.Ops[i]
		if i > 0 {
			up := s.Ops[i-1]
			inputsComplete = inputsComplete && up.Queue < 1e-9 && up.InFlight < 1e-9
		}
		if w.Ticks == 0 {
			continue
		}
		size := o.Running + o.Starting + o.Restarting
		var util float64
		if o.Running > 0 {
			util = r.pool[i] / float64(w.Ticks)
			if p.Ops[i].Need.Acc == 0 {
				// Task pools: running tasks / slots.
				util = r.acc.MeanUtil(i)
			}
		}
		need := p.Ops[i].Need
		target := size
		isActor := need.Acc > 0
		// Ray scales an actor pool down to its minimum once its inputs are complete (every
		// upstream operator has finished the dataset), not when its queue is momentarily
		// empty, e.g. while an upstream operator restarts.
		done := o.Queue < 1e-9 && w.Processed < 1e-9 && inputsComplete
		switch {
		case util >= r.Up && o.Queue > 0:
			if isActor && o.Starting > 0 {
				break // previous scale-up has not finished
			}
			step := 1
			if !isActor {
				step = max(1, size/4)
			}
			for range step {
				use := need.Scale(target + 1)
				if !budget[i].Fits(use) {
					break
				}
				target++
			}
		case (util <= r.Down && o.Running > 0 && o.Restarting == 0) || done:
			// Utilisation is undefined while no instance runs or instances restart on a
			// new configuration: no scale-down on it.
			if size > 1 {
				step := 1
				if !isActor {
					step = max(1, size/4)
				}
				target = max(1, size-step)
			}
		}
		if target != size {
			plan.Ops[i].PerNode = sim.Resize(r.env.Cluster, free, need, per[i], target, sim.Hybrid)
			changed = true
		}
	}
	if r.Advisor != nil {
		if r.Advisor.Apply(ctx, s, plan) {
			changed = true
		}
		for i := range plan.Ops {
			if plan.Ops[i].Config != nil {
				r.cfg[i] = plan.Ops[i].Config
			}
		}
	}
	r.acc.Reset(k)
	clear(r.pool)
	if !changed {
		return nil, nil
	}
	return plan, nil
}
