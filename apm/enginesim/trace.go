// Package enginesim generates observation traces of an LLM serving engine with continuous
// batching behind a bounded queue, for testing capacity estimators (apm/observe) on data
// they were not developed on. It is a second, independent model of an operator: apm/trace
// draws each interval's rate from a closed-form capacity function and a Markov chain of
// pipeline regimes with set signal levels, whereas enginesim simulates the engine step by
// step and the metrics follow from what happened.
//
// The engine (engine.go) runs one decode step at a time: every running sequence emits one
// token per step, a step costs a fixed part (streaming the weights), a part per sequence,
// a part per cached context token and the prefill of the prompts admitted in it. Requests
// are admitted FIFO up to the admission limit (vLLM's max_num_seqs) while the KV cache has
// room; when the cache overflows, the newest sequence is preempted and recomputed later.
// Prompt lengths are log-normal and output lengths log-logistic (heavy-tailed), clipped to
// the server's limits. A bound caps the requests the operator holds — either a client
// semaphore counting the requests in flight, or a bounded queue of waiting requests — and
// the upstream producer blocks on it. Completed records go to a bounded output buffer that
// a downstream consumer drains; when it is full the engine waits (backpressure).
//
// Ground truth is what profiling the operator in isolation measures: the completion rate
// of the same engine, configuration, workload and bound with an unlimited supply, over 40
// simulated minutes (profile). An interval is clean — truly saturated — when the engine had
// work for all of it (at most 2% of its batch-slot time idle with nothing waiting; the slots
// are max_num_seqs, or the bound when it counts requests in flight and is smaller), its
// output was never blocked and it was not warming up.
//
// The metrics are exported the way a vLLM server and its client report them: records
// completed, busy seconds (time with a request running), useful seconds (per-request
// service times summed), the input queue gauge in the kind's convention, the queue bound
// when reported, output-blocked seconds when reported, utilisation as the busy fraction
// (as nvidia-smi reports it: near 1 whenever anything runs), the engine's running and
// waiting gauges when exported, the admission limit (from the configuration), the time since
// the engine's last (re)start (process_start_time_seconds) and the mean prompt and output
// lengths of the last 256 requests as workload features.
//
// Calibration. Step costs, KV capacities, length distributions and the episode mix are
// drawn per trace from ranges chosen to be physically plausible for a 7-8B model on one
// accelerator (tens of milliseconds per step, 2-40 requests/s); they were set before any
// estimator was run on these traces and were not changed to favour one.
package enginesim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/trident-sched/trident/apm/observe"
)

// Kind is a trace scenario.
type Kind string

// Trace kinds.
const (
	// LongStarvation alternates saturated episodes with long starved ones (smooth Poisson
	// arrivals below capacity); the queue gauge counts the requests in flight.
	LongStarvation Kind = "long-starvation"
	// BurstyStarvation feeds documents of heavy-tailed page counts arriving at once: below
	// capacity the queue fills and empties within an interval; the queue gauge counts
	// waiting requests only.
	BurstyStarvation Kind = "bursty-starvation"
	// Backpressure keeps the input saturated while a slow downstream consumer blocks the
	// output in episodes (the blocked time is reported).
	Backpressure Kind = "backpressure"
	// ColdStart starts with an empty pipeline whose input ramps up and restarts the engine
	// (same configuration) every few hundred intervals; each start has a warm-up.
	ColdStart Kind = "cold-start"
	// ConfigChange changes max_num_seqs every few hundred intervals (a new configuration
	// epoch, an engine restart with warm-up); the bound stays, so it binds some configs.
	ConfigChange Kind = "config-change"
	// WorkloadShift switches between request populations whose token lengths differ little
	// but whose prompt cost (image content, cache behaviour) differs a lot.
	WorkloadShift Kind = "workload-shift"
	// UnreportedBound exports neither the queue bound nor the engine's gauges: only the
	// queue gauge (counting requests in flight), the admission limit and the counters.
	UnreportedBound Kind = "unreported-bound"
	// HeavyTail draws very heavy-tailed output lengths (log-logistic shape 1.2-1.6) and
	// wide prompt lengths, so rates and features are noisy.
	HeavyTail Kind = "heavy-tail"
)

// Kinds returns every trace kind in table order.
func Kinds() []Kind {
	return []Kind{LongStarvation, BurstyStarvation, Backpressure, ColdStart, ConfigChange, WorkloadShift, UnreportedBound, HeavyTail}
}

// Condition is what an interval was, from the engine's point of view.
type Condition string

// Interval conditions (ground truth, not visible to estimators).
const (
	Saturated    Condition = "saturated"    // clean: work throughout, output free, warm
	Starved      Condition = "starved"      // more than 30% of the batch-slot time idle
	Intermittent Condition = "intermittent" // 2-30% of the batch-slot time idle
	Blocked      Condition = "backpressure" // output blocked for part of the interval
	WarmUp       Condition = "warm-up"      // the engine was warming up
)

// Point is one observation interval and its ground truth.
type Point struct {
	Sample observe.Sample
	// Capacity is the operator's sustained rate at its configuration and workload
	// (records/s), as profiling it in isolation measures it.
	Capacity float64
	// Regime identifies what Capacity depends on: the index of the engine configuration
	// and of the request population (ground truth, not visible to estimators). Two
	// intervals of a trace with the same Regime have the same Capacity.
	Regime [2]int
	// Clean reports a truly saturated interval (Condition Saturated).
	Clean bool
	// Current is the fraction of the interval's completions that were requests of the
	// current population (Regime[1]; 0 when none completed). After a workload switch
	// behind a deep queue the engine completes the previous population's requests for a
	// while: such an interval is saturated but its rate is the old workload's.
	Current   float64
	Condition Condition
	// StarvedFrac is the fraction of the interval's batch-slot time left idle for want of
	// requests (free slots, nothing waiting); BlockedFrac the fraction of the interval the
	// output was blocked.
	StarvedFrac, BlockedFrac float64
}

// Trace is a generated sequence of observation intervals. Intervals in which the engine
// restarted are left out (a scraper sees its counters reset and skips them).
type Trace struct {
	Kind     Kind
	Seed     uint64
	Features []string
	Points   []Point
}

// Config configures Generate; zero fields take defaults.
type Config struct {
	Kind Kind
	Seed uint64
	// Intervals is the number of observation intervals simulated (default 2000).
	Intervals int
	// Interval is the observation interval (default 10 s).
	Interval time.Duration
}

// scenario is the parameter set of a kind.
type scenario struct {
	countRunning  bool // the queue gauge and the bound count requests in flight
	reportCap     bool
	reportEngine  bool
	reportBlocked bool
	// Supply episodes: mean lengths in intervals (0: never) and load ranges relative to
	// the current capacity; docPages is the mean records per document.
	satMean, starveMean float64
	satLoad, starveLoad [2]float64
	docPages            float64
	// Backpressure episodes: mean length, mean gap, consumer rate range (× capacity).
	bpMean, bpGap float64
	bpRate        [2]float64
	// Restarts (same configuration) and configuration changes: mean intervals between.
	restartEvery, configEvery float64
	rampUp                    int // intervals of input ramp at the start
	// Workload: number of populations, mean intervals between switches, output shape and
	// prompt sigma ranges, hidden prompt-cost spread (log-uniform ± this, or the list).
	types       int
	switchEvery float64
	outShape    [2]float64
	inSigma     [2]float64
	hidden      float64
	hiddenSet   []float64
	similar     bool // populations share token lengths within ±10%
}

func scenarioOf(k Kind) (scenario, error) {
	base := scenario{
		countRunning: true, reportCap: true, reportEngine: true, reportBlocked: true,
		satMean: 50, starveMean: 20, satLoad: [2]float64{1.3, 2.5}, starveLoad: [2]float64{0.4, 0.9}, docPages: 1,
		types: 4, switchEvery: 200, outShape: [2]float64{2, 4}, inSigma: [2]float64{0.4, 0.9}, hidden: 0.15,
	}
	s := base
	switch k {
	case LongStarvation:
		s.satMean, s.starveMean, s.starveLoad = 40, 40, [2]float64{0.3, 0.9}
	case BurstyStarvation:
		s.countRunning = false
		s.satMean, s.starveMean, s.starveLoad, s.docPages = 30, 40, [2]float64{0.6, 0.97}, 30
	case Backpressure:
		s.starveMean = 0
		s.bpMean, s.bpGap, s.bpRate = 15, 30, [2]float64{0.3, 0.85}
	case ColdStart:
		s.countRunning = false
		s.restartEvery, s.rampUp = 350, 30
		s.satMean, s.starveMean = 60, 15
	case ConfigChange:
		s.configEvery = 400
	case WorkloadShift:
		s.countRunning = false
		s.switchEvery, s.similar, s.hiddenSet = 150, true, []float64{1, 1.8, 3, 4.5}
	case UnreportedBound:
		s.reportCap, s.reportEngine, s.reportBlocked = false, false, false
		s.starveMean, s.docPages = 30, 8
	case HeavyTail:
		s.outShape, s.inSigma = [2]float64{1.2, 1.6}, [2]float64{1.0, 1.3}
	default:
		return scenario{}, fmt.Errorf("enginesim: unknown kind %q", k)
	}
	return s, nil
}

// Features are the workload feature names of every trace.
var Features = []string{"prompt_tokens_mean", "output_tokens_mean"}

// generator holds a trace's state.
type generator struct {
	s    scenario
	rng  *rand.Rand
	seed uint64
	base engineParams
	seqs []int // max_num_seqs of the configurations (index 0 first)
	pops []workload
	cfg  int // current configuration index
	pop  int // current population
	// truth caches profiled capacities by configuration and population.
	truth map[[2]int]float64
	bound int
	e     *engine
	epoch uint64
	// episode state
	saturated   bool
	load        float64
	left        int // intervals left in the supply episode
	bpOn        bool
	bpLeft      int
	bpRate      float64
	nextSwitch  int
	nextRestart int
	nextConfig  int
}

func (g *generator) uniform(r [2]float64) float64 { return r[0] + (r[1]-r[0])*g.rng.Float64() }

func (g *generator) geometric(mean float64) int {
	if mean <= 0 {
		return math.MaxInt32
	}
	return 1 + int(math.Floor(math.Log(1-g.rng.Float64())/math.Log(1-1/math.Max(mean, 1.0001))))
}

func (g *generator) params() engineParams {
	p := g.base
	p.maxSeqs = g.seqs[g.cfg]
	return p
}

func (g *generator) capacity() float64 {
	k := [2]int{g.cfg, g.pop}
	if c, ok := g.truth[k]; ok {
		return c
	}
	c := profile(g.params(), g.pops[g.pop], g.bound, g.s.countRunning, g.seed*1000003+uint64(g.cfg*16+g.pop))
	g.truth[k] = c
	return c
}

// Generate simulates a trace.
func Generate(c Config) (*Trace, error) {
	s, err := scenarioOf(c.Kind)
	if err != nil {
		return nil, err
	}
	if c.Intervals == 0 {
		c.Intervals = 2000
	}
	if c.Intervals < 0 {
		return nil, fmt.Errorf("enginesim: %d intervals", c.Intervals)
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.Interval <= 0 {
		return nil, fmt.Errorf("enginesim: interval %v must be positive", c.Interval)
	}
	rng := rand.New(rand.NewPCG(c.Seed, uint64(len(c.Kind))*0x9e3779b9+0x656e67))
	g := &generator{s: s, rng: rng, seed: c.Seed, truth: map[[2]int]float64{}}
	g.base = engineParams{
		kvTokens:      math.Round(g.uniform([2]float64{120e3, 400e3})),
		stepBase:      g.uniform([2]float64{0.010, 0.020}),
		stepPerSeq:    g.uniform([2]float64{0.06e-3, 0.15e-3}),
		stepPerCtx:    g.uniform([2]float64{1.5e-8, 4e-8}),
		prefillPerTok: g.uniform([2]float64{1.5e-5, 3e-5}),
	}
	choices := []int{32, 64, 128, 192, 256}
	g.seqs = []int{choices[1+rng.IntN(4)]}
	if s.configEvery > 0 {
		for range 8 {
			next := choices[rng.IntN(len(choices))]
			for next == g.seqs[len(g.seqs)-1] {
				next = choices[rng.IntN(len(choices))]
			}
			g.seqs = append(g.seqs, next)
		}
	}
	if s.countRunning {
		g.bound = int(math.Round(g.uniform([2]float64{0.75, 3}) * float64(g.seqs[0])))
	} else {
		g.bound = int(math.Round(g.uniform([2]float64{0.5, 2}) * float64(g.seqs[0])))
	}
	var ref workload
	for i := range s.types {
		w := workload{
			inMedian:     math.Exp(g.uniform([2]float64{math.Log(200), math.Log(3000)})),
			inSigma:      g.uniform(s.inSigma),
			outMedian:    math.Exp(g.uniform([2]float64{math.Log(40), math.Log(500)})),
			outShape:     g.uniform(s.outShape),
			prefillScale: math.Exp(g.uniform([2]float64{-s.hidden, s.hidden})),
		}
		if s.similar {
			if i == 0 {
				// Prompt-heavy requests (page images), so that the prompt cost matters.
				w.inMedian = math.Exp(g.uniform([2]float64{math.Log(1200), math.Log(4000)}))
				ref = w
			} else {
				w = ref
				w.inMedian *= g.uniform([2]float64{0.9, 1.1})
				w.outMedian *= g.uniform([2]float64{0.9, 1.1})
			}
			w.prefillScale = s.hiddenSet[i%len(s.hiddenSet)]
		}
		g.pops = append(g.pops, w)
	}
	T := c.Interval.Seconds()
	g.e = &engine{rng: rand.New(rand.NewPCG(c.Seed, 0x656e67696e65)), p: g.params(), w: g.pops[0], bound: g.bound,
		countRunning: s.countRunning, outCap: 64, nextArrival: math.Inf(1)}
	// The feature window starts full (the operator reports the lengths of requests it saw
	// before the trace begins).
	for range featureWindow {
		p, o := g.pops[0].draw(g.e.rng)
		g.e.record(p, o)
	}
	g.nextSwitch = g.geometric(s.switchEvery)
	g.nextRestart = g.geometric(s.restartEvery)
	if s.configEvery > 0 {
		g.nextConfig = max(150, g.geometric(s.configEvery))
	} else {
		g.nextConfig = math.MaxInt32
	}
	g.newSupplyEpisode(true)
	if s.bpMean > 0 {
		g.bpLeft = g.geometric(s.bpGap)
	}
	if s.rampUp > 0 {
		g.e.warmStart, g.e.warmLen, g.e.warmSlow = 0, g.uniform([2]float64{60, 240}), g.uniform([2]float64{0.5, 1.5})
	}

	tr := &Trace{Kind: c.Kind, Seed: c.Seed, Features: append([]string(nil), Features...)}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for k := 0; k < c.Intervals; k++ {
		skip := g.events(k)
		g.e.setRate(g.rate(k))
		g.e.consumeRate = 0
		if g.bpOn {
			g.e.consumeRate = g.bpRate * g.capacity()
		}
		q0, r0, w0 := g.e.queueGauge(), float64(len(g.e.running)), float64(len(g.e.waiting))
		a := g.e.interval(float64(k+1) * T)
		if skip {
			continue
		}
		tr.Points = append(tr.Points, g.point(k, T, start, a, q0, r0, w0))
	}
	return tr, nil
}

// newSupplyEpisode draws the next upstream episode.
func (g *generator) newSupplyEpisode(first bool) {
	sat := first || !g.saturated
	if g.s.starveMean <= 0 {
		sat = true
	}
	g.saturated = sat
	if sat {
		g.load, g.left = g.uniform(g.s.satLoad), g.geometric(g.s.satMean)
	} else {
		g.load, g.left = g.uniform(g.s.starveLoad), g.geometric(g.s.starveMean)
	}
}

// events applies what happens at the start of interval k and reports whether the
// interval's sample is lost to an engine restart.
func (g *generator) events(k int) bool {
	skip := false
	if k > 0 && k == g.nextSwitch {
		next := g.rng.IntN(len(g.pops) - 1)
		if next >= g.pop {
			next++
		}
		g.pop = next
		g.e.w, g.e.pop = g.pops[g.pop], g.pop
		g.nextSwitch = k + g.geometric(g.s.switchEvery)
	}
	if k > 0 && k == g.nextConfig {
		g.cfg = min(g.cfg+1, len(g.seqs)-1)
		g.epoch++
		g.e.restart(g.params(), g.uniform([2]float64{60, 120}), 0.5)
		g.nextConfig = k + max(150, g.geometric(g.s.configEvery))
		skip = true
	}
	if k > 0 && k == g.nextRestart {
		g.e.restart(g.params(), g.uniform([2]float64{60, 240}), g.uniform([2]float64{0.5, 1.5}))
		g.nextRestart = k + g.geometric(g.s.restartEvery)
		skip = true
	}
	g.left--
	if g.left <= 0 {
		g.newSupplyEpisode(false)
	}
	if g.s.bpMean > 0 {
		g.bpLeft--
		if g.bpLeft <= 0 {
			g.bpOn = !g.bpOn
			if g.bpOn {
				g.bpRate, g.bpLeft = g.uniform(g.s.bpRate), g.geometric(g.s.bpMean)
			} else {
				g.bpLeft = g.geometric(g.s.bpGap)
			}
		}
	}
	return skip
}

// rate is the producer's record rate in interval k.
func (g *generator) rate(k int) float64 {
	load := g.load
	if k < g.s.rampUp {
		load = 0.1 + (g.uniform(g.s.satLoad)-0.1)*float64(k)/float64(g.s.rampUp)
	}
	g.e.docPages = g.s.docPages
	return load * g.capacity()
}

// point assembles interval k's sample and truth.
func (g *generator) point(k int, T float64, start time.Time, a accum, q0, r0, w0 float64) Point {
	e := g.e
	s := observe.Sample{
		Time:          start.Add(time.Duration(float64(k+1) * T * float64(time.Second))),
		Interval:      time.Duration(T * float64(time.Second)),
		Records:       float64(a.completions),
		BusySeconds:   math.Min(a.busy, T),
		UsefulSeconds: a.useful,
		QueueStart:    q0,
		QueueEnd:      e.queueGauge(),
		Utilization:   math.Min(a.busy/T, 1),
		Uptime:        time.Duration((float64(k+1)*T - e.started) * float64(time.Second)),
		Features:      e.features(),
		Epoch:         g.epoch,
	}
	s.Engine.AdmissionLimit = float64(e.p.maxSeqs)
	if g.s.reportCap {
		s.QueueCap = float64(g.bound)
	}
	if g.s.reportBlocked {
		s.OutputBlockedSeconds = a.blockd
	}
	if g.s.reportEngine {
		s.Engine.Reported = true
		s.Engine.RunningStart, s.Engine.RunningEnd = r0, float64(len(e.running))
		s.Engine.WaitingStart, s.Engine.WaitingEnd = w0, float64(len(e.waiting))
	}
	p := Point{Sample: s, Capacity: g.capacity(), Regime: [2]int{g.cfg, g.pop}, StarvedFrac: a.starved / T, BlockedFrac: a.blockd / T}
	if a.completions > 0 {
		p.Current = float64(a.byPop[g.pop]) / float64(a.completions)
	}
	switch {
	case a.warm > 0:
		p.Condition = WarmUp
	case a.blockd > 0:
		p.Condition = Blocked
	case p.StarvedFrac > 0.3:
		p.Condition = Starved
	case p.StarvedFrac > 0.02:
		p.Condition = Intermittent
	default:
		p.Condition, p.Clean = Saturated, true
	}
	return p
}
