package sched

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/milp"
)

func input() PlanInput {
	return PlanInput{
		Job: "pdf",
		Operators: []OperatorInput{
			{Operator: fsm.Operator{Name: "parse", CPU: 1, MemoryMB: 1024, Amplification: 2, OutputBytes: 1000}, Capacity: 10},
			{Operator: fsm.Operator{Name: "embed", CPU: 1, MemoryMB: 2048, GPUs: 1, GPUMemoryMB: 16000, Amplification: 1, OutputBytes: 100}, Capacity: 40},
		},
		Nodes: []fsm.Node{
			{Name: "cpu1", CPU: 8, MemoryMB: 32768},
			{Name: "gpu1", CPU: 8, MemoryMB: 32768, GPUs: 2, GPUMemoryMB: 40000},
		},
	}
}

func usage(t *testing.T, in PlanInput, p Plan) {
	t.Helper()
	for _, n := range in.Nodes {
		cpu, mem, gpu := 0.0, 0, 0
		for _, o := range in.Operators {
			k := p.Targets[o.Name][n.Name].Total()
			cpu += float64(k) * o.CPU
			mem += k * o.MemoryMB
			gpu += k * o.GPUs
			if k > 0 && o.GPUs > 0 && o.GPUMemoryMB > n.GPUMemoryMB {
				t.Fatalf("%s on %s: GPU memory too small", o.Name, n.Name)
			}
		}
		if cpu > n.CPU+1e-9 || mem > n.MemoryMB || gpu > n.GPUs {
			t.Fatalf("node %s overcommitted: cpu %v/%v mem %d/%d gpu %d/%d", n.Name, cpu, n.CPU, mem, n.MemoryMB, gpu, n.GPUs)
		}
	}
}

// TestProportionalFillsClusterWithinResources: the fallback respects every node pool and
// its throughput equals the bottleneck of the placed instances. parse doubles the records
// (amplification 2), so the 2 GPU instances of embed (40/s each) cap T at 80/2 = 40 input
// records/s; parse then needs 40/10 = 4 instances.
func TestProportionalFillsClusterWithinResources(t *testing.T) {
	in := input()
	p, err := Proportional{}.Plan(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	usage(t, in, p)
	if math.Abs(p.Throughput-40) > 1e-6 {
		t.Fatalf("throughput %v, want 40", p.Throughput)
	}
	n := 0
	for _, pl := range p.Targets["parse"] {
		n += pl.Total()
	}
	if n != 4 || p.Targets["embed"]["gpu1"].Total() != 2 {
		t.Fatalf("targets %v: want 4 parse and 2 embed on gpu1", p.Targets)
	}
	// Pinned candidate instances stay where they are.
	in.Current = map[string]map[string]fsm.Placement{"parse": {"cpu1": {Candidate: 3}}}
	in.Operators[0].Candidate = &fsm.Candidate{Config: "x=1", Capacity: 10}
	p, err = Proportional{}.Plan(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Targets["parse"]["cpu1"].Candidate; got != 3 {
		t.Fatalf("pinned candidate instances %d, want 3", got)
	}
}

// TestImpossibleResourcesNameTheOperator: an operator larger than every node fails with
// ErrImpossible naming operator and field; NaN capacity is refused by name.
func TestImpossibleResourcesNameTheOperator(t *testing.T) {
	in := input()
	in.Operators[1].GPUMemoryMB = 80000
	_, err := Proportional{}.Plan(context.Background(), in)
	if !errors.Is(err, ErrImpossible) || !strings.Contains(err.Error(), `"embed"`) || !strings.Contains(err.Error(), "trident_gpu_memory_mb") {
		t.Fatalf("err %v", err)
	}
	in = input()
	in.Operators[0].CPU = 64
	if _, err := (MILP{Solver: milp.Greedy{}}).Plan(context.Background(), in); !errors.Is(err, ErrImpossible) || !strings.Contains(err.Error(), "trident_cpu") {
		t.Fatalf("err %v", err)
	}
	in = input()
	in.Operators[0].Capacity = math.NaN()
	if _, err := (Proportional{}).Plan(context.Background(), in); err == nil || !strings.Contains(err.Error(), "capacity=NaN") {
		t.Fatalf("err %v", err)
	}
}

// TestMILPAdapter: the problem carries cumulative amplification (A_parse=1, A_embed=2),
// and the HiGHS plan is feasible and at least as good as the proportional one (within 1%).
func TestMILPAdapter(t *testing.T) {
	in := input()
	prob := Problem(in, milp.Params{})
	if prob.Operators[0].Amplification != 1 || prob.Operators[1].Amplification != 2 || prob.Nodes[0].EgressBps != defaultEgressBps {
		t.Fatalf("problem: %+v %+v", prob.Operators, prob.Nodes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mp, err := MILP{Solver: milp.HiGHS{}, Options: milp.Options{TimeLimit: 20 * time.Second}}.Plan(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	usage(t, in, mp)
	pp, _ := Proportional{}.Plan(ctx, in)
	// Both measure T in pipeline input records/s: embed's 2 GPUs cap it at 40.
	if mp.Throughput < pp.Throughput*(1-0.01) || mp.Throughput > 40*(1+1e-6) || !strings.HasPrefix(mp.Source, "milp/") {
		t.Fatalf("milp plan %+v (proportional %v)", mp, pp.Throughput)
	}
}
