package gpu

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// LoadUsage sets every device's usage from dir/<uuid> ("<used MiB> [<utilisation %>]", as
// the tasks holding the devices write it); a device without a file is idle. A malformed
// file is an error naming it, and leaves that device's usage as it was.
func (f *FakeNVML) LoadUsage(dir string) error {
	var errs []error
	for i, d := range f.devices {
		b, err := os.ReadFile(filepath.Join(dir, d.UUID))
		if errors.Is(err, fs.ErrNotExist) {
			if err := f.SetUsage(i, 0, 0); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		used, util, err := ParseUsage(string(b))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(dir, d.UUID), err))
			continue
		}
		usedBytes := min(uint64(used)<<20, f.devices[i].MemoryInfo.Total)
		if err := f.SetUsage(i, usedBytes, uint32(min(util, 100))); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ParseUsage parses a usage file: "<used MiB> [<utilisation %>]", non-negative numbers.
func ParseUsage(s string) (usedMiB, utilPct float64, err error) {
	fields := strings.Fields(s)
	if len(fields) < 1 || len(fields) > 2 {
		return 0, 0, fmt.Errorf("usage %q: want \"<used MiB> [<utilisation %%>]\"", strings.TrimSpace(s))
	}
	vals := make([]float64, 2)
	for i, f := range fields {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, 0, fmt.Errorf("usage %q: %q is not a non-negative number", strings.TrimSpace(s), f)
		}
		vals[i] = v
	}
	return vals[0], vals[1], nil
}
