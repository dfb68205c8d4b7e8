package milp

import (
	"context"
	"time"
)

// Operator is one stage of the linear pipeline, as seen by the scheduling layer.
// Rates are in records per second of the operator's own input.
type Operator struct {
	// Name identifies the operator (the Nomad task group name, but no Nomad type leaks here).
	Name string
	// CPU is the number of cores one instance reserves (c_i, Eq. 15).
	CPU float64
	// MemMB is the memory one instance reserves, in MiB (m_i, Eq. 16).
	MemMB float64
	// GPUs is the number of accelerator devices one instance reserves (g_i, Eq. 17). An
	// instance takes all of them from one device class of its node.
	GPUs int
	// GPUMemMB is the memory each of those devices must have, in MiB (0: any). A device
	// class of unknown memory (Device.MemMB 0) meets no positive requirement.
	GPUMemMB float64
	// GPUModels lists the device models the operator accepts (Device.Model, compared
	// exactly); empty accepts every model.
	GPUModels []string
	// GPUVendor is the device vendor the operator accepts (Device.Vendor, compared
	// exactly: "" accepts only devices of vendor "").
	GPUVendor string
	// Capacity is the unit throughput of one instance on the current configuration (mu_i),
	// in input records per second.
	Capacity float64
	// Candidate is the single pending configuration of this operator, or nil. At most one
	// candidate exists per operator (single-transition invariant, Sec. 6.5).
	Candidate *Candidate
	// Amplification is A_i: records entering this operator per record of original pipeline
	// input (1 for the first operator). Must be > 0.
	Amplification float64
	// OutputBytes is s_i: the size in bytes of one record this operator emits.
	OutputBytes float64
	// LaunchSec is the migration cost in seconds of starting one new instance (Eq. 22).
	LaunchSec float64
	// TerminateSec is the migration cost in seconds of stopping one instance (Eq. 22).
	TerminateSec float64
	// MinInstances and MaxInstances bound the operator's parallelism P_i (the job's
	// scaling policy min and max); 0 leaves that side unbounded. Already-transitioned
	// instances are never stopped, so MaxInstances must not be below their number.
	MinInstances, MaxInstances int
	// Contention declares the node resources an instance saturates besides its reserved
	// CPU, memory and accelerators (network, disk I/O: resources Nomad does not reserve).
	// Empty (the default) adds nothing to the model. See Contention.
	Contention []Contention
}

// Contention is one node resource an operator's instances contend for, CAPSys-style
// (seed 003): co-located instances that saturate the same resource slow each other down.
//
// Weight is the share of one node's resource of this Kind that one instance uses when it
// runs at its full Capacity; the resource is used in proportion to the routed rate, so the
// use per input record is Weight/Capacity (the current configuration's capacity, for
// instances on either configuration: a record's bytes do not depend on the configuration).
// The model then bounds, per node and kind, the resource the routed rates use by what the
// node has left (1 - Node.Pressure[Kind]): sum_i Weight_i/mu_i * A_i w_in <= 1 - pressure.
// The rows hold under any sharing of the resource (it never delivers more than it has) and
// are exact when it is shared work-conservingly; a plan of the model loses nothing to
// contention then, while a plan made without them can (strategy/milp/contendbench).
type Contention struct {
	// Kind names the resource ("network", "io"); operators of the same Kind contend.
	Kind string
	// Weight is in (0, 1]: the share of the node's resource one full-rate instance uses.
	Weight float64
}

// admits reports whether n instances are within o's MinInstances and MaxInstances.
func (o *Operator) admits(n int) bool {
	return n >= o.MinInstances && (o.MaxInstances == 0 || n <= o.MaxInstances)
}

// Candidate is a configuration proposed by the adaptation layer for one operator.
type Candidate struct {
	// Capacity is the candidate configuration's unit throughput (mu_i^c), records/s.
	Capacity float64
	// ColdStartSec is tau_i: restart plus observation warm-up time of one transitioning
	// instance, in seconds. Eq. (11) discounts Capacity by it over Params.WindowSec.
	ColdStartSec float64
}

// Node is one Nomad client node with fixed resource pools.
type Node struct {
	// Name identifies the node.
	Name string
	// CPU is the number of schedulable cores (C_n).
	CPU float64
	// MemMB is the schedulable memory in MiB (M_n).
	MemMB float64
	// GPUs is the number of accelerator devices (G_n) when Devices is empty: one class of
	// unknown model and memory. With Devices set it must be 0 or their total Count.
	GPUs int
	// Devices are the node's accelerator classes (one per Nomad device group): an
	// operator's instance uses devices of a single class that it accepts (Eq. 17 per class).
	Devices []Device
	// EgressBps is the egress bandwidth available to pipeline traffic, in BYTES per second
	// (B_n, Eq. 20); 100 Gbit/s is 12.5e9. 0 forbids cross-node traffic from this node;
	// use math.Inf(1) for unlimited.
	EgressBps float64
	// Class is an optional label for hardware of the same kind; informational only (the
	// symmetry detection compares the actual capacities and deployments).
	Class string
	// Pressure is the share of the node's contended resources (Contention.Kind) already
	// used by instances outside the problem, e.g. other pipelines' instances at full rate;
	// each value in [0, 1]. Nil: none. Only kinds some operator declares matter.
	Pressure map[string]float64
}

// Device is one class of identical accelerators on a node: a Nomad device group
// (vendor/type/name) with its healthy instances.
type Device struct {
	// Vendor is the device vendor (Nomad's device vendor, e.g. "nvidia"; "" when the
	// caller does not distinguish vendors).
	Vendor string
	// Model names the accelerator (Nomad's device name, e.g. "A100-SXM4-80GB").
	Model string
	// MemMB is the memory of one device in MiB (the device attribute "memory"); 0 is
	// unknown and meets no Operator.GPUMemMB requirement.
	MemMB float64
	// Count is the number of healthy devices of the class.
	Count int
}

// Placement is the number of instances of one operator on one node, split by configuration.
type Placement struct {
	// Current counts instances running the operator's current configuration.
	Current int
	// Candidate counts instances running (or switching to) the candidate configuration.
	Candidate int
}

// Total returns Current + Candidate.
func (p Placement) Total() int { return p.Current + p.Candidate }

// Deployment is the running placement: Deployment[i][n] for operator i on node n. In the
// current deployment Candidate counts instances already transitioned in earlier rounds
// (k_i^c summed over nodes); they are never rolled back. A nil Deployment is the initial
// startup (no instance anywhere).
type Deployment [][]Placement

// Params are the scheduling-round parameters of the model.
type Params struct {
	// WindowSec is the scheduling window W over which a transitioning instance's cold start
	// is amortised: mu~ = mu^c * max(0, 1 - tau/W) (Eq. 11). Default 300 s.
	WindowSec float64
	// MaxBatch caps the number of transitions per operator in one round (delta_max, Eq. 25).
	// 0 means no cap beyond the remaining old instances.
	MaxBatch int
	// NetWeight is alpha in Eq. (10), per byte/s of peak node egress. 0 selects a default
	// that keeps the term below 1e-4 of the throughput scale.
	NetWeight float64
	// MigrationWeight is beta in Eq. (10), per second of migration cost. 0 selects a
	// default at which redeploying a whole plan once costs 1 % of the throughput scale.
	MigrationWeight float64
}

// Problem is one scheduling round: the pipeline, the cluster and what runs now.
type Problem struct {
	// Operators in pipeline order: operator i feeds operator i+1.
	Operators []Operator
	// Nodes of the cluster.
	Nodes []Node
	// Current is the running deployment ([len(Operators)][len(Nodes)]) or nil at startup.
	Current Deployment
	// Params of the round.
	Params Params
}

// Status says how a Solution was obtained.
type Status string

const (
	// StatusOptimal means the returned plan is proven within the requested relative gap:
	// its own Gap to a proven Bound is at most Options.RelGap (plus 1e-7, the decoding
	// tolerance), whichever part of Solve produced it.
	StatusOptimal Status = "optimal"
	// StatusFeasible means HiGHS stopped (time limit, watchdog, cancellation) and its
	// incumbent, not proven within the gap, is returned; Solution.Gap says how far.
	StatusFeasible Status = "feasible"
	// StatusHeuristic means a start (greedy, routing LP or LP rounding) is returned without
	// being proven within the gap.
	StatusHeuristic Status = "heuristic"
)

// Solution is a validated target deployment for one round.
type Solution struct {
	// Throughput is T, pipeline throughput in original input records per second.
	Throughput float64
	// PerNode[i][n] is the target placement of operator i on node n. Candidate includes the
	// already-transitioned instances and the ones transitioning this round. Once applied it
	// is the next round's Problem.Current.
	PerNode Deployment
	// Transitions[i] is delta_i, instances switching to the candidate configuration now.
	Transitions []int
	// Launches[i] and Terminations[i] count instance starts and stops of operator i against
	// the current deployment (Delta+ and Delta-, Eq. 21), summed over nodes.
	Launches, Terminations []int
	// Rate[i][n] is the input rate (records/s) routed to operator i on node n.
	Rate [][]float64
	// Egress[n] is the cross-node pipeline traffic leaving node n, bytes/s (Eq. 20).
	Egress []float64
	// PeakEgress is B, the maximum of Egress.
	PeakEgress float64
	// MigrationCost is C in seconds (Eq. 22, plus restarts of transitioning instances).
	MigrationCost float64
	// Objective is T - alpha*B - beta*C (Eq. 10).
	Objective float64
	// Bound is a proven upper bound on Objective (math.Inf(1) when none is known).
	Bound float64
	// Gap is (Bound - Objective) / max(|Bound|, tiny); 0 when proven optimal.
	Gap float64
	// Status says how the solution was obtained.
	Status Status
	// SolveTime is the wall-clock time of Solve.
	SolveTime time.Duration
	// Source is the phase that produced the plan: "greedy" (the greedy plan, possibly
	// re-routed by the routing LP, topped up by fill or replaced by LP rounding), "rens" (HiGHS on the model
	// restricted around the LP relaxation), "move" (the move search: instances moved to
	// where the routing LP values them), "lns" (the node-neighbourhood search: HiGHS on
	// the placement of a few nodes at a time) or "highs" (HiGHS on the full model).
	Source string
}

// Options control one solve.
type Options struct {
	// RelGap is the relative MIP gap at which the solver stops. Default 0.01.
	RelGap float64
	// TimeLimit bounds the whole solve including the watchdog grace. Default 10 s.
	TimeLimit time.Duration
	// Threads for HiGHS. Default 1.
	Threads int
	// NoWarmStart disables every start (greedy, routing LP, LP rounding, RENS, moves,
	// neighbourhoods): HiGHS runs alone on the model (ablation).
	NoWarmStart bool
	// SymmetryRows adds rows ordering the nodes of every identical class by load. Off by
	// default: HiGHS detects the symmetry of identical nodes itself, and on the paper's
	// clusters, whose classes are large, the rows made HiGHS slower or no faster on every
	// configuration measured (bench milp -modes mip,sym); on heterogeneous clusters they
	// were neutral (bench milp -hetero -modes mip,sym).
	SymmetryRows bool
	// NoBound disables the aggregate-relaxation bound on T (ablation).
	NoBound bool
	// NoLinkRows leaves out the node-capacity bounds on the processed shares and the link
	// rows w_in <= U_in x_in that tighten the LP relaxation on bandwidth-bound clusters
	// (linkRows; ablation).
	NoLinkRows bool
	// NoSlotRows leaves out the lifted device rows per node (slotRows; ablation).
	NoSlotRows bool
	// AlwaysMIP runs HiGHS even when the greedy plan is already proven within RelGap by
	// the aggregate bound (HiGHS may then still improve the tie-breakers).
	AlwaysMIP bool
	// Verbose enables the HiGHS log on stderr.
	Verbose bool

	// thread, when set, runs every HiGHS call (HiGHS.Thread, copied here by Solve; or
	// OnThread, for SolveJoint).
	thread *Thread
	// enough, when positive, stops a HiGHS run as soon as its incumbent's objective
	// reaches it: the search sets it to what the best proven bound makes good enough.
	enough float64
	// cutoff, when positive, stops a HiGHS run whose dual bound falls to it: the run cannot
	// find a plan better than one the search already holds (RENS, whose neighbourhood
	// may not contain that plan).
	cutoff float64
}

// OnThread returns o with every HiGHS call of a solve run on t (see Thread): what
// HiGHS.Thread does for Solve, for the solves that take only Options (SolveJoint).
func (o Options) OnThread(t *Thread) Options {
	o.thread = t
	return o
}

// Solver computes a target deployment for a Problem. Implementations must return only
// solutions that pass Validate.
type Solver interface {
	// Solve blocks until a solution is found, ctx is done or opts.TimeLimit passes. When
	// ctx ends or time runs out it returns the best checked plan found so far; it returns
	// an error only for invalid input or when no plan passes the checker.
	Solve(ctx context.Context, p *Problem, opts Options) (*Solution, error)
}
