package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/internal/localcluster"
)

// TestBenchPlannerShort runs `bench planner` with tiny phases against real Nomad and three
// real planner processes: it ends with a RESULT line that parses, every request above the
// body limit was answered 413, and both phases measured rounds.
func TestBenchPlannerShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real Nomad and planner processes: skipped in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "bin")
	if err := localcluster.BuildPackages(ctx, dir, "./cmd/trident"); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := runBenchPlanner(ctx, []string{"-idle", "6s", "-busy", "8s", "-flip", "4s", "-settle", "1s",
		"-bin", filepath.Join(dir, "trident"), "-dir", filepath.Join(t.TempDir(), "soak")}, &stdout, &stderr)
	t.Logf("bench planner took %v\nstderr:\n%s\nstdout:\n%s", time.Since(start).Round(time.Second), stderr.String(), stdout.String())
	if err != nil {
		t.Fatalf("bench planner: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "RESULT ") {
		t.Fatalf("output does not end with a RESULT line")
	}
	var res benchfmt.Result
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &res); err != nil {
		t.Fatalf("RESULT line: %v", err)
	}
	if res.Bench != "planner" {
		t.Errorf("bench %q, want planner", res.Bench)
	}
	if n, ok := res.Figures["oversize.answered_413"].(float64); !ok || n != 25 || res.Figures["oversize.requests"] != 25.0 {
		t.Errorf("oversize: %v of %v answered 413, want 25 of 25", res.Figures["oversize.answered_413"], res.Figures["oversize.requests"])
	}
	for _, k := range []string{"idle.rounds", "busy.rounds", "busy.observation_requests"} {
		if v, _ := res.Figures[k].(float64); v < 1 {
			t.Errorf("%s = %v, want at least 1", k, res.Figures[k])
		}
	}
	if !strings.Contains(stderr.String(), "bench planner: idle") || !strings.Contains(stdout.String(), "goals (issue #28)") {
		t.Errorf("no progress lines on stderr or no goals table on stdout")
	}
}
