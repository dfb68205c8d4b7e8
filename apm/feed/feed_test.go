package feed

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/trident-sched/trident/planner/client"
)

// TestFeederPublishes drives rounds against a fake planner: the first rounds publish
// nothing (no estimate yet), later rounds publish the operator's capacity with its epoch,
// and a planner that rejects the batch surfaces as an error.
func TestFeederPublishes(t *testing.T) {
	var mu sync.Mutex
	var got []client.ObservationRequest
	reject := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/pipelines":
			fmt.Fprint(w, `[{"job":"pdf","operators":[{"name":"ocr","gpus":1,"features":["tokens"],"config":"a=1"}]}]`)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/observations":
			if reject {
				http.Error(w, `{"error":"capacity=NaN"}`, http.StatusUnprocessableEntity)
				return
			}
			var obs []client.ObservationRequest
			if err := json.NewDecoder(r.Body).Decode(&obs); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			mu.Lock()
			got = append(got, obs...)
			mu.Unlock()
			fmt.Fprint(w, `{"indexes":[1]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	est := NewEstimator(nil)
	snaps := steady(30, 8, 2, rand.New(rand.NewPCG(5, 6)))
	i := 0
	var prev *Snapshot
	f, err := New(est, Options{Planner: srv.URL, Refresh: func(ctx context.Context, job, op string, d Declaration) error {
		if err := est.Declare(job, op, d); err != nil {
			return err
		}
		cur := snaps[i]
		i++
		if prev != nil {
			est.Observe(job, op, *prev, cur)
		}
		prev = &cur
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := f.Round(ctx); err != nil || f.Published() != 0 {
		t.Fatalf("first round: err=%v published=%d, want nothing to publish", err, f.Published())
	}
	for range 20 {
		if err := f.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	last := got[len(got)-1]
	mu.Unlock()
	if f.Published() < 15 || last.Job != "pdf" || last.Operator != "ocr" || last.Epoch != 2 {
		t.Fatalf("published %d, last %+v", f.Published(), last)
	}
	if last.Capacity < 7.6 || last.Capacity > 8.4 { // 8 rec/s with 2% noise: ±5%
		t.Errorf("published capacity %.3f, want 8 ± 5%%", last.Capacity)
	}
	if last.Backlog != 100 { // the one instance reports a queue of 100
		t.Errorf("published backlog %v, want 100", last.Backlog)
	}
	reject = true
	if err := f.Round(ctx); err == nil {
		t.Error("a rejected batch must be an error")
	}
}
