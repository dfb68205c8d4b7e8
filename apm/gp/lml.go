package gp

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
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
	k := kernelMatrix(xs, &h)
	var chol mat.Cholesky
	if !chol.Factorize(k) {
		return 0, nil, fmt.Errorf("gp: kernel matrix of %d samples is not positive definite", n)
	}
	r := mat.NewVecDense(n, nil)
	for i, y := range ys {
		r.SetVec(i, y-h.Mean)
	}
	var alpha mat.VecDense
	var ce mat.Condition
	if err := chol.SolveVecTo(&alpha, r); err != nil && !errors.As(err, &ce) {
		return 0, nil, fmt.Errorf("gp: solve: %w", err)
	}
	var kinv mat.SymDense
	if err := chol.InverseTo(&kinv); err != nil && !errors.As(err, &ce) {
		return 0, nil, fmt.Errorf("gp: invert: %w", err)
	}
	a := alpha.RawVector().Data
	lml = -0.5*mat.Dot(r, &alpha) - 0.5*chol.LogDet() - 0.5*float64(n)*math.Log(2*math.Pi)

	grad = make([]float64, GradLogLength0+dim)
	for _, v := range a {
		grad[GradMean] += v
	}
	inv2 := make([]float64, dim)
	for d, l := range h.LengthScales {
		inv2[d] = 1 / (l * l)
	}
	kd := kinv.RawSymmetric()
	var gs, gn float64
	for i := 0; i < n; i++ {
		// Diagonal: W_ii = α_i² − K⁻¹_ii; ∂K_ii/∂log σ_f² = σ_f², ∂K_ii/∂log σ_n² = σ_n².
		wii := a[i]*a[i] - kd.Data[i*kd.Stride+i]
		gs += 0.5 * wii * h.SignalVar * (1 + jitter)
		gn += 0.5 * wii * h.NoiseVar
		for j := i + 1; j < n; j++ {
			// Off-diagonal pairs count twice in the trace.
			w := a[i]*a[j] - kd.Data[i*kd.Stride+j]
			rr := scaledDist(xs[i], xs[j], h.LengthScales)
			gs += w * h.SignalVar * matern52(rr)
			f := w * h.SignalVar * matern52LogLenFactor(rr)
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
