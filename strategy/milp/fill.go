package milp

import (
	"context"
	"math"
	"time"
)

// fill returns the placement of s with every node topped up into as complete a local
// pipeline as its room allows: on each node, one instance at a time of the operator whose
// capacity there (per unit of T) is lowest among those that still fit and stay within
// their parallelism limit. Instances are free in throughput, and on bandwidth-bound
// clusters the spare room of a minimum-parallelism plan is what lets the routing keep
// traffic local; the routing LP then decides what to use, and prune drops the rest. ok
// is false when nothing could be added.
func (q *prep) fill(s *Solution) (x, d [][]int, ok bool) {
	pl := q.newPlacer()
	d = q.zeros()
	P := make([]int, q.N)
	for i := range q.N {
		for n := range q.M {
			pl.add(i, n, s.PerNode[i][n].Total())
			P[i] += s.PerNode[i][n].Total()
			d[i][n] = s.PerNode[i][n].Candidate - q.K[i][n]
		}
	}
	for n := range q.M {
		if pl.over(n) { // a plan never over-commits a node; be safe all the same
			return nil, nil, false
		}
	}
	for n := range q.M {
		for {
			best, bestCap := -1, math.Inf(1)
			for i, o := range q.p.Operators {
				if P[i] >= q.lim[i] || pl.fit(i, n) == 0 {
					continue
				}
				if c := q.nodeCap(i, n, pl.x[i][n], d[i][n]) / o.Amplification; c < bestCap {
					best, bestCap = i, c
				}
			}
			if best < 0 {
				break
			}
			pl.add(best, n, 1)
			P[best]++
			ok = true
		}
	}
	return pl.x, d, ok
}

// prune drops from s the instances its routing does not use: on every node, launches (the
// instances above the current ones there) whose removal leaves the routed rate within
// the node's capacity, as long as the operator keeps its MinInstances. The throughput and
// routing are unchanged; only the launch cost falls. It returns s itself when nothing is
// dropped.
func (q *prep) prune(s *Solution) *Solution {
	x, d := q.zeros(), q.zeros()
	w := make([][]float64, q.N)
	changed := false
	for i, o := range q.p.Operators {
		w[i] = make([]float64, q.M)
		P := 0
		for n := range q.M {
			x[i][n] = s.PerNode[i][n].Total()
			d[i][n] = s.PerNode[i][n].Candidate - q.K[i][n]
			w[i][n] = s.Rate[i][n] / o.Amplification
			P += x[i][n]
		}
		for n := range q.M {
			for P > o.MinInstances && x[i][n] > max(q.cur[i][n], q.K[i][n]+d[i][n]) &&
				q.nodeCap(i, n, x[i][n]-1, d[i][n]) >= s.Rate[i][n] {
				x[i][n]--
				P--
				changed = true
			}
		}
	}
	if !changed {
		return s
	}
	return q.assemble(x, d, w, s.Throughput)
}

// fillRoute tops up the placement of s (fill), routes it with the routing LP by the
// deadline and prunes what the routing leaves unused; nil when nothing was added or the
// LP failed.
func (m *model) fillRoute(ctx context.Context, s *Solution, opts Options, deadline time.Time) *Solution {
	q := m.q
	x, d, ok := q.fill(s)
	if !ok {
		return nil
	}
	r := m.routeLP(ctx, m.startVector(q.assemble(x, d, nil, math.Inf(1))), opts, deadline)
	if r == nil {
		return nil
	}
	return q.prune(r)
}
