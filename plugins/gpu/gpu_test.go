package gpu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
)

func configure(t *testing.T, p *Plugin, cfg Config) {
	t.Helper()
	var b []byte
	if err := base.MsgPackEncode(&b, cfg); err != nil {
		t.Fatal(err)
	}
	if err := p.SetConfig(&base.Config{PluginConfig: b}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
}

// The DGX A100 mock of go-nvml stands in for real NVML: 8 A100-40GB devices.
func TestFingerprintDGXA100Mock(t *testing.T) {
	lib := dgxa100.New()
	p := NewWithNVML(hclog.NewNullLogger(), lib)
	configure(t, p, Config{Mode: "nvml", FingerprintPeriod: "1m"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp := <-ch
	if resp.Error != nil {
		t.Fatal(resp.Error)
	}
	if len(resp.Devices) != 1 {
		t.Fatalf("got %d device groups, want 1 (one model)", len(resp.Devices))
	}
	g := resp.Devices[0]
	if g.Vendor != "nvidia" || g.Type != "gpu" || !strings.Contains(g.Name, "A100") {
		t.Errorf("group = %s/%s/%s", g.Vendor, g.Type, g.Name)
	}
	if len(g.Devices) != 8 {
		t.Errorf("got %d devices, want 8", len(g.Devices))
	}
	if m := g.Attributes[AttrMemory]; m == nil || *m.Int != 40960 || m.Unit != "MiB" {
		t.Errorf("memory attribute = %v, want 40960 MiB", m)
	}
	if err := g.Validate(); err != nil {
		t.Errorf("group invalid for Nomad: %v", err)
	}
	res, err := p.Reserve([]string{g.Devices[0].ID, g.Devices[3].ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Envs[VisibleDevicesEnv]; got != g.Devices[0].ID+","+g.Devices[3].ID {
		t.Errorf("%s = %q", VisibleDevicesEnv, got)
	}
	if _, err := p.Reserve([]string{"GPU-nope"}); err == nil || !strings.Contains(err.Error(), "unknown GPU") {
		t.Errorf("reserving an unknown GPU: err = %v", err)
	}
}

func TestFakeModeStatsAndHealth(t *testing.T) {
	fake := NewFakeNVML(2, 80<<30, "Fake H100")
	p := NewWithNVML(hclog.NewNullLogger(), fake)
	configure(t, p, Config{Mode: "fake", FakeGPUs: 2, FakeMemoryMiB: 81920, FingerprintPeriod: "1m"})
	if err := fake.SetUsage(1, 30<<30, 87); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Stats(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	resp := <-ch
	if resp.Error != nil {
		t.Fatal(resp.Error)
	}
	st := resp.Groups[0].InstanceStats["GPU-fake0000-0000-0000-0000-000000000001"]
	if st == nil {
		t.Fatalf("no stats for device 1: %+v", resp.Groups[0].InstanceStats)
	}
	if *st.Summary.IntNumeratorVal != 30*1024 || *st.Summary.IntDenominatorVal != 80*1024 {
		t.Errorf("memory used = %d/%d MiB, want 30720/81920", *st.Summary.IntNumeratorVal, *st.Summary.IntDenominatorVal)
	}
	if u := *st.Stats.Attributes["gpu_utilization"].FloatNumeratorVal; u != 87 {
		t.Errorf("utilisation = %v, want 87", u)
	}
	// A device whose memory query fails is reported unhealthy and cannot be reserved.
	fake.devices[0].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	devs, _, err := p.scan()
	if err != nil {
		t.Fatal(err)
	}
	if devs[0].healthy || !devs[1].healthy {
		t.Errorf("health = %v/%v, want false/true", devs[0].healthy, devs[1].healthy)
	}
}

// TestFakeVendor: in fake mode the devices are fingerprinted and their stats reported
// under FakeVendor (an AMD GPU beside NVIDIA's, for tests); the default is nvidia.
func TestFakeVendor(t *testing.T) {
	for _, tc := range []struct{ vendor, want string }{{"", Vendor}, {"amd", "amd"}} {
		fake := NewFakeNVML(1, 64<<30, "Fake MI210")
		p := NewWithNVML(hclog.NewNullLogger(), fake)
		configure(t, p, Config{Mode: "fake", FakeGPUs: 1, FakeMemoryMiB: 65536, FingerprintPeriod: "1m", FakeVendor: tc.vendor})
		ctx, cancel := context.WithCancel(context.Background())
		fp, err := p.Fingerprint(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r := next(t, fp); r.Error != nil || len(r.Devices) != 1 || r.Devices[0].Vendor != tc.want || r.Devices[0].Type != DeviceType {
			t.Errorf("fake_vendor %q: fingerprint %+v (err %v), want one %s/gpu group", tc.vendor, r.Devices, r.Error, tc.want)
		}
		st, err := p.Stats(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if r := <-st; r.Error != nil || len(r.Groups) != 1 || r.Groups[0].Vendor != tc.want {
			t.Errorf("fake_vendor %q: stats %+v (err %v), want the %s group", tc.vendor, r.Groups, r.Error, tc.want)
		}
		cancel()
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: "cuda", FingerprintPeriod: "1m"}, "mode"},
		{Config{Mode: "fake", FakeGPUs: 0, FakeMemoryMiB: 1, FingerprintPeriod: "1m"}, "fake_gpus"},
		{Config{Mode: "fake", FakeGPUs: 1, FakeMemoryMiB: 1, FingerprintPeriod: "soon"}, "fingerprint_period"},
		{Config{Mode: "fake", FakeGPUs: 1, FakeMemoryMiB: 1, FingerprintPeriod: "0s"}, "fingerprint_period \"0s\" must be positive"},
		{Config{Mode: "fake", FakeGPUs: 1, FakeMemoryMiB: 1, FingerprintPeriod: "1m", FakeVendor: "amd/gpu"}, "fake_vendor"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want mention of %s", c.cfg, err, c.want)
		}
	}
}

// next reads the next fingerprint within a few seconds.
func next(t *testing.T, ch <-chan *device.FingerprintResponse) *device.FingerprintResponse {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("fingerprint stream closed")
		}
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no fingerprint within 5 s")
	}
	return nil
}

// devicesByID flattens a fingerprint's groups.
func devicesByID(r *device.FingerprintResponse) map[string]*device.Device {
	out := map[string]*device.Device{}
	for _, g := range r.Devices {
		for _, d := range g.Devices {
			out[d.ID] = d
		}
	}
	return out
}

// Through the fingerprint stream (re-read every period): a GPU NVML can no longer open is
// reported unhealthy under its UUID while the others stay healthy (a fingerprint error
// would make Nomad drop every GPU of the plugin), it cannot be reserved, and it comes back
// healthy. A library-wide failure is an error, and the unchanged inventory is sent again
// once NVML answers.
func TestFingerprintStreamIsolatesALostGPU(t *testing.T) {
	fake := NewFakeNVML(3, 80<<30, "Fake H100")
	// The stream's goroutine calls these while the test flips the failures.
	var lose, countFails atomic.Bool
	handle := fake.DeviceGetHandleByIndexFunc
	fake.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 1 && lose.Load() {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return handle(i)
	}
	fake.DeviceGetCountFunc = func() (int, nvml.Return) {
		if countFails.Load() {
			return 0, nvml.ERROR_DRIVER_NOT_LOADED
		}
		return 3, nvml.SUCCESS
	}
	p := NewWithNVML(hclog.NewNullLogger(), fake)
	configure(t, p, Config{Mode: "fake", FakeGPUs: 3, FakeMemoryMiB: 81920, FingerprintPeriod: "20ms"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first := devicesByID(next(t, ch)); len(first) != 3 {
		t.Fatalf("%d devices, want 3", len(first))
	}
	lostID := fake.devices[1].UUID
	lose.Store(true)
	r := next(t, ch)
	if r.Error != nil {
		t.Fatalf("one lost GPU failed the whole fingerprint: %v", r.Error)
	}
	devs := devicesByID(r)
	if len(devs) != 3 || devs[lostID] == nil || devs[lostID].Healthy || !strings.Contains(devs[lostID].HealthDesc, "GPU_IS_LOST") {
		t.Fatalf("after losing GPU 1: %d devices, %s = %+v; want 3 with it unhealthy (GPU_IS_LOST)", len(devs), lostID, devs[lostID])
	}
	for id, d := range devs {
		if id != lostID && !d.Healthy {
			t.Errorf("GPU %s unhealthy with the lost one", id)
		}
	}
	if _, err := p.Reserve([]string{lostID}); err == nil || !strings.Contains(err.Error(), "unhealthy") {
		t.Errorf("reserving the lost GPU: err = %v, want unhealthy", err)
	}
	lose.Store(false)
	if d := devicesByID(next(t, ch))[lostID]; d == nil || !d.Healthy {
		t.Fatalf("recovered GPU: %+v, want healthy", d)
	}

	countFails.Store(true)
	if r := next(t, ch); r.Error == nil {
		t.Fatal("a failed device count did not report an error")
	}
	countFails.Store(false)
	if r := next(t, ch); r.Error != nil || len(devicesByID(r)) != 3 {
		t.Fatalf("after NVML recovered: %+v, want the inventory again", r)
	}
}

// A MIG-enabled GPU is fingerprinted unhealthy (its MIG devices are not exposed), and a
// metric the device does not support is left out of its stats instead of reading 0.
func TestMIGAndUnsupportedMetrics(t *testing.T) {
	fake := NewFakeNVML(2, 80<<30, "Fake H100")
	fake.devices[0].MigMode = nvml.DEVICE_MIG_ENABLE
	fake.devices[1].GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	p := NewWithNVML(hclog.NewNullLogger(), fake)
	configure(t, p, Config{Mode: "fake", FakeGPUs: 2, FakeMemoryMiB: 81920, FingerprintPeriod: "1m"})
	devs, driver, err := p.scan()
	if err != nil {
		t.Fatal(err)
	}
	if devs[0].healthy || !strings.Contains(devs[0].healthDesc, "MIG") || !devs[1].healthy {
		t.Fatalf("health %+v, want GPU 0 unhealthy for MIG, GPU 1 healthy", devs)
	}
	if driver != "fake" {
		t.Errorf("fake driver_version %q, want \"fake\"", driver)
	}
	st := p.statsResponse(time.Now()).Groups[0].InstanceStats[fake.devices[1].UUID]
	if st == nil || st.Stats.Attributes["memory_used"] == nil {
		t.Fatalf("stats of GPU 1: %+v, want memory", st)
	}
	if _, ok := st.Stats.Attributes["gpu_utilization"]; ok {
		t.Error("unsupported utilisation reported")
	}
}

// SetConfig again shuts the previous NVML handle down.
func TestReconfigureShutsNVMLDown(t *testing.T) {
	first := NewFakeNVML(1, 1<<30, "Fake")
	shut := 0
	first.ShutdownFunc = func() nvml.Return { shut++; return nvml.SUCCESS }
	libs := []nvml.Interface{first, NewFakeNVML(1, 1<<30, "Fake")}
	p := New(hclog.NewNullLogger())
	p.newNVML = func(Config) nvml.Interface { l := libs[0]; libs = libs[1:]; return l }
	cfg := Config{Mode: "fake", FakeGPUs: 1, FakeMemoryMiB: 1024, FingerprintPeriod: "1m"}
	configure(t, p, cfg)
	configure(t, p, cfg)
	if shut != 1 {
		t.Fatalf("previous NVML handle shut down %d times, want 1", shut)
	}
}

// TestFakeUsageDir: in fake mode with fake_usage_dir, a task holding a device learns the
// directory from its reservation's environment, and what it writes to <dir>/<uuid> is the
// device's memory use in the plugin's stats (Nomad's alloc and node stats); a device
// without a file is idle, a malformed file leaves the device's value as it was.
func TestFakeUsageDir(t *testing.T) {
	dir := t.TempDir()
	fake := NewFakeNVML(2, 80<<30, "Fake H100")
	p := NewWithNVML(hclog.NewNullLogger(), fake)
	configure(t, p, Config{Mode: "fake", FakeGPUs: 2, FakeMemoryMiB: 81920, FingerprintPeriod: "1m", FakeUsageDir: dir})
	if _, _, err := p.scan(); err != nil {
		t.Fatal(err)
	}
	const dev1 = "GPU-fake0000-0000-0000-0000-000000000001"
	p.mu.Lock()
	p.known = map[string]bool{dev1: true}
	p.mu.Unlock()
	res, err := p.Reserve([]string{dev1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Envs[UsageDirEnv] != dir || res.Envs[VisibleDevicesEnv] != dev1 {
		t.Fatalf("reservation env %v: want %s=%s", res.Envs, UsageDirEnv, dir)
	}
	if err := os.WriteFile(filepath.Join(dir, dev1), []byte("30720.4 55\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	used := func() map[string]uint64 {
		t.Helper()
		ss, err := p.Sample()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for _, s := range ss {
			out[s.UUID] = s.MemoryUsedBytes >> 20
		}
		return out
	}
	if got := used(); got[dev1] != 30720 || got["GPU-fake0000-0000-0000-0000-000000000000"] != 0 {
		t.Fatalf("memory used %v MiB: want 30720 on device 1, 0 on device 0", got)
	}
	if err := os.WriteFile(filepath.Join(dir, dev1), []byte("lots"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := used(); got[dev1] != 30720 {
		t.Fatalf("a malformed file changed the device's value: %v", got)
	}
	for _, bad := range []string{"", "-1", "1 2 3", "NaN"} {
		if _, _, err := ParseUsage(bad); err == nil {
			t.Errorf("ParseUsage(%q) accepted", bad)
		}
	}
}
