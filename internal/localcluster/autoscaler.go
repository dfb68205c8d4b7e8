package localcluster

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// AutoscalerOptions configures a nomad-autoscaler agent pointed at a harness cluster.
type AutoscalerOptions struct {
	// PluginDir holds the external autoscaler plugins (trident, trident-apm, trident-target).
	PluginDir string
	// Plugins is raw agent HCL declaring apm/strategy/target blocks, e.g.
	//   apm "trident-apm" { driver = "trident-apm" }
	Plugins string
	// EvaluationInterval is the default policy evaluation interval (default 5s).
	EvaluationInterval time.Duration
	// Binary is the nomad-autoscaler binary (default: ToolPath("nomad-autoscaler")).
	Binary string
	// Logger receives progress messages.
	Logger *slog.Logger
}

// Autoscaler is a running nomad-autoscaler agent.
type Autoscaler struct {
	// Addr is the agent's HTTP address.
	Addr string
	// LogPath is the agent's combined output.
	LogPath string

	proc *agentProc
	dir  string
	once sync.Once
}

// LaunchAutoscaler starts `nomad-autoscaler agent` against n and waits for its health
// endpoint.
func LaunchAutoscaler(ctx context.Context, n *Nomad, o AutoscalerOptions) (*Autoscaler, error) {
	if o.Binary == "" {
		p, err := ToolPath("nomad-autoscaler")
		if err != nil {
			return nil, err
		}
		o.Binary = p
	}
	if o.EvaluationInterval == 0 {
		o.EvaluationInterval = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = n.log
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(n.Dir, "autoscaler")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("autoscaler dir: %w", err)
	}
	var b strings.Builder
	// The agent's HCL parser wants one attribute per line inside blocks.
	fmt.Fprintf(&b, "log_level = \"DEBUG\"\nplugin_dir = %q\n", o.PluginDir)
	fmt.Fprintf(&b, "http {\n  bind_address = \"127.0.0.1\"\n  bind_port = %d\n}\n", port)
	fmt.Fprintf(&b, "nomad {\n  address = %q\n}\n", n.Addr)
	fmt.Fprintf(&b, "policy {\n  default_evaluation_interval = %q\n  default_cooldown = \"5s\"\n}\n", o.EvaluationInterval.String())
	b.WriteString(o.Plugins)
	cfg := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		return nil, fmt.Errorf("write autoscaler config: %w", err)
	}
	p, err := startProcess(ctx, "nomad-autoscaler", filepath.Join(dir, "agent.log"), o.Binary, "agent", "-config", cfg)
	if err != nil {
		return nil, err
	}
	a := &Autoscaler{Addr: fmt.Sprintf("http://127.0.0.1:%d", port), LogPath: p.logPath, proc: p, dir: dir}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitHTTP(wctx, a.Addr+"/v1/health", p); err != nil {
		_ = a.Stop()
		return nil, fmt.Errorf("nomad-autoscaler not healthy: %w", err)
	}
	o.Logger.Info("nomad-autoscaler ready", "addr", a.Addr, "log", a.LogPath)
	return a, nil
}

// Log returns the agent's output so far.
func (a *Autoscaler) Log() string {
	b, _ := os.ReadFile(a.LogPath)
	return string(b)
}

// Stop interrupts the agent and waits for it to exit.
func (a *Autoscaler) Stop() error {
	var err error
	a.once.Do(func() {
		err = stopProcess(a.proc, 10*time.Second)
		killUnder(a.dir) // plugins the agent left behind
	})
	return err
}

// TridentPlugins renders the autoscaler agent's plugin blocks for Trident's three plugins
// (trident-apm, trident, trident-target) pointed at the planner at plannerAddr; apm holds
// extra trident-apm config keys (e.g. "tune": "true"), rendered in key order.
func TridentPlugins(plannerAddr string, apm map[string]string) string {
	var extra strings.Builder
	for _, k := range slices.Sorted(maps.Keys(apm)) {
		fmt.Fprintf(&extra, "    %s = %q\n", k, apm[k])
	}
	return fmt.Sprintf(`
apm "trident-apm" {
  driver = "trident-apm"
  config = {
    planner_addr  = %q
    feed_interval = "2s"
%s  }
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
`, plannerAddr, extra.String(), plannerAddr, plannerAddr)
}
