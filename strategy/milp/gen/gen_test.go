package gen_test

import (
	"context"
	"testing"

	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/gen"
)

// TestPaperSetting checks the shape of the generated instances (paper Sec. 8) and that
// they are neither trivial nor infeasible: a plan with positive throughput exists, and at
// the greedy plan both the accelerator pool and the CPU pool are at least 80% used.
func TestPaperSetting(t *testing.T) {
	for _, pl := range []struct {
		name      string
		ops, gpus int
	}{{"pdf", 17, 3}, {"video", 9, 3}} {
		for _, size := range []int{8, 16, 32, 64} {
			for _, mix := range []string{"uniform", "hetero", "hetero-net"} {
				for _, rs := range []bool{false, true} {
					spec := gen.Spec{Pipeline: pl.name, Nodes: size, Mix: mix, Seed: 7, Reschedule: rs}
					p, err := gen.Generate(spec)
					if err != nil {
						t.Fatalf("%s: %v", spec, err)
					}
					accel := 0
					for _, o := range p.Operators {
						if o.GPUs > 0 {
							accel++
						}
					}
					if len(p.Operators) != pl.ops || accel != pl.gpus || len(p.Nodes) != size {
						t.Fatalf("%s: %d operators (%d on accelerators), %d nodes", spec, len(p.Operators), accel, len(p.Nodes))
					}
					if mix == "uniform" {
						nd := p.Nodes[0]
						if nd.GPUs != 8 || nd.CPU != 256 || nd.MemMB != 1<<20 || nd.EgressBps != 12.5e9 {
							t.Fatalf("%s: node %+v, want 8 accelerators, 256 cores, 1 TiB, 100 Gbit/s", spec, nd)
						}
					}
					if rs && p.Current == nil {
						t.Fatalf("%s: reschedule instance without a current deployment", spec)
					}
					s, err := milp.Greedy{}.Solve(context.Background(), p, milp.Options{})
					if err != nil {
						t.Fatalf("%s: %v", spec, err)
					}
					if s.Throughput <= 0 {
						t.Fatalf("%s: no positive throughput", spec)
					}
					if mix != "uniform" {
						continue
					}
					var cpu, capC, gpu, capG float64
					for n, nd := range p.Nodes {
						capC += nd.CPU
						capG += float64(nd.GPUs)
						for i, o := range p.Operators {
							k := float64(s.PerNode[i][n].Total())
							cpu += k * o.CPU
							gpu += k * float64(o.GPUs)
						}
					}
					if cpu < 0.8*capC || gpu < 0.8*capG {
						t.Errorf("%s: CPU %.0f/%.0f, accelerators %.0f/%.0f used: a pool does not bind", spec, cpu, capC, gpu, capG)
					}
				}
			}
		}
	}
}

func TestGenerateRejectsUnknown(t *testing.T) {
	for _, s := range []gen.Spec{{Pipeline: "audio", Nodes: 8, Mix: "uniform"}, {Pipeline: "pdf", Nodes: 0, Mix: "uniform"},
		{Pipeline: "pdf", Nodes: 8, Mix: "mystery"}} {
		if _, err := gen.Generate(s); err == nil {
			t.Errorf("%+v: want an error", s)
		}
	}
}
