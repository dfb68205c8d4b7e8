package planner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// canaryFake is a fakeCluster whose decisions with a candidate's first batch go through a
// canary: Step reports it healthy (promoted at once when userPromote is set, as after a
// user's nomad deployment promote) until the loop promotes or fails its deployment
// "dep-<decision>"; a promoted canary then finishes like any decision, a failed one fails.
type canaryFake struct {
	*fakeCluster
	cmu         sync.Mutex
	state       map[uint64]string
	promotes    map[uint64]int
	fails       map[uint64]int
	userPromote bool
}

func newCanaryFake() *canaryFake {
	return &canaryFake{
		fakeCluster: &fakeCluster{steps: map[uint64]int{}, delay: 2, nodes: []fsm.Node{
			{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000},
		}},
		state: map[uint64]string{}, promotes: map[uint64]int{}, fails: map[uint64]int{},
	}
}

func (f *canaryFake) Step(ctx context.Context, p *fsm.Pipeline, d fsm.Decision) (StepResult, error) {
	var cs []CanaryStatus
	for name, t := range d.Operators {
		cand := 0
		for _, pl := range t.Nodes {
			cand += pl.Candidate
		}
		if t.Transitions > 0 && cand == t.Transitions { // the candidate's first batch
			cs = append(cs, CanaryStatus{Operator: name, Group: name + "@canary", Node: "gpu1", Config: t.CandidateConfig,
				Deployment: fmt.Sprint("dep-", d.Index), Healthy: true})
		}
	}
	if len(cs) == 0 {
		return f.fakeCluster.Step(ctx, p, d)
	}
	f.cmu.Lock()
	st := f.state[d.Index]
	if st == "" && f.userPromote {
		f.state[d.Index] = "promoted"
		st = "canary"
		cs[0].Promoted = true
	}
	f.cmu.Unlock()
	switch st {
	case "promoted":
		return f.fakeCluster.Step(ctx, p, d)
	case "failed":
		return StepResult{Status: fsm.StatusFailed, Detail: fmt.Sprintf("deployment dep-%d of job version 3 failed: Deployment marked as failed", d.Index)}, nil
	}
	return StepResult{Status: fsm.StatusApplying, Canaries: cs}, nil
}

func (f *canaryFake) verdict(dep, v string, n map[uint64]int) error {
	var idx uint64
	if _, err := fmt.Sscanf(dep, "dep-%d", &idx); err != nil {
		return err
	}
	f.cmu.Lock()
	defer f.cmu.Unlock()
	f.state[idx] = v
	n[idx]++
	return nil
}

func (f *canaryFake) PromoteCanary(ctx context.Context, job, dep string) error {
	return f.verdict(dep, "promoted", f.promotes)
}

func (f *canaryFake) FailCanary(ctx context.Context, job, dep string) error {
	return f.verdict(dep, "failed", f.fails)
}

// canaryOf reads embed's canary record from addr's state.
func canaryOf(t *testing.T, c *testCluster, addr string) (fsm.Canary, bool) {
	t.Helper()
	var st fsm.State
	code, body := c.do(http.MethodGet, addr+"/v1/state", nil)
	if code != 200 || json.Unmarshal(body, &st) != nil {
		return fsm.Canary{}, false
	}
	k, ok := st.Canaries["pdf"]["embed"]
	return k, ok
}

// TestCanaryVerdicts: the leader records a healthy canary, measures it for its probe
// window and then promotes it when its observed capacity beats the running config's
// (after the cold-start discount), fails it on a measured regression or when nothing
// measures it within three windows, and records a user's promotion. A leader killed
// while its canary is measured leaves the verdict to the next leader, which promotes
// exactly once.
func TestCanaryVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		observe float64 // the canary's observed capacity (0: none)
		// observeFallback marks the canary's observation, runningFallback the running
		// config's, as fallbacks (not measurements under load).
		observeFallback, runningFallback bool
		userPromote                      bool
		killLeader                       bool
		verdict, by                      string
		detail                           string
	}{
		{name: "measured gain", observe: 2.5, verdict: fsm.VerdictPromoted, by: fsm.ByPlanner, detail: "canary measured 2.5 records/s"},
		{name: "leader killed while measuring", observe: 2.5, killLeader: true, verdict: fsm.VerdictPromoted, by: fsm.ByPlanner},
		{name: "measured regression", observe: 0.5, verdict: fsm.VerdictFailed, by: fsm.ByPlanner, detail: "against 1 on the running config"},
		{name: "no measurement", verdict: fsm.VerdictFailed, by: fsm.ByPlanner, detail: "no measurement of the canary within 900ms"},
		{name: "user promote", userPromote: true, verdict: fsm.VerdictPromoted, by: fsm.ByUser, detail: "nomad deployment promote"},
		{name: "fallback is no measurement", observe: 2.5, observeFallback: true, verdict: fsm.VerdictFailed, by: fsm.ByPlanner, detail: "no measurement of the canary within 900ms"},
		{name: "starved operator", runningFallback: true, verdict: fsm.VerdictFailed, by: fsm.ByPlanner, detail: "the operator is not saturated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 300 ms windows; 5 s when the leader is killed, so that the window outlasts
			// the election (500 ms timeouts) and the observation posted to the new leader.
			probe := 300 * time.Millisecond
			if tc.killLeader {
				probe = 5 * time.Second
			}
			fc := newCanaryFake()
			fc.userPromote = tc.userPromote
			c := newTestCluster(t, 3, func(int) *LoopConfig {
				return &LoopConfig{Interval: 100 * time.Millisecond, Actuator: fc, Invalidator: fc, MaxBatch: 1, CanaryProbe: probe, CanaryWarmUp: -1}
			})
			li, _ := c.leader(10 * time.Second)
			ld := c.peers[li].HTTPAddr
			registerApplied(t, c, ld, testPipeline())
			// The running config measures 1 record/s per instance.
			if code, body := c.do(http.MethodPost, ld+"/v1/observations", []client.ObservationRequest{{Job: "pdf", Operator: "embed", Capacity: 1, Fallback: tc.runningFallback}}); code != 200 {
				t.Fatalf("observe: HTTP %d %s", code, body)
			}
			if code, body := c.do(http.MethodPut, ld+"/v1/candidates/pdf/embed", client.CandidateRequest{Config: "batch=32", Capacity: 3}); code != 200 {
				t.Fatalf("candidate: HTTP %d %s", code, body)
			}
			if !tc.userPromote {
				waitFor(t, "the canary recorded", 10*time.Second, func() bool { _, ok := canaryOf(t, c, ld); return ok })
			}
			if tc.killLeader {
				c.stop(li)
				li, _ = c.leader(10 * time.Second)
				ld = c.peers[li].HTTPAddr
			}
			if tc.observe > 0 {
				// The canary's own instances export epoch 1.
				if code, body := c.do(http.MethodPost, ld+"/v1/observations", []client.ObservationRequest{{Job: "pdf", Operator: "embed", Capacity: tc.observe, Epoch: 1, Fallback: tc.observeFallback}}); code != 200 {
					t.Fatalf("observe the canary: HTTP %d %s", code, body)
				}
			}
			var k fsm.Canary
			waitFor(t, "the verdict", 15*time.Second, func() bool {
				var ok bool
				k, ok = canaryOf(t, c, ld)
				return ok && k.Verdict != ""
			})
			if k.Verdict != tc.verdict || k.By != tc.by || !strings.Contains(k.Detail, tc.detail) {
				t.Fatalf("canary %+v: want %s by %s, detail containing %q", k, tc.verdict, tc.by, tc.detail)
			}
			if tc.by == fsm.ByPlanner && time.Duration(k.VerdictUnixMilli-k.HealthyUnixMilli)*time.Millisecond < probe {
				t.Fatalf("verdict %v after the canary became healthy, before its %v probe window", time.Duration(k.VerdictUnixMilli-k.HealthyUnixMilli)*time.Millisecond, probe)
			}
			var plan client.PlanResponse
			// A promoted canary's rollout still runs in batches; under -race on a loaded
			// machine (or after a second election) that takes longer than any fixed wait, so
			// the test fails only when the plan stops changing for 10 s.
			waitProgress(t, "the decision finished", 10*time.Second, 60*time.Second, func() (bool, string) {
				_, body := c.do(http.MethodGet, ld+"/v1/plan/pdf", nil)
				done := json.Unmarshal(body, &plan) == nil && (plan.DecisionIndex == k.Decision || plan.FailedDecisionIndex == k.Decision) && plan.Status != fsm.StatusApplying
				return done, string(body)
			})
			fc.cmu.Lock()
			promotes, fails := fc.promotes[k.Decision], fc.fails[k.Decision]
			fc.cmu.Unlock()
			switch {
			case tc.verdict == fsm.VerdictPromoted && tc.by == fsm.ByPlanner && (promotes != 1 || fails != 0):
				t.Fatalf("promoted %d and failed %d times, want one promotion", promotes, fails)
			case tc.verdict == fsm.VerdictFailed && (fails != 1 || promotes != 0):
				t.Fatalf("promoted %d and failed %d times, want one fail", promotes, fails)
			case tc.by == fsm.ByUser && promotes+fails != 0:
				t.Fatalf("the planner acted on a user's promotion (%d promotes, %d fails)", promotes, fails)
			}
			want := fsm.StatusDone
			if tc.verdict == fsm.VerdictFailed {
				want = fsm.StatusFailed
				if !strings.Contains(plan.Detail, "canary of embed failed by the planner") {
					t.Fatalf("failed decision's detail %q does not name the canary verdict", plan.Detail)
				}
			}
			if c := plan.Canaries["embed"]; c.Verdict != tc.verdict || c.By != tc.by {
				t.Fatalf("GET /v1/plan shows the canary %+v, want %s by %s", c, tc.verdict, tc.by)
			}
			if plan.Status != want {
				t.Fatalf("decision %d: %s (%s), want %s", k.Decision, plan.Status, plan.Detail, want)
			}
		})
	}
}

// TestCanaryGain: the verdict discounts the candidate's cold start over the 300 s window.
func TestCanaryGain(t *testing.T) {
	for _, tc := range []struct {
		cand, cur, cold float64
		want            bool
	}{
		{2, 1, 0, true}, {1, 1, 0, false}, {1.05, 1, 30, false}, {1.2, 1, 30, true}, {5, 1, 300, false},
	} {
		if got, why := CanaryGain(tc.cand, tc.cur, tc.cold); got != tc.want {
			t.Errorf("CanaryGain(%v, %v, %v) = %v (%s), want %v", tc.cand, tc.cur, tc.cold, got, why, tc.want)
		}
	}
}
