// Package exposure extrapolates the peak device memory a short run showed to the peak a
// longer exposure will see: a configuration measured for minutes on one instance (a
// tuning trial) then runs on many instances for hours, and the largest peak of that
// exposure lies above every peak of the trial.
//
// The model is extreme-value theory's block maxima. The largest memory use of an instance
// over a block of d seconds is taken as Gumbel-distributed with scale β and location
// μ + β·ln d (the maximum of independent per-second peaks whose tail is exponential or
// lighter; a Gaussian tail makes β shrink slowly with d, so the extrapolation is
// conservative for it). The maximum over an exposure of E instance-seconds is then
// Gumbel with location μ + β·ln E: about one per-second peak in E exceeds that level
// (Fit.Level).
//
// The data are an instance's readings of a peak gauge, one per scrape, so a block is one
// scrape interval. A gauge that reports the peak since the instance started (the
// operator contract's trident_device_memory_peak_bytes) rises only when a block sets a
// new record: a reading above the running maximum is that block's maximum exactly, and a
// reading that did not rise says only that the block's maximum stayed at or below the
// running maximum (a censored observation). A gauge that ever falls reports something
// other than the peak since start (a windowed peak, a sampled used memory); its readings
// are taken as the blocks' maxima. An instance's first reading covers an unknown time
// since start (and the start-up itself): it only sets the running maximum the next
// blocks are compared with. μ and β are the maximum-likelihood estimates over the
// blocks of every series given to Fit.
package exposure

import (
	"errors"
	"fmt"
	"math"
)

// MaxBlocks bounds the blocks one Series keeps: the fit rests on an instance's first
// MaxBlocks scrape intervals (an hour at 5-second scrapes).
const MaxBlocks = 720

// block is one scrape interval of a Series: its length, the gauge's reading at its end and
// the running maximum of the readings before it.
type block struct {
	seconds, value, prior float64
}

// Series is one instance's readings of a peak-memory gauge. The zero value is empty and
// ready to use. It is not safe for concurrent use.
type Series struct {
	started bool
	last    float64 // time of the last reading, in seconds
	prev    float64 // the last reading
	runMax  float64 // the largest reading so far
	falls   bool    // the gauge fell once: its readings are block maxima
	blocks  []block
}

// Add records a reading v of the gauge at time t (seconds, any origin shared by the
// series' readings). Readings at or before the last one's time are ignored.
func (s *Series) Add(t, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.IsNaN(t) || math.IsInf(t, 0) {
		return
	}
	if !s.started {
		s.started, s.last, s.prev, s.runMax = true, t, v, v
		return
	}
	if t <= s.last {
		return
	}
	if v < s.prev {
		s.falls = true
	}
	if len(s.blocks) < MaxBlocks {
		s.blocks = append(s.blocks, block{seconds: t - s.last, value: v, prior: s.runMax})
	}
	s.last, s.prev, s.runMax = t, v, math.Max(s.runMax, v)
}

// Max returns the largest reading so far (0 for an empty series).
func (s *Series) Max() float64 { return s.runMax }

// Blocks returns the number of blocks (scrape intervals after the first reading) the
// series holds.
func (s *Series) Blocks() int { return len(s.blocks) }

// observations appends the series' blocks to obs: exact block maxima, and censored ones
// (at most the running maximum before them) for a gauge that never fell.
func (s *Series) observations(obs []obs) []obs {
	for _, b := range s.blocks {
		switch {
		case s.falls:
			obs = append(obs, obsOf(b.seconds, b.value, true))
		case b.value > b.prior:
			obs = append(obs, obsOf(b.seconds, b.value, true))
		default:
			obs = append(obs, obsOf(b.seconds, b.prior, false))
		}
	}
	return obs
}

// obs is one block of the likelihood: its length, its maximum (exact) or the bound its
// maximum stayed at or below (censored).
type obs struct {
	lnSeconds, y float64
	exact        bool
}

func obsOf(seconds, y float64, exact bool) obs {
	return obs{lnSeconds: math.Log(seconds), y: y, exact: exact}
}

// Fit is a fitted block-maximum model: the maximum over a block of d seconds is Gumbel
// with location Loc + Scale·ln d and scale Scale.
type Fit struct {
	// Loc is the location of a one-second block's maximum, Scale the Gumbel scale β
	// (the unit of the readings).
	Loc, Scale float64
	// Exact and Censored count the blocks the fit rests on; Seconds is their total length
	// (the exposure the series observed).
	Exact, Censored int
	Seconds         float64
	// Max is the largest reading of the series.
	Max float64
}

// Level returns the level about one per-second peak of an exposure of the given
// instance-seconds exceeds (the location of the exposure's maximum, μ + β·ln E), never
// below the largest reading the fit saw.
func (f Fit) Level(exposureSeconds float64) float64 {
	if !(exposureSeconds > 1) {
		return f.Max
	}
	return math.Max(f.Max, f.Loc+f.Scale*math.Log(exposureSeconds))
}

// ErrTooFew is returned by FitSeries when the series hold fewer than MinExact exact block
// maxima: no growth of the peak was seen to extrapolate from.
var ErrTooFew = errors.New("exposure: too few exact block maxima to fit")

// MinExact is the least number of exact block maxima a fit needs.
const MinExact = 2

// FitSeries fits the block-maximum model to the blocks of every series (one instance each;
// they share μ and β) by maximum likelihood.
func FitSeries(series ...*Series) (Fit, error) {
	var all []obs
	f := Fit{}
	for _, s := range series {
		if s == nil {
			continue
		}
		all = s.observations(all)
		f.Max = math.Max(f.Max, s.runMax)
	}
	var lo, hi float64 = math.Inf(1), math.Inf(-1)
	for _, o := range all {
		if o.exact {
			f.Exact++
			lo, hi = math.Min(lo, o.y), math.Max(hi, o.y)
		} else {
			f.Censored++
		}
		f.Seconds += math.Exp(o.lnSeconds)
	}
	if f.Exact < MinExact {
		return f, fmt.Errorf("%w: %d exact of %d blocks", ErrTooFew, f.Exact, len(all))
	}
	spread := hi - lo
	if !(spread > 0) {
		// Every exact maximum is the same value: no scatter, nothing grows.
		f.Loc, f.Scale = hi, 0
		return f, nil
	}
	// The profile likelihood over ln β, on a grid from a thousandth to ten times the
	// exact maxima's spread, refined by golden-section search around the grid's best.
	a, b := math.Log(spread*1e-3), math.Log(spread*10)
	const grid = 48
	best, bestL := a, math.Inf(-1)
	for i := 0; i <= grid; i++ {
		lb := a + (b-a)*float64(i)/grid
		if l, _ := profile(all, math.Exp(lb), f.Exact); l > bestL {
			best, bestL = lb, l
		}
	}
	step := (b - a) / grid
	lb := golden(func(x float64) float64 { l, _ := profile(all, math.Exp(x), f.Exact); return l }, best-step, best+step, 40)
	f.Scale = math.Exp(lb)
	_, f.Loc = profile(all, f.Scale, f.Exact)
	return f, nil
}

// profile returns the log-likelihood of the blocks at scale beta, maximised over the
// location, and that location. For block i with w_i = y_i − β·ln d_i and z_i = (w_i −
// μ)/β, an exact maximum contributes −ln β − z_i − e^{−z_i} and a censored one −e^{−z_i};
// setting the derivative in μ to 0 gives e^{μ/β} = n_exact / Σ_i e^{−w_i/β}.
func profile(all []obs, beta float64, exact int) (ll, loc float64) {
	m := math.Inf(1)
	for _, o := range all {
		m = math.Min(m, o.y-beta*o.lnSeconds)
	}
	sum := 0.0
	for _, o := range all {
		sum += math.Exp(-(o.y - beta*o.lnSeconds - m) / beta)
	}
	loc = beta*math.Log(float64(exact)) + m - beta*math.Log(sum)
	ll = -float64(exact)*math.Log(beta) - float64(exact)
	for _, o := range all {
		if o.exact {
			ll -= (o.y - beta*o.lnSeconds - loc) / beta
		}
	}
	return ll, loc
}

// golden maximises f on [a, b] by golden-section search with n steps.
func golden(f func(float64) float64, a, b float64, n int) float64 {
	r := (math.Sqrt(5) - 1) / 2
	c, d := b-r*(b-a), a+r*(b-a)
	fc, fd := f(c), f(d)
	for range n {
		if fc > fd {
			b, d, fd = d, c, fc
			c = b - r*(b-a)
			fc = f(c)
		} else {
			a, c, fc = c, d, fd
			d = a + r*(b-a)
			fd = f(d)
		}
	}
	return (a + b) / 2
}
