// Package adaptbench holds the adaptation-layer benchmarks behind `trident bench adapt`:
// memory-constrained BO against its baselines on the simulated tunable operators (paper
// Tables 5 and 6), and online clustering against offline K-means/DBSCAN on regime-shift
// streams (paper Table 4).
package adaptbench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/trident-sched/trident/strategy/bo"
	"github.com/trident-sched/trident/strategy/configspace"
	"github.com/trident-sched/trident/strategy/opmodel"
)

// BOCase is one tunable operator under one workload cluster.
type BOCase struct {
	Name     string
	Engine   opmodel.Engine
	Workload opmodel.Workload
}

// DefaultBOCases returns the paper's two tunable operators: TextOCR on academic papers
// (long pages, long transcriptions) and Captioning on long-form videos (10 min).
func DefaultBOCases() []BOCase {
	return []BOCase{
		{Name: "TextOCR (PDF)", Engine: opmodel.TextOCR(), Workload: opmodel.DocumentWorkload(1900, 900)},
		{Name: "Captioning (Video)", Engine: opmodel.Captioning(), Workload: opmodel.VideoWorkload(600)},
	}
}

// BOConfig configures the BO benchmark.
type BOConfig struct {
	// Seeds is the number of independent tuning runs per method and case.
	Seeds int
	// FirstSeed is the seed of the first run; run i uses FirstSeed+i.
	FirstSeed uint64
	// Budget is the number of evaluations per run (paper: 30).
	Budget int
	// InitPoints is the initial design size of the BO methods (paper: 5).
	InitPoints int
	// EvalDuration is the length of one tuning evaluation.
	EvalDuration time.Duration
	// SustainedDuration is the run length over which a recommendation's OOM risk is judged.
	SustainedDuration time.Duration
	// MarginGB is the memory safety margin μ of constrained BO.
	MarginGB float64
	// Delta is the minimum probability of feasibility δ of constrained BO.
	Delta float64
	// Methods lists the methods compared (default: all four).
	Methods []bo.Method
}

// DefaultBOConfig returns the configuration of the paper's experiment with 20 seeds.
func DefaultBOConfig() BOConfig {
	return BOConfig{Seeds: 20, FirstSeed: 1, Budget: 30, InitPoints: 5,
		EvalDuration: 2 * time.Minute, SustainedDuration: time.Hour, MarginGB: 3, Delta: 0.9,
		Methods: []bo.Method{bo.Constrained, bo.Unconstrained, bo.UnconstrainedZero, bo.Random, bo.Grid}}
}

// MethodOutcome aggregates the runs of one method on one case.
type MethodOutcome struct {
	Method bo.Method
	// BestMeasured is the mean over runs of the best measured throughput without OOM
	// (the nominal best).
	BestMeasured float64
	// RecTrue is the mean noise-free throughput of the recommended configuration.
	RecTrue float64
	// RecSustainedOOM is the mean probability that the recommendation fails with OOM in a
	// sustained run.
	RecSustainedOOM float64
	// RecEffective is the mean of RecTrue·(1 − sustained OOM probability).
	RecEffective float64
	// OOMs is the mean number of OOM evaluations per run; OOMTotal their sum over runs.
	OOMs     float64
	OOMTotal int
	// InitOOMTotal counts the OOMs among each run's first InitPoints evaluations (the
	// quasi-random initial design of the BO methods), summed over runs.
	InitOOMTotal int
	// Runs is the number of runs.
	Runs int
}

// CaseOutcome holds every method's outcome on one case plus references.
type CaseOutcome struct {
	Case BOCase
	// Default is the noise-free throughput of the space's default configuration and
	// DefaultOOM its sustained OOM probability.
	Default, DefaultOOM float64
	// Oracle is the best noise-free throughput with sustained OOM probability below 1%
	// found by dense random sampling of the space (the OOM-free oracle).
	Oracle  float64
	Methods []MethodOutcome
}

// Method returns the outcome of method m.
func (c CaseOutcome) Method(m bo.Method) (MethodOutcome, bool) {
	for _, o := range c.Methods {
		if o.Method == m {
			return o, true
		}
	}
	return MethodOutcome{}, false
}

// RunBO runs every method cfg.Seeds times on every case.
func RunBO(ctx context.Context, cfg BOConfig, cases []BOCase) ([]CaseOutcome, error) {
	space := opmodel.Space()
	var out []CaseOutcome
	for ci, cs := range cases {
		co := CaseOutcome{Case: cs}
		def, err := cs.Engine.Model(space.Default(), cs.Workload)
		if err != nil {
			return nil, fmt.Errorf("adaptbench: %s default: %w", cs.Name, err)
		}
		co.Default = def.Throughput
		if co.DefaultOOM, err = cs.Engine.OOMProbability(space.Default(), cs.Workload, cfg.SustainedDuration); err != nil {
			return nil, err
		}
		if co.Oracle, err = oracle(space, cs, cfg.SustainedDuration, rand.New(rand.NewPCG(uint64(ci), 99))); err != nil {
			return nil, err
		}
		for _, m := range cfg.Methods {
			mo := MethodOutcome{Method: m}
			for s := range cfg.Seeds {
				seed := cfg.FirstSeed + uint64(s)
				r, err := runOnce(ctx, cfg, space, cs, m, seed)
				if err != nil {
					return nil, fmt.Errorf("adaptbench: %s %s seed %d: %w", cs.Name, m, seed, err)
				}
				mo.BestMeasured += r.BestFeasible.Throughput
				mo.OOMTotal += r.OOMs
				for i, ob := range r.Observations {
					if i < cfg.InitPoints && ob.OOM {
						mo.InitOOMTotal++
					}
				}
				if r.Recommendation.Config != nil {
					x, err := cs.Engine.Model(r.Recommendation.Config, cs.Workload)
					if err != nil {
						return nil, err
					}
					p, err := cs.Engine.OOMProbability(r.Recommendation.Config, cs.Workload, cfg.SustainedDuration)
					if err != nil {
						return nil, err
					}
					mo.RecTrue += x.Throughput
					mo.RecSustainedOOM += p
					mo.RecEffective += x.Throughput * (1 - p)
				}
				mo.Runs++
			}
			n := float64(mo.Runs)
			mo.BestMeasured /= n
			mo.RecTrue /= n
			mo.RecSustainedOOM /= n
			mo.RecEffective /= n
			mo.OOMs = float64(mo.OOMTotal) / n
			co.Methods = append(co.Methods, mo)
		}
		out = append(out, co)
	}
	return out, nil
}

// runOnce tunes case cs with method m and seed.
func runOnce(ctx context.Context, cfg BOConfig, space *configspace.Space, cs BOCase, m bo.Method, seed uint64) (bo.Result, error) {
	optRng := rand.New(rand.NewPCG(seed, uint64(m)+1))
	envRng := rand.New(rand.NewPCG(seed, 1000+uint64(m)))
	opts := bo.Options{Method: m, InitPoints: cfg.InitPoints, MemLimit: cs.Engine.DeviceMemGB,
		Margin: cfg.MarginGB, Delta: cfg.Delta}
	obj := func(ctx context.Context, c configspace.Config) (float64, float64, bool, error) {
		r, err := cs.Engine.Evaluate(c, cs.Workload, cfg.EvalDuration, envRng)
		return r.Throughput, r.PeakMemGB, r.OOM, err
	}
	return bo.Run(ctx, space, opts, optRng, obj, cfg.Budget)
}

// oracle returns the best noise-free throughput among 20000 random configurations whose
// sustained OOM probability is below 1%.
func oracle(space *configspace.Space, cs BOCase, sustained time.Duration, rng *rand.Rand) (float64, error) {
	best := 0.0
	u := make([]float64, space.Dim())
	for range 20000 {
		for i := range u {
			u[i] = rng.Float64()
		}
		c, err := space.Decode(u)
		if err != nil {
			return 0, err
		}
		if !space.Satisfies(c) {
			continue
		}
		x, err := cs.Engine.Model(c, cs.Workload)
		if err != nil {
			return 0, err
		}
		p, err := cs.Engine.OOMProbability(c, cs.Workload, sustained)
		if err != nil {
			return 0, err
		}
		if p < 0.01 {
			best = math.Max(best, x.Throughput)
		}
	}
	return best, nil
}
