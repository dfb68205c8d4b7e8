package sched

import (
	"context"
	"fmt"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/milp"
)

// defaultEgressBps stands in for an unknown node egress (100 Gbit/s in bytes/s).
const defaultEgressBps = 12.5e9

// egressCap is the egress the planner counts on for node n: its EgressBps, or
// defaultEgressBps when that is unknown (0).
func egressCap(n fsm.Node) float64 {
	if n.EgressBps > 0 {
		return n.EgressBps
	}
	return defaultEgressBps
}

// MILP adapts strategy/milp (the Trident scheduling MILP, Eqs. 10-26) to Scheduler.
type MILP struct {
	// Solver is milp.HiGHS{} or milp.Greedy{}.
	Solver milp.Solver
	// Options of every solve (zero value: the package defaults).
	Options milp.Options
	// Params of every round (WindowSec, NetWeight, ...); MaxBatch comes from PlanInput
	// when set there.
	Params milp.Params
}

// Problem translates in into a milp.Problem (exported for tests and tooling).
func Problem(in PlanInput, params milp.Params) *milp.Problem {
	p := &milp.Problem{Params: params}
	if in.MaxBatch > 0 {
		p.Params.MaxBatch = in.MaxBatch
	}
	amp := in.Amplifications()
	for i, o := range in.Operators {
		op := milp.Operator{
			Name: o.Name, CPU: o.CPU, MemMB: float64(o.MemoryMB), GPUs: o.GPUs, Capacity: o.Capacity,
			GPUMemMB: float64(o.GPUMemoryMB), GPUModels: o.GPUModels, GPUVendor: fsm.VendorOf(o.GPUVendor),
			Amplification: amp[i], OutputBytes: o.OutputBytes, LaunchSec: o.ColdStartSec, TerminateSec: 1,
			MinInstances: o.MinInstances, MaxInstances: o.MaxInstances,
		}
		for _, c := range o.Contention {
			op.Contention = append(op.Contention, milp.Contention{Kind: c.Kind, Weight: c.Weight})
		}
		if c := o.Candidate; c != nil {
			op.Candidate = &milp.Candidate{Capacity: c.Capacity, ColdStartSec: c.ColdStartSec}
		}
		p.Operators = append(p.Operators, op)
	}
	for _, n := range in.Nodes {
		// what other pipelines route out of the node is not this one's; a node left with
		// none keeps its pipeline's traffic local (milp: EgressBps 0)
		eg := max(0, egressCap(n)-in.EgressUsed[n.Name])
		nd := milp.Node{Name: n.Name, CPU: n.CPU, MemMB: float64(n.MemoryMB), EgressBps: eg, Class: n.Class,
			Pressure: in.Pressure[n.Name]}
		for _, d := range deviceClasses(n) {
			nd.Devices = append(nd.Devices, milp.Device{Vendor: fsm.VendorOf(d.Vendor), Model: d.Model, MemMB: float64(d.MemoryMB), Count: d.Count})
		}
		p.Nodes = append(p.Nodes, nd)
	}
	if len(in.Current) > 0 {
		p.Current = deployment(in, in.Current)
	}
	return p
}

// deployment is targets (operator -> node -> placement, as PlanInput.Current and
// Plan.Targets) as the MILP's deployment over in's operators and nodes.
func deployment(in PlanInput, targets map[string]map[string]fsm.Placement) milp.Deployment {
	d := make(milp.Deployment, len(in.Operators))
	for i, o := range in.Operators {
		d[i] = make([]milp.Placement, len(in.Nodes))
		for j, n := range in.Nodes {
			pl := targets[o.Name][n.Name]
			d[i][j] = milp.Placement{Current: pl.Current, Candidate: pl.Candidate}
		}
	}
	return d
}

// Plan implements Scheduler. Accelerators reach the MILP as device classes (Node.Devices, or
// GPUs of GPUMemoryMB each), so trident_gpu_memory_mb and GPUModels constrain its
// placement; every plan it returns passes milp.Validate, which checks them.
func (m MILP) Plan(ctx context.Context, in PlanInput) (Plan, error) {
	if err := in.Validate(); err != nil {
		return Plan{}, err
	}
	prob := Problem(in, m.Params)
	sol, err := m.Solver.Solve(ctx, prob, m.Options)
	if err != nil {
		return Plan{}, fmt.Errorf("milp solve: %w", err)
	}
	out := Plan{Targets: map[string]map[string]fsm.Placement{}, Throughput: sol.Throughput, Source: "milp/" + sol.Source,
		Reason: fmt.Sprintf("milp %s (%s, gap %.2g, %v): %.3g records/s", sol.Status, sol.Source, sol.Gap, sol.SolveTime.Round(1e6), sol.Throughput)}
	for i, o := range in.Operators {
		t := map[string]fsm.Placement{}
		for j, n := range in.Nodes {
			pl := sol.PerNode[i][j]
			if pl.Total() == 0 {
				continue
			}
			t[n.Name] = fsm.Placement{Current: pl.Current, Candidate: pl.Candidate}
		}
		out.Targets[o.Name] = t
	}
	out.Egress, out.Routed = egressByNode(in.Nodes, sol), true
	return out, nil
}

// egressByNode is sol's egress by node name, nodes without any left out (nil: none).
func egressByNode(nodes []fsm.Node, sol *milp.Solution) map[string]float64 {
	var out map[string]float64
	for j, n := range nodes {
		if j < len(sol.Egress) && sol.Egress[j] > 0 {
			if out == nil {
				out = map[string]float64{}
			}
			out[n.Name] = sol.Egress[j]
		}
	}
	return out
}

// routeTimeout bounds the routing LP of Routed (milliseconds at hundreds of nodes).
const routeTimeout = 5 * time.Second

// Routed returns plan pl, made for in by a scheduler that does not route (Proportional,
// the fallback, a baseline), with the MILP's routing LP of its placement on in's nodes
// and the egress in leaves them (milp.Route): Egress what it sends out of each node at
// the throughput that routing carries, Throughput no more than that, and Routed set. Its
// decision then counts against the links other pipelines share.
func Routed(ctx context.Context, in PlanInput, pl Plan) (Plan, error) {
	sol, err := milp.Route(ctx, Problem(in, milp.Params{}), deployment(in, pl.Targets), milp.Options{TimeLimit: routeTimeout})
	if err != nil {
		return pl, fmt.Errorf("routing the plan: %w", err)
	}
	pl.Egress, pl.Routed = egressByNode(in.Nodes, sol), true
	pl.Throughput = min(pl.Throughput, sol.Throughput)
	return pl, nil
}
