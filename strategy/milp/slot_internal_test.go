package milp

import (
	"math"
	"testing"
)

// slotProblem is two nodes of 2 GPUs, 32 cores and 128 GiB (het/128/s10's l4x2 nodes)
// and three 1-GPU operators of 128, 64 and 32 GiB.
func slotProblem() *Problem {
	const gib = 1024.0
	nd := Node{CPU: 32, MemMB: 128 * gib, Devices: []Device{{Model: "L4", MemMB: 24 * gib, Count: 2}}, EgressBps: math.Inf(1)}
	a, b := nd, nd
	a.Name, b.Name = "n0", "n1"
	op := func(name string, mem float64) Operator {
		return Operator{Name: name, Capacity: 10, Amplification: 1, GPUs: 1, CPU: 8, MemMB: mem * gib}
	}
	return &Problem{Nodes: []Node{a, b}, Operators: []Operator{op("big", 128), op("mid", 64), op("small", 32)}}
}

// One instance of the 128 GiB operator fills the node's memory and so blocks both GPUs:
// the slot row is 2 x_big + x_mid + x_small <= 2 (the most of the left-hand side: one
// big instance, or two of the others).
func TestSlotRowCoefficients(t *testing.T) {
	q, err := newPrep(slotProblem())
	if err != nil {
		t.Fatal(err)
	}
	r := q.slotRow(0)
	if r == nil {
		t.Fatal("no slot row")
	}
	if want := []float64{2, 1, 1}; !equalFloats(r.coef, want) || r.cap != 2 {
		t.Errorf("slot row %v <= %g, want %v <= 2", r.coef, r.cap, want)
	}
}

// keepCutSlotRows keeps exactly the slot rows the point violates, with their entries,
// and leaves the rows before them alone.
func TestKeepCutSlotRows(t *testing.T) {
	q, err := newPrep(slotProblem())
	if err != nil {
		t.Fatal(err)
	}
	m := buildModel(q, Options{}.withDefaults())
	if got := m.numRows() - m.slotFrom; got != 2 {
		t.Fatalf("%d slot rows, want one per node", got)
	}
	before := m.rowPrefix(m.slotFrom)
	nnz := len(before.index)
	// the LP's kind of point on node 1 only: 0.39 big, 0.83 mid, 0.78 small instances
	v := make([]float64, len(m.cost))
	v[m.x[0][1]], v[m.x[1][1]], v[m.x[2][1]] = 0.39, 0.83, 0.78
	v[m.x[1][0]] = 2 // node 0 at the row's bound: not cut
	m.keepCutSlotRows(v)
	if got := m.numRows() - m.slotFrom; got != 1 || m.rowName[m.slotFrom] != "slot_1" {
		t.Fatalf("kept %v, want [slot_1]", m.rowName[m.slotFrom:])
	}
	r := m.slotFrom
	got := map[int]float64{}
	for k := m.start[r]; k < m.start[r+1]; k++ {
		got[m.index[k]] = m.value[k]
	}
	if len(got) != 3 || got[m.x[0][1]] != 2 || got[m.x[1][1]] != 1 || got[m.x[2][1]] != 1 || m.rowUp[r] != 2 {
		t.Errorf("slot_1 entries %v <= %g, want x_big 2, x_mid 1, x_small 1 <= 2", got, m.rowUp[r])
	}
	if m.start[m.slotFrom] != nnz || len(m.index) != nnz+3 || len(m.value) != len(m.index) {
		t.Errorf("entries: %d before the slot rows (want %d), %d in all (want %d)", m.start[m.slotFrom], nnz, len(m.index), nnz+3)
	}
	m.keepCutSlotRows(nil)
	if m.numRows() != m.slotFrom || len(m.index) != nnz {
		t.Errorf("without a point: %d rows, %d entries; want %d, %d", m.numRows(), len(m.index), m.slotFrom, nnz)
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}
