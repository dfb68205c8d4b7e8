package sim

import (
	"context"
	"math"
	"testing"
)

// fixedSched deploys one plan and never changes it.
type fixedSched struct {
	plan  *Plan
	snaps []*Snapshot
}

func (f *fixedSched) Name() string                                     { return "fixed" }
func (f *fixedSched) Init(context.Context, *Env) (*Plan, error)        { return f.plan, nil }
func (f *fixedSched) Observe(s *Snapshot)                              { f.snaps = append(f.snaps, s) }
func (f *fixedSched) Interval() float64                                { return 1e9 }
func (f *fixedSched) Decide(context.Context, *Snapshot) (*Plan, error) { return nil, nil }

// tinyPipeline: source (10 rec/s/inst) -> x2 amplifier (8 rec/s) -> accelerator sink.
func tinyPipeline(records float64, outMB float64, accMem float64) *Pipeline {
	cost := func(c float64) func(Attrs) float64 { return func(Attrs) float64 { return c } }
	return &Pipeline{
		Name: "tiny",
		Ops: []OpSpec{
			{Name: "src", Need: Resources{CPU: 1, MemGB: 1}, ColdStartS: 5, QueueCap: 1e9,
				Model: &CPUModel{Cost: cost(0.1), Out: func(Attrs) float64 { return 1 }}},
			{Name: "amp", Need: Resources{CPU: 1, MemGB: 1}, ColdStartS: 5, QueueCap: 100,
				Model: &CPUModel{Cost: cost(0.125), Amp: func(Attrs) float64 { return 2 }, Out: func(Attrs) float64 { return outMB }}},
			{Name: "sink", Need: Resources{CPU: 1, MemGB: 1, Acc: 1}, Async: true, MaxInFlight: 4, ColdStartS: 5, QueueCap: 50,
				Space: VisionSpace(4),
				Model: &VisionModel{PerItem: func(Attrs) float64 { return 0.05 }, Overhead: 0.01,
					MemPerItem: func(Attrs) float64 { return accMem }, WeightsGB: 1, CV: 0.01}},
		},
		Regimes:   []Regime{{Name: "only", Records: records, Sample: func(RandSource) Attrs { return Attrs{1} }}},
		BatchDocs: 1,
	}
}

func twoNodes() Cluster {
	c := PaperCluster(2)
	for i := range c.Nodes {
		c.Nodes[i].EgressMBps = 50
	}
	return c
}

func runFixed(t *testing.T, p *Pipeline, c Cluster, perNode [][]int, cfg RunConfig) (*Result, *fixedSched) {
	t.Helper()
	s := &fixedSched{plan: PlanFromCounts(perNode)}
	r, err := Run(context.Background(), p, c, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, s
}

func TestDeterministicAndConserving(t *testing.T) {
	p := tinyPipeline(2000, 0.1, 0.1)
	per := [][]int{{1, 1}, {2, 1}, {1, 1}}
	r1, s1 := runFixed(t, p, twoNodes(), per, RunConfig{Seed: 7})
	r2, _ := runFixed(t, p, twoNodes(), per, RunConfig{Seed: 7})
	if !r1.Done {
		t.Fatalf("dataset not finished in %v s", r1.SimSeconds)
	}
	if r1.Completed != r2.Completed || r1.SimSeconds != r2.SimSeconds {
		t.Fatalf("same seed, different runs: %v/%v vs %v/%v", r1.Completed, r1.SimSeconds, r2.Completed, r2.SimSeconds)
	}
	// Every source record completes exactly once (fluid accounting, 1e-6 relative).
	if math.Abs(r1.Completed-2000)/2000 > 1e-6 {
		t.Fatalf("completed %v source records, want 2000", r1.Completed)
	}
	// Bounded queues: never above capacity (plus one tick of rounding).
	for _, s := range s1.snaps {
		for i, o := range s.Ops[1:] {
			if o.Queue > o.QueueCap+1e-6 {
				t.Fatalf("t=%v op %d queue %v above cap %v", s.Time, i+1, o.Queue, o.QueueCap)
			}
		}
	}
}

func TestColdStartAndThroughput(t *testing.T) {
	// Source 2 inst = 20 rec/s, amp 3 inst = 24 rec/s in (48 out), sink 2 inst at batch 4
	// with 4 loader workers: 1/(0.05*1.5/1.25 + 0.01/4) = 16 rec/s each, i.e. 32 sink
	// records/s = 16 source records/s: the sink is the bottleneck.
	p := tinyPipeline(1e9, 0.1, 0.1)
	per := [][]int{{1, 1}, {2, 1}, {1, 1}}
	r, s := runFixed(t, p, twoNodes(), per, RunConfig{Seed: 1, Duration: 600, DisturbProb: -1, NoiseCV: 1e-9})
	// Nothing can complete during the 5 s cold start.
	for _, sn := range s.snaps[:4] {
		if sn.Completed > 0 {
			t.Fatalf("t=%v: completed %v during cold start", sn.Time, sn.Completed)
		}
	}
	// Steady state: 16 source records/s, within 2 %.
	var done float64
	for _, sn := range s.snaps[100:] {
		done += sn.Completed
	}
	rate := done / float64(len(s.snaps[100:]))
	if math.Abs(rate-16)/16 > 0.02 {
		t.Fatalf("steady throughput %.3f, want 16 ± 2%% (result %.3f)", rate, r.Throughput)
	}
}

func TestEgressLimitsCrossNodeFlow(t *testing.T) {
	// amp on node 0 only, sink on node 1 only: every output record (10 MB) crosses the
	// network, and node 0 ships at most 50 MB/s = 5 records/s of sink input.
	p := tinyPipeline(1e9, 10, 0.1)
	per := [][]int{{2, 0}, {3, 0}, {0, 2}}
	_, s := runFixed(t, p, twoNodes(), per, RunConfig{Seed: 1, Duration: 300, DisturbProb: -1, NoiseCV: 1e-9})
	var in float64
	for _, sn := range s.snaps[60:] {
		if sn.EgressMBps[0] > 50+1e-6 {
			t.Fatalf("t=%v: egress %v MB/s above 50", sn.Time, sn.EgressMBps[0])
		}
		in += sn.Ops[2].Arrived
	}
	rate := in / float64(len(s.snaps[60:]))
	if math.Abs(rate-5)/5 > 0.02 {
		t.Fatalf("sink input %.3f rec/s, want 5 ± 2%% (egress-bound)", rate)
	}
	// Co-located, the same deployment is not network-bound.
	per = [][]int{{2, 0}, {3, 0}, {2, 0}}
	_, s = runFixed(t, p, twoNodes(), per, RunConfig{Seed: 1, Duration: 300, DisturbProb: -1, NoiseCV: 1e-9})
	in = 0
	for _, sn := range s.snaps[60:] {
		in += sn.Ops[2].Arrived
	}
	if rate := in / float64(len(s.snaps[60:])); rate < 30 {
		t.Fatalf("co-located sink input %.3f rec/s, want >= 30", rate)
	}
}

func TestOOMRestartsDependOnConfig(t *testing.T) {
	// 20 GB per batched item: batch 4 needs 81 GB > 64 GB -> OOM loop; batch 1 -> 21 GB.
	p := tinyPipeline(1e9, 0.1, 20)
	per := [][]int{{1, 1}, {2, 1}, {1, 1}}
	r, _ := runFixed(t, p, twoNodes(), per, RunConfig{Seed: 3, Duration: 600})
	if r.OOMs < 10 {
		t.Fatalf("batch 4 at 81 GB: %d OOMs, want many", r.OOMs)
	}
	if want := float64(r.OOMs) * 33; math.Abs(r.OOMDowntimeS-want) > 1e-9 {
		t.Fatalf("downtime %v, want %v (33 s per OOM)", r.OOMDowntimeS, want)
	}
	s := &fixedSched{plan: PlanFromCounts(per)}
	s.plan.Ops[2].Config = OpConfig{1, 4}
	s.plan.Ops[2].Transition = TransitionAll
	r, err := Run(context.Background(), p, twoNodes(), s, RunConfig{Seed: 3, Duration: 600})
	if err != nil {
		t.Fatal(err)
	}
	if r.OOMs != 0 {
		t.Fatalf("batch 1 at 21 GB: %d OOMs, want 0", r.OOMs)
	}
}

func TestApplyRespectsNodeCapacity(t *testing.T) {
	p := tinyPipeline(100, 0.1, 0.1)
	e, err := NewEngine(p, twoNodes(), RunConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// 9 accelerator instances on a node with 8 devices: one stays unplaced.
	if err := e.Apply(PlanFromCounts([][]int{{1, 0}, {1, 0}, {9, 0}})); err != nil {
		t.Fatal(err)
	}
	if got := e.ops[2].unplaced; got != 1 {
		t.Fatalf("unplaced %d, want 1", got)
	}
	if got := e.free(0).Acc; got != 0 {
		t.Fatalf("free accelerators %d, want 0", got)
	}
	if err := e.Apply(PlanFromCounts([][]int{{1}, {1}, {1}})); err == nil {
		t.Fatal("plan with the wrong node count accepted")
	}
}

// TestProbeSlots runs BO probes in slots: each non-nil entry of OpPlan.Probes takes one
// production instance onto its configuration, a nil entry or a dropped slot returns the
// instance to the target configuration, and probes dispatched first share the queue (the
// records they claim never exceed what the queue held).
func TestProbeSlots(t *testing.T) {
	for _, tc := range []struct {
		name    string
		srcAmp  int     // source and amplifier instances: how fast the sink is fed
		starved bool    // whether the sink's queue runs dry
		minProc float64 // records per second each probe must measure when fed
	}{{"fed", 8, false, 1}, {"starved", 1, true, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			p := tinyPipeline(1e9, 0.1, 0.1)
			p.Ops[2].QueueCap = 1e6
			e, err := NewEngine(p, twoNodes(), RunConfig{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			plan := PlanFromCounts([][]int{{tc.srcAmp, 0}, {tc.srcAmp, 0}, {2, 2}})
			if err := e.Apply(plan); err != nil {
				t.Fatal(err)
			}
			var s *Snapshot
			steps := func(n int) {
				for range n {
					s = e.step(1)
				}
			}
			steps(60)
			plan.Ops[2].Probes = []OpConfig{{8, 4}, nil, {2, 4}}
			if err := e.Apply(plan); err != nil {
				t.Fatal(err)
			}
			steps(int(e.cfg.OOMRestartS) + 2)
			st := s.Ops[2]
			if len(st.Probes) != 3 || !st.Probes[0].Running || st.Probes[1].Running || !st.Probes[2].Running || st.RunningProbes() != 2 {
				t.Fatalf("probes %+v: want slots 0 and 2 running, slot 1 empty", st.Probes)
			}
			if st.OnTarget != 2 || st.Running != 4 {
				t.Fatalf("on target %d of %d running, want 2 of 4 (probes excluded)", st.OnTarget, st.Running)
			}
			for k := 1; k < 20; k++ {
				steps(1)
				st = s.Ops[2]
				sum := st.Probes[0].Processed + st.Probes[2].Processed
				if sum > st.Processed+1e-9 && tc.starved {
					t.Fatalf("tick %d: probes claim %.2f records, the operator processed %.2f", k, sum, st.Processed)
				}
				if !tc.starved && (st.Probes[0].Processed < tc.minProc || st.Probes[2].Processed < tc.minProc) {
					t.Fatalf("tick %d: fed probes measured %.2f and %.2f records/s", k, st.Probes[0].Processed, st.Probes[2].Processed)
				}
			}
			// Dropping slot 2 returns its instance to the target configuration.
			plan.Ops[2].Probes = plan.Ops[2].Probes[:1]
			if err := e.Apply(plan); err != nil {
				t.Fatal(err)
			}
			steps(int(e.cfg.OOMRestartS) + 2)
			st = s.Ops[2]
			if len(st.Probes) != 1 || !st.Probes[0].Running || st.OnTarget != 3 {
				t.Fatalf("after dropping slot 2: probes %+v, on target %d (want one probe, 3 on target)", st.Probes, st.OnTarget)
			}
		})
	}
}
