// Package observe is Trident's observation layer (paper §4): per-operator capacity
// estimation from runtime samples with a two-stage anomaly filter — a signal filter on
// utilisation and input-queue trends, then a model filter on the GP's standardised residual —
// an EMA estimate during cold start, and sample invalidation after a committed configuration
// change. It also holds the baseline estimators the paper compares against (Table 3), all
// behind the Estimator interface.
package observe

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Sample is one observation interval of one operator (aggregated over its instances).
type Sample struct {
	// Time is the end of the interval.
	Time time.Time
	// Interval is the interval length.
	Interval time.Duration
	// Records is the number of records the operator completed in the interval.
	Records float64
	// BusySeconds is the wall time with at least one record in service.
	BusySeconds float64
	// UsefulSeconds is the per-record processing time summed over records, as DS2-style
	// instrumentation reports it; for asynchronous operators overlapping records make it
	// exceed the wall time.
	UsefulSeconds float64
	// QueueStart and QueueEnd are the input queue lengths at the start and end.
	QueueStart, QueueEnd float64
	// Utilization is the accelerator utilisation (CPU utilisation for CPU operators), 0..1.
	Utilization float64
	// QueueCap is the bound of the input queue in the units of QueueStart and QueueEnd
	// (0: unbounded or not reported). A batching engine whose bounded queue stays full is
	// not starved even when its batch is small: the queue bound, which also holds the
	// requests in flight, caps the batch (see SignalConfig.FullQueue).
	QueueCap float64
	// OutputBlockedSeconds is the wall time of the interval during which the operator's
	// output was blocked by a full downstream queue (0: never, or not reported).
	OutputBlockedSeconds float64
	// Uptime is the time from the instance's last (re)start to the end of the interval;
	// 0 when unknown. Samples taken while an engine warms up (SignalConfig.WarmUp) run
	// below its sustainable rate.
	Uptime time.Duration
	// Engine holds the serving engine's own scheduler gauges, when it exports them
	// (Engine.Reported); see EngineGauges.
	Engine EngineGauges
	// Features is the workload feature vector, in the order the operator declared.
	Features []float64
	// Epoch is the configuration epoch the sample was collected under.
	Epoch uint64
}

// EngineGauges are what a batching serving engine reports about its own scheduler, in the
// style of vLLM's num_requests_running and num_requests_waiting gauges, read at the start
// and the end of an interval. They describe the engine whatever the operator's input queue
// gauge counts (waiting records only, or also the requests in flight).
type EngineGauges struct {
	// Reported is true when the engine exports RunningX and WaitingX (a zero waiting count
	// is then a reading, not a missing value).
	Reported bool
	// RunningStart and RunningEnd are the requests in the engine's running batch.
	RunningStart, RunningEnd float64
	// WaitingStart and WaitingEnd are the requests the engine holds but does not run yet
	// (no batch slot or no KV-cache room).
	WaitingStart, WaitingEnd float64
	// AdmissionLimit is the most requests the engine runs at once (vLLM's max_num_seqs,
	// from the operator's configuration); 0 when unknown. It may be set without Reported.
	AdmissionLimit float64
}

// Rate returns the observed throughput in records per second.
func (s Sample) Rate() float64 { return s.Records / s.Interval.Seconds() }

// validate checks that s is usable by an operator with dim features.
func (s Sample) validate(dim int) error {
	if !(s.Interval > 0) {
		return fmt.Errorf("interval %v must be positive", s.Interval)
	}
	if !(s.Records >= 0) || math.IsInf(s.Records, 0) {
		return fmt.Errorf("records %v must be finite and non-negative", s.Records)
	}
	for name, v := range map[string]float64{
		"busy seconds": s.BusySeconds, "useful seconds": s.UsefulSeconds,
		"queue start": s.QueueStart, "queue end": s.QueueEnd, "utilization": s.Utilization,
		"queue cap": s.QueueCap, "output blocked seconds": s.OutputBlockedSeconds,
		"running start": s.Engine.RunningStart, "running end": s.Engine.RunningEnd,
		"waiting start": s.Engine.WaitingStart, "waiting end": s.Engine.WaitingEnd,
		"admission limit": s.Engine.AdmissionLimit,
	} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%s %v must be finite and non-negative", name, v)
		}
	}
	if s.Uptime < 0 {
		return fmt.Errorf("uptime %v must not be negative", s.Uptime)
	}
	if len(s.Features) != dim {
		return fmt.Errorf("%d features, want %d", len(s.Features), dim)
	}
	for i, v := range s.Features {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("feature %d is %v", i, v)
		}
	}
	return nil
}

// Reasons an estimator gives for rejecting a sample (the reason is empty when accepted).
const (
	ReasonInvalid         = "invalid sample"
	ReasonStaleEpoch      = "stale epoch"
	ReasonLowUtilization  = "low utilization"
	ReasonOutputBlocked   = "output blocked"
	ReasonQueueDraining   = "queue draining"
	ReasonQueueGrowing    = "queue growing"
	ReasonQueueEmpty      = "queue empty"
	ReasonStarved         = "starved"
	ReasonWarmUp          = "warming up"
	ReasonResidual        = "model residual"
	ReasonFewRecords      = "too few records"
	ReasonUnknownOperator = "unknown operator"
)

// Sources of an Estimate.
const (
	SourceEMA  = "ema"  // cold start: exponential moving average of accepted rates
	SourceGP   = "gp"   // GP predictive mean at the requested features
	SourceRate = "rate" // a baseline's direct rate statistic (DS2)
)

// Estimate is a capacity estimate for one operator at one feature vector.
type Estimate struct {
	// Capacity is the sustainable throughput in records per second.
	Capacity float64
	// StdDev is the estimate's standard deviation (GP predictive or EMA spread).
	StdDev float64
	// Samples is the number of samples the estimate rests on.
	Samples int
	// Source tells which model produced the estimate (SourceEMA, SourceGP or SourceRate).
	Source string
	// Epoch is the configuration epoch of the samples.
	Epoch uint64
}

// ErrNoData is returned when an estimator has not accepted any sample yet.
var ErrNoData = errors.New("no accepted samples yet")

// ErrUnknownOperator is returned for an operator the Layer does not know.
var ErrUnknownOperator = errors.New("unknown operator")

// Estimator estimates one operator's capacity from its samples.
type Estimator interface {
	// Name identifies the method, e.g. "gp+two-stage".
	Name() string
	// Observe offers a sample; it reports whether the sample was accepted and, if not, why.
	Observe(s Sample) (accepted bool, reason string)
	// Estimate returns the capacity at the given features; ErrNoData before any sample.
	Estimate(features []float64) (Estimate, error)
	// Reset drops all samples (after a configuration change).
	Reset()
}
