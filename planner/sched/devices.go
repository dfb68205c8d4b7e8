package sched

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/trident-sched/trident/planner/fsm"
)

// deviceClasses returns n's accelerator classes: n.Devices, or, for an inventory that
// only counts GPUs, one class of n.GPUs devices with n.GPUMemoryMB each (model unknown).
func deviceClasses(n fsm.Node) []fsm.Device {
	if ds := n.Devices.List(); len(ds) > 0 {
		return ds
	}
	if n.GPUs > 0 {
		return []fsm.Device{{MemoryMB: n.GPUMemoryMB, Count: n.GPUs}}
	}
	return nil
}

// acceptsDevice reports whether an instance of o may use devices of class d: its vendor
// (trident_gpu_vendor, both defaulting to fsm.DefaultGPUVendor), enough memory per device
// (trident_gpu_memory_mb) and an accepted model (GPUModels, empty: any).
func acceptsDevice(o fsm.Operator, d fsm.Device) bool {
	return fsm.VendorOf(d.Vendor) == fsm.VendorOf(o.GPUVendor) && d.MemoryMB >= o.GPUMemoryMB &&
		(len(o.GPUModels) == 0 || slices.Contains(o.GPUModels, d.Model))
}

// deviceNeed names what an accelerator operator asks of a device, for messages.
func deviceNeed(o fsm.Operator) string {
	s := "GPUs"
	if v := fsm.VendorOf(o.GPUVendor); v != fsm.DefaultGPUVendor {
		s = v + " " + s
	}
	if o.GPUMemoryMB > 0 {
		s += fmt.Sprintf(" with at least %d MB", o.GPUMemoryMB)
	}
	if len(o.GPUModels) > 0 {
		s += " of model " + strings.Join(o.GPUModels, " or ")
	}
	return s
}

// deviceGroup is a set of device classes (over all nodes) that some operator accepts, with
// the operators accepting nothing outside it: their minimum instances must fit its devices.
type deviceGroup struct {
	what    string
	devices int
	ops     []fsm.Operator
}

// deviceGroups returns one group per distinct set of classes an accelerator operator
// accepts, the smallest (most demanding) first.
func deviceGroups(ops []fsm.Operator, nodes []fsm.Node) []deviceGroup {
	var classes []fsm.Device
	for _, n := range nodes {
		classes = append(classes, deviceClasses(n)...)
	}
	set := func(o fsm.Operator) []bool {
		s := make([]bool, len(classes))
		for c, d := range classes {
			s[c] = acceptsDevice(o, d)
		}
		return s
	}
	var groups []deviceGroup
	var seen [][]bool
	for _, o := range ops {
		if o.GPUs == 0 {
			continue
		}
		s := set(o)
		if slices.ContainsFunc(seen, func(t []bool) bool { return slices.Equal(s, t) }) {
			continue
		}
		seen = append(seen, s)
		g := deviceGroup{what: deviceNeed(o)}
		for c, in := range s {
			if in {
				g.devices += classes[c].Count
			}
		}
		for _, o2 := range ops {
			if o2.GPUs == 0 {
				continue
			}
			inside := true
			for c, in := range set(o2) {
				inside = inside && (!in || s[c])
			}
			if inside {
				g.ops = append(g.ops, o2)
			}
		}
		groups = append(groups, g)
	}
	sort.SliceStable(groups, func(a, b int) bool { return groups[a].devices < groups[b].devices })
	return groups
}
