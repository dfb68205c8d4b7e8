package sim

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Profiler measures operators in isolation under sustained full load, as an offline
// profiling run does (used by the Static and SCOOT baselines and by tests). It never
// reveals the model itself, only noisy measurements.
type Profiler struct {
	pipe    *Pipeline
	cluster Cluster
	rng     *rand.Rand
}

// NewProfiler returns a profiler with its own seeded noise.
func NewProfiler(p *Pipeline, c Cluster, seed uint64) *Profiler {
	return &Profiler{pipe: p, cluster: c, rng: rand.New(rand.NewPCG(seed, 77))}
}

// Sample draws n records spread over the dataset in order (proportionally to each part's
// size), as a profiling sample of the input would.
func (p *Profiler) Sample(n int) []Attrs {
	total := p.pipe.TotalRecords()
	out := make([]Attrs, 0, n)
	for _, r := range p.pipe.Regimes {
		k := int(math.Round(float64(n) * r.Records / total))
		for range max(k, 1) {
			out = append(out, r.Sample(p.rng))
		}
	}
	return out
}

// SamplePilot draws n records of the dataset's first part only, as a pilot run on the
// start of the input would see.
func (p *Profiler) SamplePilot(n int) []Attrs {
	out := make([]Attrs, 0, n)
	for range n {
		out = append(out, p.pipe.Regimes[0].Sample(p.rng))
	}
	return out
}

// Capacity returns one instance's saturated records/s on records like a (2 % noise).
func (p *Profiler) Capacity(op int, a Attrs, cfg OpConfig) float64 {
	spec := &p.pipe.Ops[op]
	if cfg == nil {
		cfg = DefaultConfig(spec.Space)
	}
	r := spec.Model.Rate(a, cfg, spec.inFlightLimit(cfg))
	return r * (1 + 0.02*p.rng.NormFloat64())
}

// PeakMem returns the largest peak device memory over a window of w seconds at full load
// and whether the instance ran out of memory.
func (p *Profiler) PeakMem(op int, a Attrs, cfg OpConfig, w float64) (float64, bool) {
	spec := &p.pipe.Ops[op]
	mean, sd := spec.Model.PeakMem(a, cfg, spec.inFlightLimit(cfg))
	limit := p.cluster.Nodes[0].AccMemGB
	peak := mean + sd*(expMaxNormal(int(w))+0.3*p.rng.NormFloat64())
	if peak >= limit {
		return limit, true
	}
	return peak, false
}

// CumAmp returns, per operator, the records it sees per source record with attributes a.
func (p *Pipeline) CumAmp(a Attrs) []float64 {
	c := make([]float64, len(p.Ops))
	amp := 1.0
	for i := range p.Ops {
		c[i] = amp
		amp *= p.Ops[i].Model.Amplification(a)
	}
	return c
}

// Demand returns instances of each operator needed per source record/s for records like a,
// from the given per-instance capacities (records/s of that operator).
func Demand(p *Pipeline, a Attrs, capacity func(op int, a Attrs) float64) []float64 {
	amp := p.CumAmp(a)
	d := make([]float64, len(p.Ops))
	for i := range d {
		c := capacity(i, a)
		if c <= 0 {
			d[i] = math.Inf(1)
			continue
		}
		d[i] = amp[i] / c
	}
	return d
}

// Pools are cluster-wide resource totals.
func poolsFit(total Resources, need []Resources, n []int) bool {
	var used Resources
	for i, k := range n {
		used = used.Add(need[i].Scale(k))
	}
	return total.Fits(used)
}

// Balance returns instance counts that maximise the sustainable source rate for per-op
// demand d (instances per source record/s), within the cluster's pools and packable on its
// nodes; leftover resources go to the operators with least headroom. Every operator gets
// at least one instance.
func Balance(c Cluster, p *Pipeline, d []float64) []int {
	need := make([]Resources, len(p.Ops))
	for i := range need {
		need[i] = p.Ops[i].Need
	}
	total := c.Total()
	counts := func(t float64) []int {
		n := make([]int, len(d))
		for i := range d {
			n[i] = max(1, int(math.Ceil(d[i]*t-1e-9)))
		}
		return n
	}
	ok := func(n []int) bool { return poolsFit(total, need, n) && PlaceStriped(c, need, n) != nil }
	lo, hi := 0.0, 1.0
	for ok(counts(hi)) && hi < 1e9 {
		lo, hi = hi, hi*2
	}
	for range 50 {
		mid := (lo + hi) / 2
		if ok(counts(mid)) {
			lo = mid
		} else {
			hi = mid
		}
	}
	n := counts(lo)
	// Hand out leftovers: repeatedly add to the op with the smallest n_i/d_i that fits.
	for {
		order := make([]int, len(d))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool {
			return float64(n[order[a]])/d[order[a]] < float64(n[order[b]])/d[order[b]]
		})
		added := false
		for _, i := range order {
			if d[i] <= 0 {
				continue
			}
			n[i]++
			if ok(n) {
				added = true
				break
			}
			n[i]--
		}
		if !added {
			break
		}
	}
	return n
}

// PlaceStriped spreads each operator's instances evenly over the nodes (accelerator
// operators first, then by decreasing CPU need), so every node runs a similar slice of the
// whole pipeline. It returns nil if the counts do not fit.
func PlaceStriped(c Cluster, need []Resources, n []int) [][]int {
	nN := len(c.Nodes)
	free := c.capacities()
	order := largestFirst(need)
	out := make([][]int, len(n))
	start := 0
	for _, i := range order {
		out[i] = make([]int, nN)
		for k := 0; k < n[i]; k++ {
			placed := false
			// Round-robin from a rotating start, skipping nodes without room; prefer the
			// node with most free capacity of the binding kind among equals.
			for j := range nN {
				nd := (start + j) % nN
				if free[nd].Fits(need[i]) {
					free[nd] = free[nd].Sub(need[i])
					out[i][nd]++
					placed = true
					start = (nd + 1) % nN
					break
				}
			}
			if !placed {
				return nil
			}
		}
	}
	return out
}

// PlacePolicy chooses a node for one new instance.
type PlacePolicy int

// Placement policies of cluster schedulers.
const (
	// BinPack fills the most-allocated node that fits (Nomad's default scheduler).
	BinPack PlacePolicy = iota
	// Spread picks the least-allocated node that fits.
	Spread
	// Hybrid packs nodes up to half their CPU, then spreads (Ray's default policy).
	Hybrid
)

// PickNode returns the node for one instance needing need, or -1 if none fits. free is the
// current free capacity per node; the caller updates it.
func PickNode(c Cluster, free []Resources, need Resources, pol PlacePolicy) int {
	best, bestScore := -1, 0.0
	for n := range free {
		if !free[n].Fits(need) {
			continue
		}
		used := 1 - free[n].CPU/c.Nodes[n].Cap.CPU
		if c.Nodes[n].Cap.Acc > 0 && need.Acc > 0 {
			used = 1 - float64(free[n].Acc)/float64(c.Nodes[n].Cap.Acc)
		}
		var s float64
		switch pol {
		case BinPack:
			s = used
		case Spread:
			s = -used
		case Hybrid:
			if used < 0.5 {
				s = 1 + used
			} else {
				s = -used
			}
		}
		if best < 0 || s > bestScore+1e-12 {
			best, bestScore = n, s
		}
	}
	return best
}

// Resize changes per-node counts cur to total instances target using policy pol for
// additions (removals take from the node with most instances). free is updated.
func Resize(c Cluster, free []Resources, need Resources, cur []int, target int, pol PlacePolicy) []int {
	out := append([]int(nil), cur...)
	t := 0
	for _, k := range out {
		t += k
	}
	for t > target {
		j := 0
		for n := range out {
			if out[n] > out[j] {
				j = n
			}
		}
		out[j]--
		free[j] = free[j].Add(need)
		t--
	}
	for t < target {
		n := PickNode(c, free, need, pol)
		if n < 0 {
			break
		}
		out[n]++
		free[n] = free[n].Sub(need)
		t++
	}
	return out
}

// PlaceDefault places counts n operator by operator, in pipeline order, with a cluster
// scheduler's policy (no pipeline awareness). It returns nil if they do not fit.
func PlaceDefault(c Cluster, need []Resources, n []int, pol PlacePolicy) [][]int {
	free := c.capacities()
	// Accelerator operators first, then by decreasing CPU request (pipeline order among
	// equals), so fragmentation cannot strand the large requests.
	order := largestFirst(need)
	out := make([][]int, len(n))
	{
		for _, i := range order {
			out[i] = Resize(c, free, need[i], make([]int, len(c.Nodes)), n[i], pol)
			t := 0
			for _, k := range out[i] {
				t += k
			}
			if t != n[i] {
				return nil
			}
		}
	}
	return out
}

// PlanFromCounts builds a plan with the given per-node placements and no config changes.
func PlanFromCounts(perNode [][]int) *Plan {
	p := &Plan{Ops: make([]OpPlan, len(perNode))}
	for i := range perNode {
		p.Ops[i].PerNode = append([]int(nil), perNode[i]...)
	}
	return p
}

// FreeAfter returns each node's free resources if the plan's placements were applied.
func FreeAfter(c Cluster, p *Pipeline, perNode [][]int) []Resources {
	free := make([]Resources, len(c.Nodes))
	for n := range free {
		free[n] = c.Nodes[n].Cap
	}
	for i := range perNode {
		for n, k := range perNode[i] {
			free[n] = free[n].Sub(p.Ops[i].Need.Scale(k))
		}
	}
	return free
}

// largestFirst orders operator indexes accelerator operators first, then by decreasing CPU
// need, pipeline order among equals.
func largestFirst(need []Resources) []int {
	order := make([]int, len(need))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		na, nb := need[order[a]], need[order[b]]
		if na.Acc != nb.Acc {
			return na.Acc > nb.Acc
		}
		return na.CPU > nb.CPU
	})
	return order
}

// capacities returns a copy of every node's capacity, in node order.
func (c Cluster) capacities() []Resources {
	free := make([]Resources, len(c.Nodes))
	for i := range free {
		free[i] = c.Nodes[i].Cap
	}
	return free
}
