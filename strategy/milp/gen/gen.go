// Package gen generates scheduling-layer instances in the setting of the Trident paper
// (Sec. 8): the PDF curation pipeline (17 operators, 3 on accelerators) and the video
// curation pipeline (9 operators, 3 on accelerators) on clusters of 8-accelerator,
// 256-core, 1 TB, 100 Gbit/s nodes, optionally mixed with CPU-only nodes.
package gen

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/trident-sched/trident/strategy/milp"
)

// Spec selects one instance.
type Spec struct {
	// Pipeline is "pdf" or "video".
	Pipeline string
	// Nodes is the cluster size.
	Nodes int
	// Mix is "uniform" (all accelerator nodes), "hetero" (half of the nodes are CPU-only
	// 128-core, 512 GB, 25 Gbit/s nodes; a quarter have 4 accelerators) or "hetero-net"
	// (the hetero mix with an eighth of the bandwidth: egress binds, placement matters).
	Mix string
	// Seed drives the capacity jitter.
	Seed uint64
	// Reschedule makes a running-round instance: the current deployment is a greedy plan
	// for capacities that have since drifted by up to +-20%, two operators have a candidate
	// configuration and one of them is mid-transition.
	Reschedule bool
}

// String names the instance, e.g. "pdf/16/uniform/s3/resched".
func (s Spec) String() string {
	r := "startup"
	if s.Reschedule {
		r = "resched"
	}
	return fmt.Sprintf("%s/%d/%s/s%d/%s", s.Pipeline, s.Nodes, s.Mix, s.Seed, r)
}

// opSpec is the nominal profile of one operator.
type opSpec struct {
	name     string
	cpu, mem float64 // cores, GiB
	gpu      int
	rate     float64 // input records/s per instance
	amp      float64 // multiplier of the amplification after this operator
	out      float64 // bytes per output record
}

// pdfOps: documents in, split into ~12 pages, page-level models, merged back to documents.
var pdfOps = []opSpec{
	{"ingest", 1, 2, 0, 40, 1, 2e6},
	{"pdf-validate", 1, 2, 0, 30, 1, 2e6},
	{"pdf-split", 2, 4, 0, 8, 12, 3e5},
	{"render", 2, 4, 0, 6, 1, 1.2e6},
	{"layout-detect", 8, 48, 1, 90, 1, 4e4},
	{"crop-regions", 1, 2, 0, 25, 1, 8e5},
	{"ocr", 8, 64, 1, 45, 1, 2e4},
	{"table-recog", 4, 8, 0, 12, 1, 2e4},
	{"formula-recog", 8, 48, 1, 70, 1, 1e4},
	{"reading-order", 1, 2, 0, 60, 1, 3e4},
	{"merge-pages", 1, 4, 0, 80, 1.0 / 12, 3e5},
	{"lang-id", 1, 2, 0, 50, 1, 3e5},
	{"quality-filter", 2, 4, 0, 20, 0.6, 3e5},
	{"pii-redact", 2, 4, 0, 10, 1, 3e5},
	{"dedup-minhash", 2, 8, 0, 15, 0.8, 3e5},
	{"tokenize", 2, 4, 0, 18, 1, 6e5},
	{"write-shards", 1, 4, 0, 40, 1, 0},
}

// videoOps: clips in, scene split, frame-level filters and models.
var videoOps = []opSpec{
	{"ingest", 1, 2, 0, 10, 1, 50e6},
	{"decode-split", 8, 16, 0, 1.5, 8, 6e6},
	{"frame-extract", 4, 8, 0, 4, 1, 12e6},
	{"aesthetic-score", 6, 32, 1, 40, 0.7, 12e6},
	{"motion-filter", 4, 8, 0, 8, 0.8, 12e6},
	{"caption-vlm", 8, 96, 1, 6, 1, 2e3},
	{"embed", 6, 32, 1, 50, 1, 4e3},
	{"dedup", 2, 8, 0, 40, 0.9, 4e3},
	{"write", 1, 4, 0, 60, 1, 0},
}

// Nodes returns the cluster of spec.
func Nodes(s Spec) []milp.Node {
	nodes := make([]milp.Node, s.Nodes)
	for n := range nodes {
		nd := milp.Node{Name: fmt.Sprintf("node-%02d", n), CPU: 256, MemMB: 1 << 20, GPUs: 8, EgressBps: 12.5e9, Class: "gpu8"}
		if s.Mix == "hetero" || s.Mix == "hetero-net" {
			switch {
			case n%2 == 1:
				nd = milp.Node{Name: nd.Name, CPU: 128, MemMB: 512 << 10, GPUs: 0, EgressBps: 3.125e9, Class: "cpu"}
			case n%4 == 2:
				nd = milp.Node{Name: nd.Name, CPU: 192, MemMB: 768 << 10, GPUs: 4, EgressBps: 6.25e9, Class: "gpu4"}
			}
		}
		if s.Mix == "hetero-net" {
			nd.EgressBps /= 8
		}
		nodes[n] = nd
	}
	return nodes
}

// Generate builds the instance of s. The operators' capacities are jittered by +-25%
// and then the CPU operators are rescaled so that the cluster's CPU and accelerator pools
// limit throughput about equally (each within 10% of the other): both pools bind, so the
// instance is neither trivial nor infeasible.
func Generate(s Spec) (*milp.Problem, error) {
	var ops []opSpec
	switch s.Pipeline {
	case "pdf":
		ops = pdfOps
	case "video":
		ops = videoOps
	default:
		return nil, fmt.Errorf("gen: unknown pipeline %q (want pdf or video)", s.Pipeline)
	}
	if s.Nodes <= 0 {
		return nil, fmt.Errorf("gen: Nodes must be > 0, got %d", s.Nodes)
	}
	if s.Mix != "uniform" && s.Mix != "hetero" && s.Mix != "hetero-net" {
		return nil, fmt.Errorf("gen: unknown mix %q (want uniform, hetero or hetero-net)", s.Mix)
	}
	rng := rand.New(rand.NewPCG(s.Seed, uint64(len(ops))*7919+uint64(s.Nodes)))
	nodes := Nodes(s)
	p := &milp.Problem{Nodes: nodes, Params: milp.Params{WindowSec: 300, MaxBatch: 4}}
	amp := 1.0
	var cpuPerT, gpuPerT float64 // pool units per unit of throughput
	for _, o := range ops {
		rate := o.rate * (0.75 + 0.5*rng.Float64())
		op := milp.Operator{
			Name: o.name, CPU: o.cpu, MemMB: o.mem * 1024, GPUs: o.gpu, Capacity: rate,
			Amplification: amp, OutputBytes: o.out,
			LaunchSec: 5 + 10*float64(o.gpu) + rng.Float64()*5, TerminateSec: 2 + rng.Float64()*2,
		}
		p.Operators = append(p.Operators, op)
		if o.gpu > 0 {
			gpuPerT += float64(o.gpu) * amp / rate
		} else {
			cpuPerT += o.cpu * amp / rate
		}
		amp *= o.amp
	}
	var C, G float64
	for _, nd := range nodes {
		C += nd.CPU
		G += float64(nd.GPUs)
	}
	// CPU left once the accelerator operators run at the accelerator-limited throughput
	Tg := G / gpuPerT
	for _, o := range p.Operators {
		if o.GPUs > 0 {
			C -= o.CPU * o.Amplification * Tg / o.Capacity
		}
	}
	if G == 0 || C <= 0 {
		return nil, fmt.Errorf("gen: cluster %s cannot run the %s pipeline", s.Mix, s.Pipeline)
	}
	want := Tg * (0.9 + 0.2*rng.Float64())
	f := want * cpuPerT / C // CPU-limited throughput becomes want
	for i := range p.Operators {
		if p.Operators[i].GPUs == 0 {
			p.Operators[i].Capacity *= f
		}
	}
	if s.Reschedule {
		if err := reschedule(p, rng); err != nil {
			return nil, err
		}
	}
	return p, p.Check()
}

// reschedule turns p into a running round: deploy a greedy plan for drifted capacities,
// then give two accelerator operators candidates, one of them mid-transition.
func reschedule(p *milp.Problem, rng *rand.Rand) error {
	old := *p
	old.Operators = append([]milp.Operator(nil), p.Operators...)
	for i := range old.Operators {
		old.Operators[i].Capacity *= 0.8 + 0.4*rng.Float64()
	}
	s, err := milp.Greedy{}.Solve(context.Background(), &old, milp.Options{})
	if err != nil {
		return fmt.Errorf("gen: plan the previous round: %w", err)
	}
	p.Current = s.PerNode
	var gpuOps []int
	for i, o := range p.Operators {
		if o.GPUs > 0 {
			gpuOps = append(gpuOps, i)
		}
	}
	for k, i := range gpuOps[:min(2, len(gpuOps))] {
		o := &p.Operators[i]
		o.Candidate = &milp.Candidate{Capacity: o.Capacity * (1.15 + 0.2*rng.Float64()), ColdStartSec: 60 + 60*rng.Float64()}
		if k == 0 { // mid-transition: two instances already switched
			moved := 0
			for n := range p.Current[i] {
				for moved < 2 && p.Current[i][n].Current > 0 {
					p.Current[i][n].Current--
					p.Current[i][n].Candidate++
					moved++
				}
			}
		}
	}
	return nil
}
