package planner

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// rawDo sends body as is (a nil length makes it chunked, with no Content-Length) and
// returns the status, the body and how long the answer took.
func rawDo(t *testing.T, method, url, token string, body io.Reader, length int64) (int, string, time.Duration) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	req.Header.Set(client.HeaderToken, token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), time.Since(start)
}

// hardened starts one planner with a registered, applied pipeline "pdf" and returns it
// with its API address.
func hardened(t testing.TB) (*testCluster, string) {
	live := testPipeline()
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 1, live: &live, nodes: []fsm.Node{
		{Name: "cpu1", CPU: 4, MemoryMB: 8192}, {Name: "gpu1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000},
	}}
	c := newTestCluster(t, 1, func(int) *LoopConfig {
		return &LoopConfig{Interval: time.Hour, Actuator: fc, SolveTimeout: 10 * time.Second}
	})
	li, _ := c.leader(10 * time.Second)
	addr := c.peers[li].HTTPAddr
	registerApplied(t, c, addr, testPipeline())
	return c, addr
}

// TestRefusedWritesLeaveNoRaftEntry: a write the state refuses is answered 422 before raft,
// so the log does not grow (it used to append one rejected entry per refused request).
func TestRefusedWritesLeaveNoRaftEntry(t *testing.T) {
	c, addr := hardened(t)
	s := c.servers[0]
	last := s.Raft().LastIndex()
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPut, "/v1/candidates/pdf/embed", client.CandidateRequest{Config: "batch=8"}}, // equals the current config
		{http.MethodPost, "/v1/observations", []client.ObservationRequest{{Job: "pdf", Operator: "parse", Capacity: 1}, {Job: "pdf", Operator: "nope", Capacity: 1}}},
		{http.MethodPut, "/v1/inventory", []fsm.Node{{Name: "a", CPU: 1}, {Name: "a", CPU: 2}}},
	} {
		if code, body := c.do(tc.method, addr+tc.path, tc.body); code != http.StatusUnprocessableEntity {
			t.Errorf("%s %s: HTTP %d %s, want 422", tc.method, tc.path, code, body)
		}
	}
	if got := s.Raft().LastIndex(); got != last {
		t.Fatalf("refused writes appended %d raft entries", got-last)
	}
}

// TestUnknownJobsAre404: every route naming a job or operator that is not registered
// answers 404, as documented, and appends nothing.
func TestUnknownJobsAre404(t *testing.T) {
	c, addr := hardened(t)
	last := c.servers[0].Raft().LastIndex()
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{http.MethodDelete, "/v1/pipelines/nope", nil},
		{http.MethodGet, "/v1/pipelines/nope", nil},
		{http.MethodGet, "/v1/plan/nope", nil},
		{http.MethodPost, "/v1/pipelines/nope/apply", client.ApplyRequest{Group: "g", Count: 1}},
		{http.MethodPut, "/v1/candidates/nope/embed", client.CandidateRequest{Config: "batch=16"}},
		{http.MethodPut, "/v1/candidates/pdf/nope", client.CandidateRequest{Config: "batch=16"}},
		{http.MethodDelete, "/v1/candidates/nope/embed", nil},
		{http.MethodDelete, "/v1/candidates/pdf/nope", nil},
	} {
		if code, body := c.do(tc.method, addr+tc.path, tc.body); code != http.StatusNotFound {
			t.Errorf("%s %s: HTTP %d %s, want 404", tc.method, tc.path, code, body)
		}
	}
	if got := c.servers[0].Raft().LastIndex(); got != last {
		t.Fatalf("404s appended %d raft entries", got-last)
	}
}

// TestStrictBodies: unknown fields and data after the JSON value are refused with 400 and
// change nothing (trailing garbage used to re-register the pipeline).
func TestStrictBodies(t *testing.T) {
	c, addr := hardened(t)
	s := c.servers[0]
	before, last := stateOf(s), s.Raft().LastIndex()
	raw, _ := json.Marshal(testPipeline())
	valid := `{"job":` + string(raw) + `}`
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPut, "/v1/pipelines/pdf", valid + `{"job":{}}`},
		{http.MethodPut, "/v1/pipelines/pdf", valid + ` garbage`},
		{http.MethodPut, "/v1/pipelines/pdf", `{"job":` + string(raw) + `,"extra":1}`},
		{http.MethodPost, "/v1/observations", `{"job":"pdf","operator":"parse","capacity":1,"capactiy":2}`},
		{http.MethodPost, "/v1/observations", `[{"job":"pdf","operator":"parse","capacity":1}] []`},
		{http.MethodPut, "/v1/candidates/pdf/embed", `{"config":"batch=16","capacity":1,"cold_start_s":1,"batch":3}`},
		{http.MethodPost, "/v1/pipelines/pdf/apply", `{"group":"parse","count":1}{}`},
		{http.MethodPut, "/v1/inventory", `[{"name":"a","cpu":1,"gpus":0,"memory_mb":1,"speed":9}]`},
		{http.MethodPut, "/v1/inventory", `null`}, // used to wipe the inventory
		{http.MethodPost, "/v1/observations", ` null `},
	} {
		code, body, _ := rawDo(t, tc.method, addr+tc.path, c.token, strings.NewReader(tc.body), int64(len(tc.body)))
		if code != http.StatusBadRequest {
			t.Errorf("%s %s %.60q: HTTP %d %s, want 400", tc.method, tc.path, tc.body, code, body)
		}
	}
	if after := stateOf(s); after != before || s.Raft().LastIndex() != last {
		t.Fatalf("refused bodies changed the state (raft index %d -> %d)", last, s.Raft().LastIndex())
	}
}

// TestBodyLimits: a body above its route's limit is answered 413, at once when its
// Content-Length says so (without reading it); a chunked body is refused with 411 on the
// routes with MiB limits and with 413 as soon as it crosses a small route's limit; the
// server's state and log are unchanged.
func TestBodyLimits(t *testing.T) {
	c, addr := hardened(t)
	s := c.servers[0]
	last := s.Raft().LastIndex()
	// Declared too large: answered before a byte of the body is read. The body reader
	// would block for ever if the server waited for it.
	pr, pw := io.Pipe()
	defer pw.Close()
	code, body, took := rawDo(t, http.MethodPut, addr+"/v1/pipelines/pdf", c.token, pr, MaxPipelineBody+1)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "limit") {
		t.Fatalf("declared oversize pipeline: HTTP %d %s", code, body)
	}
	// 2 s: far above the few ms it takes, far below the old behaviour of reading 64 MiB.
	if took > 2*time.Second {
		t.Fatalf("declared oversize pipeline answered after %v", took)
	}
	// Chunked, no length, on a route with a MiB limit: 411 before reading anything.
	big := bytes.Repeat([]byte(" "), MaxObservationsBody+10)
	code, body, _ = rawDo(t, http.MethodPost, addr+"/v1/observations", c.token, bytes.NewReader(big), -1)
	if code != http.StatusLengthRequired {
		t.Fatalf("chunked observations: HTTP %d %s", code, body)
	}
	small := bytes.Repeat([]byte(" "), MaxSmallBody+1)
	code, _, _ = rawDo(t, http.MethodPut, addr+"/v1/candidates/pdf/embed", c.token, bytes.NewReader(small), int64(len(small)))
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize candidate: HTTP %d", code)
	}
	// Chunked on a small route: read up to the limit, then 413.
	code, _, _ = rawDo(t, http.MethodPut, addr+"/v1/candidates/pdf/embed", c.token, bytes.NewReader(small), -1)
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked oversize candidate: HTTP %d", code)
	}
	if s.Raft().LastIndex() != last {
		t.Fatalf("oversize requests appended raft entries")
	}
	// A body within the limit still works.
	if code, body := c.do(http.MethodPost, addr+"/v1/observations", []client.ObservationRequest{{Job: "pdf", Operator: "parse", Capacity: 1}}); code != 200 {
		t.Fatalf("observation within the limit: HTTP %d %s", code, body)
	}
}
