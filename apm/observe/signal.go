package observe

import (
	"fmt"
	"math"
)

// SignalConfig configures the stage-1 signal filter. A zero field takes its default.
//
// The queue trend of a span of intervals is g = Δqueue / records processed, which equals
// λ/μ − 1 for arrival rate λ and service rate μ: g ≈ 0 in steady state, g < 0 while the
// operator drains its queue faster than input arrives (it is running out of work), g > 0
// while a backlog builds (output throttled by backpressure, or a burst temporarily inflating
// batch occupancy). The trend is checked over the current interval and over the last
// QueueWindow intervals, so a short episode is caught even after its first interval.
// An input queue that is empty at both ends of every interval in the window is a starved
// operator too (it outpaces its input), even if its utilisation is just above the threshold:
// an operator at capacity keeps a backlog.
//
// Samples that report their queue bound and output blocking (Sample.QueueCap,
// Sample.OutputBlockedSeconds) get two more checks. An interval whose output was blocked
// by a full downstream queue for more than MaxBlocked of it is rejected: its rate is the
// downstream operator's, not this one's. And an interval that starts and ends with the
// queue at least FullQueue full is saturated whatever its utilisation: the queue bound
// also holds the requests in flight, so a batching engine's batch stays below its
// admission limit there although the engine has every request it may take.
type SignalConfig struct {
	// MinUtilization rejects samples whose utilisation is below it (default 0.6): an
	// accelerator that is mostly idle is starved and its rate under-reports capacity.
	MinUtilization float64
	// QueueWindow is the number of recent intervals in the sliding queue trend (default 3).
	QueueWindow int
	// MaxDrain rejects a queue trend below −MaxDrain (default 0.1: the queue shrinks by more
	// than 10% of the records processed).
	MaxDrain float64
	// MaxGrowth rejects a queue trend above MaxGrowth (default 0.2: the queue grows by more
	// than 20% of the records processed).
	MaxGrowth float64
	// EmptyQueue is the queue length, relative to the records of an interval, at or below
	// which the queue counts as empty (default 0.05).
	EmptyQueue float64
	// FullQueue is the fill of a bounded queue (Sample.QueueCap) at or above which, at
	// both ends of an interval, the operator counts as saturated and the utilisation
	// check is skipped (default 0.9).
	FullQueue float64
	// MaxBlocked rejects a sample whose output was blocked for more than this fraction of
	// the interval (default 0.1).
	MaxBlocked float64
}

func (c SignalConfig) withDefaults() SignalConfig {
	if c.MinUtilization == 0 {
		c.MinUtilization = 0.6
	}
	if c.QueueWindow == 0 {
		c.QueueWindow = 3
	}
	if c.MaxDrain == 0 {
		c.MaxDrain = 0.1
	}
	if c.MaxGrowth == 0 {
		c.MaxGrowth = 0.2
	}
	if c.EmptyQueue == 0 {
		c.EmptyQueue = 0.05
	}
	if c.FullQueue == 0 {
		c.FullQueue = 0.9
	}
	if c.MaxBlocked == 0 {
		c.MaxBlocked = 0.1
	}
	return c
}

func (c SignalConfig) validate() error {
	switch {
	case c.MinUtilization < 0 || c.MinUtilization > 1:
		return fmt.Errorf("signal filter: min utilization %v outside [0, 1]", c.MinUtilization)
	case c.QueueWindow < 1:
		return fmt.Errorf("signal filter: queue window %d must be at least 1", c.QueueWindow)
	case !(c.MaxDrain > 0) || !(c.MaxGrowth > 0):
		return fmt.Errorf("signal filter: max drain %v and max growth %v must be positive", c.MaxDrain, c.MaxGrowth)
	case c.EmptyQueue < 0:
		return fmt.Errorf("signal filter: empty-queue fraction %v must not be negative", c.EmptyQueue)
	case !(c.FullQueue > 0 && c.FullQueue <= 1):
		return fmt.Errorf("signal filter: full-queue fraction %v outside (0, 1]", c.FullQueue)
	case !(c.MaxBlocked > 0 && c.MaxBlocked <= 1):
		return fmt.Errorf("signal filter: max blocked fraction %v outside (0, 1]", c.MaxBlocked)
	}
	return nil
}

// signalFilter is the stage-1 filter state of one operator: the recent queue history.
type signalFilter struct {
	cfg     SignalConfig
	dq, rec []float64 // per interval: queue change and records, oldest first
	empty   []bool    // per interval: queue empty at both ends
}

func newSignalFilter(cfg SignalConfig) *signalFilter { return &signalFilter{cfg: cfg} }

func (f *signalFilter) reset() { f.dq, f.rec, f.empty = f.dq[:0], f.rec[:0], f.empty[:0] }

// check records s in the queue history and returns the rejection reason, "" if s passes.
func (f *signalFilter) check(s Sample) string {
	dq := s.QueueEnd - s.QueueStart
	f.dq = append(f.dq, dq)
	f.rec = append(f.rec, s.Records)
	lim := f.cfg.EmptyQueue * math.Max(s.Records, 1)
	f.empty = append(f.empty, s.QueueStart <= lim && s.QueueEnd <= lim)
	if n := len(f.dq); n > f.cfg.QueueWindow {
		f.dq = append(f.dq[:0], f.dq[n-f.cfg.QueueWindow:]...)
		f.rec = append(f.rec[:0], f.rec[n-f.cfg.QueueWindow:]...)
		f.empty = append(f.empty[:0], f.empty[n-f.cfg.QueueWindow:]...)
	}
	if s.OutputBlockedSeconds > f.cfg.MaxBlocked*s.Interval.Seconds() {
		return ReasonOutputBlocked
	}
	full := s.QueueCap > 0 && math.Min(s.QueueStart, s.QueueEnd) >= f.cfg.FullQueue*s.QueueCap
	if s.Utilization < f.cfg.MinUtilization && !full {
		return ReasonLowUtilization
	}
	var sdq, srec float64
	allEmpty := true
	for i := range f.dq {
		sdq += f.dq[i]
		srec += f.rec[i]
		allEmpty = allEmpty && f.empty[i]
	}
	if f.empty[len(f.empty)-1] && (allEmpty || len(f.empty) < f.cfg.QueueWindow) {
		return ReasonQueueEmpty
	}
	now := dq / math.Max(s.Records, 1)
	win := sdq / math.Max(srec, 1)
	switch {
	case now < -f.cfg.MaxDrain || win < -f.cfg.MaxDrain:
		return ReasonQueueDraining
	case now > f.cfg.MaxGrowth || win > f.cfg.MaxGrowth:
		return ReasonQueueGrowing
	}
	return ""
}
