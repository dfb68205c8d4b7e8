// Package milpbench measures the scheduling-layer MILP: solve time and final gap per
// pipeline and cluster size on generated instances (package gen), for `trident bench milp`.
package milpbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/gen"
)

// Mode is one way of solving an instance.
type Mode string

const (
	// ModeTrident is the default Solve: greedy and aggregate bound, LP relaxation bound,
	// starts (routing LP, LP rounding, RENS), then HiGHS from the best start; it stops as
	// soon as a plan is proven within the gap.
	ModeTrident Mode = "trident"
	// ModeMIP is ModeTrident with Options.AlwaysMIP: every phase and HiGHS always run.
	ModeMIP Mode = "mip"
	// ModeBare is HiGHS alone on the project's model: no start and no aggregate bound.
	ModeBare Mode = "bare"
	// ModePlain is the peer of bench milp -hetero: the independent plain formulation
	// (package plain), not a mode of milp.Solve.
	ModePlain Mode = "plain"
	// ModeSym is ModeMIP with the symmetry-breaking rows (Options.SymmetryRows; ablation).
	ModeSym Mode = "sym"
	// ModeNoStart is ModeMIP without any start (no greedy, routing LP, LP rounding or RENS).
	ModeNoStart Mode = "nostart"
	// ModeNoBound is ModeMIP without the aggregate bound on T (ablation).
	ModeNoBound Mode = "nobound"
	// ModeNoLink is ModeTrident without the link rows (Options.NoLinkRows; ablation): the
	// default Solve as it was before them.
	ModeNoLink Mode = "nolink"
)

// Config selects the instances and modes of a run.
type Config struct {
	Pipelines []string                // "pdf", "video"
	Sizes     []int                   // node counts
	Seeds     int                     // seeds per (pipeline, size, mix, scenario)
	Mixes     []string                // "uniform", "hetero"
	Scenarios []string                // "startup", "resched"
	Modes     []Mode                  // modes to run
	TimeLimit time.Duration           // per solve
	RelGap    float64                 // requested relative gap
	PlainMax  int                     // ModeBare and ModeNoStart only up to this many nodes
	Progress  io.Writer               // optional: one line per solve
	Solver    milp.Solver             // defaults to milp.HiGHS{}
	Options   func(Mode) milp.Options // optional override of the per-mode options
}

// DefaultConfig is the configuration `trident bench milp` starts from.
func DefaultConfig() Config {
	return Config{
		Pipelines: []string{"pdf", "video"},
		Sizes:     []int{8, 16, 32, 64},
		Seeds:     2,
		Mixes:     []string{"uniform", "hetero", "hetero-net"},
		Scenarios: []string{"startup", "resched"},
		Modes:     []Mode{ModeTrident, ModeMIP, ModeBare},
		TimeLimit: 10 * time.Second,
		RelGap:    0.01,
		PlainMax:  8,
	}
}

// unstarted reports the modes without a start, which are slow on large clusters and run
// only up to Config.PlainMax nodes.
func unstarted(m Mode) bool { return m == ModeBare || m == ModeNoStart }

func (c Config) options(m Mode) milp.Options {
	if c.Options != nil {
		return c.Options(m)
	}
	o := milp.Options{RelGap: c.RelGap, TimeLimit: c.TimeLimit}
	switch m {
	case ModeMIP:
		o.AlwaysMIP = true
	case ModeSym:
		o.AlwaysMIP, o.SymmetryRows = true, true
	case ModeNoStart:
		o.AlwaysMIP, o.NoWarmStart = true, true
	case ModeNoBound:
		o.AlwaysMIP, o.NoBound = true, true
	case ModeBare:
		o.NoBound, o.NoWarmStart = true, true
	case ModeNoLink:
		o.NoLinkRows = true
	}
	return o
}

// sample is one solve.
type sample struct {
	ms, gap float64
	status  milp.Status
	source  string
}

// Run solves every instance of cfg in every mode, writes the tables to w and returns the
// result for the RESULT line.
func Run(ctx context.Context, cfg Config, w io.Writer) (benchfmt.Result, error) {
	res := benchfmt.Result{Bench: "milp", Figures: map[string]any{}, Peers: map[string]any{}}
	if cfg.Seeds <= 0 || len(cfg.Sizes) == 0 || len(cfg.Pipelines) == 0 {
		return res, fmt.Errorf("milpbench: need at least one pipeline, size and seed")
	}
	solver := cfg.Solver
	if solver == nil {
		solver = milp.HiGHS{}
	}
	load := loadAvg()
	type key struct {
		pipeline string
		size     int
		mix      string
		mode     Mode
	}
	samples := map[key][]sample{}
	var keys []key
	for _, pl := range cfg.Pipelines {
		for _, size := range cfg.Sizes {
			for _, mix := range cfg.Mixes {
				for _, mode := range cfg.Modes {
					if unstarted(mode) && size > cfg.PlainMax {
						continue
					}
					keys = append(keys, key{pl, size, mix, mode})
				}
				for _, sc := range cfg.Scenarios {
					for seed := 1; seed <= cfg.Seeds; seed++ {
						spec := gen.Spec{Pipeline: pl, Nodes: size, Mix: mix, Seed: uint64(seed), Reschedule: sc == "resched"}
						p, err := gen.Generate(spec)
						if err != nil {
							return res, fmt.Errorf("milpbench: generate %s: %w", spec, err)
						}
						for _, mode := range cfg.Modes {
							if unstarted(mode) && size > cfg.PlainMax {
								continue
							}
							if err := ctx.Err(); err != nil {
								return res, fmt.Errorf("milpbench: %w", err)
							}
							s, err := solver.Solve(ctx, p, cfg.options(mode))
							if err != nil {
								return res, fmt.Errorf("milpbench: solve %s (%s): %w", spec, mode, err)
							}
							if err := milp.Validate(p, s); err != nil {
								return res, fmt.Errorf("milpbench: %s (%s): %w", spec, mode, err)
							}
							sm := sample{ms: float64(s.SolveTime.Microseconds()) / 1000, gap: s.Gap, status: s.Status, source: s.Source}
							k := key{pl, size, mix, mode}
							samples[k] = append(samples[k], sm)
							if cfg.Progress != nil {
								fmt.Fprintf(cfg.Progress, "%-32s %-7s %8.1f ms gap %.5f %-9s %s T=%.4g\n",
									spec, mode, sm.ms, sm.gap, s.Status, s.Source, s.Throughput)
							}
						}
					}
				}
			}
		}
	}
	tab := benchfmt.Table{
		Title: fmt.Sprintf("MILP solve time and final gap (%d cores, load avg %.2f at start, time limit %v, gap %.3g)",
			runtime.NumCPU(), load, cfg.TimeLimit, cfg.RelGap),
		Header: []string{"pipeline", "nodes", "mix", "mode", "n", "mean ms", "median ms", "p95 ms", "max ms", "median gap", "max gap", "within gap", "by greedy+bound"},
	}
	type fkey struct {
		pipeline string
		size     int
		mode     Mode
	}
	all := map[fkey][]sample{}
	var fkeys []fkey
	for _, k := range keys {
		ss := samples[k]
		if len(ss) == 0 {
			continue
		}
		fk := fkey{k.pipeline, k.size, k.mode}
		if _, ok := all[fk]; !ok {
			fkeys = append(fkeys, fk)
		}
		all[fk] = append(all[fk], ss...)
		st := summarise(ss, cfg.RelGap)
		tab.AddRow(k.pipeline, k.size, k.mix, string(k.mode), len(ss), st.mean, st.med, st.p95, st.max, st.gmed, st.gmax,
			fmt.Sprintf("%d/%d", st.within, len(ss)), fmt.Sprintf("%d/%d", st.greedy, len(ss)))
	}
	for _, fk := range fkeys {
		st := summarise(all[fk], cfg.RelGap)
		pre := fmt.Sprintf("%s_%d_%s_", fk.pipeline, fk.size, fk.mode)
		res.Figures[pre+"mean_ms"] = round(st.mean, 2)
		res.Figures[pre+"median_ms"] = round(st.med, 2)
		res.Figures[pre+"p95_ms"] = round(st.p95, 2)
		res.Figures[pre+"max_gap"] = round(st.gmax, 6)
		res.Figures[pre+"within_gap"] = round(float64(st.within)/float64(len(all[fk])), 4)
	}
	if err := tab.Write(w); err != nil {
		return res, err
	}
	res.Figures["cores"] = runtime.NumCPU()
	res.Figures["load_avg_1m_at_start"] = round(load, 2)
	res.Figures["time_limit_s"] = cfg.TimeLimit.Seconds()
	res.Figures["rel_gap"] = cfg.RelGap
	res.Figures["instances_per_figure"] = cfg.Seeds * len(cfg.Mixes) * len(cfg.Scenarios)
	// published figures (paper Sec. 8.7: mean solve time on the authors' production cluster)
	res.Peers["paper_pdf_8_mean_ms"] = 206
	res.Peers["paper_video_8_mean_ms"] = 62
	res.Peers["paper_pdf_16_mean_ms"] = 1521
	res.Peers["paper_video_16_mean_ms"] = 259
	// figure noted in RECIPES.md for plain HiGHS on synthetic Trident-shaped instances
	res.Peers["recipes_plain_highs_M8_to_1pct_s"] = []float64{0.5, 0.6}
	fmt.Fprintf(w, "\nmodes: trident = default Solve (greedy and aggregate bound; LP relaxation bound; starts: routing LP, LP rounding, RENS; then HiGHS;\n"+
		"stops once a plan is proven within the gap); mip = same but every phase and HiGHS always run; bare = HiGHS alone on the same model (no start, no bound);\n"+
		"sym = mip with the symmetry rows; nostart, nobound = mip without one ingredient; nolink = trident without the link rows.\n"+
		"Times are wall-clock per solve on a shared machine; paper figures are means on the authors' cluster.\n")
	return res, nil
}

type stats struct {
	mean, med, p95, max, gmed, gmax float64
	within, greedy                  int
}

func summarise(ss []sample, relGap float64) stats {
	ms := make([]float64, len(ss))
	gaps := make([]float64, len(ss))
	var st stats
	for i, s := range ss {
		ms[i], gaps[i] = s.ms, s.gap
		st.mean += s.ms / float64(len(ss))
		if s.gap <= relGap {
			st.within++
		}
		if s.source == "greedy" {
			st.greedy++
		}
	}
	st.med, st.p95, st.max = percentile(ms, 50), percentile(ms, 95), percentile(ms, 100)
	st.gmed, st.gmax = percentile(gaps, 50), percentile(gaps, 100)
	return st
}

// percentile returns the nearest-rank p-th percentile of v (p in [0,100]).
func percentile(v []float64, p float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	r := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(r, 0), len(s)-1)]
}

func round(v float64, digits int) float64 {
	f := math.Pow(10, float64(digits))
	return math.Round(v*f) / f
}

// loadAvg reads the 1-minute load average (Linux); NaN elsewhere.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// ParseInts parses a comma-separated list of positive integers, e.g. "8,16,32".
func ParseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("milpbench: %q is not a positive integer", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("milpbench: empty list")
	}
	return out, nil
}

// ParseList splits a comma-separated list and checks every item against allowed.
func ParseList(s string, allowed ...string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == f
		}
		if !ok {
			return nil, fmt.Errorf("milpbench: %q is not one of %s", f, strings.Join(allowed, ", "))
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("milpbench: empty list")
	}
	return out, nil
}
