// Package clusterbench measures joint planning of many pipelines on one heterogeneous
// cluster (`trident bench cluster`): the planner's shipped joint round (sched.PlanJoint:
// the pooled joint model, then capped per-pipeline MILP plans on what the others leave)
// against per-pipeline planning on the whole inventory (today's planner without the joint
// round: it oversubscribes), a weighted static partition of the nodes, and an emulation of
// the nomad-autoscaler's target-value strategy per group with Nomad's binpacking; and
// admission of batch pipelines, shortest-expected-job-first with aging against FIFO.
package clusterbench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/trident-sched/trident/internal/randpick"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
)

// Spec selects one scenario: K pipelines on M nodes, drawn from Seed.
type Spec struct {
	// Pipelines is K (>= 1).
	Pipelines int
	// Nodes is M (>= 2).
	Nodes int
	// Seed selects the draw.
	Seed uint64
	// Links gives every node a finite egress (CPU nodes 10 or 25 Gbit/s, accelerator
	// nodes 25 or 100) and the operators record sizes of their kind (a decoded video
	// 100 MB, a scene 10 MB, a rasterised page 1.5 MB), so that the pipelines contend
	// for links; without it every link is unknown (the planner's 100 Gbit/s) and every
	// record 100 kB, where no link binds. The draw of everything else is the same.
	Links bool
	// LinkScale multiplies every drawn link speed (with Links; 0: 1).
	LinkScale float64
}

// String names the scenario, e.g. "k20/m256/s3" (with "/links" when Links).
func (s Spec) String() string {
	if s.Links && s.LinkScale > 0 && s.LinkScale != 1 {
		return fmt.Sprintf("k%d/m%d/s%d/links×%g", s.Pipelines, s.Nodes, s.Seed, s.LinkScale)
	}
	if s.Links {
		return fmt.Sprintf("k%d/m%d/s%d/links", s.Pipelines, s.Nodes, s.Seed)
	}
	return fmt.Sprintf("k%d/m%d/s%d", s.Pipelines, s.Nodes, s.Seed)
}

// linkBytes are the output record sizes (bytes) of each shape's operators in order,
// with Spec.Links.
var linkBytes = map[string][]float64{
	"pdf":   {1.5e6, 1.5e6, 2e4, 1e3},
	"video": {1e8, 1e7, 1e7, 1e3},
	"text":  {1e4, 6e3},
}

// withLinks sets sc's node egress (drawn from its own generator, so that the rest of the
// scenario is the one without links) and its operators' record sizes.
func withLinks(sc *Scenario) {
	rng := rand.New(rand.NewPCG(sc.Seed*15485863+uint64(sc.Pipelines), uint64(sc.Spec.Nodes)*31+7))
	const gbit = 1e9 / 8 // bytes/s
	scale := sc.LinkScale
	if scale <= 0 {
		scale = 1
	}
	for i := range sc.Nodes {
		speeds := []float64{10, 25}
		if sc.Nodes[i].GPUs > 0 {
			speeds = []float64{25, 100}
		}
		sc.Nodes[i].EgressBps = speeds[rng.IntN(2)] * gbit * scale
	}
	for p := range sc.Inputs {
		ops := slices.Clone(sc.Inputs[p].Operators)
		for i := range ops {
			ops[i].OutputBytes = linkBytes[sc.Shapes[p]][i]
		}
		sc.Inputs[p].Operators, sc.Inputs[p].Nodes = ops, sc.Nodes
	}
}

// Scenario is a drawn cluster and its pipelines (each PlanInput at startup, no Current;
// their Nodes are the whole inventory).
type Scenario struct {
	Spec
	// Nodes is the inventory: what is left of every node after other jobs.
	Nodes []fsm.Node
	// Inputs are the pipelines, with Weight set.
	Inputs []sched.PlanInput
	// Shapes names each pipeline's shape ("pdf", "video", "text").
	Shapes []string
	// Batch marks the batch pipelines and Records their input size (records).
	Batch   []bool
	Records []float64
}

// nodeKind is one node type of the catalogue.
type nodeKind struct {
	name   string
	cpu    float64
	memGiB int
	dev    fsm.Device
}

const gib = 1024

var kinds = []nodeKind{
	{"cpu32", 32, 128, fsm.Device{}},
	{"cpu64", 64, 256, fsm.Device{}},
	{"l4x2", 32, 128, fsm.Device{Model: "L4", MemoryMB: 24 * gib, Count: 2}},
	{"a10x4", 48, 192, fsm.Device{Model: "A10G", MemoryMB: 24 * gib, Count: 4}},
	{"a100x8", 128, 1024, fsm.Device{Model: "A100-80GB", MemoryMB: 80 * gib, Count: 8}},
}

// kindWeights: CPU nodes are common, the 8-GPU nodes rare.
var kindWeights = []float64{3, 2, 3, 2, 1}

// between draws uniformly from [lo, hi].
func between(rng *rand.Rand, lo, hi float64) float64 { return lo + rng.Float64()*(hi-lo) }

// op is a shorthand for a scenario operator.
func op(name string, order int, cpu float64, memGiB int, gpus, gpuMemGiB int, amp, capacity float64) sched.OperatorInput {
	return sched.OperatorInput{Operator: fsm.Operator{Name: name, Order: order, CPU: cpu, MemoryMB: memGiB * gib,
		GPUs: gpus, GPUMemoryMB: gpuMemGiB * gib, Amplification: amp, OutputBytes: 1e5, ColdStartSec: 30}, Capacity: capacity}
}

// shapes draws one pipeline of each kind the seeds describe: PDF parse -> layout -> LLM OCR
// (an operator needing a GPU of at least 40 GiB), video decode -> scene split -> CLIP
// filter -> captioning (24 GiB), and text tokenise -> embed.
var shapes = map[string]func(rng *rand.Rand) []sched.OperatorInput{
	"pdf": func(rng *rand.Rand) []sched.OperatorInput {
		return []sched.OperatorInput{
			op("parse", 1, 2, 4, 0, 0, 8, between(rng, 3, 6)),         // 8 pages per document
			op("layout", 2, 2, 8, 1, 0, 1, between(rng, 40, 80)),      // pages/s
			op("ocr", 3, 4, 32, 1, 40, 1, between(rng, 6, 12)),        // pages/s on an 80 GB GPU
			op("write", 4, 1, 2, 0, 0, 1.0/8, between(rng, 100, 200)), // documents/s
		}
	},
	"video": func(rng *rand.Rand) []sched.OperatorInput {
		return []sched.OperatorInput{
			op("decode", 1, 4, 8, 0, 0, 1, between(rng, 1, 2)),
			op("split", 2, 2, 4, 0, 0, 10, between(rng, 1.5, 3)), // 10 scenes per video
			op("clip", 3, 2, 16, 1, 0, 0.5, between(rng, 60, 120)),
			op("caption", 4, 4, 32, 1, 24, 1, between(rng, 10, 25)),
		}
	},
	"text": func(rng *rand.Rand) []sched.OperatorInput {
		return []sched.OperatorInput{
			op("tokenize", 1, 1, 2, 0, 0, 1, between(rng, 50, 100)),
			op("embed", 2, 2, 16, 1, 0, 1, between(rng, 150, 300)),
		}
	},
}

var shapeNames = []string{"pdf", "video", "text"}

// Generate draws the scenario of s: M nodes from the catalogue (at least one of each GPU
// kind, a quarter partly taken by other jobs), and K pipelines of the three shapes with
// weights from {1, 1, 1, 2, 4}, a third of them batch with 20k-500k input records. The
// pipelines' minimums may not all fit a small cluster: admission decides then.
func Generate(s Spec) (*Scenario, error) {
	if s.Pipelines < 1 || s.Nodes < 3 {
		return nil, fmt.Errorf("clusterbench: %s: want >= 1 pipeline and >= 3 nodes", s)
	}
	rng := rand.New(rand.NewPCG(s.Seed*104729+uint64(s.Pipelines), uint64(s.Nodes)*7919+1))
	sc := &Scenario{Spec: s}
	for n := range s.Nodes {
		k := kinds[2+n%3] // one of each GPU kind first
		if n >= 3 {
			k = kinds[randpick.Index(rng, kindWeights)]
		}
		nd := fsm.Node{Name: fmt.Sprintf("%s-%03d", k.name, n), Class: k.name, CPU: k.cpu, MemoryMB: k.memGiB * gib}
		if k.dev.Count > 0 {
			d := k.dev
			if rng.Float64() < 0.15 { // another job holds one device
				d.Count--
			}
			nd.Devices = fsm.MakeDevices(d)
			nd.GPUs = d.Count
		}
		if rng.Float64() < 0.25 { // other jobs hold part of the node
			f := between(rng, 0.5, 0.9)
			nd.CPU = math.Floor(nd.CPU * f)
			nd.MemoryMB = int(float64(nd.MemoryMB) * f)
		}
		sc.Nodes = append(sc.Nodes, nd)
	}
	sort.Slice(sc.Nodes, func(i, j int) bool { return sc.Nodes[i].Name < sc.Nodes[j].Name })
	for p := range s.Pipelines {
		shape := shapeNames[rng.IntN(len(shapeNames))]
		in := sched.PlanInput{Job: fmt.Sprintf("%s-%02d", shape, p), Operators: shapes[shape](rng), Nodes: sc.Nodes,
			Weight: []float64{1, 1, 1, 2, 4}[rng.IntN(5)]}
		sc.Inputs = append(sc.Inputs, in)
		sc.Shapes = append(sc.Shapes, shape)
		batch := rng.Float64() < 1.0/3
		sc.Batch = append(sc.Batch, batch)
		rec := 0.0
		if batch {
			rec = math.Round(math.Exp(between(rng, math.Log(2e4), math.Log(5e5))))
		}
		sc.Records = append(sc.Records, rec)
	}
	if s.Links {
		withLinks(sc)
	}
	return sc, nil
}
