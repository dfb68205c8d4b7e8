package observe

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"

	"github.com/trident-sched/trident/apm/gp"
)

// Mode selects which filter stages a GPEstimator applies.
type Mode int

const (
	// FilterNone feeds every valid sample to the model ("GP w/o filtering").
	FilterNone Mode = iota
	// FilterSignal applies only the stage-1 signal filter ("GP + signal filtering").
	FilterSignal
	// FilterTwoStage applies the signal filter and the GP residual filter (Trident).
	FilterTwoStage
)

// String returns the estimator name of the mode.
func (m Mode) String() string {
	switch m {
	case FilterNone:
		return "gp"
	case FilterSignal:
		return "gp+signal"
	case FilterTwoStage:
		return "gp+two-stage"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Config configures a GPEstimator. A zero field takes its default.
type Config struct {
	// NMin is the number of accepted samples below which the EMA is reported and the
	// residual filter is off (default max(10, 5·features): a GP fitted on fewer samples per
	// feature extrapolates confidently and wrongly, and its residual filter would then
	// reject good samples).
	NMin int
	// EMAAlpha is the EMA weight of the newest accepted rate (default 0.3).
	EMAAlpha float64
	// Window bounds the GP's samples (default 200; see gp.WithWindow).
	Window int
	// RefitEvery bounds the number of accepted samples between hyperparameter refits
	// (default 400). The first fit happens at NMin accepted samples, the next ones whenever
	// the count doubles (2·NMin, 4·NMin, ...) until the gap reaches RefitEvery. A refit costs
	// O(window³) per likelihood evaluation, so this keeps the amortised cost per sample low.
	RefitEvery int
	// ResidualK rejects samples whose standardised residual |y−μ|/√(σ²+σ_n²) exceeds it
	// (default 3).
	ResidualK float64
	// MaxResidualRejects accepts a sample after this many consecutive residual rejections
	// (default 10), so that a genuine shift of capacity cannot lock the model out. At K=3 a
	// well-specified model rejects 0.3% of samples, so ten in a row signal a stale model.
	MaxResidualRejects int
	// MinNoiseSD floors the GP's observation noise standard deviation in log-rate units,
	// i.e. relative (default 0.02: no rate is measured better than ±2%). Without a floor the
	// first fits, on a handful of samples, interpolate them with near-zero noise and the
	// residual filter then rejects almost every later sample.
	MinNoiseSD float64
	// Synchronous declares an operator that serves one record at a time per instance (no
	// overlapping execution or dynamic batching). For such an operator records per useful
	// second is its capacity whatever its load (paper §4.1; DS2's premise holds), so the
	// estimator models that rate instead of the interval's throughput, and the signal
	// filter, which guards throughput samples against starvation and backpressure, is off.
	// The residual filter still applies.
	Synchronous bool
	// MinSyncRecords is the fewest records a synchronous operator's sample may carry
	// (default 0: any). Counters that count a record when it is fetched and its useful
	// time when it completes put an interval's rate off by up to one record per thread;
	// a floor keeps that error small.
	MinSyncRecords float64
	// Signal configures the stage-1 filter.
	Signal SignalConfig
	// Fit controls the first hyperparameter fit; refits warm-start from the current
	// hyperparameters without random restarts.
	Fit gp.FitOptions
	// Logger receives fit failures and resets (default slog.Default()).
	Logger *slog.Logger
}

// DefaultConfig returns the estimator configuration the benchmarks measure: every field at
// its default.
func DefaultConfig() Config { return Config{} }

func (c Config) withDefaults(dim int) Config {
	if c.NMin == 0 {
		c.NMin = max(10, 5*dim)
	}
	if c.EMAAlpha == 0 {
		c.EMAAlpha = 0.3
	}
	if c.Window == 0 {
		c.Window = 200
	}
	if c.RefitEvery == 0 {
		c.RefitEvery = 400
	}
	if c.MinNoiseSD == 0 {
		c.MinNoiseSD = 0.02
	}
	if c.ResidualK == 0 {
		c.ResidualK = 3
	}
	if c.MaxResidualRejects == 0 {
		c.MaxResidualRejects = 10
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Signal = c.Signal.withDefaults()
	return c
}

func (c Config) validate() error {
	switch {
	case c.NMin < 2:
		return fmt.Errorf("observe: NMin %d must be at least 2", c.NMin)
	case !(c.EMAAlpha > 0 && c.EMAAlpha <= 1):
		return fmt.Errorf("observe: EMA alpha %v outside (0, 1]", c.EMAAlpha)
	case c.Window < c.NMin:
		return fmt.Errorf("observe: window %d smaller than NMin %d", c.Window, c.NMin)
	case c.RefitEvery < 1:
		return fmt.Errorf("observe: refit interval %d must be positive", c.RefitEvery)
	case !(c.MinNoiseSD >= 0):
		return fmt.Errorf("observe: noise floor %v must not be negative", c.MinNoiseSD)
	case !(c.ResidualK > 0):
		return fmt.Errorf("observe: residual threshold %v must be positive", c.ResidualK)
	case !(c.MinSyncRecords >= 0) || math.IsInf(c.MinSyncRecords, 1):
		return fmt.Errorf("observe: MinSyncRecords %v must be a finite number >= 0", c.MinSyncRecords)
	}
	return c.Signal.validate()
}

// ema is an exponentially weighted mean and variance.
type ema struct {
	alpha, mean, vr float64
	n               int
}

func (e *ema) add(x float64) {
	if e.n == 0 {
		e.mean, e.vr = x, 0
	} else {
		d := x - e.mean
		e.mean += e.alpha * d
		e.vr = (1 - e.alpha) * (e.vr + e.alpha*d*d)
	}
	e.n++
}

func (e *ema) reset() { e.mean, e.vr, e.n = 0, 0, 0 }

// GPEstimator is the GP capacity estimator of one operator with a configurable filter
// (Trident's is FilterTwoStage): it reports an EMA of accepted rates until NMin samples are
// accepted, then the GP prediction at the requested features. It is not safe for concurrent
// use (Layer serialises access).
//
// The GP models the logarithm of the observed rate. Throughput noise is multiplicative (a
// 4% jitter is 4 records/s at 100 records/s and 40 at 1000), so in log space the noise is
// homoscedastic, as the GP assumes, and the residual filter's threshold means the same
// relative deviation everywhere in feature space. The reported capacity is the expected rate
// under log-normal observation noise, exp(μ + σ_n²/2) (the noise is mean-one in linear
// space, so log rates sit σ_n²/2 below log capacity on average), and its standard deviation
// is capacity·σ (delta method, σ² the latent predictive variance).
//
// Known limitation: on clean data the first fits (tens of samples) can pick short length
// scales and extrapolate confidently and wrongly; the residual filter then rejects good
// samples in new regions until a later refit smooths the model. On short traces (1000
// intervals) this made the two-stage filter lose to signal-only filtering on 2 of 20 runs of
// `trident bench observe` (video-like trace); from 2000 intervals on it won on all 20.
type GPEstimator struct {
	dim      int
	mode     Mode
	cfg      Config
	sig      *signalFilter
	ema      ema
	model    *gp.GP
	fitted   bool
	accepted int
	nextFit  int // accepted count of the next hyperparameter fit
	rejects  int // consecutive residual rejections
	// warm reports hyperparameters fitted before the last Reset: the first fit of the new
	// epoch starts from them (level re-derived from the data) instead of a cold search.
	warm bool
}

// NewGPEstimator returns an estimator over dim workload features.
func NewGPEstimator(dim int, mode Mode, cfg Config) (*GPEstimator, error) {
	if mode < FilterNone || mode > FilterTwoStage {
		return nil, fmt.Errorf("observe: unknown filter mode %d", int(mode))
	}
	cfg = cfg.withDefaults(dim)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	model, err := gp.New(dim, gp.DefaultHyper(dim), gp.WithWindow(cfg.Window))
	if err != nil {
		return nil, fmt.Errorf("observe: %w", err)
	}
	return &GPEstimator{
		dim: dim, mode: mode, cfg: cfg,
		sig:     newSignalFilter(cfg.Signal),
		ema:     ema{alpha: cfg.EMAAlpha},
		model:   model,
		nextFit: cfg.NMin,
	}, nil
}

// Name returns "gp", "gp+signal" or "gp+two-stage".
func (e *GPEstimator) Name() string { return e.mode.String() }

// Accepted returns the number of samples accepted since the last reset.
func (e *GPEstimator) Accepted() int { return e.accepted }

// Hyper returns the GP hyperparameters currently in use.
func (e *GPEstimator) Hyper() gp.Hyper { return e.model.Hyper() }

// Observe applies the filters to s and, if it passes, adds its rate to the EMA and the GP.
// On the refit schedule (see Config.RefitEvery) it refits the GP's hyperparameters.
func (e *GPEstimator) Observe(s Sample) (bool, string) {
	return e.ObserveContext(context.Background(), s)
}

// ObserveContext is Observe with a context bounding the hyperparameter refit it may run; a
// cancelled refit keeps the previous hyperparameters (the sample is still accepted).
func (e *GPEstimator) ObserveContext(ctx context.Context, s Sample) (bool, string) {
	if err := s.validate(e.dim); err != nil {
		return false, ReasonInvalid + ": " + err.Error()
	}
	rate := s.Rate()
	if e.cfg.Synchronous {
		if !(s.UsefulSeconds > 0) {
			return false, ReasonInvalid + ": no useful time"
		}
		if s.Records < e.cfg.MinSyncRecords {
			return false, ReasonFewRecords
		}
		rate = s.Records / s.UsefulSeconds
	} else if e.mode >= FilterSignal {
		if r := e.sig.check(s); r != "" {
			return false, r
		}
	}
	if !(rate > 0) {
		return false, ReasonInvalid + ": no records completed"
	}
	y := math.Log(rate)
	if e.mode == FilterTwoStage && e.fitted {
		m, v := e.model.Predict(s.Features)
		z := (y - m) / math.Sqrt(v+e.model.Hyper().NoiseVar)
		if math.Abs(z) > e.cfg.ResidualK {
			e.rejects++
			if e.rejects < e.cfg.MaxResidualRejects {
				return false, ReasonResidual
			}
			e.cfg.Logger.Debug("observe: residual filter rejected too many samples in a row; accepting",
				"estimator", e.Name(), "rejects", e.rejects)
		}
	}
	e.rejects = 0
	if err := e.model.Add(s.Features, y); err != nil {
		return false, ReasonInvalid + ": " + err.Error()
	}
	e.ema.add(rate)
	e.accepted++
	if e.accepted == e.nextFit {
		o := e.cfg.Fit
		if e.fitted {
			o = RefitOptions(o)
		}
		e.fit(ctx, o)
		e.nextFit += min(e.nextFit, e.cfg.RefitEvery)
	}
	return true, ""
}

// RefitOptions returns the options of a periodic refit derived from the first fit's: no
// random restarts (the current and the data-derived starting points only), at most 30
// L-BFGS iterations, and at most 100 samples (unless base sets MaxSamples), which bounds a
// refit's cost independently of the window.
func RefitOptions(base gp.FitOptions) gp.FitOptions {
	base.Restarts, base.MaxIter, base.WarmOnly = -1, 30, false
	if base.MaxSamples == 0 {
		base.MaxSamples = 100
	}
	return base
}

func (e *GPEstimator) fit(ctx context.Context, o gp.FitOptions) {
	if o.MinNoiseVar == 0 {
		o.MinNoiseVar = e.cfg.MinNoiseSD * e.cfg.MinNoiseSD
	}
	if e.accepted == e.cfg.NMin {
		// First fit: start from a hyperparameter guess scaled to the data, not unit values.
		// After an invalidation the previous epoch's length scales and variances describe
		// the same operator's response to the same features (only the level moved with the
		// configuration or workload): they and the data-derived guess are the starting
		// points, without random restarts, which keeps the frequent re-fits of operators
		// that change often as cheap as periodic refits.
		h := e.initialHyper()
		if e.warm {
			h0 := e.model.Hyper()
			h0.Mean = h.Mean
			h, o = h0, RefitOptions(o)
		}
		if err := e.model.SetHyper(h); err != nil {
			e.cfg.Logger.Warn("observe: initial hyperparameters rejected", "estimator", e.Name(), "err", err)
		}
	}
	if _, err := e.model.Fit(ctx, o); err != nil {
		e.cfg.Logger.Warn("observe: GP fit failed; keeping previous hyperparameters", "estimator", e.Name(), "err", err)
		return
	}
	e.fitted = true
	if e.mode == FilterTwoStage && e.screen() > 0 {
		// The fit just found the optimum with the outliers in; without them it moves
		// little, so one warm start suffices.
		ro := RefitOptions(o)
		ro.WarmOnly = true
		if _, err := e.model.Fit(ctx, ro); err != nil {
			e.cfg.Logger.Warn("observe: GP refit after screening failed", "estimator", e.Name(), "err", err)
		}
	}
}

// screen applies the residual filter retroactively to the samples the GP holds, using
// leave-one-out residuals: it removes samples with |z| > ResidualK, largest first, at most
// a tenth of the samples per call, and returns how many it removed. Samples accepted during
// the cold start (stage 1 only) would otherwise stay in the model, and a GP bent around one
// of them rejects the good samples that would straighten it.
func (e *GPEstimator) screen() int {
	z := e.model.LOOResiduals()
	type cand struct {
		i int
		z float64
	}
	var out []cand
	for i, v := range z {
		if math.Abs(v) > e.cfg.ResidualK {
			out = append(out, cand{i, math.Abs(v)})
		}
	}
	slices.SortFunc(out, func(a, b cand) int { return cmp.Compare(b.z, a.z) })
	out = out[:min(len(out), max(1, len(z)/10))]
	// Remove from the newest index down so that earlier indices stay valid.
	slices.SortFunc(out, func(a, b cand) int { return cmp.Compare(b.i, a.i) })
	removed := 0
	for _, c := range out {
		if err := e.model.Remove(c.i); err != nil {
			e.cfg.Logger.Warn("observe: screening", "estimator", e.Name(), "err", err)
			break
		}
		removed++
	}
	return removed
}

// initialHyper guesses hyperparameters (log space) from the accepted samples: the log of
// the EMA level, a 20% signal and 5% noise standard deviation, and the spread of each
// feature as length scale.
func (e *GPEstimator) initialHyper() gp.Hyper {
	xs, _ := e.model.Data()
	h := gp.Hyper{Mean: math.Log(e.ema.mean), SignalVar: 0.04, NoiseVar: 0.0025}
	for d := 0; d < e.dim; d++ {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, x := range xs {
			lo, hi = math.Min(lo, x[d]), math.Max(hi, x[d])
		}
		h.LengthScales = append(h.LengthScales, math.Max(hi-lo, 1e-6))
	}
	return h
}

// Estimate returns the capacity at features: the EMA during cold start, the GP afterwards.
func (e *GPEstimator) Estimate(features []float64) (Estimate, error) {
	if e.accepted == 0 {
		return Estimate{}, ErrNoData
	}
	if len(features) != e.dim {
		return Estimate{}, fmt.Errorf("observe: %d features, want %d", len(features), e.dim)
	}
	if !e.fitted || e.accepted < e.cfg.NMin {
		return Estimate{Capacity: e.ema.mean, StdDev: math.Sqrt(e.ema.vr), Samples: e.accepted, Source: SourceEMA}, nil
	}
	m, v := e.model.Predict(features)
	c := math.Exp(m + e.model.Hyper().NoiseVar/2)
	return Estimate{Capacity: c, StdDev: c * math.Sqrt(v), Samples: e.model.Len(), Source: SourceGP}, nil
}

// Reset drops all samples and returns to the EMA cold start.
func (e *GPEstimator) Reset() {
	e.sig.reset()
	e.ema.reset()
	e.model.Reset()
	e.warm = e.warm || e.fitted
	e.fitted, e.accepted, e.rejects, e.nextFit = false, 0, 0, e.cfg.NMin
}
