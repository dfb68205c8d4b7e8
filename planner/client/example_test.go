package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/trident-sched/trident/planner/client"
)

// Read the committed plan of a pipeline, as the trident strategy plugin does.
func ExampleClient_Plan() {
	// A stand-in planner for the example; point Address at a real one (TRIDENT_ADDR).
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(client.PlanResponse{Job: "pdf", DecisionIndex: 12, Status: "done",
			Groups: map[string]client.PlanGroup{"ocr": {Count: 4, Config: "batch=16"}}})
	}))
	defer srv.Close()

	c, err := client.New(client.Config{Address: srv.URL, Token: "my-token"})
	if err != nil {
		panic(err)
	}
	plan, err := c.Plan(context.Background(), "pdf")
	if client.IsNotFound(err) {
		fmt.Println("no decision yet")
		return
	}
	if err != nil {
		panic(err)
	}
	g := plan.Groups["ocr"]
	fmt.Printf("decision #%d (%s): ocr runs %d instances with %s\n", plan.DecisionIndex, plan.Status, g.Count, g.Config)
	// Output: decision #12 (done): ocr runs 4 instances with batch=16
}
