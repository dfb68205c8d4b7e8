package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/strategy/adaptbench"
)

// runBenchAdapt benchmarks the adaptation layer: memory-constrained BO (as benchmarked, as
// before issue #21, and with the live tuner's settings) against EI that scores an OOM as
// zero throughput, random and grid search and EI that drops OOM trials on the simulated
// TextOCR and Captioning operators, and online clustering against offline K-means/DBSCAN on
// regime-shift streams.
func runBenchAdapt(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench adapt", flag.ContinueOnError)
	fs.SetOutput(stderr)
	boCfg := adaptbench.DefaultBOConfig()
	clCfg := adaptbench.DefaultClusterConfig()
	fs.IntVar(&boCfg.Seeds, "seeds", boCfg.Seeds, "tuning runs per method and operator")
	fs.IntVar(&boCfg.Budget, "budget", boCfg.Budget, "evaluations per tuning run")
	fs.IntVar(&boCfg.InitPoints, "init", boCfg.InitPoints, "initial quasi-random evaluations of the BO methods")
	fs.Float64Var(&boCfg.MarginGB, "margin-gb", boCfg.MarginGB, "memory safety margin of constrained BO (GB)")
	fs.Float64Var(&boCfg.PeakK, "peak-k", boCfg.PeakK, "sustained-peak allowance of constrained BO, in noise deviations of its memory surrogate")
	fs.Float64Var(&boCfg.Delta, "delta", boCfg.Delta, "minimum probability of feasibility of constrained BO")
	fs.DurationVar(&boCfg.EvalDuration, "eval", boCfg.EvalDuration, "length of one simulated tuning evaluation")
	fs.DurationVar(&boCfg.SustainedDuration, "sustained", boCfg.SustainedDuration, "run length over which a recommendation's OOM risk is judged")
	fs.Uint64Var(&clCfg.Seed, "cluster-seed", clCfg.Seed, "seed of the clustering streams")
	surface := fs.String("surface", "own", "response surfaces the BO is measured on: own (strategy/opmodel: TextOCR, Captioning), independent (strategy/kvserve, written apart from opmodel: Chat-13B, RAG-8B) or both")
	fs.StringVar(&clCfg.Python, "python", clCfg.Python, "python3 with scikit-learn for the offline baselines (empty, or without scikit-learn: skip them)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if boCfg.Seeds < 1 || boCfg.Budget < 1 || boCfg.InitPoints < 1 {
		return fmt.Errorf("adapt: -seeds, -budget and -init must be positive")
	}
	if !(boCfg.MarginGB >= 0) || !(boCfg.PeakK >= 0) {
		return fmt.Errorf("adapt: -margin-gb and -peak-k must not be negative")
	}
	var boCases []adaptbench.BOCase
	switch *surface {
	case "own":
		boCases = adaptbench.DefaultBOCases()
	case "independent":
		boCases = adaptbench.IndependentBOCases()
	case "both":
		boCases = append(adaptbench.DefaultBOCases(), adaptbench.IndependentBOCases()...)
	default:
		return fmt.Errorf("adapt: -surface %q: want own, independent or both", *surface)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	start := time.Now()
	cases, err := adaptbench.RunBO(ctx, boCfg, boCases)
	if err != nil {
		return fmt.Errorf("adapt: %w", err)
	}
	log.Info("configuration optimisation done", "seeds", boCfg.Seeds, "elapsed", time.Since(start).Round(time.Millisecond))
	if clCfg.Python != "" {
		// The offline K-means/DBSCAN baselines are an optional peer: without python3 and
		// scikit-learn the benchmark runs without them rather than failing.
		if err := adaptbench.ProbeOffline(ctx, clCfg.Python); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("adapt: %w", ctx.Err())
			}
			fmt.Fprintf(stderr, "bench adapt: peer skipped: offline K-means/DBSCAN baselines need python3 with numpy and scikit-learn (%v); run `make deps` (Debian python3-sklearn) or pass -python\n", err)
			clCfg.Python = ""
		}
	}
	streams, sklearn, err := adaptbench.RunClustering(ctx, clCfg, adaptbench.DefaultStreams())
	if err != nil {
		return fmt.Errorf("adapt: %w", err)
	}
	tables, res, err := adaptbench.Report(boCfg, cases, streams, sklearn)
	if err != nil {
		return fmt.Errorf("adapt: %w", err)
	}
	for _, t := range tables {
		if err := t.Write(stdout); err != nil {
			return fmt.Errorf("adapt: %w", err)
		}
	}
	fmt.Fprintln(stdout)
	return benchfmt.WriteResult(stdout, res)
}
