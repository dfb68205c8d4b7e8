package milp

import (
	"context"
	"math"
	"sort"
	"time"
)

// Limits of the move search.
const (
	moveBatch = 8   // moves tried together before the next routing LP, at most
	moveIters = 400 // routing LPs, at most
	moveFails = 24  // routing LPs in a row that do not pay before the search stalls
	// moveGap is the share of Options.RelGap at which the search stops: a plan just
	// within the gap leaves up to RelGap to a peer that overshoots it (HiGHS's search
	// usually does), and moves are cheap where a plan is that close
	moveGap = 0.1
)

// move improves the plan s by moving instances where the routing LP values them: the
// dual of operator i's capacity row on node n, times one instance's rate, is what one
// more instance of i there would add to the objective (to first order). Each step adds
// instances at the most valuable (operator, node) pairs, one per node, making room on
// the node by removing instances its routing leaves idle; an operator at its parallelism
// limit (MaxInstances, e.g.) takes the instance from a node where one of its own is
// idle. Instances carry no throughput of their own, so a plan capped by an operator's
// MaxInstances is improved only by moving that operator, which fill cannot do. A step is
// kept when the routing LP of the new placement beats the current plan by more than a
// tie-breaker (relative 1e-6); otherwise fewer moves are tried, and a single move that
// does not pay is not tried again. When no move is left, or none of moveFails in a row
// paid, the nodes are topped up once more (fill, in the room the moves freed) and the
// search goes on from there if that pays. It returns the best plan found, pruned of
// unused launches, or nil when no step paid; by the deadline, or as soon as a plan is
// proven within moveGap*opts.RelGap by bound.
func (m *model) move(ctx context.Context, s *Solution, bound float64, opts Options, deadline time.Time) *Solution {
	q := m.q
	x, d := q.zeros(), q.zeros()
	for i := range q.N {
		for n := range q.M {
			x[i][n] = s.PerNode[i][n].Total()
			d[i][n] = s.PerNode[i][n].Candidate - q.K[i][n]
		}
	}
	cur, dual := m.routeDuals(ctx, x, d, opts, deadline)
	if cur == nil || dual == nil {
		return nil
	}
	improved := false
	if cur.Objective > s.Objective && Validate(q.p, cur) == nil {
		improved = true
	} else {
		cur = s
	}
	tabu := make(map[[2]int]bool)
	refilled := false
	fails := 0 // routing LPs since the last step that paid
	batch := moveBatch
	for iter := 0; iter < moveIters && ctx.Err() == nil && time.Now().Before(deadline); iter++ {
		if !opts.AlwaysMIP && provenWithin(relGap(bound, cur.Objective), opts.RelGap*moveGap) {
			break
		}
		cands := m.moveCandidates(cur, dual, tabu)
		nx, moved := q.applyMoves(cur, x, d, cands, batch)
		if len(moved) == 0 || fails >= moveFails {
			// stalled: top the nodes up again (fill) in the room the moves freed, and
			// move on from there if that pays
			fx, fd, ok := q.fill(cur)
			if !ok || refilled {
				break
			}
			refilled = true
			r, rd := m.routeDuals(ctx, fx, fd, opts, deadline)
			if r == nil || rd == nil || r.Objective <= cur.Objective+1e-6*math.Abs(cur.Objective) || Validate(q.p, r) != nil {
				break
			}
			x, d, cur, dual, improved = fx, fd, r, rd, true
			clear(tabu)
			batch, fails = moveBatch, 0
			continue
		}
		r, rd := m.routeDuals(ctx, nx, d, opts, deadline)
		if r != nil && rd != nil && r.Objective > cur.Objective+1e-6*math.Abs(cur.Objective) && Validate(q.p, r) == nil {
			x, cur, dual, improved = nx, r, rd, true
			batch, fails = moveBatch, 0
			continue
		}
		fails++
		if len(moved) == 1 {
			tabu[moved[0]] = true
		}
		batch = max(1, len(moved)/2)
	}
	if !improved {
		return nil
	}
	return q.prune(cur)
}

// moveCandidates returns the (operator, node) pairs whose capacity row has a positive
// value per added instance in the routing of cur (dual: the routing LP's row duals),
// most valuable first, without those in tabu.
func (m *model) moveCandidates(cur *Solution, dual []float64, tabu map[[2]int]bool) [][2]int {
	q := m.q
	type cand struct {
		in [2]int
		v  float64
	}
	var cs []cand
	floor := 1e-7 * math.Max(math.Abs(cur.Objective), 1e-9)
	for i := range q.N {
		for n := range q.M {
			if tabu[[2]int{i, n}] || q.ub[i][n] == 0 {
				continue
			}
			if v := math.Abs(dual[m.capRow[i][n]]) * q.mu[i]; v > floor {
				cs = append(cs, cand{[2]int{i, n}, v})
			}
		}
	}
	sort.SliceStable(cs, func(a, b int) bool { return cs[a].v > cs[b].v })
	out := make([][2]int, len(cs))
	for k, c := range cs {
		out[k] = c.in
	}
	return out
}

// applyMoves returns a copy of the placement x (routed as cur, transitions d) with up to
// batch moves applied, one per candidate (i, n) in order while nodes are untouched: one
// more instance of i on n, room made on n by removing instances idle in cur's routing,
// and, when i is at its parallelism limit, one idle instance of i removed from another
// node. It also returns the candidates moved.
func (q *prep) applyMoves(cur *Solution, x, d [][]int, cands [][2]int, batch int) ([][]int, [][2]int) {
	pl := q.newPlacer()
	P := make([]int, q.N)
	for i := range q.N {
		for n := range q.M {
			pl.add(i, n, x[i][n])
			P[i] += x[i][n]
		}
	}
	// spare returns the share of one instance of j on n that cur's routing leaves unused
	// (1: the instance is idle), or 0 when it cannot go: it is an already-transitioned or
	// transitioning instance, or j would fall below its minimum
	spare := func(j, n int) float64 {
		o := &q.p.Operators[j]
		if pl.x[j][n] <= q.K[j][n]+d[j][n] || P[j] <= o.MinInstances {
			return 0
		}
		slack := q.nodeCap(j, n, pl.x[j][n], d[j][n]) - cur.Rate[j][n]*(1+1e-9) - 1e-12
		return math.Max(0, math.Min(1, slack/q.mu[j]))
	}
	touched := make([]bool, q.M)
	var moved [][2]int
	for _, c := range cands {
		if len(moved) >= batch {
			break
		}
		i, n := c[0], c[1]
		if touched[n] {
			continue
		}
		// the donor: an idle instance of i elsewhere when i cannot grow, the one on the
		// node with the most idle capacity
		donor := -1
		if P[i] >= q.lim[i] {
			most := 0.0
			for m := range q.M {
				if m == n || touched[m] {
					continue
				}
				if f := spare(i, m); f > most {
					donor, most = m, f
				}
			}
			if donor < 0 {
				continue
			}
		}
		// room on n: remove the instances of other operators that cur's routing uses
		// least (idle ones first)
		var evicted []int
		for pl.fit(i, n) == 0 {
			j, most := -1, 0.0
			for k := range q.N {
				if f := spare(k, n); k != i && f > most {
					j, most = k, f
				}
			}
			if j < 0 {
				break
			}
			pl.remove(j, n, 1)
			P[j]--
			evicted = append(evicted, j)
		}
		if pl.fit(i, n) == 0 {
			for _, j := range evicted {
				pl.add(j, n, 1)
				P[j]++
			}
			continue
		}
		if donor >= 0 {
			pl.remove(i, donor, 1)
			touched[donor] = true
		} else {
			P[i]++
		}
		pl.add(i, n, 1)
		touched[n] = true
		moved = append(moved, c)
	}
	nx := q.zeros()
	for i := range q.N {
		copy(nx[i], pl.x[i])
	}
	return nx, moved
}

// routeDuals routes the placement x with transitions d by the routing LP (as routeLP,
// solved as an LP) and returns the plan with the LP's row duals; nil when the LP failed
// or gave no duals.
func (m *model) routeDuals(ctx context.Context, x, d [][]int, opts Options, deadline time.Time) (*Solution, []float64) {
	start := m.startVector(m.q.assemble(x, d, nil, math.Inf(1)))
	fixed := m.lp
	fixed.colLo = append([]float64(nil), m.colLo...)
	fixed.colUp = append([]float64(nil), m.colUp...)
	fixed.integer = make([]bool, len(m.integer))
	for j, isInt := range m.integer {
		if isInt {
			fixed.colLo[j], fixed.colUp[j] = start[j], start[j]
		}
	}
	res := runHiGHS(ctx, &fixed, nil, opts, deadline)
	if res.err != nil || res.values == nil || res.rowDual == nil {
		return nil, nil
	}
	return m.decode(res.values), res.rowDual
}
