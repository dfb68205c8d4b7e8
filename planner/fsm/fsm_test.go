package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func pipe() *Pipeline {
	return &Pipeline{Job: "pdf", Operators: []Operator{
		{Name: "parse", Order: 0, CPU: 1, MemoryMB: 512, Amplification: 1, Config: "threads=1"},
		{Name: "embed", Order: 1, CPU: 2, MemoryMB: 1024, GPUs: 1, GPUMemoryMB: 8000, Amplification: 1, Config: "batch=8"},
	}}
}

type applier struct {
	t   *testing.T
	f   *FSM
	idx uint64
}

func (a *applier) do(c Command) error {
	a.t.Helper()
	a.idx++
	b, err := c.Encode()
	if err != nil {
		a.t.Fatal(err)
	}
	res := a.f.Apply(&raft.Log{Index: a.idx, Type: raft.LogCommand, Data: b}).(Result)
	return res.Err
}

func (a *applier) must(c Command) {
	a.t.Helper()
	if err := a.do(c); err != nil {
		a.t.Fatalf("%s: %v", c.Op, err)
	}
}

func stateJSON(t *testing.T, f *FSM) string {
	t.Helper()
	var b []byte
	f.Read(func(s *State) { b, _ = json.Marshal(s) })
	return string(b)
}

func decision(cand int, cfg string) *Decision { return decisionT(cand, cand, cfg) }

func decisionT(cand, trans int, cfg string) *Decision {
	return &Decision{Job: "pdf", Operators: map[string]OpTarget{
		"parse": {Nodes: map[string]Placement{"a": {Current: 2}, "b": {Current: 1}}, Config: "threads=1"},
		"embed": {Nodes: map[string]Placement{"a": {Current: 2 - cand, Candidate: cand}}, Config: "batch=8", CandidateConfig: cfg, Transitions: trans},
	}, Source: "test"}
}

// TestTransitionLifecycle walks one operator through a two-batch config transition and
// checks the rolling-update state, the epoch bumps and the promotion.
func TestTransitionLifecycle(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	a.must(Command{Op: OpDecide, Decision: decision(0, "")})
	d1 := a.idx
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: d1, Status: StatusDone}})
	a.must(Command{Op: OpSetCandidate, Job: "pdf", Operator: "embed", Candidate: &Candidate{Config: "batch=32", Capacity: 9}})
	// A second, different candidate is refused while the first is pending and in flight
	// only once instances run it; before that it replaces the pending one.
	a.must(Command{Op: OpDecide, Decision: decision(1, "batch=32")})
	d2 := a.idx
	if err := a.do(Command{Op: OpSetCandidate, Job: "pdf", Operator: "embed", Candidate: &Candidate{Config: "batch=64", Capacity: 9}}); err == nil {
		t.Fatal("second candidate accepted while a transition is in flight")
	}
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: d2, Status: StatusDone}})
	// Observations by epoch: 0 measures the current config, 1 the in-flight candidate, 5
	// nothing (ignored, no error).
	a.must(Command{Op: OpObserve, Observations: []ObservationEntry{
		{Job: "pdf", Operator: "embed", Observation: Observation{Capacity: 4, Epoch: 0}},
		{Job: "pdf", Operator: "embed", Observation: Observation{Capacity: 12, Epoch: 1}},
		{Job: "pdf", Operator: "embed", Observation: Observation{Capacity: 99, Epoch: 5}},
	}})
	var cur Observation
	var cand Candidate
	a.f.Read(func(s *State) { cur, cand = s.Observations["pdf"]["embed"], s.Candidates["pdf"]["embed"] })
	if cur.Capacity != 4 || cand.Capacity != 12 {
		t.Fatalf("observation routing: current %+v candidate %+v", cur, cand)
	}
	// Duplicate done report is a no-op (idempotent).
	before := stateJSON(t, a.f)
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: d2, Status: StatusDone}})
	var s1 State
	_ = json.Unmarshal([]byte(before), &s1)
	var r Rollout
	var epoch uint64
	var inv int
	a.f.Read(func(s *State) {
		r = *s.Rollouts["pdf"]["embed"]
		epoch = s.Epochs["pdf"]["embed"]
		inv = len(s.Invalidations)
	})
	if r.OnCurrent != 1 || r.OnCandidate != 1 || r.CandidateConfig != "batch=32" || epoch != 1 || inv != 1 {
		t.Fatalf("after batch 1: rollout %+v epoch %d invalidations %d", r, epoch, inv)
	}
	if len(s1.Invalidations) != inv {
		t.Fatalf("duplicate done changed invalidations: %d -> %d", len(s1.Invalidations), inv)
	}
	// Rolling back a transitioned instance is refused.
	if err := a.do(Command{Op: OpDecide, Decision: decision(0, "")}); err == nil || !errors.Is(err, ErrRejected) {
		t.Fatalf("rollback accepted: %v", err)
	}
	a.must(Command{Op: OpDecide, Decision: decisionT(2, 1, "batch=32")})
	d3 := a.idx
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: d3, Status: StatusDone}})
	a.f.Read(func(s *State) {
		r = *s.Rollouts["pdf"]["embed"]
		epoch = s.Epochs["pdf"]["embed"]
		inv = len(s.Invalidations)
	})
	if r.Config != "batch=32" || r.Epoch != 1 || r.CandidateConfig != "" || r.OnCurrent != 2 || r.OnCandidate != 0 || epoch != 1 || inv != 1 {
		t.Fatalf("after promotion: rollout %+v epoch %d invalidations %d", r, epoch, inv)
	}
}

// TestRejectedCommandsLeaveStateUnchanged feeds invalid commands and compares the whole
// serialised state before and after.
func TestRejectedCommandsLeaveStateUnchanged(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	a.must(Command{Op: OpSetInventory, Nodes: []Node{{Name: "a", CPU: 8, MemoryMB: 16000, GPUs: 2, GPUMemoryMB: 16000}}})
	a.must(Command{Op: OpDecide, Decision: decision(0, "")})
	before := stateJSON(t, a.f)
	bad := pipe()
	bad.Operators[1].CPU = -1
	nan := pipe()
	nan.Operators[1].Amplification = math.NaN()
	if err := ValidatePipeline(nan); err == nil || !strings.Contains(err.Error(), "trident_amplification") {
		t.Fatalf("NaN amplification: %v", err)
	}
	if _, err := (Command{Op: OpObserve, Observation: &Observation{Capacity: math.NaN()}}).Encode(); err == nil {
		t.Fatal("NaN observation encoded into a log entry")
	}
	noOrder := pipe()
	noOrder.Operators = nil
	cases := map[string]Command{
		"nan cpu":               {Op: OpRegisterPipeline, Pipeline: bad},
		"no operators":          {Op: OpRegisterPipeline, Pipeline: noOrder},
		"unknown operator":      {Op: OpObserve, Job: "pdf", Operator: "nope", Observation: &Observation{Capacity: 1}},
		"batch with one bad":    {Op: OpObserve, Observations: []ObservationEntry{{Job: "pdf", Operator: "parse", Observation: Observation{Capacity: 1}}, {Job: "pdf", Operator: "parse", Observation: Observation{Capacity: -1}}}},
		"unknown job":           {Op: OpObserve, Job: "x", Operator: "parse", Observation: &Observation{Capacity: 1}},
		"dup node":              {Op: OpSetInventory, Nodes: []Node{{Name: "a", CPU: 1}, {Name: "a", CPU: 1}}},
		"negative node cpu":     {Op: OpSetInventory, Nodes: []Node{{Name: "a", CPU: -2}}},
		"negative capacity":     {Op: OpObserve, Job: "pdf", Operator: "parse", Observation: &Observation{Capacity: -1}},
		"negative backlog":      {Op: OpObserve, Job: "pdf", Operator: "parse", Observation: &Observation{Capacity: 1, Backlog: -5}},
		"decide while applying": {Op: OpDecide, Decision: decision(0, "")},
		"stale progress":        {Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: 1, Status: StatusDone}},
		"bad status":            {Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: "maybe"}},
		"candidate = current":   {Op: OpSetCandidate, Job: "pdf", Operator: "embed", Candidate: &Candidate{Config: "batch=8"}},
		"unknown op":            {Op: "frobnicate"},
	}
	for name, c := range cases {
		if err := a.do(c); err == nil || !errors.Is(err, ErrRejected) {
			t.Errorf("%s: want rejection, got %v", name, err)
		}
		if after := stateJSON(t, a.f); after != before {
			t.Fatalf("%s: state changed:\nbefore %s\nafter  %s", name, before, after)
		}
	}
	// Garbage bytes in the log are rejected too.
	a.idx++
	if res := a.f.Apply(&raft.Log{Index: a.idx, Type: raft.LogCommand, Data: []byte("{nope")}).(Result); res.Err == nil {
		t.Fatal("garbage command accepted")
	}
}

type sink struct {
	bytes.Buffer
	cancelled bool
}

func (s *sink) ID() string    { return "x" }
func (s *sink) Cancel() error { s.cancelled = true; return nil }
func (s *sink) Close() error  { return nil }

// TestSnapshotRestoreRoundTrip checks that a restored FSM equals the original.
func TestSnapshotRestoreRoundTrip(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	a.must(Command{Op: OpSetInventory, Nodes: []Node{{Name: "a", CPU: 8, MemoryMB: 16000}}})
	a.must(Command{Op: OpObserve, Job: "pdf", Operator: "parse", Observation: &Observation{Capacity: 3.5}})
	a.must(Command{Op: OpDecide, Decision: decision(0, "")})
	g := restored(t, a.f)
	var s1, s2 State
	_ = json.Unmarshal([]byte(stateJSON(t, a.f)), &s1)
	_ = json.Unmarshal([]byte(stateJSON(t, g)), &s2)
	if !reflect.DeepEqual(s1, s2) {
		t.Fatalf("restored state differs:\n%+v\n%+v", s1, s2)
	}
	if s2.Decisions[0].Index != 4 || s2.Observations["pdf"]["parse"].Capacity != 3.5 {
		t.Fatalf("restored content wrong: %+v", s2)
	}
}

// TestDecisionLogIsBounded applies more decisions than the retention bound and checks that
// the oldest are dropped, the rest keep their order, and a failed rollout still reverts to
// the decision before it.
func TestDecisionLogIsBounded(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	var idx []uint64
	for i := 0; i < KeepDecisions+10; i++ {
		a.must(Command{Op: OpDecide, Decision: decision(0, "")})
		idx = append(idx, a.idx)
		a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: StatusDone}})
	}
	var got []uint64
	a.f.Read(func(s *State) {
		for _, d := range s.Decisions {
			got = append(got, d.Index)
		}
	})
	if want := idx[10:]; !reflect.DeepEqual(got, want) {
		t.Fatalf("kept %d decisions %v..., want the newest %d from %d", len(got), got[:min(3, len(got))], len(want), want[0])
	}
	// Failed decisions beyond the bound never push out the stable one they revert to.
	for i := 0; i < KeepDecisions+5; i++ {
		a.must(Command{Op: OpDecide, Decision: decision(0, "")})
		a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: StatusFailed}})
	}
	var ok bool
	var n int
	a.f.Read(func(s *State) { _, ok = s.Decision(idx[len(idx)-1]); n = len(s.Decisions) })
	if !ok || n != KeepDecisions {
		t.Fatalf("stable decision kept: %v, decisions held %d (want it plus the newest %d)", ok, n, KeepDecisions-1)
	}
	// Deleting the pipeline drops its logs: registered again, it has no latest decision.
	a.must(Command{Op: OpDeletePipeline, Job: "pdf"})
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	a.f.Read(func(s *State) { _, ok = s.LatestDecision("pdf") })
	if ok {
		t.Fatal("a re-registered pipeline inherited the deleted one's decisions")
	}
}

// TestSecondFailureRevertsToLastSuccess: after two failed transitions in a row the rollout
// state is the last successful decision's (what Nomad's auto-revert runs), not the first
// failed decision's.
func TestSecondFailureRevertsToLastSuccess(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	a.must(Command{Op: OpDecide, Decision: decision(0, "")})
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: StatusDone}})
	for _, cfg := range []string{"batch=32", "batch=64"} {
		a.must(Command{Op: OpSetCandidate, Job: "pdf", Operator: "embed", Candidate: &Candidate{Config: cfg, Capacity: 9}})
		a.must(Command{Op: OpDecide, Decision: decision(1, cfg)})
		a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: StatusFailed}})
		var r Rollout
		var pending bool
		a.f.Read(func(s *State) {
			r = *s.Rollouts["pdf"]["embed"]
			_, pending = s.Candidates["pdf"]["embed"]
		})
		if r.OnCurrent != 2 || r.OnCandidate != 0 || r.CandidateConfig != "" || pending {
			t.Fatalf("after %s failed: rollout %+v, candidate pending %v (want 2 on the current config, none pending)", cfg, r, pending)
		}
	}
}

// TestPlanErrorLifecycle: a round's failure is recorded with its raft index for a
// registered job only, survives a snapshot, and is cleared by a nil PlanError, by a
// committed decision and with the pipeline.
func TestPlanErrorLifecycle(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	if err := a.do(Command{Op: OpPlanError, Job: "pdf", PlanError: &PlanError{Error: "x"}}); !errors.Is(err, ErrRejected) {
		t.Fatalf("plan error of an unregistered job: %v, want rejected", err)
	}
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	read := func(f *FSM) (pe PlanError, ok bool) {
		f.Read(func(st *State) { pe, ok = st.PlanErrors["pdf"] })
		return
	}
	set := func() {
		a.must(Command{Op: OpPlanError, Job: "pdf", PlanError: &PlanError{Error: "impossible resources: x", UnixMilli: 7}})
		if pe, ok := read(a.f); !ok || pe.Error != "impossible resources: x" || pe.UnixMilli != 7 || pe.Index != a.idx {
			t.Fatalf("recorded %+v (%v), want the error at index %d", pe, ok, a.idx)
		}
	}
	set()
	g := restored(t, a.f)
	if pe, ok := read(g); !ok || pe.Error != "impossible resources: x" {
		t.Fatalf("restored %+v (%v)", pe, ok)
	}
	a.must(Command{Op: OpPlanError, Job: "pdf"})
	if _, ok := read(a.f); ok {
		t.Fatal("a nil PlanError did not clear it")
	}
	set()
	a.must(Command{Op: OpDecide, Decision: decision(0, "")})
	if _, ok := read(a.f); ok {
		t.Fatal("a committed decision did not clear it")
	}
	set()
	a.must(Command{Op: OpDeletePipeline, Job: "pdf"})
	if _, ok := read(a.f); ok {
		t.Fatal("deleting the pipeline did not clear it")
	}
}

// restored returns a new FSM restored from a snapshot of f.
func restored(t *testing.T, f *FSM) *FSM {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sk sink
	if err := snap.Persist(&sk); err != nil {
		t.Fatal(err)
	}
	g := New(nil)
	if err := g.Restore(io.NopCloser(bytes.NewReader(sk.Bytes()))); err != nil {
		t.Fatal(err)
	}
	return g
}

// The first committed decision sets the cluster ID from the ID its leader proposed; later
// decisions carry that ID whatever they propose, and it survives a snapshot.
func TestClusterIDFromTheFirstDecision(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	d := decision(0, "")
	d.Planner = "first"
	a.must(Command{Op: OpDecide, Decision: d})
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: StatusDone}})
	d = decision(0, "")
	d.Planner = "second"
	a.must(Command{Op: OpDecide, Decision: d})
	check := func(f *FSM) {
		t.Helper()
		f.Read(func(st *State) {
			if st.ClusterID != "first" {
				t.Fatalf("cluster ID %q, want first", st.ClusterID)
			}
			for _, d := range st.Decisions {
				if d.Planner != "first" {
					t.Fatalf("decision %d carries planner %q, want first", d.Index, d.Planner)
				}
			}
		})
	}
	check(a.f)
	check(restored(t, a.f))
}

// TestProgressAfterAnOperatorLeft: a pipeline re-registered without one of its operators
// while a decision for the old shape is in flight (a user ran a new job file) takes that
// decision's outcome without a panic; Apply used to dereference the removed operator's
// rollout and crash every replica replaying the entry.
func TestProgressAfterAnOperatorLeft(t *testing.T) {
	for _, status := range []string{StatusDone, StatusFailed} {
		a := &applier{t: t, f: New(nil)}
		a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
		a.must(Command{Op: OpSetCandidate, Job: "pdf", Operator: "embed", Candidate: &Candidate{Config: "batch=16", Capacity: 2}})
		a.must(Command{Op: OpDecide, Decision: decision(1, "batch=16")})
		dec := a.idx
		smaller := pipe()
		smaller.Operators = smaller.Operators[:1] // embed is gone
		a.must(Command{Op: OpRegisterPipeline, Pipeline: smaller})
		a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: dec, Status: status}})
		var got string
		a.f.Read(func(s *State) { got = s.Progress["pdf"].Status })
		if got != status {
			t.Fatalf("%s: progress recorded as %q", status, got)
		}
	}
}

// TestCheckMatchesApply: Check refuses exactly what Apply refuses, and changes nothing.
func TestCheckMatchesApply(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	before := stateJSON(t, a.f)
	for _, c := range []Command{
		{Op: OpDeletePipeline, Job: "nope"},
		{Op: OpSetCandidate, Job: "pdf", Operator: "nope", Candidate: &Candidate{Config: "x=1"}},
		{Op: OpSetCandidate, Job: "pdf", Operator: "embed", Candidate: &Candidate{Config: "batch=8"}}, // the current config
		{Op: OpObserve, Observations: []ObservationEntry{{Job: "pdf", Operator: "parse", Observation: Observation{Capacity: 1}}, {Job: "pdf", Operator: "x"}}},
		{Op: OpSetInventory, Nodes: []Node{{Name: "a", CPU: 1}, {Name: "a", CPU: 2}}},
		{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: 99, Status: StatusDone}},
		{Op: "bogus"},
	} {
		err := a.f.Check(c)
		if !errors.Is(err, ErrRejected) {
			t.Errorf("Check(%s) = %v, want a rejection", c.Op, err)
		}
		if aerr := a.do(c); aerr == nil || aerr.Error() != err.Error() {
			t.Errorf("Apply(%s) = %v, Check said %v", c.Op, aerr, err)
		}
	}
	if after := stateJSON(t, a.f); after != before {
		t.Fatalf("rejected commands changed the state")
	}
	if err := a.f.Check(Command{Op: OpDeletePipeline, Job: "pdf"}); err != nil {
		t.Fatalf("a valid command: %v", err)
	}
	if after := stateJSON(t, a.f); after != before {
		t.Fatalf("Check changed the state")
	}
}

// TestQueueLifecycle: only registered batch pipelines without a decision queue, at
// positions 1..n; the queue survives a snapshot; a decision (admission) or a deletion
// takes the pipeline out of it; an empty queue clears it.
func TestQueueLifecycle(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	svc := pipe()
	svc.Job = "svc"
	a.must(Command{Op: OpRegisterPipeline, Pipeline: svc})
	batch := pipe()
	batch.Batch = true
	a.must(Command{Op: OpRegisterPipeline, Pipeline: batch})
	q := func(job string, pos int) map[string]Queued {
		return map[string]Queued{job: {Position: pos, Reason: "no room", SinceUnixMilli: 5}}
	}
	for name, bad := range map[string]map[string]Queued{
		"a service":       q("svc", 1),
		"an unknown job":  q("nope", 1),
		"position 0":      q("pdf", 0),
		"position beyond": q("pdf", 2),
	} {
		if err := a.do(Command{Op: OpQueue, Queue: bad}); !errors.Is(err, ErrRejected) {
			t.Errorf("queueing %s: %v, want rejected", name, err)
		}
	}
	read := func(f *FSM) (e Queued, ok bool) {
		f.Read(func(st *State) { e, ok = st.Queue["pdf"] })
		return
	}
	a.must(Command{Op: OpQueue, Queue: q("pdf", 1)})
	if e, ok := read(restored(t, a.f)); !ok || e.Position != 1 || e.Index != a.idx || e.SinceUnixMilli != 5 {
		t.Fatalf("restored queue entry %+v (%v)", e, ok)
	}
	a.must(Command{Op: OpQueue, Queue: map[string]Queued{}})
	if _, ok := read(a.f); ok {
		t.Fatal("an empty queue did not clear it")
	}
	a.must(Command{Op: OpQueue, Queue: q("pdf", 1)})
	a.must(Command{Op: OpDecide, Decision: decision(0, "")})
	if _, ok := read(a.f); ok {
		t.Fatal("a decision did not take the pipeline out of the queue")
	}
	if err := a.do(Command{Op: OpQueue, Queue: q("pdf", 1)}); !errors.Is(err, ErrRejected) {
		t.Fatalf("queueing a pipeline with a decision: %v, want rejected", err)
	}
	a.must(Command{Op: OpDeletePipeline, Job: "pdf"})
	a.must(Command{Op: OpRegisterPipeline, Pipeline: batch})
	a.must(Command{Op: OpQueue, Queue: q("pdf", 1)})
	a.must(Command{Op: OpDeletePipeline, Job: "pdf"})
	if _, ok := read(a.f); ok {
		t.Fatal("deleting the pipeline did not take it out of the queue")
	}
}

// TestTrialLifecycle sets, replaces and drops a tuning trial: its epoch is TrialEpochBase
// plus its command's index (a new one per trial, never a rollout's), an operator without
// tunable parameters or an empty config is refused, and deleting the pipeline drops it.
func TestTrialLifecycle(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	p := pipe()
	p.Operators[1].Params = "batch=int[1,64]"
	a.must(Command{Op: OpRegisterPipeline, Pipeline: p})
	if err := a.do(Command{Op: OpSetTrial, Job: "pdf", Operator: "parse", Trial: &Trial{Config: "threads=2"}}); err == nil {
		t.Error("trial of an operator without tunable parameters accepted")
	}
	if err := a.do(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{}}); err == nil {
		t.Error("trial without a config accepted")
	}
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=16"}})
	first := a.idx
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=32", Epoch: 3}})
	var tr Trial
	a.f.Read(func(s *State) { tr, _ = s.Trials["pdf"]["embed"].Slot(0) })
	if tr.Config != "batch=32" || tr.Index != first+1 || tr.Epoch != TrialEpochBase+first+1 || !IsTrialEpoch(tr.Epoch) || IsTrialEpoch(1<<39) {
		t.Errorf("replaced trial %+v: want batch=32 at index %d, epoch base+index (a proposer's epoch ignored)", tr, first+1)
	}
	a.must(Command{Op: OpDropTrial, Job: "pdf", Operator: "embed"})
	a.f.Read(func(s *State) { _, ok := s.Trials["pdf"]; tr.Config = map[bool]string{true: "left"}[ok] })
	if tr.Config != "" {
		t.Error("dropped trial left in the state")
	}
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=16"}})
	a.must(Command{Op: OpDeletePipeline, Job: "pdf"})
	a.f.Read(func(s *State) {
		if len(s.Trials) != 0 {
			t.Errorf("trials %v survive the pipeline's deletion", s.Trials)
		}
	})
}

// TestTrialSlots runs trials of one operator in several slots: each has its own epoch (its
// command's index), replacing one slot leaves the others, a drop naming a slot ends only
// it and a drop naming none ends them all; a slot out of range is refused.
func TestTrialSlots(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	p := pipe()
	p.Operators[1].Params = "batch=int[1,64]"
	a.must(Command{Op: OpRegisterPipeline, Pipeline: p})
	for _, bad := range []int{-1, MaxTrialSlots} {
		if err := a.do(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=8", Slot: bad}}); err == nil {
			t.Errorf("trial in slot %d accepted", bad)
		}
	}
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=8", Slot: 2}})
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=16"}})
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=32", Slot: 1}})
	slots := func() TrialSlots {
		var s TrialSlots
		a.f.Read(func(st *State) { s = slices.Clone(st.Trials["pdf"]["embed"]) })
		return s
	}
	got := slots()
	want := TrialSlots{
		{Config: "batch=16", Epoch: TrialEpochBase + a.idx - 1, Index: a.idx - 1, Slot: 0},
		{Config: "batch=32", Epoch: TrialEpochBase + a.idx, Index: a.idx, Slot: 1},
		{Config: "batch=8", Epoch: TrialEpochBase + a.idx - 2, Index: a.idx - 2, Slot: 2},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("slots %+v, want %+v", got, want)
	}
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=4", Slot: 1}})
	if s1, _ := slots().Slot(1); s1.Config != "batch=4" || s1.Index != a.idx || len(slots()) != 3 {
		t.Errorf("replacing slot 1: %+v", slots())
	}
	a.must(Command{Op: OpDropTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Slot: 2}})
	if got := slots(); len(got) != 2 || got[0].Slot != 0 || got[1].Slot != 1 {
		t.Errorf("after dropping slot 2: %+v", got)
	}
	if g := restored(t, a.f); stateJSON(t, g) != stateJSON(t, a.f) {
		t.Error("slots differ after a snapshot round trip")
	}
	a.must(Command{Op: OpDropTrial, Job: "pdf", Operator: "embed"})
	a.f.Read(func(st *State) {
		if len(st.Trials) != 0 {
			t.Errorf("a drop without a slot left %+v", st.Trials)
		}
	})
}

// TestTrialStateBeforeSlots restores a snapshot and replays commands written before trial
// slots existed: a trial object is the operator's slot 0, a command without a slot sets
// slot 0, and a drop without one ends it.
func TestTrialStateBeforeSlots(t *testing.T) {
	old := `{"trials":{"pdf":{"embed":{"config":"batch=16","epoch":1099511627781,"index":5}}}}`
	f := New(nil)
	if err := f.Restore(io.NopCloser(strings.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	var s TrialSlots
	f.Read(func(st *State) { s = st.Trials["pdf"]["embed"] })
	if want := (TrialSlots{{Config: "batch=16", Epoch: TrialEpochBase + 5, Index: 5}}); !slices.Equal(s, want) {
		t.Fatalf("old trial restored as %+v, want %+v", s, want)
	}

	a := &applier{t: t, f: New(nil)}
	p := pipe()
	p.Operators[1].Params = "batch=int[1,64]"
	a.must(Command{Op: OpRegisterPipeline, Pipeline: p})
	for _, raw := range []string{
		`{"op":"set_trial","job":"pdf","operator":"embed","trial":{"config":"batch=16","epoch":0,"index":0}}`,
		`{"op":"set_trial","job":"pdf","operator":"embed","trial":{"config":"batch=32","epoch":0,"index":0}}`,
	} {
		a.idx++
		if res := a.f.Apply(&raft.Log{Index: a.idx, Type: raft.LogCommand, Data: []byte(raw)}).(Result); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	a.f.Read(func(st *State) { s = st.Trials["pdf"]["embed"] })
	if want := (TrialSlots{{Config: "batch=32", Epoch: TrialEpochBase + a.idx, Index: a.idx}}); !slices.Equal(s, want) {
		t.Fatalf("old commands left %+v, want %+v", s, want)
	}
	a.idx++
	if res := a.f.Apply(&raft.Log{Index: a.idx, Type: raft.LogCommand, Data: []byte(`{"op":"drop_trial","job":"pdf","operator":"embed"}`)}).(Result); res.Err != nil {
		t.Fatal(res.Err)
	}
	a.f.Read(func(st *State) {
		if len(st.Trials) != 0 {
			t.Errorf("an old drop left %+v", st.Trials)
		}
	})
}

// transitioned returns an applier whose pipe() runs its first decision and then one that
// moves cand of embed's instances to the candidate batch=32, both done.
func transitioned(t *testing.T, cand int) *applier {
	t.Helper()
	a := &applier{t: t, f: New(nil)}
	a.must(Command{Op: OpRegisterPipeline, Pipeline: pipe()})
	a.must(Command{Op: OpDecide, Decision: decision(0, "")})
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: StatusDone}})
	a.must(Command{Op: OpSetCandidate, Job: "pdf", Operator: "embed", Candidate: &Candidate{Config: "batch=32", Capacity: 9}})
	a.must(Command{Op: OpDecide, Decision: decision(cand, "batch=32")})
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: StatusDone}})
	return a
}

// TestRevertAbortsATransitionInFlight: a revert to the running config while a transition
// away from it is in flight (the OOM guard, when the config being rolled out fails)
// supersedes the decision being applied, makes the failing config current at its epoch
// and the config it replaced the candidate at the next epoch, with the deployed
// placements swapped; the next decision moves every instance back to it.
func TestRevertAbortsATransitionInFlight(t *testing.T) {
	a := transitioned(t, 1) // embed: one on batch=32, one on batch=8
	a.must(Command{Op: OpDecide, Decision: decisionT(2, 1, "batch=32")})
	applying := a.idx
	if err := a.do(Command{Op: OpSetCandidate, Job: "pdf", Operator: "embed", Candidate: &Candidate{Config: "batch=8", Capacity: 4}}); err == nil {
		t.Fatal("a candidate equal to the running config accepted without Revert")
	}
	a.must(Command{Op: OpSetCandidate, Job: "pdf", Operator: "embed", Candidate: &Candidate{Config: "batch=8", Capacity: 4, Revert: true}})
	var r Rollout
	var pr Progress
	var dep map[string]Placement
	var cand Candidate
	a.f.Read(func(s *State) {
		r, pr, dep, cand = *s.Rollouts["pdf"]["embed"], s.Progress["pdf"], s.Deployed["pdf"]["embed"], s.Candidates["pdf"]["embed"]
	})
	if pr.Decision != applying || pr.Status != StatusFailed || !strings.Contains(pr.Detail, "superseded") {
		t.Errorf("progress %+v: want decision %d failed, superseded by the revert", pr, applying)
	}
	if r.Config != "batch=32" || r.Epoch != 1 || r.CandidateConfig != "batch=8" || r.OnCurrent != 1 || r.OnCandidate != 1 {
		t.Errorf("rollout %+v: want batch=32 current at epoch 1, batch=8 the candidate, one instance on each", r)
	}
	if dep["a"] != (Placement{Current: 1, Candidate: 1}) || cand.Config != "batch=8" || !cand.Revert {
		t.Errorf("deployed %+v, candidate %+v: want the placement swapped and the revert pending", dep, cand)
	}
	back := &Decision{Job: "pdf", Operators: map[string]OpTarget{
		"parse": {Nodes: map[string]Placement{"a": {Current: 2}, "b": {Current: 1}}, Config: "threads=1"},
		"embed": {Nodes: map[string]Placement{"a": {Candidate: 2}}, Config: "batch=32", Epoch: 1, CandidateConfig: "batch=8", Transitions: 1},
	}, Source: "test"}
	a.must(Command{Op: OpDecide, Decision: back})
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: StatusDone}})
	a.f.Read(func(s *State) { r = *s.Rollouts["pdf"]["embed"] })
	if r.Config != "batch=8" || r.Epoch != 2 || r.CandidateConfig != "" || r.OnCurrent != 2 {
		t.Errorf("after the revert: rollout %+v, want batch=8 on both instances at epoch 2", r)
	}
}

// TestFailureAfterAPromotionKeepsThePromotedConfig: once every instance runs a candidate it
// is the current config, in the deployment recorded as stable too, so a decision that
// fails later reverts to instances on the current config (before the fix: 0 current and
// 2 "candidate" instances of no candidate).
func TestFailureAfterAPromotionKeepsThePromotedConfig(t *testing.T) {
	a := transitioned(t, 2) // embed: both on batch=32, promoted
	next := &Decision{Job: "pdf", Operators: map[string]OpTarget{
		"parse": {Nodes: map[string]Placement{"a": {Current: 2}, "b": {Current: 1}}, Config: "threads=1"},
		"embed": {Nodes: map[string]Placement{"a": {Current: 3}}, Config: "batch=32", Epoch: 1},
	}, Source: "test"}
	a.must(Command{Op: OpDecide, Decision: next})
	a.must(Command{Op: OpProgress, Job: "pdf", Progress: &Progress{Decision: a.idx, Status: StatusFailed}})
	var r Rollout
	a.f.Read(func(s *State) { r = *s.Rollouts["pdf"]["embed"] })
	if r.Config != "batch=32" || r.Epoch != 1 || r.CandidateConfig != "" || r.OnCurrent != 2 || r.OnCandidate != 0 {
		t.Errorf("after a failed decision: rollout %+v, want batch=32 at epoch 1 on both instances", r)
	}
}

// TestFailTrial: a failure names the trial by slot and index and marks only it; a failure
// of a trial since replaced in its slot changes nothing; a failure without a reason or
// index, or with an over-long reason, is refused.
func TestFailTrial(t *testing.T) {
	a := &applier{t: t, f: New(nil)}
	p := pipe()
	p.Operators[1].Params = "batch=int[1,64]"
	a.must(Command{Op: OpRegisterPipeline, Pipeline: p})
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=16"}})
	first := a.idx
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=8", Slot: 1}})
	for _, bad := range []*Trial{nil, {Index: first}, {Failed: "exited"}, {Index: first, Failed: strings.Repeat("x", MaxTrialFailureBytes+1)}, {Index: first, Failed: "x", Slot: MaxTrialSlots}} {
		if err := a.do(Command{Op: OpFailTrial, Job: "pdf", Operator: "embed", Trial: bad}); err == nil {
			t.Errorf("failure %+v accepted", bad)
		}
	}
	a.must(Command{Op: OpFailTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Index: first, Failed: "exited twice"}})
	read := func() (Trial, Trial) {
		var s0, s1 Trial
		a.f.Read(func(s *State) { s0, _ = s.Trials["pdf"]["embed"].Slot(0); s1, _ = s.Trials["pdf"]["embed"].Slot(1) })
		return s0, s1
	}
	if s0, s1 := read(); s0.Failed != "exited twice" || s1.Failed != "" {
		t.Fatalf("slot 0 %+v, slot 1 %+v: want only slot 0 failed", s0, s1)
	}
	a.must(Command{Op: OpSetTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Config: "batch=4"}})
	a.must(Command{Op: OpFailTrial, Job: "pdf", Operator: "embed", Trial: &Trial{Index: first, Failed: "late report"}})
	if s0, _ := read(); s0.Config != "batch=4" || s0.Failed != "" {
		t.Fatalf("slot 0 %+v: a failure of the replaced trial marked the new one", s0)
	}
}
