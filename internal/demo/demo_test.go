package demo

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDefaultsFindTools: nomad and nomad-autoscaler come from BinDir when there, else from
// the tools cache (localcluster.ToolPath), so the demo runs with the plugins in ./bin and the
// tools in the cache of `make tools`.
func TestDefaultsFindTools(t *testing.T) {
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin, tools := t.TempDir(), t.TempDir()
	for _, f := range []string{"autoscaler-plugins/trident", "autoscaler-plugins/trident-apm", "autoscaler-plugins/trident-target", "nomad-plugins/trident-gpu"} {
		write(filepath.Join(bin, f))
	}
	write(filepath.Join(tools, "nomad"))
	write(filepath.Join(tools, "nomad-autoscaler"))
	write(filepath.Join(bin, "nomad-autoscaler"))
	t.Setenv("TRIDENT_TOOLS_BIN", tools)
	o := Options{BinDir: bin, TridentBin: "/bin/true"}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(tools, "nomad"); o.nomadBin != want {
		t.Errorf("nomad = %q, want the cached %q", o.nomadBin, want)
	}
	if want := filepath.Join(bin, "nomad-autoscaler"); o.autoscalerBin != want {
		t.Errorf("nomad-autoscaler = %q, want the one in BinDir %q", o.autoscalerBin, want)
	}
}
