package plugin

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/internal/localcluster"
)

func i64(v int64) *int64                  { return &v }
func f64(v float64) *float64              { return &v }
func strp(v string) *string               { return &v }
func intp(v int) *int                     { return &v }
func u64p(v uint64) *uint64               { return &v }
func durp(v time.Duration) *time.Duration { return &v }

// TestDeviceMemory: an allocation's device memory is the largest task's sum over the
// devices it holds, read from the node's device stats (trident-gpu's memory_used
// attribute, or a summary in a memory unit); devices without memory stats (utilisation
// only, unknown units) are not memory, and other allocations' devices do not count.
func TestDeviceMemory(t *testing.T) {
	dev := func(attr, summary *api.StatValue) *api.DeviceStats {
		d := &api.DeviceStats{Summary: summary, Stats: &api.StatObject{Attributes: map[string]*api.StatValue{}}}
		if attr != nil {
			d.Stats.Attributes["memory_used"] = attr
		}
		return d
	}
	node := nodeDeviceMemory(&api.HostStats{DeviceStats: []*api.DeviceGroupStats{{InstanceStats: map[string]*api.DeviceStats{
		"GPU-0": dev(&api.StatValue{IntNumeratorVal: i64(30720), Unit: "MiB"}, nil),
		"GPU-1": dev(nil, &api.StatValue{FloatNumeratorVal: f64(2), Unit: "GiB"}),
		"GPU-2": dev(nil, &api.StatValue{FloatNumeratorVal: f64(87), Unit: "%"}),
		"GPU-3": dev(&api.StatValue{IntNumeratorVal: i64(1), Unit: "MiB"}, nil),
	}}}})
	al := &api.Allocation{NodeID: "n1", AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
		"main":    {Devices: []*api.AllocatedDeviceResource{{DeviceIDs: []string{"GPU-0", "GPU-1", "GPU-2"}}}},
		"sidecar": {},
	}}}
	d := devicesOf(al)
	b, ok := deviceMemory(d, node)
	if want := float64(30720<<20) + 2*(1<<30); d.node != "n1" || !ok || b != want {
		t.Fatalf("device memory %v (ok %v, node %q), want %v on n1", b, ok, d.node, want)
	}
	if _, ok := deviceMemory(devicesOf(&api.Allocation{}), node); ok {
		t.Fatal("an allocation without devices reports device memory")
	}
	if _, ok := deviceMemory(allocDevices{tasks: [][]string{{"GPU-2"}}}, node); ok {
		t.Fatal("a device with utilisation only reports memory")
	}
}

// TestDeviceMemoryFromNomad: a task holding a fake trident-gpu device reports 12345 MiB in
// use (as the simulated operators do); Nomad's alloc stats carry it, and the APM plugin
// raises the instance's device memory peak to it.
func TestDeviceMemoryFromNomad(t *testing.T) {
	if testing.Short() {
		t.Skip("real Nomad: skipped in -short")
	}
	devDir := harness.BuildGPUPlugin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := harness.StartNomad(t, harness.NomadOptions{
		DevicePluginDir: devDir,
		Clients:         []harness.ClientSpec{{Name: "g1", NodeClass: "gpu", FakeGPUs: 2, FakeGPUMemoryMiB: 40960}},
	})
	cl := n.API()
	job := &api.Job{
		ID: strp("holder"), Name: strp("holder"), Type: strp("service"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{{
			Name: strp("g"), Count: intp(1),
			Tasks: []*api.Task{{
				Name: "t", Driver: "raw_exec",
				Config: map[string]any{"command": "/bin/sh", "args": []string{"-c",
					`echo 12345 > "$TRIDENT_GPU_USAGE_DIR/$NVIDIA_VISIBLE_DEVICES" && exec sleep 3600`}},
				Resources: &api.Resources{CPU: intp(20), MemoryMB: intp(32),
					Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: u64p(1)}}},
				KillTimeout: durp(time.Second),
			}},
		}},
	}
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	p := New(hclog.NewNullLogger())
	var got float64
	deadline := time.Now().Add(90 * time.Second)
	for {
		allocs, _, err := cl.Jobs().Allocations("holder", false, nil)
		if err == nil && len(allocs) == 1 && allocs[0].ClientStatus == "running" {
			snap := snapshot{instances: map[string]InstanceMetrics{allocs[0].ID: {}}}
			facts, errs := p.allocsOf(ctx, cl, "holder/g", &snap)
			if errs = append(errs, fillDeviceMemory(ctx, cl, facts, &snap)...); len(errs) == 0 {
				got = snap.instances[allocs[0].ID].DeviceMemPeak
				if math.Abs(got-12345*(1<<20)) < 1<<20 { // the plugin reports whole MiB
					return
				}
			}
		}
		if time.Now().After(deadline) {
			if len(allocs) == 1 {
				node, _ := cl.Nodes().Stats(allocs[0].NodeID, nil)
				b, _ := json.Marshal(node)
				t.Logf("node stats: %.3000s", b)
			}
			entries, _ := os.ReadDir(localcluster.GPUUsageDir(filepath.Join(n.Dir, "g1")))
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(localcluster.GPUUsageDir(filepath.Join(n.Dir, "g1")), e.Name()))
				t.Logf("usage file %s: %q", e.Name(), b)
			}
			t.Fatalf("device memory from Nomad's alloc stats %.0f MiB after 90 s, want 12345 (allocs err %v)", got/(1<<20), err)
		}
		time.Sleep(time.Second)
	}
}

// TestEngineCountsReachTheFeed: a serving engine's own running and waiting counts and its
// admission limit (the group's trident_param_max_num_seqs) reach the observation layer's
// samples, the evidence its starvation rules use; instances of engines that do not report
// the counts get no limit.
func TestEngineCountsReachTheFeed(t *testing.T) {
	snap := snapshot{time: time.Unix(1, 0), instances: map[string]InstanceMetrics{
		"v": {EngineReported: true, Running: 12, Waiting: 3},
		"w": {},
	}}
	facts := map[string]allocFacts{"v": {admission: 16}, "w": {admission: 16}}
	snap.admission = admissionLimits(facts, &snap)
	f := toFeed(snap)
	if v := f.Instances["v"]; !v.EngineReported || v.Running != 12 || v.Waiting != 3 || v.AdmissionLimit != 16 {
		t.Fatalf("engine instance %+v", v)
	}
	if w := f.Instances["w"]; w.EngineReported || w.AdmissionLimit != 0 {
		t.Fatalf("an instance without engine counts got %+v", w)
	}
}

// TestLiveScrapeReadsEngineGauges: the live scrape of an operator on the default (trident)
// profile whose page carries a hosted vLLM engine's scheduler gauges brings the engine's
// running and waiting counts, with the group's admission limit, to the observation
// layer's samples.
func TestLiveScrapeReadsEngineGauges(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "profile", "testdata", "trident-vllm.prom"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(page)
	}))
	defer srv.Close()
	m, err := ScrapeInstance(context.Background(), srv.Client(), srv.URL, "a")
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshot{time: m.Time, instances: map[string]InstanceMetrics{"a": m}}
	snap.admission = admissionLimits(map[string]allocFacts{"a": {admission: 64}}, &snap)
	f := toFeed(snap)
	if a := f.Instances["a"]; !a.EngineReported || a.Running != 62 || a.Waiting != 3 || a.AdmissionLimit != 64 {
		t.Fatalf("scraped instance %+v, want the engine's running 62, waiting 3, limit 64", a)
	}
}
