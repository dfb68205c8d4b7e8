package localcluster

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// ParseJobFile has the Nomad server parse jobs/<file> of this module with the given HCL2
// variables and returns the canonicalized job.
func ParseJobFile(ctx context.Context, cl *api.Client, file string, vars map[string]string) (*api.Job, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(root, "jobs", file))
	if err != nil {
		return nil, fmt.Errorf("read job file: %w", err)
	}
	var vb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		fmt.Fprintf(&vb, "%s = %q\n", k, vars[k])
	}
	job, err := cl.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: string(b), Variables: vb.String(), Canonicalize: true})
	if err != nil {
		return nil, fmt.Errorf("parse jobs/%s: %w", file, err)
	}
	return job, nil
}
