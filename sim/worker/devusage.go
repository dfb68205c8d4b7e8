package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// deviceUsage reports an instance's device memory to the trident-gpu plugin in fake mode:
// file <dir>/<uuid> per device the instance holds ("<used MiB>"), which the plugin exports
// as the device's stats, so that Nomad's alloc and node stats show the memory the
// simulated engine uses, as NVML would on a real GPU. Writes are throttled to one per
// period; the files are removed when the instance stops.
type deviceUsage struct {
	dir     string
	devices []string
	period  time.Duration

	mu   sync.Mutex
	last time.Time
	err  error // the first write error, reported once
}

// newDeviceUsage returns a reporter for the devices in visible (NVIDIA_VISIBLE_DEVICES,
// comma-separated) under dir; nil when either is empty (not on fake devices).
func newDeviceUsage(dir, visible string) *deviceUsage {
	var devs []string
	for _, d := range strings.Split(visible, ",") {
		if d = strings.TrimSpace(d); d != "" && d != "all" && d != "none" && d != "void" {
			devs = append(devs, d)
		}
	}
	if dir == "" || len(devs) == 0 {
		return nil
	}
	return &deviceUsage{dir: dir, devices: devs, period: time.Second}
}

// report writes mib (the instance's current device memory, split evenly over its devices)
// unless the last write is younger than the period; it returns the first write error.
func (u *deviceUsage) report(mib float64, now time.Time) error {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if now.Sub(u.last) < u.period {
		return nil
	}
	u.last = now
	per := mib / float64(len(u.devices))
	for _, d := range u.devices {
		if err := writeAtomic(filepath.Join(u.dir, d), fmt.Sprintf("%.0f\n", per)); err != nil && u.err == nil {
			u.err = err
			return fmt.Errorf("report device memory to %s: %w", u.dir, err)
		}
	}
	return nil
}

// close removes the instance's usage files: its devices are idle once it stops.
func (u *deviceUsage) close() {
	if u == nil {
		return
	}
	for _, d := range u.devices {
		_ = os.Remove(filepath.Join(u.dir, d))
	}
}

// writeAtomic replaces path with content through a temporary file and a rename, so that
// the plugin never reads a half-written file.
func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
