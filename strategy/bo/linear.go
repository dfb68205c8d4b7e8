package bo

import (
	"fmt"

	"gonum.org/v1/gonum/mat"
)

// linear is a Bayesian linear regression y = w·[1, x] + ε, ε ~ N(0, noiseVar), with a flat
// prior on the intercept and N(0, slopeVar) priors on the slopes. It is the mean function of
// a GP surrogate; its posterior covariance keeps directions the data do not pin down
// uncertain.
type linear struct {
	w   []float64
	cov *mat.SymDense // posterior covariance of w
}

// fitLinear returns the posterior of w given the data.
func fitLinear(xs [][]float64, ys []float64, noiseVar, slopeVar float64) (*linear, error) {
	n, d := len(xs), len(xs[0])+1
	a := mat.NewDense(n, d, nil)
	for i, x := range xs {
		a.Set(i, 0, 1)
		for j, v := range x {
			a.Set(i, j+1, v)
		}
	}
	var prec mat.SymDense
	prec.SymOuterK(1/noiseVar, a.T())
	prec.SetSym(0, 0, prec.At(0, 0)+1e-6)
	for j := 1; j < d; j++ {
		prec.SetSym(j, j, prec.At(j, j)+1/slopeVar)
	}
	var ch mat.Cholesky
	if !ch.Factorize(&prec) {
		return nil, fmt.Errorf("linear trend: posterior precision not positive definite (%d samples, %d inputs)", n, d-1)
	}
	aty := mat.NewVecDense(d, nil)
	aty.MulVec(a.T(), mat.NewVecDense(n, ys))
	aty.ScaleVec(1/noiseVar, aty)
	w := mat.NewVecDense(d, nil)
	if err := ch.SolveVecTo(w, aty); err != nil {
		return nil, fmt.Errorf("linear trend: %w", err)
	}
	var cov mat.SymDense
	if err := ch.InverseTo(&cov); err != nil {
		return nil, fmt.Errorf("linear trend: %w", err)
	}
	return &linear{w: append([]float64(nil), w.RawVector().Data...), cov: &cov}, nil
}

// predict returns w·[1,x].
func (l *linear) predict(x []float64) float64 {
	s := l.w[0]
	for j, v := range x {
		s += l.w[j+1] * v
	}
	return s
}

// variance returns [1,x]ᵀ Cov(w) [1,x].
func (l *linear) variance(x []float64) float64 {
	v := make([]float64, len(x)+1)
	v[0] = 1
	copy(v[1:], x)
	vv := mat.NewVecDense(len(v), v)
	return mat.Inner(vv, l.cov, vv)
}
