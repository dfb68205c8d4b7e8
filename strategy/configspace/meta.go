package configspace

import (
	"fmt"

	"github.com/trident-sched/trident/apm/opcontract"
)

// FromMeta reads an operator's tunable space from its job-file group meta (key
// trident_params) and its current configuration (key trident_config; the space's defaults
// when absent). It returns a nil space and config when the operator declares no parameters.
func FromMeta(group string, meta map[string]string) (*Space, Config, error) {
	decl, ok := meta[opcontract.MetaParams]
	if !ok {
		return nil, nil, nil
	}
	s, err := Parse(decl)
	if err != nil {
		return nil, nil, fmt.Errorf("group %q meta %s: %w", group, opcontract.MetaParams, err)
	}
	cur, ok := meta[opcontract.MetaConfig]
	if !ok {
		return s, s.Default(), nil
	}
	c, err := s.ParseConfig(cur)
	if err != nil {
		return nil, nil, fmt.Errorf("group %q meta %s: %w", group, opcontract.MetaConfig, err)
	}
	return s, c, nil
}
