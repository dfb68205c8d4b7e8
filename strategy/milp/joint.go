package milp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Objective names how a joint round weighs pipelines against each other.
type Objective string

const (
	// ObjectiveMaxMin maximises the smallest weighted normalised throughput
	// min_p u_p / w_p, then, with that minimum held, the weighted sum of the u_p. A
	// pipeline of weight 2 gets twice the normalised throughput of one of weight 1, and
	// no pipeline is starved while resources it could use go to another: the default for
	// clusters where every pipeline must make progress.
	ObjectiveMaxMin Objective = "maxmin"
	// ObjectiveSum maximises sum_p w_p u_p: the cluster goes where a weighted unit of
	// normalised throughput is cheapest, which may leave a pipeline at its minimum. For
	// clusters that run pipelines for their total output.
	ObjectiveSum Objective = "sum"
)

// ParseObjective returns the objective named s ("" is ObjectiveMaxMin).
func ParseObjective(s string) (Objective, error) {
	switch Objective(s) {
	case "", ObjectiveMaxMin:
		return ObjectiveMaxMin, nil
	case ObjectiveSum:
		return ObjectiveSum, nil
	}
	return "", fmt.Errorf("objective %q: want %q or %q", s, ObjectiveMaxMin, ObjectiveSum)
}

// JointPipeline is one pipeline of a joint round.
type JointPipeline struct {
	// Name identifies the pipeline.
	Name string
	// Weight is the pipeline's priority weight (> 0).
	Weight float64
	// MinThroughput is a guaranteed throughput (records/s of pipeline input) served before
	// any weighted share; 0 guarantees only the operators' minimum instances.
	MinThroughput float64
	// Operators in pipeline order, as in Problem.Operators. An operator with a candidate
	// counts at the better of its two capacities (the bound stays valid whatever the
	// per-pipeline round decides to transition).
	Operators []Operator
}

// JointShares is the joint resource model's answer: each pipeline's share of the
// cluster, pooled (nodes merged, packing and network ignored).
type JointShares struct {
	// Throughput[p] is pipeline p's planned throughput (records/s of its input).
	Throughput []float64
	// Instances[p][i] is the parallelism of operator i of pipeline p in the share: the
	// fewest instances (at least 1 and its MinInstances, at most the model's) that carry
	// Throughput[p] at the better of its two capacities.
	Instances [][]int
	// Classes are the accelerator classes of the cluster, pooled by model and memory
	// (Count summed over nodes).
	Classes []Device
	// OnClass[p][i][c] is how many of Instances[p][i] take their devices from Classes[c]
	// (nil for an operator without accelerators).
	OnClass [][][]int
	// Scale[p] is pipeline p's pooled throughput bound alone on the whole cluster: the
	// unit of its normalised throughput u_p = Throughput[p] / Scale[p].
	Scale []float64
	// Objective is the share's objective value (see Value).
	Objective float64
	// Bound is a proven upper bound on the objective of every joint deployment that fits
	// the nodes (the pooled model relaxes packing, so it also bounds placed plans).
	Bound float64
	// SolveTime is the wall-clock time of the solve.
	SolveTime time.Duration
}

// ErrJointInfeasible marks a joint round whose minimums (every operator's minimum
// instances and every MinThroughput) do not fit the cluster even pooled.
var ErrJointInfeasible = errors.New("the pipelines' minimums do not fit the cluster")

// ErrFitsNoNode marks a Problem with an operator one instance of which fits on no node.
var ErrFitsNoNode = errors.New("fits on no node")

// Value is the objective obj of throughputs, with weights and scales as in a joint round:
// for ObjectiveMaxMin the smallest Throughput[p]/(Scale[p]·w[p]), for ObjectiveSum the
// sum of w[p]·Throughput[p]/Scale[p]. The benchmark and the planner rate placed plans with
// it against JointShares.Bound.
func Value(obj Objective, weights, scale, throughput []float64) float64 {
	if len(throughput) == 0 {
		return 0
	}
	if obj == ObjectiveSum {
		s := 0.0
		for p, t := range throughput {
			s += weights[p] * t / scale[p]
		}
		return s
	}
	m := math.Inf(1)
	for p, t := range throughput {
		m = math.Min(m, t/(scale[p]*weights[p]))
	}
	return m
}

// jointClass is one pooled accelerator class: devices of one model and memory.
type jointClass struct {
	dev   Device
	count int
}

// pooledClasses merges the nodes' device classes by model and memory.
func pooledClasses(nodes []Node) []jointClass {
	idx := map[Device]int{}
	var out []jointClass
	for n := range nodes {
		for _, d := range nodeDevices(&nodes[n]) {
			key := Device{Vendor: d.Vendor, Model: d.Model, MemMB: d.MemMB}
			k, ok := idx[key]
			if !ok {
				k = len(out)
				idx[key] = k
				out = append(out, jointClass{dev: key})
			}
			out[k].count += d.Count
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].dev.Vendor != out[b].dev.Vendor {
			return out[a].dev.Vendor < out[b].dev.Vendor
		}
		if out[a].dev.Model != out[b].dev.Model {
			return out[a].dev.Model < out[b].dev.Model
		}
		return out[a].dev.MemMB < out[b].dev.MemMB
	})
	return out
}

// jointModel is the pooled joint MILP and its column map.
type jointModel struct {
	lp
	T, z    int       // T[p] columns start at T; z is the max-min column (-1 for sum)
	P       [][]int   // P[p][i] parallelism columns
	y       [][][]int // y[p][i][c] instances on class c (-1: not accepted), nil without GPUs
	classes []jointClass
}

// SolveJoint computes every pipeline's share of nodes under obj: one MILP over all
// pipelines with integer parallelism per operator, the pooled CPU and memory of the nodes,
// and the accelerators pooled per model and memory (an instance takes its devices from
// one class it accepts). Its optimum is an upper bound on any joint placement (Bound); the
// shares it returns are what the planner caps each pipeline's round at. It returns an
// error wrapping ErrJointInfeasible when the minimums do not fit.
func SolveJoint(ctx context.Context, pipes []JointPipeline, nodes []Node, obj Objective, opts Options) (*JointShares, error) {
	start := time.Now()
	if opts.RelGap <= 0 {
		opts.RelGap = 1e-4 // small models: solved close to optimal, so Bound is tight
	}
	opts = opts.withDefaults()
	deadline := start.Add(opts.TimeLimit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if len(pipes) == 0 {
		return &JointShares{SolveTime: time.Since(start)}, nil
	}
	res := &JointShares{Throughput: make([]float64, len(pipes)), Instances: make([][]int, len(pipes)), Scale: make([]float64, len(pipes))}
	for p := range pipes {
		jp := &pipes[p]
		if !(jp.Weight > 0) || math.IsInf(jp.Weight, 0) {
			return nil, fmt.Errorf("pipeline %q: weight %v: want a finite number > 0", jp.Name, jp.Weight)
		}
		if jp.MinThroughput < 0 || math.IsNaN(jp.MinThroughput) || math.IsInf(jp.MinThroughput, 0) {
			return nil, fmt.Errorf("pipeline %q: minimum throughput %v: want a finite number >= 0", jp.Name, jp.MinThroughput)
		}
		alone := &Problem{Operators: bestCapacity(jp.Operators), Nodes: nodes}
		q, err := newPrep(alone)
		if errors.Is(err, ErrFitsNoNode) {
			return nil, fmt.Errorf("pipeline %q: %w: %w", jp.Name, ErrJointInfeasible, err)
		}
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: %w", jp.Name, err)
		}
		res.Scale[p] = q.aggregateBound()
		if !(res.Scale[p] > 0) || math.IsInf(res.Scale[p], 0) {
			return nil, fmt.Errorf("pipeline %q: %w (its operators' minimum instances do not fit alone)", jp.Name, ErrJointInfeasible)
		}
		if jp.MinThroughput > res.Scale[p] {
			return nil, fmt.Errorf("pipeline %q: minimum throughput %.4g exceeds what the whole cluster gives it (%.4g): %w", jp.Name, jp.MinThroughput, res.Scale[p], ErrJointInfeasible)
		}
	}
	m := buildJoint(pipes, nodes, res.Scale, obj)
	r := runHiGHS(ctx, &m.lp, nil, opts, deadline)
	if r.err != nil {
		return nil, fmt.Errorf("joint model: %w", r.err)
	}
	if r.status == hsInfeasible {
		return nil, fmt.Errorf("joint model of %d pipelines: %w", len(pipes), ErrJointInfeasible)
	}
	if r.values == nil {
		return nil, fmt.Errorf("joint model: no solution within %v (HiGHS status %d)", opts.TimeLimit, r.status)
	}
	bound := r.dualBound
	if obj != ObjectiveSum {
		// Hold the max-min level, then spend what is left on the weighted sum.
		zStar := r.values[m.z]
		m.colLo[m.z] = zStar * (1 - 1e-7)
		m.cost[m.z] = 0
		for p := range pipes {
			m.cost[m.T+p] = pipes[p].Weight / res.Scale[p]
		}
		first := r.values
		r = runHiGHS(ctx, &m.lp, first, opts, deadline)
		if r.err != nil || r.values == nil {
			r.values = first // the first stage's shares still hold the max-min level
		}
	}
	for _, cl := range m.classes {
		res.Classes = append(res.Classes, Device{Vendor: cl.dev.Vendor, Model: cl.dev.Model, MemMB: cl.dev.MemMB, Count: cl.count})
	}
	res.OnClass = make([][][]int, len(pipes))
	for p := range pipes {
		res.Throughput[p] = r.values[m.T+p]
		res.Instances[p] = make([]int, len(pipes[p].Operators))
		res.OnClass[p] = make([][]int, len(pipes[p].Operators))
		for i, o := range bestCapacity(pipes[p].Operators) {
			need := int(math.Ceil(o.Amplification*res.Throughput[p]/o.Capacity - 1e-9))
			res.Instances[p][i] = min(int(math.Round(r.values[m.P[p][i]])), max(need, 1, o.MinInstances))
			if m.y[p][i] == nil {
				continue
			}
			res.OnClass[p][i] = make([]int, len(m.classes))
			for c, col := range m.y[p][i] {
				if col >= 0 {
					res.OnClass[p][i][c] = int(math.Round(r.values[col]))
				}
			}
		}
	}
	ws := make([]float64, len(pipes))
	for p := range pipes {
		ws[p] = pipes[p].Weight
	}
	res.Objective = Value(obj, ws, res.Scale, res.Throughput)
	res.Bound = math.Max(bound, res.Objective)
	if math.IsNaN(bound) {
		res.Bound = math.Inf(1)
	}
	res.SolveTime = time.Since(start)
	return res, nil
}

// jointContentionRows adds, per contended resource kind some operator declares
// (Operator.Contention), the pooled form of the per-node contention rows summed over the
// pipelines: Σ_p T_p Σ_i (Weight_pi/mu_pi)·A_pi <= Σ_n (1 − Pressure_n), mu at the best
// capacity, as the rest of the joint model (a relaxation of every pipeline's contended
// model, so the joint bound stays valid).
func jointContentionRows(m *jointModel, pipes []JointPipeline, nodes []Node) {
	var kinds []string
	use := map[string][]float64{} // kind -> per pipeline, resource per unit of T
	for p, jp := range pipes {
		for _, o := range bestCapacity(jp.Operators) {
			for _, c := range o.Contention {
				if _, ok := use[c.Kind]; !ok {
					kinds = append(kinds, c.Kind)
					use[c.Kind] = make([]float64, len(pipes))
				}
				use[c.Kind][p] += c.Weight / o.Capacity * o.Amplification
			}
		}
	}
	sort.Strings(kinds)
	for k, kind := range kinds {
		free := 0.0
		for _, nd := range nodes {
			free += math.Max(0, 1-nd.Pressure[kind])
		}
		var idx []int
		var val []float64
		for p, u := range use[kind] {
			if u > 0 {
				idx, val = append(idx, m.T+p), append(val, u)
			}
		}
		m.addRow(fmt.Sprintf("cont_%d", k), math.Inf(-1), free, idx, val)
	}
}

// bestCapacity returns ops with each operator at the better of its current and candidate
// capacities and no candidate (a pooled relaxation that holds whatever the round
// transitions).
func bestCapacity(ops []Operator) []Operator {
	out := make([]Operator, len(ops))
	for i, o := range ops {
		if o.Candidate != nil {
			o.Capacity = math.Max(o.Capacity, o.Candidate.Capacity)
			o.Candidate = nil
		}
		out[i] = o
	}
	return out
}

// buildJoint writes the pooled joint model: columns T_p, z (max-min), P_pi and y_pic
// (instances of a GPU operator on accelerator class c); rows: capacity
// mu_pi·P_pi >= A_pi·T_p, pooled CPU and memory, devices per class, Σ_c y_pic = P_pi, and
// for max-min T_p >= w_p·Scale_p·z; per declared contended resource kind, its pooled row
// (jointContentionRows).
func buildJoint(pipes []JointPipeline, nodes []Node, scale []float64, obj Objective) *jointModel {
	m := &jointModel{z: -1, P: make([][]int, len(pipes)), y: make([][][]int, len(pipes))}
	inf := math.Inf(1)
	m.T = len(m.cost)
	for p, jp := range pipes {
		cost := 0.0
		if obj == ObjectiveSum {
			cost = jp.Weight / scale[p]
		}
		m.addCol(fmt.Sprintf("T_%d", p), cost, jp.MinThroughput, scale[p]*(1+1e-9), false)
	}
	if obj != ObjectiveSum {
		m.z = m.addCol("z", 1, 0, inf, false)
	}
	var poolC, poolM float64
	for n := range nodes {
		poolC += nodes[n].CPU
		poolM += nodes[n].MemMB
	}
	classes := pooledClasses(nodes)
	m.classes = classes
	var cpuIdx, memIdx []int
	var cpuVal, memVal []float64
	classIdx := make([][]int, len(classes))
	classVal := make([][]float64, len(classes))
	for p, jp := range pipes {
		ops := bestCapacity(jp.Operators)
		m.P[p] = make([]int, len(ops))
		m.y[p] = make([][]int, len(ops))
		for i := range ops {
			o := &ops[i]
			hi := inf
			if o.MaxInstances > 0 {
				hi = float64(o.MaxInstances)
			}
			lo := float64(max(1, o.MinInstances))
			col := m.addCol(fmt.Sprintf("P_%d_%d", p, i), 0, lo, hi, true)
			m.P[p][i] = col
			// capacity: mu·P - A·T >= 0
			m.addRow(fmt.Sprintf("cap_%d_%d", p, i), 0, inf, []int{col, m.T + p}, []float64{o.Capacity, -o.Amplification})
			cpuIdx, cpuVal = append(cpuIdx, col), append(cpuVal, o.CPU)
			memIdx, memVal = append(memIdx, col), append(memVal, o.MemMB)
			if o.GPUs == 0 {
				continue
			}
			split := []int{col}
			sval := []float64{-1}
			m.y[p][i] = make([]int, len(classes))
			for c, cl := range classes {
				m.y[p][i][c] = -1
				if !accepts(o, cl.dev) {
					continue
				}
				y := m.addCol(fmt.Sprintf("y_%d_%d_%d", p, i, c), 0, 0, inf, true)
				m.y[p][i][c] = y
				split, sval = append(split, y), append(sval, 1)
				classIdx[c], classVal[c] = append(classIdx[c], y), append(classVal[c], float64(o.GPUs))
			}
			// every instance takes its devices from one class it accepts
			m.addRow(fmt.Sprintf("split_%d_%d", p, i), 0, 0, split, sval)
		}
		if m.z >= 0 {
			m.addRow(fmt.Sprintf("share_%d", p), 0, inf, []int{m.T + p, m.z}, []float64{1, -jp.Weight * scale[p]})
		}
	}
	m.addRow("cpu", -inf, poolC, cpuIdx, cpuVal)
	m.addRow("mem", -inf, poolM, memIdx, memVal)
	jointContentionRows(m, pipes, nodes)
	for c, cl := range classes {
		if len(classIdx[c]) > 0 {
			m.addRow(fmt.Sprintf("dev_%d", c), -inf, float64(cl.count), classIdx[c], classVal[c])
		}
	}
	return m
}
