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
}

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
	// GPUs is the number of healthy nvidia/gpu instances.
	GPUs int `json:"gpus"`
	// GPUMemoryMB is the memory of the node's smallest GPU.
	GPUMemoryMB int `json:"gpu_memory_mb,omitempty"`
	// Devices are the node's accelerator classes, one per Nomad device group; when set
	// they replace GPUs and GPUMemoryMB for scheduling (which then only summarise them).
	Devices Devices `json:"devices,omitzero"`
	// EgressBps is egress bandwidth in bytes per second (0 = unknown, treated as ample).
	EgressBps float64 `json:"egress_bps,omitempty"`
}

// Device is one accelerator class of a node: a Nomad device group (vendor/type/name).
type Device struct {
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

// ValidateOperator checks an operator's fields and names the first bad one.
func ValidateOperator(o Operator) error {
	switch {
	case o.Name == "":
		return fmt.Errorf("operator: name is empty")
	case o.Order < 0:
		return fmt.Errorf("operator %q: trident_order=%d must be >= 0", o.Name, o.Order)
	case !finite(o.CPU) || o.CPU <= 0:
		return fmt.Errorf("operator %q: trident_cpu=%v must be a positive number", o.Name, o.CPU)
	case o.MemoryMB <= 0:
		return fmt.Errorf("operator %q: trident_memory_mb=%d must be positive", o.Name, o.MemoryMB)
	case o.GPUs < 0:
		return fmt.Errorf("operator %q: trident_gpus=%d must be >= 0", o.Name, o.GPUs)
	case o.GPUMemoryMB < 0:
		return fmt.Errorf("operator %q: trident_gpu_memory_mb=%d must be >= 0", o.Name, o.GPUMemoryMB)
	case !finite(o.OutputBytes) || o.OutputBytes < 0:
		return fmt.Errorf("operator %q: trident_output_bytes=%v must be a finite number >= 0", o.Name, o.OutputBytes)
	case !finite(o.Amplification) || o.Amplification <= 0:
		return fmt.Errorf("operator %q: trident_amplification=%v must be a positive number", o.Name, o.Amplification)
	case !finite(o.ColdStartSec) || o.ColdStartSec < 0:
		return fmt.Errorf("operator %q: trident_cold_start_s=%v must be a finite number >= 0", o.Name, o.ColdStartSec)
	case !finite(o.CapacityHint) || o.CapacityHint < 0:
		return fmt.Errorf("operator %q: trident_capacity=%v must be a finite number >= 0", o.Name, o.CapacityHint)
	case o.MinInstances < 0 || o.MaxInstances < 0 || (o.MaxInstances > 0 && o.MinInstances > o.MaxInstances):
		return fmt.Errorf("operator %q: scaling min=%d max=%d: want 0 <= min <= max", o.Name, o.MinInstances, o.MaxInstances)
	}
	return nil
}

// ValidatePipeline checks a pipeline definition.
func ValidatePipeline(p *Pipeline) error {
	if p == nil || p.Job == "" {
		return fmt.Errorf("pipeline: job is empty")
	}
	if len(p.Operators) == 0 {
		return fmt.Errorf("pipeline %q: no operator groups (no group meta has trident_order)", p.Job)
	}
	seen := map[string]bool{}
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
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
