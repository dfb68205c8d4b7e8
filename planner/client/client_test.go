package client

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func newTest(t *testing.T, h http.HandlerFunc, cfg Config) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg.Address = srv.URL
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRetriesAreBounded: 503 is retried exactly Retries times, then returned as a
// *StatusError carrying the server's message and the leader it named.
func TestRetriesAreBounded(t *testing.T) {
	var n atomic.Int32
	c := newTest(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(ErrorResponse{Error: "leadership lost while committing log", Leader: "http://10.0.0.2:4650"})
	}, Config{Retries: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	_, err := c.Status(context.Background())
	var se *StatusError
	if !errors.As(err, &se) || se.Code != 503 || se.Message != "leadership lost while committing log" || se.LeaderHTTP != "http://10.0.0.2:4650" {
		t.Fatalf("err = %#v", err)
	}
	if got := n.Load(); got != 4 {
		t.Fatalf("%d attempts, want 1 + 3 retries", got)
	}
}

// TestClientErrorsAreNotRetried: a 4xx is the caller's mistake and comes back at once.
func TestClientErrorsAreNotRetried(t *testing.T) {
	var n atomic.Int32
	c := newTest(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(ErrorResponse{Error: `pipeline "x" is not registered`})
	}, Config{MinBackoff: time.Millisecond})
	_, err := c.Plan(context.Background(), "x")
	if !IsNotFound(err) || IsConflict(err) || n.Load() != 1 {
		t.Fatalf("err %v after %d attempts", err, n.Load())
	}
}

// TestRecoversAfterTransientFailures: the request lands once the cluster has a leader; the
// token and the JSON body are sent on every attempt.
func TestRecoversAfterTransientFailures(t *testing.T) {
	var n atomic.Int32
	c := newTest(t, func(w http.ResponseWriter, r *http.Request) {
		var req CandidateRequest
		if r.Header.Get(HeaderToken) != "tok" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Config != "batch=8" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if n.Add(1) < 3 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_ = json.NewEncoder(w).Encode(IndexResponse{Index: 42})
	}, Config{Token: "tok", MinBackoff: time.Millisecond})
	got, err := c.PutCandidate(context.Background(), "pdf", "ocr", CandidateRequest{Config: "batch=8", Capacity: 2})
	if err != nil || got.Index != 42 || n.Load() != 3 {
		t.Fatalf("index %d err %v after %d attempts", got.Index, err, n.Load())
	}
}

// TestUnreachableRetriesWithinContext: a refused connection is retried until the context
// ends; the error says so.
func TestUnreachableRetriesWithinContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := New(Config{Address: addr, Retries: 1000, MinBackoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Pipelines(ctx)
	// The bound is the context's 200 ms plus one backoff and scheduling slack: 2 s
	// leaves room for a loaded CI machine while still failing a client that ignores ctx.
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

// TestNewRefusesBadAddresses: addresses are checked up front, by value.
func TestNewRefusesBadAddresses(t *testing.T) {
	for _, a := range []string{"", "ftp://x:1", "http://"} {
		if _, err := New(Config{Address: a}); err == nil {
			t.Errorf("New(%q) accepted", a)
		}
	}
	c, err := New(Config{Address: "127.0.0.1:4650/"})
	if err != nil || c.Address() != "http://127.0.0.1:4650" {
		t.Fatalf("bare host:port: %v %q", err, c.Address())
	}
}

// TestDefaultConfigReadsEnvironment: TRIDENT_ADDR and TRIDENT_TOKEN, as NOMAD_ADDR does.
func TestDefaultConfigReadsEnvironment(t *testing.T) {
	t.Setenv(EnvAddr, "")
	t.Setenv(EnvToken, "")
	if c := DefaultConfig(); c.Address != DefaultAddress || c.Token != "" {
		t.Fatalf("unset: %+v", c)
	}
	t.Setenv(EnvAddr, "https://planner.example:4650")
	t.Setenv(EnvToken, "abc")
	if c := DefaultConfig(); c.Address != "https://planner.example:4650" || c.Token != "abc" {
		t.Fatalf("set: %+v", c)
	}
}

// TestRetriedDeleteThatCommitted: a delete whose first answer was lost (503) and whose
// retry finds the job gone (404) succeeded; a first-attempt 404 is still an error.
func TestRetriedDeleteThatCommitted(t *testing.T) {
	var n atomic.Int32
	c := newTest(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // committed, then leadership lost
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(ErrorResponse{Error: `pipeline "pdf" is not registered`})
	}, Config{MinBackoff: time.Millisecond})
	if _, err := c.DeletePipeline(context.Background(), "pdf"); err != nil || n.Load() != 2 {
		t.Fatalf("retried delete: %v after %d attempts", err, n.Load())
	}
	if _, err := c.DeletePipeline(context.Background(), "pdf"); !IsNotFound(err) {
		t.Fatalf("first-attempt 404: %v", err)
	}
}

// TestTransferIsNotRetried: a leadership transfer is sent once even on a 503.
func TestTransferIsNotRetried(t *testing.T) {
	var n atomic.Int32
	c := newTest(t, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}, Config{MinBackoff: time.Millisecond})
	if _, err := c.TransferLeadership(context.Background(), ""); err == nil || n.Load() != 1 {
		t.Fatalf("transfer: %v after %d attempts", err, n.Load())
	}
}
