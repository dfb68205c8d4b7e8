package milp

import "math"

// assemble turns integer decisions into a consistent Solution: x[i][n] instances, d[i][n]
// of them transitioning this round, and optionally a routing w[i][n] (share of T processed
// by operator i on node n; nil selects a split proportional to node capacity). T is
// lowered, never raised, until every per-node capacity and egress bound holds.
func (q *prep) assemble(x, d [][]int, w [][]float64, T float64) *Solution {
	p := q.p
	N, M := q.N, q.M
	caps := make([][]float64, N)
	for i := range N {
		caps[i] = make([]float64, M)
		tot := 0.0
		for n := range M {
			caps[i][n] = q.nodeCap(i, n, x[i][n], d[i][n]) / p.Operators[i].Amplification
			tot += caps[i][n]
		}
		T = math.Min(T, tot)
	}
	T = math.Max(T, 0)
	ww := make([][]float64, N)
	for i := range N {
		ww[i] = make([]float64, M)
		sum := 0.0
		for n := range M {
			v := caps[i][n]
			if w != nil {
				v = math.Min(math.Max(w[i][n], 0), caps[i][n])
			}
			ww[i][n] = v
			sum += v
		}
		if sum < T && sum >= T*(1-1e-7) { // solver tolerance: give up the last bit of T
			T = sum
		}
		if sum < T { // the routing falls short: fall back to capacities
			sum = 0
			for n := range M {
				ww[i][n] = caps[i][n]
				sum += caps[i][n]
			}
		}
		for n := range M {
			if sum > 0 {
				ww[i][n] *= T / sum
			}
		}
	}
	egress := q.egress(ww)
	scale := 1.0
	for n, nd := range p.Nodes {
		if egress[n] > nd.EgressBps {
			scale = math.Min(scale, nd.EgressBps/egress[n])
		}
	}
	if scale < 1 {
		scale *= 1 - 1e-12
		T *= scale
		for i := range N {
			for n := range M {
				ww[i][n] *= scale
			}
		}
		egress = q.egress(ww)
	}
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
