package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// TestAnswersCompactUnlessPretty reads a pipeline with and without ?pretty: the plain
// answer is one line of JSON (what the feed decodes every round), the pretty one is
// indented, and both carry the same value.
func TestAnswersCompactUnlessPretty(t *testing.T) {
	c, s := singleServerWithPDF(t)
	get := func(path string) []byte {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set(client.HeaderToken, c.token)
		s.Handler().ServeHTTP(w, req)
		if w.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
	plain, pretty := get("/v1/pipelines/pdf"), get("/v1/pipelines/pdf?pretty")
	if n := bytes.Count(plain, []byte("\n")); n != 1 {
		t.Errorf("plain answer has %d lines, want 1: %s", n, plain)
	}
	if !bytes.Contains(pretty, []byte("\n  \"")) {
		t.Errorf("pretty answer is not indented: %s", pretty)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, pretty); err != nil {
		t.Fatal(err)
	}
	if got := compact.String(); got != string(bytes.TrimSpace(plain)) {
		t.Errorf("pretty answer differs from the plain one:\n%s\n%s", got, plain)
	}
}

// singleServerWithPDF starts a one-server planner cluster and registers the test pipeline
// as job "pdf" on it.
func singleServerWithPDF(tb testing.TB) (*testCluster, *Server) {
	tb.Helper()
	c := newTestCluster(tb, 1, nil)
	c.leader(10 * time.Second)
	s := c.servers[0]
	p := testPipeline()
	p.Job = "pdf"
	if _, err := s.Propose(context.Background(), fsm.Command{Op: fsm.OpRegisterPipeline, Pipeline: &p}); err != nil {
		tb.Fatal(err)
	}
	return c, s
}
