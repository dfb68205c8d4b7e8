// Package bo implements the memory-constrained Bayesian optimisation of operator
// configurations (Trident paper §5.3) and the baselines it is compared with.
//
// Constrained BO keeps two surrogates on the unit cube of a configspace.Space: one of
// sustained throughput, fitted to feasible (non-OOM) evaluations, and one of log peak device
// memory, fitted to every evaluation. An OOM evaluation's peak is censored (only known to
// exceed the device limit): it is imputed as the larger of MemLimit·(1+OOMPenalty) and the
// prediction of a memory surrogate fitted to the feasible evaluations.
// The next configuration maximises EI(x)·PF(x), where PF(x) = Φ((log(M − μ) − m(x) −
// k·σ_n)/s(x)) is the probability that the sustained peak memory stays below the device
// memory M less the margin μ (m, s: the memory surrogate's mean and standard deviation of
// log peak memory; σ_n its noise deviation, the scatter of short-run peaks, and k =
// PeakK the allowance for a sustained run peaking above every short one), among
// candidates with PF(x) ≥ δ. After the budget, the recommendation is the evaluated feasible
// configuration with the best predicted throughput among those with PF ≥ δ.
//
// An engine that sizes a working pool at start-up and refuses to start when it falls
// short (vLLM's KV cache, which must hold one max_model_len sequence) fails at low memory
// use, where the memory surrogate sees no risk. Once an evaluation reports its pool
// relative to that need (Measurement.Pool), constrained BO keeps a third surrogate, of the
// pool, fitted to every reported pool (a start failure that reported none counts as an
// empty pool), and PF(x) also requires P(pool(x) ≥ 1). A start failure whose pool fell
// short leaves the memory surrogate (it measured no peak); one that reported a pool of at
// least 1 failed for another reason and stays there, at the limit, as an OOM does.
//
// Unconstrained BO uses plain EI on one throughput surrogate; OOM evaluations are failed
// trials left out of the surrogate (variant UnconstrainedZero records them as throughput 0). Random search walks a randomly
// shifted Halton sequence; grid search evaluates points of a grid in random order.
//
// The optimiser has an ask/tell API (Suggest, Observe) for the online loop and Run for
// benchmarks.
package bo

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/trident-sched/trident/strategy/configspace"
)

// ErrNoEvaluation is returned by Predict before the first evaluation is observed.
var ErrNoEvaluation = errors.New("bo: predict: no evaluation yet")

// Method selects the search strategy.
type Method int

// Search strategies.
const (
	// Constrained is memory-constrained BO (EI × probability of feasibility).
	Constrained Method = iota
	// Unconstrained is BO with plain expected improvement, blind to memory: an OOM
	// evaluation is a failed trial and is left out of the throughput surrogate (the usual
	// handling of crashed trials, e.g. Optuna's samplers skip failed trials).
	Unconstrained
	// UnconstrainedZero is plain-EI BO that records an OOM evaluation as throughput 0
	// (its sustained throughput), so the surrogate learns a cliff at the memory limit.
	UnconstrainedZero
	// Random is quasi-random search along a randomly shifted Halton sequence.
	Random
	// Grid is grid search: grid points in random order.
	Grid
)

// String names the method.
func (m Method) String() string {
	switch m {
	case Constrained:
		return "constrained-bo"
	case Unconstrained:
		return "unconstrained-bo"
	case UnconstrainedZero:
		return "unconstrained-bo-oom0"
	case Random:
		return "random-search"
	case Grid:
		return "grid-search"
	}
	return fmt.Sprintf("Method(%d)", int(m))
}

// Options configures an Optimizer.
type Options struct {
	// Method is the search strategy (default Constrained).
	Method Method
	// InitPoints is the size of the quasi-random initial design of the BO methods
	// (default 5).
	InitPoints int
	// MemLimit is the device memory M available to the operator instance (required for
	// Constrained), in the unit of the observed peak memory.
	MemLimit float64
	// Margin is the safety margin μ subtracted from MemLimit.
	Margin float64
	// PeakK models the sustained peak (constrained BO): a tuning evaluation is short, and a
	// configuration's peak over a sustained run lies above its short-run peaks, as the
	// largest of many of them. The sustained log peak is taken as the memory surrogate's
	// mean plus PeakK standard deviations of its observation noise (the scatter of
	// short-run peaks at one configuration), so P(feasible) = Φ((log(M − μ) − m(x) −
	// PeakK·σ_n)/s(x)). 0 judges feasibility on the short-run peaks themselves; ≈2 is the
	// expected largest of 30 short runs (an hour of 2-minute evaluations).
	PeakK float64
	// PeakNoiseFloor floors σ_n of PeakK, in log units (default 0.015: short-run peaks
	// scatter by at least 1.5 %, allocator fragmentation and caching plus the KV cache's
	// fluctuation, of which a short run sees the largest of only a few draws). With
	// PeakK > 0 it also floors the memory surrogate's fitted noise: with a few evaluations
	// the surrogate otherwise fits almost no noise, takes each short-run peak as exact,
	// and a peak that happened to read low (by 2–3 % at 2 σ) passes as safe; the
	// allowance would vanish too.
	PeakNoiseFloor float64
	// Delta is the minimum probability of feasibility δ of a suggestion and of the
	// recommendation (default 0.9, the value benchmarked in trident bench adapt).
	Delta float64
	// OOMPenalty is the fraction above MemLimit recorded as the peak memory of an OOM
	// evaluation (default 0.05).
	OOMPenalty float64
	// Initial are configurations evaluated first, before the quasi-random design (a
	// warm start: e.g. the running configuration and the best configurations found for
	// similar workloads). They count towards InitPoints; seen or constraint-violating
	// entries are skipped.
	Initial []configspace.Config
	// Candidates is the number of random candidates scored per suggestion (default 1500);
	// as many again are drawn around the best evaluations.
	Candidates int
	// BatchSpacing is the smallest distance (largest coordinate difference in the unit
	// cube) a suggestion keeps from the pending points of SuggestPending, so that a batch
	// of parallel trials spreads out even where measurement noise keeps the Kriging
	// believer's fantasies from lowering the acquisition near them (default 0.1; negative:
	// none).
	BatchSpacing float64
	// GridLevels is the number of levels per numeric parameter of grid search (default 3).
	GridLevels int
	// Surrogate makes the throughput surrogate (default: GP, one restart).
	Surrogate SurrogateFactory
	// MemSurrogate makes the memory surrogate of constrained BO, which is fitted to the
	// logarithm of peak memory (default: GP, one restart, prior mean log(MemLimit) so
	// that configurations far from every evaluation are presumed to be at the limit).
	MemSurrogate SurrogateFactory
	// PoolSurrogate makes the surrogate of the engine's working pool (Measurement.Pool)
	// that constrained BO keeps once an evaluation reports one (default: GP, one restart,
	// prior mean 1, so that a configuration far from every evaluation is presumed to sit
	// on the edge of starting).
	PoolSurrogate SurrogateFactory
	// Logger receives debug records (default: discard).
	Logger *slog.Logger
}

func (o Options) withDefaults(rng *rand.Rand) Options {
	if o.InitPoints <= 0 {
		o.InitPoints = 5
	}
	if o.Delta == 0 {
		o.Delta = 0.9
	}
	if o.PeakNoiseFloor == 0 {
		o.PeakNoiseFloor = 0.015
	}
	if o.OOMPenalty == 0 {
		o.OOMPenalty = 0.05
	}
	if o.Candidates <= 0 {
		o.Candidates = 1500
	}
	if o.BatchSpacing == 0 {
		o.BatchSpacing = 0.1
	}
	if o.GridLevels <= 0 {
		o.GridLevels = 3
	}
	if o.Surrogate == nil {
		o.Surrogate = GPFactory(GPOptions{Restarts: 1, Seed: rng.Uint64()})
	}
	if o.MemSurrogate == nil {
		g := GPOptions{Restarts: 1, Seed: rng.Uint64(), FixedMean: o.MemLimit > 0, Mean: math.Log(math.Max(o.MemLimit, 1e-9))}
		if o.PeakK > 0 {
			// A short-run peak is one draw of a scattered maximum, not the configuration's
			// peak: the surrogate must not interpolate it as exact.
			g.MinNoiseSD = o.PeakNoiseFloor
		}
		o.MemSurrogate = GPFactory(g)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Observation is one evaluated configuration.
type Observation struct {
	Config     configspace.Config
	X          []float64 // unit-cube coordinates
	Throughput float64   // measured sustained throughput (0 after OOM)
	PeakMem    float64   // measured peak memory (as observed; the limit after OOM)
	OOM        bool
	// StartFailed reports an engine that refused to start (OOM is true too).
	StartFailed bool
	// Pool is the working pool the engine reported relative to its need (see
	// Measurement.Pool; 0: none).
	Pool float64
}

// Measurement is what one evaluation of a configuration measured.
type Measurement struct {
	// Throughput is the measured sustained throughput (ignored after a failure).
	Throughput float64
	// PeakMem is the measured peak device memory, in the unit of Options.MemLimit.
	PeakMem float64
	// OOM reports a failed evaluation: out of memory, or an engine that did not start.
	OOM bool
	// StartFailed reports that the engine refused to start (it implies OOM): the
	// evaluation measured no peak.
	StartFailed bool
	// Pool is the working pool the engine sized for itself at start-up relative to the
	// least it needs to start (vLLM: the KV cache's tokens, num_gpu_blocks × block_size,
	// over max_model_len, which one sequence must fit; its start-up error states the
	// shortfall); 0 when the engine reported none. Below 1 the engine cannot start, at
	// whatever memory it uses. Once an evaluation reports a pool, constrained BO keeps a
	// third surrogate, of the pool, and PF(x) also requires P(pool(x) ≥ 1): the memory
	// surrogate cannot foresee such failures, which lie at low memory use, far from the
	// device limit.
	Pool float64
}

// Optimizer proposes configurations and learns from their measurements. It is not safe for
// concurrent use.
type Optimizer struct {
	space *configspace.Space
	opts  Options
	rng   *rand.Rand
	shift []float64 // Cranley-Patterson rotation of the Halton sequence
	hIdx  int       // next Halton index
	grid  []configspace.Config
	// initial holds the warm-start configurations not suggested yet.
	initial []configspace.Config
	obs     []Observation
	// seen holds the pointKey of every evaluated configuration's encoding.
	seen map[string]bool

	thr, mem        Surrogate
	pool            Surrogate // made when the first evaluation reports a pool
	havePoolFit     bool      // the pool surrogate is fitted to at least one reported pool
	fittedAt        int       // len(obs) when the surrogates were last fitted
	haveFeasibleFit bool
}

// New returns an optimiser over space. rng drives every random choice.
func New(space *configspace.Space, opts Options, rng *rand.Rand) (*Optimizer, error) {
	if space == nil || space.Dim() == 0 {
		return nil, errors.New("bo: empty configuration space")
	}
	if rng == nil {
		return nil, errors.New("bo: nil random source")
	}
	opts = opts.withDefaults(rng)
	if opts.Method == Constrained && !(opts.MemLimit > 0) {
		return nil, fmt.Errorf("bo: constrained BO needs a positive memory limit, got %v", opts.MemLimit)
	}
	if opts.Delta < 0 || opts.Delta >= 1 {
		return nil, fmt.Errorf("bo: feasibility threshold delta %v outside [0,1)", opts.Delta)
	}
	if !(opts.PeakK >= 0) || !(opts.Margin >= 0) || math.IsInf(opts.PeakK, 0) || math.IsInf(opts.Margin, 0) {
		return nil, fmt.Errorf("bo: peak allowance k %v and margin %v must be finite and non-negative", opts.PeakK, opts.Margin)
	}
	o := &Optimizer{space: space, opts: opts, rng: rng, seen: map[string]bool{}, fittedAt: -1}
	o.initial = append(o.initial, opts.Initial...)
	o.shift = make([]float64, space.Dim())
	for i := range o.shift {
		o.shift[i] = rng.Float64()
	}
	o.hIdx = 1
	if opts.Method == Grid {
		g, err := space.Grid(opts.GridLevels)
		if err != nil {
			return nil, fmt.Errorf("bo: grid search: %w", err)
		}
		rng.Shuffle(len(g), func(i, j int) { g[i], g[j] = g[j], g[i] })
		o.grid = g
	}
	if opts.Method == Constrained || opts.Method == Unconstrained || opts.Method == UnconstrainedZero {
		o.thr = opts.Surrogate(space.Dim())
		if opts.Method == Constrained {
			o.mem = opts.MemSurrogate(space.Dim())
		}
	}
	return o, nil
}

// Observations returns the evaluations so far, in order.
func (o *Optimizer) Observations() []Observation { return append([]Observation(nil), o.obs...) }

// OOMs returns the number of evaluations that failed with OOM.
func (o *Optimizer) OOMs() int {
	n := 0
	for _, ob := range o.obs {
		if ob.OOM {
			n++
		}
	}
	return n
}

// BestObserved returns the evaluation with the highest measured throughput among those
// without OOM.
func (o *Optimizer) BestObserved() (Observation, bool) {
	best, ok := Observation{}, false
	for _, ob := range o.obs {
		if !ob.OOM && (!ok || ob.Throughput > best.Throughput) {
			best, ok = ob, true
		}
	}
	return best, ok
}

// Observe records the measurement of configuration c: sustained throughput, peak device
// memory and whether the run failed with OOM.
func (o *Optimizer) Observe(c configspace.Config, throughput, peakMem float64, oom bool) error {
	return o.ObserveMeasurement(c, Measurement{Throughput: throughput, PeakMem: peakMem, OOM: oom})
}

// ObserveMeasurement records the measurement m of configuration c.
func (o *Optimizer) ObserveMeasurement(c configspace.Config, m Measurement) error {
	throughput, peakMem, oom := m.Throughput, m.PeakMem, m.OOM || m.StartFailed
	if math.IsNaN(m.Pool) || math.IsInf(m.Pool, 0) || m.Pool < 0 {
		return fmt.Errorf("bo: observe %s: pool %v must be finite and non-negative", c, m.Pool)
	}
	cc, err := o.space.Check(c)
	if err != nil {
		return fmt.Errorf("bo: observe: %w", err)
	}
	x, err := o.space.Encode(cc)
	if err != nil {
		return fmt.Errorf("bo: observe: %w", err)
	}
	if oom {
		throughput = 0
		peakMem = math.Max(peakMem, o.opts.MemLimit)
	}
	if math.IsNaN(throughput) || math.IsInf(throughput, 0) || math.IsNaN(peakMem) || math.IsInf(peakMem, 0) {
		return fmt.Errorf("bo: observe %s: non-finite throughput %v or memory %v", cc, throughput, peakMem)
	}
	o.obs = append(o.obs, Observation{Config: cc, X: x, Throughput: throughput, PeakMem: peakMem, OOM: oom,
		StartFailed: m.StartFailed, Pool: m.Pool})
	if m.Pool > 0 && o.pool == nil && o.opts.Method == Constrained {
		f := o.opts.PoolSurrogate
		if f == nil {
			f = GPFactory(GPOptions{Restarts: 1, Seed: o.rng.Uint64(), FixedMean: true, Mean: 1})
		}
		o.pool = f(o.space.Dim())
	}
	o.seen[pointKey(x)] = true
	return nil
}

// Suggest returns the next configuration to evaluate.
func (o *Optimizer) Suggest(ctx context.Context) (configspace.Config, error) {
	return o.SuggestPending(ctx, nil)
}

// SuggestPending returns the next configuration to evaluate while the configurations in
// pending are still being evaluated (asynchronous batch BO: several probes measure at
// once). Pending configurations are never suggested again, count towards the initial
// design, and enter the surrogates as Kriging-believer fantasies: as if measured at the
// current posterior mean, which collapses the uncertainty there and steers the
// acquisition elsewhere. The fantasies are dropped afterwards; only Observe records.
func (o *Optimizer) SuggestPending(ctx context.Context, pending []configspace.Config) (configspace.Config, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bo: suggest: %w", err)
	}
	var pend []Observation
	for _, c := range pending {
		cc, err := o.space.Check(c)
		if err != nil {
			return nil, fmt.Errorf("bo: suggest: pending: %w", err)
		}
		x, err := o.space.Encode(cc)
		if err != nil {
			return nil, fmt.Errorf("bo: suggest: pending: %w", err)
		}
		if k := pointKey(x); !o.seen[k] {
			o.seen[k] = true
			defer delete(o.seen, k)
		}
		pend = append(pend, Observation{Config: cc, X: x})
	}
	switch o.opts.Method {
	case Grid:
		for len(o.grid) > 0 {
			c := o.grid[0]
			o.grid = o.grid[1:]
			if !o.evaluated(c) {
				return c, nil
			}
		}
		return o.nextHalton()
	case Random:
		return o.nextHalton()
	}
	for len(o.initial) > 0 {
		c := o.initial[0]
		o.initial = o.initial[1:]
		if o.space.Satisfies(c) && !o.evaluated(c) {
			return c, nil
		}
	}
	if len(o.obs)+len(pend) < o.opts.InitPoints {
		return o.nextHalton()
	}
	if err := o.fit(ctx); err != nil {
		return nil, err
	}
	if len(pend) > 0 && o.haveFeasibleFit {
		restore, err := o.believe(ctx, pend)
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	return o.acquire(pend)
}

// believe conditions the surrogates on the pending points as if they had been measured at
// the current posterior mean (Kriging believer) and returns the function that restores the
// evaluations-only surrogates. Conditioner surrogates keep their hyperparameters; others
// are refitted with the fantasies, and refitted again without them on the next fit.
func (o *Optimizer) believe(ctx context.Context, pend []Observation) (restore func(), err error) {
	xs := make([][]float64, len(pend))
	thr, mem, pool := make([]float64, len(pend)), make([]float64, len(pend)), make([]float64, len(pend))
	for i := range pend {
		xs[i] = pend[i].X
		thr[i], _ = o.thr.Predict(pend[i].X)
		pend[i].Throughput = thr[i]
		if o.mem != nil {
			mem[i], _ = o.mem.Predict(pend[i].X) // log peak memory
			pend[i].PeakMem = math.Exp(mem[i])
		}
		if o.havePoolFit {
			pool[i], _ = o.pool.Predict(pend[i].X) // pool relative to the need
			pend[i].Pool = math.Max(pool[i], 0)
		}
	}
	tc, okT := o.thr.(Conditioner)
	mc, okM := o.mem.(Conditioner)
	pc, okP := o.pool.(Conditioner)
	if okT && (o.mem == nil || okM) && (!o.havePoolFit || okP) {
		thrS, memS, poolS := o.thr, o.mem, o.pool
		restore := func() { o.thr, o.mem, o.pool = thrS, memS, poolS }
		t2, err := tc.With(xs, thr)
		if err != nil {
			return nil, fmt.Errorf("bo: condition throughput surrogate on pending points: %w", err)
		}
		o.thr = t2
		if o.mem != nil {
			m2, err := mc.With(xs, mem)
			if err != nil {
				restore()
				return nil, fmt.Errorf("bo: condition memory surrogate on pending points: %w", err)
			}
			o.mem = m2
		}
		if o.havePoolFit {
			p2, err := pc.With(xs, pool)
			if err != nil {
				restore()
				return nil, fmt.Errorf("bo: condition pool surrogate on pending points: %w", err)
			}
			o.pool = p2
		}
		return restore, nil
	}
	o.fittedAt = -1
	if err := o.fitOn(ctx, append(append([]Observation(nil), o.obs...), pend...)); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// acquire returns the candidate with the highest acquisition value under the fitted
// surrogates: expected improvement over the incumbent times the probability of
// feasibility, among candidates with PF ≥ δ (constrained BO) that keep BatchSpacing from
// every pending point (unless none does).
func (o *Optimizer) acquire(pending []Observation) (configspace.Config, error) {
	cands := o.candidates()
	if len(pending) > 0 && o.opts.BatchSpacing > 0 {
		spaced := cands[:0:0]
		for _, x := range cands {
			if o.spaced(x, pending) {
				spaced = append(spaced, x)
			}
		}
		if len(spaced) > 0 {
			cands = spaced
		}
	}
	best, bestScore := -1, math.Inf(-1)
	bestPF, bestPFIdx := -1.0, -1
	incumbent, haveInc := o.incumbent()
	for i, x := range cands {
		pf := 1.0
		if o.opts.Method == Constrained {
			pf = o.pFeasible(x)
			if pf > bestPF {
				bestPF, bestPFIdx = pf, i
			}
			if pf < o.opts.Delta {
				continue
			}
		}
		var score float64
		if haveInc {
			m, v := o.thr.Predict(x)
			score = expectedImprovement(m, math.Sqrt(v), incumbent) * pf
		} else {
			score = pf // no feasible evaluation yet: seek feasibility
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		// No candidate meets δ: take the safest one.
		best = bestPFIdx
		o.opts.Logger.Debug("bo: no candidate meets delta", "delta", o.opts.Delta, "best_pf", bestPF)
	}
	if best < 0 {
		return nil, errors.New("bo: suggest: no candidate satisfies the space constraints")
	}
	c, err := o.space.Decode(cands[best])
	if err != nil {
		return nil, fmt.Errorf("bo: suggest: %w", err)
	}
	return c, nil
}

// spaced reports whether x is at least BatchSpacing (largest coordinate difference in
// the unit cube) from every pending point.
func (o *Optimizer) spaced(x []float64, pending []Observation) bool {
	for _, p := range pending {
		d := 0.0
		for i := range x {
			d = math.Max(d, math.Abs(x[i]-p.X[i]))
		}
		if d < o.opts.BatchSpacing {
			return false
		}
	}
	return true
}

// incumbent returns the best measured throughput among evaluations without OOM (for
// UnconstrainedZero: among all evaluations, OOMs counting as 0).
func (o *Optimizer) incumbent() (float64, bool) {
	best, ok := math.Inf(-1), false
	for _, ob := range o.obs {
		if o.opts.Method != UnconstrainedZero && ob.OOM {
			continue
		}
		if ob.Throughput > best {
			best, ok = ob.Throughput, true
		}
	}
	return best, ok
}

// fit refits the surrogates to the observations when they changed.
func (o *Optimizer) fit(ctx context.Context) error {
	if o.fittedAt == len(o.obs) {
		return nil
	}
	if err := o.fitOn(ctx, o.obs); err != nil {
		return err
	}
	o.fittedAt = len(o.obs)
	return nil
}

// fitOn fits the surrogates to obs.
func (o *Optimizer) fitOn(ctx context.Context, obs []Observation) error {
	var tx, mx, px [][]float64
	var ty, my, py []float64
	var memObs []Observation
	for _, ob := range obs {
		if o.opts.Method == UnconstrainedZero || !ob.OOM {
			tx, ty = append(tx, ob.X), append(ty, ob.Throughput)
		}
		if o.opts.Method != Constrained {
			continue
		}
		if o.pool != nil && (ob.Pool > 0 || ob.StartFailed) {
			// The pool the engine reported, relative to its need; an engine that refused
			// to start without saying how short it fell had an empty one.
			px, py = append(px, ob.X), append(py, ob.Pool)
		}
		if o.pool != nil && ob.StartFailed && ob.Pool < 1 {
			continue // no peak: the pool surrogate explains the failure
		}
		m := ob.PeakMem
		if ob.OOM {
			m = math.Max(m, o.opts.MemLimit*(1+o.opts.OOMPenalty))
		}
		memObs = append(memObs, ob)
		mx, my = append(mx, ob.X), append(my, math.Log(math.Max(m, 1e-9)))
	}
	if o.opts.Method == Constrained {
		if err := o.imputeOOM(ctx, memObs, mx, my); err != nil {
			return err
		}
	}
	o.haveFeasibleFit = len(ty) > 0
	if len(ty) > 0 {
		if err := o.thr.Fit(ctx, tx, ty); err != nil {
			return fmt.Errorf("bo: fit throughput surrogate: %w", err)
		}
	}
	switch {
	case len(my) > 0:
		if err := o.mem.Fit(ctx, mx, my); err != nil {
			return fmt.Errorf("bo: fit memory surrogate: %w", err)
		}
	case o.mem != nil:
		// every evaluation so far failed to start and the pool explains it: a fit made
		// before the pool surrogate existed must not keep them at the memory limit
		o.mem = o.opts.MemSurrogate(o.space.Dim())
	}
	o.havePoolFit = len(py) > 0
	if len(py) > 0 {
		if err := o.pool.Fit(ctx, px, py); err != nil {
			return fmt.Errorf("bo: fit pool surrogate: %w", err)
		}
	}
	return nil
}

// imputeOOM treats the log peak memory of OOM evaluations as censored: the peak is only
// known to exceed the device limit. A memory surrogate fitted to the other evaluations
// predicts each OOM point, and the point's value becomes the larger of the prediction and
// log(MemLimit·(1+OOMPenalty)). my (aligned with obs) is updated in place.
func (o *Optimizer) imputeOOM(ctx context.Context, obs []Observation, mx [][]float64, my []float64) error {
	var fx [][]float64
	var fy []float64
	var oom []int
	for i, ob := range obs {
		if ob.OOM {
			oom = append(oom, i)
		} else {
			fx, fy = append(fx, mx[i]), append(fy, my[i])
		}
	}
	if len(oom) == 0 || len(fy) < 2 {
		return nil
	}
	if err := o.mem.Fit(ctx, fx, fy); err != nil {
		return fmt.Errorf("bo: fit memory surrogate to feasible evaluations: %w", err)
	}
	for _, i := range oom {
		m, _ := o.mem.Predict(mx[i])
		my[i] = math.Max(my[i], m)
	}
	return nil
}

// pFeasible returns P(sustained peak memory ≤ M − μ) = Φ((log(M − μ) − m(x) − k·σ_n)/s(x))
// under the memory surrogate of log peak memory (k = PeakK, σ_n its noise deviation, at
// least PeakNoiseFloor), times P(pool(x) ≥ 1) under the pool surrogate once an evaluation
// reported a pool (Measurement.Pool).
func (o *Optimizer) pFeasible(x []float64) float64 {
	p := o.pMemory(x)
	if o.havePoolFit {
		pm, pv := o.pool.Predict(x)
		p *= atMost(-pm, pv, -1) // the pool relative to the need: at least 1
	}
	return p
}

// pMemory returns the memory factor of pFeasible: P(sustained peak memory ≤ M − μ).
func (o *Optimizer) pMemory(x []float64) float64 {
	m, v := o.mem.Predict(x)
	if o.opts.PeakK > 0 {
		sn := o.opts.PeakNoiseFloor
		if nm, ok := o.mem.(NoiseModel); ok {
			sn = math.Max(sn, math.Sqrt(math.Max(nm.NoiseVar(), 0)))
		}
		m += o.opts.PeakK * sn
	}
	lim := math.Log(math.Max(o.opts.MemLimit-o.opts.Margin, 1e-9))
	return atMost(m, v, lim)
}

// atMost returns P(f ≤ lim) for f ~ N(m, v).
func atMost(m, v, lim float64) float64 {
	s := math.Sqrt(v)
	if !(s > 1e-12) {
		if m <= lim {
			return 1
		}
		return 0
	}
	return normCDF((lim - m) / s)
}

// candidates returns unit-cube points to score: uniform random points and Gaussian
// perturbations of the best evaluations, snapped to their configurations' canonical points,
// filtered by the space constraints and by what was already evaluated.
func (o *Optimizer) candidates() [][]float64 {
	d := o.space.Dim()
	var raw [][]float64
	for range o.opts.Candidates {
		u := make([]float64, d)
		for i := range u {
			u[i] = o.rng.Float64()
		}
		raw = append(raw, u)
	}
	// Local search around the best feasible evaluations.
	ranked := make([]Observation, 0, len(o.obs))
	for _, ob := range o.obs {
		if !ob.OOM {
			ranked = append(ranked, ob)
		}
	}
	sort.SliceStable(ranked, func(i, j int) bool { return ranked[i].Throughput > ranked[j].Throughput })
	if len(ranked) > 5 {
		ranked = ranked[:5]
	}
	if len(ranked) > 0 {
		per := o.opts.Candidates / len(ranked)
		for _, ob := range ranked {
			for k := range per {
				sd := []float64{0.02, 0.05, 0.1, 0.2}[k%4]
				u := make([]float64, d)
				for i := range u {
					u[i] = ob.X[i]
					if o.rng.Float64() < 0.5 {
						u[i] = math.Max(0, math.Min(1, ob.X[i]+sd*o.rng.NormFloat64()))
					}
				}
				raw = append(raw, u)
			}
		}
	}
	out := make([][]float64, 0, len(raw))
	dedup := make(map[string]bool, len(raw))
	for _, u := range raw {
		x := make([]float64, d)
		if ok, err := o.space.Snap(u, x); err != nil || !ok {
			continue
		}
		k := pointKey(x)
		if o.seen[k] || dedup[k] {
			continue
		}
		dedup[k] = true
		out = append(out, x)
	}
	return out
}

// pointKey identifies a canonical point of the unit cube (configspace.Space.Snap or
// Encode of a checked configuration) by its exact bits: equal keys, equal configurations.
func pointKey(x []float64) string {
	b := make([]byte, 0, 8*len(x))
	for _, v := range x {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return string(b)
}

// evaluated reports whether configuration c was observed (or is pending in the current
// suggestion). A configuration that does not encode was not.
func (o *Optimizer) evaluated(c configspace.Config) bool {
	x, err := o.space.Encode(c)
	return err == nil && o.seen[pointKey(x)]
}

// nextHalton returns the next point of the shifted Halton sequence that satisfies the
// constraints and was not evaluated yet.
func (o *Optimizer) nextHalton() (configspace.Config, error) {
	for tries := 0; tries < 10000; tries++ {
		u := make([]float64, o.space.Dim())
		for i := range u {
			u[i] = math.Mod(radicalInverse(o.hIdx, nthPrime(i))+o.shift[i], 1)
		}
		o.hIdx++
		c, err := o.space.Decode(u)
		if err != nil {
			return nil, fmt.Errorf("bo: halton point: %w", err)
		}
		if o.space.Satisfies(c) && !o.evaluated(c) {
			return c, nil
		}
	}
	return nil, errors.New("bo: no Halton point satisfies the space constraints")
}

// Prediction is the surrogates' belief about one configuration.
type Prediction struct {
	// Throughput and ThroughputStd are the throughput surrogate's posterior mean and
	// standard deviation. They are meaningful only when HaveThroughput is true, i.e. once
	// an evaluation without OOM exists.
	Throughput, ThroughputStd float64
	HaveThroughput            bool
	// PFeasible is P(sustained peak memory ≤ MemLimit − Margin) under the memory
	// surrogate (constrained BO; see Options.PeakK), times P(the engine starts) under the
	// pool surrogate once an evaluation reported a pool (Measurement.Pool); 1 for the
	// methods that do not model memory.
	PFeasible float64
}

// Predict returns the surrogates' prediction at c, refitting them first when evaluations
// were added since the last fit. It needs a BO method and at least one evaluation; it
// does not change what Suggest returns next.
func (o *Optimizer) Predict(ctx context.Context, c configspace.Config) (Prediction, error) {
	if o.thr == nil {
		return Prediction{}, fmt.Errorf("bo: predict: method %s has no surrogate", o.opts.Method)
	}
	if len(o.obs) == 0 {
		return Prediction{}, ErrNoEvaluation
	}
	cc, err := o.space.Check(c)
	if err != nil {
		return Prediction{}, fmt.Errorf("bo: predict: %w", err)
	}
	x, err := o.space.Encode(cc)
	if err != nil {
		return Prediction{}, fmt.Errorf("bo: predict: %w", err)
	}
	if err := o.fit(ctx); err != nil {
		return Prediction{}, err
	}
	p := Prediction{PFeasible: 1, HaveThroughput: o.haveFeasibleFit}
	if o.haveFeasibleFit {
		m, v := o.thr.Predict(x)
		p.Throughput, p.ThroughputStd = m, math.Sqrt(math.Max(v, 0))
	}
	if o.opts.Method == Constrained {
		p.PFeasible = o.pFeasible(x)
	}
	return p, nil
}

// Delta returns the feasibility threshold δ in effect (after defaults).
func (o *Optimizer) Delta() float64 { return o.opts.Delta }

// Recommendation is the configuration an optimiser proposes after tuning.
type Recommendation struct {
	Config configspace.Config
	// Predicted is the surrogate's throughput at Config (the measurement for the
	// non-BO methods).
	Predicted float64
	// Measured is the measured throughput of Config during tuning.
	Measured float64
	// PFeasible is the memory surrogate's probability that Config's sustained peak fits
	// (1 for methods that do not model memory). Config ran during tuning, so it starts:
	// the pool surrogate does not count.
	PFeasible float64
}

// Recommend returns the final recommendation. Constrained BO picks, among evaluated
// configurations without OOM and with PF ≥ δ, the one with the highest predicted
// throughput; the other methods pick the best measured configuration without OOM.
func (o *Optimizer) Recommend(ctx context.Context) (Recommendation, error) {
	best, ok := o.BestObserved()
	if !ok {
		return Recommendation{}, errors.New("bo: recommend: no evaluation without OOM")
	}
	if o.opts.Method != Constrained {
		return Recommendation{Config: best.Config, Predicted: best.Throughput, Measured: best.Throughput, PFeasible: 1}, nil
	}
	if err := o.fit(ctx); err != nil {
		return Recommendation{}, err
	}
	rec, found := Recommendation{}, false
	safest := Recommendation{PFeasible: -1}
	for _, ob := range o.obs {
		if ob.OOM {
			continue
		}
		m, _ := o.thr.Predict(ob.X)
		// it ran, so it starts: only its sustained peak is in doubt
		pf := o.pMemory(ob.X)
		r := Recommendation{Config: ob.Config, Predicted: m, Measured: ob.Throughput, PFeasible: pf}
		if pf >= o.opts.Delta && (!found || m > rec.Predicted) {
			rec, found = r, true
		}
		if pf > safest.PFeasible {
			safest = r
		}
	}
	if !found {
		return safest, nil
	}
	return rec, nil
}

// Objective evaluates one configuration.
type Objective func(ctx context.Context, c configspace.Config) (Measurement, error)

// Result summarises a Run.
type Result struct {
	Observations   []Observation
	Recommendation Recommendation
	// OOMs counts the evaluations that failed with OOM.
	OOMs int
	// BestFeasible is the best measured evaluation without OOM (zero if none).
	BestFeasible Observation
}

// Run drives a fresh optimiser for budget evaluations of objective and returns the
// evaluations and the recommendation.
func Run(ctx context.Context, space *configspace.Space, opts Options, rng *rand.Rand, objective Objective, budget int) (Result, error) {
	o, err := New(space, opts, rng)
	if err != nil {
		return Result{}, err
	}
	for i := range budget {
		c, err := o.Suggest(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("bo: run %s, evaluation %d: %w", opts.Method, i, err)
		}
		m, err := objective(ctx, c)
		if err != nil {
			return Result{}, fmt.Errorf("bo: run %s, evaluate %s: %w", opts.Method, c, err)
		}
		if err := o.ObserveMeasurement(c, m); err != nil {
			return Result{}, err
		}
	}
	res := Result{Observations: o.Observations(), OOMs: o.OOMs()}
	res.BestFeasible, _ = o.BestObserved()
	if rec, err := o.Recommend(ctx); err == nil {
		res.Recommendation = rec
	} else if ctx.Err() != nil {
		return res, err
	}
	return res, nil
}

// expectedImprovement returns E[max(f − best, 0)] for f ~ N(m, s²).
func expectedImprovement(m, s, best float64) float64 {
	if !(s > 1e-12) {
		return math.Max(m-best, 0)
	}
	z := (m - best) / s
	return (m-best)*normCDF(z) + s*normPDF(z)
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
func normPDF(z float64) float64 { return math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) }

// nthPrime returns the n-th prime (0-based), the Halton base of dimension n.
func nthPrime(n int) int {
	for p, k := 2, 0; ; p++ {
		isPrime := true
		for q := 2; q*q <= p; q++ {
			if p%q == 0 {
				isPrime = false
				break
			}
		}
		if isPrime {
			if k == n {
				return p
			}
			k++
		}
	}
}

// radicalInverse returns the base-b radical inverse of i (the i-th Halton coordinate).
func radicalInverse(i, b int) float64 {
	f, r := 1.0, 0.0
	for i > 0 {
		f /= float64(b)
		r += f * float64(i%b)
		i /= b
	}
	return r
}
