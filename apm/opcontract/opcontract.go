// Package opcontract is the contract between a pipeline operator and Trident, for operator
// authors to import:
//
//   - the Prometheus metrics every operator instance exports on /metrics (the operator
//     metrics contract, documented in docs/operator-contract.md), with their label names;
//   - the Nomad group meta keys that describe an operator to the planner;
//   - how the planner's configuration reaches an instance: through its group's meta, which
//     Nomad hands to the task as NOMAD_META_<key> environment variables (ReadInstance).
//
// Inside this module the operator worker (sim/worker), the APM plugin and the planner share
// these names so that neither side can drift. The package depends on the standard library
// only.
package opcontract

import (
	"fmt"
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
	MetaOutputBytes   = "trident_output_bytes"  // float: mean bytes per output record
	MetaAmplification = "trident_amplification" // float: output records per input record
	MetaFeatures      = "trident_features"      // comma list of workload feature names
	MetaParams        = "trident_params"        // tunable parameter space (strategy/configspace syntax)
	MetaConfig        = "trident_config"        // current config "k=v,k=v"
	MetaColdStartSec  = "trident_cold_start_s"  // float: seconds from launch to serving
	MetaCapacity      = "trident_capacity"      // float, optional: records/s one instance sustains (an offline benchmark); the planner's estimate until the observation layer has one
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

// MetaPipeline is the job-level meta key that marks a job as a pipeline for planners run
// with -auto-register: "true" (any value strconv.ParseBool reads as true) registers it.
const MetaPipeline = "trident_pipeline"

// Node meta keys the planner reads when sizing its inventory. Without them a node's size is
// its fingerprinted cores and memory.
const (
	MetaNodeCPUCores = "trident_cpu_cores" // float: cores the planner models for the node
	MetaNodeMemoryMB = "trident_memory_mb" // int: memory the planner models for the node
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

// ParseSynchronous reads a MetaSynchronous value: "" is false, otherwise a strconv bool.
func ParseSynchronous(v string) (bool, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return false, nil
	}
	return strconv.ParseBool(v)
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
}

// ReadInstance reads an instance's operator, config and epoch from the task environment;
// getenv is os.Getenv in an operator.
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
