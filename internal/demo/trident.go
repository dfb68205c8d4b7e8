package demo

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/trident-sched/trident/e2e/harness"
)

// plannerCount is the size of the demo's planner raft cluster.
const plannerCount = 3

// startTrident starts a raft cluster of planners and the autoscaler with Trident's
// plugins pointed at them. The returned function stops them.
func startTrident(ctx context.Context, o Options, n *harness.Nomad, ph *Phase) (func(), error) {
	dir := filepath.Join(n.Dir, "planners")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("planner dir: %w", err)
	}
	ports := make([]int, 0, 2*plannerCount)
	for i := 0; i < 2*plannerCount; i++ {
		p, err := harness.FreePort()
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	var peers []string
	for i := 0; i < plannerCount; i++ {
		peers = append(peers, fmt.Sprintf("p%d=127.0.0.1:%d", i+1, ports[2*i]))
	}
	var procs []*exec.Cmd
	stop := func() {
		for _, c := range procs {
			_ = c.Process.Signal(os.Interrupt)
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, c := range procs {
			done := make(chan struct{})
			go func(c *exec.Cmd) { _ = c.Wait(); close(done) }(c)
			select {
			case <-done:
			case <-time.After(time.Until(deadline)):
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			}
		}
	}
	var httpAddrs []string
	for i := 0; i < plannerCount; i++ {
		id := fmt.Sprintf("p%d", i+1)
		httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])
		httpAddrs = append(httpAddrs, "http://"+httpAddr)
		args := []string{"planner",
			"-id", id,
			"-bind", fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
			"-http", httpAddr,
			"-data-dir", filepath.Join(dir, id),
			"-peers", strings.Join(peers, ","),
			"-nomad-addr", n.Addr,
			"-interval", "10s",
		}
		if i == 0 {
			args = append(args, "-bootstrap")
		}
		lf, err := os.Create(filepath.Join(dir, id+".log"))
		if err != nil {
			stop()
			return nil, fmt.Errorf("planner log: %w", err)
		}
		cmd := exec.Command(o.TridentBin, args...)
		cmd.Stdout, cmd.Stderr = lf, lf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		if err := cmd.Start(); err != nil {
			lf.Close()
			stop()
			return nil, fmt.Errorf("start planner %s: %w", id, err)
		}
		procs = append(procs, cmd)
	}
	leader, err := waitLeader(ctx, httpAddrs, 60*time.Second)
	if err != nil {
		stop()
		return nil, fmt.Errorf("planner cluster: %w (logs in %s)", err, dir)
	}
	fmt.Fprintf(o.Out, "    planner raft cluster of %d up; leader answers at %s\n", plannerCount, leader)
	plugins := fmt.Sprintf(`
apm "trident-apm" {
  driver = "trident-apm"
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
`, leader, leader)
	as, err := harness.LaunchAutoscaler(ctx, n, harness.AutoscalerOptions{
		Binary:             filepath.Join(o.BinDir, "nomad-autoscaler"),
		PluginDir:          filepath.Join(o.BinDir, "autoscaler-plugins"),
		Plugins:            plugins,
		EvaluationInterval: 10 * time.Second,
		Logger:             o.Log,
	})
	if err != nil {
		stop()
		return nil, err
	}
	fmt.Fprintf(o.Out, "    nomad-autoscaler with trident-apm/trident/trident-target at %s (log %s)\n", as.Addr, as.LogPath)
	return func() { _ = as.Stop(); stop() }, nil
}

// waitLeader polls every planner's /v1/status until one reports being the leader.
func waitLeader(ctx context.Context, addrs []string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		for _, a := range addrs {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a+"/v1/status", nil)
			resp, err := hc.Do(req)
			if err != nil {
				continue
			}
			var body [4096]byte
			k, _ := resp.Body.Read(body[:])
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(strings.ToLower(string(body[:k])), `"leader":true`) {
				return a, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("no planner became leader within %s", timeout)
}
