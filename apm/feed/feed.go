// Package feed publishes the observation layer's capacity estimates to the planner. A
// Feeder periodically lists the pipelines registered with the planner, scrapes every
// operator's instances (found through Nomad services "<job>-<operator>"), folds the
// intervals into the observation layer (two-stage filtered GP per operator, epochs from
// the instances' config epoch) and POSTs one observation per operator to
// /v1/observations. It runs inside the trident-apm plugin when `planner_addr` is set.
//
// With Options.Tune (plugin config `tune = "true"`) each round also runs the Tuner: per
// operator that declares tunable parameters it records the running config's measurement
// (capacity, peak device memory, OOM restarts of its config epoch) into a memory-constrained
// BO session per workload cluster (strategy/adapt) and PUTs the next configuration to
// /v1/candidates/{job}/{op}.
package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// declaration returns what the observation layer needs to model op.
func declaration(op fsm.Operator) Declaration {
	return Declaration{Features: op.Features, Synchronous: op.Synchronous}
}

// Refresh scrapes job/op's instances once and folds the interval since the previous
// scrape into the shared Estimator (the APM plugin's refresh does exactly that).
type Refresh func(ctx context.Context, job, op string, d Declaration) error

// Options configure a Feeder.
type Options struct {
	// Planner is the planner's HTTP address (any server).
	Planner string
	// Token is the planner ACL token.
	Token string
	// Client, when set, replaces the planner client made from Planner and Token.
	Client *client.Client
	// Interval between rounds (default 5s).
	Interval time.Duration
	// Refresh scrapes an operator and feeds the estimator.
	Refresh Refresh
	// Logger (default discard).
	Logger *slog.Logger
	// HTTP client (default 10s timeout).
	HTTP *http.Client
	// Tune enables the Tuner: after publishing, every round also evaluates and proposes
	// configurations of operators that declare tunable parameters (trident_params).
	Tune bool
	// Tuning configures the Tuner (used when Tune is set).
	Tuning TunerOptions
}

// Feeder runs the observation rounds.
type Feeder struct {
	o       Options
	est     *Estimator
	planner *client.Client

	tuner *Tuner // nil unless Options.Tune

	mu        sync.Mutex
	published int // observations the planner accepted
}

// New returns a Feeder over est (shared with the APM's capacity queries); Run starts it.
func New(est *Estimator, o Options) (*Feeder, error) {
	if est == nil {
		return nil, fmt.Errorf("feed: an estimator is required")
	}
	if o.Planner == "" && o.Client == nil {
		return nil, fmt.Errorf("feed: planner address is required")
	}
	if o.Refresh == nil {
		return nil, fmt.Errorf("feed: a refresh function is required")
	}
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	pc := o.Client
	if pc == nil {
		var err error
		if pc, err = client.New(client.Config{Address: o.Planner, Token: o.Token, HTTPClient: o.HTTP}); err != nil {
			return nil, fmt.Errorf("feed: %w", err)
		}
	}
	f := &Feeder{o: o, est: est, planner: pc}
	if o.Tune {
		if o.Tuning.Logger == nil {
			o.Tuning.Logger = o.Logger
		}
		t, err := NewTuner(est, pc, o.Tuning)
		if err != nil {
			return nil, err
		}
		f.tuner = t
	}
	return f, nil
}

// Tuner returns the feeder's tuner (nil unless Options.Tune).
func (f *Feeder) Tuner() *Tuner { return f.tuner }

// Run executes rounds until ctx ends.
func (f *Feeder) Run(ctx context.Context) {
	t := time.NewTicker(f.o.Interval)
	defer t.Stop()
	for {
		if err := f.Round(ctx); err != nil && ctx.Err() == nil {
			f.o.Logger.Warn("feed round failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Published returns how many observations the planner accepted so far.
func (f *Feeder) Published() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.published
}

// Round scrapes every operator once and publishes the estimates that exist; with tuning
// enabled it then runs the Tuner's round over the same scrapes.
func (f *Feeder) Round(ctx context.Context) error {
	pipes, err := f.planner.Pipelines(ctx)
	if err != nil {
		return fmt.Errorf("feed: %w", err)
	}
	err = f.publish(ctx, pipes)
	if f.tuner != nil {
		err = errors.Join(err, f.tuner.Round(ctx, pipes))
	}
	return err
}

// publish refreshes every operator and posts the estimates that exist.
func (f *Feeder) publish(ctx context.Context, pipes []client.Pipeline) error {
	var obs []client.ObservationRequest
	for _, p := range pipes {
		for _, op := range p.Operators {
			o, ok, err := f.operator(ctx, p.Job, op)
			if err != nil {
				f.o.Logger.Debug("feed: operator skipped", "job", p.Job, "operator", op.Name, "error", err)
				continue
			}
			if ok {
				obs = append(obs, o)
			}
		}
	}
	if len(obs) == 0 {
		return nil
	}
	if _, err := f.planner.Observe(ctx, obs); err != nil {
		return fmt.Errorf("feed: %w", err)
	}
	f.mu.Lock()
	f.published += len(obs)
	f.mu.Unlock()
	return nil
}

// operator refreshes job/op and returns its estimate, if there is one yet.
func (f *Feeder) operator(ctx context.Context, job string, op fsm.Operator) (client.ObservationRequest, bool, error) {
	if err := f.o.Refresh(ctx, job, op.Name, declaration(op)); err != nil {
		return client.ObservationRequest{}, false, err
	}
	est, err := f.est.Estimate(job, op.Name)
	if err != nil {
		return client.ObservationRequest{}, false, nil // no estimate yet: nothing to publish
	}
	ob := client.ObservationRequest{Job: job, Operator: op.Name, Capacity: est.Capacity, Std: est.StdDev, Epoch: est.Epoch, UnixMilli: time.Now().UnixMilli(),
		Fallback: Fallback(est.Source)}
	if s, ok := f.est.Latest(job, op.Name); ok {
		ob.Backlog = Backlog(s)
	}
	if sel, ok := f.est.Selectivity(job, op.Name); ok && sel > 0 {
		ob.Amplification = sel
	}
	return ob, true, nil
}
