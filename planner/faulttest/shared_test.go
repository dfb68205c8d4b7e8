package faulttest

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// gpuPipeline is a two-operator pipeline whose second operator needs one GPU of at least
// gpuMiB.
func gpuPipeline(id string, gpuMiB int) *api.Job {
	job := pipelineJob(id)
	job.TaskGroups[1].Meta["trident_gpus"] = "1"
	job.TaskGroups[1].Meta["trident_gpu_memory_mb"] = fmt.Sprint(gpuMiB)
	job.TaskGroups[1].Meta["trident_capacity"] = "1"
	job.TaskGroups[0].Meta["trident_capacity"] = "100"
	return job
}

// TestPipelinesShareNomad: pipelines and an unrelated service job on clients with fake
// GPUs of two memory sizes (g24: 4 × 24 GiB, g80: 2 × 80 GiB, one of them held by the
// service). The pipeline needing 40 GiB gets the one free 80 GiB GPU, the one needing 16
// GiB plans on what is left (the 24 GiB GPUs); a third pipeline of weight 3 takes three of
// the four contended 24 GiB GPUs from the second (joint round, max-min); a fourth, batch,
// pipeline whose minimum (three GPUs) does not fit is queued, then starts when the second
// finishes (its Nomad job stopped, the pipeline deleted). Every decision is applied
// without a placement failure, no node holds more GPUs than it has, and the service's
// allocation is never replaced.
func TestPipelinesShareNomad(t *testing.T) {
	bin, n := gpuNomad(t,
		harness.ClientSpec{Name: "c1", MemoryMB: 4096},
		harness.ClientSpec{Name: "g24", MemoryMB: 4096, FakeGPUs: 4, FakeGPUMemoryMiB: 24576},
		harness.ClientSpec{Name: "g80", MemoryMB: 4096, FakeGPUs: 2, FakeGPUMemoryMiB: 81920})
	cl := n.API()
	// The unrelated service: one 80 GiB GPU of g80.
	web := &api.Job{ID: ptr("web"), Name: ptr("web"), Type: ptr("service"), Datacenters: []string{"*"},
		Constraints: []*api.Constraint{api.NewConstraint("${node.unique.name}", "=", "g80")},
		TaskGroups: []*api.TaskGroup{{Name: ptr("web"), Count: ptr(1), Tasks: []*api.Task{{
			Name: "run", Driver: "raw_exec", Config: map[string]any{"command": "/bin/sleep", "args": []string{"3600"}},
			Resources: &api.Resources{CPU: ptr(20), MemoryMB: ptr(32), Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(1))}}},
		}}}}}
	if _, _, err := cl.Jobs().Register(web, nil); err != nil {
		t.Fatal(err)
	}
	var webAlloc string
	deadline := time.Now().Add(60 * time.Second)
	for webAlloc == "" {
		allocs, _, _ := cl.Jobs().Allocations("web", false, nil)
		for _, a := range allocs {
			if a.ClientStatus == "running" {
				webAlloc = a.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the service job did not start")
		}
		time.Sleep(500 * time.Millisecond)
	}

	c, p := startPlanner(t, bin, n.Addr)
	plan := func(job string) (client.PlanResponse, bool) { return planOf(p, job) }
	for _, j := range []struct {
		id  string
		mib int
	}{{"big", 40960}, {"small", 16384}} {
		raw, _ := json.Marshal(gpuPipeline(j.id, j.mib))
		if code, body := call("PUT", p.http, "/v1/pipelines/"+j.id, map[string]json.RawMessage{"job": raw}, nil); code != 200 {
			t.Fatalf("register %s: HTTP %d %s", j.id, code, body)
		}
		waitFor(t, c, j.id+"'s first decision done", 120*time.Second, func() bool {
			pr, ok := plan(j.id)
			return ok && pr.Status == fsm.StatusDone
		})
	}
	big, _ := plan("big")
	small, _ := plan("small")
	if got := big.Groups["work"].Nodes; len(got) != 1 || got["g80"].Current != 1 {
		t.Fatalf("big's GPU operator planned on %v: want the one free 80 GiB GPU of g80", got)
	}
	if got := small.Groups["work"].Nodes; got["g80"].Current != 0 || got["g24"].Current < 1 || got["g24"].Current > 4 {
		t.Fatalf("small's GPU operator planned on %v: want g24 only (g80's GPUs are held)", got)
	}
	register := func(job *api.Job) {
		t.Helper()
		raw, _ := json.Marshal(job)
		if code, body := call("PUT", p.http, "/v1/pipelines/"+*job.ID, map[string]json.RawMessage{"job": raw}, nil); code != 200 {
			t.Fatalf("register %s: HTTP %d %s", *job.ID, code, body)
		}
	}
	gpusOf := func(job string) int {
		pr, _ := plan(job)
		return pr.Groups["work"].Nodes["g24"].Total()
	}
	// Nomad runs every plan, every GPU request placed, and the service untouched.
	checkGPUs := func() {
		t.Helper()
		gpus := map[string]int{}
		for _, job := range []string{"big", "small", "heavy", "batch", "web"} {
			allocs, _, err := cl.Jobs().Allocations(job, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range allocs {
				if a.DesiredStatus != "run" {
					continue
				}
				if a.ClientStatus != "running" {
					t.Fatalf("%s allocation %s on %s is %s", job, a.ID[:8], a.NodeName, a.ClientStatus)
				}
				full, _, err := cl.Allocations().Info(a.ID, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, tr := range full.AllocatedResources.Tasks {
					for _, d := range tr.Devices {
						gpus[a.NodeName] += len(d.DeviceIDs)
					}
				}
			}
		}
		if gpus["g80"] != 2 || gpus["g24"] > 4 {
			t.Fatalf("GPUs held per node %v: want g80's two (service + big), at most g24's four", gpus)
		}
		// no evaluation of a pipeline job failed to place an allocation (Nomad records
		// what it could not place, and why, in the evaluation that tried)
		for _, job := range []string{"big", "small", "heavy", "batch"} {
			evals, _, err := cl.Jobs().Evaluations(job, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evals {
				for group, m := range e.FailedTGAllocs {
					t.Fatalf("%s: evaluation %s (%s) failed to place group %s: %d filtered by constraints %v, exhausted %v",
						job, e.ID[:8], e.TriggeredBy, group, m.NodesFiltered, m.ConstraintFiltered, m.DimensionExhausted)
				}
			}
		}
	}
	checkGPUs()

	// A pipeline of weight 3 on the same 24 GiB GPUs: max-min gives it three, small one.
	heavy := gpuPipeline("heavy", 16384)
	heavy.Meta = map[string]string{"trident_weight": "3"}
	register(heavy)
	waitFor(t, c, "the 24 GiB GPUs split 1:3 by weight", 180*time.Second, func() bool {
		h, ok := plan("heavy")
		s, _ := plan("small")
		return ok && h.Status == fsm.StatusDone && s.Status == fsm.StatusDone && gpusOf("heavy") == 3 && gpusOf("small") == 1
	})
	checkGPUs()

	// A batch pipeline whose minimum is three GPUs: beside small's and heavy's minimum of
	// one each there are only two of the four 24 GiB GPUs (the 80 GiB ones are held), so
	// it is queued: no decision, not in Nomad.
	batch := gpuPipeline("batch", 16384)
	batch.Meta = map[string]string{"trident_batch": "true", "trident_input_records": "1000"}
	batch.TaskGroups[1].Scaling = &api.ScalingPolicy{Min: ptr(int64(3)), Max: ptr(int64(4)), Enabled: ptr(false)}
	register(batch)
	waitFor(t, c, "the batch pipeline queued", 60*time.Second, func() bool {
		var v client.Pipeline
		code, _ := call("GET", p.http, "/v1/pipelines/batch", nil, &v)
		return code == 200 && v.Queued != nil && v.Queued.Position == 1
	})
	if _, ok := plan("batch"); ok {
		t.Fatal("the queued batch pipeline has a decision")
	}
	if _, _, err := cl.Jobs().Info("batch", nil); err == nil {
		t.Fatal("the queued batch pipeline runs in Nomad")
	}

	// small finishes: its Nomad job stops and it is deleted; the batch pipeline starts with
	// its minimum of three, and heavy shrinks to one (the minimums come before weights).
	if _, _, err := cl.Jobs().Deregister("small", true, nil); err != nil {
		t.Fatal(err)
	}
	if code, body := call("DELETE", p.http, "/v1/pipelines/small", nil, nil); code != 200 {
		t.Fatalf("delete small: HTTP %d %s", code, body)
	}
	waitFor(t, c, "the batch pipeline admitted and running", 180*time.Second, func() bool {
		b, ok := plan("batch")
		return ok && b.Status == fsm.StatusDone && gpusOf("batch") == 3 && gpusOf("heavy") == 1
	})
	checkGPUs()
	allocs, _, _ := cl.Jobs().Allocations("web", false, nil)
	if len(allocs) != 1 || allocs[0].ID != webAlloc || allocs[0].ClientStatus != "running" {
		t.Fatalf("the service's allocations %v: want %s still running alone", allocs, webAlloc[:8])
	}
}

// gpuNomad skips in -short; otherwise it builds trident and the fake-GPU device plugin and
// starts a loopback Nomad with the clients.
func gpuNomad(t *testing.T, clients ...harness.ClientSpec) (string, *harness.Nomad) {
	t.Helper()
	if testing.Short() {
		t.Skip("real processes: skipped in -short")
	}
	bin := buildTrident(t)
	n := harness.StartNomad(t, harness.NomadOptions{DevicePluginDir: harness.BuildGPUPlugin(t), Clients: clients})
	return bin, n
}

// startPlanner starts one planner server (1 s rounds, short health times) on the Nomad at
// addr and waits for it to lead.
func startPlanner(t *testing.T, bin, addr string) (*cluster, *proc) {
	t.Helper()
	p := &proc{id: "p0", raftBind: harness.FreeAddr(t), http: harness.FreeAddr(t), dataDir: filepath.Join(t.TempDir(), "p0"), log: filepath.Join(t.TempDir(), "p0.log")}
	p.args = []string{"-id", p.id, "-bind", p.raftBind, "-http", p.http, "-data-dir", p.dataDir,
		"-peers", fmt.Sprintf("%s=%s@%s", p.id, p.raftBind, p.http), "-bootstrap", "-nomad-addr", addr, "-token", token,
		"-interval", "1s", "-min-healthy-time", "1s", "-healthy-deadline", "60s", "-kill-timeout", "2s"}
	p.start(t, bin)
	c := &cluster{t: t, bin: bin, procs: []*proc{p}}
	t.Cleanup(p.stop)
	c.leader(30 * time.Second)
	return c, p
}

// planOf reads job's plan from planner p (false: none yet).
func planOf(p *proc, job string) (client.PlanResponse, bool) {
	var pr client.PlanResponse
	code, _ := call("GET", p.http, "/v1/plan/"+job, nil, &pr)
	return pr, code == 200
}

// TestVendorsOnNomad: on clients with fake NVIDIA GPUs (n1) and fake AMD GPUs (a1), a
// pipeline whose GPU operator declares trident_gpu_vendor = "amd" is planned and placed
// only on the AMD devices (Nomad assigns it amd/gpu instances) and one that declares
// none only on the NVIDIA devices, with no placement failure.
func TestVendorsOnNomad(t *testing.T) {
	bin, n := gpuNomad(t,
		harness.ClientSpec{Name: "n1", MemoryMB: 4096, FakeGPUs: 2, FakeGPUMemoryMiB: 24576},
		harness.ClientSpec{Name: "a1", MemoryMB: 4096, FakeGPUs: 2, FakeGPUMemoryMiB: 65536, FakeGPUVendor: "amd"})
	cl := n.API()
	_, p := startPlanner(t, bin, n.Addr)
	rocm := gpuPipeline("rocm", 16384)
	rocm.TaskGroups[1].Meta["trident_gpu_vendor"] = "amd"
	for _, job := range []*api.Job{gpuPipeline("cuda", 16384), rocm} {
		raw, _ := json.Marshal(job)
		if code, body := call("PUT", p.http, "/v1/pipelines/"+*job.ID, map[string]json.RawMessage{"job": raw}, nil); code != 200 {
			t.Fatalf("register %s: HTTP %d %s", *job.ID, code, body)
		}
	}
	want := map[string]struct{ node, vendor string }{"cuda": {"n1", "nvidia"}, "rocm": {"a1", "amd"}}
	deadline := time.Now().Add(120 * time.Second)
	for job := range want {
		for {
			if pr, ok := planOf(p, job); ok && pr.Status == fsm.StatusDone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no applied decision within 120 s", job)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	for job, w := range want {
		pr, _ := planOf(p, job)
		for node, pl := range pr.Groups["work"].Nodes {
			if pl.Total() > 0 && node != w.node {
				t.Errorf("%s's GPU operator planned on %s: want %s's %s GPUs only", job, node, w.node, w.vendor)
			}
		}
		allocs, _, err := cl.Jobs().Allocations(job, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, a := range allocs {
			if a.DesiredStatus != "run" || a.ClientStatus != "running" {
				continue
			}
			full, _, err := cl.Allocations().Info(a.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range full.AllocatedResources.Tasks {
				for _, d := range tr.Devices {
					if d.Vendor != w.vendor || a.NodeName != w.node {
						t.Errorf("%s: allocation %s on %s holds %s/%s devices, want %s's %s", job, a.ID[:8], a.NodeName, d.Vendor, d.Type, w.node, w.vendor)
					}
					held += len(d.DeviceIDs)
				}
			}
		}
		if held == 0 {
			t.Errorf("%s: no running allocation holds a GPU", job)
		}
		evals, _, err := cl.Jobs().Evaluations(job, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evals {
			for group := range e.FailedTGAllocs {
				t.Errorf("%s: evaluation %s failed to place group %s", job, e.ID[:8], group)
			}
		}
	}
}
