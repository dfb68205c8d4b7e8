package nomadact

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
)

// TestSurgeFitsPackedNodes: a transition on a node whose GPUs the operator holds entirely
// replaces old-config instances in place (the surge keeps only what fits), while a node
// with room keeps every old instance beside the new one; the final version is unchanged.
func TestSurgeFitsPackedNodes(t *testing.T) {
	job := testJob("pipe")
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	p.Template, _ = json.Marshal(job)
	o := New(nil, Options{}).o
	d1 := fsm.Decision{Index: 7, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"a": {Current: 1}}, Config: "mode=fast"},
		"gpu": {Nodes: map[string]fsm.Placement{"b": {Current: 2}, "c": {Current: 2}}, Config: "batch=8"},
	}}
	v1, err := Render(p, d1, PhaseFinal, nil, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	// One instance transitions on each GPU node.
	d2 := fsm.Decision{Index: 9, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": d1.Operators["src"],
		"gpu": {Nodes: map[string]fsm.Placement{"b": {Current: 1, Candidate: 1}, "c": {Current: 1, Candidate: 1}},
			Config: "batch=8", CandidateConfig: "batch=16", Transitions: 2},
	}}
	nodes := map[string]fsm.Node{
		"a": {Name: "a", CPU: 8, MemoryMB: 8192},
		"b": {Name: "b", CPU: 8, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000}, // packed: 2 of 2 GPUs in use
		"c": {Name: "c", CPU: 8, MemoryMB: 8192, GPUs: 4, GPUMemoryMB: 16000}, // room for the surge
	}
	counts := func(phase string, nodes map[string]fsm.Node) map[string]int {
		j, err := Render(p, d2, phase, v1, nodes, o)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, g := range j.TaskGroups {
			if *g.Count > 0 {
				m[*g.Name] = *g.Count
			}
		}
		return m
	}
	// Without the inventory (the old behaviour) b's surge asks for 3 GPUs on a 2-GPU node.
	if s := counts(PhaseSurge, nil); s["gpu@b.g0"] != 2 || s["gpu@b.g1"] != 1 {
		t.Fatalf("unfitted surge %v", s)
	}
	s := counts(PhaseSurge, nodes)
	if s["gpu@b.g0"] != 1 || s["gpu@b.g1"] != 1 {
		t.Fatalf("surge on the packed node: %v, want 1 old + 1 new (replaced in place)", s)
	}
	if s["gpu@c.g0"] != 2 || s["gpu@c.g1"] != 1 {
		t.Fatalf("surge on the node with room: %v, want 2 old + 1 new", s)
	}
	if f := counts(PhaseFinal, nodes); f["gpu@b.g0"] != 1 || f["gpu@b.g1"] != 1 || f["gpu@c.g0"] != 1 || f["gpu@c.g1"] != 1 {
		t.Fatalf("final counts %v", f)
	}
	// A node short of CPU, not GPUs, is fitted too (cores are the planner's model).
	tight := map[string]fsm.Node{"b": {Name: "b", CPU: 0.5, MemoryMB: 8192, GPUs: 8}, "c": nodes["c"], "a": nodes["a"]}
	if s := counts(PhaseSurge, tight); s["gpu@b.g0"] != 1 {
		t.Fatalf("surge on a CPU-short node: %v", s)
	}
}

// TestPackedTransitionAgainstNomad: on a real Nomad client whose two GPUs the operator
// holds, a config transition of one instance completes (surge, then final) with no
// placement failure: the surge replaces an old-config instance in place. Before, the
// surge asked for a third GPU, Nomad could not place it, and the decision waited for the
// apply timeout and reverted.
func TestPackedTransitionAgainstNomad(t *testing.T) {
	n := startNomad(t)
	a := newTestActuator(n)
	raw, _ := json.Marshal(testJob("packed"))
	p, err := a.Pipeline(t.Context(), "packed", raw)
	if err != nil {
		t.Fatal(err)
	}
	d1 := fsm.Decision{Index: 100, Job: "packed", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"c1": {Current: 1}}, Config: "mode=fast"},
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Current: 2}}, Config: "batch=8"},
	}}
	if res := stepUntil(t, a, p, d1, 120*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 100: %+v", res)
	}
	d2 := fsm.Decision{Index: 101, Job: "packed", Operators: map[string]fsm.OpTarget{
		"src": d1.Operators["src"],
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Current: 1, Candidate: 1}}, Config: "batch=8", CandidateConfig: "batch=16", Transitions: 1},
	}}
	// Two versions (surge, final), each waiting min_healthy_time (1 s): far below the
	// 40 s progress deadline that an unplaceable surge would run into.
	if res := stepUntil(t, a, p, d2, 90*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("packed transition: %+v", res)
	}
	want := map[string]int{"src@c1.g0|c1": 1, "gpu@c2.g0|c2": 1, "gpu@c2.g1|c2": 1}
	if got := runningByGroup(t, n.API(), "packed"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the packed transition running %v, want %v", got, want)
	}
	deps, _, err := n.API().Jobs().Deployments("packed", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range deps {
		if dep.Status != "successful" {
			t.Fatalf("deployment %s of version %d: %s (%s)", dep.ID[:8], dep.JobVersion, dep.Status, dep.StatusDescription)
		}
	}
	// Promote: both instances on the candidate config (the old one replaced in place).
	d3 := fsm.Decision{Index: 102, Job: "packed", Operators: map[string]fsm.OpTarget{
		"src": d1.Operators["src"],
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Candidate: 2}}, Config: "batch=8", CandidateConfig: "batch=16", Transitions: 1},
	}}
	if res := stepUntil(t, a, p, d3, 90*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("promotion on the packed node: %+v", res)
	}
	// A candidate that dies the way CUDA OOMs do (exit 1, "CUDA out of memory" in
	// stderr, no 137) is recognised by the log pattern: the rollout fails early, naming
	// the OOM, and Nomad reverts to decision 102's version.
	a.o.OOMLogPattern = regexp.MustCompile(DefaultOOMLogPattern)
	d4 := fsm.Decision{Index: 103, Job: "packed", Operators: map[string]fsm.OpTarget{
		"src": d1.Operators["src"],
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Current: 1, Candidate: 1}}, Config: "batch=16", Epoch: 1, CandidateConfig: "batch=32,fail=cudaoom", Transitions: 1},
	}}
	res := stepUntil(t, a, p, d4, 120*time.Second)
	if res.Status != fsm.StatusFailed || !strings.Contains(res.Detail, "ran out of memory") || !strings.Contains(res.Detail, "CUDA out of memory") {
		t.Fatalf("CUDA OOM candidate: %+v, want failed early on the stderr pattern", res)
	}
	t.Logf("decision 103 aborted: %s", res.Detail)
	waitReverted(t, n.API(), "packed", 102, map[string]int{"src@c1.g0|c1": 1, "gpu@c2.g1|c2": 2})
}
