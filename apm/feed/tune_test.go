package feed

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/configspace"
	"github.com/trident-sched/trident/strategy/exposure"
)

// memLimitMiB is the synthetic operator's device memory; its peak is 10 + 4·b MiB, so
// b ≥ 23 exceeds it. Capacity per instance is 2·b records/s.
const memLimitMiB = 100

func synthPeakMiB(b int) float64 { return 10 + 4*float64(b) }

// synthCluster is a fake planner plus a synthetic two-instance operator "pdf/ocr" with one
// tunable parameter b. A candidate PUT is adopted at once (config_epoch+1), like a planner
// that always transitions; setConfig imitates a user changing the config.
type synthCluster struct {
	t   *testing.T
	rng *rand.Rand

	mu      sync.Mutex
	config  string
	epoch   uint64
	history map[uint64]string // config per epoch
	puts    []map[string]any
	paths   []string
	adopt   bool

	// slots holds the running tuning trials by slot; maxSlots is how many slots the
	// fake planner accepts (a PUT to a higher one answers 501; 0: one). trials records
	// every trial config by epoch, trialSlot its slot, trialPuts counts the trial PUTs;
	// concurrent is the most trials seen running at once.
	slots      map[int]*synthTrial
	maxSlots   int
	trials     map[uint64]string
	trialSlot  map[uint64]int
	trialPuts  int
	concurrent int
	// inflight is the candidate config of a transition in flight ("" none): instance a1
	// runs it at epoch+1.
	inflight string
	est      *Estimator // the feeder's

	now   time.Time
	insts map[string]*Instance
	// tokens is the workload feature's mean (default 512).
	tokens float64
	// peakScale makes the peak memory fluctuate: each 5-second block's largest use is
	// synthPeakMiB(b) plus a Gumbel(0, peakScale·b MiB) draw, and instances report the
	// peak since start (0: no fluctuation, the peak is synthPeakMiB(b)).
	peakScale float64
	// refuse, when set, names the b whose trial instance refuses to start: it exports
	// nothing, and the plan shows the trial failed (as the planner's TrialWatcher does).
	refuse func(b int) bool
	// pool, when set, is the working pool relative to its need that an instance on b
	// reports (Instance.Pool, as trident_pool_size over trident_pool_need).
	pool func(b int) float64
}

func newSynthCluster(t *testing.T, b int) *synthCluster {
	c := &synthCluster{t: t, rng: rand.New(rand.NewPCG(11, 12)), config: fmt.Sprintf("b=%d", b), adopt: true,
		history: map[uint64]string{0: fmt.Sprintf("b=%d", b)}, trials: map[uint64]string{}, trialSlot: map[uint64]int{}, slots: map[int]*synthTrial{}, now: time.Unix(2_000_000, 0), insts: map[string]*Instance{}, tokens: 512}
	for _, id := range []string{"a1", "a2"} {
		c.insts[id] = &Instance{QueueLength: 100, Utilization: 0.9, FeatureMean: map[string]float64{"tokens": 512}}
	}
	return c
}

func (c *synthCluster) setConfig(cfg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.config = cfg
	c.epoch++
	c.history[c.epoch] = cfg
}

func (c *synthCluster) handler(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/pipelines":
		fmt.Fprintf(w, `[{"job":"pdf","operators":[{"name":"ocr","gpus":1,"gpu_memory_mb":%d,"cold_start_s":30,"features":["tokens"],"params":"b=int[1,64]","config":"b=8"}]}]`, memLimitMiB)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/plan/pdf":
		g := map[string]any{"config": c.config, "config_epoch": c.epoch, "candidate_config": c.inflight, "count": 8}
		var trs []fsm.Trial
		for _, k := range slices.Sorted(maps.Keys(c.slots)) {
			tr := fsm.Trial{Config: c.slots[k].config, Epoch: c.slots[k].epoch, Slot: k}
			if c.refused(tr.Config) {
				tr.Failed = "allocation 1234abcd on c2: task run exited 2 times with a non-zero status (exit code 1)"
			}
			trs = append(trs, tr)
		}
		if len(trs) > 0 {
			g["trials"] = trs
		}
		if s0, ok := c.slots[0]; ok {
			g["trial_config"], g["trial_epoch"] = s0.config, s0.epoch
		}
		json.NewEncoder(w).Encode(map[string]any{"groups": map[string]any{"ocr": g}})
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/trials/pdf/ocr/"):
		var body struct{ Config string }
		slot, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/v1/trials/pdf/ocr/"))
		if err != nil || json.NewDecoder(r.Body).Decode(&body) != nil || body.Config == "" {
			http.Error(w, "bad trial", 400)
			return
		}
		if slot >= max(1, c.maxSlots) {
			http.Error(w, `{"error":"this planner's actuator runs fewer trial slots"}`, http.StatusNotImplemented)
			return
		}
		c.trialPuts++
		idx := uint64(100 + c.trialPuts)
		c.slots[slot] = &synthTrial{config: body.Config, epoch: fsm.TrialEpochBase + idx}
		c.trials[fsm.TrialEpochBase+idx], c.trialSlot[fsm.TrialEpochBase+idx] = body.Config, slot
		c.concurrent = max(c.concurrent, len(c.slots))
		fmt.Fprintf(w, `{"index":%d}`, idx)
	case r.Method == http.MethodDelete && r.URL.Path == "/v1/trials/pdf/ocr":
		clear(c.slots)
		fmt.Fprint(w, `{"index":1}`)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/observations":
		fmt.Fprint(w, `{"index":1}`)
	case r.Method == http.MethodPut:
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		c.paths = append(c.paths, r.URL.Path)
		c.puts = append(c.puts, body)
		cfg, _ := body["config"].(string)
		if cfg == c.config && body["revert"] != true { // a revert to the running config aborts a transition
			c.t.Errorf("candidate %q equals the running config", cfg)
			http.Error(w, `{"error":"equals the current config"}`, http.StatusUnprocessableEntity)
			return
		}
		if c.adopt {
			c.config = cfg
			c.epoch++
			c.history[c.epoch] = cfg
		}
		fmt.Fprint(w, `{"index":2}`)
	default:
		http.NotFound(w, r)
	}
}

// snapshot advances the synthetic operator by 5 s under the current config: instances
// process 2·b records/s (2% noise) and report peak memory and the config epoch, or, above
// the device memory, restart with their OOM counter incremented and their peak capped.
func (c *synthCluster) snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg, err := configspace.ParseConfig(c.config)
	if err != nil {
		c.t.Fatal(err)
	}
	c.now = c.now.Add(5 * time.Second)
	s := Snapshot{Time: c.now, Instances: map[string]Instance{}}
	for id, m := range c.insts {
		b, epoch := cfg.Int("b"), c.epoch
		if c.inflight != "" && id == "a1" {
			ic, err := configspace.ParseConfig(c.inflight)
			if err != nil {
				c.t.Fatal(err)
			}
			b, epoch = ic.Int("b"), c.epoch+1
		}
		if m.Epoch != float64(epoch) {
			m.DeviceMemPeak = 0 // restarted on the new config
			m.Epoch = float64(epoch)
		}
		c.advance(m, b, 2)
		if c.pool != nil {
			m.Pool = c.pool(b)
		}
		s.Instances[id] = *m
	}
	for _, tr := range c.slots {
		// A trial's instance (a new allocation per trial) runs at its admission limit,
		// 2.5·b records/s: faster than a production instance's 2·b at its share of the
		// queue.
		tc, err := configspace.ParseConfig(tr.config)
		if err != nil {
			c.t.Fatal(err)
		}
		if c.refused(tr.config) {
			continue // never serves: no metrics
		}
		if tr.inst == nil {
			tr.inst = &Instance{QueueLength: 100, Utilization: 0.95, Epoch: float64(tr.epoch)}
		}
		c.advance(tr.inst, tc.Int("b"), 2.5)
		if c.pool != nil {
			tr.inst.Pool = c.pool(tc.Int("b"))
		}
		s.Instances[fmt.Sprintf("trial-%d", tr.epoch)] = *tr.inst
	}
	return s
}

// refused reports whether the trial config cfg refuses to start (refuse; caller holds mu).
func (c *synthCluster) refused(cfg string) bool {
	if c.refuse == nil {
		return false
	}
	tc, err := configspace.ParseConfig(cfg)
	return err == nil && c.refuse(tc.Int("b"))
}

// tuneByTrials runs a tuner with trials and the given budget for 300 rounds against c
// (candidates not adopted: only trials measure) and returns its stats.
func (c *synthCluster) tuneByTrials(t *testing.T, budget int) TunerStats {
	t.Helper()
	c.adopt = false
	srv := httptest.NewServer(http.HandlerFunc(c.handler))
	defer srv.Close()
	f := c.feederWith(t, srv.URL, TunerOptions{Budget: budget, Trials: true})
	for range 300 {
		if err := f.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return f.Tuner().Stats("pdf", "ocr")
}

// synthTrial is a trial the fake planner runs: its config, epoch and instance.
type synthTrial struct {
	config string
	epoch  uint64
	inst   *Instance
}

// advance moves instance m on config b by 5 s: it processes perB·b records/s (2 % noise)
// and reports its peak memory, or, above the device memory, restarts with its OOM counter
// incremented and its peak capped.
func (c *synthCluster) advance(m *Instance, b int, perB float64) {
	if peak := synthPeakMiB(b); peak > memLimitMiB {
		m.OOMRestarts++
		m.DeviceMemPeak = memLimitMiB * (1 << 20)
	} else {
		m.RecordsIn += perB * float64(b) * 5 * (1 + 0.02*c.rng.NormFloat64())
		m.RecordsOut = m.RecordsIn
		m.BusySeconds += 5
		m.UsefulSeconds += 5
		if c.peakScale > 0 {
			peak += -c.peakScale * float64(b) * math.Log(-math.Log(c.rng.Float64()))
		}
		m.DeviceMemPeak = math.Max(m.DeviceMemPeak, peak*(1<<20))
	}
	m.FeatureMean = map[string]float64{"tokens": c.tokens * (1 + 0.05*c.rng.NormFloat64())}
}

// feeder returns a tuning Feeder over the synthetic cluster.
func (c *synthCluster) feeder(t *testing.T, url string, budget int) *Feeder {
	return c.feederWith(t, url, TunerOptions{Budget: budget})
}

// feederWith returns a tuning Feeder over the synthetic cluster with the tuner options o
// (Seed, MarginMB and PeakK set here).
func (c *synthCluster) feederWith(t *testing.T, url string, o TunerOptions) *Feeder {
	est := NewEstimator(nil)
	c.est = est
	var prev *Snapshot
	// The synthetic device has 100 MiB: the default 1 GiB margin would rule out every
	// config (withSynthDevice).
	f, err := New(est, Options{Planner: url, Tune: true, Tuning: withSynthDevice(o),
		Refresh: func(ctx context.Context, job, op string, d Declaration) error {
			if err := est.Declare(job, op, d); err != nil {
				return err
			}
			cur := c.snapshot()
			if prev != nil {
				est.Observe(job, op, *prev, cur)
			}
			prev = &cur
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// withSynthDevice is o for the synthetic 100 MiB device: no margin unless o sets one, no
// sustained-peak allowance (its peaks do not fluctuate), and a fixed seed.
func withSynthDevice(o TunerOptions) TunerOptions {
	o.Seed, o.PeakK = 5, -1
	if o.MarginMB == 0 {
		o.MarginMB = -1
	}
	return o
}

// TestTunerProposesAndAttributesEpochs runs the feeder with tuning against the fake
// planner: proposals are PUT to /v1/candidates/pdf/ocr with the operator's cold start and a
// positive predicted capacity, never the running config; every evaluation is attributed to
// the config the planner ran in its epoch (including after each epoch bump), once per
// epoch (a proposal that OOMs anyway as infeasible, and never again proposed); no proposal
// has P(feasible) < δ.
func TestTunerProposesAndAttributesEpochs(t *testing.T) {
	c := newSynthCluster(t, 8)
	srv := httptest.NewServer(http.HandlerFunc(c.handler))
	defer srv.Close()
	f := c.feeder(t, srv.URL, 6)
	ctx := context.Background()
	for range 120 {
		if err := f.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := f.Tuner().Stats("pdf", "ocr")
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.puts) == 0 || len(st.Proposals) != len(c.puts) {
		t.Fatalf("%d PUTs, %d proposals: want at least one, all recorded", len(c.puts), len(st.Proposals))
	}
	for i, body := range c.puts {
		if c.paths[i] != "/v1/candidates/pdf/ocr" {
			t.Errorf("PUT path %q", c.paths[i])
		}
		if body["cold_start_s"] != 30.0 || !(body["capacity"].(float64) > 0) {
			t.Errorf("PUT body %v: want cold_start_s 30 and a positive capacity", body)
		}
		if len(body) != 3 {
			t.Errorf("PUT body %v: want exactly config, capacity, cold_start_s", body)
		}
	}
	for _, p := range st.Proposals {
		if p.PFeasible < 0.9 {
			t.Errorf("proposal %+v has P(feasible) < δ", p)
		}
	}
	if len(st.Evaluations) < 3 || len(st.Evaluations) > 6 {
		t.Fatalf("evaluations %+v: want 3 to the budget 6", st.Evaluations)
	}
	for i, p := range st.Proposals {
		if p.Recommendation != (i >= 5) {
			t.Errorf("proposal %d %+v: only proposals after the budget (5 trials + the running config) are recommendations", i, p)
		}
	}
	seen := map[uint64]bool{}
	for _, ev := range st.Evaluations {
		if want := canonical(configspace.MustParse("b=int[1,64]"), c.history[ev.Epoch]); ev.Config != want {
			t.Errorf("evaluation %+v attributed to %q, but epoch %d ran %q", ev, ev.Config, ev.Epoch, want)
		}
		if seen[ev.Epoch] {
			t.Errorf("epoch %d evaluated twice", ev.Epoch)
		}
		seen[ev.Epoch] = true
		cfg, _ := configspace.ParseConfig(ev.Config)
		b := float64(cfg.Int("b"))
		if synthPeakMiB(int(b)) > memLimitMiB {
			// P(feasible) ≥ δ is a belief, not a guarantee: a proposal may still OOM. It
			// must then be recorded infeasible and never proposed again.
			if !ev.OOM || ev.Throughput != 0 || ev.PeakMiB < memLimitMiB {
				t.Errorf("evaluation %+v of an OOM config: want OOM, throughput 0, peak ≥ limit", ev)
			}
			n := 0
			for _, p := range st.Proposals {
				if p.Config == ev.Config {
					n++
				}
			}
			if n > 1 {
				t.Errorf("OOM config %s proposed %d times", ev.Config, n)
			}
			continue
		}
		if ev.OOM || math.Abs(ev.Throughput-2*b)/(2*b) > 0.1 || math.Abs(ev.PeakMiB-synthPeakMiB(int(b))) > 1e-6 {
			t.Errorf("evaluation %+v: want throughput %.0f ± 10%%, peak %.0f MiB", ev, 2*b, synthPeakMiB(int(b)))
		}
	}
}

// TestTunerRecordsOOMInfeasible switches the operator to a config above the device memory
// (as a user could): that epoch is recorded infeasible, the OOM config is never proposed,
// and no proposal has predicted P(feasible) < δ.
func TestTunerRecordsOOMInfeasible(t *testing.T) {
	c := newSynthCluster(t, 8)
	c.adopt = false // the planner keeps candidates pending: only setConfig changes configs
	srv := httptest.NewServer(http.HandlerFunc(c.handler))
	defer srv.Close()
	f := c.feeder(t, srv.URL, 12)
	f.tuner.o.PendingRounds = 3
	ctx := context.Background()
	round := func(n int) {
		for range n {
			if err := f.Round(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	round(20) // b=8 measured
	c.setConfig("b=40")
	round(10) // b=40 OOMs
	c.setConfig("b=12")
	round(40)
	st := f.Tuner().Stats("pdf", "ocr")
	var oom *Evaluation
	for i, ev := range st.Evaluations {
		if ev.Config == "b=40" {
			oom = &st.Evaluations[i]
		}
	}
	if oom == nil || !oom.OOM || oom.Throughput != 0 || oom.PeakMiB < memLimitMiB || oom.Epoch != 1 {
		t.Fatalf("evaluations %+v: want b=40 at epoch 1 recorded as OOM (throughput 0, peak ≥ limit)", st.Evaluations)
	}
	last := st.Evaluations[len(st.Evaluations)-1]
	if last.Config != "b=12" || last.Epoch != 2 || last.OOM {
		t.Errorf("last evaluation %+v: want b=12 at epoch 2", last)
	}
	if len(st.Proposals) == 0 {
		t.Fatal("no proposal")
	}
	for _, p := range st.Proposals {
		if p.PFeasible < 0.9 || p.Config == "b=40" {
			t.Errorf("proposal %+v: P(feasible) < δ or the OOM config", p)
		}
	}
}

// An epoch whose instances the observation layer never sampled (starved) is recorded from
// its useful-time rate only for a synchronous operator, where that rate is its capacity:
// a batched operator's requests overlap, so its useful-time rate (here 10 records in 20
// useful seconds, 0.5/s, against a throughput of 2/s) is a lower bound, and its
// evaluation waits for the observation layer.
func TestStarvedBatchedEpochIsNotRecordedFromUsefulTime(t *testing.T) {
	est := NewEstimator(nil)
	tu := &Tuner{o: TunerOptions{}.withDefaults(), est: est}
	st := &epochState{records: 10 * 6, useful: 20 * 6, intervals: 6}
	if c, ok := tu.stable(&opTuner{job: "pdf", op: "ocr", sync: false}, 0, st); ok {
		t.Errorf("batched operator recorded at %.2f records/s from its useful-time rate", c)
	}
	c, ok := tu.stable(&opTuner{job: "pdf", op: "parse", sync: true}, 0, st)
	if !ok || math.Abs(c-0.5) > 1e-12 {
		t.Errorf("synchronous operator: stable = %.3f, %v; want its useful-time rate 0.5", c, ok)
	}
}

// After a workload shift to a new cluster, the running config is measured again under the
// new workload (an evaluation of the running epoch in the new cluster) before the new
// session proposes anything: its first prediction would otherwise have nothing to rest on.
// Rounds never fail on it.
func TestTunerRemeasuresTheRunningConfigAfterAShift(t *testing.T) {
	c := newSynthCluster(t, 8)
	c.adopt = false // the planner never adopts: the running epoch stays 0
	srv := httptest.NewServer(http.HandlerFunc(c.handler))
	defer srv.Close()
	f := c.feeder(t, srv.URL, 6)
	ctx := context.Background()
	for range 40 {
		if err := f.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	c.tokens = 16384
	c.mu.Unlock()
	for range 80 {
		if err := f.Round(ctx); err != nil {
			t.Fatalf("round after the shift: %v", err)
		}
	}
	clusters := map[int]bool{}
	for _, e := range f.Tuner().Stats("pdf", "ocr").Evaluations {
		if e.Epoch == 0 && !e.OOM {
			clusters[e.Cluster] = true
		}
	}
	if len(clusters) < 2 {
		t.Fatalf("the running config was measured in clusters %v: want once before and once after the shift", clusters)
	}
}

// TestTunerMeasuresByTrials runs the tuner with trials against the fake planner: the
// session's first trial is the running config; every evaluation is a trial's, attributed
// to the config of its trial epoch and measured at the trial's own rate (2.5·b, not the
// production instances' 2·b); production keeps its config and its own estimate while
// trials run; OOM trials are recorded infeasible; only the recommendation is proposed as
// a candidate, at the production scale (the running config's production estimate times
// the trials' ratio: 2·b within 10 %).
func TestTunerMeasuresByTrials(t *testing.T) {
	c := newSynthCluster(t, 8)
	st := c.tuneByTrials(t, 6)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trials[fsm.TrialEpochBase+101] != "b=8" {
		t.Errorf("first trial %q, want the running config b=8", c.trials[fsm.TrialEpochBase+101])
	}
	if len(st.Evaluations) != 6 {
		t.Fatalf("evaluations %+v: want the budget, 6", st.Evaluations)
	}
	for _, ev := range st.Evaluations {
		want, ok := c.trials[ev.Epoch]
		if !ok || ev.Config != want {
			t.Errorf("evaluation %+v: not attributed to its trial's config (%q)", ev, want)
			continue
		}
		cfg, _ := configspace.ParseConfig(ev.Config)
		b := float64(cfg.Int("b"))
		if synthPeakMiB(int(b)) > memLimitMiB {
			if !ev.OOM || ev.Throughput != 0 {
				t.Errorf("evaluation %+v of an OOM config: want OOM, throughput 0", ev)
			}
			continue
		}
		// 2 % noise per interval, averaged over at least MinSamples intervals.
		if ev.OOM || math.Abs(ev.Throughput-2.5*b)/(2.5*b) > 0.1 {
			t.Errorf("evaluation %+v: want the trial's rate %.1f ± 10%%", ev, 2.5*b)
		}
	}
	if c.config != "b=8" || c.epoch != 0 {
		t.Errorf("production runs %q epoch %d: trials must not change it", c.config, c.epoch)
	}
	est, err := c.est.Estimate("pdf", "ocr")
	if err != nil || math.Abs(est.Capacity-16)/16 > 0.1 || fsm.IsTrialEpoch(est.Epoch) {
		t.Errorf("production estimate %+v (%v): want 2·8 = 16 ± 10%% at a production epoch, apart from the trials", est, err)
	}
	var cands int
	for i, body := range c.puts {
		if c.paths[i] != "/v1/candidates/pdf/ocr" {
			continue
		}
		cands++
		cfg, _ := configspace.ParseConfig(body["config"].(string))
		b := float64(cfg.Int("b"))
		if capa := body["capacity"].(float64); math.Abs(capa-2*b)/(2*b) > 0.1 {
			t.Errorf("candidate %v: capacity %.2f, want the production scale 2·%v ± 10%%", body, capa, b)
		}
	}
	if cands == 0 {
		t.Error("no recommendation proposed after the budget")
	}
	for _, p := range st.Proposals {
		if !p.Trial && !p.Recommendation {
			t.Errorf("proposal %+v: with trials only recommendations are candidates", p)
		}
	}
}

// TestTunerRecordsFailedTrials: trials whose engine refuses to start (b >= 16 here, well
// inside the device memory: 10 + 4·16 = 74 of 100 MiB) export no metrics; the plan shows
// them failed, and the tuner records each as a failed evaluation (OOM, throughput 0) at
// once, instead of waiting out TrialRounds and setting the config aside unrecorded, so
// the memory model learns the region and the budget moves on.
func TestTunerRecordsFailedTrials(t *testing.T) {
	c := newSynthCluster(t, 8)
	c.refuse = func(b int) bool { return b >= 16 }
	st := c.tuneByTrials(t, 8)
	c.mu.Lock()
	defer c.mu.Unlock()
	refusedTrials, recorded := 0, map[uint64]Evaluation{}
	for _, ev := range st.Evaluations {
		recorded[ev.Epoch] = ev
	}
	for epoch, cfg := range c.trials {
		if !c.refused(cfg) {
			continue
		}
		refusedTrials++
		ev, ok := recorded[epoch]
		if !ok || !ev.OOM || ev.Throughput != 0 || ev.Config != cfg {
			t.Errorf("refused trial %s (epoch %d): evaluation %+v (recorded %v), want a failed one of its config", cfg, epoch, ev, ok)
		}
	}
	if refusedTrials == 0 {
		t.Fatalf("no trial of b >= 16 among %v: the test exercises nothing", c.trials)
	}
	if len(st.Evaluations) != 8 {
		t.Errorf("%d evaluations, want the budget of 8", len(st.Evaluations))
	}
}

// TestTunerForeseesRefusalsFromThePool: the operator's engine refuses to start for b >= 16,
// where the working pool it reports, (24 − b)/8 of what it needs, falls below 1 (as a
// vLLM engine whose KV cache cannot hold one max_model_len sequence). Blind to the pool
// the tuner trials such configurations and learns only from their failures (at the
// memory limit, where they say little); with the pool (trident_pool_size over
// trident_pool_need) it foresees them from the configurations that started, and a trial
// that exited by itself counts as an empty pool. Over 8 evaluations: at most 2 refused
// trials with the pool, and more without (measured 2026-12-07: 1 against 4; the one is
// the second trial, when a single reading shows no trend yet).
func TestTunerForeseesRefusalsFromThePool(t *testing.T) {
	refused := map[bool]int{}
	for _, report := range []bool{false, true} {
		c := newSynthCluster(t, 8)
		c.refuse = func(b int) bool { return b >= 16 }
		if report {
			c.pool = func(b int) float64 { return float64(24-b) / 8 }
		}
		st := c.tuneByTrials(t, 8)
		c.mu.Lock()
		for _, cfg := range c.trials {
			if c.refused(cfg) {
				refused[report]++
			}
		}
		c.mu.Unlock()
		if len(st.Evaluations) != 8 {
			t.Errorf("pool reported %v: %d evaluations, want the budget of 8", report, len(st.Evaluations))
		}
	}
	t.Logf("refused trials: %d blind to the pool, %d with it", refused[false], refused[true])
	if refused[true] > 2 {
		t.Errorf("%d refused trials with the pool reported, want at most 2", refused[true])
	}
	if refused[false] <= refused[true] {
		t.Errorf("%d refused trials blind to the pool against %d with it: the test exercises nothing", refused[false], refused[true])
	}
}

// TestTunerConcludesWhenNothingSafeIsLeft: with a 55 MiB margin on the 100 MiB device only
// b <= 8 is safe (peak 10 + 4·b <= 45 MiB), fewer configurations than the budget of 20.
// Once the optimiser has no unevaluated configuration it deems safe, every suggestion
// falls below Delta; the session must conclude with what it measured (and recommend the
// fastest safe b) instead of asking again in every round.
func TestTunerConcludesWhenNothingSafeIsLeft(t *testing.T) {
	for _, trials := range []bool{true, false} {
		t.Run(fmt.Sprintf("trials=%v", trials), func(t *testing.T) {
			c := newSynthCluster(t, 4)
			c.adopt = !trials // without trials, configurations are measured by rolling them out
			srv := httptest.NewServer(http.HandlerFunc(c.handler))
			defer srv.Close()
			f := c.feederWith(t, srv.URL, TunerOptions{Budget: 20, Trials: trials, MarginMB: 55})
			ctx := context.Background()
			for range 400 {
				if err := f.Round(ctx); err != nil {
					t.Fatal(err)
				}
			}
			st := f.Tuner().Stats("pdf", "ocr")
			c.mu.Lock()
			defer c.mu.Unlock()
			if n := len(st.Evaluations); n == 0 || n >= 20 {
				t.Fatalf("%d evaluations: want the session to end before its budget of 20 (8 safe configurations)", n)
			}
			for _, ev := range st.Evaluations {
				if ev.OOM {
					t.Errorf("evaluation %+v: an OOM, though only configurations meeting Delta are measured", ev)
				}
			}
			if len(c.slots) > 0 {
				t.Errorf("trials %v still running after the session concluded", c.slots)
			}
			var rec *Proposal
			for i, p := range st.Proposals {
				if p.Recommendation {
					rec = &st.Proposals[i]
				}
			}
			if rec == nil {
				t.Fatalf("no recommendation proposed after the session; proposals %+v", st.Proposals)
			}
			// Measured rates are proportional to b with 2 % noise, so the fastest safe
			// config, b = 8, wins unless it was never evaluated; b = 7 is 12.5 % slower.
			cfg, err := configspace.ParseConfig(rec.Config)
			if err != nil {
				t.Fatal(err)
			}
			if b := cfg.Int("b"); b < 7 || b > 8 {
				t.Errorf("recommended %q: want the fastest safe b (7 or 8)", rec.Config)
			}
		})
	}
}

// guardRun runs the tuner with trials for 20 rounds on b=8, applies change to the
// synthetic cluster, runs 10 more rounds and returns the bodies of every candidate PUT
// after the change (the planner adopts none).
func guardRun(t *testing.T, change func(c *synthCluster)) []map[string]any {
	t.Helper()
	c := newSynthCluster(t, 8)
	c.adopt = false
	srv := httptest.NewServer(http.HandlerFunc(c.handler))
	defer srv.Close()
	f := c.feederWith(t, srv.URL, TunerOptions{Budget: 12, Trials: true})
	ctx := context.Background()
	rounds := func(n int) {
		for range n {
			if err := f.Round(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	rounds(20)
	c.mu.Lock()
	before := len(c.puts)
	c.mu.Unlock()
	change(c)
	rounds(10)
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []map[string]any
	for i, body := range c.puts[before:] {
		if c.paths[before+i] == "/v1/candidates/pdf/ocr" {
			out = append(out, body)
		}
	}
	return out
}

// TestOOMGuardRevertsToTheJobFilesConfig: a running config that restarts out of memory in
// production (here one put in place from outside, as an earlier recommendation would be
// when the workload grows) is reverted once its instances restarted OOMGuard times: the
// tuner PUTs the job file's config (b=8) as a revert candidate, once, and never proposes
// the failing config. Two instances restart every 5 s: the guard's 3 OOM restarts come in
// the second scrape.
func TestOOMGuardRevertsToTheJobFilesConfig(t *testing.T) {
	cands := guardRun(t, func(c *synthCluster) { c.setConfig("b=40") }) // 10 + 4·40 MiB: above the 100 MiB device
	if len(cands) != 1 || cands[0]["revert"] != true || cands[0]["config"] != "b=8" || !(cands[0]["capacity"].(float64) > 0) {
		t.Errorf("candidates %v: want exactly one, a revert to the job file's b=8 with a positive capacity", cands)
	}
}

// TestOOMGuardAbortsAFailingTransition: when the config a transition in flight rolls out
// restarts out of memory (instance a1 on b=40 at epoch 1, beside a2 on the running b=8),
// the tuner PUTs a revert to the running config, which aborts the transition. One
// instance restarts every 5 s: its third OOM restart comes in the third scrape.
func TestOOMGuardAbortsAFailingTransition(t *testing.T) {
	cands := guardRun(t, func(c *synthCluster) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.inflight = "b=40"
	})
	if len(cands) != 1 || cands[0]["revert"] != true || cands[0]["config"] != "b=8" {
		t.Errorf("candidates %v: want exactly one, a revert to the running b=8", cands)
	}
}

// TestTunerRunsParallelTrials runs the tuner with trial slots against the fake planner:
// the session's first trial (the running config) runs alone, then several trials run at
// once, each in its own slot at its own epoch, and each is measured separately at its own
// rate (2.5·b), not the others'; the session spends exactly its budget, with every
// evaluation a distinct config. A planner accepting fewer slots (501 above them) caps the
// trials running at once at what it accepts, down to one.
func TestTunerRunsParallelTrials(t *testing.T) {
	for _, tc := range []struct{ parallel, accepted int }{{4, 4}, {4, 2}, {4, 1}} {
		t.Run(fmt.Sprintf("parallel=%d,accepted=%d", tc.parallel, tc.accepted), func(t *testing.T) {
			c := newSynthCluster(t, 8)
			c.adopt, c.maxSlots = false, tc.accepted
			srv := httptest.NewServer(http.HandlerFunc(c.handler))
			defer srv.Close()
			f := c.feederWith(t, srv.URL, TunerOptions{Budget: 9, Trials: true, Parallel: tc.parallel})
			ctx := context.Background()
			firstAlone := true
			for range 300 {
				if err := f.Round(ctx); err != nil {
					t.Fatal(err)
				}
				c.mu.Lock()
				if c.trialPuts == 1 && len(c.slots) > 1 {
					firstAlone = false
				}
				c.mu.Unlock()
			}
			st := f.Tuner().Stats("pdf", "ocr")
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.trials[fsm.TrialEpochBase+101] != "b=8" || !firstAlone {
				t.Errorf("first trial %q (alone: %v), want the running config b=8 alone", c.trials[fsm.TrialEpochBase+101], firstAlone)
			}
			if c.concurrent < min(2, tc.accepted) || c.concurrent > tc.accepted {
				t.Errorf("at most %d trials ran at once, want %d to %d", c.concurrent, min(2, tc.accepted), tc.accepted)
			}
			if len(st.Evaluations) != 9 {
				t.Fatalf("evaluations %+v: want the budget, 9", st.Evaluations)
			}
			configs, slots := map[string]bool{}, map[int]bool{}
			for _, ev := range st.Evaluations {
				want, ok := c.trials[ev.Epoch]
				if !ok || ev.Config != want {
					t.Errorf("evaluation %+v: not attributed to its trial's config (%q)", ev, want)
					continue
				}
				if configs[ev.Config] {
					t.Errorf("config %s evaluated twice", ev.Config)
				}
				configs[ev.Config], slots[c.trialSlot[ev.Epoch]] = true, true
				cfg, _ := configspace.ParseConfig(ev.Config)
				b := float64(cfg.Int("b"))
				if synthPeakMiB(int(b)) > memLimitMiB {
					if !ev.OOM {
						t.Errorf("evaluation %+v of an OOM config: want OOM", ev)
					}
					continue
				}
				if ev.OOM || math.Abs(ev.Throughput-2.5*b)/(2.5*b) > 0.1 {
					t.Errorf("evaluation %+v: want its own trial's rate %.1f ± 10%%", ev, 2.5*b)
				}
			}
			if len(slots) != c.concurrent {
				t.Errorf("evaluations measured in slots %v, want %d slots", slots, c.concurrent)
			}
		})
	}
}

// TestTunerExtrapolatesTrialPeaksToProduction: the trials' peaks fluctuate (Gumbel scale
// 0.1·b MiB per 5-second block, peak since start). Each feasible evaluation's recorded
// peak is the measured one raised to the level of 8 planned instances × 24 hours, about
// 0.1·b·ln(8·24·3600 s / the trial's observed seconds) above the trial's typical
// maximum; the synthetic mean peak 10 + 4·b plus that allowance (≈ 1.2·b) leaves b ≤ 17
// within the 100 MiB, and the recommendation is smaller than on the trials' own peaks
// (b = 19 here, which the exposure's level puts above the device). With
// tune_exposure_hours off the recorded peak is the measured one.
func TestTunerExtrapolatesTrialPeaksToProduction(t *testing.T) {
	run := func(hours float64) TunerStats {
		c := newSynthCluster(t, 8)
		c.adopt, c.peakScale = false, 0.1
		srv := httptest.NewServer(http.HandlerFunc(c.handler))
		defer srv.Close()
		f := c.feederWith(t, srv.URL, TunerOptions{Budget: 8, Trials: true, MinSamples: 40, ExposureHours: hours})
		ctx := context.Background()
		for range 800 {
			if err := f.Round(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return f.Tuner().Stats("pdf", "ocr")
	}
	on, off := run(24), run(-1)
	exposureS := 8 * 24 * 3600.0
	check := func(st TunerStats, name string, extrapolated bool) {
		feasible, unfitted := 0, 0
		for _, ev := range st.Evaluations {
			if ev.OOM {
				continue
			}
			feasible++
			cfg, _ := configspace.ParseConfig(ev.Config)
			b := cfg.Int("b")
			if !extrapolated {
				if ev.PeakMiB != ev.MeasuredPeakMiB {
					t.Errorf("%s: evaluation %+v: recorded peak differs from the measured one", name, ev)
				}
			} else {
				// The trial observes 40 to 120 5-second intervals. The level lies
				// between the mean peak plus the allowance from either end, with the
				// scale's estimate between 0.6 and 1.6 of the truth (a since-start
				// gauge's fit is biased low: strategy/exposure's tests). A trial
				// whose gauge rose fewer than twice after its first scrape is not
				// extrapolated (exposure.ErrTooFew).
				lo := synthPeakMiB(b) + 0.6*0.1*float64(b)*math.Log(exposureS/600)
				hi := synthPeakMiB(b) + 1.6*0.1*float64(b)*math.Log(exposureS/5)
				if ev.PeakMiB == ev.MeasuredPeakMiB {
					unfitted++
				} else if ev.PeakMiB < lo || ev.PeakMiB > hi {
					t.Errorf("%s: evaluation %+v: recorded peak %.1f MiB, want the measured %.1f raised to %.1f..%.1f", name, ev, ev.PeakMiB, ev.MeasuredPeakMiB, lo, hi)
				}
			}
		}
		if feasible < 4 || unfitted > 1 {
			t.Errorf("%s: %d feasible evaluations (want at least 4), %d not extrapolated (want at most 1)", name, feasible, unfitted)
		}
	}
	check(on, "24 h", true)
	check(off, "off", false)
	rec := func(st TunerStats) int {
		b := 0
		for _, p := range st.Proposals {
			if p.Recommendation {
				cfg, _ := configspace.ParseConfig(p.Config)
				b = cfg.Int("b")
			}
		}
		return b
	}
	if r := rec(on); r == 0 || r > 17 || r >= rec(off) {
		t.Errorf("recommendation with extrapolation b=%d, want one with b <= 17 (peak 10 + 4·b + 1.2·b within 100 MiB) and below the one without (b=%d)", r, rec(off))
	}
	t.Logf("recommended b: %d with the exposure, %d without", rec(on), rec(off))
}

// TestExposureHoursDefault: an unset exposure takes DefaultExposureHours, a negative one
// turns the extrapolation off, any other is kept.
func TestExposureHoursDefault(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0, DefaultExposureHours}, {-1, 0}, {12, 12}} {
		if got := (TunerOptions{ExposureHours: tc.in}).withDefaults().ExposureHours; got != tc.want {
			t.Errorf("ExposureHours %v: %v after defaults, want %v", tc.in, got, tc.want)
		}
	}
}

// TestGoneEpochsForgetTheirPeaks: an epoch's peak series is kept through a short absence
// of its instances (a restart) and dropped once none has reported it for TrialRounds
// rounds.
func TestGoneEpochsForgetTheirPeaks(t *testing.T) {
	tu := &Tuner{o: TunerOptions{}.withDefaults()}
	series := func() map[string]*exposure.Series { return map[string]*exposure.Series{"a": {}} }
	ot := &opTuner{round: 100, epochs: map[uint64]*epochState{
		1: {peaks: series(), seen: 100 - tu.o.TrialRounds},
		2: {peaks: series(), seen: 100 - tu.o.TrialRounds - 1},
	}}
	tu.dropGonePeaks(ot)
	if ot.epochs[1].peaks == nil || ot.epochs[2].peaks != nil {
		t.Errorf("after %d rounds away: kept %v (want kept), after %d: kept %v (want dropped)",
			tu.o.TrialRounds, ot.epochs[1].peaks != nil, tu.o.TrialRounds+1, ot.epochs[2].peaks != nil)
	}
}
