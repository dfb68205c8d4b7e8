package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/trident-sched/trident/internal/demo"
)

// runDemo runs the local demo: static allocation first, then Trident.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pipeline := fs.String("pipeline", "pdf", "simulated pipeline: pdf or video")
	docs := fs.Int("docs", 400, "input documents (or videos) per phase")
	speed := fs.Float64("speed", 20, "speed-up factor of simulated service times")
	timeout := fs.Duration("phase-timeout", 0, "bound on each phase (default 8m)")
	out := fs.String("out", "demo-out", "directory for report.txt, throughput.csv, throughput.svg")
	binDir := fs.String("bin-dir", "", "directory with the plugin dirs (default: bin/ of this checkout); nomad and nomad-autoscaler are used from it if there, else from $TRIDENT_TOOLS_BIN or the make tools cache")
	phases := fs.String("phases", "static,trident", "phases to run, in order")
	verbose := fs.Bool("v", false, "log diagnostics to stderr")
	tune := fs.Bool("tune", false, "Trident phase: also tune operator configs live (trident-apm tune = \"true\")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: trident demo [flags]\n\nStarts a loopback Nomad cluster (fake GPUs), NATS, runs the pipeline with its static\nallocation and then under Trident, and writes a report. Ctrl-C stops everything.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *docs < 1:
		return fmt.Errorf("-docs %d: want at least 1", *docs)
	case !(*speed > 0):
		return fmt.Errorf("-speed %v: want a positive factor", *speed)
	case *timeout < 0:
		return fmt.Errorf("-phase-timeout %v: want a positive duration (0: 8m)", *timeout)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	_, err := demo.Run(ctx, demo.Options{
		Pipeline: *pipeline, Docs: *docs, Speed: *speed, PhaseTimeout: *timeout, OutDir: *out,
		BinDir: *binDir, Phases: strings.Split(*phases, ","), Tune: *tune, Out: stdout,
		Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	})
	return err
}
