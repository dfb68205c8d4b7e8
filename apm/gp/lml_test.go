package gp

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
)

// TestInvertUpperMatchesLAPACK checks the row-axpy triangular inverse against LAPACK's
// Potri on the Cholesky factor of a random kernel matrix: U⁻¹ times U is the identity
// and U⁻¹U⁻ᵀ equals Potri's K⁻¹. Tolerance 1e-9 relative to K⁻¹'s largest entry: both
// are backward-stable algorithms on a matrix of condition ~1e4, so they agree to about
// 1e-12; a wrong index or sign fails by O(1).
func TestInvertUpperMatchesLAPACK(t *testing.T) {
	xs, _ := randomData(21, 40, 3, 0)
	h := Hyper{SignalVar: 2, NoiseVar: 0.05, LengthScales: []float64{0.6, 0.9, 0.4}}
	n := len(xs)
	k := make([]float64, n*n)
	for i := range n {
		for j := range n {
			k[i*n+j] = kern(xs[i], xs[j], &h)
		}
		k[i*n+i] += h.diagNoise()
	}
	u, ok := lapack64.Potrf(blas64.Symmetric{Uplo: blas.Upper, N: n, Stride: n, Data: k})
	if !ok {
		t.Fatal("kernel matrix not positive definite")
	}
	w := append([]float64(nil), u.Data...)
	invertUpper(n, n, w, make([]float64, n))
	for i := range n {
		for j := i; j < n; j++ {
			var s float64 // (U⁻¹U)_ij
			for l := i; l <= j; l++ {
				s += w[i*n+l] * u.Data[l*n+j]
			}
			if want := b2f(i == j); math.Abs(s-want) > 1e-9 {
				t.Fatalf("(U⁻¹U)[%d][%d] = %g, want %g", i, j, s, want)
			}
		}
	}
	ref := append([]float64(nil), u.Data...)
	kinv, ok := lapack64.Potri(blas64.Triangular{Uplo: blas.Upper, Diag: blas.NonUnit, N: n, Stride: n, Data: ref})
	if !ok {
		t.Fatal("Potri failed")
	}
	scale := 0.0
	for i := range n {
		for j := i; j < n; j++ {
			scale = math.Max(scale, math.Abs(kinv.Data[i*n+j]))
		}
	}
	for i := range n {
		for j := i; j < n; j++ {
			var s float64
			for l := j; l < n; l++ {
				s += w[i*n+l] * w[j*n+l]
			}
			if d := math.Abs(s - kinv.Data[i*n+j]); d > 1e-9*scale {
				t.Fatalf("K⁻¹[%d][%d] = %g, Potri %g", i, j, s, kinv.Data[i*n+j])
			}
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestWorkspaceSeesChangedInputs changes an input in place between two evaluations on
// one workspace: the cached pair differences must be recomputed, so the second result
// equals a fresh workspace's (exactly: the same arithmetic on the same values), and
// differs from the first.
func TestWorkspaceSeesChangedInputs(t *testing.T) {
	xs, ys := randomData(8, 30, 2, 0.1)
	h := Hyper{Mean: 10, SignalVar: 4, NoiseVar: 0.05, LengthScales: []float64{0.5, 0.8}}
	var w LMLWorkspace
	before, _, err := w.LogMarginalLikelihoodGrad(xs, ys, h)
	if err != nil {
		t.Fatal(err)
	}
	xs[3][1] += 0.5 * rand.New(rand.NewPCG(1, 2)).Float64()
	got, g1, err := w.LogMarginalLikelihoodGrad(xs, ys, h)
	if err != nil {
		t.Fatal(err)
	}
	want, g2, err := LogMarginalLikelihoodGrad(xs, ys, h)
	if err != nil {
		t.Fatal(err)
	}
	if got != want || got == before {
		t.Fatalf("after the change: workspace %v, fresh %v, before %v", got, want, before)
	}
	for i := range g1 {
		if g1[i] != g2[i] {
			t.Fatalf("grad[%d]: workspace %v, fresh %v", i, g1[i], g2[i])
		}
	}
}
