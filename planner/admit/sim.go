package admit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// ErrStuck is wrapped by Simulate's error when jobs wait with nothing running and nothing
// left to arrive (the callback never lets any of them fit).
var ErrStuck = errors.New("simulation stuck")

// maxSimTime bounds SimJob.Arrival (seconds) so that times convert to time.Time exactly
// enough (time.Duration spans about 292 years).
const maxSimTime = 1e9

// SimJob is one batch job of a simulation.
type SimJob struct {
	// Name identifies the job (unique, non-empty).
	Name string
	// Arrival is when the job is submitted, in seconds (finite, 0 ≤ Arrival ≤ 1e9).
	Arrival float64
	// Records is the job's input size (> 0, finite).
	Records float64
	// Weight is its priority (≥ 0, 0 means 1), as Pipeline.Weight.
	Weight float64
}

// RatesFunc is a simulation's resource model: whether the minimums of the admitted jobs
// fit together and, if they do, each one's rate in records/s (> 0 for every job of the set).
// It must be deterministic and depend only on the set, not on the order of admitted:
// Simulate caches its answers within an admission round.
type RatesFunc func(ctx context.Context, admitted []SimJob) (rates map[string]float64, fits bool, err error)

// SimConfig is one simulation.
type SimConfig struct {
	// Jobs are the batch jobs, in any order.
	Jobs []SimJob
	// Policy is the admission policy under test.
	Policy Policy
	// Rates is the resource model (required).
	Rates RatesFunc
	// Window, if > 0, holds each arrival until the end of its window of Window seconds
	// ((⌊Arrival/Window⌋+1)·Window) before admission sees it, as seed 001 accumulates
	// submissions for a 15 s window and then orders them together; a live planner that
	// admits once per loop interval behaves alike. Waits and completion times still count
	// from Arrival. 0 admits each arrival at once.
	Window float64
}

// JobResult is one job's outcome.
type JobResult struct {
	// Name is the job's name.
	Name string
	// Arrival, Start (admission) and Finish are times in seconds.
	Arrival, Start, Finish float64
	// Wait is Start − Arrival, the time spent queued.
	Wait float64
	// Completion is Finish − Arrival.
	Completion float64
}

// SimResult is a simulation's outcome. Times are in seconds.
type SimResult struct {
	// Jobs are the per-job outcomes, in the order of SimConfig.Jobs.
	Jobs []JobResult
	// MeanCompletion, P95Completion (nearest rank) and MaxCompletion summarise
	// JobResult.Completion.
	MeanCompletion, P95Completion, MaxCompletion float64
	// MeanWait and MaxWait summarise JobResult.Wait.
	MeanWait, MaxWait float64
	// Makespan is the last finish minus the first arrival (seed 001's "total execution
	// time" when the first job starts on arrival).
	Makespan float64
	// Rounds counts the admission rounds: one per distinct arrival or completion time while
	// jobs remain (none after the last completion).
	Rounds int
}

// simJob is a job's state during a simulation.
type simJob struct {
	SimJob
	visible   float64 // when admission first sees the job (Arrival, or its window's end)
	alone     float64 // rate when running alone: the planned throughput while waiting
	remaining float64 // records left
	rate      float64 // current rate while running
	start     float64
	finish    float64
	state     int // pending, waiting, running or done
}

const (
	pending = iota
	queued
	active
	done
)

// Simulate runs the admission policy over cfg.Jobs as a discrete-event simulation: at every
// distinct arrival or completion time it calls Admit (so Order and Admit are the code under
// test) with the running jobs (Running, their remaining records and current rate) and the
// waiting ones (their records and, as planned throughput, their rate when running alone),
// asks Rates for the admitted set's rates, and lets every running job progress at its rate
// until the next event. Admission is non-preemptive. A job whose minimums do not fit on an
// empty cluster is an error (it would wait forever). Simulate is deterministic given a
// deterministic Rates and stops with ctx's error when ctx is done.
func Simulate(ctx context.Context, cfg SimConfig) (SimResult, error) {
	if cfg.Rates == nil {
		return SimResult{}, fmt.Errorf("admit: simulate: %w: nil Rates", ErrInvalid)
	}
	if err := cfg.Policy.validate(); err != nil {
		return SimResult{}, fmt.Errorf("admit: simulate: %w", err)
	}
	if !(cfg.Window >= 0) || math.IsInf(cfg.Window, 0) {
		return SimResult{}, fmt.Errorf("admit: simulate: %w: window %v", ErrInvalid, cfg.Window)
	}
	jobs := make([]*simJob, len(cfg.Jobs))
	byName := make(map[string]*simJob, len(cfg.Jobs))
	for i, j := range cfg.Jobs {
		if err := validJob(j, byName); err != nil {
			return SimResult{}, fmt.Errorf("admit: simulate: %w", err)
		}
		jobs[i] = &simJob{SimJob: j, remaining: j.Records, visible: j.Arrival}
		if cfg.Window > 0 {
			jobs[i].visible = (math.Floor(j.Arrival/cfg.Window) + 1) * cfg.Window
		}
		byName[j.Name] = jobs[i]
	}
	arrivals := slices.Clone(jobs)
	slices.SortStableFunc(arrivals, func(x, y *simJob) int {
		return cmp.Or(cmp.Compare(x.visible, y.visible), cmp.Compare(x.Arrival, y.Arrival), cmp.Compare(x.Name, y.Name))
	})
	s := &sim{cfg: cfg, byName: byName}
	var live []*simJob // waiting or running, in arrival order
	t := 0.0
	if len(arrivals) > 0 {
		t = arrivals[0].visible
	}
	rounds := 0
	for len(arrivals) > 0 || len(live) > 0 {
		if err := ctx.Err(); err != nil {
			return SimResult{}, fmt.Errorf("admit: simulate at %gs: %w", t, err)
		}
		for len(arrivals) > 0 && arrivals[0].visible <= t {
			j := arrivals[0]
			arrivals = arrivals[1:]
			if err := s.arrive(ctx, j); err != nil {
				return SimResult{}, fmt.Errorf("admit: simulate at %gs: %w", t, err)
			}
			live = append(live, j)
		}
		rounds++
		if err := s.round(ctx, t, live); err != nil {
			return SimResult{}, fmt.Errorf("admit: simulate at %gs: %w", t, err)
		}
		next := math.Inf(1)
		if len(arrivals) > 0 {
			next = arrivals[0].visible
		}
		for _, j := range live {
			if j.state == active {
				next = min(next, t+j.remaining/j.rate)
			}
		}
		if math.IsInf(next, 1) {
			return SimResult{}, fmt.Errorf("admit: simulate at %gs: %w: %d jobs wait, none runs", t, ErrStuck, len(live))
		}
		// Progress to next; a job whose finish is within rounding of next finishes there.
		eps := 1e-12 * max(1, math.Abs(next))
		kept := live[:0]
		for _, j := range live {
			if j.state == active {
				if t+j.remaining/j.rate <= next+eps {
					j.remaining, j.finish, j.state = 0, next, done
					continue
				}
				j.remaining -= j.rate * (next - t)
			}
			kept = append(kept, j)
		}
		clear(live[len(kept):])
		live = kept
		t = next
	}
	return summarise(jobs, rounds), nil
}

// sim is the state shared by a simulation's steps.
type sim struct {
	cfg    SimConfig
	byName map[string]*simJob
	memo   map[string]simRates // this round's Rates answers by set
}

// simRates is one answer of Rates.
type simRates struct {
	rates map[string]float64
	fits  bool
}

// arrive records j's arrival and its rate alone, which must fit and be positive.
func (s *sim) arrive(ctx context.Context, j *simJob) error {
	rates, fits, err := s.cfg.Rates(ctx, []SimJob{j.SimJob})
	if err != nil {
		return fmt.Errorf("rates of %q alone: %w", j.Name, err)
	}
	if !fits {
		return fmt.Errorf("%w: job %q does not fit on the empty cluster", ErrInvalid, j.Name)
	}
	r := rates[j.Name]
	if !(r > 0) || math.IsInf(r, 0) {
		return fmt.Errorf("rates of %q alone: rate %v (want finite, > 0)", j.Name, r)
	}
	j.alone, j.state = r, queued
	return nil
}

// rates returns Rates of the named set, cached for the round.
func (s *sim) rates(ctx context.Context, names []string) (simRates, error) {
	key := slices.Clone(names)
	slices.Sort(key)
	k := strings.Join(key, "\x00")
	if r, ok := s.memo[k]; ok {
		return r, nil
	}
	set := make([]SimJob, len(names))
	for i, n := range names {
		set[i] = s.byName[n].SimJob
	}
	rates, fits, err := s.cfg.Rates(ctx, set)
	if err != nil {
		return simRates{}, fmt.Errorf("rates of %d jobs: %w", len(names), err)
	}
	r := simRates{rates: rates, fits: fits}
	s.memo[k] = r
	return r, nil
}

// round admits at time t among live jobs and sets the running jobs' rates.
func (s *sim) round(ctx context.Context, t float64, live []*simJob) error {
	s.memo = map[string]simRates{}
	ps := make([]Pipeline, len(live))
	for i, j := range live {
		ps[i] = Pipeline{Name: j.Name, Batch: true, Weight: j.Weight, Since: simTime(j.Arrival)}
		if j.state == active {
			ps[i].Running, ps[i].Remaining, ps[i].Throughput = true, j.remaining, j.rate
			ps[i].Started = simTime(j.start)
		} else {
			ps[i].Remaining, ps[i].Throughput = j.remaining, j.alone
		}
	}
	res, err := AdmitWork(ctx, ps, simTime(t), s.cfg.Policy, func(ctx context.Context, admitted []string) (bool, float64, error) {
		r, err := s.rates(ctx, admitted)
		if err != nil || !r.fits {
			return false, 0, err
		}
		w := 0.0
		for _, n := range admitted {
			w += r.rates[n] / s.byName[n].alone
		}
		return true, w, nil
	})
	if err != nil {
		return err
	}
	if len(res.Short) > 0 {
		return fmt.Errorf("running jobs %q no longer fit (Rates is not monotone)", res.Short)
	}
	if len(res.Admitted) == 0 {
		return nil
	}
	r, err := s.rates(ctx, res.Admitted)
	if err != nil {
		return err
	}
	if !r.fits {
		return fmt.Errorf("admitted set %q does not fit", res.Admitted)
	}
	for _, n := range res.Admitted {
		j := s.byName[n]
		rate := r.rates[n]
		if !(rate > 0) || math.IsInf(rate, 0) {
			return fmt.Errorf("rate of %q among %d admitted jobs: %v (want finite, > 0)", n, len(res.Admitted), rate)
		}
		if j.state == queued {
			j.state, j.start = active, t
		}
		j.rate = rate
	}
	return nil
}

// simTime converts simulation seconds to the time Admit sees.
func simTime(s float64) time.Time {
	return time.Unix(0, 0).UTC().Add(time.Duration(math.Round(s * 1e9)))
}

// validJob reports a malformed job or a repeated name (jobs seen so far in seen).
func validJob(j SimJob, seen map[string]*simJob) error {
	switch {
	case j.Name == "":
		return fmt.Errorf("%w: job with an empty name", ErrInvalid)
	case seen[j.Name] != nil:
		return fmt.Errorf("%w: job %q listed twice", ErrInvalid, j.Name)
	case !(j.Arrival >= 0 && j.Arrival <= maxSimTime):
		return fmt.Errorf("%w: job %q: arrival %v (want 0 to %g s)", ErrInvalid, j.Name, j.Arrival, float64(maxSimTime))
	case !(j.Records > 0) || math.IsInf(j.Records, 0):
		return fmt.Errorf("%w: job %q: records %v (want finite, > 0)", ErrInvalid, j.Name, j.Records)
	case !(j.Weight >= 0) || math.IsInf(j.Weight, 0):
		return fmt.Errorf("%w: job %q: weight %v (want finite, ≥ 0)", ErrInvalid, j.Name, j.Weight)
	}
	return nil
}

// summarise computes the result of finished jobs.
func summarise(jobs []*simJob, rounds int) SimResult {
	r := SimResult{Jobs: make([]JobResult, len(jobs)), Rounds: rounds}
	if len(jobs) == 0 {
		return r
	}
	comp := make([]float64, len(jobs))
	first, last := math.Inf(1), math.Inf(-1)
	for i, j := range jobs {
		jr := JobResult{Name: j.Name, Arrival: j.Arrival, Start: j.start, Finish: j.finish,
			Wait: j.start - j.Arrival, Completion: j.finish - j.Arrival}
		r.Jobs[i] = jr
		comp[i] = jr.Completion
		r.MeanCompletion += jr.Completion
		r.MeanWait += jr.Wait
		r.MaxWait = max(r.MaxWait, jr.Wait)
		first, last = min(first, j.Arrival), max(last, j.finish)
	}
	n := float64(len(jobs))
	r.MeanCompletion /= n
	r.MeanWait /= n
	slices.Sort(comp)
	r.P95Completion = comp[int(math.Ceil(0.95*n))-1]
	r.MaxCompletion = comp[len(comp)-1]
	r.Makespan = last - first
	return r
}
