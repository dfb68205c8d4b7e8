package sim

import "context"

// TransitionAll as OpPlan.Transition restarts every instance not on the target
// configuration at once (all-at-once switching).
const TransitionAll = -1

// OpPlan is a scheduler's target for one operator.
type OpPlan struct {
	// PerNode is the target number of instances on each node (all states counted).
	PerNode []int
	// Config is the target configuration (nil keeps the current target). Setting a new
	// target starts a transition: instances on another configuration keep running until
	// restarted by Transition.
	Config OpConfig
	// Transition is how many instances not on the target configuration to restart onto it
	// this round (TransitionAll: all of them).
	Transition int
	// Probes run one instance per non-nil entry with that configuration for online
	// evaluation (the adaptation layer's BO trials, several at once); entry k is probe
	// slot k. A nil entry, or a slot beyond the slice, ends that slot's probe.
	Probes []OpConfig
}

// Total returns the summed instance count of p.
func (p OpPlan) Total() int {
	t := 0
	for _, n := range p.PerNode {
		t += n
	}
	return t
}

// Plan is a scheduler's decision for the whole pipeline; Ops is indexed like Pipeline.Ops.
type Plan struct {
	Ops []OpPlan
}

// Env is what a scheduler knows before the run: the cluster, the operators' declared
// resource needs, cold starts and configuration spaces (ground-truth models are hidden;
// see Profiler for explicit offline profiling).
type Env struct {
	Cluster  Cluster
	Pipeline *Pipeline
	// Tick is the simulator time step in seconds.
	Tick float64
	// Profiler measures operators in isolation, as an offline profiling run would.
	Profiler *Profiler
}

// Scheduler decides parallelism, placement and configurations from observed metrics.
type Scheduler interface {
	// Name identifies the scheduler in reports.
	Name() string
	// Init returns the initial deployment.
	Init(ctx context.Context, env *Env) (*Plan, error)
	// Observe receives the metrics of every tick.
	Observe(s *Snapshot)
	// Interval is the decision period in seconds.
	Interval() float64
	// Decide returns a new plan, or nil to keep the current one.
	Decide(ctx context.Context, s *Snapshot) (*Plan, error)
}

// OpStats are one operator's metrics over one tick, as a metrics collector reports them.
type OpStats struct {
	// Running, Starting and Restarting count instances by state (Starting: cold start of a
	// new instance; Restarting: OOM or configuration restart).
	Running, Starting, Restarting int
	// PerNode counts non-stopping instances per node.
	PerNode []int
	// Unplaced counts instances of the last plan that did not fit on their node.
	Unplaced int
	// Queue and QueueCap are the input queue length and bound in records.
	Queue, QueueCap float64
	// Arrived, Processed and Emitted are records in, done and out during the tick.
	Arrived, Processed, Emitted float64
	// BusySec is the summed useful (busy) time of running instances in seconds.
	BusySec float64
	// BlockedSec is the part of the tick during which the operator's output was blocked by
	// a full downstream queue (its instances idle then).
	BlockedSec float64
	// Util is the mean device (accelerator or CPU) utilisation of running instances, as
	// NVML or cgroup accounting reports it: for async operators, the fraction of time any
	// request is in flight.
	Util float64
	// Occupancy is the mean compute occupancy of running instances (DCGM "SM active" or
	// NPU AI-core utilisation): the fraction of peak throughput in use. For synchronous
	// operators it equals Util.
	Occupancy float64
	// UsefulSec is the per-record service time summed over the processed records, as
	// DS2-style instrumentation reports it (for async operators overlapping requests make
	// it exceed wall time).
	UsefulSec float64
	// InFlight is the number of requests in flight over all running instances.
	InFlight float64
	// PeakMemGB is the largest per-instance peak device memory during the tick.
	PeakMemGB float64
	// OOMs counts out-of-memory restarts during the tick.
	OOMs int
	// Features are the mean workload features of the processed records.
	Features []float64
	// SrcRecords is Processed expressed in source records (Processed / cumulative
	// amplification), so Processed/SrcRecords is the amplification factor.
	SrcRecords float64
	// OutMB is the mean size of an output record.
	OutMB float64
	// Config is the operator's target configuration and OnTarget how many instances run it
	// (PerNodeOnTarget per node, non-stopping, probe excluded); RunningOnTarget counts
	// those of them that run (started and healthy).
	Config          OpConfig
	OnTarget        int
	PerNodeOnTarget []int
	RunningOnTarget int
	// Probes are the probe instances' metrics by slot (as in OpPlan.Probes).
	Probes []ProbeStats
	// Configs split the running production instances' metrics by configuration (probes
	// aside), as per-instance scrapes labelled with their config would: during a
	// transition an observer can measure each configuration on its own.
	Configs []ConfigStats
}

// ConfigStats are the metrics over one tick of an operator's running production
// instances on one configuration.
type ConfigStats struct {
	Config OpConfig
	// Running counts the instances; Processed, BusySec and UsefulSec are their share of
	// the operator's (in proportion to their service rates), InFlight their requests in
	// flight, PeakMemGB their largest per-instance peak device memory and OOMs their
	// out-of-memory restarts.
	Running                                 int
	Processed, BusySec, UsefulSec, InFlight float64
	PeakMemGB                               float64
	OOMs                                    int
	// EngineRunning and EngineWaiting are the requests the instances' engines run and
	// hold waiting, EngineLimit one engine's limit on the running ones (models that are
	// a Batcher; EngineLimit 0 otherwise).
	EngineRunning, EngineWaiting, EngineLimit float64
}

// ConfigStat returns the entry of cfg in s.Configs, adding an empty one.
func (s *OpStats) ConfigStat(cfg OpConfig) *ConfigStats {
	for i := range s.Configs {
		if s.Configs[i].Config.Equal(cfg) {
			return &s.Configs[i]
		}
	}
	s.Configs = append(s.Configs, ConfigStats{Config: cfg})
	return &s.Configs[len(s.Configs)-1]
}

// ProbeStats are one probe instance's metrics over one tick.
type ProbeStats struct {
	// Running reports that the slot's probe instance is running (not starting or
	// restarting).
	Running bool
	// Processed and BusySec are its records done and busy seconds, PeakMemGB its peak
	// device memory, OOM whether it failed with OOM during the tick.
	Processed, BusySec, PeakMemGB float64
	OOM                           bool
	// InFlight is the requests the probe had in flight (1 for synchronous operators);
	// EngineRunning, EngineWaiting and EngineLimit are its engine's, as in ConfigStats.
	InFlight, EngineRunning, EngineWaiting, EngineLimit float64
}

// OffTarget returns the instances (starting, running or restarting) that still run
// another configuration than Config, running probes aside.
func (s *OpStats) OffTarget() int {
	return s.Running + s.Starting + s.Restarting - s.OnTarget - s.RunningProbes()
}

// Settling reports whether production instances (probes aside) are starting or
// restarting: a probe that is not running is one of Starting or Restarting, and a probe
// replacing its config (a tuning trial every few minutes) is not a change of the
// deployment.
func (s *OpStats) Settling() bool {
	return s.Starting+s.Restarting > len(s.Probes)-s.RunningProbes()
}

// RunningProbes returns the number of running probe instances.
func (s *OpStats) RunningProbes() int {
	return s.countProbes(func(p ProbeStats) bool { return p.Running })
}

// ProbeOOMs returns the number of probe instances that failed with OOM.
func (s *OpStats) ProbeOOMs() int { return s.countProbes(func(p ProbeStats) bool { return p.OOM }) }

func (s *OpStats) countProbes(f func(ProbeStats) bool) int {
	n := 0
	for _, p := range s.Probes {
		if f(p) {
			n++
		}
	}
	return n
}

// Snapshot is the whole pipeline's metrics at the end of one tick.
type Snapshot struct {
	// Time is the simulated time in seconds at the end of the tick.
	Time float64
	Tick float64
	Ops  []OpStats
	// Completed is the number of source records fully processed during the tick.
	Completed float64
	// TotalCompleted counts source records completed since the start.
	TotalCompleted float64
	// Regime is the index of the dataset part the source is reading.
	Regime int
	// SourceDone reports that the source has emitted the whole dataset.
	SourceDone bool
	// EgressMBps is each node's cross-node traffic during the tick.
	EgressMBps []float64
	// Free is each node's unallocated resources.
	Free []Resources
}
