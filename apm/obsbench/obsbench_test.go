package obsbench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/trident-sched/trident/apm/trace"
)

// TestTable3Ordering is the acceptance check of the observation layer: on the fixed seed 1
// with 2000 intervals per trace, MAPE strictly decreases DS2 > EMA > GP > GP+signal >
// GP+two-stage on both traces, and the two-stage filter stays at or below 6% (the paper
// reports 5.6% and 4.8%). The traces are seeded, so the result is deterministic; the 6%
// bound leaves room over the ~3.6% measured so that harmless numerical changes (e.g. a
// different L-BFGS path) do not flip it, while losing either filter stage breaks it.
func TestTable3Ordering(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 2×2000 intervals through five estimators")
	}
	for _, k := range Kinds() {
		scores, err := Accuracy(context.Background(), k, 1, 2000, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range scores {
			if s.Method != methods[i] {
				t.Fatalf("%s: method %d is %q, want %q", k, i, s.Method, methods[i])
			}
			t.Logf("%s %-13s MAPE %6.2f%% (paper %4.1f%%) accepted %3.0f%%", k, s.Method, s.MAPE, paper(k, s.Method), 100*s.Accepted)
		}
		if !OrderingHolds(scores) {
			t.Errorf("%s: Table 3 ordering violated: %+v", k, scores)
		}
		if m := scores[len(scores)-1].MAPE; m > 6 {
			t.Errorf("%s: two-stage MAPE %.2f%% > 6%%", k, m)
		}
	}
}

func TestOrderingHolds(t *testing.T) {
	mk := func(ms ...float64) []Score {
		s := make([]Score, len(ms))
		for i, m := range ms {
			s[i] = Score{Method: methods[i], MAPE: m}
		}
		return s
	}
	if !OrderingHolds(mk(60, 25, 20, 8, 5)) {
		t.Error("paper-like ordering rejected")
	}
	if OrderingHolds(mk(60, 20, 25, 8, 5)) {
		t.Error("EMA better than GP accepted")
	}
	if OrderingHolds(mk(60, 25, 20, 8)) {
		t.Error("missing method accepted")
	}
}

// TestReportResultLine runs a tiny benchmark and checks the printed RESULT line carries
// every figure with a measured (positive) value and the paper's numbers as peers.
func TestReportResultLine(t *testing.T) {
	r, err := Run(context.Background(), Options{Seed: 4, Samples: 120, ExtraSeeds: -1, Windows: []int{20}, LayerOperators: 2})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
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
	if res.Bench != "observe" {
		t.Errorf("bench %q", res.Bench)
	}
	for _, k := range []trace.Kind{trace.PDF, trace.Video} {
		for _, m := range methods {
			key := string(k) + "_mape_" + metricName(m)
			if !(res.Figures[key] > 0) {
				t.Errorf("figure %s = %v, want measured > 0", key, res.Figures[key])
			}
			if res.Peers["paper_"+key] != paper(k, m) {
				t.Errorf("peer paper_%s = %v, want %v", key, res.Peers["paper_"+key], paper(k, m))
			}
		}
	}
	for _, key := range []string{"update_predict_us_w20", "lml_grad_ms_w20", "refit_ms_w20", "layer_tick_ms", "layer_tick_mean_ms"} {
		if !(res.Figures[key] > 0) {
			t.Errorf("figure %s = %v, want measured > 0", key, res.Figures[key])
		}
	}
}

func TestPaperMAPE(t *testing.T) {
	if v, ok := PaperMAPE(trace.Video, "gp+two-stage"); !ok || v != 4.8 {
		t.Errorf("video two-stage %v %v, want 4.8", v, ok)
	}
	if _, ok := PaperMAPE(trace.PDF, "nope"); ok {
		t.Error("unknown method reported")
	}
	if _, ok := PaperMAPE("audio", "ema"); ok {
		t.Error("unknown kind reported")
	}
	if len(Methods()) != 5 || len(Kinds()) != 2 {
		t.Errorf("methods %v kinds %v", Methods(), Kinds())
	}
}
