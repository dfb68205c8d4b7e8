package gp

import (
	"fmt"
	"math"
)

// evictionIndex returns the sample to drop from a full window: the oldest sample of the
// crowded regions — those whose count of neighbours (see near) is at least half the largest
// such count — or the oldest sample if every sample is isolated.
//
// Evicting the oldest sample that had any neighbour emptied whole regions: a workload
// visited early had its samples evicted one by one, each still having a neighbour, while the
// current workload filled the window; when the early workload returned the GP had forgotten
// it. Taking the oldest of the crowded samples keeps the window's recency inside the regions
// that dominate it and the coverage of the sparse ones.
func (g *GP) evictionIndex() int {
	top := 0
	for _, c := range g.cnt {
		top = max(top, c)
	}
	if top == 0 {
		return 0
	}
	floor := (top + 1) / 2
	for i, c := range g.cnt {
		if c >= floor {
			return i
		}
	}
	return 0
}

// near reports whether samples a and b cover the same region of feature space: within the
// coverage radius in length-scale units and, with WithRelativeCoverage, within the relative
// radius in every feature. Length scales fitted to a few workloads are often longer than
// the distance between them, which would make every sample a neighbour of every other.
func (g *GP) near(a, b []float64) bool {
	if scaledDist(a, b, g.h.LengthScales) >= g.radius {
		return false
	}
	if g.relRadius == 0 {
		return true
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) >= g.relRadius*math.Max(math.Max(math.Abs(a[i]), math.Abs(b[i])), 1e-12) {
			return false
		}
	}
	return true
}

// addNeighbours updates the neighbour counts for the sample just appended as the last one.
func (g *GP) addNeighbours(x []float64) {
	last := len(g.xs) - 1
	cnt := 0
	for i := 0; i < last; i++ {
		if g.near(g.xs[i], x) {
			g.cnt[i]++
			cnt++
		}
	}
	g.cnt = append(g.cnt, cnt)
}

// recountNeighbours recomputes every neighbour count (O(n²·dim)); used after the length
// scales change.
func (g *GP) recountNeighbours() {
	n := len(g.xs)
	g.cnt = g.cnt[:0]
	for i := 0; i < n; i++ {
		g.cnt = append(g.cnt, 0)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if g.near(g.xs[i], g.xs[j]) {
				g.cnt[i]++
				g.cnt[j]++
			}
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
	g.cnt = append(g.cnt[:k], g.cnt[k+1:]...)
	for i, x := range g.xs {
		if g.near(x, removed) {
			g.cnt[i]--
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
