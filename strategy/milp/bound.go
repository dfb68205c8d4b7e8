package milp

import (
	"math"
	"slices"
)

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
// operator gets its minimum integer parallelism, and the cluster's pooled CPU and memory,
// the accelerators of every device group (deviceGroups) and the packing rows (packRows)
// hold them (nodes merged into one but for the rounding of the packing rows; network
// ignored).
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
	for _, r := range q.packs {
		need := 0.0
		for i, c := range r.coef {
			need += c * float64(Ps[i])
		}
		if need > r.cap {
			return false
		}
	}
	return true
}

// packRow is a pooled packing row of the aggregate bound: sum_i coef[i] P_i <= cap.
type packRow struct {
	coef []float64
	cap  float64
}

// packRows returns the packing rows of the aggregate relaxation: for a resource (CPU,
// memory, the devices of a device group) and a unit s, every node (device class) holds
// at most floor(C/s) instances' worth of floor(a_i/s) units, so
// sum_i floor(a_i/s) P_i <= sum_n floor(C_n/s), which the pooled rows miss where the
// nodes' capacities are not multiples of s. The units are the operators' distinct
// requirements and their greatest common divisor (which keeps every operator in the
// row); only rows where some node loses a unit to rounding are kept. On het/32/s6
// (memory-bound; 2-128 GiB instances, nodes of odd GiB) the pooled memory left 1 GiB,
// and the nodes lose 5: the bound falls from 49.999 to 49.3248, the optimum being 49.3207.
func (q *prep) packRows() []packRow {
	p := q.p
	var rows []packRow
	add := func(req []float64, caps []float64) {
		var sizes []float64
		for _, a := range req {
			if a > 0 && !slices.Contains(sizes, a) {
				sizes = append(sizes, a)
			}
		}
		if g := floatGCD(sizes); g > 0 && !slices.Contains(sizes, g) {
			sizes = append(sizes, g)
		}
		slices.Sort(sizes)
		for _, s := range sizes {
			r := packRow{coef: make([]float64, q.N)}
			pooled := 0.0
			for _, c := range caps {
				r.cap += math.Floor(c/s + 1e-9)
				pooled += c / s
			}
			if r.cap > pooled-1e-6 {
				continue // no node loses a unit: the pooled row is as tight
			}
			for i, a := range req {
				r.coef[i] = math.Floor(a/s + 1e-9)
			}
			rows = append(rows, r)
		}
	}
	cpu, mem := make([]float64, q.N), make([]float64, q.N)
	for i, o := range p.Operators {
		cpu[i], mem[i] = o.CPU, o.MemMB
	}
	ncpu, nmem := make([]float64, q.M), make([]float64, q.M)
	for n, nd := range p.Nodes {
		ncpu[n], nmem[n] = nd.CPU, nd.MemMB
	}
	add(cpu, ncpu)
	add(mem, nmem)
	for _, g := range q.groups {
		req := make([]float64, q.N)
		for _, i := range g.ops {
			req[i] = float64(p.Operators[i].GPUs)
		}
		caps := make([]float64, len(g.counts))
		for c, k := range g.counts {
			caps[c] = float64(k)
		}
		add(req, caps)
	}
	return rows
}

// floatGCD returns the greatest common divisor of vs when they are multiples of 1/1000
// (CPU shares, MiB), or 0.
func floatGCD(vs []float64) float64 {
	g := int64(0)
	for _, v := range vs {
		k := int64(math.Round(v * 1000))
		if k <= 0 || math.Abs(float64(k)-v*1000) > 1e-6*math.Max(1, v*1000) {
			return 0
		}
		for k != 0 {
			g, k = k, g%k
		}
	}
	return float64(g) / 1000
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
