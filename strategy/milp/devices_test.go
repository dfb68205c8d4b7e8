package milp_test

import (
	"math"
	"strings"
	"testing"

	"github.com/trident-sched/trident/strategy/milp"
)

const gib = 1024.0

// llmCluster: an "l4" node with two 24 GiB L4s and ample cores, an "a100" node with one
// 80 GiB A100. embed (any device) feeds llm (one device of at least 40 GiB).
func llmCluster() *milp.Problem {
	return &milp.Problem{
		Operators: []milp.Operator{
			{Name: "embed", CPU: 1, MemMB: 1024, GPUs: 1, Capacity: 10, Amplification: 1, OutputBytes: 1e3, LaunchSec: 5, TerminateSec: 1},
			{Name: "llm", CPU: 1, MemMB: 1024, GPUs: 1, GPUMemMB: 40 * gib, Capacity: 10, Amplification: 1, LaunchSec: 5, TerminateSec: 1},
		},
		Nodes: []milp.Node{
			{Name: "l4", CPU: 32, MemMB: 65536, Devices: []milp.Device{{Model: "L4", MemMB: 24 * gib, Count: 2}}, EgressBps: math.Inf(1)},
			{Name: "a100", CPU: 32, MemMB: 65536, Devices: []milp.Device{{Model: "A100-80GB", MemMB: 80 * gib, Count: 1}}, EgressBps: math.Inf(1)},
		},
	}
}

// An operator needing 40 GiB is never placed on a 24 GiB GPU: llm gets the A100, embed
// both L4s, T = 10 (the pooled-GPU model would put llm on an L4 and claim 15).
func TestDeviceMemoryIsAResource(t *testing.T) {
	for _, s := range []milp.Solver{milp.HiGHS{}, milp.Greedy{}} {
		p := llmCluster()
		sol := mustSolve(t, s, p, milp.Options{RelGap: 1e-9})
		if got := sol.PerNode[1][0].Total(); got != 0 {
			t.Errorf("%T: %d llm instances on the 24 GiB node", s, got)
		}
		if math.Abs(sol.Throughput-10) > 1e-6 {
			t.Errorf("%T: T = %.6g, want 10", s, sol.Throughput)
		}
	}
	// the checker refuses llm on an L4: a plan for the cluster without the A100 (both
	// operators share the L4s) checked against the real one
	alt := llmCluster()
	alt.Nodes[1].Devices = nil
	alt.Operators[1].GPUMemMB = 0
	sol := mustSolve(t, milp.Greedy{}, alt, milp.Options{})
	if err := milp.Validate(llmCluster(), sol); err == nil || !strings.Contains(err.Error(), "device classes") {
		t.Errorf("checker: %v, want a device-class refusal", err)
	}
}

// GPUModels restricts an operator to the listed models; a model list and a memory floor
// that no node meets is refused up front, naming the operator.
func TestDeviceModels(t *testing.T) {
	p := llmCluster()
	p.Operators[0].GPUModels = []string{"A100-80GB"} // embed now competes for the A100
	p.Operators[1].GPUMemMB = 0
	p.Operators[1].GPUModels = []string{"L4"} // llm moves to the L4s
	for _, s := range []milp.Solver{milp.HiGHS{}, milp.Greedy{}} {
		sol := mustSolve(t, s, p, milp.Options{RelGap: 1e-9})
		if sol.PerNode[0][0].Total() != 0 || sol.PerNode[1][1].Total() != 0 {
			t.Errorf("%T: placement %v breaks the model lists", s, sol.PerNode)
		}
		if math.Abs(sol.Throughput-10) > 1e-6 {
			t.Errorf("%T: T = %.6g, want 10", s, sol.Throughput)
		}
	}
	p.Operators[1].GPUModels = []string{"H100"}
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "llm") || !strings.Contains(err.Error(), "H100") {
		t.Errorf("Check: %v, want llm named as fitting no node", err)
	}
}

// On a node with two device classes an instance takes its devices from one class: two
// 80 GiB and two 24 GiB devices host two 1-device 40 GiB instances and one 2-device
// instance of an undemanding operator only if the latter goes to the small devices.
func TestMixedDeviceNode(t *testing.T) {
	p := &milp.Problem{
		Operators: []milp.Operator{
			{Name: "pair", CPU: 1, MemMB: 1024, GPUs: 2, Capacity: 10, Amplification: 1, LaunchSec: 5, TerminateSec: 1},
			{Name: "big", CPU: 1, MemMB: 1024, GPUs: 1, GPUMemMB: 40 * gib, Capacity: 5, Amplification: 1, LaunchSec: 5, TerminateSec: 1},
		},
		Nodes: []milp.Node{{Name: "mix", CPU: 32, MemMB: 65536, EgressBps: math.Inf(1), Devices: []milp.Device{
			{Model: "H100", MemMB: 80 * gib, Count: 2}, {Model: "L4", MemMB: 24 * gib, Count: 2}}}},
	}
	for _, s := range []milp.Solver{milp.HiGHS{}, milp.Greedy{}} {
		sol := mustSolve(t, s, p, milp.Options{RelGap: 1e-9})
		if sol.PerNode[0][0].Total() != 1 || sol.PerNode[1][0].Total() != 2 || math.Abs(sol.Throughput-10) > 1e-6 {
			t.Errorf("%T: pair %d big %d T %.6g, want 1, 2 and 10", s, sol.PerNode[0][0].Total(), sol.PerNode[1][0].Total(), sol.Throughput)
		}
	}
	// GPUs disagreeing with Devices is refused
	p.Nodes[0].GPUs = 3
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "GPUs 3 disagrees") {
		t.Errorf("Check: %v", err)
	}
}

// A node described by GPUs alone is one class of unknown memory: it serves operators
// without a memory floor (as before device classes existed) and none with one.
func TestGPUsAloneIsUnknownMemory(t *testing.T) {
	p := llmCluster()
	p.Nodes[0].Devices, p.Nodes[0].GPUs = nil, 2
	for _, s := range []milp.Solver{milp.HiGHS{}, milp.Greedy{}} {
		sol := mustSolve(t, s, p, milp.Options{RelGap: 1e-9})
		if sol.PerNode[1][0].Total() != 0 || math.Abs(sol.Throughput-10) > 1e-6 {
			t.Errorf("%T: placement %v T %.6g: want llm only on the A100 and T = 10", s, sol.PerNode, sol.Throughput)
		}
	}
}
