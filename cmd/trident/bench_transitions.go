package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/planner/nomadact/transbench"
)

// runBenchTransitions measures config transitions on packed clusters: the job versions
// the actuator renders (canary, fitted surge, and the unfitted surge of before as the
// peer) played against an emulation of Nomad's placement (logic in
// planner/nomadact/transbench).
func runBenchTransitions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := transbench.Config{}
	fs := flag.NewFlagSet("bench transitions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Seeds, "seeds", 50, "scenarios (seeds 1..N), each packed and with spare GPUs")
	fs.IntVar(&cfg.MaxBatch, "max-batch", 1, "at most this many instances per transition decision (the planner's -max-batch); each decision draws 1..max-batch")
	fs.BoolVar(&cfg.Verbose, "v", false, "one line per scenario and mode on stderr")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: trident bench transitions [flags]

Config transitions of an accelerator operator on packed clusters (it holds every GPU of
its nodes) and, for contrast, on the same plans with a spare GPU slot per node. The job
versions the planner's actuator renders (planner/nomadact, the shipped code) are played
against an emulation of Nomad's placement of groups pinned to nodes, in three modes:
canary (the default), fitted-surge (-canary=false) and unfitted-surge (the rendering
before the surge was fitted, the peer). Per mode: transitions completed, job versions,
instance-seconds out of service and their share of the operator's throughput over 300 s,
GPUs asked beyond capacity. The model is in planner/nomadact/transbench's doc comment.

flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.Seeds <= 0 || cfg.MaxBatch <= 0 {
		return fmt.Errorf("%w: -seeds and -max-batch must be > 0", errUsage)
	}
	cfg.Progress = stderr
	res, err := transbench.Run(ctx, cfg, stdout)
	if err != nil {
		return fmt.Errorf("transitions: %w", err)
	}
	return benchfmt.WriteResult(stdout, res)
}
