package gp

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// Gradient component order of LogMarginalLikelihoodGrad.
const (
	GradMean         = 0 // ∂/∂Mean
	GradLogSignalVar = 1 // ∂/∂log SignalVar
	GradLogNoiseVar  = 2 // ∂/∂log NoiseVar
	GradLogLength0   = 3 // ∂/∂log LengthScales[d] is at GradLogLength0+d
)

// LogMarginalLikelihoodGrad returns the log marginal likelihood of (xs, ys) under h,
//
//	log p(y|X) = −½ rᵀK⁻¹r − ½ log|K| − n/2 log 2π,  r = y − Mean,
//
// and its gradient with respect to (Mean, log SignalVar, log NoiseVar, log LengthScales...)
// in the order of the Grad* constants: ∂/∂Mean = 1ᵀK⁻¹r and ∂/∂θ = ½ tr((ααᵀ − K⁻¹) ∂K/∂θ).
// It costs O(n³ + n²·dim).
func LogMarginalLikelihoodGrad(xs [][]float64, ys []float64, h Hyper) (lml float64, grad []float64, err error) {
	var w LMLWorkspace
	return w.LogMarginalLikelihoodGrad(xs, ys, h)
}

// LMLWorkspace keeps the two n×n buffers of the likelihood between evaluations, so that a
// hyperparameter fit, which evaluates it dozens of times on the same samples, allocates
// them once. The zero value is ready to use; it is not safe for concurrent use.
type LMLWorkspace struct {
	k, dk []float64
}

// grow returns w's buffers resized to n·n entries.
func (w *LMLWorkspace) grow(n int) (k, dk []float64) {
	if cap(w.k) < n*n {
		w.k, w.dk = make([]float64, n*n), make([]float64, n*n)
	}
	return w.k[:n*n], w.dk[:n*n]
}

// LogMarginalLikelihoodGrad is the package function of that name computed in w's buffers
// (every entry it reads is written first, so the buffers need no clearing).
func (w *LMLWorkspace) LogMarginalLikelihoodGrad(xs [][]float64, ys []float64, h Hyper) (lml float64, grad []float64, err error) {
	n := len(ys)
	if n == 0 || len(xs) != n {
		return 0, nil, fmt.Errorf("gp: likelihood of %d inputs and %d outputs", len(xs), n)
	}
	dim := len(xs[0])
	if err := h.validate(dim); err != nil {
		return 0, nil, err
	}
	for i, x := range xs {
		if len(x) != dim {
			return 0, nil, fmt.Errorf("gp: input %d has %d values, want %d", i, len(x), dim)
		}
	}
	// One pass builds the kernel (row-major, both triangles) and keeps, per pair, the
	// length-scale derivative factor sf2·g(r) that the gradient needs, so that every
	// exponential is computed once. The Cholesky factor, solve and inverse run on the raw
	// storage through LAPACK: mat.Cholesky would also estimate the condition number,
	// which costs more than the factorisation at these sizes and is not used.
	sf2, diag := h.SignalVar, h.SignalVar+h.diagNoise()
	k, dk := w.grow(n) // dk[i*n+j], j > i: sf2·g(r_ij)
	for i := 0; i < n; i++ {
		k[i*n+i] = diag
		for j := i + 1; j < n; j++ {
			m, g := matern52WithLogLenFactor(scaledDist(xs[i], xs[j], h.LengthScales))
			k[i*n+j] = sf2 * m
			k[j*n+i] = k[i*n+j] // the lower triangle survives the factorisation below
			dk[i*n+j] = sf2 * g
		}
	}
	t, ok := lapack64.Potrf(blas64.Symmetric{Uplo: blas.Upper, N: n, Stride: n, Data: k})
	if !ok {
		return 0, nil, fmt.Errorf("gp: kernel matrix of %d samples is not positive definite", n)
	}
	logDet := 0.0
	for i := 0; i < n; i++ {
		logDet += 2 * math.Log(k[i*n+i])
	}
	r := make([]float64, n)
	a := make([]float64, n)
	for i, y := range ys {
		r[i] = y - h.Mean
	}
	copy(a, r)
	// K = UᵀU: α = U⁻¹U⁻ᵀr by two triangular solves (Potrs with one right-hand side goes
	// through the matrix-matrix solve, several times slower at these sizes).
	solveUpperTrans(n, n, t.Data, a)
	blas64.Trsv(blas.NoTrans, blas64.Triangular{Uplo: blas.Upper, Diag: blas.NonUnit, N: n, Stride: n, Data: t.Data},
		blas64.Vector{N: n, Inc: 1, Data: a})
	kinv, ok := lapack64.Potri(t)
	if !ok {
		return 0, nil, fmt.Errorf("gp: kernel matrix of %d samples is singular", n)
	}
	rta := 0.0
	for i := range r {
		rta += r[i] * a[i]
	}
	lml = -0.5*rta - 0.5*logDet - 0.5*float64(n)*math.Log(2*math.Pi)

	grad = make([]float64, GradLogLength0+dim)
	for _, v := range a {
		grad[GradMean] += v
	}
	inv2 := make([]float64, dim)
	for d, l := range h.LengthScales {
		inv2[d] = 1 / (l * l)
	}
	kd := kinv.Data
	var gs, gn float64
	for i := 0; i < n; i++ {
		// Diagonal: W_ii = α_i² − K⁻¹_ii; ∂K_ii/∂log σ_f² = σ_f², ∂K_ii/∂log σ_n² = σ_n².
		wii := a[i]*a[i] - kd[i*n+i]
		gs += 0.5 * wii * sf2 * (1 + jitter)
		gn += 0.5 * wii * h.NoiseVar
		for j := i + 1; j < n; j++ {
			// Off-diagonal pairs count twice in the trace.
			w := a[i]*a[j] - kd[i*n+j]
			gs += w * k[j*n+i]
			f := w * dk[i*n+j]
			for d := 0; d < dim; d++ {
				t := xs[i][d] - xs[j][d]
				grad[GradLogLength0+d] += f * t * t * inv2[d]
			}
		}
	}
	grad[GradLogSignalVar] = gs
	grad[GradLogNoiseVar] = gn
	return lml, grad, nil
}
