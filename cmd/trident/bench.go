package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
)

// benchVerbs lists the benchmarks; each lives in its own bench_<name>.go file.
func benchVerbs() map[string]command {
	return map[string]command{
		"observe":     {"observation layer: MAPE of five capacity estimators, GP speed", runBenchObserve},
		"adapt":       {"adaptation layer: constrained BO vs baselines, online clustering", runBenchAdapt},
		"milp":        {"scheduling layer: MILP solve time and gap per cluster size", runBenchMILP},
		"e2e":         {"simulated end-to-end throughput of Trident vs baselines and ablations", runBenchE2E},
		"planner":     {"soak of a 3-server planner cluster on real Nomad: rounds, CPU, RSS, raft log, 413s", runBenchPlanner},
		"cluster":     {"joint planning of many pipelines on one heterogeneous cluster vs per-pipeline, static partition, autoscaler", runBenchCluster},
		"transitions": {"config transitions on packed clusters: canary vs fitted vs unfitted surge (emulated Nomad placement)", runBenchTransitions},
	}
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verbs := benchVerbs()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, "usage: trident bench <observe|adapt|milp|e2e|planner|transitions|cluster> [flags]")
		names := make([]string, 0, len(verbs))
		for n := range verbs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(stderr, "  %-11s %s\n", n, verbs[n].summary)
		}
		if len(args) > 0 {
			return flag.ErrHelp
		}
		return fmt.Errorf("%w: missing benchmark name", errUsage)
	}
	v, ok := verbs[args[0]]
	if !ok {
		return fmt.Errorf("unknown benchmark %q (want observe, adapt, milp, e2e, planner, transitions or cluster)", args[0])
	}
	return v.run(ctx, args[1:], stdout, stderr)
}
