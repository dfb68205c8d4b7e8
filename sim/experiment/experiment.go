// Package experiment reproduces the Trident paper's evaluation (§8.2, §8.3, §8.5, §8.6,
// §8.7) in the simulator: it runs every scheduler on both pipelines, normalises throughput
// to Static, and renders the tables, a CSV file and an SVG chart next to the paper's
// published figures (which are reported as peers, never used as results).
package experiment

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/trident-sched/trident/apm/feed"
	"github.com/trident-sched/trident/sim"
	"github.com/trident-sched/trident/sim/baseline"
	"github.com/trident-sched/trident/sim/shipped"
)

// Config controls a benchmark run.
type Config struct {
	// Pipelines to run ("pdf", "video").
	Pipelines []string
	// Scale multiplies the dataset size (1 = the calibrated size, ~2-4 h of pipeline time).
	Scale float64
	// Seeds are the workload/noise seeds; every variant runs once per seed and the report
	// takes medians (default {1}).
	Seeds []uint64
	// Workers bounds concurrent simulations (default GOMAXPROCS).
	Workers int
	// Logger receives progress (default: discard).
	Logger *slog.Logger
	// Progress, if set, is called after every finished run with the runs done and the
	// total (from the simulation goroutines, one call at a time).
	Progress func(done, total int)
}

// Run is one simulation of the benchmark.
type Run struct {
	Pipeline string
	// Seed is the run's seed.
	Seed uint64
	// Key identifies the scheduler variant, e.g. "trident", "ds2+shared".
	Key string
	// Result is the simulator's outcome.
	Result *sim.Result
	// Shipped holds what the shipped loop did in Trident variants (nil otherwise).
	Shipped *shipped.Stats
	// Wall is the wall time of the simulation.
	Wall time.Duration
}

// Throughput is source records per second over the run (dataset / makespan).
func (r *Run) Throughput() float64 { return r.Result.Throughput }

type spec struct {
	key  string
	make func(seed uint64) (sim.Scheduler, *shipped.Stats)
	cfg  func(c sim.RunConfig) sim.RunConfig
	// gbps is the link rate of the run's cluster (0: the paper's 100 Gbps).
	gbps float64
	// queueX multiplies the accelerator operators' queue bounds (0: as calibrated).
	queueX float64
}

// pipeline returns the run's pipeline.
func (sp spec) pipeline(name string, scale float64) (*sim.Pipeline, error) {
	p, err := Pipeline(name, scale)
	if err != nil || sp.queueX <= 0 {
		return p, err
	}
	return p.WithAcceleratorQueues(sp.queueX), nil
}

// NetGbps is the link rate of the network-sensitivity runs (keys ending in NetSuffix):
// at the paper's 100 Gbps the pipelines use about a quarter of the usable bandwidth, so
// placement awareness has little to win; at 25 Gbps (a common NIC) the video pipeline's
// frame traffic exceeds what an unaware placement can ship.
const NetGbps = 25

// NetSuffix marks the keys of the network-sensitivity runs.
const NetSuffix = "@25g"

// QueueX is the factor on the accelerator operators' queue bounds of the queue-sensitivity
// runs (keys ending in QueueSuffix). A queue holds the records in flight too, so its bound
// caps how full an OCR or captioning engine's batches get; the Headroom bound and Static's
// profile rate an engine at its admission limit instead.
const QueueX = 3

// QueueSuffix marks the keys of the queue-sensitivity runs.
const QueueSuffix = "@q3"

// cluster returns the run's cluster.
func (sp spec) cluster() sim.Cluster {
	c := sim.PaperCluster(8)
	if sp.gbps > 0 {
		c = c.WithLinks(sp.gbps)
	}
	return c
}

func same(c sim.RunConfig) sim.RunConfig { return c }

// trident runs the shipped planner (the planner's loop, sched.MILP, apm/feed's estimator
// and tuner) as configured by o: the full system measures its tuning trials beside
// production (the APM plugin's `tune` with its default tune_trials). Like the autoscalers
// it takes over the job as submitted.
func trident(o shipped.Options) func(uint64) (sim.Scheduler, *shipped.Stats) {
	return func(seed uint64) (sim.Scheduler, *shipped.Stats) {
		o.Initial = baseline.SubmittedJob
		o.Tuning.Seed = seed
		s := shipped.New(o)
		return s, &s.Stats
	}
}

// full is the full system's options labelled label, changed by f.
func full(label string, f func(o *shipped.Options)) shipped.Options {
	o := shipped.Options{Tune: true, Tuning: feed.TunerOptions{Trials: true}, Label: label}
	if f != nil {
		f(&o)
	}
	return o
}

func plain(f func(seed uint64) sim.Scheduler) func(uint64) (sim.Scheduler, *shipped.Stats) {
	return func(seed uint64) (sim.Scheduler, *shipped.Stats) { return f(seed), nil }
}

// shared returns the shipped observation and adaptation layers of the controlled
// comparison for seed.
func shared(seed uint64) *shipped.Shared {
	return shipped.NewShared(shipped.Options{Tuning: feed.TunerOptions{Seed: seed}})
}

// sharedDS2 makes DS2 (ContTune when conservative) over the shared observation and
// adaptation layers of the controlled comparison.
func sharedDS2(label string, conservative bool) func(uint64) (sim.Scheduler, *shipped.Stats) {
	return plain(func(seed uint64) sim.Scheduler {
		h := shared(seed)
		return &baseline.DS2{Conservative: conservative, Capacity: h, Advisor: h, Label: label}
	})
}

// specs lists every scheduler variant the benchmark runs.
func specs() []spec {
	return []spec{
		{key: "static", make: plain(func(uint64) sim.Scheduler { return &baseline.Static{} }), cfg: same},
		{key: "static-pilot", make: plain(func(uint64) sim.Scheduler { return &baseline.Static{Pilot: true, Label: "static-pilot"} }), cfg: same},
		{key: "static-striped", make: plain(func(uint64) sim.Scheduler {
			return &baseline.Static{Striped: true, Label: "static-striped"}
		}), cfg: same},
		{key: "nomad-target-value", make: plain(func(uint64) sim.Scheduler { return &baseline.Nomad{} }), cfg: same},
		{key: "nomad-threshold", make: plain(func(uint64) sim.Scheduler { return &baseline.Nomad{Strategy: baseline.Threshold} }), cfg: same},
		{key: "ray-data", make: plain(func(uint64) sim.Scheduler { return &baseline.RayData{} }), cfg: same},
		{key: "ds2", make: plain(func(uint64) sim.Scheduler { return &baseline.DS2{} }), cfg: same},
		{key: "conttune", make: plain(func(uint64) sim.Scheduler { return baseline.NewContTune() }), cfg: same},
		{key: "scoot", make: plain(func(seed uint64) sim.Scheduler { return &baseline.SCOOT{Seed: seed} }), cfg: same},
		// The shipped planner (planner loop, sched, apm/feed) driven on the virtual clock.
		{key: "trident", make: trident(full("trident", nil)), cfg: same},
		// Controlled comparison (§8.3): shared observation + adaptation, all-at-once switching.
		{key: "ray-data+shared", make: plain(func(seed uint64) sim.Scheduler {
			return &baseline.RayData{Advisor: shared(seed), Label: "ray-data+shared"}
		}), cfg: same},
		{key: "ds2+shared", make: sharedDS2("ds2+shared", false), cfg: same},
		{key: "conttune+shared", make: sharedDS2("conttune+shared", true), cfg: same},
		// Ablations (§8.6); "w/o rolling update" is also Trident (all-at-once) of §8.3.
		// "w/o adaptation layer" is the APM plugin's default (tune off).
		{key: "trident-no-observation", make: trident(full("trident-no-observation", func(o *shipped.Options) { o.NoObservation = true })), cfg: same},
		{key: "trident-no-adaptation", make: trident(shipped.Options{Label: "trident-no-adaptation"}), cfg: same},
		{key: "trident-no-placement", make: trident(full("trident-no-placement", func(o *shipped.Options) { o.NoPlacement = true })), cfg: same},
		{key: "trident-all-at-once", make: trident(full("trident-all-at-once", func(o *shipped.Options) { o.AllAtOnce = true })), cfg: same},
		// Table 6: unconstrained BO, and the OOM-free oracle.
		{key: "trident-unconstrained-bo", make: trident(full("trident-unconstrained-bo", func(o *shipped.Options) { o.Tuning.MemoryBlind = true })), cfg: same},
		{key: "trident-oom-free", make: trident(full("trident-oom-free", nil)), cfg: func(c sim.RunConfig) sim.RunConfig {
			c.NoOOM = true
			return c
		}},
		// Network sensitivity: the placement ablation where the links bind.
		{key: "static" + NetSuffix, make: plain(func(uint64) sim.Scheduler { return &baseline.Static{Label: "static" + NetSuffix} }), cfg: same, gbps: NetGbps},
		{key: "trident" + NetSuffix, make: trident(full("trident"+NetSuffix, nil)), cfg: same, gbps: NetGbps},
		{key: "trident-no-placement" + NetSuffix, make: trident(full("trident-no-placement"+NetSuffix, func(o *shipped.Options) { o.NoPlacement = true })), cfg: same, gbps: NetGbps},
		// Queue sensitivity: Static, the strongest baselines and Trident with larger
		// accelerator queues.
		{key: "static" + QueueSuffix, make: plain(func(uint64) sim.Scheduler { return &baseline.Static{Label: "static" + QueueSuffix} }), cfg: same, queueX: QueueX},
		{key: "scoot" + QueueSuffix, make: plain(func(seed uint64) sim.Scheduler { return &baseline.SCOOT{Seed: seed} }), cfg: same, queueX: QueueX},
		{key: "ds2+shared" + QueueSuffix, make: sharedDS2("ds2+shared"+QueueSuffix, false), cfg: same, queueX: QueueX},
		{key: "trident" + QueueSuffix, make: trident(full("trident"+QueueSuffix, nil)), cfg: same, queueX: QueueX},
	}
}

// Bounds computes every pipeline's fluid upper bound on the benchmark cluster (200
// sampled records per regime, 2000 random configurations per operator and regime).
func Bounds(ctx context.Context, cfg Config) (map[string]sim.FluidBound, error) {
	out := map[string]sim.FluidBound{}
	for _, name := range cfg.Pipelines {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("fluid bound: %w", err)
		}
		p, err := Pipeline(name, cfg.Scale)
		if err != nil {
			return nil, err
		}
		b, err := sim.ComputeFluidBound(p, sim.PaperCluster(8), 200, 2000, 1)
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: %w", name, err)
		}
		out[name] = b
	}
	return out, nil
}

// Pipeline returns the named pipeline at the given scale.
func Pipeline(name string, scale float64) (*sim.Pipeline, error) {
	switch name {
	case "pdf":
		return sim.PDFPipeline(scale), nil
	case "video":
		return sim.VideoPipeline(scale), nil
	}
	return nil, fmt.Errorf("unknown pipeline %q (want pdf or video)", name)
}

// RunAll runs every scheduler variant on every pipeline, Workers at a time.
func RunAll(ctx context.Context, cfg Config) ([]*Run, error) {
	if cfg.Scale <= 0 {
		cfg.Scale = 1
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Pipelines) == 0 {
		cfg.Pipelines = []string{"pdf", "video"}
	}
	if len(cfg.Seeds) == 0 {
		cfg.Seeds = []uint64{1}
	}
	type job struct {
		pipe string
		sp   spec
		seed uint64
	}
	var jobs []job
	for _, pn := range cfg.Pipelines {
		if _, err := Pipeline(pn, cfg.Scale); err != nil {
			return nil, err
		}
		for _, seed := range cfg.Seeds {
			for _, sp := range specs() {
				jobs = append(jobs, job{pn, sp, seed})
			}
		}
	}
	// Longest jobs first keeps both workers busy to the end.
	sort.SliceStable(jobs, func(a, b int) bool { return cost(jobs[a].sp.key) > cost(jobs[b].sp.key) })
	runs := make([]*Run, len(jobs))
	errs := make([]error, len(jobs))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	finished := 0
	next := make(chan int)
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				j := jobs[k]
				p, _ := j.sp.pipeline(j.pipe, cfg.Scale)
				s, st := j.sp.make(j.seed)
				rc := j.sp.cfg(sim.RunConfig{Seed: j.seed})
				t0 := time.Now()
				res, err := sim.Run(ctx, p, j.sp.cluster(), s, rc)
				if err != nil {
					errs[k] = fmt.Errorf("%s/%s: %w", j.pipe, j.sp.key, err)
					cancel()
					continue
				}
				if st != nil {
					// A copy: st points into the scheduler, and holding it would keep the
					// whole planner (raft log, feed, GPs) of every finished run alive until
					// the report (an 11 GB heap for the 364 runs of 7 seeds).
					c := *st
					st = &c
				}
				runs[k] = &Run{Pipeline: j.pipe, Seed: j.seed, Key: j.sp.key, Result: res, Shipped: st, Wall: time.Since(t0)}
				cfg.Logger.Info("run done", "pipeline", j.pipe, "scheduler", j.sp.key, "seed", j.seed,
					"throughput", res.Throughput, "sim_s", res.SimSeconds, "wall", time.Since(t0).Round(time.Millisecond))
				if cfg.Progress != nil {
					mu.Lock()
					finished++
					cfg.Progress(finished, len(jobs))
					mu.Unlock()
				}
			}
		}()
	}
	for k := range jobs {
		select {
		case next <- k:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil && err != context.Canceled {
		return nil, err
	}
	return runs, nil
}

// cost orders jobs: Trident variants and ContTune are the slowest to simulate. A
// sensitivity variant (key@...) costs what its base scheduler does.
func cost(key string) int {
	key, _, _ = strings.Cut(key, "@")
	switch {
	case key == "conttune" || key == "conttune+shared":
		return 2
	case len(key) >= 7 && key[:7] == "trident":
		return 3
	case key == "ray-data+shared" || key == "ds2+shared":
		return 2
	}
	return 1
}

// SchedulerNames lists the scheduler keys Scheduler accepts.
func SchedulerNames() string {
	var s string
	for i, k := range allKeys() {
		if i > 0 {
			s += ", "
		}
		s += k
	}
	return s
}

// Setting is one benchmark run's set-up.
type Setting struct {
	Scheduler sim.Scheduler
	Pipeline  *sim.Pipeline
	Cluster   sim.Cluster
	Run       sim.RunConfig
}

// Setup returns a fresh scheduler for key with the pipeline (the named one at scale),
// cluster and run configuration the benchmark runs it with (rc carries seed).
func Setup(key, pipeline string, scale float64, seed uint64, rc sim.RunConfig) (Setting, error) {
	for _, sp := range specs() {
		if sp.key == key {
			p, err := sp.pipeline(pipeline, scale)
			if err != nil {
				return Setting{}, err
			}
			s, _ := sp.make(seed)
			rc.Seed = seed
			return Setting{Scheduler: s, Pipeline: p, Cluster: sp.cluster(), Run: sp.cfg(rc)}, nil
		}
	}
	return Setting{}, fmt.Errorf("unknown scheduler %q (want one of %s)", key, SchedulerNames())
}
