package planner

import (
	"context"
	"errors"
	"maps"
	"net/http"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// TrialActuator is an optional Actuator extension that runs tuning trials (fsm.Trial):
// one instance of an operator on a trial config beside its production instances, taking
// the place of one of them. Without it the planner refuses trials (HTTP 501) and a tuner
// measures configurations by rolling them out.
type TrialActuator interface {
	// SetTrials makes job's running trials exactly trials (operator -> trial): it starts
	// or replaces the listed ones and ends any other. The loop calls it only while no
	// decision of job applies, when the committed trials change, after each decision and
	// again after an error, so it must be idempotent.
	SetTrials(ctx context.Context, job string, trials map[string]fsm.Trial) error
}

// syncTrials hands job's committed trials to the actuator when they differ from what it
// last applied this term (a new leader applies them once more, and so does the round
// after a decision finished). The loop calls it only while no decision of job applies.
func (l *Loop) syncTrials(ctx context.Context, job string) {
	ta, ok := l.cfg.Actuator.(TrialActuator)
	if !ok {
		return
	}
	var trials map[string]fsm.Trial
	l.s.fsm.Read(func(st *fsm.State) { trials = maps.Clone(st.Trials[job]) })
	if applied, ok := l.trials[job]; ok && maps.Equal(applied, trials) {
		return
	}
	if err := ta.SetTrials(ctx, job, trials); err != nil {
		l.log.Warn("apply trials; trying again next round", "job", job, "err", err)
		return
	}
	l.trials[job] = trials
}

func (s *Server) handlePutTrial(w http.ResponseWriter, r *http.Request) {
	var req client.TrialRequest
	if !decodeBody(w, r, &req, false) || !s.found(w, r.PathValue("job"), r.PathValue("op")) {
		return
	}
	if s.loop == nil {
		writeErr(w, http.StatusNotImplemented, errors.New("this planner runs no scheduling loop: nothing would run the trial"))
		return
	}
	if _, ok := s.loop.cfg.Actuator.(TrialActuator); !ok {
		writeErr(w, http.StatusNotImplemented, errors.New("this planner's actuator cannot run tuning trials: propose candidates instead (PUT /v1/candidates)"))
		return
	}
	if !s.configFits(w, r, req.Config) {
		return
	}
	idx, ok := s.propose(w, r, fsm.Command{Op: fsm.OpSetTrial, Job: r.PathValue("job"), Operator: r.PathValue("op"), Trial: &fsm.Trial{Config: req.Config}})
	if ok {
		s.loop.nudge()
		writeJSON(w, http.StatusOK, client.IndexResponse{Index: idx})
	}
}

func (s *Server) handleDropTrial(w http.ResponseWriter, r *http.Request) {
	if !s.found(w, r.PathValue("job"), r.PathValue("op")) {
		return
	}
	idx, ok := s.propose(w, r, fsm.Command{Op: fsm.OpDropTrial, Job: r.PathValue("job"), Operator: r.PathValue("op")})
	if ok {
		if s.loop != nil {
			s.loop.nudge()
		}
		writeJSON(w, http.StatusOK, client.IndexResponse{Index: idx})
	}
}
