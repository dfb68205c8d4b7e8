// Package plain is the benchmark peer of Trident's scheduling MILP: a plain formulation of
// the same problem (every constraint that milp.Validate checks, the objective of Eq. 10)
// written independently of strategy/milp's model, solved by the same HiGHS through the
// gohighs API with no start, no symmetry rows, no aggregate cuts and no bound of its own.
//
// Variables per operator i and node n: instances on the current configuration a_in and
// instances switching to the candidate this round b_in (integers; the already-transitioned
// K_in are constants), their accelerator class split where an operator accepts several
// classes of a node (integers), the input rate r_in (records/s of i's own input), the
// export of boundary i -> i+1 o_in (records/s of i+1's input leaving n), launches s_in and
// terminations t_in; per node the egress e_n (in units of its own bound); the throughput T
// and the peak egress E (in units of the largest finite node egress).
//
// Params.NetWeight and MigrationWeight are used as given (0 drops the term, unlike milp's
// defaults): set both when comparing objectives with milp.
package plain

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/bartolsthoorn/gohighs/highs"
	"github.com/trident-sched/trident/strategy/milp"
)

// Options of one solve.
type Options struct {
	// RelGap is HiGHS's mip_rel_gap (default 0.01).
	RelGap float64
	// TimeLimit is HiGHS's time_limit (default 10 s).
	TimeLimit time.Duration
	// Threads for HiGHS (default 1).
	Threads int
}

// Result is what HiGHS returned.
type Result struct {
	// Objective is HiGHS's incumbent objective, T - alpha*E - beta*C (NaN without one).
	Objective float64
	// Bound is HiGHS's dual bound on the objective (+Inf when none is known).
	Bound float64
	// Throughput is the incumbent's T.
	Throughput float64
	// PeakEgress (bytes/s) and MigrationCost (s) are the incumbent's E and C.
	PeakEgress, MigrationCost float64
	// Instances[i][n] is the incumbent's placement (current plus candidate instances).
	Instances [][]int
	// Status is HiGHS's model status.
	Status string
	// Time is the wall-clock time of the solve, model building included.
	Time time.Duration
}

// HasSolution reports whether HiGHS returned an incumbent.
func (r *Result) HasSolution() bool { return !math.IsNaN(r.Objective) }

// rows is a row-wise sparse matrix under construction.
type rows struct {
	lo, up []float64
	start  []int
	index  []int
	value  []float64
}

func (m *rows) add(lo, up float64, idx []int, val []float64) {
	if len(m.start) == 0 {
		m.start = append(m.start, 0)
	}
	for k, j := range idx {
		if val[k] != 0 {
			m.index = append(m.index, j)
			m.value = append(m.value, val[k])
		}
	}
	m.start = append(m.start, len(m.index))
	m.lo = append(m.lo, lo)
	m.up = append(m.up, up)
}

// cols are the columns under construction.
type cols struct {
	cost, lo, up []float64
	kind         []highs.VariableType
}

func (c *cols) add(cost, lo, up float64, integer bool) int {
	c.cost = append(c.cost, cost)
	c.lo = append(c.lo, lo)
	c.up = append(c.up, up)
	k := highs.Continuous
	if integer {
		k = highs.Integer
	}
	c.kind = append(c.kind, k)
	return len(c.cost) - 1
}

// Solve builds the plain formulation of p and solves it with HiGHS. HiGHS cannot be
// interrupted through gohighs: when ctx ends first, Solve returns ctx's error at once and
// the abandoned solve stops at its own time limit.
func Solve(ctx context.Context, p *milp.Problem, opts Options) (*Result, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("plain: %w", err)
	}
	if opts.RelGap <= 0 {
		opts.RelGap = 0.01
	}
	if opts.TimeLimit <= 0 {
		opts.TimeLimit = 10 * time.Second
	}
	if opts.Threads <= 0 {
		opts.Threads = 1
	}
	type out struct {
		r   *Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		r, err := solve(p, opts)
		done <- out{r, err}
	}()
	select {
	case o := <-done:
		return o.r, o.err
	case <-ctx.Done():
		return nil, fmt.Errorf("plain: %w", ctx.Err())
	}
}

func solve(p *milp.Problem, opts Options) (*Result, error) {
	start := time.Now()
	N, M := len(p.Operators), len(p.Nodes)
	inf := math.Inf(1)
	W := p.Params.WindowSec
	if W == 0 {
		W = milp.DefaultWindowSec
	}
	alpha, beta := p.Params.NetWeight, p.Params.MigrationWeight
	var c cols
	var r rows
	// the peak egress is measured in units of the largest finite node egress, or, when
	// every node is unlimited, of the pipeline's traffic per record/s of throughput: in
	// bytes/s, alpha is ~1e-14 and HiGHS ignores the term
	unit := 0.0
	for _, nd := range p.Nodes {
		if !math.IsInf(nd.EgressBps, 1) {
			unit = math.Max(unit, nd.EgressBps)
		}
	}
	if unit == 0 {
		for i := 0; i+1 < N; i++ {
			unit += p.Operators[i+1].Amplification * p.Operators[i].OutputBytes
		}
	}
	unit = math.Max(unit, 1)
	T := c.add(1, 0, inf, false)
	E := c.add(-alpha*unit, 0, inf, false)
	var costCols []int // columns of C with their seconds
	var costSec []float64
	cur := func(i, n int) milp.Placement {
		if p.Current == nil {
			return milp.Placement{}
		}
		return p.Current[i][n]
	}
	devices := func(nd *milp.Node) []milp.Device {
		if len(nd.Devices) > 0 {
			return nd.Devices
		}
		if nd.GPUs > 0 {
			return []milp.Device{{Count: nd.GPUs}}
		}
		return nil
	}
	accepts := func(o *milp.Operator, d milp.Device) bool {
		return d.Vendor == o.GPUVendor && (o.GPUMemMB == 0 || d.MemMB >= o.GPUMemMB) && (len(o.GPUModels) == 0 || slices.Contains(o.GPUModels, d.Model))
	}
	a, b, rate, exp := make([][]int, N), make([][]int, N), make([][]int, N), make([][]int, N)
	for i := range N {
		o := &p.Operators[i]
		a[i], b[i], rate[i], exp[i] = make([]int, M), make([]int, M), make([]int, M), make([]int, M)
		old := 0
		for n := range M {
			old += cur(i, n).Current
		}
		batch := old
		if p.Params.MaxBatch > 0 {
			batch = min(batch, p.Params.MaxBatch)
		}
		var muT float64
		if o.Candidate != nil {
			muT = o.Candidate.Capacity * math.Max(0, 1-o.Candidate.ColdStartSec/W)
		}
		var bs []int
		for n := range M {
			nd := &p.Nodes[n]
			// instances of i alone on n
			room := math.Inf(1)
			if o.CPU > 0 {
				room = math.Min(room, math.Floor(nd.CPU/o.CPU+1e-9))
			}
			if o.MemMB > 0 {
				room = math.Min(room, math.Floor(nd.MemMB/o.MemMB+1e-9))
			}
			if o.GPUs > 0 {
				g := 0
				for _, d := range devices(nd) {
					if accepts(o, d) {
						g += d.Count / o.GPUs
					}
				}
				room = math.Min(room, float64(g))
			}
			K := float64(cur(i, n).Candidate)
			room = math.Max(0, room-K)
			a[i][n] = c.add(0, 0, room, true)
			b[i][n] = -1
			if o.Candidate != nil && batch > 0 {
				b[i][n] = c.add(-beta*(o.LaunchSec+o.TerminateSec), 0, math.Min(room, float64(batch)), true)
				bs = append(bs, b[i][n])
				costCols, costSec = append(costCols, b[i][n]), append(costSec, o.LaunchSec+o.TerminateSec)
			}
			rate[i][n] = c.add(0, 0, inf, false)
			// capacity: r <= mu a + muT b + muC K
			capIdx, capVal := []int{rate[i][n], a[i][n]}, []float64{1, -o.Capacity}
			if b[i][n] >= 0 {
				capIdx, capVal = append(capIdx, b[i][n]), append(capVal, -muT)
			}
			muCK := 0.0
			if o.Candidate != nil {
				muCK = o.Candidate.Capacity * K
			}
			r.add(-inf, muCK, capIdx, capVal)
			// launches s >= x - cur and terminations t >= cur - x, x = a + b + K
			cu := float64(cur(i, n).Total())
			s := c.add(-beta*o.LaunchSec, 0, inf, false)
			t := c.add(-beta*o.TerminateSec, 0, inf, false)
			costCols, costSec = append(costCols, s, t), append(costSec, o.LaunchSec, o.TerminateSec)
			idx, val := []int{s, a[i][n]}, []float64{1, -1}
			if b[i][n] >= 0 {
				idx, val = append(idx, b[i][n]), append(val, -1)
			}
			r.add(K-cu, inf, idx, val)
			idx, val = []int{t, a[i][n]}, []float64{1, 1}
			if b[i][n] >= 0 {
				idx, val = append(idx, b[i][n]), append(val, 1)
			}
			r.add(cu-K, inf, idx, val)
		}
		if len(bs) > 0 { // transitions this round: at most the old instances and the batch cap
			ones := make([]float64, len(bs))
			for k := range ones {
				ones[k] = 1
			}
			r.add(-inf, float64(batch), bs, ones)
		}
		// every operator serves A_i T: sum_n r = A_i T
		idx, val := []int{T}, []float64{-o.Amplification}
		for n := range M {
			idx, val = append(idx, rate[i][n]), append(val, 1)
		}
		r.add(0, 0, idx, val)
		// scaling policy on the parallelism sum_n (a + b + K)
		K := 0
		idx, val = nil, nil
		for n := range M {
			K += cur(i, n).Candidate
			idx, val = append(idx, a[i][n]), append(val, 1)
			if b[i][n] >= 0 {
				idx, val = append(idx, b[i][n]), append(val, 1)
			}
		}
		hi := inf
		if o.MaxInstances > 0 {
			hi = float64(o.MaxInstances - K)
		}
		r.add(float64(o.MinInstances-K), hi, idx, val)
	}
	// nodes: cores, memory, accelerator classes, egress
	for n := range M {
		nd := &p.Nodes[n]
		var pinC, pinM float64
		ci, cv, mi, mv := []int{}, []float64{}, []int{}, []float64{}
		for i := range N {
			o := &p.Operators[i]
			K := float64(cur(i, n).Candidate)
			pinC += K * o.CPU
			pinM += K * o.MemMB
			for _, j := range []int{a[i][n], b[i][n]} {
				if j >= 0 {
					ci, cv = append(ci, j), append(cv, o.CPU)
					mi, mv = append(mi, j), append(mv, o.MemMB/1024)
				}
			}
		}
		r.add(-inf, nd.CPU-pinC, ci, cv)
		r.add(-inf, (nd.MemMB-pinM)/1024, mi, mv)
		devs := devices(nd)
		use := make([][]int, len(devs)) // columns of instances per class
		coef := make([][]float64, len(devs))
		pinned := make([]float64, len(devs))
		for i := range N {
			o := &p.Operators[i]
			if o.GPUs == 0 {
				continue
			}
			var ok []int
			for k, d := range devs {
				if accepts(o, d) {
					ok = append(ok, k)
				}
			}
			if len(ok) == 0 {
				continue // a's upper bound is 0 here
			}
			// instances of i on n (pinned included) split over the accepted classes
			split := make([]int, len(ok))
			idx, val := []int{a[i][n]}, []float64{1}
			if b[i][n] >= 0 {
				idx, val = append(idx, b[i][n]), append(val, 1)
			}
			K := float64(cur(i, n).Candidate)
			if len(ok) == 1 {
				use[ok[0]] = append(use[ok[0]], idx...)
				for range idx {
					coef[ok[0]] = append(coef[ok[0]], float64(o.GPUs))
				}
				pinned[ok[0]] += K * float64(o.GPUs)
				continue
			}
			for k, cl := range ok {
				split[k] = c.add(0, 0, inf, true)
				use[cl] = append(use[cl], split[k])
				coef[cl] = append(coef[cl], float64(o.GPUs))
				idx, val = append(idx, split[k]), append(val, -1)
			}
			r.add(-K, -K, idx, val) // a + b + K = sum of the split
		}
		for k, d := range devs {
			r.add(-inf, float64(d.Count)-pinned[k], use[k], coef[k])
		}
		// exports o_in >= r_in * A_{i+1}/A_i - r_(i+1)n and egress e_n = sum_i bytes_i o_in,
		// e_n in units of the node's own bound (of unit when unlimited) so that HiGHS's
		// feasibility tolerance stays relative to it; without egress, nothing leaves n
		own := nd.EgressBps
		if math.IsInf(own, 1) {
			own = unit
		}
		var eIdx []int
		var eVal []float64
		for i := 0; i+1 < N; i++ {
			bytes := p.Operators[i].OutputBytes
			if bytes == 0 {
				continue
			}
			f := p.Operators[i+1].Amplification / p.Operators[i].Amplification
			if nd.EgressBps == 0 {
				r.add(-inf, 0, []int{rate[i][n], rate[i+1][n]}, []float64{f, -1})
				continue
			}
			exp[i][n] = c.add(0, 0, inf, false)
			r.add(0, inf, []int{exp[i][n], rate[i][n], rate[i+1][n]}, []float64{1, -f, 1})
			eIdx, eVal = append(eIdx, exp[i][n]), append(eVal, bytes/own)
		}
		if len(eIdx) > 0 {
			eUp := 1.0
			if math.IsInf(nd.EgressBps, 1) {
				eUp = inf
			}
			e := c.add(0, 0, eUp, false)
			r.add(-inf, 0, append(eIdx, e), append(eVal, -1))
			r.add(-inf, 0, []int{e, E}, []float64{own / unit, -1})
		}
	}
	hs, err := highs.NewSolver()
	if err != nil {
		return nil, fmt.Errorf("plain: %w", err)
	}
	defer hs.Close()
	for _, set := range []error{
		hs.SetBoolOption("output_flag", false),
		hs.SetIntOption("threads", opts.Threads),
		hs.SetIntOption("random_seed", 1),
		hs.SetFloatOption("mip_rel_gap", opts.RelGap),
		hs.SetFloatOption("time_limit", opts.TimeLimit.Seconds()),
	} {
		if set != nil {
			return nil, fmt.Errorf("plain: option: %w", set)
		}
	}
	if err := hs.PassModel(len(c.cost), len(r.lo), c.cost, c.lo, c.up, r.lo, r.up, r.start, r.index, r.value, c.kind, true, 0); err != nil {
		return nil, fmt.Errorf("plain: pass model: %w", err)
	}
	sol, err := hs.Run()
	if err != nil {
		return nil, fmt.Errorf("plain: run: %w", err)
	}
	res := &Result{Objective: math.NaN(), Bound: inf, Throughput: math.NaN(), Status: sol.Status.String()}
	if v, err := hs.GetFloatInfo("mip_dual_bound"); err == nil && !math.IsNaN(v) && math.Abs(v) < 1e30 {
		res.Bound = v
	}
	if ps, err := hs.GetIntInfo("primal_solution_status"); err == nil && ps == 2 && len(sol.ColValues) == len(c.cost) {
		res.Objective = sol.Objective
		res.Throughput = sol.ColValues[T]
		res.PeakEgress = sol.ColValues[E] * unit
		for k, j := range costCols {
			res.MigrationCost += costSec[k] * sol.ColValues[j]
		}
		res.Instances = make([][]int, N)
		for i := range N {
			res.Instances[i] = make([]int, M)
			for n := range M {
				x := sol.ColValues[a[i][n]] + float64(cur(i, n).Candidate)
				if b[i][n] >= 0 {
					x += sol.ColValues[b[i][n]]
				}
				res.Instances[i][n] = int(math.Round(x))
			}
		}
	}
	if sol.Status == highs.ModelStatusInfeasible {
		return res, errors.New("plain: HiGHS reports the model infeasible")
	}
	res.Time = time.Since(start)
	return res, nil
}
