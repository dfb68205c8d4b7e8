package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/trident-sched/trident/internal/benchfmt"
)

// `bench milp -hetero` takes the flags the caller sets over its own defaults, prints its
// table and ends with one RESULT line holding our figures and the plain peer's; a mode
// that only the paper-instance bench has is refused by name.
func TestBenchMILPHetero(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := runBenchMILP(context.Background(), []string{"-hetero", "-sizes", "4", "-seeds", "2", "-time-limit", "20s"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench milp -hetero: %v\n%s", err, stderr.String())
	}
	out := strings.TrimSpace(stdout.String())
	if !strings.Contains(out, "MILP on heterogeneous clusters (hetgen, 2 instances per size") {
		t.Errorf("table missing:\n%s", out)
	}
	last := out[strings.LastIndex(out, "\n")+1:]
	if !strings.HasPrefix(last, "RESULT ") {
		t.Fatalf("output does not end with a RESULT line:\n%s", out)
	}
	var res benchfmt.Result
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Figures["hetero_instances_per_size"] != 2.0 || res.Figures["time_limit_s"] != 20.0 {
		t.Errorf("flags not applied: %v", res.Figures)
	}
	if _, ok := res.Figures["hetero_4_trident_within_1pct"]; !ok {
		t.Errorf("our figures missing: %v", res.Figures)
	}
	if _, ok := res.Peers["hetero_4_plain_within_1pct"]; !ok {
		t.Errorf("peer figures missing: %v", res.Peers)
	}
	err = runBenchMILP(context.Background(), []string{"-hetero", "-modes", "bare"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), `"bare"`) {
		t.Errorf("-hetero -modes bare: err %v, want a refusal naming bare", err)
	}
}

// `bench milp -contention` applies the flags it shares with bench milp and ends with the
// RESULT line of the contention comparison.
func TestBenchMILPContention(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := runBenchMILP(context.Background(), []string{"-contention", "-sizes", "4", "-seeds", "1", "-time-limit", "2s"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench milp -contention: %v\n%s", err, stderr.String())
	}
	out := strings.TrimSpace(stdout.String())
	last := out[strings.LastIndex(out, "\n")+1:]
	var res benchfmt.Result
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &res); err != nil || res.Bench != "milp-contention" {
		t.Fatalf("last line %q: %v", last, err)
	}
	if res.Figures["seeds"] != 1.0 || res.Figures["time_limit_s"] != 2.0 {
		t.Errorf("flags not applied: %v", res.Figures)
	}
	for _, k := range []string{"4_shared_median_ratio", "4_flat_worst_ratio"} {
		if _, ok := res.Figures[k]; !ok {
			t.Errorf("figure %s missing: %v", k, res.Figures)
		}
	}
}
