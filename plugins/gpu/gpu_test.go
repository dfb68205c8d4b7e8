package gpu

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
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

func TestConfigValidation(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: "cuda", FingerprintPeriod: "1m"}, "mode"},
		{Config{Mode: "fake", FakeGPUs: 0, FakeMemoryMiB: 1, FingerprintPeriod: "1m"}, "fake_gpus"},
		{Config{Mode: "fake", FakeGPUs: 1, FakeMemoryMiB: 1, FingerprintPeriod: "soon"}, "fingerprint_period"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want mention of %s", c.cfg, err, c.want)
		}
	}
}
