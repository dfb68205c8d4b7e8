package demo

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/sim/worker"
)

func run(name string, round int, recs int, secs float64, dup int) Phase {
	return Phase{Name: name, Round: round, Records: recs, Elapsed: time.Duration(secs * float64(time.Second)),
		Throughput: float64(recs) / secs, Verify: worker.Report{Unique: recs, Duplicates: dup},
		LoadStart: "2.50 2.00 1.00", LoadEnd: "3.25 2.00 1.00", Started: true}
}

func testReport() *Report {
	r := &Report{Pipeline: "pdf", Docs: 400, Rates: map[string]float64{"parse": 2}, TargetsFrom: "static run 1"}
	r.Peer.defaults()
	for round := 1; round <= 3; round++ {
		r.Phases = append(r.Phases,
			run(PhaseStatic, round, 4000, []float64{100, 125, 110}[round-1], 0),
			run(PhaseAutoscalerTarget, round, 4000, []float64{200, 160, 180}[round-1], 0),
			run(PhaseAutoscalerThreshold, round, 4000, []float64{250, 250, 250}[round-1], 0),
			run(PhaseTrident, round, 4000, []float64{50, 80, 40}[round-1], 0))
	}
	return r
}

// TestSummaryMedianAndSpread: medians and spreads per phase over the rounds, the best
// autoscaler phase by median.
func TestSummaryMedianAndSpread(t *testing.T) {
	r := testReport()
	r.Phases[0].Verify.Missing = 2
	r.Phases[4].Verify.Duplicates = 1
	r.Phases[4].Err = "not finished"
	s := summarize(r)
	if st := s[PhaseStatic]; st.Runs != 3 || st.Median != 4000.0/110 || st.Min != 32 || st.Max != 40 || st.Lost != 2 || st.MaxLoad1 != 3.25 {
		t.Errorf("static = %+v", st)
	}
	if st := s[PhaseStatic]; math.Abs(st.SpreadPct-22) > 1e-9 { // (40 - 32) / 36.36
		t.Errorf("static spread = %v", st.SpreadPct)
	}
	if st := s[PhaseStatic]; st.Duplicated != 1 || st.Failed != 1 {
		t.Errorf("static dup/failed = %d/%d", st.Duplicated, st.Failed)
	}
	if best, b := bestAutoscaler(s); best != PhaseAutoscalerTarget || b.Median != 4000.0/180 {
		t.Errorf("best autoscaler = %s %+v", best, b)
	}
	// A run that failed before publishing its dataset has no figure: out of the median.
	r.Phases = append(r.Phases, Phase{Name: PhaseTrident, Round: 4, Err: "no planner became leader"})
	if tr := summarize(r)[PhaseTrident]; tr.Runs != 3 || tr.Failed != 1 || tr.Median != 80 || tr.Min != 50 {
		t.Errorf("trident with an unstarted run = %+v", tr)
	}
	if m := median([]float64{3, 1, 2, 10}); m != 2.5 {
		t.Errorf("median = %v", m)
	}
}

// TestResultLine: the demo's RESULT line carries Trident's median and its ratios as
// figures, every other phase's median and verification counts as peers.
func TestResultLine(t *testing.T) {
	var buf bytes.Buffer
	if err := benchfmt.WriteResult(&buf, testReport().Result()); err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(buf.String())
	if !strings.HasPrefix(line, "RESULT {") || strings.Count(line, "\n") != 0 {
		t.Fatalf("not a RESULT line: %q", line)
	}
	var res benchfmt.Result
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "RESULT ")), &res); err != nil {
		t.Fatal(err)
	}
	f, p := res.Figures, res.Peers
	if res.Bench != "demo" || f["demo.pdf.trident.records_per_s"] != 80.0 || f["demo.pdf.trident.lost"] != 0.0 || f["demo.pdf.trident.duplicated"] != 0.0 {
		t.Errorf("figures = %v", f)
	}
	if f["demo.pdf.trident_vs_best_autoscaler"] != 3.6 || f["demo.pdf.best_autoscaler"] != PhaseAutoscalerTarget || f["demo.pdf.trident_vs_static"] != 2.2 {
		t.Errorf("ratios = %v %v %v", f["demo.pdf.trident_vs_best_autoscaler"], f["demo.pdf.best_autoscaler"], f["demo.pdf.trident_vs_static"])
	}
	if p["demo.pdf.autoscaler-threshold.records_per_s"] != 16.0 || p["demo.pdf.static.runs"] != 3.0 || p["demo.pdf.autoscaler-target.records_per_s_max"] != 25.0 {
		t.Errorf("peers = %v", p)
	}
	if _, ok := p["demo.pdf.trident.records_per_s"]; ok {
		t.Error("trident among the peers")
	}
	if f["demo.pdf.loadavg1_max"] != 3.25 {
		t.Errorf("loadavg = %v", f["demo.pdf.loadavg1_max"])
	}
}

// TestReportTables: one row per run, one summary row per phase with Trident's ratio to it,
// the ratio lines and the autoscaler configuration notes.
func TestReportTables(t *testing.T) {
	var b strings.Builder
	writeTables(&b, testReport())
	out := b.String()
	for _, want := range []string{
		"Demo runs: pdf pipeline, 400 pdf documents per phase",
		"Demo summary: pdf pipeline, median over rounds",
		"autoscaler-target     3     22.22",
		"3.60x",
		"2.20x the static allocation",
		"3.60x the best nomad-autoscaler phase, autoscaler-target",
		"backlog-per-instance target = rate x 30s; evaluation_interval 10s, cooldown 20s",
		"2.50 2.00 1.00",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\nautoscaler-threshold  "); n != 4 {
		t.Errorf("%d autoscaler-threshold rows, want 3 runs + 1 summary:\n%s", n, out)
	}
	csv := runsCSV(testReport())
	if lines := strings.Count(csv, "\n"); lines != 13 || !strings.Contains(csv, "pdf,trident,2,80.0,4000,50.000,0,0,0,2.50,3.25,false") {
		t.Errorf("runs.csv:\n%s", csv)
	}
	if svg := plotSVG(testReport()); strings.Count(svg, "<polyline") != 12 || !strings.Contains(svg, "trident (median 80.0 rec/s, 3 runs)") {
		t.Errorf("plot: %d lines\n%s", strings.Count(svg, "<polyline"), svg)
	}
}

func TestScalingActions(t *testing.T) {
	log := `2026-11-25T17:00:26.821Z [DEBUG] policy_eval.worker: scaling target: x
2026-11-25T17:00:27.000Z [INFO]  policy_eval.worker: scaling target: id=a from=1 to=3
2026-11-25T17:00:37.000Z [INFO]  policy_eval.worker: scaling target: id=b from=3 to=2
2026-11-25T17:00:38.000Z [INFO]  agent: started`
	if n := scalingActions(log); n != 2 {
		t.Errorf("scaling actions = %d, want 2", n)
	}
}
