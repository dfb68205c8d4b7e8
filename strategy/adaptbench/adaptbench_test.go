package adaptbench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/strategy/configspace"
	"github.com/trident-sched/trident/strategy/kvserve"
)

// TestConstrainedBOCutsOOMs checks the constrained BO against the honest baseline — EI
// that scores an OOM as zero throughput, from the quasi-random design and from the default
// configuration — on a fixed seed set (seeds 1..5, 30 evaluations, both operators): at
// least 75% fewer OOM evaluations than either (the benchmark's goal is 80% over 20 seeds;
// 5 seeds leave a few OOMs of slack), and a recommendation whose true rate × P(no OOM
// over an hour) is at most 2% below theirs.
func TestConstrainedBOCutsOOMs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 30 BO tuning runs")
	}
	cfg := DefaultBOConfig()
	cfg.Seeds = 5
	cfg.Variants = variantsNamed(t, cfg, VariantTrident, VariantEIZero, VariantEIZeroWarm)
	res, err := RunBO(context.Background(), cfg, DefaultBOCases())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res {
		for _, b := range []string{VariantEIZero, VariantEIZeroWarm} {
			cmp, err := Compare(c, b)
			if err != nil {
				t.Fatal(err)
			}
			con, _ := c.Method(VariantTrident)
			un, _ := c.Method(b)
			t.Logf("%s vs %s: OOMs %d vs %d (%.0f%% fewer), effective %.3f vs %.3f (cost %+.1f%%)",
				c.Case.Name, b, con.OOMTotal, un.OOMTotal, 100*cmp.OOMReduction, con.RecEffective, un.RecEffective, 100*cmp.ThroughputCost)
			if cmp.OOMReduction < 0.75 {
				t.Errorf("%s vs %s: OOM reduction %.1f%% < 75%%", c.Case.Name, b, 100*cmp.OOMReduction)
			}
			if cmp.ThroughputCost > 0.02 {
				t.Errorf("%s vs %s: throughput cost %.1f%% > 2%%", c.Case.Name, b, 100*cmp.ThroughputCost)
			}
		}
	}
}

// TestLiveRecommendationSurvivesSustainedRun replays the live tuner's settings on the
// captioning runs whose recommendation carried a 58 % (12 evaluations, seeds 13 and 15)
// and a 22 % (20 evaluations, seed 6) chance of OOM within an hour: each recommended a
// configuration whose one 2-minute peak read 2–3 GB (2 σ of the short-run scatter) below
// its mean, and the memory surrogate, fitting almost no noise, took that reading as exact.
// With the surrogate's noise floored at the short-run scatter, the recommendation's
// sustained OOM probability must stay below 10 % (now 0 %, 0 % and 7 %).
func TestLiveRecommendationSurvivesSustainedRun(t *testing.T) {
	cfg := DefaultBOConfig()
	var live Variant
	for _, v := range DefaultVariants(cfg) {
		if v.Name == VariantLive {
			live = v
		}
	}
	cs := DefaultBOCases()[1]
	space := cs.Surface.Space()
	for _, run := range []struct {
		budget int
		seed   uint64
	}{{12, 13}, {12, 15}, {20, 6}} {
		v := live
		v.Budget = run.budget
		r, err := runOnce(context.Background(), cfg, space, cs, v, run.seed)
		if err != nil {
			t.Fatal(err)
		}
		p, err := cs.Surface.OOMProbability(r.Recommendation.Config, cfg.SustainedDuration)
		if err != nil {
			t.Fatal(err)
		}
		if p > 0.1 {
			t.Errorf("%d evaluations, seed %d: recommendation %s has P(OOM over %v) %.3f > 0.1",
				run.budget, run.seed, r.Recommendation.Config, cfg.SustainedDuration, p)
		}
	}
}

// TestOnlineClusteringFindsRegimes checks that the online clusterer finds the true number of
// workload types on both streams with ARI >= 0.89 (the paper's online PDF figure) for three
// stream seeds.
func TestOnlineClusteringFindsRegimes(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		cfg := DefaultClusterConfig()
		cfg.Seed, cfg.Python = seed, ""
		res, _, err := RunClustering(context.Background(), cfg, DefaultStreams())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res {
			s, _ := o.Score("Trident (online)")
			if s.Clusters != o.TrueClusters || s.ARI < 0.89 || s.Purity < 0.95 {
				t.Errorf("seed %d %s: %d clusters (want %d), purity %.3f, ARI %.3f (want >= 0.89)", seed, o.Stream.Name, s.Clusters, o.TrueClusters, s.Purity, s.ARI)
			}
			// One shift per regime change: PDF has 2, Video 2 (short, long, short).
			if s.Shifts != len(o.Stream.Regimes)-1 {
				t.Errorf("seed %d %s: %d regime shifts, want %d", seed, o.Stream.Name, s.Shifts, len(o.Stream.Regimes)-1)
			}
		}
	}
}

func TestOfflineBaselines(t *testing.T) {
	cfg := DefaultClusterConfig()
	if err := exec.Command(cfg.Python, "-c", "import sklearn").Run(); err != nil {
		t.Skipf("%s with scikit-learn unavailable: %v", cfg.Python, err)
	}
	res, version, err := RunClustering(context.Background(), cfg, DefaultStreams())
	if err != nil {
		t.Fatal(err)
	}
	if version == "" {
		t.Fatal("no scikit-learn version reported")
	}
	for _, o := range res {
		km, ok := o.Score("K-means (offline)")
		if !ok {
			t.Fatalf("%s: no K-means score", o.Stream.Name)
		}
		// K-means is given the true k on well-separated log-normal clusters.
		if km.Clusters != o.TrueClusters || km.ARI < 0.85 {
			t.Errorf("%s: K-means %+v", o.Stream.Name, km)
		}
	}
}

func TestReportEndsWithOneResultLine(t *testing.T) {
	cfg := DefaultBOConfig()
	cfg.Seeds, cfg.Budget = 1, 8
	cases, err := RunBO(context.Background(), cfg, DefaultBOCases()[:1])
	if err != nil {
		t.Fatal(err)
	}
	ccfg := DefaultClusterConfig()
	ccfg.Python = ""
	streams, _, err := RunClustering(context.Background(), ccfg, DefaultStreams())
	if err != nil {
		t.Fatal(err)
	}
	tables, res, err := Report(cfg, cases, streams, "")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, tb := range tables {
		if err := tb.Write(&buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := benchfmt.WriteResult(&buf, res); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	last := lines[len(lines)-1]
	if strings.Count(buf.String(), "RESULT ") != 1 || !strings.HasPrefix(last, "RESULT ") {
		t.Fatalf("output does not end with exactly one RESULT line:\n%s", buf.String())
	}
	var got benchfmt.Result
	if err := json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &got); err != nil {
		t.Fatal(err)
	}
	if got.Bench != "adapt" || got.Figures["bo.textocr.constrained_bo.best_rps"] == nil || got.Figures["bo.textocr.vs_ei_oom0.oom_reduction"] == nil ||
		got.Figures["bo.textocr.live_tuner.rec_effective_vs_oracle"] == nil || got.Peers["paper.table6.pdf.oom_unconstrained"] != 14.0 {
		t.Fatalf("RESULT %+v", got)
	}
	// The offline baselines did not run: the peers say so and hold none of their figures.
	if got.Peers["cluster.offline_baselines"] != "unavailable" {
		t.Errorf("peers lack cluster.offline_baselines = unavailable: %v", got.Peers)
	}
	for k := range got.Peers {
		if !strings.HasPrefix(k, "paper.") && (strings.Contains(k, "k_means") || strings.Contains(k, "dbscan")) {
			t.Errorf("peer %s present although the offline baselines were skipped", k)
		}
	}
}

// TestProbeOfflineUnavailable: an interpreter that does not exist, or one without
// scikit-learn, is reported as such (the bench then skips the offline baselines).
func TestProbeOfflineUnavailable(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-python3")
	if err := ProbeOffline(context.Background(), missing); err == nil || !strings.Contains(err.Error(), "no-such-python3") {
		t.Errorf("missing interpreter: err %v, want one naming it", err)
	}
	// A stand-in interpreter that fails the way python3 without scikit-learn does.
	fake := filepath.Join(t.TempDir(), "python3")
	script := "#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho \"ModuleNotFoundError: No module named 'sklearn'\" >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	err := ProbeOffline(context.Background(), fake)
	if want := fake + ": ModuleNotFoundError: No module named 'sklearn'"; err == nil || err.Error() != want {
		t.Errorf("interpreter without scikit-learn: err %v, want %q", err, want)
	}
	if err := ProbeOffline(context.Background(), ""); err == nil {
		t.Error("empty interpreter: no error")
	}
}

// TestIndependentSurfaceRuns runs every variant once with a short budget on the
// independent surface (strategy/kvserve): the default configuration must fit, the oracle
// must beat it, and every recommendation must be scored.
func TestIndependentSurfaceRuns(t *testing.T) {
	cfg := DefaultBOConfig()
	cfg.Seeds, cfg.Budget = 1, 6
	res, err := RunBO(context.Background(), cfg, IndependentBOCases())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res {
		if !(c.Default > 0) || c.DefaultOOM > 1e-6 || !(c.Oracle > c.Default) {
			t.Errorf("%s: default %.3f (P(OOM) %.2g), oracle %.3f", c.Case.Name, c.Default, c.DefaultOOM, c.Oracle)
		}
		if len(c.Methods) != len(DefaultVariants(cfg)) {
			t.Errorf("%s: %d variants scored, want %d", c.Case.Name, len(c.Methods), len(DefaultVariants(cfg)))
		}
	}
}

// TestStartFailuresAreSplit checks the split of failed evaluations into OOMs and start
// failures. On kvserve an engine whose KV pool cannot hold one full-length sequence
// refuses to start at any memory use; the tuners see it as an OOM, the scoring counts it
// apart. Compare's figures are checked on the 2026-11-28 Chat-13B totals (constrained BO 48
// failures, all start failures; EI(OOM = 0) 113, 49 of them start failures): 57.5 % fewer
// failed evaluations, 100 % fewer OOMs. A short run of both variants on both kvserve cases
// must count no more start failures than failures, and the report must show the split.
func TestStartFailuresAreSplit(t *testing.T) {
	c := CaseOutcome{Case: IndependentBOCases()[0], Methods: []MethodOutcome{
		{Variant: Variant{Name: VariantTrident}, OOMTotal: 48, StartFailTotal: 48},
		{Variant: Variant{Name: VariantEIZero}, OOMTotal: 113, StartFailTotal: 49},
	}}
	cmp, err := Compare(c, VariantEIZero)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(cmp.OOMReduction-(1-48.0/113)) > 1e-12 || cmp.PeakOOMReduction != 1 {
		t.Errorf("reductions %.4f (all failures) and %.4f (OOMs), want %.4f and 1", cmp.OOMReduction, cmp.PeakOOMReduction, 1-48.0/113)
	}

	sf := KVServeSurface(kvserve.Chat13B()).(StartFailer)
	small := kvserve.Space().Default()
	small[kvserve.ParamGPUMemUtil], small[kvserve.ParamMaxBatchTokens] = configspace.Num(0.7), configspace.Num(16384)
	if f, err := sf.StartFails(small); err != nil || !f {
		t.Errorf("utilisation 0.7 with 16384 batched tokens: start fails %v (%v), want true", f, err)
	}
	if f, err := sf.StartFails(kvserve.Space().Default()); err != nil || f {
		t.Errorf("default: start fails %v (%v), want false", f, err)
	}

	cfg, res := runIndependent(t, 2, 10)
	for _, c := range res {
		for _, m := range c.Methods {
			if m.StartFailTotal < 0 || m.StartFailTotal > m.OOMTotal {
				t.Errorf("%s %s: %d start failures among %d failed evaluations", c.Case.Name, m.Variant.Name, m.StartFailTotal, m.OOMTotal)
			}
		}
	}
	tables, r, err := Report(cfg, res, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tables[len(tables)-1].Title, "Failed evaluations split") {
		t.Errorf("last table %q, want the split of failed evaluations", tables[len(tables)-1].Title)
	}
	for _, k := range []string{"bo.chat_13b.vs_ei_oom0.peak_oom_reduction", "bo.rag_8b.constrained_bo.start_failures_per_run"} {
		if _, ok := r.Figures[k]; !ok {
			t.Errorf("RESULT figures lack %s", k)
		}
	}
}

// variantsNamed returns the variants of DefaultVariants(cfg) named names, in that order.
func variantsNamed(t *testing.T, cfg BOConfig, names ...string) []Variant {
	t.Helper()
	var out []Variant
	for _, n := range names {
		for _, v := range DefaultVariants(cfg) {
			if v.Name == n {
				out = append(out, v)
			}
		}
	}
	if len(out) != len(names) {
		t.Fatalf("variants %v: found %d", names, len(out))
	}
	return out
}

// runIndependent runs the named variants of DefaultVariants (default: constrained BO and
// EI(OOM = 0)) on the independent surface's cases over seeds 1..seeds, with budget
// evaluations per run (0: the default), and returns the configuration and the outcomes.
func runIndependent(t *testing.T, seeds, budget int, names ...string) (BOConfig, []CaseOutcome) {
	t.Helper()
	cfg := DefaultBOConfig()
	cfg.Seeds = seeds
	if budget > 0 {
		cfg.Budget = budget
	}
	if len(names) == 0 {
		names = []string{VariantTrident, VariantEIZero}
	}
	cfg.Variants = variantsNamed(t, cfg, names...)
	res, err := RunBO(context.Background(), cfg, IndependentBOCases())
	if err != nil {
		t.Fatal(err)
	}
	return cfg, res
}

// TestPoolModelAvoidsStartFailures guards the pool model (bo.Measurement.Pool) on the
// independent surface, whose engine refuses to start when its KV cache cannot hold one
// max_model_len sequence: over seeds 1..5 (30 evaluations, deterministic) constrained BO
// blind to the reported pool starts 10 (Chat-13B) and 7 (RAG-8B) engines that refuse to
// start, and with it 1 and 0 (2026-12-07). The bounds leave room for a few runs to move
// without letting the model's effect go: at most 2 with the pool, at least 5 without, on
// each case.
func TestPoolModelAvoidsStartFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 20 BO tuning runs")
	}
	_, res := runIndependent(t, 5, 0, VariantTrident, VariantTridentNoPool)
	for _, c := range res {
		with, _ := c.Method(VariantTrident)
		blind, _ := c.Method(VariantTridentNoPool)
		t.Logf("%s: start failures with the pool model %d, blind to it %d", c.Case.Name, with.StartFailTotal, blind.StartFailTotal)
		if with.StartFailTotal > 2 {
			t.Errorf("%s: %d start failures with the pool model over 5 runs, want at most 2", c.Case.Name, with.StartFailTotal)
		}
		if blind.StartFailTotal < 5 {
			t.Errorf("%s: %d start failures blind to the pool over 5 runs, want at least 5: the surface no longer tests start failures", c.Case.Name, blind.StartFailTotal)
		}
	}
}

// TestConstrainedBOHasNoPeakOOMOnKVServe guards the independent surface's OOM figures:
// over seeds 1..5 (30 evaluations) constrained BO's failed evaluations on both kvserve
// cases are start failures only, none a peak above the device memory, while EI that
// scores an OOM as zero has peak OOMs on both (2026-11-28, 20 seeds: 0 against 64 and 0
// against 138; about 16 and 35 are expected over 5 seeds).
func TestConstrainedBOHasNoPeakOOMOnKVServe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 20 BO tuning runs")
	}
	_, res := runIndependent(t, 5, 0)
	for _, c := range res {
		con, _ := c.Method(VariantTrident)
		ei, _ := c.Method(VariantEIZero)
		t.Logf("%s: peak OOMs (start failures) constrained %d (%d), EI(OOM = 0) %d (%d)", c.Case.Name,
			con.OOMTotal-con.StartFailTotal, con.StartFailTotal, ei.OOMTotal-ei.StartFailTotal, ei.StartFailTotal)
		if con.OOMTotal != con.StartFailTotal {
			t.Errorf("%s: constrained BO had %d peak OOMs, want 0", c.Case.Name, con.OOMTotal-con.StartFailTotal)
		}
		if ei.OOMTotal == ei.StartFailTotal {
			t.Errorf("%s: EI(OOM = 0) had no peak OOM: the surface no longer tests the memory constraint", c.Case.Name)
		}
	}
}
