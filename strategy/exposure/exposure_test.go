package exposure

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// gumbel draws a Gumbel variate with location loc and scale beta.
func gumbel(rng *rand.Rand, loc, beta float64) float64 {
	u := rng.Float64()
	for u == 0 {
		u = rng.Float64()
	}
	return loc - beta*math.Log(-math.Log(u))
}

// trial returns one instance's series of n scrapes every dt seconds whose blocks' maxima
// are Gumbel(loc + beta·ln dt, beta); sinceStart makes the gauge report the running
// maximum (the operator contract), else each block's own maximum.
func trial(rng *rand.Rand, loc, beta, dt float64, n int, sinceStart bool) *Series {
	s := &Series{}
	run := math.Inf(-1)
	for i := range n {
		x := gumbel(rng, loc+beta*math.Log(dt), beta)
		run = math.Max(run, x)
		v := x
		if sinceStart {
			v = run
		}
		s.Add(float64(i+1)*dt, v)
	}
	return s
}

// TestFitRecoversScale fits 400 trials of 31 scrapes (30 blocks of 10 s) with known
// μ = 50, β = 0.8 and checks the median estimates: the scale within 10 % (windowed
// gauge, every block exact) and 25 % (since-start gauge, only records exact), and the
// level of a 20-instance, 24-hour exposure within the same relative error of the
// extrapolated part, β·ln(E/300), of its true value.
func TestFitRecoversScale(t *testing.T) {
	const loc, beta, dt = 50.0, 0.8, 10.0
	exposure := 20 * 24 * 3600.0
	truth := loc + beta*math.Log(exposure)
	for _, tc := range []struct {
		name       string
		sinceStart bool
		tolScale   float64
	}{{"windowed", false, 0.10}, {"since start", true, 0.25}} {
		rng := rand.New(rand.NewPCG(1, 2))
		var scales, levels []float64
		for range 400 {
			f, err := FitSeries(trial(rng, loc, beta, dt, 31, tc.sinceStart))
			if errors.Is(err, ErrTooFew) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			scales, levels = append(scales, f.Scale), append(levels, f.Level(exposure))
		}
		if len(scales) < 300 {
			t.Fatalf("%s: only %d of 400 trials fitted", tc.name, len(scales))
		}
		ms, ml := median(scales), median(levels)
		if math.Abs(ms/beta-1) > tc.tolScale {
			t.Errorf("%s: median scale %.3f, want %.3f within %.0f %%", tc.name, ms, beta, 100*tc.tolScale)
		}
		// The level's error is the scale's times ln E minus ln of the observed exposure:
		// allow the same relative error on β·ln(E/300).
		if tol := tc.tolScale * beta * math.Log(exposure/300); math.Abs(ml-truth) > tol {
			t.Errorf("%s: median level %.2f, want %.2f within %.2f", tc.name, ml, truth, tol)
		}
		t.Logf("%s: %d fits, median scale %.3f (true %.3f), median level %.2f (true %.2f), 10th–90th percentile of the level %.2f–%.2f",
			tc.name, len(scales), ms, beta, ml, truth, quantile(levels, 0.1), quantile(levels, 0.9))
	}
}

// TestFitPoolsInstances: four instances' series fitted together estimate the scale closer
// than one alone (the interquartile range of the estimates shrinks).
func TestFitPoolsInstances(t *testing.T) {
	const loc, beta, dt = 20.0, 0.5, 10.0
	rng := rand.New(rand.NewPCG(3, 4))
	var one, four []float64
	for range 200 {
		ss := []*Series{trial(rng, loc, beta, dt, 31, true), trial(rng, loc, beta, dt, 31, true), trial(rng, loc, beta, dt, 31, true), trial(rng, loc, beta, dt, 31, true)}
		if f, err := FitSeries(ss[0]); err == nil {
			one = append(one, f.Scale)
		}
		if f, err := FitSeries(ss...); err == nil {
			four = append(four, f.Scale)
		}
	}
	iqr := func(v []float64) float64 { return quantile(v, 0.75) - quantile(v, 0.25) }
	if !(iqr(four) < 0.7*iqr(one)) {
		t.Errorf("interquartile range of the scale: %.3f with four instances, %.3f with one; want it at most 70 %%", iqr(four), iqr(one))
	}
	if m := median(four); math.Abs(m/beta-1) > 0.15 {
		t.Errorf("median scale of four instances %.3f, want %.3f within 15 %%", m, beta)
	}
}

// TestFlatGaugeHasNothingToFit: a gauge that never rises after its first reading (memory
// allocated at start) gives ErrTooFew; a gauge whose exact maxima are all equal gives scale
// 0, and its level is the reading.
func TestFlatGaugeHasNothingToFit(t *testing.T) {
	s := &Series{}
	for i := range 30 {
		s.Add(float64(10*i), 42)
	}
	if _, err := FitSeries(s); !errors.Is(err, ErrTooFew) {
		t.Errorf("flat since-start gauge: err %v, want ErrTooFew", err)
	}
	w := &Series{}
	for i := range 30 {
		w.Add(float64(10*i), []float64{42, 40}[i%2]) // falls: windowed, exact maxima 42 and 40
	}
	f, err := FitSeries(w)
	if err != nil || !(f.Scale > 0) || f.Level(1e6) < 42 {
		t.Errorf("windowed gauge: %+v, %v; want a positive scale and a level of at least 42", f, err)
	}
	c := &Series{}
	for i := range 30 {
		c.Add(float64(10*i), []float64{42, 41.5, 42}[i%3])
	}
	if f, err := FitSeries(c); err != nil || f.Level(1e6) < 42 || f.Exact < 2 {
		t.Errorf("gauge with repeated maxima: %+v, %v", f, err)
	}
}

// TestLevelNeverBelowReading: the level is at least the largest reading, for any exposure.
func TestLevelNeverBelowReading(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := trial(rng, 10, 1, 10, 31, true)
	f, err := FitSeries(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []float64{0, 1, 10, 300, 1e7} {
		if l := f.Level(e); l < s.Max() {
			t.Errorf("level at exposure %v: %v below the largest reading %v", e, l, s.Max())
		}
	}
	if f.Level(1e7) <= f.Level(1e5) {
		t.Errorf("level does not grow with the exposure: %v at 1e7, %v at 1e5", f.Level(1e7), f.Level(1e5))
	}
}

// TestSeriesCapsBlocks: a series keeps at most MaxBlocks blocks and ignores readings out of
// time order.
func TestSeriesCapsBlocks(t *testing.T) {
	s := &Series{}
	for i := range MaxBlocks + 50 {
		s.Add(float64(i), float64(i))
	}
	s.Add(3, 1e9)
	if s.Blocks() != MaxBlocks || s.Max() != float64(MaxBlocks+49) {
		t.Errorf("blocks %d (want %d), max %v", s.Blocks(), MaxBlocks, s.Max())
	}
}

func median(v []float64) float64 { return quantile(v, 0.5) }

func quantile(v []float64, q float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[int(q*float64(len(s)-1)+0.5)]
}
