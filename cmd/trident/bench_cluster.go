package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/planner/admit"
	"github.com/trident-sched/trident/planner/sched/clusterbench"
	"github.com/trident-sched/trident/strategy/milp"
)

// parseSizes reads "KxM,KxM" (pipelines x nodes).
func parseSizes(s string) ([][2]int, error) {
	var out [][2]int
	for _, f := range strings.Split(s, ",") {
		k, m, ok := strings.Cut(strings.TrimSpace(f), "x")
		kn, err1 := strconv.Atoi(k)
		mn, err2 := strconv.Atoi(m)
		if !ok || err1 != nil || err2 != nil || kn < 1 || mn < 3 {
			return nil, fmt.Errorf("size %q: want PIPELINESxNODES with >= 1 pipeline and >= 3 nodes, e.g. 20x256", f)
		}
		out = append(out, [2]int{kn, mn})
	}
	return out, nil
}

// benchAdmission simulates admission of batch pipelines (size[0] on size[1] nodes) under
// the planner's policy (SJF with aging and marginal admission) against FIFO with the same
// marginal admission (the strongest FIFO: the same joint round and admission test),
// against plain SJF and FIFO (admitted whenever their minimums fit), and against the
// cluster without Trident (FIFO on Nomad's placement with the autoscaler, seed 001's peer),
// and adds the figures to res.
func benchAdmission(ctx context.Context, size [2]int, seeds int, obj milp.Objective, res *benchfmt.Result, stdout, stderr io.Writer) error {
	tab := benchfmt.Table{Title: fmt.Sprintf("Admission of %d batch pipelines on %d nodes (mean completion s; p95 s; makespan s)", size[0], size[1]),
		Header: []string{"seed", "SJF+marginal", "FIFO+marginal", "SJF", "FIFO", "FIFO on Nomad", "cut vs FIFO+marginal", "cut vs FIFO", "plain SJF cut vs FIFO",
			"makespan cut vs FIFO+marginal", "makespan cut vs FIFO", "cut vs FIFO on Nomad (mean / makespan)"}}
	pols := []admit.Policy{{Order: admit.SJF, Marginal: true}, {Order: admit.FIFO, Marginal: true}, {Order: admit.SJF}, {Order: admit.FIFO}, {Order: admit.FIFO}}
	var cutM, cutF, cutPlain, spanM, spanF, cutN, spanN []float64
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		sp := clusterbench.AdmissionSpec{Batch: size[0], Nodes: size[1], Seed: seed, Window: 15}
		fmt.Fprintf(stderr, "admission %d/%d\n", seed, seeds)
		out := make([]clusterbench.AdmissionOutcome, len(pols))
		for k, pol := range pols {
			sp.NomadPlacement = k == 4 // the last: FIFO on Nomad's own placement
			o, err := clusterbench.Admission(ctx, sp, pol, obj)
			if err != nil {
				return fmt.Errorf("admission (%s, marginal %v, Nomad's placement %v): %w", pol.Order, pol.Marginal, sp.NomadPlacement, err)
			}
			out[k] = o
		}
		cell := func(o clusterbench.AdmissionOutcome) string {
			return fmt.Sprintf("%.0f; %.0f; %.0f", o.MeanCompletion, o.P95Completion, o.Makespan)
		}
		cut := func(a, b clusterbench.AdmissionOutcome) float64 { return 1 - a.MeanCompletion/b.MeanCompletion }
		// seed 001's "total execution time" (first arrival to last finish)
		span := func(a, b clusterbench.AdmissionOutcome) float64 { return 1 - a.Makespan/b.Makespan }
		cutM = append(cutM, cut(out[0], out[1]))
		cutF = append(cutF, cut(out[0], out[3]))
		cutPlain = append(cutPlain, cut(out[2], out[3]))
		spanM = append(spanM, span(out[0], out[1]))
		spanF = append(spanF, span(out[0], out[3]))
		cutN = append(cutN, cut(out[0], out[4]))
		spanN = append(spanN, span(out[0], out[4]))
		pct := func(v []float64) string { return fmt.Sprintf("%.1f%%", 100*v[len(v)-1]) }
		tab.AddRow(seed, cell(out[0]), cell(out[1]), cell(out[2]), cell(out[3]), cell(out[4]), pct(cutM), pct(cutF), pct(cutPlain), pct(spanM), pct(spanF),
			pct(cutN)+" / "+pct(spanN))
	}
	if err := tab.Write(stdout); err != nil {
		return err
	}
	for _, c := range []struct {
		key  string
		cuts []float64
	}{{"admission_mean_cut_vs_fifo_marginal", cutM}, {"admission_mean_cut_vs_fifo", cutF}, {"admission_plain_sjf_mean_cut_vs_fifo", cutPlain},
		{"admission_makespan_cut_vs_fifo_marginal", spanM}, {"admission_makespan_cut_vs_fifo", spanF},
		{"admission_mean_cut_vs_fifo_on_nomad", cutN}, {"admission_makespan_cut_vs_fifo_on_nomad", spanN}} {
		sort.Float64s(c.cuts)
		res.Figures[c.key+"_median"] = c.cuts[len(c.cuts)/2]
		res.Figures[c.key+"_worst"] = c.cuts[0]
	}
	return nil
}

// runBenchCluster measures joint planning of many pipelines on one heterogeneous cluster
// (logic in planner/sched/clusterbench).
func runBenchCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", "2x16,5x64,10x128,20x256,20x512", "PIPELINESxNODES sizes, comma separated")
	seeds := fs.Int("seeds", 5, "scenarios per size (seeds 1..N)")
	objective := fs.String("objective", "maxmin", "joint objective: maxmin or sum")
	timeLimit := fs.Duration("time-limit", 10*time.Second, "time limit of every MILP solve")
	verbose := fs.Bool("v", false, "one line per scenario on stderr")
	links := fs.Bool("links", false, "finite node egress (CPU nodes 10/25 Gbit/s, accelerator nodes 25/100) and record sizes of each operator's kind, so that pipelines contend for links (the same scenarios otherwise); the autoscaler's placements are then routed in turn over the shared links")
	linkScale := fs.Float64("link-scale", 1, "with -links: multiply every link speed (e.g. 0.1 for 1/2.5 Gbit/s CPU nodes), to find where the links bind")
	admission := fs.String("admission", "", "also simulate admission of batch pipelines on BATCHxNODES (e.g. 20x8): the planner's SJF with aging and marginal admission vs FIFO with and without it, and plain SJF; -seeds scenarios (slow: about 20-30 s per scenario)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: trident bench cluster [flags]

K pipelines (PDF, video and text shapes, weights 1-4) on M heterogeneous nodes (CPU,
L4, A10G and A100-80GB nodes, some partly held by other jobs), planned by the planner's
joint round (sched.PlanJoint), by per-pipeline planning on the whole inventory (the
planner without the joint round), by a weighted static partition of the nodes and by an
emulation of the nomad-autoscaler's target-value strategy with Nomad's binpacking. Per
size: solve time median/p95, gap to the pooled bound, weighted sum and smallest share of
normalised throughput against the peers, oversubscribed nodes.

flags:
`)
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !(*linkScale > 0) || *linkScale > 100 {
		return fmt.Errorf("%w: -link-scale must be in (0, 100]", errUsage)
	}
	if *linkScale != 1 && !*links {
		return fmt.Errorf("%w: -link-scale needs -links", errUsage)
	}
	sz, err := parseSizes(*sizes)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	obj, err := milp.ParseObjective(*objective)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *seeds <= 0 {
		return fmt.Errorf("%w: -seeds must be > 0", errUsage)
	}
	cfg := clusterbench.Config{Sizes: sz, Seeds: *seeds, Objective: obj, Options: milp.Options{TimeLimit: *timeLimit}, Links: *links, LinkScale: *linkScale}
	if *verbose {
		cfg.Progress = stderr
	} else {
		fmt.Fprintf(stderr, "bench cluster: %d sizes x %d seeds, objective %s\n", len(sz), *seeds, obj)
	}
	start := time.Now()
	cs, err := clusterbench.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	res := benchfmt.Result{Bench: "cluster", Figures: map[string]any{}, Peers: map[string]any{}}
	title, prefix := "Joint planning ("+string(obj)+")", ""
	if *links {
		title, prefix = fmt.Sprintf("Joint planning (%s, shared links ×%g)", obj, *linkScale), "links_"
		if *linkScale != 1 {
			prefix = fmt.Sprintf("links_x%g_", *linkScale)
		}
	}
	tab := benchfmt.Table{Title: title, Header: []string{"K x M", "runs", "solve median s", "solve p95 s",
		"gap median", "gap max", "sum vs static (median/worst)", "min vs static (median/worst)", "sum vs autoscaler (median/worst)",
		"oversubscribed nodes: trident / per-pipeline (egress)", "queued"}}
	for _, s := range clusterbench.Summarise(cs) {
		key := fmt.Sprintf("%sk%dm%d", prefix, s.Pipelines, s.Nodes)
		tab.AddRow(fmt.Sprintf("%d x %d", s.Pipelines, s.Nodes), s.Scenarios, s.SolveMedian, s.SolveP95,
			fmt.Sprintf("%.3f%%", 100*s.GapMedian), fmt.Sprintf("%.3f%%", 100*s.GapMax),
			fmt.Sprintf("%.3g / %.3g", s.SumVsStaticMedian, s.SumVsStaticWorst), fmt.Sprintf("%.3g / %.3g", s.MinVsStaticMedian, s.MinVsStaticWorst),
			fmt.Sprintf("%.3g / %.3g", s.SumVsAutoscalerMedian, s.SumVsAutoscalerWorst),
			fmt.Sprintf("%d / %d (%d / %d)", s.Oversubscribed["trident"], s.Oversubscribed["per-pipeline"],
				s.EgressOversubscribed["trident"], s.EgressOversubscribed["per-pipeline"]), s.Queued)
		res.Figures[key+"_solve_median_s"] = s.SolveMedian
		res.Figures[key+"_solve_p95_s"] = s.SolveP95
		res.Figures[key+"_gap_max"] = s.GapMax
		res.Figures[key+"_sum_vs_static_median"] = s.SumVsStaticMedian
		res.Figures[key+"_sum_vs_static_worst"] = s.SumVsStaticWorst
		res.Figures[key+"_oversubscribed"] = s.Oversubscribed["trident"]
		res.Peers[key+"_per_pipeline_oversubscribed"] = s.Oversubscribed["per-pipeline"]
		res.Peers[key+"_per_pipeline_egress_oversubscribed"] = s.EgressOversubscribed["per-pipeline"]
		res.Peers[key+"_sum_vs_autoscaler_median"] = s.SumVsAutoscalerMedian
	}
	if err := tab.Write(stdout); err != nil {
		return err
	}
	if *admission != "" {
		asz, err := parseSizes(*admission)
		if err != nil || len(asz) != 1 {
			return fmt.Errorf("%w: -admission: want one BATCHxNODES size", errUsage)
		}
		if err := benchAdmission(ctx, asz[0], *seeds, obj, &res, stdout, stderr); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\n%d scenarios in %v\n", len(cs), time.Since(start).Round(time.Second))
	return benchfmt.WriteResult(stdout, res)
}
