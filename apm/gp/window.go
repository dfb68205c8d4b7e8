package gp

import (
	"fmt"
	"math"
)

// evictionIndex returns the sample to drop from a full window: the oldest sample whose
// nearest neighbour lies within the coverage radius (its region stays covered by that
// neighbour), or the oldest sample if every sample is isolated.
func (g *GP) evictionIndex() int {
	for i, d := range g.nn {
		if d < g.radius {
			return i
		}
	}
	return 0
}

// addNN updates nearest-neighbour distances for the sample just appended as the last one.
func (g *GP) addNN(x []float64) {
	last := len(g.xs) - 1
	best := math.Inf(1)
	for i := 0; i < last; i++ {
		d := scaledDist(g.xs[i], x, g.h.LengthScales)
		if d < g.nn[i] {
			g.nn[i] = d
		}
		if d < best {
			best = d
		}
	}
	g.nn = append(g.nn, best)
}

// recomputeNN recomputes every nearest-neighbour distance (O(n²·dim)); used after the
// length scales change.
func (g *GP) recomputeNN() {
	n := len(g.xs)
	g.nn = g.nn[:0]
	for i := 0; i < n; i++ {
		g.nn = append(g.nn, math.Inf(1))
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			d := scaledDist(g.xs[i], g.xs[j], g.h.LengthScales)
			g.nn[i] = math.Min(g.nn[i], d)
			g.nn[j] = math.Min(g.nn[j], d)
		}
	}
}

// remove deletes sample k and downdates the Cholesky factor in O(n²) (see factor.remove).
func (g *GP) remove(k int) error {
	n := len(g.ys)
	if k < 0 || k >= n {
		return fmt.Errorf("remove index %d of %d samples", k, n)
	}
	removed := g.xs[k]
	g.xs = append(g.xs[:k], g.xs[k+1:]...)
	g.ys = append(g.ys[:k], g.ys[k+1:]...)
	g.nn = append(g.nn[:k], g.nn[k+1:]...)
	// Samples whose nearest neighbour was the removed one need a fresh search.
	for i, x := range g.xs {
		if scaledDist(x, removed, g.h.LengthScales) <= g.nn[i]*(1+1e-12) {
			best := math.Inf(1)
			for j, y := range g.xs {
				if j != i {
					best = math.Min(best, scaledDist(x, y, g.h.LengthScales))
				}
			}
			g.nn[i] = best
		}
	}
	g.z = g.chol.remove(k, g.z)
	return nil
}

// Remove deletes sample i (0 = oldest) in O(n²).
func (g *GP) Remove(i int) error {
	if err := g.remove(i); err != nil {
		return fmt.Errorf("gp: %w", err)
	}
	return nil
}
