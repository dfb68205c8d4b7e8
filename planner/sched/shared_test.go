package sched

import (
	"strings"
	"testing"

	"github.com/trident-sched/trident/planner/fsm"
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
