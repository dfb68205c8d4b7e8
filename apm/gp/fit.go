package gp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/optimize"
)

// FitOptions controls hyperparameter fitting.
//
// Fit maximises the log marginal likelihood with L-BFGS over
// θ = ((Mean−ȳ)/s_y, log SignalVar, log NoiseVar, log LengthScales...), where ȳ and s_y are
// the sample mean and standard deviation of y. Bounds are enforced by a quadratic penalty
// outside them and by clamping the result:
//
//	Mean        ȳ ± 5 s_y
//	SignalVar   [1e-4, 1e3]·s_y²
//	NoiseVar    [1e-6, 1e1]·s_y²   (lower bound raised to MinNoiseVar if set)
//	LengthScale [1e-2, 1e2]·(range of feature d)   (range 1 if the feature is constant; upper
//	            bound lowered to MaxLengthScales[d] if set, lower bound raised to
//	            MinLengthScales[d] if set; the lower bound wins where they cross)
//
// The first start is the current hyperparameters (clamped), the second a data-derived default
// (ȳ, s_y², 0.05·s_y², half the feature range), then Restarts random starts perturbing the
// default.
type FitOptions struct {
	// Restarts is the number of extra random starting points (default 2 when zero; negative
	// means none).
	Restarts int
	// WarmOnly starts only from the current hyperparameters (the cheapest refit).
	WarmOnly bool
	// MaxSamples, if positive, fits the hyperparameters on at most this many samples,
	// evenly spaced over the samples held (oldest to newest); the installed model still
	// uses all samples. Each likelihood evaluation costs O(n³), so halving n makes a fit
	// about eight times cheaper.
	MaxSamples int
	// MaxIter bounds L-BFGS major iterations per start (default 100).
	MaxIter int
	// Seed seeds the random starting points.
	Seed uint64
	// FixMean keeps Hyper.Mean at its current value instead of fitting it.
	FixMean bool
	// MinNoiseVar, if positive, raises the lower bound of NoiseVar to it (units of y²). With
	// few samples the likelihood favours interpolating them with almost no noise; a floor at
	// the known measurement precision prevents that overfit.
	MinNoiseVar float64
	// MaxLengthScales, if set, holds one upper bound per input dimension on the fitted
	// length scale (input units; 0 or less: none), lowering the default bound of 1e2 times
	// the feature's range. The lower bound is lowered to it where it would exceed it.
	MaxLengthScales []float64
	// MinLengthScales, if set, holds one lower bound per input dimension on the fitted
	// length scale (input units; 0 or less: none), raising the default bound of 1e-2 times
	// the feature's range. It wins over MaxLengthScales where the two cross.
	MinLengthScales []float64
	// Tolerance, if positive, ends each start's search once the log marginal likelihood
	// gains less than Tolerance nats (or Tolerance·1e-3 of its magnitude) over three
	// iterations, or the gradient's norm falls below Tolerance/10. Zero keeps the tight
	// search (1e-7 nats over ten iterations, gradient 1e-6), which small models such as
	// BO surrogates can afford.
	Tolerance float64
	// RaceIterations, if positive and there are several starts, runs every start for this
	// many L-BFGS iterations first, then continues only from the best point they reached
	// (for at most MaxIter iterations). Most starts land in the same basin, so a full
	// search from each repeats the same work; a short race still lets a start in a better
	// basin take over. Zero searches fully from every start.
	RaceIterations int
}

func (o FitOptions) withDefaults() FitOptions {
	if o.Restarts == 0 {
		o.Restarts = 2
	}
	if o.Restarts < 0 {
		o.Restarts = 0
	}
	if o.MaxIter <= 0 {
		o.MaxIter = 100
	}
	return o
}

// fitSpace maps between θ and Hyper and holds the bounds.
type fitSpace struct {
	ybar, ys float64
	ranges   []float64 // per feature: max − min over the samples (1 if constant)
	lo, hi   []float64
	fixMean  bool
	mean     float64 // used when fixMean
}

func (s *fitSpace) hyper(t []float64) Hyper {
	h := Hyper{
		Mean:         s.ybar + s.ys*t[0],
		SignalVar:    math.Exp(t[1]),
		NoiseVar:     math.Exp(t[2]),
		LengthScales: make([]float64, len(t)-3),
	}
	if s.fixMean {
		h.Mean = s.mean
	}
	for d := range h.LengthScales {
		h.LengthScales[d] = math.Exp(t[3+d])
	}
	return h
}

func (s *fitSpace) theta(h Hyper) []float64 {
	t := make([]float64, 3+len(h.LengthScales))
	t[0] = (h.Mean - s.ybar) / s.ys
	t[1] = math.Log(h.SignalVar)
	t[2] = math.Log(math.Max(h.NoiseVar, 1e-300))
	for d, l := range h.LengthScales {
		t[3+d] = math.Log(l)
	}
	return t
}

func (s *fitSpace) clamp(t []float64) []float64 {
	out := slices.Clone(t)
	for i := range out {
		out[i] = math.Min(math.Max(out[i], s.lo[i]), s.hi[i])
	}
	return out
}

// penaltyWeight scales the quadratic penalty for leaving the bounds (θ units).
const penaltyWeight = 1e3

// Fit refits the hyperparameters to the samples held by maximising the log marginal
// likelihood, installs the best ones found, refactorises, and returns them. It needs at least
// two samples. Cancelling ctx stops the search and leaves the GP unchanged.
func (g *GP) Fit(ctx context.Context, o FitOptions) (Hyper, error) {
	n := len(g.ys)
	if n < 2 {
		return g.Hyper(), fmt.Errorf("gp: fit needs at least 2 samples, have %d", n)
	}
	o = o.withDefaults()
	if o.MaxLengthScales != nil && len(o.MaxLengthScales) != g.dim {
		return g.Hyper(), fmt.Errorf("gp: %d length-scale bounds for %d inputs", len(o.MaxLengthScales), g.dim)
	}
	if o.MinLengthScales != nil && len(o.MinLengthScales) != g.dim {
		return g.Hyper(), fmt.Errorf("gp: %d length-scale floors for %d inputs", len(o.MinLengthScales), g.dim)
	}
	sp := g.space(o.FixMean, o.MinNoiseVar, o.MaxLengthScales, o.MinLengthScales)
	rng := rand.New(rand.NewPCG(o.Seed, 0x74726964656e74))

	starts := [][]float64{sp.clamp(sp.theta(g.h))}
	def := Hyper{Mean: sp.ybar, SignalVar: sp.ys * sp.ys, NoiseVar: 0.05 * sp.ys * sp.ys}
	for d := 0; d < g.dim; d++ {
		def.LengthScales = append(def.LengthScales, 0.5*sp.ranges[d])
	}
	if !o.WarmOnly {
		starts = append(starts, sp.clamp(sp.theta(def)))
	}
	for r := 0; r < o.Restarts && !o.WarmOnly; r++ {
		t := slices.Clone(starts[1])
		t[0] = rng.Float64()*2 - 1
		t[1] += math.Log(10) * (2*rng.Float64() - 1)
		t[2] = math.Log(sp.ys*sp.ys) + math.Log(10)*(-4+3.5*rng.Float64())
		for d := 0; d < g.dim; d++ {
			t[3+d] += math.Log(10) * (2*rng.Float64() - 1)
		}
		starts = append(starts, t)
	}

	fx, fy := g.xs, g.ys
	if o.MaxSamples > 1 && n > o.MaxSamples {
		fx, fy = make([][]float64, o.MaxSamples), make([]float64, o.MaxSamples)
		for i := range fx {
			j := i * (n - 1) / (o.MaxSamples - 1)
			fx[i], fy[i] = g.xs[j], g.ys[j]
		}
	}
	best := math.Inf(1)
	var bestT []float64
	var cache struct {
		x    []float64
		f    float64
		grad []float64
	}
	var ws LMLWorkspace
	eval := func(t []float64) (float64, []float64) {
		if cache.x != nil && slices.Equal(cache.x, t) {
			return cache.f, cache.grad
		}
		f, grad := math.Inf(1), make([]float64, len(t))
		lml, lg, err := ws.LogMarginalLikelihoodGrad(fx, fy, sp.hyper(t))
		if err == nil && finite(lml) {
			f = -lml
			grad[0] = -lg[GradMean] * sp.ys
			if o.FixMean {
				grad[0] = 0
			}
			for i := 1; i < len(t); i++ {
				grad[i] = -lg[i]
			}
			inBounds := true
			for i, v := range t {
				if i == 0 && o.FixMean {
					continue
				}
				if v < sp.lo[i] {
					f += penaltyWeight * (sp.lo[i] - v) * (sp.lo[i] - v)
					grad[i] -= 2 * penaltyWeight * (sp.lo[i] - v)
					inBounds = false
				} else if v > sp.hi[i] {
					f += penaltyWeight * (v - sp.hi[i]) * (v - sp.hi[i])
					grad[i] += 2 * penaltyWeight * (v - sp.hi[i])
					inBounds = false
				}
			}
			if inBounds && f < best {
				best, bestT = f, slices.Clone(t)
			}
		}
		cache.x, cache.f, cache.grad = slices.Clone(t), f, grad
		return f, grad
	}
	prob := optimize.Problem{
		Func: func(t []float64) float64 { f, _ := eval(t); return f },
		Grad: func(dst, t []float64) { _, gr := eval(t); copy(dst, gr) },
	}
	search := func(s []float64, iters int) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("gp: fit: %w", err)
		}
		set := &optimize.Settings{
			MajorIterations:   iters,
			GradientThreshold: 1e-6,
			Converger:         &ctxConverger{ctx: ctx, inner: &optimize.FunctionConverge{Absolute: 1e-7, Relative: 1e-9, Iterations: 10}},
		}
		if o.Tolerance > 0 {
			set.GradientThreshold = o.Tolerance / 10
			set.Converger = &ctxConverger{ctx: ctx, inner: &optimize.FunctionConverge{Absolute: o.Tolerance, Relative: o.Tolerance * 1e-3, Iterations: 3}}
		}
		// Errors (e.g. a failed line search) are tolerated: eval records the best point seen.
		_, _ = optimize.Minimize(prob, s, set, &optimize.LBFGS{})
		return nil
	}
	race := o.RaceIterations > 0 && len(starts) > 1
	for _, s := range starts {
		iters := o.MaxIter
		if race {
			iters = min(o.RaceIterations, o.MaxIter)
		}
		if err := search(s, iters); err != nil {
			return g.Hyper(), err
		}
	}
	if race && bestT != nil && o.MaxIter > o.RaceIterations {
		if err := search(slices.Clone(bestT), o.MaxIter); err != nil {
			return g.Hyper(), err
		}
	}
	if err := ctx.Err(); err != nil {
		return g.Hyper(), fmt.Errorf("gp: fit: %w", err)
	}
	if bestT == nil {
		return g.Hyper(), errors.New("gp: fit: no starting point gave a finite likelihood")
	}
	h := sp.hyper(sp.clamp(bestT))
	if err := g.SetHyper(h); err != nil {
		return g.Hyper(), fmt.Errorf("gp: fit: install hyperparameters: %w", err)
	}
	return g.Hyper(), nil
}

// space derives the parameterisation and bounds from the data held.
func (g *GP) space(fixMean bool, minNoise float64, maxLS, minLS []float64) *fitSpace {
	n := float64(len(g.ys))
	var mean, ss float64
	for _, y := range g.ys {
		mean += y
	}
	mean /= n
	for _, y := range g.ys {
		ss += (y - mean) * (y - mean)
	}
	sd := math.Sqrt(ss / n)
	if !(sd > 0) {
		sd = math.Max(math.Abs(mean)*1e-3, 1e-9)
	}
	sp := &fitSpace{ybar: mean, ys: sd, fixMean: fixMean, mean: g.h.Mean}
	lv := math.Log(sd * sd)
	ln10 := math.Log(10)
	sp.lo = []float64{-5, lv - 4*ln10, lv - 6*ln10}
	sp.hi = []float64{5, lv + 3*ln10, lv + 1*ln10}
	if minNoise > 0 {
		sp.lo[2] = math.Max(sp.lo[2], math.Log(minNoise))
		sp.hi[2] = math.Max(sp.hi[2], sp.lo[2])
	}
	for d := 0; d < g.dim; d++ {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range g.xs {
			lo, hi = math.Min(lo, x[d]), math.Max(hi, x[d])
		}
		rg := hi - lo
		if !(rg > 0) {
			rg = 1
		}
		sp.ranges = append(sp.ranges, rg)
		lo, hi = math.Log(rg)-2*ln10, math.Log(rg)+2*ln10
		if maxLS != nil && maxLS[d] > 0 {
			hi = math.Min(hi, math.Log(maxLS[d]))
			lo = math.Min(lo, hi)
		}
		if minLS != nil && minLS[d] > 0 {
			lo = math.Max(lo, math.Log(minLS[d]))
			hi = math.Max(hi, lo)
		}
		sp.lo = append(sp.lo, lo)
		sp.hi = append(sp.hi, hi)
	}
	return sp
}

// ctxConverger stops the optimiser when ctx is done and otherwise defers to inner.
type ctxConverger struct {
	ctx   context.Context
	inner optimize.Converger
}

func (c *ctxConverger) Init(dim int) { c.inner.Init(dim) }

func (c *ctxConverger) Converged(l *optimize.Location) optimize.Status {
	if c.ctx.Err() != nil {
		return optimize.Failure
	}
	return c.inner.Converged(l)
}
