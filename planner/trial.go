package planner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// TrialActuator is an optional Actuator extension that runs tuning trials (fsm.Trial):
// instances of an operator on trial configs beside its production instances, each taking
// the place of one of them. Without it the planner refuses trials (HTTP 501) and a tuner
// measures configurations by rolling them out.
type TrialActuator interface {
	// SetTrials makes job's running trials exactly trials (operator -> trials by slot):
	// it starts or replaces the listed ones and ends any other. The loop calls it only
	// while no decision of job applies, when the committed trials change, after each
	// decision and again after an error, so it must be idempotent.
	SetTrials(ctx context.Context, job string, trials map[string]fsm.TrialSlots) error
	// TrialSlots is how many trials of one operator it runs at once (slots 0 to n-1, at
	// least 1); the planner refuses a trial in a higher slot (HTTP 501).
	TrialSlots() int
}

// TrialWatcher is an optional TrialActuator extension that tells when a trial's instance
// fails to run: it exits or is OOM-killed before it serves (an engine refusing a config:
// a KV cache too small for one sequence, an unsupported kernel), which the trial's own
// metrics never show because it never serves them.
type TrialWatcher interface {
	// TrialFailures returns why the instances of job's trials that failed did
	// (operator -> slot -> reason); trials that run, start or are unknown are absent.
	TrialFailures(ctx context.Context, job string, trials map[string]fsm.TrialSlots) (map[string]map[int]string, error)
}

// syncTrials hands job's committed trials to the actuator when they differ from what it
// last applied this term (a new leader applies them once more, and so does the round
// after a decision finished; a trial marked failed is the same trial), then records the
// failures a TrialWatcher reports (watchTrials). The loop calls it only while no decision
// of job applies.
func (l *Loop) syncTrials(ctx context.Context, job string) {
	ta, ok := l.cfg.Actuator.(TrialActuator)
	if !ok {
		return
	}
	var trials map[string]fsm.TrialSlots
	l.s.fsm.Read(func(st *fsm.State) { trials = maps.Clone(st.Trials[job]) })
	if applied, ok := l.trials[job]; !ok || !maps.EqualFunc(applied, trials, sameTrials) {
		if err := ta.SetTrials(ctx, job, trials); err != nil {
			l.log.Warn("apply trials; trying again next round", "job", job, "err", err)
			return
		}
		l.trials[job] = trials
	}
	l.watchTrials(ctx, job, trials)
}

// sameTrials reports whether a and b are the same trials in the same slots, whatever is
// known of their failures.
func sameTrials(a, b fsm.TrialSlots) bool {
	return slices.EqualFunc(a, b, func(x, y fsm.Trial) bool { x.Failed, y.Failed = "", ""; return x == y })
}

// watchTrials asks a TrialWatcher actuator which of job's running trials (applied, not yet
// marked failed) failed, and records each in raft (OpFailTrial), where the plan shows it
// to the tuner.
func (l *Loop) watchTrials(ctx context.Context, job string, trials map[string]fsm.TrialSlots) {
	tw, ok := l.cfg.Actuator.(TrialWatcher)
	if !ok {
		return
	}
	open := map[string]fsm.TrialSlots{}
	for op, ts := range trials {
		if ts = slices.DeleteFunc(slices.Clone(ts), func(t fsm.Trial) bool { return t.Failed != "" }); len(ts) > 0 {
			open[op] = ts
		}
	}
	if len(open) == 0 {
		return
	}
	failed, err := tw.TrialFailures(ctx, job, open)
	if err != nil {
		l.log.Warn("check trials for failures; trying again next round", "job", job, "err", err)
		return
	}
	for _, op := range slices.Sorted(maps.Keys(failed)) {
		for _, slot := range slices.Sorted(maps.Keys(failed[op])) {
			t, ok := open[op].Slot(slot)
			if !ok {
				continue
			}
			why := fsm.Clip(failed[op][slot], fsm.MaxTrialFailureBytes-len("..."))
			if _, err := l.s.Propose(ctx, fsm.Command{Op: fsm.OpFailTrial, Job: job, Operator: op,
				Trial: &fsm.Trial{Slot: slot, Index: t.Index, Failed: why}}); err != nil {
				l.log.Warn("record a failed trial", "job", job, "operator", op, "slot", slot, "err", err)
				continue
			}
			l.log.Warn("trial failed", "job", job, "operator", op, "slot", slot, "config", t.Config, "why", why)
		}
	}
}

// trialSlot returns the slot the request's path names (0 without one), or writes the
// error and reports false.
func trialSlot(w http.ResponseWriter, r *http.Request) (int, bool) {
	raw := r.PathValue("slot")
	if raw == "" {
		return 0, true
	}
	k, err := strconv.Atoi(raw)
	if err != nil || k < 0 || k >= fsm.MaxTrialSlots {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("trial slot %q: want an integer in [0, %d)", raw, fsm.MaxTrialSlots))
		return 0, false
	}
	return k, true
}

func (s *Server) handlePutTrial(w http.ResponseWriter, r *http.Request) {
	var req client.TrialRequest
	if !decodeBody(w, r, &req, false) || !s.found(w, r.PathValue("job"), r.PathValue("op")) {
		return
	}
	slot, ok := trialSlot(w, r)
	if !ok {
		return
	}
	if s.loop == nil {
		writeErr(w, http.StatusNotImplemented, errors.New("this planner runs no scheduling loop: nothing would run the trial"))
		return
	}
	ta, can := s.loop.cfg.Actuator.(TrialActuator)
	if !can {
		writeErr(w, http.StatusNotImplemented, errors.New("this planner's actuator cannot run tuning trials: propose candidates instead (PUT /v1/candidates)"))
		return
	}
	if n := max(1, ta.TrialSlots()); slot >= n {
		writeErr(w, http.StatusNotImplemented, fmt.Errorf("trial slot %d: this planner's actuator runs %d trial slot(s) per operator (slots 0 to %d)", slot, n, n-1))
		return
	}
	if !s.configFits(w, r, req.Config) {
		return
	}
	idx, ok := s.propose(w, r, fsm.Command{Op: fsm.OpSetTrial, Job: r.PathValue("job"), Operator: r.PathValue("op"), Trial: &fsm.Trial{Config: req.Config, Slot: slot}})
	if ok {
		s.loop.nudge()
		writeJSON(w, http.StatusOK, client.IndexResponse{Index: idx})
	}
}

// handleDropTrial ends the trial in the slot the path names, or every trial of the
// operator when it names none.
func (s *Server) handleDropTrial(w http.ResponseWriter, r *http.Request) {
	if !s.found(w, r.PathValue("job"), r.PathValue("op")) {
		return
	}
	c := fsm.Command{Op: fsm.OpDropTrial, Job: r.PathValue("job"), Operator: r.PathValue("op")}
	if r.PathValue("slot") != "" {
		slot, ok := trialSlot(w, r)
		if !ok {
			return
		}
		c.Trial = &fsm.Trial{Slot: slot}
	}
	idx, ok := s.propose(w, r, c)
	if ok {
		if s.loop != nil {
			s.loop.nudge()
		}
		writeJSON(w, http.StatusOK, client.IndexResponse{Index: idx})
	}
}
