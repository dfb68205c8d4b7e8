package milp

import (
	"math"
	"testing"
)

// twoNodes is a two-operator pipeline (1 MB per record between them) on a node without
// egress ("z") and one with unlimited egress ("u"); one instance of each operator per node.
func twoNodes(t *testing.T) *prep {
	t.Helper()
	p := &Problem{
		Operators: []Operator{
			{Name: "a", CPU: 1, Capacity: 10, Amplification: 1, OutputBytes: 1e6},
			{Name: "b", CPU: 1, Capacity: 12, Amplification: 1},
		},
		Nodes: []Node{{Name: "z", CPU: 2, EgressBps: 0}, {Name: "u", CPU: 2, EgressBps: math.Inf(1)}},
	}
	q, err := newPrep(p)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// Decoding a routing with a solver residue must give up the residue, not the throughput:
// the old decoder scaled T by B_n/E_n, which is 0 at a node without egress (issue #27).
func TestAssembleAbsorbsResidues(t *testing.T) {
	one := [][]int{{1, 1}, {1, 1}}
	for name, w := range map[string][][]float64{
		// b on z receives 1e-9 less than a sends: a residue export from z
		"export residue": {{10, 10}, {10 - 1e-9, 10 + 1e-9}},
		// b's total exceeds T by 2e-9 on u: normalising every node of b by T/sum used to
		// create an export from z
		"normalisation": {{10, 10}, {10, 10 + 2e-9}},
	} {
		q := twoNodes(t)
		s := q.assemble(one, q.zeros(), w, 20)
		if err := Validate(q.p, s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Throughput < 20*(1-1e-9) {
			t.Errorf("%s: T = %.12g, want 20 less a residue", name, s.Throughput)
		}
		if s.Egress[0] != 0 {
			t.Errorf("%s: node z exports %.3g B/s", name, s.Egress[0])
		}
	}
}

// A node whose egress binds by a residue loses only the residue; one that would export far
// more than its bound is brought down to it exactly, keeping its local traffic.
func TestAssembleRepairsEgressProportionally(t *testing.T) {
	q := twoNodes(t)
	q.p.Nodes[0].EgressBps = 1e6 // z may export 1 record/s of a
	w := [][]float64{{10, 10}, {10 - 1e-9 - 1, 10 + 1e-9 + 1}}
	s := q.assemble([][]int{{1, 1}, {1, 1}}, q.zeros(), w, 20)
	if err := Validate(q.p, s); err != nil {
		t.Fatal(err)
	}
	if s.Throughput < 20*(1-1e-9) {
		t.Errorf("T = %.12g, want 20 less a residue", s.Throughput)
	}
	w = [][]float64{{10, 10}, {8, 12}} // z exports 2 records/s, twice its bound
	s = q.assemble([][]int{{1, 1}, {1, 1}}, q.zeros(), w, 20)
	if err := Validate(q.p, s); err != nil {
		t.Fatal(err)
	}
	// theta = 1/2: a on z drops halfway to b's 8, to 9, so T = 19 and z exports 1 MB/s
	if math.Abs(s.Throughput-19) > 1e-9 || math.Abs(s.Egress[0]-1e6) > 1e-3 {
		t.Errorf("T = %.12g, egress of z %.6g; want 19 and 1e6", s.Throughput, s.Egress[0])
	}
}
