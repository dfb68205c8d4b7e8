package sim

import (
	"fmt"
	"math"

	"github.com/trident-sched/trident/strategy/configspace"
)

// CPUModel is a synchronous operator: one instance spends Cost(a) seconds per input record.
type CPUModel struct {
	// Cost returns the service time of one record in seconds on one instance.
	Cost func(a Attrs) float64
	// Amp returns output records per input record (nil: 1).
	Amp func(a Attrs) float64
	// Out returns the output record size in MB.
	Out func(a Attrs) float64
	// Feat returns the reported workload features (nil: none).
	Feat func(a Attrs) []float64
}

// Rate implements Model.
func (m *CPUModel) Rate(a Attrs, _ OpConfig, _ float64) float64 { return 1 / m.Cost(a) }

// Amplification implements Model.
func (m *CPUModel) Amplification(a Attrs) float64 {
	if m.Amp == nil {
		return 1
	}
	return m.Amp(a)
}

// OutMB implements Model.
func (m *CPUModel) OutMB(a Attrs) float64 {
	if m.Out == nil {
		return 0.01
	}
	return m.Out(a)
}

// PeakMem implements Model: CPU operators use no device memory.
func (m *CPUModel) PeakMem(Attrs, OpConfig, float64) (float64, float64) { return 0, 0 }

// Features implements Model.
func (m *CPUModel) Features(a Attrs) []float64 {
	if m.Feat == nil {
		return nil
	}
	return m.Feat(a)
}

// LLM engine configuration parameter indexes (see LLMSpace).
const (
	LLMMaxNumSeqs = iota
	LLMMaxBatchedTokens
	LLMBlockSize
	LLMChunkedPrefill
)

// LLMSpace is the tunable space of a vLLM-style inference engine: max-num-seqs,
// max-num-batched-tokens, block-size and enable-chunked-prefill (0/1).
func LLMSpace(defSeqs, defTokens float64) *configspace.Space {
	return mustSpace(
		intParam("max_num_seqs", 8, 512, true, defSeqs),
		intParam("max_num_batched_tokens", 1024, 32768, true, defTokens),
		intParam("block_size", 8, 128, true, 16),
		intParam("enable_chunked_prefill", 0, 1, false, 1),
	)
}

// intParam is an integer parameter of a simulated engine's space.
func intParam(name string, lo, hi float64, log bool, def float64) configspace.Param {
	return configspace.Param{Name: name, Kind: configspace.Int, Min: lo, Max: hi, Log: log, Default: configspace.Num(def)}
}

// mustSpace builds a built-in engine's space; its declarations are constants, so an error
// is a programming error.
func mustSpace(params ...configspace.Param) *configspace.Space {
	s, err := configspace.New(params, nil)
	if err != nil {
		panic(fmt.Sprintf("sim: built-in space: %v", err))
	}
	return s
}

// LLMModel is an asynchronous accelerator operator running a continuous-batching LLM/VLM
// engine (vLLM style) on the share Frac(a) of its input records (the rest passes through at
// PassCost). The engine pre-allocates its KV cache: GPUMemUtil of the device minus the
// weights and the activation reserve of one max-num-batched-tokens chunk. The running batch
// is bounded by max-num-seqs and by the sequences that fit the cache; beyond that requests
// are preempted and recomputed. Peak memory is the weights, the used KV cache and the
// prefill activations; OOMs come from activation peaks above the profiled reserve.
type LLMModel struct {
	// Frac returns the fraction of records the engine processes (nil: 1).
	Frac func(a Attrs) float64
	// Tokens returns mean prompt (incl. visual) and output tokens per engine request, and
	// the coefficient of variation of the request length.
	Tokens func(a Attrs) (in, out, cv float64)
	// T0 is the fixed per-iteration cost, T1 the per-sequence decode cost (s).
	T0, T1 float64
	// P1 is the prefill cost per token, P0 the fixed cost per prefill chunk (s).
	P1, P0 float64
	// PassCost is the service time of a passed-through record (s).
	PassCost float64
	// DeviceGB and GPUMemUtil size the engine's memory budget.
	DeviceGB, GPUMemUtil float64
	// WeightsGB, KVGBPerTok and ActGBPerTok define the memory model.
	WeightsGB, KVGBPerTok, ActGBPerTok float64
	// ActCV is the relative spread of activation peaks (default 0.2).
	ActCV float64
	// Amp, Out and Feat as in CPUModel.
	Amp  func(a Attrs) float64
	Out  func(a Attrs) float64
	Feat func(a Attrs) []float64
}

func (m *LLMModel) frac(a Attrs) float64 {
	if m.Frac == nil {
		return 1
	}
	return math.Min(1, math.Max(0, m.Frac(a)))
}

// kvSeqs returns how many sequences of attrs a fit the pre-allocated KV cache under cfg.
func (m *LLMModel) kvSeqs(a Attrs, cfg OpConfig) float64 {
	in, out, _ := m.Tokens(a)
	util := m.GPUMemUtil
	if util == 0 {
		util = 0.9
	}
	pool := util*m.DeviceGB - m.WeightsGB - cfg[LLMMaxBatchedTokens]*m.ActGBPerTok
	perSeq := (in + out + cfg[LLMBlockSize]/2) * m.KVGBPerTok
	return math.Max(0, pool/perSeq)
}

// batch returns the running batch for c records in flight and whether requests are
// being preempted for lack of KV cache.
func (m *LLMModel) batch(a Attrs, cfg OpConfig, c float64) (float64, bool) {
	want := math.Min(c*math.Max(m.frac(a), 0.05), cfg[LLMMaxNumSeqs])
	kv := m.kvSeqs(a, cfg)
	if want > kv {
		return math.Max(1, kv), true
	}
	return math.Max(1, want), false
}

// EngineRate returns engine requests/s at batch b (exported for tests and calibration).
func (m *LLMModel) EngineRate(a Attrs, cfg OpConfig, b float64) float64 {
	in, out, _ := m.Tokens(a)
	B := cfg[LLMMaxBatchedTokens]
	chunk := math.Min(B, b*in)
	decode := out * (m.T0/b + m.T1)
	prefill := in * (m.P1 + m.P0/math.Max(chunk, 1))
	if cfg[LLMChunkedPrefill] < 0.5 {
		// Without chunked prefill long prompts stall the decode batch.
		prefill *= 1.25
	}
	// Larger KV blocks cut block-table overhead slightly.
	bs := cfg[LLMBlockSize]
	decode *= 1 + 0.02*math.Log2(32/bs)
	return 1 / (decode + prefill)
}

// Rate implements Model.
func (m *LLMModel) Rate(a Attrs, cfg OpConfig, c float64) float64 {
	f := m.frac(a)
	b, preempt := m.batch(a, cfg, c)
	r := m.EngineRate(a, cfg, b)
	if preempt {
		r *= 0.85 // recomputation of preempted sequences
	}
	return 1 / (f/r + (1-f)*m.PassCost)
}

// Occupancy implements sim.Occupier: running batch / max-num-seqs.
func (m *LLMModel) Occupancy(a Attrs, cfg OpConfig, c float64) float64 {
	b, _ := m.batch(a, cfg, c)
	return b / cfg[LLMMaxNumSeqs]
}

// EngineRequests implements sim.Batcher: of c records in flight, the share that needs
// generation (Frac) are the engine's requests; it runs the batch (at most max_num_seqs,
// and what the KV cache holds) and the rest wait.
func (m *LLMModel) EngineRequests(a Attrs, cfg OpConfig, c float64) (running, waiting, limit float64) {
	reqs := c * m.frac(a)
	b, _ := m.batch(a, cfg, c)
	running = math.Min(b, reqs)
	return running, math.Max(0, reqs-running), cfg[LLMMaxNumSeqs]
}

// PeakMem implements Model.
func (m *LLMModel) PeakMem(a Attrs, cfg OpConfig, c float64) (float64, float64) {
	in, out, cv := m.Tokens(a)
	b, _ := m.batch(a, cfg, c)
	kv := b * (in + out + cfg[LLMBlockSize]/2) * m.KVGBPerTok
	act := math.Min(cfg[LLMMaxBatchedTokens], math.Max(b*in, in)) * m.ActGBPerTok
	acv := m.ActCV
	if acv == 0 {
		acv = 0.2
	}
	return m.WeightsGB + kv + act, act * acv * (1 + cv)
}

// Amplification implements Model.
func (m *LLMModel) Amplification(a Attrs) float64 {
	if m.Amp == nil {
		return 1
	}
	return m.Amp(a)
}

// OutMB implements Model.
func (m *LLMModel) OutMB(a Attrs) float64 {
	if m.Out == nil {
		return 0.01
	}
	return m.Out(a)
}

// Features implements Model.
func (m *LLMModel) Features(a Attrs) []float64 {
	if m.Feat == nil {
		in, out, cv := m.Tokens(a)
		return []float64{in, in * cv, out, out * cv}
	}
	return m.Feat(a)
}

// VisionModel is a batched accelerator vision model (e.g. CLIP, CRAFT) whose batch size
// is tunable: larger batches amortise launch overhead but need more device memory.
type VisionModel struct {
	// PerItem returns the device seconds of one record at full batch efficiency.
	PerItem func(a Attrs) float64
	// Overhead is the fixed cost per batch (s).
	Overhead float64
	// MemPerItem returns device GB per batched record.
	MemPerItem func(a Attrs) float64
	WeightsGB  float64
	// CV is the variation of per-record memory (resolution mix).
	CV   float64
	Amp  func(a Attrs) float64
	Out  func(a Attrs) float64
	Feat func(a Attrs) []float64
}

// VisionSpace is the tunable space of a VisionModel: batch_size and num_workers
// (pre-processing threads feeding the device).
func VisionSpace(defBatch float64) *configspace.Space {
	return mustSpace(
		intParam("batch_size", 1, 128, true, defBatch),
		intParam("num_workers", 1, 16, false, 4),
	)
}

// Rate implements Model.
func (m *VisionModel) Rate(a Attrs, cfg OpConfig, c float64) float64 {
	b := math.Max(1, math.Min(c, cfg[0]))
	w := cfg[1]
	// Too few loader workers starve the device; each worker feeds ~3 records/s of
	// per-item device time 0.05 s.
	feed := 1 + 0.5*math.Min(1, w/8)
	per := m.PerItem(a)*(1.5/feed) + m.Overhead/b
	return 1 / per
}

// PeakMem implements Model.
func (m *VisionModel) PeakMem(a Attrs, cfg OpConfig, c float64) (float64, float64) {
	b := math.Max(1, math.Min(c, cfg[0]))
	per := m.MemPerItem(a)
	mean := m.WeightsGB + b*per + 0.15*cfg[1]
	return mean, b * per * m.CV
}

// Amplification implements Model.
func (m *VisionModel) Amplification(a Attrs) float64 {
	if m.Amp == nil {
		return 1
	}
	return m.Amp(a)
}

// OutMB implements Model.
func (m *VisionModel) OutMB(a Attrs) float64 {
	if m.Out == nil {
		return 0.01
	}
	return m.Out(a)
}

// Features implements Model.
func (m *VisionModel) Features(a Attrs) []float64 {
	if m.Feat == nil {
		return nil
	}
	return m.Feat(a)
}
