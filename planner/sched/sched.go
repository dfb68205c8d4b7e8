// Package sched defines the planner's scheduler interface and two implementations: an
// adapter to the Trident MILP (strategy/milp) and a simple proportional fallback. It is
// free of Nomad and raft types.
package sched

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/trident-sched/trident/planner/fsm"
)

// OperatorInput is one operator of a scheduling round.
type OperatorInput struct {
	fsm.Operator
	// Capacity is the estimated unit throughput on the current config (records/s, > 0).
	Capacity float64
	// Candidate is the pending candidate config, or nil.
	Candidate *fsm.Candidate
	// Backlog is the operator's input backlog in records (0: none or unknown).
	Backlog float64
}

// PlanInput is one scheduling round of one pipeline.
type PlanInput struct {
	// Job is the pipeline.
	Job string
	// Operators in pipeline order.
	Operators []OperatorInput
	// Nodes sorted by name.
	Nodes []fsm.Node
	// Current is the committed deployment: operator -> node -> placement (nil at startup).
	// Candidate counts are already-transitioned instances; they are never rolled back.
	Current map[string]map[string]fsm.Placement
	// MaxBatch caps transitions per operator in one round (0 = no cap).
	MaxBatch int
	// CatchUpSec, when positive, asks for every operator's backlog to be processed within
	// this many seconds on top of the steady flow (the Flink autoscaler's catch-up
	// duration): operator i must serve A_i·T + B_i/CatchUpSec. The MILP's demand is linear
	// in T, so the backlog enters as extra amplification at the reference throughput,
	// A_i + B_i/(CatchUpSec·RefThroughput) — exact when the throughput does not change
	// between rounds, and conservative when it rises.
	CatchUpSec float64
	// RefThroughput is the reference throughput of the catch-up term (the previous
	// decision's planned throughput, records/s of pipeline input); 0 disables catch-up.
	RefThroughput float64
	// Weight is the pipeline's priority weight in a joint round (0: 1).
	Weight float64
	// MinThroughput is the pipeline's guaranteed throughput in a joint round (0: only
	// its operators' minimum instances).
	MinThroughput float64
	// Pressure is node -> contended resource kind -> the share of it the other pipelines'
	// instances use at full rate (sched.Pressure of their holdings; nil: none). The MILP
	// leaves this pipeline's contending operators only the rest (trident_contention).
	Pressure map[string]map[string]float64
	// EgressUsed is node -> the egress (bytes/s) the other pipelines' decisions route out
	// of it (sched.EgressUse of their holdings; nil: none). The MILP plans this pipeline on
	// each node's egress less this, so pipelines sharing a node share its link.
	EgressUsed map[string]float64
}

// Plan is a scheduler's target.
type Plan struct {
	// Targets maps operator -> node -> placement (zero entries may be omitted).
	Targets map[string]map[string]fsm.Placement
	// Throughput is the planned pipeline throughput (records/s of pipeline input).
	Throughput float64
	// Source names the scheduler.
	Source string
	// Reason explains the plan.
	Reason string
	// Egress is node -> the cross-node traffic the plan routes out of it at Throughput
	// (bytes/s; nodes without any omitted), and Routed says the scheduler routed the plan
	// (false for Proportional: its Egress is unknown).
	Egress map[string]float64
	Routed bool
}

// Scheduler computes a target deployment.
type Scheduler interface {
	// Plan blocks until a plan is found or ctx is done.
	Plan(ctx context.Context, in PlanInput) (Plan, error)
}

// maxListed is how many operators an error lists before summarising the rest.
const maxListed = 5

// ErrImpossible marks inputs no deployment can satisfy (e.g. an operator fits no node).
var ErrImpossible = errors.New("impossible resources")

// CheckResources returns an error wrapping ErrImpossible, naming the operator and the
// field, when an operator cannot run on any node, or naming the resource when the
// operators' minimum instances together exceed the inventory. An empty inventory passes
// (unknown).
func CheckResources(ops []fsm.Operator, nodes []fsm.Node) error {
	if len(nodes) == 0 {
		return nil
	}
	var accel []fsm.Node // nodes with accelerators: the only ones an accelerator operator can use
	for _, n := range nodes {
		if len(deviceClasses(n)) > 0 {
			accel = append(accel, n)
		}
	}
	for _, o := range ops {
		var why func() string
		refused := map[string]int{} // reason -> nodes refusing o for it
		ok := false
		nodes := nodes
		if o.GPUs > 0 && len(accel) > 0 {
			nodes = accel
		}
		for _, n := range nodes {
			// the reason of the last node that refused is spelled out only when no node
			// takes the operator (maxOf and maxClass read every node's device classes)
			switch {
			case o.CPU > n.CPU:
				refused["too few cores"]++
				why = func() string {
					return fmt.Sprintf("trident_cpu=%v exceeds every node (largest %v)", o.CPU, maxOf(nodes, func(n fsm.Node) float64 { return n.CPU }))
				}
			case o.MemoryMB > n.MemoryMB:
				refused["too little memory"]++
				why = func() string {
					return fmt.Sprintf("trident_memory_mb=%d exceeds every node (largest %v)", o.MemoryMB, maxOf(nodes, func(n fsm.Node) float64 { return float64(n.MemoryMB) }))
				}
			case o.GPUs > 0 && !hasClass(n, func(d fsm.Device) bool { return d.Count >= o.GPUs }):
				refused["too few GPUs"]++
				why = func() string {
					return fmt.Sprintf("trident_gpus=%d exceeds every node (largest %v)", o.GPUs, maxClass(nodes, func(d fsm.Device) int { return d.Count }))
				}
			case o.GPUs > 0 && !hasClass(n, func(d fsm.Device) bool { return d.Count >= o.GPUs && d.MemoryMB >= o.GPUMemoryMB }):
				refused["too little GPU memory"]++
				why = func() string {
					return fmt.Sprintf("trident_gpu_memory_mb=%d exceeds every node's GPU memory (largest %v)", o.GPUMemoryMB, maxClass(nodes, func(d fsm.Device) int { return d.MemoryMB }))
				}
			case o.GPUs > 0 && !hasClass(n, func(d fsm.Device) bool { return d.Count >= o.GPUs && acceptsDevice(o, d) }):
				refused["no accepted GPU model or vendor"]++
				why = func() string { return fmt.Sprintf("no node has %d %s", o.GPUs, deviceNeed(o)) }
			default:
				ok = true
			}
			if ok {
				break
			}
		}
		if !ok && len(refused) > 1 {
			// no single resource is short everywhere: say what each node lacks
			parts := make([]string, 0, len(refused))
			for _, r := range slices.Sorted(maps.Keys(refused)) {
				parts = append(parts, fmt.Sprintf("%s on %d", r, refused[r]))
			}
			why = func() string {
				need, of := fmt.Sprintf("trident_cpu=%v and trident_memory_mb=%d", o.CPU, o.MemoryMB), "nodes"
				if o.GPUs > 0 {
					need += fmt.Sprintf(" with %d %s", o.GPUs, deviceNeed(o))
					of = "nodes with accelerators"
				}
				return fmt.Sprintf("no node has %s at once (of %d %s: %s)", need, len(nodes), of, strings.Join(parts, ", "))
			}
		}
		if !ok {
			return fmt.Errorf("%w: operator %q: %s", ErrImpossible, o.Name, why())
		}
	}
	return checkMinimums(ops, nodes)
}

// checkMinimums returns an error wrapping ErrImpossible when the operators' minimum
// instances (each runs at least one, or its scaling policy's min) together need more CPU,
// memory or GPUs than the whole inventory has. Every pipeline is planned on the whole
// inventory, so no plan exists then; a pooled fit can still fail to pack, which the
// schedulers report. GPUs are counted per set of device classes: the operators that accept
// only classes in the set (by memory and model) must fit its devices.
func checkMinimums(ops []fsm.Operator, nodes []fsm.Node) error {
	type term struct {
		name string
		n    int
		per  float64
	}
	num := func(x float64) string { return strconv.FormatFloat(math.Round(x*100)/100, 'f', -1, 64) }
	short := func(what string, need, have float64, terms []term) error {
		// The largest needs first, and only a few of them: the error must stay short
		// for a pipeline of hundreds of operators.
		sort.SliceStable(terms, func(i, j int) bool {
			return float64(terms[i].n)*terms[i].per > float64(terms[j].n)*terms[j].per
		})
		parts := make([]string, len(terms))
		for i, t := range terms {
			parts[i] = fmt.Sprintf("%s %d × %s", t.name, t.n, num(t.per))
		}
		return fmt.Errorf("%w: the operators' minimum instances need %s %s (%s) but the inventory has %s; "+
			"every operator runs at least one instance, or its scaling policy's min: lower a min or add nodes",
			ErrImpossible, num(need), what, fsm.ShortList(parts, maxListed), num(have))
	}
	pooled := func(what string, need func(fsm.Operator) float64, have func(fsm.Node) float64) error {
		var sum, total float64
		var terms []term
		for _, o := range ops {
			if v := need(o); v > 0 {
				k := max(1, o.MinInstances)
				sum += float64(k) * v
				terms = append(terms, term{o.Name, k, v})
			}
		}
		for _, n := range nodes {
			total += have(n)
		}
		if sum > total+1e-9 {
			return short(what, sum, total, terms)
		}
		return nil
	}
	if err := pooled("cores", func(o fsm.Operator) float64 { return o.CPU }, func(n fsm.Node) float64 { return n.CPU }); err != nil {
		return err
	}
	if err := pooled("MB of memory", func(o fsm.Operator) float64 { return float64(o.MemoryMB) }, func(n fsm.Node) float64 { return float64(n.MemoryMB) }); err != nil {
		return err
	}
	// Accelerators per set of device classes some operator accepts, the most demanding
	// first: the first set short of devices is reported.
	for _, g := range deviceGroups(ops, nodes) {
		var need float64
		var terms []term
		for _, o := range g.ops {
			k := max(1, o.MinInstances)
			need += float64(k * o.GPUs)
			terms = append(terms, term{o.Name, k, float64(o.GPUs)})
		}
		if need > float64(g.devices) {
			return short(g.what, need, float64(g.devices), terms)
		}
	}
	return nil
}

// hasClass reports whether some accelerator class of n satisfies ok.
func hasClass(n fsm.Node, ok func(fsm.Device) bool) bool {
	return slices.ContainsFunc(deviceClasses(n), ok)
}

// maxClass returns the largest f over every node's accelerator classes.
func maxClass(nodes []fsm.Node, f func(fsm.Device) int) int {
	m := 0
	for _, n := range nodes {
		for _, d := range deviceClasses(n) {
			m = max(m, f(d))
		}
	}
	return m
}

func maxOf(nodes []fsm.Node, f func(fsm.Node) float64) float64 {
	m := 0.0
	for _, n := range nodes {
		m = math.Max(m, f(n))
	}
	return m
}

// Validate checks an input's numbers.
func (in PlanInput) Validate() error {
	if len(in.Operators) == 0 {
		return fmt.Errorf("pipeline %q: no operators", in.Job)
	}
	if len(in.Nodes) == 0 {
		return fmt.Errorf("pipeline %q: empty cluster inventory", in.Job)
	}
	for _, o := range in.Operators {
		if math.IsNaN(o.Capacity) || math.IsInf(o.Capacity, 0) || o.Capacity <= 0 {
			return fmt.Errorf("operator %q: capacity=%v must be a positive finite number", o.Name, o.Capacity)
		}
		if c := o.Candidate; c != nil && (math.IsNaN(c.Capacity) || math.IsInf(c.Capacity, 0) || c.Capacity < 0) {
			return fmt.Errorf("operator %q: candidate capacity=%v must be a finite number >= 0", o.Name, c.Capacity)
		}
	}
	ops := make([]fsm.Operator, len(in.Operators))
	for i, o := range in.Operators {
		ops[i] = o.Operator
	}
	return CheckResources(ops, in.Nodes)
}

// Proportional is the fallback scheduler: it sizes every operator in proportion to the
// work it must do (amplified input rate over unit capacity), bisects on the throughput
// the cluster can host, and places instances first-fit, preferring nodes where the
// operator already runs. Already-transitioned instances stay where they are (even above
// an operator's MaxInstances: they are never rolled back). When an
// operator's candidate config is faster after discounting its cold start over WindowSec
// (Eq. 11 of the paper), up to MaxBatch further instances switch to it in place.
type Proportional struct {
	// WindowSec amortises a transition's cold start (default 300 s).
	WindowSec float64
}

// Plan implements Scheduler.
func (pr Proportional) Plan(ctx context.Context, in PlanInput) (Plan, error) {
	if err := in.Validate(); err != nil {
		return Plan{}, err
	}
	amp := in.Amplifications()
	try := func(T float64) (map[string]map[string]fsm.Placement, bool) {
		need := make([]int, len(in.Operators))
		for i, o := range in.Operators {
			need[i] = max(1, o.MinInstances, int(math.Ceil(T*amp[i]/o.Capacity-1e-9)))
			if !o.Admits(need[i]) { // need is at least the min: only the max can refuse it
				return nil, false // the scaling policy's max caps the operator below T
			}
		}
		return pack(in, need)
	}
	lo, hi := 0.0, 1.0
	if _, ok := try(lo); !ok {
		return Plan{}, fmt.Errorf("%w: first-fit could not place the minimum instances of every operator (one, or its scaling policy's min)", ErrImpossible)
	}
	for {
		if _, ok := try(hi); !ok {
			break
		}
		lo, hi = hi, hi*2
		if hi > 1e12 {
			break
		}
	}
	for it := 0; it < 60 && hi-lo > 1e-6*hi; it++ {
		if ctx.Err() != nil {
			return Plan{}, ctx.Err()
		}
		mid := (lo + hi) / 2
		if _, ok := try(mid); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	best, _ := try(lo)
	w := pr.WindowSec
	if w <= 0 {
		w = 300
	}
	for _, o := range in.Operators {
		c := o.Candidate
		if c == nil || c.Capacity*math.Max(0, 1-c.ColdStartSec/w) <= o.Capacity {
			continue
		}
		budget := in.MaxBatch
		if budget <= 0 {
			budget = math.MaxInt
		}
		for _, n := range in.Nodes {
			pl := best[o.Name][n.Name]
			k := min(pl.Current, budget)
			if k > 0 {
				pl.Current -= k
				pl.Candidate += k
				best[o.Name][n.Name] = pl
				budget -= k
			}
		}
	}
	// Report the throughput the placed instances actually support.
	T := math.Inf(1)
	for i, o := range in.Operators {
		c := 0.0
		for _, pl := range best[o.Name] {
			c += float64(pl.Current) * o.Capacity
			if o.Candidate != nil {
				c += float64(pl.Candidate) * o.Candidate.Capacity
			} else {
				c += float64(pl.Candidate) * o.Capacity
			}
		}
		T = math.Min(T, c/amp[i])
	}
	return Plan{Targets: best, Throughput: T, Source: "proportional",
		Reason: fmt.Sprintf("proportional: %.3g records/s", T)}, nil
}

// pack places need[i] instances of every operator, keeping already-transitioned instances
// pinned. It reports false when they do not fit.
func pack(in PlanInput, need []int) (map[string]map[string]fsm.Placement, bool) {
	// room is a node's free cores and memory and its accelerator classes with their free
	// devices; an instance takes its GPUs from one class it accepts, the one with the
	// least memory per device that has room.
	type room struct {
		cpu, mem float64
		dev      []fsm.Device
	}
	free := map[string]*room{}
	for _, n := range in.Nodes {
		free[n.Name] = &room{n.CPU, float64(n.MemoryMB), deviceClasses(n)}
	}
	out := map[string]map[string]fsm.Placement{}
	take := func(o OperatorInput, node string) bool {
		r := free[node]
		if r == nil || r.cpu < o.CPU-1e-9 || r.mem < float64(o.MemoryMB) {
			return false
		}
		c := -1
		if o.GPUs > 0 {
			for k, d := range r.dev {
				if d.Count >= o.GPUs && acceptsDevice(o.Operator, d) && (c < 0 || d.MemoryMB < r.dev[c].MemoryMB) {
					c = k
				}
			}
			if c < 0 {
				return false
			}
			r.dev[c].Count -= o.GPUs
		}
		r.cpu -= o.CPU
		r.mem -= float64(o.MemoryMB)
		return true
	}
	// Pinned candidate instances first.
	for i, o := range in.Operators {
		out[o.Name] = map[string]fsm.Placement{}
		for node, pl := range in.Current[o.Name] {
			for k := 0; k < pl.Candidate; k++ {
				if !take(o, node) {
					return nil, false
				}
				p := out[o.Name][node]
				p.Candidate++
				out[o.Name][node] = p
				need[i]--
			}
		}
	}
	// Largest operators first so they find room.
	order := make([]int, len(in.Operators))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		oa, ob := in.Operators[order[a]], in.Operators[order[b]]
		if oa.GPUs != ob.GPUs {
			return oa.GPUs > ob.GPUs
		}
		return oa.CPU > ob.CPU
	})
	for _, i := range order {
		o := in.Operators[i]
		// Prefer nodes where it runs now (keep up to that many), then spread round-robin.
		for _, n := range in.Nodes {
			keep := in.Current[o.Name][n.Name].Current
			for k := 0; k < keep && need[i] > 0 && take(o, n.Name); k++ {
				p := out[o.Name][n.Name]
				p.Current++
				out[o.Name][n.Name] = p
				need[i]--
			}
		}
		for need[i] > 0 {
			placed := false
			for _, n := range in.Nodes {
				if need[i] == 0 {
					break
				}
				if take(o, n.Name) {
					p := out[o.Name][n.Name]
					p.Current++
					out[o.Name][n.Name] = p
					need[i]--
					placed = true
				}
			}
			if !placed {
				return nil, false
			}
		}
	}
	return out, true
}

// Amplifications returns, per operator, the records it must serve per record of pipeline
// input: the cumulative amplification A_i, plus the catch-up term
// B_i/(CatchUpSec·RefThroughput) when catch-up is on (see PlanInput.CatchUpSec).
func (in PlanInput) Amplifications() []float64 {
	amp := make([]float64, len(in.Operators))
	a := 1.0
	for i, o := range in.Operators {
		amp[i] = a
		if in.CatchUpSec > 0 && in.RefThroughput > 0 && o.Backlog > 0 {
			amp[i] += o.Backlog / (in.CatchUpSec * in.RefThroughput)
		}
		a *= o.Amplification
	}
	return amp
}
