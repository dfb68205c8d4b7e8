package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// batchGPUPipeline is gpuPipeline (16 GiB GPUs, one record/s per GPU instance) marked
// batch with records of input: alone on four GPUs its expected job is records/4 seconds.
func batchGPUPipeline(id string, records int) *api.Job {
	job := gpuPipeline(id, 16384)
	job.Meta = map[string]string{"trident_batch": "true", "trident_input_records": fmt.Sprint(records)}
	return job
}

// cpuBatchPipeline is pipelineJob (no GPU, one instance per operator, 10 records/s) marked
// batch with 20 records of input.
func cpuBatchPipeline(id string) *api.Job {
	job := pipelineJob(id)
	job.Meta = map[string]string{"trident_batch": "true", "trident_input_records": "20"}
	for _, g := range job.TaskGroups {
		g.Meta["trident_capacity"] = "10"
		g.Scaling = &api.ScalingPolicy{Min: ptr(int64(1)), Max: ptr(int64(1)), Enabled: ptr(false)}
	}
	return job
}

// TestMarginalAdmissionNomad: marginal admission and its starvation bound on a real Nomad
// cluster (one client with four fake 24 GiB GPUs, the server's client for CPU), one
// `trident planner` process. Batch pipelines on the same four GPUs only split them, so a
// second one would lower the running one's normalised work without raising the sum.
//
//  1. r runs alone; w registers and waits: queued at position 1 with the reason "would add
//     no throughput" and when it becomes due, through the API and `trident pipeline
//     status` / `list`, with no decision and no Nomad job. cpu0, a batch pipeline without
//     GPUs, adds throughput beside r: it is admitted past w and runs, w still waits. r
//     finishes (Nomad job stopped, pipeline deleted): w is admitted and its Nomad job runs.
//  2. While w runs, long (expected 45 s alone) and then short (2 s) register: short
//     passes long (positions 1 and 2, shortest expected job first). w finishes: short is
//     admitted, long waits for no gain. Once long has waited its expected time its reason
//     says it is due and reserves the cluster. cpu, a second batch pipeline without GPUs,
//     leaves long room (long would still be admitted beside it), so it passes the
//     reservation and runs; s2, as short as short but registered after long became due,
//     queues behind long. short finishes: long is admitted and runs in Nomad, s2 still
//     waits.
//
// Every admitted pipeline's allocations run in Nomad (cpu0's throughout); a queued one has
// no Nomad job.
func TestMarginalAdmissionNomad(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes: skipped in -short")
	}
	start := time.Now()
	bin := buildTrident(t)
	devDir := harness.BuildGPUPlugin(t)
	n := harness.StartNomad(t, harness.NomadOptions{DevicePluginDir: devDir, Clients: []harness.ClientSpec{
		{Name: "g", MemoryMB: 4096, FakeGPUs: 4, FakeGPUMemoryMiB: 24576},
	}})
	cl := n.API()
	p := &proc{id: "p0", raftBind: harness.FreeAddr(t), http: harness.FreeAddr(t), dataDir: filepath.Join(t.TempDir(), "p0"), log: filepath.Join(t.TempDir(), "p0.log")}
	p.args = []string{"-id", p.id, "-bind", p.raftBind, "-http", p.http, "-data-dir", p.dataDir,
		"-peers", fmt.Sprintf("%s=%s@%s", p.id, p.raftBind, p.http), "-bootstrap", "-nomad-addr", n.Addr, "-token", token,
		"-interval", "1s", "-min-healthy-time", "1s", "-healthy-deadline", "60s", "-kill-timeout", "2s"}
	p.start(t, bin)
	c := &cluster{t: t, bin: bin, procs: []*proc{p}}
	t.Cleanup(p.stop)
	c.leader(30 * time.Second)
	t.Logf("cluster and planner up after %v", time.Since(start).Round(time.Second))

	register := func(job *api.Job) {
		t.Helper()
		raw, _ := json.Marshal(job)
		if code, body := call("PUT", p.http, "/v1/pipelines/"+*job.ID, map[string]json.RawMessage{"job": raw}, nil); code != 200 {
			t.Fatalf("register %s: HTTP %d %s", *job.ID, code, body)
		}
	}
	queued := func(job string) *client.Queued {
		var v client.Pipeline
		if code, _ := call("GET", p.http, "/v1/pipelines/"+job, nil, &v); code != 200 {
			return nil
		}
		return v.Queued
	}
	// reason reports job's queue reason ("" when it is not queued).
	reason := func(job string) string {
		if q := queued(job); q != nil {
			return q.Reason
		}
		return ""
	}
	// runs reports whether job's latest decision is applied and Nomad runs it: the job is
	// running and every allocation Nomad wants running is running.
	runs := func(job string) bool {
		var pr client.PlanResponse
		if code, _ := call("GET", p.http, "/v1/plan/"+job, nil, &pr); code != 200 || pr.Status != fsm.StatusDone {
			return false
		}
		info, _, err := cl.Jobs().Info(job, nil)
		if err != nil || info.Status == nil || *info.Status != "running" {
			return false
		}
		allocs, _, err := cl.Jobs().Allocations(job, false, nil)
		if err != nil {
			return false
		}
		n := 0
		for _, a := range allocs {
			if a.DesiredStatus != "run" {
				continue
			}
			if a.ClientStatus != "running" {
				return false
			}
			n++
		}
		return n > 0
	}
	// waiting fails unless job is queued with no decision and no Nomad job.
	waiting := func(job string) {
		t.Helper()
		if q := queued(job); q == nil {
			t.Fatalf("%s is not queued", job)
		}
		if code, body := call("GET", p.http, "/v1/plan/"+job, nil, nil); code != 404 || !strings.Contains(body, "queued for admission") {
			t.Fatalf("plan of queued %s: HTTP %d %s, want 404 naming the queue", job, code, body)
		}
		if _, _, err := cl.Jobs().Info(job, nil); err == nil {
			t.Fatalf("queued %s runs in Nomad", job)
		}
	}
	// finish is a batch pipeline finishing: its Nomad job stops and it is deleted (CLI).
	finish := func(job string) {
		t.Helper()
		if _, _, err := cl.Jobs().Deregister(job, true, nil); err != nil {
			t.Fatalf("stop %s in Nomad: %v", job, err)
		}
		cli(t, bin, p.http, "pipeline", "delete", job)
	}
	phase := time.Now()
	mark := func(what string) {
		t.Logf("%s after %v", what, time.Since(phase).Round(100*time.Millisecond))
		phase = time.Now()
	}

	// 1. r runs alone; w would only split r's GPUs: it waits, then starts when r finishes.
	register(batchGPUPipeline("r", 1_000_000))
	waitFor(t, c, "r planned and running in Nomad", 120*time.Second, func() bool { return runs("r") })
	mark("r running")
	register(batchGPUPipeline("w", 400))
	waitFor(t, c, "w queued for adding no throughput", 60*time.Second, func() bool {
		return strings.Contains(reason("w"), "would add no throughput beside the 1 admitted pipelines")
	})
	waiting("w")
	if q := queued("w"); q.Position != 1 || !strings.Contains(q.Reason, "due after") {
		t.Fatalf("w queued %+v: want position 1 and when it becomes due", q)
	}
	if out := cli(t, bin, p.http, "pipeline", "status", "w"); !strings.Contains(out, "Queued         = position 1") ||
		!strings.Contains(out, "would add no throughput") || !strings.Contains(out, "Decision       = none yet") {
		t.Fatalf("pipeline status of queued w:\n%s", out)
	}
	if out := cli(t, bin, p.http, "pipeline", "list"); !listed(out, "w", "queued (#1)") || !listed(out, "r", "done") {
		t.Fatalf("pipeline list: want w queued (#1), r done:\n%s", out)
	}
	mark("w queued")
	// cpu0 uses no GPU: beside r it adds throughput, so it passes w (backfill).
	register(cpuBatchPipeline("cpu0"))
	waitFor(t, c, "cpu0 admitted beside r and running in Nomad", 120*time.Second, func() bool { return runs("cpu0") })
	for range 3 { // rounds later w still waits
		time.Sleep(time.Second)
		waiting("w")
	}
	if q := queued("w"); q.Position != 1 || !strings.Contains(q.Reason, "would add no throughput beside the 2 admitted pipelines") {
		t.Fatalf("w beside r and cpu0: queued %+v, want position 1 for adding no throughput", q)
	}
	if !runs("r") {
		t.Fatal("r no longer runs while w waits")
	}
	mark("cpu0 admitted past w")
	finish("r")
	waitFor(t, c, "w admitted and running in Nomad once r finished", 120*time.Second, func() bool { return runs("w") })
	if q := queued("w"); q != nil {
		t.Fatalf("w runs but is still queued: %+v", q)
	}
	mark("w admitted and running")

	// 2. long, then short, wait behind w; short passes long.
	register(batchGPUPipeline("long", 180))
	register(batchGPUPipeline("short", 8))
	waitFor(t, c, "short at position 1 ahead of long", 60*time.Second, func() bool {
		s, l := queued("short"), queued("long")
		return s != nil && l != nil && s.Position == 1 && l.Position == 2
	})
	waiting("long")
	waiting("short")
	mark("short queued ahead of long")
	finish("w")
	waitFor(t, c, "short admitted and running in Nomad once w finished", 120*time.Second, func() bool { return runs("short") })
	if q := queued("long"); q == nil || q.Position != 1 || !strings.Contains(q.Reason, "would add no throughput") {
		t.Fatalf("long beside short: queued %+v, want position 1 for adding no throughput", q)
	}
	waiting("long")
	// cpu below passes long's reservation only because short started before long became
	// due (short is then one of those long waits for); that needs short admitted within
	// long's 45 s.
	if strings.Contains(reason("long"), "due:") {
		t.Fatalf("long became due before short started (the machine is too slow for this test's timing): %s", reason("long"))
	}
	mark("short admitted and running")
	// long becomes due after its expected time alone (45 s); then it reserves.
	waitFor(t, c, "long due", 120*time.Second, func() bool {
		return strings.Contains(reason("long"), "due: reserves the cluster")
	})
	t.Logf("long: %s", reason("long"))
	mark("long due")
	// cpu leaves long room (long would still be admitted beside it): it passes the
	// reservation. s2, as short as short and registered after long became due, sorts
	// after long and waits.
	register(cpuBatchPipeline("cpu"))
	register(batchGPUPipeline("s2", 8))
	waitFor(t, c, "cpu admitted past long's reservation and running in Nomad", 120*time.Second, func() bool { return runs("cpu") })
	waitFor(t, c, "s2 queued behind long", 60*time.Second, func() bool {
		s2, l := queued("s2"), queued("long")
		return s2 != nil && l != nil && l.Position == 1 && s2.Position == 2
	})
	waiting("long")
	waiting("s2")
	if out := cli(t, bin, p.http, "pipeline", "status", "long"); !strings.Contains(out, "due: reserves the cluster") {
		t.Fatalf("pipeline status of due long:\n%s", out)
	}
	mark("cpu passed the reservation, s2 behind long")
	finish("short")
	waitFor(t, c, "long admitted and running in Nomad once short finished", 120*time.Second, func() bool { return runs("long") })
	if q := queued("s2"); q == nil || q.Position != 1 {
		t.Fatalf("s2 beside long: queued %+v, want it still waiting", q)
	}
	waiting("s2")
	mark("long admitted and running")
	for _, job := range []string{"cpu0", "cpu"} {
		if !runs(job) {
			t.Fatalf("%s no longer runs", job)
		}
	}
	t.Logf("total %v", time.Since(start).Round(time.Second))
}

// cli runs `trident <args> -address addr -token token` (bounded by a minute) and returns
// its output.
func cli(t *testing.T, bin, addr string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	full := append(args[:2:2], append([]string{"-address", addr, "-token", token}, args[2:]...)...)
	out, err := exec.CommandContext(ctx, bin, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("trident %s: %v\n%s", strings.Join(full, " "), err, out)
	}
	return string(out)
}

// listed reports whether the `trident pipeline list` table has a row for job whose
// columns include status.
func listed(table, job, status string) bool {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == job && strings.Contains(line, "  "+status+"  ") {
			return true
		}
	}
	return false
}
