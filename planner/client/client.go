// Package client is the typed Go client of the Trident planner's HTTP API, and the home of
// the API's request and response types (the server encodes exactly these).
//
// A Client talks to any planner server: followers forward writes to the leader. Every
// request is retried with bounded, jittered exponential backoff when the answer says the
// cluster is between leaders (HTTP 502, 503, 504; e.g. "leadership lost while committing
// log") or the server could not be reached, the way the autoscaler plugins, the
// observation feed and the CLI all need. A retried write may have committed the first
// time (a 502/503 does not say it did not), so only writes that are safe to repeat are
// retried: a repeated registration, observation, candidate, apply or inventory leaves the
// same state; a delete repeated after it committed answers 404, which the client takes as
// done; a leadership transfer is never repeated. Other errors come back at once as
// *StatusError.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
)

// Environment variables read by DefaultConfig, named after Nomad's NOMAD_ADDR/NOMAD_TOKEN.
const (
	// EnvAddr is the planner's HTTP address.
	EnvAddr = "TRIDENT_ADDR"
	// EnvToken is the planner ACL token.
	EnvToken = "TRIDENT_TOKEN"
)

// DefaultAddress is the planner's default HTTP address (`trident planner -http`).
const DefaultAddress = "http://127.0.0.1:4650"

// maxResponse bounds how much of a response body the client reads.
const maxResponse = 64 << 20

// Config configures a Client.
type Config struct {
	// Address is the planner's HTTP address, e.g. http://127.0.0.1:4650 (a bare
	// host:port gets http://).
	Address string
	// Token is the ACL token sent in X-Trident-Token (empty: none).
	Token string
	// HTTPClient does the requests (default: 30 s timeout).
	HTTPClient *http.Client
	// Retries is how many times a transient failure is retried (default 5; negative: none).
	Retries int
	// MinBackoff and MaxBackoff bound the wait between retries (defaults 100 ms and 2 s);
	// the wait doubles per retry, with up to 50 % jitter.
	MinBackoff, MaxBackoff time.Duration
}

// DefaultConfig returns a Config from TRIDENT_ADDR and TRIDENT_TOKEN, with DefaultAddress
// when TRIDENT_ADDR is unset.
func DefaultConfig() Config {
	c := Config{Address: os.Getenv(EnvAddr), Token: os.Getenv(EnvToken)}
	if c.Address == "" {
		c.Address = DefaultAddress
	}
	return c
}

// Client is a planner API client. It is safe for concurrent use.
type Client struct {
	base    string
	token   string
	http    *http.Client
	retries int
	minWait time.Duration
	maxWait time.Duration
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	addr := strings.TrimSpace(cfg.Address)
	if addr == "" {
		return nil, errors.New("planner client: an address is required")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("planner client: address %q is not an http(s) URL", cfg.Address)
	}
	c := &Client{base: strings.TrimRight(addr, "/"), token: cfg.Token, http: cfg.HTTPClient,
		retries: cfg.Retries, minWait: cfg.MinBackoff, maxWait: cfg.MaxBackoff}
	if c.http == nil {
		c.http = &http.Client{Timeout: 30 * time.Second}
	}
	switch {
	case c.retries == 0:
		c.retries = 5
	case c.retries < 0:
		c.retries = 0
	}
	if c.minWait <= 0 {
		c.minWait = 100 * time.Millisecond
	}
	if c.maxWait < c.minWait {
		c.maxWait = max(2*time.Second, c.minWait)
	}
	return c, nil
}

// Address returns the base URL the client talks to.
func (c *Client) Address() string { return c.base }

// StatusError is an answer of the planner other than 2xx.
type StatusError struct {
	// Method and URL of the request.
	Method, URL string
	// Code is the HTTP status.
	Code int
	// Message is the server's error text (the body when it is not an ErrorResponse).
	Message string
	// LeaderHTTP is the leader's HTTP address when the server named it (503 on a follower
	// that cannot forward).
	LeaderHTTP string
}

// Error implements error.
func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.Method, e.URL, e.Code, e.Message)
}

// IsNotFound reports whether err is the planner's 404 (unknown pipeline, no decision yet).
func IsNotFound(err error) bool { return hasCode(err, http.StatusNotFound) }

// IsConflict reports whether err is the planner's 409 (e.g. a decision still being applied).
func IsConflict(err error) bool { return hasCode(err, http.StatusConflict) }

// IsNotImplemented reports whether err is the planner's 501 (e.g. trials on an actuator
// that cannot run them).
func IsNotImplemented(err error) bool { return hasCode(err, http.StatusNotImplemented) }

func hasCode(err error, code int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == code
}

// transient reports whether a status means "retry later": the cluster is between leaders
// or the forwarding hop failed.
func transient(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// Do sends one request to path (e.g. "/v1/plan/pdf") with in encoded as JSON (nil: no
// body; a json.RawMessage or []byte is sent as is) and decodes a 2xx answer into out
// (nil: discarded). Transient failures are retried as the package documents.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, method, path, in, out, c.retries)
}

// do is Do with its own retry budget.
func (c *Client) do(ctx context.Context, method, path string, in, out any, retries int) error {
	var body []byte
	switch v := in.(type) {
	case nil:
	case json.RawMessage:
		body = v
	case []byte:
		body = v
	default:
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("planner client: encode %s %s: %w", method, path, err)
		}
		body = b
	}
	u := c.base + path
	wait := c.minWait
	for attempt := 0; ; attempt++ {
		resp, err := c.once(ctx, method, u, body)
		if err == nil {
			return decode(resp, out, method, u)
		}
		if attempt > 0 && method == http.MethodDelete && IsNotFound(err) {
			return nil // an earlier attempt deleted it; its answer was lost
		}
		if ctx.Err() != nil || attempt >= retries || !retryable(err) {
			return err
		}
		d := wait + time.Duration(rand.Int64N(int64(wait)/2+1))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up retrying: %v)", err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, c.maxWait)
	}
}

// netError marks a failure to get any answer from the server.
type netError struct{ err error }

func (e *netError) Error() string { return e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

func retryable(err error) bool {
	var ne *netError
	if errors.As(err, &ne) {
		return true
	}
	var se *StatusError
	return errors.As(err, &se) && transient(se.Code)
}

// once does one attempt; a non-2xx answer is a *StatusError, no answer a *netError.
func (c *Client) once(ctx context.Context, method, u string, body []byte) ([]byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, fmt.Errorf("planner client: %s %s: %w", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set(HeaderToken, c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("planner client: %s %s: %w", method, u, err)
		}
		return nil, &netError{fmt.Errorf("planner client: %s %s: %w", method, u, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, &netError{fmt.Errorf("planner client: %s %s: read answer: %w", method, u, err)}
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Method: method, URL: u, Code: resp.StatusCode, Message: strings.TrimSpace(string(b))}
		var eb ErrorResponse
		if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
			se.Message, se.LeaderHTTP = eb.Error, eb.Leader
		}
		return nil, se
	}
	return b, nil
}

func decode(b []byte, out any, method, u string) error {
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("planner client: decode the answer of %s %s: %w", method, u, err)
	}
	return nil
}

func jobPath(job string) string { return "/v1/pipelines/" + url.PathEscape(job) }

// Status returns GET /v1/status of the server the client talks to (no token needed).
func (c *Client) Status(ctx context.Context) (StatusResponse, error) {
	var out StatusResponse
	return out, c.Do(ctx, http.MethodGet, "/v1/status", nil, &out)
}

// State returns the whole replicated state (GET /v1/state), for debugging and tests.
func (c *Client) State(ctx context.Context) (*fsm.State, error) {
	out := fsm.NewState()
	return out, c.Do(ctx, http.MethodGet, "/v1/state", nil, out)
}

// Pipelines lists the registered pipelines, sorted by job.
func (c *Client) Pipelines(ctx context.Context) ([]Pipeline, error) {
	var out []Pipeline
	return out, c.Do(ctx, http.MethodGet, "/v1/pipelines", nil, &out)
}

// Pipeline returns one registered pipeline; IsNotFound(err) when it is not registered.
func (c *Client) Pipeline(ctx context.Context, job string) (Pipeline, error) {
	var out Pipeline
	return out, c.Do(ctx, http.MethodGet, jobPath(job), nil, &out)
}

// RegisterPipeline registers (or re-registers) job. jobJSON is the Nomad job as JSON
// (`nomad job run -output`, optionally wrapped in {"Job": ...}); nil makes the planner
// read the job registered in Nomad under that ID.
func (c *Client) RegisterPipeline(ctx context.Context, job string, jobJSON json.RawMessage) (RegisterResponse, error) {
	var out RegisterResponse
	return out, c.Do(ctx, http.MethodPut, jobPath(job), PipelineRequest{Job: jobJSON}, &out)
}

// DeletePipeline stops planning job (the Nomad job keeps running as it is).
func (c *Client) DeletePipeline(ctx context.Context, job string) (IndexResponse, error) {
	var out IndexResponse
	return out, c.Do(ctx, http.MethodDelete, jobPath(job), nil, &out)
}

// Apply asks the leader to apply job's committed plan now (the trident-target plugin's
// call). IsConflict(err) when a decision is still being applied.
func (c *Client) Apply(ctx context.Context, job string, req ApplyRequest) (ApplyResponse, error) {
	var out ApplyResponse
	return out, c.Do(ctx, http.MethodPost, jobPath(job)+"/apply", req, &out)
}

// Plan returns the committed plan of job; IsNotFound(err) before the first decision.
func (c *Client) Plan(ctx context.Context, job string) (PlanResponse, error) {
	var out PlanResponse
	return out, c.Do(ctx, http.MethodGet, "/v1/plan/"+url.PathEscape(job), nil, &out)
}

// Observe publishes capacity observations (the observation layer's estimates).
func (c *Client) Observe(ctx context.Context, obs []ObservationRequest) (ObservationsResponse, error) {
	var out ObservationsResponse
	return out, c.Do(ctx, http.MethodPost, "/v1/observations", obs, &out)
}

// PutCandidate proposes a configuration for job's operator op.
func (c *Client) PutCandidate(ctx context.Context, job, op string, req CandidateRequest) (IndexResponse, error) {
	var out IndexResponse
	return out, c.Do(ctx, http.MethodPut, "/v1/candidates/"+url.PathEscape(job)+"/"+url.PathEscape(op), req, &out)
}

// DropCandidate withdraws job's pending candidate for op.
func (c *Client) DropCandidate(ctx context.Context, job, op string) (IndexResponse, error) {
	var out IndexResponse
	return out, c.Do(ctx, http.MethodDelete, "/v1/candidates/"+url.PathEscape(job)+"/"+url.PathEscape(op), nil, &out)
}

// PutTrial starts (or replaces) the tuning trial in slot of job's operator op. A planner
// whose actuator cannot run trials, or not in that slot, answers 501 (IsNotImplemented).
func (c *Client) PutTrial(ctx context.Context, job, op string, slot int, req TrialRequest) (IndexResponse, error) {
	var out IndexResponse
	return out, c.Do(ctx, http.MethodPut, trialPath(job, op)+"/"+strconv.Itoa(slot), req, &out)
}

// DropTrial ends the tuning trial in slot of job's operator op (none: no change).
func (c *Client) DropTrial(ctx context.Context, job, op string, slot int) (IndexResponse, error) {
	var out IndexResponse
	return out, c.Do(ctx, http.MethodDelete, trialPath(job, op)+"/"+strconv.Itoa(slot), nil, &out)
}

// DropTrials ends every tuning trial of job's operator op (none: no change).
func (c *Client) DropTrials(ctx context.Context, job, op string) (IndexResponse, error) {
	var out IndexResponse
	return out, c.Do(ctx, http.MethodDelete, trialPath(job, op), nil, &out)
}

func trialPath(job, op string) string {
	return "/v1/trials/" + url.PathEscape(job) + "/" + url.PathEscape(op)
}

// Decisions lists committed decisions with an index above since (job "" : every job).
func (c *Client) Decisions(ctx context.Context, job string, since uint64) ([]fsm.Decision, error) {
	q := url.Values{}
	if job != "" {
		q.Set("job", job)
	}
	if since > 0 {
		q.Set("since", strconv.FormatUint(since, 10))
	}
	p := "/v1/decisions"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var out []fsm.Decision
	return out, c.Do(ctx, http.MethodGet, p, nil, &out)
}

// Inventory returns the committed node inventory, sorted by name.
func (c *Client) Inventory(ctx context.Context) ([]fsm.Node, error) {
	var out []fsm.Node
	return out, c.Do(ctx, http.MethodGet, "/v1/inventory", nil, &out)
}

// SetInventory replaces the inventory (planners without a Nomad actuator).
func (c *Client) SetInventory(ctx context.Context, nodes []fsm.Node) (IndexResponse, error) {
	var out IndexResponse
	return out, c.Do(ctx, http.MethodPut, "/v1/inventory", nodes, &out)
}

// TransferLeadership moves raft leadership to server id ("": raft's choice). It is not
// retried: a transfer that happened but whose answer was lost would move leadership twice.
func (c *Client) TransferLeadership(ctx context.Context, id string) (TransferResponse, error) {
	var out TransferResponse
	return out, c.do(ctx, http.MethodPost, "/v1/leadership/transfer", TransferRequest{ID: id}, &out, 0)
}

// Snapshot asks the server to take a raft snapshot now.
func (c *Client) Snapshot(ctx context.Context) (SnapshotResponse, error) {
	var out SnapshotResponse
	return out, c.Do(ctx, http.MethodPost, "/v1/snapshot", nil, &out)
}
