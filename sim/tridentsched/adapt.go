package tridentsched

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/sim/baseline"
	"github.com/trident-sched/trident/strategy/bo"
	"github.com/trident-sched/trident/strategy/cluster"
	"github.com/trident-sched/trident/strategy/configspace"
)

// adapt runs the adaptation layer for one control-loop invocation: it finishes measured BO
// trials, suggests the next ones, turns finished tuning sessions into recommendations and
// hands the dominant cluster's configuration to the scheduling layer. It returns the probe
// configurations per operator (by probe slot) and whether a new candidate appeared.
func (t *Trident) adapt(ctx context.Context, s *sim.Snapshot) ([][]sim.OpConfig, bool, error) {
	probes := make([][]sim.OpConfig, len(t.ops))
	newCand := false
	for i, o := range t.ops {
		if o.cl == nil || o.space == nil {
			continue
		}
		st := &s.Ops[i]
		// OOM guard: production instances failing repeatedly on the configuration they run
		// (typically one tuned for a previous workload) fall back to the default at once,
		// and the dominant cluster is tuned again.
		recent := o.prodOOMs[:0]
		for _, at := range o.prodOOMs {
			if at > s.Time-120 {
				recent = append(recent, at)
			}
		}
		o.prodOOMs = recent
		if len(recent) >= t.opt.OOMGuard && !o.current.Equal(o.spec.Space.Default()) || (len(recent) >= t.opt.OOMGuard && o.candidate != nil) {
			o.current = o.spec.Space.Default()
			o.candidate, o.committed = nil, false
			o.revert = true
			o.prodOOMs = o.prodOOMs[:0]
			if d := o.cl.Resolve(o.dominant); d >= 0 {
				delete(o.cands, d)
				_ = o.cl.SetStatus(d, cluster.Untuned)
			}
			t.invalidate(i, 0)
			t.Reverts++
		}
		// Transition finished: every non-probe instance runs the candidate.
		if o.committed && o.candidate != nil && st.OffTarget() <= 0 {
			o.current = o.candidate.cfg
			o.candidate, o.committed = nil, false
		}
		if tu := o.tune; tu != nil {
			// Trials run on probe instances; an operator keeps at least two production
			// instances, so one with fewer than three instances keeps serving and its
			// trials wait (a probe that is the only instance would stall the operator on
			// untried configurations).
			slots := max(min(t.opt.ParallelTrials, st.Running+st.Starting+st.Restarting-2), 0)
			if err := t.advance(ctx, o, tu, slots, s.Time); err != nil {
				return nil, false, err
			}
			if o.tune != nil {
				for k := range slots {
					var c sim.OpConfig
					if tr := tu.trials[k]; tr != nil {
						c = tr.simCfg
					}
					probes[i] = append(probes[i], c)
				}
			}
		}
		d := o.cl.Resolve(o.dominant)
		if o.dominant < 0 || d < 0 {
			continue
		}
		if c, ok := o.cands[d]; ok {
			if t.propose(ctx, o, c) {
				newCand = true
			}
			continue
		}
		if o.tune == nil && !o.resumeParked(d) {
			method := bo.Constrained
			if t.opt.Unconstrained {
				method = bo.Unconstrained
			}
			// The running configuration is the session's first trial, measured on a probe
			// like every other: a probe runs at its admission limit while production
			// instances run at their share of the queue, so the observation layer's
			// estimate of the running configuration (table_ocr on annual reports: 3.5
			// records/s against 4.4 on a probe) would make any probed configuration look
			// better than what runs.
			// While a committed transition replaces the running configuration, its target is
			// the one to compare with. (A parked session that resumes after the running
			// configuration changed has not measured the new one: holds assesses it by the
			// session's surrogate.)
			run := o.current
			if o.committed && o.candidate != nil {
				run = o.candidate.cfg
			}
			initial := append([]configspace.Config{toCS(o.spec.Space, run)}, t.warmStart(o)...)
			opt, err := bo.New(o.space, bo.Options{
				Method: method, MemLimit: t.env.Cluster.Nodes[0].AccMemGB, Margin: t.opt.MarginGB,
				Delta: t.opt.Delta, Logger: t.opt.Logger, Initial: initial,
			}, rand.New(rand.NewPCG(t.rng.Uint64(), uint64(i))))
			if err != nil {
				return nil, false, fmt.Errorf("trident: %s: %w", o.spec.Name, err)
			}
			o.tune = &tuning{cluster: d, opt: opt}
			_ = o.cl.SetStatus(d, cluster.Tuning)
		}
	}
	return probes, newCand, nil
}

// advance finishes the measured trials of session tu of operator o, recommends once the
// budget is spent and every trial is in, and otherwise fills the first slots probe slots
// with trials: waiting trials of higher slots move down, then new suggestions fill the
// rest (the trials in flight are the pending points of the batch BO).
func (t *Trident) advance(ctx context.Context, o *opState, tu *tuning, slots int, now float64) error {
	for k, tr := range tu.trials {
		if tr == nil || !(tr.oom || tr.measured >= t.opt.EvalS) {
			continue
		}
		thr, peak := 0.0, tr.peak
		if !tr.oom && tr.measured > 0 {
			thr = tr.done / tr.measured
		}
		if tr.oom {
			peak = t.env.Cluster.Nodes[0].AccMemGB
		}
		t.opt.Logger.Debug("trial", "t", now, "op", o.spec.Name, "cl", tu.cluster, "slot", k, "cfg", fmt.Sprint(tr.simCfg), "thr", thr, "peak", peak, "oom", tr.oom)
		if err := tu.opt.Observe(tr.cfg, thr, peak, tr.oom); err != nil {
			return fmt.Errorf("trident: %s: BO observe: %w", o.spec.Name, err)
		}
		tu.evals++
		tu.trials[k] = nil
	}
	pending := tu.pending()
	if tu.evals >= t.opt.Budget && len(pending) == 0 {
		rec, err := tu.opt.Recommend(ctx)
		o.tune = nil
		if err != nil {
			_ = o.cl.SetStatus(tu.cluster, cluster.Untuned)
			return nil
		}
		o.cands[tu.cluster] = candidate{cfg: fromConfig(o.spec.Space, rec.Config), rate: rec.Predicted, cs: rec.Config,
			seen: assessed(ctx, o.spec.Space, tu.opt), session: tu.opt}
		_ = o.cl.SetBest(tu.cluster, rec.Config, rec.Measured)
		_ = o.cl.SetStatus(tu.cluster, cluster.Tuned)
		return nil
	}
	for len(tu.trials) < t.opt.ParallelTrials {
		tu.trials = append(tu.trials, nil)
	}
	for k := range slots {
		if tu.trials[k] != nil {
			continue
		}
		for h := len(tu.trials) - 1; h >= slots; h-- {
			if tr := tu.trials[h]; tr != nil {
				tr.reset()
				tu.trials[k], tu.trials[h] = tr, nil
				break
			}
		}
	}
	for k := range slots {
		if tu.trials[k] != nil || tu.evals+len(pending) >= t.opt.Budget {
			continue
		}
		cfg, err := tu.opt.SuggestPending(ctx, pending)
		if err != nil {
			return fmt.Errorf("trident: %s: BO suggest: %w", o.spec.Name, err)
		}
		tu.trials[k] = &trial{cfg: cfg, simCfg: fromConfig(o.spec.Space, cfg)}
		pending = append(pending, cfg)
	}
	return nil
}

// warmStart returns the configurations a new tuning session evaluates first: the
// recommendations of the operator's most recently tuned workload clusters (newest first,
// at most WarmStart of them). A regime shift usually moves the optimum only part of the
// way, so the previous optimum is a strong first point; the quasi-random design and the
// acquisition function then explore from there.
func (t *Trident) warmStart(o *opState) []configspace.Config {
	if t.opt.WarmStart < 0 {
		return nil
	}
	ids := make([]int, 0, len(o.cands))
	for id := range o.cands {
		ids = append(ids, id)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(ids)))
	var out []configspace.Config
	for _, id := range ids {
		if len(out) == t.opt.WarmStart {
			break
		}
		if c := o.cands[id]; c.cs != nil {
			out = append(out, c.cs)
		}
	}
	return out
}

// propose hands c to the scheduling layer unless it is already the running or pending
// configuration; a running transition keeps the new recommendation waiting (single
// pending transition per operator).
func (t *Trident) propose(ctx context.Context, o *opState, c candidate) bool {
	if o.committed {
		return false
	}
	if o.candidate == nil && c.cfg.Equal(o.current) {
		return false
	}
	if o.candidate != nil && o.candidate.cfg.Equal(c.cfg) {
		return false
	}
	if c.cfg.Equal(o.current) || t.holds(ctx, o, c) {
		o.candidate = nil
		return false
	}
	cc := c
	o.candidate = &cc
	return true
}

// holds reports that the session recommending c assessed the running configuration too
// close to c to repay a switch: a rolling restart of every instance costs each of them
// switchCostS of the MILP's window, so a gain below that fraction of the window
// (43 / 900 s, 4.8 %) is lost within it. Clusters of one workload regime
// otherwise traded two near-equal configurations back and forth (table_ocr on annual
// reports: 4.40 and 4.52 records/s, a rolling restart of 50 instances at each shift).
// A running configuration the session did not evaluate (put in place by another
// cluster's recommendation since) is assessed by the session's surrogate mean; without
// either there is no comparison and c is proposed.
func (t *Trident) holds(ctx context.Context, o *opState, c candidate) bool {
	v, ok := c.seen[configKey(o.current)]
	if !ok && c.session != nil {
		if p, err := c.session.Predict(ctx, toCS(o.spec.Space, o.current)); err == nil && p.HaveThroughput {
			v, ok = p.Throughput, true
		}
	}
	return ok && c.rate < v*(1+t.switchCostS()/t.opt.WindowS)
}

// assessed returns, by configKey, the throughput session opt assigns each configuration it
// evaluated, in the terms of its recommendation's rate: the throughput surrogate's mean
// where the session has one (a recommendation's Predicted is that mean, so one noisy trial
// of the running configuration does not decide), else the best measurement (the methods
// without a surrogate recommend by measurement). A configuration that only failed with OOM
// gets 0.
func assessed(ctx context.Context, sp sim.Space, opt *bo.Optimizer) map[string]float64 {
	out := map[string]float64{}
	for _, ob := range opt.Observations() {
		k := configKey(fromConfig(sp, ob.Config))
		v := ob.Throughput
		if !ob.OOM {
			if p, err := opt.Predict(ctx, ob.Config); err == nil && p.HaveThroughput {
				v = p.Throughput
			}
		}
		if old, ok := out[k]; !ok || v > old {
			out[k] = v
		}
	}
	return out
}

// configKey identifies a simulator configuration.
func configKey(c sim.OpConfig) string { return fmt.Sprint([]float64(c)) }

// toSpace converts a simulator configuration space to a configspace.Space.
func toSpace(s sim.Space) (*configspace.Space, error) { return baseline.SpaceOf(s) }

// toCS converts a simulator configuration to a configspace.Config.
func toCS(s sim.Space, c sim.OpConfig) configspace.Config { return baseline.CSOf(s, c) }

// fromConfig converts a configspace.Config to the simulator's value order.
func fromConfig(s sim.Space, c configspace.Config) sim.OpConfig { return baseline.ConfigOf(s, c) }
