// Package fsm is the replicated state machine of the Trident planner: every piece of
// planner state that must survive a leader failure lives here and changes only through
// commands committed to the raft log.
//
// The state holds the registered pipelines (with the Nomad job template they came from),
// the cluster inventory, the observed deployment per operator and node, the rolling-update
// state of every operator (instances on the current and on the candidate configuration),
// pending candidate configurations, observation epochs, the latest capacity observations
// and the append-only decision log. Commands are validated inside Apply: an invalid command
// is rejected with an error and leaves the state unchanged.
package fsm

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Operator is one pipeline stage, parsed from a Nomad group's meta (apm/opcontract keys).
type Operator struct {
	// Name is the Nomad task group name of the operator in the job template.
	Name string `json:"name"`
	// Order is the stage index (0 = source side).
	Order int `json:"order"`
	// CPU is cores per instance.
	CPU float64 `json:"cpu"`
	// MemoryMB is host memory per instance.
	MemoryMB int `json:"memory_mb"`
	// GPUs is accelerators per instance (0 = CPU operator).
	GPUs int `json:"gpus"`
	// GPUMemoryMB is the minimum device memory per accelerator.
	GPUMemoryMB int `json:"gpu_memory_mb"`
	// GPUModels lists the accelerator models (Device.Model) the operator accepts; empty
	// accepts every model.
	GPUModels []string `json:"gpu_models,omitempty"`
	// GPUVendor is the vendor of the accelerators the operator runs on (Nomad's device
	// vendor, e.g. "nvidia", "amd", "intel"; "" is DefaultGPUVendor): its device request is
	// <vendor>/gpu, and it is planned only on that vendor's devices.
	GPUVendor string `json:"gpu_vendor,omitempty"`
	// OutputBytes is the mean size of one output record.
	OutputBytes float64 `json:"output_bytes"`
	// Amplification is output records per input record.
	Amplification float64 `json:"amplification"`
	// Features are the workload feature names.
	Features []string `json:"features,omitempty"`
	// Params is the tunable parameter space declaration (strategy/configspace syntax).
	Params string `json:"params,omitempty"`
	// Config is the current configuration "k=v,k=v".
	Config string `json:"config"`
	// ColdStartSec is seconds from launch to serving.
	ColdStartSec float64 `json:"cold_start_s"`
	// Synchronous marks an operator whose capacity is its useful-time rate
	// (opcontract.MetaSynchronous).
	Synchronous bool `json:"synchronous,omitempty"`
	// CapacityHint is the declared per-instance capacity (records/s, opcontract.MetaCapacity;
	// 0: none): the planner's estimate until the observation layer has one.
	CapacityHint float64 `json:"capacity_hint,omitempty"`
	// MinInstances and MaxInstances are the group's scaling policy min and max: the
	// planner keeps the operator's instances within them (0: unbounded).
	MinInstances int `json:"min_instances,omitempty"`
	MaxInstances int `json:"max_instances,omitempty"`
	// Contention lists the node resources (network, disk I/O) the operator's instances
	// saturate (trident_contention; empty: none): the scheduler keeps co-located
	// instances of the same kind within one node's resource.
	Contention []Contention `json:"contention,omitempty"`
}

// Contention is one node resource an operator's instances contend for.
type Contention struct {
	// Kind names the resource: "network" or "io" (opcontract.ContentionKinds).
	Kind string `json:"kind"`
	// Weight is the share of one node's resource of this kind that one instance uses at
	// full rate, in [MinContentionWeight, 1].
	Weight float64 `json:"weight"`
}

// Admits reports whether n instances are within o's scaling bounds.
func (o Operator) Admits(n int) bool {
	return n >= o.MinInstances && (o.MaxInstances == 0 || n <= o.MaxInstances)
}

// Pipeline is a registered pipeline job.
type Pipeline struct {
	// Job is the Nomad job ID.
	Job string `json:"job"`
	// Operators in pipeline order.
	Operators []Operator `json:"operators"`
	// Template is the Nomad job (JSON of api.Job) as submitted by the user; the actuator
	// renders every job version from it.
	Template []byte `json:"template,omitempty"`
	// RegisteredIndex is the raft index of the registration.
	RegisteredIndex uint64 `json:"registered_index"`
	// Weight is the pipeline's priority weight in the joint round (0: 1).
	Weight float64 `json:"weight,omitempty"`
	// MinThroughput is the pipeline's guaranteed throughput (records/s of its input; 0:
	// only its operators' minimum instances).
	MinThroughput float64 `json:"min_throughput,omitempty"`
	// Batch marks a pipeline with a finite input (a Nomad batch job, or job meta
	// trident_batch): it waits in the admission queue while its minimums do not fit.
	Batch bool `json:"batch,omitempty"`
	// InputRecords is a batch pipeline's input size in records (job meta
	// trident_input_records; 0: unknown), its expected size until the first operator's
	// backlog is observed.
	InputRecords float64 `json:"input_records,omitempty"`
}

// Queued is a batch pipeline waiting for admission (planner/admit).
type Queued struct {
	// Position is its place in the admission order, 1 first.
	Position int `json:"position"`
	// Reason says why it waits.
	Reason string `json:"reason"`
	// SinceUnixMilli is when it started waiting (its aging counts from there).
	SinceUnixMilli int64 `json:"since_unix_ms"`
	// Index is the raft index that recorded the queue.
	Index uint64 `json:"index"`
}

// MaxWeight bounds a pipeline's weight: the joint model's normalised shares stay well
// scaled.
const MaxWeight = 1000

// Operator returns the operator named name.
func (p *Pipeline) Operator(name string) (Operator, bool) {
	for _, o := range p.Operators {
		if o.Name == name {
			return o, true
		}
	}
	return Operator{}, false
}

// Node is one schedulable Nomad client node.
type Node struct {
	// Name is the Nomad node name (node.unique.name).
	Name string `json:"name"`
	// Class is the node class.
	Class string `json:"class,omitempty"`
	// CPU is schedulable cores.
	CPU float64 `json:"cpu"`
	// MemoryMB is schedulable memory.
	MemoryMB int `json:"memory_mb"`
	// GPUs is the number of healthy accelerator instances (gpu devices of any vendor).
	GPUs int `json:"gpus"`
	// GPUMemoryMB is the memory of the node's smallest GPU.
	GPUMemoryMB int `json:"gpu_memory_mb,omitempty"`
	// Devices are the node's accelerator classes, one per Nomad device group; when set
	// they replace GPUs and GPUMemoryMB for scheduling (which then only summarise them).
	Devices Devices `json:"devices,omitzero"`
	// EgressBps is egress bandwidth in bytes per second (0 = unknown, treated as ample).
	EgressBps float64 `json:"egress_bps,omitempty"`
}

// DefaultGPUVendor is the accelerator vendor of an operator or device that names none.
const DefaultGPUVendor = "nvidia"

// VendorOf returns vendor, or DefaultGPUVendor when it is "".
func VendorOf(vendor string) string {
	if vendor == "" {
		return DefaultGPUVendor
	}
	return vendor
}

// Device is one accelerator class of a node: a Nomad device group (vendor/type/name).
type Device struct {
	// Vendor is the device group's vendor (Nomad NodeDeviceResource.Vendor; "" is
	// DefaultGPUVendor).
	Vendor string `json:"vendor,omitempty"`
	// Model is the device group's name (Nomad NodeDeviceResource.Name, e.g. "A100-SXM4-80GB").
	Model string `json:"model"`
	// MemoryMB is the memory of one device (the group's "memory" attribute; 0 = unknown).
	MemoryMB int `json:"memory_mb"`
	// Count is the group's healthy device instances.
	Count int `json:"count"`
}

// Devices is a node's accelerator classes. It holds their canonical JSON so that Node
// stays comparable with == (inventories are compared that way); it marshals as a JSON list
// of Device, and the zero value is no classes.
type Devices struct{ enc string }

// MakeDevices returns the classes ds.
func MakeDevices(ds ...Device) Devices {
	if len(ds) == 0 {
		return Devices{}
	}
	b, _ := json.Marshal(ds) // a list of plain structs always encodes
	return Devices{enc: string(b)}
}

// List returns the classes (nil for none).
func (d Devices) List() []Device {
	var out []Device
	if d.enc != "" {
		_ = json.Unmarshal([]byte(d.enc), &out) // enc is only ever written by MakeDevices
	}
	return out
}

// MarshalJSON encodes the classes as a list.
func (d Devices) MarshalJSON() ([]byte, error) {
	if d.enc == "" {
		return []byte("[]"), nil
	}
	return []byte(d.enc), nil
}

// UnmarshalJSON decodes a list of classes (null or [] is none).
func (d *Devices) UnmarshalJSON(b []byte) error {
	var ds []Device
	if err := json.Unmarshal(b, &ds); err != nil {
		return fmt.Errorf("devices: %w", err)
	}
	*d = MakeDevices(ds...)
	return nil
}

// Placement counts instances of one operator on one node by configuration.
type Placement struct {
	// Current is instances running the operator's current configuration.
	Current int `json:"current"`
	// Candidate is instances running the candidate configuration.
	Candidate int `json:"candidate"`
}

// Total returns Current + Candidate.
func (p Placement) Total() int { return p.Current + p.Candidate }

// Candidate is a pending configuration for one operator proposed by the adaptation layer.
type Candidate struct {
	// Config is the candidate configuration "k=v,k=v".
	Config string `json:"config"`
	// Capacity is the predicted unit throughput on the candidate config (records/s).
	Capacity float64 `json:"capacity"`
	// ColdStartSec is restart plus warm-up of one transitioning instance.
	ColdStartSec float64 `json:"cold_start_s"`
	// Index is the raft index at which the candidate was proposed.
	Index uint64 `json:"index"`
	// MeasuredIndex is the raft index of the newest observation of the candidate's own
	// instances (0: Capacity is still the proposer's prediction).
	MeasuredIndex uint64 `json:"measured_index,omitempty"`
	// Trialled marks a candidate the proposer measured on a tuning trial (Trial) under the
	// live workload: one instance of it has run, so its rollout needs no canary.
	Trialled bool `json:"trialled,omitempty"`
	// Revert marks the replacement of a running config that fails with OOM in production
	// by one known to run (the tuner's OOM guard): the scheduler counts the running config
	// as failing and moves every instance at once, without a canary.
	Revert bool `json:"revert,omitempty"`
}

// Observation is the latest capacity estimate of one operator from the observation layer.
type Observation struct {
	// Capacity is the estimated unit throughput on the current config (records/s).
	Capacity float64 `json:"capacity"`
	// Std is the estimate's standard deviation (0 if unknown).
	Std float64 `json:"std,omitempty"`
	// Epoch is the observation epoch the estimate belongs to.
	Epoch uint64 `json:"epoch"`
	// Index is the raft index of the observation.
	Index uint64 `json:"index"`
	// UnixMilli is the producer's timestamp.
	UnixMilli int64 `json:"unix_ms,omitempty"`
	// Backlog is the operator's input backlog in records (0 if unknown): the scheduler's
	// catch-up term (see sched.PlanInput.CatchUpSec).
	Backlog float64 `json:"backlog,omitempty"`
	// Fallback marks an estimate that is not a measurement under load: it counts as the
	// current config's capacity, never as a candidate's measurement.
	Fallback bool `json:"fallback,omitempty"`
	// Amplification is the operator's observed records out per record in (0: unknown; the
	// declared amplification then holds).
	Amplification float64 `json:"amplification,omitempty"`
}

// Rollout is the rolling-update state of one operator.
type Rollout struct {
	// Config is the current configuration.
	Config string `json:"config"`
	// Epoch is the observation epoch of Config; a candidate runs with Epoch+1.
	Epoch uint64 `json:"epoch"`
	// CandidateConfig is the configuration being rolled out ("" when none).
	CandidateConfig string `json:"candidate_config,omitempty"`
	// OnCurrent is instances running Config (committed target).
	OnCurrent int `json:"on_current"`
	// OnCandidate is instances running CandidateConfig (committed target).
	OnCandidate int `json:"on_candidate"`
}

// OpTarget is a decision's target for one operator.
type OpTarget struct {
	// Nodes maps node name to the placement there (nodes with zero instances are omitted).
	Nodes map[string]Placement `json:"nodes"`
	// Config and Epoch are the current configuration and its epoch.
	Config string `json:"config"`
	Epoch  uint64 `json:"epoch"`
	// CandidateConfig is the configuration of Candidate instances ("" when none); they run
	// with epoch Epoch+1.
	CandidateConfig string `json:"candidate_config,omitempty"`
	// Transitions is how many instances this decision moves to the candidate config.
	Transitions int `json:"transitions,omitempty"`
	// NoCanary marks a candidate that ran already (Candidate.Trialled or Revert): the
	// actuator rolls it out without a canary.
	NoCanary bool `json:"no_canary,omitempty"`
}

// Count returns the operator's total number of instances.
func (t OpTarget) Count() int {
	n := 0
	for _, p := range t.Nodes {
		n += p.Total()
	}
	return n
}

// Decision is one committed scheduling decision for one pipeline. Its Index (the raft log
// index that committed it) identifies it everywhere, including Nomad job meta.
type Decision struct {
	// Index is the raft index of the decision; set by the FSM.
	Index uint64 `json:"index"`
	// Job is the pipeline.
	Job string `json:"job"`
	// Operators maps operator name to its target.
	Operators map[string]OpTarget `json:"operators"`
	// Throughput is the planned pipeline throughput (records/s; 0 if unknown).
	Throughput float64 `json:"throughput"`
	// Egress maps node name to the cross-node traffic the plan routes out of it at
	// Throughput, or at what its routing carries when that is less (a fallback plan routed
	// by the planner; bytes/s; nodes without any are omitted). Other pipelines are planned
	// on each node's egress less this. A decision without it (one whose routing failed, or
	// recorded before egress was) holds no egress.
	Egress map[string]float64 `json:"egress_bps,omitempty"`
	// Source names the scheduler that produced the plan.
	Source string `json:"source"`
	// Reason explains the decision.
	Reason string `json:"reason"`
	// UnixMilli is the leader's clock when it proposed the decision.
	UnixMilli int64 `json:"unix_ms"`
	// Planner is the planner cluster's ID (State.ClusterID), set by the FSM: decision
	// indexes are raft indexes, comparable only within one cluster.
	Planner string `json:"planner,omitempty"`
}

// Progress is the actuator's progress on a pipeline's latest decision.
type Progress struct {
	// Decision is the decision index the actuator worked on.
	Decision uint64 `json:"decision"`
	// Status is "applying", "done" or "failed".
	Status string `json:"status"`
	// Detail is a human-readable note (e.g. the Nomad deployment ID or the failure).
	Detail string `json:"detail,omitempty"`
	// Index is the raft index of the progress record.
	Index uint64 `json:"index"`
}

// Progress statuses.
const (
	StatusApplying = "applying"
	StatusDone     = "done"
	StatusFailed   = "failed"
)

// State is the whole replicated planner state.
type State struct {
	// Pipelines by job ID.
	Pipelines map[string]*Pipeline `json:"pipelines"`
	// Nodes is the cluster inventory by node name.
	Nodes map[string]Node `json:"nodes"`
	// Deployed is the observed deployment: job -> operator -> node -> placement.
	Deployed map[string]map[string]map[string]Placement `json:"deployed"`
	// Rollouts is the rolling-update state: job -> operator -> rollout.
	Rollouts map[string]map[string]*Rollout `json:"rollouts"`
	// Candidates are pending candidate configs: job -> operator -> candidate.
	Candidates map[string]map[string]Candidate `json:"candidates"`
	// Epochs are observation epochs: job -> operator -> the newest config generation any
	// instance runs (the trident_config_epoch its instances export). It advances once per
	// transition, when the candidate's first batch is done.
	Epochs map[string]map[string]uint64 `json:"epochs"`
	// Observations are the latest capacity estimates: job -> operator -> observation.
	Observations map[string]map[string]Observation `json:"observations"`
	// Decisions is the decision log in commit order: the newest KeepDecisions per job.
	Decisions []Decision `json:"decisions"`
	// Progress is the actuator's progress per job.
	Progress map[string]Progress `json:"progress"`
	// Stable is, per job, the index of the newest decision that finished done: the one
	// Nomad's auto-revert returns to when a later decision's deployment fails.
	Stable map[string]uint64 `json:"stable,omitempty"`
	// Invalidations records epoch advances (observation invalidations), the newest
	// KeepInvalidations per job; each committed transition adds exactly one.
	Invalidations []Invalidation `json:"invalidations"`
	// PlanErrors holds, per job, why the newest scheduling round found no plan (the
	// committed plan stays in force); a committed decision or a successful round clears it.
	PlanErrors map[string]PlanError `json:"plan_errors,omitempty"`
	// ClusterID identifies this planner cluster: the first committed decision sets it from
	// the ID its leader proposed, and every decision carries it. A cluster rebuilt after
	// losing its state gets a new one (its raft indexes start again).
	ClusterID string `json:"cluster_id,omitempty"`
	// Canaries are the newest canary of each operator: job -> operator -> canary.
	Canaries map[string]map[string]Canary `json:"canaries,omitempty"`
	// Queue holds the batch pipelines waiting for admission: job -> entry.
	Queue map[string]Queued `json:"queue,omitempty"`
	// Trials holds each operator's running tuning trials (job -> operator -> trials by
	// slot).
	Trials map[string]map[string]TrialSlots `json:"trials,omitempty"`
}

// PlanError is a scheduling round's failure, kept so that every server can show it.
type PlanError struct {
	// Error is the scheduler's message.
	Error string `json:"error"`
	// UnixMilli is when the leader first saw it.
	UnixMilli int64 `json:"unix_ms"`
	// Index is the raft index that recorded it.
	Index uint64 `json:"index"`
}

// Invalidation records one committed configuration change of an operator.
type Invalidation struct {
	Job      string `json:"job"`
	Operator string `json:"operator"`
	Epoch    uint64 `json:"epoch"`
	Config   string `json:"config"`
	Decision uint64 `json:"decision"`
	Index    uint64 `json:"index"`
}

// NewState returns an empty state.
func NewState() *State {
	return &State{
		Pipelines:    map[string]*Pipeline{},
		Nodes:        map[string]Node{},
		Deployed:     map[string]map[string]map[string]Placement{},
		Rollouts:     map[string]map[string]*Rollout{},
		Candidates:   map[string]map[string]Candidate{},
		Epochs:       map[string]map[string]uint64{},
		Observations: map[string]map[string]Observation{},
		Progress:     map[string]Progress{},
		Stable:       map[string]uint64{},
		PlanErrors:   map[string]PlanError{},
		Canaries:     map[string]map[string]Canary{},
		Queue:        map[string]Queued{},
		Trials:       map[string]map[string]TrialSlots{},
	}
}

// LatestDecision returns the newest decision for job.
func (s *State) LatestDecision(job string) (Decision, bool) {
	for i := len(s.Decisions) - 1; i >= 0; i-- {
		if s.Decisions[i].Job == job {
			return s.Decisions[i], true
		}
	}
	return Decision{}, false
}

// Decision returns the decision with raft index idx.
func (s *State) Decision(idx uint64) (Decision, bool) {
	i := sort.Search(len(s.Decisions), func(i int) bool { return s.Decisions[i].Index >= idx })
	if i < len(s.Decisions) && s.Decisions[i].Index == idx {
		return s.Decisions[i], true
	}
	return Decision{}, false
}

// Ranges of the operator fields, i.e. of the trident_* group meta keys (docs/job-spec.md
// lists them). ValidateOperator and ValidatePipeline enforce them, so the job parser, the
// API and the FSM refuse the same values. Each bound is well beyond what a real GPU data
// pipeline needs, and together they keep the scheduling MILP (strategy/milp, fed by
// planner/sched) numerically sane: without them values that parse yield plans of
// throughput 0 (a product of amplifications that overflows, a capacity HiGHS refuses) or
// Nomad versions that can never be registered.
const (
	// MaxNameBytes bounds operator (task group) names and job IDs: a default Nomad service
	// "<job>-<group>" is a 63-character DNS label, so real names are far shorter; the
	// bound keeps names (and the errors quoting them) small.
	MaxNameBytes = 128
	// MaxOperators bounds the operator groups of one pipeline. Real curation pipelines have
	// 5-30 stages; the MILP has operators x nodes integer columns and must solve within
	// its time limit, and every job version holds up to two groups per operator and node.
	MaxOperators = 256
	// MaxMetaValueBytes bounds every trident_* meta value of an operator group (checked by
	// the parser) and the params and config strings kept here. The longest real value,
	// trident_params, is ~150 bytes; meta is copied into every rendered group and into the
	// environment of every instance (NOMAD_META_*).
	MaxMetaValueBytes = 4096
	// MaxOrder bounds trident_order. It is only compared; the bound keeps it a small number
	// and leaves room for spaced numbering (10, 20, ...).
	MaxOrder = 1_000_000
	// MinCPU and MaxCPU bound trident_cpu (cores per instance). 0.01 is the planner's
	// granularity: node sizes are floored to 0.01 cores (Nomad's cpu is MHz; nomadact
	// converts fingerprinted cores), and less makes the MILP pack thousands of instances
	// per node. The largest hosts have 384-768 hardware threads; an instance runs on one.
	MinCPU = 0.01
	MaxCPU = 1024
	// MaxMemoryMB bounds trident_memory_mb (host memory per instance, at least 1): 4 TiB,
	// twice the 2 TiB of the largest 8-GPU servers.
	MaxMemoryMB = 4 << 20
	// MaxGPUs bounds trident_gpus (accelerators per instance): hosts have 8-16; an
	// instance cannot span hosts.
	MaxGPUs = 64
	// MaxGPUMemoryMB bounds trident_gpu_memory_mb: 1 TiB, over three times the largest
	// accelerators' 192-288 GB.
	MaxGPUMemoryMB = 1 << 20
	// MaxOutputBytes bounds trident_output_bytes (mean bytes per output record): 64 GiB,
	// an hour of 4K video at 100 Mbit/s is 45 GB; larger blobs travel by reference.
	MaxOutputBytes = 64 << 30
	// MinAmplification and MaxAmplification bound trident_amplification (output records
	// per input record): a document fans out into ~10 blocks, a video into ~25 clips, a
	// corpus shard into 1e3-1e4 documents; filters keep down to 1e-3.
	MinAmplification = 1e-6
	MaxAmplification = 1e6
	// MinPipelineAmplification and MaxPipelineAmplification bound the product of
	// trident_amplification along the pipeline after every operator (the records an
	// operator emits per pipeline input record). The scheduler multiplies them
	// (sched.PlanInput.Amplifications) into the MILP's coefficients: 1e200 per operator
	// overflowed to +Inf, which the MILP refuses every round, and products of 1e12 or
	// 1e-12 planned throughput 0.
	MinPipelineAmplification = 1e-9
	MaxPipelineAmplification = 1e9
	// MaxColdStartSec bounds trident_cold_start_s: loading the largest models takes
	// minutes; a day is far beyond.
	MaxColdStartSec = 86400
	// MinCapacity and MaxCapacity bound trident_capacity (records/s of one instance) when
	// it is set (0: unset): from one record per ~3 hours to a million records/s. HiGHS
	// refuses the model for a capacity of 1e300.
	MinCapacity = 1e-4
	MaxCapacity = 1e6
	// MinContentionWeight bounds a trident_contention weight from below: an instance using
	// under 1 % of a node's network or disk does not contend, and tiny weights would only
	// scale the MILP's contention rows badly. MaxContention bounds the kinds listed.
	MinContentionWeight = 0.01
	MaxContention       = 4
	// MaxCostSpread bounds how much the operators of a pipeline differ in instance-seconds
	// per pipeline input record: the records an operator receives per pipeline input record
	// (the product of trident_amplification before it) over its capacity (trident_capacity,
	// or the planner's default of 1 record/s when unset). The MILP's heuristic gives an
	// operator ceil(records/s it must serve / capacity - 1e-9) instances (HiGHS rounds
	// within its integrality tolerance alike): when the cheapest operator needs less than
	// 1e-9 of an instance at the throughput the most expensive one allows, it gets none and
	// the planned throughput is 0 (probed: a spread of 1e12 plans 0). 1e8
	// leaves a factor of 10 for a most expensive operator that gets a single instance; real
	// pipelines differ 1e2-1e3-fold (parse 0.1 s, OCR 10 s per document), web-scale ones
	// up to ~1e6-fold.
	MaxCostSpread = 1e8
	// MaxBytesPerRecord bounds the bytes an operator emits per pipeline input record (the
	// records it emits per pipeline input record times trident_output_bytes): a long 4K
	// video cut into clips is ~1e10 bytes. The MILP's egress rows (Eq. 20) carry this
	// number: at 1e15 HiGHS's solutions failed the solution checker (the planner fell back
	// to the greedy heuristic).
	MaxBytesPerRecord = 1e12
	// MaxFeatures bounds the trident_features list: each feature is one input dimension
	// of the capacity model; real operators report 1-4.
	MaxFeatures = 64
)

// Short returns s cut to at most 64 bytes (see Clip): for quoting user input in errors,
// which must stay short.
func Short(s string) string { return Clip(s, 64) }

// Clip returns s cut to at most n bytes on a rune boundary, with "..." appended when it
// was longer.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// ShortList joins items with ", ", keeping the first n and summarising the rest as "and
// K more": an error listing problems must stay short whatever the input's size.
func ShortList(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// ValidateJobID checks a pipeline's job ID: non-empty, at most MaxNameBytes, printable.
func ValidateJobID(id string) error {
	if err := checkName(id); err != nil {
		return fmt.Errorf("pipeline: job ID %q: %w", Short(id), err)
	}
	return nil
}

// ValidateOperatorName checks an operator's (task group's) name. Besides the rules of job
// IDs, it refuses '@' (the actuator renders an operator's instances as groups named
// "<op>@<node>.g<generation>", so a name with '@' can collide with a rendered group and
// Nomad then refuses every job version: "redefines task group"), '/' (the trident-apm
// query "<metric>/<job>/<group>" and the planner API path /v1/candidates/<job>/<op> split
// on it) and the path segments "." and "..".
func ValidateOperatorName(name string) error {
	err := checkName(name)
	switch {
	case err != nil:
	case strings.ContainsRune(name, '@'):
		err = fmt.Errorf("contains '@', which is reserved for the groups the planner renders (<op>@<node>.g<generation>)")
	case strings.ContainsRune(name, '/'):
		err = fmt.Errorf("contains '/', which separates the parts of trident-apm queries and planner API paths")
	case name == "." || name == "..":
		err = fmt.Errorf("is a path segment, which planner API paths cannot address")
	}
	if err != nil {
		return fmt.Errorf("operator %q: name %w", Short(name), err)
	}
	return nil
}

func checkName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("is empty")
	case len(s) > MaxNameBytes:
		return fmt.Errorf("is %d bytes long: want at most %d", len(s), MaxNameBytes)
	case !utf8.ValidString(s):
		return fmt.Errorf("is not valid UTF-8")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("contains the non-printable character %q", r)
		}
	}
	return nil
}

// num formats a bound or a value for an error, in its shortest form: 1024, 4194304, 0.01,
// 1e6, 1e-9.
func num(v float64) string {
	g := strconv.FormatFloat(v, 'g', -1, 64)
	if i := strings.IndexByte(g, 'e'); i >= 0 {
		exp := strings.TrimPrefix(g[i+1:], "+")
		neg := strings.HasPrefix(exp, "-")
		exp = strings.TrimLeft(strings.TrimPrefix(exp, "-"), "0")
		if neg {
			exp = "-" + exp
		}
		g = g[:i+1] + exp
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		if f := strconv.FormatFloat(v, 'f', -1, 64); len(f) <= len(g) {
			return f
		}
	}
	return g
}

// approx is num of v rounded to 6 significant digits, for computed quantities.
func approx(v float64) string {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	if err != nil {
		return num(v)
	}
	return num(r)
}

// inRange reports whether lo <= v <= hi (false for NaN).
func inRange(v, lo, hi float64) bool { return v >= lo && v <= hi }

// ValidateOperator checks an operator's fields against their ranges (see MaxCPU and the
// other bounds) and names the first bad one: the operator, the meta key, the value and
// the allowed range.
func ValidateOperator(o Operator) error {
	if err := ValidateOperatorName(o.Name); err != nil {
		return err
	}
	bad := func(key, value, want string) error {
		return fmt.Errorf("operator %q: %s=%s is out of range: want %s", o.Name, key, value, want)
	}
	f := func(key string, v, lo, hi float64, what string) error {
		if inRange(v, lo, hi) {
			return nil
		}
		return bad(key, num(v), fmt.Sprintf("%s in [%s, %s]", what, num(lo), num(hi)))
	}
	n := func(key string, v, lo, hi int, what string) error {
		if v >= lo && v <= hi {
			return nil
		}
		return bad(key, strconv.Itoa(v), fmt.Sprintf("%s in [%d, %d]", what, lo, hi))
	}
	for _, err := range []error{
		n("trident_order", o.Order, 0, MaxOrder, "an integer"),
		f("trident_cpu", o.CPU, MinCPU, MaxCPU, "cores per instance"),
		n("trident_memory_mb", o.MemoryMB, 1, MaxMemoryMB, "MB per instance"),
		n("trident_gpus", o.GPUs, 0, MaxGPUs, "accelerators per instance"),
		n("trident_gpu_memory_mb", o.GPUMemoryMB, 0, MaxGPUMemoryMB, "MB per accelerator"),
		f("trident_output_bytes", o.OutputBytes, 0, MaxOutputBytes, "bytes per record"),
		f("trident_amplification", o.Amplification, MinAmplification, MaxAmplification, "output records per input record"),
		f("trident_cold_start_s", o.ColdStartSec, 0, MaxColdStartSec, "seconds"),
	} {
		if err != nil {
			return err
		}
	}
	if o.CapacityHint != 0 && !inRange(o.CapacityHint, MinCapacity, MaxCapacity) {
		return bad("trident_capacity", num(o.CapacityHint), fmt.Sprintf("0 (unset) or records/s in [%s, %s]", num(MinCapacity), num(MaxCapacity)))
	}
	if len(o.Features) > MaxFeatures {
		return bad("trident_features", fmt.Sprintf("<%d names>", len(o.Features)), fmt.Sprintf("at most %d names", MaxFeatures))
	}
	for _, ft := range o.Features {
		if err := checkName(ft); err != nil {
			return fmt.Errorf("operator %q: trident_features: feature %q %w", o.Name, Short(ft), err)
		}
	}
	if len(o.Params) > MaxMetaValueBytes {
		return bad("trident_params", fmt.Sprintf("<%d bytes>", len(o.Params)), fmt.Sprintf("at most %d bytes", MaxMetaValueBytes))
	}
	if len(o.Config) > MaxMetaValueBytes {
		return bad("trident_config", fmt.Sprintf("<%d bytes>", len(o.Config)), fmt.Sprintf("at most %d bytes", MaxMetaValueBytes))
	}
	if o.MinInstances < 0 || o.MaxInstances < 0 || (o.MaxInstances > 0 && o.MinInstances > o.MaxInstances) {
		return fmt.Errorf("operator %q: scaling min=%d max=%d: want 0 <= min <= max", o.Name, o.MinInstances, o.MaxInstances)
	}
	if len(o.GPUModels) > 0 && o.GPUs == 0 {
		return fmt.Errorf("operator %q: trident_gpu_models lists accelerator models but trident_gpus is 0", o.Name)
	}
	if o.GPUVendor != "" && o.GPUs == 0 {
		return fmt.Errorf("operator %q: trident_gpu_vendor names an accelerator vendor but trident_gpus is 0", o.Name)
	}
	if o.GPUVendor != "" {
		if err := checkName(o.GPUVendor); err != nil {
			return fmt.Errorf("operator %q: trident_gpu_vendor %q %w", o.Name, Short(o.GPUVendor), err)
		}
		if strings.ContainsAny(o.GPUVendor, "/ ") {
			return fmt.Errorf("operator %q: trident_gpu_vendor %q: a Nomad device vendor has no '/' or space", o.Name, Short(o.GPUVendor))
		}
	}
	return validateContention(o)
}

// validateContention checks o.Contention: at most MaxContention kinds, each named once,
// each weight in [MinContentionWeight, 1].
func validateContention(o Operator) error {
	if len(o.Contention) > MaxContention {
		return fmt.Errorf("operator %q: trident_contention lists %d kinds: want at most %d", o.Name, len(o.Contention), MaxContention)
	}
	for k, c := range o.Contention {
		if err := checkName(c.Kind); err != nil {
			return fmt.Errorf("operator %q: trident_contention: kind %q %w", o.Name, Short(c.Kind), err)
		}
		if !inRange(c.Weight, MinContentionWeight, 1) {
			return fmt.Errorf("operator %q: trident_contention: %s weight %s is out of range: want [%s, 1]",
				o.Name, c.Kind, num(c.Weight), num(MinContentionWeight))
		}
		for _, d := range o.Contention[:k] {
			if d.Kind == c.Kind {
				return fmt.Errorf("operator %q: trident_contention: kind %q listed twice", o.Name, c.Kind)
			}
		}
	}
	return nil
}

// ValidatePipeline checks a pipeline definition: its job ID, the number of operators,
// every operator (ValidateOperator), unique names, the order, and the ranges that depend
// on the whole pipeline (MaxPipelineAmplification, MaxBytesPerRecord, MaxCostSpread).
func ValidatePipeline(p *Pipeline) error {
	if p == nil || p.Job == "" {
		return fmt.Errorf("pipeline: job is empty")
	}
	if err := ValidateJobID(p.Job); err != nil {
		return err
	}
	if len(p.Operators) == 0 {
		return fmt.Errorf("pipeline %q: no operator groups (no group meta has trident_order)", p.Job)
	}
	if len(p.Operators) > MaxOperators {
		return fmt.Errorf("pipeline %q: %d operator groups (groups with meta trident_order): want at most %d", p.Job, len(p.Operators), MaxOperators)
	}
	if !finite(p.Weight) || p.Weight < 0 || p.Weight > MaxWeight {
		return fmt.Errorf("pipeline %q: trident_weight=%v: want a number in (0, %d]", p.Job, p.Weight, MaxWeight)
	}
	if !finite(p.MinThroughput) || p.MinThroughput < 0 || p.MinThroughput > 1e9 {
		return fmt.Errorf("pipeline %q: trident_min_throughput=%v: want records/s in [0, 1e9]", p.Job, p.MinThroughput)
	}
	if !finite(p.InputRecords) || p.InputRecords < 0 || p.InputRecords > 1e15 {
		return fmt.Errorf("pipeline %q: trident_input_records=%v: want records in [0, 1e15]", p.Job, p.InputRecords)
	}
	// The products are compared with a relative tolerance, so that e.g. 1e-3 x 1e-3 x 1e-3
	// is not refused for rounding below 1e-9.
	const tol = 1 + 1e-9
	seen := map[string]bool{}
	amp := 1.0 // records entering operator i per pipeline input record
	// instance-seconds per pipeline input record of the cheapest and the dearest operator
	var cheap, dear float64
	var cheapOp, dearOp string
	for i, o := range p.Operators {
		if err := ValidateOperator(o); err != nil {
			return fmt.Errorf("pipeline %q: %w", p.Job, err)
		}
		if seen[o.Name] {
			return fmt.Errorf("pipeline %q: duplicate operator %q", p.Job, o.Name)
		}
		seen[o.Name] = true
		if i > 0 && p.Operators[i-1].Order > o.Order {
			return fmt.Errorf("pipeline %q: operators not sorted by trident_order at %q", p.Job, o.Name)
		}
		if i > 0 && p.Operators[i-1].Order == o.Order {
			return fmt.Errorf("pipeline %q: trident_order %d of %q is also the order of %q: every operator needs its own stage index", p.Job, o.Order, o.Name, p.Operators[i-1].Name)
		}
		capacity := o.CapacityHint
		if capacity == 0 {
			capacity = 1 // the planner's default
		}
		cost := amp / capacity
		if i == 0 || cost < cheap {
			cheap, cheapOp = cost, o.Name
		}
		if i == 0 || cost > dear {
			dear, dearOp = cost, o.Name
		}
		amp *= o.Amplification
		if !inRange(amp, MinPipelineAmplification/tol, MaxPipelineAmplification*tol) {
			return fmt.Errorf("pipeline %q: operator %q: trident_amplification=%s brings the product of trident_amplification along the pipeline "+
				"(records per pipeline input record) to %s: want it in [%s, %s] after every operator",
				p.Job, o.Name, num(o.Amplification), approx(amp), num(MinPipelineAmplification), num(MaxPipelineAmplification))
		}
		if b := amp * o.OutputBytes; b > MaxBytesPerRecord*tol {
			return fmt.Errorf("pipeline %q: operator %q: trident_output_bytes=%s for the %s records it emits per pipeline input record "+
				"(the product of trident_amplification up to it) is %s bytes per pipeline input record: want at most %s",
				p.Job, o.Name, num(o.OutputBytes), approx(amp), approx(b), num(MaxBytesPerRecord))
		}
	}
	if dear > cheap*MaxCostSpread*tol {
		return fmt.Errorf("pipeline %q: operators %q and %q differ %s-fold in instance-seconds per pipeline input record (%s and %s: "+
			"the records they receive per pipeline input record, the product of trident_amplification before them, over trident_capacity "+
			"or the planner's default of 1 record/s): want at most %s-fold (declare trident_capacity where it is missing)",
			p.Job, dearOp, cheapOp, approx(dear/cheap), approx(dear), approx(cheap), num(MaxCostSpread))
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
