package shipped

import (
	"context"
	"testing"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/sim/baseline"
)

// In the shared layers a decision only decides configs: the actuator reports it done at
// once, and the baseline is handed the candidate config on every instance (one
// all-at-once transition, once) and the trial on the probe slot at every decision.
func TestSharedHandsDecidedConfigsAndTrials(t *testing.T) {
	s := testScheduler(t, Options{})
	s.advisor = true
	s.advice = make([]sim.OpConfig, 2)
	h := &Shared{s: s, applied: make([]sim.OpConfig, 2), probes: make([][]sim.OpConfig, 2)}
	cand, err := s.space(1).ParseConfig("block_size=32, enable_chunked_prefill=0, max_num_batched_tokens=8192, max_num_seqs=128")
	if err != nil {
		t.Fatal(err)
	}
	candCfg, _ := s.simConfig(1, cand.String())
	trial, _ := s.space(1).ParseConfig("block_size=16, enable_chunked_prefill=1, max_num_batched_tokens=4096, max_num_seqs=32")
	trialCfg, _ := s.simConfig(1, trial.String())

	pl := sim.PlanFromCounts([][]int{{2, 0}, {1, 1}})
	if h.Apply(context.Background(), nil, pl) || pl.Ops[1].Config != nil || len(pl.Ops[1].Probes) != 0 {
		t.Fatalf("nothing decided, yet %+v reported as a change", pl)
	}
	d := fsm.Decision{Index: 4, Operators: map[string]fsm.OpTarget{
		"a": {Nodes: map[string]fsm.Placement{"n1": {Current: 2}}},
		"b": {CandidateConfig: cand.String(), Transitions: 1, Nodes: map[string]fsm.Placement{"n1": {Candidate: 1}, "n2": {Current: 1}}},
	}}
	if res := step(t, s, d, 10); res.Status != fsm.StatusDone {
		t.Fatalf("shared-layers decision: %+v, want done at once", res)
	}
	if s.pending != nil {
		t.Errorf("shared-layers decision handed the engine a version %+v (the baseline hands them)", s.pending)
	}
	if err := (actuator{s}).SetTrials(context.Background(), Job, map[string]fsm.TrialSlots{"b": {{Config: trial.String(), Epoch: fsm.TrialEpochBase + 1}}}); err != nil {
		t.Fatal(err)
	}
	pl = sim.PlanFromCounts([][]int{{2, 0}, {2, 1}})
	if !h.Apply(context.Background(), nil, pl) {
		t.Fatal("a decided config and a trial: want a change")
	}
	if !pl.Ops[1].Config.Equal(candCfg) || pl.Ops[1].Transition != sim.TransitionAll || len(pl.Ops[1].Probes) != 1 || !pl.Ops[1].Probes[0].Equal(trialCfg) {
		t.Fatalf("plan %+v: want b on the candidate all at once and its trial probe", pl.Ops[1])
	}
	if pl.Ops[0].Config != nil || len(pl.Ops[0].Probes) != 0 {
		t.Errorf("operator a without a decision or trial changed: %+v", pl.Ops[0])
	}
	pl = sim.PlanFromCounts([][]int{{2, 0}, {2, 1}})
	if h.Apply(context.Background(), nil, pl) || pl.Ops[1].Config != nil || len(pl.Ops[1].Probes) != 1 {
		t.Fatalf("nothing new: plan %+v, want no change, the probe kept on the version", pl.Ops[1])
	}
}

// DS2 over the shipped layers runs the PDF pipeline to its end: the feed's estimates
// size its operators, trials run on probes, and the planner's server is closed with the
// run. 20 minutes of pipeline time at a tenth of the dataset.
func TestDS2OverSharedLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates the PDF pipeline")
	}
	h := NewShared(Options{})
	d := &baseline.DS2{Capacity: h, Advisor: h, Label: "ds2+shared"}
	r, err := sim.Run(context.Background(), sim.PDFPipeline(0.1), sim.PaperCluster(8), d, sim.RunConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ds2+shared %.3f records/s in %.0f s, %+v", r.Throughput, r.SimSeconds, h.s.Stats)
	if !r.Done {
		t.Fatalf("dataset not finished in %.0f s", r.SimSeconds)
	}
	if h.s.Stats.Rounds == 0 || h.s.Stats.Observations == 0 {
		t.Errorf("shared layers: %+v, want feed rounds that published estimates", h.s.Stats)
	}
	if _, ok := h.PerInstance(0, nil); !ok {
		t.Errorf("no estimate of %s after the run", sim.PDFPipeline(0.1).Ops[0].Name)
	}
	if h.s.cancel != nil {
		t.Error("the run did not close the shared layers' planner")
	}
}
