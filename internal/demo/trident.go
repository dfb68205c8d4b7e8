package demo

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/trident-sched/trident/internal/localcluster"
	"github.com/trident-sched/trident/planner/client"
)

// plannerCount is the size of the demo's planner raft cluster.
const plannerCount = 3

// startTrident starts a raft cluster of planners and the autoscaler with Trident's
// plugins pointed at them. The returned function stops them. Each round gets fresh planner
// data directories (planners-<round>): a raft state left by an earlier round names that
// round's peer addresses, and planners restarted on it never elect a leader.
func startTrident(ctx context.Context, o Options, n *localcluster.Nomad, round int) (string, func(), error) {
	ps, err := localcluster.LaunchPlanners(ctx, localcluster.PlannerOptions{
		Binary: o.TridentBin, Count: plannerCount, NomadAddr: n.Addr, Dir: filepath.Join(n.Dir, fmt.Sprintf("planners-%d", round)),
		Args: []string{"-interval", "5s", "-max-batch", "1", "-catch-up", "60s"}, Logger: o.Log,
	})
	if err != nil {
		return "", nil, err
	}
	leader, err := ps.Leader(ctx)
	if err != nil {
		ps.Stop()
		return "", nil, err
	}
	fmt.Fprintf(o.Out, "    planner raft cluster of %d up; leader answers at %s (logs in %s)\n", plannerCount, leader, ps.Dir)
	stop := ps.Stop
	plugins := localcluster.TridentPlugins(leader, map[string]string{"tune": strconv.FormatBool(o.Tune)})
	as, err := localcluster.LaunchAutoscaler(ctx, n, localcluster.AutoscalerOptions{
		Binary:             o.autoscalerBin,
		PluginDir:          filepath.Join(o.BinDir, "autoscaler-plugins"),
		Plugins:            plugins,
		EvaluationInterval: 10 * time.Second,
		Logger:             o.Log,
	})
	if err != nil {
		stop()
		return "", nil, err
	}
	fmt.Fprintf(o.Out, "    nomad-autoscaler with trident-apm/trident/trident-target at %s (log %s)\n", as.Addr, as.LogPath)
	return leader, func() { _ = as.Stop(); stop() }, nil
}

// plannerClient returns a client of the planner at addr (the demo runs without a token).
func plannerClient(addr string) (*client.Client, error) {
	return client.New(client.Config{Address: addr})
}

// registerPipeline asks the planner to adopt job (it reads the job from Nomad).
func registerPipeline(ctx context.Context, planner, job string) error {
	pc, err := plannerClient(planner)
	if err == nil {
		_, err = pc.RegisterPipeline(ctx, job, nil)
	}
	if err != nil {
		return fmt.Errorf("register pipeline %s with the planner: %w", job, err)
	}
	return nil
}

// transitionSummary lists, per operator, the configurations the planner's decisions rolled
// out (candidate configs with at least one instance in transition).
func transitionSummary(ctx context.Context, planner, job string) string {
	pc, err := plannerClient(planner)
	if err != nil {
		return "tuner: " + err.Error()
	}
	ds, err := pc.Decisions(ctx, job, 0)
	if err != nil {
		return "tuner: " + err.Error()
	}
	seen := map[string][]string{}
	for _, d := range ds {
		for op, t := range d.Operators {
			if t.Transitions > 0 && t.CandidateConfig != "" && !slices.Contains(seen[op], t.CandidateConfig) {
				seen[op] = append(seen[op], t.CandidateConfig)
			}
		}
	}
	if len(seen) == 0 {
		return fmt.Sprintf("tuner: no configuration transition in %d decisions", len(ds))
	}
	ops := slices.Sorted(maps.Keys(seen))
	parts := make([]string, 0, len(ops))
	for _, op := range ops {
		parts = append(parts, fmt.Sprintf("%s -> %s", op, strings.Join(seen[op], " -> ")))
	}
	return fmt.Sprintf("tuner: configurations rolled out over %d decisions: %s", len(ds), strings.Join(parts, "; "))
}

// planSummary is a one-line view of the planner's latest decision for job.
func planSummary(ctx context.Context, planner, job string) string {
	pc, err := plannerClient(planner)
	if err != nil {
		return ""
	}
	p, err := pc.Plan(ctx, job)
	switch {
	case client.IsNotFound(err):
		return "no decision yet"
	case err != nil:
		return "planner unreachable"
	}
	return fmt.Sprintf("decision #%d (%s, %s, predicted %.1f docs/s)", p.DecisionIndex, p.Source, p.Status, p.Throughput)
}
