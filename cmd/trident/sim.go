package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/sim/experiment"
	"github.com/trident-sched/trident/sim/shipped"
)

// runSim simulates one pipeline under one scheduler and prints a per-operator summary.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pipe := fs.String("pipeline", "pdf", "pipeline: pdf or video")
	sched := fs.String("scheduler", "trident", "scheduler: "+experiment.SchedulerNames())
	dur := fs.Duration("duration", 0, "simulated time; the dataset repeats until it elapses (0: one pass over the dataset)")
	scale := fs.Float64("scale", 1, "dataset size multiplier")
	seed := fs.Uint64("seed", 1, "random seed")
	verbose := fs.Bool("v", false, "log the shipped planner's and its feed's decisions on stderr (Trident schedulers)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	parallel := fs.Int("tune-parallel", 0, "trials per operator the tuner runs at once (the plugin's tune_parallel; 0: its default; Trident schedulers)")
	exposureH := fs.Float64("tune-exposure-hours", 0, "hours of every planned instance a trial's peak memory is extrapolated to (the plugin's tune_exposure_hours; 0: its default; negative: none; Trident schedulers)")
	peakK := fs.Float64("tune-peak-k", 0, "sustained-peak allowance of the tuner's memory model, in noise deviations (the plugin's tune_peak_k; 0: its default; negative: none; Trident schedulers)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if math.IsNaN(*exposureH) || math.IsInf(*exposureH, 0) || math.IsNaN(*peakK) || math.IsInf(*peakK, 0) {
		return fmt.Errorf("-tune-exposure-hours %v, -tune-peak-k %v: want finite numbers", *exposureH, *peakK)
	}
	if *parallel < 0 {
		return fmt.Errorf("-tune-parallel %d: want 0 (the default) or a positive count", *parallel)
	}
	if !(*scale > 0) {
		return fmt.Errorf("-scale %v: want a positive multiplier", *scale)
	}
	if *dur < 0 {
		return fmt.Errorf("-duration %v: want 0 (one pass) or a positive duration", *dur)
	}
	set, err := experiment.Setup(*sched, *pipe, *scale, *seed, sim.RunConfig{Duration: dur.Seconds(), Cycle: *dur > 0})
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	p, s := set.Pipeline, set.Scheduler
	if sh, ok := s.(*shipped.Scheduler); ok {
		if *verbose {
			sh.SetLogger(slog.New(simTimeHandler{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}), sh.SimTime}))
		}
		if *parallel > 0 {
			sh.SetTuneParallel(*parallel)
		}
		if *exposureH != 0 {
			sh.SetTuneExposureHours(*exposureH)
		}
		if *peakK != 0 {
			sh.SetTunePeakK(*peakK)
		}
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	start := time.Now()
	res, err := sim.Run(ctx, p, set.Cluster, s, set.Run)
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	fmt.Fprintf(stdout, "pipeline %s, scheduler %s: %.0f source records in %s of pipeline time (%.4g records/s, dataset done: %v)\n",
		p.Name, res.Scheduler, res.Completed, time.Duration(res.SimSeconds*float64(time.Second)).Round(time.Second), res.Throughput, res.Done)
	fmt.Fprintf(stdout, "OOM restarts %d (%.0f s downtime), mean cross-node egress %.0f MB/s per node, %d decisions (%.3f s), simulated in %.2f s\n",
		res.OOMs, res.OOMDowntimeS, res.MeanEgressMBps, res.Decisions, res.DecideWall.Seconds(), time.Since(start).Seconds())
	t := &benchfmt.Table{Title: "Operators", Header: []string{"operator", "mean instances", "final placement (per node)", "records", "busy", "OOMs", "restarts", "launches", "final config"}}
	for _, o := range res.Ops {
		t.AddRow(o.Name, fmt.Sprintf("%.1f", o.MeanInstances), fmt.Sprint(o.FinalPerNode), fmt.Sprintf("%.0f", o.Processed),
			fmt.Sprintf("%.2f", o.Busy), o.OOMs, o.Restarts, o.Launches, o.FinalConfig)
	}
	if err := t.Write(stdout); err != nil {
		return err
	}
	if sh, ok := s.(*shipped.Scheduler); ok {
		fmt.Fprintf(stdout, "\nShipped planner: %d rounds, %d decisions (%d failed), %d observations published, %.2f s of wall time in the feed and %.2f s in the planner's rounds\n",
			sh.Stats.Rounds, sh.Stats.Decisions, sh.Stats.Failed, sh.Stats.Observations, sh.Stats.FeedWall.Seconds(), sh.Stats.RoundWall.Seconds())
	}
	if len(res.RegimeEnd) > 0 {
		fmt.Fprintf(stdout, "\nsource finished dataset parts at t = %v s\n", res.RegimeEnd)
	}
	return nil
}

// simTimeHandler adds the simulated time of the round ("sim_s") to every record.
type simTimeHandler struct {
	slog.Handler
	now func() float64
}

func (h simTimeHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(slog.Float64("sim_s", h.now()))
	return h.Handler.Handle(ctx, r)
}

func (h simTimeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return simTimeHandler{h.Handler.WithAttrs(as), h.now}
}

func (h simTimeHandler) WithGroup(name string) slog.Handler {
	return simTimeHandler{h.Handler.WithGroup(name), h.now}
}
