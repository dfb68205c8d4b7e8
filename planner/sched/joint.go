package sched

import (
	"context"
	"fmt"
	"maps"
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
	// Link is the share of every node's egress the pipeline keeps a claim on until it
	// has a decision (LinkClaims): its part of the traffic all shares would send if no
	// operator shared a node. 0 when that traffic fits the inventory's links, which then
	// cannot bind across pipelines.
	Link float64
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
	linkShares(out.Shares, pipes, nodes)
	return out, nil
}

// linkShares sets every share's Link: the pooled model ignores the network, so a
// pipeline planned first could route over every link and leave a pipeline planned later
// none to reach its accelerators. Each pipeline's part of the links is its part of the
// traffic of the shares' worst case (every operator's output crossing a node boundary),
// set only when that traffic exceeds the inventory's total egress.
func linkShares(shares map[string]Share, pipes []milp.JointPipeline, nodes []fsm.Node) {
	demand := make([]float64, len(pipes))
	var total, links float64
	for p, jp := range pipes {
		perRecord := 0.0
		for i := 0; i+1 < len(jp.Operators); i++ {
			perRecord += jp.Operators[i+1].Amplification * jp.Operators[i].OutputBytes
		}
		demand[p] = shares[jp.Name].Throughput * perRecord
		total += demand[p]
	}
	for _, n := range nodes {
		links += egressCap(n)
	}
	if total <= links || len(pipes) < 2 {
		return
	}
	for p, jp := range pipes {
		sh := shares[jp.Name]
		sh.Link = demand[p] / total
		shares[jp.Name] = sh
	}
}

// planned returns the jobs of holdings (the pipelines with a decision in force).
func planned(holdings []Holding) map[string]bool {
	out := map[string]bool{}
	for _, h := range holdings {
		if h.Pipeline != nil {
			out[h.Pipeline.Job] = true
		}
	}
	return out
}

// LinkClaims returns, per node of nodes, the egress (bytes/s) that pipelines other than
// job hold or claim under the joint round's shares: what their decisions (others) route
// out of the node, and, of every pipeline of the round without a decision yet, its
// share's Link of the node's egress. It is the PlanInput.EgressUsed of job planned on
// its share: the pipeline planned first leaves the links owed to those planned after it,
// while a pipeline that is planned keeps only what it routes. nil when nothing is routed
// or claimed.
func LinkClaims(nodes []fsm.Node, shares map[string]Share, others []Holding, job string) map[string]float64 {
	done := planned(others)
	out := EgressUse(others)
	for _, q := range slices.Sorted(maps.Keys(shares)) {
		if sh := shares[q]; q != job && sh.Link > 0 && !done[q] {
			for _, n := range nodes {
				if out == nil {
					out = map[string]float64{}
				}
				out[n.Name] += sh.Link * egressCap(n)
			}
		}
	}
	return out
}

// classCounts sums nodes' accelerators per class (classKey).
func classCounts(nodes []fsm.Node) map[fsm.Device]int {
	out := map[fsm.Device]int{}
	for _, n := range nodes {
		for _, d := range deviceClasses(n) {
			out[classKey(d)] += d.Count
		}
	}
	return out
}

// Unclaimed returns what pipelines other than in's leave of nodes under the joint
// round's shares: the residual of their holdings (others), with, of every accelerator
// class, the share's devices of every pipeline without a decision yet hidden. It is where
// in is planned when its own share's devices do not carry it (they sit where cores ran
// out): any device but those owed to a pipeline planned after it.
func Unclaimed(in PlanInput, nodes []fsm.Node, shares map[string]Share, others []Holding) []fsm.Node {
	done := planned(others)
	claimed := map[fsm.Device]int{}
	for q, sh := range shares {
		if q != in.Job && !done[q] {
			for _, d := range sh.Devices {
				claimed[classKey(d)] += d.Count
			}
		}
	}
	residual := Residual(nodes, others)
	if len(claimed) == 0 {
		return residual
	}
	var visible Share
	for k, free := range classCounts(residual) {
		if c := free - claimed[k]; c > 0 {
			k.Count = c
			visible.Devices = append(visible.Devices, k)
		}
	}
	return restrict(residual, visible, running(in))
}

// Beside returns in planned beside others (the other pipelines' holdings) on nodes (the
// inventory), first come, first served: on the residual of others' cores, memory and
// devices, with their contention pressure and the egress they route.
func Beside(in PlanInput, nodes []fsm.Node, others []Holding) PlanInput {
	in.Nodes, in.Pressure, in.EgressUsed = Residual(nodes, others), Pressure(others), EgressUse(others)
	return in
}

// OnShare returns in planned on its joint share beside others (the other pipelines'
// holdings) on nodes (the inventory): on the residual of others, capped at the share's
// instances (Capped), shown only its share's accelerators (RestrictFor), or, when those
// leave it without a valid input, the devices no other pipeline claims (Unclaimed), and
// the links others route over or claim taken (LinkClaims). The live loop and PlanJoint
// plan a pipeline on its share through it.
func OnShare(in PlanInput, nodes []fsm.Node, shares map[string]Share, others []Holding) PlanInput {
	sh := shares[in.Job]
	in = Beside(in, nodes, others)
	in.EgressUsed = LinkClaims(nodes, shares, others, in.Job)
	in = RestrictFor(Capped(in, sh), sh)
	if in.Validate() != nil {
		// the share's quotas sit where others' instances still run: any device unclaimed
		in.Nodes = Unclaimed(in, nodes, shares, others)
	}
	return in
}

// RestrictFor returns in with, of every accelerator class, only as many devices of its
// nodes visible as s holds of the class (none of a class it holds none of): the quota is
// taken first from the nodes where in's accelerator operators already run (no needless
// move), then from the nodes with the most cores left (an accelerator instance needs cores
// too), then by name. Nodes without accelerators are unchanged.
func RestrictFor(in PlanInput, s Share) PlanInput {
	in.Nodes = restrict(in.Nodes, s, running(in))
	return in
}

// running returns the nodes where in's accelerator operators run now.
func running(in PlanInput) map[string]bool {
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
	return runs
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
// by s on what the pipelines before it left, on its share (OnShare: capped at it, shown
// its accelerators, with the devices and links owed to the pipelines after it taken);
// then, in the same order, each is planned again without the cap on what all the others
// hold, which only takes what packing left free. When the placed plans miss the pooled
// bound by more than the MILP's relative gap, the pipelines that fell short of their
// shares are placed first in a second attempt, then, if still short, the weight order is
// tried without the claims of later pipelines, and the best attempt is kept. This is the
// order the live planner's rounds converge to (planner/loop.go plans each pipeline on the
// residual of the others' decisions through OnShare). ins' Current deployments are kept
// as they are; their Nodes are ignored.
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
	out := placeShares(ctx, s, ins, nodes, j, order, obj, true)
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
		if again := placeShares(ctx, s, ins, nodes, j, append(short, rest...), obj, true); again.Value > out.Value {
			out = again
		}
	}
	if out.Gap > relGap && ctx.Err() == nil {
		// The shares' quotas are pooled, so a pipeline planned later may not need all its
		// share's devices or links: once more without the claims, as the live loop plans
		// once every pipeline has a decision.
		if again := placeShares(ctx, s, ins, nodes, j, order, obj, false); again.Value > out.Value {
			out = again
		}
	}
	return out, nil
}

// placeShares plans the pipelines of ins in order, each capped at its share of j and
// restricted to its share's accelerators on what those before it hold (with the claims of
// those after it when claims, OnShare), then fills what packing left free in the same
// order (PlanJoint).
func placeShares(ctx context.Context, s Scheduler, ins []PlanInput, nodes []fsm.Node, j Joint, order []int, obj milp.Objective, claims bool) JointPlan {
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
	solve := func(in PlanInput) (Plan, error) {
		if err := in.Validate(); err != nil {
			return Plan{}, err
		}
		return s.Plan(ctx, in)
	}
	for _, p := range order {
		job := ins[p].Job
		sh, others := j.Shares[job], holdings(job)
		shares := j.Shares
		if !claims {
			shares = map[string]Share{job: sh}
		}
		in := OnShare(ins[p], nodes, shares, others)
		pl, err := solve(in)
		if err != nil || pl.Throughput < sh.Throughput*(1-1e-6) {
			// packing left the share's devices where cores ran out: any device unclaimed
			// (when that shows more than the share did)
			if free := Unclaimed(in, nodes, shares, others); !maps.Equal(classCounts(free), classCounts(in.Nodes)) {
				in.Nodes = free
				if fp, ferr := solve(in); ferr == nil && (err != nil || fp.Throughput > pl.Throughput) {
					pl, err = fp, nil
				}
			}
		}
		if err != nil {
			out.Errors[job] = fmt.Errorf("pipeline %q on its share: %w", job, err)
			continue
		}
		out.Plans[job] = pl
	}
	for _, p := range order {
		prev, ok := out.Plans[ins[p].Job]
		if !ok || !canGrow(ins[p], prev, Residual(nodes, holdings(""))) {
			continue
		}
		// every pipeline has its plan: grow into what packing left free, uncapped
		if pl, err := solve(Beside(ins[p], nodes, holdings(ins[p].Job))); err == nil && pl.Throughput > prev.Throughput {
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
