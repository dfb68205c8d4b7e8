package planner

import (
	"testing"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
)

// TestSettledInputToleratesDrift checks when an input counts as the settled one: the
// same shape (nodes, deployment, candidates, operators) with capacity estimates and
// selectivities within settleTolerance (2 %) of it; the backlog counts only with catch-up,
// the only place the schedulers read it, and a candidate's capacity counts exactly. A 1 %
// drift stays settled, 3 % does not, and a changed node is a new shape.
func TestSettledInputToleratesDrift(t *testing.T) {
	base := func() sched.PlanInput {
		ops := []sched.OperatorInput{
			{Operator: fsm.Operator{Name: "parse", Amplification: 1}, Capacity: 10, Backlog: 100},
			{Operator: fsm.Operator{Name: "ocr", Amplification: 4}, Capacity: 2,
				Candidate: &fsm.Candidate{Config: "batch=8", Capacity: 3}},
		}
		return sched.PlanInput{Job: "pdf", Operators: ops, Nodes: []fsm.Node{{Name: "n1", CPU: 8, MemoryMB: 16384}}}
	}
	same := func(a, b sched.PlanInput) bool {
		return inputDigest(inputShape(a)) == inputDigest(inputShape(b)) && nearFigures(a, b)
	}
	a := base()
	cases := []struct {
		name   string
		change func(*sched.PlanInput)
		want   bool
	}{
		{"capacity +1 %", func(in *sched.PlanInput) { in.Operators[0].Capacity *= 1.01 }, true},
		{"capacity +3 %", func(in *sched.PlanInput) { in.Operators[0].Capacity *= 1.03 }, false},
		{"selectivity -1.5 %", func(in *sched.PlanInput) { in.Operators[1].Amplification *= 0.985 }, true},
		{"selectivity -3 %", func(in *sched.PlanInput) { in.Operators[1].Amplification *= 0.97 }, false},
		{"candidate capacity +1 %", func(in *sched.PlanInput) { in.Operators[1].Candidate.Capacity *= 1.01 }, false},
		{"candidate config", func(in *sched.PlanInput) { in.Operators[1].Candidate.Config = "batch=16" }, false},
		{"backlog x3 without catch-up", func(in *sched.PlanInput) { in.Operators[0].Backlog *= 3 }, true},
		{"node memory", func(in *sched.PlanInput) { in.Nodes[0].MemoryMB = 8192 }, false},
	}
	for _, c := range cases {
		b := base()
		c.change(&b)
		if got := same(a, b); got != c.want {
			t.Errorf("%s: settled %v, want %v", c.name, got, c.want)
		}
	}
	// with catch-up the backlog is an input of the plan
	a.CatchUpSec = 60
	b := base()
	b.CatchUpSec = 60
	b.Operators[0].Backlog *= 3
	if same(a, b) {
		t.Error("backlog x3 with catch-up: settled, want a new solve")
	}
	if a.Operators[0].Capacity != 10 || a.Operators[0].Amplification != 1 || a.Operators[0].Backlog != 100 {
		t.Error("inputShape changed the input it was given")
	}
}
