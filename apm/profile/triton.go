package profile

import (
	dto "github.com/prometheus/client_model/go"
)

// Triton Inference Server metric names (its /metrics, port 8002 by default). Source: the
// "Metrics" page of the Triton user guide (triton-inference-server/server,
// docs/user_guide/metrics.md). Counters carry no _total suffix; per-model series carry the
// labels model and version (failures also reason), per-GPU series gpu_uuid.
const (
	tritonSuccess = "nv_inference_request_success" // counter: successful requests (a batch counts 1)
	tritonFailure = "nv_inference_request_failure" // counter: failed requests
	tritonCount   = "nv_inference_count"           // counter: inferences (a batch of n counts n), no cache hits
	tritonExec    = "nv_inference_exec_count"      // counter: batch executions, no cache hits
	// tritonPending is the number of requests received and not yet executing (the
	// scheduler queues); Triton 2.38 (NGC 23.09) and later.
	tritonPending = "nv_inference_pending_request_count"
	// Cumulative per-request durations in microseconds (the default "counter_latencies";
	// off with --metrics-config counter_latencies=false).
	tritonComputeInputUS  = "nv_inference_compute_input_duration_us"
	tritonComputeInferUS  = "nv_inference_compute_infer_duration_us"
	tritonComputeOutputUS = "nv_inference_compute_output_duration_us"
	// GPU metrics (DCGM, --allow-gpu-metrics), per GPU the server sees.
	tritonGPUUtil    = "nv_gpu_utilization"       // gauge 0..1
	tritonGPUMemUsed = "nv_gpu_memory_used_bytes" // gauge, bytes
	// tritonCPUUtil is the host's CPU utilisation, 0..1 (--allow-cpu-metrics, Linux).
	tritonCPUUtil = "nv_cpu_utilization"

	tritonModelLabel = "model"
)

// Workload features the triton profile reports (declare them in trident_features).
const (
	// FeatureItemsPerRequest is inferences per successful request: the mean client batch
	// size of the requests in the interval.
	FeatureItemsPerRequest = "items_per_request"
	// FeatureBatchSize is inferences per execution: the mean batch the server executed
	// (dynamic batching), which depends on the load and the config rather than on the
	// workload; for diagnostics.
	FeatureBatchSize = "batch_size"
)

// tritonProfile maps a Triton server's metrics (one instance = one server; with
// trident_metrics_model one model of it):
//
//	RecordsIn      requests that left the server: success + failure
//	RecordsOut     successful requests (nv_inference_request_success)
//	UsefulSeconds  compute input + infer + output durations, summed over requests (µs → s)
//	QueueLength    nv_inference_pending_request_count
//	utilisation    mean nv_gpu_utilization over the server's GPUs; nv_cpu_utilization (the
//	               host's) for CPU-only servers
//	DeviceMemPeak  nv_gpu_memory_used_bytes summed over the GPUs, at the scrape (the
//	               consumers keep the maximum over scrapes)
//	features       items_per_request, batch_size (interval means)
//	BusySeconds, OOMRestarts, epoch: not exported (0; the epoch comes from the allocation's
//	meta)
type tritonProfile struct{}

func (tritonProfile) Name() string { return Triton }

func (tritonProfile) Map(fams map[string]*dto.MetricFamily, o Options) (Metrics, error) {
	r := newReader(fams, tritonModelLabel, o)
	for _, alts := range [][]string{
		{tritonSuccess}, {tritonPending}, {tritonComputeInferUS}, {tritonGPUUtil, tritonCPUUtil},
	} {
		r.need(alts...)
	}
	if err := r.done(Triton, "the pending request count needs Triton 2.38 (NGC 23.09) or later; "+
		"the duration counters are off with --metrics-config counter_latencies=false; "+
		"GPU and CPU metrics with --allow-gpu-metrics=false and --allow-cpu-metrics=false"); err != nil {
		return Metrics{}, err
	}
	m := newMetrics()
	m.RecordsOut = r.sum(tritonSuccess, nil)
	m.RecordsIn = m.RecordsOut + r.sum(tritonFailure, nil)
	us := r.sum(tritonComputeInputUS, nil) + r.sum(tritonComputeInferUS, nil) + r.sum(tritonComputeOutputUS, nil)
	m.UsefulSeconds = us / 1e6
	m.QueueLength = r.sum(tritonPending, nil)
	if r.has(tritonGPUUtil) {
		m.AccelUtil = min(1, max(0, r.mean(tritonGPUUtil)))
		m.HasAccelerator = true
		m.DeviceMemPeak = r.sum(tritonGPUMemUsed, nil)
	} else {
		m.CPUUtil = min(1, max(0, r.mean(tritonCPUUtil)))
	}
	if r.has(tritonCount) {
		n := r.sum(tritonCount, nil)
		m.FeatureTotals[FeatureItemsPerRequest] = Total{Sum: n, Count: m.RecordsOut}
		if r.has(tritonExec) {
			m.FeatureTotals[FeatureBatchSize] = Total{Sum: n, Count: r.sum(tritonExec, nil)}
		}
	}
	if r.err != nil {
		return Metrics{}, r.err
	}
	return m, nil
}
