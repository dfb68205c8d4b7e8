// Package trace generates seeded observation traces of an asynchronous batched operator
// running inside a pipeline, with the ground-truth capacity of every interval, for
// evaluating capacity estimators (paper §8.4, Table 3).
//
// The model. A latent workload state drifts as an AR(1) process and determines each
// interval's feature vector (token lengths for the PDF-like LLM operator, resolution and batch
// size for the video-like vision operator). The ground-truth capacity is a smooth function of
// the features — the throughput the operator would sustain in isolation at full load — times
// a small factor for content the features do not capture. The pipeline around the operator
// moves through regimes (a Markov chain of episodes):
//
//   - steady: the input queue holds a backlog; the observed rate is the capacity plus
//     measurement noise and the accelerator is busy;
//   - starved: upstream delivers less than the capacity; the rate equals the arrival rate,
//     the queue is empty and utilisation (batch occupancy) is low;
//   - backpressure: downstream throttles the output; the rate drops, the input queue grows
//     and utilisation falls with it;
//   - burst: a burst of input fills batches beyond their sustainable occupancy; the rate
//     temporarily exceeds capacity while the queue grows fast;
//   - draining: after backpressure or a burst the backlog is worked off while input is slow;
//     the queue shrinks and the rate is somewhat below capacity;
//   - contention (single intervals inside steady episodes): a GC pause or a co-located
//     process slows this operator and its upstream alike, so rate is off while utilisation
//     and queue look normal — only a model can tell.
//
// Metrics per interval follow the operator metrics contract: records completed, busy time
// (wall time with at least one record in service; it saturates near the interval even at
// low load, because continuous batching always keeps a few records in flight), useful time
// as per-record instrumentation reports it (per-record service times summed; records overlap
// in a batch, so it is the interval times the mean number in flight and exceeds the wall
// time), input queue at both ends, utilisation, features. Dividing records by useful time —
// DS2's "true processing rate" — therefore yields roughly the per-record completion rate of
// one batch slot, far below the batched capacity.
//
// Calibration. The capacity functions, the regime mix (episode lengths and entry
// probabilities), the signal levels and the noise levels are this package's own modelling
// choices, not measurements of a real pipeline. They were chosen to be physically plausible
// and so that the anomalies are about as frequent as the paper's Table 3 implies (its
// unfiltered estimators are off by 20–30%); the estimators' errors are measured on them,
// never set.
package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/trident-sched/trident/apm/observe"
)

// Kind selects the operator and workload a trace models.
type Kind string

// Trace kinds.
const (
	// PDF is an LLM operator of a document pipeline (continuous batching).
	PDF Kind = "pdf"
	// Video is a batched vision model of a video pipeline.
	Video Kind = "video"
)

// Regime is the pipeline condition an interval was observed under.
type Regime int

// Regimes.
const (
	Steady Regime = iota
	Starved
	Backpressure
	Burst
	Draining
	Contention
	numRegimes
)

var regimeNames = [...]string{"steady", "starved", "backpressure", "burst", "draining", "contention"}

// String returns the regime name.
func (r Regime) String() string {
	if r >= 0 && r < numRegimes {
		return regimeNames[r]
	}
	return fmt.Sprintf("regime(%d)", int(r))
}

// Point is one interval: the sample an estimator sees and the truth it is scored against.
type Point struct {
	Sample   observe.Sample
	Capacity float64 // ground-truth sustainable capacity, records per second
	Regime   Regime
}

// Trace is a generated sequence of intervals.
type Trace struct {
	Kind     Kind
	Features []string
	Points   []Point
}

// Config configures Generate. Zero fields take defaults.
type Config struct {
	Kind    Kind
	Seed    uint64
	Samples int // default 2000
	// Interval is the observation interval (default 10 s).
	Interval time.Duration
	// Start is the time of the first interval's start (default 2026-01-01 UTC).
	Start time.Time
	// NoiseSD is the relative sd of measurement noise on rates (default 0.04).
	NoiseSD float64
	// HiddenSD is the relative sd of capacity variation the features do not explain
	// (default 0.03); it bounds how accurate any feature-based estimator can be.
	HiddenSD float64
}

// model is the operator-specific part of a trace.
type model struct {
	features []string
	// feat maps the latent state and per-interval noise to features.
	feat func(z [2]float64, rng *rand.Rand) []float64
	// capacity is the ground-truth capacity at the features, records per second.
	capacity func(f []float64) float64
	// overlap is the mean number of records in flight at full occupancy.
	overlap func(f []float64) float64
	// steadyLen is the mean steady episode length in intervals; excursion episodes have
	// fixed means, so a longer steady phase means a calmer pipeline.
	steadyLen float64
}

func clamp(x, lo, hi float64) float64 { return math.Min(math.Max(x, lo), hi) }

func pdfModel() model {
	return model{
		features: []string{"token_in_mean", "token_in_std", "token_out_mean", "token_out_std"},
		feat: func(z [2]float64, rng *rand.Rand) []float64 {
			in := clamp(1100*math.Exp(0.45*z[0]+0.22*rng.NormFloat64()), 150, 6000)
			out := clamp(350*math.Exp(0.45*z[1]+0.22*rng.NormFloat64()), 40, 2500)
			inSD := in * clamp(0.35+0.15*math.Tanh(z[1])+0.05*rng.NormFloat64(), 0.05, 1)
			outSD := out * clamp(0.4+0.15*math.Tanh(z[0])+0.05*rng.NormFloat64(), 0.05, 1.2)
			return []float64{in, inSD, out, outSD}
		},
		capacity: func(f []float64) float64 {
			// GPU cost per record: cheap prefill per input token, expensive decode per
			// output token, fixed overhead; output-length spread leaves batch slots idle
			// while stragglers finish, and long prompts spread over chunked prefill.
			cost := 0.02*f[0] + 0.0015*f[1] + 0.12*f[2] + 8
			eff := 1 / (1 + 0.35*f[3]/f[2])
			return 2600 * eff / cost
		},
		overlap:   func(f []float64) float64 { return 2.2 + 0.8*f[2]/(f[2]+350) },
		steadyLen: 5,
	}
}

func videoModel() model {
	return model{
		features: []string{"resolution", "batch_size"},
		feat: func(z [2]float64, rng *rand.Rand) []float64 {
			res := clamp(720*math.Exp(0.35*z[0]+0.08*rng.NormFloat64()), 240, 2160)
			bs := clamp(16*math.Exp(0.5*z[1]+0.1*rng.NormFloat64()), 2, 64)
			return []float64{res, bs}
		},
		capacity: func(f []float64) float64 {
			// Frames per second: batching amortises per-launch overhead; pixels per frame
			// grow with the square of resolution, partly hidden by better GPU saturation.
			return 900 * f[1] / (f[1] + 4) * math.Pow(720/f[0], 1.7)
		},
		overlap:   func(f []float64) float64 { return 1.8 + 0.5*f[1]/(f[1]+16) },
		steadyLen: 6,
	}
}

// excursion is a non-steady episode type: probability of being entered from steady and
// mean length in intervals.
var excursions = []struct {
	r    Regime
	p    float64
	mean float64
}{
	{Starved, 0.45, 5},
	{Backpressure, 0.35, 3},
	{Burst, 0.20, 2},
}

// drainAfter is the probability that backpressure or a burst is followed by draining.
const drainAfter = 0.6

// contentionProb is the probability that a steady interval suffers contention.
const contentionProb = 0.06

// Generate returns a trace for cfg.
func Generate(cfg Config) (*Trace, error) {
	var m model
	switch cfg.Kind {
	case PDF:
		m = pdfModel()
	case Video:
		m = videoModel()
	default:
		return nil, fmt.Errorf("trace: unknown kind %q (want %q or %q)", cfg.Kind, PDF, Video)
	}
	if cfg.Samples == 0 {
		cfg.Samples = 2000
	}
	if cfg.Samples < 0 {
		return nil, fmt.Errorf("trace: %d samples", cfg.Samples)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("trace: interval %v must be positive", cfg.Interval)
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if cfg.NoiseSD == 0 {
		cfg.NoiseSD = 0.04
	}
	if cfg.HiddenSD == 0 {
		cfg.HiddenSD = 0.03
	}
	if cfg.NoiseSD < 0 || cfg.HiddenSD < 0 {
		return nil, fmt.Errorf("trace: negative noise (measurement %v, hidden %v)", cfg.NoiseSD, cfg.HiddenSD)
	}

	g := &gen{cfg: cfg, m: m, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(len(cfg.Kind))))}
	tr := &Trace{Kind: cfg.Kind, Features: m.features, Points: make([]Point, 0, cfg.Samples)}
	for i := 0; i < cfg.Samples; i++ {
		tr.Points = append(tr.Points, g.next(i))
	}
	return tr, nil
}

// gen is the generator state.
type gen struct {
	cfg    Config
	m      model
	rng    *rand.Rand
	z      [2]float64
	regime Regime
	left   int     // intervals left in the current episode
	level  float64 // episode parameter: load ratio (starved) or output throttle (backpressure)
	queue  float64
}

const phi = 0.97 // AR(1) coefficient of the latent workload per interval

func (g *gen) geometric(mean float64) int {
	// Geometric number of intervals >= 1 with the given mean.
	p := 1 / mean
	return 1 + int(math.Floor(math.Log(1-g.rng.Float64())/math.Log(1-p)))
}

func (g *gen) uniform(lo, hi float64) float64 { return lo + (hi-lo)*g.rng.Float64() }

// advance picks the regime of the next interval.
func (g *gen) advance() {
	if g.left > 0 {
		g.left--
		return
	}
	prev := g.regime
	switch {
	case (prev == Backpressure || prev == Burst) && g.rng.Float64() < drainAfter:
		g.regime, g.left = Draining, g.geometric(2)-1
		return
	case prev != Steady:
		g.regime, g.left = Steady, g.geometric(g.m.steadyLen)-1
		return
	}
	u := g.rng.Float64()
	for _, e := range excursions {
		if u < e.p {
			g.regime, g.left = e.r, g.geometric(e.mean)-1
			switch e.r {
			case Starved:
				g.level = g.uniform(0.2, 0.85)
			case Backpressure:
				g.level = g.uniform(0.3, 0.8)
			}
			return
		}
		u -= e.p
	}
}

func (g *gen) next(i int) Point {
	cfg, rng := g.cfg, g.rng
	T := cfg.Interval.Seconds()
	for k := range g.z {
		g.z[k] = phi*g.z[k] + math.Sqrt(1-phi*phi)*rng.NormFloat64()
	}
	f := g.m.feat(g.z, rng)
	capacity := g.m.capacity(f) * math.Exp(cfg.HiddenSD*rng.NormFloat64())
	noise := func() float64 { return 1 + cfg.NoiseSD*rng.NormFloat64() }

	if i == 0 {
		g.regime, g.left = Steady, g.geometric(g.m.steadyLen)-1
		g.queue = capacity * T
	} else {
		g.advance()
	}
	regime := g.regime
	if regime == Steady && rng.Float64() < contentionProb {
		regime = Contention
	}

	var rate, util, dq float64
	q0 := g.queue
	switch regime {
	case Steady:
		rate = capacity * noise()
		util = clamp(0.9+0.04*rng.NormFloat64(), 0, 1)
		dq = 0.03 * rng.NormFloat64() * rate * T
		if q0+dq < 0.2*capacity*T { // upstream keeps a backlog in steady state
			dq = 0.05 * rate * T
		}
	case Contention:
		if rng.Float64() < 0.8 {
			rate = capacity * g.uniform(0.35, 0.7) * noise()
		} else {
			rate = capacity * g.uniform(1.3, 1.6) * noise()
		}
		util = clamp(0.78+0.08*rng.NormFloat64(), 0, 1)
		dq = 0.03 * rng.NormFloat64() * rate * T
	case Starved:
		load := clamp(g.level*(1+0.05*rng.NormFloat64()), 0.05, 1)
		rate = capacity * load * noise()
		util = clamp(0.95*load+0.04*rng.NormFloat64(), 0, 1)
		dq = g.uniform(0, 0.02)*capacity*T - q0
	case Backpressure:
		throttle := clamp(g.level*(1+0.05*rng.NormFloat64()), 0.05, 1)
		rate = capacity * throttle * noise()
		util = clamp(0.9*throttle+0.1+0.05*rng.NormFloat64(), 0, 1)
		dq = (capacity*g.uniform(0.9, 1.1) - rate) * T
	case Burst:
		rate = capacity * g.uniform(1.1, 1.35) * noise()
		util = clamp(0.97+0.02*rng.NormFloat64(), 0, 1)
		dq = rate * g.uniform(0.3, 1.0) * T
	case Draining:
		rate = capacity * g.uniform(0.75, 1.0) * noise()
		util = clamp(0.85+0.05*rng.NormFloat64(), 0, 1)
		dq = -rate * g.uniform(0.3, 0.6) * T
	}
	rate = math.Max(rate, 0)
	g.queue = math.Max(q0+dq, 0)

	occ := math.Min(rate/capacity, 1.2)
	busy := T * clamp(1-math.Exp(-5*occ)+0.01*rng.NormFloat64(), 0, 1)
	inFlight := 1 + (g.m.overlap(f)-1)*occ
	useful := T * inFlight * clamp(1+0.03*rng.NormFloat64(), 0.5, 1.5)

	end := cfg.Start.Add(time.Duration(i+1) * cfg.Interval)
	return Point{
		Sample: observe.Sample{
			Time:          end,
			Interval:      cfg.Interval,
			Records:       math.Round(rate * T),
			BusySeconds:   busy,
			UsefulSeconds: useful,
			QueueStart:    math.Round(q0),
			QueueEnd:      math.Round(g.queue),
			Utilization:   util,
			Features:      f,
		},
		Capacity: capacity,
		Regime:   regime,
	}
}
