package plugin

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/sdk"
)

func eval(query string, cfg map[string]string, values ...float64) *sdk.ScalingCheckEvaluation {
	e := &sdk.ScalingCheckEvaluation{
		Check:  &sdk.ScalingPolicyCheck{Name: "c", Query: query, Strategy: &sdk.ScalingPolicyStrategy{Name: Name, Config: cfg}},
		Action: &sdk.ScalingAction{},
	}
	for _, v := range values {
		e.Metrics = append(e.Metrics, sdk.TimestampedMetric{Timestamp: time.Now(), Value: v})
	}
	return e
}

func TestPlannerTarget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/plan/pdf" || r.Header.Get("X-Trident-Token") != "s3cret" {
			http.Error(w, "bad request "+r.URL.Path, http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, `{"decision_index":42,"groups":{"layout":{"count":5,"reason":"MILP T=812 rec/s"}}}`)
	}))
	defer srv.Close()
	p := New(hclog.NewNullLogger())
	out, err := p.Run(eval("capacity/pdf/layout", map[string]string{"planner": srv.URL, "token": "s3cret"}, 1), 2)
	if err != nil || out == nil {
		t.Fatalf("Run = %v, %v", out, err)
	}
	if out.Action.Count != 5 || out.Action.Direction != sdk.ScaleDirectionUp {
		t.Errorf("action = %+v, want count 5 up", out.Action)
	}
	if out.Action.Meta[MetaDecisionIndex] != uint64(42) || !strings.Contains(out.Action.Reason, "#42") {
		t.Errorf("meta/reason = %v %q, want decision 42", out.Action.Meta, out.Action.Reason)
	}
	// Unknown group: degrade to no change, never nil.
	out, err = p.Run(eval("capacity/pdf/ocr", map[string]string{"planner": srv.URL, "token": "s3cret"}, 1), 2)
	if err != nil || out == nil || out.Action.Direction != sdk.ScaleDirectionNone || !strings.Contains(out.Action.Reason, "no group") {
		t.Errorf("unknown group: %+v %v", out, err)
	}
}

func TestPlannerUnreachableKeepsCount(t *testing.T) {
	p := New(hclog.NewNullLogger())
	out, err := p.Run(eval("capacity/pdf/layout", map[string]string{"planner": "http://127.0.0.1:1"}), 3)
	if err != nil || out == nil {
		t.Fatalf("Run = %v, %v; want a non-nil eval", out, err)
	}
	if out.Action.Direction != sdk.ScaleDirectionNone || !strings.Contains(out.Action.Reason, "planner unavailable") {
		t.Errorf("action = %+v", out.Action)
	}
}

func TestLocalBacklog(t *testing.T) {
	p := New(hclog.NewNullLogger())
	cases := []struct {
		backlog float64
		cur     int64
		want    int64
		dir     sdk.ScaleDirection
	}{
		{250, 1, 3, sdk.ScaleDirectionUp},   // ceil(250/100)
		{100, 4, 1, sdk.ScaleDirectionDown}, // ceil(100/100)
		{0, 2, 1, sdk.ScaleDirectionDown},   // never below one instance
		{300, 3, 0, sdk.ScaleDirectionNone},
	}
	for _, c := range cases {
		out, _ := p.Run(eval("backlog/j/g", nil, 10, c.backlog), c.cur)
		if out.Action.Direction != c.dir || (c.dir != sdk.ScaleDirectionNone && out.Action.Count != c.want) {
			t.Errorf("backlog %v cur %d: action %+v, want %d %v", c.backlog, c.cur, out.Action, c.want, c.dir)
		}
	}
	out, _ := p.Run(eval("backlog/j/g", map[string]string{"target_backlog": "-1"}, 5), 1)
	if out.Action.Direction != sdk.ScaleDirectionNone || !strings.Contains(out.Action.Reason, "target_backlog") {
		t.Errorf("bad target_backlog: %+v", out.Action)
	}
	if err := p.SetConfig(map[string]string{"target_backlog": "abc"}); err == nil {
		t.Error("SetConfig accepted target_backlog=abc")
	}
}
