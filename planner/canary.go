package planner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/milp"
)

// DefaultCanaryProbe is the part of a canary's probe window beyond the candidate's cold
// start and the observation layer's warm-up (LoopConfig.CanaryProbe): six of the
// observation feed's 5 s periods, the accepted samples of a first estimate of the new
// config epoch.
const DefaultCanaryProbe = 30 * time.Second

// canaryWindow is how long the canary of candidate cand is measured before its verdict:
// its cold start, the observation layer's warm-up (observe.DefaultWarmUp: samples of an
// instance's first minutes are rejected) and LoopConfig.CanaryProbe.
func (l *Loop) canaryWindow(cand fsm.Candidate) time.Duration {
	return time.Duration(cand.ColdStartSec*float64(time.Second)) + l.cfg.CanaryWarmUp + l.cfg.CanaryProbe
}

// CanaryGain decides a canary: promote when the candidate's measured capacity, discounted
// by its cold start over the scheduling window (the cost of restarting instances onto
// it, as the scheduler weighs a transition), beats the running config's. It returns the
// verdict and why.
func CanaryGain(candidate, current, coldStartSec float64) (bool, string) {
	w := milp.DefaultWindowSec
	eff := candidate * max(0, 1-coldStartSec/w)
	why := fmt.Sprintf("canary measured %.3g records/s per instance, %.3g after its %.0f s cold start over the %.0f s window, against %.3g on the running config",
		candidate, eff, coldStartSec, w, current)
	return eff > current, why
}

// judgeCanaries records and decides the canaries a Step reported for decision dec of
// job. A canary is recorded when first seen healthy (its probe window starts); once the
// window has passed and the candidate has an observation committed after that record,
// the leader records its verdict (CanaryGain) and promotes or fails the deployment. A
// promotion seen before any verdict is a user's and is recorded as such. A verdict
// recorded by a leader that died before acting on it is acted on again.
func (l *Loop) judgeCanaries(ctx context.Context, job string, dec fsm.Decision, cs []CanaryStatus) {
	ca, ok := l.cfg.Actuator.(CanaryActuator)
	if !ok {
		return
	}
	now := l.now()
	for _, c := range cs {
		var rec fsm.Canary
		var have bool
		var cand fsm.Candidate
		var cur fsm.Observation
		l.s.fsm.Read(func(st *fsm.State) {
			rec, have = st.Canaries[job][c.Operator]
			have = have && rec.Decision == dec.Index
			cand = st.Candidates[job][c.Operator]
			cur = st.Observations[job][c.Operator]
		})
		record := func(k fsm.Canary) bool {
			k.Decision, k.Config, k.Node, k.Deployment = dec.Index, c.Config, c.Node, c.Deployment
			return l.recordCanary(ctx, job, c.Operator, k)
		}
		switch {
		case c.Promoted && (!have || rec.Verdict == ""):
			if record(userPromoted(rec, now)) {
				l.log.Info("canary promoted by a user", "job", job, "operator", c.Operator, "deployment", c.Deployment)
			}
		case c.Promoted:
			// Promoted and recorded: Nomad finishes the deployment.
		case !have && c.Healthy:
			record(fsm.Canary{HealthyUnixMilli: now.UnixMilli(), CurrentCapacity: cur.Capacity})
		case !have:
			// Not healthy yet: Nomad's health checks and deadlines run.
		case rec.Verdict == fsm.VerdictPromoted:
			l.act(ctx, ca.PromoteCanary, job, c)
		case rec.Verdict == fsm.VerdictFailed:
			l.act(ctx, ca.FailCanary, job, c)
		default:
			window := l.canaryWindow(cand)
			since := now.Sub(time.UnixMilli(rec.HealthyUnixMilli))
			if since < window {
				continue
			}
			k := rec
			k.By, k.VerdictUnixMilli = fsm.ByPlanner, now.UnixMilli()
			switch {
			case cand.MeasuredIndex > rec.Index:
				promote, why := CanaryGain(cand.Capacity, rec.CurrentCapacity, cand.ColdStartSec)
				k.CandidateCapacity, k.Detail = cand.Capacity, why
				k.Verdict = fsm.VerdictFailed
				if promote {
					k.Verdict = fsm.VerdictPromoted
				}
			case cur.Fallback:
				// The operator runs starved (no saturated sample of the running config
				// either): its canary cannot be measured, and a faster config would not
				// raise the pipeline's throughput. Holding the pipeline for more windows
				// only delays its rescheduling.
				k.Verdict = fsm.VerdictFailed
				k.Detail = fmt.Sprintf("no measurement of the canary within its %s window: the operator is not saturated (its own estimate is a fallback), so a faster config would not raise throughput", window)
			case since >= 3*window:
				k.Verdict = fsm.VerdictFailed
				k.Detail = fmt.Sprintf("no measurement of the canary within %s (three probe windows)", 3*window)
			default:
				continue
			}
			if !record(k) {
				continue
			}
			l.log.Info("canary verdict", "job", job, "operator", c.Operator, "verdict", k.Verdict, "why", k.Detail)
			if k.Verdict == fsm.VerdictPromoted {
				l.act(ctx, ca.PromoteCanary, job, c)
			} else {
				l.act(ctx, ca.FailCanary, job, c)
			}
		}
	}
}

// act promotes or fails c's deployment; an error is logged, and the next round acts
// again on the recorded verdict.
func (l *Loop) act(ctx context.Context, f func(context.Context, string, string) error, job string, c CanaryStatus) {
	if err := f(ctx, job, c.Deployment); err != nil {
		l.log.Warn("act on canary verdict", "job", job, "operator", c.Operator, "deployment", c.Deployment, "err", err)
	}
}

// canaryOutcome records and explains how decision dec's canaries ended when it finished
// with status: a canary still without a verdict was promoted by a user (done: the planner
// records its own promotions before acting), or failed by a user or Nomad (failed); a
// failed decision's detail names the planner's verdict when it failed the canary.
func (l *Loop) canaryOutcome(ctx context.Context, job string, dec fsm.Decision, status, detail string) string {
	var recs map[string]fsm.Canary
	l.s.fsm.Read(func(st *fsm.State) {
		recs = map[string]fsm.Canary{}
		for op, k := range st.Canaries[job] {
			if k.Decision == dec.Index {
				recs[op] = k
			}
		}
	})
	for op, k := range recs {
		switch {
		case status == fsm.StatusDone && k.Verdict == "":
			l.recordCanary(ctx, job, op, userPromoted(k, l.now()))
		case status == fsm.StatusDone:
		case k.Verdict == fsm.VerdictFailed:
			detail = fmt.Sprintf("canary of %s failed by the %s: %s; %s", op, k.By, k.Detail, detail)
		case k.Verdict == "":
			k.Verdict, k.By, k.VerdictUnixMilli = fsm.VerdictFailed, fsm.ByNomad, l.now().UnixMilli()
			switch {
			case strings.Contains(detail, "candidate config OOM"), strings.Contains(detail, "out of memory"):
				k.By = fsm.ByPlanner // the actuator's OOM abort
			case strings.Contains(detail, "marked as failed"):
				k.By = fsm.ByUser // nomad deployment fail (the planner's own fails record a verdict first)
			}
			k.Detail = fsm.Clip(detail, 512)
			l.recordCanary(ctx, job, op, k)
			detail = fmt.Sprintf("canary of %s failed (by %s) before the planner's verdict; %s", op, k.By, detail)
		}
	}
	return detail
}

// recordCanary commits k as op's canary record of job; a failure is logged (the next round
// records again) and reported as false.
func (l *Loop) recordCanary(ctx context.Context, job, op string, k fsm.Canary) bool {
	if _, err := l.s.Propose(ctx, fsm.Command{Op: fsm.OpCanary, Job: job, Operator: op, Canary: &k}); err != nil {
		l.log.Warn("record canary", "job", job, "operator", op, "err", err)
		return false
	}
	return true
}

// userPromoted is canary record k with the verdict of a promotion the planner did not make
// (a user's nomad deployment promote), recorded at now.
func userPromoted(k fsm.Canary, now time.Time) fsm.Canary {
	k.Verdict, k.By, k.VerdictUnixMilli = fsm.VerdictPromoted, fsm.ByUser, now.UnixMilli()
	k.Detail = "promoted outside the planner (nomad deployment promote) before its verdict"
	return k
}
