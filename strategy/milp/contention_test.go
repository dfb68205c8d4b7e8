package milp_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/milp"
)

// coLocated is two network-heavy operators (each instance saturates its node's network at
// full rate: Weight 1), one instance each, both running on node a of two identical nodes.
func coLocated(contend bool) *milp.Problem {
	op := func(name string) milp.Operator {
		o := milp.Operator{Name: name, CPU: 1, MemMB: 1024, Capacity: 10, Amplification: 1, OutputBytes: 100,
			LaunchSec: 5, TerminateSec: 1, MinInstances: 1, MaxInstances: 1}
		if contend {
			o.Contention = []milp.Contention{{Kind: "network", Weight: 1}}
		}
		return o
	}
	nodes := []milp.Node{
		{Name: "a", CPU: 4, MemMB: 8192, EgressBps: math.Inf(1)},
		{Name: "b", CPU: 4, MemMB: 8192, EgressBps: math.Inf(1)},
	}
	return &milp.Problem{
		Operators: []milp.Operator{op("fetch"), op("upload")},
		Nodes:     nodes,
		Current:   milp.Deployment{{{Current: 1}, {}}, {{Current: 1}, {}}},
	}
}

// nodeOf returns the node index of operator i's single instance.
func nodeOf(t *testing.T, s *milp.Solution, i int) int {
	t.Helper()
	at := -1
	for n, pl := range s.PerNode[i] {
		if pl.Total() == 1 && at < 0 {
			at = n
		} else if pl.Total() != 0 {
			t.Fatalf("operator %d: placements %v, want one instance", i, s.PerNode[i])
		}
	}
	return at
}

// Without the term the two operators stay co-located (moving one only costs a restart);
// with it the co-located plan carries half the throughput (both share one network:
// T/10 + T/10 <= 1), and the solver separates them and proves the full rate.
func TestContentionSeparatesNetworkHeavyOperators(t *testing.T) {
	ctx := context.Background()
	opts := milp.Options{TimeLimit: 5 * time.Second}
	plain, err := milp.HiGHS{}.Solve(ctx, coLocated(false), opts)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := nodeOf(t, plain, 0), nodeOf(t, plain, 1); a != b {
		t.Errorf("without contention: operators on nodes %d and %d, want them left co-located", a, b)
	}
	p := coLocated(true)
	s, err := milp.HiGHS{}.Solve(ctx, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := nodeOf(t, s, 0), nodeOf(t, s, 1); a == b {
		t.Errorf("with contention: both operators on node %d, want them separated", a)
	}
	if math.Abs(s.Throughput-10) > 1e-6 {
		t.Errorf("with contention: throughput %.9g, want 10 (+-1e-6)", s.Throughput)
	}
	if s.Status != milp.StatusOptimal || s.Bound < s.Objective-1e-9 {
		t.Errorf("status %s, bound %.9g, objective %.9g: want optimal with bound >= objective", s.Status, s.Bound, s.Objective)
	}
	// the contention-blind greedy's plans are repaired to the contended model
	g, err := milp.Greedy{}.Solve(ctx, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := milp.Validate(p, g); err != nil {
		t.Fatalf("greedy plan rejected: %v", err)
	}
	if err := milp.Validate(p, plain); err == nil || !strings.Contains(err.Error(), "contended resource") {
		t.Errorf("Validate of the co-located full-rate plan under contention: %v, want a contended resource error", err)
	}
	// the co-located placement routed under contention carries half the rate
	r, err := milp.Route(ctx, p, plain.PerNode, opts)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(r.Throughput-5) > 1e-6 {
		t.Errorf("co-located placement routed under contention: %.9g, want 5 (+-1e-6)", r.Throughput)
	}
}

// Pressure already on a node (other pipelines' instances) leaves less of it: node a keeps
// 0.25 of its network, node b 0.5. One instance on each carries at most 2.5 records/s
// (T/10 <= 0.25 on a), both on b as much (2T/10 <= 0.5), both on a 1.25: the optimum is
// 2.5, proven.
func TestContentionPressure(t *testing.T) {
	p := coLocated(true)
	p.Nodes[0].Pressure = map[string]float64{"network": 0.75}
	p.Nodes[1].Pressure = map[string]float64{"network": 0.5}
	s, err := milp.HiGHS{}.Solve(context.Background(), p, milp.Options{TimeLimit: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(s.Throughput-2.5) > 1e-6 {
		t.Errorf("throughput %.9g, want 2.5 (+-1e-6)", s.Throughput)
	}
	if s.Status != milp.StatusOptimal {
		t.Errorf("status %s, want optimal", s.Status)
	}
}

func TestContentionCheck(t *testing.T) {
	for name, c := range map[string][]milp.Contention{
		"empty kind":  {{Kind: "", Weight: 0.5}},
		"zero weight": {{Kind: "io", Weight: 0}},
		"over one":    {{Kind: "io", Weight: 1.5}},
		"NaN":         {{Kind: "io", Weight: math.NaN()}},
		"twice":       {{Kind: "io", Weight: 0.5}, {Kind: "io", Weight: 0.2}},
	} {
		p := coLocated(false)
		p.Operators[1].Contention = c
		if err := p.Check(); err == nil || !strings.Contains(err.Error(), "upload") {
			t.Errorf("%s: Check = %v, want an error naming the operator", name, err)
		}
	}
	p := coLocated(true)
	p.Nodes[0].Pressure = map[string]float64{"network": 1.5}
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "Pressure") {
		t.Errorf("pressure 1.5: Check = %v, want a Pressure error", err)
	}
}
