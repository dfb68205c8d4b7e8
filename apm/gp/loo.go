package gp

import (
	"math"

	"gonum.org/v1/gonum/mat"
)

// LOOResiduals returns the standardised leave-one-out residual of every sample, oldest first:
// (y_i − μ_{−i}) / σ_{−i}, where μ_{−i} and σ²_{−i} are the predictive mean and the variance
// of a new observation at x_i from all other samples. In closed form (Rasmussen & Williams
// §5.4.2) this is α_i / √[K⁻¹]_ii with α = K⁻¹(y − Mean). It costs O(n³).
func (g *GP) LOOResiduals() []float64 {
	n := len(g.ys)
	if n == 0 {
		return nil
	}
	u := mat.NewTriDense(n, mat.Upper, nil)
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			u.SetTri(i, j, g.chol.u[i*g.chol.stride+j])
		}
	}
	var inv mat.TriDense
	if err := inv.InverseTri(u); err != nil {
		// Only a singular factor fails, which Add and refactor never install.
		out := make([]float64, n)
		for i := range out {
			out[i] = math.NaN()
		}
		return out
	}
	// K⁻¹ = U⁻¹U⁻ᵀ: [K⁻¹]_ii is the squared norm of row i of U⁻¹, and α = U⁻¹z.
	out := make([]float64, n)
	for i := 0; i < n; i++ {
		var d, a float64
		for j := i; j < n; j++ {
			v := inv.At(i, j)
			d += v * v
			a += v * g.z[j]
		}
		out[i] = a / math.Sqrt(d)
	}
	return out
}
