package milp_test

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/gen"
)

// tiny builds a small random instance (3-4 operators, 2-3 nodes) that glpsol solves exactly.
func tiny(seed uint64, withCurrent bool) *milp.Problem {
	rng := rand.New(rand.NewPCG(seed, 99))
	nOps, nNodes := 3+rng.IntN(2), 2+rng.IntN(2)
	p := &milp.Problem{Params: milp.Params{WindowSec: 300, MaxBatch: 2}}
	amp := 1.0
	for i := range nOps {
		o := milp.Operator{
			Name: "op" + strconv.Itoa(i), CPU: float64(1 + rng.IntN(3)), MemMB: float64(512 * (1 + rng.IntN(4))),
			Capacity: 5 + 20*rng.Float64(), Amplification: amp, OutputBytes: 1e5 * (1 + 9*rng.Float64()),
			LaunchSec: 5 + 5*rng.Float64(), TerminateSec: 1 + rng.Float64(),
		}
		if i == 1 {
			o.GPUs = 1
		}
		if i == nOps-1 {
			o.OutputBytes = 0
		}
		p.Operators = append(p.Operators, o)
		amp *= 0.5 + rng.Float64()
	}
	for n := range nNodes {
		p.Nodes = append(p.Nodes, milp.Node{Name: "n" + strconv.Itoa(n), CPU: float64(6 + rng.IntN(6)),
			MemMB: 8192, GPUs: 1 + rng.IntN(2), EgressBps: 4e6 + 4e6*rng.Float64()})
	}
	if seed >= 7 { // identical nodes: exercises the symmetry-breaking rows
		for n := range p.Nodes {
			name := p.Nodes[n].Name
			p.Nodes[n] = p.Nodes[0]
			p.Nodes[n].Name = name
		}
		p.Nodes = append(p.Nodes, p.Nodes[0])
		p.Nodes[len(p.Nodes)-1].Name = "extra"
	}
	if withCurrent {
		p.Operators[0].Candidate = &milp.Candidate{Capacity: p.Operators[0].Capacity * 1.4, ColdStartSec: 60}
		p.Current = make(milp.Deployment, nOps)
		for i := range p.Current {
			p.Current[i] = make([]milp.Placement, len(p.Nodes))
		}
		p.Current[0][0] = milp.Placement{Current: 1, Candidate: 1}
		p.Current[1][len(p.Nodes)-1] = milp.Placement{Current: 1}
		p.Current[2][0] = milp.Placement{Current: 1}
	}
	return p
}

func mustSolve(t *testing.T, s milp.Solver, p *milp.Problem, o milp.Options) *milp.Solution {
	t.Helper()
	sol, err := s.Solve(context.Background(), p, o)
	if err != nil {
		t.Fatalf("solve: %v", err)
	}
	if err := milp.Validate(p, sol); err != nil {
		t.Fatalf("returned solution fails the checker: %v", err)
	}
	return sol
}

var (
	glpsolObj = regexp.MustCompile(`Objective:\s+obj\s+=\s+(\S+)`)
	cbcObj    = regexp.MustCompile(`Objective value:\s+(\S+)`)
)

// TestCrossCheckReferenceSolvers solves small instances with HiGHS (full model: warm start,
// aggregate bound and symmetry cuts) and checks the optimum against glpsol and cbc reading
// the plain model (no extra cuts) from MPS. Tolerance: 1e-6 relative + 1e-7 absolute.
func TestCrossCheckReferenceSolvers(t *testing.T) {
	tools := map[string]bool{}
	for _, tool := range []string{"glpsol", "cbc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if testing.Short() {
				t.Logf("%s not installed; skipped under -short", tool)
				continue
			}
			t.Fatalf("%s not installed (apt-get install -y glpk-utils coinor-cbc): %v", tool, err)
		}
		tools[tool] = true
	}
	if len(tools) == 0 {
		t.Skip("no reference solver under -short")
	}
	dir := t.TempDir()
	for seed := uint64(1); seed <= 8; seed++ {
		p := tiny(seed, seed%2 == 0)
		sol := mustSolve(t, milp.HiGHS{}, p, milp.Options{RelGap: 1e-9, TimeLimit: 30 * time.Second})
		var buf bytes.Buffer
		offset, err := milp.WriteMPS(&buf, p, milp.Options{NoBound: true})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "m"+strconv.FormatUint(seed, 10)+".mps")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		for tool := range tools {
			var out []byte
			var re *regexp.Regexp
			if tool == "glpsol" {
				rep := path + ".glpk.txt"
				if b, err := exec.Command("glpsol", "--freemps", path, "--tmlim", "60", "-o", rep).CombinedOutput(); err != nil {
					t.Fatalf("glpsol: %v\n%s", err, b)
				}
				out, _ = os.ReadFile(rep)
				re = glpsolObj
			} else {
				b, err := exec.Command("cbc", path, "-sec", "60", "-ratio", "0", "-allowableGap", "0", "-solve").CombinedOutput()
				if err != nil {
					t.Fatalf("cbc: %v\n%s", err, b)
				}
				out, re = b, cbcObj
			}
			mt := re.FindSubmatch(out)
			if mt == nil {
				t.Fatalf("seed %d: no objective in %s output:\n%s", seed, tool, out)
			}
			v, err := strconv.ParseFloat(string(mt[1]), 64)
			if err != nil {
				t.Fatal(err)
			}
			ref := offset - v
			if math.Abs(ref-sol.Objective) > 1e-6*math.Abs(ref)+1e-7 {
				t.Errorf("seed %d: %s optimum %.9g, HiGHS %.9g (T=%.6g)", seed, tool, ref, sol.Objective, sol.Throughput)
			} else {
				t.Logf("seed %d: %s optimum %.9g = HiGHS %.9g", seed, tool, ref, sol.Objective)
			}
		}
	}
}

// oneOp is a single-operator pipeline on one 4-core node, fully deployed on the current
// configuration (capacity 10/s per instance): the operator is the bottleneck.
func oneOp(candCap, coldStart float64) *milp.Problem {
	return &milp.Problem{
		Operators: []milp.Operator{{Name: "ocr", CPU: 1, MemMB: 1024, Capacity: 10, Amplification: 1,
			LaunchSec: 10, TerminateSec: 2, Candidate: &milp.Candidate{Capacity: candCap, ColdStartSec: coldStart}}},
		Nodes:   []milp.Node{{Name: "a", CPU: 4, MemMB: 8192, EgressBps: 1e9}},
		Current: milp.Deployment{{{Current: 4}}},
		Params:  milp.Params{WindowSec: 300},
	}
}

// TestTransitionOnlyWhenDiscountedGainPositive: mu~ = mu^c (1 - tau/W) (Eq. 11).
func TestTransitionOnlyWhenDiscountedGainPositive(t *testing.T) {
	for _, tc := range []struct {
		name           string
		candCap, tau   float64
		wantTransition int
		wantT          float64
	}{
		{"gain", 15, 60, 4, 4 * 15 * (1 - 60.0/300)},              // mu~ = 12 > 10
		{"loss-cold-start", 15, 200, 0, 40},                       // mu~ = 5 < 10
		{"worse-candidate", 9, 0, 0, 40},                          // mu~ = 9 < 10
		{"marginal-gain", 10.8, 15, 4, 4 * 10.8 * (1 - 15.0/300)}, // mu~ = 10.26 > 10
		// mu~ = 10.07: 0.28 records/s more, less than the four restarts cost (beta*(L+Tm)
		// each: all four are the whole plan, 1 % of the throughput scale, 0.40)
		{"gain-below-restarts", 10.6, 15, 0, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range []milp.Solver{milp.HiGHS{}, milp.Greedy{}} {
				sol := mustSolve(t, s, oneOp(tc.candCap, tc.tau), milp.Options{RelGap: 1e-9})
				if sol.Transitions[0] != tc.wantTransition {
					t.Errorf("%T: transitions %d, want %d", s, sol.Transitions[0], tc.wantTransition)
				}
				if math.Abs(sol.Throughput-tc.wantT) > 1e-6 {
					t.Errorf("%T: T = %.9g, want %.9g", s, sol.Throughput, tc.wantT)
				}
			}
		})
	}
}

// TestNoRollbackAndBatchCap: already-transitioned instances stay, and at most MaxBatch
// more switch in one round.
func TestNoRollbackAndBatchCap(t *testing.T) {
	p := oneOp(15, 60)
	p.Current = milp.Deployment{{{Current: 3, Candidate: 1}}}
	p.Params.MaxBatch = 2
	sol := mustSolve(t, milp.HiGHS{}, p, milp.Options{RelGap: 1e-9})
	if got := sol.PerNode[0][0]; got.Candidate != 3 || got.Current != 1 {
		t.Fatalf("placement %+v, want 1 kept + 2 transitioning on the candidate and 1 current", got)
	}
	want := 15.0 + 2*12 + 10 // mu^c k + mu~ delta + mu rest
	if math.Abs(sol.Throughput-want) > 1e-6 {
		t.Fatalf("T = %.9g, want %.9g", sol.Throughput, want)
	}
	// a worse candidate mid-transition is still never rolled back
	p = oneOp(5, 60)
	p.Current = milp.Deployment{{{Current: 3, Candidate: 1}}}
	sol = mustSolve(t, milp.HiGHS{}, p, milp.Options{RelGap: 1e-9})
	if got := sol.PerNode[0][0]; got.Candidate != 1 || sol.Transitions[0] != 0 {
		t.Fatalf("placement %+v transitions %d, want the 1 transitioned instance kept and none added", got, sol.Transitions[0])
	}
}

// TestValidateRejects mutates a valid solution and expects the checker to object.
func TestValidateRejects(t *testing.T) {
	p := tiny(3, true)
	base := mustSolve(t, milp.HiGHS{}, p, milp.Options{})
	clone := func() *milp.Solution {
		s := *base
		s.PerNode = make(milp.Deployment, len(base.PerNode))
		s.Rate = make([][]float64, len(base.Rate))
		for i := range base.PerNode {
			s.PerNode[i] = append([]milp.Placement(nil), base.PerNode[i]...)
			s.Rate[i] = append([]float64(nil), base.Rate[i]...)
		}
		s.Transitions = append([]int(nil), base.Transitions...)
		s.Launches = append([]int(nil), base.Launches...)
		s.Terminations = append([]int(nil), base.Terminations...)
		s.Egress = append([]float64(nil), base.Egress...)
		return &s
	}
	cases := map[string]func(s *milp.Solution){
		"throughput above capacity": func(s *milp.Solution) { s.Throughput *= 1.5 },
		"node over-committed": func(s *milp.Solution) {
			s.PerNode[0][0].Current += 100
			s.Launches[0] += 100
		},
		"rollback": func(s *milp.Solution) { s.PerNode[0][0].Candidate = 0 },
		"rate above capacity": func(s *milp.Solution) {
			for n := range s.Rate[1] {
				s.Rate[1][n] = 0
			}
			s.Rate[1][0] = p.Operators[1].Amplification * s.Throughput
		},
		"egress misreported":    func(s *milp.Solution) { s.Egress[0] += 1e6 },
		"migration misreported": func(s *milp.Solution) { s.MigrationCost += 10 },
	}
	for name, mutate := range cases {
		s := clone()
		mutate(s)
		if err := milp.Validate(p, s); err == nil {
			t.Errorf("%s: checker accepted the mutated solution", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestCancelledContextStillValid: a cancelled context stops HiGHS at once, and the answer
// is still a checked, feasible plan.
func TestCancelledContextStillValid(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := tiny(5, true)
	sol, err := milp.HiGHS{}.Solve(ctx, p, milp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := milp.Validate(p, sol); err != nil {
		t.Fatal(err)
	}
	if sol.Throughput <= 0 {
		t.Fatalf("T = %v, want a positive fallback throughput", sol.Throughput)
	}
}

// TestBadInputNamesField checks that invalid input is refused with the field named.
func TestBadInputNamesField(t *testing.T) {
	p := tiny(1, false)
	p.Operators[1].Capacity = math.NaN()
	_, err := milp.HiGHS{}.Solve(context.Background(), p, milp.Options{})
	if err == nil || !regexp.MustCompile(`Capacity`).MatchString(err.Error()) {
		t.Fatalf("err = %v, want one naming Capacity", err)
	}
	p = tiny(1, false)
	p.Operators[2].CPU = 1000
	_, err = milp.Greedy{}.Solve(context.Background(), p, milp.Options{})
	if err == nil || !regexp.MustCompile(`op2.*fits on no node`).MatchString(err.Error()) {
		t.Fatalf("err = %v, want one naming op2 as fitting nowhere", err)
	}
	p = tiny(2, true)
	p.Current = p.Current[:1]
	if err := p.Check(); err == nil || !regexp.MustCompile(`Current`).MatchString(err.Error()) {
		t.Fatalf("err = %v, want one naming Current", err)
	}
}

// TestHiGHSImprovesNetworkBoundPlan: on a network-bound instance (hetero-net mix) the
// greedy plan is not within the gap; HiGHS must reach it and never return less than the
// greedy objective.
func TestHiGHSImprovesNetworkBoundPlan(t *testing.T) {
	p, err := gen.Generate(gen.Spec{Pipeline: "video", Nodes: 8, Mix: "hetero-net", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	g := mustSolve(t, milp.Greedy{}, p, milp.Options{})
	s := mustSolve(t, milp.HiGHS{}, p, milp.Options{TimeLimit: 60 * time.Second})
	if g.Gap <= 0.01 {
		t.Fatalf("greedy gap %.4f: instance no longer network-bound, pick another", g.Gap)
	}
	if s.Objective < g.Objective-1e-9 {
		t.Fatalf("HiGHS objective %.9g below greedy %.9g", s.Objective, g.Objective)
	}
	if s.Gap > 0.01 {
		t.Fatalf("gap %.4f after the solve, want <= 0.01", s.Gap)
	}
	t.Logf("greedy T=%.4f gap %.4f -> %s T=%.4f gap %.5f", g.Throughput, g.Gap, s.Source, s.Throughput, s.Gap)
}

// TestWatchdogTinyTimeLimit: with a 1 ms limit every HiGHS run is interrupted by the
// watchdog; the answer is still a checked plan and its reported gap is honest.
func TestWatchdogTinyTimeLimit(t *testing.T) {
	p, err := gen.Generate(gen.Spec{Pipeline: "video", Nodes: 16, Mix: "hetero-net", Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	s := mustSolve(t, milp.HiGHS{}, p, milp.Options{TimeLimit: time.Millisecond, AlwaysMIP: true})
	if s.Throughput <= 0 {
		t.Fatalf("T = %v, want the positive greedy throughput", s.Throughput)
	}
	if s.Status == milp.StatusOptimal && s.Gap > 0.01 {
		t.Fatalf("status optimal with gap %.4f", s.Gap)
	}
	if want := (s.Bound - s.Objective) / s.Bound; math.Abs(s.Gap-math.Max(want, 0)) > 1e-9 {
		t.Fatalf("gap %.9g, bound and objective imply %.9g", s.Gap, want)
	}
}

// parallelism returns every operator's total instance count in s.
func parallelism(s *milp.Solution) []int {
	out := make([]int, len(s.PerNode))
	for i, row := range s.PerNode {
		for _, pl := range row {
			out[i] += pl.Total()
		}
	}
	return out
}

// MinInstances and MaxInstances (the scaling policy's bounds) hold in every solver's
// solution: capping the most replicated operator one below its unbounded optimum and
// raising the least replicated one two above it, on the small instances with and without
// a current deployment. A cap can only lower the optimum.
func TestInstanceBounds(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		for _, cur := range []bool{false, true} {
			for _, solver := range []milp.Solver{milp.HiGHS{}, milp.Greedy{}} {
				p := tiny(seed, cur)
				free := mustSolve(t, solver, p, milp.Options{})
				par := parallelism(free)
				hi, lo := 0, 0
				for i := range par {
					if par[i] > par[hi] {
						hi = i
					}
					if par[i] < par[lo] {
						lo = i
					}
				}
				p = tiny(seed, cur)
				p.Operators[hi].MaxInstances = max(par[hi]-1, 1)
				if cur {
					pinned := 0
					for _, pl := range p.Current[hi] {
						pinned += pl.Candidate
					}
					p.Operators[hi].MaxInstances = max(p.Operators[hi].MaxInstances, pinned)
				}
				if lo != hi {
					p.Operators[lo].MinInstances = par[lo] + 2
				}
				if p.Check() != nil { // the raised minimum does not fit this cluster
					p.Operators[lo].MinInstances = 0
				}
				got := mustSolve(t, solver, p, milp.Options{})
				gp := parallelism(got)
				if gp[hi] > p.Operators[hi].MaxInstances {
					t.Errorf("seed %d cur %v %T: %s has %d instances, MaxInstances %d", seed, cur, solver, p.Operators[hi].Name, gp[hi], p.Operators[hi].MaxInstances)
				}
				if gp[lo] < p.Operators[lo].MinInstances {
					t.Errorf("seed %d cur %v %T: %s has %d instances, MinInstances %d", seed, cur, solver, p.Operators[lo].Name, gp[lo], p.Operators[lo].MinInstances)
				}
				// Both solves stop within the default 1 % gap: the bounded throughput cannot
				// exceed the unbounded problem's proven bound.
				if _, ok := solver.(milp.HiGHS); ok && got.Throughput > free.Bound*(1+1e-6) {
					t.Errorf("seed %d cur %v: bounded throughput %.6g above the unbounded bound %.6g", seed, cur, got.Throughput, free.Bound)
				}
			}
		}
	}
}

func TestInstanceBoundsChecked(t *testing.T) {
	for name, c := range map[string]struct {
		mod  func(p *milp.Problem)
		want string
	}{
		"min above max":    {func(p *milp.Problem) { p.Operators[0].MinInstances, p.Operators[0].MaxInstances = 3, 2 }, `op0.*MinInstances 3 and MaxInstances 2`},
		"negative":         {func(p *milp.Problem) { p.Operators[1].MaxInstances = -1 }, `op1.*MaxInstances -1`},
		"minimums too big": {func(p *milp.Problem) { p.Operators[2].MinInstances = 1000 }, `op2.*MinInstances 1000, but at most`},
		"minimums together": {func(p *milp.Problem) {
			// Two nodes of 4 cores: 5 single-core instances of each operator fit alone (8),
			// not together (10).
			p.Current = nil
			p.Nodes = []milp.Node{{Name: "a", CPU: 4, MemMB: 1e6, EgressBps: math.Inf(1)}, {Name: "b", CPU: 4, MemMB: 1e6, EgressBps: math.Inf(1)}}
			p.Operators = p.Operators[:2]
			for i := range p.Operators {
				p.Operators[i].CPU, p.Operators[i].MemMB, p.Operators[i].GPUs = 1, 1, 0
				p.Operators[i].Candidate, p.Operators[i].MinInstances = nil, 5
			}
		}, `MinInstances \(and pinned instances\) need cpu 10`},
		"pinned above max": {func(p *milp.Problem) { p.Current[0][0].Candidate = 2; p.Operators[0].MaxInstances = 1 }, `op0.*2 already-transitioned instances exceed MaxInstances 1`},
	} {
		p := tiny(2, true)
		c.mod(p)
		if err := p.Check(); err == nil || !regexp.MustCompile(c.want).MatchString(err.Error()) {
			t.Errorf("%s: err = %v, want /%s/", name, err, c.want)
		}
	}
}

// Minimums that fit only when the memory-heavy operator is packed first: the greedy's
// default order (cores first) puts one B on each node and strands A; the retry by
// dominant share places A twice on the large-memory node and B twice on the other.
func TestGreedyPlacesMinimumsThatFit(t *testing.T) {
	p := &milp.Problem{
		Operators: []milp.Operator{
			{Name: "A", CPU: 1, MemMB: 4000, Capacity: 10, Amplification: 1, MinInstances: 2},
			{Name: "B", CPU: 2, MemMB: 100, Capacity: 10, Amplification: 1, MinInstances: 2},
		},
		Nodes: []milp.Node{
			{Name: "n0", CPU: 4, MemMB: 1000, EgressBps: math.Inf(1)},
			{Name: "n1", CPU: 4, MemMB: 8000, EgressBps: math.Inf(1)},
		},
	}
	for _, s := range []milp.Solver{milp.Greedy{}, milp.HiGHS{}} {
		sol := mustSolve(t, s, p, milp.Options{})
		if par := parallelism(sol); par[0] != 2 || par[1] != 2 || math.Abs(sol.Throughput-20) > 1e-6 {
			t.Errorf("%T: instances %v, throughput %v; want 2 and 2 at 20", s, par, sol.Throughput)
		}
	}
}
