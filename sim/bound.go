package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// FluidBound is an upper bound on the throughput any scheduler reaches on a pipeline and
// cluster whose accelerator operators are the bottleneck: the accelerators are split as a
// fluid between the accelerator operators anew for every workload regime, every operator
// runs the best memory-safe configuration for the regime, and transitions, cold starts,
// queues, exploration and CPU or network limits cost nothing.
type FluidBound struct {
	// DefaultRecPerS is the bound with default configurations (reallocation only).
	DefaultRecPerS float64
	// TunedRecPerS is the bound with each regime's best configuration.
	TunedRecPerS float64
	// StaticDefaultRecPerS is the best fixed integer split of the accelerators with
	// default configurations, the allocation a tuned-once Static deployment approaches.
	StaticDefaultRecPerS float64
}

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
	// accelerator operator k.
	def := make([][]float64, len(p.Regimes))
	best := make([][]float64, len(p.Regimes))
	total := 0.0
	for r, reg := range p.Regimes {
		total += reg.Records
		recs := make([]Attrs, samples)
		for j := range recs {
			recs[j] = reg.Sample(rng)
		}
		def[r] = make([]float64, len(acc))
		best[r] = make([]float64, len(acc))
		for k, i := range acc {
			spec := &p.Ops[i]
			cost := func(cfg OpConfig) (float64, bool) {
				s := 0.0
				for _, a := range recs {
					mean, sd := spec.Model.PeakMem(a, cfg, spec.inFlightLimit(cfg))
					if mean+2*sd >= limit {
						return 0, false
					}
					s += float64(spec.Need.Acc) * p.CumAmp(a)[i] / spec.Model.Rate(a, cfg, spec.inFlightLimit(cfg))
				}
				return s / float64(len(recs)), true
			}
			var ok bool
			if def[r][k], ok = cost(spec.Space.Default()); !ok && spec.Tunable() {
				def[r][k] = math.Inf(1)
			}
			best[r][k] = def[r][k]
			if !spec.Tunable() {
				continue
			}
			u := make([]float64, len(spec.Space))
			for range searches {
				for j := range u {
					u[j] = rng.Float64()
				}
				if v, ok := cost(spec.Space.FromUnit(u)); ok && v < best[r][k] {
					best[r][k] = v
				}
			}
			if math.IsInf(best[r][k], 1) {
				return FluidBound{}, fmt.Errorf("fluid bound: no memory-safe configuration of %q for regime %q", spec.Name, reg.Name)
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
