package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/planner/soakbench"
)

// runBenchPlanner is the planner soak (issue #28): a 3-server planner cluster on a real
// loopback Nomad cluster, idle and then busy, with requests above the body limit at the
// end (logic in planner/soakbench).
func runBenchPlanner(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench planner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	idle := fs.Duration("idle", 2*time.Minute, "length of the idle phase: the pipeline's decision is applied and nothing changes")
	busy := fs.Duration("busy", 2*time.Minute, "length of the busy phase: observations every 500ms, capacities switching every -flip")
	interval := fs.Duration("interval", 2*time.Second, "the planners' rescheduling interval (their -interval); rounds are counted per interval")
	flip := fs.Duration("flip", 10*time.Second, "busy phase: how often the observed capacities switch between the two settings")
	sample := fs.Duration("sample", 2*time.Second, "period of the CPU, RSS and status samples")
	settle := fs.Duration("settle", 10*time.Second, "after the oversize requests, sample RSS once more this much later")
	warmup := fs.Duration("warmup", time.Minute, "RSS flatness is judged from this far into each phase to its end (none for a phase shorter than twice this)")
	bin := fs.String("bin", "", "trident binary the planner servers run (default: this executable)")
	nomadBin := fs.String("nomad", "", "nomad binary (default: from $TRIDENT_TOOLS_BIN, the make-tools cache, ./bin or $PATH)")
	dir := fs.String("dir", "", "working directory of the clusters, kept afterwards (default: a temp dir, removed after a successful run)")
	verbose := fs.Bool("v", false, "log the clusters' diagnostics to stderr")
	debug := fs.Bool("debug", false, "start every planner server with a loopback -debug-addr (pprof) and print the addresses, to profile it during the soak")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: trident bench planner [flags]

Soak benchmark of the planner (issue #28). Starts a loopback Nomad cluster (raw_exec) and
three `+"`trident planner`"+` servers, registers a two-operator pipeline of sleepers, waits for its
first decision to be applied, then measures

  idle   for -idle: nothing changes; rounds and solves per interval, Nomad requests
         per round, CPU (% of one core, from /proc/<pid>/stat) of the leader and the
         followers, RSS (/proc/<pid>/status VmRSS; its drift is judged from
         -warmup into each phase), raft log size;
  busy   for -busy: observations of both operators every 500ms with capacities that
         switch every -flip, so the leader re-plans and Nomad applies its decisions;
         the same figures plus the decisions committed and applied;
  oversize  20 PUT /v1/pipelines/<job> with a 5 MiB body and Content-Length (half to
         the leader, half to a follower) and 5 chunked ones: each must be answered 413
         (the bench fails otherwise); latency to the 413 and RSS before/after
         (and -settle later).

Progress lines go to stderr; the tables, the goals (met / NOT met) and one RESULT line
to stdout. Everything started is stopped at the end, also on Ctrl-C.

flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle", *idle}, {"busy", *busy}, {"interval", *interval}, {"flip", *flip}, {"sample", *sample}, {"settle", *settle}, {"warmup", *warmup}} {
		if d.v <= 0 {
			return fmt.Errorf("-%s %v: want a positive duration", d.name, d.v)
		}
	}
	if *bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("planner: locate the trident binary: %w (pass -bin)", err)
		}
		*bin = exe
	}
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	rep, err := soakbench.Run(ctx, soakbench.Options{
		TridentBin: *bin, NomadBin: *nomadBin, Idle: *idle, Busy: *busy, Interval: *interval,
		Flip: *flip, Sample: *sample, Settle: *settle, Warmup: *warmup, Dir: *dir, Progress: stderr, Logger: log, Debug: *debug,
	})
	if rep != nil && len(rep.Phases) > 0 {
		fmt.Fprintf(stdout, "planner soak of %s, load average (1 5 15 min) %s at the start of the idle phase, %s at the end of the busy phase\n",
			rep.Start.Format("2006-01-02"), rep.Phases[0].LoadStart, rep.Phases[len(rep.Phases)-1].LoadEnd)
		for _, t := range rep.Tables() {
			if werr := t.Write(stdout); werr != nil {
				return fmt.Errorf("planner: %w", werr)
			}
		}
		fmt.Fprintln(stdout)
		if werr := benchfmt.WriteResult(stdout, rep.Result()); werr != nil {
			return fmt.Errorf("planner: %w", werr)
		}
	}
	if err != nil {
		return fmt.Errorf("planner: %w", err)
	}
	return nil
}
