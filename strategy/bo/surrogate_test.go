package bo

import (
	"context"
	"math"
	"testing"
)

func TestGPSurrogateFitsAndPullsToFixedMean(t *testing.T) {
	// 8 noise-free samples of sin(2πx) on [0, 0.7]: the fit must interpolate within 0.05
	// at the midpoints (Matérn 5/2 with a length scale near the function's 0.16 scale).
	var xs [][]float64
	var ys []float64
	for i := range 8 {
		x := 0.1 * float64(i)
		xs, ys = append(xs, []float64{x}), append(ys, math.Sin(2*math.Pi*x))
	}
	s := NewGPSurrogate(1, GPOptions{Restarts: 2, Seed: 1})
	if err := s.Fit(context.Background(), xs, ys); err != nil {
		t.Fatal(err)
	}
	for _, x := range []float64{0.05, 0.25, 0.45, 0.65} {
		m, v := s.Predict([]float64{x})
		if math.Abs(m-math.Sin(2*math.Pi*x)) > 0.05 || v < 0 {
			t.Errorf("x=%.2f: mean %.3f ± %.3f, want %.3f ± 0.05", x, m, math.Sqrt(v), math.Sin(2*math.Pi*x))
		}
	}
	// With a fixed prior mean of 5, predictions away from the data are pulled towards 5:
	// above every observation, and above the prediction of the sample-mean surrogate.
	short := [][]float64{{0}, {0.02}, {0.04}, {0.06}}
	sy := []float64{0, 0.3, -0.2, 0.1}
	f := NewGPSurrogate(1, GPOptions{Restarts: 2, Seed: 1, FixedMean: true, Mean: 5})
	g := NewGPSurrogate(1, GPOptions{Restarts: 2, Seed: 1})
	for _, m := range []*GPSurrogate{f, g} {
		if err := m.Fit(context.Background(), short, sy); err != nil {
			t.Fatal(err)
		}
	}
	fm, _ := f.Predict([]float64{1})
	gm, _ := g.Predict([]float64{1})
	if !(fm > 0.3 && fm > gm+0.5) {
		t.Errorf("far prediction %.3f with fixed mean 5, %.3f with the sample mean: want the former pulled up", fm, gm)
	}
}

// Conditioning on a point at the posterior mean (a Kriging-believer fantasy) keeps the
// hyperparameters and the mean, shrinks the variance there, and leaves the receiver as it
// was.
func TestGPSurrogateWithFantasy(t *testing.T) {
	xs := [][]float64{{0.1}, {0.3}, {0.9}}
	ys := []float64{1, 2, 0.5}
	s := NewGPSurrogate(1, GPOptions{Restarts: 1, Seed: 3})
	if _, err := s.With(xs, ys); err == nil {
		t.Fatal("conditioning before a fit succeeded")
	}
	if err := s.Fit(context.Background(), xs, ys); err != nil {
		t.Fatal(err)
	}
	x := []float64{0.6}
	m0, v0 := s.Predict(x)
	c, err := s.With([][]float64{x}, []float64{m0})
	if err != nil {
		t.Fatal(err)
	}
	m1, v1 := c.Predict(x)
	if math.Abs(m1-m0) > 1e-9*math.Max(1, math.Abs(m0)) || !(v1 < 0.5*v0) {
		t.Fatalf("fantasy at the mean: mean %.6f -> %.6f, variance %.4g -> %.4g; want the mean kept and the variance at least halved", m0, m1, v0, v1)
	}
	if c.(*GPSurrogate).g.Hyper().SignalVar != s.g.Hyper().SignalVar {
		t.Fatal("conditioning changed the hyperparameters")
	}
	if m, v := s.Predict(x); m != m0 || v != v0 {
		t.Fatalf("receiver changed: %.6f ± %.4g, was %.6f ± %.4g", m, v, m0, v0)
	}
}
