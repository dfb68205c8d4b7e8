package milp

import (
	"slices"
	"sort"
	"strconv"
)

// accepts reports whether an instance of o may use devices of class d: d is of o's
// vendor, its model is one o accepts and each device has the memory o needs.
func accepts(o *Operator, d Device) bool {
	if d.Vendor != o.GPUVendor || (o.GPUMemMB > 0 && d.MemMB < o.GPUMemMB) {
		return false
	}
	return len(o.GPUModels) == 0 || slices.Contains(o.GPUModels, d.Model)
}

// nodeDevices returns nd's accelerator classes: Devices, or one class of unknown model and
// memory holding GPUs devices when Devices is empty.
func nodeDevices(nd *Node) []Device {
	if len(nd.Devices) > 0 {
		return nd.Devices
	}
	if nd.GPUs > 0 {
		return []Device{{Count: nd.GPUs}}
	}
	return nil
}

// deviceCounts returns the Count of every class in devs.
func deviceCounts(devs []Device) []int {
	c := make([]int, len(devs))
	for k, d := range devs {
		c[k] = d.Count
	}
	return c
}

// totalDevices returns the number of devices of nd.
func totalDevices(nd *Node) int {
	t := 0
	for _, d := range nodeDevices(nd) {
		t += d.Count
	}
	return t
}

// devNeed is one operator's accelerator demand on one node for assignDevices: count
// instances of g devices each, from one of the classes in elig.
type devNeed struct {
	g, count int
	elig     []int
}

// assignDevices decides whether the instances in needs fit the free devices per class,
// each instance taking its g devices from a single class it accepts, and returns one
// assignment (per need, instances per class) when they do. It is exact: a depth-first
// search over the needs (largest g first) with the free vectors already refuted memoised;
// nodes have a handful of classes and at most a few dozen devices.
func assignDevices(free []int, needs []devNeed) ([][]int, bool) {
	order := make([]int, 0, len(needs))
	total, have := 0, 0
	for j, nd := range needs {
		if nd.count > 0 && nd.g > 0 {
			order = append(order, j)
			total += nd.g * nd.count
		}
	}
	for _, f := range free {
		have += max(f, 0)
	}
	out := make([][]int, len(needs))
	for j := range needs {
		out[j] = make([]int, len(free))
	}
	if total == 0 {
		return out, true
	}
	if total > have {
		return nil, false
	}
	if len(free) == 1 { // one class, which every need accepts (nodeNeeds): the totals decide
		for _, j := range order {
			out[j][0] = needs[j].count
		}
		return out, true
	}
	sort.SliceStable(order, func(a, b int) bool { return needs[order[a]].g > needs[order[b]].g })
	left := append([]int(nil), free...)
	failed := map[string]bool{}
	var kb []byte
	key := func(pos int) string {
		kb = strconv.AppendInt(kb[:0], int64(pos), 10)
		for _, f := range left {
			kb = strconv.AppendInt(append(kb, ','), int64(f), 10)
		}
		return string(kb)
	}
	var place func(pos int) bool
	// spread puts rest instances of need j into its eligible classes from the e-th on.
	var spread func(pos, e, rest int) bool
	place = func(pos int) bool {
		if pos == len(order) {
			return true
		}
		k := key(pos)
		if failed[k] {
			return false
		}
		if spread(pos, 0, needs[order[pos]].count) {
			return true
		}
		failed[k] = true
		return false
	}
	spread = func(pos, e, rest int) bool {
		nd := needs[order[pos]]
		if rest == 0 {
			return place(pos + 1)
		}
		if e == len(nd.elig) {
			return false
		}
		c := nd.elig[e]
		most := min(rest, max(left[c], 0)/nd.g)
		for take := most; take >= 0; take-- {
			left[c] -= take * nd.g
			out[order[pos]][c] += take
			if spread(pos, e+1, rest-take) {
				return true
			}
			left[c] += take * nd.g
			out[order[pos]][c] -= take
		}
		return false
	}
	if !place(0) {
		return nil, false
	}
	return out, true
}

// nodeNeeds returns the accelerator needs of count[i] instances of every operator on node
// nd (classes devs), and false when an operator has instances there but accepts none of
// its classes.
func nodeNeeds(ops []Operator, devs []Device, count func(i int) int) ([]devNeed, bool) {
	needs := make([]devNeed, len(ops))
	for i := range ops {
		o := &ops[i]
		c := count(i)
		if o.GPUs == 0 || c == 0 {
			continue
		}
		var elig []int
		for k, d := range devs {
			if accepts(o, d) {
				elig = append(elig, k)
			}
		}
		if len(elig) == 0 {
			return nil, false
		}
		needs[i] = devNeed{g: o.GPUs, count: c, elig: elig}
	}
	return needs, true
}

// devicesFit reports whether count[i] instances of every operator fit node nd's
// accelerators (assignDevices).
func devicesFit(ops []Operator, nd *Node, count func(i int) int) bool {
	devs := nodeDevices(nd)
	if len(devs) <= 1 { // without a choice of class the total decides
		need := 0
		for i := range ops {
			o := &ops[i]
			if o.GPUs == 0 {
				continue
			}
			c := count(i)
			if c > 0 && (len(devs) == 0 || !accepts(o, devs[0])) {
				return false
			}
			need += c * o.GPUs
		}
		return need == 0 || (len(devs) == 1 && need <= devs[0].Count)
	}
	needs, ok := nodeNeeds(ops, devs, count)
	if !ok {
		return false
	}
	_, ok = assignDevices(deviceCounts(devs), needs)
	return ok
}

// devGroup is a Hall-type aggregate of the accelerators: the devices of a set S of
// classes (over all nodes) and the operators that accept no class outside S. Their
// instances need sum g_i P_i <= devices, a relaxation of the per-class rows.
type devGroup struct {
	ops     []int
	devices int
	counts  []int // the Count of every class in S
}

// deviceGroups returns one devGroup per distinct set of classes some accelerator operator
// accepts, plus the whole cluster's devices for all of them (the pooled row).
func (p *Problem) deviceGroups() []devGroup {
	var classes []Device
	for n := range p.Nodes {
		classes = append(classes, nodeDevices(&p.Nodes[n])...)
	}
	var gpuOps []int
	sets := map[int][]bool{}
	for i := range p.Operators {
		o := &p.Operators[i]
		if o.GPUs == 0 {
			continue
		}
		gpuOps = append(gpuOps, i)
		s := make([]bool, len(classes))
		for c, d := range classes {
			s[c] = accepts(o, d)
		}
		sets[i] = s
	}
	if len(gpuOps) == 0 {
		return nil
	}
	all := make([]bool, len(classes))
	for c := range all {
		all[c] = true
	}
	subset := func(a, b []bool) bool {
		for c := range a {
			if a[c] && !b[c] {
				return false
			}
		}
		return true
	}
	cands := [][]bool{all}
	for _, i := range gpuOps {
		cands = append(cands, sets[i])
	}
	var groups []devGroup
	var seen [][]bool
	for _, s := range cands {
		if slices.ContainsFunc(seen, func(t []bool) bool { return slices.Equal(s, t) }) {
			continue
		}
		seen = append(seen, s)
		g := devGroup{}
		for c, in := range s {
			if in {
				g.devices += classes[c].Count
				g.counts = append(g.counts, classes[c].Count)
			}
		}
		for _, i := range gpuOps {
			if subset(sets[i], s) {
				g.ops = append(g.ops, i)
			}
		}
		groups = append(groups, g)
	}
	return groups
}
