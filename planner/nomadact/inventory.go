package nomadact

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/planner/fsm"
)

// othersUse is what the allocations of jobs the planner does not manage hold on a node.
type othersUse struct {
	cpuShares int64 // MHz
	memoryMB  int64
	gpus      map[string]bool // device IDs of accelerators (any vendor's gpu devices)
}

// accelType is the Nomad device type the planner schedules as accelerators, of any vendor
// (nvidia/gpu, amd/gpu, intel/gpu, ...).
const accelType = "gpu"

// vendorField is the fsm.Device / fsm.Operator vendor of a Nomad device vendor: "" for
// fsm.DefaultGPUVendor, so that an inventory of NVIDIA devices reads as before vendors
// were recorded.
func vendorField(v string) string {
	if v == fsm.DefaultGPUVendor {
		return ""
	}
	return v
}

// gpuClasses returns the node's accelerator device groups (type gpu, any vendor) as
// classes: the group's vendor and name (the model), its "memory" attribute (MiB; GiB and
// GB converted) and its healthy instances not in taken (device IDs other jobs hold).
// Classes without an instance left are kept with count 0 only when they had healthy
// instances, so that the node still shows the class.
func gpuClasses(devs []*api.NodeDeviceResource, taken map[string]bool) []fsm.Device {
	var out []fsm.Device
	for _, d := range devs {
		if d == nil || d.Type != accelType {
			continue
		}
		healthy, free := 0, 0
		for _, inst := range d.Instances {
			if inst != nil && inst.Healthy {
				healthy++
				if !taken[inst.ID] {
					free++
				}
			}
		}
		if healthy == 0 {
			continue
		}
		mb := 0
		if attr := d.Attributes["memory"]; attr != nil && attr.IntVal != nil {
			mb = int(*attr.IntVal)
			if u := strings.ToLower(attr.Unit); u == "gib" || u == "gb" {
				mb *= 1024
			}
		}
		out = append(out, fsm.Device{Vendor: vendorField(d.Vendor), Model: d.Name, MemoryMB: mb, Count: free})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Vendor != out[j].Vendor {
			return out[i].Vendor < out[j].Vendor
		}
		if out[i].Model != out[j].Model {
			return out[i].Model < out[j].Model
		}
		return out[i].MemoryMB < out[j].MemoryMB
	})
	return out
}

// withDevices sets node's accelerator classes and their summary: GPUs (the instances left)
// and GPUMemoryMB (the smallest device memory of a class with instances left).
func withDevices(node fsm.Node, classes []fsm.Device) fsm.Node {
	node.Devices, node.GPUs, node.GPUMemoryMB = fsm.MakeDevices(classes...), 0, 0
	for _, d := range classes {
		node.GPUs += d.Count
		if d.Count > 0 && d.MemoryMB > 0 && (node.GPUMemoryMB == 0 || d.MemoryMB < node.GPUMemoryMB) {
			node.GPUMemoryMB = d.MemoryMB
		}
	}
	return node
}

// othersOn sums the resources that allocations not managed by the planner (services,
// batch jobs, other users' work, in any namespace) hold on the node: they are not the
// planner's to place, so the inventory leaves them out. managed tells the planner's own
// allocations (see Actuator.plannerJob).
func othersOn(allocs []*api.AllocationListStub, managed func(*api.AllocationListStub) bool) othersUse {
	u := othersUse{gpus: map[string]bool{}}
	for _, al := range allocs {
		if al == nil || al.DesiredStatus != api.AllocDesiredStatusRun || terminal(al.ClientStatus) || al.AllocatedResources == nil || managed(al) {
			continue
		}
		for _, t := range al.AllocatedResources.Tasks {
			if t == nil {
				continue
			}
			u.cpuShares += t.Cpu.CpuShares
			u.memoryMB += t.Memory.MemoryMB
			for _, d := range t.Devices {
				if d != nil && d.Type == accelType {
					for _, id := range d.DeviceIDs {
						u.gpus[id] = true
					}
				}
			}
		}
	}
	return u
}

// subtractOthers returns node (the planner's model of n, from nodeOf) without what
// allocations of unmanaged jobs hold: CPU and memory from the fingerprinted size (a size
// the node declares in meta trident_cpu_cores / trident_memory_mb is what the planner may
// use, and is taken as declared), GPU instances always. Nothing goes below 0.
func subtractOthers(node fsm.Node, n *api.Node, u othersUse) fsm.Node {
	_, cpuDeclared := n.Meta[opcontract.MetaNodeCPUCores]
	_, memDeclared := n.Meta[opcontract.MetaNodeMemoryMB]
	if n.NodeResources != nil && u.cpuShares > 0 && !cpuDeclared {
		shares := n.NodeResources.Cpu.CpuShares
		if rr := n.ReservedResources; rr != nil {
			shares -= int64(rr.Cpu.CpuShares)
		}
		if shares > 0 {
			node.CPU = math.Max(0, math.Floor((node.CPU-node.CPU*float64(u.cpuShares)/float64(shares))*100)/100)
		}
	}
	if !memDeclared {
		node.MemoryMB = max(0, node.MemoryMB-int(u.memoryMB))
	}
	if n.NodeResources != nil {
		node = withDevices(node, gpuClasses(n.NodeResources.Devices, u.gpus))
	}
	return node
}

// egressOf is node n's egress bandwidth in bytes per second: node meta
// trident_egress_mbps (opcontract.MetaNodeEgressMbps) when set, else the fastest link
// speed Nomad fingerprinted on a network device other than loopback (its "MBits"), else 0
// (unknown, treated as ample). Nomad reports a link whose speed it cannot read at its
// network_speed setting (1000 by default): set the meta where that guess is wrong.
func egressOf(n *api.Node) (float64, error) {
	v, ok := n.Meta[opcontract.MetaNodeEgressMbps]
	if !ok {
		best := 0
		if n.NodeResources != nil {
			for _, nw := range n.NodeResources.Networks {
				if nw != nil && nw.MBits != nil && nw.Device != "" && !strings.HasPrefix(nw.Device, "lo") && *nw.MBits > best {
					best = *nw.MBits
				}
			}
		}
		return float64(best) * 1e6 / 8, nil
	}
	mbps, err := strconv.ParseFloat(v, 64)
	if err != nil || !(mbps > 0) || math.IsInf(mbps, 0) {
		return 0, fmt.Errorf("node %s: meta %s=%q: want a positive number of Mbit/s", n.Name, opcontract.MetaNodeEgressMbps, v)
	}
	return mbps * 1e6 / 8, nil
}

// terminal reports whether an allocation's client status is final.
func terminal(status string) bool {
	switch status {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

// inventoryNode is the planner's model of node n: nodeOf, its egress, and what the other
// jobs' allocations on it (allocs, the node's share of runningAllocs) leave free.
func (a *Actuator) inventoryNode(ctx context.Context, n *api.Node, allocs []*api.AllocationListStub) (fsm.Node, error) {
	node := nodeOf(n)
	eg, err := egressOf(n)
	if err != nil {
		return fsm.Node{}, err
	}
	node.EgressBps = eg
	var errs []error
	u := othersOn(allocs, func(al *api.AllocationListStub) bool {
		ok, err := a.plannerJob(ctx, al)
		if err != nil {
			errs = append(errs, err)
		}
		return ok && strings.Contains(al.TaskGroup, "@")
	})
	if len(errs) > 0 {
		return fsm.Node{}, errors.Join(errs...)
	}
	return subtractOthers(node, n, u), nil
}

// runningAllocs lists, in one request, the allocations of every namespace that are meant
// to run and not finished, with their allocated resources, by node ID. Listing stubs
// instead of each node's allocations keeps a round from decoding every allocation's job.
func (a *Actuator) runningAllocs(ctx context.Context) (map[string][]*api.AllocationListStub, error) {
	q := a.q(ctx)
	q.Namespace = "*"
	q.Params = map[string]string{"resources": "true"}
	q.Filter = `DesiredStatus == "run" and ClientStatus != "complete" and ClientStatus != "failed" and ClientStatus != "lost"`
	stubs, _, err := a.c.Allocations().List(q)
	if err != nil {
		return nil, fmt.Errorf("list allocations: %w", err)
	}
	out := map[string][]*api.AllocationListStub{}
	for _, s := range stubs {
		out[s.NodeID] = append(out[s.NodeID], s)
	}
	return out, nil
}

// plannerJob reports whether al's job is one the planner renders (a group of it is an
// operator's anchor): only then are its groups named "<op>@..." the planner's. The answer
// is cached per job and version (a job becomes or stops being a pipeline only through a
// new version).
func (a *Actuator) plannerJob(ctx context.Context, al *api.AllocationListStub) (bool, error) {
	key := al.Namespace + "/" + al.JobID
	a.mu.Lock()
	c, ok := a.jobs[key]
	a.mu.Unlock()
	if ok && c.version >= al.JobVersion {
		return c.planner, nil
	}
	q := a.q(ctx)
	q.Namespace = al.Namespace
	job, _, err := a.c.Jobs().Info(al.JobID, q)
	if err != nil {
		if isNotFound(err) {
			return false, nil // purged: its allocations are being stopped
		}
		return false, fmt.Errorf("read job %q of allocation %s: %w", al.JobID, al.ID, err)
	}
	c = jobKind{}
	if job.Version != nil {
		c.version = *job.Version
	}
	for _, g := range job.TaskGroups {
		if g != nil && g.Meta[MetaAnchor] == "true" {
			c.planner = true
		}
	}
	a.mu.Lock()
	a.jobs[key] = c
	a.mu.Unlock()
	return c.planner, nil
}

// jobKind caches whether a job (at a version) is rendered by the planner.
type jobKind struct {
	version uint64
	planner bool
}
