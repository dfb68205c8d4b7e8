package faulttest

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/nomadact"
)

func ptr[T any](v T) *T { return &v }

// pipelineJob is a two-operator CPU pipeline of raw_exec sleepers.
func pipelineJob(id string) *api.Job {
	group := func(name string, meta map[string]string) *api.TaskGroup {
		return &api.TaskGroup{
			Name: ptr(name), Count: ptr(1), Meta: meta,
			Tasks: []*api.Task{{
				Name: "run", Driver: "raw_exec",
				Config:    map[string]any{"command": "/bin/sleep", "args": []string{"3600"}},
				Resources: &api.Resources{CPU: ptr(20), MemoryMB: ptr(32)},
			}},
		}
	}
	return &api.Job{
		ID: ptr(id), Name: ptr(id), Type: ptr("service"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{
			group("src", map[string]string{"trident_order": "0", "trident_cpu": "0.25", "trident_memory_mb": "256", "trident_config": "mode=a"}),
			group("work", map[string]string{"trident_order": "1", "trident_cpu": "0.25", "trident_memory_mb": "256", "trident_config": "mode=a"}),
		},
	}
}

type cluster struct {
	t       *testing.T
	bin     string
	procs   []*proc
	proxies []*proxy
}

func (c *cluster) alive() []*proc {
	var out []*proc
	for _, p := range c.procs {
		if p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// leader polls the live servers until exactly one reports itself leader.
func (c *cluster) leader(timeout time.Duration) (*proc, time.Duration) {
	c.t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		var leaders []*proc
		for _, p := range c.alive() {
			var st client.StatusResponse
			if code, _ := call("GET", p.http, "/v1/status", nil, &st); code == 200 && st.State == "Leader" {
				leaders = append(leaders, p)
			}
		}
		if len(leaders) == 1 {
			return leaders[0], time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.dump()
	c.t.Fatalf("no single leader within %v", timeout)
	return nil, 0
}

func (c *cluster) dump() {
	for _, p := range c.procs {
		c.t.Logf("--- planner %s log tail ---\n%s", p.id, tail(p.log, 25))
	}
}

func (c *cluster) plan(p *proc) (client.PlanResponse, bool) {
	var pr client.PlanResponse
	code, _ := call("GET", p.http, "/v1/plan/pipe", nil, &pr)
	return pr, code == 200
}

func waitFor(t *testing.T, c *cluster, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.dump()
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// running counts running allocations per task group.
func running(t *testing.T, cl *api.Client) map[string]int {
	allocs, _, err := cl.Jobs().Allocations("pipe", false, nil)
	if err != nil {
		t.Fatalf("allocations: %v", err)
	}
	out := map[string]int{}
	for _, a := range allocs {
		if a.DesiredStatus == "run" && a.ClientStatus == "running" {
			out[a.TaskGroup]++
		}
	}
	return out
}

// wantGroups is the committed plan as rendered group counts.
func wantGroups(pr client.PlanResponse) map[string]int {
	out := map[string]int{}
	for op, g := range pr.Groups {
		for node, pl := range g.Nodes {
			if pl.Current > 0 {
				out[nomadact.GroupName(op, node, g.ConfigEpoch)] += pl.Current
			}
			if pl.Candidate > 0 {
				out[nomadact.GroupName(op, node, g.ConfigEpoch+1)] += pl.Candidate
			}
		}
	}
	return out
}

// versionCounts counts Nomad job versions per "decision/phase".
func versionCounts(t *testing.T, cl *api.Client) map[string]int {
	vs, _, _, err := cl.Jobs().Versions("pipe", false, nil)
	if err != nil {
		t.Fatalf("versions: %v", err)
	}
	out := map[string]int{}
	for _, v := range vs {
		out[strconv.FormatUint(nomadact.DecisionOf(v), 10)+"/"+nomadact.PhaseOf(v)]++
	}
	return out
}

// TestFaultsWithRealProcesses: three `trident planner` processes drive a real Nomad
// cluster. (1) kill -9 of the leader while a config transition's surge deployment runs:
// a new leader is elected within the bound, resumes the decision, and Nomad ends with
// exactly one surge and one final version of it and the committed placement. (2) A
// follower whose raft port is cut misses commits, then catches up after the heal. (3) The
// killed server restarts from its data dir (snapshot + log) and converges.
func TestFaultsWithRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes: skipped in -short")
	}
	bin := buildTrident(t)
	n := harness.StartNomad(t, harness.NomadOptions{Clients: []harness.ClientSpec{
		{Name: "c1", MemoryMB: 4096}, {Name: "c2", MemoryMB: 4096},
	}})
	// -max-batch 0: the whole transition in one decision, whose surge the test interrupts.
	c := startPlanners(t, bin, n.Addr, true, "-scheduler", "milp", "-max-batch", "0", "-snapshot-threshold", "24",
		"-snapshot-interval", "500ms", "-min-healthy-time", "4s")
	leader, took := c.leader(30 * time.Second)
	t.Logf("initial leader %s after %v", leader.id, took)

	// Register through a follower (forwarded to the leader).
	var follower *proc
	for _, p := range c.procs {
		if p != leader {
			follower = p
			break
		}
	}
	raw, _ := json.Marshal(pipelineJob("pipe"))
	if code, body := call("PUT", follower.http, "/v1/pipelines/pipe", map[string]json.RawMessage{"job": raw}, nil); code != 200 {
		c.dump()
		t.Fatalf("register via follower: HTTP %d %s", code, body)
	}
	var pr client.PlanResponse
	waitFor(t, c, "first decision done", 120*time.Second, func() bool {
		var ok bool
		pr, ok = c.plan(leader)
		return ok && pr.Status == fsm.StatusDone
	})
	if got, want := running(t, n.API()), wantGroups(pr); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("nomad runs %v, committed plan %v", got, want)
	}
	t.Logf("decision %d done: %v", pr.DecisionIndex, wantGroups(pr))

	// Every server takes a snapshot now, so a restart restores from it.
	for _, p := range c.procs {
		if code, body := call("POST", p.http, "/v1/snapshot", nil, nil); code != 200 {
			t.Fatalf("snapshot on %s: HTTP %d %s", p.id, code, body)
		}
	}

	// (1) A faster config for "work" -> transition decision; kill -9 the leader while its
	// surge deployment runs.
	if code, body := call("PUT", follower.http, "/v1/candidates/pipe/work", client.CandidateRequest{Config: "mode=b", Capacity: 5}, nil); code != 200 {
		t.Fatalf("candidate: HTTP %d %s", code, body)
	}
	var trans client.PlanResponse
	waitFor(t, c, "transition decision committed", 30*time.Second, func() bool {
		var ok bool
		trans, ok = c.plan(leader)
		return ok && trans.Groups["work"].Transitions > 0
	})
	waitFor(t, c, "surge version in nomad", 30*time.Second, func() bool {
		j, _, err := n.API().Jobs().Info("pipe", nil)
		return err == nil && nomadact.DecisionOf(j) == trans.DecisionIndex && nomadact.PhaseOf(j) == nomadact.PhaseSurge
	})
	waitFor(t, c, "surge deployment running", 10*time.Second, func() bool {
		j, _, err := n.API().Jobs().Info("pipe", nil)
		dep, _, derr := n.API().Jobs().LatestDeployment("pipe", nil)
		return err == nil && derr == nil && dep != nil && dep.JobVersion == *j.Version && dep.Status == "running"
	})
	leader, _ = c.leader(5 * time.Second) // leadership may have moved under load
	killed := leader
	killed.kill9()
	// Raft bound: followers notice within 2x heartbeat timeout, the election completes
	// within 2x election timeout; 1.5s slack for a loaded 2-core machine.
	bound := 2*500*time.Millisecond + 2*500*time.Millisecond + 1500*time.Millisecond
	leader, took = c.leader(bound)
	t.Logf("kill -9 of %s during the surge deployment: new leader %s after %v (bound %v)", killed.id, leader.id, took, bound)

	waitFor(t, c, "transition decision done under the new leader", 120*time.Second, func() bool {
		p, ok := c.plan(leader)
		return ok && p.DecisionIndex >= trans.DecisionIndex && p.Status == fsm.StatusDone
	})
	vc := versionCounts(t, n.API())
	key := strconv.FormatUint(trans.DecisionIndex, 10)
	if vc[key+"/surge"] != 1 || vc[key+"/final"] != 1 {
		t.Fatalf("versions of decision %s: %v (want exactly one surge and one final)", key, vc)
	}
	for k, v := range vc {
		if v != 1 {
			t.Fatalf("duplicated job version %s x%d: %v", k, v, vc)
		}
	}
	pr, _ = c.plan(leader)
	waitFor(t, c, "nomad converged to the committed plan", 60*time.Second, func() bool {
		pr, _ = c.plan(leader)
		return fmt.Sprint(running(t, n.API())) == fmt.Sprint(wantGroups(pr))
	})
	if pr.Groups["work"].Config != "mode=b" || pr.Groups["work"].ObservationEpoch != 1 {
		t.Fatalf("after the transition: %+v", pr.Groups["work"])
	}
	// Every decision in the log is finished and none is lost: the job's last version
	// carries the newest decision.
	var decs []fsm.Decision
	call("GET", leader.http, "/v1/decisions?job=pipe", nil, &decs)
	j, _, _ := n.API().Jobs().Info("pipe", nil)
	if last := decs[len(decs)-1].Index; nomadact.DecisionOf(j) != last {
		t.Fatalf("nomad job carries decision %d, newest committed is %d", nomadact.DecisionOf(j), last)
	}

	// (2) Partition the remaining follower: commits continue on the 2-node majority? No:
	// with one server dead, cutting another leaves no quorum. Restart the killed server
	// first (3): it restores from its data dir and catches up.
	killed.start(t, c.bin)
	waitFor(t, c, "restarted server caught up", 30*time.Second, func() bool { return sameDecisions(c) })
	if !strings.Contains(tail(killed.log, 400), "restored from snapshot") {
		t.Fatalf("restarted server %s did not restore from its snapshot:\n%s", killed.id, tail(killed.log, 30))
	}

	var part *proc
	var pi int
	for i, p := range c.procs {
		if p != leader {
			part, pi = p, i
			break
		}
	}
	c.proxies[pi].Cut()
	var st client.StatusResponse
	call("GET", part.http, "/v1/status", nil, &st)
	before := st.AppliedIndex
	for k := 0; k < 60; k++ {
		obs := client.ObservationRequest{Job: "pipe", Operator: "src", Capacity: float64(10 + k), Epoch: 0}
		if code, body := call("POST", leader.http, "/v1/observations", obs, nil); code != 200 {
			t.Fatalf("observation during partition: HTTP %d %s", code, body)
		}
	}
	time.Sleep(2 * time.Second) // > snapshot interval: the leader compacts past the follower
	call("GET", part.http, "/v1/status", nil, &st)
	if st.AppliedIndex > before+2 {
		t.Fatalf("partitioned follower applied %d -> %d: the partition leaks", before, st.AppliedIndex)
	}
	if l2, _ := c.leader(5 * time.Second); l2 != leader {
		t.Fatalf("leadership moved during a follower partition: %s -> %s", leader.id, l2.id)
	}
	c.proxies[pi].Heal()
	waitFor(t, c, "partitioned follower caught up", 30*time.Second, func() bool { return sameDecisions(c) && sameObservation(c) })
	installed := strings.Contains(tail(part.log, 400), "Installed remote snapshot")
	t.Logf("follower %s caught up after the partition (missed 60 entries, trailing log 24; installed snapshot: %v)", part.id, installed)
	if !installed {
		t.Fatalf("partitioned follower caught up without a snapshot install; the compaction path was not exercised")
	}
}

// startPlanners starts three `trident planner` processes of bin on nomadAddr, raft over
// cuttable proxies when proxied, with the flags every fault test uses (1 s interval, 500 ms
// raft timeouts, 60 s healthy deadline, 2 s kill timeout) followed by extra, and stops them
// when the test ends.
func startPlanners(t *testing.T, bin, nomadAddr string, proxied bool, extra ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: bin}
	base := t.TempDir()
	var peers []string
	for i := 0; i < 3; i++ {
		p := &proc{id: fmt.Sprintf("p%d", i), raftBind: harness.FreeAddr(t), http: harness.FreeAddr(t), dataDir: filepath.Join(base, fmt.Sprintf("p%d", i)), log: filepath.Join(base, fmt.Sprintf("p%d.log", i))}
		c.procs = append(c.procs, p)
		raft := p.raftBind
		if proxied {
			px := newProxy(t, p.raftBind)
			c.proxies = append(c.proxies, px)
			raft = px.Addr()
		}
		peers = append(peers, fmt.Sprintf("%s=%s@%s", p.id, raft, p.http))
	}
	for i, p := range c.procs {
		p.args = []string{"-id", p.id, "-bind", p.raftBind, "-http", p.http, "-data-dir", p.dataDir, "-peers", joinComma(peers),
			"-bootstrap", "-nomad-addr", nomadAddr, "-token", token, "-interval", "1s", "-heartbeat-timeout", "500ms",
			"-election-timeout", "500ms", "-min-healthy-time", "1s", "-healthy-deadline", "60s", "-kill-timeout", "2s"}
		if proxied {
			p.args = append(p.args, "-advertise", c.proxies[i].Addr())
		}
		p.args = append(p.args, extra...)
		p.start(t, bin)
	}
	t.Cleanup(func() {
		for _, p := range c.procs {
			p.stop()
		}
	})
	return c
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

// sameDecisions reports whether every live server has the same decision log.
func sameDecisions(c *cluster) bool {
	var ref string
	for i, p := range c.alive() {
		var decs []fsm.Decision
		if code, _ := call("GET", p.http, "/v1/decisions", nil, &decs); code != 200 {
			return false
		}
		idx := make([]uint64, len(decs))
		for k, d := range decs {
			idx[k] = d.Index
		}
		sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
		s := fmt.Sprint(idx)
		if i == 0 {
			ref = s
		} else if s != ref {
			return false
		}
	}
	return true
}

// sameObservation reports whether every live server has the last observation.
func sameObservation(c *cluster) bool {
	for _, p := range c.alive() {
		var st fsm.State
		if code, _ := call("GET", p.http, "/v1/state", nil, &st); code != 200 {
			return false
		}
		if st.Observations["pipe"]["src"].Capacity != 69 {
			return false
		}
	}
	return true
}
