package gp

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/floats"
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

// LMLWorkspace keeps the likelihood's buffers between evaluations, so that a
// hyperparameter fit, which evaluates it dozens of times on the same samples, allocates
// them once, and the squared coordinate differences of every pair of the inputs it last
// saw, which do not depend on the hyperparameters (the inputs are compared by value on
// every call, so a caller may change them between calls). The zero value is ready to
// use; it is not safe for concurrent use.
type LMLWorkspace struct {
	k, dk, row []float64
	// xs is the inputs the pairs were computed from, flattened; sq holds, for every pair
	// i < j in row order, (x_i[d] − x_j[d])² for each dimension d.
	xs, sq []float64
}

// pairs returns the squared coordinate differences of every pair of xs (dim values per
// pair, pairs i < j in row order), recomputed only when xs differs from the last call's.
func (w *LMLWorkspace) pairs(xs [][]float64, dim int) []float64 {
	n := len(xs)
	same := len(w.xs) == n*dim
	for i := 0; same && i < n; i++ {
		same = slices.Equal(w.xs[i*dim:i*dim+dim], xs[i])
	}
	if same {
		return w.sq
	}
	w.xs = w.xs[:0]
	for _, x := range xs {
		w.xs = append(w.xs, x...)
	}
	w.sq = slices.Grow(w.sq[:0], n*(n-1)/2*dim)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			for d := 0; d < dim; d++ {
				t := xs[i][d] - xs[j][d]
				w.sq = append(w.sq, t*t)
			}
		}
	}
	return w.sq
}

// grow returns w's buffers resized to n·n entries, and a row of n.
func (w *LMLWorkspace) grow(n int) (k, dk, row []float64) {
	if cap(w.k) < n*n {
		w.k, w.dk, w.row = make([]float64, n*n), make([]float64, n*n), make([]float64, n)
	}
	return w.k[:n*n], w.dk[:n*n], w.row[:n]
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
	// exponential is computed once; the squared distances come from the pairs cached in
	// w. The Cholesky factor runs on the raw storage through LAPACK (mat.Cholesky would
	// also estimate the condition number, which costs more than the factorisation at these
	// sizes and is not used), the solves and the inverse as row operations.
	sf2, diag := h.SignalVar, h.SignalVar+h.diagNoise()
	inv2 := make([]float64, dim)
	for d, l := range h.LengthScales {
		inv2[d] = 1 / (l * l)
	}
	sq := w.pairs(xs, dim)
	k, dk, tmp := w.grow(n) // dk[i*n+j], j > i: sf2·g(r_ij)
	p := 0
	for i := 0; i < n; i++ {
		k[i*n+i] = diag
		for j := i + 1; j < n; j++ {
			var r2 float64
			for d, s := range sq[p : p+dim] {
				r2 += s * inv2[d]
			}
			p += dim
			m, g := matern52WithLogLenFactor(math.Sqrt(r2))
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
	// K⁻¹ = U⁻¹U⁻ᵀ: U⁻¹ replaces U in k's upper triangle, and the entries of K⁻¹ the
	// trace needs are dot products of its rows, taken where the gradient uses them.
	invertUpper(n, n, k, tmp)
	rta := 0.0
	for i := range r {
		rta += r[i] * a[i]
	}
	lml = -0.5*rta - 0.5*logDet - 0.5*float64(n)*math.Log(2*math.Pi)

	grad = make([]float64, GradLogLength0+dim)
	for _, v := range a {
		grad[GradMean] += v
	}
	gl := grad[GradLogLength0:]
	p = 0
	var gs, gn float64
	for i := 0; i < n; i++ {
		// Diagonal: W_ii = α_i² − K⁻¹_ii; ∂K_ii/∂log σ_f² = σ_f², ∂K_ii/∂log σ_n² = σ_n².
		// K⁻¹_ij = Σ_{l≥j} U⁻¹_il U⁻¹_jl for j ≥ i: both rows from column j on.
		ui := k[i*n : i*n+n]
		wii := a[i]*a[i] - floats.Dot(ui[i:], ui[i:])
		gs += 0.5 * wii * sf2 * (1 + jitter)
		gn += 0.5 * wii * h.NoiseVar
		for j := i + 1; j < n; j++ {
			// Off-diagonal pairs count twice in the trace.
			w := a[i]*a[j] - floats.Dot(ui[j:], k[j*n+j:j*n+n])
			gs += w * k[j*n+i]
			f := w * dk[i*n+j]
			for d, s := range sq[p : p+dim] {
				gl[d] += f * s
			}
			p += dim
		}
	}
	for d := range gl {
		gl[d] *= inv2[d]
	}
	grad[GradLogSignalVar] = gs
	grad[GradLogNoiseVar] = gn
	return lml, grad, nil
}
