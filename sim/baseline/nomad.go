package baseline

import (
	"context"
	"math"

	"github.com/trident-sched/trident/sim"
)

// NomadStrategy selects the Nomad Autoscaler strategy plugin.
type NomadStrategy int

// Nomad Autoscaler strategies (plugins/builtin/strategy in v0.4.7).
const (
	TargetValue NomadStrategy = iota
	Threshold
)

// Nomad is the Nomad Autoscaler horizontal application scaling of every task group on the
// group's mean device utilisation (CPU for CPU operators, accelerator for NPU operators,
// as the nomad-apm and an NVML device plugin report them), with the agent defaults
// (evaluation_interval 10 s, cooldown 5 m, query window 1 m) and Nomad's bin-packing
// scheduler placing new allocations. The job file starts from the Static counts.
//
// target-value (v0.4.7): factor = metric/target; no action while factor is within
// [1-threshold, 1+threshold] (threshold 0.01); otherwise new = ceil(count*factor).
// threshold (v0.4.7): two checks per group, "high" (lower_bound = Upper, delta +1) and
// "low" (upper_bound = Lower, delta -1); a check fires when at least
// within_bounds_trigger (5) of the window's data points lie in [lower, upper); when both
// fire the larger count wins, as the agent prefers scaling up.
type Nomad struct {
	Strategy NomadStrategy
	// Target is the target-value utilisation target (default 0.7, i.e. "target = 70").
	Target float64
	// Upper and Lower are the threshold bounds (defaults 0.7 and 0.3).
	Upper, Lower float64
	// CooldownS, EvalS and WindowS default to 300, 10 and 60.
	CooldownS, EvalS, WindowS float64

	env      *sim.Env
	desired  []int
	cooldown []float64
	// series holds per-operator utilisation averaged per evaluation interval.
	series [][]float64
	acc    Window
}

// Name implements sim.Scheduler.
func (n *Nomad) Name() string {
	if n.Strategy == Threshold {
		return "nomad-threshold"
	}
	return "nomad-target-value"
}

func (n *Nomad) defaults() {
	if n.Target == 0 {
		n.Target = 0.7
	}
	if n.Upper == 0 {
		n.Upper = 0.7
	}
	if n.Lower == 0 {
		n.Lower = 0.3
	}
	if n.CooldownS == 0 {
		n.CooldownS = 300
	}
	if n.EvalS == 0 {
		n.EvalS = 10
	}
	if n.WindowS == 0 {
		n.WindowS = 60
	}
}

// Interval implements sim.Scheduler.
func (n *Nomad) Interval() float64 { n.defaults(); return n.EvalS }

// Init implements sim.Scheduler.
func (n *Nomad) Init(_ context.Context, env *sim.Env) (*sim.Plan, error) {
	n.defaults()
	n.env = env
	per, err := SubmittedJob(env)
	if err != nil {
		return nil, err
	}
	k := len(env.Pipeline.Ops)
	n.desired = make([]int, k)
	for i := range per {
		for _, c := range per[i] {
			n.desired[i] += c
		}
	}
	n.cooldown = make([]float64, k)
	n.series = make([][]float64, k)
	n.acc.Reset(k)
	return sim.PlanFromCounts(per), nil
}

// Observe implements sim.Scheduler.
func (n *Nomad) Observe(s *sim.Snapshot) { n.acc.Add(s) }

// TargetValueCount is the v0.4.7 target-value formula: it returns the new count, or count
// when no action is taken.
func TargetValueCount(count int, metric, target, threshold float64) int {
	var factor float64
	if target == 0 {
		factor = metric
	} else {
		factor = metric / target
	}
	if count == 0 {
		if factor > 0 {
			return int(math.Ceil(factor))
		}
		return 0
	}
	if factor >= 1-threshold && factor <= 1+threshold {
		return count
	}
	return int(math.Ceil(float64(count) * factor))
}

// ThresholdCount is the v0.4.7 threshold strategy for one check: it returns count+delta
// when at least trigger points lie in [lower, upper), otherwise count.
func ThresholdCount(count int, points []float64, lower, upper float64, trigger, delta int) int {
	in := 0
	for _, v := range points {
		if v >= lower && v < upper {
			in++
		}
	}
	if in < trigger {
		return count
	}
	return max(0, count+delta)
}

// Decide implements sim.Scheduler.
func (n *Nomad) Decide(_ context.Context, s *sim.Snapshot) (*sim.Plan, error) {
	k := len(s.Ops)
	points := int(math.Round(n.WindowS / n.EvalS))
	for i := range k {
		n.series[i] = append(n.series[i], n.acc.MeanUtil(i)*100)
		if len(n.series[i]) > points {
			n.series[i] = n.series[i][len(n.series[i])-points:]
		}
	}
	n.acc.Reset(k)
	changed := false
	for i := range k {
		if s.Time < n.cooldown[i] || len(n.series[i]) < points {
			continue
		}
		cur := n.desired[i]
		var next int
		switch n.Strategy {
		case TargetValue:
			// The APM query returns the window mean; the strategy uses the latest value.
			var m float64
			for _, v := range n.series[i] {
				m += v / float64(len(n.series[i]))
			}
			next = TargetValueCount(cur, m, n.Target*100, 0.01)
		case Threshold:
			up := ThresholdCount(cur, n.series[i], n.Upper*100, math.Inf(1), 5, +1)
			down := ThresholdCount(cur, n.series[i], math.Inf(-1), n.Lower*100, 5, -1)
			next = cur
			if up > cur {
				next = up
			} else if down < cur {
				next = down
			}
		}
		next = max(1, next)
		if next != cur {
			n.desired[i] = next
			n.cooldown[i] = s.Time + n.CooldownS
			changed = true
		}
	}
	// Re-plan every evaluation: pending (unplaced) allocations are retried as resources
	// free up, as Nomad's blocked evaluations do.
	pending := false
	for i := range k {
		if s.Ops[i].Unplaced > 0 || sumInts(s.Ops[i].PerNode) != n.desired[i] {
			pending = true
		}
	}
	if !changed && !pending {
		return nil, nil
	}
	per := currentPerNode(s)
	free := freeOf(n.env, per)
	// Scale-downs first so their resources can host scale-ups.
	for i := range k {
		if sumInts(per[i]) > n.desired[i] {
			per[i] = sim.Resize(n.env.Cluster, free, n.env.Pipeline.Ops[i].Need, per[i], n.desired[i], sim.BinPack)
		}
	}
	for i := range k {
		if sumInts(per[i]) < n.desired[i] {
			per[i] = sim.Resize(n.env.Cluster, free, n.env.Pipeline.Ops[i].Need, per[i], n.desired[i], sim.BinPack)
		}
	}
	return sim.PlanFromCounts(per), nil
}

func sumInts(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

// SubmittedJob is the deployment a user submits before any autoscaler acts: Static's
// profiled instance counts (TunedAllocation with default configurations), placed by
// Nomad's default bin-packing scheduler.
func SubmittedJob(env *sim.Env) ([][]int, error) {
	per, err := TunedAllocation(env, nil, 0)
	if err != nil {
		return nil, err
	}
	return placeOrFallback(env, per, sim.BinPack), nil
}
