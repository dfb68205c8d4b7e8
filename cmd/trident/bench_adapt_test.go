package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trident-sched/trident/internal/benchfmt"
)

// TestBenchAdaptWithoutSklearn: with no usable python3/scikit-learn (here an interpreter
// that does not exist) `bench adapt` still succeeds, says once on stderr that the offline
// baselines were skipped and how to get them, and marks them unavailable in the RESULT.
func TestBenchAdaptWithoutSklearn(t *testing.T) {
	python := filepath.Join(t.TempDir(), "no-such-python3")
	var stdout, stderr bytes.Buffer
	err := runBenchAdapt(context.Background(), []string{"-seeds", "1", "-budget", "6", "-init", "3", "-python", python}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench adapt failed without scikit-learn: %v\nstderr:\n%s", err, stderr.String())
	}
	if n := strings.Count(stderr.String(), "peer skipped"); n != 1 || !strings.Contains(stderr.String(), "make deps") || !strings.Contains(stderr.String(), python) {
		t.Errorf("want one 'peer skipped' line naming %s and `make deps`, got %d in:\n%s", python, n, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "RESULT ") {
		t.Fatalf("output does not end with a RESULT line:\n%s", stdout.String())
	}
	var res benchfmt.Result
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Peers["cluster.offline_baselines"] != "unavailable" {
		t.Errorf("peers: cluster.offline_baselines = %v, want unavailable", res.Peers["cluster.offline_baselines"])
	}
	if _, ok := res.Figures["cluster.pdf.trident.ari"]; !ok {
		t.Errorf("online clustering figures missing: %v", res.Figures)
	}
}
