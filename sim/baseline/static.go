package baseline

import (
	"context"
	"errors"
	"math"

	"github.com/trident-sched/trident/sim"
)

// Static is a manually tuned fixed allocation (paper §8.2): the operators are profiled
// once on a sample of the whole dataset with their default configurations and parallelism
// is chosen to minimise the profiled end-to-end processing time of the dataset (so no
// document type is starved). The instances are placed by the cluster scheduler's default
// policy (Ray's hybrid pack-then-spread), or, with Striped, evenly over the nodes so that
// every node runs a slice of the whole pipeline. Nothing changes at run time.
type Static struct {
	// Configs overrides the configuration of tunable operators (nil: defaults). SCOOT
	// uses it to deploy its offline-tuned configurations with the same allocation.
	Configs []sim.OpConfig
	// AllocConfigs, if set, are the configurations the allocation is tuned for (defaults
	// when nil). SCOOT keeps the Static allocation, so it leaves this nil.
	AllocConfigs []sim.OpConfig
	// Samples is the profiling sample size (default 240).
	Samples int
	// Striped places every operator evenly over the nodes instead of leaving placement to
	// the cluster scheduler.
	Striped bool
	// Label overrides Name.
	Label string
	// Pilot profiles a pilot run on the start of the input (its first workload regime)
	// instead of a sample of the whole dataset.
	Pilot bool
}

// Name implements sim.Scheduler.
func (s *Static) Name() string {
	if s.Label != "" {
		return s.Label
	}
	return "static"
}

// Interval implements sim.Scheduler: Static never decides, the value only paces calls.
func (s *Static) Interval() float64 { return 3600 }

// Observe implements sim.Scheduler.
func (s *Static) Observe(*sim.Snapshot) {}

// Decide implements sim.Scheduler.
func (s *Static) Decide(context.Context, *sim.Snapshot) (*sim.Plan, error) { return nil, nil }

// Init implements sim.Scheduler.
func (s *Static) Init(_ context.Context, env *sim.Env) (*sim.Plan, error) {
	per, err := tunedAllocation(env, s.AllocConfigs, s.Samples, s.Pilot)
	if err != nil {
		return nil, err
	}
	if !s.Striped {
		per = placeOrFallback(env, per, sim.Hybrid)
	}
	p := sim.PlanFromCounts(per)
	for i := range p.Ops {
		if s.Configs != nil && s.Configs[i] != nil {
			p.Ops[i].Config = s.Configs[i]
			p.Ops[i].Transition = sim.TransitionAll
		}
	}
	return p, nil
}

// placeOrFallback re-places a striped placement with a cluster scheduler policy; when
// fragmentation strands an instance, it falls back to spreading, then to the striped one.
func placeOrFallback(env *sim.Env, striped [][]int, pol sim.PlacePolicy) [][]int {
	n := countsOf(striped)
	if per := sim.PlaceDefault(env.Cluster, needs(env), n, pol); per != nil {
		return per
	}
	if per := sim.PlaceDefault(env.Cluster, needs(env), n, sim.Spread); per != nil {
		return per
	}
	return striped
}

func countsOf(per [][]int) []int {
	n := make([]int, len(per))
	for i := range per {
		n[i] = sumInts(per[i])
	}
	return n
}

// TunedAllocation profiles every operator on an ordered sample of the dataset under
// configs (nil entries: defaults), splits the sample into consecutive chunks and searches
// the instance counts that minimise the summed chunk processing time, starting from the
// allocation balanced for the average demand. It returns the striped placement.
func TunedAllocation(env *sim.Env, configs []sim.OpConfig, samples int) ([][]int, error) {
	return tunedAllocation(env, configs, samples, false)
}

func tunedAllocation(env *sim.Env, configs []sim.OpConfig, samples int, pilot bool) ([][]int, error) {
	p, c := env.Pipeline, env.Cluster
	if samples <= 0 {
		samples = 240
	}
	recs := env.Profiler.Sample(samples)
	if pilot {
		recs = env.Profiler.SamplePilot(samples)
	}
	const chunks = 12
	per := (len(recs) + chunks - 1) / chunks
	var demand [][]float64
	avg := make([]float64, len(p.Ops))
	for k := 0; k < len(recs); k += per {
		d := make([]float64, len(p.Ops))
		end := min(k+per, len(recs))
		for _, a := range recs[k:end] {
			dd := sim.Demand(p, a, func(op int, a sim.Attrs) float64 {
				var cfg sim.OpConfig
				if configs != nil {
					cfg = configs[op]
				}
				return env.Profiler.Capacity(op, a, cfg)
			})
			for i := range d {
				d[i] += dd[i] / float64(end-k)
				avg[i] += dd[i] / float64(len(recs))
			}
		}
		demand = append(demand, d)
	}
	n := sim.Balance(c, p, avg)
	need := make([]sim.Resources, len(p.Ops))
	for i := range need {
		need[i] = p.Ops[i].Need
	}
	cost := func(n []int) float64 {
		var t float64
		for _, d := range demand {
			rate := math.Inf(1)
			for i := range d {
				rate = math.Min(rate, float64(n[i])/d[i])
			}
			t += 1 / rate
		}
		return t
	}
	fits := func(n []int) bool {
		var used sim.Resources
		for i, k := range n {
			used = used.Add(need[i].Scale(k))
		}
		return c.Total().Fits(used) && sim.PlaceStriped(c, need, n) != nil
	}
	best := cost(n)
	// Local search: move one instance between operators of the same device kind, or add one.
	for iter := 0; iter < 4000; iter++ {
		improved := false
		for i := range n {
			for j := range n {
				if i == j || n[j] <= 1 || (need[i].Acc > 0) != (need[j].Acc > 0) {
					continue
				}
				n[i]++
				n[j]--
				if v := cost(n); v < best-1e-12 && fits(n) {
					best, improved = v, true
					continue
				}
				n[i]--
				n[j]++
			}
			n[i]++
			if v := cost(n); v < best-1e-12 && fits(n) {
				best, improved = v, true
				continue
			}
			n[i]--
		}
		if !improved {
			break
		}
	}
	// Single moves can stall where several accelerator operators bind at once: try every
	// split of the accelerators among up to three accelerator operators.
	var accOps []int
	accTotal := 0
	for i := range n {
		if need[i].Acc > 0 {
			accOps = append(accOps, i)
			accTotal += n[i] * need[i].Acc
		}
	}
	if len(accOps) == 3 && need[accOps[0]].Acc == 1 && need[accOps[1]].Acc == 1 && need[accOps[2]].Acc == 1 {
		alt := append([]int(nil), n...)
		for a := 1; a < accTotal-1; a++ {
			for b := 1; a+b < accTotal; b++ {
				alt[accOps[0]], alt[accOps[1]], alt[accOps[2]] = a, b, accTotal-a-b
				if v := cost(alt); v < best-1e-12 && fits(alt) {
					best = v
					copy(n, alt)
				}
			}
		}
	}
	placed := sim.PlaceStriped(c, need, n)
	if placed == nil {
		return nil, errors.New("static: tuned allocation does not fit the cluster")
	}
	return placed, nil
}
