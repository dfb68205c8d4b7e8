package plugin

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/sdk"

	"github.com/trident-sched/trident/planner/client"
)

// fakePlanner answers POST /v1/pipelines/<job>/apply with the queued statuses in turn
// (the last one repeats) and records the requests.
type fakePlanner struct {
	mu       sync.Mutex
	statuses []int
	reqs     []client.ApplyRequest
	tokens   []string
	paths    []string
}

func (f *fakePlanner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var req client.ApplyRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.reqs = append(f.reqs, req)
	f.tokens = append(f.tokens, r.Header.Get(client.HeaderToken))
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	code := f.statuses[0]
	if len(f.statuses) > 1 {
		f.statuses = f.statuses[1:]
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if code/100 == 2 {
		_ = json.NewEncoder(w).Encode(client.ApplyResponse{Job: "pdf", DecisionIndex: 7, Status: "done"})
		return
	}
	_ = json.NewEncoder(w).Encode(client.ErrorResponse{Error: http.StatusText(code)})
}

func scale(t *testing.T, statuses ...int) (*fakePlanner, error) {
	t.Helper()
	fp := &fakePlanner{statuses: statuses}
	srv := httptest.NewServer(fp)
	t.Cleanup(srv.Close)
	p := New(hclog.NewNullLogger())
	p.agent = map[string]string{ConfigPlannerAddr: srv.URL, ConfigToken: "s3cret"}
	err := p.Scale(sdk.ScalingAction{Count: 3, Reason: "trident plan #7", Meta: map[string]interface{}{"trident_decision_index": 7}},
		map[string]string{ConfigJob: "pdf", ConfigGroup: "embed"})
	return fp, err
}

// TestScaleThroughPlanner: with a planner configured, Scale posts the action to the
// planner's apply route (typed body, token header) instead of touching Nomad.
func TestScaleThroughPlanner(t *testing.T) {
	fp, err := scale(t, http.StatusAccepted)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp.reqs) != 1 || fp.paths[0] != "POST /v1/pipelines/pdf/apply" || fp.tokens[0] != "s3cret" {
		t.Fatalf("requests %v with tokens %v", fp.paths, fp.tokens)
	}
	r := fp.reqs[0]
	if r.Group != "embed" || r.Count != 3 || r.Reason != "trident plan #7" || r.Meta["trident_decision_index"] != float64(7) {
		t.Fatalf("apply request %+v", r)
	}
}

// TestScaleRetriesLeaderChange: a 503 (the planner cluster between leaders) is retried
// and the action lands.
func TestScaleRetriesLeaderChange(t *testing.T) {
	fp, err := scale(t, http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusAccepted)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp.reqs) != 3 {
		t.Fatalf("%d requests, want 2 refused then 1 accepted", len(fp.reqs))
	}
}

// TestScaleBusyIsNoOp: a 409 (a decision still being applied) is the autoscaler's no-op
// error, not a failure; other errors are failures and are not retried.
func TestScaleBusyIsNoOp(t *testing.T) {
	fp, err := scale(t, http.StatusConflict)
	var noop *sdk.TargetScalingNoOpError
	if !errors.As(err, &noop) || len(fp.reqs) != 1 {
		t.Fatalf("409: err %v after %d requests, want a no-op error after 1", err, len(fp.reqs))
	}
	fp, err = scale(t, http.StatusUnprocessableEntity)
	if err == nil || errors.As(err, &noop) || !strings.Contains(err.Error(), "HTTP 422") || len(fp.reqs) != 1 {
		t.Fatalf("422: err %v after %d requests, want a plain error after 1", err, len(fp.reqs))
	}
}

// TestScaleNeedsJobAndGroup: the policy's Job and Group are required, by name.
func TestScaleNeedsJobAndGroup(t *testing.T) {
	p := New(hclog.NewNullLogger())
	err := p.Scale(sdk.ScalingAction{Count: 1}, map[string]string{ConfigGroup: "embed"})
	if err == nil || !strings.Contains(err.Error(), `"Job" missing`) {
		t.Fatalf("no job: %v", err)
	}
	err = p.Scale(sdk.ScalingAction{Count: 1}, map[string]string{ConfigJob: "pdf"})
	if err == nil || !strings.Contains(err.Error(), `"Group" missing`) {
		t.Fatalf("no group: %v", err)
	}
}
