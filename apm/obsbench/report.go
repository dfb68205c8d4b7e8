package obsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/trident-sched/trident/apm/gp"
	"github.com/trident-sched/trident/apm/observe"
	"github.com/trident-sched/trident/apm/trace"
	"github.com/trident-sched/trident/internal/benchfmt"
)

// Options configures Run. Zero fields take defaults.
type Options struct {
	// Seed seeds the main traces (default 1).
	Seed uint64
	// Samples is the number of intervals per trace (default 2000).
	Samples int
	// ExtraSeeds is the number of further seeds (Seed+1, ...) on which the ordering of
	// Table 3 and the two-stage MAPE are checked (default 2; negative for none).
	ExtraSeeds int
	// Windows are the GP window sizes timed (default 50, 200, 1000).
	Windows []int
	// LayerOperators is the number of operators in the timed layer tick (default 8).
	LayerOperators int
	// Logger receives estimator diagnostics (default: discarded).
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Samples == 0 {
		o.Samples = 2000
	}
	if o.ExtraSeeds == 0 {
		o.ExtraSeeds = 2
	}
	if o.ExtraSeeds < 0 {
		o.ExtraSeeds = 0
	}
	if len(o.Windows) == 0 {
		o.Windows = []int{50, 200, 1000}
	}
	if o.LayerOperators == 0 {
		o.LayerOperators = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// kinds are the trace kinds benchmarked, in table order.
var kinds = [...]trace.Kind{trace.PDF, trace.Video}

// Kinds returns the trace kinds benchmarked, in table order.
func Kinds() []trace.Kind { return kinds[:] }

// SeedRun is the accuracy of all methods on one trace.
type SeedRun struct {
	Kind   trace.Kind
	Seed   uint64
	Scores []Score
}

// OrderingHolds reports whether MAPE strictly decreases along Methods, as in Table 3.
func (s SeedRun) OrderingHolds() bool { return OrderingHolds(s.Scores) }

// OrderingHolds reports whether the scores, in Methods order, have strictly decreasing MAPE.
func OrderingHolds(scores []Score) bool {
	for i := 1; i < len(scores); i++ {
		if !(scores[i].MAPE < scores[i-1].MAPE) {
			return false
		}
	}
	return len(scores) == len(methods)
}

// Speed is the measured cost of GP operations at one window size.
type Speed struct {
	Window int
	// UpdatePredict is the mean time of one Add (with eviction, the window being full) plus
	// one Predict.
	UpdatePredict time.Duration
	// LMLGrad is the time of one log-marginal-likelihood-and-gradient evaluation, the unit
	// of work of a hyperparameter fit (O(window³)).
	LMLGrad time.Duration
	// Fit is the time of one periodic refit as the estimator runs it (observe.RefitOptions).
	Fit time.Duration
}

// Report is the outcome of Run.
type Report struct {
	Options Options
	Runs    []SeedRun // main seed first for every kind, then the extra seeds
	Speeds  []Speed
	// LayerTick is the median time of one scheduler tick of the whole layer: one Observe and
	// one Capacity per operator, each operator's GP holding up to 200 samples.
	LayerTick time.Duration
	// LayerTickMean is the mean tick time, including the ticks that run a refit.
	LayerTickMean time.Duration
}

// Run measures accuracy on all kinds and seeds and the speed of the GP and the layer.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	r := &Report{Options: o}
	// Accuracy runs are independent; run them on all available cores.
	for i := 0; i <= o.ExtraSeeds; i++ {
		for _, k := range kinds {
			r.Runs = append(r.Runs, SeedRun{Kind: k, Seed: o.Seed + uint64(i)})
		}
	}
	errs := make([]error, len(r.Runs))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range r.Runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			run := &r.Runs[i]
			run.Scores, errs[i] = Accuracy(ctx, run.Kind, run.Seed, o.Samples, o.Logger)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("accuracy %s seed %d: %w", run.Kind, run.Seed, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, w := range o.Windows {
		s, err := timeGP(ctx, w, o.Seed)
		if err != nil {
			return nil, fmt.Errorf("speed at window %d: %w", w, err)
		}
		r.Speeds = append(r.Speeds, s)
	}
	var err error
	r.LayerTick, r.LayerTickMean, err = timeLayer(ctx, o.LayerOperators, o.Seed, o.Logger)
	if err != nil {
		return nil, fmt.Errorf("layer tick: %w", err)
	}
	return r, nil
}

// timeGP fills a GP of window w with PDF-like samples, then times Add+Predict over 200
// further samples (evicting one each time), one likelihood-gradient evaluation and, up to
// window 200, one warm refit.
func timeGP(ctx context.Context, w int, seed uint64) (Speed, error) {
	n := w + 200 // fill the window, then time 200 updates
	tr, err := trace.Generate(trace.Config{Kind: trace.PDF, Seed: seed, Samples: n})
	if err != nil {
		return Speed{}, err
	}
	dim := len(tr.Features)
	h := gp.DefaultHyper(dim)
	g, err := gp.New(dim, h, gp.WithWindow(w))
	if err != nil {
		return Speed{}, err
	}
	add := func(p trace.Point) error { return g.Add(p.Sample.Features, p.Sample.Rate()) }
	for _, p := range tr.Points[:w] {
		if err := add(p); err != nil {
			return Speed{}, err
		}
	}
	// Realistic hyperparameters make the updates representative; fitting on the first 200
	// samples keeps the set-up cheap at large windows.
	fitter, err := gp.New(dim, h)
	if err != nil {
		return Speed{}, err
	}
	for _, p := range tr.Points[:min(w, 200)] {
		if err := fitter.Add(p.Sample.Features, p.Sample.Rate()); err != nil {
			return Speed{}, err
		}
	}
	fh, err := fitter.Fit(ctx, observe.RefitOptions(gp.FitOptions{Seed: seed}))
	if err != nil {
		return Speed{}, err
	}
	if err := g.SetHyper(fh); err != nil {
		return Speed{}, err
	}
	rest := tr.Points[w:]
	start := time.Now()
	for _, p := range rest {
		if err := add(p); err != nil {
			return Speed{}, err
		}
		g.Predict(p.Sample.Features)
	}
	sp := Speed{Window: w, UpdatePredict: time.Since(start) / time.Duration(len(rest))}
	xs, ys := g.Data()
	start = time.Now()
	if _, _, err := gp.LogMarginalLikelihoodGrad(xs, ys, g.Hyper()); err != nil {
		return Speed{}, err
	}
	sp.LMLGrad = time.Since(start)
	start = time.Now()
	if _, err := g.Fit(ctx, observe.RefitOptions(gp.FitOptions{Seed: seed})); err != nil {
		return Speed{}, err
	}
	sp.Fit = time.Since(start)
	return sp, nil
}

// timeLayer times scheduler ticks of a Layer with ops operators whose GPs are warm and
// returns the median and the mean tick.
func timeLayer(ctx context.Context, ops int, seed uint64, logger *slog.Logger) (median, mean time.Duration, err error) {
	const warm, ticks = 400, 100
	l := observe.NewLayer(logger)
	traces := make([]*trace.Trace, ops)
	for i := range traces {
		kind := kinds[i%len(kinds)]
		tr, err := trace.Generate(trace.Config{Kind: kind, Seed: seed + uint64(i), Samples: warm + ticks})
		if err != nil {
			return 0, 0, err
		}
		traces[i] = tr
		if err := l.Register(opName(i), observe.OperatorSpec{Features: tr.Features, Config: observe.DefaultConfig()}); err != nil {
			return 0, 0, err
		}
		for _, p := range tr.Points[:warm] {
			l.Observe(opName(i), p.Sample)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	times := make([]time.Duration, 0, ticks)
	var total time.Duration
	for t := warm; t < warm+ticks; t++ {
		start := time.Now()
		for i, tr := range traces {
			p := tr.Points[t]
			l.Observe(opName(i), p.Sample)
			if _, err := l.Capacity(opName(i), p.Sample.Features); err != nil {
				return 0, 0, err
			}
		}
		d := time.Since(start)
		times = append(times, d)
		total += d
	}
	slices.Sort(times)
	return times[len(times)/2], total / ticks, nil
}

func opName(i int) string { return fmt.Sprintf("op%d", i) }

// Write prints the tables and the RESULT line.
func (r *Report) Write(w io.Writer) error {
	main := map[trace.Kind]SeedRun{}
	for _, run := range r.Runs {
		if run.Seed == r.Options.Seed {
			main[run.Kind] = run
		}
	}
	acc := benchfmt.Table{
		Title:  fmt.Sprintf("Capacity estimation MAPE %% (seed %d, %d intervals per trace; paper Table 3 for reference)", r.Options.Seed, r.Options.Samples),
		Header: []string{"method", "pdf", "pdf paper", "pdf accepted", "video", "video paper", "video accepted"},
	}
	figures := map[string]any{}
	peers := map[string]any{}
	for i, m := range methods {
		row := []any{m}
		for _, k := range kinds {
			s := main[k].Scores[i]
			row = append(row, round(s.MAPE, 2), paper(k, m), fmt.Sprintf("%.0f%%", 100*s.Accepted))
			key := fmt.Sprintf("%s_mape_%s", k, metricName(m))
			figures[key] = round(s.MAPE, 3)
			peers["paper_"+key] = paper(k, m)
		}
		acc.AddRow(row...)
	}
	if err := acc.Write(w); err != nil {
		return err
	}

	seeds := benchfmt.Table{
		Title:  "Robustness over seeds (MAPE %; ordering = DS2 > EMA > GP > GP+signal > GP+two-stage)",
		Header: append(append([]string{"trace", "seed"}, methods[:]...), "ordering"),
	}
	orderOK, worst := 0, 0.0
	for _, run := range r.Runs {
		row := []any{string(run.Kind), run.Seed}
		for _, s := range run.Scores {
			row = append(row, round(s.MAPE, 2))
		}
		ok := run.OrderingHolds()
		if ok {
			orderOK++
		}
		worst = max(worst, run.Scores[len(run.Scores)-1].MAPE)
		row = append(row, map[bool]string{true: "holds", false: "VIOLATED"}[ok])
		seeds.AddRow(row...)
	}
	if err := seeds.Write(w); err != nil {
		return err
	}
	figures["ordering_holds_runs"] = orderOK
	figures["runs"] = len(r.Runs)
	figures["two_stage_mape_worst_run"] = round(worst, 3)

	speed := benchfmt.Table{
		Title:  "GP cost per operator (update = Add with eviction from a full window + Predict)",
		Header: []string{"window", "update+predict µs", "likelihood+gradient ms (all samples)", "refit ms (observe.RefitOptions)"},
	}
	for _, s := range r.Speeds {
		us := float64(s.UpdatePredict.Nanoseconds()) / 1e3
		lg := float64(s.LMLGrad.Nanoseconds()) / 1e6
		fit := "-"
		if s.Fit > 0 {
			ms := float64(s.Fit.Nanoseconds()) / 1e6
			fit = fmt.Sprintf("%.1f", ms)
			figures[fmt.Sprintf("refit_ms_w%d", s.Window)] = round(ms, 2)
		}
		speed.AddRow(s.Window, round(us, 1), round(lg, 2), fit)
		figures[fmt.Sprintf("update_predict_us_w%d", s.Window)] = round(us, 2)
		figures[fmt.Sprintf("lml_grad_ms_w%d", s.Window)] = round(lg, 3)
	}
	if err := speed.Write(w); err != nil {
		return err
	}
	tickMS := float64(r.LayerTick.Nanoseconds()) / 1e6
	meanMS := float64(r.LayerTickMean.Nanoseconds()) / 1e6
	if _, err := fmt.Fprintf(w, "\nLayer tick (%d operators, Observe+Capacity each, window 200): median %.3f ms, mean %.3f ms including refits (paper: 2 ms per scheduler invocation)\n",
		r.Options.LayerOperators, tickMS, meanMS); err != nil {
		return err
	}
	figures["layer_tick_mean_ms"] = round(meanMS, 4)
	figures["layer_tick_ms"] = round(tickMS, 4)
	figures["layer_operators"] = r.Options.LayerOperators
	peers["paper_layer_tick_ms"] = 2.0
	return benchfmt.WriteResult(w, benchfmt.Result{Bench: "observe", Figures: figures, Peers: peers})
}

func metricName(m string) string {
	switch m {
	case "gp+signal":
		return "gp_signal"
	case "gp+two-stage":
		return "two_stage"
	}
	return m
}

// round rounds x to the given number of decimals for printing.
func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
