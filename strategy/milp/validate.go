package milp

import (
	"fmt"
	"math"
)

// Validation tolerances: rates and bandwidths are compared with a relative tolerance of
// relTol plus an absolute slack of absTol.
const (
	relTol = 1e-6
	absTol = 1e-6
)

// Validate checks s against every constraint of p, independently of how s was computed
// (it re-derives Eq. 11 and all sums from p): integrality and non-negativity, no rollback
// of already-transitioned instances (23), transition bounds (24)-(26), node CPU and memory
// pools (15)-(16), accelerators (17: an exact search for an assignment of every instance
// to one device class it accepts), per-node capacity of the routed rates (13), flow
// conservation (18)-(19: every operator processes A_i*T in total), egress bandwidth (20),
// migration accounting (21)-(22), the reported objective (10) and the contended
// resources of every node (Operator.Contention).
func Validate(p *Problem, s *Solution) error {
	if err := p.Check(); err != nil {
		return err
	}
	if s == nil {
		return fmt.Errorf("milp: validate: nil solution")
	}
	N, M := len(p.Operators), len(p.Nodes)
	if len(s.PerNode) != N || len(s.Rate) != N || len(s.Transitions) != N || len(s.Launches) != N ||
		len(s.Terminations) != N || len(s.Egress) != M {
		return fmt.Errorf("milp: validate: solution dimensions do not match %d operators x %d nodes", N, M)
	}
	T := s.Throughput
	if math.IsNaN(T) || math.IsInf(T, 0) || T < 0 {
		return fmt.Errorf("milp: validate: throughput %v is not finite and >= 0", T)
	}
	W := p.Params.WindowSec
	if W == 0 {
		W = DefaultWindowSec
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= relTol*math.Max(math.Abs(a), math.Abs(b))+absTol }
	usedC, usedM := make([]float64, M), make([]float64, M)
	cost := 0.0
	rates := make([][]float64, N)
	for i, o := range p.Operators {
		if len(s.PerNode[i]) != M || len(s.Rate[i]) != M {
			return fmt.Errorf("milp: validate: operator %s: row length mismatch", o.Name)
		}
		var muT float64
		if o.Candidate != nil {
			muT = o.Candidate.Capacity * math.Max(0, 1-o.Candidate.ColdStartSec/W)
		}
		old, trans, launch, term, total := 0, 0, 0, 0, 0.0
		for n := range M {
			pl := s.PerNode[i][n]
			var cur Placement
			if p.Current != nil {
				cur = p.Current[i][n]
			}
			old += cur.Current
			if pl.Current < 0 || pl.Candidate < 0 {
				return fmt.Errorf("milp: validate: %s on %s: negative count", o.Name, p.Nodes[n].Name)
			}
			d := pl.Candidate - cur.Candidate
			if d < 0 {
				return fmt.Errorf("milp: validate: %s on %s: %d already-transitioned instances rolled back or stopped (Eq. 23)",
					o.Name, p.Nodes[n].Name, -d)
			}
			if d > 0 && o.Candidate == nil {
				return fmt.Errorf("milp: validate: %s on %s: transition without a candidate configuration", o.Name, p.Nodes[n].Name)
			}
			trans += d
			x := pl.Total()
			if dx := x - cur.Total(); dx > 0 {
				launch += dx
			} else {
				term -= dx
			}
			usedC[n] += float64(x) * o.CPU
			usedM[n] += float64(x) * o.MemMB
			capn := float64(pl.Current)*o.Capacity + float64(d)*muT
			if cur.Candidate > 0 {
				capn += float64(cur.Candidate) * o.Candidate.Capacity
			}
			r := s.Rate[i][n]
			if math.IsNaN(r) || r < -absTol {
				return fmt.Errorf("milp: validate: %s on %s: rate %v", o.Name, p.Nodes[n].Name, r)
			}
			if r > capn*(1+relTol)+absTol {
				return fmt.Errorf("milp: validate: %s on %s: rate %.6g exceeds capacity %.6g (Eq. 13)", o.Name, p.Nodes[n].Name, r, capn)
			}
			total += r
		}
		par := 0
		for _, pl := range s.PerNode[i] {
			par += pl.Total()
		}
		if !o.admits(par) {
			return fmt.Errorf("milp: validate: %s: %d instances outside MinInstances %d / MaxInstances %d", o.Name, par, o.MinInstances, o.MaxInstances)
		}
		if trans != s.Transitions[i] {
			return fmt.Errorf("milp: validate: %s: Transitions %d, placements imply %d", o.Name, s.Transitions[i], trans)
		}
		if trans > old {
			return fmt.Errorf("milp: validate: %s: %d transitions exceed the %d old instances (Eq. 24)", o.Name, trans, old)
		}
		if p.Params.MaxBatch > 0 && trans > p.Params.MaxBatch {
			return fmt.Errorf("milp: validate: %s: %d transitions exceed MaxBatch %d (Eq. 25)", o.Name, trans, p.Params.MaxBatch)
		}
		if launch != s.Launches[i] || term != s.Terminations[i] {
			return fmt.Errorf("milp: validate: %s: launches/terminations %d/%d, placements imply %d/%d (Eq. 21)",
				o.Name, s.Launches[i], s.Terminations[i], launch, term)
		}
		if !near(total, o.Amplification*T) {
			return fmt.Errorf("milp: validate: %s: routed rate %.9g != A_i*T = %.9g (flow conservation)", o.Name, total, o.Amplification*T)
		}
		cost += o.LaunchSec*float64(launch) + o.TerminateSec*float64(term) + (o.LaunchSec+o.TerminateSec)*float64(trans)
		rates[i] = s.Rate[i]
	}
	if err := validateContention(p, s); err != nil {
		return err
	}
	peak := 0.0
	for n, nd := range p.Nodes {
		if usedC[n] > nd.CPU+1e-9 || usedM[n] > nd.MemMB+1e-9 {
			return fmt.Errorf("milp: validate: node %s over-committed: cpu %.6g/%.6g mem %.6g/%.6g (Eqs. 15-16)",
				nd.Name, usedC[n], nd.CPU, usedM[n], nd.MemMB)
		}
		if !devicesFit(p.Operators, &p.Nodes[n], func(i int) int { return s.PerNode[i][n].Total() }) {
			return fmt.Errorf("milp: validate: node %s: the accelerator instances cannot be assigned to device classes they accept, each taking its devices from one class (Eq. 17)",
				nd.Name)
		}
		e := 0.0
		for i := 0; i+1 < N; i++ {
			// output records of operator i on n, in records of operator i+1's input
			out := rates[i][n] / p.Operators[i].Amplification * p.Operators[i+1].Amplification
			if ex := out - rates[i+1][n]; ex > 0 {
				e += ex * p.Operators[i].OutputBytes
			}
		}
		if e > nd.EgressBps*(1+relTol)+absTol {
			return fmt.Errorf("milp: validate: node %s egress %.6g B/s exceeds %.6g (Eq. 20)", nd.Name, e, nd.EgressBps)
		}
		if !near(e, s.Egress[n]) {
			return fmt.Errorf("milp: validate: node %s: reported egress %.9g, rates imply %.9g", nd.Name, s.Egress[n], e)
		}
		peak = math.Max(peak, e)
	}
	if !near(peak, s.PeakEgress) {
		return fmt.Errorf("milp: validate: PeakEgress %.9g, egress implies %.9g", s.PeakEgress, peak)
	}
	if !near(cost, s.MigrationCost) {
		return fmt.Errorf("milp: validate: MigrationCost %.9g, placements imply %.9g (Eq. 22)", s.MigrationCost, cost)
	}
	return nil
}

// validateContention checks that on every node the routed rates use at most what the node
// has left of each resource kind the operators declare (Contention): sum_i Weight_i /
// Capacity_i * Rate_in <= 1 - Pressure_n.
func validateContention(p *Problem, s *Solution) error {
	for n, nd := range p.Nodes {
		use := map[string]float64{}
		var kinds []string
		for i, o := range p.Operators {
			for _, c := range o.Contention {
				if _, ok := use[c.Kind]; !ok {
					kinds = append(kinds, c.Kind)
				}
				use[c.Kind] += c.Weight / o.Capacity * s.Rate[i][n]
			}
		}
		for _, k := range kinds {
			free := math.Max(0, 1-nd.Pressure[k])
			if use[k] > free*(1+relTol)+absTol {
				return fmt.Errorf("milp: validate: node %s: contended resource %q used %.9g, the node has %.9g left (Contention)",
					nd.Name, k, use[k], free)
			}
		}
	}
	return nil
}
