package sched

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/milp"
)

// devicesInput: "mixed" has one 80 GiB A100 and two 24 GiB L4s (Nomad device groups),
// "old" counts two GPUs of 24 GiB the pre-device way. llm needs 40 GiB, embed 16 GiB and
// tag takes only L4s.
func devicesInput() PlanInput {
	return PlanInput{
		Job: "vlm",
		Operators: []OperatorInput{
			{Operator: fsm.Operator{Name: "embed", CPU: 1, MemoryMB: 1024, GPUs: 1, GPUMemoryMB: 16000, Amplification: 1, OutputBytes: 100}, Capacity: 10},
			{Operator: fsm.Operator{Name: "llm", CPU: 1, MemoryMB: 1024, GPUs: 1, GPUMemoryMB: 40960, Amplification: 1, OutputBytes: 100}, Capacity: 10},
			{Operator: fsm.Operator{Name: "tag", CPU: 1, MemoryMB: 1024, GPUs: 1, GPUModels: []string{"L4"}, Amplification: 1}, Capacity: 40},
		},
		Nodes: []fsm.Node{
			{Name: "mixed", CPU: 16, MemoryMB: 65536, GPUs: 3, GPUMemoryMB: 24576, Devices: fsm.MakeDevices(
				fsm.Device{Model: "A100-SXM4-80GB", MemoryMB: 81920, Count: 1}, fsm.Device{Model: "L4", MemoryMB: 24576, Count: 2})},
			{Name: "old", CPU: 16, MemoryMB: 65536, GPUs: 2, GPUMemoryMB: 24576},
		},
	}
}

// Device classes reach every scheduler: llm (40 GiB) only ever gets the A100, so T <= 10;
// tag only L4s (on "mixed": "old" has no model name); embed the rest. The MILP's optimum
// is T = 10 with llm on the A100, tag on an L4 and embed on one of "old"'s GPUs.
func TestDeviceClassesConstrainPlans(t *testing.T) {
	for _, s := range []Scheduler{MILP{Solver: milp.HiGHS{}}, MILP{Solver: milp.Greedy{}}, Proportional{}} {
		p, err := s.Plan(context.Background(), devicesInput())
		if err != nil {
			t.Fatalf("%T: %v", s, err)
		}
		if n := p.Targets["llm"]["old"].Total(); n != 0 {
			t.Errorf("%T: %d llm instances on 24 GiB GPUs", s, n)
		}
		if n := p.Targets["llm"]["mixed"].Total(); n > 1 {
			t.Errorf("%T: %d llm instances on one A100", s, n)
		}
		if n := p.Targets["tag"]["old"].Total(); n != 0 {
			t.Errorf("%T: %d tag instances on GPUs of unknown model", s, n)
		}
		if mixed := p.Targets["llm"]["mixed"].Total() + p.Targets["tag"]["mixed"].Total() + p.Targets["embed"]["mixed"].Total(); mixed > 3 {
			t.Errorf("%T: %d accelerator instances on 3 devices", s, mixed)
		}
		if _, ok := s.(MILP); ok && p.Throughput < 10-1e-6 {
			t.Errorf("%T: T = %v, want 10", s, p.Throughput)
		}
	}
	// nothing accepts 80 GiB of memory on a 40 GiB-or-less cluster: refused by name
	in := devicesInput()
	in.Operators[1].GPUMemoryMB = 90000
	if err := in.Validate(); err == nil || !strings.Contains(err.Error(), `"llm"`) || !strings.Contains(err.Error(), "trident_gpu_memory_mb") {
		t.Errorf("err %v", err)
	}
	in = devicesInput()
	in.Operators[2].GPUModels = []string{"H100"}
	if err := in.Validate(); err == nil || !strings.Contains(err.Error(), "of model H100") {
		t.Errorf("err %v", err)
	}
	in = devicesInput()
	in.Operators[1].MinInstances = 2
	if err := in.Validate(); err == nil || !strings.Contains(err.Error(), "need 2 GPUs with at least 40960 MB (llm 2 × 1) but the inventory has 1") {
		t.Errorf("err %v", err)
	}
}

// Inventories without devices decode as before; devices round-trip as a JSON list; Node
// stays comparable (the planner compares inventories with ==).
func TestNodeDevicesJSON(t *testing.T) {
	var old fsm.Node
	if err := json.Unmarshal([]byte(`{"name":"g","cpu":8,"memory_mb":1024,"gpus":2,"gpu_memory_mb":16000}`), &old); err != nil {
		t.Fatal(err)
	}
	if cl := deviceClasses(old); len(cl) != 1 || cl[0].Count != 2 || cl[0].MemoryMB != 16000 {
		t.Errorf("classes of an old node: %+v", cl)
	}
	if b, _ := json.Marshal(old); strings.Contains(string(b), "devices") {
		t.Errorf("a node without devices marshals them: %s", b)
	}
	n := devicesInput().Nodes[0]
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"devices":[{"model":"A100-SXM4-80GB","memory_mb":81920,"count":1},{"model":"L4","memory_mb":24576,"count":2}]`) {
		t.Errorf("JSON %s", b)
	}
	var back fsm.Node
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != n || len(back.Devices.List()) != 2 {
		t.Errorf("round trip %+v != %+v", back, n)
	}
	if err := json.Unmarshal([]byte(`{"name":"x","devices":[{"model":1}]}`), &back); err == nil {
		t.Error("a malformed device list decoded")
	}
}

// TestVendorsConstrainPlans: on a node with two NVIDIA L4s and two AMD MI210s, the ROCm
// operator (trident_gpu_vendor amd) only ever gets the MI210s and the CUDA one (the
// default vendor) only the L4s, under every scheduler; the MILP runs the pipeline at the
// CUDA operator's two devices' 20 records/s (without vendors it would give it a third
// device, an MI210, for 30). Without AMD devices the ROCm operator is refused by name.
func TestVendorsConstrainPlans(t *testing.T) {
	in := PlanInput{Job: "mix", Operators: []OperatorInput{
		{Operator: fsm.Operator{Name: "cuda", CPU: 1, MemoryMB: 1024, GPUs: 1, Amplification: 1, OutputBytes: 100}, Capacity: 10},
		{Operator: fsm.Operator{Name: "rocm", CPU: 1, MemoryMB: 1024, GPUs: 1, GPUVendor: "amd", Amplification: 1, OutputBytes: 100}, Capacity: 40},
	}, Nodes: []fsm.Node{{Name: "n1", CPU: 16, MemoryMB: 65536, GPUs: 4, Devices: fsm.MakeDevices(
		fsm.Device{Model: "L4", MemoryMB: 24576, Count: 2}, fsm.Device{Vendor: "amd", Model: "MI210", MemoryMB: 65536, Count: 2})}}}
	for _, s := range []Scheduler{MILP{Solver: milp.HiGHS{}}, MILP{Solver: milp.Greedy{}}, Proportional{}} {
		p, err := s.Plan(context.Background(), in)
		if err != nil {
			t.Fatalf("%T: %v", s, err)
		}
		// two devices of each vendor: more than two instances of either takes the other's
		if c, r := p.Targets["cuda"]["n1"].Total(), p.Targets["rocm"]["n1"].Total(); c > 2 || r > 2 || c < 1 || r < 1 {
			t.Errorf("%T: cuda %d, rocm %d instances on 2 + 2 devices", s, c, r)
		}
		if _, ok := s.(MILP); ok && p.Throughput < 20-1e-6 {
			t.Errorf("%T: T = %v, want 20", s, p.Throughput)
		}
	}
	in.Nodes[0].Devices = fsm.MakeDevices(fsm.Device{Model: "L4", MemoryMB: 24576, Count: 4})
	if err := in.Validate(); err == nil || !strings.Contains(err.Error(), `"rocm"`) || !strings.Contains(err.Error(), "amd GPUs") {
		t.Errorf("no AMD devices: err %v, want rocm refused for amd GPUs", err)
	}
}
