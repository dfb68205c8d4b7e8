package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/trident-sched/trident/apm/enginesim"
	"github.com/trident-sched/trident/apm/obsbench"
)

// runBenchObserve measures the observation layer: MAPE of the five capacity estimators of the
// paper's Table 3 on seeded PDF-like and video-like traces, robustness over further seeds,
// and the cost of GP update+predict per window size and of a whole-layer tick (logic in
// apm/obsbench). With -robust it instead replays traces of an independent engine model
// (apm/enginesim) through the estimators and the clean-sample floor.
func runBenchObserve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench observe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 1, "seed of the main traces; further seeds follow it")
	samples := fs.Int("samples", 2000, "observation intervals per trace")
	extra := fs.Int("extra-seeds", 2, "further seeds on which the ordering and the two-stage MAPE are checked (0 for none)")
	robust := fs.Bool("robust", false, "robustness benchmark on apm/enginesim traces (median and worst over -seeds, clean-sample floor)")
	seeds := fs.Int("seeds", 10, "with -robust: traces per kind (seeds -seed, -seed+1, ...)")
	kinds := fs.String("kinds", "", "with -robust: comma-separated trace kinds (default all: "+kindList()+")")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *samples <= obsbench.Warmup {
		return fmt.Errorf("observe: -samples %d must exceed the warm-up of %d intervals", *samples, obsbench.Warmup)
	}
	if *robust {
		if *seeds < 1 {
			return fmt.Errorf("observe: -seeds %d must be positive", *seeds)
		}
		o := obsbench.RobustOptions{FirstSeed: *seed, Seeds: *seeds, Intervals: *samples}
		if *kinds != "" {
			valid := map[string]bool{}
			for _, k := range enginesim.Kinds() {
				valid[string(k)] = true
			}
			for _, k := range strings.Split(*kinds, ",") {
				k = strings.TrimSpace(k)
				if !valid[k] {
					return fmt.Errorf("observe: unknown trace kind %q (want %s)", k, kindList())
				}
				o.Kinds = append(o.Kinds, enginesim.Kind(k))
			}
		}
		rep, err := obsbench.RunRobust(ctx, o)
		if err != nil {
			return fmt.Errorf("observe: %w", err)
		}
		return rep.Write(stdout)
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

func kindList() string {
	var s []string
	for _, k := range enginesim.Kinds() {
		s = append(s, string(k))
	}
	return strings.Join(s, ",")
}
