package planner

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
)

// Handler returns the API handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.handleStatus)
	mux.HandleFunc("GET /v1/state", s.auth(s.handleState))
	mux.HandleFunc("GET /v1/pipelines", s.auth(s.handlePipelines))
	mux.HandleFunc("GET /v1/pipelines/{job}", s.auth(s.handlePipeline))
	mux.HandleFunc("PUT /v1/pipelines/{job}", s.auth(limit(MaxPipelineBody, s.write(s.handlePutPipeline))))
	mux.HandleFunc("DELETE /v1/pipelines/{job}", s.auth(limit(MaxSmallBody, s.write(s.handleDeletePipeline))))
	mux.HandleFunc("POST /v1/pipelines/{job}/apply", s.auth(limit(MaxSmallBody, s.write(s.handleApply))))
	mux.HandleFunc("GET /v1/plan/{job}", s.auth(s.handlePlan))
	mux.HandleFunc("POST /v1/observations", s.auth(limit(MaxObservationsBody, s.write(s.handleObservations))))
	mux.HandleFunc("PUT /v1/candidates/{job}/{op}", s.auth(limit(MaxSmallBody, s.write(s.handlePutCandidate))))
	mux.HandleFunc("DELETE /v1/candidates/{job}/{op}", s.auth(limit(MaxSmallBody, s.write(s.handleDropCandidate))))
	mux.HandleFunc("PUT /v1/trials/{job}/{op}", s.auth(limit(MaxSmallBody, s.write(s.handlePutTrial))))
	mux.HandleFunc("DELETE /v1/trials/{job}/{op}", s.auth(limit(MaxSmallBody, s.write(s.handleDropTrial))))
	mux.HandleFunc("PUT /v1/trials/{job}/{op}/{slot}", s.auth(limit(MaxSmallBody, s.write(s.handlePutTrial))))
	mux.HandleFunc("DELETE /v1/trials/{job}/{op}/{slot}", s.auth(limit(MaxSmallBody, s.write(s.handleDropTrial))))
	mux.HandleFunc("GET /v1/decisions", s.auth(s.handleDecisions))
	mux.HandleFunc("GET /v1/inventory", s.auth(s.handleInventory))
	mux.HandleFunc("PUT /v1/inventory", s.auth(limit(MaxInventoryBody, s.write(s.handlePutInventory))))
	mux.HandleFunc("POST /v1/leadership/transfer", s.auth(limit(MaxSmallBody, s.write(s.handleTransfer))))
	mux.HandleFunc("POST /v1/snapshot", s.auth(limit(MaxSmallBody, s.handleSnapshot)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _, _ := s.Leader()
		w.Header().Set(client.HeaderLeader, id)
		w.Header().Set(client.HeaderIndex, strconv.FormatUint(s.raft.AppliedIndex(), 10))
		if r.URL.Query().Has("pretty") {
			w = prettyWriter{w}
		}
		mux.ServeHTTP(w, r)
	})
}

// Request body limits per route. A body above its route's limit is answered 413 without
// being read when its Content-Length says so, else as soon as the limit is crossed.
const (
	// MaxPipelineBody bounds PUT /v1/pipelines/<job>: a Nomad job as JSON. A pipeline of
	// the maximum operator count with typical tasks is a few hundred KiB.
	MaxPipelineBody = 4 << 20
	// MaxObservationsBody bounds POST /v1/observations (about 5,000 observations).
	MaxObservationsBody = 1 << 20
	// MaxInventoryBody bounds PUT /v1/inventory (about 20,000 nodes).
	MaxInventoryBody = 4 << 20
	// MaxSmallBody bounds every other write: candidates, apply, delete, leadership
	// transfer, snapshot.
	MaxSmallBody = 64 << 10
)

// limit answers 413 for a body above max bytes and caps what h can read at max. Routes
// whose limit is above MaxSmallBody also need the body's Content-Length (411 without it):
// a chunked body would be read, up to MiBs, before its size is known.
func limit(max int64, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body of %d bytes exceeds the %d-byte limit of %s %s", r.ContentLength, max, r.Method, r.Pattern))
			return
		}
		if r.ContentLength < 0 && max > MaxSmallBody {
			writeErr(w, http.StatusLengthRequired, fmt.Errorf("%s %s needs the body's Content-Length (bodies up to %d bytes)", r.Method, r.Pattern, max))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		h(w, r)
	}
}

// readBody reads the (limited) request body; on failure it answers 413 or 400 and
// reports false.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds the %d-byte limit of %s %s", mbe.Limit, r.Method, r.Pattern))
		return nil, false
	case err != nil:
		writeErr(w, http.StatusBadRequest, fmt.Errorf("read body: %w", err))
		return nil, false
	}
	return b, true
}

// decodeStrict decodes exactly one JSON value into v: unknown fields, a top-level null
// (which would decode as an empty value, e.g. an empty inventory) and anything after the
// value are refused.
func decodeStrict(b []byte, v any) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return errors.New("decode request body: null is not a valid body")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decode request body: unexpected data after the JSON value")
	}
	return nil
}

// decodeBody reads the request body and decodes it strictly into v; on failure it answers
// 413 or 400 and reports false. An empty body is an error unless allowEmpty.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) bool {
	b, ok := readBody(w, r)
	if !ok {
		return false
	}
	if allowEmpty && len(bytes.TrimSpace(b)) == 0 {
		return true
	}
	if err := decodeStrict(b, v); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return false
	}
	return true
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(client.HeaderToken)), []byte(s.cfg.Token)) != 1 {
			writeErr(w, http.StatusForbidden, errors.New("missing or wrong "+client.HeaderToken))
			return
		}
		h(w, r)
	}
}

// write runs h on the leader; a follower forwards the request to the leader's HTTP address,
// or answers 503 with the leader's address when it cannot.
func (s *Server) write(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.IsLeader() {
			h(w, r)
			return
		}
		id, raftAddr, httpAddr := s.Leader()
		// Right after an election a follower may not know the leader yet: wait briefly.
		for wait := time.Now().Add(3 * time.Second); id == "" && time.Now().Before(wait) && r.Context().Err() == nil; {
			time.Sleep(25 * time.Millisecond)
			if s.IsLeader() {
				h(w, r)
				return
			}
			id, raftAddr, httpAddr = s.Leader()
		}
		if httpAddr == "" || r.Header.Get(client.HeaderForwarded) != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(client.ErrorResponse{Error: "not the leader and cannot forward", LeaderID: id, Leader: httpAddr, Raft: raftAddr})
			return
		}
		s.forward(w, r, httpAddr)
	}
}

func (s *Server) forward(w http.ResponseWriter, r *http.Request, leader string) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	u := strings.TrimRight(leader, "/") + r.URL.RequestURI()
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u, bytes.NewReader(body))
	if err != nil {
		writeErr(w, http.StatusInternalServerError, fmt.Errorf("forward: %w", err))
		return
	}
	req.Header = r.Header.Clone()
	req.Header.Set(client.HeaderForwarded, s.cfg.ID)
	resp, err := s.fwd.Do(req)
	if err != nil {
		writeErr(w, http.StatusBadGateway, fmt.Errorf("forward to leader %s: %w", leader, err))
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// prettyWriter marks the response of a request with the `pretty` query parameter:
// writeJSON indents it.
type prettyWriter struct{ http.ResponseWriter }

// writeJSON answers v as JSON: compact, as the feed and the plugins read it every round,
// or indented when the request asked for ?pretty (as Nomad's API does).
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	if _, ok := w.(prettyWriter); ok {
		enc.SetIndent("", "  ")
	}
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, client.ErrorResponse{Error: err.Error()})
}

// proposeErr maps a Propose error to an HTTP status.
func proposeStatus(err error) int {
	switch {
	case errors.Is(err, fsm.ErrRejected):
		return http.StatusUnprocessableEntity
	case errors.Is(err, ErrNotLeader):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func (s *Server) propose(w http.ResponseWriter, r *http.Request, cmd fsm.Command) (uint64, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	idx, err := s.Propose(ctx, cmd)
	if err != nil {
		writeErr(w, proposeStatus(err), err)
		return 0, false
	}
	return idx, true
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	id, raftAddr, httpAddr := s.Leader()
	st := s.raft.Stats()
	term, _ := strconv.ParseUint(st["term"], 10, 64)
	resp := client.StatusResponse{
		ID: s.cfg.ID, State: s.raft.State().String(), LeaderID: id, LeaderRaft: raftAddr, LeaderHTTP: httpAddr,
		Term: term, LastIndex: s.raft.LastIndex(), AppliedIndex: s.raft.AppliedIndex(),
	}
	if f := s.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			resp.Peers = append(resp.Peers, client.PeerStatus{ID: string(srv.ID), RaftAddr: string(srv.Address), Suffrage: srv.Suffrage.String()})
		}
	}
	s.fsm.Read(func(st *fsm.State) {
		resp.Pipelines = len(st.Pipelines)
		resp.Decisions = len(st.Decisions)
	})
	if s.loop != nil {
		ls := s.loop.Stats()
		resp.Rounds, resp.Solves = ls.Rounds, ls.Solves
	}
	if s.cfg.NomadRequests != nil {
		resp.NomadRequests = s.cfg.NomadRequests()
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleState(w http.ResponseWriter, r *http.Request) {
	var b []byte
	var err error
	s.fsm.Read(func(st *fsm.State) { b, err = json.Marshal(st) })
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// view is a pipeline without its (large) template.
func view(st *fsm.State, p *fsm.Pipeline) client.Pipeline {
	v := client.Pipeline{Job: p.Job, Operators: p.Operators, RegisteredIndex: p.RegisteredIndex, Weight: p.Weight,
		MinThroughput: p.MinThroughput, Batch: p.Batch, InputRecords: p.InputRecords}
	if v.Weight == 0 {
		v.Weight = 1
	}
	if q, ok := st.Queue[p.Job]; ok {
		v.Queued = &client.Queued{Position: q.Position, Reason: q.Reason, SinceUnixMilli: q.SinceUnixMilli}
	}
	return v
}

func (s *Server) handlePipelines(w http.ResponseWriter, r *http.Request) {
	out := []client.Pipeline{}
	s.fsm.Read(func(st *fsm.State) {
		for _, p := range st.Pipelines {
			out = append(out, view(st, p))
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Job < out[j].Job })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handlePipeline(w http.ResponseWriter, r *http.Request) {
	job := r.PathValue("job")
	var out *client.Pipeline
	s.fsm.Read(func(st *fsm.State) {
		if p, ok := st.Pipelines[job]; ok {
			v := view(st, p)
			out = &v
		}
	})
	if out == nil {
		writeErr(w, http.StatusNotFound, fmt.Errorf("pipeline %q is not registered", job))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handlePutPipeline(w http.ResponseWriter, r *http.Request) {
	job := r.PathValue("job")
	var req client.PipelineRequest
	if !decodeBody(w, r, &req, true) {
		return
	}
	if s.loop == nil || s.loop.cfg.Actuator == nil {
		writeErr(w, http.StatusNotImplemented, errors.New("this planner has no actuator to parse pipelines"))
		return
	}
	p, idx, err := s.register(r.Context(), job, req.Job)
	if err != nil {
		writeErr(w, proposeStatus(err), err)
		return
	}
	writeJSON(w, http.StatusOK, client.RegisterResponse{Job: job, Index: idx, Operators: p.Operators})
}

// register parses job (Nomad job JSON, or nil to read it from Nomad), checks that it fits
// the inventory and commits it: the one registration path of the API and of
// auto-registration. A pipeline refused by the parser or the inventory is ErrRejected.
func (s *Server) register(ctx context.Context, job string, raw json.RawMessage) (*fsm.Pipeline, uint64, error) {
	p, err := s.loop.cfg.Actuator.Pipeline(ctx, job, raw)
	if err != nil {
		return nil, 0, refused{err}
	}
	if err := s.checkFits(p); err != nil {
		return nil, 0, refused{err}
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	idx, err := s.Propose(pctx, fsm.Command{Op: fsm.OpRegisterPipeline, Pipeline: p})
	if err != nil {
		return nil, 0, err
	}
	s.loop.kick()
	return p, idx, nil
}

// refused is a pipeline the parser or the inventory refused: it is fsm.ErrRejected (422)
// and reads as its cause alone.
type refused struct{ err error }

func (r refused) Error() string   { return r.err.Error() }
func (r refused) Unwrap() []error { return []error{r.err, fsm.ErrRejected} }

// checkFits rejects a pipeline with an operator no node of the known inventory can host,
// or whose minimum instances together exceed it.
func (s *Server) checkFits(p *fsm.Pipeline) error {
	var nodes []fsm.Node
	s.fsm.Read(func(st *fsm.State) {
		for _, n := range st.Nodes {
			nodes = append(nodes, n)
		}
	})
	return sched.CheckResources(p.Operators, nodes)
}

// found answers 404 and reports false when job (and op, when not empty) is not registered.
func (s *Server) found(w http.ResponseWriter, job, op string) bool {
	var err error
	s.fsm.Read(func(st *fsm.State) {
		p, ok := st.Pipelines[job]
		switch {
		case !ok:
			err = fmt.Errorf("pipeline %q is not registered", job)
		case op != "":
			if _, ok := p.Operator(op); !ok {
				err = fmt.Errorf("pipeline %q has no operator %q", job, op)
			}
		}
	})
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return false
	}
	return true
}

func (s *Server) handleDeletePipeline(w http.ResponseWriter, r *http.Request) {
	if !s.found(w, r.PathValue("job"), "") {
		return
	}
	idx, ok := s.propose(w, r, fsm.Command{Op: fsm.OpDeletePipeline, Job: r.PathValue("job")})
	if ok {
		writeJSON(w, http.StatusOK, client.IndexResponse{Index: idx})
	}
}

func (s *Server) handleApply(w http.ResponseWriter, r *http.Request) {
	job := r.PathValue("job")
	var req client.ApplyRequest
	if !decodeBody(w, r, &req, false) {
		return
	}
	var prog fsm.Progress
	var dec fsm.Decision
	var found bool
	s.fsm.Read(func(st *fsm.State) {
		prog = st.Progress[job]
		dec, found = st.LatestDecision(job)
	})
	if !found {
		writeErr(w, http.StatusNotFound, fmt.Errorf("pipeline %q has no committed decision", job))
		return
	}
	if v, ok := req.Meta["trident_decision_index"]; ok {
		if f, ok := v.(float64); ok && uint64(f) > dec.Index {
			writeErr(w, http.StatusConflict, fmt.Errorf("decision %d is newer than the committed decision %d", uint64(f), dec.Index))
			return
		}
	}
	if prog.Status == fsm.StatusApplying {
		writeErr(w, http.StatusConflict, fmt.Errorf("decision %d of %q is still being applied", dec.Index, job))
		return
	}
	if s.loop != nil {
		s.loop.nudge()
	}
	writeJSON(w, http.StatusAccepted, client.ApplyResponse{Job: job, DecisionIndex: dec.Index, Status: prog.Status})
}

func (s *Server) handlePlan(w http.ResponseWriter, r *http.Request) {
	job := r.PathValue("job")
	var resp *client.PlanResponse
	var reg bool
	var planErr string
	var queued *fsm.Queued
	s.fsm.Read(func(st *fsm.State) {
		_, reg = st.Pipelines[job]
		planErr = st.PlanErrors[job].Error
		if q, ok := st.Queue[job]; ok {
			queued = &q
		}
		d, ok := st.LatestDecision(job)
		if !ok {
			return
		}
		var failed uint64
		latest := d.Index
		if pr := st.Progress[job]; pr.Decision == d.Index && pr.Status == fsm.StatusFailed {
			// Nomad reverted to the last stable version: show the decision that runs.
			if prev, ok := st.Decision(st.Stable[job]); ok {
				failed, d = d.Index, prev
			}
		}
		resp = planResponse(st, d)
		if failed != 0 {
			resp.FailedDecisionIndex, resp.Status = failed, fsm.StatusFailed
		}
		if pr := st.Progress[job]; pr.Decision == latest {
			resp.Detail = pr.Detail
		}
		for op, k := range st.Canaries[job] {
			if k.Decision != latest {
				continue
			}
			if resp.Canaries == nil {
				resp.Canaries = map[string]client.Canary{}
			}
			resp.Canaries[op] = client.Canary{Config: k.Config, Node: k.Node, Deployment: k.Deployment, Verdict: k.Verdict, By: k.By,
				Detail: k.Detail, HealthyUnixMilli: k.HealthyUnixMilli, CurrentCapacity: k.CurrentCapacity, CandidateCapacity: k.CandidateCapacity}
		}
	})
	switch {
	case resp != nil:
		resp.PlanError = planErr
		if s.loop != nil && s.IsLeader() {
			if sh, ok := s.loop.Share(job); ok {
				resp.Share = &client.Share{Throughput: sh.Throughput, Instances: sh.Instances, Devices: sh.Devices, Link: sh.Link}
			}
		}
		writeJSON(w, http.StatusOK, resp)
	case reg && queued != nil:
		writeErr(w, http.StatusNotFound, fmt.Errorf("pipeline %q has no committed decision yet: it is queued for admission, position %d: %s", job, queued.Position, queued.Reason))
	case reg && planErr != "":
		writeErr(w, http.StatusNotFound, fmt.Errorf("pipeline %q has no committed decision yet: the newest scheduling round found no plan: %s", job, planErr))
	case reg:
		writeErr(w, http.StatusNotFound, fmt.Errorf("pipeline %q has no committed decision yet", job))
	default:
		writeErr(w, http.StatusNotFound, fmt.Errorf("pipeline %q is not registered", job))
	}
}

func planResponse(st *fsm.State, d fsm.Decision) *client.PlanResponse {
	resp := &client.PlanResponse{
		Job: d.Job, DecisionIndex: d.Index, Reason: d.Reason, Source: d.Source,
		Status: st.Progress[d.Job].Status, Throughput: d.Throughput, Groups: map[string]client.PlanGroup{}, Egress: d.Egress,
	}
	for name, t := range d.Operators {
		if r := st.Rollouts[d.Job][name]; r != nil && r.Epoch > t.Epoch && r.CandidateConfig == "" {
			// The decision's transition has been promoted: its candidate instances now run
			// the current config (same generation, same Nomad groups).
			nodes := map[string]fsm.Placement{}
			for n, pl := range t.Nodes {
				nodes[n] = fsm.Placement{Current: pl.Total()}
			}
			t.Nodes, t.Config, t.Epoch, t.CandidateConfig = nodes, r.Config, r.Epoch, ""
		}
		resp.Groups[name] = client.PlanGroup{
			Count: t.Count(), Reason: d.Reason, DecisionIndex: d.Index, Nodes: t.Nodes,
			Config: t.Config, ConfigEpoch: t.Epoch, CandidateConfig: t.CandidateConfig, Transitions: t.Transitions,
			ObservationEpoch: st.Epochs[d.Job][name],
		}
		if trs := st.Trials[d.Job][name]; len(trs) > 0 {
			g := resp.Groups[name]
			g.Trials = slices.Clone(trs)
			if tr, ok := trs.Slot(0); ok {
				g.TrialConfig, g.TrialEpoch = tr.Config, tr.Epoch
			}
			resp.Groups[name] = g
		}
	}
	return resp
}

func (s *Server) handleObservations(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var reqs []client.ObservationRequest
	var err error
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var one client.ObservationRequest
		err = decodeStrict(trimmed, &one)
		reqs = []client.ObservationRequest{one}
	} else {
		err = decodeStrict(trimmed, &reqs)
	}
	if err != nil {
		// JSON has no NaN: a producer that prints NaN fails here, by name.
		writeErr(w, http.StatusBadRequest, fmt.Errorf("decode observations (NaN and Inf are not valid JSON numbers): %w", err))
		return
	}
	// Validate all first so a bad element leaves the state unchanged.
	for i, o := range reqs {
		if err := checkObservation(o); err != nil {
			writeErr(w, http.StatusUnprocessableEntity, fmt.Errorf("observations[%d]: %w", i, err))
			return
		}
	}
	entries := make([]fsm.ObservationEntry, len(reqs))
	for i, o := range reqs {
		entries[i] = fsm.ObservationEntry{Job: o.Job, Operator: o.Operator, Observation: fsm.Observation{
			Capacity: o.Capacity, Std: o.Std, Epoch: o.Epoch, UnixMilli: o.UnixMilli, Backlog: o.Backlog, Fallback: o.Fallback, Amplification: o.Amplification}}
	}
	ign := []client.IgnoredObservation{}
	s.fsm.Read(func(st *fsm.State) {
		for i, e := range entries {
			if fsm.CheckObservation(st, e) == nil && fsm.ObservationTarget(st, e) == fsm.TargetStale {
				r := st.Rollouts[e.Job][e.Operator]
				ign = append(ign, client.IgnoredObservation{Index: i, Reason: fmt.Sprintf("epoch %d is neither the current config epoch %d nor an in-flight candidate's", e.Observation.Epoch, r.Epoch)})
			}
		}
	})
	idx, ok := s.propose(w, r, fsm.Command{Op: fsm.OpObserve, Observations: entries})
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, client.ObservationsResponse{Index: idx, Accepted: len(entries) - len(ign), Ignored: ign})
}

func checkObservation(o client.ObservationRequest) error {
	switch {
	case o.Job == "":
		return errors.New("job is empty")
	case o.Operator == "":
		return errors.New("operator is empty")
	case math.IsNaN(o.Capacity) || math.IsInf(o.Capacity, 0) || o.Capacity < 0:
		return fmt.Errorf("capacity=%v must be a finite number >= 0", o.Capacity)
	case math.IsNaN(o.Std) || math.IsInf(o.Std, 0) || o.Std < 0:
		return fmt.Errorf("std=%v must be a finite number >= 0", o.Std)
	case math.IsNaN(o.Backlog) || math.IsInf(o.Backlog, 0) || o.Backlog < 0:
		return fmt.Errorf("backlog=%v must be a finite number >= 0", o.Backlog)
	case math.IsNaN(o.Amplification) || o.Amplification < 0 || o.Amplification > 1e6:
		return fmt.Errorf("amplification=%v must be 0 (unknown) or within (0, 1e6], as trident_amplification", o.Amplification)
	}
	return nil
}

func (s *Server) handlePutCandidate(w http.ResponseWriter, r *http.Request) {
	var req client.CandidateRequest
	if !decodeBody(w, r, &req, false) || !s.found(w, r.PathValue("job"), r.PathValue("op")) || !s.configFits(w, r, req.Config) {
		return
	}
	idx, ok := s.propose(w, r, fsm.Command{Op: fsm.OpSetCandidate, Job: r.PathValue("job"), Operator: r.PathValue("op"),
		Candidate: &fsm.Candidate{Config: req.Config, Capacity: req.Capacity, ColdStartSec: req.ColdStartSec, Trialled: req.Trialled, Revert: req.Revert}})
	if ok {
		if s.loop != nil {
			s.loop.kick()
		}
		writeJSON(w, http.StatusOK, client.IndexResponse{Index: idx})
	}
}

// configFits answers 422 and reports false when the actuator refuses config for the
// operator the request's path names.
func (s *Server) configFits(w http.ResponseWriter, r *http.Request, config string) bool {
	if s.loop == nil || s.loop.cfg.Actuator == nil {
		return true
	}
	var p *fsm.Pipeline
	s.fsm.Read(func(st *fsm.State) { p = st.Pipelines[r.PathValue("job")] })
	if p == nil {
		return true
	}
	if o, ok := p.Operator(r.PathValue("op")); ok {
		if err := s.loop.cfg.Actuator.CheckConfig(o, config); err != nil {
			writeErr(w, http.StatusUnprocessableEntity, err)
			return false
		}
	}
	return true
}

func (s *Server) handleDropCandidate(w http.ResponseWriter, r *http.Request) {
	if !s.found(w, r.PathValue("job"), r.PathValue("op")) {
		return
	}
	idx, ok := s.propose(w, r, fsm.Command{Op: fsm.OpDropCandidate, Job: r.PathValue("job"), Operator: r.PathValue("op")})
	if ok {
		writeJSON(w, http.StatusOK, client.IndexResponse{Index: idx})
	}
}

func (s *Server) handleDecisions(w http.ResponseWriter, r *http.Request) {
	job := r.URL.Query().Get("job")
	var since uint64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("since=%q: %w", v, err))
			return
		}
		since = n
	}
	out := []fsm.Decision{}
	s.fsm.Read(func(st *fsm.State) {
		for _, d := range st.Decisions {
			if (job == "" || d.Job == job) && d.Index > since {
				out = append(out, d)
			}
		}
	})
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleInventory(w http.ResponseWriter, r *http.Request) {
	out := []fsm.Node{}
	s.fsm.Read(func(st *fsm.State) {
		for _, n := range st.Nodes {
			out = append(out, n)
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handlePutInventory(w http.ResponseWriter, r *http.Request) {
	var nodes []fsm.Node
	if !decodeBody(w, r, &nodes, false) {
		return
	}
	idx, ok := s.propose(w, r, fsm.Command{Op: fsm.OpSetInventory, Nodes: nodes})
	if ok {
		writeJSON(w, http.StatusOK, client.IndexResponse{Index: idx})
	}
}

func (s *Server) handleTransfer(w http.ResponseWriter, r *http.Request) {
	var req client.TransferRequest
	if !decodeBody(w, r, &req, true) {
		return
	}
	if err := s.TransferLeadership(req.ID); err != nil {
		writeErr(w, http.StatusConflict, err)
		return
	}
	id, _, httpAddr := s.Leader()
	writeJSON(w, http.StatusOK, client.TransferResponse{LeaderID: id, LeaderHTTP: httpAddr})
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeErr(w, http.StatusMethodNotAllowed, errors.New("POST only"))
		return
	}
	f := s.raft.Snapshot()
	if err := f.Error(); err != nil {
		writeErr(w, http.StatusInternalServerError, fmt.Errorf("snapshot: %w", err))
		return
	}
	meta, rc, err := f.Open()
	if err != nil {
		writeErr(w, http.StatusInternalServerError, fmt.Errorf("open snapshot: %w", err))
		return
	}
	rc.Close()
	writeJSON(w, http.StatusOK, client.SnapshotResponse{ID: meta.ID, Index: meta.Index, Term: meta.Term})
}
