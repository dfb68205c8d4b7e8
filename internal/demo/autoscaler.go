package demo

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/internal/localcluster"
)

// Phase names. The autoscaler phases are the peer a Nomad user has without Trident: the
// real nomad-autoscaler with its built-in strategies on each group's backlog, its built-in
// nomad-target (Nomad's scale API) and Nomad's scheduler placing the instances.
const (
	PhaseStatic              = "static"
	PhaseAutoscalerTarget    = "autoscaler-target"
	PhaseAutoscalerThreshold = "autoscaler-threshold"
	PhaseTrident             = "trident"
	// phasePilot is a static run made only to measure the operators' per-instance rates
	// for the target-value targets, when no static phase comes first.
	phasePilot = "pilot"
)

// AllPhases lists every phase in the default order.
var AllPhases = []string{PhaseStatic, PhaseAutoscalerTarget, PhaseAutoscalerThreshold, PhaseTrident}

func isAutoscalerPhase(p string) bool {
	return p == PhaseAutoscalerTarget || p == PhaseAutoscalerThreshold
}

// PeerConfig configures the nomad-autoscaler peer phases.
type PeerConfig struct {
	// EvaluationInterval and Cooldown of every group's policy (default 10s and 20s, the
	// values of the job file's Trident policies).
	EvaluationInterval, Cooldown time.Duration
	// QueryWindow of every check (default 30s: the last three evaluations).
	QueryWindow time.Duration
	// Latency is the acceptable queueing delay that turns a measured per-instance rate into
	// a backlog-per-instance target: target = rate * Latency (default 30s).
	Latency time.Duration
	// Targets are the backlog-per-instance targets by group; groups without one get theirs
	// from the pilot (the first static run).
	Targets map[string]float64
}

func (c *PeerConfig) defaults() {
	if c.EvaluationInterval <= 0 {
		c.EvaluationInterval = 10 * time.Second
	}
	if c.Cooldown <= 0 {
		c.Cooldown = 20 * time.Second
	}
	if c.QueryWindow <= 0 {
		c.QueryWindow = 30 * time.Second
	}
	if c.Latency <= 0 {
		c.Latency = 30 * time.Second
	}
}

// Threshold strategy tiers, as multiples of the group's backlog-per-instance target T:
// at or above T one more instance, at or above 4T three more, below T/4 one fewer.
const (
	thresholdHigh     = 4.0
	thresholdLow      = 0.25
	thresholdStepUp   = 1
	thresholdStepBig  = 3
	thresholdTrigger  = 2 // within_bounds_trigger: points of the query window in bounds
	peerCheckSource   = "trident-apm"
	peerTargetPlugin  = "nomad-target"
	peerQueryTemplate = "backlog_per_instance/%s/%s"
)

// groupLimits is one task group's scaling range.
type groupLimits struct {
	Name     string
	Min, Max int64
}

// jobLimits reads every group's scaling min and max from the job (the job file's, which
// the static and Trident phases also use); groups without a scaling block keep their count.
func jobLimits(job *api.Job) []groupLimits {
	var out []groupLimits
	for _, g := range job.TaskGroups {
		if g.Scaling == nil || g.Name == nil {
			continue
		}
		l := groupLimits{Name: *g.Name, Min: 1, Max: 1}
		if g.Scaling.Min != nil {
			l.Min = *g.Scaling.Min
		}
		if g.Scaling.Max != nil {
			l.Max = *g.Scaling.Max
		}
		out = append(out, l)
	}
	return out
}

func hclNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// roundTarget rounds a target to 0.1 record, at least 1.
func roundTarget(v float64) float64 { return max(1, math.Round(v*10)/10) }

// renderPeerHCL renders, for the autoscaler phase named strategy, a job skeleton whose
// groups hold only the scaling blocks of the peer: exactly what a Nomad user would write in
// the job file. Nomad parses it (applyPeerPolicies) and the policies replace the job file's
// Trident policies; targets are backlog-per-instance targets by group.
func renderPeerHCL(job string, groups []groupLimits, phase string, targets map[string]float64, c PeerConfig) (string, error) {
	c.defaults()
	var b strings.Builder
	fmt.Fprintf(&b, "job %q {\n", job)
	for _, g := range groups {
		t, ok := targets[g.Name]
		if !ok || !(t > 0) {
			return "", fmt.Errorf("group %s: no positive backlog-per-instance target", g.Name)
		}
		query := fmt.Sprintf(peerQueryTemplate, job, g.Name)
		check := func(name string, strategy [][2]string, strategyName string) {
			fmt.Fprintf(&b, "        check %q {\n", name)
			fmt.Fprintf(&b, "          source       = %q\n", peerCheckSource)
			fmt.Fprintf(&b, "          query        = %q\n", query)
			fmt.Fprintf(&b, "          query_window = %q\n\n", c.QueryWindow.String())
			fmt.Fprintf(&b, "          strategy %q {\n", strategyName)
			for _, kv := range strategy {
				fmt.Fprintf(&b, "            %s = %s\n", kv[0], kv[1])
			}
			b.WriteString("          }\n        }\n\n")
		}
		fmt.Fprintf(&b, "  group %q {\n    scaling {\n      enabled = true\n      min     = %d\n      max     = %d\n\n", g.Name, g.Min, g.Max)
		fmt.Fprintf(&b, "      policy {\n        evaluation_interval = %q\n        cooldown            = %q\n\n", c.EvaluationInterval.String(), c.Cooldown.String())
		switch phase {
		case PhaseAutoscalerTarget:
			check("backlog-per-instance", [][2]string{{"target", hclNum(t)}}, "target-value")
		case PhaseAutoscalerThreshold:
			trig := strconv.Itoa(thresholdTrigger)
			check("backlog-high", [][2]string{{"lower_bound", hclNum(t)}, {"upper_bound", hclNum(roundTarget(t * thresholdHigh))}, {"delta", strconv.Itoa(thresholdStepUp)}, {"within_bounds_trigger", trig}}, "threshold")
			check("backlog-very-high", [][2]string{{"lower_bound", hclNum(roundTarget(t * thresholdHigh))}, {"delta", strconv.Itoa(thresholdStepBig)}, {"within_bounds_trigger", trig}}, "threshold")
			check("backlog-low", [][2]string{{"upper_bound", hclNum(t * thresholdLow)}, {"delta", strconv.Itoa(-thresholdStepUp)}, {"within_bounds_trigger", trig}}, "threshold")
		default:
			return "", fmt.Errorf("phase %q has no autoscaler policy", phase)
		}
		fmt.Fprintf(&b, "        target %q {}\n      }\n    }\n\n", peerTargetPlugin)
		// A task makes the skeleton a job Nomad parses; only the scaling blocks are used.
		b.WriteString("    task \"operator\" {\n      driver = \"raw_exec\"\n    }\n  }\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// applyPeerPolicies has Nomad parse the peer's scaling blocks (renderPeerHCL) and puts them
// in place of the job's, and turns deployments off: Nomad refuses every scale request of
// a job while one of its deployments is active ("job scaling blocked due to active
// deployment"), so with the job file's rolling update the seven independently scaled groups
// would wait for each other, and a GPU group whose new instances cannot all be placed would
// block the whole job until its progress_deadline.
func applyPeerPolicies(cl *api.Client, job *api.Job, hcl string) error {
	parsed, err := cl.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: hcl})
	if err != nil {
		return fmt.Errorf("parse the autoscaler policies: %w", err)
	}
	return applyParsed(job, parsed)
}

// applyParsed puts the parsed peer job's scaling blocks in place of job's and turns job's
// deployments off (see applyPeerPolicies).
func applyParsed(job, parsed *api.Job) error {
	byName := map[string]*api.TaskGroup{}
	for _, g := range parsed.TaskGroups {
		byName[*g.Name] = g
	}
	zero := 0
	if job.Update != nil {
		job.Update.MaxParallel = &zero
	}
	for _, g := range job.TaskGroups {
		if g.Update != nil {
			g.Update.MaxParallel = &zero
		}
		p, ok := byName[*g.Name]
		if !ok || g.Scaling == nil {
			continue
		}
		if p.Scaling == nil || p.Scaling.Policy == nil {
			return fmt.Errorf("autoscaler policy of group %s did not parse into a scaling policy", *g.Name)
		}
		g.Scaling.Policy = p.Scaling.Policy
		g.Scaling.Min, g.Scaling.Max, g.Scaling.Enabled = p.Scaling.Min, p.Scaling.Max, p.Scaling.Enabled
	}
	return nil
}

// peerPlugins is the autoscaler agent's plugin block of the peer: trident-apm as a plain
// metrics source (no planner_addr: nothing is published to a planner, none runs). The
// built-in strategies (target-value, threshold) and target (nomad-target) are loaded by the
// agent by default.
const peerPlugins = `
apm "trident-apm" {
  driver = "trident-apm"
}
`

// startPeer starts the real nomad-autoscaler with trident-apm as the metrics source only.
// The returned function stops it, keeps its log as <OutDir>/autoscaler-logs/<phase>-<round>.log
// and returns how many scaling actions it submitted.
func startPeer(ctx context.Context, o Options, n *localcluster.Nomad, phase string, round int) (func() int, error) {
	as, err := localcluster.LaunchAutoscaler(ctx, n, localcluster.AutoscalerOptions{
		Binary:             o.autoscalerBin,
		PluginDir:          filepath.Join(o.BinDir, "autoscaler-plugins"),
		Plugins:            peerPlugins,
		EvaluationInterval: o.Peer.EvaluationInterval,
		Logger:             o.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("start nomad-autoscaler: %w", err)
	}
	fmt.Fprintf(o.Out, "    nomad-autoscaler (built-in strategies, nomad-target; trident-apm as metrics source only) at %s (log %s)\n", as.Addr, as.LogPath)
	return func() int {
		_ = as.Stop()
		log := as.Log()
		dir := filepath.Join(o.OutDir, "autoscaler-logs")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.log", phase, round)), []byte(log), 0o644)
		}
		return scalingActions(log)
	}, nil
}

// scalingActions counts the scaling actions an autoscaler agent log shows it submitted.
func scalingActions(log string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "[INFO]") && strings.Contains(l, "scaling target") {
			n++
		}
	}
	return n
}

// pilotWindow is the shortest span over which a per-instance rate is measured (three
// progress samples).
const pilotWindow = 6 * time.Second

// pilotRates measures each operator's processing rate per instance in a finished phase:
// the highest rate over a pilotWindow during which the operator's queue stayed non-empty
// and its instance count did not change (it was busy the whole window), or, for an
// operator that never had such a window, its processed records over the phase per
// instance (a lower bound).
func pilotRates(ph *Phase, ops []string) map[string]float64 {
	out := map[string]float64{}
	s := ph.Series
	for _, op := range ops {
		best := 0.0
		for i := range s {
			for j := i + 1; j < len(s); j++ {
				if s[j].Counts[op] != s[i].Counts[op] || s[j].Backlog[op] == 0 || s[i].Backlog[op] == 0 {
					break
				}
				if dt := s[j].T - s[i].T; dt >= pilotWindow.Seconds() {
					if c := s[i].Counts[op]; c > 0 {
						best = max(best, float64(s[j].Done[op]-s[i].Done[op])/dt/float64(c))
					}
					break
				}
			}
		}
		if best == 0 && len(s) > 0 {
			last := s[len(s)-1]
			if c := last.Counts[op]; c > 0 && last.T > 0 {
				best = float64(last.Done[op]) / last.T / float64(c)
			}
		}
		out[op] = best
	}
	return out
}

// peerTargets turns per-instance rates into backlog-per-instance targets (rate * latency,
// see PeerConfig.Latency), keeping explicit targets; an operator without a measured rate
// is an error.
func peerTargets(rates map[string]float64, explicit map[string]float64, groups []groupLimits, latency time.Duration) (map[string]float64, error) {
	out := map[string]float64{}
	var missing []string
	for _, g := range groups {
		if t, ok := explicit[g.Name]; ok {
			out[g.Name] = t
			continue
		}
		r := rates[g.Name]
		if !(r > 0) {
			missing = append(missing, g.Name)
			continue
		}
		out[g.Name] = roundTarget(r * latency.Seconds())
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("no measured rate for %s: the pilot run saw no processing (pass -as-targets)", strings.Join(missing, ", "))
	}
	return out, nil
}

// targetsString renders targets as "group=value ..." in group order.
func targetsString(t map[string]float64, order []string) string {
	keys := slices.Clone(order)
	for k := range t {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var parts []string
	for _, k := range keys {
		if v, ok := t[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%s", k, hclNum(v)))
		}
	}
	return strings.Join(parts, " ")
}

// ParseTargets parses "group=value,group=value" backlog-per-instance targets.
func ParseTargets(s string) (map[string]float64, error) {
	out := map[string]float64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || k == "" || err != nil || !(f > 0) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("target %q: want group=positive number", kv)
		}
		out[k] = f
	}
	return out, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func groupNames(gs []groupLimits) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Name
	}
	return out
}
