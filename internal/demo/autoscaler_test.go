package demo

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty"
)

var testGroups = []groupLimits{{Name: "parse", Min: 1, Max: 16}, {Name: "ocr-text", Min: 1, Max: 8}}

// node is a parsed HCL block: its attributes (strings or float64) and its sub-blocks by
// type and label.
type node struct {
	attrs  map[string]any
	blocks map[string]*node // "type label"
}

func toNode(t *testing.T, b *hclsyntax.Body) *node {
	t.Helper()
	n := &node{attrs: map[string]any{}, blocks: map[string]*node{}}
	for name, a := range b.Attributes {
		v, diags := a.Expr.Value(nil)
		if diags.HasErrors() {
			t.Fatalf("attribute %s: %v", name, diags)
		}
		switch v.Type() {
		case cty.String:
			n.attrs[name] = v.AsString()
		case cty.Number:
			f, _ := v.AsBigFloat().Float64()
			n.attrs[name] = f
		case cty.Bool:
			n.attrs[name] = v.True()
		}
	}
	for _, bl := range b.Blocks {
		k := strings.TrimSpace(bl.Type + " " + strings.Join(bl.Labels, " "))
		if _, dup := n.blocks[k]; dup {
			t.Fatalf("block %s twice", k)
		}
		n.blocks[k] = toNode(t, bl.Body)
	}
	return n
}

func (n *node) get(t *testing.T, path ...string) *node {
	t.Helper()
	for _, p := range path {
		next, ok := n.blocks[p]
		if !ok {
			t.Fatalf("no block %q (have %v)", p, sortedKeys(n.blocks))
		}
		n = next
	}
	return n
}

// parseRendered parses the rendered policies as HCL (Nomad reads them into the job's
// scaling policy; the live demo checks that part).
func parseRendered(t *testing.T, src string) *node {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(src), "peer.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("rendered policies do not parse: %v\n%s", diags, src)
	}
	return toNode(t, f.Body.(*hclsyntax.Body))
}

// TestRenderTargetValuePolicy: each group gets a target-value check on its own
// backlog_per_instance query from trident-apm, the built-in nomad-target, the job's min/max
// and the configured evaluation interval and cooldown; Nomad's job parser reads it into the
// structure the autoscaler's policy parser expects.
func TestRenderTargetValuePolicy(t *testing.T) {
	hcl, err := renderPeerHCL("pdf-curation", testGroups, PhaseAutoscalerTarget, map[string]float64{"parse": 12.5, "ocr-text": 40}, PeerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	job := parseRendered(t, hcl).get(t, `job pdf-curation`)
	if len(job.blocks) != 2 {
		t.Fatalf("%d groups", len(job.blocks))
	}
	for _, g := range testGroups {
		sc := job.get(t, "group "+g.Name, "scaling")
		if sc.attrs["min"] != float64(g.Min) || sc.attrs["max"] != float64(g.Max) || sc.attrs["enabled"] != true {
			t.Errorf("group %s scaling = %v", g.Name, sc.attrs)
		}
		pol := sc.get(t, "policy")
		if pol.attrs["evaluation_interval"] != "10s" || pol.attrs["cooldown"] != "20s" {
			t.Errorf("group %s: policy = %v", g.Name, pol.attrs)
		}
		check := pol.get(t, "check backlog-per-instance")
		if check.attrs["source"] != "trident-apm" || check.attrs["query"] != "backlog_per_instance/pdf-curation/"+g.Name || check.attrs["query_window"] != "30s" {
			t.Errorf("group %s check = %v", g.Name, check.attrs)
		}
		want := map[string]float64{"parse": 12.5, "ocr-text": 40}[g.Name]
		if strat := check.get(t, "strategy target-value"); strat.attrs["target"] != want || len(strat.attrs) != 1 {
			t.Errorf("group %s strategy = %v, want target %v", g.Name, strat.attrs, want)
		}
		if tg := pol.get(t, "target nomad-target"); len(tg.attrs) != 0 {
			t.Errorf("group %s: nomad-target has config %v", g.Name, tg.attrs)
		}
		if len(pol.blocks) != 2 {
			t.Errorf("group %s: policy blocks %v", g.Name, sortedKeys(pol.blocks))
		}
	}
}

// TestRenderThresholdPolicy: three threshold checks per group around the same target T:
// [T, 4T) +1, >= 4T +3, < T/4 -1, each needing two points of the window in bounds.
func TestRenderThresholdPolicy(t *testing.T) {
	hcl, err := renderPeerHCL("video-curation", testGroups[:1], PhaseAutoscalerThreshold, map[string]float64{"parse": 10}, PeerConfig{Cooldown: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pol := parseRendered(t, hcl).get(t, "job video-curation", "group parse", "scaling", "policy")
	if pol.attrs["cooldown"] != "15s" {
		t.Errorf("cooldown = %v", pol.attrs["cooldown"])
	}
	want := map[string]map[string]any{
		"backlog-high":      {"lower_bound": 10.0, "upper_bound": 40.0, "delta": 1.0, "within_bounds_trigger": 2.0},
		"backlog-very-high": {"lower_bound": 40.0, "delta": 3.0, "within_bounds_trigger": 2.0},
		"backlog-low":       {"upper_bound": 2.5, "delta": -1.0, "within_bounds_trigger": 2.0},
	}
	for name, kv := range want {
		check := pol.get(t, "check "+name)
		if check.attrs["query"] != "backlog_per_instance/video-curation/parse" {
			t.Errorf("%s query = %v", name, check.attrs["query"])
		}
		strat := check.get(t, "strategy threshold")
		if len(strat.attrs) != len(kv) {
			t.Errorf("%s: strategy %v, want %v", name, strat.attrs, kv)
		}
		for k, v := range kv {
			if strat.attrs[k] != v {
				t.Errorf("%s: %s = %v, want %v", name, k, strat.attrs[k], v)
			}
		}
	}
}

func TestRenderPeerErrors(t *testing.T) {
	if _, err := renderPeerHCL("j", testGroups, PhaseAutoscalerTarget, map[string]float64{"parse": 1}, PeerConfig{}); err == nil || !strings.Contains(err.Error(), "ocr-text") {
		t.Errorf("missing target: err = %v", err)
	}
	if _, err := renderPeerHCL("j", testGroups[:1], PhaseStatic, map[string]float64{"parse": 1}, PeerConfig{}); err == nil {
		t.Error("static phase rendered a policy")
	}
}

// TestApplyPeerPoliciesKeepsTheJob: the policy replaces the job's and deployments are off;
// everything else of the job is untouched.
func TestApplyPeerPoliciesKeepsTheJob(t *testing.T) {
	pmin, pmax, on := int64(2), int64(9), true
	parsed := &api.Job{TaskGroups: []*api.TaskGroup{{Name: strPtr("parse"), Scaling: &api.ScalingPolicy{
		Min: &pmin, Max: &pmax, Enabled: &on, Policy: map[string]any{"check": []any{map[string]any{"backlog-per-instance": []any{map[string]any{"strategy": []any{map[string]any{"target-value": []any{map[string]any{"target": 5}}}}}}}}},
	}}}}
	one, lo, hi := 1, int64(1), int64(16)
	mp := 1
	job := &api.Job{Update: &api.UpdateStrategy{MaxParallel: &mp}, TaskGroups: []*api.TaskGroup{{
		Name: strPtr("parse"), Count: &one, Update: &api.UpdateStrategy{MaxParallel: &mp},
		Scaling: &api.ScalingPolicy{Min: &lo, Max: &hi, Policy: map[string]any{"check": "trident"}},
	}}}
	if err := applyParsed(job, parsed); err != nil {
		t.Fatal(err)
	}
	g := job.TaskGroups[0]
	if *job.Update.MaxParallel != 0 || *g.Update.MaxParallel != 0 {
		t.Errorf("deployments still on: %d %d", *job.Update.MaxParallel, *g.Update.MaxParallel)
	}
	if *g.Count != 1 {
		t.Errorf("count changed to %d", *g.Count)
	}
	b, _ := json.Marshal(g.Scaling.Policy)
	if !strings.Contains(string(b), "target-value") || strings.Contains(string(b), `"trident"`) {
		t.Errorf("policy = %s", b)
	}
	if *g.Scaling.Min != 2 || *g.Scaling.Max != 9 {
		t.Errorf("min/max = %d/%d, want the parsed 2/9", *g.Scaling.Min, *g.Scaling.Max)
	}
	if err := applyParsed(job, &api.Job{TaskGroups: []*api.TaskGroup{{Name: strPtr("parse")}}}); err == nil {
		t.Error("a group without a parsed policy was accepted")
	}
}

func strPtr(s string) *string { return &s }

// TestPilotRates: the per-instance rate is the best window of at least 6 s in which the operator's queue
// stayed non-empty and its count fixed; an operator never busy gets its average.
func TestPilotRates(t *testing.T) {
	pt := func(ts float64, count, backlog, done, idleDone int) Point {
		return Point{T: ts, Counts: map[string]int{"a": count, "b": 1}, Backlog: map[string]int{"a": backlog, "b": 0}, Done: map[string]int{"a": done, "b": idleDone}}
	}
	ph := &Phase{Series: []Point{
		pt(0, 2, 50, 0, 0),
		pt(5, 2, 40, 100, 10),
		pt(10, 2, 30, 200, 20), // 0..10 s: 200 records, 2 instances: 10/s each (0..5 s is too short)
		pt(15, 2, 20, 340, 30), // 5..15 s: 240 records: 12/s each
		pt(20, 4, 10, 500, 40), // count changed: no window across it
		pt(25, 4, 0, 600, 50),  // queue empty: no window ending here
	}}
	r := pilotRates(ph, []string{"a", "b"})
	if math.Abs(r["a"]-12) > 1e-9 {
		t.Errorf("rate a = %v, want 12", r["a"])
	}
	if math.Abs(r["b"]-2) > 1e-9 { // never busy: 50 records in 25 s on 1 instance
		t.Errorf("rate b = %v, want 2", r["b"])
	}
}

func TestPeerTargets(t *testing.T) {
	got, err := peerTargets(map[string]float64{"parse": 2.04, "ocr-text": 0.01}, map[string]float64{"ocr-text": 7}, testGroups, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got["parse"] != 61.2 || got["ocr-text"] != 7 {
		t.Errorf("targets = %v, want parse=61.2 (2.04/s x 30 s) and the explicit ocr-text=7", got)
	}
	if _, err := peerTargets(map[string]float64{"parse": 1}, nil, testGroups, time.Second); err == nil || !strings.Contains(err.Error(), "ocr-text") {
		t.Errorf("unmeasured group: err = %v", err)
	}
	if got, _ := peerTargets(map[string]float64{"parse": 0.001}, nil, testGroups[:1], time.Second); got["parse"] != 1 {
		t.Errorf("tiny target = %v, want the floor 1", got["parse"])
	}
}

func TestParseTargets(t *testing.T) {
	got, err := ParseTargets(" parse=12.5, ocr-text=40 ")
	if err != nil || got["parse"] != 12.5 || got["ocr-text"] != 40 || len(got) != 2 {
		t.Errorf("ParseTargets = %v %v", got, err)
	}
	for _, bad := range []string{"parse", "parse=0", "=3", "parse=x", "parse=-1", "parse=Inf"} {
		if _, err := ParseTargets(bad); err == nil {
			t.Errorf("ParseTargets(%q) accepted", bad)
		}
	}
	if got, err := ParseTargets(""); err != nil || len(got) != 0 {
		t.Errorf("empty = %v %v", got, err)
	}
}
