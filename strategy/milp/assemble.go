package milp

import "math"

// assemble turns integer decisions into a consistent Solution: x[i][n] instances, d[i][n]
// of them transitioning this round, and optionally a routing w[i][n] (share of T processed
// by operator i on node n; nil selects a split proportional to node capacity). T is
// lowered, never raised, until every per-node capacity and egress bound holds exactly:
// the routing is repaired (repairContention, repairEgress, trimTo) rather than scaled, so a solver residue
// of 1e-9 records/s at a node without egress costs 1e-9 records/s of T, not all of it.
func (q *prep) assemble(x, d [][]int, w [][]float64, T float64) *Solution {
	p := q.p
	N, M := q.N, q.M
	ww := make([][]float64, N)
	for i := range N {
		ww[i] = make([]float64, M)
		capT, sum := 0.0, 0.0
		for n := range M {
			c := q.nodeCap(i, n, x[i][n], d[i][n]) / p.Operators[i].Amplification
			capT += c
			ww[i][n] = c
			if w != nil {
				ww[i][n] = math.Min(math.Max(w[i][n], 0), c)
			}
			sum += ww[i][n]
		}
		T = math.Min(T, capT)
		if w != nil && sum < T*(1-1e-6) { // the routing falls short: fall back to capacities
			for n := range M {
				ww[i][n] = q.nodeCap(i, n, x[i][n], d[i][n]) / p.Operators[i].Amplification
			}
		}
	}
	q.repairContention(ww)
	q.repairEgress(ww)
	for i := range N {
		sum := 0.0
		for _, v := range ww[i] {
			sum += v
		}
		T = math.Min(T, sum)
	}
	T = math.Max(T, 0)
	q.trimTo(ww, T)
	egress := q.egress(ww)
	s := &Solution{
		Throughput:   T,
		PerNode:      make(Deployment, N),
		Transitions:  make([]int, N),
		Launches:     make([]int, N),
		Terminations: make([]int, N),
		Rate:         make([][]float64, N),
		Egress:       egress,
		Bound:        math.Inf(1),
	}
	for _, e := range egress {
		s.PeakEgress = math.Max(s.PeakEgress, e)
	}
	for i := range N {
		o := &p.Operators[i]
		s.PerNode[i] = make([]Placement, M)
		s.Rate[i] = make([]float64, M)
		for n := range M {
			cand := q.K[i][n] + d[i][n]
			s.PerNode[i][n] = Placement{Current: x[i][n] - cand, Candidate: cand}
			s.Rate[i][n] = ww[i][n] * o.Amplification
			s.Transitions[i] += d[i][n]
			if dx := x[i][n] - q.cur[i][n]; dx > 0 {
				s.Launches[i] += dx
			} else {
				s.Terminations[i] -= dx
			}
		}
		s.MigrationCost += o.LaunchSec*float64(s.Launches[i]) + o.TerminateSec*float64(s.Terminations[i]) +
			(o.LaunchSec+o.TerminateSec)*float64(s.Transitions[i])
	}
	s.Objective = s.Throughput - q.alpha*s.PeakEgress - q.beta*s.MigrationCost
	return s
}

// repairContention lowers, on every node whose contended resource of some kind carries
// more than the node has left of it (contentionRows), the routing of the operators using
// that kind in proportion, until it holds. Values only go down, so capacities keep
// holding; egress may rise and is repaired after.
func (q *prep) repairContention(w [][]float64) {
	for k := range q.kinds {
		for n := range q.M {
			l, free := q.contentionLoad(k, n, w), q.cfree[k][n]
			if l <= free {
				continue
			}
			f := free / l
			for i, c := range q.cuse[k] {
				if c > 0 {
					w[i][n] *= f
				}
			}
		}
	}
}

// traffic reports whether boundary i -> i+1 carries bytes (flowF > 0).
func (q *prep) traffic(i int) bool {
	return q.p.Operators[i+1].Amplification*q.p.Operators[i].OutputBytes > 0
}

// repairEgress lowers the routing w on every node whose egress exceeds its bound until it
// holds, giving up as little as possible. With m the largest routing on the node below w
// that exports nothing (non-decreasing along every boundary with traffic, built backwards
// from the last operator), the node's routing becomes (1-theta) w + theta m with
// theta = 1 - B_n/E_n: egress is convex in the routing and 0 at m, so it drops to at most
// (1-theta) E_n = B_n. A node without egress gets m itself; a residue gets theta ~ 1e-9.
// Only node n's own values change, and only downwards, so capacities keep holding.
func (q *prep) repairEgress(w [][]float64) {
	N := q.N
	e := q.egress(w)
	m := make([]float64, N)
	for n, nd := range q.p.Nodes {
		if e[n] <= nd.EgressBps {
			continue
		}
		m[N-1] = w[N-1][n]
		for i := N - 2; i >= 0; i-- {
			m[i] = w[i][n]
			if q.traffic(i) {
				m[i] = math.Min(m[i], m[i+1])
			}
		}
		theta := 1 - nd.EgressBps/e[n]
		for i := range N {
			w[i][n] = (1-theta)*w[i][n] + theta*m[i]
			if theta == 1 {
				w[i][n] = m[i]
			}
		}
	}
}

// trimTo lowers every operator's total routed share to T without raising any node's
// egress: operator 0 gives up its excess in proportion to its shares; a later operator i
// only where it receives more than operator i-1 sends it on that node (its import surplus,
// which lowers its own exports and cannot create one at boundary i-1). The surpluses add
// up to at least the excess once operator i-1 is trimmed to T. Across a boundary without
// traffic the excess is taken in proportion to the shares.
func (q *prep) trimTo(w [][]float64, T float64) {
	M := q.M
	weight := make([]float64, M)
	for i := range q.N {
		sum := 0.0
		for _, v := range w[i] {
			sum += v
		}
		excess := sum - T
		if excess <= 0 {
			continue
		}
		tot := 0.0
		for n := range M {
			weight[n] = w[i][n]
			if i > 0 && q.traffic(i-1) {
				weight[n] = math.Max(0, w[i][n]-w[i-1][n])
			}
			tot += weight[n]
		}
		if tot <= 0 {
			continue
		}
		f := math.Min(1, excess/tot)
		for n := range M {
			w[i][n] = math.Max(0, w[i][n]-f*weight[n])
		}
	}
}

// egress computes per-node cross-node traffic (bytes/s) of routing w: at each operator
// boundary i -> i+1 a node keeps min(out, in) local and exports the rest (Eq. 20 in the
// local/export/import form).
func (q *prep) egress(w [][]float64) []float64 {
	e := make([]float64, q.M)
	for i := 0; i+1 < q.N; i++ {
		f := q.p.Operators[i+1].Amplification * q.p.Operators[i].OutputBytes
		if f == 0 {
			continue
		}
		for n := range q.M {
			if ex := w[i][n] - w[i+1][n]; ex > 0 {
				e[n] += f * ex
			}
		}
	}
	return e
}
