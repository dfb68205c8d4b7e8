package milp

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// slotBudget caps the patterns one nodeMax may visit; beyond it the row is not added.
const slotBudget = 200000

// slotRow is the lifted device row of one node: sum_i coef[i] x_in <= cap.
type slotRow struct {
	coef []float64
	cap  float64
}

// slotRows adds, per node with accelerators, the lifted device row "slot_n":
// sum_i a_i x_in <= V_n. The device rows count an instance's own devices g_i only, but an
// instance whose memory or cores leave too little for the operators that would use the
// node's other devices blocks those devices as well: on a node with 2 GPUs and 128 GiB,
// one instance of a 1-GPU, 128 GiB operator leaves both GPUs' worth of the node used, and
// the LP relaxation spreads 0.39 of it beside 0.83 and 0.78 instances of two 1-GPU, 64
// and 32 GiB operators (het/128/s10), a point no mix of whole instances reaches; the row
// 2 x_0 + x_4 + x_5 <= 2 cuts it off.
//
// The coefficients: V0 is the most devices whole instances can use on the node (nodeMax
// of g), R_i the most with at least one instance of i among them; a_i = g_i + V0 - R_i
// (for an operator without accelerators, V0 - R_i), the devices one instance of i takes
// or leaves unusable. The right-hand side V_n is the exact maximum of sum_i a_i x_i over
// every integer vector x within the per-node bounds that fits the node's cores, memory
// and device classes (each instance from one class it accepts), found by enumeration.
// Validity: the instances a plan puts on node n (they are >= the pinned ones, which only
// restricts them) are such a vector, so they satisfy the row whatever the a_i; the
// choice of a_i only decides whether the row cuts. A node where the enumeration exceeds
// slotBudget, or where no a_i exceeds g_i (the row would be implied by the device rows),
// gets no row. Identical nodes share one computation.
func (b *builder) slotRows() {
	q, m := b.q, b.model
	if !q.gpu {
		return
	}
	inf := math.Inf(1)
	memo := map[string]*slotRow{}
	for n := range q.M {
		key := q.slotKey(n)
		r, ok := memo[key]
		if !ok {
			r = q.slotRow(n)
			memo[key] = r
		}
		if r == nil {
			continue
		}
		for i, a := range r.coef {
			if a > 0 {
				b.put(m.x[i][n], a)
			}
		}
		b.row(fmt.Sprintf("slot_%d", n), -inf, r.cap)
	}
}

// keepCutSlotRows drops the slot rows that the LP point v satisfies (within a relative
// 1e-6; every row when v is nil), so that the model HiGHS and the sub-MIPs solve carries only the rows that cut its
// LP relaxation. Every slot row is valid, so any subset is; the others only cost time
// (het/16/s3, whose LP no slot row cuts, was no longer proven within the gap in 10 s
// with all of them).
func (m *model) keepCutSlotRows(v []float64) {
	r0 := m.slotFrom
	e0 := m.start[r0]
	rows, w := m.numRows(), r0
	if v == nil {
		rows = r0 // no point: no row is known to cut
	}
	idx, val := m.index[e0:], m.value[e0:]
	pos := e0
	for r := r0; r < rows; r++ {
		a, z := m.start[r]-e0, m.start[r+1]-e0
		act := 0.0
		for k := a; k < z; k++ {
			act += val[k] * v[idx[k]]
		}
		if act <= m.rowUp[r]+1e-6*math.Max(1, math.Abs(m.rowUp[r])) {
			continue
		}
		m.rowName[w], m.rowLo[w], m.rowUp[w] = m.rowName[r], m.rowLo[r], m.rowUp[r]
		pos += copy(m.index[pos:], idx[a:z])
		copy(m.value[pos-(z-a):], val[a:z])
		m.start[w+1] = pos
		w++
	}
	m.rowName, m.rowLo, m.rowUp = m.rowName[:w], m.rowLo[:w], m.rowUp[:w]
	m.start = m.start[:w+1]
	m.index, m.value = m.index[:pos], m.value[:pos]
}

// slotKey identifies the nodes whose slot rows are equal: the same pools, device classes
// and per-node instance bounds.
func (q *prep) slotKey(n int) string {
	nd := &q.p.Nodes[n]
	var s strings.Builder
	s.WriteString(strconv.FormatFloat(nd.CPU, 'g', -1, 64) + "|" + strconv.FormatFloat(nd.MemMB, 'g', -1, 64))
	for _, d := range q.devs[n] {
		fmt.Fprintf(&s, "|%q,%q,%g,%d", d.Vendor, d.Model, d.MemMB, d.Count)
	}
	for i := range q.N {
		s.WriteString("|" + strconv.Itoa(q.ub[i][n]))
	}
	return s.String()
}

// slotRow returns node n's lifted device row (slotRows), or nil when it would not cut or
// the enumeration is too large.
func (q *prep) slotRow(n int) *slotRow {
	ops := q.p.Operators
	g := make([]float64, q.N)
	for i, o := range ops {
		if q.ub[i][n] > 0 {
			g[i] = float64(o.GPUs)
		}
	}
	v0, ok := q.nodeMax(n, g, -1)
	if !ok || v0 <= 0 {
		return nil
	}
	r := &slotRow{coef: make([]float64, q.N)}
	lifted := false
	for i := range ops {
		if q.ub[i][n] == 0 {
			continue
		}
		ri, ok := q.nodeMax(n, g, i)
		if !ok {
			return nil
		}
		if ri < 0 { // no instance of i fits alone
			continue
		}
		r.coef[i] = g[i] + v0 - ri
		if r.coef[i] > g[i]+1e-9 {
			lifted = true
		}
	}
	if !lifted {
		return nil
	}
	r.cap, ok = q.nodeMax(n, r.coef, -1)
	if !ok {
		return nil
	}
	return r
}

// nodeMax returns the largest sum_i c_i x_i over integer vectors x with 0 <= x_i <=
// ub[i][n] (x_i = 0 where c_i = 0, except x_need >= 1 when need >= 0) that fit node n's
// cores, memory and device classes, or -1 when none fits (with need >= 0). ok is false
// when the search visited more than slotBudget vectors. It is a depth-first search, the
// operators by decreasing c_i and counts from the largest, pruned by the pooled bound
// sum_j c_j min(ub, what fits the room left).
func (q *prep) nodeMax(n int, c []float64, need int) (best float64, ok bool) {
	ops := q.p.Operators
	nd := &q.p.Nodes[n]
	gpus := totalDevices(nd)
	var order []int
	for i, ci := range c {
		if (ci > 0 || i == need) && q.ub[i][n] > 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case c[a] > c[b]:
			return -1
		case c[a] < c[b]:
			return 1
		}
		return 0
	})
	x := make([]int, q.N)
	best, visits := -1.0, 0
	fits := func(o *Operator, cpu, mem float64, dev int) int {
		k := fitPools(o, cpu, mem)
		if o.GPUs > 0 {
			k = min(k, dev/o.GPUs)
		}
		return max(k, 0)
	}
	var dfs func(k int, cpu, mem float64, dev int, val float64)
	dfs = func(k int, cpu, mem float64, dev int, val float64) {
		if visits++; visits > slotBudget {
			return
		}
		if k == len(order) {
			if val > best+1e-9 && devicesFit(ops, nd, func(i int) int { return x[i] }) {
				best = val
			}
			return
		}
		bound := val
		for _, j := range order[k:] {
			bound += c[j] * float64(min(q.ub[j][n], fits(&ops[j], cpu, mem, dev)))
		}
		if bound <= best+1e-9 {
			return
		}
		i := order[k]
		o := &ops[i]
		lo := 0
		if i == need {
			lo = 1
		}
		for cnt := min(q.ub[i][n], fits(o, cpu, mem, dev)); cnt >= lo; cnt-- {
			x[i] = cnt
			dfs(k+1, cpu-float64(cnt)*o.CPU, mem-float64(cnt)*o.MemMB, dev-cnt*o.GPUs, val+float64(cnt)*c[i])
		}
		x[i] = 0
	}
	dfs(0, nd.CPU, nd.MemMB, gpus, 0)
	return best, visits <= slotBudget
}
