package client

import (
	"encoding/json"

	"github.com/trident-sched/trident/planner/fsm"
)

// Header names of the planner's HTTP API.
const (
	// HeaderToken carries the ACL token.
	HeaderToken = "X-Trident-Token"
	// HeaderForwarded marks a request forwarded by a follower (prevents forwarding loops).
	HeaderForwarded = "X-Trident-Forwarded"
	// HeaderLeader is set on every response to the leader's ID as the answering server knows it.
	HeaderLeader = "X-Trident-Leader"
	// HeaderIndex is set on every response to the answering server's last applied raft index.
	HeaderIndex = "X-Trident-Index"
)

// StatusResponse is GET /v1/status.
type StatusResponse struct {
	ID           string       `json:"id"`
	State        string       `json:"state"`
	LeaderID     string       `json:"leader_id"`
	LeaderRaft   string       `json:"leader_raft_addr"`
	LeaderHTTP   string       `json:"leader_http_addr"`
	Term         uint64       `json:"term"`
	LastIndex    uint64       `json:"last_index"`
	AppliedIndex uint64       `json:"applied_index"`
	Peers        []PeerStatus `json:"peers"`
	Pipelines    int          `json:"pipelines"`
	Decisions    int          `json:"decisions"`
	// Rounds and Solves count the rescheduling rounds this server ran and the solves they
	// started while it led (since it started).
	Rounds uint64 `json:"rounds"`
	Solves uint64 `json:"solves"`
	// NomadRequests counts the requests this server sent to Nomad since it started.
	NomadRequests uint64 `json:"nomad_requests"`
}

// PeerStatus is one raft member in StatusResponse.
type PeerStatus struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	Suffrage string `json:"suffrage"`
}

// Operator is one operator of a registered pipeline, as the planner parsed it from its
// task group's meta.
type Operator = fsm.Operator

// Pipeline is a registered pipeline as GET /v1/pipelines and GET /v1/pipelines/<job> show
// it (without the job template it was registered from).
type Pipeline struct {
	Job             string     `json:"job"`
	Operators       []Operator `json:"operators"`
	RegisteredIndex uint64     `json:"registered_index"`
	// Weight is the pipeline's weight in the joint round (1 when the job sets none).
	Weight float64 `json:"weight"`
	// MinThroughput is its guaranteed throughput, records/s (0: none).
	MinThroughput float64 `json:"min_throughput,omitempty"`
	// Batch marks a pipeline with a finite input; InputRecords is its declared size.
	Batch        bool    `json:"batch,omitempty"`
	InputRecords float64 `json:"input_records,omitempty"`
	// Queued is set while the batch pipeline waits for admission.
	Queued *Queued `json:"queued,omitempty"`
}

// Queued is a batch pipeline's place in the admission queue.
type Queued struct {
	// Position is 1 for the next pipeline to be admitted.
	Position int `json:"position"`
	// Reason says why it waits.
	Reason string `json:"reason"`
	// SinceUnixMilli is when it started waiting.
	SinceUnixMilli int64 `json:"since_unix_ms"`
}

// PipelineRequest is PUT /v1/pipelines/<job>. With Job (a Nomad job as JSON, as printed by
// `nomad job run -output`, optionally wrapped in {"Job": ...}) the pipeline is parsed from
// it; with an empty body the planner reads the registered job from Nomad.
type PipelineRequest struct {
	Job json.RawMessage `json:"job,omitempty"`
}

// RegisterResponse answers PUT /v1/pipelines/<job>.
type RegisterResponse struct {
	Job       string     `json:"job"`
	Index     uint64     `json:"index"`
	Operators []Operator `json:"operators"`
}

// IndexResponse answers writes that only report the raft index that committed them.
type IndexResponse struct {
	Index uint64 `json:"index"`
}

// PlanResponse is GET /v1/plan/<job>: the committed target of the job's latest decision.
type PlanResponse struct {
	Job           string `json:"job"`
	DecisionIndex uint64 `json:"decision_index"`
	Reason        string `json:"reason"`
	Source        string `json:"source"`
	// Status is the actuator's progress on the decision: applying | done | failed.
	Status     string  `json:"status"`
	Throughput float64 `json:"throughput"`
	// Groups maps the operator (the group name in the user's job file) to its target.
	Groups map[string]PlanGroup `json:"groups"`
	// FailedDecisionIndex is set when the newest decision failed (Nomad reverted): the
	// plan shown is then the decision that runs again.
	FailedDecisionIndex uint64 `json:"failed_decision_index,omitempty"`
	// PlanError is set when the newest scheduling round found no plan (e.g. the scaling
	// minimums cannot be packed on the nodes): the plan shown stays in force.
	PlanError string `json:"plan_error,omitempty"`
	// Detail is the actuator's note on the newest decision (its failure, when it failed).
	Detail string `json:"detail,omitempty"`
	// Canaries are the newest decision's canaries by operator (see docs/planner.md).
	Canaries map[string]Canary `json:"canaries,omitempty"`
	// Egress is what the plan routes out of each node at Throughput (bytes/s; nodes
	// without cross-node traffic omitted): the links it takes from other pipelines.
	Egress map[string]float64 `json:"egress_bps,omitempty"`
	// Share is the pipeline's share of the leader's newest joint round, when several
	// pipelines are planned together (answered by the leader only; see docs/planner.md).
	Share *Share `json:"joint_share,omitempty"`
}

// Share is one pipeline's share of a joint round: what the pooled joint model gives it
// of the cluster, the cap its own rounds are planned under.
type Share struct {
	// Throughput is the share's throughput (records/s of the pipeline's input).
	Throughput float64 `json:"throughput"`
	// Instances caps each operator's parallelism (operator -> instances).
	Instances map[string]int `json:"instances,omitempty"`
	// Devices are the share's accelerators per class (vendor, model, memory), summed over
	// the cluster.
	Devices []fsm.Device `json:"devices,omitempty"`
	// Link is the share of every node's egress held for the pipeline until it has a
	// decision (0: the links cannot bind across pipelines).
	Link float64 `json:"link_share,omitempty"`
}

// Canary is one operator's canary in PlanResponse: the first instance of a candidate
// config, run as a Nomad canary and judged by the planner.
type Canary struct {
	Config     string `json:"config"`
	Node       string `json:"node,omitempty"`
	Deployment string `json:"deployment"`
	// Verdict is "" while it is measured, then "promoted" or "failed"; By is "planner",
	// "user" (nomad deployment promote / fail) or "nomad" (health checks, deadlines).
	Verdict string `json:"verdict,omitempty"`
	By      string `json:"by,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// HealthyUnixMilli is when the planner first saw it healthy (its probe window starts).
	HealthyUnixMilli int64 `json:"healthy_unix_ms"`
	// CurrentCapacity and CandidateCapacity are the running config's and the canary's
	// capacities per instance behind the verdict (records/s).
	CurrentCapacity   float64 `json:"current_capacity"`
	CandidateCapacity float64 `json:"candidate_capacity,omitempty"`
}

// PlanGroup is one operator's committed target.
type PlanGroup struct {
	// Count is the total number of instances.
	Count         int    `json:"count"`
	Reason        string `json:"reason"`
	DecisionIndex uint64 `json:"decision_index"`
	// Nodes maps node name to the instances there by configuration.
	Nodes           map[string]fsm.Placement `json:"nodes"`
	Config          string                   `json:"config"`
	ConfigEpoch     uint64                   `json:"config_epoch"`
	CandidateConfig string                   `json:"candidate_config,omitempty"`
	Transitions     int                      `json:"transitions"`
	// ObservationEpoch is the operator's observation epoch (bumped per committed transition).
	ObservationEpoch uint64 `json:"observation_epoch"`
	// TrialConfig is the config of the operator's tuning trial in slot 0 ("" none) and
	// TrialEpoch the config epoch its instance exports (fsm.IsTrialEpoch).
	TrialConfig string `json:"trial_config,omitempty"`
	TrialEpoch  uint64 `json:"trial_epoch,omitempty"`
	// Trials are the operator's running tuning trials in every slot, in slot order.
	Trials []fsm.Trial `json:"trials,omitempty"`
}

// ObservationRequest is one element of POST /v1/observations (a single object or an array).
type ObservationRequest struct {
	Job      string  `json:"job"`
	Operator string  `json:"operator"`
	Capacity float64 `json:"capacity"`
	Std      float64 `json:"std,omitempty"`
	Epoch    uint64  `json:"epoch"`
	// UnixMilli is the producer's timestamp (optional).
	UnixMilli int64 `json:"unix_ms,omitempty"`
	// Backlog is the operator's input backlog in records (optional; the catch-up term).
	Backlog float64 `json:"backlog,omitempty"`
	// Fallback marks an estimate that is not a measurement under load (the observation
	// layer had no saturated sample: a starved operator's useful-time or batch-fill
	// rate). The planner plans with it but never judges a candidate on it.
	Fallback bool `json:"fallback,omitempty"`
	// Amplification is the operator's observed records out per record in (optional; 0:
	// unknown). When set, the planner sizes the operators downstream by it instead of the
	// declared trident_amplification, which a workload shift makes stale.
	Amplification float64 `json:"amplification,omitempty"`
}

// ObservationsResponse answers POST /v1/observations.
type ObservationsResponse struct {
	Index    uint64 `json:"index"`
	Accepted int    `json:"accepted"`
	// Ignored lists the observations of a stale config epoch: committed, but they do not
	// change the operator's estimate.
	Ignored []IgnoredObservation `json:"ignored"`
}

// IgnoredObservation is one element of ObservationsResponse.Ignored.
type IgnoredObservation struct {
	// Index is the observation's position in the request.
	Index  int    `json:"index"`
	Reason string `json:"reason"`
}

// CandidateRequest is PUT /v1/candidates/<job>/<operator>.
type CandidateRequest struct {
	Config       string  `json:"config"`
	Capacity     float64 `json:"capacity"`
	ColdStartSec float64 `json:"cold_start_s"`
	// Trialled says the proposer measured Config on a tuning trial (PUT /v1/trials):
	// its rollout needs no canary.
	Trialled bool `json:"trialled,omitempty"`
	// Revert says the running config fails with OOM in production and Config is known to
	// run: the planner moves every instance to it at once, without a canary.
	Revert bool `json:"revert,omitempty"`
}

// TrialRequest is PUT /v1/trials/<job>/<op>[/<slot>]: run one instance of the operator on
// Config in the trial slot (0 without one) beside its production instances, for the
// tuner to measure.
type TrialRequest struct {
	Config string `json:"config"`
}

// ApplyRequest is POST /v1/pipelines/<job>/apply (sent by the trident-target plugin).
type ApplyRequest struct {
	Group  string         `json:"group"`
	Count  int64          `json:"count"`
	Reason string         `json:"reason"`
	Meta   map[string]any `json:"meta"`
}

// ApplyResponse answers POST /v1/pipelines/<job>/apply.
type ApplyResponse struct {
	Job           string `json:"job"`
	DecisionIndex uint64 `json:"decision_index"`
	Status        string `json:"status"`
}

// TransferRequest is POST /v1/leadership/transfer; an empty ID lets raft choose.
type TransferRequest struct {
	ID string `json:"id"`
}

// TransferResponse answers POST /v1/leadership/transfer.
type TransferResponse struct {
	LeaderID   string `json:"leader_id"`
	LeaderHTTP string `json:"leader_http_addr"`
}

// SnapshotResponse answers POST /v1/snapshot.
type SnapshotResponse struct {
	ID    string `json:"id"`
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error    string `json:"error"`
	LeaderID string `json:"leader_id,omitempty"`
	Leader   string `json:"leader_http_addr,omitempty"`
	Raft     string `json:"leader_raft_addr,omitempty"`
}
