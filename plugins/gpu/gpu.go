// Package gpu is the trident-gpu Nomad device plugin: it fingerprints NVIDIA GPUs through
// NVML (go-nvml) as `nvidia/gpu` devices with model, memory, UUID and health, streams
// per-device memory and utilisation stats, and sets NVIDIA_VISIBLE_DEVICES on reservation.
//
// On hosts without GPUs, mode "fake" serves a configurable inventory from go-nvml's mock
// package, so the same fingerprint/stats/reserve code paths run everywhere.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

const (
	// PluginName is the name Nomad's `plugin "trident-gpu"` block refers to.
	PluginName = "trident-gpu"
	// Vendor and DeviceType make devices addressable as `device "nvidia/gpu"`.
	Vendor     = "nvidia"
	DeviceType = "gpu"
	// VisibleDevicesEnv is set on reservation to the reserved GPU UUIDs.
	VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

	// Attribute names on each device group.
	AttrMemory        = "memory"
	AttrDriverVersion = "driver_version"
	AttrBackend       = "backend"
)

// configSpec is the plugin's HCL configuration schema.
func configSpec() *hclspec.Spec {
	return hclspec.NewObject(map[string]*hclspec.Spec{
		"mode": hclspec.NewDefault(hclspec.NewAttr("mode", "string", false), hclspec.NewLiteral(`"nvml"`)),
		"fake_gpus": hclspec.NewDefault(hclspec.NewAttr("fake_gpus", "number", false),
			hclspec.NewLiteral("0")),
		"fake_memory_mib": hclspec.NewDefault(hclspec.NewAttr("fake_memory_mib", "number", false),
			hclspec.NewLiteral("81920")),
		"fake_model": hclspec.NewDefault(hclspec.NewAttr("fake_model", "string", false),
			hclspec.NewLiteral(`"Fake NVIDIA H100 80GB HBM3"`)),
		"fingerprint_period": hclspec.NewDefault(hclspec.NewAttr("fingerprint_period", "string", false),
			hclspec.NewLiteral(`"1m"`)),
		"stats_period": hclspec.NewDefault(hclspec.NewAttr("stats_period", "string", false),
			hclspec.NewLiteral(`"10s"`)),
	})
}

// Config is the decoded plugin configuration.
type Config struct {
	// Mode is "nvml" (real GPUs through libnvidia-ml) or "fake" (go-nvml mock inventory).
	Mode string `codec:"mode"`
	// FakeGPUs is the number of devices in fake mode.
	FakeGPUs int `codec:"fake_gpus"`
	// FakeMemoryMiB is each fake device's memory.
	FakeMemoryMiB int `codec:"fake_memory_mib"`
	// FakeModel is the fake devices' model name.
	FakeModel string `codec:"fake_model"`
	// FingerprintPeriod is how often devices are re-fingerprinted (health changes).
	FingerprintPeriod string `codec:"fingerprint_period"`
	// StatsPeriod is unused by Nomad (it passes its own interval) but kept for docs.
	StatsPeriod string `codec:"stats_period"`
}

// Validate checks the configuration and names the offending field.
func (c Config) Validate() error {
	switch c.Mode {
	case "nvml":
	case "fake":
		if c.FakeGPUs < 1 {
			return fmt.Errorf("fake_gpus must be >= 1 in fake mode, got %d", c.FakeGPUs)
		}
		if c.FakeMemoryMiB < 1 {
			return fmt.Errorf("fake_memory_mib must be >= 1, got %d", c.FakeMemoryMiB)
		}
	default:
		return fmt.Errorf("mode must be \"nvml\" or \"fake\", got %q", c.Mode)
	}
	if _, err := time.ParseDuration(c.FingerprintPeriod); err != nil {
		return fmt.Errorf("fingerprint_period %q: %w", c.FingerprintPeriod, err)
	}
	return nil
}

// Plugin implements device.DevicePlugin over an nvml.Interface.
type Plugin struct {
	log hclog.Logger
	// newNVML builds the NVML backend from the config; replaceable in tests.
	newNVML func(Config) nvml.Interface

	mu     sync.Mutex
	cfg    Config
	lib    nvml.Interface
	period time.Duration
	known  map[string]bool // UUID -> healthy, from the last fingerprint
}

var _ device.DevicePlugin = (*Plugin)(nil)

// New returns an unconfigured plugin; Nomad calls SetConfig before anything else.
func New(log hclog.Logger) *Plugin {
	return &Plugin{log: log.Named(PluginName), newNVML: defaultNVML, known: map[string]bool{}}
}

// NewWithNVML returns a plugin using lib whatever the mode (for tests with go-nvml mocks).
func NewWithNVML(log hclog.Logger, lib nvml.Interface) *Plugin {
	p := New(log)
	p.newNVML = func(Config) nvml.Interface { return lib }
	return p
}

func defaultNVML(c Config) nvml.Interface {
	if c.Mode == "fake" {
		return NewFakeNVML(c.FakeGPUs, uint64(c.FakeMemoryMiB)<<20, c.FakeModel)
	}
	return nvml.New()
}

// PluginInfo describes the plugin to Nomad.
func (p *Plugin) PluginInfo() (*base.PluginInfoResponse, error) {
	return &base.PluginInfoResponse{
		Type:              base.PluginTypeDevice,
		PluginApiVersions: []string{device.ApiVersion010},
		PluginVersion:     "v0.1.0",
		Name:              PluginName,
	}, nil
}

// ConfigSchema returns the HCL schema of the plugin block's config.
func (p *Plugin) ConfigSchema() (*hclspec.Spec, error) { return configSpec(), nil }

// SetConfig decodes and validates the configuration and initialises NVML.
func (p *Plugin) SetConfig(c *base.Config) error {
	var cfg Config
	if len(c.PluginConfig) > 0 {
		if err := base.MsgPackDecode(c.PluginConfig, &cfg); err != nil {
			return fmt.Errorf("decode trident-gpu config: %w", err)
		}
	}
	if cfg.Mode == "" {
		cfg.Mode = "nvml"
	}
	if cfg.FingerprintPeriod == "" {
		cfg.FingerprintPeriod = "1m"
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("trident-gpu config: %w", err)
	}
	period, _ := time.ParseDuration(cfg.FingerprintPeriod)
	lib := p.newNVML(cfg)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("trident-gpu: initialise NVML (mode %s): %s", cfg.Mode, nvml.ErrorString(ret))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg, p.lib, p.period = cfg, lib, period
	p.log.Info("configured", "mode", cfg.Mode, "fake_gpus", cfg.FakeGPUs)
	return nil
}

// gpuInfo is what one fingerprint pass learns about a device.
type gpuInfo struct {
	uuid, model, pciBus string
	memBytes            uint64
	healthy             bool
	healthDesc          string
}

// scan reads every device's identity and health from NVML.
func (p *Plugin) scan() ([]gpuInfo, string, error) {
	p.mu.Lock()
	lib := p.lib
	p.mu.Unlock()
	if lib == nil {
		return nil, "", errors.New("trident-gpu is not configured")
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, "", fmt.Errorf("nvml device count: %s", nvml.ErrorString(ret))
	}
	driver, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		driver = "unknown"
	}
	out := make([]gpuInfo, 0, n)
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, "", fmt.Errorf("nvml device %d handle: %s", i, nvml.ErrorString(ret))
		}
		info := gpuInfo{healthy: true}
		if info.uuid, ret = d.GetUUID(); ret != nvml.SUCCESS {
			return nil, "", fmt.Errorf("nvml device %d uuid: %s", i, nvml.ErrorString(ret))
		}
		if info.model, ret = d.GetName(); ret != nvml.SUCCESS {
			info.model = "unknown"
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			info.healthy, info.healthDesc = false, "memory info: "+nvml.ErrorString(ret)
		} else {
			info.memBytes = mem.Total
		}
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			info.pciBus = pciBusID(pci)
		}
		out = append(out, info)
	}
	return out, driver, nil
}

func pciBusID(pci nvml.PciInfo) string {
	b := make([]byte, 0, len(pci.BusIdLegacy))
	for _, c := range pci.BusIdLegacy {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// groups turns scanned devices into Nomad device groups: one group per model.
func groups(devs []gpuInfo, driver, backend string) []*device.DeviceGroup {
	byModel := map[string]*device.DeviceGroup{}
	var order []string
	for _, d := range devs {
		g, ok := byModel[d.model]
		if !ok {
			g = &device.DeviceGroup{
				Vendor: Vendor, Type: DeviceType, Name: d.model,
				Attributes: map[string]*structs.Attribute{
					AttrMemory:        structs.NewIntAttribute(int64(d.memBytes>>20), structs.UnitMiB),
					AttrDriverVersion: structs.NewStringAttribute(driver),
					AttrBackend:       structs.NewStringAttribute(backend),
				},
			}
			byModel[d.model] = g
			order = append(order, d.model)
		}
		dev := &device.Device{ID: d.uuid, Healthy: d.healthy, HealthDesc: d.healthDesc}
		if d.pciBus != "" {
			dev.HwLocality = &device.DeviceLocality{PciBusID: d.pciBus}
		}
		g.Devices = append(g.Devices, dev)
	}
	sort.Strings(order)
	out := make([]*device.DeviceGroup, 0, len(order))
	for _, m := range order {
		out = append(out, byModel[m])
	}
	return out
}

// Fingerprint streams the device inventory now and again whenever it changes.
func (p *Plugin) Fingerprint(ctx context.Context) (<-chan *device.FingerprintResponse, error) {
	out := make(chan *device.FingerprintResponse)
	go p.fingerprintLoop(ctx, out)
	return out, nil
}

func (p *Plugin) fingerprintLoop(ctx context.Context, out chan<- *device.FingerprintResponse) {
	defer close(out)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		p.mu.Lock()
		period, backend := p.period, p.cfg.Mode
		p.mu.Unlock()
		if period <= 0 {
			period = time.Minute
		}
		timer.Reset(period)
		devs, driver, err := p.scan()
		var resp *device.FingerprintResponse
		if err != nil {
			p.log.Error("fingerprint failed", "error", err)
			resp = device.NewFingerprintError(err)
		} else {
			key := inventoryKey(devs)
			if key == last {
				continue
			}
			last = key
			p.mu.Lock()
			p.known = map[string]bool{}
			for _, d := range devs {
				p.known[d.uuid] = d.healthy
			}
			p.mu.Unlock()
			resp = device.NewFingerprint(groups(devs, driver, backend)...)
			p.log.Info("fingerprinted GPUs", "count", len(devs))
		}
		select {
		case out <- resp:
		case <-ctx.Done():
			return
		}
	}
}

func inventoryKey(devs []gpuInfo) string {
	parts := make([]string, len(devs))
	for i, d := range devs {
		parts[i] = fmt.Sprintf("%s/%s/%d/%t", d.uuid, d.model, d.memBytes, d.healthy)
	}
	return strings.Join(parts, ";")
}

// Reserve checks the requested GPUs are known and healthy and exposes them to the task
// through NVIDIA_VISIBLE_DEVICES.
func (p *Plugin) Reserve(deviceIDs []string) (*device.ContainerReservation, error) {
	if len(deviceIDs) == 0 {
		return nil, errors.New("reserve: no device IDs given")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range deviceIDs {
		healthy, ok := p.known[id]
		if !ok {
			return nil, fmt.Errorf("reserve: unknown GPU %q", id)
		}
		if !healthy {
			return nil, fmt.Errorf("reserve: GPU %q is unhealthy", id)
		}
	}
	return &device.ContainerReservation{
		Envs: map[string]string{VisibleDevicesEnv: strings.Join(deviceIDs, ",")},
	}, nil
}

// DeviceStats is one GPU's sampled telemetry.
type DeviceStats struct {
	UUID, Model     string
	MemoryUsedBytes uint64
	MemoryTotal     uint64
	UtilizationPct  uint32
}

// Sample reads memory used and utilisation of every GPU.
func (p *Plugin) Sample() ([]DeviceStats, error) {
	p.mu.Lock()
	lib := p.lib
	p.mu.Unlock()
	if lib == nil {
		return nil, errors.New("trident-gpu is not configured")
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %s", nvml.ErrorString(ret))
	}
	out := make([]DeviceStats, 0, n)
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml device %d handle: %s", i, nvml.ErrorString(ret))
		}
		s := DeviceStats{}
		s.UUID, _ = d.GetUUID()
		s.Model, _ = d.GetName()
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			s.MemoryUsedBytes, s.MemoryTotal = mem.Used, mem.Total
		}
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			s.UtilizationPct = u.Gpu
		}
		out = append(out, s)
	}
	return out, nil
}

// Stats streams per-device memory and utilisation every interval.
func (p *Plugin) Stats(ctx context.Context, interval time.Duration) (<-chan *device.StatsResponse, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("stats interval must be positive, got %s", interval)
	}
	out := make(chan *device.StatsResponse)
	go func() {
		defer close(out)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				t.Reset(interval)
			}
			resp := p.statsResponse(time.Now())
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (p *Plugin) statsResponse(now time.Time) *device.StatsResponse {
	samples, err := p.Sample()
	if err != nil {
		return device.NewStatsError(err)
	}
	byModel := map[string]*device.DeviceGroupStats{}
	var order []string
	for _, s := range samples {
		g, ok := byModel[s.Model]
		if !ok {
			g = &device.DeviceGroupStats{Vendor: Vendor, Type: DeviceType, Name: s.Model, InstanceStats: map[string]*device.DeviceStats{}}
			byModel[s.Model] = g
			order = append(order, s.Model)
		}
		usedMiB := int64(s.MemoryUsedBytes >> 20)
		totalMiB := int64(s.MemoryTotal >> 20)
		util := float64(s.UtilizationPct)
		g.InstanceStats[s.UUID] = &device.DeviceStats{
			Summary: &structs.StatValue{IntNumeratorVal: &usedMiB, IntDenominatorVal: &totalMiB, Unit: structs.UnitMiB, Desc: "memory used"},
			Stats: &structs.StatObject{Attributes: map[string]*structs.StatValue{
				"memory_used":     {IntNumeratorVal: &usedMiB, IntDenominatorVal: &totalMiB, Unit: structs.UnitMiB, Desc: "device memory used"},
				"gpu_utilization": {FloatNumeratorVal: &util, Unit: "%", Desc: "GPU utilisation"},
			}},
			Timestamp: now,
		}
	}
	sort.Strings(order)
	resp := &device.StatsResponse{}
	for _, m := range order {
		resp.Groups = append(resp.Groups, byModel[m])
	}
	return resp
}
