// Package hetgen generates heterogeneous scheduling-layer instances for `trident bench milp
// -hetero`, independently of package gen: clusters drawn from a catalogue of CPU-only and
// 2/4/8-accelerator node kinds (including a node with two device classes), some nodes
// partially reserved by other jobs, three bandwidth regimes (ample; tight; mixed with 1
// Gbit/s, zero-egress and unlimited nodes), pipelines of 4-17 operators with cumulative
// amplification within 0.05-40, accelerator memory floors and model lists, and running
// rounds: a deployment left by a foreign first-fit scheduler for drifted capacities,
// candidates mid-transition, a transition batch cap, min/max instances and a node that
// shrank under its deployment.
package hetgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/trident-sched/trident/internal/randpick"

	"github.com/trident-sched/trident/strategy/milp"
)

// Spec selects one instance; everything else is drawn from Seed.
type Spec struct {
	// Nodes is the cluster size (>= 2).
	Nodes int
	// Seed selects the instance.
	Seed uint64
}

// String names the instance, e.g. "het/32/s7".
func (s Spec) String() string { return fmt.Sprintf("het/%d/s%d", s.Nodes, s.Seed) }

// Instance is a generated problem with what was drawn for it.
type Instance struct {
	// Problem is the scheduling round; Params.NetWeight and MigrationWeight are set
	// explicitly so that every formulation solves the same objective.
	Problem *milp.Problem
	// Regime is the bandwidth regime: "ample", "tight" or "mixed".
	Regime string
	// Running reports a running round (a current deployment) rather than a startup.
	Running bool
	// Kinds counts the nodes of every kind used.
	Kinds map[string]int
	// Shrunk names the node that shrank under its deployment ("" when none).
	Shrunk string
}

// Describe summarises the instance in one line.
func (in *Instance) Describe() string {
	kinds := make([]string, 0, len(in.Kinds))
	for k, c := range in.Kinds {
		kinds = append(kinds, fmt.Sprintf("%s:%d", k, c))
	}
	slices.Sort(kinds)
	sc := "startup"
	if in.Running {
		sc = "running"
	}
	return fmt.Sprintf("%d ops, %s, %s, nodes %v", len(in.Problem.Operators), in.Regime, sc, kinds)
}

// kind is a node type of the catalogue.
type kind struct {
	name   string
	cpu    float64 // cores
	memGiB float64
	devs   []milp.Device
}

const gib = 1024.0

var catalogue = []kind{
	{"cpu16", 16, 64, nil},
	{"cpu64", 64, 256, nil},
	{"cpu96hm", 96, 768, nil},
	{"l4x2", 32, 128, []milp.Device{{Model: "L4", MemMB: 24 * gib, Count: 2}}},
	{"a10x4", 48, 192, []milp.Device{{Model: "A10G", MemMB: 24 * gib, Count: 4}}},
	{"l40sx4", 64, 384, []milp.Device{{Model: "L40S", MemMB: 48 * gib, Count: 4}}},
	{"a100x8", 128, 1024, []milp.Device{{Model: "A100-40GB", MemMB: 40 * gib, Count: 8}}},
	{"h100x8", 192, 2048, []milp.Device{{Model: "H100-80GB", MemMB: 80 * gib, Count: 8}}},
	{"mixed", 64, 512, []milp.Device{{Model: "A100-80GB", MemMB: 80 * gib, Count: 2}, {Model: "L4", MemMB: 24 * gib, Count: 4}}},
}

// Generate builds the instance of s. Draws that fail milp's input check (e.g. minimums
// that do not fit) are redrawn from the next sub-seed; an error means 20 draws failed.
func Generate(s Spec) (*Instance, error) {
	if s.Nodes < 2 {
		return nil, fmt.Errorf("hetgen: Nodes must be >= 2, got %d", s.Nodes)
	}
	var last error
	for try := range uint64(20) {
		rng := rand.New(rand.NewPCG(s.Seed*7919+try, uint64(s.Nodes)*104729+1))
		in, err := draw(rng, s.Nodes)
		if err == nil {
			err = in.Problem.Check()
		}
		if err == nil {
			return in, nil
		}
		last = err
	}
	return nil, fmt.Errorf("hetgen: %s: no valid draw: %w", s, last)
}

// logUniform draws from [lo, hi] uniformly in log scale.
func logUniform(rng *rand.Rand, lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo)))
}

func draw(rng *rand.Rand, M int) (*Instance, error) {
	in := &Instance{Kinds: map[string]int{}}
	p := &milp.Problem{}
	in.Problem = p
	// cluster: 2-6 kinds with skewed weights, at least one with accelerators
	var kinds []kind
	for len(kinds) < 2+rng.IntN(5) {
		k := catalogue[rng.IntN(len(catalogue))]
		if !slices.ContainsFunc(kinds, func(x kind) bool { return x.name == k.name }) {
			kinds = append(kinds, k)
		}
	}
	if !slices.ContainsFunc(kinds, func(k kind) bool { return len(k.devs) > 0 }) {
		kinds = append(kinds, catalogue[3+rng.IntN(len(catalogue)-3)])
	}
	weights := make([]float64, len(kinds))
	for k := range weights {
		weights[k] = rng.ExpFloat64()
	}
	in.Regime = []string{"ample", "tight", "mixed", "mixed"}[rng.IntN(4)]
	for n := range M {
		k := kinds[randpick.Index(rng, weights)]
		if n == 0 { // an accelerator node always exists
			for len(k.devs) == 0 {
				k = kinds[rng.IntN(len(kinds))]
			}
		}
		in.Kinds[k.name]++
		nd := milp.Node{Name: fmt.Sprintf("%s-%03d", k.name, n), CPU: k.cpu, MemMB: k.memGiB * gib,
			Devices: slices.Clone(k.devs), Class: k.name}
		if rng.Float64() < 0.25 { // partly reserved by other jobs
			f := 0.5 + 0.4*rng.Float64()
			nd.CPU = math.Floor(nd.CPU * f)
			nd.MemMB = math.Floor(nd.MemMB*f/1024) * 1024
		}
		switch in.Regime {
		case "ample":
			nd.EgressBps = []float64{12.5e9, math.Inf(1)}[rng.IntN(2)]
		case "tight":
			nd.EgressBps = []float64{1.25e9, 3.125e9}[rng.IntN(2)]
		default:
			nd.EgressBps = []float64{math.Inf(1), 12.5e9, 12.5e9, 1.25e9, 1.25e9, 125e6, 0}[rng.IntN(7)]
		}
		p.Nodes = append(p.Nodes, nd)
	}
	devClasses := clusterDevices(p.Nodes)
	// pipeline
	nOps := 4 + rng.IntN(14)
	nGPU := 1 + rng.IntN(min(5, nOps/2))
	gpuAt := rng.Perm(nOps)[:nGPU]
	amp := 1.0
	for i := range nOps {
		o := milp.Operator{Name: fmt.Sprintf("op%02d", i), Amplification: amp,
			OutputBytes: logUniform(rng, 1e3, 2e7), LaunchSec: 5 + 25*rng.Float64(), TerminateSec: 1 + 9*rng.Float64()}
		if slices.Contains(gpuAt, i) {
			o.GPUs = []int{1, 1, 1, 1, 2, 2, 4}[rng.IntN(7)]
			o.CPU = []float64{2, 4, 8}[rng.IntN(3)]
			o.MemMB = []float64{16, 32, 64, 128}[rng.IntN(4)] * gib
			o.Capacity = logUniform(rng, 2, 100)
			o.LaunchSec += 30
			// a memory floor and sometimes a model list among the classes that can host it
			var fit []milp.Device
			for _, d := range devClasses {
				if d.Count >= o.GPUs {
					fit = append(fit, d)
				}
			}
			if len(fit) == 0 {
				o.GPUs = 1
				fit = devClasses
			}
			d := fit[rng.IntN(len(fit))]
			if rng.Float64() < 0.6 {
				o.GPUMemMB = math.Min(d.MemMB, []float64{12, 16, 20, 40, 70}[rng.IntN(5)]*gib)
			}
			if rng.Float64() < 0.15 {
				o.GPUModels = []string{d.Model}
				if e := fit[rng.IntN(len(fit))]; e.Model != d.Model {
					o.GPUModels = append(o.GPUModels, e.Model)
				}
			}
		} else {
			o.CPU = []float64{0.5, 1, 1, 2, 2, 4, 8}[rng.IntN(7)]
			o.MemMB = o.CPU * []float64{1, 2, 4, 8}[rng.IntN(4)] * gib
			o.Capacity = logUniform(rng, 1, 200)
		}
		if i == nOps-1 {
			o.OutputBytes = 0
		}
		p.Operators = append(p.Operators, o)
		if rng.Float64() < 0.4 { // the next operator sees a fan-out or a filter
			amp = math.Min(40, math.Max(0.05, amp*logUniform(rng, 0.25, 8)))
		}
	}
	Tgpu, Tcpu := poolLimits(p)
	// balance: CPU-limited throughput within 0.6-1.6 of the accelerator-limited one
	f := Tcpu / (Tgpu * (0.6 + rng.Float64()))
	for i := range p.Operators {
		if p.Operators[i].GPUs == 0 {
			p.Operators[i].Capacity /= f
		}
	}
	Tgpu, Tcpu = poolLimits(p)
	Tref := math.Min(Tgpu, Tcpu)
	if in.Regime == "tight" { // traffic at Tref is 2-8x what the cluster's egress carries evenly
		scaleBytes(p, Tref, 2+6*rng.Float64())
	}
	// scaling policies
	for i := range p.Operators {
		o := &p.Operators[i]
		if rng.Float64() < 0.15 {
			o.MinInstances = 1 + rng.IntN(3)
		}
		if rng.Float64() < 0.15 {
			o.MaxInstances = max(o.MinInstances, 1, int(math.Ceil(o.Amplification*Tref/o.Capacity*(0.5+rng.Float64()))))
		}
	}
	p.Params = milp.Params{WindowSec: []float64{120, 300, 600}[rng.IntN(3)], MaxBatch: []int{0, 1, 2, 4}[rng.IntN(4)]}
	if rng.Float64() < 2.0/3 {
		in.Running = true
		in.Shrunk = running(rng, p, Tref)
	}
	weights2(p, Tref)
	return in, nil
}

// clusterDevices returns every device class of the cluster (with its count on one node).
func clusterDevices(nodes []milp.Node) []milp.Device {
	var out []milp.Device
	for _, nd := range nodes {
		out = append(out, nd.Devices...)
	}
	return out
}

// poolLimits returns Tgpu, the throughput at which the accelerator operators exhaust the
// cluster's devices (or 70 % of its cores, if sooner), and Tcpu, the one at which the
// other operators exhaust the cores the accelerator operators leave at Tgpu (pooled,
// fractional instances).
func poolLimits(p *milp.Problem) (Tgpu, Tcpu float64) {
	var cores, devs, gpuPerT, gpuCoresPerT, cpuPerT float64
	for _, nd := range p.Nodes {
		cores += nd.CPU
		for _, d := range nd.Devices {
			devs += float64(d.Count)
		}
	}
	for _, o := range p.Operators {
		inst := o.Amplification / o.Capacity // instances per unit of T
		if o.GPUs > 0 {
			gpuPerT += inst * float64(o.GPUs)
			gpuCoresPerT += inst * o.CPU
		} else {
			cpuPerT += inst * o.CPU
		}
	}
	Tgpu = math.Min(devs/gpuPerT, 0.7*cores/gpuCoresPerT)
	return Tgpu, (cores - gpuCoresPerT*Tgpu) / cpuPerT
}

// scaleBytes scales every operator's output size so that the traffic of a pipeline
// spread evenly over the nodes at throughput T is factor times the mean finite egress.
func scaleBytes(p *milp.Problem, T, factor float64) {
	traffic := 0.0
	for i := 0; i+1 < len(p.Operators); i++ {
		traffic += p.Operators[i+1].Amplification * p.Operators[i].OutputBytes * T
	}
	mean, n := 0.0, 0
	for _, nd := range p.Nodes {
		if !math.IsInf(nd.EgressBps, 1) {
			mean += nd.EgressBps
			n++
		}
	}
	if n == 0 || traffic == 0 {
		return
	}
	mean /= float64(n)
	M := float64(len(p.Nodes))
	// with instances spread evenly, (M-1)/M of every boundary's traffic leaves its node
	k := factor * mean * M / (traffic * (M - 1) / M)
	for i := range p.Operators {
		p.Operators[i].OutputBytes *= k
	}
}

// running turns p into a running round: a foreign scheduler's first-fit deployment for
// capacities that drifted by +-30 % at 60-90 % of Tref, candidates for 1-3 operators (one
// or two mid-transition), and, half of the time, a node that shrank under its deployment.
// It returns the shrunk node's name ("" when none).
func running(rng *rand.Rand, p *milp.Problem, Tref float64) string {
	N, M := len(p.Operators), len(p.Nodes)
	cur := make(milp.Deployment, N)
	for i := range cur {
		cur[i] = make([]milp.Placement, M)
	}
	freeC, freeM := make([]float64, M), make([]float64, M)
	freeD := make([][]int, M)
	for n, nd := range p.Nodes {
		freeC[n], freeM[n] = nd.CPU, nd.MemMB
		for _, d := range nd.Devices {
			freeD[n] = append(freeD[n], d.Count)
		}
	}
	T0 := Tref * (0.6 + 0.3*rng.Float64())
	for _, i := range rng.Perm(N) {
		o := &p.Operators[i]
		want := int(math.Ceil(o.Amplification * T0 / (o.Capacity * (0.7 + 0.6*rng.Float64()))))
		want = max(want, o.MinInstances, 1)
		if o.MaxInstances > 0 {
			want = min(want, o.MaxInstances)
		}
		for range want { // first fit over a random node order
			for _, n := range rng.Perm(M) {
				if freeC[n] < o.CPU || freeM[n] < o.MemMB {
					continue
				}
				c := -1
				if o.GPUs > 0 {
					for k, d := range p.Nodes[n].Devices {
						if freeD[n][k] >= o.GPUs && accepts(o, d) {
							c = k
							break
						}
					}
					if c < 0 {
						continue
					}
					freeD[n][c] -= o.GPUs
				}
				freeC[n] -= o.CPU
				freeM[n] -= o.MemMB
				cur[i][n].Current++
				break
			}
		}
	}
	p.Current = cur
	// candidates: 1-3 operators, the first one or two mid-transition
	cands := rng.Perm(N)[:1+rng.IntN(min(3, N))]
	for k, i := range cands {
		o := &p.Operators[i]
		o.Candidate = &milp.Candidate{Capacity: o.Capacity * (0.9 + 0.7*rng.Float64()), ColdStartSec: 20 + 180*rng.Float64()}
		if k < 2 && rng.Float64() < 0.7 {
			moved := 0
			for n := range M {
				for moved < 2 && cur[i][n].Current > 0 {
					cur[i][n].Current--
					cur[i][n].Candidate++
					moved++
				}
			}
			if o.MaxInstances > 0 {
				o.MaxInstances = max(o.MaxInstances, moved)
			}
		}
	}
	if rng.Float64() >= 0.5 {
		return ""
	}
	// the most loaded node shrinks to 60-85 % of what its deployment uses (never below
	// its pinned instances) and may lose a device
	best, load := -1, 0.0
	for n, nd := range p.Nodes {
		if l := (nd.CPU - freeC[n]) / math.Max(nd.CPU, 1); l > load {
			best, load = n, l
		}
	}
	if best < 0 {
		return ""
	}
	nd := &p.Nodes[best]
	var usedC, usedM, pinC, pinM float64
	for i, o := range p.Operators {
		usedC += float64(cur[i][best].Total()) * o.CPU
		usedM += float64(cur[i][best].Total()) * o.MemMB
		pinC += float64(cur[i][best].Candidate) * o.CPU
		pinM += float64(cur[i][best].Candidate) * o.MemMB
	}
	f := 0.6 + 0.25*rng.Float64()
	nd.CPU = math.Max(pinC, math.Floor(usedC*f))
	nd.MemMB = math.Max(pinM, math.Floor(usedM*f))
	if len(nd.Devices) > 0 && rng.Float64() < 0.5 {
		nd.Devices = slices.Clone(nd.Devices)
		nd.Devices[0].Count = max(0, nd.Devices[0].Count-1) // milp.Check refuses the draw if pinned instances lose it
	}
	return nd.Name
}

// accepts reports whether an instance of o may use devices of class d (the rule of
// milp.Operator.GPUMemMB and GPUModels).
func accepts(o *milp.Operator, d milp.Device) bool {
	return d.MemMB >= o.GPUMemMB && (len(o.GPUModels) == 0 || slices.Contains(o.GPUModels, d.Model))
}

// weights2 sets the objective's tie-breakers explicitly, each about 1e-4 of the
// throughput scale Tref: alpha per byte/s of the largest finite egress (or of the
// pipeline's traffic at Tref when every node is unlimited), beta per second of
// redeploying the whole Tref-sized pipeline once.
func weights2(p *milp.Problem, Tref float64) {
	bref := 0.0
	for _, nd := range p.Nodes {
		if !math.IsInf(nd.EgressBps, 1) {
			bref = math.Max(bref, nd.EgressBps)
		}
	}
	if bref == 0 {
		for i := 0; i+1 < len(p.Operators); i++ {
			bref += p.Operators[i+1].Amplification * p.Operators[i].OutputBytes * Tref
		}
	}
	full := 0.0
	for _, o := range p.Operators {
		full += (o.LaunchSec + o.TerminateSec) * math.Max(1, math.Ceil(o.Amplification*Tref/o.Capacity))
	}
	p.Params.NetWeight = 1e-4 * Tref / math.Max(bref, 1)
	p.Params.MigrationWeight = 1e-4 * Tref / math.Max(full, 1)
}
