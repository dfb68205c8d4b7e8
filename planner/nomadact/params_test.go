package nomadact

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/trident-sched/trident/planner/fsm"
)

// Every rendered group carries each parameter of its config as meta trident_param_<name>
// beside trident_config: current-config groups the running config's values, candidate
// groups the candidate's, old-config groups kept by the surge phase their own. A job file's
// defaults for keys the config does not set are kept, and parameter names are sanitised.
func TestRenderParamMeta(t *testing.T) {
	job := testJob("pipe")
	gpu := job.TaskGroups[1]
	gpu.Meta["trident_params"] = "batch=int[1,64]; kv.block=cat{8,16}"
	gpu.Meta["trident_config"] = "batch=8,kv.block=16"
	// Defaults of the job file as written, so that it also runs without the planner.
	gpu.Meta["trident_param_batch"] = "8"
	gpu.Meta["trident_param_kv_block"] = "16"
	gpu.Meta["trident_param_extra"] = "x"
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	p.Template, _ = json.Marshal(job)
	o := New(nil, Options{}).o
	d1 := fsm.Decision{Index: 7, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"a": {Current: 1}}, Config: "mode=fast"},
		"gpu": {Nodes: map[string]fsm.Placement{"b": {Current: 2}}, Config: "batch=8,kv.block=16"},
	}}
	v1, err := Render(p, d1, PhaseFinal, nil, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	d2 := fsm.Decision{Index: 9, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": d1.Operators["src"],
		"gpu": {Nodes: map[string]fsm.Placement{"b": {Current: 1, Candidate: 1}}, Config: "batch=8,kv.block=16",
			CandidateConfig: "batch=32,kv.block=8", Transitions: 1},
	}}
	for _, phase := range []string{PhaseSurge, PhaseFinal} {
		v2, err := Render(p, d2, phase, v1, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]map[string]string{
			"src@a.g0": {"trident_param_mode": "fast"},
			"gpu@b.g0": {"trident_param_batch": "8", "trident_param_kv_block": "16", "trident_param_extra": "x"},
			"gpu@b.g1": {"trident_param_batch": "32", "trident_param_kv_block": "8", "trident_param_extra": "x"},
		}
		seen := 0
		for _, g := range v2.TaskGroups {
			w, ok := want[*g.Name]
			if !ok {
				continue
			}
			seen++
			params := map[string]string{}
			for k, v := range g.Meta {
				if strings.HasPrefix(k, "trident_param_") && k != "trident_params" {
					params[k] = v
				}
			}
			if len(params) != len(w) {
				t.Errorf("%s %s: param meta %v, want %v", phase, *g.Name, params, w)
			}
			for k, v := range w {
				if params[k] != v {
					t.Errorf("%s %s: meta %s = %q, want %q (config %q)", phase, *g.Name, k, params[k], v, g.Meta["trident_config"])
				}
			}
		}
		if seen != len(want) {
			t.Errorf("%s: %d of the groups %v rendered", phase, seen, want)
		}
	}
	// Two parameters that share a meta key cannot both be rendered.
	bad := d1
	bad.Operators = map[string]fsm.OpTarget{
		"src": d1.Operators["src"],
		"gpu": {Nodes: map[string]fsm.Placement{"b": {Current: 1}}, Config: "kv.block=8,kv_block=16"},
	}
	if _, err := Render(p, bad, PhaseFinal, nil, nil, o); err == nil || !strings.Contains(err.Error(), "trident_param_kv_block") {
		t.Fatalf("colliding parameter keys: err = %v", err)
	}
}
