package tridentsched

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/trident-sched/trident/apm/observe"
	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/sim/baseline"
	"github.com/trident-sched/trident/strategy/bo"
	"github.com/trident-sched/trident/strategy/cluster"
	"github.com/trident-sched/trident/strategy/configspace"
	"github.com/trident-sched/trident/strategy/milp"
)

// A short video run exercises all three layers: observation samples, BO probes and MILP
// rounds. With the greedy MILP solver (HiGHS stops on wall-clock limits) it is
// deterministic.
func TestTridentClosesTheLoop(t *testing.T) {
	p := sim.VideoPipeline(0.01)
	run := func() (*sim.Result, *Trident) {
		tr := New(Options{Seed: 3, Solver: milp.Greedy{}})
		r, err := sim.Run(context.Background(), p, sim.PaperCluster(8), tr, sim.RunConfig{Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return r, tr
	}
	r1, tr := run()
	r2, _ := run()
	if !r1.Done {
		t.Fatalf("dataset not finished after %.0f s", r1.SimSeconds)
	}
	if r1.SimSeconds != r2.SimSeconds || r1.Completed != r2.Completed {
		t.Fatalf("same seed, different runs: %v vs %v s", r1.SimSeconds, r2.SimSeconds)
	}
	if tr.Stats.Rounds == 0 || tr.Stats.Invocations < tr.Stats.Rounds {
		t.Fatalf("layer statistics not recorded: %+v", tr.Stats)
	}
	// The MILP must move away from the even initial split: the accelerator operators end
	// with different instance counts.
	var counts []int
	for i, op := range p.Ops {
		if op.Need.Acc > 0 {
			n := 0
			for _, k := range r1.Ops[i].FinalPerNode {
				n += k
			}
			counts = append(counts, n)
		}
	}
	if counts[0] == counts[1] && counts[1] == counts[2] {
		t.Fatalf("accelerator operators still evenly split: %v", counts)
	}
}

func TestSpaceConversionRoundTrips(t *testing.T) {
	s := sim.LLMSpace(64, 4096)
	cs, err := toSpace(s)
	if err != nil {
		t.Fatal(err)
	}
	def := fromConfig(s, cs.Default())
	if !def.Equal(s.Default()) {
		t.Fatalf("default %v, want %v", def, s.Default())
	}
}

// A regime shift in the middle of a tuning session parks the session: its trials must not
// measure the new workload. It resumes, with its evaluations and its interrupted trial,
// when its cluster is dominant again; another cluster starts its own session.
func TestShiftParksTuningSession(t *testing.T) {
	cl, err := cluster.New(1, cluster.Options{Scale: []float64{1}, WarmUp: 1})
	if err != nil {
		t.Fatal(err)
	}
	feed := func(x float64, n int) int {
		id := -1
		for range n {
			ev, err := cl.Observe([]float64{x})
			if err != nil {
				t.Fatal(err)
			}
			id = ev.Cluster
		}
		return id
	}
	a, b := feed(1, 50), feed(100, 50)
	if a == b {
		t.Fatalf("one cluster for two workloads (%d)", a)
	}
	spec := &sim.OpSpec{Name: "ocr"}
	o := &opState{spec: spec, cl: cl, cands: map[int]candidate{}, parked: map[int]*tuning{}, dominant: a}
	cfg8, cfg16 := configspace.Config{"batch": configspace.Num(8)}, configspace.Config{"batch": configspace.Num(16)}
	o.tune = &tuning{cluster: a, evals: 5, trials: []*trial{
		{cfg: cfg8, measured: 30, done: 120, peak: 40}, nil, {cfg: cfg16, measured: 10, done: 50, peak: 45, oom: true}}}
	tr := &Trident{opt: Options{Logger: slog.New(slog.DiscardHandler)}, ops: []*opState{o}, ds2: []*observe.DS2{{}}, layer: observe.NewLayer(nil)}
	if err := tr.layer.Register("ocr", observe.OperatorSpec{Features: []string{"x"}}); err != nil {
		t.Fatal(err)
	}

	tr.shift(0, cluster.Shift{From: a, To: b}, 100)
	if o.tune != nil || tr.Parked != 1 || o.dominant != b {
		t.Fatalf("after the shift: tune %v, parked %d, dominant %d (want nil, 1, %d)", o.tune, tr.Parked, o.dominant, b)
	}
	if o.resumeParked(b) {
		t.Fatal("cluster b resumed a's session")
	}
	if !o.resumeParked(a) {
		t.Fatal("a's session was not resumed")
	}
	tu := o.tune
	if tu.evals != 5 || len(tu.trials) != 3 || tu.trials[1] != nil || tu.trials[0].cfg["batch"] != cfg8["batch"] || tu.trials[2].cfg["batch"] != cfg16["batch"] {
		t.Fatalf("resumed session %+v: want 5 evaluations and the same trials in their slots", *tu)
	}
	for _, k := range []int{0, 2} {
		if tr := tu.trials[k]; tr.measured != 0 || tr.done != 0 || tr.peak != 0 || tr.oom {
			t.Fatalf("resumed trial %d %+v: want its measurement reset", k, *tr)
		}
	}
	if len(o.parked) != 0 {
		t.Fatalf("%d sessions still parked", len(o.parked))
	}
	// A shift to the session's own cluster (e.g. back from a transient one) keeps it.
	tr.shift(0, cluster.Shift{From: b, To: a}, 200)
	if o.tune != tu || tr.Parked != 1 {
		t.Fatal("a shift to the session's own cluster parked it")
	}
	// A parked session whose cluster fades away is dropped.
	tr.shift(0, cluster.Shift{From: a, To: b}, 300)
	feed(100, 1000)
	if _, ok := cl.Cluster(a); ok {
		t.Fatal("cluster a did not fade: the scenario tests nothing")
	}
	o.pruneParked()
	if len(o.parked) != 0 {
		t.Fatalf("%d sessions of faded clusters still parked", len(o.parked))
	}
}

// With Options.Initial, Trident takes over the given deployment (the planner takes over a
// Nomad job as submitted) instead of the even split it starts from knowing nothing.
func TestInitialDeploymentIsTakenOver(t *testing.T) {
	p, c := sim.VideoPipeline(0.01), sim.PaperCluster(8)
	// The profiler draws its sample from its own seeded stream: a fresh one per call.
	env := func() *sim.Env { return &sim.Env{Cluster: c, Pipeline: p, Tick: 1, Profiler: sim.NewProfiler(p, c, 1)} }
	want, err := baseline.SubmittedJob(env())
	if err != nil {
		t.Fatal(err)
	}
	got, err := New(Options{Initial: baseline.SubmittedJob}).Init(context.Background(), env())
	if err != nil {
		t.Fatal(err)
	}
	even, err := New(Options{}).Init(context.Background(), env())
	if err != nil {
		t.Fatal(err)
	}
	differs := false
	for i := range want {
		if !slices.Equal(got.Ops[i].PerNode, want[i]) {
			t.Fatalf("%s: initial placement %v, want the submitted job's %v", p.Ops[i].Name, got.Ops[i].PerNode, want[i])
		}
		differs = differs || !slices.Equal(even.Ops[i].PerNode, want[i])
	}
	if !differs {
		t.Fatal("the submitted job equals the even split: the test cannot tell them apart")
	}
}

// probeWatch records, per operator, the most probes running at once and the fewest
// production instances left beside running probes.
type probeWatch struct {
	*Trident
	maxProbes, minProd []int
}

func (w *probeWatch) Observe(s *sim.Snapshot) {
	if w.maxProbes == nil {
		w.maxProbes, w.minProd = make([]int, len(s.Ops)), make([]int, len(s.Ops))
		for i := range w.minProd {
			w.minProd[i] = 1 << 30
		}
	}
	for i, st := range s.Ops {
		if n := st.RunningProbes(); n > 0 {
			w.maxProbes[i] = max(w.maxProbes[i], n)
			w.minProd[i] = min(w.minProd[i], st.Running+st.Starting+st.Restarting-n)
		}
	}
	w.Trident.Observe(s)
}

// Parallel trials: a tuning session measures up to ParallelTrials configurations at once
// on separate probe instances, never leaving an operator fewer than two production
// instances; with ParallelTrials 1 it measures one at a time.
func TestParallelTrialsRunTogether(t *testing.T) {
	p := sim.VideoPipeline(0.01)
	for _, par := range []int{1, 4} {
		w := &probeWatch{Trident: New(Options{Seed: 3, Solver: milp.Greedy{}, ParallelTrials: par})}
		if _, err := sim.Run(context.Background(), p, sim.PaperCluster(8), w, sim.RunConfig{Seed: 3}); err != nil {
			t.Fatal(err)
		}
		most := 0
		for i, n := range w.maxProbes {
			most = max(most, n)
			if n > 0 && w.minProd[i] < 2 {
				t.Errorf("par %d: %s ran probes with %d production instances", par, p.Ops[i].Name, w.minProd[i])
			}
		}
		if most != par {
			t.Errorf("par %d: at most %d probes ran at once (per operator %v), want %d", par, most, w.maxProbes, par)
		}
	}
}

// stallingSolver moves one instance of each operator's first transition and then neither
// continues it nor rescales the operator, as a MILP does once the bottleneck moves
// elsewhere.
type stallingSolver struct {
	inner   milp.Solver
	started map[int]bool
}

func (s *stallingSolver) Solve(ctx context.Context, p *milp.Problem, o milp.Options) (*milp.Solution, error) {
	sol, err := s.inner.Solve(ctx, p, o)
	if err != nil {
		return nil, err
	}
	for i, k := range sol.Transitions {
		switch {
		case s.started[i]:
			// Stalled: no transition, and no rescaling that could stop the instances
			// left on the old configuration.
			sol.Transitions[i] = 0
			sol.PerNode[i] = append([]milp.Placement(nil), p.Current[i]...)
		case k > 0:
			s.started[i] = true
			sol.Transitions[i] = 1
		}
	}
	return sol, nil
}

// mixedWatch records, per operator, the longest stretch of simulated seconds during which
// a committed transition left it running two configurations.
type mixedWatch struct {
	*Trident
	since, longest []float64
}

func (w *mixedWatch) Observe(s *sim.Snapshot) {
	if w.since == nil {
		w.since, w.longest = make([]float64, len(s.Ops)), make([]float64, len(s.Ops))
	}
	for i, st := range s.Ops {
		o := w.ops[i]
		if o.committed && o.candidate != nil && st.OnTarget < st.Running+st.Starting+st.Restarting-st.RunningProbes() {
			if w.since[i] == 0 {
				w.since[i] = s.Time
			}
			w.longest[i] = max(w.longest[i], s.Time-w.since[i])
		} else {
			w.since[i] = 0
		}
	}
	w.Trident.Observe(s)
}

// A committed transition that the MILP stops halfway proceeds one rolling batch per round
// (25 % of the instances), so it ends within five rounds plus restarts; left where the
// MILP stopped it, the operator stays on two configurations far longer (in this 40-minute
// run, until a regime shift or the end).
func TestStalledTransitionCompletes(t *testing.T) {
	p := sim.VideoPipeline(0.05)
	longest := func(noTail bool) (float64, int) {
		w := &mixedWatch{Trident: New(Options{Seed: 3, NoTailCompletion: noTail,
			Solver: &stallingSolver{inner: milp.Greedy{}, started: map[int]bool{}}})}
		if _, err := sim.Run(context.Background(), p, sim.PaperCluster(8), w, sim.RunConfig{Seed: 3, Duration: 2400, Cycle: true}); err != nil {
			t.Fatal(err)
		}
		return slices.Max(w.longest), w.TailBatches
	}
	with, batches := longest(false)
	without, _ := longest(true)
	t.Logf("longest mixed stretch: %.0f s with tail completion (%d batches), %.0f s without", with, batches, without)
	if batches == 0 || with > 5*120+60 {
		t.Errorf("with tail completion: %d tail batches, longest mixed stretch %.0f s (want > 0 batches, <= 660 s)", batches, with)
	}
	if without <= with {
		t.Errorf("without tail completion the longest mixed stretch is %.0f s, not longer than %.0f s: the scenario stalls nothing", without, with)
	}
}

// The occupancy-scaled capacity fallback (for an operator whose every sample the
// observation layer rejects) decays towards new windows only while the operator's output
// flows: in windows blocked by a full downstream queue it holds. Decaying there made a
// throttled operator look slow (three times its throttled rate), so DS2 over the shared
// layers gave it ever more accelerators and starved the operator that blocked it (video,
// queues x3: caption at one instance for two hours).
func TestBlockedWindowsKeepTheCapacityFallback(t *testing.T) {
	p, c := sim.VideoPipeline(0.01), sim.PaperCluster(8)
	op := p.OpIndex("clip_aesthetic")
	env := &sim.Env{Cluster: c, Pipeline: p, Tick: 1, Profiler: sim.NewProfiler(p, c, 1)}
	// run feeds windows of 10 one-second ticks in which op's 4 instances process perInst
	// records/s each at 5 % occupancy (every sample is rejected as low-utilisation), with
	// the downstream queue full when blocked, and returns the capacity fallback.
	run := func(tr *Trident, from float64, windows int, perInst float64, blocked bool) (float64, float64) {
		now := feedWindows(tr, p, from, windows, func(s *sim.Snapshot) {
			st := &s.Ops[op]
			st.Running, st.Processed, st.Emitted, st.SrcRecords = 4, 4*perInst, 4*perInst, perInst
			st.Occupancy, st.Util, st.BusySec, st.Queue = 0.05, 0.05, 0.2, 100
			st.Features = []float64{20, 720}
			if blocked {
				s.Ops[op+1].Queue = p.Ops[op+1].QueueCap
			}
		})
		return tr.capacity(op), now
	}
	for _, blocked := range []bool{true, false} {
		tr := New(Options{Seed: 1})
		if _, err := tr.Init(context.Background(), env); err != nil {
			t.Fatal(err)
		}
		first, now := run(tr, 0, 1, 10, false)
		if first != 30 {
			t.Fatalf("fallback after one free window at 10 records/s and 5 %% occupancy: %.2f, want 30 (three times the rate)", first)
		}
		got, _ := run(tr, now, 100, 1, blocked)
		// Free windows decay the maximum by 0.5 % each: 30 × 0.995^100 = 18.2.
		if blocked && got != first {
			t.Errorf("after 100 blocked windows at 1 record/s the fallback is %.2f, want it held at %.2f", got, first)
		}
		if !blocked && (got < 18 || got > 18.5) {
			t.Errorf("after 100 free windows at 1 record/s the fallback is %.2f, want 18.2 (decayed)", got)
		}
	}
}

// A batching engine whose bounded input queue stays full runs a small batch because the
// queue also holds its requests in flight, not for want of work. With the queue bound and
// output blocking in its samples (the default), the observation layer accepts such
// windows and the capacity is the rate the engine sustains; without them (NoQueueSignal)
// every window is rejected as low-utilisation and the capacity stays at the
// occupancy-scaled fallback, three times the rate. A full queue behind a blocked output is
// backpressure: rejected either way.
func TestFullQueueSamplesMeasureCapacity(t *testing.T) {
	p, c := sim.PDFPipeline(0.01), sim.PaperCluster(8)
	op := p.OpIndex("table_ocr")
	env := &sim.Env{Cluster: c, Pipeline: p, Tick: 1, Profiler: sim.NewProfiler(p, c, 1)}
	const perInst = 40.0
	run := func(opt Options, blocked bool) float64 {
		tr := New(opt)
		if _, err := tr.Init(context.Background(), env); err != nil {
			t.Fatal(err)
		}
		feedWindows(tr, p, 0, 30, func(s *sim.Snapshot) {
			st := &s.Ops[op]
			st.Running, st.Processed, st.Emitted, st.SrcRecords = 4, 4*perInst, 4*perInst, perInst/100
			st.Occupancy, st.Util, st.BusySec, st.Queue, st.Arrived = 0.3, 1, 4, p.Ops[op].QueueCap, 4*perInst
			st.Features = []float64{0.06, 820, 500}
			if blocked {
				st.BlockedSec = 0.5
				s.Ops[op+1].Queue = p.Ops[op+1].QueueCap
			}
		})
		return tr.capacity(op)
	}
	// Noise-free windows at 40 records/s: the estimate is within 2 % of it (GP fit).
	if got := run(Options{Seed: 1}, false); math.Abs(got-perInst) > 0.02*perInst {
		t.Errorf("full queue, output flowing: capacity %.2f, want %.0f (the sustained rate)", got, perInst)
	}
	// Fallback: 40 / max(0.3, 1/3) = 120.
	if got := run(Options{Seed: 1, NoQueueSignal: true}, false); math.Abs(got-3*perInst) > 1e-9 {
		t.Errorf("without the queue signal: capacity %.2f, want the fallback %.0f", got, 3*perInst)
	}
	if got := run(Options{Seed: 1}, true); math.Abs(got-3*perInst) > 1e-9 {
		t.Errorf("full queue, output blocked: capacity %.2f, want the fallback %.0f (samples rejected)", got, 3*perInst)
	}
}

// Committing a configuration invalidates the operator's samples; until the new epoch's
// first estimate its capacity is the committed candidate's, as its BO trials measured it.
// (Before, it was 1 record/s: in PDF seed 1 the MILP round after formula_ocr's commit
// moved 34 accelerators to formula_ocr and planned 0.24 documents/s instead of 2.5.)
// Other invalidations (regime shift, stale model, revert) know no such prior.
func TestCommitKeepsTheCandidateCapacity(t *testing.T) {
	p, c := sim.PDFPipeline(0.01), sim.PaperCluster(8)
	op := p.OpIndex("formula_ocr")
	env := &sim.Env{Cluster: c, Pipeline: p, Tick: 1, Profiler: sim.NewProfiler(p, c, 1)}
	h := NewShared(Options{Seed: 1})
	if err := h.Init(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	o := h.t.ops[op]
	o.candidate = &candidate{cfg: p.Ops[op].Space.Default(), rate: 46.1}
	s := &sim.Snapshot{Time: 10, Tick: 1, Ops: make([]sim.OpStats, len(p.Ops))}
	plan := sim.PlanFromCounts(make([][]int, len(p.Ops)))
	if !h.Apply(context.Background(), s, plan) || !o.committed {
		t.Fatal("the candidate was not committed")
	}
	if got := h.t.capacity(op); got != 46.1 {
		t.Errorf("capacity right after the commit: %v, want the candidate's 46.1", got)
	}
	h.t.invalidate(op, 0)
	if got := h.t.capacity(op); got != 1 {
		t.Errorf("capacity after an invalidation without prior: %v, want 1 (unknown)", got)
	}
}

// feedWindows feeds tr windows of 10 one-second ticks from time from on: every tick's
// snapshot has p's queue bounds and is filled by fill; each window ends with a flush. It
// returns the time of the last tick.
func feedWindows(tr *Trident, p *sim.Pipeline, from float64, windows int, fill func(s *sim.Snapshot)) float64 {
	now := from
	for range windows {
		var s *sim.Snapshot
		for range 10 {
			now++
			s = &sim.Snapshot{Time: now, Tick: 1, Ops: make([]sim.OpStats, len(p.Ops))}
			for i := range s.Ops {
				s.Ops[i].QueueCap = p.Ops[i].QueueCap
			}
			fill(s)
			tr.Observe(s)
		}
		tr.flushWindow(s)
	}
	return now
}

// A new tuning session measures the running configuration first, on a probe like every
// other trial: the observation layer's estimate of it (production instances at their
// queue share) is not comparable with probe measurements (at the admission limit).
func TestSessionProbesTheRunningConfigFirst(t *testing.T) {
	p, c := sim.PDFPipeline(0.01), sim.PaperCluster(8)
	op := p.OpIndex("table_ocr")
	env := &sim.Env{Cluster: c, Pipeline: p, Tick: 1, Profiler: sim.NewProfiler(p, c, 1)}
	tr := New(Options{Seed: 1})
	if _, err := tr.Init(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	o := tr.ops[op]
	// A running configuration other than the default, tuned for an earlier workload.
	o.current = slices.Clone(p.Ops[op].Space.Default())
	o.current[0] = math.Round(o.current[0] / 2)
	var ev cluster.Event
	for range 100 {
		var err error
		if ev, err = o.cl.Observe([]float64{40, 2, 300, 50}[:len(p.Ops[op].FeatureNames)]); err != nil {
			t.Fatal(err)
		}
	}
	o.dominant = ev.Cluster
	s := &sim.Snapshot{Time: 10, Tick: 1, Ops: make([]sim.OpStats, len(p.Ops))}
	s.Ops[op].Running, s.Ops[op].PeakMemGB = 8, 40
	// The first invocation opens the session, the next one starts its trials.
	var probes [][]sim.OpConfig
	for range 2 {
		var err error
		if probes, _, err = tr.adapt(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	if o.tune == nil || len(probes[op]) != tr.opt.ParallelTrials {
		t.Fatalf("session %v, probes %v: want a session running %d trials", o.tune, probes[op], tr.opt.ParallelTrials)
	}
	if n := len(o.tune.opt.Observations()); n != 0 {
		t.Fatalf("the session starts with %d observations, want none (no production estimate seeded)", n)
	}
	if !probes[op][0].Equal(o.current) {
		t.Fatalf("first trial %v, want the running configuration %v", probes[op][0], o.current)
	}
}

// A recommendation replaces the running configuration only if its session measured it
// clearly better than the running one: by more than a rolling restart costs within the
// MILP's window ((33 + 10) / 900 s, 4.8 %).
func TestNearEqualRecommendationHolds(t *testing.T) {
	tr := New(Options{})
	run, other := sim.OpConfig{128, 4096, 16, 1}, sim.OpConfig{160, 4096, 8, 1}
	key := configKey(run)
	for _, tc := range []struct {
		name    string
		rate    float64
		seen    map[string]float64
		propose bool
	}{
		{"within the restart cost", 4.52, map[string]float64{key: 4.40}, false},
		{"clearly better", 4.70, map[string]float64{key: 4.40}, true},
		{"running config never measured", 4.52, map[string]float64{}, true},
		{"running config OOMed in the session", 4.52, map[string]float64{key: 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &opState{current: run}
			if got := tr.propose(context.Background(), o, candidate{cfg: other, rate: tc.rate, seen: tc.seen}); got != tc.propose || (o.candidate != nil) != tc.propose {
				t.Fatalf("propose = %v (candidate %v), want %v", got, o.candidate, tc.propose)
			}
		})
	}
}

// The hold rule finds the running configuration among a session's evaluations: its key
// survives the round trip through the adaptation layer's configuration space (integer,
// categorical and boolean parameters), and the session's value for it is the surrogate's
// mean, like the recommendation's rate, or 0 after OOM only.
func TestSessionAssessesTheRunningConfig(t *testing.T) {
	sp, opt := tableOCRSession(t)
	run := slices.Clone(sp.Default())
	run[0] = math.Round(run[0] / 2)
	other := slices.Clone(sp.Default())
	oom := slices.Clone(sp.Default())
	oom[0] = math.Round(oom[0] * 2)
	for _, e := range []struct {
		cfg      sim.OpConfig
		thr, mem float64
		oom      bool
	}{{run, 4.4, 30, false}, {other, 4.6, 40, false}, {oom, 0, 64, true}} {
		if err := opt.Observe(toCS(sp, e.cfg), e.thr, e.mem, e.oom); err != nil {
			t.Fatal(err)
		}
	}
	got := assessed(context.Background(), sp, opt)
	v, ok := got[configKey(run)]
	if !ok {
		t.Fatalf("running config %v not found among %v", run, got)
	}
	p, err := opt.Predict(context.Background(), toCS(sp, run))
	if err != nil || !p.HaveThroughput || v != p.Throughput {
		t.Fatalf("running config assessed %v, want the surrogate mean %v (%v)", v, p.Throughput, err)
	}
	if w, ok := got[configKey(oom)]; !ok || w != 0 {
		t.Fatalf("OOM-only config assessed %v (found %v), want 0", w, ok)
	}
}

// A running configuration the recommending session never evaluated (another cluster's
// recommendation put it in place since) is assessed by the session's surrogate mean, so
// the hold rule still applies; without a session there is nothing to compare with.
func TestUnseenRunningConfigAssessedBySurrogate(t *testing.T) {
	sp, opt := tableOCRSession(t)
	a, b := slices.Clone(sp.Default()), slices.Clone(sp.Default())
	a[0] = math.Round(a[0] / 2)
	for _, e := range []struct {
		cfg sim.OpConfig
		thr float64
	}{{a, 4.4}, {b, 4.6}} {
		if err := opt.Observe(toCS(sp, e.cfg), e.thr, 30, false); err != nil {
			t.Fatal(err)
		}
	}
	run := slices.Clone(sp.Default())
	run[0] = math.Round(run[0] * 3 / 4) // between the two, never evaluated
	p, err := opt.Predict(context.Background(), toCS(sp, run))
	if err != nil || !p.HaveThroughput || !(p.Throughput > 0) {
		t.Fatalf("prediction at the running config: %+v, %v", p, err)
	}
	tr := New(Options{})
	margin := 1 + tr.switchCostS()/tr.opt.WindowS
	for _, tc := range []struct {
		name    string
		rate    float64
		session *bo.Optimizer
		propose bool
	}{
		{"within the restart cost of the surrogate's assessment", p.Throughput * (1 + (margin-1)/2), opt, false},
		{"clearly better than the surrogate's assessment", p.Throughput * margin * 1.01, opt, true},
		{"no session to assess with", p.Throughput * (1 + (margin-1)/2), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &opState{current: run, spec: &sim.PDFPipeline(0.01).Ops[sim.PDFPipeline(0.01).OpIndex("table_ocr")]}
			c := candidate{cfg: b, rate: tc.rate, seen: map[string]float64{configKey(a): 4.4, configKey(b): 4.6}, session: tc.session}
			if got := tr.propose(context.Background(), o, c); got != tc.propose {
				t.Fatalf("propose = %v, want %v (rate %.3f, running assessed %.3f)", got, tc.propose, tc.rate, p.Throughput)
			}
		})
	}
}

// tableOCRSession returns table_ocr's configuration space and an empty constrained tuning
// session over it.
func tableOCRSession(t *testing.T) (sim.Space, *bo.Optimizer) {
	t.Helper()
	sp := sim.PDFPipeline(0.01).Ops[sim.PDFPipeline(0.01).OpIndex("table_ocr")].Space
	space, err := toSpace(sp)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := bo.New(space, bo.Options{Method: bo.Constrained, MemLimit: 64, Margin: 6}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	return sp, opt
}
