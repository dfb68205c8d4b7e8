package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/client"
)

// writeRoutes are the API's write routes the fuzzer addresses by index. POST
// /v1/leadership/transfer is left out: its body is one server ID (covered by
// TestStrictBodies-style checks), and with it the fuzz worker stalled after some seconds,
// while the same inputs replayed one by one answer in under a millisecond.
var writeRoutes = []struct{ method, path string }{
	{http.MethodPut, "/v1/pipelines/pdf"},
	{http.MethodPut, "/v1/pipelines/other"},
	{http.MethodDelete, "/v1/pipelines/other"},
	{http.MethodPost, "/v1/pipelines/pdf/apply"},
	{http.MethodPost, "/v1/observations"},
	{http.MethodPut, "/v1/candidates/pdf/embed"},
	{http.MethodDelete, "/v1/candidates/pdf/embed"},
	{http.MethodPut, "/v1/inventory"},
}

// FuzzWriteRoutes sends arbitrary bodies to every write route of a real single-server
// planner (raft included; no rescheduling loop, so that nothing but the request changes
// the state; PUT /v1/pipelines then answers 501, the parser has its own fuzzer in
// planner/nomadact) with a registered pipeline, and checks the API's promise: every answer is JSON with a known
// status, and a refused request (any non-2xx) leaves the replicated state and the raft log
// exactly as they were. `make test` runs it for a bounded time (make fuzz); plain `go test`
// runs the seed corpus.
func FuzzWriteRoutes(f *testing.F) {
	pipe, _ := json.Marshal(testPipeline())
	seeds := map[int][]string{
		0: {`{"job":` + string(pipe) + `}`, `{"job":` + string(pipe) + `} x`, ``},
		1: {`{"job":{"operators":[{"name":"a@n.g0","order":0,"cpu":1,"memory_mb":1,"amplification":1}]}}`},
		3: {`{"group":"parse","count":2,"reason":"r","meta":{"trident_decision_index":1e300}}`},
		4: {`{"job":"pdf","operator":"parse","capacity":2}`, `[{"job":"pdf","operator":"parse","capacity":-1}]`, `{"capacity":1e999}`},
		5: {`{"config":"batch=16","capacity":3,"cold_start_s":1}`, `{"config":""}`},
		7: {`[{"name":"cpu1","cpu":4,"memory_mb":8192}]`, `[{"name":"","cpu":1}]`},
	}
	for r, bodies := range seeds {
		for _, b := range bodies {
			f.Add(uint8(r), []byte(b))
		}
	}
	c, s := singleServerWithPDF(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		rt := writeRoutes[int(route)%len(writeRoutes)]
		before, last := stateOf(s), s.Raft().LastIndex()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, rt.method, rt.path, bytes.NewReader(body))
		req.Header.Set(client.HeaderToken, c.token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK, http.StatusAccepted:
			return
		case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge, http.StatusLengthRequired,
			http.StatusUnprocessableEntity, http.StatusNotImplemented:
		default:
			t.Fatalf("%s %s %q: unexpected HTTP %d %s", rt.method, rt.path, body, w.Code, w.Body)
		}
		var eb client.ErrorResponse
		if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error == "" {
			t.Fatalf("%s %s: error answer is not an ErrorResponse: %s", rt.method, rt.path, w.Body)
		}
		if after := stateOf(s); after != before || s.Raft().LastIndex() != last {
			t.Fatalf("%s %s %q: refused with HTTP %d (%s) yet the state or the log changed", rt.method, rt.path, body, w.Code, eb.Error)
		}
	})
}
