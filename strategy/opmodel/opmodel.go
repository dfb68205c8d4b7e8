// Package opmodel simulates tunable accelerator operators: an LLM serving engine in the style
// of vLLM (used for the TextOCR operator of the PDF pipeline) and a vision-language captioning
// operator (video pipeline). Throughput and peak device memory depend on the engine
// configuration and on the workload (token lengths, video length); configurations whose peak
// memory exceeds the device limit fail with an out-of-memory error.
//
// Every function is a pure function of (engine, config, workload, duration, rng): the models
// hold no state, so the simulator and the benchmarks can share them.
//
// The model is a roofline of continuous batching. With n concurrent sequences, one decode
// step costs t = t_w + n·(attention read) + tokens·(flops per token)/FLOPS, where t_w is the
// time to stream the weights once; every sequence emits one token per step, so throughput
// grows with n and saturates, while the KV cache grows linearly in n. The best
// configuration therefore sits close to the memory limit. Peak memory is the expectation plus
// the maximum fluctuation of the summed KV footprint over the run, so a long (sustained) run
// peaks higher than a short tuning evaluation.
package opmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/trident-sched/trident/strategy/configspace"
)

// Parameter names of the serving engine's configuration space.
const (
	ParamMaxNumSeqs     = "max_num_seqs"
	ParamMaxBatchTokens = "max_num_batched_tokens"
	ParamBlockSize      = "block_size"
	ParamSchedDelay     = "scheduler_delay_factor"
	ParamChunkedPrefill = "enable_chunked_prefill"
	ParamPrefixCaching  = "enable_prefix_caching"
)

// ServingParams is the configuration space of the serving engine in trident_params syntax.
// The defaults are a conservative deployment that fits both operators' heaviest workloads.
const ServingParams = ParamMaxNumSeqs + "=int[8,512,log] default 16; " +
	ParamMaxBatchTokens + "=int[1024,65536,log] default 4096; " +
	ParamBlockSize + "=cat{8,16,32} default 16; " +
	ParamSchedDelay + "=float[0,2] default 0; " +
	ParamChunkedPrefill + "=bool default true; " +
	ParamPrefixCaching + "=bool default false; " +
	"constraint: " + ParamMaxBatchTokens + " >= " + ParamMaxNumSeqs

// Space returns the parsed ServingParams.
func Space() *configspace.Space { return configspace.MustParse(ServingParams) }

// Engine describes the accelerator and the model an operator serves.
type Engine struct {
	// Name labels the operator, e.g. "TextOCR".
	Name string
	// DeviceMemGB is the device memory available to one instance.
	DeviceMemGB float64
	// WeightsGB is the memory of the model weights.
	WeightsGB float64
	// OverheadGB is fixed runtime memory (CUDA context, graphs, allocator pools).
	OverheadGB float64
	// KVBytesPerToken is the KV-cache footprint of one context token.
	KVBytesPerToken float64
	// ActBytesPerToken is the activation workspace per scheduled (batched) token.
	ActBytesPerToken float64
	// EncoderBytesPerToken is the vision-encoder workspace per visual token encoded
	// concurrently (0 for text-only models).
	EncoderBytesPerToken float64
	// FLOPsPerToken is the forward cost of one token.
	FLOPsPerToken float64
	// FLOPS is the sustained accelerator compute rate.
	FLOPS float64
	// MemBW is the device memory bandwidth in bytes/s.
	MemBW float64
	// ThroughputNoise is the relative standard deviation of a throughput measurement.
	ThroughputNoise float64
	// MemNoise is the relative standard deviation of allocator fragmentation in a peak.
	MemNoise float64
}

// TextOCR returns the engine of the PDF pipeline's LLM-based OCR operator: an 8B
// vision-language model (32 layers, 8 KV heads of 128, fp16) on an 80 GB accelerator.
func TextOCR() Engine {
	return Engine{
		Name: "TextOCR", DeviceMemGB: 80, WeightsGB: 16.5, OverheadGB: 2.5,
		KVBytesPerToken: 131072, ActBytesPerToken: 250e3,
		FLOPsPerToken: 16e9, FLOPS: 250e12, MemBW: 2.0e12,
		ThroughputNoise: 0.02, MemNoise: 0.01,
	}
}

// Captioning returns the engine of the video pipeline's captioning operator: a 7B
// vision-language model (28 layers, 4 KV heads of 128, fp16, ViT encoder) on 80 GB.
func Captioning() Engine {
	return Engine{
		Name: "Captioning", DeviceMemGB: 80, WeightsGB: 16.6, OverheadGB: 3,
		KVBytesPerToken: 57344, ActBytesPerToken: 200e3, EncoderBytesPerToken: 300e3,
		FLOPsPerToken: 15e9, FLOPS: 250e12, MemBW: 2.0e12,
		ThroughputNoise: 0.02, MemNoise: 0.01,
	}
}

// Workload summarises the requests of one workload cluster.
type Workload struct {
	// InTokens and OutTokens are median prompt and output lengths (log-normal).
	InTokens, OutTokens float64
	// InSigma and OutSigma are the log-normal shape parameters of the lengths.
	InSigma, OutSigma float64
	// PrefixTokens is the prompt prefix shared by all requests (system prompt, template).
	PrefixTokens float64
	// VisualTokens is the part of InTokens produced by the vision encoder.
	VisualTokens float64
}

// DocumentWorkload returns an OCR workload of pages with the given median prompt tokens
// (page image plus instructions) and output tokens.
func DocumentWorkload(inTokens, outTokens float64) Workload {
	return Workload{InTokens: inTokens, OutTokens: outTokens, InSigma: 0.25, OutSigma: 0.35,
		PrefixTokens: 160, VisualTokens: math.Max(0, inTokens-160)}
}

// VideoWorkload returns a captioning workload of videos of the given median length in
// seconds: frames are sampled at 1 fps up to 256 frames of 128 visual tokens.
func VideoWorkload(seconds float64) Workload {
	frames := math.Min(math.Max(seconds, 4), 256)
	vis := 128 * frames
	return Workload{InTokens: vis + 120, OutTokens: 120 + 60*math.Log1p(seconds/30),
		InSigma: 0.15, OutSigma: 0.3, PrefixTokens: 120, VisualTokens: vis}
}

// Measurement is the outcome of running an operator with one configuration.
type Measurement struct {
	// Throughput is sustained requests per second (0 after an OOM).
	Throughput float64
	// PeakMemGB is the peak device memory observed (the device limit after an OOM).
	PeakMemGB float64
	// OOM reports that the run failed with a device out-of-memory error.
	OOM bool
}

// Expected is the noise-free behaviour of a configuration under a workload.
type Expected struct {
	// Throughput is the mean sustained requests per second.
	Throughput float64
	// MemGB is the mean peak memory without fluctuation.
	MemGB float64
	// MemSDGB is the standard deviation of the KV footprint's fluctuation.
	MemSDGB float64
	// RequestSeconds is the mean lifetime of a request (one independent fluctuation).
	RequestSeconds float64
}

// lnMean returns the mean of a log-normal with median m and shape s.
func lnMean(m, s float64) float64 { return m * math.Exp(s*s/2) }

// lnSD returns the standard deviation of a log-normal with median m and shape s.
func lnSD(m, s float64) float64 { return lnMean(m, s) * math.Sqrt(math.Exp(s*s)-1) }

// Model returns the noise-free throughput and memory of configuration c under workload w.
func (e Engine) Model(c configspace.Config, w Workload) (Expected, error) {
	n := float64(c.Int(ParamMaxNumSeqs))
	budget := float64(c.Int(ParamMaxBatchTokens))
	block := float64(c.Int(ParamBlockSize))
	delay := c.Float(ParamSchedDelay)
	chunked := c.IsTrue(ParamChunkedPrefill)
	prefix := c.IsTrue(ParamPrefixCaching)
	if !(n >= 1) || !(budget >= 1) || !(block >= 1) || math.IsNaN(delay) {
		return Expected{}, fmt.Errorf("opmodel: %s: incomplete config %s", e.Name, c)
	}
	in, out := lnMean(w.InTokens, w.InSigma), lnMean(w.OutTokens, w.OutSigma)

	// Prefix caching: shared prefix blocks are computed and stored once.
	hit := 0.0
	if prefix {
		hit = math.Floor(w.PrefixTokens/block) * block
	}
	prefill := in - hit

	// Served fraction: without chunked prefill a prompt longer than the token budget cannot
	// be scheduled and is rejected.
	served := 1.0
	if !chunked {
		z := (math.Log(budget) - math.Log(w.InTokens)) / w.InSigma
		served = normCDF(z)
	}
	// Concurrency: each step schedules n decode tokens plus the prefill needed to keep the
	// batch full (n·prefill/out tokens), within the token budget.
	perSeqTokens := 1 + prefill/out
	conc := math.Min(n, budget/perSeqTokens)
	// Prefill kernels lose efficiency on small token budgets; without chunking, prefills
	// stall decodes.
	prefillEff := budget / (budget + 512)
	stall := 1.0
	if !chunked {
		stall = 1.3
	}
	blockEff := map[float64]float64{8: 0.93, 16: 1, 32: 0.985}[block]
	if blockEff == 0 {
		blockEff = 0.95
	}
	ctxAvg := in + out/2
	tw := (e.WeightsGB * 1e9) / e.MemBW
	attn := ctxAvg * e.KVBytesPerToken / e.MemBW / blockEff
	compute := (1 + prefill/out*stall/prefillEff) * e.FLOPsPerToken / e.FLOPS
	if prefix {
		compute *= 1.01 // hashing and cache lookups
	}
	step := tw + conc*(attn+compute)
	// Scheduler delay batches prefills a little better at small values and idles the
	// engine at large ones.
	delayGain := 1 + 0.08*delay - 0.1*delay*delay
	thr := conc / (out * step) * delayGain * served

	// Memory: KV cache of the concurrent sequences (blocks round up, shared prefix stored
	// once), activation workspace of the token budget, vision encoder workspace.
	ctxPeak := in + out
	perSeq := (ctxPeak-hit+block/2)*e.KVBytesPerToken + 8*1024 // block tables, sampler state
	kv := conc*perSeq + hit*e.KVBytesPerToken
	act := budget * e.ActBytesPerToken
	enc := math.Min(budget, w.VisualTokens) * e.EncoderBytesPerToken
	if !chunked {
		act *= 1.15 // whole prompts materialise at once
	}
	mem := e.WeightsGB + e.OverheadGB + (kv+act+enc)/1e9
	sdTok := math.Hypot(lnSD(w.InTokens, w.InSigma), lnSD(w.OutTokens, w.OutSigma))
	memSD := math.Sqrt(conc) * sdTok * e.KVBytesPerToken / 1e9
	return Expected{Throughput: thr, MemGB: mem, MemSDGB: memSD, RequestSeconds: out * step / delayGain}, nil
}

// draws returns the number of independent KV fluctuations in a run of duration d.
func draws(d time.Duration, reqSeconds float64) int {
	k := int(d.Seconds() / math.Max(reqSeconds, 1e-3))
	return max(1, min(k, 100000))
}

// Evaluate runs configuration c under workload w for duration d and returns a noisy
// measurement. The peak memory is the mean plus the largest of the run's independent KV
// fluctuations, with allocator noise; above the device limit the run fails with OOM.
func (e Engine) Evaluate(c configspace.Config, w Workload, d time.Duration, rng *rand.Rand) (Measurement, error) {
	x, err := e.Model(c, w)
	if err != nil {
		return Measurement{}, err
	}
	k := draws(d, x.RequestSeconds)
	var z float64
	if k <= 64 {
		z = math.Inf(-1)
		for range k {
			z = math.Max(z, rng.NormFloat64())
		}
	} else {
		// Gumbel approximation of the maximum of k standard normals.
		a := math.Sqrt(2 * math.Log(float64(k)))
		b := a - (math.Log(math.Log(float64(k)))+math.Log(4*math.Pi))/(2*a)
		z = b - math.Log(-math.Log(rng.Float64()))/a
	}
	peak := (x.MemGB + x.MemSDGB*z) * (1 + e.MemNoise*rng.NormFloat64())
	if peak > e.DeviceMemGB {
		return Measurement{PeakMemGB: e.DeviceMemGB, OOM: true}, nil
	}
	thr := x.Throughput * math.Exp(e.ThroughputNoise*rng.NormFloat64())
	return Measurement{Throughput: thr, PeakMemGB: peak}, nil
}

// OOMProbability returns the probability that a run of duration d fails with OOM, ignoring
// allocator noise: 1 − Φ(k)^draws with k the memory headroom in fluctuation units.
func (e Engine) OOMProbability(c configspace.Config, w Workload, d time.Duration) (float64, error) {
	x, err := e.Model(c, w)
	if err != nil {
		return 0, err
	}
	if x.MemSDGB == 0 {
		if x.MemGB > e.DeviceMemGB {
			return 1, nil
		}
		return 0, nil
	}
	k := (e.DeviceMemGB - x.MemGB) / x.MemSDGB
	return 1 - math.Pow(normCDF(k), float64(draws(d, x.RequestSeconds))), nil
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
