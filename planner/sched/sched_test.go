package sched

import (
	"context"
	"errors"
	"math"
	"reflect"
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

// TestImpossibleResourcesSayWhatEachNodeLacks: a two-GPU operator that fits no node
// because one accelerator node has its GPUs but no cores left and the other its cores but
// one GPU: no single resource "exceeds every node", so the error names both shortfalls
// (it used to claim whatever the last node lacked exceeded every node).
func TestImpossibleResourcesSayWhatEachNodeLacks(t *testing.T) {
	ops := []fsm.Operator{{Name: "infer", CPU: 1, MemoryMB: 1024, GPUs: 2}}
	nodes := []fsm.Node{
		{Name: "gpu1", CPU: 0.5, MemoryMB: 65536, GPUs: 2},
		{Name: "gpu2", CPU: 16, MemoryMB: 65536, GPUs: 1},
		{Name: "cpu", CPU: 16, MemoryMB: 65536},
	}
	err := CheckResources(ops, nodes)
	if !errors.Is(err, ErrImpossible) {
		t.Fatalf("err %v, want ErrImpossible", err)
	}
	// nodes without accelerators are not counted: they never take the operator
	for _, want := range []string{`"infer"`, "at once", "of 2 nodes with accelerators", "too few cores on 1", "too few GPUs on 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "exceeds every node") {
		t.Errorf("err %q claims one resource exceeds every node", err)
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

// TestCatchUpShiftsAcceleratorsToTheBacklog: two OCR operators of equal capacity (10/s)
// share 4 GPUs. In steady state each gets 2. With 1200 records queued at ocr-text, a
// 60 s catch-up at the previous round's 10 records/s asks ocr-text for 10 + 1200/60 = 30
// records/s, i.e. amplification 3: the best split is then 3 GPUs for ocr-text, 1 for
// ocr-table (T = 10), where 2/2 would give T = 6.7.
func TestCatchUpShiftsAcceleratorsToTheBacklog(t *testing.T) {
	in := PlanInput{
		Job: "pdf",
		Operators: []OperatorInput{
			{Operator: fsm.Operator{Name: "ocr-text", CPU: 1, MemoryMB: 1024, GPUs: 1, Amplification: 1, OutputBytes: 100}, Capacity: 10},
			{Operator: fsm.Operator{Name: "ocr-table", CPU: 1, MemoryMB: 1024, GPUs: 1, Amplification: 1, OutputBytes: 100}, Capacity: 10},
		},
		Nodes: []fsm.Node{{Name: "gpu1", CPU: 16, MemoryMB: 65536, GPUs: 4}},
	}
	gpus := func(in PlanInput, s Scheduler) (int, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := s.Plan(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		usage(t, in, p)
		return p.Targets["ocr-text"]["gpu1"].Total(), p.Targets["ocr-table"]["gpu1"].Total()
	}
	for _, s := range []Scheduler{Proportional{}, MILP{Solver: milp.Greedy{}}, MILP{Solver: milp.HiGHS{}, Options: milp.Options{AlwaysMIP: true}}} {
		if a, b := gpus(in, s); a != 2 || b != 2 {
			t.Errorf("%T steady state: ocr-text %d, ocr-table %d GPUs, want 2/2", s, a, b)
		}
		c := in
		c.Operators = append([]OperatorInput(nil), in.Operators...)
		c.Operators[0].Backlog = 1200
		c.CatchUpSec, c.RefThroughput = 60, 10
		if amp := c.Amplifications(); math.Abs(amp[0]-3) > 1e-12 || amp[1] != 1 {
			t.Fatalf("amplifications with catch-up %v, want [3 1]", amp)
		}
		if a, b := gpus(c, s); a != 3 || b != 1 {
			t.Errorf("%T with catch-up: ocr-text %d, ocr-table %d GPUs, want 3/1", s, a, b)
		}
		c.CatchUpSec = 0
		if a, b := gpus(c, s); a != 2 || b != 2 {
			t.Errorf("%T with catch-up off: ocr-text %d, ocr-table %d GPUs, want 2/2", s, a, b)
		}
	}
}

// The scaling policy's bounds hold in both schedulers. Unbounded, parse takes 4 instances
// (TestProportionalFillsClusterWithinResources); with max 1 the throughput drops to
// 10 input records/s, which embed serves (20 records/s after parse's amplification of 2)
// with one instance of 40/s, but its policy's min keeps 2.
func TestSchedulersRespectScalingBounds(t *testing.T) {
	for _, s := range []Scheduler{Proportional{}, MILP{Solver: milp.Greedy{}}, MILP{Solver: milp.HiGHS{}}} {
		in := input()
		in.Operators[0].MaxInstances = 1
		in.Operators[1].MinInstances = 2
		p, err := s.Plan(context.Background(), in)
		if err != nil {
			t.Fatalf("%T: %v", s, err)
		}
		usage(t, in, p)
		count := func(op string) int {
			n := 0
			for _, pl := range p.Targets[op] {
				n += pl.Total()
			}
			return n
		}
		if count("parse") != 1 || count("embed") != 2 {
			t.Errorf("%T: parse %d (max 1), embed %d (min 2)", s, count("parse"), count("embed"))
		}
		if math.Abs(p.Throughput-10) > 1e-6 {
			t.Errorf("%T: throughput %v, want 10 (one parse instance of 10/s)", s, p.Throughput)
		}
	}
}

// TestPooledMinimumsRefused: operators that each fit some node but whose minimum instances
// together exceed the inventory fail with ErrImpossible before any solve, naming the
// resource, the operators' shares and what the inventory has; a pipeline exactly at the
// pool's size passes (the check is necessary, not a packing heuristic).
func TestPooledMinimumsRefused(t *testing.T) {
	cases := []struct {
		name string
		edit func(*PlanInput)
		want string // "" = accepted
	}{
		{"at capacity", func(in *PlanInput) { in.Operators[1].MinInstances = 2; in.Operators[0].MinInstances = 14 }, ""},
		{"cores", func(in *PlanInput) { in.Operators[0].MinInstances = 16 },
			"need 17 cores (parse 16 × 1, embed 1 × 1) but the inventory has 16"},
		{"memory", func(in *PlanInput) {
			in.Operators[0].CPU, in.Operators[0].MemoryMB, in.Operators[0].MinInstances = 0.1, 3000, 22
		}, "need 68048 MB of memory (parse 22 × 3000, embed 1 × 2048) but the inventory has 65536"},
		{"fractional cores", func(in *PlanInput) { in.Operators[0].CPU, in.Operators[0].MinInstances = 0.3, 55 },
			"need 17.5 cores (parse 55 × 0.3, embed 1 × 1) but the inventory has 16"},
		{"gpus", func(in *PlanInput) { in.Operators[1].MinInstances = 3 },
			"need 3 GPUs with at least 16000 MB (embed 3 × 1) but the inventory has 2"},
		{"gpu memory class", func(in *PlanInput) {
			in.Nodes = append(in.Nodes, fsm.Node{Name: "gpu0", CPU: 8, MemoryMB: 32768, GPUs: 4, GPUMemoryMB: 8000})
			in.Operators = append(in.Operators, OperatorInput{Operator: fsm.Operator{Name: "small", CPU: 1, MemoryMB: 1, GPUs: 1, GPUMemoryMB: 4000, Amplification: 1}, Capacity: 1})
			in.Operators[1].MinInstances = 2
			in.Operators[2].MinInstances = 4 // 6 GPUs in all, but embed's 2 take both large ones
		}, ""},
		{"gpu memory class short", func(in *PlanInput) {
			in.Nodes = append(in.Nodes, fsm.Node{Name: "gpu0", CPU: 8, MemoryMB: 32768, GPUs: 4, GPUMemoryMB: 8000})
			in.Operators[1].MinInstances = 3 // 6 GPUs in all, 2 with 16000 MB
		}, "need 3 GPUs with at least 16000 MB (embed 3 × 1) but the inventory has 2"},
	}
	for _, tc := range cases {
		in := input()
		tc.edit(&in)
		err := in.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else if p, err := (Proportional{}).Plan(context.Background(), in); err != nil {
				t.Errorf("%s: accepted but not planned: %v", tc.name, err)
			} else {
				usage(t, in, p)
			}
			continue
		}
		if !errors.Is(err, ErrImpossible) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want ErrImpossible containing %q", tc.name, err, tc.want)
		}
		if _, err := (Proportional{}).Plan(context.Background(), in); !errors.Is(err, ErrImpossible) {
			t.Errorf("%s: proportional: err %v, want ErrImpossible", tc.name, err)
		}
	}
}

// TestProblemCarriesContention: an operator's trident_contention reaches the MILP's
// operator unchanged; operators without it declare nothing.
func TestProblemCarriesContention(t *testing.T) {
	in := input()
	in.Operators[0].Contention = []fsm.Contention{{Kind: "network", Weight: 0.5}, {Kind: "io", Weight: 1}}
	p := Problem(in, milp.Params{})
	want := []milp.Contention{{Kind: "network", Weight: 0.5}, {Kind: "io", Weight: 1}}
	if !reflect.DeepEqual(p.Operators[0].Contention, want) {
		t.Errorf("operator 0: %+v, want %+v", p.Operators[0].Contention, want)
	}
	for _, o := range p.Operators[1:] {
		if o.Contention != nil {
			t.Errorf("operator %s: %+v, want none", o.Name, o.Contention)
		}
	}
}
