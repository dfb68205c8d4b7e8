package experiment

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/sim/baseline"
	"github.com/trident-sched/trident/sim/shipped"
)

func fakeRun(p, key string, thr float64, ooms int) *Run {
	return &Run{Pipeline: p, Seed: 1, Key: key, Result: &sim.Result{Scheduler: key, Throughput: thr, SimSeconds: 1000, Done: true,
		OOMs: ooms, OOMDowntimeS: 33 * float64(ooms)}}
}

// The report normalises to Static and to full Trident, and ends with one RESULT line.
func TestReportNumbersAndOutputs(t *testing.T) {
	runs := []*Run{
		fakeRun("pdf", "static", 1, 0), fakeRun("pdf", "trident", 2, 3),
		fakeRun("pdf", "trident-no-adaptation", 1.6, 0), fakeRun("pdf", "trident-unconstrained-bo", 1.8, 10),
		fakeRun("pdf", "trident-oom-free", 2.1, 0),
	}
	rep := NewReport([]string{"pdf"}, runs, time.Second)
	if got := rep.norm("pdf", "trident"); got != 2 {
		t.Fatalf("normalised trident %v, want 2", got)
	}
	if got := rep.pct("pdf", "trident-no-adaptation"); got != 80 {
		t.Fatalf("ablation %v %%, want 80", got)
	}
	ev, down, loss := rep.oom("pdf", "trident-unconstrained-bo")
	if ev != 10 || down != 330 || loss < 14.28 || loss > 14.29 {
		t.Fatalf("oom row %d %v %v, want 10 330 14.29", ev, down, loss)
	}
	dir := t.TempDir()
	var out bytes.Buffer
	if err := rep.Write(&out, dir); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, `RESULT {"bench":"e2e"`) {
		t.Fatalf("last line %q is not the RESULT line", last)
	}
	if n := strings.Count(out.String(), "RESULT "); n != 1 {
		t.Fatalf("%d RESULT lines, want 1", n)
	}
	for _, f := range []string{"e2e.csv", "e2e.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
}

// With several seeds every figure is the median of per-seed ratios.
func TestReportMedianOverSeeds(t *testing.T) {
	var runs []*Run
	for seed, tr := range map[uint64]float64{1: 1.2, 2: 2.0, 3: 1.5} {
		st := fakeRun("video", "static", 10, 0)
		st.Seed = seed
		x := fakeRun("video", "trident", 10*tr, 0)
		x.Seed = seed
		runs = append(runs, st, x)
	}
	rep := NewReport([]string{"video"}, runs, time.Second)
	if got := rep.norm("video", "trident"); got != 1.5 {
		t.Fatalf("median normalised throughput %v, want 1.5", got)
	}
	if lo, hi := spread(rep.normAll("video", "trident")); lo != 1.2 || hi != 2.0 {
		t.Fatalf("spread %v..%v, want 1.2..2", lo, hi)
	}
}

// The ablation table counts the seeds where an ablation is below full Trident: a median
// near 100 % with seeds on both sides does not rank the layer.
func TestAblationSeedsBelow(t *testing.T) {
	var runs []*Run
	for seed, abl := range map[uint64]float64{1: 9, 2: 11, 3: 9.5, 4: 10} {
		tr := fakeRun("pdf", "trident", 10, 0)
		tr.Seed = seed
		a := fakeRun("pdf", "trident-no-placement", abl, 0)
		a.Seed = seed
		runs = append(runs, tr, a)
	}
	rep := NewReport([]string{"pdf"}, runs, time.Second)
	// Seed 4 ties (equal throughput is not below).
	if below, n := rep.below("pdf", "trident-no-placement"); below != 2 || n != 4 {
		t.Fatalf("seeds below full Trident %d/%d, want 2/4", below, n)
	}
	reportContains(t, rep, "seeds below 100 %", `"pdf.ablation_seeds_below.trident-no-placement":2`, `"pdf.ablation_seeds.trident-no-placement":4`)
}

func TestSchedulerLookup(t *testing.T) {
	calibrated := sim.PDFPipeline(1)
	for _, k := range allKeys() {
		set, err := Setup(k, "pdf", 1, 1, sim.RunConfig{})
		if err != nil {
			t.Fatal(err)
		}
		cl, rc := set.Cluster, set.Run
		wantMBps := sim.LinkMBps(100)
		if strings.HasSuffix(k, NetSuffix) {
			wantMBps = sim.LinkMBps(NetGbps)
		}
		if len(cl.Nodes) != 8 || cl.Nodes[0].EgressMBps != wantMBps || rc.Seed != 1 || rc.NoOOM != (k == "trident-oom-free") {
			t.Fatalf("%s: %d nodes, egress %v MB/s (want %v), run config %+v", k, len(cl.Nodes), cl.Nodes[0].EgressMBps, wantMBps, rc)
		}
		// Queue-sensitivity runs scale the accelerator operators' queues only.
		for i, o := range set.Pipeline.Ops {
			want := calibrated.Ops[i].QueueCap
			if strings.HasSuffix(k, QueueSuffix) && o.Need.Acc > 0 {
				want *= QueueX
			}
			if o.QueueCap != want {
				t.Fatalf("%s: %s queue bound %v, want %v", k, o.Name, o.QueueCap, want)
			}
		}
	}
	if _, err := Setup("nope", "pdf", 1, 1, sim.RunConfig{}); err == nil {
		t.Fatal("unknown scheduler accepted")
	}
	if _, err := Setup("static", "nope", 1, 1, sim.RunConfig{}); err == nil {
		t.Fatal("unknown pipeline accepted")
	}
}

// TestNetworkSensitivityFigures checks the placement ablation at NetGbps: it is computed
// against Trident on the same links (not against Trident at 100 Gbps), and the figures
// reach the table and the RESULT line.
func TestNetworkSensitivityFigures(t *testing.T) {
	egress := func(r *Run, mbps float64) *Run { r.Result.MeanEgressMBps = mbps; return r }
	runs := []*Run{
		fakeRun("video", "static", 10, 0), fakeRun("video", "trident", 20, 0),
		fakeRun("video", "static"+NetSuffix, 9, 0),
		egress(fakeRun("video", "trident"+NetSuffix, 19, 0), 500),
		egress(fakeRun("video", "trident-no-placement"+NetSuffix, 15.2, 0), 950),
	}
	rep := NewReport([]string{"video"}, runs, time.Second)
	f := rep.netFigures("video")
	want := map[string]float64{"ablation_pct.trident-no-placement": 80, "trident_pct_of_100g": 95, "static_pct_of_100g": 90,
		"egress_mbps.trident": 500, "egress_mbps.trident-no-placement": 950}
	for k, v := range want {
		if math.Abs(f[k]-v) > 1e-9 {
			t.Fatalf("%s = %v, want %v (all: %v)", k, f[k], v, f)
		}
	}
	if rep.netFigures("pdf") != nil {
		t.Fatal("figures for a pipeline without network runs")
	}
	reportContains(t, rep, "Network sensitivity: links at 25 Gbps", `"video.net25g.ablation_pct.trident-no-placement":80`)
}

// TestPilotStaticFigures checks the Static-sensitivity figures: every scheduler is
// normalised to the Static tuned on a pilot of the first regime, the calibrated Static
// included, and the figures reach the table and the RESULT line.
func TestPilotStaticFigures(t *testing.T) {
	runs := []*Run{
		fakeRun("pdf", "static", 10, 0), fakeRun("pdf", "static-pilot", 8, 0),
		fakeRun("pdf", "trident", 20, 0), fakeRun("pdf", "ds2+shared", 12, 0),
	}
	rep := NewReport([]string{"pdf"}, runs, time.Second)
	f := rep.pilotFigures("pdf")
	for k, v := range map[string]float64{"static": 1.25, "trident": 2.5, "ds2+shared": 1.5} {
		if math.Abs(f[k]-v) > 1e-9 {
			t.Fatalf("%s = %v, want %v (all: %v)", k, f[k], v, f)
		}
	}
	if _, ok := f["scoot"]; ok {
		t.Fatal("a figure for a scheduler without runs")
	}
	if rep.pilotFigures("video") != nil {
		t.Fatal("figures for a pipeline without the pilot Static's runs")
	}
	reportContains(t, rep, "Static sensitivity: normalised to a Static tuned on a pilot", `"pdf.pilot_static.norm.trident":2.5`)
}

// reportContains fails t unless rep's printed tables and RESULT line contain every one of
// wants.
func reportContains(t *testing.T, rep *Report, wants ...string) {
	t.Helper()
	var out bytes.Buffer
	if err := rep.Write(&out, ""); err != nil {
		t.Fatal(err)
	}
	for _, w := range wants {
		if !strings.Contains(out.String(), w) {
			t.Fatalf("report lacks %q:\n%s", w, out.String())
		}
	}
}

// RunAll reports progress once per finished simulation, ending at the total.
func TestRunAllReportsProgress(t *testing.T) {
	var calls []int
	total := 0
	cfg := Config{Pipelines: []string{"video"}, Scale: 0.002, Seeds: []uint64{1}, Workers: 2,
		Progress: func(done, n int) { calls = append(calls, done); total = n }}
	runs, err := RunAll(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if total != len(runs) || len(calls) != len(runs) {
		t.Fatalf("%d progress calls, total %d, for %d runs", len(calls), total, len(runs))
	}
	for i, d := range calls {
		if d != i+1 {
			t.Fatalf("progress call %d reported %d done", i, d)
		}
	}
}

// TestQueueSensitivityFigures checks the queue-sensitivity figures: each scheduler is
// normalised to Static with the same (larger) queues and compared with its own run at the
// calibrated queues, and the figures reach the table and the RESULT line.
func TestQueueSensitivityFigures(t *testing.T) {
	runs := []*Run{
		fakeRun("pdf", "static", 10, 0), fakeRun("pdf", "trident", 14, 0),
		fakeRun("pdf", "static"+QueueSuffix, 11, 0), fakeRun("pdf", "trident"+QueueSuffix, 17.6, 0),
	}
	rep := NewReport([]string{"pdf"}, runs, time.Second)
	f := rep.queueFigures("pdf")
	want := map[string]float64{"norm.static": 1, "norm.trident": 1.6, "pct_of_q1.static": 110, "pct_of_q1.trident": 17.6 / 14 * 100}
	for k, v := range want {
		if math.Abs(f[k]-v) > 1e-9 {
			t.Fatalf("%s = %v, want %v (all: %v)", k, f[k], v, f)
		}
	}
	if _, ok := f["norm.scoot"]; ok {
		t.Fatalf("figure for a scheduler without queue runs: %v", f)
	}
	if rep.queueFigures("video") != nil {
		t.Fatal("figures for a pipeline without queue runs")
	}
	reportContains(t, rep, "Queue sensitivity: accelerator operators' queue bounds x3", `"pdf.queue_x3.norm.trident":1.6`)
}

// Every Trident variant of the benchmark is the shipped loop with at most one ablation
// option, and the controlled comparison's baselines run over the shipped layers: there
// is no other implementation of Trident to measure.
func TestTridentVariantsAreTheShippedLoop(t *testing.T) {
	type flags struct{ tune, trials, noObs, noPlace, allAtOnce, blind bool }
	want := map[string]flags{
		"trident":                  {tune: true, trials: true},
		"trident-no-observation":   {tune: true, trials: true, noObs: true},
		"trident-no-adaptation":    {},
		"trident-no-placement":     {tune: true, trials: true, noPlace: true},
		"trident-all-at-once":      {tune: true, trials: true, allAtOnce: true},
		"trident-unconstrained-bo": {tune: true, trials: true, blind: true},
		"trident-oom-free":         {tune: true, trials: true},
	}
	for _, k := range allKeys() {
		set, err := Setup(k, "video", 1, 1, sim.RunConfig{})
		if err != nil {
			t.Fatal(err)
		}
		base, _, _ := strings.Cut(k, "@")
		switch s := set.Scheduler.(type) {
		case *shipped.Scheduler:
			o := s.Options()
			got := flags{o.Tune, o.Tuning.Trials, o.NoObservation, o.NoPlacement, o.AllAtOnce, o.Tuning.MemoryBlind}
			if w, ok := want[base]; !ok || got != w {
				t.Errorf("%s: shipped loop with %+v, want %+v (known variant: %v)", k, got, w, ok)
			}
			if s.Name() != k {
				t.Errorf("%s: the run is labelled %q", k, s.Name())
			}
		case *baseline.DS2:
			if strings.HasSuffix(base, "+shared") {
				if _, ok := s.Advisor.(*shipped.Shared); !ok {
					t.Errorf("%s: advisor %T, want the shipped layers", k, s.Advisor)
				}
				if _, ok := s.Capacity.(*shipped.Shared); !ok {
					t.Errorf("%s: capacity source %T, want the shipped layers", k, s.Capacity)
				}
			}
		case *baseline.RayData:
			if _, ok := s.Advisor.(*shipped.Shared); strings.HasSuffix(base, "+shared") && !ok {
				t.Errorf("%s: advisor %T, want the shipped layers", k, s.Advisor)
			}
		default:
			if strings.HasPrefix(k, "trident") || strings.HasSuffix(base, "+shared") {
				t.Errorf("%s: scheduler %T, want the shipped loop", k, s)
			}
		}
	}
}
