package bo

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/optimize"

	"github.com/trident-sched/trident/apm/gp"
)

// Surrogate is a probabilistic regression model of a black-box function on the unit cube.
type Surrogate interface {
	// Fit replaces the model's data with (xs, ys) and refits its hyperparameters.
	Fit(ctx context.Context, xs [][]float64, ys []float64) error
	// Predict returns the posterior mean and variance of the latent function at x.
	Predict(x []float64) (mean, variance float64)
}

// Conditioner is a Surrogate that can also be conditioned on extra points without
// refitting its hyperparameters, as the fantasies of batch BO need.
type Conditioner interface {
	// With returns a new surrogate conditioned on the model's data and (xs, ys), with the
	// same hyperparameters; the receiver is unchanged.
	With(xs [][]float64, ys []float64) (Surrogate, error)
}

// NoiseModel is a Surrogate that reports the variance of its observation noise: how far a
// new measurement at a point scatters around the latent function.
type NoiseModel interface {
	// NoiseVar returns the observation-noise variance in units of y².
	NoiseVar() float64
}

// SurrogateFactory makes an empty surrogate over dim inputs.
type SurrogateFactory func(dim int) Surrogate

// GPOptions configures GP surrogates.
type GPOptions struct {
	// Restarts is the number of random restarts of the hyperparameter search.
	Restarts int
	// Seed seeds the restarts.
	Seed uint64
	// FixedMean makes Mean the GP's prior mean instead of the sample mean of y: far from
	// the data the surrogate predicts Mean. Constrained BO uses it for memory with Mean =
	// log(MemLimit), so unexplored regions count as being at the limit (unsafe until data
	// near them say otherwise) rather than at the average of the configurations tried.
	FixedMean bool
	// Mean is the prior mean used with FixedMean, in units of y.
	Mean float64
	// MaxNoise bounds the noise variance relative to the variance of y (default 0.1).
	MaxNoise float64
	// MinNoiseSD floors the observation-noise standard deviation, in units of y (default
	// 0: the relative bound 1e-6 alone). A floor keeps a few-sample fit from
	// interpolating every measurement as exact when the measurements are known to
	// scatter, e.g. short-run memory peaks.
	MinNoiseSD float64
}

// GPSurrogate is a Surrogate backed by apm/gp (ARD Matérn 5/2) on inputs in the unit cube.
//
// Fit standardises y and chooses hyperparameters by maximum a posteriori: the log marginal
// likelihood (gp.LogMarginalLikelihoodGrad) plus a log-normal prior on every length scale
// (median 0.5, log-sd 1), maximised by L-BFGS within bounds (signal variance 0.05..20, noise
// variance 1e-6..MaxNoise, length scales 0.03..10, all relative to standardised y and the
// unit cube). The prior and the bounded noise keep the few-sample fits of BO from
// explaining every observation as noise (apm/gp's Fit has data-derived bounds that allow
// that, which is right for the observation layer's many samples but not here).
type GPSurrogate struct {
	dim    int
	o      GPOptions
	g      *gp.GP
	mu, sd float64
	sdFit  float64   // standardisation of the fit in progress
	last   []float64 // last fitted θ, warm start of the next fit
	xs     [][]float64
	z      []float64 // standardised outputs of xs
}

// NewGPSurrogate returns a GP surrogate over dim inputs.
func NewGPSurrogate(dim int, o GPOptions) *GPSurrogate {
	if o.MaxNoise <= 0 {
		o.MaxNoise = 0.1
	}
	return &GPSurrogate{dim: dim, o: o}
}

// GPFactory returns a SurrogateFactory of GP surrogates.
func GPFactory(o GPOptions) SurrogateFactory {
	return func(dim int) Surrogate { return NewGPSurrogate(dim, o) }
}

// Prior and bounds of the hyperparameter search, in standardised units.
const (
	priorLogLen   = -0.6931471805599453 // log 0.5
	priorLogLenSD = 1.0
	minSignal     = 0.05
	maxSignal     = 20
	minNoise      = 1e-6
	minLen        = 0.03
	maxLen        = 10
)

// Fit implements Surrogate.
func (s *GPSurrogate) Fit(ctx context.Context, xs [][]float64, ys []float64) error {
	if len(xs) != len(ys) || len(ys) == 0 {
		return fmt.Errorf("bo: gp surrogate: fit %d inputs and %d outputs", len(xs), len(ys))
	}
	var mu float64
	for _, y := range ys {
		mu += y
	}
	mu /= float64(len(ys))
	if s.o.FixedMean {
		mu = s.o.Mean
	}
	var ss float64
	for _, y := range ys {
		ss += (y - mu) * (y - mu)
	}
	sd := math.Sqrt(ss / float64(len(ys)))
	if !(sd > 1e-12) {
		sd = math.Max(math.Abs(mu)*0.1, 1e-6)
	}
	z := make([]float64, len(ys))
	for i, y := range ys {
		z[i] = (y - mu) / sd
	}
	s.sdFit = sd
	h, err := s.fitHyper(ctx, xs, z)
	if err != nil {
		return err
	}
	g, err := posterior(s.dim, h, xs, z)
	if err != nil {
		return err
	}
	s.g, s.mu, s.sd = g, mu, sd
	s.xs, s.z = append([][]float64(nil), xs...), z
	return nil
}

// With implements Conditioner: the extra points are standardised like the fitted data.
func (s *GPSurrogate) With(xs [][]float64, ys []float64) (Surrogate, error) {
	if s.g == nil {
		return nil, fmt.Errorf("bo: gp surrogate: condition before the first fit")
	}
	if len(xs) != len(ys) {
		return nil, fmt.Errorf("bo: gp surrogate: condition on %d inputs and %d outputs", len(xs), len(ys))
	}
	c := *s
	c.xs = append(append([][]float64(nil), s.xs...), xs...)
	c.z = append([]float64(nil), s.z...)
	for _, y := range ys {
		c.z = append(c.z, (y-s.mu)/s.sd)
	}
	g, err := posterior(s.dim, s.g.Hyper(), c.xs, c.z)
	if err != nil {
		return nil, err
	}
	c.g = g
	return &c, nil
}

// posterior returns the GP with hyperparameters h conditioned on (xs, z).
func posterior(dim int, h gp.Hyper, xs [][]float64, z []float64) (*gp.GP, error) {
	g, err := gp.New(dim, h)
	if err != nil {
		return nil, fmt.Errorf("bo: gp surrogate: %w", err)
	}
	for i, x := range xs {
		if err := g.Add(x, z[i]); err != nil {
			return nil, fmt.Errorf("bo: gp surrogate: add sample %d: %w", i, err)
		}
	}
	return g, nil
}

// hyper maps θ = (log SignalVar, log NoiseVar, log LengthScales...) to gp.Hyper (mean 0).
func hyper(t []float64) gp.Hyper {
	h := gp.Hyper{SignalVar: math.Exp(t[0]), NoiseVar: math.Exp(t[1]), LengthScales: make([]float64, len(t)-2)}
	for d := range h.LengthScales {
		h.LengthScales[d] = math.Exp(t[2+d])
	}
	return h
}

// fitHyper maximises the log posterior of the hyperparameters for standardised data z.
func (s *GPSurrogate) fitHyper(ctx context.Context, xs [][]float64, z []float64) (gp.Hyper, error) {
	nt := 2 + s.dim
	lo := make([]float64, nt)
	hi := make([]float64, nt)
	lo[0], hi[0] = math.Log(minSignal), math.Log(maxSignal)
	lo[1], hi[1] = math.Log(minNoise), math.Log(s.o.MaxNoise)
	if s.o.MinNoiseSD > 0 && s.sdFit > 0 {
		// The floor is absolute; the search runs on y standardised by sdFit.
		r := s.o.MinNoiseSD / s.sdFit
		lo[1] = math.Max(lo[1], math.Log(r*r))
		hi[1] = math.Max(hi[1], lo[1])
	}
	for d := 2; d < nt; d++ {
		lo[d], hi[d] = math.Log(minLen), math.Log(maxLen)
	}
	def := make([]float64, nt)
	def[0], def[1] = 0, math.Min(math.Max(math.Log(math.Min(0.01, s.o.MaxNoise)), lo[1]), hi[1])
	for d := 2; d < nt; d++ {
		def[d] = priorLogLen
	}
	if len(z) < 3 {
		return hyper(def), nil
	}
	clampT := func(t []float64) []float64 {
		out := make([]float64, nt)
		for i := range t {
			out[i] = math.Min(math.Max(t[i], lo[i]), hi[i])
		}
		return out
	}
	// Negative log posterior with a quadratic penalty outside the bounds.
	best, bestT := math.Inf(1), []float64(nil)
	var ws gp.LMLWorkspace
	eval := func(t []float64, grad []float64) float64 {
		ct := clampT(t)
		lml, lg, err := ws.LogMarginalLikelihoodGrad(xs, z, hyper(ct))
		if err != nil || math.IsNaN(lml) || math.IsInf(lml, 0) {
			for i := range grad {
				grad[i] = 0
			}
			return math.Inf(1)
		}
		f := -lml
		if grad != nil {
			grad[0] = -lg[gp.GradLogSignalVar]
			grad[1] = -lg[gp.GradLogNoiseVar]
			for d := 0; d < s.dim; d++ {
				grad[2+d] = -lg[gp.GradLogLength0+d]
			}
		}
		for d := 2; d < nt; d++ {
			r := (ct[d] - priorLogLen) / priorLogLenSD
			f += r * r / 2
			if grad != nil {
				grad[d] += r / priorLogLenSD
			}
		}
		pen := 0.0
		for i := range t {
			if e := t[i] - ct[i]; e != 0 {
				pen += 100 * e * e
				if grad != nil {
					grad[i] += 200 * e
				}
			}
		}
		if pen == 0 && f < best {
			best, bestT = f, append([]float64(nil), t...)
		}
		return f + pen
	}
	prob := optimize.Problem{
		Func: func(t []float64) float64 { return eval(t, nil) },
		Grad: func(g, t []float64) { eval(t, g) },
	}
	starts := [][]float64{def}
	if s.last != nil {
		starts = append(starts, s.last)
	}
	rng := rand.New(rand.NewPCG(s.o.Seed, uint64(len(z))))
	for range s.o.Restarts {
		t := make([]float64, nt)
		for i := range t {
			t[i] = lo[i] + rng.Float64()*(hi[i]-lo[i])
		}
		t[1] = math.Log(1e-3) + rng.Float64()*(hi[1]-math.Log(1e-3))
		starts = append(starts, t)
	}
	for _, st := range starts {
		if err := ctx.Err(); err != nil {
			return gp.Hyper{}, fmt.Errorf("bo: gp surrogate: fit: %w", err)
		}
		eval(st, nil)
		// A failed line search is tolerated: eval keeps the best point visited.
		_, _ = optimize.Minimize(prob, st, &optimize.Settings{MajorIterations: 50, GradientThreshold: 1e-5}, &optimize.LBFGS{})
	}
	if bestT == nil {
		return hyper(def), nil
	}
	s.last = clampT(bestT)
	return hyper(s.last), nil
}

// NoiseVar implements NoiseModel: the fitted observation-noise variance in units of y² (0
// before the first fit).
func (s *GPSurrogate) NoiseVar() float64 {
	if s.g == nil {
		return 0
	}
	return s.g.Hyper().NoiseVar * s.sd * s.sd
}

// Predict implements Surrogate; before the first Fit it returns mean 0 and variance +Inf.
func (s *GPSurrogate) Predict(x []float64) (mean, variance float64) {
	if s.g == nil {
		return 0, math.Inf(1)
	}
	m, v := s.g.Predict(x)
	return s.mu + s.sd*m, s.sd * s.sd * v
}
