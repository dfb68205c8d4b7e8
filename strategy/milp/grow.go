package milp

import (
	"context"
	"math"
	"sort"
	"time"
)

// growUse is the share of an accelerator operator's capacity the routing must use for the
// operator to be the bottleneck a grow round adds an instance of.
const growUse = 0.95

// bottleneck returns the accelerator operator whose instances cur's routing uses most,
// at least growUse of their capacity, and that is below its parallelism limit; -1 when
// there is none.
func (q *prep) bottleneck(cur *Solution) int {
	best, bestUse := -1, growUse
	for i, o := range q.p.Operators {
		if o.GPUs == 0 {
			continue
		}
		P, capacity, rate := 0, 0.0, 0.0
		for n := range q.M {
			x := cur.PerNode[i][n].Total()
			P += x
			if x > 0 {
				capacity += q.nodeCap(i, n, x, cur.PerNode[i][n].Candidate-q.K[i][n])
			}
			rate += cur.Rate[i][n]
		}
		if P >= q.lim[i] || capacity <= 0 {
			continue
		}
		if u := rate / capacity; u >= bestUse {
			best, bestUse = i, u
		}
	}
	return best
}

// clearFor returns the placement of cur with one more instance of operator b on a node
// where it does not fit now (not in skip): the instances there that block it are
// evicted, those the routing uses least first, and re-homed on other nodes where they
// fit, beside their pipeline neighbours where possible. Of the nodes that can be cleared
// it takes the one whose evicted instances carry the least of cur's routing. It returns
// the placer holding the placement (instances and the room left), its transitions, the
// node, the nodes that took evicted instances, and ok false when no node can be cleared
// (instances pinned by transitions, or an operator that would fall below its
// MinInstances).
func (q *prep) clearFor(cur *Solution, b int, skip []bool) (pl *placer, d [][]int, target int, homes []int, ok bool) {
	ob := &q.p.Operators[b]
	d = q.zeros()
	for i := range q.N {
		for n := range q.M {
			d[i][n] = cur.PerNode[i][n].Candidate - q.K[i][n]
		}
	}
	// used is the share of one instance of j on n that cur's routing uses
	used := func(pl *placer, j, n int) float64 {
		slack := q.nodeCap(j, n, pl.x[j][n], d[j][n]) - cur.Rate[j][n]
		return math.Max(0, math.Min(1, 1-slack/q.mu[j]))
	}
	// blocks reports whether removing an instance of j from n frees what b lacks there
	blocks := func(pl *placer, j, n int) bool {
		o, r := &q.p.Operators[j], &pl.room[n]
		return (o.CPU > 0 && r.cpu < ob.CPU) || (o.MemMB > 0 && r.mem < ob.MemMB) || (o.GPUs > 0 && ob.GPUs > 0)
	}
	// evict clears n for b on pl, returning the evicted operators and their cost (the
	// routed share they carried), ok false when it cannot
	evict := func(pl *placer, n int) (out []int, cost float64, ok bool) {
		for pl.fit(b, n) == 0 {
			j, least := -1, math.Inf(1)
			for k := range q.N {
				if k == b || pl.x[k][n] <= q.K[k][n]+d[k][n] || !blocks(pl, k, n) {
					continue
				}
				if u := used(pl, k, n); u < least {
					j, least = k, u
				}
			}
			if j < 0 {
				return nil, 0, false
			}
			pl.remove(j, n, 1)
			out = append(out, j)
			cost += least
		}
		return out, cost, true
	}
	load := func(pl *placer) []int {
		P := make([]int, q.N)
		for i := range q.N {
			for n := range q.M {
				pl.add(i, n, cur.PerNode[i][n].Total())
				P[i] += cur.PerNode[i][n].Total()
			}
		}
		return P
	}
	target, least := -1, math.Inf(1)
	for n := range q.M {
		if skip[n] || q.ub[b][n] == 0 {
			continue
		}
		pl := q.newPlacer()
		load(pl)
		if pl.fit(b, n) > 0 {
			continue // fill's job; no clearing needed
		}
		if _, cost, ok := evict(pl, n); ok && cost < least {
			target, least = n, cost
		}
	}
	if target < 0 {
		return nil, nil, -1, nil, false
	}
	pl = q.newPlacer()
	P := load(pl)
	evicted, _, _ := evict(pl, target)
	pl.add(b, target, 1)
	P[b]++
	took := make([]bool, q.M)
	for _, j := range evicted {
		P[j]--
		home, score := -1, -1.0
		for n := range q.M {
			if n == target || pl.fit(j, n) == 0 {
				continue
			}
			s := 0.0
			if j > 0 {
				s += float64(pl.x[j-1][n])
			}
			if j+1 < q.N {
				s += float64(pl.x[j+1][n])
			}
			if s > score {
				home, score = n, s
			}
		}
		if home < 0 {
			if P[j] < q.p.Operators[j].MinInstances {
				return nil, nil, -1, nil, false
			}
			continue
		}
		pl.add(j, home, 1)
		P[j]++
		took[home] = true
	}
	for n := range q.M {
		if took[n] {
			homes = append(homes, n)
		}
	}
	return pl, d, target, homes, true
}

// growRound is one grow round of the neighbourhood search (lns): one more instance of the
// bottleneck accelerator operator b on a node cleared for it (clearFor), the cleared node
// forced to keep it, and HiGHS re-solving the placement of that node, the nodes that took
// its evicted instances and the other nodes with free devices that could hold an
// accelerator operator, at most k of them; the start is the routed cleared placement
// (often below cur: the evicted chains lost their neighbours). Above T where b's capacity
// binds, a better plan needs a whole node cleared and its chains moved together, and no
// single move or ordinary neighbourhood pays (het/64/s5: the seventh four-GPU instance of
// op05). It returns the sub-MIP's plan (nil when none) and the node it cleared (-1 when
// none could be).
func (m *model) growRound(ctx context.Context, cur *Solution, b, k int, skip []bool, opts Options, deadline time.Time, logPhase func(string, highsResult)) (*Solution, int) {
	q := m.q
	pl, d, target, homes, ok := q.clearFor(cur, b, skip)
	if !ok {
		return nil, -1
	}
	x := q.zeros()
	for i := range q.N {
		copy(x[i], pl.x[i])
	}
	start := q.assemble(x, d, nil, math.Inf(1))
	if r := m.routeLP(ctx, m.startVector(start), opts, deadline); r != nil {
		start = r
	}
	free := make([]bool, q.M)
	nodes := []int{target}
	free[target] = true
	for _, n := range homes {
		if !free[n] && len(nodes) < k {
			free[n] = true
			nodes = append(nodes, n)
		}
	}
	// then the nodes with the most free devices that an accelerator operator can use
	type nf struct{ n, free int }
	var cands []nf
	for n := range q.M {
		if free[n] || len(q.devs[n]) == 0 {
			continue
		}
		f := 0
		for _, c := range pl.room[n].dev {
			f += c
		}
		cands = append(cands, nf{n, f})
	}
	sort.SliceStable(cands, func(a, c int) bool { return cands[a].free > cands[c].free })
	for _, c := range cands {
		if len(nodes) >= k {
			break
		}
		free[c.n] = true
		nodes = append(nodes, c.n)
	}
	sv := m.startVector(start)
	sub := m.lp
	sub.colLo = append([]float64(nil), m.colLo...)
	sub.colUp = append([]float64(nil), m.colUp...)
	for i := range q.N {
		for n := range q.M {
			if free[n] {
				continue
			}
			m.fixAt(&sub, i, n, sv)
		}
	}
	sub.colLo[m.x[b][target]] = math.Max(sub.colLo[m.x[b][target]], sv[m.x[b][target]])
	res := runHiGHS(ctx, &sub, sv, opts, deadline)
	logPhase("lns grow", res)
	if res.err != nil || res.values == nil {
		return nil, target
	}
	return m.decode(res.values), target
}
