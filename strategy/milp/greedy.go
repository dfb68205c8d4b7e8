package milp

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Greedy is the fast feasible fallback Solver: bisection on the target throughput, minimum
// integer parallelism per operator (Eq. 13 with the cheapest rolling-update batch), then a
// migration-aware placement that starts from the current deployment and spreads missing
// instances over the nodes in proportion to their room (accelerator operators first);
// rates are split in proportion to node capacity. Without MinInstances it never fails on a
// valid problem (T = 0 with the pinned instances is always feasible); minimums that its
// first-fit packing (two operator orders) cannot place fail with the checker's error
// naming the operator. Its Bound is the aggregate bound.
type Greedy struct{}

// Solve implements Solver.
func (Greedy) Solve(ctx context.Context, p *Problem, opts Options) (*Solution, error) {
	start := time.Now()
	q, err := newPrep(p)
	if err != nil {
		return nil, err
	}
	s := q.greedy(ctx)
	s.SolveTime = time.Since(start)
	if err := Validate(p, s); err != nil {
		return nil, fmt.Errorf("milp: greedy produced an invalid solution: %w", err)
	}
	return s, nil
}

// greedy returns the best solution found; its Bound is the aggregate bound Tub.
func (q *prep) greedy(ctx context.Context) *Solution {
	var best *Solution
	consider := func(s *Solution) {
		if s != nil && (best == nil || s.Objective > best.Objective+1e-12) {
			best = s
		}
	}
	zero := q.zeros()
	// the current deployment as it stands (no migration at all), when it fits
	if q.p.Current != nil && q.fits(q.cur) && q.withinBounds(q.cur) {
		consider(q.assemble(q.cur, zero, nil, math.Inf(1)))
	}
	try := func(T float64) bool {
		x, d, ok := q.place(T, false)
		if !ok {
			x, d, ok = q.place(T, true)
		}
		if ok {
			consider(q.assemble(x, d, nil, math.Inf(1))) // the placement's own maximum T
		}
		return ok
	}
	if !try(q.Tub) {
		lo, hi := 0.0, q.Tub
		for it := 0; it < 30 && hi-lo > 1e-5*q.Tub && (it < 12 || ctx.Err() == nil); it++ {
			mid := (lo + hi) / 2
			if try(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
	}
	if best == nil { // only the pinned instances
		x := make([][]int, q.N)
		for i := range x {
			x[i] = append([]int(nil), q.K[i]...)
		}
		consider(q.assemble(x, zero, nil, 0))
	}
	best.Status, best.Source = StatusHeuristic, "greedy"
	best.Bound = q.Tub
	best.Gap = relGap(best.Bound, best.Objective)
	return best
}

// relGap is (bound - obj) / |bound|, clamped at 0.
func relGap(bound, obj float64) float64 {
	if math.IsInf(bound, 1) {
		return math.Inf(1)
	}
	g := (bound - obj) / math.Max(math.Abs(bound), 1e-9)
	return math.Max(g, 0)
}

func (q *prep) zeros() [][]int {
	z := make([][]int, q.N)
	for i := range z {
		z[i] = make([]int, q.M)
	}
	return z
}

// fits reports whether x respects every node's resource pools.
func (q *prep) fits(x [][]int) bool {
	for n, nd := range q.p.Nodes {
		var c, m float64
		for i, o := range q.p.Operators {
			c += float64(x[i][n]) * o.CPU
			m += float64(x[i][n]) * o.MemMB
		}
		if c > nd.CPU+1e-9 || m > nd.MemMB+1e-9 || !devicesFit(q.p.Operators, &q.p.Nodes[n], func(i int) int { return x[i][n] }) {
			return false
		}
	}
	return true
}

// place builds an integer placement with capacity for throughput T. With scratch=false it
// starts from the current deployment (fewest launches and terminations); with scratch=true
// only the pinned instances are kept and everything else is packed anew.
func (q *prep) place(T float64, scratch bool) (x, d [][]int, ok bool) {
	if scratch {
		return q.placeFrom(T, q.K)
	}
	return q.placeFrom(T, q.cur)
}

// placeFrom is place starting from the instances in base (raised to the pinned ones). It
// adds missing instances accelerator operators first (those accepting the fewest devices
// first), then the largest by cores; when that order leaves an instance without room, it
// retries with the operators taking the largest share of the cluster's scarcest pool
// first (memory-heavy operators packed before core-heavy ones).
func (q *prep) placeFrom(T float64, base [][]int) (x, d [][]int, ok bool) {
	ops := q.p.Operators
	if x, d, ok = q.placeOrdered(T, base, func(a, b int) bool {
		oa, ob := &ops[a], &ops[b]
		if (oa.GPUs > 0) != (ob.GPUs > 0) {
			return oa.GPUs > 0
		}
		if q.acc[a] != q.acc[b] { // the pickiest first
			return q.acc[a] < q.acc[b]
		}
		if oa.GPUs != ob.GPUs {
			return oa.GPUs > ob.GPUs
		}
		return oa.CPU > ob.CPU
	}); ok {
		return x, d, ok
	}
	share := func(i int) float64 {
		o := &ops[i]
		s := math.Max(o.CPU/math.Max(q.poolC, 1e-9), o.MemMB/math.Max(q.poolM, 1e-9))
		if o.GPUs > 0 {
			s = math.Max(s, float64(o.GPUs)/math.Max(float64(q.acc[i]), 1))
		}
		return s
	}
	return q.placeOrdered(T, base, func(a, b int) bool { return share(a) > share(b) })
}

// placeOrdered is placeFrom adding missing instances in the order first (of operator
// indices).
func (q *prep) placeOrdered(T float64, base [][]int, first func(a, b int) bool) (x, d [][]int, ok bool) {
	p := q.p
	N, M := q.N, q.M
	P := make([]int, N)
	delta := make([]int, N)
	for i := range N {
		var fine bool
		P[i], delta[i], fine = q.minInstances(i, T, q.lim[i])
		if !fine {
			return nil, nil, false
		}
	}
	pl := q.newPlacer()
	x = pl.x
	removed := q.zeros()
	// pinned instances first (the pickiest accelerator operators first), then the rest of base
	for _, i := range q.pickiest {
		if q.Ki[i] > 0 {
			for n := range M {
				pl.add(i, n, q.K[i][n])
			}
		}
	}
	for _, i := range q.pickiest {
		for n := range M {
			pl.add(i, n, max(base[i][n], q.K[i][n])-q.K[i][n])
		}
	}
	// drop surplus instances (never pinned ones), most crowded nodes first
	for i := range N {
		sur := -P[i]
		for n := range M {
			sur += x[i][n]
		}
		if sur <= 0 {
			continue
		}
		order := q.nodeOrder(func(n int) float64 { return pl.room[n].cpu / (p.Nodes[n].CPU + 1) })
		for _, n := range order {
			k := min(sur, x[i][n]-q.K[i][n])
			if k > 0 {
				pl.remove(i, n, k)
				removed[i][n] += k
				sur -= k
			}
		}
	}
	// nodes over-committed by the current deployment (e.g. shrunk nodes): shed unpinned
	// instances of the operators that use the exhausted resource
	for n := range M {
		for i := N - 1; i >= 0 && pl.over(n); i-- {
			for x[i][n] > q.K[i][n] && pl.over(n) && pl.culprit(i, n) {
				pl.remove(i, n, 1)
			}
		}
		if pl.over(n) {
			return nil, nil, false
		}
	}
	// add missing instances in the given order
	ops := make([]int, N)
	for i := range ops {
		ops[i] = i
	}
	sort.SliceStable(ops, func(a, b int) bool { return first(ops[a], ops[b]) })
	for _, i := range ops {
		def := P[i]
		for n := range M {
			def -= x[i][n]
		}
		// first undo our own surplus removals (no launch cost), then spread the rest over
		// the nodes in proportion to the room each has for this operator: on identical
		// nodes every node gets the same mix, which packs well and keeps traffic local
		for n := 0; n < M && def > 0; n++ {
			if k := min(def, removed[i][n], pl.fit(i, n)); k > 0 {
				pl.add(i, n, k)
				removed[i][n] -= k
				def -= k
			}
		}
		if def <= 0 {
			continue
		}
		room := make([]int, M)
		total := 0
		for n := range M {
			room[n] = pl.fit(i, n)
			total += room[n]
		}
		if total < def {
			return nil, nil, false
		}
		got := spread(def, room, ones(M))
		for n := range M {
			pl.add(i, n, got[n])
		}
	}
	// keep removed surplus instances where they still fit: no termination cost, more
	// capacity (up to the operator's MaxInstances)
	for i := range N {
		room := q.lim[i]
		for n := range M {
			room -= x[i][n]
		}
		for n := range M {
			if k := min(removed[i][n], pl.fit(i, n), room); k > 0 {
				pl.add(i, n, k)
				room -= k
			}
		}
	}
	// transitions: restart old instances that stay where they are first
	d = q.zeros()
	for i := range N {
		left := delta[i]
		for pass := 0; pass < 2 && left > 0; pass++ {
			for n := 0; n < M && left > 0; n++ {
				room := x[i][n] - q.K[i][n] - d[i][n]
				if pass == 0 {
					room = min(x[i][n], q.cur[i][n]) - q.K[i][n] - d[i][n]
				}
				if k := min(left, room); k > 0 {
					d[i][n] += k
					left -= k
				}
			}
		}
		if left > 0 {
			return nil, nil, false
		}
	}
	return x, d, true
}

// withinBounds reports whether every operator's parallelism in x is within its
// MinInstances and MaxInstances.
func (q *prep) withinBounds(x [][]int) bool {
	for i := range q.p.Operators {
		P := 0
		for _, v := range x[i] {
			P += v
		}
		if !q.p.Operators[i].admits(P) {
			return false
		}
	}
	return true
}

// nodeOrder returns node indices sorted by key, smallest first (stable).
func (q *prep) nodeOrder(key func(n int) float64) []int {
	o := make([]int, q.M)
	k := make([]float64, q.M)
	for n := range o {
		o[n], k[n] = n, key(n)
	}
	slices.SortStableFunc(o, func(a, b int) int { return cmp.Compare(k[a], k[b]) })
	return o
}

// spread distributes def instances over nodes with the given room, in proportion to
// room*weight (water-filling: a node never gets more than its room).
func spread(def int, room []int, weight []float64) []int {
	M := len(room)
	got := make([]int, M)
	want := make([]float64, M)
	open := make([]bool, M)
	left := float64(def)
	for n := range M {
		open[n] = room[n] > 0
	}
	for round := 0; round < M && left > 1e-9; round++ {
		sw := 0.0
		for n := range M {
			if open[n] {
				sw += float64(room[n]) * weight[n]
			}
		}
		if sw <= 0 {
			break
		}
		capped := false
		for n := range M {
			if !open[n] {
				continue
			}
			add := left * float64(room[n]) * weight[n] / sw
			if want[n]+add >= float64(room[n]) {
				capped = true
			}
		}
		next := left
		for n := range M {
			if !open[n] {
				continue
			}
			add := left * float64(room[n]) * weight[n] / sw
			if want[n]+add >= float64(room[n]) {
				next -= float64(room[n]) - want[n]
				want[n] = float64(room[n])
				open[n] = false
			} else if !capped {
				want[n] += add
				next -= add
			}
		}
		left = next
	}
	placed := 0
	for n := range M {
		got[n] = min(room[n], int(math.Floor(want[n]+1e-9)))
		placed += got[n]
	}
	for placed < def { // remainder: largest unmet share first, then any room
		best, bestV := -1, math.Inf(-1)
		for n := range M {
			if got[n] < room[n] {
				if v := want[n] - float64(got[n]); v > bestV {
					best, bestV = n, v
				}
			}
		}
		if best < 0 {
			break
		}
		got[best]++
		placed++
	}
	return got
}

func ones(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 1
	}
	return v
}
