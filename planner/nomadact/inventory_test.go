package nomadact

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/fsm"
)

func alloc(group, desired, client string, shares, mem int64, gpus int) *api.AllocationListStub {
	ids := make([]string, gpus)
	for i := range ids {
		ids[i] = "GPU-" + string(rune('a'+i))
	}
	return &api.AllocationListStub{TaskGroup: group, DesiredStatus: desired, ClientStatus: client,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Cpu:     api.AllocatedCpuResources{CpuShares: shares},
			Memory:  api.AllocatedMemoryResources{MemoryMB: mem},
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "A100", DeviceIDs: ids}},
		}}}}
}

// TestInventoryLeavesOutOtherJobs: what running allocations of jobs the planner does not
// manage hold (CPU scaled into the node's modelled cores, memory, GPUs) is not the
// planner's; its own rendered groups, stopped and finished allocations are.
func TestInventoryLeavesOutOtherJobs(t *testing.T) {
	allocs := []*api.AllocationListStub{
		alloc("ocr@n1.g0", "run", "running", 4000, 8192, 2), // the planner's own
		alloc("web", "run", "running", 2000, 1024, 1),       // another job: counts
		alloc("web", "run", "pending", 1000, 512, 0),        // placed, starting: counts
		alloc("web", "stop", "running", 3000, 3000, 1),      // being stopped
		alloc("web", "run", "complete", 3000, 3000, 1),      // finished
	}
	u := othersOn(allocs, func(al *api.AllocationListStub) bool { return al.TaskGroup == "ocr@n1.g0" })
	if u.cpuShares != 3000 || u.memoryMB != 1536 || len(u.gpus) != 1 || !u.gpus["GPU-a"] {
		t.Fatalf("others use %+v, want 3000 MHz, 1536 MB, GPU-a", u)
	}
	// A node of 8 cores (16000 MHz) with 1 core reserved: 7 schedulable cores, and 4 A100s.
	n := &api.Node{Name: "n1",
		NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 16000},
			Devices: []*api.NodeDeviceResource{gpuGroup("A100", 81920, "GPU-a", "GPU-b", "GPU-c", "GPU-d")}},
		ReservedResources: &api.NodeReservedResources{Cpu: api.NodeReservedCpuResources{CpuShares: 2000}}}
	got := subtractOthers(fsm.Node{Name: "n1", CPU: 7, MemoryMB: 16384, GPUs: 4}, n, u)
	// 3000 of the 14000 schedulable MHz = 3/14 of the 7 cores = 1.5 cores.
	if got.CPU != 5.5 || got.MemoryMB != 16384-1536 || got.GPUs != 3 {
		t.Fatalf("node after others: %+v, want 5.5 cores, 14848 MB, 3 GPUs", got)
	}
	// A node that declares its size in meta keeps it; its GPUs are still shared.
	n.Meta = map[string]string{"trident_cpu_cores": "14", "trident_memory_mb": "16384"}
	if got := subtractOthers(fsm.Node{Name: "n1", CPU: 14, MemoryMB: 16384, GPUs: 4}, n, u); got.CPU != 14 || got.MemoryMB != 16384 || got.GPUs != 3 {
		t.Fatalf("declared node after others: %+v, want 14 cores, 16384 MB, 3 GPUs", got)
	}
	n.Meta = nil
	all := map[string]bool{"GPU-a": true, "GPU-b": true, "GPU-c": true, "GPU-d": true, "GPU-x": true}
	if z := subtractOthers(fsm.Node{CPU: 1, MemoryMB: 100, GPUs: 0}, n, othersUse{cpuShares: 1 << 40, memoryMB: 1 << 20, gpus: all}); z.CPU != 0 || z.MemoryMB != 0 || z.GPUs != 0 {
		t.Fatalf("an oversubscribed node goes below 0: %+v", z)
	}
}

// TestEgressFromNodeMeta: trident_egress_mbps is the node's egress; a bad value is refused
// by name; no meta is unknown (0).
func TestEgressFromNodeMeta(t *testing.T) {
	if bps, err := egressOf(&api.Node{Meta: map[string]string{"trident_egress_mbps": "10000"}}); err != nil || bps != 1.25e9 {
		t.Fatalf("10 Gbit/s: %v %v", bps, err)
	}
	if bps, err := egressOf(&api.Node{}); err != nil || bps != 0 {
		t.Fatalf("no meta: %v %v", bps, err)
	}
	for _, v := range []string{"fast", "0", "-5", "Inf"} {
		if _, err := egressOf(&api.Node{Name: "n1", Meta: map[string]string{"trident_egress_mbps": v}}); err == nil || !strings.Contains(err.Error(), "trident_egress_mbps") {
			t.Errorf("%q: %v", v, err)
		}
	}
}

// gpuGroup is a fingerprinted nvidia/gpu device group with healthy instances ids.
func gpuGroup(model string, memMiB int64, ids ...string) *api.NodeDeviceResource {
	g := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: model,
		Attributes: map[string]*api.Attribute{"memory": {IntVal: &memMiB, Unit: "MiB"}}}
	for _, id := range ids {
		g.Instances = append(g.Instances, &api.NodeDevice{ID: id, Healthy: true})
	}
	return g
}

// TestInventoryDeviceClasses: a node with GPUs of two models is two accelerator classes
// (model, memory, healthy instances), so that an operator needing 40 GiB is never planned
// on its 24 GiB GPUs; devices other jobs hold are taken from their own class; an unhealthy
// instance does not count, and a non-GPU device group is ignored.
func TestInventoryDeviceClasses(t *testing.T) {
	a10 := gpuGroup("A10", 24576, "GPU-1", "GPU-2")
	a10.Instances = append(a10.Instances, &api.NodeDevice{ID: "GPU-3", Healthy: false})
	n := &api.Node{Name: "n1", NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 8000, TotalCpuCores: 8},
		Memory: api.NodeMemoryResources{MemoryMB: 32768},
		Devices: []*api.NodeDeviceResource{a10, gpuGroup("H100", 80, "GPU-9"), {Vendor: "intel", Type: "fpga", Name: "x",
			Instances: []*api.NodeDevice{{ID: "F", Healthy: true}}}}}}
	// The H100 group reports its memory in GiB.
	n.NodeResources.Devices[1].Attributes["memory"].Unit = "GiB"
	node := nodeOf(n)
	want := []fsm.Device{{Model: "A10", MemoryMB: 24576, Count: 2}, {Model: "H100", MemoryMB: 81920, Count: 1}}
	if got := node.Devices.List(); fmt.Sprint(got) != fmt.Sprint(want) || node.GPUs != 3 || node.GPUMemoryMB != 24576 {
		t.Fatalf("classes %+v (GPUs %d, smallest %d MB), want %+v", got, node.GPUs, node.GPUMemoryMB, want)
	}
	got := subtractOthers(node, n, othersUse{gpus: map[string]bool{"GPU-9": true}})
	want[1].Count = 0
	if fmt.Sprint(got.Devices.List()) != fmt.Sprint(want) || got.GPUs != 2 || got.GPUMemoryMB != 24576 {
		t.Fatalf("after another job took the H100: %+v (GPUs %d)", got.Devices.List(), got.GPUs)
	}
}

// TestEgressFromFingerprint: without meta the fastest non-loopback link Nomad fingerprinted
// is the node's egress; loopback alone is unknown (0); the meta overrides the link.
func TestEgressFromFingerprint(t *testing.T) {
	mb := func(v int) *int { return &v }
	n := &api.Node{NodeResources: &api.NodeResources{Networks: []*api.NetworkResource{
		{Device: "lo", MBits: mb(100000)}, {Device: "eth0", MBits: mb(10000)}, {Device: "eth1", MBits: mb(25000)}}}}
	if bps, err := egressOf(n); err != nil || bps != 25000*1e6/8 {
		t.Fatalf("links: %v %v, want 25 Gbit/s", bps, err)
	}
	n.Meta = map[string]string{"trident_egress_mbps": "1000"}
	if bps, err := egressOf(n); err != nil || bps != 1.25e8 {
		t.Fatalf("meta over the links: %v %v", bps, err)
	}
	lo := &api.Node{NodeResources: &api.NodeResources{Networks: []*api.NetworkResource{{Device: "lo", MBits: mb(1000)}}}}
	if bps, err := egressOf(lo); err != nil || bps != 0 {
		t.Fatalf("loopback only: %v %v, want unknown", bps, err)
	}
}

// TestInventoryVendors: accelerators of any vendor are classes (gpu devices: an AMD group
// beside an NVIDIA one, with its vendor; NVIDIA's is the default and reads as ""), a
// device type other than gpu is not, and an AMD device another job holds is taken from
// the AMD class.
func TestInventoryVendors(t *testing.T) {
	mi := gpuGroup("MI210", 65536, "AMD-1", "AMD-2")
	mi.Vendor = "amd"
	n := &api.Node{Name: "n1", NodeResources: &api.NodeResources{Cpu: api.NodeCpuResources{CpuShares: 8000, TotalCpuCores: 8},
		Memory: api.NodeMemoryResources{MemoryMB: 32768},
		Devices: []*api.NodeDeviceResource{gpuGroup("L4", 24576, "GPU-1"), mi, {Vendor: "xilinx", Type: "fpga", Name: "u250",
			Instances: []*api.NodeDevice{{ID: "F", Healthy: true}}}}}}
	node := nodeOf(n)
	want := []fsm.Device{{Model: "L4", MemoryMB: 24576, Count: 1}, {Vendor: "amd", Model: "MI210", MemoryMB: 65536, Count: 2}}
	if got := node.Devices.List(); fmt.Sprint(got) != fmt.Sprint(want) || node.GPUs != 3 {
		t.Fatalf("classes %+v (GPUs %d), want %+v", got, node.GPUs, want)
	}
	other := &api.AllocationListStub{TaskGroup: "x", DesiredStatus: api.AllocDesiredStatusRun, ClientStatus: api.AllocClientStatusRunning,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"t": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "amd", Type: "gpu", Name: "MI210", DeviceIDs: []string{"AMD-2"}}}}}}}
	u := othersOn([]*api.AllocationListStub{other}, func(*api.AllocationListStub) bool { return false })
	got := subtractOthers(node, n, u)
	want[1].Count = 1
	if fmt.Sprint(got.Devices.List()) != fmt.Sprint(want) || got.GPUs != 2 {
		t.Fatalf("after another job took an MI210: %+v (GPUs %d), want %+v", got.Devices.List(), got.GPUs, want)
	}
}
