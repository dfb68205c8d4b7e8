// Package opcontract is the contract between a pipeline operator and Trident, for operator
// authors to import:
//
//   - the Prometheus metrics every operator instance exports on /metrics (the operator
//     metrics contract, documented in docs/operator-contract.md), with their label names;
//   - the Nomad group meta keys that describe an operator to the planner;
//   - how the planner's configuration reaches an instance: through its group's meta, which
//     Nomad hands to the task as NOMAD_META_<key> environment variables (ReadInstance):
//     the whole config in MetaConfig, and each parameter under its own key
//     (ParamMetaKey), for job files that pass parameters as command-line flags;
//   - the metrics profile (MetaMetricsProfile) of operators that are off-the-shelf servers
//     (vLLM, Triton) exporting their own metrics instead of the contract's;
//   - how an operator reports running out of memory: exit status OOMExitStatus (IsOOMExit).
//
// Inside this module the operator worker (sim/worker), the APM plugin and the planner share
// these names so that neither side can drift. The package depends on the standard library
// only.
package opcontract

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Metric names. Every series carries the labels LabelPipeline and LabelOperator; records
// counters also carry LabelEpoch so a consumer can drop samples from an older config.
const (
	RecordsIn        = "trident_records_in_total"         // counter: records consumed
	RecordsOut       = "trident_records_out_total"        // counter: records produced
	BusySeconds      = "trident_busy_seconds_total"       // counter: wall time with >=1 record in service
	UsefulSeconds    = "trident_useful_seconds_total"     // counter: per-record service time summed (DS2 useful time); synchronous operators with k threads count 1/k of each thread's time (instance-seconds)
	QueueLength      = "trident_queue_length"             // gauge: records waiting in the input queue
	AccelUtilization = "trident_accelerator_utilization"  // gauge 0..1
	CPUUtilization   = "trident_cpu_utilization"          // gauge 0..1
	DeviceMemPeak    = "trident_device_memory_peak_bytes" // gauge: peak accelerator memory since start
	OOMRestarts      = "trident_oom_restarts_total"       // counter: accelerator OOM exits
	WorkloadFeature  = "trident_workload_feature"         // gauge: labels feature=<name>, stat=mean|std over the last window
	ConfigEpoch      = "trident_config_epoch"             // gauge: epoch of the config this instance runs
	// Optional: operators behind a bounded input queue report its bound and the time their
	// output waits on a full downstream queue, so the observation layer can tell a batching
	// engine held at its queue bound (saturated) from a starved or backpressured one. The
	// bound is used only together with the counter.
	QueueCapacity        = "trident_queue_capacity"               // gauge: bound of the input queue in records, this instance's share of it (absent or 0: unbounded)
	OutputBlockedSeconds = "trident_output_blocked_seconds_total" // counter: wall time the output was blocked by a full downstream queue
	// Optional: operators that host a serving engine with continuous batching report the
	// engine's own scheduler counts, so the observation layer can tell a starved engine
	// from a saturated one whatever the input queue counts (it may count requests in
	// flight). Both or neither: one without the other is ignored. An operator that serves
	// the engine's own vLLM gauges (vllm:num_requests_running and
	// vllm:num_requests_waiting) on its /metrics need not repeat them under these names.
	EngineRunning = "trident_engine_running" // gauge: requests in the engine's running batch
	EngineWaiting = "trident_engine_waiting" // gauge: requests the engine holds but does not run yet (its scheduler's queue)
	// Optional: operators whose engine sizes a working pool at start-up and refuses to
	// start when it falls short (vLLM's KV cache, which must hold one max_model_len
	// sequence) report the pool and what it must hold, so the tuner can foresee a start
	// failure from the configurations that started (bo.Measurement.Pool). Both or
	// neither, in one unit (for vLLM, tokens: num_gpu_blocks × block_size and
	// max_model_len).
	PoolSize = "trident_pool_size" // gauge: the working pool the engine sized at start-up
	PoolNeed = "trident_pool_need" // gauge: the least pool the engine starts with
)

// Label names.
const (
	LabelPipeline = "pipeline"
	LabelOperator = "operator"
	LabelEpoch    = "epoch"
	LabelFeature  = "feature"
	LabelStat     = "stat"
)

// Group meta keys of a pipeline job file. A group whose meta has MetaOrder is an operator.
const (
	MetaOrder         = "trident_order"         // int: stage index, 0 = source side
	MetaCPU           = "trident_cpu"           // float: cores per instance
	MetaMemoryMB      = "trident_memory_mb"     // int: host memory per instance
	MetaGPUs          = "trident_gpus"          // int: accelerators per instance (0 = CPU operator)
	MetaGPUMemoryMB   = "trident_gpu_memory_mb" // int: minimum device memory per accelerator
	MetaGPUModels     = "trident_gpu_models"    // comma-separated accelerator models (Nomad device names) the operator accepts
	MetaGPUVendor     = "trident_gpu_vendor"    // accelerator vendor (Nomad device vendor, e.g. nvidia, amd, intel; default nvidia): the device request is <vendor>/gpu
	MetaOutputBytes   = "trident_output_bytes"  // float: mean bytes per output record
	MetaAmplification = "trident_amplification" // float: output records per input record
	MetaFeatures      = "trident_features"      // comma list of workload feature names
	MetaParams        = "trident_params"        // tunable parameter space (strategy/configspace syntax)
	MetaConfig        = "trident_config"        // current config "k=v,k=v"
	MetaColdStartSec  = "trident_cold_start_s"  // float: seconds from launch to serving
	MetaCapacity      = "trident_capacity"      // float, optional: records/s one instance sustains (an offline benchmark); the planner's estimate until the observation layer has one
	// MetaContention (optional) declares the node resources besides the reserved ones that
	// an instance saturates: comma-separated kind[:weight] entries, kinds in
	// ContentionKinds, weight the share of one node's resource of that kind one instance
	// uses at full rate (default 1: it saturates it alone), e.g. "network" or
	// "network:0.5, io:0.3". The planner keeps co-located instances of one kind within
	// the node's resource (docs/planner.md, "Contention").
	MetaContention = "trident_contention"
	// MetaSynchronous (bool) declares an operator whose instances serve each record to
	// completion, without overlapping or batching records: its records per useful second
	// (UsefulSeconds in instance-seconds) is its capacity at any load (paper §4.1).
	MetaSynchronous = "trident_synchronous"
	MetaMetricsPort = "trident_metrics_port" // label of the network port serving /metrics
	// MetaConfigEpoch (uint) is the epoch of MetaConfig. The planner rewrites both when it
	// moves an operator to another config; an instance exports the epoch as ConfigEpoch and
	// as LabelEpoch of its records counters.
	MetaConfigEpoch = "trident_config_epoch"
	// MetaOperator is the operator a planner-rendered group ("<operator>@<node>.g<epoch>")
	// belongs to. Groups of the job file as written are named after their operator and
	// do not carry it.
	MetaOperator = "trident_operator"
)

// Group meta keys that select how trident-apm reads an operator's metrics (apm/profile).
const (
	// MetaMetricsProfile names the metric set the instances export: "trident" (the
	// metrics above; the default), "vllm" (a vLLM OpenAI-compatible server's own /metrics)
	// or "triton" (Triton Inference Server's). See docs/operator-contract.md.
	MetaMetricsProfile = "trident_metrics_profile"
	// MetaMetricsModel (optional) restricts a server profile to the series of one model:
	// the model_name label of vLLM, the model label of Triton. Unset: all models are summed.
	MetaMetricsModel = "trident_metrics_model"
	// MetaPoolNeed (optional, a positive number) is the least start-up pool of a server
	// profile's engine, in its pool's unit: for the vllm profile, max_model_len in tokens,
	// against which the KV cache it reports (vllm:cache_config_info, num_gpu_blocks ×
	// block_size) is read (see PoolSize and PoolNeed for the trident profile).
	MetaPoolNeed = "trident_pool_need"
)

// MetaParamPrefix prefixes the per-parameter group meta keys: next to MetaConfig the
// planner renders every parameter of the config as its own key, ParamMetaKey(name) = value,
// so that a task can pass it as a command-line flag by interpolation, e.g.
// "${NOMAD_META_trident_param_max_num_seqs}".
const MetaParamPrefix = "trident_param_"

// ParamMetaKey returns the meta key of config parameter name: MetaParamPrefix followed by
// name with every character other than an ASCII letter, digit or '_' replaced by '_'
// (configspace names may contain '.'). Case is kept: "kv.Block" becomes
// "trident_param_kv_Block".
func ParamMetaKey(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return MetaParamPrefix + string(b)
}

// ParamMeta returns the per-parameter meta of a MetaConfig value: ParamMetaKey(k) = v for
// every entry k=v. Two parameters whose keys collide after sanitising (e.g. "a.b" and
// "a_b") are an error naming both.
func ParamMeta(config string) (map[string]string, error) {
	c, err := ParseConfig(config)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(c))
	owner := make(map[string]string, len(c))
	for k, v := range c {
		key := ParamMetaKey(k)
		if other, dup := owner[key]; dup {
			a, b := min(k, other), max(k, other)
			return nil, fmt.Errorf("config %q: parameters %q and %q share the meta key %s", config, a, b, key)
		}
		owner[key] = k
		out[key] = v
	}
	return out, nil
}

// MetaPipeline is the job-level meta key that marks a job as a pipeline for planners run
// with -auto-register: "true" (any value strconv.ParseBool reads as true) registers it.
const MetaPipeline = "trident_pipeline"

// Job-level meta keys of a pipeline's share of a cluster it shares with other pipelines
// (the planner's joint round, docs/planner.md#many-pipelines).
const (
	// MetaWeight is the pipeline's priority weight, a number in (0, 1000]; without it the
	// weight is the job's priority / 50 (Nomad's default priority 50 weighs 1).
	MetaWeight = "trident_weight"
	// MetaMinThroughput is a guaranteed throughput in records/s of the pipeline's input,
	// served before any weighted share (0: only every operator's minimum instances).
	MetaMinThroughput = "trident_min_throughput"
	// MetaBatch marks a pipeline with a finite input ("true"; a Nomad batch job is one
	// too): while its minimums do not fit beside the others it waits in the admission
	// queue, shortest expected job first.
	MetaBatch = "trident_batch"
	// MetaInputRecords is a batch pipeline's input size in records, its expected size
	// until the first operator's backlog is observed.
	MetaInputRecords = "trident_input_records"
)

// Node meta keys the planner reads when sizing its inventory. Without them a node's size is
// its fingerprinted cores and memory.
const (
	MetaNodeCPUCores = "trident_cpu_cores" // float: cores the planner models for the node
	MetaNodeMemoryMB = "trident_memory_mb" // int: memory the planner models for the node
	// MetaNodeEgressMbps (float) is the node's egress bandwidth in Mbit/s; without it the
	// planner treats the node's egress as ample.
	MetaNodeEgressMbps = "trident_egress_mbps"
)

// ParseFeatures splits a MetaFeatures value ("a, b,c") into feature names, dropping
// blanks.
func ParseFeatures(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Contended node resource kinds of MetaContention.
const (
	// ContentionNetwork is the node's network interface (bytes in and out).
	ContentionNetwork = "network"
	// ContentionIO is the node's local disk I/O.
	ContentionIO = "io"
)

// ContentionKinds lists the kinds MetaContention accepts.
func ContentionKinds() []string { return []string{ContentionNetwork, ContentionIO} }

// ParseSynchronous reads a MetaSynchronous value: "" is false, otherwise a strconv bool.
func ParseSynchronous(v string) (bool, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return false, nil
	}
	return strconv.ParseBool(v)
}

// OOMExitStatus is the exit status of an operator that ran out of accelerator (or host)
// memory: 137 = 128+SIGKILL, the status of a process the kernel's OOM killer killed. An
// operator that detects the OOM itself (e.g. catches a CUDA out-of-memory error) should
// exit with it, so that the planner recognises the OOM (see IsOOMExit).
const OOMExitStatus = 137

// IsOOMExit reports whether a task termination counts as an OOM, as the planner counts them
// when it decides to fail a rollout early: Nomad's oom_killed flag (set by drivers that see
// the cgroup OOM kill, e.g. docker) or exit status OOMExitStatus. exitCode and oomKilled are
// the exit_code and oom_killed details of Nomad's "Terminated" task event.
func IsOOMExit(exitCode int, oomKilled bool) bool {
	return oomKilled || exitCode == OOMExitStatus
}

// MetaEnvPrefix prefixes a group meta key in the environment Nomad gives the group's tasks.
const MetaEnvPrefix = "NOMAD_META_"

// MetaEnv is the environment variable holding group meta key inside a task, e.g.
// MetaEnv(MetaConfig) is "NOMAD_META_trident_config".
func MetaEnv(key string) string { return MetaEnvPrefix + key }

// Instance is what an operator instance learns from its group's meta at start. The planner
// changes an operator's config by rewriting the meta of its groups, which starts new
// allocations, so a running instance never sees its config change.
type Instance struct {
	// Operator is the operator name: MetaOperator, else the group name (NOMAD_GROUP_NAME).
	// It is the value of LabelOperator.
	Operator string
	// Config is the configuration to run, parsed from MetaConfig (see ParseConfig); empty
	// when the meta is absent.
	Config map[string]string
	// Epoch is MetaConfigEpoch (0 when absent). Export it as ConfigEpoch and as LabelEpoch
	// of RecordsIn and RecordsOut so that samples of the previous config can be told apart
	// during a transition.
	Epoch uint64
	// Params are the values of Config's parameters as their own meta keys
	// (NOMAD_META_trident_param_<name>, see ParamMetaKey), by parameter name: what a task
	// receives when its job file interpolates them into command-line flags. A parameter
	// whose key is unset takes its Config value; ReadInstance refuses one whose key holds
	// another value, since the flag would then disagree with the config the planner
	// accounts for.
	Params map[string]string
}

// ReadInstance reads an instance's operator, config, epoch and per-parameter values from
// the task environment; getenv is os.Getenv in an operator.
func ReadInstance(getenv func(string) string) (Instance, error) {
	in := Instance{Operator: strings.TrimSpace(getenv(MetaEnv(MetaOperator)))}
	if in.Operator == "" {
		in.Operator = strings.TrimSpace(getenv("NOMAD_GROUP_NAME"))
	}
	cfg, err := ParseConfig(getenv(MetaEnv(MetaConfig)))
	if err != nil {
		return Instance{}, fmt.Errorf("%s: %w", MetaEnv(MetaConfig), err)
	}
	in.Config = cfg
	if v := strings.TrimSpace(getenv(MetaEnv(MetaConfigEpoch))); v != "" {
		e, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return Instance{}, fmt.Errorf("%s: %w", MetaEnv(MetaConfigEpoch), err)
		}
		in.Epoch = e
	}
	in.Params = make(map[string]string, len(cfg))
	for k, v := range cfg {
		env := MetaEnv(ParamMetaKey(k))
		if pv := strings.TrimSpace(getenv(env)); pv != "" && pv != v {
			return Instance{}, fmt.Errorf("%s=%q disagrees with %s: %s=%q (set the parameter in %s only, or keep both equal)",
				env, pv, MetaEnv(MetaConfig), k, v, MetaConfig)
		}
		in.Params[k] = v
	}
	return in, nil
}

// ParseConfig parses a MetaConfig value "k=v,k=v" (';' also separates entries). Whitespace
// around keys and values is ignored; an empty string is an empty config.
func ParseConfig(s string) (map[string]string, error) {
	c := map[string]string{}
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' }) {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("config %q: entry %q is not k=v", s, part)
		}
		c[k] = v
	}
	return c, nil
}

// FormatConfig renders a parsed config in the canonical form "k=v,k=v", keys in lexical
// order (the empty config is "").
func FormatConfig(c map[string]string) string {
	return FormatSorted(c, func(v string) string { return v })
}

// FormatSorted renders c as "k=v,k=v" with keys in lexical order and each value formatted
// by str: the one canonical config form, for configs of any value type.
func FormatSorted[M ~map[string]V, V any](c M, str func(V) string) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(str(c[k]))
	}
	return b.String()
}

// Environment variables trident-gpu sets in a task that holds accelerators.
const (
	// EnvVisibleDevices lists the UUIDs of the task's devices (comma-separated).
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvGPUUsageDir (fake mode with fake_usage_dir only) is the directory where the task
	// reports its device memory use: file <dir>/<uuid> holds "<used MiB> [<utilisation
	// %>]", which the plugin exports as the device's stats (Nomad's alloc and node stats).
	EnvGPUUsageDir = "TRIDENT_GPU_USAGE_DIR"
)
