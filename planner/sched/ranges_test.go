package sched

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/milp"
)

// TestSchedulersAtMetaRangeEdges: pipelines at the edges of the ranges fsm.ValidatePipeline
// admits still get plans of positive throughput within the nodes' resources from every
// scheduler, HiGHS included. Just outside them the MILP plans throughput 0: a product of
// amplifications of 1e12, a capacity of 1e300, or operators whose costs differ 1e12-fold
// (the cheap one gets no instance).
func TestSchedulersAtMetaRangeEdges(t *testing.T) {
	op := func(name string, amp, capacity float64) OperatorInput {
		// The capacity is declared as the hint, so that ValidatePipeline checks it.
		return OperatorInput{Operator: fsm.Operator{Name: name, CPU: 1, MemoryMB: 1024, Amplification: amp, OutputBytes: 100, CapacityHint: capacity}, Capacity: capacity}
	}
	var nodes []fsm.Node
	for i := range 4 {
		nodes = append(nodes, fsm.Node{Name: fmt.Sprint("n", i), CPU: 64, MemoryMB: 512 << 10, GPUs: 8, GPUMemoryMB: 81920})
	}
	cases := map[string][]OperatorInput{
		// 1e9 records per input record; costs 1, 1e6/10 and 1e9/10 instance-seconds per
		// input record: a spread of 1e8.
		"fan-out": {op("a", 1e6, 1), op("b", 1e3, 10), op("c", 1, 10)},
		// Costs 1e-2, 1 and 1e6: a fast source in front of a slow stage.
		"slow": {op("a", 1e2, 100), op("b", 1, 1e2), op("c", 1, fsm.MinCapacity)},
		// 1e-9 records per input record: costs 1e-6, 1e-6, 1e-5.
		"fan-in": {op("a", 1e-6, fsm.MaxCapacity), op("b", 1e-3, 1), op("c", 1, fsm.MinCapacity)},
		// 1e12 bytes per pipeline input record cross a boundary.
		"bytes": {op("a", 1e3, 1e3), op("b", 1, fsm.MaxCapacity), op("c", 1, 1e3)},
		"small": {op("a", 1, 1), op("b", 1, 1)},
		"big":   {op("a", 1, 1), op("b", 1, 1)},
	}
	cases["bytes"][0].OutputBytes = 1e9
	cases["small"][0].CPU, cases["small"][0].MemoryMB = fsm.MinCPU, 1
	cases["small"][1].CPU, cases["small"][1].MemoryMB = fsm.MinCPU, 1
	big := &cases["big"][1]
	big.CPU, big.MemoryMB, big.GPUs, big.GPUMemoryMB, big.ColdStartSec = fsm.MaxCPU, fsm.MaxMemoryMB, fsm.MaxGPUs, fsm.MaxGPUMemoryMB, fsm.MaxColdStartSec
	for name, ops := range cases {
		p := &fsm.Pipeline{Job: name}
		for i := range ops {
			ops[i].Order = i
			p.Operators = append(p.Operators, ops[i].Operator)
		}
		if err := fsm.ValidatePipeline(p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		in := PlanInput{Job: name, Operators: ops, Nodes: nodes}
		if name == "big" {
			in.Nodes = append(in.Nodes, fsm.Node{Name: "huge", CPU: fsm.MaxCPU, MemoryMB: fsm.MaxMemoryMB, GPUs: fsm.MaxGPUs, GPUMemoryMB: fsm.MaxGPUMemoryMB})
		}
		for _, s := range []Scheduler{Proportional{}, MILP{Solver: milp.Greedy{}}, MILP{Solver: milp.HiGHS{}, Options: milp.Options{AlwaysMIP: true}}} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			plan, err := s.Plan(ctx, in)
			cancel()
			if err != nil {
				t.Errorf("%s %T: %v", name, s, err)
				continue
			}
			usage(t, in, plan)
			if !(plan.Throughput > 0) {
				t.Errorf("%s %T: throughput %v (%s)", name, s, plan.Throughput, plan.Reason)
			}
		}
	}
	// Outside: a cost spread of 1e12 (1e-3 s and 1e9 s per input record).
	in := PlanInput{Job: "spread", Operators: []OperatorInput{op("a", 1e9, 1e3), op("b", 1, 1)}, Nodes: nodes}
	if err := fsm.ValidatePipeline(&fsm.Pipeline{Job: "spread", Operators: []fsm.Operator{in.Operators[0].Operator, in.Operators[1].Operator}}); err == nil {
		t.Error("cost spread 1e12 admitted")
	}
	if plan, err := (MILP{Solver: milp.Greedy{}}).Plan(context.Background(), in); err != nil || plan.Throughput != 0 {
		t.Logf("cost spread 1e12: the MILP now plans %v (%v): the spread bound may be relaxed", plan.Throughput, err)
	}
}
