// Package kvserve is a second response-surface model of a tunable serving engine, written
// apart from strategy/opmodel so that the adaptation layer's tuner can be measured on data
// it was not developed on (issue #21). It models a vLLM-style engine with a preallocated,
// paged KV cache:
//
//   - The engine reserves gpu_memory_utilization × device memory at start-up for the
//     weights, the activations of a profiling pass at max_num_batched_tokens tokens and
//     the KV cache, which takes whatever is left. Memory is therefore not a function of
//     the load: the peak is the reserved pool plus what the pool does not account for —
//     CUDA graphs captured after the pool is sized (enforce_eager = false), the CUDA
//     context, the sampler's logits for max_num_seqs sequences, allocator fragmentation
//     that grows with the run's length, and the attention workspace of the longest prompt
//     prefilled during the run, which grows with max_num_batched_tokens and the prompt
//     length. Prompt lengths are heavy-tailed (log-normal), so the peak of a run is set by
//     the longest prompt among its requests and a sustained run peaks well above a short
//     one. The OOM law is that extreme-value law, not a Gaussian fluctuation.
//   - Throughput is a roofline: each scheduler step streams the weights and the running
//     sequences' KV blocks (memory-bound) or computes the step's batched tokens
//     (compute-bound), whichever takes longer, plus a per-step launch overhead that CUDA
//     graphs shrink. Concurrency is the smaller of max_num_seqs and the sequences whose
//     blocks fit the KV pool (block-size rounding wastes half a block per sequence);
//     admitting more sequences than fit preempts and recomputes some of them. Chunked
//     prefill shares max_num_batched_tokens between decode and prefill tokens.
//
// Every function is a pure function of (model, configuration, duration, rng).
package kvserve

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/trident-sched/trident/strategy/configspace"
)

// Parameter names of the engine's configuration space (vLLM's engine arguments).
const (
	ParamGPUMemUtil     = "gpu_memory_utilization"
	ParamMaxNumSeqs     = "max_num_seqs"
	ParamMaxBatchTokens = "max_num_batched_tokens"
	ParamBlockSize      = "block_size"
	ParamEnforceEager   = "enforce_eager"
)

// Params is the configuration space in trident_params syntax. The default is a
// conservative deployment that fits every Model below with a wide margin.
const Params = ParamGPUMemUtil + "=float[0.70,0.98] default 0.8; " +
	ParamMaxNumSeqs + "=int[4,512,log] default 16; " +
	ParamMaxBatchTokens + "=int[512,16384,log] default 2048; " +
	ParamBlockSize + "=cat{8,16,32,64} default 16; " +
	ParamEnforceEager + "=bool default true; " +
	"constraint: " + ParamMaxBatchTokens + " >= " + ParamMaxNumSeqs

// Space returns the parsed Params.
func Space() *configspace.Space { return configspace.MustParse(Params) }

// Model is one engine, device and workload.
type Model struct {
	// Name labels the case, e.g. "Chat-13B (A100-40GB)".
	Name string
	// DeviceGB is the device memory (GB, 1e9 bytes).
	DeviceGB float64
	// WeightsGB is the model weights' memory.
	WeightsGB float64
	// ParamsB is the parameter count in billions (2 FLOPs per parameter and token).
	ParamsB float64
	// KVBytesPerToken is the KV cache of one context token over all layers.
	KVBytesPerToken float64
	// ActBytesPerToken is the activation memory per batched token that the profiling pass
	// reserves.
	ActBytesPerToken float64
	// AttnBytesPerTokenPair is the attention workspace per (query, key) pair of a prefill
	// chunk that the profiling pass does not see (its dummy prompts are short): fp16
	// scores of every head, 2 bytes × heads.
	AttnBytesPerTokenPair float64
	// Vocab is the vocabulary size (the sampler holds fp32 logits and probabilities).
	Vocab float64
	// MaxModelLen is the longest context served; longer prompts are truncated.
	MaxModelLen float64
	// TFLOPS and HBMGBps are the sustained compute rate and memory bandwidth.
	TFLOPS, HBMGBps float64
	// ContextGB is the CUDA context and other memory outside the reserved pool.
	ContextGB float64
	// FragGB is the allocator fragmentation per log-e unit of run length (in units of
	// 30 s), scaled by max_num_batched_tokens/2048.
	FragGB float64
	// PromptMedian and PromptSigma describe log-normal prompt lengths, OutputMedian and
	// OutputSigma log-normal output lengths (tokens).
	PromptMedian, PromptSigma, OutputMedian, OutputSigma float64
	// RateNoise is the relative standard deviation of a measured throughput, and
	// AllocNoiseGB the standard deviation of a run's allocator noise in the peak.
	RateNoise, AllocNoiseGB float64
}

// Chat13B returns a 13B dense model (multi-head attention, 800 KB of KV per token) on an
// A100 with 40 GB, serving chat prompts: KV-bound, so memory utilisation and block size
// decide the concurrency.
func Chat13B() Model {
	return Model{Name: "Chat-13B (A100-40GB)", DeviceGB: 40, WeightsGB: 26, ParamsB: 13,
		KVBytesPerToken: 819200, ActBytesPerToken: 180e3, AttnBytesPerTokenPair: 80, Vocab: 32000,
		MaxModelLen: 4096, TFLOPS: 150, HBMGBps: 1500, ContextGB: 0.6, FragGB: 0.05,
		PromptMedian: 600, PromptSigma: 0.9, OutputMedian: 180, OutputSigma: 0.7,
		RateNoise: 0.04, AllocNoiseGB: 0.08}
}

// RAG8B returns an 8B model with grouped-query attention (128 KB of KV per token, a
// 128k vocabulary) on a 24 GB L4 serving long retrieval-augmented prompts: prefill-heavy
// and close to the compute roofline, with long-prompt attention spikes.
func RAG8B() Model {
	return Model{Name: "RAG-8B (L4-24GB)", DeviceGB: 24, WeightsGB: 16, ParamsB: 8,
		KVBytesPerToken: 131072, ActBytesPerToken: 60e3, AttnBytesPerTokenPair: 64, Vocab: 128256,
		MaxModelLen: 16384, TFLOPS: 60, HBMGBps: 300, ContextGB: 0.5, FragGB: 0.04,
		PromptMedian: 2000, PromptSigma: 0.7, OutputMedian: 150, OutputSigma: 0.6,
		RateNoise: 0.04, AllocNoiseGB: 0.05}
}

// Expected is the noise-free behaviour of a configuration.
type Expected struct {
	// Throughput is the sustained requests per second (0 when the engine cannot start).
	Throughput float64
	// BaseGB is the peak memory without the prompt-dependent attention workspace and the
	// fragmentation (the pool plus what lies outside it).
	BaseGB float64
	// StartFails reports a configuration whose KV pool cannot hold one sequence of
	// MaxModelLen tokens, or whose pool does not fit at all: the engine refuses to start.
	StartFails bool
	// KVTokens is the KV cache the engine sizes at start-up, in tokens (vLLM's
	// num_gpu_blocks × block_size; negative when the weights and the profiled activations
	// leave nothing for it).
	KVTokens float64
}

// config reads the engine arguments of c.
type config struct {
	util, seqs, budget, block float64
	eager                     bool
}

func (m Model) read(c configspace.Config) (config, error) {
	k := config{util: c.Float(ParamGPUMemUtil), seqs: float64(c.Int(ParamMaxNumSeqs)),
		budget: float64(c.Int(ParamMaxBatchTokens)), block: float64(c.Int(ParamBlockSize)), eager: c.IsTrue(ParamEnforceEager)}
	if !(k.util > 0 && k.util <= 1) || !(k.seqs >= 1) || !(k.budget >= 1) || !(k.block >= 1) {
		return config{}, fmt.Errorf("kvserve: %s: incomplete or invalid config %s", m.Name, c)
	}
	return k, nil
}

// lnMean returns the mean of a log-normal with median med and shape s.
func lnMean(med, s float64) float64 { return med * math.Exp(s*s/2) }

// capture is the memory of the CUDA graphs captured for batch sizes up to max_num_seqs
// (0 in eager mode).
func (m Model) capture(k config) float64 {
	if k.eager {
		return 0
	}
	return 0.2 + 0.004*math.Min(k.seqs, 512)
}

// Model returns the noise-free throughput and memory of configuration c.
func (m Model) Model(c configspace.Config) (Expected, error) {
	k, err := m.read(c)
	if err != nil {
		return Expected{}, err
	}
	pool := k.util * m.DeviceGB
	profiled := k.budget * m.ActBytesPerToken / 1e9
	kvGB := pool - m.WeightsGB - profiled
	sampler := k.seqs * m.Vocab * 8 / 1e9 // fp32 logits and probabilities
	base := pool + m.ContextGB + m.capture(k) + sampler
	kvTokens := kvGB * 1e9 / m.KVBytesPerToken
	if kvTokens < m.MaxModelLen {
		return Expected{BaseGB: base, StartFails: true, KVTokens: kvTokens}, nil
	}

	prompt := math.Min(lnMean(m.PromptMedian, m.PromptSigma), m.MaxModelLen)
	out := lnMean(m.OutputMedian, m.OutputSigma)
	// A running sequence holds its prompt and, on average, half its output; block
	// rounding wastes half a block; the scheduler keeps a 1 % watermark free.
	perSeq := prompt + out/2 + k.block/2
	fit := 0.99 * kvTokens / perSeq
	n := math.Min(k.seqs, fit)
	// Admitting more sequences than fit: decode growth runs the pool dry and sequences
	// are preempted and recomputed. Heavy-tailed outputs make that worse.
	over := math.Max(0, k.seqs/fit-1)
	preempt := 1 / (1 + 0.35*math.Min(over, 3)*(1+m.OutputSigma))

	// Chunked prefill: each step schedules n decode tokens and n·prompt/out prefill tokens
	// to keep the batch full, within max_num_batched_tokens.
	perStep := n * (1 + prompt/out)
	tokens := math.Min(k.budget, perStep)
	nEff := tokens / (1 + prompt/out)

	// Roofline step: weights and KV blocks streamed, or the step's tokens computed.
	blockEff := map[float64]float64{8: 0.86, 16: 1, 32: 1.03, 64: 0.98}[k.block]
	if blockEff == 0 {
		blockEff = 0.9
	}
	ctx := prompt + out/2
	memT := (m.WeightsGB*1e9 + nEff*ctx*m.KVBytesPerToken/blockEff) / (m.HBMGBps * 1e9)
	compT := tokens * 2 * m.ParamsB * 1e9 / (m.TFLOPS * 1e12)
	launch := 0.004 + 0.00002*nEff // eager: Python and kernel launch per step
	if !k.eager && nEff <= math.Min(k.seqs, 512) {
		launch = 0.0008
	}
	step := math.Max(memT, compT) + launch + 0.1*math.Min(memT, compT)
	thr := nEff / (out * step) * preempt
	return Expected{Throughput: thr, BaseGB: base, KVTokens: kvTokens}, nil
}

// frag is the allocator fragmentation of a run of length d.
func (m Model) frag(k config, d time.Duration) float64 {
	return m.FragGB * math.Sqrt(k.budget/2048) * math.Log1p(d.Seconds()/30)
}

// spike is the unprofiled attention workspace of prefilling a prompt of l tokens.
func (m Model) spike(k config, l float64) float64 {
	l = math.Min(l, m.MaxModelLen)
	return m.AttnBytesPerTokenPair * math.Min(k.budget, l) * l / 1e9
}

// requests is the number of requests a run of duration d serves (at least 1).
func requests(thr float64, d time.Duration) float64 { return math.Max(1, thr*d.Seconds()) }

// Measurement is the outcome of running a configuration for a while.
type Measurement struct {
	// Throughput is the measured requests per second (0 after an OOM).
	Throughput float64
	// PeakGB is the peak device memory seen (the device memory after an OOM).
	PeakGB float64
	// OOM reports a run that failed with out-of-memory (or an engine that refused to
	// start).
	OOM bool
	// StartFailed reports an engine that refused to start (OOM is set too).
	StartFailed bool
	// KVTokens is the KV cache the engine reported at start-up, in tokens, as vLLM logs
	// and exports it (num_gpu_blocks × block_size); when the cache cannot hold one
	// sequence of MaxModelLen tokens its start-up error states the shortfall, and a cache
	// with no memory at all reads 0.
	KVTokens float64
}

// Evaluate runs configuration c for duration d. The peak is the base memory plus the
// fragmentation of a run of that length, the attention workspace of the longest prompt
// among the run's requests (drawn exactly: the maximum of N log-normals is the quantile
// u^(1/N)), and allocator noise.
func (m Model) Evaluate(c configspace.Config, d time.Duration, rng *rand.Rand) (Measurement, error) {
	x, err := m.Model(c)
	if err != nil {
		return Measurement{}, err
	}
	kv := math.Max(x.KVTokens, 0)
	if x.StartFails {
		return Measurement{PeakGB: m.DeviceGB, OOM: true, StartFailed: true, KVTokens: kv}, nil
	}
	k, _ := m.read(c)
	n := requests(x.Throughput, d)
	u := math.Pow(rng.Float64(), 1/n)
	lmax := m.PromptMedian * math.Exp(m.PromptSigma*normQuantile(u))
	peak := x.BaseGB + m.frag(k, d) + m.spike(k, lmax) + m.AllocNoiseGB*rng.NormFloat64()
	if peak > m.DeviceGB {
		return Measurement{PeakGB: m.DeviceGB, OOM: true, KVTokens: kv}, nil
	}
	return Measurement{Throughput: x.Throughput * math.Exp(m.RateNoise*rng.NormFloat64()), PeakGB: peak, KVTokens: kv}, nil
}

// OOMProbability returns the probability that a run of duration d fails with OOM,
// ignoring allocator noise: 1 − F(l*)^N, with N the run's requests, F the prompt-length
// distribution and l* the prompt length whose attention workspace fills the headroom.
func (m Model) OOMProbability(c configspace.Config, d time.Duration) (float64, error) {
	x, err := m.Model(c)
	if err != nil {
		return 0, err
	}
	if x.StartFails {
		return 1, nil
	}
	k, _ := m.read(c)
	head := m.DeviceGB - x.BaseGB - m.frag(k, d)
	if head <= 0 {
		return 1, nil
	}
	if m.spike(k, m.MaxModelLen) <= head {
		return 0, nil
	}
	// spike(l) is increasing in l: bisect for l*.
	lo, hi := 1.0, m.MaxModelLen
	if m.spike(k, lo) > head {
		return 1, nil
	}
	for range 60 {
		mid := (lo + hi) / 2
		if m.spike(k, mid) > head {
			hi = mid
		} else {
			lo = mid
		}
	}
	z := (math.Log(lo) - math.Log(m.PromptMedian)) / m.PromptSigma
	f := 0.5 * math.Erfc(-z/math.Sqrt2)
	return 1 - math.Pow(f, requests(x.Throughput, d)), nil
}

// normQuantile is the standard normal quantile function.
func normQuantile(p float64) float64 {
	switch {
	case p <= 0:
		return math.Inf(-1)
	case p >= 1:
		return math.Inf(1)
	}
	return -math.Sqrt2 * math.Erfcinv(2*p)
}
