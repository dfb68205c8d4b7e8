package transbench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/nomadact"
)

// Scenario is one cluster running a pipeline, the decision it runs and the chain of
// decisions that moves one accelerator operator to a candidate config, batch by batch,
// as the planner's rounds do.
type Scenario struct {
	// Seed generated the scenario; Spare marks the variant whose target nodes have one
	// instance's worth of GPUs free.
	Seed  uint64
	Spare bool
	// Pipeline is parsed from its job template (nomadact.ParseJob), Template included.
	Pipeline *fsm.Pipeline
	// Nodes are the cluster's GPU nodes then its CPU-only nodes.
	Nodes []fsm.Node
	// Initial is the running decision: without Spare, Op holds every GPU of its nodes.
	Initial fsm.Decision
	// Op is the operator that transitions, from Config to Candidate.
	Op, Config, Candidate string
	// Chain are the transition decisions; the last runs Candidate on every instance of Op.
	Chain []fsm.Decision
}

// Want is each operator's planned number of instances (constant along the chain).
func (s *Scenario) Want() map[string]int {
	out := map[string]int{}
	for name, t := range s.Initial.Operators {
		out[name] = t.Count()
	}
	return out
}

// NodeMap is Nodes by name, the inventory the actuator fits its versions to.
func (s *Scenario) NodeMap() map[string]fsm.Node {
	out := map[string]fsm.Node{}
	for _, n := range s.Nodes {
		out[n.Name] = n
	}
	return out
}

// opSpec is one generated operator.
type opSpec struct {
	op    fsm.Operator
	nodes map[string]int // instances per node
}

// Generate builds the scenario of seed: 2-16 GPU nodes of 1, 2, 4 or 8 GPUs (one size
// per cluster, a third of the nodes another size), 1-3 CPU-only nodes; a pipeline of 2-5
// operators: a CPU source, one or two tunable accelerator operators (trident_params;
// 1 GPU per instance, 2 on nodes of even GPU counts one time in five) and CPU operators.
// The accelerator operators share the GPU nodes (a node is split between two of them one
// time in five) and hold every GPU of them; CPU operators run on the CPU-only nodes, and
// sometimes one instance on a GPU node. The chain moves 1..maxBatch instances (uniformly
// drawn) per decision to the candidate, in node-name order like the proportional
// scheduler, until every instance of the operator runs it. With spare, the target's nodes
// have one more instance's worth of GPUs than it uses (same plan, same draws).
func Generate(seed uint64, maxBatch int, spare bool) (*Scenario, error) {
	if maxBatch < 1 {
		return nil, fmt.Errorf("transbench: max batch %d: want at least 1", maxBatch)
	}
	r := rand.New(rand.NewPCG(seed, 0x7472616e73))
	sizes := []int{1, 2, 4, 8}
	nGPU := 2 + r.IntN(15)
	base := sizes[r.IntN(len(sizes))]
	gpus := make([]int, nGPU)
	for i := range gpus {
		gpus[i] = base
		if r.IntN(3) == 0 {
			gpus[i] = sizes[r.IntN(len(sizes))]
		}
	}
	nOps := 2 + r.IntN(4)
	nAcc := 1
	if nOps >= 3 && r.IntN(2) == 0 {
		nAcc = 2
	}
	// Operators: src (order 0), then accelerators and CPU operators in a random order.
	var specs []*opSpec
	var accs, cpus []*opSpec
	for i := range nAcc {
		s := &opSpec{op: fsm.Operator{Name: fmt.Sprintf("acc%d", i+1), GPUs: 1,
			CPU: float64(1 + r.IntN(4)), MemoryMB: 1024 * (8 + 8*r.IntN(4)), GPUMemoryMB: 16000,
			ColdStartSec: ColdStartGPU, Params: "batch=int[1,256]", Config: "batch=8"}, nodes: map[string]int{}}
		accs = append(accs, s)
	}
	for i := range nOps - nAcc {
		name := "src"
		if i > 0 {
			name = fmt.Sprintf("cpu%d", i)
		}
		s := &opSpec{op: fsm.Operator{Name: name, CPU: 0.5 * float64(1+r.IntN(8)), MemoryMB: 512 * (1 + r.IntN(16)),
			ColdStartSec: ColdStartCPU, Config: "mode=fast"}, nodes: map[string]int{}}
		cpus = append(cpus, s)
	}
	rest := append(slices.Clone(accs), cpus[1:]...)
	r.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	specs = append([]*opSpec{cpus[0]}, rest...)
	for i, s := range specs {
		s.op.Order = i
	}
	// GPU nodes to accelerator operators: whole nodes, alternately (each gets one), or
	// split between two.
	gpuName := func(i int) string { return fmt.Sprintf("gpu-%02d", i+1) }
	split := map[int]int{} // node index -> GPUs of acc1 on a split node
	owner := make([]int, nGPU)
	for i := range nGPU {
		owner[i] = i % nAcc
		if nAcc == 2 && i >= 2 {
			owner[i] = r.IntN(2)
			if gpus[i] >= 2 && r.IntN(5) == 0 {
				split[i] = 1 + r.IntN(gpus[i]-1)
			}
		}
	}
	for a, s := range accs {
		even := len(split) == 0
		for i := range nGPU {
			even = even && (owner[i] != a || gpus[i]%2 == 0)
		}
		if even && r.IntN(5) == 0 {
			s.op.GPUs = 2
		}
	}
	nodeCPU := make([]float64, nGPU)
	nodeMem := make([]int, nGPU)
	for i := range nGPU {
		for a, s := range accs {
			g := 0
			switch k, ok := split[i]; {
			case ok && a == 0:
				g = k
			case ok:
				g = gpus[i] - k
			case owner[i] == a:
				g = gpus[i]
			}
			if n := g / s.op.GPUs; n > 0 {
				s.nodes[gpuName(i)] = n
			}
		}
		// Ample cores and memory: the GPUs bind (a spare instance's worth included).
		nodeCPU[i] = float64(8 * (gpus[i] + 2))
		nodeMem[i] = 64 * 1024 * (gpus[i] + 2)
	}
	// CPU operators: 1-4 instances round-robin on the CPU-only nodes, sometimes one on a
	// GPU node.
	nCPU := 1 + r.IntN(3)
	cpuName := func(i int) string { return fmt.Sprintf("cpu-%d", i+1) }
	cpuUse := make([]use, nCPU)
	next := 0
	for _, s := range cpus {
		n := 1 + r.IntN(4)
		if r.IntN(4) == 0 {
			i := r.IntN(nGPU)
			s.nodes[gpuName(i)]++
			nodeCPU[i] += s.op.CPU
			nodeMem[i] += s.op.MemoryMB
			n--
		}
		for range n {
			s.nodes[cpuName(next)]++
			cpuUse[next].add(s.op, 1)
			next = (next + 1) % nCPU
		}
	}
	target := accs[r.IntN(len(accs))]
	var nodes []fsm.Node
	for i := range nGPU {
		g := gpus[i]
		if spare && target.nodes[gpuName(i)] > 0 {
			g += target.op.GPUs
		}
		nodes = append(nodes, fsm.Node{Name: gpuName(i), CPU: nodeCPU[i], MemoryMB: nodeMem[i], GPUs: g, GPUMemoryMB: 24000})
	}
	for i := range nCPU {
		nodes = append(nodes, fsm.Node{Name: cpuName(i), CPU: max(16, 2*cpuUse[i].cpu), MemoryMB: max(64*1024, 2*cpuUse[i].mem)})
	}
	job := templateJob(fmt.Sprintf("packed-%d", seed), specs)
	p, err := nomadact.ParseJob(job)
	if err != nil {
		return nil, fmt.Errorf("transbench: seed %d: parse the generated job: %w", seed, err)
	}
	if p.Template, err = json.Marshal(job); err != nil {
		return nil, fmt.Errorf("transbench: seed %d: encode the generated job: %w", seed, err)
	}
	sc := &Scenario{Seed: seed, Spare: spare, Pipeline: p, Nodes: nodes, Op: target.op.Name,
		Config: target.op.Config, Candidate: fmt.Sprintf("batch=%d", 16<<r.IntN(4))}
	if err := nomadact.CheckConfig(target.op, sc.Candidate); err != nil {
		return nil, fmt.Errorf("transbench: seed %d: %w", seed, err)
	}
	ops := map[string]fsm.OpTarget{}
	for _, s := range specs {
		t := fsm.OpTarget{Nodes: map[string]fsm.Placement{}, Config: s.op.Config}
		for n, k := range s.nodes {
			t.Nodes[n] = fsm.Placement{Current: k}
		}
		ops[s.op.Name] = t
	}
	sc.Initial = fsm.Decision{Index: 1, Job: p.Job, Operators: ops}
	// The chain: k of the remaining old-config instances per decision, in node order.
	order := slices.Sorted(func(yield func(string) bool) {
		for n := range target.nodes {
			if !yield(n) {
				return
			}
		}
	})
	cur := map[string]fsm.Placement{}
	left := 0
	for n, k := range target.nodes {
		cur[n] = fsm.Placement{Current: k}
		left += k
	}
	for idx := uint64(2); left > 0; idx++ {
		k := min(left, 1+r.IntN(maxBatch))
		moved := k
		for _, n := range order {
			pl := cur[n]
			m := min(pl.Current, k)
			pl.Current, pl.Candidate, k = pl.Current-m, pl.Candidate+m, k-m
			cur[n] = pl
		}
		left -= moved
		d := fsm.Decision{Index: idx, Job: p.Job, Operators: map[string]fsm.OpTarget{}}
		for name, t := range ops {
			d.Operators[name] = t
		}
		d.Operators[target.op.Name] = fsm.OpTarget{Nodes: clonePlacements(cur), Config: sc.Config,
			CandidateConfig: sc.Candidate, Transitions: moved}
		sc.Chain = append(sc.Chain, d)
	}
	return sc, nil
}

func clonePlacements(m map[string]fsm.Placement) map[string]fsm.Placement {
	out := make(map[string]fsm.Placement, len(m))
	for n, pl := range m {
		out[n] = pl
	}
	return out
}

// templateJob is the pipeline's job file: one group per operator, its model in meta.
func templateJob(id string, specs []*opSpec) *api.Job {
	job := &api.Job{ID: ptr(id), Name: ptr(id), Type: ptr("service"), Datacenters: []string{"*"},
		Meta: map[string]string{"trident_pipeline": "true"}}
	for _, s := range specs {
		o := s.op
		meta := map[string]string{
			"trident_order":        strconv.Itoa(o.Order),
			"trident_cpu":          strconv.FormatFloat(o.CPU, 'f', -1, 64),
			"trident_memory_mb":    strconv.Itoa(o.MemoryMB),
			"trident_cold_start_s": strconv.FormatFloat(o.ColdStartSec, 'f', -1, 64),
			"trident_config":       o.Config,
		}
		if o.GPUs > 0 {
			meta["trident_gpus"] = strconv.Itoa(o.GPUs)
			meta["trident_gpu_memory_mb"] = strconv.Itoa(o.GPUMemoryMB)
		}
		if o.Params != "" {
			meta["trident_params"] = o.Params
		}
		job.TaskGroups = append(job.TaskGroups, &api.TaskGroup{
			Name: ptr(o.Name), Count: ptr(1), Meta: meta,
			Tasks: []*api.Task{{Name: "run", Driver: "docker",
				Config:    map[string]any{"image": "example/" + o.Name + ":1"},
				Resources: &api.Resources{CPU: ptr(100), MemoryMB: ptr(o.MemoryMB)}}},
		})
	}
	return job
}

func ptr[T any](v T) *T { return &v }
