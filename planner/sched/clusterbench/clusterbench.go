package clusterbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
	"github.com/trident-sched/trident/strategy/milp"
)

// Outcome is one method's result on one scenario.
type Outcome struct {
	// Throughput per pipeline (records/s of its input), in Scenario.Inputs order of the
	// admitted pipelines.
	Throughput []float64
	// MinShare is the max-min objective (smallest weighted normalised throughput) and
	// WeightedSum the weighted sum of normalised throughputs (milp.Value).
	MinShare, WeightedSum float64
	// Oversubscribed counts the nodes the plans overfill together, EgressOversubscribed
	// those among them whose egress they overfill.
	Oversubscribed, EgressOversubscribed int
	// Seconds is the planning wall-clock time.
	Seconds float64
}

// Comparison is every method's outcome on one scenario, with the joint model's bound.
type Comparison struct {
	Spec Spec
	// Admitted are the pipelines (indexes into Scenario.Inputs) whose minimums fit
	// together; the others are queued and not planned by any method.
	Admitted []int
	// Bound is the pooled joint model's bound on the objective; Gap Trident's gap to it.
	Bound, Gap float64
	// Methods by name: "trident", "per-pipeline", "static-partition", "autoscaler".
	Methods map[string]Outcome
}

// Methods lists the methods in report order.
var Methods = []string{"trident", "per-pipeline", "static-partition", "autoscaler"}

// Compare plans sc by every method. The joint round runs with obj; the pipelines whose
// minimums do not fit are dropped first, lowest weight (then latest) first, until the rest
// fit (admission proper is measured separately), and every method plans the same set.
func Compare(ctx context.Context, sc *Scenario, obj milp.Objective, opts milp.Options) (Comparison, error) {
	s := sched.MILP{Solver: milp.HiGHS{}, Options: opts}
	cmp := Comparison{Spec: sc.Spec, Methods: map[string]Outcome{}}
	for p := range sc.Inputs {
		cmp.Admitted = append(cmp.Admitted, p)
	}
	var jp sched.JointPlan
	var secs float64
	for {
		ins := sc.inputs(cmp.Admitted)
		start := time.Now()
		var err error
		jp, err = sched.PlanJoint(ctx, s, ins, sc.Nodes, obj, opts)
		secs = time.Since(start).Seconds()
		if err == nil {
			break
		}
		if !errors.Is(err, milp.ErrJointInfeasible) || len(cmp.Admitted) == 1 {
			return cmp, fmt.Errorf("%s: joint round: %w", sc.Spec, err)
		}
		cmp.Admitted = sc.dropOne(cmp.Admitted)
	}
	ins := sc.inputs(cmp.Admitted)
	cmp.Bound, cmp.Gap = jp.Bound, jp.Gap
	weights, scale := make([]float64, len(ins)), make([]float64, len(ins))
	for p, in := range ins {
		weights[p], scale[p] = in.Weight, jp.Shares[in.Job].Scale
	}
	rate := func(plans map[string]sched.Plan, seconds float64) Outcome {
		o := Outcome{Throughput: make([]float64, len(ins)), Seconds: seconds}
		var hs []sched.Holding
		for p, in := range ins {
			o.Throughput[p] = plans[in.Job].Throughput
			hs = append(hs, sched.HoldingOf(in, plans[in.Job]))
		}
		o.MinShare = milp.Value(milp.ObjectiveMaxMin, weights, scale, o.Throughput)
		o.WeightedSum = milp.Value(milp.ObjectiveSum, weights, scale, o.Throughput)
		over := sched.Oversubscribed(sc.Nodes, hs)
		o.Oversubscribed = len(over)
		for _, l := range over {
			if strings.Contains(l, sched.EgressOver) {
				o.EgressOversubscribed++
			}
		}
		return o
	}
	cmp.Methods["trident"] = rate(jp.Plans, secs)

	// Per-pipeline planning: every pipeline planned alone on the whole inventory.
	start := time.Now()
	alone := map[string]sched.Plan{}
	for _, in := range ins {
		in.Nodes = sc.Nodes
		if pl, err := s.Plan(ctx, in); err == nil {
			alone[in.Job] = pl
		}
	}
	cmp.Methods["per-pipeline"] = rate(alone, time.Since(start).Seconds())

	start = time.Now()
	cmp.Methods["static-partition"] = rate(staticPartition(ctx, s, ins, sc.Nodes), time.Since(start).Seconds())
	start = time.Now()
	as := autoscaler(ins, sc.Nodes)
	if sc.Links {
		as = routedInTurn(ctx, ins, as, sc.Nodes)
	}
	cmp.Methods["autoscaler"] = rate(as, time.Since(start).Seconds())
	return cmp, ctx.Err()
}

// inputs returns the admitted pipelines' inputs.
func (sc *Scenario) inputs(admitted []int) []sched.PlanInput {
	out := make([]sched.PlanInput, len(admitted))
	for k, p := range admitted {
		out[k] = sc.Inputs[p]
	}
	return out
}

// dropOne removes the admitted pipeline of lowest weight, the latest among equals.
func (sc *Scenario) dropOne(admitted []int) []int {
	worst := 0
	for k, p := range admitted {
		if sc.Inputs[p].Weight <= sc.Inputs[admitted[worst]].Weight {
			worst = k
		}
	}
	return slices.Delete(slices.Clone(admitted), worst, worst+1)
}

// staticPartition deals whole nodes to pipelines, weighted: accelerator nodes go, one by
// one, to the pipeline with the fewest devices per unit of weight among those with an
// operator that accepts the node's devices; CPU-only nodes likewise by cores. Each
// pipeline is then planned alone on its nodes by the same MILP.
func staticPartition(ctx context.Context, s sched.Scheduler, ins []sched.PlanInput, nodes []fsm.Node) map[string]sched.Plan {
	order := slices.Clone(nodes)
	rng := rand.New(rand.NewPCG(uint64(len(nodes)), uint64(len(ins))))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	gpuGot, cpuGot := make([]float64, len(ins)), make([]float64, len(ins))
	part := make([][]fsm.Node, len(ins))
	for _, n := range order {
		best := -1
		if n.GPUs > 0 {
			led := sched.NewLedger([]fsm.Node{n})
			for p, in := range ins {
				uses := slices.ContainsFunc(in.Operators, func(o sched.OperatorInput) bool { return o.GPUs > 0 && led.Fits(o.Operator, n.Name, 1) })
				if uses && (best < 0 || gpuGot[p]/in.Weight < gpuGot[best]/ins[best].Weight) {
					best = p
				}
			}
			if best >= 0 {
				gpuGot[best] += float64(n.GPUs)
			}
		}
		if best < 0 {
			for p, in := range ins {
				if best < 0 || cpuGot[p]/in.Weight < cpuGot[best]/ins[best].Weight {
					best = p
				}
			}
			cpuGot[best] += n.CPU
		}
		part[best] = append(part[best], n)
	}
	out := map[string]sched.Plan{}
	for p, in := range ins {
		sort.Slice(part[p], func(i, j int) bool { return part[p][i].Name < part[p][j].Name })
		in.Nodes = part[p]
		if len(in.Nodes) == 0 || in.Validate() != nil {
			continue
		}
		if pl, err := s.Plan(ctx, in); err == nil {
			out[in.Job] = pl
		}
	}
	return out
}

// autoscaler emulates the nomad-autoscaler's target-value strategy on each group's
// backlog per instance, with Nomad's scheduler placing the instances, at its best: the
// autoscaler sees exactly which group's backlog grows (the pipeline's bottleneck) and
// adds one instance to it per evaluation, every pipeline's policies evaluating in turn;
// Nomad places each instance by binpacking (the fitting node with the fewest cores left
// after placement). Every group starts at one instance. A pipeline stops growing when
// Nomad cannot place its bottleneck's next instance (the allocation stays blocked). The
// autoscaler knows no pipeline weights.
func autoscaler(ins []sched.PlanInput, nodes []fsm.Node) map[string]sched.Plan {
	led := sched.NewLedger(nodes)
	counts := make([][]int, len(ins))
	plans := map[string]sched.Plan{}
	place := func(p, i int) bool {
		o := ins[p].Operators[i].Operator
		best, bestLeft := "", math.Inf(1)
		for _, n := range nodes {
			if led.Fits(o, n.Name, 1) {
				if left := led.CPULeft(n.Name) - o.CPU; left < bestLeft {
					best, bestLeft = n.Name, left
				}
			}
		}
		if best == "" {
			return false
		}
		led.Take(o, best, 1)
		t := plans[ins[p].Job].Targets[o.Name]
		pl := t[best]
		pl.Current++
		t[best] = pl
		counts[p][i]++
		return true
	}
	blocked := make([]bool, len(ins))
	for p, in := range ins {
		counts[p] = make([]int, len(in.Operators))
		plans[in.Job] = sched.Plan{Targets: map[string]map[string]fsm.Placement{}}
		for _, o := range in.Operators {
			plans[in.Job].Targets[o.Name] = map[string]fsm.Placement{}
		}
		for i := range in.Operators {
			if !place(p, i) {
				blocked[p] = true
			}
		}
	}
	for slices.Contains(blocked, false) {
		for p, in := range ins {
			if blocked[p] {
				continue
			}
			amps := in.Amplifications()
			neck, T := 0, math.Inf(1)
			for i, o := range in.Operators {
				if t := float64(counts[p][i]) * o.Capacity / amps[i]; t < T {
					neck, T = i, t
				}
			}
			if max := in.Operators[neck].MaxInstances; (max > 0 && counts[p][neck] >= max) || !place(p, neck) {
				blocked[p] = true
			}
		}
	}
	for p, in := range ins {
		amps := in.Amplifications()
		T := math.Inf(1)
		for i, o := range in.Operators {
			T = math.Min(T, float64(counts[p][i])*o.Capacity/amps[i])
		}
		pl := plans[in.Job]
		pl.Throughput = T
		plans[in.Job] = pl
	}
	return plans
}

// routedInTurn routes the plans of a method that does not (the autoscaler emulation):
// each pipeline in turn on the links the ones before it leave (sched.Routed), so that its
// throughput is what its placement carries over the shared links. A plan that cannot be
// routed is kept as it is.
func routedInTurn(ctx context.Context, ins []sched.PlanInput, plans map[string]sched.Plan, nodes []fsm.Node) map[string]sched.Plan {
	out := map[string]sched.Plan{}
	var before []sched.Holding
	for _, in := range ins {
		pl, ok := plans[in.Job]
		if !ok {
			continue
		}
		in.Nodes, in.EgressUsed = nodes, sched.EgressUse(before)
		if r, err := sched.Routed(ctx, in, pl); err == nil {
			pl = r
		}
		out[in.Job] = pl
		before = append(before, sched.HoldingOf(in, pl))
	}
	return out
}

// Config selects the benchmark's scenarios.
type Config struct {
	// Sizes are the (pipelines, nodes) pairs.
	Sizes [][2]int
	// Seeds per size.
	Seeds int
	// Objective of the joint round.
	Objective milp.Objective
	// Options of every MILP solve.
	Options milp.Options
	// Progress receives one line per scenario (nil: none).
	Progress io.Writer
	// Links draws the scenarios with finite node egress and large records (Spec.Links),
	// LinkScale scales the link speeds (Spec.LinkScale).
	Links     bool
	LinkScale float64
}

// Run compares the methods on every scenario of cfg and returns the comparisons in order.
func Run(ctx context.Context, cfg Config) ([]Comparison, error) {
	var out []Comparison
	for _, sz := range cfg.Sizes {
		for seed := uint64(1); seed <= uint64(cfg.Seeds); seed++ {
			sc, err := Generate(Spec{Pipelines: sz[0], Nodes: sz[1], Seed: seed, Links: cfg.Links, LinkScale: cfg.LinkScale})
			if err != nil {
				return out, err
			}
			c, err := Compare(ctx, sc, cfg.Objective, cfg.Options)
			if err != nil {
				return out, err
			}
			if cfg.Progress != nil {
				t := c.Methods["trident"]
				fmt.Fprintf(cfg.Progress, "%-14s admitted %2d/%2d  trident %.2fs gap %.3f%%  sum %.3f (static %.3f, autoscaler %.3f)  min %.3f (static %.3f)  oversubscribed: trident %d, per-pipeline %d\n",
					sc.Spec, len(c.Admitted), len(sc.Inputs), t.Seconds, 100*c.Gap, t.WeightedSum, c.Methods["static-partition"].WeightedSum,
					c.Methods["autoscaler"].WeightedSum, t.MinShare, c.Methods["static-partition"].MinShare, t.Oversubscribed, c.Methods["per-pipeline"].Oversubscribed)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// quantile returns the q-quantile of xs (nearest rank; 0 for none).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	k := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// ratio is a/b, +Inf when only b is 0, 1 when both are.
func ratio(a, b float64) float64 {
	switch {
	case b > 0:
		return a / b
	case a > 0:
		return math.Inf(1)
	}
	return 1
}

// SizeSummary is the figures of one (pipelines, nodes) size over its seeds.
type SizeSummary struct {
	Pipelines, Nodes, Scenarios int
	// SolveMedian and SolveP95 are the joint round's planning seconds.
	SolveMedian, SolveP95 float64
	// GapMedian and GapMax are the joint plans' gaps to the pooled bound.
	GapMedian, GapMax float64
	// SumVsStatic* and MinVsStatic*: Trident's weighted sum and min share over the
	// static partition's (median and worst); SumVsAutoscaler* likewise.
	SumVsStaticMedian, SumVsStaticWorst         float64
	MinVsStaticMedian, MinVsStaticWorst         float64
	SumVsAutoscalerMedian, SumVsAutoscalerWorst float64
	// Oversubscribed nodes summed over the scenarios, by method, and among them those
	// whose egress is overfilled.
	Oversubscribed, EgressOversubscribed map[string]int
	// Queued pipelines summed over the scenarios (their minimums did not fit).
	Queued int
}

// Summarise groups cs by size.
func Summarise(cs []Comparison) []SizeSummary {
	var out []SizeSummary
	idx := map[[2]int]int{}
	per := map[[2]int][]Comparison{}
	for _, c := range cs {
		k := [2]int{c.Spec.Pipelines, c.Spec.Nodes}
		if _, ok := idx[k]; !ok {
			idx[k] = len(idx)
		}
		per[k] = append(per[k], c)
	}
	keys := make([][2]int, len(idx))
	for k, i := range idx {
		keys[i] = k
	}
	for _, k := range keys {
		s := SizeSummary{Pipelines: k[0], Nodes: k[1], Scenarios: len(per[k]), Oversubscribed: map[string]int{}, EgressOversubscribed: map[string]int{}}
		var solve, gap, sumS, minS, sumA []float64
		for _, c := range per[k] {
			t := c.Methods["trident"]
			solve, gap = append(solve, t.Seconds), append(gap, c.Gap)
			sumS = append(sumS, ratio(t.WeightedSum, c.Methods["static-partition"].WeightedSum))
			minS = append(minS, ratio(t.MinShare, c.Methods["static-partition"].MinShare))
			sumA = append(sumA, ratio(t.WeightedSum, c.Methods["autoscaler"].WeightedSum))
			for m, o := range c.Methods {
				s.Oversubscribed[m] += o.Oversubscribed
				s.EgressOversubscribed[m] += o.EgressOversubscribed
			}
			s.Queued += k[0] - len(c.Admitted)
		}
		s.SolveMedian, s.SolveP95 = quantile(solve, 0.5), quantile(solve, 0.95)
		s.GapMedian, s.GapMax = quantile(gap, 0.5), quantile(gap, 1)
		s.SumVsStaticMedian, s.SumVsStaticWorst = quantile(sumS, 0.5), quantile(sumS, 0)
		s.MinVsStaticMedian, s.MinVsStaticWorst = quantile(minS, 0.5), quantile(minS, 0)
		s.SumVsAutoscalerMedian, s.SumVsAutoscalerWorst = quantile(sumA, 0.5), quantile(sumA, 0)
		out = append(out, s)
	}
	return out
}
