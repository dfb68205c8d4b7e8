package milp

import (
	"context"
	"time"
)

// SolveRaw solves p's model (without starts) with HiGHS and returns HiGHS's objective and
// the decoded, checked plan: the decoding may give up only solver residues.
func SolveRaw(p *Problem, opts Options, limit time.Duration) (highsObj float64, s *Solution, err error) {
	q, err := newPrep(p)
	if err != nil {
		return 0, nil, err
	}
	opts = opts.withDefaults()
	m := buildModel(q, opts)
	res := runHiGHS(context.Background(), &m.lp, nil, opts, time.Now().Add(limit))
	if res.values == nil {
		return res.objective, nil, res.err
	}
	s = m.decode(res.values)
	return res.objective, s, Validate(p, s)
}
