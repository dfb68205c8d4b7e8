package sched

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/milp"
)

// TestResidualAndOversubscribed: other pipelines' decisions in force are taken from the
// nodes (cores, memory, and GPUs from a device class the operator accepts: a 40 GB
// operator takes an 80 GB device when no 40 GB one is left); a decision that needs more
// than is left is reported per node.
func TestResidualAndOversubscribed(t *testing.T) {
	nodes := []fsm.Node{
		{Name: "g1", CPU: 16, MemoryMB: 65536, GPUs: 3, Devices: fsm.MakeDevices(
			fsm.Device{Model: "A10", MemoryMB: 24576, Count: 1}, fsm.Device{Model: "A100", MemoryMB: 81920, Count: 2})},
		{Name: "c1", CPU: 8, MemoryMB: 16384},
	}
	big := &fsm.Pipeline{Job: "a", Operators: []fsm.Operator{
		{Name: "llm", CPU: 2, MemoryMB: 8192, GPUs: 1, GPUMemoryMB: 40960},
		{Name: "parse", CPU: 1, MemoryMB: 1024},
	}}
	hold := Holding{Pipeline: big, Targets: map[string]fsm.OpTarget{
		"llm":   {Nodes: map[string]fsm.Placement{"g1": {Current: 1, Candidate: 1}}},
		"parse": {Nodes: map[string]fsm.Placement{"c1": {Current: 3}, "g1": {Current: 2}}},
	}}
	res := Residual(nodes, []Holding{hold})
	g1, c1 := res[0], res[1]
	if g1.CPU != 10 || g1.MemoryMB != 65536-2*8192-2*1024 || g1.GPUs != 1 {
		t.Fatalf("g1 left %+v: want 10 cores, %d MB, 1 GPU", g1, 65536-2*8192-2*1024)
	}
	if ds := g1.Devices.List(); ds[0].Count != 1 || ds[1].Count != 0 {
		t.Fatalf("g1 devices left %+v: the two 40 GB instances take both A100s, the A10 stays", ds)
	}
	if c1.CPU != 5 || c1.MemoryMB != 16384-3*1024 {
		t.Fatalf("c1 left %+v", c1)
	}
	// A second pipeline asking for another 40 GB GPU on g1 overfills it (only the A10 is
	// left); one asking for a 16 GB GPU fits.
	small := &fsm.Pipeline{Job: "b", Operators: []fsm.Operator{{Name: "ocr", CPU: 1, MemoryMB: 1024, GPUs: 1, GPUMemoryMB: 16384}}}
	if over := Oversubscribed(res, []Holding{{Pipeline: small, Targets: map[string]fsm.OpTarget{"ocr": {Nodes: map[string]fsm.Placement{"g1": {Current: 1}}}}}}); len(over) != 0 {
		t.Fatalf("a 16 GB instance on the A10: %v", over)
	}
	small.Operators[0].GPUMemoryMB = 40960
	over := Oversubscribed(res, []Holding{{Pipeline: small, Targets: map[string]fsm.OpTarget{"ocr": {Nodes: map[string]fsm.Placement{"g1": {Current: 1}}}}}})
	if len(over) != 1 || !strings.Contains(over[0], "g1: b/ocr ×1 short of a GPU") {
		t.Fatalf("oversubscription %v, want g1 short of a GPU", over)
	}
	// A node the holdings overfill is left empty, not negative.
	hold.Targets["parse"] = fsm.OpTarget{Nodes: map[string]fsm.Placement{"c1": {Current: 20}}}
	if c := Residual(nodes, []Holding{hold})[1]; c.CPU != 0 || c.MemoryMB != 0 {
		t.Fatalf("overfilled c1 left %+v, want 0", c)
	}
	// A node without device classes (GPUs counted only).
	plain := Residual([]fsm.Node{{Name: "p", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 81920}}, []Holding{{Pipeline: big,
		Targets: map[string]fsm.OpTarget{"llm": {Nodes: map[string]fsm.Placement{"p": {Current: 1}}}}}})[0]
	if plain.GPUs != 1 || len(plain.Devices.List()) != 0 {
		t.Fatalf("plain node left %+v: want 1 GPU, still no classes", plain)
	}
}

// TestPressure: other pipelines' contending instances use their weight of their node's
// resource each (full rate assumed), summed per kind and capped at 1; operators without
// trident_contention add nothing.
func TestPressure(t *testing.T) {
	p := &fsm.Pipeline{Job: "a", Operators: []fsm.Operator{
		{Name: "fetch", CPU: 1, MemoryMB: 1024, Contention: []fsm.Contention{{Kind: "network", Weight: 0.3}, {Kind: "io", Weight: 0.5}}},
		{Name: "parse", CPU: 1, MemoryMB: 1024},
	}}
	hold := Holding{Pipeline: p, Targets: map[string]fsm.OpTarget{
		"fetch": {Nodes: map[string]fsm.Placement{"n1": {Current: 1, Candidate: 1}, "n2": {Current: 3}}},
		"parse": {Nodes: map[string]fsm.Placement{"n3": {Current: 4}}},
	}}
	got := Pressure([]Holding{hold})
	want := map[string]map[string]float64{"n1": {"network": 0.6, "io": 1}, "n2": {"network": 0.9, "io": 1}}
	if len(got) != len(want) {
		t.Fatalf("pressure %v, want %v", got, want)
	}
	for n, kinds := range want {
		for k, v := range kinds {
			if d := got[n][k] - v; d > 1e-12 || d < -1e-12 {
				t.Errorf("%s %s: %v, want %v (+-1e-12)", n, k, got[n][k], v)
			}
		}
	}
	if Pressure(nil) != nil {
		t.Errorf("no holdings: %v, want nil", Pressure(nil))
	}
}

// TestPipelinesShareEgress: two pipelines whose fetch output (10 MB per record) must
// cross the CPU node's 250 MB/s link to reach their GPU operator (fetch does not fit in a
// GPU node's memory), each capped at 20 records/s by its two GPU instances. Planned
// alone, each routes 200 MB/s over the link, and the two together overfill it; planned
// beside the first (EgressUsed), the second keeps within the 50 MB/s the first leaves,
// and the decisions together fit every node.
func TestPipelinesShareEgress(t *testing.T) {
	const link = 250e6
	nodes := []fsm.Node{
		{Name: "c1", CPU: 16, MemoryMB: 16 * 40000, EgressBps: link},
		{Name: "g1", CPU: 4, MemoryMB: 32768, GPUs: 2},
		{Name: "g2", CPU: 4, MemoryMB: 32768, GPUs: 2},
	}
	pipe := func(job string) PlanInput {
		return PlanInput{Job: job, Nodes: nodes, Operators: []OperatorInput{
			{Operator: fsm.Operator{Name: "fetch", Order: 1, CPU: 1, MemoryMB: 40000, Amplification: 1, OutputBytes: 10e6}, Capacity: 4},
			{Operator: fsm.Operator{Name: "infer", Order: 2, CPU: 1, MemoryMB: 1024, GPUs: 1, Amplification: 1, OutputBytes: 1e3, MaxInstances: 2}, Capacity: 10},
		}}
	}
	s := MILP{Solver: milp.HiGHS{}}
	ctx := context.Background()
	a, b := pipe("a"), pipe("b")
	pa, err := s.Plan(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	// infer's two instances bind (fetch could do 64, the link 25 records/s); the
	// tolerance is the MILP's 1 % gap
	if pa.Throughput < 20*0.99 || pa.Throughput > 20*(1+1e-6) || pa.Egress["c1"] < 0.99*200e6 {
		t.Fatalf("a alone: %.4g records/s, c1 egress %.4g: want 20 records/s, 200 MB/s over the link", pa.Throughput, pa.Egress["c1"])
	}
	ha := HoldingOf(a, pa)
	// b planned as if it owned the cluster (what per-pipeline planning did)
	naive, err := s.Plan(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	over := Conflicts(nodes, []Holding{ha}, HoldingOf(b, naive))
	if len(over) == 0 || !strings.Contains(strings.Join(over, "\n"), "c1: egress over by") {
		t.Fatalf("b planned alone beside a: conflicts %v, want c1's egress over", over)
	}
	if got := Oversubscribed(nodes, []Holding{ha, HoldingOf(b, naive)}); len(got) != 1 || !strings.HasPrefix(got[0], "c1: egress over by") {
		t.Fatalf("Oversubscribed of both alone-plans: %v, want one line for c1's egress", got)
	}
	// b planned beside a: on the residual nodes and the link a leaves
	b.Nodes, b.EgressUsed = Residual(nodes, []Holding{ha}), EgressUse([]Holding{ha})
	pb, err := s.Plan(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if left := link - pa.Egress["c1"]; pb.Egress["c1"] > left+egressTol*link {
		t.Fatalf("b beside a routes %.4g bytes/s out of c1, but a leaves %.4g", pb.Egress["c1"], left)
	}
	if over := Conflicts(nodes, []Holding{ha}, HoldingOf(b, pb)); len(over) > 0 {
		t.Fatalf("b beside a conflicts: %v", over)
	}
	if over := Oversubscribed(nodes, []Holding{ha, HoldingOf(b, pb)}); len(over) > 0 {
		t.Fatalf("a and b together: %v", over)
	}
	// what a leaves of the link carries 5 records/s (its GPUs would take 20)
	if pb.Throughput < 5*0.99 || pb.Throughput > 5*(1+1e-6) {
		t.Fatalf("b beside a plans %.4g records/s (alone %.4g): want the 5 records/s the link has left", pb.Throughput, naive.Throughput)
	}
}

// TestEgressUse sums the holdings' egress per node; holdings without any add nothing.
func TestEgressUse(t *testing.T) {
	p := &fsm.Pipeline{Job: "a"}
	got := EgressUse([]Holding{{Pipeline: p, Egress: map[string]float64{"n1": 1e6, "n2": 0}}, {Pipeline: p}, {Pipeline: p, Egress: map[string]float64{"n1": 2e6}}})
	if len(got) != 1 || got["n1"] != 3e6 {
		t.Fatalf("egress use %v, want n1 3e6 only", got)
	}
	if EgressUse(nil) != nil {
		t.Fatal("no holdings: want nil")
	}
}

// TestRoutedCapsAtTheLink: a plan made without routing (20 records/s on its instances)
// whose every record crosses c1's 125 MB/s link at 10 MB is routed at the link's 12.5
// records/s, with that egress recorded for c1; with the link taken by others (EgressUsed)
// it carries nothing.
func TestRoutedCapsAtTheLink(t *testing.T) {
	in := PlanInput{Job: "a", Nodes: []fsm.Node{
		{Name: "c1", CPU: 16, MemoryMB: 16 * 40000, EgressBps: 125e6},
		{Name: "g1", CPU: 4, MemoryMB: 32768, GPUs: 2},
	}, Operators: []OperatorInput{
		{Operator: fsm.Operator{Name: "fetch", Order: 1, CPU: 1, MemoryMB: 40000, Amplification: 1, OutputBytes: 10e6}, Capacity: 4},
		{Operator: fsm.Operator{Name: "infer", Order: 2, CPU: 1, MemoryMB: 1024, GPUs: 1, Amplification: 1, OutputBytes: 1e3}, Capacity: 10},
	}}
	pl := Plan{Throughput: 20, Targets: map[string]map[string]fsm.Placement{"fetch": {"c1": {Current: 5}}, "infer": {"g1": {Current: 2}}}}
	r, err := Routed(context.Background(), in, pl)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.Throughput-12.5) > 1e-6 || math.Abs(r.Egress["c1"]-125e6) > 1 || r.Egress["g1"] != 0 {
		t.Fatalf("routed: %.6g records/s, egress %v: want 12.5 over all of c1's link", r.Throughput, r.Egress)
	}
	in.EgressUsed = map[string]float64{"c1": 125e6}
	if r, err = Routed(context.Background(), in, pl); err != nil || r.Throughput > 1e-9 || r.Egress["c1"] > 1 {
		t.Fatalf("routed on a link others fill: %.3g records/s, egress %v, err %v", r.Throughput, r.Egress, err)
	}
}

// TestConflictsBlameOnlyTheNewPlan: a link the others already overfill (it shrank, or an
// unknown one was measured) conflicts with a plan only where that plan sends something,
// so a pipeline with none there can still commit.
func TestConflictsBlameOnlyTheNewPlan(t *testing.T) {
	nodes := []fsm.Node{{Name: "y", CPU: 8, MemoryMB: 8192, EgressBps: 100}, {Name: "z", CPU: 8, MemoryMB: 8192, EgressBps: 100}}
	p := &fsm.Pipeline{Job: "b", Operators: []fsm.Operator{{Name: "f", CPU: 1, MemoryMB: 1}}}
	b := Holding{Pipeline: p, Egress: map[string]float64{"y": 150}}
	a := Holding{Pipeline: &fsm.Pipeline{Job: "a", Operators: p.Operators}, Egress: map[string]float64{"z": 60}}
	if over := Conflicts(nodes, []Holding{b}, a); len(over) != 0 {
		t.Fatalf("a sends nothing over y: conflicts %v", over)
	}
	a.Egress["y"] = 1
	if over := Conflicts(nodes, []Holding{b}, a); len(over) != 1 || !strings.HasPrefix(over[0], "y: egress over by 1 ") {
		t.Fatalf("a sends 1 B/s over y, which b overfills: conflicts %v", over)
	}
	if over := Oversubscribed(nodes, []Holding{b, a}); len(over) != 1 || !strings.HasPrefix(over[0], "y: egress over by 51 ") {
		t.Fatalf("together: %v, want y over by 51", over)
	}
}
