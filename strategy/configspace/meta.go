package configspace

import (
	"fmt"

	"github.com/trident-sched/trident/internal/opmetrics"
)

// FromMeta reads an operator's tunable space from its job-file group meta (key
// trident_params) and its current configuration (key trident_config; the space's defaults
// when absent). It returns a nil space and config when the operator declares no parameters.
func FromMeta(group string, meta map[string]string) (*Space, Config, error) {
	decl, ok := meta[opmetrics.MetaParams]
	if !ok {
		return nil, nil, nil
	}
	s, err := Parse(decl)
	if err != nil {
		return nil, nil, fmt.Errorf("group %q meta %s: %w", group, opmetrics.MetaParams, err)
	}
	cur, ok := meta[opmetrics.MetaConfig]
	if !ok {
		return s, s.Default(), nil
	}
	c, err := s.ParseConfig(cur)
	if err != nil {
		return nil, nil, fmt.Errorf("group %q meta %s: %w", group, opmetrics.MetaConfig, err)
	}
	return s, c, nil
}
