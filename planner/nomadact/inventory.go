package nomadact

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/planner/fsm"
)

// othersUse is what the allocations of jobs the planner does not manage hold on a node.
type othersUse struct {
	cpuShares int64 // MHz
	memoryMB  int64
	gpus      int
}

// managed reports whether an allocation belongs to a group the planner rendered (an
// operator's pinned group or its anchor).
func managed(al *api.Allocation) bool {
	if al.Job == nil {
		return false
	}
	g := al.Job.LookupTaskGroup(al.TaskGroup)
	return g != nil && (g.Meta[MetaOperator] != "" || g.Meta[MetaAnchor] == "true")
}

// othersOn sums the resources that allocations not managed by the planner (services,
// batch jobs, other users' work, in any namespace) hold on the node: they are not the
// planner's to place, so the inventory leaves them out.
func othersOn(allocs []*api.Allocation) othersUse {
	var u othersUse
	for _, al := range allocs {
		if al == nil || al.DesiredStatus != api.AllocDesiredStatusRun || al.ClientTerminalStatus() || managed(al) || al.AllocatedResources == nil {
			continue
		}
		for _, t := range al.AllocatedResources.Tasks {
			if t == nil {
				continue
			}
			u.cpuShares += t.Cpu.CpuShares
			u.memoryMB += t.Memory.MemoryMB
			for _, d := range t.Devices {
				if d != nil && d.Vendor == "nvidia" && d.Type == "gpu" {
					u.gpus += len(d.DeviceIDs)
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
	node.GPUs = max(0, node.GPUs-u.gpus)
	return node
}

// egressOf reads node meta trident_egress_mbps (opcontract.MetaNodeEgressMbps) into bytes
// per second; 0 (unknown, treated as ample) without it.
func egressOf(n *api.Node) (float64, error) {
	v, ok := n.Meta[opcontract.MetaNodeEgressMbps]
	if !ok {
		return 0, nil
	}
	mbps, err := strconv.ParseFloat(v, 64)
	if err != nil || !(mbps > 0) || math.IsInf(mbps, 0) {
		return 0, fmt.Errorf("node %s: meta %s=%q: want a positive number of Mbit/s", n.Name, opcontract.MetaNodeEgressMbps, v)
	}
	return mbps * 1e6 / 8, nil
}

// inventoryNode is the planner's model of node n: nodeOf, its egress, and what other jobs'
// allocations leave free.
func (a *Actuator) inventoryNode(ctx context.Context, n *api.Node) (fsm.Node, error) {
	node := nodeOf(n)
	eg, err := egressOf(n)
	if err != nil {
		return fsm.Node{}, err
	}
	node.EgressBps = eg
	allocs, _, err := a.c.Nodes().Allocations(n.ID, a.q(ctx))
	if err != nil {
		return fsm.Node{}, fmt.Errorf("list allocations of nomad node %s: %w", n.Name, err)
	}
	return subtractOthers(node, n, othersOn(allocs)), nil
}
