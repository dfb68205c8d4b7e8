package sched

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/milp"
)

// Share is one pipeline's share of a joint round: what the pooled joint model
// (milp.SolveJoint) gives it of the whole inventory.
type Share struct {
	// Throughput is the share's throughput (records/s of the pipeline's input).
	Throughput float64
	// Instances caps each operator's parallelism (operator name -> instances): the fewest
	// instances that carry Throughput (milp.JointShares.Instances).
	Instances map[string]int
	// Devices are the share's accelerators per class (model and memory, Count summed
	// over the cluster): RestrictFor shows the pipeline no more of each class, so that a
	// pipeline planned first does not take the devices the share gives another.
	Devices []fsm.Device
	// Scale is the pipeline's pooled throughput bound alone on the whole inventory, the
	// unit of its normalised throughput.
	Scale float64
}

// Joint is the answer of the joint model for a set of pipelines.
type Joint struct {
	// Shares per pipeline (job).
	Shares map[string]Share
	// Objective and Bound of the pooled model (milp.JointShares).
	Objective, Bound float64
	// SolveTime of the pooled model.
	SolveTime time.Duration
}

// weightOf is in's weight (1 when unset).
func weightOf(in PlanInput) float64 {
	if in.Weight > 0 {
		return in.Weight
	}
	return 1
}

// jointPipelines translates ins into the joint model's pipelines (operators only: the
// joint model reads no node or deployment of a pipeline's input).
func jointPipelines(ins []PlanInput) []milp.JointPipeline {
	out := make([]milp.JointPipeline, len(ins))
	for p, in := range ins {
		in.Nodes, in.Current = nil, nil
		prob := Problem(in, milp.Params{})
		out[p] = milp.JointPipeline{Name: in.Job, Weight: weightOf(in), MinThroughput: in.MinThroughput, Operators: prob.Operators}
	}
	return out
}

// milpNodes translates the inventory into the MILP's nodes.
func milpNodes(nodes []fsm.Node) []milp.Node {
	return Problem(PlanInput{Nodes: nodes}, milp.Params{}).Nodes
}

// Shares solves the pooled joint model of ins on nodes (the whole inventory less what is
// not a managed pipeline) under obj and returns each pipeline's share. ins' own Nodes are
// ignored. Errors wrap milp.ErrJointInfeasible when the minimums do not fit.
func Shares(ctx context.Context, ins []PlanInput, nodes []fsm.Node, obj milp.Objective, opts milp.Options) (Joint, error) {
	pipes := jointPipelines(ins)
	js, err := milp.SolveJoint(ctx, pipes, milpNodes(nodes), obj, opts)
	if err != nil {
		return Joint{}, err
	}
	out := Joint{Shares: map[string]Share{}, Objective: js.Objective, Bound: js.Bound, SolveTime: js.SolveTime}
	for p, jp := range pipes {
		sh := Share{Throughput: js.Throughput[p], Scale: js.Scale[p], Instances: map[string]int{}}
		quota := make([]int, len(js.Classes))
		for i, o := range jp.Operators {
			sh.Instances[o.Name] = js.Instances[p][i]
			for c, k := range js.OnClass[p][i] {
				quota[c] += k * o.GPUs
			}
		}
		for c, d := range js.Classes {
			if quota[c] > 0 {
				sh.Devices = append(sh.Devices, fsm.Device{Vendor: d.Vendor, Model: d.Model, MemoryMB: int(d.MemMB), Count: quota[c]})
			}
		}
		out.Shares[jp.Name] = sh
	}
	return out, nil
}

// RestrictFor returns in with, of every accelerator class, only as many devices of its
// nodes visible as s holds of the class (none of a class it holds none of): the quota is
// taken first from the nodes where in's accelerator operators already run (no needless
// move), then from the nodes with the most cores left (an accelerator instance needs cores
// too), then by name. Nodes without accelerators are unchanged.
func RestrictFor(in PlanInput, s Share) PlanInput {
	runs := map[string]bool{}
	for _, o := range in.Operators {
		if o.GPUs == 0 {
			continue
		}
		for n, pl := range in.Current[o.Name] {
			if pl.Total() > 0 {
				runs[n] = true
			}
		}
	}
	in.Nodes = restrict(in.Nodes, s, runs)
	return in
}

// restrict is RestrictFor on nodes, preferring the nodes in first.
func restrict(nodes []fsm.Node, s Share, first map[string]bool) []fsm.Node {
	out := slices.Clone(nodes)
	order := make([]int, len(out))
	for k := range order {
		order[k] = k
	}
	sort.SliceStable(order, func(a, b int) bool {
		if fa, fb := first[out[order[a]].Name], first[out[order[b]].Name]; fa != fb {
			return fa
		}
		if out[order[a]].CPU != out[order[b]].CPU {
			return out[order[a]].CPU > out[order[b]].CPU
		}
		return out[order[a]].Name < out[order[b]].Name
	})
	left := map[fsm.Device]int{}
	for _, d := range s.Devices {
		left[classKey(d)] += d.Count
	}
	for _, k := range order {
		classes := deviceClasses(out[k])
		if len(classes) == 0 {
			continue
		}
		gpus := 0
		for c, d := range classes {
			key := classKey(d)
			take := min(d.Count, left[key])
			left[key] -= take
			classes[c].Count = take
			gpus += take
		}
		if len(out[k].Devices.List()) > 0 {
			out[k].Devices = fsm.MakeDevices(classes...)
		}
		out[k].GPUs = gpus
	}
	return out
}

// classKey identifies d's class across nodes: vendor (DefaultGPUVendor when unnamed),
// model and memory.
func classKey(d fsm.Device) fsm.Device {
	return fsm.Device{Vendor: fsm.VendorOf(d.Vendor), Model: d.Model, MemoryMB: d.MemoryMB}
}

// Capped returns in with every operator's MaxInstances lowered to its share's instances,
// never below the operator's MinInstances or the instances already on its candidate
// config (they are never rolled back). An operator the share does not name is unchanged.
func Capped(in PlanInput, s Share) PlanInput {
	ops := make([]OperatorInput, len(in.Operators))
	copy(ops, in.Operators)
	for i := range ops {
		k, ok := s.Instances[ops[i].Name]
		if !ok {
			continue
		}
		onCandidate := 0
		for _, pl := range in.Current[ops[i].Name] {
			onCandidate += pl.Candidate
		}
		k = max(k, ops[i].MinInstances, onCandidate, 1)
		if ops[i].MaxInstances == 0 || k < ops[i].MaxInstances {
			ops[i].MaxInstances = k
		}
	}
	in.Operators = ops
	return in
}

// JointPlan is a joint round's placed plans.
type JointPlan struct {
	Joint
	// Plans per pipeline (job); a pipeline that got no plan is missing.
	Plans map[string]Plan
	// Errors per pipeline that got no plan.
	Errors map[string]error
	// Value is the objective of the placed plans' throughputs (milp.Value); Gap is
	// (Bound - Value) / Bound.
	Value, Gap float64
}

// PlanJoint plans ins together on nodes: the pooled joint model decides every pipeline's
// share (Shares); then, by weight (highest first, then job name), each pipeline is planned
// by s on what the pipelines before it left, capped at its share (Capped) and shown only
// its share's accelerators (RestrictFor); then, in the
// same order, each is planned again without the cap on what all the others hold, which
// only takes what packing left free. When the placed plans miss the pooled bound by more
// than the MILP's relative gap, the pipelines that fell short of their shares are placed
// first in a second attempt, and the better attempt is kept. This is the order the live planner's rounds converge
// to (planner/loop.go plans each pipeline on the residual of the others' decisions, capped
// at its share). ins' Current deployments are kept as they are; their Nodes are ignored.
func PlanJoint(ctx context.Context, s Scheduler, ins []PlanInput, nodes []fsm.Node, obj milp.Objective, opts milp.Options) (JointPlan, error) {
	j, err := Shares(ctx, ins, nodes, obj, opts)
	if err != nil {
		return JointPlan{}, err
	}
	order := make([]int, len(ins))
	for p := range order {
		order[p] = p
	}
	sort.SliceStable(order, func(a, b int) bool {
		wa, wb := weightOf(ins[order[a]]), weightOf(ins[order[b]])
		if wa != wb {
			return wa > wb
		}
		return ins[order[a]].Job < ins[order[b]].Job
	})
	out := placeShares(ctx, s, ins, nodes, j, order, obj)
	relGap := opts.RelGap
	if relGap <= 0 {
		relGap = milp.DefaultRelGap
	}
	if out.Gap > relGap && ctx.Err() == nil {
		// Packing left some pipelines short of their shares: once more with those first.
		var short, rest []int
		for _, p := range order {
			if out.Plans[ins[p].Job].Throughput < j.Shares[ins[p].Job].Throughput*(1-1e-6) {
				short = append(short, p)
			} else {
				rest = append(rest, p)
			}
		}
		if again := placeShares(ctx, s, ins, nodes, j, append(short, rest...), obj); again.Value > out.Value {
			out = again
		}
	}
	return out, nil
}

// placeShares plans the pipelines of ins in order, each capped at its share of j and
// restricted to its share's accelerators on what those before it hold, then fills what
// packing left free in the same order (PlanJoint).
func placeShares(ctx context.Context, s Scheduler, ins []PlanInput, nodes []fsm.Node, j Joint, order []int, obj milp.Objective) JointPlan {
	out := JointPlan{Joint: j, Plans: map[string]Plan{}, Errors: map[string]error{}}
	holdings := func(skip string) []Holding {
		var hs []Holding
		for _, p := range order {
			if pl, ok := out.Plans[ins[p].Job]; ok && ins[p].Job != skip {
				hs = append(hs, HoldingOf(ins[p], pl))
			}
		}
		return hs
	}
	plan := func(in PlanInput, restrict *Share) (Plan, error) {
		others := holdings(in.Job)
		in.Nodes, in.Pressure, in.EgressUsed = Residual(nodes, others), Pressure(others), EgressUse(others)
		if restrict != nil {
			in = RestrictFor(in, *restrict)
		}
		if err := in.Validate(); err != nil {
			return Plan{}, err
		}
		return s.Plan(ctx, in)
	}
	for _, p := range order {
		sh := j.Shares[ins[p].Job]
		in := Capped(ins[p], sh)
		pl, err := plan(in, &sh)
		if err != nil || pl.Throughput < sh.Throughput*(1-1e-6) {
			// packing left the share's devices where cores ran out: any device left
			if free, ferr := plan(in, nil); ferr == nil && (err != nil || free.Throughput > pl.Throughput) {
				pl, err = free, nil
			}
		}
		if err != nil {
			out.Errors[in.Job] = fmt.Errorf("pipeline %q on its share: %w", in.Job, err)
			continue
		}
		out.Plans[in.Job] = pl
	}
	for _, p := range order {
		prev, ok := out.Plans[ins[p].Job]
		if !ok || !canGrow(ins[p], prev, Residual(nodes, holdings(""))) {
			continue
		}
		if pl, err := plan(ins[p], nil); err == nil && pl.Throughput > prev.Throughput {
			out.Plans[ins[p].Job] = pl
		}
	}
	ws, sc, T := make([]float64, len(ins)), make([]float64, len(ins)), make([]float64, len(ins))
	for p, in := range ins {
		ws[p], sc[p] = weightOf(in), j.Shares[in.Job].Scale
		T[p] = out.Plans[in.Job].Throughput
	}
	out.Value = milp.Value(obj, ws, sc, T)
	if out.Bound > 0 && !math.IsInf(out.Bound, 0) {
		out.Gap = math.Max(0, (out.Bound-out.Value)/out.Bound)
	} else {
		out.Gap = math.Inf(1)
	}
	return out
}

// canGrow reports whether one more instance of every operator that binds pl's throughput
// fits on some node of free (what no pipeline holds): without that, planning the pipeline
// again on what packing left cannot raise its throughput (short of moving its own
// instances, which the fill does not try).
func canGrow(in PlanInput, pl Plan, free []fsm.Node) bool {
	amps := in.Amplifications()
	led := NewLedger(free)
	for i, o := range in.Operators {
		n := 0
		for _, p := range pl.Targets[o.Name] {
			n += p.Total()
		}
		if float64(n)*o.Capacity/amps[i] > pl.Throughput*(1+1e-9) {
			continue // does not bind
		}
		if o.MaxInstances > 0 && n >= o.MaxInstances {
			return false // binds at its scaling policy's max
		}
		if !slices.ContainsFunc(free, func(nd fsm.Node) bool { return led.Fits(o.Operator, nd.Name, 1) }) {
			return false
		}
	}
	return true
}

// HoldingOf is what plan pl holds for the pipeline of in (its operators' resources and
// targets), for Residual and Oversubscribed.
func HoldingOf(in PlanInput, pl Plan) Holding {
	p := &fsm.Pipeline{Job: in.Job}
	for _, o := range in.Operators {
		p.Operators = append(p.Operators, o.Operator)
	}
	t := map[string]fsm.OpTarget{}
	for op, nodes := range pl.Targets {
		t[op] = fsm.OpTarget{Nodes: nodes}
	}
	return Holding{Pipeline: p, Targets: t, Egress: pl.Egress}
}
