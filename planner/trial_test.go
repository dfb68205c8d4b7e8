package planner

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// trialFake is a fakeCluster that runs tuning trials: it records every SetTrials call,
// and the calls made while a decision was half applied.
type trialFake struct {
	*fakeCluster
	tmu      sync.Mutex
	calls    []map[string]fsm.TrialSlots
	inFlight int
	slots    int
}

func (f *trialFake) TrialSlots() int { return f.slots }

func (f *trialFake) SetTrials(_ context.Context, job string, trials map[string]fsm.TrialSlots) error {
	f.fakeCluster.mu.Lock()
	busy := false
	for _, n := range f.steps {
		busy = busy || n < f.delay
	}
	f.fakeCluster.mu.Unlock()
	f.tmu.Lock()
	defer f.tmu.Unlock()
	f.calls = append(f.calls, trials)
	if busy {
		f.inFlight++
	}
	return nil
}

func (f *trialFake) last() (map[string]fsm.TrialSlots, int) {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	if len(f.calls) == 0 {
		return nil, 0
	}
	return f.calls[len(f.calls)-1], len(f.calls)
}

// TestTrialsReachTheActuator: a trial PUT on a planner whose actuator runs trials is
// committed with its trial epoch, handed to the actuator once (not every round), shown in
// GET /v1/plan, handed again after the next decision is applied (never while it is), and
// ended by DELETE; an operator without tunable parameters is refused. A planner whose
// actuator cannot run trials answers 501, and so does one asked for a slot beyond its
// actuator's. Slots: a trial in slot 1 runs beside slot 0's with its own epoch, a DELETE
// naming a slot ends only it, one naming none ends every slot.
func TestTrialsReachTheActuator(t *testing.T) {
	nodes := []fsm.Node{{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000}}
	p := testPipeline()
	p.Operators[1].Params = "batch=int[1,64]"

	plain := newTestCluster(t, 1, func(int) *LoopConfig {
		fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, nodes: nodes}
		return &LoopConfig{Interval: 50 * time.Millisecond, Actuator: fc, Invalidator: fc}
	})
	li, _ := plain.leader(10 * time.Second)
	registerApplied(t, plain, plain.peers[li].HTTPAddr, p)
	if code, body := plain.do(http.MethodPut, plain.peers[li].HTTPAddr+"/v1/trials/pdf/embed", client.TrialRequest{Config: "batch=16"}); code != http.StatusNotImplemented {
		t.Errorf("trial on an actuator without trials: HTTP %d %s, want 501", code, body)
	}

	tf := &trialFake{fakeCluster: &fakeCluster{steps: map[uint64]int{}, delay: 3, nodes: nodes}, slots: 2}
	c := newTestCluster(t, 1, func(int) *LoopConfig {
		return &LoopConfig{Interval: 50 * time.Millisecond, Actuator: tf, Invalidator: tf}
	})
	li, _ = c.leader(10 * time.Second)
	ld := c.peers[li].HTTPAddr
	registerApplied(t, c, ld, p)
	if code, _ := c.do(http.MethodPut, ld+"/v1/trials/pdf/parse", client.TrialRequest{Config: "threads=2"}); code == http.StatusOK {
		t.Error("trial of an operator without tunable parameters accepted")
	}
	code, body := c.do(http.MethodPut, ld+"/v1/trials/pdf/embed", client.TrialRequest{Config: "batch=16"})
	var idx client.IndexResponse
	if code != http.StatusOK || json.Unmarshal(body, &idx) != nil {
		t.Fatalf("trial: HTTP %d %s", code, body)
	}
	var n int
	waitFor(t, "the trial handed to the actuator", 10*time.Second, func() bool {
		var tr map[string]fsm.TrialSlots
		tr, n = tf.last()
		return slot(tr, 0).Config == "batch=16"
	})
	tr, _ := tf.last()
	if got := slot(tr, 0); got.Epoch != fsm.TrialEpochBase+idx.Index || len(tr) != 1 || len(tr["embed"]) != 1 {
		t.Errorf("actuator given %+v, want embed's trial at epoch base+%d only", tr, idx.Index)
	}
	var plan client.PlanResponse
	if _, body := c.do(http.MethodGet, ld+"/v1/plan/pdf", nil); json.Unmarshal(body, &plan) != nil ||
		plan.Groups["embed"].TrialConfig != "batch=16" || plan.Groups["embed"].TrialEpoch != fsm.TrialEpochBase+idx.Index {
		t.Errorf("plan %+v: want embed's trial with its epoch", plan.Groups["embed"])
	}
	time.Sleep(300 * time.Millisecond) // six intervals: the unchanged trials are not handed again
	if _, m := tf.last(); m != n {
		t.Errorf("unchanged trials handed to the actuator %d more times", m-n)
	}

	// A candidate config: its decision is applied over three rounds; the trials are
	// handed again once it is done, as its versions may have ended the trial.
	tf.fakeCluster.mu.Lock()
	applied := len(tf.applied)
	tf.fakeCluster.mu.Unlock()
	if code, body := c.do(http.MethodPut, ld+"/v1/candidates/pdf/embed", client.CandidateRequest{Config: "batch=32", Capacity: 1000}); code != http.StatusOK {
		t.Fatalf("candidate: HTTP %d %s", code, body)
	}
	waitFor(t, "the next decision applied and the trial handed again", 10*time.Second, func() bool {
		tf.fakeCluster.mu.Lock()
		done := len(tf.applied) > applied
		tf.fakeCluster.mu.Unlock()
		tr, m := tf.last()
		return done && m > n && slot(tr, 0).Config == "batch=16"
	})
	_, n = tf.last()
	tf.tmu.Lock()
	if tf.inFlight > 0 {
		t.Errorf("trials handed to the actuator %d times while a decision was half applied", tf.inFlight)
	}
	tf.tmu.Unlock()

	if code, body := c.do(http.MethodPut, ld+"/v1/trials/pdf/embed/2", client.TrialRequest{Config: "batch=4"}); code != http.StatusNotImplemented {
		t.Errorf("trial in slot 2 of an actuator with 2 slots: HTTP %d %s, want 501", code, body)
	}
	if code, body := c.do(http.MethodPut, ld+"/v1/trials/pdf/embed/x", client.TrialRequest{Config: "batch=4"}); code != http.StatusBadRequest {
		t.Errorf("trial in slot x: HTTP %d %s, want 400", code, body)
	}
	code, body = c.do(http.MethodPut, ld+"/v1/trials/pdf/embed/1", client.TrialRequest{Config: "batch=8"})
	var idx1 client.IndexResponse
	if code != http.StatusOK || json.Unmarshal(body, &idx1) != nil {
		t.Fatalf("trial in slot 1: HTTP %d %s", code, body)
	}
	waitFor(t, "both slots handed to the actuator", 10*time.Second, func() bool {
		tr, _ := tf.last()
		return slot(tr, 0).Config == "batch=16" && slot(tr, 1).Config == "batch=8"
	})
	tr, n = tf.last()
	if e0, e1 := slot(tr, 0).Epoch, slot(tr, 1).Epoch; e1 != fsm.TrialEpochBase+idx1.Index || e0 == e1 {
		t.Errorf("slot epochs %d, %d: want slot 1's at base+%d, apart from slot 0's", e0, e1, idx1.Index)
	}
	if _, body := c.do(http.MethodGet, ld+"/v1/plan/pdf", nil); json.Unmarshal(body, &plan) != nil ||
		len(plan.Groups["embed"].Trials) != 2 || plan.Groups["embed"].Trials[1].Config != "batch=8" || plan.Groups["embed"].TrialConfig != "batch=16" {
		t.Errorf("plan %+v: want both slots, slot 0's also as trial_config", plan.Groups["embed"])
	}
	if code, body := c.do(http.MethodDelete, ld+"/v1/trials/pdf/embed/0", nil); code != http.StatusOK {
		t.Fatalf("end slot 0: HTTP %d %s", code, body)
	}
	waitFor(t, "slot 0 ended, slot 1 left", 10*time.Second, func() bool {
		tr, m := tf.last()
		return m > n && len(tr["embed"]) == 1 && slot(tr, 1).Config == "batch=8"
	})
	_, n = tf.last()
	if code, body := c.do(http.MethodDelete, ld+"/v1/trials/pdf/embed", nil); code != http.StatusOK {
		t.Fatalf("end trial: HTTP %d %s", code, body)
	}
	waitFor(t, "the trial ended at the actuator", 10*time.Second, func() bool {
		tr, m := tf.last()
		return m > n && len(tr) == 0
	})
}

// slot returns embed's trial in slot k of trials (zero: none).
func slot(trials map[string]fsm.TrialSlots, k int) fsm.Trial {
	t, _ := trials["embed"].Slot(k)
	return t
}

// watchingFake is a trialFake whose trials of a config containing "bad" fail to run
// (TrialWatcher), counting the checks.
type watchingFake struct {
	*trialFake
	checks int
}

func (f *watchingFake) TrialFailures(_ context.Context, job string, trials map[string]fsm.TrialSlots) (map[string]map[int]string, error) {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	f.checks++
	var out map[string]map[int]string
	for op, ts := range trials {
		for _, t := range ts {
			if strings.Contains(t.Config, "bad") {
				if out == nil {
					out = map[string]map[int]string{}
				}
				if out[op] == nil {
					out[op] = map[int]string{}
				}
				out[op][t.Slot] = "task run exited 2 times with a non-zero status (exit code 3)"
			}
		}
	}
	return out, nil
}

// TestFailedTrialIsRecorded: a trial the actuator reports failed to run is marked failed
// in raft with the actuator's reason, shown in GET /v1/plan's trials, not handed to the
// actuator again for it, and not checked again; a trial that runs is not marked, and a
// new trial in the slot starts unmarked.
func TestFailedTrialIsRecorded(t *testing.T) {
	nodes := []fsm.Node{{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000}}
	p := testPipeline()
	p.Operators[1].Params = "batch=int[1,64],mode=str{good,bad}"
	wf := &watchingFake{trialFake: &trialFake{fakeCluster: &fakeCluster{steps: map[uint64]int{}, delay: 1, nodes: nodes}, slots: 2}}
	c := newTestCluster(t, 1, func(int) *LoopConfig {
		return &LoopConfig{Interval: 50 * time.Millisecond, Actuator: wf, Invalidator: wf}
	})
	li, _ := c.leader(10 * time.Second)
	ld := c.peers[li].HTTPAddr
	registerApplied(t, c, ld, p)
	put := func(slot, config string) {
		t.Helper()
		if code, body := c.do(http.MethodPut, ld+"/v1/trials/pdf/embed/"+slot, client.TrialRequest{Config: config}); code != http.StatusOK {
			t.Fatalf("trial %s in slot %s: HTTP %d %s", config, slot, code, body)
		}
	}
	trials := func() []fsm.Trial {
		var plan client.PlanResponse
		_, body := c.do(http.MethodGet, ld+"/v1/plan/pdf", nil)
		_ = json.Unmarshal(body, &plan)
		return plan.Groups["embed"].Trials
	}
	put("0", "batch=16,mode=good")
	put("1", "batch=8,mode=bad")
	waitFor(t, "the failed trial marked", 10*time.Second, func() bool {
		trs := trials()
		return len(trs) == 2 && trs[1].Failed != ""
	})
	trs := trials()
	if trs[0].Failed != "" || !strings.Contains(trs[1].Failed, "exited 2 times") {
		t.Fatalf("trials %+v: want only slot 1 failed, with the actuator's reason", trs)
	}
	_, n := wf.last()
	wf.tmu.Lock()
	checks := wf.checks
	wf.tmu.Unlock()
	time.Sleep(300 * time.Millisecond) // six intervals
	if _, m := wf.last(); m != n {
		t.Errorf("marking a trial failed handed the trials to the actuator %d more times", m-n)
	}
	wf.tmu.Lock()
	if wf.checks <= checks {
		t.Errorf("the running trial in slot 0 is no longer checked (%d checks)", wf.checks)
	}
	wf.tmu.Unlock()
	put("1", "batch=4,mode=good")
	waitFor(t, "the new trial in slot 1 handed to the actuator", 10*time.Second, func() bool {
		tr, _ := wf.last()
		return slot(tr, 1).Config == "batch=4,mode=good"
	})
	if trs := trials(); len(trs) != 2 || trs[1].Failed != "" {
		t.Errorf("trials %+v: the new trial in slot 1 starts unmarked", trs)
	}
}
