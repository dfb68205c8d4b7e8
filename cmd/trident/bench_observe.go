package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/trident-sched/trident/apm/obsbench"
)

// runBenchObserve measures the observation layer: MAPE of the five capacity estimators of the
// paper's Table 3 on seeded PDF-like and video-like traces, robustness over further seeds,
// and the cost of GP update+predict per window size and of a whole-layer tick (logic in
// apm/obsbench).
func runBenchObserve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench observe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 1, "seed of the main traces; further seeds follow it")
	samples := fs.Int("samples", 2000, "observation intervals per trace")
	extra := fs.Int("extra-seeds", 2, "further seeds on which the ordering and the two-stage MAPE are checked (0 for none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *samples <= obsbench.Warmup {
		return fmt.Errorf("observe: -samples %d must exceed the warm-up of %d intervals", *samples, obsbench.Warmup)
	}
	if *extra < 0 {
		return fmt.Errorf("observe: -extra-seeds %d must not be negative", *extra)
	}
	if *extra == 0 {
		*extra = -1 // Options treats 0 as "default"
	}
	rep, err := obsbench.Run(ctx, obsbench.Options{Seed: *seed, Samples: *samples, ExtraSeeds: *extra})
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	return rep.Write(stdout)
}
