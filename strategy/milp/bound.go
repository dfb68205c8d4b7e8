package milp

import "math"

// minInstances returns the smallest parallelism P_i >= max(K_i, MinInstances) and the
// smallest number of transitions delta_i that give operator i input capacity >= A_i*T
// (Eq. 13 with the rolling-update bounds 23-26), or ok=false when no parallelism within
// limit suffices.
func (q *prep) minInstances(i int, T float64, limit int) (P, delta int, ok bool) {
	P, delta = q.capacityInstances(i, T)
	P = max(P, q.p.Operators[i].MinInstances)
	return P, delta, P <= limit
}

// capacityInstances is minInstances without the MinInstances floor and the limit.
func (q *prep) capacityInstances(i int, T float64) (P, delta int) {
	k := q.Ki[i]
	need := q.p.Operators[i].Amplification*T - q.muC[i]*float64(k)
	if need <= 0 {
		return k, 0
	}
	ceil := func(v float64) int { return int(math.Ceil(v - 1e-9)) }
	mu, muT := q.mu[i], q.muT[i]
	if q.transitionable(i) && muT > mu {
		dm := float64(q.dmax[i])
		if need <= muT*dm {
			P = k + ceil(need/muT)
		} else {
			P = k + q.dmax[i] + ceil((need-muT*dm)/mu)
		}
		// fewest transitions that still reach the target with P instances (each costs a restart)
		rest := float64(P - k)
		delta = max(0, ceil((need-mu*rest)/(muT-mu)))
		delta = min(delta, q.dmax[i], P-k)
	} else {
		P = k + ceil(need/mu)
	}
	return P, delta
}

// aggregateFeasible reports whether throughput T passes the aggregate relaxation: every
// operator gets its minimum integer parallelism, and the cluster's pooled CPU and memory
// and the accelerators of every device group (deviceGroups) hold them (nodes merged into
// one; packing and network ignored).
func (q *prep) aggregateFeasible(T float64) bool {
	var cpu, mem float64
	Ps := make([]int, q.N)
	for i := range q.p.Operators {
		P, _, ok := q.minInstances(i, T, q.lim[i])
		if !ok {
			return false
		}
		Ps[i] = P
		o := &q.p.Operators[i]
		cpu += float64(P) * o.CPU
		mem += float64(P) * o.MemMB
	}
	if cpu > q.poolC+1e-9 || mem > q.poolM+1e-9 {
		return false
	}
	for _, g := range q.groups {
		need := 0
		for _, i := range g.ops {
			need += Ps[i] * q.p.Operators[i].GPUs
		}
		if need > g.devices {
			return false
		}
	}
	return true
}

// aggregateBound returns an upper bound on T valid for the full model: the supremum of
// throughputs that pass aggregateFeasible, found by bisection and rounded up, and at most
// what every contended resource pooled over the nodes carries.
func (q *prep) aggregateBound() float64 {
	hi := math.Inf(1)
	for i, o := range q.p.Operators {
		c := q.muC[i]*float64(q.Ki[i]) + math.Max(q.mu[i], q.muT[i])*float64(q.lim[i]-q.Ki[i])
		hi = math.Min(hi, c/o.Amplification)
	}
	// contended resources, pooled over the nodes: sum_n sum_i cuse_i A_i w_in <= sum_n cfree_n
	for k := range q.kinds {
		use, free := 0.0, 0.0
		for i, c := range q.cuse[k] {
			use += c * q.p.Operators[i].Amplification
		}
		for _, f := range q.cfree[k] {
			free += f
		}
		hi = math.Min(hi, free/use)
	}
	if hi <= 0 || !q.aggregateFeasible(0) {
		return 0
	}
	lo := 0.0
	hi *= 1 + 1e-9
	for it := 0; it < 200 && hi-lo > 1e-9*hi; it++ {
		mid := (lo + hi) / 2
		if q.aggregateFeasible(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}
