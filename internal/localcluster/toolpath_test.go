package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestToolPathOrder: $TRIDENT_TOOLS_BIN wins over the default cache dir
// (${XDG_CACHE_HOME:-$HOME/.cache}/trident-tools), which is found when the variable is unset.
func TestToolPathOrder(t *testing.T) {
	const name = "trident-toolpath-test-tool" // not on any real $PATH
	tool := func(dir string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	xdg, explicit := t.TempDir(), t.TempDir()
	t.Setenv("XDG_CACHE_HOME", xdg)
	t.Setenv("TRIDENT_TOOLS_BIN", "")
	if _, err := ToolPath(name); err == nil || !strings.Contains(err.Error(), filepath.Join(xdg, "trident-tools")) || !strings.Contains(err.Error(), "make tools") {
		t.Errorf("no tool anywhere: err %v, want one naming the default cache dir and `make tools`", err)
	}
	cached := tool(filepath.Join(xdg, "trident-tools"))
	if p, err := ToolPath(name); err != nil || p != cached {
		t.Errorf("unset TRIDENT_TOOLS_BIN: ToolPath = %q, %v; want the default cache %q", p, err, cached)
	}
	want := tool(explicit)
	t.Setenv("TRIDENT_TOOLS_BIN", explicit)
	if p, err := ToolPath(name); err != nil || p != want {
		t.Errorf("TRIDENT_TOOLS_BIN set: ToolPath = %q, %v; want %q", p, err, want)
	}
	// Without XDG_CACHE_HOME the cache is under $HOME/.cache.
	home := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", home)
	if d, err := DefaultToolsDir(); err != nil || d != filepath.Join(home, ".cache", "trident-tools") {
		t.Errorf("DefaultToolsDir = %q, %v", d, err)
	}
}
