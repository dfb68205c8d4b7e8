package gp

import (
	"math"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// factor is an upper-triangular Cholesky factor U (K = UᵀU) stored row-major with spare
// capacity, so that appending a row/column and deleting one are O(n²) without reallocation.
// Only the upper triangle of the leading n×n block is meaningful.
//
// gonum's mat.Cholesky offers ExtendVecSym and SymRankOne too, but every call reallocates the
// factor and re-estimates its condition number (several extra triangular solves), which made
// an update at window 200 an order of magnitude slower; so the incremental path lives here.
type factor struct {
	n, stride int
	u         []float64
}

// reserve makes room for n rows and columns.
func (f *factor) reserve(n int) {
	if n <= f.stride {
		return
	}
	s := max(2*f.stride, n, 8)
	u := make([]float64, s*s)
	for i := 0; i < f.n; i++ {
		copy(u[i*s+i:i*s+f.n], f.u[i*f.stride+i:i*f.stride+f.n])
	}
	f.u, f.stride = u, s
}

// reset empties the factor, keeping its buffer.
func (f *factor) reset() { f.n = 0 }

// factorize sets the factor of the symmetric matrix k (O(n³)); false if k is not positive
// definite.
func (f *factor) factorize(k *mat.SymDense) bool {
	var c mat.Cholesky
	if !c.Factorize(k) {
		return false
	}
	n := k.SymmetricDim()
	f.n = 0
	f.reserve(n)
	f.n = n
	r := c.RawU().(*mat.TriDense).RawTriangular()
	for i := 0; i < n; i++ {
		copy(f.u[i*f.stride+i:i*f.stride+n], r.Data[i*r.Stride+i:i*r.Stride+n])
	}
	return true
}

// extend appends a row and column to K: w holds the new off-diagonal covariances (len n) and
// kk the new diagonal entry. The new column of U is (c, d). It returns ok = false, leaving f
// unchanged, if the extended matrix is not numerically positive definite.
func (f *factor) extend(w []float64, kk float64) (c []float64, d float64, ok bool) {
	n := f.n
	c = append([]float64(nil), w...)
	f.solveUT(c)
	var dot float64
	for _, v := range c {
		dot += v * v
	}
	if !(kk-dot > 0) {
		return nil, 0, false
	}
	d = math.Sqrt(kk - dot)
	f.reserve(n + 1)
	for i, v := range c {
		f.u[i*f.stride+n] = v
	}
	f.u[n*f.stride+n] = d
	f.n = n + 1
	return c, d, true
}

// remove deletes row and column k of K in O(n²), and returns the solution z' of U'ᵀz' = r'
// (r without entry k) given z solving Uᵀz = r.
//
// With U partitioned around row/column k as [U11 u12 U13; 0 u22 u23; 0 0 U33], the factor of
// K without row and column k is [U11 U13; 0 U33'] where U33'ᵀU33' = U33ᵀU33 + u23ᵀu23: a
// rank-one update, done with Givens rotations Q such that Q[U33; u23] = [U33'; 0]. Applying
// the same rotations to [z3; z_k] yields z3' (z1 is unchanged), since
// U33'ᵀz3' = U33ᵀz3 + u23ᵀz_k.
func (f *factor) remove(k int, z []float64) []float64 {
	n, s := f.n, f.stride
	zk := z[k]
	z = append(z[:k], z[k+1:]...)
	x := append([]float64(nil), f.u[k*s+k+1:k*s+n]...)
	for i := 0; i < k; i++ {
		copy(f.u[i*s+k:i*s+n-1], f.u[i*s+k+1:i*s+n])
	}
	for i := k + 1; i < n; i++ {
		copy(f.u[(i-1)*s+i-1:(i-1)*s+n-1], f.u[i*s+i:i*s+n])
	}
	f.n = n - 1
	// Rank-one update of the trailing block (rows/columns k..n-2) by x.
	m := len(x)
	for j := 0; j < m; j++ {
		row := f.u[(k+j)*s+k : (k+j)*s+k+m]
		rjj := row[j]
		r := math.Hypot(rjj, x[j])
		c, sn := r/rjj, x[j]/rjj
		ic := rjj / r
		row[j] = r
		for l := j + 1; l < m; l++ {
			row[l] = (row[l] + sn*x[l]) * ic
			x[l] = c*x[l] - sn*row[l]
		}
		zj := (z[k+j] + sn*zk) * ic
		zk = c*zk - sn*zj
		z[k+j] = zj
	}
	return z
}

// solveUT overwrites b with U⁻ᵀb (O(n²)).
func (f *factor) solveUT(b []float64) { solveUpperTrans(f.n, f.stride, f.u, b) }

// solveUpperTrans overwrites b with U⁻ᵀb for the n×n upper triangle U stored row-major
// with the given stride: forward substitution by rows, each an axpy (gonum's Trsv runs
// the same arithmetic in a plain loop; this is the GP's hottest loop, one per Predict).
func solveUpperTrans(n, stride int, u, b []float64) {
	for i := 0; i < n; i++ {
		row := u[i*stride : i*stride+n]
		b[i] /= row[i]
		if xi := b[i]; xi != 0 {
			floats.AddScaled(b[i+1:n], -xi, row[i+1:n])
		}
	}
}

// invertUpper overwrites the upper triangle of the n×n row-major upper-triangular u (row
// stride stride) with U⁻¹, by rows from the last: row i of U⁻¹ is −(1/U_ii) Σ_{l>i} U_il
// times row l of U⁻¹, summed as row axpys (gonum's Dtrtri goes through a matrix-vector
// product per row, several times slower at a GP's sizes). tmp holds n values; the lower
// triangle is not touched.
func invertUpper(n, stride int, u, tmp []float64) {
	for i := n - 1; i >= 0; i-- {
		row := u[i*stride : i*stride+n]
		acc := tmp[i+1 : n]
		clear(acc)
		for l := i + 1; l < n; l++ {
			if c := row[l]; c != 0 {
				floats.AddScaled(tmp[l:n], c, u[l*stride+l:l*stride+n])
			}
		}
		d := 1 / row[i]
		row[i] = d
		for j := range acc {
			row[i+1+j] = -d * acc[j]
		}
	}
}

// logDet returns log|K| = 2 Σ log U_ii.
func (f *factor) logDet() float64 {
	var s float64
	for i := 0; i < f.n; i++ {
		s += math.Log(f.u[i*f.stride+i])
	}
	return 2 * s
}
