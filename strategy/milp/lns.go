package milp

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// Limits of the node-neighbourhood search.
const (
	lnsMinNodes = 4    // nodes freed per sub-MIP, at least
	lnsMaxNodes = 16   // and at most
	lnsIterCap  = 0.25 // share of the search's time one sub-MIP may use, at most
	// lnsFails is how many sub-MIPs in a row may not pay before the search stops. Failed
	// sub-MIPs are cheap where the neighbourhoods are easy (30-100 ms at 128 nodes), and
	// gains can come after long runs of them: with 6, het/128/s10 stopped at 338.3 (the
	// full MIP from there ended at 339.9, 0.6 % behind the plain peer), while the 7th
	// sub-MIP after the last gain reaches 340.1 and the full MIP from there 343.8;
	// het/8/s10 (test) ends 6.7 % below the optimum with 6.
	lnsFails  = 12
	lnsSubGap = 1.0 // share of Options.RelGap at which a sub-MIP stops
	// lnsGrowEvery and lnsGrowFails: a grow round comes after this many ordinary sub-MIPs
	// at most, and grow rounds stop after lnsGrowFails in a row without gain.
	lnsGrowEvery = 4
	lnsGrowFails = 3
	// lnsMinCluster is the smallest cluster Solve runs the search on. Below it HiGHS on
	// the full model is the better use of the time: in bench milp -hetero every instance
	// of 8-32 nodes ended within 1 % without the search, and on het/16/s3 the search found
	// the optimum but took the seconds HiGHS needed to prove it (2.7 % gap at 10 s
	// instead of proven in 7.7 s).
	lnsMinCluster = 64
)

// lns improves the plan s by large-neighbourhood search over nodes: HiGHS re-solves the
// placement on a few nodes at a time, with every instance count, transition and device
// split on the other nodes fixed at the incumbent's, and all the routing free. Unlike
// the move search, which changes one instance per node per step and keeps a step only
// when it pays on its own, a sub-MIP moves whole local chains at once (an accelerator
// operator and the CPU operators that consume its output on the same node, with the
// instances they replace): on het/64/s5 the operator capped by its MaxInstances is only
// useful beside the accelerator operator that feeds it, and no single move pays there.
//
// A neighbourhood takes half its nodes by their value in the incumbent's routing LP (the
// largest dual of a capacity row times one instance's rate, rotating through the ranking)
// and the rest at random (a generator seeded by the cluster size: the neighbourhoods are
// reproducible), so that nodes holding the instances to move come in; every other
// neighbourhood is instead the nodes that can hold one operator (see neighbourhood). The size grows when a sub-MIP is solved without
// gain and shrinks when one runs out of time. Every sub-MIP starts from the incumbent,
// which is feasible in it, and its plans are plans of the full model; its dual bound is
// not a bound of the full model and is discarded. Grow rounds (growRound) come first,
// after every sub-MIP that paid and after every lnsGrowEvery ordinary ones: one more
// instance of the bottleneck accelerator operator on a node cleared for it; they stop
// after lnsGrowFails in a row without gain, which do not count toward lnsFails. It
// returns the best plan found, or nil when none paid; by the deadline, or as soon as a
// plan is proven within moveGap*opts.RelGap of bound, or after lnsFails sub-MIPs in a
// row without gain.
func (m *model) lns(ctx context.Context, s *Solution, bound float64, opts Options, deadline time.Time, logPhase func(string, highsResult)) *Solution {
	q := m.q
	if q.M < 2*lnsMinNodes {
		return nil // the full MIP is the neighbourhood
	}
	rng := rand.New(rand.NewPCG(1, uint64(q.M)))
	kMax := min(lnsMaxNodes, q.M/2) // a neighbourhood of most of the cluster is the full MIP, which runs next
	cur := s
	var best *Solution
	k := lnsMinNodes
	fails, round := 0, 0
	// grow rounds (growRound): the first sub-MIP, then after every sub-MIP that paid and
	// every lnsGrowEvery ordinary ones; their fails are counted apart, and a node a grow
	// round cleared without gain is not cleared again until one pays
	growNext, growFails := true, 0
	skip := make([]bool, q.M)
	var dual []float64
	var dualOf *Solution
	sub := m.lp
	sub.colLo = make([]float64, len(m.colLo))
	sub.colUp = make([]float64, len(m.colUp))
	iterCap := max(time.Duration(lnsIterCap*float64(time.Until(deadline))), 50*time.Millisecond)
	for ctx.Err() == nil && time.Now().Before(deadline) && fails < lnsFails {
		if !opts.AlwaysMIP && provenWithin(relGap(bound, cur.Objective), opts.RelGap*moveGap) {
			break
		}
		if dualOf != cur { // the duals of the incumbent's routing, once per incumbent
			x, d := q.zeros(), q.zeros()
			for i := range q.N {
				for n := range q.M {
					x[i][n] = cur.PerNode[i][n].Total()
					d[i][n] = cur.PerNode[i][n].Candidate - q.K[i][n]
				}
			}
			_, dual = m.routeDuals(ctx, x, d, opts, deadline)
			dualOf = cur
		}
		if growNext && growFails < lnsGrowFails && len(m.classes) == 0 {
			growNext = false
			if b := q.bottleneck(cur); b >= 0 {
				iterEnd := time.Now().Add(2 * iterCap)
				if iterEnd.After(deadline) {
					iterEnd = deadline
				}
				r, target := m.growRound(ctx, cur, b, max(k, 2*lnsMinNodes), skip, opts, iterEnd, logPhase)
				if target >= 0 {
					if r != nil && r.Objective > cur.Objective+1e-6*math.Abs(cur.Objective) && Validate(q.p, r) == nil {
						cur, best = r, r
						fails, growFails, growNext = 0, 0, true
						clear(skip)
						continue
					}
					skip[target] = true
					growFails++
					continue
				}
			}
		}
		nodes := m.neighbourhood(dual, k, round, rng)
		round++
		growNext = growNext || round%lnsGrowEvery == 0
		start := m.startVector(cur)
		copy(sub.colLo, m.colLo)
		copy(sub.colUp, m.colUp)
		free := make([]bool, q.M)
		for _, n := range nodes {
			free[n] = true
		}
		for i := range q.N {
			for n := range q.M {
				if !free[n] {
					m.fixAt(&sub, i, n, start)
				}
			}
		}
		sopts := opts
		sopts.RelGap = opts.RelGap * lnsSubGap
		iterEnd := time.Now().Add(iterCap)
		if iterEnd.After(deadline) {
			iterEnd = deadline
		}
		res := runHiGHS(ctx, &sub, start, sopts, iterEnd)
		logPhase("lns", res)
		var r *Solution
		if res.err == nil && res.values != nil {
			r = m.decode(res.values)
		}
		if r != nil && r.Objective > cur.Objective+1e-6*math.Abs(cur.Objective) && Validate(q.p, r) == nil {
			cur, best = r, r
			fails = 0
			growNext = true // the bottleneck may bind now
			continue
		}
		fails++
		if res.interrupted || res.status == hsTimeLimit {
			k = max(lnsMinNodes, k*3/4)
		} else {
			k = min(kMax, k*3/2)
		}
	}
	if best == nil {
		return nil
	}
	return q.prune(best)
}

// fixAt fixes in sub the integer columns of operator i on node n (instances, transitions,
// device-class split) at their values in v.
func (m *model) fixAt(sub *lp, i, n int, v []float64) {
	fix := func(j int) {
		if j >= 0 {
			sub.colLo[j], sub.colUp[j] = v[j], v[j]
		}
	}
	fix(m.x[i][n])
	fix(m.d[i][n])
	if m.y[i] != nil {
		for _, j := range m.y[i][n] {
			fix(j)
		}
	}
}

// neighbourhood returns k distinct nodes. Even rounds (rot) take half of them the most
// valuable in the incumbent's routing (dual: its routing LP's row duals, nil when unknown;
// a node's value is the largest dual of a capacity row there times one instance's rate),
// rotating through the ranking, and the rest at random. Odd rounds take the nodes that can
// hold one operator (the operators with a valuable capacity row in turn, most valuable
// node first, then at random among them): the nodes that compete for one scarce resource
// (an accelerator operator's device class), where a whole node's worth of instances
// must move together (het/64/s5: one more instance of a four-GPU operator needs a whole
// node cleared of the one-GPU chains that live there).
func (m *model) neighbourhood(dual []float64, k, round int, rng *rand.Rand) []int {
	q := m.q
	type nv struct {
		n int
		v float64
	}
	val := func(i, n int) float64 {
		if dual == nil || q.ub[i][n] == 0 {
			return 0
		}
		return math.Abs(dual[m.capRow[i][n]]) * q.mu[i]
	}
	in := make([]bool, q.M)
	var out []int
	take := func(n int) {
		if !in[n] && len(out) < k {
			in[n] = true
			out = append(out, n)
		}
	}
	if round%2 == 1 {
		// the operators with a valuable row somewhere, by their best value
		var ops []nv
		for i := range q.N {
			v := 0.0
			for n := range q.M {
				v = math.Max(v, val(i, n))
			}
			if v > 0 {
				ops = append(ops, nv{i, v})
			}
		}
		sort.SliceStable(ops, func(a, b int) bool { return ops[a].v > ops[b].v })
		if len(ops) > 0 {
			i := ops[(round/2)%len(ops)].n
			var elig []nv
			for n := range q.M {
				if q.ub[i][n] > 0 {
					elig = append(elig, nv{n, val(i, n)})
				}
			}
			rng.Shuffle(len(elig), func(a, b int) { elig[a], elig[b] = elig[b], elig[a] })
			sort.SliceStable(elig, func(a, b int) bool { return elig[a].v > elig[b].v })
			if len(elig) > 0 {
				take(elig[0].n)
			}
			for _, e := range rng.Perm(len(elig)) {
				take(elig[e].n)
			}
		}
	} else {
		var ranked []nv
		for n := range q.M {
			v := 0.0
			for i := range q.N {
				v = math.Max(v, val(i, n))
			}
			if v > 0 {
				ranked = append(ranked, nv{n, v})
			}
		}
		sort.SliceStable(ranked, func(a, b int) bool { return ranked[a].v > ranked[b].v })
		for j := 0; j < len(ranked) && len(out) < k/2; j++ {
			take(ranked[(round/2*max(1, k/2)+j)%len(ranked)].n)
		}
	}
	for tries := 0; len(out) < k && tries < 8*q.M; tries++ {
		take(rng.IntN(q.M))
	}
	sort.Ints(out)
	return out
}
