package observe

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// DefaultWarmUp is SignalConfig.WarmUp's default: samples of an instance's first two
// minutes after a (re)start are rejected.
const DefaultWarmUp = 2 * time.Minute

// SignalConfig configures the stage-1 signal filter. A zero field takes its default.
//
// The filter asks one question of every interval: did the operator have work for all of
// it? It answers from whichever signals the sample carries, so that no single metric's
// convention decides (an input-queue gauge may count waiting records only or also the
// requests in flight; "utilisation" may be batch occupancy or a busy fraction that is 1
// whenever anything runs).
//
// Each interval has two readings, at its start and its end. A reading proves saturation
// when
//   - the input queue is at least FullQueue of its bound (Sample.QueueCap): the producer is
//     blocked, and since the bound also holds the requests in flight, a batching engine
//     there has every request it may take even when its batch is small;
//   - the engine reports requests waiting for a batch slot (Sample.Engine, vLLM's
//     num_requests_waiting > 0), or a full batch (running at its AdmissionLimit);
//   - without engine gauges, the queue holds more than AdmissionLimit requests: whether it
//     counts the requests in flight or not, more than a full batch is then waiting;
//   - without engine gauges, every queue reading of the last QueueWindow intervals stands
//     more than WaitingMargin above the mean running batch of those intervals (useful
//     seconds per second: useful time is the time requests spent running, so by Little's
//     law this is the mean number running). Requests then wait although the batch is
//     below its admission limit: the KV cache, not the slots, caps it, and the engine is
//     saturated. Its queue gauge, counting requests in flight or waiting ones only, sits
//     above what runs, while a starved engine runs everything it holds. Every reading of
//     the window must show it, because completions lag the queue by a service time: a
//     queue filling faster than long requests complete stands above the running batch for
//     a while even when the engine is starved.
//
// A reading without that proof shows starvation when
//   - the engine reports nothing waiting (free slots, or none left for the next
//     completion: the operator outpaces its input);
//   - without engine gauges but with AdmissionLimit, the queue holds fewer requests than
//     one full batch (in-flight against the admission limit);
//   - with neither, the queue is empty (at most EmptyQueue of the interval's records).
//
// An interval is rejected as starved when any reading of the last StarveWindow intervals
// (default: its own two) shows starvation. The rule used to need every interval of a window
// empty at both ends, so an operator starving now and then (bursty input) passed it; a
// single starved reading now condemns the interval it bounds.
// An interval whose output was blocked for more than MaxBlocked of it is rejected as
// backpressured; below that, its rate is taken over the unblocked time. An interval that
// began within WarmUp of the instance's (re)start is rejected as warming up.
//
// An interval with proof of saturation at both readings is accepted whatever its
// utilisation and queue trend: the operator had work throughout, so a draining backlog or
// a growing one does not bias its rate. Without that proof, utilisation below
// MinUtilization is starvation, and the queue trend g = Δqueue / records processed (= λ/μ
// − 1 for arrival rate λ and service rate μ) over the interval and over the window must stay
// within [−MaxDrain, MaxGrowth]: a draining queue means the operator is running out of work,
// a fast-growing one a transient backlog (a burst filling batches beyond their sustainable
// occupancy).
//
// When neither the queue bound nor engine gauges are exported but AdmissionLimit is, the
// bound is inferred from the queue gauge's plateau: the level that at least a fifth of the
// last BoundHistory readings reach (within 2 %) and none exceeds. A bound is a hard ceiling
// that a saturated operator sits at; a starved operator's queue fluctuates below its own
// maximum.
type SignalConfig struct {
	// MinUtilization rejects samples whose utilisation is below it (default 0.6) unless
	// both readings prove saturation: an accelerator that is mostly idle is starved and its
	// rate under-reports capacity.
	MinUtilization float64
	// QueueWindow is the number of recent intervals of the sliding queue trend (default 3).
	QueueWindow int
	// StarveWindow is the number of recent intervals, this one included, any of whose
	// readings showing starvation rejects the interval (default 1: its own two readings;
	// at most QueueWindow).
	StarveWindow int
	// MaxDrain rejects a queue trend below −MaxDrain (default 0.1: the queue shrinks by more
	// than 10% of the records processed) unless both readings prove saturation.
	MaxDrain float64
	// MaxGrowth rejects a queue trend above MaxGrowth (default 0.2: the queue grows by more
	// than 20% of the records processed) unless both readings prove saturation.
	MaxGrowth float64
	// EmptyQueue is the queue length, relative to the records of an interval, at or below
	// which the queue counts as empty (default 0.05).
	EmptyQueue float64
	// FullQueue is the fill of a bounded queue (Sample.QueueCap) at or above which a
	// reading proves saturation (default 0.9).
	FullQueue float64
	// MaxBlocked rejects a sample whose output was blocked for more than this fraction of
	// the interval (default 0.1).
	MaxBlocked float64
	// WarmUp rejects a sample whose interval began less than this long after the
	// instance's (re)start (Sample.Uptime; default 2 minutes; negative: off). A restarted
	// engine compiles kernels, captures graphs for new shapes and fills its caches while
	// it serves, so its first minutes run below its sustainable rate; a model that learns
	// them under-reports capacity, and a residual filter that sees the recovery takes it
	// for a regime shift. GPEstimator admits such samples afterwards when the samples
	// that follow show no speed-up (see GPEstimator.releaseWarm).
	WarmUp time.Duration
	// BoundHistory is the number of queue readings the plateau of an unreported bound is
	// inferred from (default 60: 30 intervals).
	BoundHistory int
	// WaitingMargin is how far, relative to the mean running batch, the queue readings of
	// an engine without gauges must stand above it to prove requests waiting (default
	// 0.25: about two standard deviations of a Poisson count of 60 running requests;
	// negative: off). The running batch is a mean over the window, a reading one instant:
	// the margin absorbs that noise.
	WaitingMargin float64
}

func (c SignalConfig) withDefaults() SignalConfig {
	if c.MinUtilization == 0 {
		c.MinUtilization = 0.6
	}
	if c.QueueWindow == 0 {
		c.QueueWindow = 3
	}
	if c.StarveWindow == 0 {
		c.StarveWindow = 1
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
	if c.BoundHistory == 0 {
		c.BoundHistory = 60
	}
	if c.WarmUp == 0 {
		c.WarmUp = DefaultWarmUp
	}
	if c.WaitingMargin == 0 {
		c.WaitingMargin = 0.25
	}
	return c
}

func (c SignalConfig) validate() error {
	switch {
	case c.MinUtilization < 0 || c.MinUtilization > 1:
		return fmt.Errorf("signal filter: min utilization %v outside [0, 1]", c.MinUtilization)
	case c.QueueWindow < 1:
		return fmt.Errorf("signal filter: queue window %d must be at least 1", c.QueueWindow)
	case c.StarveWindow < 1 || c.StarveWindow > c.QueueWindow:
		return fmt.Errorf("signal filter: starve window %d outside [1, queue window %d]", c.StarveWindow, c.QueueWindow)
	case !(c.MaxDrain > 0) || !(c.MaxGrowth > 0):
		return fmt.Errorf("signal filter: max drain %v and max growth %v must be positive", c.MaxDrain, c.MaxGrowth)
	case c.EmptyQueue < 0:
		return fmt.Errorf("signal filter: empty-queue fraction %v must not be negative", c.EmptyQueue)
	case !(c.FullQueue > 0 && c.FullQueue <= 1):
		return fmt.Errorf("signal filter: full-queue fraction %v outside (0, 1]", c.FullQueue)
	case !(c.MaxBlocked > 0 && c.MaxBlocked <= 1):
		return fmt.Errorf("signal filter: max blocked fraction %v outside (0, 1]", c.MaxBlocked)
	case c.BoundHistory < 10:
		return fmt.Errorf("signal filter: bound history %d must be at least 10 readings", c.BoundHistory)
	}
	return nil
}

// signalFilter is the stage-1 filter state of one operator: the recent queue history.
type signalFilter struct {
	cfg     SignalConfig
	dq, rec []float64 // per interval: queue change and records, oldest first
	useful  []float64 // per interval: useful seconds per second (the mean running batch)
	lowQ    []float64 // per interval: the lower of its two queue readings
	starved []string  // per interval: the starvation reason of a reading, "" if none
	queue   []float64 // recent queue readings, for an unreported bound
}

func newSignalFilter(cfg SignalConfig) *signalFilter { return &signalFilter{cfg: cfg} }

func (f *signalFilter) reset() {
	f.dq, f.rec, f.useful, f.lowQ, f.starved, f.queue = f.dq[:0], f.rec[:0], f.useful[:0], f.lowQ[:0], f.starved[:0], f.queue[:0]
}

// keepLast returns the last n elements of s, in place.
func keepLast[T any](s []T, n int) []T {
	if len(s) <= n {
		return s
	}
	return append(s[:0], s[len(s)-n:]...)
}

// reading is the state at one end of an interval.
type reading struct{ queue, running, waiting float64 }

// bound returns the queue bound to judge s by: the reported one, or the inferred plateau
// of an engine with a known admission limit and no gauges of its own (0: none).
func (f *signalFilter) bound(s Sample) float64 {
	if s.QueueCap > 0 || s.Engine.Reported || !(s.Engine.AdmissionLimit > 0) {
		return s.QueueCap
	}
	f.queue = keepLast(append(f.queue, s.QueueStart, s.QueueEnd), f.cfg.BoundHistory)
	top := slices.Max(f.queue)
	if !(top > 0) {
		return 0
	}
	at := 0
	for _, q := range f.queue {
		if q >= 0.98*top {
			at++
		}
	}
	if 5*at < f.cfg.BoundHistory {
		return 0
	}
	return top
}

// saturated reports whether reading r of s proves that the operator had more work than it
// was running; waiting reports requests waiting throughout the window (waitingThroughout).
func (f *signalFilter) saturated(s Sample, r reading, bound float64, waiting bool) bool {
	lim := s.Engine.AdmissionLimit
	switch {
	case bound > 0 && r.queue >= f.cfg.FullQueue*bound:
		return true
	case s.Engine.Reported:
		return r.waiting > 0 || lim > 0 && r.running >= lim
	case !(lim > 0):
		return false
	}
	return r.queue > lim || waiting
}

// waitingThroughout records s's running batch and queue readings in the history and
// reports whether every queue reading of the last QueueWindow intervals stood more than
// WaitingMargin above their mean running batch (see SignalConfig).
func (f *signalFilter) waitingThroughout(s Sample) bool {
	f.useful = keepLast(append(f.useful, s.UsefulSeconds/s.Interval.Seconds()), f.cfg.QueueWindow)
	f.lowQ = keepLast(append(f.lowQ, math.Min(s.QueueStart, s.QueueEnd)), f.cfg.QueueWindow)
	if f.cfg.WaitingMargin < 0 || len(f.useful) < f.cfg.QueueWindow {
		return false
	}
	var running float64
	for _, u := range f.useful {
		running += u
	}
	running /= float64(len(f.useful))
	return running > 0 && slices.Min(f.lowQ) > (1+f.cfg.WaitingMargin)*running
}

// starvedReason returns why reading r of s (without proof of saturation) shows
// starvation, "" if it does not.
func (f *signalFilter) starvedReason(s Sample, r reading) string {
	switch {
	case s.Engine.Reported:
		if r.waiting <= 0 {
			return ReasonStarved
		}
	case s.Engine.AdmissionLimit > 0:
		if r.queue < s.Engine.AdmissionLimit {
			return ReasonStarved
		}
	case r.queue <= f.cfg.EmptyQueue*math.Max(s.Records, 1):
		return ReasonQueueEmpty
	}
	return ""
}

// check records s in the history and returns the rejection reason, "" if s passes.
func (f *signalFilter) check(s Sample) string {
	dq := s.QueueEnd - s.QueueStart
	bound := f.bound(s)
	rs := [2]reading{
		{s.QueueStart, s.Engine.RunningStart, s.Engine.WaitingStart},
		{s.QueueEnd, s.Engine.RunningEnd, s.Engine.WaitingEnd},
	}
	waiting := f.waitingThroughout(s)
	proof, starved := true, ""
	for _, r := range rs {
		if f.saturated(s, r, bound, waiting) {
			continue
		}
		proof = false
		if why := f.starvedReason(s, r); why != "" {
			starved = why
		}
	}
	f.dq = keepLast(append(f.dq, dq), f.cfg.QueueWindow)
	f.rec = keepLast(append(f.rec, s.Records), f.cfg.QueueWindow)
	f.starved = keepLast(append(f.starved, starved), f.cfg.QueueWindow)
	if s.OutputBlockedSeconds > f.cfg.MaxBlocked*s.Interval.Seconds() {
		return ReasonOutputBlocked
	}
	if r := f.rules(s, proof, dq); r != "" {
		return r
	}
	if s.Uptime > 0 && s.Uptime-s.Interval < f.cfg.WarmUp {
		// Judged last, so that ReasonWarmUp means the sample passed every other rule
		// (GPEstimator may admit it once later samples show the engine warm).
		return ReasonWarmUp
	}
	return ""
}

// rules applies the utilisation, starvation and queue-trend rules to s (already recorded
// in the history), whose readings proved saturation (proof), dq being its queue change.
func (f *signalFilter) rules(s Sample, proof bool, dq float64) string {
	if s.Utilization < f.cfg.MinUtilization && !proof {
		return ReasonLowUtilization
	}
	for i := len(f.starved) - 1; i >= max(0, len(f.starved)-f.cfg.StarveWindow); i-- {
		if f.starved[i] != "" {
			return f.starved[i]
		}
	}
	if proof {
		return ""
	}
	var sdq, srec float64
	for i := range f.dq {
		sdq += f.dq[i]
		srec += f.rec[i]
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
