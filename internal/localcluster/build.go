package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildPackages builds the given main packages of this module (e.g. "./plugins/trident")
// into dir with `go build`, so tests always run the plugins of the current source.
func BuildPackages(ctx context.Context, dir string, pkgs ...string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for _, p := range pkgs {
		out := filepath.Join(dir, filepath.Base(p))
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, p)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", p, err, b)
		}
	}
	return nil
}
