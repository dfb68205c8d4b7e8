package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/trident-sched/trident/e2e/harness"
)

// plannerCount is the size of the demo's planner raft cluster.
const plannerCount = 3

// startTrident starts a raft cluster of planners and the autoscaler with Trident's
// plugins pointed at them. The returned function stops them.
func startTrident(ctx context.Context, o Options, n *harness.Nomad) (string, func(), error) {
	ps, err := harness.LaunchPlanners(ctx, harness.PlannerOptions{
		Binary: o.TridentBin, Count: plannerCount, NomadAddr: n.Addr, Dir: filepath.Join(n.Dir, "planners"),
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
	plugins := fmt.Sprintf(`
apm "trident-apm" {
  driver = "trident-apm"
  config = {
    planner_addr  = %q
    feed_interval = "2s"
    tune          = "%t"
  }
}
strategy "trident" {
  driver = "trident"
  config = {
    planner_addr = %q
  }
}
target "trident-target" {
  driver = "trident-target"
  config = {
    planner_addr = %q
  }
}
`, leader, o.Tune, leader, leader)
	as, err := harness.LaunchAutoscaler(ctx, n, harness.AutoscalerOptions{
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

// registerPipeline asks the planner to adopt job (it reads the job from Nomad).
func registerPipeline(ctx context.Context, planner, job string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, planner+"/v1/pipelines/"+job, strings.NewReader("{}"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("register pipeline %s with the planner: %w", job, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("register pipeline %s with the planner: HTTP %d: %s", job, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// transitionSummary lists, per operator, the configurations the planner's decisions rolled
// out (candidate configs with at least one instance in transition).
func transitionSummary(ctx context.Context, planner, job string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, planner+"/v1/decisions?job="+job, nil)
	if err != nil {
		return "tuner: " + err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "tuner: planner unreachable: " + err.Error()
	}
	defer resp.Body.Close()
	var ds []struct {
		Operators map[string]struct {
			CandidateConfig string `json:"candidate_config"`
			Transitions     int    `json:"transitions"`
		} `json:"operators"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ds); err != nil {
		return "tuner: decode decisions: " + err.Error()
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, planner+"/v1/plan/"+job, nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "planner unreachable"
	}
	defer resp.Body.Close()
	var p struct {
		DecisionIndex uint64  `json:"decision_index"`
		Source        string  `json:"source"`
		Status        string  `json:"status"`
		Throughput    float64 `json:"throughput"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&p) != nil {
		return "no decision yet"
	}
	return fmt.Sprintf("decision #%d (%s, %s, predicted %.1f docs/s)", p.DecisionIndex, p.Source, p.Status, p.Throughput)
}
