package milp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The neighbourhoods of the node search: k distinct nodes in order; on odd rounds only
// nodes that can hold the operator of that round when it has enough of them (here the
// operator with the most valuable capacity row, whose dual is the only non-zero one).
func TestNeighbourhood(t *testing.T) {
	// 16 CPU nodes and 8 with two accelerators; operator 1 needs one of them
	q, m := mixedModel(t, []Operator{
		{Name: "read", CPU: 2, MemMB: 1024, Capacity: 10, Amplification: 1, OutputBytes: 1e6},
		{Name: "infer", CPU: 2, MemMB: 1024, GPUs: 1, Capacity: 5, Amplification: 1, OutputBytes: 1e3},
		{Name: "write", CPU: 1, MemMB: 512, Capacity: 20, Amplification: 1},
	}, 24, 16, 65536, math.Inf(1))
	// an operator that fits on some nodes only (an accelerator operator)
	op, elig := -1, 0
	for i := range q.N {
		c := 0
		for n := range q.M {
			if q.ub[i][n] > 0 {
				c++
			}
		}
		if c < q.M {
			op, elig = i, c
			break
		}
	}
	if op < 0 {
		t.Fatal("no operator restricted to some nodes: the instance lost its kind")
	}
	dual := make([]float64, m.numRows())
	for n := range q.M {
		if q.ub[op][n] > 0 {
			dual[m.capRow[op][n]] = float64(n + 1)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 6 {
		for _, k := range []int{4, 8} {
			nodes := m.neighbourhood(dual, k, round, rng)
			if len(nodes) != k {
				t.Fatalf("round %d: %d nodes, want %d", round, len(nodes), k)
			}
			for j := 1; j < len(nodes); j++ {
				if nodes[j] <= nodes[j-1] {
					t.Fatalf("round %d: nodes %v not distinct and in order", round, nodes)
				}
			}
			if round%2 == 1 && k <= elig {
				for _, n := range nodes {
					if q.ub[op][n] == 0 {
						t.Errorf("round %d: node %d cannot hold operator %d", round, n, op)
					}
				}
			}
		}
	}
	// without duals: at random
	if nodes := m.neighbourhood(nil, 5, 1, rng); len(nodes) != 5 {
		t.Errorf("without duals: %d nodes, want 5", len(nodes))
	}
}
