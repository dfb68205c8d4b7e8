// Package plugin is the `trident-target` Nomad Autoscaler target plugin. It reports a
// pipeline group's running count, readiness (not ready while a deployment is active) and
// last scaling event, and applies scaling actions: with a planner configured it hands
// the action to the planner (the only writer of pipeline jobs); otherwise it scales the
// group through Nomad's scale API.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/plugins"
	"github.com/hashicorp/nomad-autoscaler/plugins/base"
	"github.com/hashicorp/nomad-autoscaler/plugins/target"
	"github.com/hashicorp/nomad-autoscaler/sdk"
	nomadHelper "github.com/hashicorp/nomad-autoscaler/sdk/helper/nomad"
	"github.com/hashicorp/nomad/api"
	"github.com/trident-sched/trident/planner/client"
)

// Name is the plugin's name in the autoscaler's `target` block.
const Name = "trident-target"

// Config keys (agent target block or the policy's target block).
const (
	ConfigJob         = "Job"   // set by the autoscaler from the job's scaling block
	ConfigGroup       = "Group" // set by the autoscaler from the job's scaling block
	ConfigNamespace   = "Namespace"
	ConfigPlannerAddr = "planner_addr"
	ConfigToken       = "token"
)

// Plugin implements target.Target.
type Plugin struct {
	log   hclog.Logger
	nomad *api.Client
	agent map[string]string
	http  *http.Client
}

var _ target.Target = (*Plugin)(nil)

// New returns the target plugin.
func New(log hclog.Logger) *Plugin {
	return &Plugin{log: log, agent: map[string]string{}, http: &http.Client{Timeout: 10 * time.Second}}
}

// Info is the plugin's identity.
func Info() plugins.PluginID { return plugins.PluginID{Name: Name, PluginType: sdk.PluginTypeTarget} }

// PluginInfo satisfies base.Base.
func (p *Plugin) PluginInfo() (*base.PluginInfo, error) {
	return &base.PluginInfo{Name: Name, PluginType: sdk.PluginTypeTarget}, nil
}

// SetConfig builds the Nomad client from the (inherited) agent config.
func (p *Plugin) SetConfig(config map[string]string) error {
	cl, err := api.NewClient(nomadHelper.ConfigFromNamespacedMap(config))
	if err != nil {
		return fmt.Errorf("trident-target: nomad client: %w", err)
	}
	p.nomad, p.agent = cl, config
	return nil
}

func (p *Plugin) merged(config map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range p.agent {
		out[k] = v
	}
	for k, v := range config {
		out[k] = v
	}
	return out
}

func jobGroup(cfg map[string]string) (string, string, error) {
	job, group := cfg[ConfigJob], cfg[ConfigGroup]
	if job == "" {
		return "", "", fmt.Errorf("trident-target: required config %q missing (the policy must come from a job's scaling block or set Job)", ConfigJob)
	}
	if group == "" {
		return "", "", fmt.Errorf("trident-target: required config %q missing", ConfigGroup)
	}
	return job, group, nil
}

// Status reports the group's running count; Ready is false while the job is stopped or a
// deployment is running, and the last scaling event time drives cooldowns.
func (p *Plugin) Status(config map[string]string) (*sdk.TargetStatus, error) {
	cfg := p.merged(config)
	job, group, err := jobGroup(cfg)
	if err != nil {
		return nil, err
	}
	q := &api.QueryOptions{Namespace: cfg[ConfigNamespace]}
	st, _, err := p.nomad.Jobs().ScaleStatus(job, q)
	if err != nil {
		var ue api.UnexpectedResponseError
		if errors.As(err, &ue) && ue.StatusCode() == http.StatusNotFound {
			return nil, nil // job gone: the autoscaler stops its policies
		}
		return nil, fmt.Errorf("trident-target: scale status of %s: %w", job, err)
	}
	tg, ok := st.TaskGroups[group]
	if !ok {
		return nil, fmt.Errorf("trident-target: job %q has no group %q", job, group)
	}
	// Under the planner the group is the operator's count-0 anchor and its instances run
	// in the pinned groups "<group>@<node>.g<generation>": the operator's count is theirs.
	running := tg.Running
	for name, g := range st.TaskGroups {
		if strings.HasPrefix(name, group+"@") {
			running += g.Running
		}
	}
	ready := !st.JobStopped
	deploying := false
	if d, _, err := p.nomad.Jobs().LatestDeployment(job, q); err == nil && d != nil && d.Status == api.DeploymentStatusRunning {
		ready, deploying = false, true
	}
	meta := map[string]string{
		"trident_deployment_active": strconv.FormatBool(deploying),
	}
	if len(tg.Events) > 0 {
		meta[sdk.TargetStatusMetaKeyLastEvent] = strconv.FormatUint(tg.Events[0].Time, 10)
	}
	return &sdk.TargetStatus{Ready: ready, Count: int64(running), Meta: meta}, nil
}

// Scale applies the action: through the planner when configured, else Nomad's scale API.
func (p *Plugin) Scale(action sdk.ScalingAction, config map[string]string) error {
	cfg := p.merged(config)
	job, group, err := jobGroup(cfg)
	if err != nil {
		return err
	}
	if addr := cfg[ConfigPlannerAddr]; addr != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return p.applyViaPlanner(ctx, addr, cfg[ConfigToken], job, group, action)
	}
	var count *int
	if action.Count != sdk.StrategyActionMetaValueDryRunCount {
		c := int(action.Count)
		count = &c
	}
	_, _, err = p.nomad.Jobs().Scale(job, group, count, action.Reason, action.Error, action.Meta, &api.WriteOptions{Namespace: cfg[ConfigNamespace]})
	if err != nil {
		if strings.Contains(err.Error(), "active deployment") {
			return sdk.NewTargetScalingNoOpError("trident-target: %s/%s has an active deployment; skipping", job, group)
		}
		return fmt.Errorf("trident-target: scale %s/%s to %d: %w", job, group, action.Count, err)
	}
	return nil
}

// applyViaPlanner asks the planner to apply its committed plan for the job. The planner
// is the only writer of pipeline jobs; the action's decision index (from the trident
// strategy) makes the request idempotent.
func (p *Plugin) applyViaPlanner(ctx context.Context, addr, token, job, group string, a sdk.ScalingAction) error {
	c, err := client.New(client.Config{Address: addr, Token: token, HTTPClient: p.http})
	if err != nil {
		return fmt.Errorf("trident-target: %w", err)
	}
	_, err = c.Apply(ctx, job, client.ApplyRequest{Group: group, Count: a.Count, Reason: a.Reason, Meta: a.Meta})
	switch {
	case client.IsConflict(err):
		return sdk.NewTargetScalingNoOpError("trident-target: planner busy with %s: %v", job, err)
	case err != nil:
		return fmt.Errorf("trident-target: %w", err)
	}
	return nil
}
