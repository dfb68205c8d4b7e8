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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Operator is the part of the planner's operator description the feeder needs.
type Operator struct {
	Name     string   `json:"name"`
	GPUs     int      `json:"gpus"`
	Features []string `json:"features,omitempty"`
	Params   string   `json:"params,omitempty"`
	Config   string   `json:"config"`
	// GPUMemoryMB is the device memory per accelerator (group meta trident_gpu_memory_mb),
	// the Tuner's memory limit.
	GPUMemoryMB float64 `json:"gpu_memory_mb,omitempty"`
	// ColdStartSec is the operator's restart plus warm-up time, sent with candidates.
	ColdStartSec float64 `json:"cold_start_s,omitempty"`
	// Synchronous marks an operator whose capacity is its useful-time rate.
	Synchronous bool `json:"synchronous,omitempty"`
}

// Declaration returns what the observation layer needs to model the operator.
func (o Operator) Declaration() Declaration {
	return Declaration{Features: o.Features, Synchronous: o.Synchronous}
}

// Pipeline is one registered pipeline as GET /v1/pipelines lists it.
type Pipeline struct {
	Job       string     `json:"job"`
	Operators []Operator `json:"operators"`
}

// Observation is one element of POST /v1/observations.
type Observation struct {
	Job       string  `json:"job"`
	Operator  string  `json:"operator"`
	Capacity  float64 `json:"capacity"`
	Std       float64 `json:"std,omitempty"`
	Epoch     uint64  `json:"epoch"`
	UnixMilli int64   `json:"unix_ms,omitempty"`
	// Backlog is the operator's input backlog (records waiting, summed over instances)
	// at the latest scrape: the planner's catch-up term.
	Backlog float64 `json:"backlog,omitempty"`
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
	o   Options
	est *Estimator

	tuner *Tuner // nil unless Options.Tune

	mu        sync.Mutex
	published int // observations the planner accepted
}

// New returns a Feeder over est (shared with the APM's capacity queries); Run starts it.
func New(est *Estimator, o Options) (*Feeder, error) {
	if est == nil {
		return nil, fmt.Errorf("feed: an estimator is required")
	}
	if o.Planner == "" {
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
	f := &Feeder{o: o, est: est}
	if o.Tune {
		if o.Tuning.Logger == nil {
			o.Tuning.Logger = o.Logger
		}
		t, err := NewTuner(est, f.call, o.Tuning)
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
	var pipes []Pipeline
	if err := f.call(ctx, http.MethodGet, "/v1/pipelines", nil, &pipes); err != nil {
		return err
	}
	err := f.publish(ctx, pipes)
	if f.tuner != nil {
		err = errors.Join(err, f.tuner.Round(ctx, pipes))
	}
	return err
}

// publish refreshes every operator and posts the estimates that exist.
func (f *Feeder) publish(ctx context.Context, pipes []Pipeline) error {
	var obs []Observation
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
	if err := f.call(ctx, http.MethodPost, "/v1/observations", obs, nil); err != nil {
		return err
	}
	f.mu.Lock()
	f.published += len(obs)
	f.mu.Unlock()
	return nil
}

// operator refreshes job/op and returns its estimate, if there is one yet.
func (f *Feeder) operator(ctx context.Context, job string, op Operator) (Observation, bool, error) {
	if err := f.o.Refresh(ctx, job, op.Name, op.Declaration()); err != nil {
		return Observation{}, false, err
	}
	est, err := f.est.Estimate(job, op.Name)
	if err != nil {
		return Observation{}, false, nil // no estimate yet: nothing to publish
	}
	ob := Observation{Job: job, Operator: op.Name, Capacity: est.Capacity, Std: est.StdDev, Epoch: est.Epoch, UnixMilli: time.Now().UnixMilli()}
	if s, ok := f.est.Latest(job, op.Name); ok {
		ob.Backlog = Backlog(s)
	}
	return ob, true, nil
}

// StatusError is a planner answer other than 2xx.
type StatusError struct {
	Code int
	Body string
}

// Error implements error.
func (e *StatusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Body) }

// callFunc does one planner request with JSON in and out.
type callFunc func(ctx context.Context, method, path string, in, out any) error

// call does one planner request with JSON in and out.
func (f *Feeder) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("feed: encode %s: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	u := strings.TrimRight(f.o.Planner, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("feed: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if f.o.Token != "" {
		req.Header.Set("X-Trident-Token", f.o.Token)
	}
	resp, err := f.o.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("feed: %s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("feed: %s %s: %w", method, u, &StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(b))})
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("feed: decode %s: %w", path, err)
		}
	}
	return nil
}
