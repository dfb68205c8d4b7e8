package gpu

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// FakeNVML is an NVML backend for hosts without GPUs, built from go-nvml's mock package:
// n devices of one model with fixed memory, whose used memory and utilisation can be set
// (by tests, or by the simulated operators through SetUsage).
type FakeNVML struct {
	*dgxa100.Server
	devices []*dgxa100.Device

	mu    sync.Mutex
	used  []uint64
	util  []uint32
	model string
}

// NewFakeNVML returns a fake NVML library with n GPUs of memBytes each.
func NewFakeNVML(n int, memBytes uint64, model string) *FakeNVML {
	f := &FakeNVML{Server: dgxa100.New(), model: model, used: make([]uint64, n), util: make([]uint32, n)}
	for i := 0; i < n; i++ {
		d := dgxa100.NewDevice(i)
		// Deterministic IDs so a restarted client re-fingerprints the same devices.
		d.UUID = fmt.Sprintf("GPU-fake0000-0000-0000-0000-%012d", i)
		d.Name = model
		d.MemoryInfo = nvml.Memory{Total: memBytes, Free: memBytes}
		i := i
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			u := f.used[i]
			return nvml.Memory{Total: memBytes, Used: u, Free: memBytes - u}, nvml.SUCCESS
		}
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			f.mu.Lock()
			defer f.mu.Unlock()
			return nvml.Utilization{Gpu: f.util[i]}, nvml.SUCCESS
		}
		f.devices = append(f.devices, d)
	}
	f.DeviceGetCountFunc = func() (int, nvml.Return) { return len(f.devices), nvml.SUCCESS }
	// Fake devices say so in their driver_version attribute (besides backend = "fake"), so
	// a job constraint or an operator reading the node cannot take them for real GPUs.
	f.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "fake", nvml.SUCCESS }
	f.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(f.devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return f.devices[i], nvml.SUCCESS
	}
	f.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for _, d := range f.devices {
			if d.UUID == uuid {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	return f
}

// SetUsage sets device i's used memory and utilisation percentage.
func (f *FakeNVML) SetUsage(i int, usedBytes uint64, utilPct uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i < 0 || i >= len(f.used) {
		return fmt.Errorf("fake GPU index %d out of range [0,%d)", i, len(f.used))
	}
	f.used[i], f.util[i] = usedBytes, utilPct
	return nil
}
