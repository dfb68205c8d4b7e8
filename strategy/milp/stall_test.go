package milp_test

import (
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/milp"
)

// The stall stop of the search's sub-MIPs: HiGHS on het/12/s38's full model from its moved
// plan stops, with a stall of 1 ns, at the first check after its incumbent beats the
// moved plan, with a plan above it and not above the optimum; without the stop it runs to
// the proven optimum.
func TestStallStopsAfterAGain(t *testing.T) {
	p, moved := movedStart(t, 12, 38)
	opts := milp.Options{RelGap: 1e-6}
	full, stopped, err := milp.MIPFrom(p, moved, opts, time.Minute, 0)
	if err != nil || full == nil {
		t.Fatalf("full MIP: plan %v, %v", full != nil, err)
	}
	if stopped {
		t.Fatalf("full MIP interrupted within a minute (objective %.6g)", full.Objective)
	}
	got, stopped, err := milp.MIPFrom(p, moved, opts, time.Minute, time.Nanosecond)
	if err != nil || got == nil {
		t.Fatalf("stalled MIP: plan %v, %v", got != nil, err)
	}
	t.Logf("moved %.6g, stopped at %.6g, optimum %.6g", moved.Objective, got.Objective, full.Objective)
	if !stopped {
		t.Errorf("not stopped by the stall (objective %.6g, optimum %.6g)", got.Objective, full.Objective)
	}
	if got.Objective <= moved.Objective*(1+1e-6) {
		t.Errorf("stopped at %.6g, not above the moved plan's %.6g", got.Objective, moved.Objective)
	}
	if got.Objective > full.Objective*(1+1e-6) {
		t.Errorf("stopped at %.6g, above the optimum %.6g", got.Objective, full.Objective)
	}
}
