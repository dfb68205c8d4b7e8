package baseline

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/strategy/bo"
	"github.com/trident-sched/trident/strategy/configspace"
)

// SCOOT tunes each accelerator operator's engine configuration offline, one tuning session
// per operator (Cheng et al., SCOOT, WWW'25): Bayesian optimisation over the profiled
// throughput on a sample of the whole dataset, with OOMs as hidden constraints (here
// strategy/bo's constrained method over a peak-memory surrogate, 30 evaluations). The
// tuned configurations are deployed statically with the Static allocation (paper §8.2).
type SCOOT struct {
	// Budget is the number of evaluations per operator (default 30).
	Budget int
	// Seed seeds the optimiser.
	Seed uint64
	// Tuned holds the configurations found (filled by Init).
	Tuned []sim.OpConfig
}

// Name implements sim.Scheduler.
func (s *SCOOT) Name() string { return "scoot" }

// Interval implements sim.Scheduler.
func (s *SCOOT) Interval() float64 { return 3600 }

// Observe implements sim.Scheduler.
func (s *SCOOT) Observe(*sim.Snapshot) {}

// Decide implements sim.Scheduler.
func (s *SCOOT) Decide(context.Context, *sim.Snapshot) (*sim.Plan, error) { return nil, nil }

// Init implements sim.Scheduler: tune offline, then deploy like Static.
func (s *SCOOT) Init(ctx context.Context, env *sim.Env) (*sim.Plan, error) {
	if s.Budget == 0 {
		s.Budget = 30
	}
	p := env.Pipeline
	sample := env.Profiler.Sample(120)
	s.Tuned = make([]sim.OpConfig, len(p.Ops))
	rng := rand.New(rand.NewPCG(s.Seed, 0x53434f4f54))
	for i := range p.Ops {
		op := &p.Ops[i]
		if !op.Tunable() || op.Need.Acc == 0 {
			continue
		}
		cfg, err := TuneOffline(ctx, env, i, sample, s.Budget, rng)
		if err != nil {
			return nil, fmt.Errorf("scoot: %s: %w", op.Name, err)
		}
		s.Tuned[i] = cfg
	}
	return (&Static{Configs: s.Tuned}).Init(ctx, env)
}

// TuneOffline runs constrained BO for operator op against the profiler: the objective is
// the mean saturated throughput over the sample, the constraint the largest peak device
// memory over a 10-minute profiling run of each sampled record type.
func TuneOffline(ctx context.Context, env *sim.Env, op int, sample []sim.Attrs, budget int, rng *rand.Rand) (sim.OpConfig, error) {
	spec := &env.Pipeline.Ops[op]
	limit := env.Cluster.Nodes[0].AccMemGB
	obj := func(_ context.Context, c configspace.Config) (bo.Measurement, error) {
		cfg := sim.ConfigOf(spec.Space, c)
		var thr, peak float64
		for _, a := range sample {
			thr += env.Profiler.Capacity(op, a, cfg) / float64(len(sample))
			pk, oom := env.Profiler.PeakMem(op, a, cfg, 600)
			if oom {
				return bo.Measurement{PeakMem: limit, OOM: true}, nil
			}
			peak = math.Max(peak, pk)
		}
		return bo.Measurement{Throughput: thr, PeakMem: peak}, nil
	}
	res, err := bo.Run(ctx, spec.Space, bo.Options{Method: bo.Constrained, MemLimit: limit, Margin: 2}, rng, obj, budget)
	if err != nil {
		return nil, fmt.Errorf("offline tuning: %w", err)
	}
	return sim.ConfigOf(spec.Space, res.Recommendation.Config), nil
}
