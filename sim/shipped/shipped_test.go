package shipped

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/sim/baseline"
	"github.com/trident-sched/trident/strategy/configspace"
)

// The shipped planner, driven on the virtual clock, takes over the submitted PDF job and
// outruns Static's profiled allocation. Static is deterministic; the planner's HiGHS
// solves stop on wall-clock limits, so the bound is loose: the full-size run measures
// 1.34x (docs/benchmarks.md), this 0.3-size one (an hour), where the first minutes weigh
// more, 1.20x; 1.1x leaves room for a loaded machine's shorter solves. At a tenth of the
// size (30 minutes) the cold start still dominates and the two are even.
func TestShippedPlannerOutrunsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates an hour of pipeline time")
	}
	p := sim.PDFPipeline(0.3)
	c := sim.PaperCluster(8)
	s := New(Options{Initial: baseline.SubmittedJob})
	r, err := sim.Run(context.Background(), p, c, s, sim.RunConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sim.Run(context.Background(), p, c, &baseline.Static{}, sim.RunConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("shipped %.3f records/s (%.0f s), static %.3f; %+v", r.Throughput, r.SimSeconds, st.Throughput, s.Stats)
	if !r.Done {
		t.Fatalf("dataset not finished in %.0f s", r.SimSeconds)
	}
	if r.Throughput < 1.1*st.Throughput {
		t.Errorf("shipped planner %.3f records/s, want at least 1.1x Static's %.3f", r.Throughput, st.Throughput)
	}
	if s.Stats.Decisions < 2 || s.Stats.Observations == 0 || s.Stats.Failed != 0 {
		t.Errorf("loop statistics %+v: want several decisions, published observations, no failure", s.Stats)
	}
}

// testScheduler is a Scheduler over a two-operator pipeline on two nodes, "b" tunable,
// with its actuator state set up as Init would, for driving Step by hand.
func testScheduler(t *testing.T, o Options) *Scheduler {
	t.Helper()
	p := &sim.Pipeline{Ops: []sim.OpSpec{{Name: "a"}, {Name: "b", Async: true, Space: sim.LLMSpace(96, 4096)}}}
	s := New(o)
	s.env = &sim.Env{Pipeline: p, Cluster: sim.Cluster{Nodes: []sim.Node{{Name: "n1"}, {Name: "n2"}}}}
	s.nodeIx = map[string]int{"n1": 0, "n2": 1}
	sp := p.Ops[1].Space
	s.slot = []string{"", sp.Default().String()}
	s.deployed = [][]int{{2, 0}, {1, 1}}
	s.applying.unplacedFrom = -1
	return s
}

func step(t *testing.T, s *Scheduler, d fsm.Decision, now float64, ops ...sim.OpStats) planner.StepResult {
	t.Helper()
	s.now = now
	if ops != nil {
		s.last = &sim.Snapshot{Ops: ops}
	}
	res, err := canaryActuator{actuator{s}}.Step(context.Background(), nil, d)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The actuator reports a decision done only once every operator runs its counts with
// nothing starting, hands the engine the decision's version until then (Nomad places
// blocked allocations when room frees), and fails it when instances stay unplaced past
// the progress deadline.
func TestActuatorFollowsDeploymentSemantics(t *testing.T) {
	s := testScheduler(t, Options{ProgressDeadlineS: 100})
	d := fsm.Decision{Index: 7, Operators: map[string]fsm.OpTarget{
		"a": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}}},
		"b": {Nodes: map[string]fsm.Placement{"n1": {Current: 1}, "n2": {Current: 1}}},
	}}
	if got := step(t, s, d, 0).Status; got != fsm.StatusApplying || s.pending == nil || s.pending.Ops[1].PerNode[1] != 1 {
		t.Fatalf("first step: %s, pending %+v; want applying with the decision's counts", got, s.pending)
	}
	s.pending = nil
	if got := step(t, s, d, 10, sim.OpStats{PerNode: []int{2, 0}, Starting: 1}, sim.OpStats{PerNode: []int{1, 1}}).Status; got != fsm.StatusApplying || s.pending == nil {
		t.Errorf("an instance still starting: %s (pending %v), want applying with the version handed again", got, s.pending != nil)
	}
	unplaced := []sim.OpStats{{PerNode: []int{2, 0}}, {PerNode: []int{1, 0}, Unplaced: 1}}
	if got := step(t, s, d, 20, unplaced...).Status; got != fsm.StatusApplying {
		t.Errorf("unplaced for 0 s: %s, want applying", got)
	}
	if got := step(t, s, d, 119, unplaced...).Status; got != fsm.StatusApplying {
		t.Errorf("unplaced for 99 s of a 100 s deadline: %s, want applying", got)
	}
	if got := step(t, s, d, 120, unplaced...).Status; got != fsm.StatusFailed || s.Stats.Failed != 1 {
		t.Errorf("unplaced for 100 s: %s, want failed", got)
	}
	d.Index = 8
	step(t, s, d, 130)
	if got := step(t, s, d, 140, sim.OpStats{PerNode: []int{2, 0}}, sim.OpStats{PerNode: []int{1, 1}}).Status; got != fsm.StatusDone {
		t.Errorf("every count running: %s, want done", got)
	}
}

// A decision moving an instance of a tunable operator to a candidate config starts with
// a canary: only the canary slot changes (the probe on the candidate), Step reports the
// canary and its health, and the final version (the candidate instances on the
// candidate) follows the promotion. A later decision of the same candidate needs no
// canary. A canary that runs out of memory fails its decision at once.
func TestActuatorCanariesCandidates(t *testing.T) {
	s := testScheduler(t, Options{})
	cand := "block_size=32, enable_chunked_prefill=0, max_num_batched_tokens=8192, max_num_seqs=128"
	c, err := s.space(1).ParseConfig(cand)
	if err != nil {
		t.Fatal(err)
	}
	cand = c.String()
	candCfg, err := s.simConfig(1, cand)
	if err != nil {
		t.Fatal(err)
	}
	d := fsm.Decision{Index: 9, Operators: map[string]fsm.OpTarget{
		"a": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}}},
		"b": {CandidateConfig: cand, Transitions: 1, Nodes: map[string]fsm.Placement{"n1": {Candidate: 1}, "n2": {Current: 1}}},
	}}
	res := step(t, s, d, 0)
	if res.Status != fsm.StatusApplying || len(res.Canaries) != 1 || res.Canaries[0].Operator != "b" || res.Canaries[0].Healthy {
		t.Fatalf("canary version: %+v, want applying with b's canary, not healthy yet", res)
	}
	if pl := s.pending.Ops[1]; len(pl.Probes) != 1 || !pl.Probes[0].Equal(candCfg) || pl.Config != nil || pl.PerNode[0] != 1 || pl.PerNode[1] != 1 {
		t.Fatalf("canary version hands %+v, want the deployed counts with one probe on the candidate", pl)
	}
	running := []sim.OpStats{{PerNode: []int{2, 0}}, {PerNode: []int{1, 1}, Probes: []sim.ProbeStats{{Running: true}}}}
	if res := step(t, s, d, 40, running...); !res.Canaries[0].Healthy || res.Canaries[0].Promoted {
		t.Fatalf("running canary: %+v, want healthy, not promoted", res.Canaries)
	}
	if err := (canaryActuator{actuator{s}}).PromoteCanary(context.Background(), Job, "9"); err != nil {
		t.Fatal(err)
	}
	res = step(t, s, d, 50, running...)
	if res.Status != fsm.StatusApplying || len(res.Canaries) != 0 {
		t.Fatalf("after the promotion: %+v, want the final version applying", res)
	}
	if pl := s.pending.Ops[1]; !pl.Config.Equal(candCfg) || pl.Transition != 1 || len(pl.Probes) != 0 {
		t.Fatalf("final version hands %+v, want the candidate as target, one transition, no probe", pl)
	}
	if s.slot[1] != cand {
		t.Errorf("canary slot runs %q after the promotion, want the candidate", s.slot[1])
	}
	if res := step(t, s, d, 90, sim.OpStats{PerNode: []int{2, 0}}, sim.OpStats{PerNode: []int{1, 1}, OnTarget: 1}); res.Status != fsm.StatusDone {
		t.Fatalf("candidate instance running: %+v, want done", res)
	}
	d.Index = 10
	if res := step(t, s, d, 100); len(res.Canaries) != 0 || len(s.applying.canaries) != 0 || res.Status != fsm.StatusDone {
		t.Errorf("the slot already runs the candidate: %+v, want no canary (and done: it runs)", res)
	}
	other := c.Clone()
	other["max_num_seqs"] = configspace.Num(256)
	d.Index = 11
	d.Operators["b"] = fsm.OpTarget{CandidateConfig: other.String(), Transitions: 1, Nodes: d.Operators["b"].Nodes}
	step(t, s, d, 110)
	oom := []sim.OpStats{{PerNode: []int{2, 0}}, {PerNode: []int{1, 1}, Probes: []sim.ProbeStats{{OOM: true}}}}
	if res := step(t, s, d, 120, oom...); res.Status != fsm.StatusFailed || s.pending.Ops[1].Probes != nil {
		t.Errorf("canary OOM: %+v, want failed with the stable version handed back", res)
	}
}

// A trial runs on its operator's probe slot: with no new version the engine is handed the
// last version with the probe added (no transition), a canary takes the slot while its
// decision is in the canary phase and gives it back after, and an ended trial ends the
// probe.
func TestActuatorRunsTrialsOnTheProbeSlot(t *testing.T) {
	s := testScheduler(t, Options{})
	s.handed = sim.PlanFromCounts(s.deployed)
	trial := "block_size=16, enable_chunked_prefill=1, max_num_batched_tokens=4096, max_num_seqs=32"
	c, err := s.space(1).ParseConfig(trial)
	if err != nil {
		t.Fatal(err)
	}
	trialCfg, err := s.simConfig(1, c.String())
	if err != nil {
		t.Fatal(err)
	}
	a := actuator{s}
	if err := a.SetTrials(context.Background(), Job, map[string]fsm.TrialSlots{"b": {{Config: c.String(), Epoch: fsm.TrialEpochBase + 5}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetTrials(context.Background(), Job, map[string]fsm.TrialSlots{"a": {{Config: "x"}}}); err == nil {
		t.Error("a trial of an operator without a parameter space accepted")
	}
	if err := a.SetTrials(context.Background(), Job, map[string]fsm.TrialSlots{"b": {{Config: c.String(), Epoch: fsm.TrialEpochBase + 5}}}); err != nil {
		t.Fatal(err)
	}
	pl := s.probed(nil)
	if pl == nil || len(pl.Ops[1].Probes) != 1 || !pl.Ops[1].Probes[0].Equal(trialCfg) || pl.Ops[1].Config != nil || pl.Ops[1].Transition != 0 || len(pl.Ops[0].Probes) != 0 {
		t.Fatalf("trial version %+v: want the last counts, b's probe on the trial, no transition", pl)
	}
	if again := s.probed(nil); again != nil {
		t.Errorf("probes unchanged, yet a version handed again: %+v", again)
	}
	cand := "block_size=32, enable_chunked_prefill=0, max_num_batched_tokens=8192, max_num_seqs=128"
	cc, _ := s.space(1).ParseConfig(cand)
	candCfg, _ := s.simConfig(1, cc.String())
	d := fsm.Decision{Index: 9, Operators: map[string]fsm.OpTarget{
		"a": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}}},
		"b": {CandidateConfig: cc.String(), Transitions: 1, Nodes: map[string]fsm.Placement{"n1": {Candidate: 1}, "n2": {Current: 1}}},
	}}
	step(t, s, d, 0)
	if pl := s.probed(s.pending); !pl.Ops[1].Probes[0].Equal(candCfg) {
		t.Fatalf("canary phase hands probe %v, want the canary's config", pl.Ops[1].Probes)
	}
	if err := (canaryActuator{actuator{s}}).PromoteCanary(context.Background(), Job, "9"); err != nil {
		t.Fatal(err)
	}
	step(t, s, d, 50, sim.OpStats{PerNode: []int{2, 0}}, sim.OpStats{PerNode: []int{1, 1}, Probes: []sim.ProbeStats{{Running: true}}})
	if pl := s.probed(s.pending); len(pl.Ops[1].Probes) != 1 || !pl.Ops[1].Probes[0].Equal(trialCfg) {
		t.Fatalf("after the promotion the probe runs %v, want the trial back", pl.Ops[1].Probes)
	}
	if err := a.SetTrials(context.Background(), Job, nil); err != nil {
		t.Fatal(err)
	}
	if pl := s.probed(nil); pl == nil || len(pl.Ops[1].Probes) != 0 {
		t.Errorf("ended trial: version %+v, want one without probes", pl)
	}
}

// A decision whose candidate instances are OOM-killed fails, as Nomad fails the deployment
// and auto-reverts the job: the engine is handed the stable version with every instance
// back on the running config. A candidate that ran already (NoCanary: measured on a
// trial, or a revert) starts without a canary.
func TestActuatorRevertsOOMKilledCandidates(t *testing.T) {
	s := testScheduler(t, Options{})
	sp := s.space(1)
	cand := "block_size=32, enable_chunked_prefill=0, max_num_batched_tokens=8192, max_num_seqs=512"
	cc, err := sp.ParseConfig(cand)
	if err != nil {
		t.Fatal(err)
	}
	candCfg, _ := s.simConfig(1, cc.String())
	running := sp.Default().String()
	runCfg, _ := s.simConfig(1, running)
	d := fsm.Decision{Index: 12, Operators: map[string]fsm.OpTarget{
		"a": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}}},
		"b": {Config: running, CandidateConfig: cc.String(), Transitions: 1, NoCanary: true, Nodes: map[string]fsm.Placement{"n1": {Candidate: 1}, "n2": {Current: 1}}},
	}}
	res := step(t, s, d, 0)
	if len(res.Canaries) != 0 || s.pending == nil || !s.pending.Ops[1].Config.Equal(candCfg) {
		t.Fatalf("trialled candidate: %+v, pending %+v; want its final version at once, no canary", res, s.pending)
	}
	oom := []sim.OpStats{{PerNode: []int{2, 0}}, {PerNode: []int{1, 1}, Restarting: 1,
		Configs: []sim.ConfigStats{{Config: runCfg, Running: 1}, {Config: candCfg, OOMs: 1}}}}
	res = step(t, s, d, 30, oom...)
	if res.Status != fsm.StatusFailed {
		t.Fatalf("candidate OOM-killed: %+v, want failed", res)
	}
	if pl := s.pending.Ops[1]; !pl.Config.Equal(runCfg) || pl.Transition != sim.TransitionAll {
		t.Errorf("after the OOM the engine is handed %+v, want the running config back on every instance", pl)
	}
}

// An allocation restarting in place (a running instance's OOM restart) does not hold a
// deployment, as in Nomad; a deployment in which no instance starts running within the
// progress deadline fails.
func TestActuatorProgressDeadline(t *testing.T) {
	s := testScheduler(t, Options{ProgressDeadlineS: 100})
	d := fsm.Decision{Index: 7, Operators: map[string]fsm.OpTarget{
		"a": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}}},
		"b": {Nodes: map[string]fsm.Placement{"n1": {Current: 1}, "n2": {Current: 1}}},
	}}
	step(t, s, d, 0)
	if got := step(t, s, d, 10, sim.OpStats{PerNode: []int{2, 0}, Running: 1, Restarting: 1}, sim.OpStats{PerNode: []int{1, 1}, Running: 2}).Status; got != fsm.StatusDone {
		t.Errorf("counts placed, one instance restarting in place: %s, want done", got)
	}
	d.Index = 8
	d.Operators["a"] = fsm.OpTarget{Nodes: map[string]fsm.Placement{"n1": {Current: 3}}}
	starting := []sim.OpStats{{PerNode: []int{3, 0}, Running: 2, Starting: 1}, {PerNode: []int{1, 1}, Running: 2}}
	step(t, s, d, 20, starting...)
	if got := step(t, s, d, 119, starting...).Status; got != fsm.StatusApplying {
		t.Errorf("starting for 99 s of a 100 s deadline: %s, want applying", got)
	}
	if got := step(t, s, d, 120, starting...).Status; got != fsm.StatusFailed {
		t.Errorf("starting for 100 s: %s, want failed", got)
	}
}

// A transition that stops progressing fails its progress deadline and, as Nomad's
// auto_revert does, reverts the job to its stable version: the engine is handed the
// deployed counts with every instance back on the running config, so no instance stays
// on a candidate that no decision holds any more.
func TestProgressDeadlineRevertsToTheStableVersion(t *testing.T) {
	s := testScheduler(t, Options{ProgressDeadlineS: 100})
	sp := s.space(1)
	cc, err := sp.ParseConfig("block_size=32, enable_chunked_prefill=0, max_num_batched_tokens=8192, max_num_seqs=512")
	if err != nil {
		t.Fatal(err)
	}
	running := sp.Default().String()
	runCfg, _ := s.simConfig(1, running)
	d := fsm.Decision{Index: 13, Operators: map[string]fsm.OpTarget{
		"a": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}}},
		"b": {Config: running, CandidateConfig: cc.String(), Transitions: 2, NoCanary: true, Nodes: map[string]fsm.Placement{"n1": {Candidate: 1}, "n2": {Candidate: 1}}},
	}}
	step(t, s, d, 0)
	stuck := []sim.OpStats{{PerNode: []int{2, 0}, Running: 2, RunningOnTarget: 2}, {PerNode: []int{1, 1}, Running: 1, Starting: 1, OnTarget: 1}}
	step(t, s, d, 10, stuck...)
	res := step(t, s, d, 110, stuck...)
	if res.Status != fsm.StatusFailed || !strings.Contains(res.Detail, "reverted to its stable version") {
		t.Fatalf("no progress for 100 s: %+v, want failed and reverted", res)
	}
	pl := s.pending
	if !pl.Ops[1].Config.Equal(runCfg) || pl.Ops[1].Transition != sim.TransitionAll {
		t.Errorf("after the failure the engine is handed %+v, want the running config back on every instance", pl.Ops[1])
	}
	if !slices.Equal(pl.Ops[1].PerNode, s.deployed[1]) || !slices.Equal(pl.Ops[0].PerNode, s.deployed[0]) {
		t.Errorf("after the failure the engine is handed counts %v / %v, want the deployed %v", pl.Ops[0].PerNode, pl.Ops[1].PerNode, s.deployed)
	}
}

// A config transition replaces instances: the number running stays the same while it
// progresses. As in Nomad, each instance that becomes healthy on the decision's config
// restarts the progress deadline, so a rollout slower than the deadline as a whole does
// not fail while it progresses; once it stops progressing it fails.
func TestProgressDeadlineRestartsOnEachHealthyInstance(t *testing.T) {
	s := testScheduler(t, Options{ProgressDeadlineS: 100})
	d := fsm.Decision{Index: 9, Operators: map[string]fsm.OpTarget{
		"a": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}}},
		"b": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}, "n2": {Current: 2}}},
	}}
	step(t, s, d, 0)
	// b moves 4 instances to a new config one at a time, 80 s each: 320 s in all, four
	// running throughout.
	for k := 0; k < 4; k++ {
		now := float64(80 * (k + 1))
		b := sim.OpStats{PerNode: []int{2, 2}, Running: 3, Starting: 1, OnTarget: k + 1, RunningOnTarget: k}
		if got := step(t, s, d, now, sim.OpStats{PerNode: []int{2, 0}, Running: 2, RunningOnTarget: 2}, b).Status; got != fsm.StatusApplying {
			t.Fatalf("at %.0f s, %d of 4 replaced: %s, want applying (each healthy instance restarts the deadline)", now, k, got)
		}
	}
	stalled := []sim.OpStats{{PerNode: []int{2, 0}, Running: 2, RunningOnTarget: 2}, {PerNode: []int{2, 2}, Running: 3, Starting: 1, OnTarget: 4, RunningOnTarget: 3}}
	if got := step(t, s, d, 330, stalled...).Status; got != fsm.StatusApplying {
		t.Errorf("third instance healthy at 330 s: %s, want applying", got)
	}
	if got := step(t, s, d, 430, stalled...).Status; got != fsm.StatusFailed {
		t.Errorf("no instance healthy for 100 s: %s, want failed", got)
	}
}

// Trials in several slots run on the engine's probe slots of the same index, each
// measured under its own instance key and epoch; ending one slot's trial empties only that
// probe slot.
func TestActuatorRunsTrialSlotsOnProbeSlots(t *testing.T) {
	s := testScheduler(t, Options{})
	s.handed = sim.PlanFromCounts(s.deployed)
	cfgs := make([]sim.OpConfig, 2)
	strs := []string{
		"block_size=16, enable_chunked_prefill=1, max_num_batched_tokens=4096, max_num_seqs=32",
		"block_size=32, enable_chunked_prefill=0, max_num_batched_tokens=8192, max_num_seqs=128",
	}
	for k, str := range strs {
		c, err := s.space(1).ParseConfig(str)
		if err != nil {
			t.Fatal(err)
		}
		strs[k] = c.String()
		if cfgs[k], err = s.simConfig(1, strs[k]); err != nil {
			t.Fatal(err)
		}
	}
	a := actuator{s}
	if a.TrialSlots() < 3 {
		t.Fatalf("TrialSlots() = %d, want several", a.TrialSlots())
	}
	e0, e2 := fsm.TrialEpochBase+5, fsm.TrialEpochBase+6
	if err := a.SetTrials(context.Background(), Job, map[string]fsm.TrialSlots{"b": {{Config: strs[0], Epoch: e0}, {Config: strs[1], Epoch: e2, Slot: 2}}}); err != nil {
		t.Fatal(err)
	}
	pl := s.probed(nil)
	if pl == nil || len(pl.Ops[1].Probes) != 3 || !pl.Ops[1].Probes[0].Equal(cfgs[0]) || pl.Ops[1].Probes[1] != nil || !pl.Ops[1].Probes[2].Equal(cfgs[1]) || len(pl.Ops[0].Probes) != 0 {
		t.Fatalf("probes %v: want slot 0 and slot 2 on their trials, slot 1 empty", pl.Ops[1].Probes)
	}
	s.win = make([]opWindow, 2)
	s.Observe(&sim.Snapshot{Ops: []sim.OpStats{{}, {Probes: []sim.ProbeStats{{Running: true, Processed: 5, BusySec: 1}, {}, {Running: true, Processed: 7, BusySec: 1}}}}})
	w := s.win[1].insts
	k0, k2 := fmt.Sprintf("trial:%d", e0), fmt.Sprintf("trial:%d", e2)
	if len(w) != 2 || w[k0] == nil || w[k2] == nil || w[k0].processed != 5 || w[k2].processed != 7 || w[k0].trial.epoch != e0 || w[k2].trial.epoch != e2 {
		t.Fatalf("instance windows %v: want %s with 5 records and %s with 7, each its own trial", w, k0, k2)
	}
	if err := a.SetTrials(context.Background(), Job, map[string]fsm.TrialSlots{"b": {{Config: strs[1], Epoch: e2, Slot: 2}}}); err != nil {
		t.Fatal(err)
	}
	if pl := s.probed(nil); pl == nil || len(pl.Ops[1].Probes) != 3 || pl.Ops[1].Probes[0] != nil || !pl.Ops[1].Probes[2].Equal(cfgs[1]) {
		t.Errorf("after ending slot 0: probes %v, want slot 2 only", pl.Ops[1].Probes)
	}
}

// TestEngineGaugesCountTheEngine runs the video pipeline for twenty minutes and reads the
// captioning engine's gauges in the last scrape as the feed does: its admission limit is
// the config's max_num_seqs (not the records an instance may hold, 4096), it never runs
// more requests than that, and the requests beyond it wait, as vLLM's running and waiting
// gauges count them. The old scrape counted every record in flight as running and none
// waiting, and the observation layer took the saturated engine for a starved one.
func TestEngineGaugesCountTheEngine(t *testing.T) {
	p := sim.VideoPipeline(0.2)
	s := New(Options{Initial: baseline.SubmittedJob})
	if _, err := sim.Run(context.Background(), p, sim.PaperCluster(8), s, sim.RunConfig{Seed: 1, Duration: 1200}); err != nil {
		t.Fatal(err)
	}
	i := p.OpIndex("caption")
	spec := &p.Ops[i]
	seen := 0
	for id, m := range s.scrape[i].Instances {
		if !m.EngineReported {
			t.Fatalf("%s: engine gauges not reported", id)
		}
		// a tuned config may run by now: any max_num_seqs of the space
		lo, hi := spec.Space.Params[sim.LLMMaxNumSeqs].Min, spec.Space.Params[sim.LLMMaxNumSeqs].Max
		if m.AdmissionLimit < lo || m.AdmissionLimit > hi {
			t.Errorf("%s: admission limit %v, want a max_num_seqs in [%v, %v]", id, m.AdmissionLimit, lo, hi)
		}
		if m.Running > m.AdmissionLimit || m.Running < 0 || m.Waiting < 0 {
			t.Errorf("%s: running %v, waiting %v with limit %v", id, m.Running, m.Waiting, m.AdmissionLimit)
		}
		seen++
	}
	if seen == 0 {
		t.Fatal("no caption instance in the last scrape")
	}
}
