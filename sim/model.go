// Package sim is a deterministic, fixed-time-step simulator of a linear multimodal data
// pipeline on a fixed heterogeneous cluster, used to compare Trident with baseline
// schedulers (see sim/baseline, sim/shipped and sim/experiment).
//
// Time step. The simulator advances in ticks of RunConfig.Tick seconds (1 s by default). Work
// is fluid within a tick: each operator consumes a FIFO of record cohorts (amount, workload
// attributes, source records per unit) with the per-instance service rate its performance
// model gives for the cohort's attributes, its configuration and its in-flight concurrency.
// A per-record discrete-event simulation would cost millions of events per simulated
// minute at the CPU stages (thousands of records/s); the scheduling decisions under study
// act on minute scales and service times are at most tens of seconds, so a 1 s step keeps
// the quantities that matter (capacity, queueing, backpressure, cold starts, OOM restarts,
// egress saturation) while simulating hours of pipeline time in about a second.
package sim

import (
	"fmt"
	"math"
	"slices"

	"github.com/trident-sched/trident/strategy/configspace"
)

// Resources is an amount of the three resource pools of a node.
type Resources struct {
	// CPU is in cores.
	CPU float64
	// MemGB is host memory in GB.
	MemGB float64
	// Acc is the number of accelerator devices (NPUs/GPUs).
	Acc int
}

// Add returns r+o.
func (r Resources) Add(o Resources) Resources {
	return Resources{CPU: r.CPU + o.CPU, MemGB: r.MemGB + o.MemGB, Acc: r.Acc + o.Acc}
}

// Scale returns r*k (accelerators multiplied by k, which must be an integer count).
func (r Resources) Scale(k int) Resources {
	return Resources{CPU: r.CPU * float64(k), MemGB: r.MemGB * float64(k), Acc: r.Acc * k}
}

// Fits reports whether need fits into r.
func (r Resources) Fits(need Resources) bool {
	const eps = 1e-9
	return need.CPU <= r.CPU+eps && need.MemGB <= r.MemGB+eps && need.Acc <= r.Acc
}

// Sub returns r-o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{CPU: r.CPU - o.CPU, MemGB: r.MemGB - o.MemGB, Acc: r.Acc - o.Acc}
}

// Node is one server of the cluster.
type Node struct {
	Name string
	// Cap is the node's capacity.
	Cap Resources
	// AccMemGB is the device memory of one accelerator.
	AccMemGB float64
	// EgressMBps is the node's network egress bandwidth in MB/s.
	EgressMBps float64
}

// Cluster is a fixed set of nodes.
type Cluster struct {
	Nodes []Node
}

// TransferEfficiency is the fraction of the 100 Gbps line rate that cross-node transfers
// of pipeline objects achieve (object-store pulls of many mid-sized objects, with
// serialisation); a calibration assumption of this simulator, not a figure of the paper.
const TransferEfficiency = 0.35

// PaperCluster returns the evaluation cluster of the Trident paper (§8.1): n servers with
// 8 accelerators (64 GB HBM, as an Ascend 910B), 256 cores and 1 TB of memory each,
// connected by 100 Gbps links (usable at TransferEfficiency).
func PaperCluster(n int) Cluster {
	c := Cluster{}
	for i := range n {
		c.Nodes = append(c.Nodes, Node{
			Name:       fmt.Sprintf("node%d", i),
			Cap:        Resources{CPU: 256, MemGB: 1024, Acc: 8},
			AccMemGB:   64,
			EgressMBps: LinkMBps(100),
		})
	}
	return c
}

// LinkMBps is the usable cross-node bandwidth in MB/s of a link of gbps Gbit/s (at
// TransferEfficiency).
func LinkMBps(gbps float64) float64 { return gbps * 1e3 / 8 * TransferEfficiency }

// WithLinks returns a copy of c whose nodes have links of gbps Gbit/s.
func (c Cluster) WithLinks(gbps float64) Cluster {
	out := Cluster{Nodes: append([]Node(nil), c.Nodes...)}
	for i := range out.Nodes {
		out.Nodes[i].EgressMBps = LinkMBps(gbps)
	}
	return out
}

// Total returns the summed capacity of all nodes.
func (c Cluster) Total() Resources {
	var t Resources
	for _, n := range c.Nodes {
		t = t.Add(n.Cap)
	}
	return t
}

// OpConfig is one configuration of a tunable operator: the values of its
// configspace.Space's parameters, in their order (every simulated parameter is numeric).
type OpConfig []float64

// DefaultConfig returns the default configuration of space s (nil for a nil space).
func DefaultConfig(s *configspace.Space) OpConfig {
	if s == nil {
		return nil
	}
	return ConfigOf(s, s.Default())
}

// ConfigFromUnit decodes a point of [0,1]^d to a configuration of s
// (configspace.Space.Decode: clamped, integers rounded).
func ConfigFromUnit(s *configspace.Space, u []float64) (OpConfig, error) {
	c, err := s.Decode(u)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return ConfigOf(s, c), nil
}

// ConfigOf converts c to s's value order; missing values take the defaults.
func ConfigOf(s *configspace.Space, c configspace.Config) OpConfig {
	out := make(OpConfig, s.Dim())
	for i, p := range s.Params {
		if v, ok := c[p.Name]; ok {
			out[i] = v.Float()
		} else {
			out[i] = p.Default.Float()
		}
	}
	return out
}

// Config converts c, a configuration of s, to a configspace.Config.
func (c OpConfig) Config(s *configspace.Space) configspace.Config {
	out := make(configspace.Config, len(c))
	for i, p := range s.Params {
		out[p.Name] = configspace.Num(c[i])
	}
	return out
}

// Equal reports whether two configurations are identical.
func (c OpConfig) Equal(o OpConfig) bool { return slices.Equal(c, o) }

// Format renders the configuration as the planner does ("name=value,..." in name order).
func (c OpConfig) Format(s *configspace.Space) string { return c.Config(s).String() }

// Attrs are the workload attributes of a cohort of records (pipeline specific, e.g.
// pages per document or video resolution), carried from the source through the pipeline.
type Attrs []float64

// Model is the ground-truth behaviour of one operator. It is hidden from schedulers, which
// see only metrics (and, for offline-profiling baselines, an explicit Profile call).
type Model interface {
	// Rate returns the records/s one instance sustains on records with attributes a under
	// configuration cfg with c records in flight (c is ignored by synchronous operators).
	Rate(a Attrs, cfg OpConfig, c float64) float64
	// Amplification returns output records per input record.
	Amplification(a Attrs) float64
	// OutMB returns the size of one output record in MB.
	OutMB(a Attrs) float64
	// PeakMem returns the mean and standard deviation of one instance's per-second peak
	// device memory in GB (0, 0 for CPU operators).
	PeakMem(a Attrs, cfg OpConfig, c float64) (mean, sd float64)
	// Features returns the per-request workload features the operator reports as metrics.
	Features(a Attrs) []float64
}

// OpSpec describes one operator of a pipeline.
type OpSpec struct {
	Name string
	// Need is the resource request of one instance.
	Need Resources
	// Async marks operators with internal (continuous) batching: they overlap requests,
	// so useful time is not proportional to work done.
	Async bool
	// MaxInFlight is the most requests one async instance admits (from its config when the
	// operator is tunable: see InFlightParam).
	MaxInFlight float64
	// InFlightParam names the config parameter that bounds in-flight requests ("" if none).
	InFlightParam string
	// ColdStartS is the launch time of an instance (image pull, model load, warm-up).
	ColdStartS float64
	// StopS is the time to drain and stop an instance.
	StopS float64
	// Space is the tunable configuration space (nil if the operator is not tunable).
	Space *configspace.Space
	// FeatureNames names Model.Features.
	FeatureNames []string
	// QueueCap bounds the input queue in records of this operator.
	QueueCap float64
	// Model is the hidden ground truth.
	Model Model
}

// Tunable reports whether the operator has a configuration space.
func (o *OpSpec) Tunable() bool { return o.dim() > 0 }

// dim is the number of the operator's tunable parameters.
func (o *OpSpec) dim() int {
	if o.Space == nil {
		return 0
	}
	return o.Space.Dim()
}

// BatchSize returns the records one instance takes per batch under cfg (nil: the
// defaults): the value of InFlightParam, 1 for operators without one.
func (o *OpSpec) BatchSize(cfg OpConfig) float64 {
	if o.InFlightParam == "" {
		return 1
	}
	if cfg == nil {
		cfg = DefaultConfig(o.Space)
	}
	return math.Max(1, o.inFlightLimit(cfg))
}

// AdmissionLimit returns the most requests one instance runs at once under cfg (nil: the
// defaults), what a batching engine exports as its admission limit (vLLM's max_num_seqs);
// 1 for synchronous operators.
func (o *OpSpec) AdmissionLimit(cfg OpConfig) float64 {
	if !o.Async {
		return 1
	}
	if cfg == nil && o.Tunable() {
		cfg = DefaultConfig(o.Space)
	}
	return o.inFlightLimit(cfg)
}

// inFlightLimit returns the in-flight bound under cfg.
func (o *OpSpec) inFlightLimit(cfg OpConfig) float64 {
	if o.InFlightParam != "" && o.Space != nil {
		for i, p := range o.Space.Params {
			if p.Name == o.InFlightParam {
				return cfg[i]
			}
		}
	}
	if o.MaxInFlight > 0 {
		return o.MaxInFlight
	}
	return 1
}

// Regime is one contiguous part of the input dataset (e.g. one document type).
type Regime struct {
	Name string
	// Records is the number of source records in this part.
	Records float64
	// Sample draws the attributes of one source record.
	Sample func(r RandSource) Attrs
}

// RandSource is the subset of *rand.Rand the workload samplers use.
type RandSource interface {
	Float64() float64
	NormFloat64() float64
}

// Pipeline is a linear chain of operators and the dataset it processes.
type Pipeline struct {
	Name      string
	Ops       []OpSpec
	AttrNames []string
	// Regimes are processed in order; the dataset ends after the last one unless Cycle.
	Regimes []Regime
	// BatchDocs is how many source records one tick's cohort averages over (sampling noise).
	BatchDocs int
}

// WithAcceleratorQueues returns a copy of p whose accelerator operators' input queues hold
// x times as many records. An operator's queue also holds the records its instances have
// in flight (each instance gets queue/instances), so the bound caps a batching engine's
// running batch.
func (p *Pipeline) WithAcceleratorQueues(x float64) *Pipeline {
	out := *p
	out.Ops = append([]OpSpec(nil), p.Ops...)
	for i := range out.Ops {
		if out.Ops[i].Need.Acc > 0 {
			out.Ops[i].QueueCap *= x
		}
	}
	return &out
}

// TotalRecords returns the number of source records of one pass over the dataset.
func (p *Pipeline) TotalRecords() float64 {
	var t float64
	for _, r := range p.Regimes {
		t += r.Records
	}
	return t
}

// OpIndex returns the index of the operator called name, or -1.
func (p *Pipeline) OpIndex(name string) int {
	for i := range p.Ops {
		if p.Ops[i].Name == name {
			return i
		}
	}
	return -1
}
