package randpick

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestIndexFollowsWeights: over 100k seeded draws each index's frequency is within 1
// percentage point of its weight share (the binomial standard deviation is at most
// 0.16 points, so this cannot fail by chance), and a zero weight is never drawn.
func TestIndexFollowsWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	w := []float64{1, 0, 3, 6}
	n := make([]int, len(w))
	const draws = 100000
	for range draws {
		n[Index(rng, w)]++
	}
	for i, c := range n {
		if share := w[i] / 10; math.Abs(float64(c)/draws-share) > 0.01 {
			t.Errorf("index %d drawn %.3f of the time, want %.3f", i, float64(c)/draws, share)
		}
	}
	if n[1] != 0 {
		t.Errorf("zero weight drawn %d times", n[1])
	}
}
