package hetgen_test

import (
	"context"
	"math"
	"testing"

	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/hetgen"
)

// Every size yields valid, deterministic instances that cover what the generator promises
// across seeds: zero-egress and unlimited nodes, several device classes on one node,
// running rounds with pinned instances, a shrunk node, min/max instances, a batch cap and
// amplifications within 0.05-40.
func TestGenerateCoversTheMix(t *testing.T) {
	seen := map[string]bool{}
	for _, size := range []int{8, 16, 32} {
		for seed := uint64(1); seed <= 12; seed++ {
			s := hetgen.Spec{Nodes: size, Seed: seed}
			in, err := hetgen.Generate(s)
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			again, _ := hetgen.Generate(s)
			if again.Describe() != in.Describe() || again.Problem.Operators[0].Capacity != in.Problem.Operators[0].Capacity {
				t.Fatalf("%s: not deterministic", s)
			}
			p := in.Problem
			if len(p.Nodes) != size || len(p.Operators) < 4 || len(p.Operators) > 17 {
				t.Fatalf("%s: %d nodes, %d operators", s, len(p.Nodes), len(p.Operators))
			}
			if p.Params.NetWeight <= 0 || p.Params.MigrationWeight <= 0 {
				t.Fatalf("%s: tie-breaker weights not explicit: %+v", s, p.Params)
			}
			for _, nd := range p.Nodes {
				switch {
				case nd.EgressBps == 0:
					seen["zero egress"] = true
				case math.IsInf(nd.EgressBps, 1):
					seen["unlimited egress"] = true
				case nd.EgressBps <= 125e6:
					seen["slow egress"] = true
				}
				if len(nd.Devices) > 1 {
					seen["two device classes"] = true
				}
				if len(nd.Devices) == 0 {
					seen["cpu-only node"] = true
				}
			}
			for i, o := range p.Operators {
				if o.Amplification < 0.05-1e-12 || o.Amplification > 40+1e-12 {
					t.Fatalf("%s: amplification %v", s, o.Amplification)
				}
				seen["min instances"] = seen["min instances"] || o.MinInstances > 0
				seen["max instances"] = seen["max instances"] || o.MaxInstances > 0
				seen["memory floor"] = seen["memory floor"] || o.GPUMemMB > 0
				seen["model list"] = seen["model list"] || len(o.GPUModels) > 0
				if p.Current != nil {
					for _, pl := range p.Current[i] {
						seen["mid-transition"] = seen["mid-transition"] || pl.Candidate > 0
					}
				}
			}
			seen["running"] = seen["running"] || in.Running
			seen["shrunk node"] = seen["shrunk node"] || in.Shrunk != ""
			seen["batch cap"] = seen["batch cap"] || p.Params.MaxBatch > 0
			seen[in.Regime] = true
			if size == 8 && seed <= 3 { // the instances are solvable end to end
				if _, err := (milp.Greedy{}).Solve(context.Background(), p, milp.Options{}); err != nil {
					t.Fatalf("%s: greedy: %v", s, err)
				}
			}
		}
	}
	for _, want := range []string{"zero egress", "unlimited egress", "slow egress", "two device classes", "cpu-only node",
		"min instances", "max instances", "memory floor", "model list", "mid-transition", "running", "shrunk node",
		"batch cap", "ample", "tight", "mixed"} {
		if !seen[want] {
			t.Errorf("no instance has %s", want)
		}
	}
}
