package harness

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

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
	n, err := Launch(ctx, o)
	if err != nil {
		t.Fatalf("start nomad: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, a := range n.agents {
				t.Logf("--- %s log tail ---\n%s", a.name, tailFile(a.logPath, 40))
			}
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
	a, err := LaunchAutoscaler(ctx, n, o)
	if err != nil {
		t.Fatalf("start nomad-autoscaler: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- nomad-autoscaler log tail ---\n%s", tailFile(a.LogPath, 60))
		}
		_ = a.Stop()
	})
	return a
}

// BuildPackages builds the given main packages of this module (e.g. "./plugins/trident")
// into dir with `go build`, so tests always run the plugins of the current source.
func BuildPackages(ctx context.Context, dir string, pkgs ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for _, p := range pkgs {
		out := filepath.Join(dir, filepath.Base(p))
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, p)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", p, err, b)
		}
	}
	return nil
}

// BuildPlugins builds the autoscaler plugins and the device plugin into two directories
// under a test temp dir and returns (autoscalerPluginDir, devicePluginDir).
func BuildPlugins(t testing.TB) (string, string) {
	t.Helper()
	base := t.TempDir()
	as, dev := filepath.Join(base, "autoscaler"), filepath.Join(base, "nomad")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := BuildPackages(ctx, as, "./plugins/trident", "./plugins/trident-apm", "./plugins/trident-target"); err != nil {
		t.Fatal(err)
	}
	if err := BuildPackages(ctx, dev, "./plugins/trident-gpu"); err != nil {
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
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}
