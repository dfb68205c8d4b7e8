package faulttest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/nomadact"
)

// TestCanaryLeaderKilled: three `trident planner` processes on real Nomad; a candidate
// config's canary runs (a Nomad canary of the operator's slot group) and its probe window
// is recorded; the leader is killed with SIGKILL in the middle of the window. The new
// leader finishes the window the old one started, measures the canary (an observation of
// its epoch), promotes it once and rolls the rest: one canary version of the decision in
// Nomad, the promoted deployment successful, and every instance on the candidate config.
func TestCanaryLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes: skipped in -short")
	}
	bin := buildTrident(t)
	n := harness.StartNomad(t, harness.NomadOptions{Clients: []harness.ClientSpec{
		{Name: "c1", MemoryMB: 4096}, {Name: "c2", MemoryMB: 4096},
	}})
	// A 20 s probe window (no warm-up term: the test posts the observations itself), long
	// enough to kill the leader inside it and elect the next one.
	c := startPlanners(t, bin, n.Addr, false, "-max-batch", "1", "-canary-warmup", "0", "-canary-probe", "20s")
	leader, _ := c.leader(30 * time.Second)
	job := pipelineJob("pipe")
	job.TaskGroups[1].Meta["trident_params"] = "mode=cat{a,b}"
	job.TaskGroups[1].Count = ptr(2)
	job.TaskGroups[1].Meta["trident_capacity"] = "1"
	raw, _ := json.Marshal(job)
	if code, body := call("PUT", leader.http, "/v1/pipelines/pipe", map[string]json.RawMessage{"job": raw}, nil); code != 200 {
		t.Fatalf("register: HTTP %d %s", code, body)
	}
	waitFor(t, c, "first decision done", 120*time.Second, func() bool {
		pr, ok := c.plan(leader)
		return ok && pr.Status == fsm.StatusDone
	})
	if got := running(t, n.API()); got["work@canary"] != 1 {
		t.Fatalf("running %v: want work's canary slot", got)
	}
	// The running config measures 1 record/s per instance; a candidate predicted at 5.
	if code, body := call("POST", leader.http, "/v1/observations", []client.ObservationRequest{{Job: "pipe", Operator: "work", Capacity: 1}}, nil); code != 200 {
		t.Fatalf("observe: HTTP %d %s", code, body)
	}
	if code, body := call("PUT", leader.http, "/v1/candidates/pipe/work", client.CandidateRequest{Config: "mode=b", Capacity: 5}, nil); code != 200 {
		t.Fatalf("candidate: HTTP %d %s", code, body)
	}
	var canaryDecision uint64
	waitFor(t, c, "the canary healthy and its probe window recorded", 90*time.Second, func() bool {
		pr, ok := c.plan(leader)
		k, has := pr.Canaries["work"]
		canaryDecision = pr.DecisionIndex
		return ok && has && k.HealthyUnixMilli > 0 && k.Verdict == ""
	})
	dep, _, err := n.API().Jobs().LatestDeployment("pipe", nil)
	if err != nil || dep == nil || dep.TaskGroups["work@canary"] == nil || dep.TaskGroups["work@canary"].DesiredCanaries != 1 || dep.TaskGroups["work@canary"].Promoted {
		t.Fatalf("latest deployment %+v (%v): want work@canary's unpromoted canary", dep, err)
	}
	leader.kill9()
	t.Logf("killed leader %s during the canary of decision %d", leader.id, canaryDecision)
	leader, took := c.leader(30 * time.Second)
	t.Logf("new leader %s after %v", leader.id, took)
	// The canary's own instance exports epoch 1 and measures 4 records/s.
	if code, body := call("POST", leader.http, "/v1/observations", []client.ObservationRequest{{Job: "pipe", Operator: "work", Capacity: 4, Epoch: 1}}, nil); code != 200 {
		t.Fatalf("observe the canary: HTTP %d %s", code, body)
	}
	var k client.Canary
	waitFor(t, c, "the new leader's verdict", 90*time.Second, func() bool {
		pr, ok := c.plan(leader)
		k = pr.Canaries["work"]
		return ok && pr.DecisionIndex == canaryDecision && k.Verdict != "" && pr.Status == fsm.StatusDone
	})
	if k.Verdict != fsm.VerdictPromoted || k.By != fsm.ByPlanner || k.CandidateCapacity != 4 {
		t.Fatalf("canary %+v: want promoted by the planner on the measured 4 records/s", k)
	}
	if d, _, err := n.API().Deployments().Info(dep.ID, nil); err != nil || d.Status != "successful" || !d.TaskGroups["work@canary"].Promoted {
		t.Fatalf("canary deployment %+v (%v): want promoted and successful", d, err)
	}
	// Nomad keeps the newest six versions of a job: count them before the rest rolls.
	vc := versionCounts(t, n.API())
	if got := vc[fmt.Sprint(canaryDecision)+"/"+nomadact.PhaseCanary]; got != 1 {
		t.Fatalf("versions %v: decision %d has %d canary versions, want exactly 1", vc, canaryDecision, got)
	}
	t.Logf("versions per decision/phase after the promotion: %v", vc)
	// The rest rolls in batches of one until every instance runs mode=b.
	waitFor(t, c, "every instance on the candidate", 180*time.Second, func() bool {
		pr, ok := c.plan(leader)
		return ok && pr.Status == fsm.StatusDone && pr.Groups["work"].Config == "mode=b" && pr.Groups["work"].CandidateConfig == ""
	})
}
