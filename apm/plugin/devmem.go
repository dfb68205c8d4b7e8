package plugin

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// nodeDeviceMemory maps each device of a node's stats (Nomad's node stats API, which
// carries the device plugins' stats) to its used memory in bytes; devices without memory
// stats are absent.
func nodeDeviceMemory(st *api.HostStats) map[string]float64 {
	out := map[string]float64{}
	if st == nil {
		return out
	}
	for _, g := range st.DeviceStats {
		if g == nil {
			continue
		}
		for id, d := range g.InstanceStats {
			if v, ok := memoryUsed(d); ok {
				out[id] = v
			}
		}
	}
	return out
}

// allocDevices is where an allocation runs and the device IDs each of its tasks holds.
type allocDevices struct {
	node  string
	tasks [][]string
}

// devicesOf reads the node and the per-task device IDs of an allocation.
func devicesOf(al *api.Allocation) allocDevices {
	d := allocDevices{node: al.NodeID}
	if al.AllocatedResources == nil {
		return d
	}
	for _, tr := range al.AllocatedResources.Tasks {
		if tr == nil {
			continue
		}
		var ids []string
		for _, dev := range tr.Devices {
			if dev != nil {
				ids = append(ids, dev.DeviceIDs...)
			}
		}
		if len(ids) > 0 {
			d.tasks = append(d.tasks, ids)
		}
	}
	return d
}

// deviceMemory is an allocation's device memory in bytes from its node's device memory:
// the largest task's sum over its devices; ok is false when none of them reports memory.
func deviceMemory(d allocDevices, node map[string]float64) (bytes float64, ok bool) {
	for _, ids := range d.tasks {
		sum, have := 0.0, false
		for _, id := range ids {
			if v, isMem := node[id]; isMem {
				sum, have = sum+v, true
			}
		}
		if have {
			bytes, ok = math.Max(bytes, sum), true
		}
	}
	return bytes, ok
}

// memoryUsed reads one device's used memory in bytes: trident-gpu's "memory_used"
// attribute, else a summary in a memory unit (the nvidia plugin's summary is its memory).
func memoryUsed(d *api.DeviceStats) (float64, bool) {
	if d == nil {
		return 0, false
	}
	if d.Stats != nil {
		if v, ok := inBytes(d.Stats.Attributes["memory_used"]); ok {
			return v, true
		}
	}
	return inBytes(d.Summary)
}

// inBytes converts a stat value with a memory unit (B, KiB, MiB, GiB) to bytes.
func inBytes(v *api.StatValue) (float64, bool) {
	if v == nil {
		return 0, false
	}
	var x float64
	switch {
	case v.IntNumeratorVal != nil:
		x = float64(*v.IntNumeratorVal)
	case v.FloatNumeratorVal != nil:
		x = *v.FloatNumeratorVal
	default:
		return 0, false
	}
	scale, ok := map[string]float64{"b": 1, "bytes": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}[strings.ToLower(v.Unit)]
	if !ok || x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, false
	}
	return x * scale, true
}

// fillDeviceMemory raises each instance's device memory peak of snap to the used memory
// of the devices its allocation holds (facts, from allocsOf), as the device plugin
// reports it in Nomad's node stats (trident-gpu's memory_used; NVML on a real GPU), so
// that the tuner's memory model does not rest on the operator's own metric alone. The
// value is what the plugin last sampled, so a short spike between two reads can be
// missed: the operator's own peak stays the first source. Each node's stats are read
// once per refresh; a failed read is an error and leaves the instances' own figures.
func fillDeviceMemory(ctx context.Context, cl *api.Client, facts map[string]allocFacts, snap *snapshot) []error {
	q := (&api.QueryOptions{}).WithContext(ctx)
	nodes := map[string]map[string]float64{}
	var errs []error
	for id, m := range snap.instances {
		d := facts[id].devices
		if len(d.tasks) == 0 {
			continue
		}
		mem, ok := nodes[d.node]
		if !ok {
			st, err := cl.Nodes().Stats(d.node, q)
			if err != nil {
				errs = append(errs, fmt.Errorf("trident-apm: read the stats of node %s: %w", d.node, err))
				nodes[d.node] = nil
				continue
			}
			mem = nodeDeviceMemory(st)
			nodes[d.node] = mem
		}
		if b, ok := deviceMemory(d, mem); ok {
			m.DeviceMemPeak = math.Max(m.DeviceMemPeak, b)
			snap.instances[id] = m
		}
	}
	return errs
}
