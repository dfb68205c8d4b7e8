package sched

import (
	"context"
	"math"
	"testing"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/milp"
)

// jointCluster: two nodes with two 24 GB L4s each and one node with one 80 GB A100.
func jointCluster() []fsm.Node {
	l4 := fsm.MakeDevices(fsm.Device{Model: "L4", MemoryMB: 24576, Count: 2})
	a100 := fsm.MakeDevices(fsm.Device{Model: "A100", MemoryMB: 81920, Count: 1})
	return []fsm.Node{
		{Name: "a", CPU: 16, MemoryMB: 65536, GPUs: 1, Devices: a100},
		{Name: "l1", CPU: 16, MemoryMB: 65536, GPUs: 2, Devices: l4},
		{Name: "l2", CPU: 16, MemoryMB: 65536, GPUs: 2, Devices: l4},
	}
}

// gpuPipeline: parse (1 core, 4 records/s) feeds infer (one GPU of at least gpuMB,
// 10 records/s).
func gpuPipeline(job string, weight float64, gpuMB int) PlanInput {
	return PlanInput{Job: job, Weight: weight, Operators: []OperatorInput{
		{Operator: fsm.Operator{Name: "parse", Order: 1, CPU: 1, MemoryMB: 1024, Amplification: 1}, Capacity: 4},
		{Operator: fsm.Operator{Name: "infer", Order: 2, CPU: 1, MemoryMB: 2048, GPUs: 1, GPUMemoryMB: gpuMB, Amplification: 1}, Capacity: 10},
	}}
}

// TestPlanJointSharesTheCluster: three pipelines, one needing a 40 GB GPU, plan together
// without overfilling a node; weights decide who gets the contended L4s; the placed plans
// reach the pooled bound (every share packs).
func TestPlanJointSharesTheCluster(t *testing.T) {
	nodes := jointCluster()
	for _, tc := range []struct {
		wSmall1, wSmall2 float64
		gpus1, gpus2     int
	}{{1, 1, 2, 2}, {1, 3, 1, 3}} {
		ins := []PlanInput{gpuPipeline("big", 1, 40960), gpuPipeline("s1", tc.wSmall1, 0), gpuPipeline("s2", tc.wSmall2, 0)}
		jp, err := PlanJoint(context.Background(), MILP{Solver: milp.HiGHS{}}, ins, nodes, milp.ObjectiveMaxMin, milp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(jp.Errors) > 0 {
			t.Fatalf("errors %v", jp.Errors)
		}
		var hs []Holding
		for _, in := range ins {
			hs = append(hs, HoldingOf(in, jp.Plans[in.Job]))
		}
		if over := Oversubscribed(nodes, hs); len(over) > 0 {
			t.Fatalf("weights %v:%v: oversubscribed %v", tc.wSmall1, tc.wSmall2, over)
		}
		count := func(job string) int {
			n := 0
			for _, pl := range jp.Plans[job].Targets["infer"] {
				n += pl.Total()
			}
			return n
		}
		if got := jp.Plans["big"].Targets["infer"]["a"].Total(); got != 1 {
			t.Errorf("big's infer on the A100: %d, want 1", got)
		}
		if count("s1") != tc.gpus1 || count("s2") != tc.gpus2 {
			t.Errorf("weights %v:%v: L4s %d:%d, want %d:%d", tc.wSmall1, tc.wSmall2, count("s1"), count("s2"), tc.gpus1, tc.gpus2)
		}
		if jp.Gap > 1e-6 || jp.Value > jp.Bound+1e-9 {
			t.Errorf("value %.6g bound %.6g gap %.3g: want the bound reached", jp.Value, jp.Bound, jp.Gap)
		}
	}
}

// TestCappedKeepsTransitionedInstances: a share below the instances already on the
// candidate config, or below the scaling policy's min, does not cap below them.
func TestCappedKeepsTransitionedInstances(t *testing.T) {
	in := gpuPipeline("j", 1, 0)
	in.Operators[0].MinInstances = 3
	in.Operators[1].MaxInstances = 8
	in.Current = map[string]map[string]fsm.Placement{"infer": {"l1": {Current: 1, Candidate: 2}}}
	out := Capped(in, Share{Instances: map[string]int{"parse": 1, "infer": 1}})
	if out.Operators[0].MaxInstances != 3 || out.Operators[1].MaxInstances != 2 {
		t.Fatalf("caps %d, %d; want 3 (min) and 2 (on the candidate)", out.Operators[0].MaxInstances, out.Operators[1].MaxInstances)
	}
	if in.Operators[1].MaxInstances != 8 {
		t.Fatal("Capped changed its input")
	}
	if out := Capped(in, Share{Instances: map[string]int{"infer": 20}}); out.Operators[1].MaxInstances != 8 {
		t.Fatalf("a share above the policy's max raised it to %d", out.Operators[1].MaxInstances)
	}
}

// TestSharesCapsAreTheFewestInstances: the caps carry the share's throughput and no more.
func TestSharesCapsAreTheFewestInstances(t *testing.T) {
	nodes := jointCluster()
	ins := []PlanInput{gpuPipeline("x", 1, 0), gpuPipeline("y", 1, 0)}
	j, err := Shares(context.Background(), ins, nodes, milp.ObjectiveMaxMin, milp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for job, sh := range j.Shares {
		// parse at 4/s per instance needs ceil(T/4) instances; infer ceil(T/10)
		if want := int(math.Ceil(sh.Throughput/4 - 1e-9)); sh.Instances["parse"] != want {
			t.Errorf("%s: parse cap %d for T=%.4g, want %d", job, sh.Instances["parse"], sh.Throughput, want)
		}
	}
}

// TestCanGrow: the fill re-plans a pipeline only when one more instance of every operator
// that binds its throughput fits on what is free and its scaling max allows it.
func TestCanGrow(t *testing.T) {
	in := gpuPipeline("j", 1, 0)
	// parse 3 × 4/s = 12, infer 1 × 10/s = 10: infer binds at T = 10
	pl := Plan{Throughput: 10, Targets: map[string]map[string]fsm.Placement{
		"parse": {"l1": {Current: 3}}, "infer": {"l1": {Current: 1}}}}
	gpuFree := []fsm.Node{{Name: "l2", CPU: 4, MemoryMB: 8192, GPUs: 1}}
	cpuOnly := []fsm.Node{{Name: "c", CPU: 64, MemoryMB: 1 << 20}}
	if !canGrow(in, pl, gpuFree) {
		t.Error("a free GPU for the binding operator: want true")
	}
	if canGrow(in, pl, cpuOnly) {
		t.Error("no GPU free for the binding operator: want false")
	}
	in.Operators[1].MaxInstances = 1
	if canGrow(in, pl, gpuFree) {
		t.Error("the binding operator at its scaling max: want false")
	}
}

// TestJointSharesByVendor: the joint model pools accelerators per vendor, model and
// memory, so a CUDA pipeline's share holds only the NVIDIA devices and a ROCm one's only
// the AMD devices, and the placed plans use just those.
func TestJointSharesByVendor(t *testing.T) {
	nodes := []fsm.Node{{Name: "n1", CPU: 16, MemoryMB: 65536, GPUs: 4, Devices: fsm.MakeDevices(
		fsm.Device{Model: "L4", MemoryMB: 24576, Count: 2}, fsm.Device{Vendor: "amd", Model: "MI210", MemoryMB: 65536, Count: 2})}}
	cuda, rocm := gpuPipeline("cuda", 1, 0), gpuPipeline("rocm", 1, 0)
	rocm.Operators[1].GPUVendor = "amd"
	jp, err := PlanJoint(context.Background(), MILP{Solver: milp.HiGHS{}}, []PlanInput{cuda, rocm}, nodes, milp.ObjectiveMaxMin, milp.Options{})
	if err != nil || len(jp.Errors) > 0 {
		t.Fatalf("err %v, errors %v", err, jp.Errors)
	}
	for job, vendor := range map[string]string{"cuda": "nvidia", "rocm": "amd"} {
		for _, d := range jp.Shares[job].Devices {
			if fsm.VendorOf(d.Vendor) != vendor {
				t.Errorf("%s's share holds %d %s/%s devices", job, d.Count, fsm.VendorOf(d.Vendor), d.Model)
			}
		}
		if n := jp.Plans[job].Targets["infer"]["n1"].Total(); n != 2 {
			t.Errorf("%s: %d infer instances, want its vendor's 2 devices", job, n)
		}
	}
	if over := Oversubscribed(nodes, []Holding{HoldingOf(cuda, jp.Plans["cuda"]), HoldingOf(rocm, jp.Plans["rocm"])}); len(over) > 0 {
		t.Fatalf("oversubscribed: %v", over)
	}
}

// TestLaterPipelineKeepsItsDevices: the pipeline planned first ("v", weight 4) cannot use
// its share's two L4s (its node has one core for them); its fallback on the devices
// left must not take the A100 that the share of "big" (40 GB GPUs only, planned later)
// holds, or big gets no plan at all (seen in `bench cluster -links -link-scale 0.1`: a
// pipeline left with nothing, gap 100 %).
func TestLaterPipelineKeepsItsDevices(t *testing.T) {
	nodes := []fsm.Node{
		{Name: "a", CPU: 16, MemoryMB: 65536, GPUs: 1, Devices: fsm.MakeDevices(fsm.Device{Model: "A100", MemoryMB: 81920, Count: 1})},
		{Name: "c", CPU: 16, MemoryMB: 65536},
		{Name: "l", CPU: 1, MemoryMB: 65536, GPUs: 2, Devices: fsm.MakeDevices(fsm.Device{Model: "L4", MemoryMB: 24576, Count: 2})},
	}
	ins := []PlanInput{gpuPipeline("v", 4, 0), gpuPipeline("big", 1, 40960)}
	j, err := Shares(context.Background(), ins, nodes, milp.ObjectiveMaxMin, milp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// one attempt in weight order (PlanJoint's second attempt, short pipelines first,
	// would hide a first attempt that starves big)
	jp := placeShares(context.Background(), MILP{Solver: milp.HiGHS{}}, ins, nodes, j, []int{0, 1}, milp.ObjectiveMaxMin, true)
	if len(jp.Errors) > 0 {
		t.Fatalf("errors %v", jp.Errors)
	}
	if got := jp.Plans["big"].Targets["infer"]["a"].Total(); got != 1 {
		t.Errorf("big's infer on the A100: %d, want 1 (v's: %d)", got, jp.Plans["v"].Targets["infer"]["a"].Total())
	}
	// v: one L4 instance (10 records/s); big: the A100 (10)
	for job, want := range map[string]float64{"v": 10, "big": 10} {
		if got := jp.Plans[job].Throughput; math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: throughput %.6g, want %g", job, got, want)
		}
	}
}

// TestUnclaimedHidesOwedDevices: of the devices others leave, the share's devices of a
// pipeline without a decision yet are hidden; a planned pipeline claims only what it holds.
func TestUnclaimedHidesOwedDevices(t *testing.T) {
	nodes := jointCluster() // a: 1 A100; l1, l2: 2 L4 each
	a100 := fsm.Device{Vendor: fsm.DefaultGPUVendor, Model: "A100", MemoryMB: 81920, Count: 1}
	l4 := fsm.Device{Vendor: fsm.DefaultGPUVendor, Model: "L4", MemoryMB: 24576, Count: 2}
	shares := map[string]Share{
		"big": {Throughput: 10, Devices: []fsm.Device{a100}},
		"s1":  {Throughput: 20, Devices: []fsm.Device{l4}},
		"s2":  {Throughput: 20, Devices: []fsm.Device{l4}},
	}
	holding := func(job, node string, k int) Holding {
		p := &fsm.Pipeline{Job: job}
		for _, o := range gpuPipeline(job, 1, 0).Operators {
			p.Operators = append(p.Operators, o.Operator)
		}
		return Holding{Pipeline: p, Targets: map[string]fsm.OpTarget{
			"infer": {Nodes: map[string]fsm.Placement{node: {Current: k}}},
		}}
	}
	seen := func(ns []fsm.Node) (a, l int) {
		for _, n := range ns {
			for _, d := range deviceClasses(n) {
				if d.Model == "A100" {
					a += d.Count
				} else {
					l += d.Count
				}
			}
		}
		return a, l
	}
	s2 := gpuPipeline("s2", 1, 0)
	for _, tc := range []struct {
		name         string
		others       []Holding
		wantA, wantL int
	}{
		{"nobody planned: big's A100 and s1's two L4s owed", nil, 0, 2},
		{"s1 planned on one L4: the rest is free", []Holding{holding("s1", "l1", 1)}, 0, 3},
		{"big planned on the A100", []Holding{holding("big", "a", 1)}, 0, 2},
		{"both planned, big without its A100", []Holding{holding("big", "l1", 1), holding("s1", "l1", 1)}, 1, 2},
	} {
		a, l := seen(Unclaimed(s2, nodes, shares, tc.others))
		if a != tc.wantA || l != tc.wantL {
			t.Errorf("%s: s2 sees %d A100 and %d L4, want %d and %d", tc.name, a, l, tc.wantA, tc.wantL)
		}
	}
}

// TestLinkClaims: a pipeline without a decision claims its Link of every link; a planned
// one only what it routes.
func TestLinkClaims(t *testing.T) {
	nodes := []fsm.Node{{Name: "n1", EgressBps: 1000}, {Name: "n2", EgressBps: 4000}}
	shares := map[string]Share{"p": {Throughput: 10, Link: 0.5}, "q": {Throughput: 10, Link: 0.25}}
	q := Holding{Pipeline: &fsm.Pipeline{Job: "q"}, Egress: map[string]float64{"n1": 100}}
	for _, tc := range []struct {
		name   string
		others []Holding
		want   map[string]float64
	}{
		{"q unplanned", nil, map[string]float64{"n1": 250, "n2": 1000}},
		{"q planned", []Holding{q}, map[string]float64{"n1": 100}},
	} {
		got := LinkClaims(nodes, shares, tc.others, "p")
		if len(got) != len(tc.want) {
			t.Errorf("%s: claims %v, want %v", tc.name, got, tc.want)
			continue
		}
		for n, w := range tc.want {
			if math.Abs(got[n]-w) > 1e-9 {
				t.Errorf("%s: node %s claim %.6g, want %g", tc.name, n, got[n], w)
			}
		}
	}
	if got := LinkClaims(nodes, map[string]Share{"p": {Link: 0.5}, "q": {}}, nil, "p"); got != nil {
		t.Errorf("no Link, nothing routed: claims %v, want nil", got)
	}
}
