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

	"github.com/trident-sched/trident/strategy/adapt"
	"github.com/trident-sched/trident/strategy/bo"
	"github.com/trident-sched/trident/strategy/configspace"
	"github.com/trident-sched/trident/strategy/kvserve"
	"github.com/trident-sched/trident/strategy/opmodel"
)

// Surface is a tunable operator's response to its configurations: what a tuning run
// measures, and the truth its recommendation is scored against. The project's own model
// (strategy/opmodel, OpmodelSurface) and an independent one (strategy/kvserve,
// KVServeSurface) implement it.
type Surface interface {
	// Space is the configuration space; its default is the configuration a deployment
	// runs (known to fit).
	Space() *configspace.Space
	// DeviceMemGB is the device memory a peak must stay below.
	DeviceMemGB() float64
	// Evaluate runs c for d: the measured throughput, the peak memory (GB), whether the
	// run failed, and what else the engine reported (bo.Measurement).
	Evaluate(c configspace.Config, d time.Duration, rng *rand.Rand) (bo.Measurement, error)
	// TrueRate is the noise-free throughput of c.
	TrueRate(c configspace.Config) (float64, error)
	// OOMProbability is the probability that a run of c for d fails with OOM.
	OOMProbability(c configspace.Config, d time.Duration) (float64, error)
}

// StartFailer is a Surface whose engine can refuse to start (e.g. a KV pool too small for
// one full-length sequence): a failed evaluation that is not a peak above the device
// memory. Its Evaluate reports such a failure (bo.Measurement.StartFailed), which the
// benchmark counts apart; the report shows the split for StartFailer surfaces only.
type StartFailer interface {
	// StartFails reports whether c fails to start.
	StartFails(c configspace.Config) (bool, error)
}

// BOCase is one tunable operator under one workload cluster.
type BOCase struct {
	Name    string
	Surface Surface
}

// opmodelSurface is an opmodel engine under one workload.
type opmodelSurface struct {
	e     opmodel.Engine
	w     opmodel.Workload
	space *configspace.Space
}

// OpmodelSurface returns the project's own response surface (strategy/opmodel) of engine
// e under workload w.
func OpmodelSurface(e opmodel.Engine, w opmodel.Workload) Surface {
	return opmodelSurface{e: e, w: w, space: opmodel.Space()}
}

func (s opmodelSurface) Space() *configspace.Space { return s.space }
func (s opmodelSurface) DeviceMemGB() float64      { return s.e.DeviceMemGB }
func (s opmodelSurface) Evaluate(c configspace.Config, d time.Duration, rng *rand.Rand) (bo.Measurement, error) {
	r, err := s.e.Evaluate(c, s.w, d, rng)
	return bo.Measurement{Throughput: r.Throughput, PeakMem: r.PeakMemGB, OOM: r.OOM}, err
}
func (s opmodelSurface) TrueRate(c configspace.Config) (float64, error) {
	x, err := s.e.Model(c, s.w)
	return x.Throughput, err
}
func (s opmodelSurface) OOMProbability(c configspace.Config, d time.Duration) (float64, error) {
	return s.e.OOMProbability(c, s.w, d)
}

// kvserveSurface is a kvserve model.
type kvserveSurface struct {
	m     kvserve.Model
	space *configspace.Space
}

// KVServeSurface returns the independent response surface of strategy/kvserve (a
// vLLM-style engine with a preallocated paged KV cache and a heavy-tailed peak law),
// written apart from opmodel so that the tuner is measured on data it was not tuned on.
func KVServeSurface(m kvserve.Model) Surface { return kvserveSurface{m: m, space: kvserve.Space()} }

func (s kvserveSurface) Space() *configspace.Space { return s.space }
func (s kvserveSurface) DeviceMemGB() float64      { return s.m.DeviceGB }
func (s kvserveSurface) Evaluate(c configspace.Config, d time.Duration, rng *rand.Rand) (bo.Measurement, error) {
	r, err := s.m.Evaluate(c, d, rng)
	m := bo.Measurement{Throughput: r.Throughput, PeakMem: r.PeakGB, OOM: r.OOM, StartFailed: r.StartFailed}
	if s.m.MaxModelLen > 0 {
		// vLLM's KV cache relative to the one max_model_len sequence it must hold to start
		m.Pool = r.KVTokens / s.m.MaxModelLen
	}
	return m, err
}
func (s kvserveSurface) TrueRate(c configspace.Config) (float64, error) {
	x, err := s.m.Model(c)
	return x.Throughput, err
}
func (s kvserveSurface) OOMProbability(c configspace.Config, d time.Duration) (float64, error) {
	return s.m.OOMProbability(c, d)
}
func (s kvserveSurface) StartFails(c configspace.Config) (bool, error) {
	x, err := s.m.Model(c)
	return x.StartFails, err
}

// DefaultBOCases returns the paper's two tunable operators: TextOCR on academic papers
// (long pages, long transcriptions) and Captioning on long-form videos (10 min).
func DefaultBOCases() []BOCase {
	return []BOCase{
		{Name: "TextOCR (PDF)", Surface: OpmodelSurface(opmodel.TextOCR(), opmodel.DocumentWorkload(1900, 900))},
		{Name: "Captioning (Video)", Surface: OpmodelSurface(opmodel.Captioning(), opmodel.VideoWorkload(600))},
	}
}

// IndependentBOCases returns the two cases of the independent surface (strategy/kvserve):
// a KV-bound 13B chat model on a 40 GB device and a prefill-heavy 8B retrieval-augmented
// model on a 24 GB device, whose peak is set by the longest prompt of the run.
func IndependentBOCases() []BOCase {
	return []BOCase{
		{Name: "Chat-13B (kvserve, A100-40GB)", Surface: KVServeSurface(kvserve.Chat13B())},
		{Name: "RAG-8B (kvserve, L4-24GB)", Surface: KVServeSurface(kvserve.RAG8B())},
	}
}

// Variant is one tuning method with its settings.
type Variant struct {
	// Name labels the variant in tables and RESULT keys.
	Name   string
	Method bo.Method
	// Budget is the number of evaluations (0: BOConfig.Budget).
	Budget int
	// InitPoints is the quasi-random initial design of the BO methods (0:
	// BOConfig.InitPoints).
	InitPoints int
	// WarmStart makes the space's default configuration (the one a deployment runs, known
	// to fit) the first evaluation.
	WarmStart bool
	// MarginGB, PeakK and Delta configure constrained BO (see bo.Options); MarginFrac
	// raises the margin to that fraction of the device memory (adapt.Tuning.Margin).
	MarginGB, MarginFrac, PeakK, Delta float64
	// NoPool hides the engine's reported pool (bo.Measurement.Pool) from the tuner: the
	// constrained BO benchmarked before the pool model.
	NoPool bool
}

// Variant names.
const (
	// VariantTrident is Trident's memory-constrained BO as benchmarked: from the default
	// configuration, sustained-peak allowance and margin.
	VariantTrident = "constrained-bo"
	// VariantTridentNoPool is VariantTrident blind to the engine's reported working pool
	// (bo.Measurement.Pool): a start failure is only a failed evaluation at the memory
	// limit, as before the pool model. It differs only on surfaces that report a pool.
	VariantTridentNoPool = "constrained-bo-no-pool"
	// VariantTridentV0 is the constrained BO the project benchmarked before issue #21:
	// five quasi-random initial points, feasibility judged on the short-run peaks.
	VariantTridentV0 = "constrained-bo-v0"
	// VariantLive is the live tuner's configuration (strategy/adapt.LiveTuning).
	VariantLive = "live-tuner"
	// VariantLiveV0 is the live tuner as it ran before issue #21: 12 evaluations, no
	// margin, feasibility judged on the short-run peaks, δ 0.9.
	VariantLiveV0 = "live-tuner-v0"
	// VariantEIZero is EI that scores an OOM as zero throughput, five initial points.
	VariantEIZero = "ei-oom0"
	// VariantEIZeroWarm is EI with OOM = 0 from the default configuration.
	VariantEIZeroWarm = "ei-oom0-warm"
	// VariantEIDrop is EI that drops OOM trials from its surrogate (the old headline
	// baseline).
	VariantEIDrop = "ei-drop-oom"
	// VariantRandom and VariantGrid are random (Halton) and grid search.
	VariantRandom = "random-search"
	VariantGrid   = "grid-search"
)

// Baselines are the variants Trident's constrained BO is compared with, strongest fair
// baselines first: EI with OOM = 0 (from the quasi-random design and from the default
// configuration), then random and grid search, then EI that drops OOM trials.
var Baselines = []string{VariantEIZero, VariantEIZeroWarm, VariantRandom, VariantGrid, VariantEIDrop}

// BOConfig configures the BO benchmark.
type BOConfig struct {
	// Seeds is the number of independent tuning runs per variant and case.
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
	// MarginGB is the memory safety margin μ of Trident's constrained BO.
	MarginGB float64
	// PeakK is the sustained-peak allowance of Trident's constrained BO (bo.Options.PeakK).
	PeakK float64
	// Delta is the minimum probability of feasibility δ of constrained BO.
	Delta float64
	// Variants lists the variants compared (default: DefaultVariants(cfg)).
	Variants []Variant
}

// DefaultBOConfig returns the configuration of the paper's experiment with 20 seeds.
func DefaultBOConfig() BOConfig {
	return BOConfig{Seeds: 20, FirstSeed: 1, Budget: 30, InitPoints: 5,
		EvalDuration: 2 * time.Minute, SustainedDuration: time.Hour, MarginGB: 1, PeakK: 2, Delta: 0.95}
}

// liveV0Budget is the live tuner's evaluation budget before issue #21.
const liveV0Budget = 12

// miBToGB converts MiB to the GB (1e9 bytes) of opmodel.
const miBToGB = float64(1<<20) / 1e9

// DefaultVariants returns the compared variants: Trident's constrained BO with cfg's
// settings, its pre-#21 form, the live tuner's configuration before and after #21, and the
// baselines.
func DefaultVariants(cfg BOConfig) []Variant {
	live := adapt.LiveTuning()
	return []Variant{
		{Name: VariantTrident, Method: bo.Constrained, InitPoints: 1, WarmStart: true, MarginGB: cfg.MarginGB, PeakK: cfg.PeakK, Delta: cfg.Delta},
		{Name: VariantTridentNoPool, Method: bo.Constrained, InitPoints: 1, WarmStart: true, MarginGB: cfg.MarginGB, PeakK: cfg.PeakK, Delta: cfg.Delta, NoPool: true},
		{Name: VariantTridentV0, Method: bo.Constrained, MarginGB: 3, Delta: 0.9},
		{Name: VariantLive, Method: bo.Constrained, Budget: live.Budget, InitPoints: live.InitPoints, WarmStart: true,
			MarginGB: live.MarginMiB * miBToGB, MarginFrac: live.MarginFrac, PeakK: live.PeakK, Delta: live.Delta},
		{Name: VariantLiveV0, Method: bo.Constrained, Budget: liveV0Budget, InitPoints: live.InitPoints, WarmStart: true, Delta: 0.9},
		{Name: VariantEIZero, Method: bo.UnconstrainedZero},
		{Name: VariantEIZeroWarm, Method: bo.UnconstrainedZero, InitPoints: 1, WarmStart: true},
		{Name: VariantRandom, Method: bo.Random},
		{Name: VariantGrid, Method: bo.Grid},
		{Name: VariantEIDrop, Method: bo.Unconstrained},
	}
}

// MethodOutcome aggregates the runs of one variant on one case.
type MethodOutcome struct {
	Variant Variant
	// BestMeasured is the mean over runs of the best measured throughput without OOM
	// (the nominal best).
	BestMeasured float64
	// RecTrue is the mean noise-free throughput of the recommended configuration.
	RecTrue float64
	// RecSustainedOOM is the mean probability that the recommendation fails with OOM in a
	// sustained run.
	RecSustainedOOM float64
	// RecEffective is the mean of RecTrue·(1 − sustained OOM probability): the
	// recommendation's true rate times its probability of surviving a sustained run.
	RecEffective float64
	// OOMs is the mean number of OOM evaluations per run; OOMTotal their sum over runs.
	OOMs     float64
	OOMTotal int
	// InitOOMTotal counts the OOMs among each run's initial design (its first InitPoints
	// evaluations), summed over runs.
	InitOOMTotal int
	// StartFailTotal counts the failed evaluations among OOMTotal whose engine refused to
	// start (bo.Observation.StartFailed; 0 unless the surface is a StartFailer).
	StartFailTotal int
	// Runs is the number of runs.
	Runs int
}

// CaseOutcome holds every variant's outcome on one case plus references.
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

// Method returns the outcome of the variant named name.
func (c CaseOutcome) Method(name string) (MethodOutcome, bool) {
	for _, o := range c.Methods {
		if o.Variant.Name == name {
			return o, true
		}
	}
	return MethodOutcome{}, false
}

// RunBO runs every variant cfg.Seeds times on every case.
func RunBO(ctx context.Context, cfg BOConfig, cases []BOCase) ([]CaseOutcome, error) {
	variants := cfg.Variants
	if len(variants) == 0 {
		variants = DefaultVariants(cfg)
	}
	var out []CaseOutcome
	for ci, cs := range cases {
		co := CaseOutcome{Case: cs}
		space := cs.Surface.Space()
		def, err := cs.Surface.TrueRate(space.Default())
		if err != nil {
			return nil, fmt.Errorf("adaptbench: %s default: %w", cs.Name, err)
		}
		co.Default = def
		if co.DefaultOOM, err = cs.Surface.OOMProbability(space.Default(), cfg.SustainedDuration); err != nil {
			return nil, fmt.Errorf("adaptbench: %s default: %w", cs.Name, err)
		}
		if co.Oracle, err = oracle(space, cs, cfg.SustainedDuration, rand.New(rand.NewPCG(uint64(ci), 99))); err != nil {
			return nil, err
		}
		for _, v := range variants {
			mo := MethodOutcome{Variant: v}
			init := v.InitPoints
			if init == 0 {
				init = cfg.InitPoints
			}
			for s := range cfg.Seeds {
				seed := cfg.FirstSeed + uint64(s)
				r, err := runOnce(ctx, cfg, space, cs, v, seed)
				if err != nil {
					return nil, fmt.Errorf("adaptbench: %s %s seed %d: %w", cs.Name, v.Name, seed, err)
				}
				mo.BestMeasured += r.BestFeasible.Throughput
				mo.OOMTotal += r.OOMs
				for i, ob := range r.Observations {
					if i < init && ob.OOM {
						mo.InitOOMTotal++
					}
					if ob.StartFailed {
						mo.StartFailTotal++
					}
				}
				if r.Recommendation.Config != nil {
					x, err := cs.Surface.TrueRate(r.Recommendation.Config)
					if err != nil {
						return nil, fmt.Errorf("adaptbench: %s %s seed %d: %w", cs.Name, v.Name, seed, err)
					}
					p, err := cs.Surface.OOMProbability(r.Recommendation.Config, cfg.SustainedDuration)
					if err != nil {
						return nil, fmt.Errorf("adaptbench: %s %s seed %d: %w", cs.Name, v.Name, seed, err)
					}
					mo.RecTrue += x
					mo.RecSustainedOOM += p
					mo.RecEffective += x * (1 - p)
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

// runOnce tunes case cs with variant v and seed. The random streams depend on the method,
// not the variant's name, so variants of one method see the same measurement noise.
func runOnce(ctx context.Context, cfg BOConfig, space *configspace.Space, cs BOCase, v Variant, seed uint64) (bo.Result, error) {
	m := v.Method
	optRng := rand.New(rand.NewPCG(seed, uint64(m)+1))
	envRng := rand.New(rand.NewPCG(seed, 1000+uint64(m)))
	opts := bo.Options{Method: m, InitPoints: v.InitPoints, MemLimit: cs.Surface.DeviceMemGB(),
		Margin: adapt.Tuning{MarginMiB: v.MarginGB, MarginFrac: v.MarginFrac}.Margin(cs.Surface.DeviceMemGB()), PeakK: v.PeakK, Delta: v.Delta}
	if opts.InitPoints == 0 {
		opts.InitPoints = cfg.InitPoints
	}
	if v.WarmStart {
		opts.Initial = []configspace.Config{space.Default()}
	}
	budget := v.Budget
	if budget == 0 {
		budget = cfg.Budget
	}
	obj := func(ctx context.Context, c configspace.Config) (bo.Measurement, error) {
		r, err := cs.Surface.Evaluate(c, cfg.EvalDuration, envRng)
		if v.NoPool {
			r.Pool = 0
		}
		return r, err
	}
	return bo.Run(ctx, space, opts, optRng, obj, budget)
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
		x, err := cs.Surface.TrueRate(c)
		if err != nil {
			return 0, err
		}
		p, err := cs.Surface.OOMProbability(c, sustained)
		if err != nil {
			return 0, err
		}
		if p < 0.01 {
			best = math.Max(best, x)
		}
	}
	return best, nil
}
