package milp

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"
)

// mixedModel builds the model of ops on n nodes of cpu cores and memMB MiB with the given
// egress, every third node with two accelerators.
func mixedModel(t *testing.T, ops []Operator, n int, cpu, memMB, egressBps float64) (*prep, *model) {
	t.Helper()
	p := &Problem{Operators: ops}
	for k := range n {
		nd := Node{Name: fmt.Sprintf("n%d", k), CPU: cpu, MemMB: memMB, EgressBps: egressBps}
		if k%3 == 0 {
			nd.GPUs = 2
		}
		p.Nodes = append(p.Nodes, nd)
	}
	q, err := newPrep(p)
	if err != nil {
		t.Fatal(err)
	}
	return q, buildModel(q, Options{}.withDefaults())
}

// stopProblem is a cluster of mixed nodes whose MIP HiGHS does not solve at its first
// node: 12 CPU nodes and 6 with two accelerators under a 1 Gbit/s egress.
func stopProblem(t *testing.T) (*prep, *model) {
	t.Helper()
	return mixedModel(t, []Operator{
		{Name: "read", CPU: 2, MemMB: 1024, Capacity: 10, Amplification: 1, OutputBytes: 1e6},
		{Name: "infer", CPU: 3, MemMB: 2048, GPUs: 1, Capacity: 4.3, Amplification: 1.7, OutputBytes: 2e5},
		{Name: "caption", CPU: 2, MemMB: 4096, GPUs: 1, Capacity: 3.1, Amplification: 1, OutputBytes: 1e3},
		{Name: "write", CPU: 1, MemMB: 512, Capacity: 20, Amplification: 1},
	}, 18, 14, 32768, 125e6)
}

// A HiGHS run whose dual bound falls to the cutoff (it cannot beat a plan already held)
// stops itself at its first MIP callback, and says so: it is not reported as
// interrupted, which callers read as "out of time".
func TestHiGHSStopsBelowTheCutoff(t *testing.T) {
	q, m := stopProblem(t)
	opts := Options{}.withDefaults()
	opts.cutoff = 10 * q.Tub // above any bound HiGHS can have
	res := runHiGHS(context.Background(), &m.lp, nil, opts, time.Now().Add(time.Minute))
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.status != hsInterrupt || !res.enough || res.interrupted {
		t.Fatalf("status %d, enough %v, interrupted %v: want a callback stop (status %d, enough, not interrupted)",
			res.status, res.enough, res.interrupted, hsInterrupt)
	}
}

// A run whose incumbent reaches Options.enough stops with that incumbent; without enough
// or a cutoff the same run ends within its gap.
func TestHiGHSStopsAtEnough(t *testing.T) {
	q, m := stopProblem(t)
	g := q.greedy(context.Background())
	if g == nil || !(g.Objective > 0) {
		t.Fatal("no greedy plan")
	}
	opts := Options{}.withDefaults()
	opts.enough = g.Objective / 2 // the start already reaches it
	res := runHiGHS(context.Background(), &m.lp, m.startVector(g), opts, time.Now().Add(time.Minute))
	if res.err != nil {
		t.Fatal(res.err)
	}
	if !res.enough || res.interrupted || res.values == nil {
		t.Fatalf("enough %v, interrupted %v, incumbent %v: want a callback stop with the incumbent", res.enough, res.interrupted, res.values != nil)
	}
	if res.objective < opts.enough {
		t.Errorf("stopped at objective %g, below enough %g", res.objective, opts.enough)
	}

	free := runHiGHS(context.Background(), &m.lp, m.startVector(g), Options{}.withDefaults(), time.Now().Add(time.Minute))
	if free.err != nil {
		t.Fatal(free.err)
	}
	if free.interrupted || (free.status != hsOptimal && !free.enough) {
		t.Fatalf("without a stop level: status %d, enough %v, interrupted %v; want an optimum or a stop within the gap", free.status, free.enough, free.interrupted)
	}
	// Without enough or a cutoff the callback stops only a run whose own gap is within
	// RelGap, which HiGHS itself would stop at its next check.
	if gap := (free.dualBound - free.objective) / math.Abs(free.dualBound); gap > opts.RelGap+1e-9 {
		t.Errorf("stopped at gap %g, above %g", gap, opts.RelGap)
	}
}
