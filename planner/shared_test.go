package planner

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// sharedCluster starts n planner servers with a fake actuator over a CPU node and gpu,
// rounds every 100 ms (noJoint: without the joint round), and returns the cluster and its
// leader's HTTP address.
func sharedCluster(t *testing.T, n int, gpu fsm.Node, noJoint bool) (*testCluster, string) {
	t.Helper()
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, nodes: []fsm.Node{{Name: "cpu1", CPU: 4, MemoryMB: 8192}, gpu}}
	c := newTestCluster(t, n, func(int) *LoopConfig {
		return &LoopConfig{Interval: 100 * time.Millisecond, Actuator: fc, Invalidator: fc, NoJoint: noJoint}
	})
	li, _ := c.leader(10 * time.Second)
	return c, c.peers[li].HTTPAddr
}

// TestPipelinesShareTheInventory: a second pipeline is planned on what the first one's
// decision leaves, capped at its joint share, so the two never hold more GPUs than the
// cluster has and the weights decide the split; deleting the first frees its GPUs for the
// second at a following round.
func TestPipelinesShareTheInventory(t *testing.T) {
	c, ld := sharedCluster(t, 3, fsm.Node{Name: "gpu1", CPU: 8, MemoryMB: 16384, GPUs: 4, GPUMemoryMB: 16000}, false)
	first := registerApplied(t, c, ld, testPipeline())
	if n := first.Groups["embed"].Count; n != 4 {
		t.Fatalf("first pipeline alone holds %d GPUs, want all 4", n)
	}
	second := testPipeline()
	second.Weight = 3
	raw, _ := json.Marshal(second)
	if code, body := c.do(http.MethodPut, ld+"/v1/pipelines/second", map[string]json.RawMessage{"job": raw}); code != 200 {
		t.Fatalf("register second: HTTP %d %s", code, body)
	}
	gpus := func() (int, int) {
		var a, b client.PlanResponse
		_, ba := c.do(http.MethodGet, ld+"/v1/plan/pdf", nil)
		_, bb := c.do(http.MethodGet, ld+"/v1/plan/second", nil)
		_ = json.Unmarshal(ba, &a)
		_ = json.Unmarshal(bb, &b)
		return a.Groups["embed"].Count, b.Groups["embed"].Count
	}
	// The joint round (max-min, weights 1 and 3, both at 1 record/s per GPU) gives the
	// first pipeline 1 GPU and the second 3: the first shrinks to its share, then the
	// second takes what it freed. At no point do the two hold more than the 4 GPUs.
	waitFor(t, "the weighted split 1:3", 15*time.Second, func() bool {
		a, b := gpus()
		if a+b > 4 {
			t.Fatalf("the pipelines hold %d + %d GPUs of 4", a, b)
		}
		return a == 1 && b == 3
	})
	if code, body := c.do(http.MethodDelete, ld+"/v1/pipelines/pdf", nil); code != 200 {
		t.Fatalf("delete: HTTP %d %s", code, body)
	}
	waitFor(t, "the second pipeline to get the freed GPUs", 10*time.Second, func() bool {
		_, b := gpus()
		return b == 4
	})
}

// TestPipelinesShareFirstComeWithoutJoint: with the joint round off, the pipeline that
// holds every GPU keeps them and the second gets none (first come, first served) until
// the first is deleted.
func TestPipelinesShareFirstComeWithoutJoint(t *testing.T) {
	c, ld := sharedCluster(t, 1, fsm.Node{Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000}, true)
	registerApplied(t, c, ld, testPipeline())
	raw, _ := json.Marshal(testPipeline())
	if code, body := c.do(http.MethodPut, ld+"/v1/pipelines/second", map[string]json.RawMessage{"job": raw}); code != 200 {
		t.Fatalf("register second: HTTP %d %s", code, body)
	}
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		var a client.PlanResponse
		_, ba := c.do(http.MethodGet, ld+"/v1/plan/pdf", nil)
		_ = json.Unmarshal(ba, &a)
		if a.Groups["embed"].Count != 2 {
			t.Fatalf("the first pipeline holds %d GPUs, want both (no joint round)", a.Groups["embed"].Count)
		}
	}
}

// TestBatchPipelineQueuesUntilRoom: on 2 GPUs, two services take one each (joint round);
// a third, batch, pipeline cannot get its minimum (one GPU) and is queued, not failed: no
// decision, its place shown by the API; when a service is deleted it is admitted and
// planned on the freed GPU.
func TestBatchPipelineQueuesUntilRoom(t *testing.T) {
	c, ld := sharedCluster(t, 1, fsm.Node{Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000}, false)
	registerApplied(t, c, ld, testPipeline())
	put := func(job string, p fsm.Pipeline) {
		t.Helper()
		raw, _ := json.Marshal(p)
		if code, body := c.do(http.MethodPut, ld+"/v1/pipelines/"+job, map[string]json.RawMessage{"job": raw}); code != 200 {
			t.Fatalf("register %s: HTTP %d %s", job, code, body)
		}
	}
	plan := func(job string) (int, client.PlanResponse) {
		var p client.PlanResponse
		code, b := c.do(http.MethodGet, ld+"/v1/plan/"+job, nil)
		_ = json.Unmarshal(b, &p)
		return code, p
	}
	put("svc", testPipeline())
	waitFor(t, "the services to split the GPUs", 15*time.Second, func() bool {
		_, a := plan("pdf")
		_, b := plan("svc")
		return a.Groups["embed"].Count == 1 && b.Groups["embed"].Count == 1 && b.Status == fsm.StatusDone
	})
	batch := testPipeline()
	batch.Batch, batch.InputRecords = true, 5000
	put("batch", batch)
	var view client.Pipeline
	waitFor(t, "the batch pipeline to be queued", 10*time.Second, func() bool {
		_, b := c.do(http.MethodGet, ld+"/v1/pipelines/batch", nil)
		return json.Unmarshal(b, &view) == nil && view.Queued != nil
	})
	if view.Queued.Position != 1 || view.Queued.Reason == "" {
		t.Fatalf("queued %+v: want position 1 with a reason", view.Queued)
	}
	for range 5 {
		time.Sleep(100 * time.Millisecond)
		if code, _ := plan("batch"); code != http.StatusNotFound {
			t.Fatalf("queued pipeline: plan HTTP %d, want 404 (no decision)", code)
		}
	}
	if _, b := c.do(http.MethodGet, ld+"/v1/plan/batch", nil); !strings.Contains(string(b), "queued for admission, position 1") {
		t.Fatalf("plan of a queued pipeline: %s", b)
	}
	if code, body := c.do(http.MethodDelete, ld+"/v1/pipelines/pdf", nil); code != 200 {
		t.Fatalf("delete: HTTP %d %s", code, body)
	}
	waitFor(t, "the batch pipeline to be admitted and planned", 15*time.Second, func() bool {
		code, p := plan("batch")
		return code == 200 && p.Groups["embed"].Count == 1 && p.Status == fsm.StatusDone
	})
	_, b := c.do(http.MethodGet, ld+"/v1/pipelines/batch", nil)
	var after client.Pipeline
	if err := json.Unmarshal(b, &after); err != nil || after.Queued != nil {
		t.Fatalf("admitted pipeline still queued: %+v %v", after.Queued, err)
	}
}

// TestMarginalAdmission: two batch pipelines whose minimums fit together but who would
// only split the two GPUs one of them uses alone (normalised work 0.5 + 0.5, no more than
// 1 alone): the planner admits the shorter and queues the other for adding no
// throughput; with NoMarginalAdmission (-admit-marginal=false) both are planned.
// Admission is non-preemptive: the pipeline registered first starts alone, so short is
// registered first.
func TestMarginalAdmission(t *testing.T) {
	for _, plain := range []bool{false, true} {
		fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, nodes: []fsm.Node{{Name: "cpu1", CPU: 4, MemoryMB: 8192},
			{Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000}}}
		c := newTestCluster(t, 1, func(int) *LoopConfig {
			return &LoopConfig{Interval: 100 * time.Millisecond, Actuator: fc, Invalidator: fc, NoMarginalAdmission: plain}
		})
		li, _ := c.leader(10 * time.Second)
		ld := c.peers[li].HTTPAddr
		for _, job := range []string{"short", "long"} { // in this order: the first starts alone
			p := testPipeline()
			p.Batch, p.InputRecords = true, map[string]float64{"short": 5000, "long": 50000}[job]
			raw, _ := json.Marshal(p)
			if code, body := c.do(http.MethodPut, ld+"/v1/pipelines/"+job, map[string]json.RawMessage{"job": raw}); code != 200 {
				t.Fatalf("register %s: HTTP %d %s", job, code, body)
			}
		}
		planned := func(job string) bool {
			code, _ := c.do(http.MethodGet, ld+"/v1/plan/"+job, nil)
			return code == http.StatusOK
		}
		if plain {
			waitFor(t, "both batch pipelines to be planned", 15*time.Second, func() bool { return planned("short") && planned("long") })
			continue
		}
		var view client.Pipeline
		waitFor(t, "the short pipeline to be planned and the long one queued", 15*time.Second, func() bool {
			_, b := c.do(http.MethodGet, ld+"/v1/pipelines/long", nil)
			return planned("short") && json.Unmarshal(b, &view) == nil && view.Queued != nil
		})
		if !strings.Contains(view.Queued.Reason, "would add no throughput") {
			t.Errorf("long queued for %q, want it to add no throughput", view.Queued.Reason)
		}
		for range 5 {
			time.Sleep(100 * time.Millisecond)
			if planned("long") {
				t.Fatal("long planned beside short")
			}
		}
	}
}

// TestGrowthWaitsForRelease: when the joint round moves GPUs from one pipeline to another,
// the second's decision is applied only once the first's (which stops the instances
// holding those GPUs) is done. Applied at once, Nomad would fail to place the second's new
// instances while the first's still run (a failed placement, then a blocked evaluation);
// a loaded CI run of faulttest's TestPipelinesShareNomad saw exactly that. Each decision
// here takes 10 rounds (1 s) to apply.
func TestGrowthWaitsForRelease(t *testing.T) {
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 10, nodes: []fsm.Node{
		{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 8, MemoryMB: 16384, GPUs: 4, GPUMemoryMB: 16000},
	}}
	c := newTestCluster(t, 1, func(int) *LoopConfig {
		return &LoopConfig{Interval: 100 * time.Millisecond, Actuator: fc, Invalidator: fc}
	})
	li, _ := c.leader(10 * time.Second)
	ld := c.peers[li].HTTPAddr
	registerApplied(t, c, ld, testPipeline())
	second := testPipeline()
	second.Weight = 3
	raw, _ := json.Marshal(second)
	if code, body := c.do(http.MethodPut, ld+"/v1/pipelines/second", map[string]json.RawMessage{"job": raw}); code != 200 {
		t.Fatalf("register second: HTTP %d %s", code, body)
	}
	plans := func() (a, b client.PlanResponse) {
		_, ba := c.do(http.MethodGet, ld+"/v1/plan/pdf", nil)
		_, bb := c.do(http.MethodGet, ld+"/v1/plan/second", nil)
		_ = json.Unmarshal(ba, &a)
		_ = json.Unmarshal(bb, &b)
		return a, b
	}
	waitFor(t, "the weighted split 1:3, both applied", 30*time.Second, func() bool {
		a, b := plans()
		return a.Groups["embed"].Count == 1 && b.Groups["embed"].Count == 3 && a.Status == fsm.StatusDone && b.Status == fsm.StatusDone
	})
	a, b := plans()
	fc.mu.Lock()
	events := append([]string(nil), fc.events...)
	fc.mu.Unlock()
	at := func(e string) int {
		for i, x := range events {
			if x == e {
				return i
			}
		}
		t.Fatalf("no event %q in %v", e, events)
		return -1
	}
	if shrunk, grown := at("done:"+itoa(a.DecisionIndex)), at("step:"+itoa(b.DecisionIndex)); grown < shrunk {
		t.Fatalf("the second pipeline's decision %d was applied (event %d) before the first's %d, which frees its GPUs, was done (event %d): %v",
			b.DecisionIndex, grown, a.DecisionIndex, shrunk, events)
	}
}
