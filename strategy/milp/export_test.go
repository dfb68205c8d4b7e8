package milp

import (
	"context"
	"fmt"
	"math"
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

// GreedyFilled returns the greedy plan re-routed by the routing LP, and that plan topped
// up by fill, re-routed and pruned (nil when fill added nothing or the LP failed).
func GreedyFilled(p *Problem) (routed, filled *Solution, err error) {
	q, err := newPrep(p)
	if err != nil {
		return nil, nil, err
	}
	opts := Options{}.withDefaults()
	m := buildModel(q, opts)
	deadline := time.Now().Add(time.Minute)
	routed = q.greedy(context.Background())
	if r := m.routeLP(context.Background(), m.startVector(routed), opts, deadline); r != nil && r.Objective > routed.Objective {
		routed = r
	}
	return routed, m.fillRoute(context.Background(), routed, opts, deadline), nil
}

// MoveFrom returns the plan s improved by the move search (nil when no step paid),
// with up to limit of time; the bound is +Inf, so the search does not stop early.
func MoveFrom(p *Problem, s *Solution, limit time.Duration) (*Solution, error) {
	q, err := newPrep(p)
	if err != nil {
		return nil, err
	}
	opts := Options{}.withDefaults()
	m := buildModel(q, opts)
	return m.move(context.Background(), s, math.Inf(1), opts, time.Now().Add(limit)), nil
}

// LPRelaxation returns the optimum of the LP relaxation of p's model under opts.
func LPRelaxation(p *Problem, opts Options) (float64, error) {
	q, err := newPrep(p)
	if err != nil {
		return 0, err
	}
	opts = opts.withDefaults()
	m := buildModel(q, opts)
	relaxed := m.lp
	relaxed.integer = make([]bool, len(m.integer))
	res := runHiGHS(context.Background(), &relaxed, nil, opts, time.Now().Add(time.Minute))
	if res.err == nil && res.status != hsOptimal {
		res.err = fmt.Errorf("LP relaxation: status %v", res.status)
	}
	return res.objective, res.err
}

// LNSFrom returns the plan s improved by the node-neighbourhood search (nil when no
// sub-MIP paid), with up to limit of time; the bound is +Inf, so the search stops only
// by its own rule (lnsFails sub-MIPs in a row without gain) or the limit.
func LNSFrom(p *Problem, s *Solution, limit time.Duration) (*Solution, error) {
	q, err := newPrep(p)
	if err != nil {
		return nil, err
	}
	opts := Options{}.withDefaults()
	m := buildModel(q, opts)
	m.guideLP(context.Background(), opts, time.Now().Add(limit)) // the slot rows Solve keeps
	return m.lns(context.Background(), s, math.Inf(1), opts, time.Now().Add(limit), func(string, highsResult) {}), nil
}

// GrowFrom runs one grow round of the neighbourhood search (growRound, neighbourhoods of
// 8 nodes) from the plan s, with up to limit of time. It returns the round's plan (nil
// when none), the bottleneck operator (-1 when there is none) and the node cleared for
// it (-1 when none could be).
func GrowFrom(p *Problem, s *Solution, limit time.Duration) (r *Solution, b, target int, err error) {
	q, err := newPrep(p)
	if err != nil {
		return nil, -1, -1, err
	}
	opts := Options{}.withDefaults()
	m := buildModel(q, opts)
	if b = q.bottleneck(s); b < 0 {
		return nil, -1, -1, nil
	}
	r, target = m.growRound(context.Background(), s, b, 2*lnsMinNodes, make([]bool, q.M), opts, time.Now().Add(limit), func(string, highsResult) {})
	return r, b, target, nil
}

// AggregateBound returns the aggregate-relaxation bound on T of p (bound.go).
func AggregateBound(p *Problem) (float64, error) {
	q, err := newPrep(p)
	if err != nil {
		return 0, err
	}
	return q.Tub, nil
}
