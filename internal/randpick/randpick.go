// Package randpick draws weighted random choices for the benchmarks' generators.
package randpick

import "math/rand/v2"

// Index draws an index of w with probability proportional to w[i] (weights >= 0, not all
// 0); the last index absorbs rounding.
func Index(rng *rand.Rand, w []float64) int {
	t := 0.0
	for _, v := range w {
		t += v
	}
	r := rng.Float64() * t
	for k, v := range w {
		if r < v {
			return k
		}
		r -= v
	}
	return len(w) - 1
}
