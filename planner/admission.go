package planner

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/trident-sched/trident/planner/admit"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
	"github.com/trident-sched/trident/strategy/milp"
)

// maxFitsCache bounds the remembered answers of the admission's resource check.
const maxFitsCache = 4096

// admission decides which pipelines this round may plan when batch pipelines wait
// (planner/admit: services and pipelines with a decision first, then waiting batch
// pipelines shortest expected job first, with aging), records the queue in raft when it
// changes, and returns the queued jobs. A set of pipelines fits when the joint model finds
// room for their minimums (sched.Shares); unless Config.NoMarginalAdmission, a batch
// pipeline joins running batch pipelines only when the joint round with it carries more
// normalised work (admit.Policy.Marginal). A pipeline's expected job is its remaining input
// (the first operator's published backlog, else trident_input_records) over its pooled
// throughput alone on the cluster.
func (l *Loop) admission(ctx context.Context) map[string]bool {
	now := l.now()
	ins := map[string]sched.PlanInput{}
	var ps []admit.Pipeline
	var nodes []fsm.Node
	prev := map[string]fsm.Queued{}
	waiting := false
	l.s.fsm.Read(func(st *fsm.State) {
		maps.Copy(prev, st.Queue)
		for job, p := range st.Pipelines {
			if _, running := st.LatestDecision(job); p.Batch && !running {
				waiting = true
				break
			}
		}
		if !waiting {
			return // nothing waits: no input is built (the idle leader's rounds stay cheap)
		}
		for job, p := range st.Pipelines {
			in, err := l.stateInput(st, job)
			if err != nil {
				continue
			}
			ins[job], nodes = in, in.Nodes
			_, running := st.LatestDecision(job)
			ap := admit.Pipeline{Name: job, Batch: p.Batch, Running: running, Weight: p.Weight, Since: now}
			if running {
				ap.Started = firstDecision(st, job)
			}
			if p.Batch && !running {
				ap.Remaining = p.InputRecords
				if ob, ok := st.Observations[job][p.Operators[0].Name]; ok && ob.Backlog > 0 {
					ap.Remaining = ob.Backlog
				}
				if q, ok := st.Queue[job]; ok {
					ap.Since = time.UnixMilli(q.SinceUnixMilli)
				}
			}
			ps = append(ps, ap)
		}
	})
	if !waiting || len(nodes) == 0 {
		if len(prev) > 0 {
			l.proposeQueue(ctx, map[string]fsm.Queued{})
		}
		return nil
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	opts := milp.Options{TimeLimit: l.cfg.SolveTimeout}.OnThread(l.cfg.SolverThread)
	work := func(ctx context.Context, names []string) (bool, float64, error) {
		set := make([]sched.PlanInput, 0, len(names))
		for _, n := range slices.Sorted(slices.Values(names)) {
			set = append(set, ins[n])
		}
		if len(set) == 0 {
			return true, 0, nil
		}
		key := jointDigest(set, l.cfg.Objective)
		if a, seen := l.fitsCache[key]; seen {
			return a.fits, a.work, nil
		}
		j, err := sched.Shares(ctx, set, nodes, l.cfg.Objective, opts)
		if err != nil && !errors.Is(err, milp.ErrJointInfeasible) {
			return false, 0, err
		}
		a := fitsAnswer{fits: err == nil}
		if a.fits {
			a.work = normalisedWork(j)
		}
		if len(l.fitsCache) >= maxFitsCache {
			clear(l.fitsCache)
		}
		l.fitsCache[key] = a
		return a.fits, a.work, nil
	}
	for k := range ps {
		if ps[k].Batch && !ps[k].Running {
			alone := []sched.PlanInput{ins[ps[k].Name]}
			if j, err := sched.Shares(ctx, alone, nodes, l.cfg.Objective, opts); err == nil {
				ps[k].Throughput = j.Shares[ps[k].Name].Throughput
			}
		}
	}
	res, err := admit.AdmitWork(ctx, ps, now, admit.Policy{Marginal: !l.cfg.NoMarginalAdmission}, work)
	if err != nil {
		if ctx.Err() == nil {
			l.log.Warn("admission: every pipeline is planned this round", "err", err)
		}
		return nil
	}
	queue := map[string]fsm.Queued{}
	queued := map[string]bool{}
	for _, job := range res.Queued {
		since := now.UnixMilli()
		if q, ok := prev[job]; ok {
			since = q.SinceUnixMilli
		}
		queue[job] = fsm.Queued{Position: res.Position[job], Reason: fsm.Clip(res.Reason[job], 512), SinceUnixMilli: since}
		queued[job] = true
	}
	if !sameQueue(queue, prev) {
		l.proposeQueue(ctx, queue)
		if len(queue) > 0 {
			l.log.Info("admission queue", "queued", strings.Join(res.Queued, ","), "admitted", len(res.Admitted))
		}
	}
	return queued
}

// firstDecision is the time of job's oldest decision still in the log: when it was
// admitted, or later once older decisions have left the log (admit.Pipeline.Started
// allows a later time; it only makes the reservation check stricter). The zero time
// (counted as now) when no decision records its time.
func firstDecision(st *fsm.State, job string) time.Time {
	for _, d := range st.Decisions {
		if d.Job == job && d.UnixMilli > 0 {
			return time.UnixMilli(d.UnixMilli)
		}
	}
	return time.Time{}
}

// fitsAnswer is one remembered answer of the admission's resource check: whether the
// set's minimums fit, and the normalised work rate of its joint round.
type fitsAnswer struct {
	fits bool
	work float64
}

// normalisedWork is the joint round's work rate: every pipeline's share in units of its
// throughput alone on the cluster (Share.Scale), summed.
func normalisedWork(j sched.Joint) float64 {
	w := 0.0
	for _, sh := range j.Shares {
		if sh.Scale > 0 {
			w += sh.Throughput / sh.Scale
		}
	}
	return w
}

// sameQueue reports whether two queues hold the same jobs at the same positions with the
// same reasons (the raft index aside).
func sameQueue(a, b map[string]fsm.Queued) bool {
	return maps.EqualFunc(a, b, func(x, y fsm.Queued) bool {
		return x.Position == y.Position && x.Reason == y.Reason && x.SinceUnixMilli == y.SinceUnixMilli
	})
}

// proposeQueue commits the admission queue.
func (l *Loop) proposeQueue(ctx context.Context, q map[string]fsm.Queued) {
	if _, err := l.s.Propose(ctx, fsm.Command{Op: fsm.OpQueue, Queue: q}); err != nil {
		l.log.Warn("record the admission queue", "err", err)
	}
}
