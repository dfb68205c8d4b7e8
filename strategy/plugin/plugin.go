// Package plugin is the `trident` Nomad Autoscaler strategy plugin.
//
// With a planner configured (`planner = "http://127.0.0.1:4650"` in the check's strategy
// block, or `planner_addr` in the agent's strategy block) it returns the planner's
// committed target count for the check's group, with the decision index and reason in
// the action Meta. Without a planner it scales on backlog: desired = ceil(backlog /
// target_backlog). It never returns a nil evaluation; when the planner is unreachable it
// keeps the current count and logs why.
package plugin

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/plugins"
	"github.com/hashicorp/nomad-autoscaler/plugins/base"
	"github.com/hashicorp/nomad-autoscaler/plugins/strategy"
	"github.com/hashicorp/nomad-autoscaler/sdk"
	"github.com/trident-sched/trident/planner/client"
)

// Name is the plugin's name in the autoscaler's `strategy` block.
const Name = "trident"

// Config keys, accepted in the agent's strategy block and (overriding) in a check's
// strategy block.
const (
	ConfigPlanner       = "planner"        // planner HTTP address (check level)
	ConfigPlannerAddr   = "planner_addr"   // planner HTTP address (agent level)
	ConfigToken         = "token"          // planner ACL token
	ConfigJob           = "job"            // job ID (default: from the check query)
	ConfigGroup         = "group"          // group name (default: from the check query)
	ConfigTargetBacklog = "target_backlog" // records per instance in local mode (default 100)
)

// Meta keys set on the scaling action.
const (
	MetaDecisionIndex = "trident_decision_index"
	MetaSource        = "trident_source"
)

// Plugin implements strategy.Strategy.
type Plugin struct {
	log   hclog.Logger
	agent map[string]string
	http  *http.Client
}

var _ strategy.Strategy = (*Plugin)(nil)

// New returns the strategy plugin.
func New(log hclog.Logger) *Plugin {
	return &Plugin{log: log, agent: map[string]string{}, http: &http.Client{Timeout: 5 * time.Second}}
}

// Info is the plugin's identity.
func Info() plugins.PluginID { return plugins.PluginID{Name: Name, PluginType: sdk.PluginTypeStrategy} }

// PluginInfo satisfies base.Base.
func (p *Plugin) PluginInfo() (*base.PluginInfo, error) {
	return &base.PluginInfo{Name: Name, PluginType: sdk.PluginTypeStrategy}, nil
}

// SetConfig stores the agent-level configuration.
func (p *Plugin) SetConfig(config map[string]string) error {
	if v := config[ConfigTargetBacklog]; v != "" {
		if f, err := strconv.ParseFloat(v, 64); err != nil || f <= 0 {
			return fmt.Errorf("trident strategy: %s=%q: want a positive number", ConfigTargetBacklog, v)
		}
	}
	p.agent = config
	return nil
}

// Run computes the action. It always returns a non-nil evaluation.
func (p *Plugin) Run(eval *sdk.ScalingCheckEvaluation, count int64) (*sdk.ScalingCheckEvaluation, error) {
	eval.Action.Canonicalize()
	cfg := p.config(eval)
	job, group := cfg[ConfigJob], cfg[ConfigGroup]
	if (job == "" || group == "") && eval.Check != nil {
		if j, g, ok := jobGroupFromQuery(eval.Check.Query); ok {
			if job == "" {
				job = j
			}
			if group == "" {
				group = g
			}
		}
	}
	planner := cfg[ConfigPlanner]
	if planner == "" {
		planner = cfg[ConfigPlannerAddr]
	}
	if planner != "" {
		if job == "" || group == "" {
			return noChange(eval, "trident: cannot tell the job and group: set job/group in the strategy block or query <metric>/<job>/<group>"), nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := p.fetchPlan(ctx, planner, cfg[ConfigToken], job, group)
		if err != nil {
			p.log.Warn("planner unavailable, keeping current count", "job", job, "group", group, "error", err)
			return noChange(eval, "trident: planner unavailable, keeping current count: "+err.Error()), nil
		}
		return setCount(eval, count, int64(e.Count), fmt.Sprintf("trident plan #%d: %s", e.DecisionIndex, e.Reason), map[string]interface{}{
			MetaDecisionIndex: e.DecisionIndex, MetaSource: "planner",
		}), nil
	}
	return p.local(eval, count, cfg), nil
}

// local scales on the latest backlog value.
func (p *Plugin) local(eval *sdk.ScalingCheckEvaluation, count int64, cfg map[string]string) *sdk.ScalingCheckEvaluation {
	if len(eval.Metrics) == 0 {
		return noChange(eval, "trident: no metrics")
	}
	target := 100.0
	if v := cfg[ConfigTargetBacklog]; v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return noChange(eval, fmt.Sprintf("trident: %s=%q is not a positive number", ConfigTargetBacklog, v))
		}
		target = f
	}
	v := eval.Metrics[len(eval.Metrics)-1].Value
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return noChange(eval, fmt.Sprintf("trident: ignoring invalid backlog value %v", v))
	}
	want := int64(math.Ceil(v / target))
	if want < 1 {
		want = 1
	}
	return setCount(eval, count, want, fmt.Sprintf("backlog %.0f records at %.0f per instance", v, target), map[string]interface{}{MetaSource: "backlog"})
}

func (p *Plugin) config(eval *sdk.ScalingCheckEvaluation) map[string]string {
	out := map[string]string{}
	for k, v := range p.agent {
		out[k] = v
	}
	if eval.Check != nil && eval.Check.Strategy != nil {
		for k, v := range eval.Check.Strategy.Config {
			out[k] = v
		}
	}
	return out
}

// fetchPlan reads the planner's committed target of job's group (the client retries while
// the planner cluster is between leaders, within ctx).
func (p *Plugin) fetchPlan(ctx context.Context, planner, token, job, group string) (client.PlanGroup, error) {
	c, err := client.New(client.Config{Address: planner, Token: token, HTTPClient: p.http})
	if err != nil {
		return client.PlanGroup{}, err
	}
	plan, err := c.Plan(ctx, job)
	if err != nil {
		return client.PlanGroup{}, err
	}
	e, ok := plan.Groups[group]
	if !ok {
		return client.PlanGroup{}, fmt.Errorf("plan #%d of job %q has no group %q", plan.DecisionIndex, job, group)
	}
	if e.DecisionIndex == 0 {
		e.DecisionIndex = plan.DecisionIndex
	}
	return e, nil
}

func jobGroupFromQuery(q string) (string, string, bool) {
	parts := strings.Split(strings.TrimSpace(q), "/")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	return parts[1], parts[2], true
}

func noChange(eval *sdk.ScalingCheckEvaluation, reason string) *sdk.ScalingCheckEvaluation {
	eval.Action.Direction = sdk.ScaleDirectionNone
	eval.Action.Reason = reason
	return eval
}

func setCount(eval *sdk.ScalingCheckEvaluation, cur, want int64, reason string, meta map[string]interface{}) *sdk.ScalingCheckEvaluation {
	for k, v := range meta {
		eval.Action.Meta[k] = v
	}
	eval.Action.Reason = reason
	switch {
	case want > cur:
		eval.Action.Direction = sdk.ScaleDirectionUp
	case want < cur:
		eval.Action.Direction = sdk.ScaleDirectionDown
	default:
		eval.Action.Direction = sdk.ScaleDirectionNone
		return eval
	}
	eval.Action.Count = want
	return eval
}
