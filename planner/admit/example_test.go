package admit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/trident-sched/trident/planner/admit"
)

// A cluster of 10 GPUs runs a service and three batch pipelines are waiting. The service is
// admitted first; SJF admits the shortest batch pipeline that fits (embed, 2,000 s), queues
// the 5-GPU transcode that no longer fits, and backfills the 1-GPU ocr behind it.
func Example() {
	gpus := map[string]int{"chat": 4, "transcode": 5, "embed": 4, "ocr": 1}
	fits := func(_ context.Context, admitted []string) (bool, error) {
		n := 0
		for _, p := range admitted {
			n += gpus[p]
		}
		return n <= 10, nil
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ps := []admit.Pipeline{
		{Name: "chat", Weight: 2, Since: now.Add(-time.Hour)},
		{Name: "transcode", Batch: true, Remaining: 3e6, Throughput: 1000, Since: now.Add(-10 * time.Minute)},
		{Name: "embed", Batch: true, Remaining: 2e5, Throughput: 100, Since: now.Add(-5 * time.Minute)},
		{Name: "ocr", Batch: true, Remaining: 9e6, Throughput: 1000, Since: now.Add(-time.Minute)},
	}
	r, err := admit.Admit(context.Background(), ps, now, admit.Policy{}, fits)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("order:   ", r.Order)
	fmt.Println("admitted:", r.Admitted)
	for _, q := range r.Queued {
		fmt.Printf("queued:   %d. %s: %s\n", r.Position[q], q, r.Reason[q])
	}
	// Output:
	// order:    [chat embed transcode ocr]
	// admitted: [chat embed ocr]
	// queued:   1. transcode: minimums do not fit beside the 2 admitted pipelines; due after 3000.0s of waiting
}

// Simulate runs the same policy over a stream of jobs; Rates is the resource model (here
// one unit, a job runs alone at 1 record/s).
func ExampleSimulate() {
	rates := func(_ context.Context, admitted []admit.SimJob) (map[string]float64, bool, error) {
		if len(admitted) > 1 {
			return nil, false, nil
		}
		return map[string]float64{admitted[0].Name: 1}, true, nil
	}
	jobs := []admit.SimJob{
		{Name: "a", Arrival: 0, Records: 10},
		{Name: "b", Arrival: 1, Records: 30},
		{Name: "c", Arrival: 2, Records: 5},
	}
	for _, pol := range []admit.Policy{{Order: admit.SJF}, {Order: admit.FIFO}} {
		r, err := admit.Simulate(context.Background(), admit.SimConfig{Jobs: jobs, Policy: pol, Rates: rates})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: mean completion %.2f s, p95 %.0f s, makespan %.0f s\n", pol.Order, r.MeanCompletion, r.P95Completion, r.Makespan)
	}
	// Output:
	// sjf: mean completion 22.33 s, p95 44 s, makespan 45 s
	// fifo: mean completion 30.67 s, p95 43 s, makespan 45 s
}
