// Package gp implements Gaussian-process regression with a constant mean, an ARD Matérn 5/2
// kernel and Gaussian observation noise, as used by Trident's observation layer (paper §4.2)
// and by the Bayesian optimiser of the adaptation layer.
//
// Units. Inputs and outputs are used in their own units: Hyper.Mean and the variances are in
// units of y (and y²), length scales in units of each input feature. Nothing is rescaled
// behind the caller's back, so a Hyper can be compared with, or handed to, another GP
// implementation unchanged. Fit standardises y and measures the spread of every feature only to
// choose starting points and bounds for the hyperparameters (see FitOptions).
//
// Cost. Add extends the Cholesky factor of the kernel matrix by one row (O(n²)); when a
// window is set and full, one sample is evicted first by a rank-one update of the trailing
// block of the factor (O(n²)). Predict costs O(n·dim + n²). Fit is O(n³) per likelihood
// evaluation. A GP is not safe for concurrent use.
package gp

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Hyper holds the GP hyperparameters.
type Hyper struct {
	// Mean is the constant prior mean of y.
	Mean float64
	// SignalVar is the kernel amplitude σ_f² (variance of the latent function).
	SignalVar float64
	// NoiseVar is the observation noise variance σ_n².
	NoiseVar float64
	// LengthScales holds one Matérn length scale per input dimension (ARD).
	LengthScales []float64
}

// DefaultHyper returns unit hyperparameters for dim inputs: mean 0, signal variance 1,
// noise variance 0.01 and length scale 1 per dimension.
func DefaultHyper(dim int) Hyper {
	ls := make([]float64, dim)
	for i := range ls {
		ls[i] = 1
	}
	return Hyper{Mean: 0, SignalVar: 1, NoiseVar: 0.01, LengthScales: ls}
}

// Clone returns a deep copy of h.
func (h Hyper) Clone() Hyper {
	h.LengthScales = append([]float64(nil), h.LengthScales...)
	return h
}

// validate reports whether h is usable for dim inputs.
func (h Hyper) validate(dim int) error {
	if len(h.LengthScales) != dim {
		return fmt.Errorf("gp: %d length scales for %d inputs", len(h.LengthScales), dim)
	}
	if !finite(h.Mean) {
		return fmt.Errorf("gp: mean %v is not finite", h.Mean)
	}
	if !(h.SignalVar > 0) || math.IsInf(h.SignalVar, 0) {
		return fmt.Errorf("gp: signal variance %v must be positive and finite", h.SignalVar)
	}
	if !(h.NoiseVar >= 0) || math.IsInf(h.NoiseVar, 0) {
		return fmt.Errorf("gp: noise variance %v must be non-negative and finite", h.NoiseVar)
	}
	for i, l := range h.LengthScales {
		if !(l > 0) || math.IsInf(l, 0) {
			return fmt.Errorf("gp: length scale %d = %v must be positive and finite", i, l)
		}
	}
	return nil
}

// jitter is added to the kernel diagonal, relative to the signal variance, so that the
// factorisation stays positive definite when the noise variance is (close to) zero.
const jitter = 1e-10

// diagNoise returns the value added to the kernel diagonal.
func (h *Hyper) diagNoise() float64 { return h.NoiseVar + jitter*h.SignalVar }

// Option configures a GP.
type Option func(*GP) error

// WithWindow bounds the number of samples kept to n (n >= 2); 0 keeps all samples.
// When a sample arrives at a full window, the oldest sample of the crowded regions is
// evicted (the oldest whose number of neighbours is at least half the largest such number;
// see WithCoverageRadius and WithRelativeCoverage), so that sparsely sampled regions of
// feature space keep their samples; if every sample is isolated, the oldest one is evicted.
func WithWindow(n int) Option {
	return func(g *GP) error {
		if n != 0 && n < 2 {
			return fmt.Errorf("gp: window %d must be 0 (unbounded) or at least 2", n)
		}
		g.window = n
		return nil
	}
}

// WithCoverageRadius sets the distance, in length-scale units, below which two samples are
// considered to cover the same region of feature space for window eviction (default 0.5).
func WithCoverageRadius(r float64) Option {
	return func(g *GP) error {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("gp: coverage radius %v must be positive and finite", r)
		}
		g.radius = r
		return nil
	}
}

// WithRelativeCoverage additionally requires two samples that cover the same region for
// window eviction to differ by less than r relative to the larger magnitude in every
// feature (default 0: off). Length scales fitted to data from a few regions are often
// longer than the distance between the regions; the length-scale radius alone then makes
// every sample a neighbour of every other, and the window evicts the oldest region first.
func WithRelativeCoverage(r float64) Option {
	return func(g *GP) error {
		if !(r >= 0) || math.IsInf(r, 0) {
			return fmt.Errorf("gp: relative coverage %v must be non-negative and finite", r)
		}
		g.relRadius = r
		return nil
	}
}

// GP is a Gaussian-process regressor over dim-dimensional inputs.
type GP struct {
	dim    int
	h      Hyper
	window int
	// radius (length-scale units) and relRadius (relative, 0: off) define the neighbours
	// that window eviction counts.
	radius, relRadius float64

	xs   [][]float64 // samples in arrival order
	ys   []float64
	cnt  []int // number of other samples near each sample (see GP.near)
	chol factor
	z    []float64 // U⁻ᵀ (y − mean), with K = UᵀU; maintained in O(n) per Add
}

// New returns an empty GP over dim inputs with hyperparameters h.
func New(dim int, h Hyper, opts ...Option) (*GP, error) {
	if dim < 1 {
		return nil, fmt.Errorf("gp: dimension %d must be at least 1", dim)
	}
	if err := h.validate(dim); err != nil {
		return nil, err
	}
	g := &GP{dim: dim, h: h.Clone(), radius: 0.5}
	for _, o := range opts {
		if err := o(g); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Dim returns the input dimension.
func (g *GP) Dim() int { return g.dim }

// Len returns the number of samples held.
func (g *GP) Len() int { return len(g.ys) }

// Window returns the window size (0 = unbounded).
func (g *GP) Window() int { return g.window }

// Hyper returns a copy of the current hyperparameters.
func (g *GP) Hyper() Hyper { return g.h.Clone() }

// Data returns copies of the samples held, oldest first.
func (g *GP) Data() (xs [][]float64, ys []float64) {
	xs = make([][]float64, len(g.xs))
	for i, x := range g.xs {
		xs[i] = append([]float64(nil), x...)
	}
	return xs, append([]float64(nil), g.ys...)
}

// Reset drops all samples and keeps the hyperparameters.
func (g *GP) Reset() {
	g.xs, g.ys, g.cnt, g.z = nil, nil, nil, nil
	g.chol.reset()
}

// SetHyper replaces the hyperparameters and refactorises the kernel matrix (O(n³)).
func (g *GP) SetHyper(h Hyper) error {
	if err := h.validate(g.dim); err != nil {
		return err
	}
	old := g.h
	g.h = h.Clone()
	if err := g.refactor(); err != nil {
		g.h = old
		if err2 := g.refactor(); err2 != nil {
			return errors.Join(err, err2)
		}
		return err
	}
	g.recountNeighbours()
	return nil
}

// Add appends the observation (x, y), evicting one sample first if the window is full.
func (g *GP) Add(x []float64, y float64) error {
	if len(x) != g.dim {
		return fmt.Errorf("gp: sample has %d inputs, want %d", len(x), g.dim)
	}
	for i, v := range x {
		if !finite(v) {
			return fmt.Errorf("gp: input %d = %v is not finite", i, v)
		}
	}
	if !finite(y) {
		return fmt.Errorf("gp: output %v is not finite", y)
	}
	if g.window > 0 && len(g.ys) >= g.window {
		if err := g.remove(g.evictionIndex()); err != nil {
			return fmt.Errorf("gp: evict: %w", err)
		}
	}
	x = append([]float64(nil), x...)
	w := make([]float64, len(g.ys))
	for i, xi := range g.xs {
		w[i] = kern(xi, x, &g.h)
	}
	g.xs = append(g.xs, x)
	g.ys = append(g.ys, y)
	g.addNeighbours(x)
	c, d, ok := g.chol.extend(w, g.h.SignalVar+g.h.diagNoise())
	if !ok {
		// Numerically singular extension (e.g. a duplicate input with tiny noise): fall back
		// to a full factorisation, which reports a clear error if it fails too.
		if err := g.refactor(); err != nil {
			return g.rollback(err)
		}
		return nil
	}
	// The new row of Uᵀz = r: cᵀz + d·z_n = y − mean.
	var cz float64
	for i, v := range c {
		cz += v * g.z[i]
	}
	g.z = append(g.z, (y-g.h.Mean-cz)/d)
	return nil
}

// rollback drops the most recently appended sample after a failed update.
func (g *GP) rollback(err error) error {
	n := len(g.ys) - 1
	g.xs, g.ys = g.xs[:n], g.ys[:n]
	g.recountNeighbours()
	if err2 := g.refactor(); err2 != nil {
		return errors.Join(err, err2)
	}
	return err
}

// Predict returns the predictive mean and the variance of the latent function at x. The
// variance excludes observation noise; add Hyper().NoiseVar for the variance of a new
// observation. Without samples it returns the prior. It panics if len(x) != Dim().
func (g *GP) Predict(x []float64) (mean, variance float64) {
	if len(x) != g.dim {
		panic(fmt.Sprintf("gp: Predict with %d inputs, want %d", len(x), g.dim))
	}
	n := len(g.ys)
	if n == 0 {
		return g.h.Mean, g.h.SignalVar
	}
	// v = U⁻ᵀk*; mean = Mean + k*ᵀK⁻¹r = Mean + vᵀz; variance = σ_f² − vᵀv.
	v := make([]float64, n)
	for i, xi := range g.xs {
		v[i] = kern(xi, x, &g.h)
	}
	g.chol.solveUT(v)
	mean, variance = g.h.Mean, g.h.SignalVar
	for i, t := range v {
		mean += t * g.z[i]
		variance -= t * t
	}
	if variance < 0 {
		variance = 0
	}
	return mean, variance
}

// LogMarginalLikelihood returns log p(y | X, hyper) of the samples held (0 without samples).
func (g *GP) LogMarginalLikelihood() float64 {
	n := len(g.ys)
	if n == 0 {
		return 0
	}
	var fit float64 // rᵀK⁻¹r = zᵀz
	for _, v := range g.z {
		fit += v * v
	}
	return -0.5*fit - 0.5*g.chol.logDet() - 0.5*float64(n)*math.Log(2*math.Pi)
}

// refactor factorises the kernel matrix from scratch and recomputes z.
func (g *GP) refactor() error {
	if len(g.ys) == 0 {
		g.chol.reset()
		g.z = nil
		return nil
	}
	if !g.chol.factorize(kernelMatrix(g.xs, &g.h)) {
		g.chol.reset()
		return fmt.Errorf("gp: kernel matrix of %d samples is not positive definite", len(g.ys))
	}
	g.solveZ()
	return nil
}

// solveZ recomputes z = U⁻ᵀ (y − mean) from the current factor (O(n²)).
func (g *GP) solveZ() {
	g.z = make([]float64, len(g.ys))
	for i, y := range g.ys {
		g.z[i] = y - g.h.Mean
	}
	g.chol.solveUT(g.z)
}

// kernelMatrix returns K(X, X) + noise·I.
func kernelMatrix(xs [][]float64, h *Hyper) *mat.SymDense {
	n := len(xs)
	k := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		k.SetSym(i, i, h.SignalVar+h.diagNoise())
		for j := i + 1; j < n; j++ {
			k.SetSym(i, j, kern(xs[i], xs[j], h))
		}
	}
	return k
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
