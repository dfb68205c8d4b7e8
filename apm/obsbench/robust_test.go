package obsbench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/trident-sched/trident/apm/enginesim"
)

// TestRobustResultLine runs a tiny robustness benchmark and checks its RESULT line: the
// two-stage median and worst and the gap to the clean floor for every kind, the floor as a
// peer, and the goals of issue #21 as peers.
func TestRobustResultLine(t *testing.T) {
	kinds := []enginesim.Kind{enginesim.BurstyStarvation, enginesim.ConfigChange}
	r, err := RunRobust(context.Background(), RobustOptions{Seeds: 2, Intervals: 250, Kinds: kinds})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) != 4 {
		t.Fatalf("%d runs, want 2 kinds × 2 seeds", len(r.Runs))
	}
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSpace(buf.String())
	lines := strings.Split(out, "\n")
	last := lines[len(lines)-1]
	if strings.Count(out, "RESULT ") != 1 || !strings.HasPrefix(last, "RESULT ") {
		t.Fatalf("want exactly one RESULT line, last:\n%s", out)
	}
	var res struct {
		Bench   string             `json:"bench"`
		Figures map[string]float64 `json:"figures"`
		Peers   map[string]float64 `json:"peers"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Bench != "observe-robust" {
		t.Errorf("bench %q", res.Bench)
	}
	for _, k := range kinds {
		for _, f := range []string{"two_stage_median", "two_stage_worst"} {
			if v := res.Figures["robust."+string(k)+"."+f]; !(v > 0) {
				t.Errorf("%s %s = %v, want measured > 0", k, f, v)
			}
		}
		if _, ok := res.Figures["robust."+string(k)+".gap_worst"]; !ok {
			t.Errorf("%s: no gap to the clean floor", k)
		}
		if !(res.Peers["robust."+string(k)+".floor_median"] > 0) {
			t.Errorf("%s: no clean floor peer", k)
		}
	}
	if res.Peers["goal.two_stage_median_max"] != 6 || res.Peers["goal.gap_max"] != 1.5 {
		t.Errorf("goals missing from peers: %v", res.Peers)
	}
	if res.Figures["traces"] != 4 {
		t.Errorf("traces = %v", res.Figures["traces"])
	}
}
