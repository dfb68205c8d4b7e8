package milp

import (
	"context"
	"log/slog"
	"math"
	"time"
)

// Shares of the remaining time the phases of a search may use at most.
const (
	lpShare     = 0.25 // LP relaxation
	routeShare  = 0.10 // each routing LP
	rensShare   = 0.40 // RENS
	moveShare   = 0.50 // the move search
	lnsShare    = 0.70 // the node-neighbourhood search
	polishShare = 0.20 // HiGHS from a move plan just inside the gap
)

// search is one Solve: the best checked plan so far, the best proven bound on the
// objective, and the clock the phases share.
type search struct {
	ctx             context.Context
	q               *prep
	m               *model
	opts            Options
	log             *slog.Logger
	start, deadline time.Time
	best            *Solution // best plan that passed Validate
	bound           float64   // best proven upper bound on the objective
}

// run executes the phases until the best plan is proven within the gap or time runs out.
func (s *search) run() {
	q, opts := s.q, s.opts
	s.consider(q.greedy(s.ctx), "greedy")
	if !opts.NoBound {
		s.bound = q.Tub
	}
	if s.done() {
		return
	}
	s.m = buildModel(q, opts)
	if !opts.NoWarmStart {
		s.starts()
		if s.done() {
			return
		}
		s.consider(s.m.move(s.ctx, s.best, s.bound, opts, s.share(moveShare)), "move")
		if !s.done() && q.M >= lnsMinCluster {
			s.consider(s.m.lns(s.ctx, s.best, s.bound, opts, s.share(lnsShare), s.logPhase), "lns")
		}
		if s.done() {
			// a move plan just inside the gap: HiGHS from it, for a tighter gap and a
			// short share, gets what a peer that overshoots the gap would (het/16/s9: the
			// moves stall 0.7 % below the optimum HiGHS proves in 0.1 s)
			if (s.best.Source == "move" || s.best.Source == "lns") && s.ctx.Err() == nil && time.Now().Before(s.deadline) &&
				!provenWithin(relGap(s.bound, s.best.Objective), opts.RelGap*moveGap) {
				polish := opts
				polish.RelGap *= moveGap
				s.mip(polish, s.share(polishShare))
			}
			return
		}
	}
	s.mip(opts, s.deadline)
}

// starts runs the LP relaxation (a bound and a guide), re-routes the greedy placement, and
// tries LP rounding and RENS.
func (s *search) starts() {
	m := s.m
	g := s.best
	s.consider(m.routeLP(s.ctx, m.startVector(g), s.opts, s.share(routeShare)), "greedy")
	if s.done() {
		return
	}
	s.consider(m.fillRoute(s.ctx, s.best, s.opts, s.share(routeShare)), "greedy")
	if s.done() {
		return
	}
	relaxed, lp := m.guideLP(s.ctx, s.opts, s.share(lpShare))
	s.logPhase("lp", lp)
	s.log.Debug("milp: slot rows", "cutting", m.numRows()-m.slotFrom)
	// a simplex LP cut short by its share (64 nodes on a loaded machine) leaves no point;
	// the interior-point LP below, often faster, still guides RENS
	var guide []float64
	if lp.values != nil && lp.err == nil {
		guide = lp.values
		if lp.status == hsOptimal && !lp.interrupted {
			s.tighten(lp.objective, "lp")
		}
		if s.done() {
			return
		}
		if r := m.lpRound(s.ctx, lp.values, s.opts, s.share(routeShare)); r != nil {
			s.consider(r, "greedy")
			if !s.done() {
				s.consider(m.fillRoute(s.ctx, r, s.opts, s.share(routeShare)), "greedy")
			}
		}
		s.log.Debug("milp: lpround done", "elapsed", time.Since(s.start))
	}
	if s.done() {
		return
	}
	// RENS around an interior optimal point of the LP: a vertex has most instances at 0,
	// and RENS would pin them there; the interior point of the optimal face is as
	// fractional as the optimal LP solutions allow, which widens the neighbourhood where
	// placement matters (network-bound clusters)
	if ipm := runHiGHSWith(s.ctx, &relaxed, nil, s.opts, s.share(lpShare), true); ipm.values != nil && ipm.err == nil {
		s.logPhase("interior lp", ipm)
		guide = ipm.values
	}
	if guide == nil || s.done() {
		return
	}
	ropts := s.opts
	ropts.enough = s.enough(ropts.RelGap)
	ropts.cutoff = s.best.Objective
	if r := m.rens(s.ctx, guide, m.startVector(s.best), ropts, s.share(rensShare), s.logPhase); r != nil {
		s.consider(r, "rens")
		if !s.done() {
			s.consider(m.fillRoute(s.ctx, r, s.opts, s.share(routeShare)), "rens")
		}
	}
}

// guideLP solves the LP relaxation without the slot rows, whose points guide LP rounding
// and RENS better (with them, het/128/s10's rounding reached 181 instead of 276 and RENS
// 237 instead of 330), and keeps in the model (for HiGHS and the sub-MIPs) only the slot
// rows its optimum violates (none when it has no point). It returns the relaxation it
// solved, for the interior-point LP, and the result.
func (m *model) guideLP(ctx context.Context, opts Options, deadline time.Time) (lp, highsResult) {
	relaxed := m.rowPrefix(m.slotFrom)
	relaxed.integer = make([]bool, len(m.integer))
	res := runHiGHS(ctx, &relaxed, nil, opts, deadline)
	v := res.values
	if res.err != nil {
		v = nil
	}
	m.keepCutSlotRows(v)
	return relaxed, res
}

// mip runs HiGHS on the full model from the best plan, with opts, until deadline.
func (s *search) mip(opts Options, deadline time.Time) {
	var start []float64
	if !opts.NoWarmStart {
		start = s.m.startVector(s.best)
	}
	opts.enough = s.enough(opts.RelGap)
	res := runHiGHS(s.ctx, &s.m.lp, start, opts, deadline)
	s.logPhase("mip", res)
	if res.err != nil {
		s.log.Warn("milp: highs failed", "err", res.err)
		return
	}
	if res.status != hsInfeasible {
		s.tighten(res.dualBound, "mip")
	}
	if res.values != nil {
		s.consider(s.m.decode(res.values), "highs")
	}
}

// consider keeps c when it passes the checker and beats the best plan.
func (s *search) consider(c *Solution, source string) {
	if c == nil {
		return
	}
	if err := Validate(s.q.p, c); err != nil {
		s.log.Warn("milp: plan rejected by the checker", "source", source, "err", err)
		return
	}
	if s.best != nil && c.Objective <= s.best.Objective+1e-12*math.Abs(s.best.Objective) {
		return
	}
	if s.best != nil {
		s.log.Debug("milp: better plan", "source", source, "from", s.best.Objective, "to", c.Objective, "elapsed", time.Since(s.start))
	}
	c.Source = source
	s.best = c
}

// tighten lowers the bound to b (a solver's proven upper bound on the objective) when it
// is lower. A bound below the best checked plan by more than the solver's tolerances
// (relative 1e-6) is inconsistent and ignored; one below it by less is raised to it.
func (s *search) tighten(b float64, source string) {
	if math.IsNaN(b) || b >= s.bound {
		return
	}
	if obj := s.best.Objective; b < obj {
		if b < obj-1e-6*math.Max(math.Abs(obj), 1) {
			s.log.Warn("milp: solver bound below a checked plan, ignored", "source", source, "bound", b, "plan", obj)
			return
		}
		b = obj
	}
	s.log.Debug("milp: tighter bound", "source", source, "from", s.bound, "to", b)
	s.bound = b
}

// done reports whether the search should stop: the best plan is proven within the gap
// (unless Options.AlwaysMIP), or time or ctx ran out.
func (s *search) done() bool {
	if s.ctx.Err() != nil || !time.Now().Before(s.deadline) {
		return true
	}
	if s.opts.AlwaysMIP {
		return false
	}
	if !s.opts.NoBound && s.q.Tub == 0 { // T = 0 is the only throughput: nothing to gain
		return true
	}
	return provenWithin(relGap(s.bound, s.best.Objective), s.opts.RelGap)
}

// enough is the objective at which a plan is proven within relGap by the best bound, the
// level at which a HiGHS run of the full model or a restriction of it may stop (0 when
// there is no finite positive bound).
func (s *search) enough(relGap float64) float64 {
	if math.IsInf(s.bound, 0) || !(s.bound > 0) {
		return 0
	}
	return s.bound * (1 - relGap)
}

// share returns the deadline of a phase that may use the fraction f of the remaining time.
func (s *search) share(f float64) time.Time {
	return time.Now().Add(time.Duration(f * float64(time.Until(s.deadline))))
}

func (s *search) logPhase(phase string, r highsResult) {
	s.log.Debug("milp: phase", "phase", phase, "status", r.status, "interrupted", r.interrupted,
		"objective", r.objective, "bound", r.dualBound, "err", r.err, "elapsed", time.Since(s.start))
}

// routeLP solves the model with every integer column fixed at start (an LP: routing,
// egress and throughput of a fixed placement) by the deadline.
func (m *model) routeLP(ctx context.Context, start []float64, opts Options, deadline time.Time) *Solution {
	fixed := m.lp
	fixed.colLo = append([]float64(nil), m.colLo...)
	fixed.colUp = append([]float64(nil), m.colUp...)
	for j, isInt := range m.integer {
		if isInt {
			fixed.colLo[j], fixed.colUp[j] = start[j], start[j]
		}
	}
	res := runHiGHS(ctx, &fixed, nil, opts, deadline)
	if res.err != nil || res.values == nil {
		return nil
	}
	return m.decode(res.values)
}

// lpRound floors the LP relaxation's placement lpv (which keeps every pool feasible), tops
// it up for a few target throughputs just below the LP's with the greedy placer, routes
// each candidate with routeLP and returns the best, all by the deadline.
func (m *model) lpRound(ctx context.Context, lpv []float64, opts Options, deadline time.Time) *Solution {
	q := m.q
	base := q.zeros()
	for i := range q.N {
		for n := range q.M {
			base[i][n] = int(math.Floor(lpv[m.x[i][n]] + 1e-6))
		}
	}
	T := lpv[m.T]
	var best *Solution
	for _, f := range []float64{1, 0.995, 0.99, 0.98, 0.96, 0.92} {
		if ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		x, d, ok := q.placeFrom(T*f, base)
		if !ok {
			continue
		}
		s := q.assemble(x, d, nil, math.Inf(1))
		if r := m.routeLP(ctx, m.startVector(s), opts, deadline); r != nil && r.Objective > s.Objective && Validate(q.p, r) == nil {
			s = r
		}
		if best == nil || s.Objective > best.Objective {
			best = s
		}
	}
	return best
}

// rens is HiGHS on the model with the instances x_in and transitions d_in restricted to
// the floor or ceiling of their values lpv in the LP relaxation (relaxation enforced
// neighbourhood search): a much smaller MIP whose plans are plans of the full model. The
// derived integers (parallelism P_i, device-class splits y_ink) stay free: fixing an
// integral LP value of P_i would force fractional instances on full nodes to round up,
// which presolve then proves infeasible. The sub-MIP's dual bound is not a bound of the
// full model and is discarded. start is passed when it lies in the neighbourhood.
func (m *model) rens(ctx context.Context, lpv, start []float64, opts Options, deadline time.Time, logPhase func(string, highsResult)) *Solution {
	sub := m.lp
	sub.colLo = append([]float64(nil), m.colLo...)
	sub.colUp = append([]float64(nil), m.colUp...)
	inside := start != nil
	restrict := func(j int) {
		if j < 0 {
			return
		}
		lo := math.Max(sub.colLo[j], math.Floor(lpv[j]+1e-6))
		up := math.Min(sub.colUp[j], math.Ceil(lpv[j]-1e-6))
		lo = math.Min(lo, up)
		sub.colLo[j], sub.colUp[j] = lo, up
		if inside && (start[j] < lo-1e-9 || start[j] > up+1e-9) {
			inside = false
		}
	}
	for i := range m.q.N {
		for n := range m.q.M {
			restrict(m.x[i][n])
			restrict(m.d[i][n])
		}
	}
	if !inside {
		start = nil
	}
	res := runHiGHS(ctx, &sub, start, opts, deadline)
	logPhase("rens", res)
	if res.err != nil || res.values == nil {
		return nil
	}
	return m.decode(res.values)
}
