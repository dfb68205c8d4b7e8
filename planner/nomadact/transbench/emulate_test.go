package transbench

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/nomadact"
)

// packedPipeline is a CPU source on node "c" and a tunable accelerator operator "gpu"
// with two instances on node "g", whose GPUs (gpus) it holds entirely when gpus is 2.
func packedPipeline(t *testing.T, gpus int) (*fsm.Pipeline, []fsm.Node, fsm.Decision) {
	t.Helper()
	specs := []*opSpec{
		{op: fsm.Operator{Name: "src", Order: 0, CPU: 1, MemoryMB: 512, ColdStartSec: 5, Config: "mode=fast"}},
		{op: fsm.Operator{Name: "gpu", Order: 1, CPU: 2, MemoryMB: 8192, GPUs: 1, GPUMemoryMB: 16000, ColdStartSec: 30,
			Params: "batch=int[1,64]", Config: "batch=8"}},
	}
	job := templateJob("packed", specs)
	p, err := nomadact.ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	if p.Template, err = json.Marshal(job); err != nil {
		t.Fatal(err)
	}
	nodes := []fsm.Node{
		{Name: "c", CPU: 8, MemoryMB: 8192},
		{Name: "g", CPU: 16, MemoryMB: 65536, GPUs: gpus, GPUMemoryMB: 24000},
	}
	d := fsm.Decision{Index: 1, Job: "packed", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"c": {Current: 1}}, Config: "mode=fast"},
		"gpu": {Nodes: map[string]fsm.Placement{"g": {Current: 2}}, Config: "batch=8"},
	}}
	return p, nodes, d
}

// transition is d moving k of the gpu operator's two instances to batch=16.
func transition(d fsm.Decision, idx uint64, k int) fsm.Decision {
	out := fsm.Decision{Index: idx, Job: d.Job, Operators: map[string]fsm.OpTarget{"src": d.Operators["src"]}}
	out.Operators["gpu"] = fsm.OpTarget{Nodes: map[string]fsm.Placement{"g": {Current: 2 - k, Candidate: k}},
		Config: "batch=8", CandidateConfig: "batch=16", Transitions: 1}
	return out
}

// start places decision d's final version on an empty cluster.
func start(t *testing.T, p *fsm.Pipeline, nodes []fsm.Node, d fsm.Decision, o nomadact.Options) (*Cluster, *api.Job) {
	t.Helper()
	c := NewCluster(p, nodes)
	vs, err := nomadact.RenderVersions(p, d, nil, nil, o)
	if err != nil || len(vs) != 1 || vs[0].Phase != nomadact.PhaseFinal {
		t.Fatalf("initial versions %v, %v", vs, err)
	}
	st, err := c.Apply(vs[0].Job, want(d))
	if err != nil || st.Stalled {
		t.Fatalf("initial version: %+v, %v", st, err)
	}
	return c, vs[0].Job
}

func want(d fsm.Decision) map[string]int {
	out := map[string]int{}
	for n, t := range d.Operators {
		out[n] = t.Count()
	}
	return out
}

func nodeMap(nodes []fsm.Node) map[string]fsm.Node {
	out := map[string]fsm.Node{}
	for _, n := range nodes {
		out[n.Name] = n
	}
	return out
}

// The unfitted surge on a node whose two GPUs the operator holds asks for a third: the
// version stalls with nothing placed or stopped, and the revert restores what ran.
func TestPackedSurgeWithoutFittingStalls(t *testing.T) {
	p, nodes, d := packedPipeline(t, 2)
	c, job := start(t, p, nodes, d, nomadact.Options{})
	before := fmt.Sprint(c.Running())
	vs, err := nomadact.RenderVersions(p, transition(d, 2, 1), job, nil, nomadact.Options{})
	if err != nil || len(vs) != 2 || vs[0].Phase != nomadact.PhaseSurge {
		t.Fatalf("versions %v, %v", vs, err)
	}
	st, err := c.Apply(vs[0].Job, want(d))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Stalled || fmt.Sprint(st.Blocked) != "[g]" || st.ExtraGPUs != 1 || st.Placed["gpu"] != 0 || st.Stopped["gpu"] != 0 {
		t.Fatalf("unfitted surge on the packed node: %+v, want stalled on g, 1 GPU over, nothing placed or stopped", st)
	}
	if st.Seconds != ApplyTimeout || st.Lost["gpu"] != 0 {
		t.Errorf("stalled version: %v s, lost %v; want the apply timeout and nothing lost (the old instances serve)", st.Seconds, st.Lost)
	}
	if rev, err := c.Apply(job, want(d)); err != nil || rev.Stalled || fmt.Sprint(c.Running()) != before {
		t.Fatalf("revert: %+v, %v; running %v, want %s", rev, err, c.Running(), before)
	}
	// The same surge on a node with a spare GPU fits and costs nothing.
	_, nodes, _ = packedPipeline(t, 3)
	c, job = start(t, p, nodes, d, nomadact.Options{})
	vs, _ = nomadact.RenderVersions(p, transition(d, 2, 1), job, nil, nomadact.Options{})
	for _, v := range vs {
		st, err := c.Apply(v.Job, want(d))
		if err != nil || st.Stalled || st.Lost["gpu"] != 0 || st.ExtraGPUs != 0 {
			t.Fatalf("%s version with a spare GPU: %+v, %v", v.Phase, st, err)
		}
	}
}

// The fitted surge replaces an old instance in place: two versions per batch, each batch
// costing one cold start (30 s) of one instance, the old instances gone at the end.
func TestFittedSurgeTwoVersionsPerBatch(t *testing.T) {
	p, nodes, d := packedPipeline(t, 2)
	c, job := start(t, p, nodes, d, nomadact.Options{})
	for k := 1; k <= 2; k++ {
		dk := transition(d, uint64(1+k), k)
		vs, err := nomadact.RenderVersions(p, dk, job, nodeMap(nodes), nomadact.Options{})
		if err != nil || len(vs) != 2 || vs[0].Phase != nomadact.PhaseSurge || vs[1].Phase != nomadact.PhaseFinal {
			t.Fatalf("batch %d: versions %v, %v; want surge, final", k, vs, err)
		}
		lost := 0.0
		for _, v := range vs {
			st, err := c.Apply(v.Job, want(d))
			if err != nil || st.Stalled || st.ExtraGPUs != 0 {
				t.Fatalf("batch %d %s version: %+v, %v", k, v.Phase, st, err)
			}
			lost += st.Lost["gpu"]
			if st.Lost["src"] != 0 {
				t.Fatalf("batch %d: src lost %v", k, st.Lost["src"])
			}
			job = v.Job
		}
		if lost != 30 {
			t.Errorf("batch %d lost %v instance-seconds, want 30 (one instance's cold start)", k, lost)
		}
		if c.Serving("gpu") != 2 || c.GPUsUsed("g") != 2 {
			t.Errorf("batch %d: %d gpu instances on %d GPUs, want 2 on 2", k, c.Serving("gpu"), c.GPUsUsed("g"))
		}
	}
	if got := fmt.Sprint(c.Running()); got != "map[gpu@g.g1|g:2 src@c.g0|c:1]" {
		t.Errorf("after the transition: %s", got)
	}
}

// A canary on a full node needs the sibling stop renderCanary makes: with it the canary
// version fits, costs one cold start (not the probe window), and the promotion stops the
// slot's old allocation; without it (the sibling's count put back) the canary stalls.
func TestCanaryOnFullNodeNeedsSiblingStop(t *testing.T) {
	p, nodes, d := packedPipeline(t, 2)
	o := nomadact.Options{Canary: true}
	c, job := start(t, p, nodes, d, o)
	if got := fmt.Sprint(c.Running()); got != "map[gpu@canary|g:1 gpu@g.g0|g:1 src@c.g0|c:1]" {
		t.Fatalf("initial version with a canary slot: %s", got)
	}
	vs, err := nomadact.RenderVersions(p, transition(d, 2, 1), job, nodeMap(nodes), o)
	if err != nil || len(vs) != 2 || vs[0].Phase != nomadact.PhaseCanary || vs[1].Phase != nomadact.PhaseFinal {
		t.Fatalf("versions %v, %v; want canary, final", vs, err)
	}
	// The canary without the sibling stop: both old allocations still run beside it.
	unfit, _ := json.Marshal(vs[0].Job)
	var bad api.Job
	if err := json.Unmarshal(unfit, &bad); err != nil {
		t.Fatal(err)
	}
	for _, g := range bad.TaskGroups {
		if *g.Name == "gpu@g.g0" {
			g.Count = ptr(1)
		}
	}
	probe := NewCluster(p, nodes)
	if _, err := probe.Apply(job, want(d)); err != nil {
		t.Fatal(err)
	}
	if st, err := probe.Apply(&bad, want(d)); err != nil || !st.Stalled || st.ExtraGPUs != 1 {
		t.Fatalf("canary beside both old allocations on a full node: %+v, %v; want stalled, 1 GPU over", st, err)
	}
	st, err := c.Apply(vs[0].Job, want(d))
	if err != nil || st.Stalled || st.Canaries != 1 || st.Stopped["gpu"] != 1 || st.ExtraGPUs != 0 {
		t.Fatalf("canary version: %+v, %v; want one canary, the sibling stopped, no GPU over", st, err)
	}
	if want := 30.0 + CanaryWarmup + CanaryProbe; st.Seconds != want || st.Lost["gpu"] != 30 {
		t.Errorf("canary version: %v s, lost %v; want the probe window %v s and one cold start (30 instance-s)", st.Seconds, st.Lost, want)
	}
	if c.Serving("gpu") != 1 || c.GPUsUsed("g") != 1 {
		t.Errorf("after the promotion %d instances on %d GPUs, want 1 (the canary) on 1", c.Serving("gpu"), c.GPUsUsed("g"))
	}
	// The final version puts the sibling back: a second cold start.
	st, err = c.Apply(vs[1].Job, want(d))
	if err != nil || st.Stalled || st.Placed["gpu"] != 1 || st.Lost["gpu"] != 30 {
		t.Fatalf("final version: %+v, %v", st, err)
	}
	if got := fmt.Sprint(c.Running()); got != "map[gpu@canary|g:1 gpu@g.g0|g:1 src@c.g0|c:1]" {
		t.Errorf("after decision 2: %s", got)
	}
}

// Unchanged groups keep running; a group whose spec changes without a canary is replaced,
// each instance out for its cold start.
func TestSpecChanges(t *testing.T) {
	p, nodes, d := packedPipeline(t, 2)
	c, job := start(t, p, nodes, d, nomadact.Options{})
	if st, err := c.Apply(job, want(d)); err != nil || len(st.Stopped)+len(st.Placed) != 0 || st.Seconds != 0 || len(st.Lost) != 0 {
		t.Fatalf("the same version again: %+v, %v; want nothing done", st, err)
	}
	raw, _ := json.Marshal(job)
	var changed api.Job
	if err := json.Unmarshal(raw, &changed); err != nil {
		t.Fatal(err)
	}
	for _, g := range changed.TaskGroups {
		if *g.Name == "gpu@g.g0" {
			g.Meta["trident_config"] = "batch=12"
		}
	}
	st, err := c.Apply(&changed, want(d))
	if err != nil || st.Stalled || st.Stopped["gpu"] != 2 || st.Placed["gpu"] != 2 || st.Lost["gpu"] != 60 || st.Stopped["src"] != 0 {
		t.Fatalf("destructive change of gpu@g.g0: %+v, %v; want 2 replaced, 60 instance-s lost, src untouched", st, err)
	}
	// A group pinned by its constraint to another node than its meta says is refused.
	for _, g := range changed.TaskGroups {
		if *g.Name == "gpu@g.g0" {
			g.Meta[nomadact.MetaNode] = "c"
		}
	}
	if _, err := c.Apply(&changed, want(d)); err == nil {
		t.Error("a group whose constraint and meta disagree on its node was accepted")
	}
}
