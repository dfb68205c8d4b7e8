package sched

import (
	"context"
	"fmt"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/milp"
)

// defaultEgressBps stands in for an unknown node egress (100 Gbit/s in bytes/s).
const defaultEgressBps = 12.5e9

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
			GPUMemMB: float64(o.GPUMemoryMB), GPUModels: o.GPUModels,
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
		eg := n.EgressBps
		if eg <= 0 {
			eg = defaultEgressBps
		}
		nd := milp.Node{Name: n.Name, CPU: n.CPU, MemMB: float64(n.MemoryMB), EgressBps: eg, Class: n.Class,
			Pressure: in.Pressure[n.Name]}
		for _, d := range deviceClasses(n) {
			nd.Devices = append(nd.Devices, milp.Device{Model: d.Model, MemMB: float64(d.MemoryMB), Count: d.Count})
		}
		p.Nodes = append(p.Nodes, nd)
	}
	if len(in.Current) > 0 {
		p.Current = make(milp.Deployment, len(in.Operators))
		for i, o := range in.Operators {
			p.Current[i] = make([]milp.Placement, len(in.Nodes))
			for j, n := range in.Nodes {
				pl := in.Current[o.Name][n.Name]
				p.Current[i][j] = milp.Placement{Current: pl.Current, Candidate: pl.Candidate}
			}
		}
	}
	return p
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
	return out, nil
}
