package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/contendbench"
	"github.com/trident-sched/trident/strategy/milp/milpbench"
)

// runBenchMILP measures the scheduling-layer MILP: median and p95 solve time and final gap
// per pipeline and cluster size on the paper's instances, or with -hetero on heterogeneous
// clusters against a plain-formulation peer (logic in strategy/milp/milpbench).
func runBenchMILP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := milpbench.DefaultConfig()
	fs := flag.NewFlagSet("bench milp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", "8,16,32,64", "comma-separated cluster sizes (nodes)")
	pipelines := fs.String("pipelines", "pdf,video", "comma-separated pipelines: pdf, video")
	mixes := fs.String("mixes", "uniform,hetero,hetero-net", "comma-separated node mixes: uniform, hetero, hetero-net")
	scenarios := fs.String("scenarios", "startup,resched", "comma-separated scenarios: startup, resched")
	modes := fs.String("modes", "trident,mip,bare", "comma-separated modes: trident, mip, bare, sym, nostart, nobound, nolink (with -hetero: trident, mip, sym, nostart, nobound, nolink; the plain peer always runs)")
	fs.IntVar(&cfg.Seeds, "seeds", cfg.Seeds, "seeds per pipeline, size, mix and scenario")
	fs.DurationVar(&cfg.TimeLimit, "time-limit", cfg.TimeLimit, "time limit per solve")
	fs.Float64Var(&cfg.RelGap, "gap", cfg.RelGap, "requested relative MIP gap")
	fs.IntVar(&cfg.PlainMax, "plain-max-nodes", cfg.PlainMax, "run the bare and nostart ablations (with -hetero: the plain peer) only up to this many nodes")
	verbose := fs.Bool("v", false, "print one line per solve on stderr")
	contention := fs.Bool("contention", false, "the contention term (trident_contention): plans made with and without it on clusters where co-located network/IO-heavy operators slow down, both evaluated under simulated contention (contendbench; default sizes 4,8, 10 seeds, 3 s per solve)")
	only := fs.String("instances", "", "with -hetero: comma-separated instances to run instead of every size and seed, e.g. 64/5,128/1 (nodes/seed)")
	debug := fs.Bool("debug", false, "with -hetero: the solver's debug log (phases, plans, bounds) on stderr")
	hetero := fs.Bool("hetero", false, "heterogeneous clusters (hetgen; default sizes 8,16,32,64,128, modes trident, 10 seeds) against the plain-formulation peer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *contention {
		return runBenchMILPContention(ctx, set, *sizes, cfg, *verbose, stdout, stderr)
	}
	if *hetero {
		return runBenchMILPHetero(ctx, set, *sizes, *modes, *only, *debug, cfg, *verbose, stdout, stderr)
	}
	var err error
	if cfg.Sizes, err = milpbench.ParseInts(*sizes); err != nil {
		return fmt.Errorf("-sizes: %w", err)
	}
	if cfg.Pipelines, err = milpbench.ParseList(*pipelines, "pdf", "video"); err != nil {
		return fmt.Errorf("-pipelines: %w", err)
	}
	if cfg.Mixes, err = milpbench.ParseList(*mixes, "uniform", "hetero", "hetero-net"); err != nil {
		return fmt.Errorf("-mixes: %w", err)
	}
	if cfg.Scenarios, err = milpbench.ParseList(*scenarios, "startup", "resched"); err != nil {
		return fmt.Errorf("-scenarios: %w", err)
	}
	ms, err := milpbench.ParseList(*modes, "trident", "mip", "bare", "sym", "nostart", "nobound", "nolink")
	if err != nil {
		return fmt.Errorf("-modes: %w", err)
	}
	cfg.Modes = nil
	for _, m := range ms {
		cfg.Modes = append(cfg.Modes, milpbench.Mode(m))
	}
	if cfg.Seeds <= 0 || cfg.TimeLimit <= 0 || cfg.RelGap < 0 {
		return fmt.Errorf("-seeds and -time-limit must be > 0 and -gap >= 0")
	}
	if *verbose {
		cfg.Progress = stderr
	}
	res, err := milpbench.Run(ctx, cfg, stdout)
	if err != nil {
		return err
	}
	return benchfmt.WriteResult(stdout, res)
}

// runBenchMILPHetero is `bench milp -hetero`: the flags the caller set override
// milpbench.DefaultHeteroConfig.
func runBenchMILPHetero(ctx context.Context, set map[string]bool, sizes, modes, only string, debug bool, flags milpbench.Config, verbose bool, stdout, stderr io.Writer) error {
	cfg := milpbench.DefaultHeteroConfig()
	if only != "" {
		cfg.Only = strings.Split(only, ",")
	}
	if debug {
		cfg.Solver = milp.HiGHS{Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	}
	if err := overrideRun(set, sizes, flags, &cfg.Sizes, &cfg.Seeds, &cfg.TimeLimit, &cfg.RelGap); err != nil {
		return err
	}
	if set["modes"] {
		ms, err := milpbench.ParseList(modes, "trident", "mip", "sym", "nostart", "nobound", "nolink")
		if err != nil {
			return fmt.Errorf("-modes (with -hetero; the plain peer always runs): %w", err)
		}
		cfg.Modes = nil
		for _, m := range ms {
			cfg.Modes = append(cfg.Modes, milpbench.Mode(m))
		}
	}
	if set["plain-max-nodes"] {
		cfg.PlainMax = flags.PlainMax
	}
	if cfg.Seeds <= 0 || cfg.TimeLimit <= 0 || cfg.RelGap <= 0 {
		return fmt.Errorf("-seeds, -time-limit and -gap must be > 0")
	}
	if verbose {
		cfg.Progress = stderr
	}
	res, err := milpbench.RunHetero(ctx, cfg, stdout)
	if err != nil {
		return err
	}
	return benchfmt.WriteResult(stdout, res)
}

// runBenchMILPContention is `bench milp -contention`: -sizes, -seeds, -time-limit and
// -gap, when set, override contendbench.DefaultConfig.
func runBenchMILPContention(ctx context.Context, set map[string]bool, sizes string, flags milpbench.Config, verbose bool, stdout, stderr io.Writer) error {
	cfg := contendbench.DefaultConfig()
	if err := overrideRun(set, sizes, flags, &cfg.Sizes, &cfg.Seeds, &cfg.TimeLimit, &cfg.RelGap); err != nil {
		return err
	}
	if cfg.Seeds <= 0 || cfg.TimeLimit <= 0 || cfg.RelGap < 0 {
		return fmt.Errorf("-seeds and -time-limit must be > 0 and -gap >= 0")
	}
	if verbose {
		cfg.Progress = stderr
	}
	res, err := contendbench.Run(ctx, cfg, stdout)
	if err != nil {
		return fmt.Errorf("bench milp -contention: %w", err)
	}
	return benchfmt.WriteResult(stdout, res)
}

// overrideRun sets the sizes, seeds, time limit and gap of a benchmark's default
// configuration from the -sizes, -seeds, -time-limit and -gap flags the caller set.
func overrideRun(set map[string]bool, sizes string, flags milpbench.Config, cfgSizes *[]int, seeds *int, limit *time.Duration, gap *float64) error {
	if set["sizes"] {
		v, err := milpbench.ParseInts(sizes)
		if err != nil {
			return fmt.Errorf("-sizes: %w", err)
		}
		*cfgSizes = v
	}
	if set["seeds"] {
		*seeds = flags.Seeds
	}
	if set["time-limit"] {
		*limit = flags.TimeLimit
	}
	if set["gap"] {
		*gap = flags.RelGap
	}
	return nil
}
