package nomadact

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/fsm"
)

// startNomad starts a loopback cluster: "server" (its own client), "c1" (CPU only) and
// "c2" with two fake 16 GiB GPUs.
func startNomad(t *testing.T) *harness.Nomad {
	t.Helper()
	if testing.Short() {
		t.Skip("real Nomad: skipped in -short")
	}
	devDir := harness.BuildGPUPlugin(t)
	return harness.StartNomad(t, harness.NomadOptions{
		DevicePluginDir: devDir,
		Clients: []harness.ClientSpec{
			{Name: "c1", NodeClass: "cpu", MemoryMB: 4096},
			{Name: "c2", NodeClass: "gpu", MemoryMB: 4096, FakeGPUs: 2, FakeGPUMemoryMiB: 16384},
		},
	})
}

func newTestActuator(n *harness.Nomad) *Actuator {
	return New(n.API(), Options{
		MinHealthyTime: time.Second, HealthyDeadline: 20 * time.Second, ProgressDeadline: 40 * time.Second,
		KillTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
}

// stepUntil calls Step until it reports a final status or timeout passes.
func stepUntil(t *testing.T, a *Actuator, p *fsm.Pipeline, d fsm.Decision, timeout time.Duration) planner.StepResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		res, err := a.Step(ctx, p, d)
		if err != nil && ctx.Err() == nil {
			t.Logf("step decision %d: %v (retrying)", d.Index, err)
		}
		if err == nil && res.Status != fsm.StatusApplying {
			return res
		}
		select {
		case <-ctx.Done():
			t.Fatalf("decision %d not finished within %v (last: %+v, %v)", d.Index, timeout, res, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// runningByGroup counts running allocations per task group.
func runningByGroup(t *testing.T, c *api.Client, job string) map[string]int {
	t.Helper()
	allocs, _, err := c.Jobs().Allocations(job, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, al := range allocs {
		if al.DesiredStatus == "run" && al.ClientStatus == "running" {
			out[al.TaskGroup+"|"+al.NodeName]++
		}
	}
	return out
}

// versionsByPhase counts job versions per (decision, phase).
func versionsByPhase(t *testing.T, c *api.Client, job string) map[string]int {
	t.Helper()
	vs, _, _, err := c.Jobs().Versions(job, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, v := range vs {
		out[fmt.Sprint(DecisionOf(v))+"/"+PhaseOf(v)]++
	}
	return out
}

// TestActuatorAgainstNomad drives one pipeline through placement, a config transition
// (surge, then final) and a failing transition (auto-revert) on a real Nomad cluster.
func TestActuatorAgainstNomad(t *testing.T) {
	n := startNomad(t)
	a := newTestActuator(n)
	ctx := context.Background()

	nodes, err := a.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]fsm.Node{}
	for _, nd := range nodes {
		byName[nd.Name] = nd
	}
	if len(nodes) != 3 || byName["c2"].GPUs != 2 || byName["c2"].GPUMemoryMB != 16384 || byName["c1"].GPUs != 0 || byName["c1"].MemoryMB <= 0 || byName["c1"].CPU <= 0 {
		t.Fatalf("inventory: %+v", nodes)
	}
	// The node pool and datacenter filters (every agent here is in dc1, pool default).
	for _, f := range []struct {
		pool string
		dcs  []string
		want int
	}{{"default", []string{"dc1"}, 3}, {"gpus", nil, 0}, {"", []string{"dc2", "dc3"}, 0}, {"", []string{"dc2", "dc1"}, 3}} {
		o := a.o
		o.NodePool, o.Datacenters = f.pool, f.dcs
		got, err := New(n.API(), o).Inventory(ctx)
		if err != nil || len(got) != f.want {
			t.Fatalf("inventory of pool %q, datacenters %v: %d nodes (%v), want %d", f.pool, f.dcs, len(got), err, f.want)
		}
	}

	raw, _ := json.Marshal(testJob("pipe"))
	p, err := a.Pipeline(ctx, "pipe", raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Operators) != 2 || p.Operators[1].Name != "gpu" || p.Operators[1].GPUs != 1 || p.Operators[1].Config != "batch=8" {
		t.Fatalf("parsed pipeline: %+v", p.Operators)
	}

	// Decision 100: src 2 on c1 + 1 on server, gpu 1 on c2.
	d1 := fsm.Decision{Index: 100, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"c1": {Current: 2}, "server": {Current: 1}}, Config: "mode=fast"},
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Current: 1}}, Config: "batch=8"},
	}}
	if res := stepUntil(t, a, p, d1, 120*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 100: %+v", res)
	}
	want := map[string]int{"src@c1.g0|c1": 2, "src@server.g0|server": 1, "gpu@c2.g0|c2": 1}
	if got := runningByGroup(t, n.API(), "pipe"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after decision 100 running %v, want %v", got, want)
	}
	// Auto-registration lists the job marked trident_pipeline=true (rendered versions keep
	// the job meta), not one marked false.
	other := testJob("not-a-pipeline")
	other.Meta["trident_pipeline"] = "false"
	other.TaskGroups[1].Tasks[0].Resources.Devices = []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(1))}}
	if _, _, err := n.API().Jobs().Register(other, nil); err != nil {
		t.Fatal(err)
	}
	if ids, err := a.PipelineJobs(ctx); err != nil || len(ids) != 1 || ids[0] != "pipe" {
		t.Fatalf("pipeline jobs: %v %v", ids, err)
	}
	// The other job's allocations are not the planner's: once its GPU instance runs on
	// c2 (whose other GPU the pipeline holds), the inventory shows c2 with 1 GPU, not 2;
	// the pipeline's own allocations are not subtracted.
	invDeadline := time.Now().Add(60 * time.Second)
	for {
		inv, err := a.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var c2 fsm.Node
		for _, nd := range inv {
			if nd.Name == "c2" {
				c2 = nd
			}
		}
		if c2.GPUs == 1 {
			break
		}
		if time.Now().After(invDeadline) {
			t.Fatalf("c2 in the inventory with another job's GPU instance running: %+v, want 1 GPU left", c2)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, _, err := n.API().Jobs().Deregister("not-a-pipeline", true, nil); err != nil {
		t.Fatal(err)
	}
	// The GPU allocation holds one nvidia/gpu device.
	allocs, _, _ := n.API().Jobs().Allocations("pipe", false, nil)
	for _, st := range allocs {
		if st.TaskGroup != "gpu@c2.g0" || st.DesiredStatus != "run" {
			continue
		}
		al, _, err := n.API().Allocations().Info(st.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		devs := al.AllocatedResources.Tasks["run"].Devices
		if len(devs) != 1 || len(devs[0].DeviceIDs) != 1 || devs[0].Type != "gpu" {
			t.Fatalf("gpu allocation devices: %+v", devs)
		}
	}
	srcAllocs := runningAllocIDs(t, n.API(), "pipe", "src@")
	// Step on a finished decision is a no-op: no new job version.
	before := versionsByPhase(t, n.API(), "pipe")
	if res, err := a.Step(ctx, p, d1); err != nil || res.Status != fsm.StatusDone {
		t.Fatalf("repeat step: %+v %v", res, err)
	}
	if after := versionsByPhase(t, n.API(), "pipe"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("repeat step changed versions: %v -> %v", before, after)
	}

	// Decision 200: the gpu instance moves to batch=16 (surge beside the old one, then final).
	d2 := fsm.Decision{Index: 200, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": d1.Operators["src"],
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Candidate: 1}}, Config: "batch=8", CandidateConfig: "batch=16", Transitions: 1},
	}}
	// Two actuator instances (no shared memory) take turns, as leaders handing over after
	// every step would: each resumes from Nomad's state alone.
	rival := newTestActuator(n)
	turn := 0
	deadline := time.Now().Add(120 * time.Second)
	for {
		act := a
		if turn%2 == 1 {
			act = rival
		}
		turn++
		res, err := act.Step(ctx, p, d2)
		if err == nil && res.Status == fsm.StatusDone {
			break
		}
		if (err == nil && res.Status == fsm.StatusFailed) || time.Now().After(deadline) {
			dumpVersions(t, n.API())
			t.Fatalf("decision 200: %+v %v", res, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("decision 200 done after %d alternating steps", turn)
	want = map[string]int{"src@c1.g0|c1": 2, "src@server.g0|server": 1, "gpu@c2.g1|c2": 1}
	if got := runningByGroup(t, n.API(), "pipe"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after decision 200 running %v, want %v", got, want)
	}
	// src's placement did not change: its allocations ran through both versions of
	// decision 200 untouched (no per-decision meta makes Nomad replace them).
	if got := runningAllocIDs(t, n.API(), "pipe", "src@"); fmt.Sprint(got) != fmt.Sprint(srcAllocs) {
		t.Fatalf("src allocations replaced by decision 200: %v -> %v", srcAllocs, got)
	}
	v := versionsByPhase(t, n.API(), "pipe")
	if v["200/surge"] != 1 || v["200/final"] != 1 || v["100/final"] != 1 {
		dumpVersions(t, n.API())
		t.Fatalf("job versions per decision/phase: %v (want exactly one surge and one final for 200)", v)
	}
	job, _, _ := n.API().Jobs().Info("pipe", nil)
	for _, g := range job.TaskGroups {
		if *g.Name == "gpu@c2.g1" && (g.Meta["trident_config"] != "batch=16" || g.Meta[MetaConfigEpoch] != "1") {
			t.Fatalf("candidate group meta: %v", g.Meta)
		}
	}

	// Decision 300: one src instance on c1 to a config whose task exits: the surge
	// deployment fails, Nomad auto-reverts, Step reports failed and submits nothing more.
	d3 := fsm.Decision{Index: 300, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"c1": {Current: 1, Candidate: 1}, "server": {Current: 1}}, Config: "mode=fast", CandidateConfig: "mode=bad", Transitions: 1},
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Current: 1}}, Config: "batch=16", Epoch: 1},
	}}
	res := stepUntil(t, a, p, d3, 180*time.Second)
	if res.Status != fsm.StatusFailed {
		t.Fatalf("decision 300: %+v, want failed", res)
	}
	t.Logf("decision 300 failed as intended: %s", res.Detail)
	// After the revert the job runs decision 200's placement again.
	waitReverted(t, n.API(), "pipe", 200, want)
	v = versionsByPhase(t, n.API(), "pipe")
	if v["300/surge"] != 1 || v["300/final"] != 0 {
		t.Fatalf("versions after failed transition: %v", v)
	}
	if res, err := a.Step(ctx, p, d3); err != nil || res.Status != fsm.StatusFailed {
		t.Fatalf("repeat step on failed decision: %+v %v", res, err)
	}
	if v2 := versionsByPhase(t, n.API(), "pipe"); fmt.Sprint(v2) != fmt.Sprint(v) {
		t.Fatalf("repeat step on failed decision submitted a version: %v -> %v", v, v2)
	}

	// Decision 400: the gpu operator rolls one instance to a config whose task exits 137
	// (an OOM kill) and restarts. Nomad alone would keep restarting it until the healthy
	// deadline; the actuator fails the deployment after Options.OOMAbortAfter (2) OOM
	// kills, and the failure reason names the OOM (Nomad's own failure says "unhealthy
	// allocations" or "progress deadline").
	d4 := fsm.Decision{Index: 400, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": d1.Operators["src"],
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Current: 1, Candidate: 1}}, Config: "batch=16", Epoch: 1, CandidateConfig: "batch=32,fail=oom", Transitions: 1},
	}}
	res = stepUntil(t, a, p, d4, 120*time.Second)
	if res.Status != fsm.StatusFailed || !strings.Contains(res.Detail, "OOM-killed 2 times") || !strings.Contains(res.Detail, "gpu@c2.g2") {
		t.Fatalf("decision 400: %+v, want failed early on the candidate's OOM kills", res)
	}
	t.Logf("decision 400 aborted: %s", res.Detail)
	if dep := deploymentOf(t, n.API(), "pipe", 400, PhaseSurge); dep == nil || dep.Status != "failed" || !strings.HasPrefix(dep.StatusDescription, "Deployment marked as failed - rolling back") {
		t.Fatalf("deployment of decision 400 after the OOM abort: %+v", dep)
	}
	waitReverted(t, n.API(), "pipe", 200, want)
	if v := versionsByPhase(t, n.API(), "pipe"); v["400/surge"] != 1 || v["400/final"] != 0 {
		t.Fatalf("versions after the OOM abort: %v", v)
	}

	// Decision 500 pins a src instance to a node Nomad does not have (as after a drain):
	// the group is never placed, so Nomad's progress deadline (40 s here, counted from a
	// group's first placement) never starts and the deployment would run for ever. Past
	// ApplyTimeout (10 s) the actuator fails it and the decision; Nomad reverts.
	d5 := fsm.Decision{Index: 500, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"c1": {Current: 2}, "server": {Current: 1}, "ghost": {Current: 1}}, Config: "mode=fast"},
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Current: 1}}, Config: "batch=16", Epoch: 1},
	}}
	impatient := newTestActuator(n)
	impatient.o.ApplyTimeout = 10 * time.Second
	start := time.Now()
	res = stepUntil(t, impatient, p, d5, 90*time.Second)
	if res.Status != fsm.StatusFailed || !strings.Contains(res.Detail, "no allocation placed for group src@ghost.g0") || !strings.Contains(res.Detail, "not applied within 10s") {
		t.Fatalf("decision 500: %+v, want failed by the apply timeout naming the unplaced group", res)
	}
	if el := time.Since(start); el > 35*time.Second {
		t.Fatalf("decision 500 failed after %v: by Nomad's progress deadline, not the apply timeout", el)
	}
	t.Logf("decision 500 timed out: %s", res.Detail)
	if dep := deploymentOf(t, n.API(), "pipe", 500, PhaseFinal); dep == nil || dep.Status != "failed" {
		t.Fatalf("deployment of decision 500: %+v, want failed", dep)
	}
	waitReverted(t, n.API(), "pipe", 200, want)

	// Decision indexes compare only within one planner cluster. Cluster "a" applies
	// decision 600; cluster "b" (rebuilt, its raft indexes started again) takes the job
	// over with decision 60; a decision 50 of cluster "b" (a deposed leader's) is refused.
	steady := map[string]fsm.OpTarget{"src": d1.Operators["src"], "gpu": d5.Operators["gpu"]}
	d6 := fsm.Decision{Index: 600, Job: "pipe", Operators: steady, Planner: "a"}
	if res := stepUntil(t, a, p, d6, 60*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 600: %+v", res)
	}
	d7 := fsm.Decision{Index: 60, Job: "pipe", Operators: steady, Planner: "b"}
	if res := stepUntil(t, a, p, d7, 60*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 60 of another planner cluster: %+v", res)
	}
	if j, _, err := n.API().Jobs().Info("pipe", nil); err != nil || DecisionOf(j) != 60 || PlannerOf(j) != "b" {
		t.Fatalf("after the take-over the job carries decision %d of planner %q (%v), want 60 of b", DecisionOf(j), PlannerOf(j), err)
	}
	if got := runningByGroup(t, n.API(), "pipe"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the take-over running %v, want %v", got, want)
	}
	d8 := fsm.Decision{Index: 50, Job: "pipe", Operators: steady, Planner: "b"}
	if _, err := a.Step(ctx, p, d8); err == nil || !strings.Contains(err.Error(), "carries decision 60, newer than the committed decision 50") {
		t.Fatalf("an older decision of the same planner cluster: err %v, want refused", err)
	}

	// A user runs the job file again: the running version is no longer one the planner
	// rendered.
	if re, err := a.Resubmitted(ctx, "pipe"); err != nil || re {
		t.Fatalf("rendered job reported re-submitted: %v %v", re, err)
	}
	if _, _, err := n.API().Jobs().Register(testJob("pipe"), nil); err != nil {
		t.Fatal(err)
	}
	if re, err := a.Resubmitted(ctx, "pipe"); err != nil || !re {
		t.Fatalf("job run again by the user: re-submitted %v (%v), want true", re, err)
	}
	if re, err := a.Resubmitted(ctx, "no-such-job"); err != nil || re {
		t.Fatalf("missing job: re-submitted %v (%v), want false", re, err)
	}
}

// waitReverted waits up to a minute (Nomad's auto-revert is one evaluation, a few seconds
// here) until job carries decision again and runs exactly want (group|node -> count).
func waitReverted(t *testing.T, c *api.Client, job string, decision uint64, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		j, _, err := c.Jobs().Info(job, nil)
		got := runningByGroup(t, c, job)
		if err == nil && DecisionOf(j) == decision && fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not reverted to decision %d: running %v (want %v), read error %v", job, decision, got, want, err)
		}
		time.Sleep(time.Second)
	}
}

// deploymentOf returns the deployment of the job version that carries (decision, phase).
func deploymentOf(t *testing.T, c *api.Client, job string, decision uint64, phase string) *api.Deployment {
	t.Helper()
	vs, _, _, err := c.Jobs().Versions(job, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	deps, _, err := c.Jobs().Deployments(job, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if DecisionOf(v) != decision || PhaseOf(v) != phase {
			continue
		}
		for _, dep := range deps {
			if dep.JobVersion == *v.Version {
				return dep
			}
		}
	}
	return nil
}

func dumpVersions(t *testing.T, c *api.Client) {
	vs, _, _, err := c.Jobs().Versions("pipe", false, nil)
	if err != nil {
		return
	}
	for _, x := range vs {
		groups := map[string]int{}
		for _, g := range x.TaskGroups {
			groups[*g.Name] = *g.Count
		}
		t.Logf("version %d stable=%v jmi=%d meta=%v groups=%v", *x.Version, *x.Stable, *x.JobModifyIndex, x.Meta, groups)
	}
}

// runningAllocIDs returns the sorted IDs of job's running allocations in groups whose name
// starts with prefix.
func runningAllocIDs(t *testing.T, c *api.Client, job, prefix string) []string {
	t.Helper()
	allocs, _, err := c.Jobs().Allocations(job, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, al := range allocs {
		if strings.HasPrefix(al.TaskGroup, prefix) && al.DesiredStatus == "run" && al.ClientStatus == "running" {
			ids = append(ids, al.ID)
		}
	}
	sort.Strings(ids)
	return ids
}
