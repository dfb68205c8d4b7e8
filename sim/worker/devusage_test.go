package worker

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDeviceUsage: an instance on fake devices writes its device memory, split over its
// devices, at most once per period, and removes the files when it stops; without a
// directory or devices it reports nothing.
func TestDeviceUsage(t *testing.T) {
	if newDeviceUsage("", "GPU-1") != nil || newDeviceUsage(t.TempDir(), "") != nil || newDeviceUsage(t.TempDir(), "all") != nil {
		t.Fatal("a reporter without a directory or devices")
	}
	dir := t.TempDir()
	u := newDeviceUsage(dir, "GPU-a, GPU-b")
	read := func(dev string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, dev))
		if err != nil {
			return "missing"
		}
		return string(b)
	}
	t0 := time.Unix(1000, 0)
	if err := u.report(30000, t0); err != nil {
		t.Fatal(err)
	}
	if read("GPU-a") != "15000\n" || read("GPU-b") != "15000\n" {
		t.Fatalf("usage %q / %q, want 15000 MiB each", read("GPU-a"), read("GPU-b"))
	}
	if err := u.report(40000, t0.Add(500*time.Millisecond)); err != nil || read("GPU-a") != "15000\n" {
		t.Fatalf("a report within the period was written: %q (%v)", read("GPU-a"), err)
	}
	if err := u.report(40000, t0.Add(time.Second)); err != nil || read("GPU-a") != "20000\n" {
		t.Fatalf("a report after the period: %q (%v), want 20000", read("GPU-a"), err)
	}
	u.close()
	if read("GPU-a") != "missing" || read("GPU-b") != "missing" {
		t.Fatal("usage files left after close")
	}
}
