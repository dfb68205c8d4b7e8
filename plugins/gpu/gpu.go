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
	"github.com/trident-sched/trident/apm/opcontract"
)

const (
	// PluginName is the name Nomad's `plugin "trident-gpu"` block refers to.
	PluginName = "trident-gpu"
	// Vendor and DeviceType make devices addressable as `device "nvidia/gpu"`.
	Vendor     = "nvidia"
	DeviceType = "gpu"
	// VisibleDevicesEnv is set on reservation to the reserved GPU UUIDs.
	VisibleDevicesEnv = opcontract.EnvVisibleDevices

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
		"fake_usage_dir": hclspec.NewDefault(hclspec.NewAttr("fake_usage_dir", "string", false),
			hclspec.NewLiteral(`""`)),
		"fake_vendor": hclspec.NewDefault(hclspec.NewAttr("fake_vendor", "string", false),
			hclspec.NewLiteral(`"nvidia"`)),
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
	// FakeUsageDir (fake mode, optional) is a directory where the tasks holding fake
	// devices report their device memory use: file <dir>/<uuid> holds "<used MiB>
	// [<utilisation %>]". The plugin exports it as the devices' stats (Nomad's alloc and
	// node stats), and tells each task the directory in TRIDENT_GPU_USAGE_DIR.
	FakeUsageDir string `codec:"fake_usage_dir"`
	// FakeVendor (fake mode) is the vendor the fake devices are fingerprinted under
	// (default Vendor), so that tests can stand up another vendor's GPUs (`amd/gpu`)
	// beside NVIDIA's; real mode always reports Vendor.
	FakeVendor string `codec:"fake_vendor"`
}

// vendor is the device vendor the plugin reports: Vendor, or FakeVendor in fake mode.
func (c Config) vendor() string {
	if c.Mode == "fake" && c.FakeVendor != "" {
		return c.FakeVendor
	}
	return Vendor
}

// UsageDirEnv is the environment variable that tells a task holding fake devices where to
// report their device memory use (Config.FakeUsageDir).
const UsageDirEnv = opcontract.EnvGPUUsageDir

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
		if strings.ContainsAny(c.FakeVendor, "/ ") {
			return fmt.Errorf("fake_vendor %q: a device vendor has no '/' or space", c.FakeVendor)
		}
	default:
		return fmt.Errorf("mode must be \"nvml\" or \"fake\", got %q", c.Mode)
	}
	d, err := time.ParseDuration(c.FingerprintPeriod)
	if err != nil {
		return fmt.Errorf("fingerprint_period %q: %w", c.FingerprintPeriod, err)
	}
	if d <= 0 {
		return fmt.Errorf("fingerprint_period %q must be positive", c.FingerprintPeriod)
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
	// byIndex is the identity of each device index in the last scan that read it, so a
	// device NVML can no longer open is reported unhealthy under its UUID instead of
	// vanishing (or failing the whole inventory).
	byIndex map[int]gpuInfo
}

var _ device.DevicePlugin = (*Plugin)(nil)

// New returns an unconfigured plugin; Nomad calls SetConfig before anything else.
func New(log hclog.Logger) *Plugin {
	return &Plugin{log: log.Named(PluginName), newNVML: defaultNVML, known: map[string]bool{}, byIndex: map[int]gpuInfo{}}
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
	if p.lib != nil {
		if ret := p.lib.Shutdown(); ret != nvml.SUCCESS {
			p.log.Warn("shut down the previous NVML handle", "error", nvml.ErrorString(ret))
		}
	}
	p.cfg, p.lib, p.period = cfg, lib, period
	p.byIndex = map[int]gpuInfo{}
	if cfg.Mode != "fake" && cfg.FakeGPUs > 0 {
		p.log.Warn("fake_gpus is ignored outside mode \"fake\"", "mode", cfg.Mode)
	}
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

// scan reads every device's identity and health from NVML. Only a library-wide failure
// (the device count) is an error: a device NVML cannot open or identify is reported
// unhealthy under the UUID it had (skipped if it never had one), so one lost GPU does not
// take the node's other GPUs out of Nomad's inventory.
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
	p.mu.Lock()
	prev := p.byIndex
	p.mu.Unlock()
	seen := map[int]gpuInfo{}
	out := make([]gpuInfo, 0, n)
	lost := func(i int, what string, ret nvml.Return) {
		old, ok := prev[i]
		if !ok {
			p.log.Warn("skipping a GPU NVML cannot identify", "index", i, "call", what, "error", nvml.ErrorString(ret))
			return
		}
		old.healthy, old.healthDesc = false, what+": "+nvml.ErrorString(ret)
		seen[i] = old
		out = append(out, old)
	}
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			lost(i, "device handle", ret)
			continue
		}
		info := gpuInfo{healthy: true}
		if info.uuid, ret = d.GetUUID(); ret != nvml.SUCCESS || info.uuid == "" {
			lost(i, "uuid", ret)
			continue
		}
		info.model = deviceName(d)
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			info.healthy, info.healthDesc = false, "memory info: "+nvml.ErrorString(ret)
			if old, ok := prev[i]; ok && old.uuid == info.uuid {
				info.memBytes = old.memBytes // keep the group's attributes stable
			}
		} else {
			info.memBytes = mem.Total
		}
		// A MIG-enabled GPU serves only through its MIG devices, which this plugin does not
		// expose: reserving it whole would hand tasks a device they cannot use.
		if mode, _, ret := d.GetMigMode(); ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE {
			info.healthy, info.healthDesc = false, "MIG mode is enabled; MIG devices are not supported"
		}
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			info.pciBus = pciBusID(pci)
		}
		seen[i] = info
		out = append(out, info)
	}
	p.mu.Lock()
	p.byIndex = seen
	p.mu.Unlock()
	return out, driver, nil
}

// deviceName is a device's model name as fingerprints and stats report it.
func deviceName(d nvml.Device) string {
	if name, ret := d.GetName(); ret == nvml.SUCCESS && name != "" {
		return name
	}
	return "unknown"
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
func groups(devs []gpuInfo, vendor, driver, backend string) []*device.DeviceGroup {
	byModel := map[string]*device.DeviceGroup{}
	var order []string
	for _, d := range devs {
		g, ok := byModel[d.model]
		if !ok {
			g = &device.DeviceGroup{
				Vendor: vendor, Type: DeviceType, Name: d.model,
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
		period, backend, vendor := p.period, p.cfg.Mode, p.cfg.vendor()
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
			last = "" // send the inventory again once NVML answers
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
			resp = device.NewFingerprint(groups(devs, vendor, driver, backend)...)
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
	envs := map[string]string{VisibleDevicesEnv: strings.Join(deviceIDs, ",")}
	if p.cfg.Mode == "fake" && p.cfg.FakeUsageDir != "" {
		envs[UsageDirEnv] = p.cfg.FakeUsageDir
	}
	return &device.ContainerReservation{Envs: envs}, nil
}

// DeviceStats is one GPU's sampled telemetry; a metric NVML could not read (or does not
// support on the device) is marked absent rather than reported as zero.
type DeviceStats struct {
	UUID, Model     string
	MemoryUsedBytes uint64
	MemoryTotal     uint64
	HaveMemory      bool
	UtilizationPct  uint32
	HaveUtilization bool
}

// Sample reads memory used and utilisation of every GPU.
func (p *Plugin) Sample() ([]DeviceStats, error) {
	p.mu.Lock()
	lib, usageDir := p.lib, p.cfg.FakeUsageDir
	p.mu.Unlock()
	if lib == nil {
		return nil, errors.New("trident-gpu is not configured")
	}
	if f, ok := lib.(*FakeNVML); ok && usageDir != "" {
		if err := f.LoadUsage(usageDir); err != nil {
			p.log.Warn("read the fake devices' usage", "dir", usageDir, "error", err)
		}
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %s", nvml.ErrorString(ret))
	}
	out := make([]DeviceStats, 0, n)
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // the fingerprint reports it unhealthy
		}
		s := DeviceStats{Model: deviceName(d)}
		if s.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS || s.UUID == "" {
			continue
		}
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			s.MemoryUsedBytes, s.MemoryTotal, s.HaveMemory = mem.Used, mem.Total, true
		}
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			s.UtilizationPct, s.HaveUtilization = u.Gpu, true
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
	p.mu.Lock()
	vendor := p.cfg.vendor()
	p.mu.Unlock()
	byModel := map[string]*device.DeviceGroupStats{}
	var order []string
	for _, s := range samples {
		g, ok := byModel[s.Model]
		if !ok {
			g = &device.DeviceGroupStats{Vendor: vendor, Type: DeviceType, Name: s.Model, InstanceStats: map[string]*device.DeviceStats{}}
			byModel[s.Model] = g
			order = append(order, s.Model)
		}
		ds := &device.DeviceStats{Stats: &structs.StatObject{Attributes: map[string]*structs.StatValue{}}, Timestamp: now}
		if s.HaveMemory {
			usedMiB := int64(s.MemoryUsedBytes >> 20)
			totalMiB := int64(s.MemoryTotal >> 20)
			ds.Summary = &structs.StatValue{IntNumeratorVal: &usedMiB, IntDenominatorVal: &totalMiB, Unit: structs.UnitMiB, Desc: "memory used"}
			ds.Stats.Attributes["memory_used"] = &structs.StatValue{IntNumeratorVal: &usedMiB, IntDenominatorVal: &totalMiB, Unit: structs.UnitMiB, Desc: "device memory used"}
		}
		if s.HaveUtilization {
			util := float64(s.UtilizationPct)
			ds.Stats.Attributes["gpu_utilization"] = &structs.StatValue{FloatNumeratorVal: &util, Unit: "%", Desc: "GPU utilisation"}
		}
		g.InstanceStats[s.UUID] = ds
	}
	sort.Strings(order)
	resp := &device.StatsResponse{}
	for _, m := range order {
		resp.Groups = append(resp.Groups, byModel[m])
	}
	return resp
}
