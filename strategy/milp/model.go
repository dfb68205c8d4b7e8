package milp

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// lp is a maximisation MILP in row-wise sparse form, independent of any solver.
type lp struct {
	colName            []string
	cost, colLo, colUp []float64
	integer            []bool
	offset             float64 // constant added to the objective
	rowName            []string
	rowLo, rowUp       []float64
	start              []int // CSR: row r has entries start[r]..start[r+1]
	index              []int
	value              []float64
}

func (m *lp) addCol(name string, cost, lo, up float64, integer bool) int {
	m.colName = append(m.colName, name)
	m.cost = append(m.cost, cost)
	m.colLo = append(m.colLo, lo)
	m.colUp = append(m.colUp, up)
	m.integer = append(m.integer, integer)
	return len(m.cost) - 1
}

func (m *lp) addRow(name string, lo, up float64, idx []int, val []float64) {
	if len(m.start) == 0 {
		m.start = append(m.start, 0)
	}
	m.rowName = append(m.rowName, name)
	m.rowLo = append(m.rowLo, lo)
	m.rowUp = append(m.rowUp, up)
	for k, j := range idx {
		if val[k] != 0 {
			m.index = append(m.index, j)
			m.value = append(m.value, val[k])
		}
	}
	m.start = append(m.start, len(m.index))
}

func (m *lp) numRows() int { return len(m.rowLo) }

// rowPrefix returns m with only its first r rows (sharing m's slices, capped so that
// appending to the copy cannot write into m).
func (m *lp) rowPrefix(r int) lp {
	c := *m
	if r >= m.numRows() {
		return c
	}
	c.rowName, c.rowLo, c.rowUp = m.rowName[:r:r], m.rowLo[:r:r], m.rowUp[:r:r]
	c.start = m.start[: r+1 : r+1]
	e := m.start[r]
	c.index, c.value = m.index[:e:e], m.value[:e:e]
	return c
}

// model is the Trident MILP of one Problem plus the column map back to decisions.
type model struct {
	lp
	q       *prep
	T, B    int     // throughput T and peak egress B columns
	x       [][]int // x_in instances (integer)
	P       []int   // P_i parallelism (integer, Eq. 14)
	d       [][]int // d_in transitions this round (integer), -1 when absent
	w       [][]int // w_in share of T processed by operator i on node n
	o       [][]int // o_in export of boundary i -> i+1 from node n, -1 when absent
	u       [][]int // u_in launches where cur_in > 0 (Delta+), -1 when absent
	e       []int   // e_n egress of node n in units of eUnit[n], -1 when absent
	eUnit   []float64
	y       [][][]int // y_ink instances of i on n using device class k (integer), nil/-1 when absent
	classes [][]int   // identical-node classes (size >= 2) used for symmetry breaking
	capRow  [][]int   // capRow[i][n]: the row of operator i's capacity on node n (Eq. 13)
	// slotFrom is the first of the slot rows (slotRows), the model's last rows.
	slotFrom int
}

// buildModel writes the complete model of Sec. 6 (Eqs. 10-26) in the per-node
// local/export/import network form; see doc.go for the variable and row map. The columns
// come first, then the rows family by family; the order of both is part of the model.
func buildModel(q *prep, opts Options) *model {
	b := &builder{model: &model{q: q}}
	b.objectiveCols(opts)
	for i := range q.p.Operators {
		b.operatorCols(i)
	}
	b.deviceCols()
	b.networkCols()
	for i := range q.p.Operators {
		b.capacityRows(i)
		b.transitionRows(i)
		b.launchRows(i)
	}
	b.poolRows()
	b.contentionRows()
	if b.network {
		b.egressRows()
	}
	if !opts.NoLinkRows {
		b.linkRows()
	}
	if opts.SymmetryRows {
		b.symmetryRows()
	}
	b.slotFrom = b.numRows()
	if !opts.NoSlotRows {
		b.slotRows()
	}
	return b.model
}

// builder holds what buildModel's steps share: the model being built, the network
// columns' data and the entries of the row being written.
type builder struct {
	*model
	// flowF[i] is the bytes per unit of T crossing boundary i -> i+1; network reports that
	// some boundary carries traffic (and so that the l and e columns exist).
	flowF   []float64
	network bool
	idx     []int
	val     []float64
}

// put adds the entry v of column j to the current row; j < 0 (an absent column) is skipped.
func (b *builder) put(j int, v float64) {
	if j >= 0 {
		b.idx = append(b.idx, j)
		b.val = append(b.val, v)
	}
}

// row adds the current row as name with bounds lo..up and starts the next one.
func (b *builder) row(name string, lo, up float64) {
	b.addRow(name, lo, up, b.idx, b.val)
	b.idx, b.val = b.idx[:0], b.val[:0]
}

// objectiveCols adds the throughput T (bounded by the aggregate bound unless
// opts.NoBound) and the peak egress B, and sizes the per-operator column maps.
func (b *builder) objectiveCols(opts Options) {
	q, m := b.q, b.model
	N := q.N
	inf := math.Inf(1)
	Tup := inf
	if !opts.NoBound {
		Tup = q.Tub
	}
	m.T = m.addCol("T", 1, 0, Tup, false)
	m.B = m.addCol("B", -q.alpha*q.bref, 0, inf, false) // in units of bref
	m.x, m.P, m.d, m.w, m.o, m.u = make([][]int, N), make([]int, N), make([][]int, N), make([][]int, N), make([][]int, N), make([][]int, N)
}

// operatorCols adds operator i's columns: instances x_in with their launch and termination
// costs, parallelism P_i, and per node the transitions d_in (when a transition raises
// capacity), the processed share w_in and the launches u_in (where instances run now).
func (b *builder) operatorCols(i int) {
	q, m := b.q, b.model
	M := q.M
	o := q.p.Operators[i]
	beta := q.beta
	m.x[i], m.d[i], m.w[i], m.o[i], m.u[i] = make([]int, M), make([]int, M), make([]int, M), make([]int, M), make([]int, M)
	tot := 0
	for n := range M {
		// launches are charged through x directly when nothing runs there now
		c := -beta * o.LaunchSec
		if q.cur[i][n] > 0 {
			c = beta * o.TerminateSec // cost (L+Tm)u - Tm x + Tm cur, see u below
			m.offset -= beta * o.TerminateSec * float64(q.cur[i][n])
		}
		m.x[i][n] = m.addCol(fmt.Sprintf("x_%d_%d", i, n), c, float64(q.K[i][n]), float64(q.ub[i][n]), true)
		tot += q.ub[i][n]
	}
	m.P[i] = m.addCol(fmt.Sprintf("P_%d", i), 0, float64(max(q.Ki[i], o.MinInstances)), float64(min(tot, q.lim[i])), true)
	useD := q.transitionable(i) && q.muT[i] > q.mu[i]
	for n := range M {
		m.d[i][n], m.o[i][n], m.u[i][n] = -1, -1, -1
		if useD && q.ub[i][n] > q.K[i][n] {
			up := min(q.dmax[i], q.ub[i][n]-q.K[i][n])
			m.d[i][n] = m.addCol(fmt.Sprintf("d_%d_%d", i, n), -beta*(o.LaunchSec+o.TerminateSec), 0, float64(up), true)
		}
		wup := q.nodeCap(i, n, q.ub[i][n], 0) / o.Amplification
		if useD {
			wup = math.Max(wup, q.nodeCap(i, n, q.ub[i][n], min(q.dmax[i], q.ub[i][n]-q.K[i][n]))/o.Amplification)
		}
		m.w[i][n] = m.addCol(fmt.Sprintf("w_%d_%d", i, n), 0, 0, wup, false)
		if q.cur[i][n] > 0 {
			m.u[i][n] = m.addCol(fmt.Sprintf("u_%d_%d", i, n), -beta*(o.LaunchSec+o.TerminateSec), 0,
				float64(max(0, q.ub[i][n]-q.cur[i][n])), false)
		}
	}
}

// deviceCols adds, where an accelerator operator accepts several device classes of one
// node, its instances per class y_ink (an instance takes all its devices from one class).
// With one accepted class the class row takes x_in itself, so nodes with a single device
// class (and clusters described by GPUs alone) get no extra column.
func (b *builder) deviceCols() {
	q, m := b.q, b.model
	m.y = make([][][]int, q.N)
	for i, o := range q.p.Operators {
		if o.GPUs == 0 {
			continue
		}
		m.y[i] = make([][]int, q.M)
		for n := range q.M {
			m.y[i][n] = make([]int, len(q.devs[n]))
			for k := range m.y[i][n] {
				m.y[i][n][k] = -1
			}
			if len(q.elig[i][n]) < 2 || q.ub[i][n] == 0 {
				continue
			}
			for _, k := range q.elig[i][n] {
				up := min(q.ub[i][n], q.devs[n][k].Count/o.GPUs)
				m.y[i][n][k] = m.addCol(fmt.Sprintf("y_%d_%d_%d", i, n, k), 0, 0, float64(up), true)
			}
		}
	}
}

// networkCols sets flowF and, when some boundary carries traffic, adds the exports o_in of
// every such boundary and the egress e_n of every node that has egress. Each node's egress
// is measured in units of its own bound (of bref when unlimited), so that the solver's
// feasibility tolerance is relative to that bound: in units of the largest bound, a
// 1e-7 tolerance let a 125 MB/s node exceed its bound by 1.25 kB/s of real traffic, which
// decoding then had to take back from T. A node without egress gets neither: its rows
// keep every boundary local (egressRows).
func (b *builder) networkCols() {
	q, m := b.q, b.model
	p := q.p
	N, M := q.N, q.M
	inf := math.Inf(1)
	b.flowF = make([]float64, N) // bytes per unit of T crossing boundary i -> i+1
	for i := 0; i+1 < N; i++ {
		b.flowF[i] = p.Operators[i+1].Amplification * p.Operators[i].OutputBytes
		if b.flowF[i] > 0 {
			b.network = true
			for n, nd := range p.Nodes {
				if nd.EgressBps > 0 {
					m.o[i][n] = m.addCol(fmt.Sprintf("o_%d_%d", i, n), 0, 0, inf, false)
				}
			}
		}
	}
	m.e, m.eUnit = make([]int, M), make([]float64, M)
	for n, nd := range p.Nodes {
		m.e[n] = -1
		if !b.network || nd.EgressBps == 0 {
			continue
		}
		if math.IsInf(nd.EgressBps, 1) {
			m.eUnit[n] = q.bref
			m.e[n] = m.addCol(fmt.Sprintf("e_%d", n), 0, 0, inf, false)
		} else {
			m.eUnit[n] = nd.EgressBps
			m.e[n] = m.addCol(fmt.Sprintf("e_%d", n), 0, 0, 1, false)
		}
	}
}

// capacityRows adds operator i's placement row (Eq. 14), its aggregate throughput cut and
// per-node capacity rows (Eqs. 12-13) and its flow conservation row (Eqs. 18-19).
func (b *builder) capacityRows(i int) {
	q, m := b.q, b.model
	M := q.M
	o := q.p.Operators[i]
	inf := math.Inf(1)
	// (14) placement consistency
	for n := range M {
		b.put(m.x[i][n], 1)
	}
	b.put(m.P[i], -1)
	b.row(fmt.Sprintf("place_%d", i), 0, 0)
	// (13) aggregate throughput constraint (implied by the per-node rows; kept as a cut)
	b.put(m.T, o.Amplification)
	b.put(m.P[i], -q.mu[i])
	for n := range M {
		b.put(m.d[i][n], -(q.muT[i] - q.mu[i]))
	}
	b.row(fmt.Sprintf("tput_%d", i), -inf, (q.muC[i]-q.mu[i])*float64(q.Ki[i]))
	// (13) per node, (18)-(19) conservation: sum_n w_in = T
	m.capRow = append(m.capRow, make([]int, M))
	for n := range M {
		m.capRow[i][n] = m.numRows()
		b.put(m.w[i][n], o.Amplification)
		b.put(m.x[i][n], -q.mu[i])
		b.put(m.d[i][n], -(q.muT[i] - q.mu[i]))
		b.row(fmt.Sprintf("cap_%d_%d", i, n), -inf, (q.muC[i]-q.mu[i])*float64(q.K[i][n]))
	}
	for n := range M {
		b.put(m.w[i][n], 1)
	}
	b.put(m.T, -1)
	b.row(fmt.Sprintf("flow_%d", i), 0, 0)
}

// linkRows bounds each processed share w_in by U_in, what node n can process for
// operator i at all given its egress (chainCap), where that is below what the node's
// pools allow, and there adds, when one instance of operator i could process more than
// U_in (and U_in is below T's bound), the link row "link_i_n": w_in <= U_in x_in. It is
// valid because w_in > 0 needs an instance on n, and it is the convex hull of
// {x_in integer, A_i w_in <= cap(x_in), w_in <= U_in}: without it the LP relaxation keeps
// traffic local on every node with a sliver of an instance of every operator. Rows with
// U_in from the pools or T's bound alone tightened no LP of bench milp -hetero and only
// moved the interior point RENS starts from (het/128/s3: 87.8 instead of 97.3).
func (b *builder) linkRows() {
	q, m := b.q, b.model
	if !b.network {
		return
	}
	inf := math.Inf(1)
	U := make([][]float64, q.N)
	for i := range q.N {
		U[i] = make([]float64, q.M)
		for n := range q.M {
			U[i][n] = b.chainCap(i, n)
		}
	}
	for i := range q.N {
		one := q.instRate(i) / q.p.Operators[i].Amplification
		for n := range q.M {
			u := U[i][n]
			if u >= m.colUp[m.w[i][n]] {
				continue // the node's pools bound w_in as tightly
			}
			m.colUp[m.w[i][n]] = u
			if q.K[i][n] > 0 || q.ub[i][n] == 0 || u <= 0 || u >= one*(1-1e-9) || u >= m.colUp[m.T] {
				continue // x_in >= 1 already, no instance fits, or the capacity row or T's bound is as tight
			}
			b.put(m.w[i][n], 1)
			b.put(m.x[i][n], -u)
			b.row(fmt.Sprintf("link_%d_%d", i, n), -inf, 0)
		}
	}
}

// instRate is the most input one instance of operator i processes: at its current,
// candidate or transitioning rate.
func (q *prep) instRate(i int) float64 {
	return math.Max(q.mu[i], math.Max(q.muT[i], q.muC[i]))
}

// chainCap bounds the share w_in node n can process for operator i in any plan of the
// model. Its output crosses each later boundary l either to operator l+1 on n or out of
// n, and the node's egress carries at most E_n/min_l F_l of such drops (F_l the bytes per
// unit of T crossing l): operator j > i must process at least w_in - E_n/min_(l<j) F_l on
// n, with whole instances (at least ceil(A_j w_jn / rate), and its pinned ones), which
// together with the pinned instances of operators before i must fit the node's cores,
// memory and accelerators. The bound is the largest w_in that passes, by bisection (the
// check is monotone in w_in), rounded up; +Inf when the node's egress is unlimited.
func (b *builder) chainCap(i, n int) float64 {
	q, m := b.q, b.model
	nd := q.p.Nodes[n]
	up := m.colUp[m.w[i][n]]
	if math.IsInf(nd.EgressBps, 1) || up <= 0 {
		return math.Inf(1)
	}
	ops := q.p.Operators
	gpus := 0
	for _, d := range q.devs[n] {
		gpus += d.Count
	}
	drop := make([]float64, q.N) // drop[j]: most w_in - w_jn can be; +Inf from a boundary without traffic on
	fmin := math.Inf(1)
	for j := i + 1; j < q.N; j++ {
		if f := b.flowF[j-1]; f > 0 && !math.IsInf(drop[j-1], 1) {
			fmin = math.Min(fmin, f)
			drop[j] = nd.EgressBps / fmin
		} else {
			drop[j] = math.Inf(1)
		}
	}
	fits := func(w float64) bool {
		cpu, mem, dev := 0.0, 0.0, 0
		for j := range q.N {
			x := q.K[j][n]
			if j >= i {
				wj := math.Max(0, w-drop[j])
				if wj > m.colUp[m.w[j][n]]*(1+1e-9)+1e-12 {
					return false
				}
				x = max(x, int(math.Ceil(ops[j].Amplification*wj/q.instRate(j)-1e-9)))
			}
			cpu += float64(x) * ops[j].CPU
			mem += float64(x) * ops[j].MemMB
			dev += x * ops[j].GPUs
		}
		return cpu <= nd.CPU*(1+1e-9)+1e-9 && mem <= nd.MemMB*(1+1e-9)+1e-9 && dev <= gpus
	}
	if !fits(0) || fits(up) {
		return math.Inf(1) // pinned instances beyond the pools (shrunken node), or no cut
	}
	lo, hi := 0.0, up
	for it := 0; it < 100 && hi-lo > 1e-9*hi; it++ {
		mid := (lo + hi) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi * (1 + 1e-9)
}

// transitionRows adds, when operator i has transition columns, its batch-size row
// (Eqs. 24-25) and per node the rows keeping the staying instances non-negative (Eq. 26).
func (b *builder) transitionRows(i int) {
	q, m := b.q, b.model
	M := q.M
	inf := math.Inf(1)
	// (24)-(25) batch size, (26) staying instances non-negative
	any := false
	for n := range M {
		if m.d[i][n] >= 0 {
			b.put(m.d[i][n], 1)
			any = true
		}
	}
	if any {
		b.row(fmt.Sprintf("batch_%d", i), -inf, float64(q.dmax[i]))
		for n := range M {
			if m.d[i][n] >= 0 {
				b.put(m.d[i][n], 1)
				b.put(m.x[i][n], -1)
				b.row(fmt.Sprintf("stay_%d_%d", i, n), -inf, -float64(q.K[i][n]))
			}
		}
	}
}

// launchRows adds operator i's launch rows (Eq. 21) on the nodes where it runs now.
func (b *builder) launchRows(i int) {
	q, m := b.q, b.model
	inf := math.Inf(1)
	// (21) Delta+ >= x - cur where something runs now
	for n := range q.M {
		if m.u[i][n] >= 0 {
			b.put(m.u[i][n], 1)
			b.put(m.x[i][n], -1)
			b.row(fmt.Sprintf("mig_%d_%d", i, n), -float64(q.cur[i][n]), inf)
		}
	}
}

// poolRows adds every node's CPU and memory rows (Eqs. 15-16) and, when some operator
// needs accelerators, one row per device class (Eq. 17 per class) with the split rows
// x_in = sum_k y_ink of the operators accepting several classes of the node.
func (b *builder) poolRows() {
	q, m := b.q, b.model
	p := q.p
	inf := math.Inf(1)
	// (15)-(16) node resource pools (memory rows in GiB for better scaling)
	for n, nd := range p.Nodes {
		for r, res := range []string{"cpu", "mem"} {
			capR := []float64{nd.CPU, nd.MemMB / 1024}[r]
			for i, o := range p.Operators {
				b.put(m.x[i][n], []float64{o.CPU, o.MemMB / 1024}[r])
			}
			b.row(fmt.Sprintf("%s_%d", res, n), -inf, capR)
		}
		if !q.gpu {
			continue
		}
		// (17) per device class
		for k, dev := range q.devs[n] {
			for i, o := range p.Operators {
				if o.GPUs == 0 || !slices.Contains(q.elig[i][n], k) {
					continue
				}
				if m.y[i][n][k] >= 0 {
					b.put(m.y[i][n][k], float64(o.GPUs))
				} else {
					b.put(m.x[i][n], float64(o.GPUs))
				}
			}
			name := fmt.Sprintf("gpu_%d", n)
			if len(q.devs[n]) > 1 {
				name = fmt.Sprintf("gpu_%d_%d", n, k)
			}
			b.row(name, -inf, float64(dev.Count))
		}
		for i := range p.Operators {
			if m.y[i] == nil || len(q.elig[i][n]) < 2 || q.ub[i][n] == 0 {
				continue
			}
			b.put(m.x[i][n], 1)
			for _, k := range q.elig[i][n] {
				b.put(m.y[i][n][k], -1)
			}
			b.row(fmt.Sprintf("split_%d_%d", i, n), 0, 0)
		}
	}
}

// contentionRows adds, per node and contended resource kind some operator declares, the
// resource row "cont_n_k": sum_i cuse_ki A_i w_in <= cfree_kn (Contention). Without
// declarations it adds nothing.
func (b *builder) contentionRows() {
	q, m := b.q, b.model
	inf := math.Inf(1)
	for n := range q.M {
		for k := range q.kinds {
			for i, c := range q.cuse[k] {
				if c > 0 {
					b.put(m.w[i][n], c*q.p.Operators[i].Amplification)
				}
			}
			b.row(fmt.Sprintf("cont_%d_%d", n, k), -inf, q.cfree[k][n])
		}
	}
}

// egressRows adds per node the export rows of every boundary with traffic, the egress
// row and the peak-egress row (Eq. 20); a node without egress instead keeps every such
// boundary local: w_in <= w_(i+1)n.
func (b *builder) egressRows() {
	q, m := b.q, b.model
	N, M := q.N, q.M
	inf := math.Inf(1)
	// (20) egress in export form: o_in >= w_in - w_(i+1)n
	for n := range M {
		if m.e[n] < 0 {
			for i := 0; i+1 < N; i++ {
				if b.flowF[i] > 0 {
					b.put(m.w[i][n], 1)
					b.put(m.w[i+1][n], -1)
					b.row(fmt.Sprintf("local_%d_%d", i, n), -inf, 0)
				}
			}
			continue
		}
		for i := 0; i+1 < N; i++ {
			if m.o[i][n] >= 0 {
				b.put(m.o[i][n], 1)
				b.put(m.w[i][n], -1)
				b.put(m.w[i+1][n], 1)
				b.row(fmt.Sprintf("out_%d_%d", i, n), 0, inf)
			}
		}
		for i := 0; i+1 < N; i++ {
			if m.o[i][n] >= 0 {
				b.put(m.o[i][n], b.flowF[i]/m.eUnit[n])
			}
		}
		b.put(m.e[n], -1)
		b.row(fmt.Sprintf("egress_%d", n), -inf, 0)
		b.put(m.e[n], m.eUnit[n]/q.bref)
		b.put(m.B, -1)
		b.row(fmt.Sprintf("peak_%d", n), -inf, 0)
	}
}

// symmetryRows sets the identical-node classes and orders the nodes of each class by
// their load (loadKey).
func (b *builder) symmetryRows() {
	q, m := b.q, b.model
	inf := math.Inf(1)
	m.classes = q.identicalClasses()
	key := q.loadKey()
	for c, cls := range m.classes {
		for k := 0; k+1 < len(cls); k++ {
			for i := range q.N {
				b.put(m.x[i][cls[k]], key[i])
				b.put(m.x[i][cls[k+1]], -key[i])
			}
			b.row(fmt.Sprintf("sym_%d_%d", c, k), 0, inf)
		}
	}
}

// loadKey is the positive per-operator weight of the symmetry-breaking order: an instance's
// share of an average node's pools.
func (q *prep) loadKey() []float64 {
	C, Mm, G := q.poolC, q.poolM, float64(q.poolG)
	M := float64(q.M)
	key := make([]float64, q.N)
	for i, o := range q.p.Operators {
		if C > 0 {
			key[i] += o.CPU / (C / M)
		}
		if Mm > 0 {
			key[i] += o.MemMB / (Mm / M)
		}
		if G > 0 {
			key[i] += float64(o.GPUs) / (G / M)
		}
		key[i] = math.Round(key[i]*1e6) / 1e6
	}
	return key
}

// identicalClasses groups nodes that are interchangeable in the model: equal pools and
// bandwidth, and the same current and pinned instances of every operator. Any solution
// can be permuted within a class, so ordering the class by loadKey is a valid cut.
func (q *prep) identicalClasses() [][]int {
	sig := func(n int) string {
		nd := q.p.Nodes[n]
		s := fmt.Sprintf("%g|%g|%g", nd.CPU, nd.MemMB, nd.EgressBps)
		for _, d := range q.devs[n] {
			s += fmt.Sprintf("|%q,%q,%g,%d", d.Vendor, d.Model, d.MemMB, d.Count)
		}
		for i := range q.N {
			s += fmt.Sprintf("|%d,%d", q.cur[i][n], q.K[i][n])
		}
		return s
	}
	groups := map[string][]int{}
	var keys []string
	for n := range q.M {
		k := sig(n)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], n)
	}
	sort.Strings(keys)
	var out [][]int
	for _, k := range keys {
		if len(groups[k]) > 1 {
			out = append(out, groups[k])
		}
	}
	return out
}

// startVector maps a feasible Solution to column values, permuting nodes inside each
// identical class so that the symmetry-breaking order holds.
func (m *model) startVector(s *Solution) []float64 {
	q := m.q
	N, M := q.N, q.M
	perm := make([]int, M) // model node -> solution node
	for n := range perm {
		perm[n] = n
	}
	key := q.loadKey()
	load := func(n int) float64 {
		v := 0.0
		for i := range N {
			v += key[i] * float64(s.PerNode[i][n].Total())
		}
		return v
	}
	for _, cls := range m.classes {
		src := append([]int(nil), cls...)
		sort.SliceStable(src, func(a, b int) bool { return load(src[a]) > load(src[b]) })
		for k, n := range cls {
			perm[n] = src[k]
		}
	}
	v := make([]float64, len(m.cost))
	v[m.T] = s.Throughput
	v[m.B] = s.PeakEgress / q.bref
	w := make([][]float64, N)
	for i, o := range q.p.Operators {
		w[i] = make([]float64, M)
		tot := 0
		for n := range M {
			pl := s.PerNode[i][perm[n]]
			x := pl.Total()
			tot += x
			v[m.x[i][n]] = float64(x)
			if m.d[i][n] >= 0 {
				v[m.d[i][n]] = float64(pl.Candidate - q.K[i][n])
			}
			w[i][n] = s.Rate[i][perm[n]] / o.Amplification
			v[m.w[i][n]] = w[i][n]
			if m.u[i][n] >= 0 {
				v[m.u[i][n]] = float64(max(0, x-q.cur[i][n]))
			}
		}
		v[m.P[i]] = float64(tot)
	}
	for i := 0; i+1 < N; i++ {
		for n := range M {
			if m.o[i][n] >= 0 {
				v[m.o[i][n]] = math.Max(0, w[i][n]-w[i+1][n])
			}
		}
	}
	for n := range M { // a device assignment of the start's instances (exists: it is valid)
		needs, ok := nodeNeeds(q.p.Operators, q.devs[n], func(i int) int { return s.PerNode[i][perm[n]].Total() })
		if !ok {
			continue
		}
		as, ok := assignDevices(deviceCounts(q.devs[n]), needs)
		if !ok {
			continue
		}
		for i := range N {
			if m.y[i] == nil {
				continue
			}
			for k, col := range m.y[i][n] {
				if col >= 0 {
					v[col] = float64(as[i][k])
				}
			}
		}
	}
	for n := range M {
		if m.e[n] >= 0 {
			v[m.e[n]] = s.Egress[perm[n]] / m.eUnit[n]
		}
	}
	return v
}

// decode turns solver column values into a Solution via assemble.
func (m *model) decode(v []float64) *Solution {
	q := m.q
	x, d := q.zeros(), q.zeros()
	w := make([][]float64, q.N)
	for i := range q.N {
		w[i] = make([]float64, q.M)
		for n := range q.M {
			x[i][n] = int(math.Round(v[m.x[i][n]]))
			if m.d[i][n] >= 0 {
				d[i][n] = int(math.Round(v[m.d[i][n]]))
			}
			w[i][n] = v[m.w[i][n]]
		}
	}
	return q.assemble(x, d, w, v[m.T])
}
