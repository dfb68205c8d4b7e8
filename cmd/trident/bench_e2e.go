package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/trident-sched/trident/sim/experiment"
)

// runBenchE2E runs every scheduler (Trident, baselines, controlled variants, ablations, the
// OOM comparison) on the simulated PDF and video pipelines and prints the paper's Figure 2,
// Table 2, Figure 3, Table 6 and §8.7 next to ours (logic in sim/experiment).
func runBenchE2E(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench e2e", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "bench-e2e", "directory for e2e.csv and e2e.svg (empty: none)")
	pipes := fs.String("pipelines", "pdf,video", "comma-separated pipelines: pdf, video")
	scale := fs.Float64("scale", 1, "dataset size multiplier (1: the calibrated datasets)")
	seeds := fs.Int("seeds", 7, "number of seeds (1..n); figures are medians over seeds")
	workers := fs.Int("workers", 0, "concurrent simulations (0: GOMAXPROCS)")
	verbose := fs.Bool("v", false, "log each finished run on stderr (default: a progress line per tenth of the runs)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the benchmark to this file (go tool pprof)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *seeds < 1 {
		return fmt.Errorf("e2e: -seeds %d must be at least 1", *seeds)
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	cfg := experiment.Config{Pipelines: strings.Split(*pipes, ","), Scale: *scale, Workers: *workers}
	for s := 1; s <= *seeds; s++ {
		cfg.Seeds = append(cfg.Seeds, uint64(s))
	}
	// The simulations allocate short-lived samples, scrapes and plans at a high rate: with
	// the default GOGC the collector took about 8 % of a run's CPU. Unless the user set
	// GOGC, the benchmark trades memory for it (a PDF run's peak RSS 71 -> 118-128 MB).
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	start := time.Now()
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, nil))
	} else {
		// A line per tenth of the runs: the whole benchmark takes minutes.
		last := -1
		cfg.Progress = func(done, total int) {
			if step := done * 10 / total; step != last {
				last = step
				fmt.Fprintf(stderr, "bench e2e: %d/%d simulations done (%s)\n", done, total, time.Since(start).Round(time.Second))
			}
		}
	}
	runs, err := experiment.RunAll(ctx, cfg)
	if err != nil {
		return fmt.Errorf("e2e: %w", err)
	}
	bounds, err := experiment.Bounds(ctx, cfg)
	if err != nil {
		return fmt.Errorf("e2e: %w", err)
	}
	rep := experiment.NewReport(cfg.Pipelines, runs, time.Since(start))
	rep.Bounds = bounds
	if err := rep.Write(stdout, *out); err != nil {
		return fmt.Errorf("e2e: %w", err)
	}
	return nil
}
