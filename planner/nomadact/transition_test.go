package nomadact

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/fsm"
)

// TestSurgeFitsPackedNodes: a transition on a node whose GPUs the operator holds entirely
// replaces old-config instances in place (the surge keeps only what fits), while a node
// with room keeps every old instance beside the new one (room counted in the devices the
// operator accepts, not another vendor's); the final version is unchanged.
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
	// Devices the operator cannot use do not make room: b's two other GPUs are AMD's,
	// and gpu (NVIDIA's, the default vendor) holds both of its NVIDIA devices.
	mixed := map[string]fsm.Node{"b": {Name: "b", CPU: 8, MemoryMB: 8192, GPUs: 4, Devices: fsm.MakeDevices(
		fsm.Device{Model: "L4", MemoryMB: 16000, Count: 2}, fsm.Device{Vendor: "amd", Model: "MI210", MemoryMB: 65536, Count: 2})},
		"c": nodes["c"], "a": nodes["a"]}
	if s := counts(PhaseSurge, mixed); s["gpu@b.g0"] != 1 || s["gpu@b.g1"] != 1 {
		t.Fatalf("surge on a node whose free GPUs are another vendor's: %v, want 1 old + 1 new", s)
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

// TestRenderVersionsPhases: RenderVersions yields the versions Step submits: a first
// decision only its final version; a transition its surge then final (unfitted without
// nodes: the packed node's surge asks for a third GPU); with canaries, the canary (the
// sibling on the full node stopped) then the final version when the canary is the
// decision's only candidate instance, canary, surge and final when more follow.
func TestRenderVersionsPhases(t *testing.T) {
	job := testJob("pipe")
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	p.Template, _ = json.Marshal(job)
	nodes := map[string]fsm.Node{
		"a": {Name: "a", CPU: 8, MemoryMB: 8192},
		"b": {Name: "b", CPU: 8, MemoryMB: 8192, GPUs: 3, GPUMemoryMB: 16000}, // packed by 3 instances
	}
	src := fsm.OpTarget{Nodes: map[string]fsm.Placement{"a": {Current: 1}}, Config: "mode=fast"}
	decide := func(idx uint64, cur, cand int) fsm.Decision {
		g := fsm.OpTarget{Nodes: map[string]fsm.Placement{"b": {Current: cur, Candidate: cand}}, Config: "batch=8"}
		if cand > 0 {
			g.CandidateConfig, g.Transitions = "batch=16", cand
		}
		return fsm.Decision{Index: idx, Job: "pipe", Operators: map[string]fsm.OpTarget{"src": src, "gpu": g}}
	}
	phases := func(vs []Version) string {
		var s []string
		for _, v := range vs {
			s = append(s, v.Phase)
		}
		return strings.Join(s, ",")
	}
	count := func(j *api.Job, name string) int {
		for _, g := range j.TaskGroups {
			if *g.Name == name {
				return *g.Count
			}
		}
		return 0
	}
	for _, canary := range []bool{false, true} {
		o := Options{Canary: canary}
		first, err := RenderVersions(p, decide(1, 3, 0), nil, nodes, o)
		if err != nil || phases(first) != PhaseFinal {
			t.Fatalf("canary %v: first decision %s, %v", canary, phases(first), err)
		}
		existing := first[0].Job
		if !canary {
			unfitted, err := RenderVersions(p, decide(2, 2, 1), existing, nil, o)
			if err != nil || phases(unfitted) != "surge,final" {
				t.Fatalf("unfitted transition %s, %v", phases(unfitted), err)
			}
			if n := count(unfitted[0].Job, "gpu@b.g0") + count(unfitted[0].Job, "gpu@b.g1"); n != 4 {
				t.Errorf("the unfitted surge runs %d gpu instances, want 4 (3 old + 1 new) on 3 GPUs", n)
			}
		}
		one, err := RenderVersions(p, decide(2, 2, 1), existing, nodes, o)
		two, err2 := RenderVersions(p, decide(2, 1, 2), existing, nodes, o)
		if err != nil || err2 != nil {
			t.Fatal(err, err2)
		}
		want1, want2 := "surge,final", "surge,final"
		if canary {
			want1, want2 = "canary,final", "canary,surge,final"
			if c := one[0].Job; count(c, "gpu@b.g0") != 1 || count(c, SlotGroupName("gpu")) != 1 {
				t.Errorf("canary version: gpu@b.g0 %d, slot %d; want the sibling stopped (2 -> 1) beside the slot", count(c, "gpu@b.g0"), count(c, SlotGroupName("gpu")))
			}
		}
		if phases(one) != want1 || phases(two) != want2 {
			t.Errorf("canary %v: one candidate %s (want %s), two %s (want %s)", canary, phases(one), want1, phases(two), want2)
		}
	}
}
