package profile

import (
	"math"
	"strconv"

	dto "github.com/prometheus/client_model/go"
)

// vLLM metric names, as the vLLM OpenAI-compatible server exports them on its /metrics
// (prometheus_client appends _total to counters). Sources: vLLM's "Production Metrics" page
// (docs.vllm.ai, usage/metrics), its metrics design note (docs/design/metrics.md, the v0
// list) and the V1 PrometheusStatLogger (vllm/v1/metrics/loggers.py). Every series carries
// the label model_name; V1 adds engine (one value per data-parallel engine), which is
// summed over.
const (
	vllmRunning = "vllm:num_requests_running" // gauge: requests in model execution batches
	vllmWaiting = "vllm:num_requests_waiting" // gauge: requests waiting to be scheduled
	vllmSwapped = "vllm:num_requests_swapped" // gauge, V0 only: requests swapped out to CPU
	// vllmKVCacheUsage is the KV-cache usage, 0..1 ("1 means 100 percent usage").
	// vllmGPUCacheUsage is its name before vLLM 0.9 (deprecated there, hidden from 0.10).
	vllmKVCacheUsage  = "vllm:kv_cache_usage_perc"
	vllmGPUCacheUsage = "vllm:gpu_cache_usage_perc"
	// vllmSuccess counts finished requests, label finished_reason (stop, length, abort;
	// newer releases also error).
	vllmSuccess      = "vllm:request_success_total"
	vllmPromptTokens = "vllm:prompt_tokens_total"     // counter: prefill tokens processed
	vllmGenTokens    = "vllm:generation_tokens_total" // counter: generation tokens processed
	vllmPreemptions  = "vllm:num_preemptions_total"   // counter: preemptions by the scheduler
	// Histograms observed once per finished request.
	vllmInferenceTime = "vllm:request_inference_time_seconds" // time in the RUNNING phase
	vllmE2ELatency    = "vllm:e2e_request_latency_seconds"    // arrival to last token
	vllmPromptHist    = "vllm:request_prompt_tokens"          // prompt tokens of the request
	vllmGenHist       = "vllm:request_generation_tokens"      // generated tokens of the request

	// vllmCacheConfig is an info gauge (value 1) whose labels describe the engine's KV
	// cache as sized at start-up: num_gpu_blocks blocks of block_size tokens.
	vllmCacheConfig = "vllm:cache_config_info"

	vllmModelLabel  = "model_name"
	vllmReasonLabel = "finished_reason"
)

// Workload features the vllm profile reports (declare them in trident_features).
const (
	// FeaturePromptTokens is the mean prompt length of the requests finished in the
	// interval.
	FeaturePromptTokens = "prompt_tokens"
	// FeatureGenerationTokens is the mean number of tokens generated per finished request.
	FeatureGenerationTokens = "generation_tokens"
	// FeaturePreemptionsPerRequest is preemptions per finished request: a symptom of the
	// configuration (KV-cache pressure), not a property of the workload; for diagnostics
	// rather than as an input of the capacity model.
	FeaturePreemptionsPerRequest = "preemptions_per_request"
)

// vllmProfile maps a vLLM server's metrics (one instance = one server process):
//
//	RecordsIn      requests finished, any finished_reason (vllm:request_success_total)
//	RecordsOut     requests finished with a reason other than abort or error
//	UsefulSeconds  sum of the requests' RUNNING-phase time (vllm:request_inference_time_seconds);
//	               e2e latency (includes queueing) on servers without it
//	QueueLength    vllm:num_requests_waiting (+ vllm:num_requests_swapped on V0)
//	utilisation    1 while requests wait (the scheduler holds them back: batch slots,
//	               KV blocks or the token budget are exhausted), 0 when nothing runs, else
//	               the KV-cache usage; vLLM exports no compute utilisation
//	features       prompt_tokens, generation_tokens (per-request histograms, else the token
//	               counters per finished request), preemptions_per_request (interval means)
//	Running, Waiting  vllm:num_requests_running, the QueueLength above (the engine's own
//	               counts, for the observation layer's starvation rules)
//	Pool           the KV cache of vllm:cache_config_info (num_gpu_blocks × block_size
//	               tokens; the smallest over engines) over Options.PoolNeed (group meta
//	               trident_pool_need, max_model_len), when both are known
//	BusySeconds, DeviceMemPeak, OOMRestarts, epoch: not exported (0; the epoch comes from
//	the allocation's meta)
type vllmProfile struct{}

func (vllmProfile) Name() string { return VLLM }

func (vllmProfile) Map(fams map[string]*dto.MetricFamily, o Options) (Metrics, error) {
	r := newReader(fams, vllmModelLabel, o)
	for _, alts := range [][]string{
		{vllmRunning}, {vllmWaiting}, {vllmSuccess}, {vllmKVCacheUsage, vllmGPUCacheUsage},
	} {
		r.need(alts...)
	}
	useful := r.needTotal(vllmInferenceTime, vllmE2ELatency)
	promptHist := r.hasTotal(vllmPromptHist)
	if !promptHist {
		r.need(vllmPromptHist, vllmPromptTokens)
	}
	genHist := r.hasTotal(vllmGenHist)
	if !genHist {
		r.need(vllmGenHist, vllmGenTokens)
	}
	if err := r.done(VLLM, "a vLLM OpenAI-compatible server serves them on its API port at /metrics"); err != nil {
		return Metrics{}, err
	}
	m := newMetrics()
	m.RecordsIn = r.sum(vllmSuccess, nil)
	m.RecordsOut = r.sum(vllmSuccess, func(s *dto.Metric) bool {
		reason, _ := label(s, vllmReasonLabel)
		return reason != "abort" && reason != "error"
	})
	t, _ := r.total(useful)
	m.UsefulSeconds = t.Sum
	running := r.sum(vllmRunning, nil)
	waiting := r.sum(vllmWaiting, nil)
	m.QueueLength = waiting + r.sum(vllmSwapped, nil)
	m.EngineReported, m.Running, m.Waiting = true, running, m.QueueLength
	kv := r.mean(r.first(vllmKVCacheUsage, vllmGPUCacheUsage))
	switch {
	case m.QueueLength > 0:
		m.AccelUtil = 1
	case running == 0:
		m.AccelUtil = 0
	default:
		m.AccelUtil = min(1, max(0, kv))
	}
	m.HasAccelerator = true
	// Per-request histograms (observed when a request finishes, like RecordsIn) are
	// preferred; the token counters (counted as tokens are processed) are the fallback.
	if promptHist {
		m.FeatureTotals[FeaturePromptTokens], _ = r.total(vllmPromptHist)
	} else {
		m.FeatureTotals[FeaturePromptTokens] = Total{Sum: r.sum(vllmPromptTokens, nil), Count: m.RecordsIn}
	}
	if genHist {
		m.FeatureTotals[FeatureGenerationTokens], _ = r.total(vllmGenHist)
	} else {
		m.FeatureTotals[FeatureGenerationTokens] = Total{Sum: r.sum(vllmGenTokens, nil), Count: m.RecordsIn}
	}
	if r.has(vllmPreemptions) {
		m.FeatureTotals[FeaturePreemptionsPerRequest] = Total{Sum: r.sum(vllmPreemptions, nil), Count: m.RecordsIn}
	}
	if o.PoolNeed > 0 {
		if kv := vllmKVTokens(r.series(vllmCacheConfig)); kv > 0 {
			m.Pool = kv / o.PoolNeed
		}
	}
	if r.err != nil {
		return Metrics{}, r.err
	}
	return m, nil
}

// vllmKVTokens returns the smallest KV cache, in tokens, of the engines whose
// vllm:cache_config_info series are given (num_gpu_blocks × block_size), or 0 when none
// states both as positive numbers.
func vllmKVTokens(series []*dto.Metric) float64 {
	least := 0.0
	for _, s := range series {
		b, okB := label(s, "num_gpu_blocks")
		z, okZ := label(s, "block_size")
		if !okB || !okZ {
			continue
		}
		blocks, err1 := strconv.ParseFloat(b, 64)
		size, err2 := strconv.ParseFloat(z, 64)
		if err1 != nil || err2 != nil || !(blocks > 0) || !(size > 0) || math.IsInf(blocks*size, 0) {
			continue
		}
		if kv := blocks * size; least == 0 || kv < least {
			least = kv
		}
	}
	return least
}
