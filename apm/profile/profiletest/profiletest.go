// Package profiletest has fake metrics endpoints of the servers apm/profile reads, for tests:
// small http.Handlers that write Prometheus text exposition in the format each project
// documents, from a state the test drives (requests finishing, a restart).
//
// They follow the documentation, not a recording of a real server: vLLM's metric names and
// types from its production-metrics page and V1 stat logger (vllm/v1/metrics/loggers.py),
// written the way Python's prometheus_client writes them (counters with _total, a _created
// gauge per counter and histogram, floats as "3.0"); Triton's from its user guide
// (docs/user_guide/metrics.md), written the way prometheus-cpp writes them (counters without
// _total, integers without a decimal point).
package profiletest

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Hist is a cumulative histogram (or the sum and count of one).
type Hist struct {
	Bounds []float64 // upper bounds, ascending, without +Inf
	Counts []float64 // cumulative count per bound
	Sum    float64
	Count  float64
}

func newHist(bounds ...float64) Hist {
	return Hist{Bounds: bounds, Counts: make([]float64, len(bounds))}
}

// Observe adds n observations of v.
func (h *Hist) Observe(v float64, n int) {
	for i, b := range h.Bounds {
		if v <= b {
			h.Counts[i] += float64(n)
		}
	}
	h.Sum += v * float64(n)
	h.Count += float64(n)
}

func (h *Hist) reset() {
	*h = newHist(h.Bounds...)
}

// VLLM is a fake vLLM OpenAI-compatible server's /metrics.
type VLLM struct {
	mu sync.Mutex
	// Model is the model_name label.
	Model string
	// Engines is the number of data-parallel engines (label engine, V1); the state is
	// split evenly between them. 0 or 1: one engine.
	Engines int
	// PreV09 exports the KV-cache usage under its name before vLLM 0.9
	// (vllm:gpu_cache_usage_perc) instead of vllm:kv_cache_usage_perc.
	PreV09 bool
	// Omit leaves these metric families out (by exposed family name).
	Omit map[string]bool
	// Gauges.
	Running, Waiting, KVUsage float64
	// Counters.
	Finished                             map[string]float64 // by finished_reason
	PromptTokens, GenTokens, Preemptions float64
	// Histograms.
	Inference, E2E, Queue, PromptHist, GenHist Hist
	// StartTime is process_start_time_seconds (0: not exported).
	StartTime float64
}

// NewVLLM returns an idle fake server of model.
func NewVLLM(model string) *VLLM {
	lat := []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60}
	tok := []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}
	return &VLLM{
		Model:     model,
		Finished:  map[string]float64{"stop": 0, "length": 0, "abort": 0},
		Inference: newHist(lat...), E2E: newHist(lat...), Queue: newHist(lat...),
		PromptHist: newHist(tok...), GenHist: newHist(tok...),
	}
}

// Finish records n requests finished with reason, each with prompt and gen tokens, queue
// seconds waiting and infer seconds running; preempted preemptions happened meanwhile.
func (v *VLLM) Finish(n int, reason string, prompt, gen, queue, infer float64, preempted int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.Finished[reason] += float64(n)
	v.PromptTokens += prompt * float64(n)
	v.GenTokens += gen * float64(n)
	v.Preemptions += float64(preempted)
	v.Inference.Observe(infer, n)
	v.Queue.Observe(queue, n)
	v.E2E.Observe(queue+infer, n)
	v.PromptHist.Observe(prompt, n)
	v.GenHist.Observe(gen, n)
}

// Set sets the scheduler gauges.
func (v *VLLM) Set(running, waiting, kvUsage float64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.Running, v.Waiting, v.KVUsage = running, waiting, kvUsage
}

// Restart models a restarted server: counters and histograms from zero, gauges idle, a new
// start time (when exported).
func (v *VLLM) Restart() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k := range v.Finished {
		v.Finished[k] = 0
	}
	v.PromptTokens, v.GenTokens, v.Preemptions = 0, 0, 0
	v.Running, v.Waiting, v.KVUsage = 0, 0, 0
	for _, h := range []*Hist{&v.Inference, &v.E2E, &v.Queue, &v.PromptHist, &v.GenHist} {
		h.reset()
	}
	if v.StartTime != 0 {
		v.StartTime += 3600
	}
}

// ServeHTTP writes the exposition.
func (v *VLLM) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	v.Write(w)
}

// Write writes the exposition to w.
func (v *VLLM) Write(w io.Writer) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := &expo{w: w, omit: v.Omit, float: pyFloat}
	engines := max(1, v.Engines)
	share := func(x float64) float64 { return x / float64(engines) }
	base := func(i int) map[string]string {
		return map[string]string{"model_name": v.Model, "engine": strconv.Itoa(i)}
	}
	if v.StartTime != 0 {
		e.family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.")
		e.sample("process_start_time_seconds", nil, v.StartTime)
	}
	gauge := func(name, help string, x float64, mean bool) {
		e.family(name, "gauge", help)
		for i := 0; i < engines; i++ {
			val := share(x)
			if mean {
				val = x
			}
			e.sample(name, base(i), val)
		}
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", v.Running, false)
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", v.Waiting, false)
	if v.PreV09 {
		gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", v.KVUsage, true)
	} else {
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", v.KVUsage, true)
	}
	counter := func(name, help string, x float64) {
		e.family(name+"_total", "counter", help)
		for i := 0; i < engines; i++ {
			e.sample(name+"_total", base(i), share(x))
		}
		e.created(name, engines, base)
	}
	counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", v.Preemptions)
	counter("vllm:prompt_tokens", "Number of prefill tokens processed.", v.PromptTokens)
	counter("vllm:generation_tokens", "Number of generation tokens processed.", v.GenTokens)
	e.family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
	reasons := make([]string, 0, len(v.Finished))
	for r := range v.Finished {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for i := 0; i < engines; i++ {
		for _, r := range reasons {
			l := base(i)
			l["finished_reason"] = r
			e.sample("vllm:request_success_total", l, share(v.Finished[r]))
		}
	}
	hist := func(name, help string, h Hist) {
		e.family(name, "histogram", help)
		for i := 0; i < engines; i++ {
			e.hist(name, base(i), h, share)
		}
		e.created(name, engines, base)
	}
	hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", v.PromptHist)
	hist("vllm:request_generation_tokens", "Number of generation tokens processed.", v.GenHist)
	hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", v.E2E)
	hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", v.Queue)
	hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", v.Inference)
}

// Triton is a fake Triton Inference Server's /metrics (one model, version 1).
type Triton struct {
	mu sync.Mutex
	// Models are the models served; the state below belongs to Models[0], the others
	// report a fixed small load.
	Models []string
	// GPUs is the number of GPUs the server sees (0: a CPU-only server, which exports
	// nv_cpu_utilization instead).
	GPUs int
	// Omit leaves these metric families out.
	Omit map[string]bool
	// Counters of Models[0].
	Success, Failure, Inferences, Executions float64
	QueueUS, InputUS, InferUS, OutputUS      float64
	// Gauges.
	Pending, Util, MemUsed float64
}

// NewTriton returns an idle fake server of models on gpus GPUs.
func NewTriton(gpus int, models ...string) *Triton {
	return &Triton{Models: models, GPUs: gpus}
}

// Infer records n successful requests of items inferences each, executed in batches of
// batch items, each request spending queueUS waiting and computeUS computing (split 10 %
// input, 80 % infer, 10 % output).
func (t *Triton) Infer(n, items, batch int, queueUS, computeUS float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Success += float64(n)
	t.Inferences += float64(n * items)
	t.Executions += math.Ceil(float64(n*items) / float64(batch))
	t.QueueUS += queueUS * float64(n)
	t.InputUS += 0.1 * computeUS * float64(n)
	t.InferUS += 0.8 * computeUS * float64(n)
	t.OutputUS += 0.1 * computeUS * float64(n)
}

// Fail records n failed requests.
func (t *Triton) Fail(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Failure += float64(n)
}

// Set sets the gauges: pending requests, GPU (or CPU) utilisation, used memory per GPU.
func (t *Triton) Set(pending, util, memUsed float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Pending, t.Util, t.MemUsed = pending, util, memUsed
}

// Restart models a restarted server: counters from zero, gauges idle.
func (t *Triton) Restart() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Success, t.Failure, t.Inferences, t.Executions = 0, 0, 0, 0
	t.QueueUS, t.InputUS, t.InferUS, t.OutputUS = 0, 0, 0, 0
	t.Pending, t.Util = 0, 0
}

// ServeHTTP writes the exposition.
func (t *Triton) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	t.Write(w)
}

// Write writes the exposition to w.
func (t *Triton) Write(w io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &expo{w: w, omit: t.Omit, float: cppFloat}
	model := func(name string) map[string]string { return map[string]string{"model": name, "version": "1"} }
	perModel := func(name, typ, help string, x float64) {
		e.family(name, typ, help)
		for i, m := range t.Models {
			v := x
			if i > 0 {
				v = 7 // the other models' fixed load
			}
			e.sample(name, model(m), v)
		}
	}
	perModel("nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes", t.Success)
	e.family("nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes")
	for i, m := range t.Models {
		for _, reason := range []string{"BACKEND", "CANCELED", "OTHER", "REJECTED"} {
			l := model(m)
			l["reason"] = reason
			v := 0.0
			if i == 0 && reason == "REJECTED" {
				v = t.Failure
			}
			e.sample("nv_inference_request_failure", l, v)
		}
	}
	perModel("nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)", t.Inferences)
	perModel("nv_inference_exec_count", "counter", "Number of model executions performed (does not include cached requests)", t.Executions)
	perModel("nv_inference_request_duration_us", "counter", "Cumulative inference request duration in microseconds (includes cached requests)", t.QueueUS+t.InputUS+t.InferUS+t.OutputUS)
	perModel("nv_inference_queue_duration_us", "counter", "Cumulative inference queuing duration in microseconds (includes cached requests)", t.QueueUS)
	perModel("nv_inference_compute_input_duration_us", "counter", "Cumulative compute input duration in microseconds (does not include cached requests)", t.InputUS)
	perModel("nv_inference_compute_infer_duration_us", "counter", "Cumulative compute inference duration in microseconds (does not include cached requests)", t.InferUS)
	perModel("nv_inference_compute_output_duration_us", "counter", "Cumulative inference compute output duration in microseconds (does not include cached requests)", t.OutputUS)
	perModel("nv_inference_pending_request_count", "gauge", "Instantaneous number of pending requests awaiting execution per-model.", t.Pending)
	if t.GPUs > 0 {
		gpu := func(name, help string, x float64) {
			e.family(name, "gauge", help)
			for i := 0; i < t.GPUs; i++ {
				e.sample(name, map[string]string{"gpu_uuid": fmt.Sprintf("GPU-0000000%d-1111-2222-3333-444444444444", i)}, x)
			}
		}
		gpu("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", t.Util)
		gpu("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", 80e9)
		gpu("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", t.MemUsed)
		e.family("nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]")
		e.sample("nv_cpu_utilization", nil, 0.05)
	} else {
		e.family("nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]")
		e.sample("nv_cpu_utilization", nil, t.Util)
	}
}

// expo writes exposition text, skipping omitted families.
type expo struct {
	w     io.Writer
	omit  map[string]bool
	float func(float64) string
	skip  bool
}

func (e *expo) family(name, typ, help string) {
	e.skip = e.omit[name]
	if !e.skip {
		fmt.Fprintf(e.w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
}

func (e *expo) sample(name string, labels map[string]string, v float64) {
	if e.skip {
		return
	}
	fmt.Fprintf(e.w, "%s%s %s\n", name, fmtLabels(labels), e.float(v))
}

func (e *expo) hist(name string, labels map[string]string, h Hist, share func(float64) float64) {
	for i, b := range h.Bounds {
		l := copyLabels(labels)
		l["le"] = e.float(b)
		e.sample(name+"_bucket", l, share(h.Counts[i]))
	}
	l := copyLabels(labels)
	l["le"] = "+Inf"
	e.sample(name+"_bucket", l, share(h.Count))
	e.sample(name+"_count", labels, share(h.Count))
	e.sample(name+"_sum", labels, share(h.Sum))
}

// created writes prometheus_client's _created gauge family of metric name.
func (e *expo) created(name string, engines int, base func(int) map[string]string) {
	e.family(name+"_created", "gauge", "")
	for i := 0; i < engines; i++ {
		e.sample(name+"_created", base(i), 1.7e9)
	}
}

func fmtLabels(l map[string]string) string {
	if len(l) == 0 {
		return ""
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, l[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func copyLabels(l map[string]string) map[string]string {
	out := make(map[string]string, len(l)+1)
	for k, v := range l {
		out[k] = v
	}
	return out
}

// pyFloat formats like Python's repr of a float ("3.0", "0.25", "1.7e+09").
func pyFloat(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e16 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// cppFloat formats like prometheus-cpp ("10", "0.25").
func cppFloat(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
