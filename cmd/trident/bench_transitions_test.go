package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/trident-sched/trident/internal/benchfmt"
)

// `bench transitions` prints its tables, progress on stderr, and ends with one RESULT line
// holding the canary's and fitted surge's figures and the unfitted surge as the peer; a
// zero -max-batch is refused.
func TestBenchTransitions(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := runBench(context.Background(), []string{"transitions", "-seeds", "2", "-max-batch", "2"}, &stdout, &stderr); err != nil {
		t.Fatalf("bench transitions: %v\n%s", err, stderr.String())
	}
	out := strings.TrimSpace(stdout.String())
	if !strings.Contains(out, "Transitions on packed clusters") || !strings.Contains(out, "at most 2 instance(s) per decision") {
		t.Errorf("table missing:\n%s", out)
	}
	if !strings.Contains(stderr.String(), "2/2 seeds") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
	last := out[strings.LastIndex(out, "\n")+1:]
	if !strings.HasPrefix(last, "RESULT ") {
		t.Fatalf("output does not end with a RESULT line:\n%s", out)
	}
	var res benchfmt.Result
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Bench != "transitions" || res.Figures["seeds"] != 2.0 || res.Figures["max_batch"] != 2.0 {
		t.Errorf("flags not applied: %+v", res)
	}
	for _, k := range []string{"packed_canary_completed_share", "packed_fitted_surge_lost_share_median", "spare_canary_rounds_median"} {
		if _, ok := res.Figures[k]; !ok {
			t.Errorf("figure %s missing: %v", k, res.Figures)
		}
	}
	if res.Peers["packed_unfitted_surge_completed_share"] != 0.0 {
		t.Errorf("peers %v: the unfitted surge completed a packed transition", res.Peers)
	}
	if err := runBench(context.Background(), []string{"transitions", "-max-batch", "0"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "-max-batch") {
		t.Errorf("-max-batch 0: err %v, want a refusal", err)
	}
}
