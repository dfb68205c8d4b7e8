package planner

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// TestPipelinesShareTheInventory: a second pipeline is planned on what the first one's
// decision leaves, so the two never hold more GPUs than the cluster has (before, each
// planned against the whole inventory and both claimed both GPUs); deleting the first
// frees its GPUs for the second at a following round.
func TestPipelinesShareTheInventory(t *testing.T) {
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, nodes: []fsm.Node{
		{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000},
	}}
	c := newTestCluster(t, 3, func(int) *LoopConfig {
		return &LoopConfig{Interval: 100 * time.Millisecond, Actuator: fc, Invalidator: fc}
	})
	li, _ := c.leader(10 * time.Second)
	ld := c.peers[li].HTTPAddr
	first := registerApplied(t, c, ld, testPipeline())
	if n := first.Groups["embed"].Count; n != 2 {
		t.Fatalf("first pipeline holds %d GPUs, want both", n)
	}
	raw, _ := json.Marshal(testPipeline())
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
	// Several rounds: the second pipeline never gets a GPU while the first holds both.
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		if a, b := gpus(); a+b > 2 {
			t.Fatalf("the pipelines hold %d + %d GPUs of 2", a, b)
		}
	}
	if code, body := c.do(http.MethodDelete, ld+"/v1/pipelines/pdf", nil); code != 200 {
		t.Fatalf("delete: HTTP %d %s", code, body)
	}
	waitFor(t, "the second pipeline to get the freed GPUs", 10*time.Second, func() bool {
		_, b := gpus()
		return b == 2
	})
}
