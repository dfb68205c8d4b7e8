package milpbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/hetgen"
	"github.com/trident-sched/trident/strategy/milp/milpbench/plain"
)

// HeteroConfig selects the instances and modes of `trident bench milp -hetero`.
type HeteroConfig struct {
	Sizes     []int         // node counts
	Seeds     int           // instances per size (hetgen seeds 1..Seeds)
	Modes     []Mode        // our modes (ModeTrident is the default Solve)
	TimeLimit time.Duration // per solve, ours and the peer's
	RelGap    float64       // requested relative gap, ours and the peer's
	PlainMax  int           // the plain peer only up to this many nodes
	Progress  io.Writer     // optional: one line per instance
	Solver    milp.Solver   // defaults to milp.HiGHS{}
	// Only, when not empty, restricts the run to these instances ("64/5": 64 nodes, seed
	// 5); Sizes and Seeds are then ignored. For re-running the misses while iterating.
	Only []string
}

// only parses cfg.Only into the sizes to run and, per size, the seeds.
func (cfg HeteroConfig) only() ([]int, map[int][]int, error) {
	var sizes []int
	seeds := map[int][]int{}
	for _, o := range cfg.Only {
		var n, s int
		if _, err := fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(o), "het/"), "%d/s%d", &n, &s); err != nil {
			if _, err := fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(o), "het/"), "%d/%d", &n, &s); err != nil {
				return nil, nil, fmt.Errorf("milpbench: instance %q: want nodes/seed, e.g. 64/5", o)
			}
		}
		if n <= 0 || s <= 0 {
			return nil, nil, fmt.Errorf("milpbench: instance %q: nodes and seed must be > 0", o)
		}
		if _, ok := seeds[n]; !ok {
			sizes = append(sizes, n)
		}
		seeds[n] = append(seeds[n], s)
	}
	return sizes, seeds, nil
}

// DefaultHeteroConfig is the configuration `trident bench milp -hetero` starts from.
func DefaultHeteroConfig() HeteroConfig {
	return HeteroConfig{
		Sizes:     []int{8, 16, 32, 64, 128},
		Seeds:     10,
		Modes:     []Mode{ModeTrident},
		TimeLimit: 10 * time.Second,
		RelGap:    0.01,
		PlainMax:  128,
	}
}

// hetSample is one solve of one instance.
type hetSample struct {
	ms, obj, bound float64
	status         string
}

// hetLoss is (best - obj)/|best| clamped at 0; 1 when obj is unknown.
func hetLoss(best, obj float64) float64 {
	if math.IsNaN(obj) {
		return 1
	}
	return math.Max(0, (best-obj)/math.Max(math.Abs(best), 1e-9))
}

// RunHetero solves every hetgen instance of cfg with every mode of ours and with the plain
// peer, writes the tables to w and returns the result for the RESULT line. Losses are
// measured against the best proven bound of all the runs on the instance; "vs plain" is
// how much higher the peer's objective is than ours (positive: the peer is ahead).
func RunHetero(ctx context.Context, cfg HeteroConfig, w io.Writer) (benchfmt.Result, error) {
	res := benchfmt.Result{Bench: "milp", Figures: map[string]any{}, Peers: map[string]any{}}
	if cfg.Seeds <= 0 || len(cfg.Sizes) == 0 || len(cfg.Modes) == 0 {
		return res, fmt.Errorf("milpbench: -hetero needs at least one size, seed and mode")
	}
	sizes, onlySeeds, err := cfg.only()
	if err != nil {
		return res, err
	}
	which := "instances " + strings.Join(cfg.Only, ",")
	if len(sizes) == 0 {
		which = fmt.Sprintf("%d instances per size", cfg.Seeds)
		sizes = cfg.Sizes
		for _, size := range sizes {
			for seed := 1; seed <= cfg.Seeds; seed++ {
				onlySeeds[size] = append(onlySeeds[size], seed)
			}
		}
	}
	solver := cfg.Solver
	if solver == nil {
		solver = milp.HiGHS{}
	}
	load := loadAvg()
	base := Config{RelGap: cfg.RelGap, TimeLimit: cfg.TimeLimit}
	type row struct {
		size int
		mode Mode
	}
	samples := map[row][]hetSample{}
	losses := map[row][]float64{}
	vsPlain := map[row][]float64{}
	var rows []row
	inconsistent := 0
	for _, size := range sizes {
		for _, m := range cfg.Modes {
			rows = append(rows, row{size, m})
		}
		withPlain := size <= cfg.PlainMax
		if withPlain {
			rows = append(rows, row{size, ModePlain})
		}
		for _, seed := range onlySeeds[size] {
			spec := hetgen.Spec{Nodes: size, Seed: uint64(seed)}
			in, err := hetgen.Generate(spec)
			if err != nil {
				return res, fmt.Errorf("milpbench: %w", err)
			}
			p := in.Problem
			got := map[Mode]hetSample{}
			for _, m := range cfg.Modes {
				if err := ctx.Err(); err != nil {
					return res, fmt.Errorf("milpbench: %w", err)
				}
				s, err := solver.Solve(ctx, p, base.options(m))
				if err != nil {
					return res, fmt.Errorf("milpbench: solve %s (%s): %w", spec, m, err)
				}
				if err := milp.Validate(p, s); err != nil {
					return res, fmt.Errorf("milpbench: %s (%s): %w", spec, m, err)
				}
				got[m] = hetSample{ms: float64(s.SolveTime.Microseconds()) / 1000, obj: s.Objective, bound: s.Bound,
					status: string(s.Status) + "/" + s.Source}
			}
			if withPlain {
				pr, err := plain.Solve(ctx, p, plain.Options{RelGap: cfg.RelGap, TimeLimit: cfg.TimeLimit})
				if err != nil {
					return res, fmt.Errorf("milpbench: plain peer on %s: %w", spec, err)
				}
				got[ModePlain] = hetSample{ms: float64(pr.Time.Microseconds()) / 1000, obj: pr.Objective, bound: pr.Bound, status: pr.Status}
			}
			best := math.Inf(1)
			for _, s := range got {
				best = math.Min(best, s.bound)
			}
			// no plan may beat a proven bound: both formulations describe one problem (to
			// 1e-5: the peer's objective and bound come from HiGHS at its tolerances, and
			// the tie-breakers sit at them)
			for m, s := range got {
				for m2, s2 := range got {
					if !math.IsNaN(s.obj) && s.obj > s2.bound+1e-5*math.Abs(s2.bound)+1e-9 {
						inconsistent++
						fmt.Fprintf(w, "INCONSISTENT %s: %s objective %.9g above %s bound %.9g\n", spec, m, s.obj, m2, s2.bound)
					}
				}
			}
			line := fmt.Sprintf("%-14s %-60s best bound %-10.6g", spec, in.Describe(), best)
			for _, m := range append(append([]Mode(nil), cfg.Modes...), ModePlain) {
				s, ok := got[m]
				if !ok {
					continue
				}
				k := row{size, m}
				samples[k] = append(samples[k], s)
				losses[k] = append(losses[k], hetLoss(best, s.obj))
				if ps, ok := got[ModePlain]; ok && m != ModePlain {
					d := 0.0
					if !math.IsNaN(ps.obj) {
						d = (ps.obj - s.obj) / math.Max(math.Abs(ps.obj), 1e-9)
					}
					vsPlain[k] = append(vsPlain[k], d)
				}
				line += fmt.Sprintf(" | %s %.0f ms loss %.4f %s", m, s.ms, hetLoss(best, s.obj), s.status)
			}
			if cfg.Progress != nil {
				fmt.Fprintln(cfg.Progress, line)
			}
		}
	}
	tab := benchfmt.Table{
		Title: fmt.Sprintf("MILP on heterogeneous clusters (hetgen, %s; %d cores, load avg %.2f at start, time limit %v, gap %.3g)",
			which, runtime.NumCPU(), load, cfg.TimeLimit, cfg.RelGap),
		Header: []string{"nodes", "mode", "n", "median ms", "p95 ms", "max ms", "within 1%", "worst loss", "median loss",
			"plain ahead >0.5%", "worst vs plain"},
	}
	type agg struct{ n, within, ahead int }
	total := map[Mode]*agg{}
	worstAll := map[Mode]float64{}
	for _, k := range rows {
		ss := samples[k]
		if len(ss) == 0 {
			continue
		}
		ms := make([]float64, len(ss))
		for i, s := range ss {
			ms[i] = s.ms
		}
		within := 0
		for _, l := range losses[k] {
			if l <= 0.01+1e-9 {
				within++
			}
		}
		ahead, worstVs := 0, math.Inf(-1)
		for _, d := range vsPlain[k] {
			if d > 0.005 {
				ahead++
			}
			worstVs = math.Max(worstVs, d)
		}
		worst := percentile(losses[k], 100)
		aheadS, worstVsS := "-", "-"
		if len(vsPlain[k]) > 0 {
			aheadS, worstVsS = fmt.Sprintf("%d/%d", ahead, len(ss)), fmt.Sprintf("%+.4f", worstVs)
		}
		tab.AddRow(k.size, string(k.mode), len(ss), percentile(ms, 50), percentile(ms, 95), percentile(ms, 100),
			fmt.Sprintf("%d/%d", within, len(ss)), fmt.Sprintf("%.4f", worst), fmt.Sprintf("%.4f", percentile(losses[k], 50)), aheadS, worstVsS)
		fig := res.Figures
		if k.mode == ModePlain {
			fig = res.Peers
		}
		pre := fmt.Sprintf("hetero_%d_%s_", k.size, k.mode)
		fig[pre+"median_ms"] = round(percentile(ms, 50), 1)
		fig[pre+"p95_ms"] = round(percentile(ms, 95), 1)
		fig[pre+"within_1pct"] = round(float64(within)/float64(len(ss)), 4)
		fig[pre+"worst_loss"] = round(worst, 5)
		if len(vsPlain[k]) > 0 {
			fig[pre+"plain_ahead_0.5pct"] = ahead
			fig[pre+"worst_vs_plain"] = round(worstVs, 5)
		}
		if total[k.mode] == nil {
			total[k.mode] = &agg{}
			worstAll[k.mode] = 0
		}
		total[k.mode].n += len(ss)
		total[k.mode].within += within
		total[k.mode].ahead += ahead
		worstAll[k.mode] = math.Max(worstAll[k.mode], worst)
	}
	if err := tab.Write(w); err != nil {
		return res, fmt.Errorf("milpbench: %w", err)
	}
	for m, a := range total {
		fig := res.Figures
		if m == ModePlain {
			fig = res.Peers
		}
		pre := fmt.Sprintf("hetero_all_%s_", m)
		fig[pre+"within_1pct"] = round(float64(a.within)/float64(a.n), 4)
		fig[pre+"worst_loss"] = round(worstAll[m], 5)
		if m != ModePlain {
			fig[pre+"plain_ahead_0.5pct"] = a.ahead
		}
	}
	res.Figures["cores"] = runtime.NumCPU()
	res.Figures["load_avg_1m_at_start"] = round(load, 2)
	res.Figures["load_avg_1m_at_end"] = round(loadAvg(), 2)
	res.Figures["time_limit_s"] = cfg.TimeLimit.Seconds()
	res.Figures["rel_gap"] = cfg.RelGap
	res.Figures["hetero_instances_per_size"] = cfg.Seeds
	res.Figures["hetero_inconsistent"] = inconsistent
	fmt.Fprintf(w, "\nloss = (best proven bound of all runs - objective) / bound; within 1%% counts loss <= 0.01.\n"+
		"plain = the peer: an independent plain formulation of the same problem (strategy/milp/milpbench/plain), same HiGHS,\n"+
		"same gap and time limit, no start, symmetry rows or cuts. vs plain = (plain - ours) / plain objective (> 0: plain ahead).\n"+
		"Times are wall-clock per solve on a shared machine (load average above).\n")
	return res, nil
}
