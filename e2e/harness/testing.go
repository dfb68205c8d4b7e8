// Package harness adapts internal/localcluster to tests: each Start function launches real
// processes on loopback for one test, fails it (never skips) when they cannot start, and
// stops them in t.Cleanup, printing their log tails when the test failed. The launchers,
// their config rendering and the teardown live in internal/localcluster, which the demo
// uses directly, so that bin/trident does not link the testing package.
package harness

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/internal/localcluster"
)

// The cluster types of internal/localcluster, so tests need only this package.
type (
	Nomad             = localcluster.Nomad
	NomadOptions      = localcluster.NomadOptions
	ClientSpec        = localcluster.ClientSpec
	Autoscaler        = localcluster.Autoscaler
	AutoscalerOptions = localcluster.AutoscalerOptions
	Planners          = localcluster.Planners
	PlannerOptions    = localcluster.PlannerOptions
)

// ToolPath is localcluster.ToolPath: the path of a real nomad, nomad-autoscaler or consul.
func ToolPath(name string) (string, error) { return localcluster.ToolPath(name) }

// FreePort is localcluster.FreePort: a loopback TCP port that was free a moment ago.
func FreePort() (int, error) { return localcluster.FreePort() }

// BuildPackages is localcluster.BuildPackages: `go build` main packages of this module
// into dir.
func BuildPackages(ctx context.Context, dir string, pkgs ...string) error {
	return localcluster.BuildPackages(ctx, dir, pkgs...)
}

// BuildGPUPlugin builds the trident-gpu device plugin into a directory of its own for
// NomadOptions.DevicePluginDir (the agents then fingerprint fake GPUs for clients with
// FakeGPUs) and returns the directory; it fails the test when the build fails.
func BuildGPUPlugin(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "devplugins")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := BuildPackages(ctx, dir, "./plugins/trident-gpu"); err != nil {
		t.Fatal(err)
	}
	return dir
}

// RunNATS is localcluster.RunNATS: it registers jobs/nats.nomad.hcl on a Nomad-picked
// port and returns the client URL once NATS answers there, or fails the test.
func RunNATS(t testing.TB, ctx context.Context, cl *api.Client, tridentBin string) string {
	t.Helper()
	url, err := localcluster.RunNATS(ctx, cl, tridentBin)
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// ParseJobFile is localcluster.ParseJobFile: jobs/<file> parsed by the Nomad server.
func ParseJobFile(ctx context.Context, cl *api.Client, file string, vars map[string]string) (*api.Job, error) {
	return localcluster.ParseJobFile(ctx, cl, file, vars)
}

// StartNomad launches a loopback cluster for a test and stops it in t.Cleanup. It fails
// the test (never skips) when the nomad binary is missing.
func StartNomad(t testing.TB, o NomadOptions) *Nomad {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if o.Dir == "" {
		// Not t.TempDir: its cleanup could run before the agents are stopped.
		d, err := os.MkdirTemp("", "trident-e2e-")
		if err != nil {
			t.Fatalf("create cluster dir: %v", err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		o.Dir = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := localcluster.Launch(ctx, o)
	if err != nil {
		t.Fatalf("start nomad: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(n.Logs(40))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("stop nomad: %v", err)
		}
	})
	return n
}

// StartAutoscaler launches nomad-autoscaler for a test and stops it in t.Cleanup.
func StartAutoscaler(t testing.TB, n *Nomad, o AutoscalerOptions) *Autoscaler {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, err := localcluster.LaunchAutoscaler(ctx, n, o)
	if err != nil {
		t.Fatalf("start nomad-autoscaler: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- nomad-autoscaler log tail ---\n%s", localcluster.TailFile(a.LogPath, 60))
		}
		_ = a.Stop()
	})
	return a
}

// StartPlanners launches a planner cluster for a test and stops it in t.Cleanup.
func StartPlanners(t testing.TB, o PlannerOptions) *Planners {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	p, err := localcluster.LaunchPlanners(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(p.Logs(40))
		}
		p.Stop()
	})
	return p
}

// BuildPlugins builds the autoscaler plugins and the device plugin into two directories
// under a test temp dir and returns (autoscalerPluginDir, devicePluginDir).
func BuildPlugins(t testing.TB) (string, string) {
	t.Helper()
	base := t.TempDir()
	as, dev := filepath.Join(base, "autoscaler"), filepath.Join(base, "nomad")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := localcluster.BuildPackages(ctx, as, "./plugins/trident", "./plugins/trident-apm", "./plugins/trident-target"); err != nil {
		t.Fatal(err)
	}
	if err := localcluster.BuildPackages(ctx, dev, "./plugins/trident-gpu"); err != nil {
		t.Fatal(err)
	}
	return as, dev
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// FreeAddr returns "127.0.0.1:<port>" for a port that was free a moment ago (see
// FreePort), failing the test when none can be found.
func FreeAddr(t testing.TB) string {
	t.Helper()
	p, err := localcluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}
