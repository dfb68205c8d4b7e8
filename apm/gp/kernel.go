package gp

import "math"

const sqrt5 = 2.23606797749979

// matern52 returns the Matérn 5/2 correlation at scaled distance r (unit signal variance):
// (1 + √5 r + 5r²/3) exp(−√5 r).
func matern52(r float64) float64 {
	s := sqrt5 * r
	return (1 + s + s*s/3) * math.Exp(-s)
}

// matern52WithLogLenFactor returns matern52(r) and g(r) = (5/3)(1 + √5 r) exp(−√5 r)
// with one exponential. The derivative of the kernel sf2·matern52(r) with respect to
// log ℓ_d is sf2·g(r)·Δ_d²/ℓ_d².
func matern52WithLogLenFactor(r float64) (k, g float64) {
	s := sqrt5 * r
	e := math.Exp(-s)
	return (1 + s + s*s/3) * e, 5.0 / 3.0 * (1 + s) * e
}

// scaledDist returns the Euclidean distance between a and b after dividing every coordinate
// by its length scale.
func scaledDist(a, b, ls []float64) float64 {
	var s float64
	for d := range a {
		t := (a[d] - b[d]) / ls[d]
		s += t * t
	}
	return math.Sqrt(s)
}

// kern returns the covariance sf2·matern52 between a and b under hyperparameters h
// (without observation noise).
func kern(a, b []float64, h *Hyper) float64 {
	return h.SignalVar * matern52(scaledDist(a, b, h.LengthScales))
}
