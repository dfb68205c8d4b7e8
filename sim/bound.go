package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// FluidBound is an upper bound on the throughput any scheduler reaches on a pipeline and
// cluster whose accelerator operators are the bottleneck: the accelerators are split as a
// fluid between the accelerator operators anew for every workload regime, every operator
// runs the best memory-safe configuration for the regime, and transitions, cold starts,
// exploration and CPU or network limits cost nothing.
//
// It comes in two forms. The admission-limited one (DefaultRecPerS, TunedRecPerS) lets
// every async instance run its admission limit of requests, as if its input queue were
// unbounded. The queue-limited one (Queue*) runs an instance the way the engine does: an
// operator's bounded input queue also holds the requests its instances have in flight, so
// n instances run min(admission limit, QueueCap/n) each, and adding instances to an
// operator shrinks every instance's batch. Only the queue-limited form bounds the
// simulator; the gap between the two is what the queue bounds cost.
type FluidBound struct {
	// DefaultRecPerS is the admission-limited bound with default configurations
	// (reallocation only).
	DefaultRecPerS float64
	// TunedRecPerS is the admission-limited bound with each regime's best configuration.
	TunedRecPerS float64
	// StaticDefaultRecPerS is the best fixed integer split of the accelerators with
	// default configurations (admission-limited), the allocation a tuned-once Static
	// deployment approaches.
	StaticDefaultRecPerS float64
	// QueueDefaultRecPerS is the queue-limited bound with default configurations.
	QueueDefaultRecPerS float64
	// QueueTunedRecPerS is the queue-limited bound with the best memory-safe configuration
	// per regime and instance count.
	QueueTunedRecPerS float64
}

// queueScreen is how many of a regime's sampled records rank the configurations for one
// instance count in the queue-limited search; the best queueFinalists of them that are
// memory-safe on all the records decide. boundBisections halves the throughput interval
// of a regime's split that often.
const (
	queueScreen     = 30
	queueFinalists  = 4
	boundBisections = 60
)

// ComputeFluidBound evaluates FluidBound on samples records per regime, searching
// searches random configurations per operator and regime; a configuration counts as
// memory-safe when its mean peak plus two standard deviations stays below the device
// memory on every sampled record.
func ComputeFluidBound(p *Pipeline, c Cluster, samples, searches int, seed uint64) (FluidBound, error) {
	if samples <= 0 || searches <= 0 {
		return FluidBound{}, fmt.Errorf("fluid bound: samples %d and searches %d must be positive", samples, searches)
	}
	rng := rand.New(rand.NewPCG(seed, 0xb0))
	var acc []int
	for i := range p.Ops {
		if p.Ops[i].Need.Acc > 0 {
			acc = append(acc, i)
		}
	}
	if len(acc) == 0 {
		return FluidBound{}, errors.New("fluid bound: the pipeline has no accelerator operator")
	}
	devices, limit := 0.0, math.Inf(1)
	for _, n := range c.Nodes {
		devices += float64(n.Cap.Acc)
		limit = math.Min(limit, n.AccMemGB)
	}
	// def[r][k], best[r][k]: accelerator-seconds per source record of regime r on
	// accelerator operator k (admission-limited). qdef[r][k], qbest[r][k]: source records/s
	// of n = 0, 1, ... instances of k (queue-limited).
	def := make([][]float64, len(p.Regimes))
	best := make([][]float64, len(p.Regimes))
	qdef := make([][][]float64, len(p.Regimes))
	qbest := make([][][]float64, len(p.Regimes))
	total := 0.0
	for r, reg := range p.Regimes {
		total += reg.Records
		recs := make([]Attrs, samples)
		amps := make([][]float64, samples)
		for j := range recs {
			recs[j] = reg.Sample(rng)
			amps[j] = p.CumAmp(recs[j])
		}
		def[r] = make([]float64, len(acc))
		best[r] = make([]float64, len(acc))
		qdef[r] = make([][]float64, len(acc))
		qbest[r] = make([][]float64, len(acc))
		for k, i := range acc {
			spec := &p.Ops[i]
			cands := []OpConfig{DefaultConfig(spec.Space)}
			if spec.Tunable() {
				u := make([]float64, spec.Space.Dim())
				for range searches {
					for j := range u {
						u[j] = rng.Float64()
					}
					cfg, err := ConfigFromUnit(spec.Space, u)
					if err != nil {
						return FluidBound{}, fmt.Errorf("fluid bound: %q: %w", spec.Name, err)
					}
					cands = append(cands, cfg)
				}
			}
			ev := boundEval{spec: spec, i: i, recs: recs, amps: amps, limit: limit}
			var ok bool
			if def[r][k], ok = ev.cost(cands[0], spec.inFlightLimit(cands[0]), len(recs)); !ok && spec.Tunable() {
				def[r][k] = math.Inf(1)
			}
			best[r][k] = def[r][k]
			for _, cfg := range cands[1:] {
				if v, ok := ev.cost(cfg, spec.inFlightLimit(cfg), len(recs)); ok && v < best[r][k] {
					best[r][k] = v
				}
			}
			if math.IsInf(best[r][k], 1) {
				return FluidBound{}, fmt.Errorf("fluid bound: no memory-safe configuration of %q for regime %q", spec.Name, reg.Name)
			}
			maxN := int(devices) / spec.Need.Acc
			qdef[r][k] = ev.queueCurve(cands[:1], maxN)
			// The screening may drop the default configuration from the finalists.
			qbest[r][k] = ev.queueCurve(cands, maxN)
			for n, v := range qdef[r][k] {
				qbest[r][k][n] = math.Max(qbest[r][k][n], v)
			}
		}
	}
	fluid := func(d [][]float64) float64 {
		sec := 0.0
		for r, reg := range p.Regimes {
			sum := 0.0
			for _, v := range d[r] {
				sum += v
			}
			sec += reg.Records * sum / devices
		}
		return total / sec
	}
	out := FluidBound{DefaultRecPerS: fluid(def), TunedRecPerS: fluid(best)}
	need := p.accNeeds(acc)
	queueFluid := func(q [][][]float64) float64 {
		sec := 0.0
		for r, reg := range p.Regimes {
			sec += reg.Records / splitCurves(q[r], need, devices)
		}
		return total / sec
	}
	out.QueueDefaultRecPerS, out.QueueTunedRecPerS = queueFluid(qdef), queueFluid(qbest)
	// Best fixed split (whole instances) with default configurations.
	bestSec := math.Inf(1)
	split := make([]float64, len(acc))
	var search func(k int, left float64)
	search = func(k int, left float64) {
		if k == len(acc)-1 {
			split[k] = left
			sec := 0.0
			for r, reg := range p.Regimes {
				m := 0.0
				for j := range acc {
					m = math.Max(m, def[r][j]/split[j])
				}
				sec += reg.Records * m
			}
			bestSec = math.Min(bestSec, sec)
			return
		}
		step := float64(p.Ops[acc[k]].Need.Acc)
		for n := step; n <= left-float64(len(acc)-1-k); n += step {
			split[k] = n
			search(k+1, left-n)
		}
	}
	search(0, devices)
	out.StaticDefaultRecPerS = total / bestSec
	return out, nil
}

// accNeeds returns the accelerators one instance of each operator in idx needs.
func (p *Pipeline) accNeeds(idx []int) []float64 {
	out := make([]float64, len(idx))
	for k, i := range idx {
		out[k] = float64(p.Ops[i].Need.Acc)
	}
	return out
}

// boundEval evaluates configurations of accelerator operator i on a regime's sampled
// records (amps holds each record's cumulative amplification up to every operator).
type boundEval struct {
	spec  *OpSpec
	i     int
	recs  []Attrs
	amps  [][]float64
	limit float64 // device memory, GB
}

// cost returns the accelerator-seconds per source record of one instance of cfg running c
// requests in flight, over the first n sampled records, and whether cfg is memory-safe
// (mean peak plus two standard deviations below the device memory) on each of them.
func (e *boundEval) cost(cfg OpConfig, c float64, n int) (float64, bool) {
	s := 0.0
	for j, a := range e.recs[:n] {
		mean, sd := e.spec.Model.PeakMem(a, cfg, c)
		if mean+2*sd >= e.limit {
			return 0, false
		}
		s += float64(e.spec.Need.Acc) * e.amps[j][e.i] / e.spec.Model.Rate(a, cfg, c)
	}
	return s / float64(n), true
}

// queueCurve returns the source records/s that n = 0..maxN instances sustain on the best
// memory-safe configuration of cands when each runs what the engine lets it run with the
// operator's queue full (inFlightPer), made nondecreasing (surplus instances can idle).
// The configurations are ranked per n on the first queueScreen records and evaluated on
// all of them in that order until queueFinalists are memory-safe.
func (e *boundEval) queueCurve(cands []OpConfig, maxN int) []float64 {
	screen := min(queueScreen, len(e.recs))
	curve := make([]float64, maxN+1)
	type scored struct {
		cfg      OpConfig
		inFlight float64 // per instance, as the engine runs n of them
		cost     float64
	}
	var ranked []scored
	for n := 1; n <= maxN; n++ {
		ranked = ranked[:0]
		for _, cfg := range cands {
			c := inFlightPer(e.spec, cfg, e.spec.QueueCap, n)
			if v, ok := e.cost(cfg, c, screen); ok {
				ranked = append(ranked, scored{cfg, c, v})
			}
		}
		slices.SortFunc(ranked, func(a, b scored) int { return cmp.Compare(a.cost, b.cost) })
		// The fastest configurations sit at the memory limit, so many that pass the
		// screening records fail on the rest: walk down the ranking until queueFinalists
		// are safe on every record.
		safe := 0
		for _, s := range ranked {
			if safe == queueFinalists {
				break
			}
			if v, ok := e.cost(s.cfg, s.inFlight, len(e.recs)); ok {
				safe++
				// v is accelerator-seconds per source record of one instance.
				curve[n] = math.Max(curve[n], float64(n)*float64(e.spec.Need.Acc)/v)
			}
		}
		curve[n] = math.Max(curve[n], curve[n-1])
	}
	return curve
}

// concaveHull returns the upper concave hull of the points (n, curve[n]) evaluated at
// every whole n.
func concaveHull(curve []float64) []float64 {
	var idx []int // hull vertices
	for n := range curve {
		for len(idx) >= 2 {
			a, b := idx[len(idx)-2], idx[len(idx)-1]
			// drop b when it lies on or below the segment from a to n
			if (curve[b]-curve[a])*float64(n-a) <= (curve[n]-curve[a])*float64(b-a) {
				idx = idx[:len(idx)-1]
				continue
			}
			break
		}
		idx = append(idx, n)
	}
	out := make([]float64, len(curve))
	for j := 0; j+1 < len(idx); j++ {
		a, b := idx[j], idx[j+1]
		for n := a; n <= b; n++ {
			out[n] = curve[a] + (curve[b]-curve[a])*float64(n-a)/float64(b-a)
		}
	}
	if len(idx) == 1 {
		out[idx[0]] = curve[idx[0]]
	}
	return out
}

// splitCurves returns the highest throughput T at which the operators' instance curves
// (curves[k][n]: records/s of n instances) all reach T with at most devices accelerators,
// one instance of operator k taking need[k] of them. Between whole instances a curve is
// its upper concave hull: time-sharing between any two allocations reaches every point
// on the segment joining them.
func splitCurves(curves [][]float64, need []float64, devices float64) float64 {
	hulls := make([][]float64, len(curves))
	for k, c := range curves {
		hulls[k] = concaveHull(c)
	}
	curves = hulls
	// instances returns the fractional instance count at which curve reaches t (+Inf if
	// it never does).
	instances := func(curve []float64, t float64) float64 {
		for n := 1; n < len(curve); n++ {
			if curve[n] >= t {
				if curve[n] == curve[n-1] {
					return float64(n - 1)
				}
				return float64(n-1) + (t-curve[n-1])/(curve[n]-curve[n-1])
			}
		}
		return math.Inf(1)
	}
	lo, hi := 0.0, math.Inf(1)
	for _, c := range curves {
		hi = math.Min(hi, c[len(c)-1])
	}
	for range boundBisections {
		t := (lo + hi) / 2
		used := 0.0
		for k, c := range curves {
			used += need[k] * instances(c, t)
		}
		if used <= devices {
			lo = t
		} else {
			hi = t
		}
	}
	return lo
}
