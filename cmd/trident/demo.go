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
	"github.com/trident-sched/trident/internal/demo"
)

// runDemo runs the local demo: the pipeline under each phase (static allocation,
// nomad-autoscaler with its built-in target-value and threshold strategies, Trident), each
// phase list repeated -repeat times, and ends with a RESULT line.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pipeline := fs.String("pipeline", "pdf", "simulated pipeline: pdf or video")
	docs := fs.Int("docs", 400, "input documents (or videos) per phase")
	speed := fs.Float64("speed", 20, "speed-up factor of simulated service times")
	timeout := fs.Duration("phase-timeout", 0, "bound on each phase (default 8m)")
	out := fs.String("out", "demo-out", "directory for report.txt, throughput.csv, throughput.svg")
	binDir := fs.String("bin-dir", "", "directory with the plugin dirs (default: bin/ of this checkout); nomad and nomad-autoscaler are used from it if there, else from $TRIDENT_TOOLS_BIN or the make tools cache")
	phases := fs.String("phases", strings.Join(demo.AllPhases, ","), "phases to run, in order (of "+strings.Join(demo.AllPhases, ", ")+")")
	repeat := fs.Int("repeat", 1, "run the phase list this many times; the report gives each phase's median and spread")
	asLatency := fs.Duration("as-latency", 30*time.Second, "autoscaler phases: acceptable queueing delay; backlog-per-instance target = pilot rate per instance x this")
	asTargets := fs.String("as-targets", "", "autoscaler phases: explicit backlog-per-instance targets, group=value,... (groups not named get theirs from the pilot)")
	asEval := fs.Duration("as-evaluation-interval", 10*time.Second, "autoscaler phases: policy evaluation_interval")
	asCooldown := fs.Duration("as-cooldown", 20*time.Second, "autoscaler phases: policy cooldown")
	verbose := fs.Bool("v", false, "log diagnostics to stderr")
	tune := fs.Bool("tune", false, "Trident phase: also tune operator configs live (trident-apm tune = \"true\"; each config is measured on a trial beside production)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: trident demo [flags]\n\nStarts a loopback Nomad cluster (fake GPUs), NATS, runs the pipeline in each phase: its\nstatic allocation, the real nomad-autoscaler with its built-in target-value and threshold\nstrategies on each group's backlog per instance (targets from a pilot run), and Trident;\nwrites a report and ends with a RESULT line. Ctrl-C stops everything.\n\nflags:")
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
	case *repeat < 1:
		return fmt.Errorf("-repeat %d: want at least 1", *repeat)
	case *asLatency <= 0 || *asEval <= 0 || *asCooldown <= 0:
		return fmt.Errorf("-as-latency, -as-evaluation-interval and -as-cooldown: want positive durations")
	}
	targets, err := demo.ParseTargets(*asTargets)
	if err != nil {
		return fmt.Errorf("-as-targets: %w", err)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	rep, err := demo.Run(ctx, demo.Options{
		Pipeline: *pipeline, Docs: *docs, Speed: *speed, PhaseTimeout: *timeout, OutDir: *out,
		BinDir: *binDir, Phases: strings.Split(*phases, ","), Repeat: *repeat, Tune: *tune, Out: stdout,
		Peer: demo.PeerConfig{Latency: *asLatency, Targets: targets, EvaluationInterval: *asEval, Cooldown: *asCooldown},
		Log:  slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	})
	if rep != nil && len(rep.Phases) > 0 {
		if werr := benchfmt.WriteResult(stdout, rep.Result()); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}
