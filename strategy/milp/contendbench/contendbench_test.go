package contendbench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/milp"
)

// TestFlat: two network instances of weight 0.75 on one node demand 1.5 of its network,
// so both run at 2/3 of their capacity; apart, at full capacity.
func TestFlat(t *testing.T) {
	p := &milp.Problem{
		Operators: []milp.Operator{
			{Name: "a", CPU: 1, Capacity: 10, Amplification: 1, Contention: []milp.Contention{{Kind: "network", Weight: 0.75}}},
			{Name: "b", CPU: 1, Capacity: 10, Amplification: 1, Contention: []milp.Contention{{Kind: "network", Weight: 0.75}}},
		},
		Nodes: []milp.Node{{Name: "x", CPU: 4}, {Name: "y", CPU: 4}},
	}
	together := milp.Deployment{{{Current: 1}, {}}, {{Current: 1}, {}}}
	apart := milp.Deployment{{{Current: 1}, {}}, {{}, {Current: 1}}}
	if got := Flat(p, together); math.Abs(got-10/1.5) > 1e-9 {
		t.Errorf("together: %.9g, want %.9g (+-1e-9)", got, 10/1.5)
	}
	if got := Flat(p, apart); math.Abs(got-10) > 1e-9 {
		t.Errorf("apart: %.9g, want 10 (+-1e-9)", got)
	}
}

// TestGenerate: every instance is valid, declares both kinds, and keeps weights in (0, 1].
func TestGenerate(t *testing.T) {
	for seed := range uint64(5) {
		p, err := Generate(Spec{Nodes: 4, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, o := range p.Operators {
			for _, c := range o.Contention {
				kinds[c.Kind]++
			}
		}
		if kinds["network"] != 2 || kinds["io"] != 2 {
			t.Errorf("seed %d: kinds %v, want 2 network and 2 io operators", seed, kinds)
		}
	}
	if _, err := Generate(Spec{Nodes: 0}); err == nil {
		t.Error("0 nodes accepted")
	}
}

// TestRunSmall: under the shared model the with-term plan, proven within the gap of the
// model whose constraint that model is, is never below the blind plan by more than the
// gap (1 %).
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("solves 4 MILPs")
	}
	var out strings.Builder
	cfg := Config{Sizes: []int{4}, Seeds: 2, TimeLimit: 3 * time.Second, RelGap: 0.01}
	res, err := Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Figures["4_shared_worst_ratio"].(float64); r < 1-cfg.RelGap-1e-4 {
		t.Errorf("worst with/blind under the shared model %.4g, want >= %.4g\n%s", r, 1-cfg.RelGap-1e-4, out.String())
	}
	if !strings.Contains(out.String(), "median with/blind") {
		t.Errorf("table missing:\n%s", out.String())
	}
}
