package milpbench_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/milp/milpbench"
)

func TestRunSmall(t *testing.T) {
	cfg := milpbench.DefaultConfig()
	cfg.Pipelines, cfg.Sizes, cfg.Seeds = []string{"video"}, []int{8}, 1
	cfg.Mixes, cfg.Scenarios = []string{"uniform"}, []string{"resched"}
	cfg.Modes = []milpbench.Mode{milpbench.ModeTrident, milpbench.ModeMIP}
	cfg.TimeLimit = 20 * time.Second
	var out bytes.Buffer
	res, err := milpbench.Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"video_8_trident_median_ms", "video_8_trident_p95_ms", "video_8_mip_max_gap", "video_8_mip_within_gap"} {
		if _, ok := res.Figures[k]; !ok {
			t.Errorf("figure %s missing: %v", k, res.Figures)
		}
	}
	if g := res.Figures["video_8_mip_max_gap"].(float64); g > cfg.RelGap {
		t.Errorf("max gap %v above the requested %v", g, cfg.RelGap)
	}
	if res.Peers["paper_video_8_mean_ms"] != 62 {
		t.Errorf("paper peer missing: %v", res.Peers)
	}
	if !strings.Contains(out.String(), "median ms") {
		t.Errorf("table missing:\n%s", out.String())
	}
}

func TestParse(t *testing.T) {
	if v, err := milpbench.ParseInts("8, 16"); err != nil || len(v) != 2 || v[1] != 16 {
		t.Fatalf("ParseInts: %v %v", v, err)
	}
	if _, err := milpbench.ParseInts("8,x"); err == nil {
		t.Fatal("ParseInts accepted x")
	}
	if _, err := milpbench.ParseList("pdf,audio", "pdf", "video"); err == nil {
		t.Fatal("ParseList accepted audio")
	}
}

// The -hetero run reports, per size, our figures and the plain peer's, losses against the
// best proven bound, and no inconsistency between the two formulations.
func TestRunHeteroSmall(t *testing.T) {
	cfg := milpbench.DefaultHeteroConfig()
	cfg.Sizes, cfg.Seeds, cfg.TimeLimit = []int{4}, 3, 20*time.Second
	var out bytes.Buffer
	res, err := milpbench.RunHetero(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"hetero_4_trident_median_ms", "hetero_4_trident_within_1pct", "hetero_4_trident_worst_loss",
		"hetero_4_trident_worst_vs_plain", "hetero_all_trident_within_1pct"} {
		if _, ok := res.Figures[k]; !ok {
			t.Errorf("figure %s missing: %v", k, res.Figures)
		}
	}
	if _, ok := res.Peers["hetero_4_plain_within_1pct"]; !ok {
		t.Errorf("peer figures missing: %v", res.Peers)
	}
	if n := res.Figures["hetero_inconsistent"]; n != 0 {
		t.Errorf("%v plans beat another run's proven bound:\n%s", n, out.String())
	}
	if l := res.Figures["hetero_4_trident_worst_loss"].(float64); l < 0 || l > 1 {
		t.Errorf("worst loss %v outside [0, 1]", l)
	}
	if !strings.Contains(out.String(), "within 1%") {
		t.Errorf("table missing:\n%s", out.String())
	}
}

// -instances: only the named instances run (both spellings), and a malformed name is an
// error naming it.
func TestRunHeteroOnly(t *testing.T) {
	cfg := milpbench.DefaultHeteroConfig()
	cfg.Only, cfg.TimeLimit = []string{"4/2", "het/5/s1"}, 20*time.Second
	var out, progress bytes.Buffer
	cfg.Progress = &progress
	if _, err := milpbench.RunHetero(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "het/4/s2 ") || !strings.HasPrefix(lines[1], "het/5/s1 ") {
		t.Errorf("progress lines, want het/4/s2 and het/5/s1 only:\n%s", progress.String())
	}
	cfg.Only = []string{"4/x"}
	if _, err := milpbench.RunHetero(context.Background(), cfg, &out); err == nil || !strings.Contains(err.Error(), `"4/x"`) {
		t.Errorf("malformed instance: err = %v", err)
	}
}
