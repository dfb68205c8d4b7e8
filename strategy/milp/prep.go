package milp

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// DefaultTimeLimit is the solve time limit when Options.TimeLimit is 0.
const DefaultTimeLimit = 10 * time.Second

const (
	// DefaultWindowSec is the scheduling window W of Eq. (11) when Params.WindowSec is 0.
	DefaultWindowSec = 300.0
	// DefaultRelGap is the relative MIP gap when Options.RelGap is 0.
	DefaultRelGap = 0.01
	// netShare bounds the network term relative to the throughput scale when
	// Params.NetWeight is 0: a peak egress at the largest node bound costs 1e-4 of it, a
	// tie-breaker.
	netShare = 1e-4
	// migrationShare is what redeploying a whole plan once costs relative to the
	// throughput scale when Params.MigrationWeight is 0. It is a third of what the
	// restarts lose if each idles its share of the throughput for its launch and stop
	// seconds over the default window (9 s of 300), so a move must be worth its restarts;
	// at 1e-4 the per-instance costs fell near 1e-8, and HiGHS's root heuristics chased
	// plans that differ by such costs until the time limit (bench e2e's shared-layer
	// rounds, docs/benchmarks.md).
	migrationShare = 1e-2
)

// Check reports the first problem with p's input, naming the field.
func (p *Problem) Check() error {
	if p == nil {
		return errors.New("milp: nil problem")
	}
	if len(p.Operators) == 0 {
		return errors.New("milp: problem has no operators")
	}
	if len(p.Nodes) == 0 {
		return errors.New("milp: problem has no nodes")
	}
	fin := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	for i, o := range p.Operators {
		switch {
		case !fin(o.CPU) || o.CPU < 0:
			return fmt.Errorf("milp: operator %d (%s): CPU %v must be finite and >= 0", i, o.Name, o.CPU)
		case !fin(o.MemMB) || o.MemMB < 0:
			return fmt.Errorf("milp: operator %d (%s): MemMB %v must be finite and >= 0", i, o.Name, o.MemMB)
		case o.GPUs < 0:
			return fmt.Errorf("milp: operator %d (%s): GPUs %d must be >= 0", i, o.Name, o.GPUs)
		case !fin(o.GPUMemMB) || o.GPUMemMB < 0:
			return fmt.Errorf("milp: operator %d (%s): GPUMemMB %v must be finite and >= 0", i, o.Name, o.GPUMemMB)
		case o.CPU == 0 && o.MemMB == 0 && o.GPUs == 0:
			return fmt.Errorf("milp: operator %d (%s): needs at least one resource (CPU, MemMB or GPUs)", i, o.Name)
		case !fin(o.Capacity) || o.Capacity <= 0:
			return fmt.Errorf("milp: operator %d (%s): Capacity %v must be finite and > 0", i, o.Name, o.Capacity)
		case !fin(o.Amplification) || o.Amplification <= 0:
			return fmt.Errorf("milp: operator %d (%s): Amplification %v must be finite and > 0", i, o.Name, o.Amplification)
		case !fin(o.OutputBytes) || o.OutputBytes < 0:
			return fmt.Errorf("milp: operator %d (%s): OutputBytes %v must be finite and >= 0", i, o.Name, o.OutputBytes)
		case !fin(o.LaunchSec) || o.LaunchSec < 0 || !fin(o.TerminateSec) || o.TerminateSec < 0:
			return fmt.Errorf("milp: operator %d (%s): LaunchSec/TerminateSec must be finite and >= 0", i, o.Name)
		}
		if err := checkContention(o.Contention); err != nil {
			return fmt.Errorf("milp: operator %d (%s): %w", i, o.Name, err)
		}
		if o.MinInstances < 0 || o.MaxInstances < 0 || (o.MaxInstances > 0 && o.MinInstances > o.MaxInstances) {
			return fmt.Errorf("milp: operator %d (%s): MinInstances %d and MaxInstances %d must be >= 0 with min <= max (0: unbounded)",
				i, o.Name, o.MinInstances, o.MaxInstances)
		}
		if c := o.Candidate; c != nil {
			if !fin(c.Capacity) || c.Capacity <= 0 {
				return fmt.Errorf("milp: operator %d (%s): Candidate.Capacity %v must be finite and > 0", i, o.Name, c.Capacity)
			}
			if !fin(c.ColdStartSec) || c.ColdStartSec < 0 {
				return fmt.Errorf("milp: operator %d (%s): Candidate.ColdStartSec %v must be finite and >= 0", i, o.Name, c.ColdStartSec)
			}
		}
	}
	for n, nd := range p.Nodes {
		if !fin(nd.CPU) || nd.CPU < 0 || !fin(nd.MemMB) || nd.MemMB < 0 || nd.GPUs < 0 {
			return fmt.Errorf("milp: node %d (%s): CPU, MemMB and GPUs must be finite and >= 0", n, nd.Name)
		}
		if math.IsNaN(nd.EgressBps) || nd.EgressBps < 0 {
			return fmt.Errorf("milp: node %d (%s): EgressBps %v must be >= 0 (+Inf for unlimited)", n, nd.Name, nd.EgressBps)
		}
		for _, k := range sortedKeys(nd.Pressure) {
			if v := nd.Pressure[k]; !fin(v) || v < 0 || v > 1 {
				return fmt.Errorf("milp: node %d (%s): Pressure[%q] %v must be in [0, 1]", n, nd.Name, k, v)
			}
		}
		tot := 0
		for k, d := range nd.Devices {
			if d.Count < 0 || !fin(d.MemMB) || d.MemMB < 0 {
				return fmt.Errorf("milp: node %d (%s): Devices[%d] (%s): Count %d and MemMB %v must be finite and >= 0",
					n, nd.Name, k, d.Model, d.Count, d.MemMB)
			}
			tot += d.Count
		}
		if len(nd.Devices) > 0 && nd.GPUs != 0 && nd.GPUs != tot {
			return fmt.Errorf("milp: node %d (%s): GPUs %d disagrees with its Devices (%d devices): set 0 or their total",
				n, nd.Name, nd.GPUs, tot)
		}
	}
	for i := range p.Operators {
		o := &p.Operators[i]
		fits := false
		for n := range p.Nodes {
			fits = fits || fitNode(o, &p.Nodes[n]) > 0
		}
		if !fits {
			acc := ""
			if o.GPUs > 0 && (o.GPUMemMB > 0 || len(o.GPUModels) > 0) {
				acc = fmt.Sprintf(" of at least %g MiB, models %v", o.GPUMemMB, o.GPUModels)
			}
			return fmt.Errorf("milp: operator %d (%s): one instance (CPU %g, MemMB %g, GPUs %d%s) %w",
				i, o.Name, o.CPU, o.MemMB, o.GPUs, acc, ErrFitsNoNode)
		}
	}
	for i := range p.Operators {
		o := &p.Operators[i]
		room := 0
		for n := range p.Nodes {
			room += fitNode(o, &p.Nodes[n])
		}
		if o.MinInstances > room {
			return fmt.Errorf("milp: operator %d (%s): MinInstances %d, but at most %d instances fit the nodes even alone",
				i, o.Name, o.MinInstances, room)
		}
	}
	pr := p.Params
	if !fin(pr.WindowSec) || pr.WindowSec < 0 || pr.MaxBatch < 0 || !fin(pr.NetWeight) || pr.NetWeight < 0 ||
		!fin(pr.MigrationWeight) || pr.MigrationWeight < 0 {
		return errors.New("milp: Params: WindowSec, MaxBatch, NetWeight and MigrationWeight must be finite and >= 0")
	}
	if p.Current == nil {
		return p.checkMinimums(nil)
	}
	if len(p.Current) != len(p.Operators) {
		return fmt.Errorf("milp: Current has %d operator rows, want %d", len(p.Current), len(p.Operators))
	}
	pinned := make([]int, len(p.Operators))
	for i, row := range p.Current {
		if len(row) != len(p.Nodes) {
			return fmt.Errorf("milp: Current[%d] (%s) has %d node entries, want %d", i, p.Operators[i].Name, len(row), len(p.Nodes))
		}
		for _, pl := range row {
			pinned[i] += pl.Candidate
		}
		if mx := p.Operators[i].MaxInstances; mx > 0 && pinned[i] > mx {
			return fmt.Errorf("milp: operator %d (%s): %d already-transitioned instances exceed MaxInstances %d (they are never stopped)",
				i, p.Operators[i].Name, pinned[i], mx)
		}
		for n, pl := range row {
			if pl.Current < 0 || pl.Candidate < 0 {
				return fmt.Errorf("milp: Current[%d][%d] (%s on %s): negative count", i, n, p.Operators[i].Name, p.Nodes[n].Name)
			}
			if pl.Candidate > 0 && p.Operators[i].Candidate == nil {
				return fmt.Errorf("milp: Current[%d][%d] (%s on %s): %d instances on a candidate configuration but Operator.Candidate is nil (an in-flight transition needs its candidate)",
					i, n, p.Operators[i].Name, p.Nodes[n].Name, pl.Candidate)
			}
		}
	}
	// Already-transitioned instances are pinned (no rollback): they must still fit.
	for n, nd := range p.Nodes {
		var c, m float64
		for i, o := range p.Operators {
			k := float64(p.Current[i][n].Candidate)
			c += k * o.CPU
			m += k * o.MemMB
		}
		pinnedDev := devicesFit(p.Operators, &p.Nodes[n], func(i int) int { return p.Current[i][n].Candidate })
		if c > nd.CPU+1e-9 || m > nd.MemMB+1e-9 || !pinnedDev {
			return fmt.Errorf("milp: node %d (%s): the already-transitioned (pinned) instances exceed its resources", n, nd.Name)
		}
	}
	return p.checkMinimums(pinned)
}

// checkContention reports the first bad entry of an operator's Contention: an empty
// Kind, a Weight outside (0, 1] or a Kind listed twice.
func checkContention(cs []Contention) error {
	for k, c := range cs {
		switch {
		case c.Kind == "":
			return fmt.Errorf("contention %d: empty Kind", k)
		case math.IsNaN(c.Weight) || c.Weight <= 0 || c.Weight > 1:
			return fmt.Errorf("contention %d (%s): Weight %v must be in (0, 1]", k, c.Kind, c.Weight)
		}
		for _, d := range cs[:k] {
			if d.Kind == c.Kind {
				return fmt.Errorf("contention %d: Kind %q listed twice", k, c.Kind)
			}
		}
	}
	return nil
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]float64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// pooled returns the cluster's summed cores, memory and accelerators.
func (p *Problem) pooled() (cpu, mem float64, gpus int) {
	for n := range p.Nodes {
		nd := &p.Nodes[n]
		cpu, mem, gpus = cpu+nd.CPU, mem+nd.MemMB, gpus+totalDevices(nd)
	}
	return cpu, mem, gpus
}

// checkMinimums reports when the instances every operator must keep (its MinInstances, or
// its pinned already-transitioned instances pinned[i] when more; pinned may be nil) exceed
// the pooled cluster. Whether they also pack node by node is left to the solvers.
func (p *Problem) checkMinimums(pinned []int) error {
	var needC, needM float64
	var needG int
	keep := make([]int, len(p.Operators))
	for i, o := range p.Operators {
		k := o.MinInstances
		if pinned != nil {
			k = max(k, pinned[i])
		}
		keep[i] = k
		needC += float64(k) * o.CPU
		needM += float64(k) * o.MemMB
		needG += k * o.GPUs
	}
	totC, totM, totG := p.pooled()
	if needC > totC+1e-9 || needM > totM+1e-9 || needG > totG {
		return fmt.Errorf("milp: the operators' MinInstances (and pinned instances) need cpu %g, memory %g MiB and %d GPUs; the cluster has %g, %g and %d",
			needC, needM, needG, totC, totM, totG)
	}
	for _, g := range p.deviceGroups() {
		need := 0
		var names []string
		for _, i := range g.ops {
			need += keep[i] * p.Operators[i].GPUs
			names = append(names, p.Operators[i].Name)
		}
		if need > g.devices {
			return fmt.Errorf("milp: the MinInstances (and pinned instances) of %v need %d accelerators of the classes they accept; the cluster has %d",
				names, need, g.devices)
		}
	}
	return nil
}

// prep holds the constants derived from a Problem that every part of the package uses.
type prep struct {
	p    *Problem
	N, M int
	mu   []float64 // current-config unit rate
	muC  []float64 // candidate unit rate (0 without candidate)
	muT  []float64 // Eq. (11): cold-start-discounted rate of a transitioning instance
	K    [][]int   // pinned already-transitioned instances per node
	Ki   []int     // sum_n K
	cur  [][]int   // current total instances per node
	R    []int     // old (current-config) instances at round start
	dmax []int     // min(R, MaxBatch): Eqs. (24)-(25)
	ub   [][]int   // max instances of op i that fit node n alone
	lim  []int     // max parallelism of op i: sum_n ub, capped at MaxInstances
	gpu  bool      // any operator uses accelerators
	// devs[n] are node n's accelerator classes (nodeDevices); elig[i][n] the classes of
	// node n that operator i accepts (nil for operators without accelerators).
	devs [][]Device
	elig [][][]int
	// devOff[n] is the index of node n's first class among all nodes' classes (nClass).
	devOff []int
	nClass int
	// groups are the Hall-type accelerator aggregates (deviceGroups).
	groups []devGroup
	// packs are the pooled packing rows of the aggregate bound (packRows).
	packs []packRow
	// acc[i] is the number of devices operator i accepts (accepted); pickiest orders the
	// operators by it.
	acc      []int
	pickiest []int
	// pl is the greedy's placer, reused from one placement to the next.
	pl *placer
	// poolC, poolM and poolG are the cluster's summed cores, memory (MiB) and accelerators.
	poolC, poolM float64
	poolG        int
	// objective weights (Eq. 10)
	alpha, beta float64
	// Tub is the aggregate-relaxation upper bound on T (see bound.go).
	Tub float64
	// bref is the unit (bytes/s) of the egress columns of the model.
	bref float64
	// kinds are the contended resources some operator declares (Operator.Contention),
	// sorted; cuse[k][i] is operator i's use of kinds[k] per input record (Weight/mu_i, 0
	// when it does not declare it) and cfree[k][n] what node n has left of it.
	kinds []string
	cuse  [][]float64
	cfree [][]float64
}

// transitionable reports whether operator i may start transitions this round.
func (q *prep) transitionable(i int) bool { return q.dmax[i] > 0 && q.muT[i] > 0 }

// fit returns how many instances of operator o fit in cpu free cores, mem free MiB and
// free[k] free devices of each accelerator class devs[k] (an instance takes its devices
// from one class it accepts).
func fit(o *Operator, cpu, mem float64, devs []Device, free []int) int {
	best := fitPools(o, cpu, mem)
	if o.GPUs > 0 {
		n := 0
		for k, d := range devs {
			if accepts(o, d) {
				n += max(free[k], 0) / o.GPUs
			}
		}
		best = min(best, n)
	}
	return max(best, 0)
}

// fitPools returns how many instances of operator o fit in cpu free cores and mem free
// MiB (math.MaxInt32 when o needs neither; negative when a pool is overdrawn).
func fitPools(o *Operator, cpu, mem float64) int {
	best := math.MaxInt32
	if o.CPU > 0 {
		best = min(best, int(math.Floor(cpu/o.CPU+1e-9)))
	}
	if o.MemMB > 0 {
		best = min(best, int(math.Floor(mem/o.MemMB+1e-9)))
	}
	return best
}

// fitNode returns how many instances of o fit on the empty node nd.
func fitNode(o *Operator, nd *Node) int {
	devs := nodeDevices(nd)
	return fit(o, nd.CPU, nd.MemMB, devs, deviceCounts(devs))
}

// MinEgressBps is the least egress (bytes/s) a node counts with: a node with less, e.g.
// the float residue of a link others fill (a subtraction leaving 1e-7 B/s), is planned
// as one without egress (EgressBps 0, every boundary local). Its rows would otherwise
// carry coefficients of bytes per record over that residue (1e15 and more), which HiGHS
// refuses, and no record fits through such a link anyway.
const MinEgressBps = 1

func newPrep(p *Problem) (*prep, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	p = withoutResidueLinks(p)
	N, M := len(p.Operators), len(p.Nodes)
	q := &prep{p: p, N: N, M: M,
		mu: make([]float64, N), muC: make([]float64, N), muT: make([]float64, N),
		K: make([][]int, N), Ki: make([]int, N), cur: make([][]int, N), R: make([]int, N),
		dmax: make([]int, N), ub: make([][]int, N), lim: make([]int, N),
		devs: make([][]Device, M), elig: make([][][]int, N)}
	q.poolC, q.poolM, q.poolG = p.pooled()
	q.groups = p.deviceGroups()
	q.devOff = make([]int, M)
	for n := range p.Nodes {
		q.devs[n] = nodeDevices(&p.Nodes[n])
		q.devOff[n] = q.nClass
		q.nClass += len(q.devs[n])
	}
	W := p.Params.WindowSec
	if W == 0 {
		W = DefaultWindowSec
	}
	for i := range p.Operators {
		o := &p.Operators[i]
		q.mu[i] = o.Capacity
		if o.Candidate != nil {
			q.muC[i] = o.Candidate.Capacity
			q.muT[i] = o.Candidate.Capacity * math.Max(0, 1-o.Candidate.ColdStartSec/W)
		}
		if o.GPUs > 0 {
			q.gpu = true
			q.elig[i] = make([][]int, M)
			for n := range M {
				for k, d := range q.devs[n] {
					if accepts(o, d) {
						q.elig[i][n] = append(q.elig[i][n], k)
					}
				}
			}
		}
		q.K[i], q.cur[i], q.ub[i] = make([]int, M), make([]int, M), make([]int, M)
		old := 0
		for n := range p.Nodes {
			if p.Current != nil {
				pl := p.Current[i][n]
				q.K[i][n] = pl.Candidate
				q.cur[i][n] = pl.Total()
				q.Ki[i] += pl.Candidate
				old += pl.Current
			}
			q.ub[i][n] = max(fitNode(o, &p.Nodes[n]), q.K[i][n])
			q.lim[i] += q.ub[i][n]
		}
		if o.MaxInstances > 0 {
			q.lim[i] = min(q.lim[i], o.MaxInstances)
		}
		q.R[i] = old
		if o.Candidate != nil {
			q.dmax[i] = old
			if p.Params.MaxBatch > 0 {
				q.dmax[i] = min(old, p.Params.MaxBatch)
			}
		}
	}
	q.contention()
	q.acc = make([]int, N)
	for i := range p.Operators {
		q.acc[i] = accepted(&p.Operators[i], q.devs)
	}
	q.pickiest = pickiestFirst(q.acc)
	q.packs = q.packRows()
	q.Tub = q.aggregateBound()
	q.alpha, q.beta = p.Params.NetWeight, p.Params.MigrationWeight
	scale := q.Tub
	if scale <= 0 {
		scale = 1
	}
	// egress is modelled in units of bref so that the tie-breaking costs stay well above
	// the solver's optimality tolerances (a cost of 1e-10 per byte/s would be ignored)
	for _, nd := range p.Nodes {
		if !math.IsInf(nd.EgressBps, 1) {
			q.bref = math.Max(q.bref, nd.EgressBps)
		}
	}
	if q.bref == 0 {
		q.bref = q.trafficScale()
	}
	if q.bref == 0 {
		q.bref = 1
	}
	if q.alpha == 0 {
		q.alpha = netShare * scale / q.bref
	}
	if q.beta == 0 {
		// redeploying a whole Tub-sized plan once costs migrationShare of the throughput
		cfull := 0.0
		for i, o := range p.Operators {
			P, _, _ := q.minInstances(i, q.Tub, math.MaxInt32)
			cfull += (o.LaunchSec + o.TerminateSec) * float64(max(P, 1))
		}
		if cfull > 0 {
			q.beta = migrationShare * scale / cfull
		}
	}
	return q, nil
}

// contention sets kinds, cuse and cfree from the operators' Contention and the nodes'
// Pressure.
func (q *prep) contention() {
	p := q.p
	for _, o := range p.Operators {
		for _, c := range o.Contention {
			if !slices.Contains(q.kinds, c.Kind) {
				q.kinds = append(q.kinds, c.Kind)
			}
		}
	}
	sort.Strings(q.kinds)
	q.cuse, q.cfree = make([][]float64, len(q.kinds)), make([][]float64, len(q.kinds))
	for k, kind := range q.kinds {
		q.cuse[k], q.cfree[k] = make([]float64, q.N), make([]float64, q.M)
		for i, o := range p.Operators {
			for _, c := range o.Contention {
				if c.Kind == kind {
					q.cuse[k][i] = c.Weight / o.Capacity
				}
			}
		}
		for n, nd := range p.Nodes {
			q.cfree[k][n] = math.Max(0, 1-nd.Pressure[kind])
		}
	}
}

// contentionLoad returns, for routing w (shares of T per operator and node), the use of
// kinds[k] on node n: sum_i cuse[k][i] * A_i * w[i][n].
func (q *prep) contentionLoad(k, n int, w [][]float64) float64 {
	l := 0.0
	for i, c := range q.cuse[k] {
		if c > 0 {
			l += c * q.p.Operators[i].Amplification * w[i][n]
		}
	}
	return l
}

// trafficScale is the total inter-operator traffic at T = Tub, used when no node has a
// finite egress bound.
func (q *prep) trafficScale() float64 {
	s := 0.0
	for i := 0; i+1 < q.N; i++ {
		s += q.p.Operators[i+1].Amplification * q.p.Operators[i].OutputBytes * q.Tub
	}
	return s
}

// nodeCap is the input rate operator i can sustain on node n with x instances of which d
// transition this round (the per-node form of Eq. 13).
func (q *prep) nodeCap(i, n, x, d int) float64 {
	k := q.K[i][n]
	return q.muC[i]*float64(k) + q.muT[i]*float64(d) + q.mu[i]*float64(x-k-d)
}

// withoutResidueLinks returns p, or a copy of it whose nodes with egress below
// MinEgressBps have none (EgressBps 0).
func withoutResidueLinks(p *Problem) *Problem {
	if !slices.ContainsFunc(p.Nodes, residueLink) {
		return p
	}
	cp := *p
	cp.Nodes = slices.Clone(p.Nodes)
	for n := range cp.Nodes {
		if residueLink(cp.Nodes[n]) {
			cp.Nodes[n].EgressBps = 0
		}
	}
	return &cp
}

// residueLink reports whether nd has some egress, but less than MinEgressBps.
func residueLink(nd Node) bool { return nd.EgressBps > 0 && nd.EgressBps < MinEgressBps }
