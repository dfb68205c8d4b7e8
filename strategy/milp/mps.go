package milp

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
)

// WriteMPS writes the model of p (as Solve would build it with opts) in free MPS format.
// MPS has no sense for the objective in every reader, so the row "obj" holds the NEGATED
// objective of Eq. (10) to be minimised; the constant part of the objective (the
// termination cost of every currently running instance, weighted by beta) is returned as
// offset: the paper's objective equals offset - (MPS optimum).
func WriteMPS(w io.Writer, p *Problem, opts Options) (offset float64, err error) {
	q, err := newPrep(p)
	if err != nil {
		return 0, err
	}
	m := buildModel(q, opts)
	if err := m.writeMPS(w, "TRIDENT"); err != nil {
		return 0, fmt.Errorf("milp: write MPS: %w", err)
	}
	return m.offset, nil
}

func (m *lp) writeMPS(out io.Writer, name string) error {
	w := bufio.NewWriter(out)
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 17, 64) }
	fmt.Fprintf(w, "NAME %s\nROWS\n N obj\n", name)
	rowType := make([]byte, m.numRows())
	for r := range rowType {
		lo, up := m.rowLo[r], m.rowUp[r]
		switch {
		case lo == up:
			rowType[r] = 'E'
		case math.IsInf(lo, -1) && math.IsInf(up, 1):
			rowType[r] = 'N'
		case math.IsInf(lo, -1):
			rowType[r] = 'L'
		default:
			rowType[r] = 'G' // a finite upper bound too becomes a RANGE
		}
		fmt.Fprintf(w, " %c %s\n", rowType[r], m.rowName[r])
	}
	// column-wise view of the row-wise matrix
	type entry struct {
		row int
		val float64
	}
	cols := make([][]entry, len(m.cost))
	for r := range m.numRows() {
		for k := m.start[r]; k < m.start[r+1]; k++ {
			cols[m.index[k]] = append(cols[m.index[k]], entry{r, m.value[k]})
		}
	}
	fmt.Fprintln(w, "COLUMNS")
	inInt := false
	for j, name := range m.colName {
		if m.integer[j] != inInt {
			if m.integer[j] {
				fmt.Fprintln(w, " MARKER 'MARKER' 'INTORG'")
			} else {
				fmt.Fprintln(w, " MARKER 'MARKER' 'INTEND'")
			}
			inInt = m.integer[j]
		}
		if m.cost[j] != 0 || len(cols[j]) == 0 {
			fmt.Fprintf(w, " %s obj %s\n", name, f(-m.cost[j]))
		}
		for _, e := range cols[j] {
			fmt.Fprintf(w, " %s %s %s\n", name, m.rowName[e.row], f(e.val))
		}
	}
	if inInt {
		fmt.Fprintln(w, " MARKER 'MARKER' 'INTEND'")
	}
	fmt.Fprintln(w, "RHS")
	for r := range m.numRows() {
		var rhs float64
		switch rowType[r] {
		case 'E', 'G':
			rhs = m.rowLo[r]
		case 'L':
			rhs = m.rowUp[r]
		}
		if rhs != 0 {
			fmt.Fprintf(w, " RHS %s %s\n", m.rowName[r], f(rhs))
		}
	}
	fmt.Fprintln(w, "RANGES")
	for r := range m.numRows() {
		if rowType[r] == 'G' && !math.IsInf(m.rowUp[r], 1) {
			fmt.Fprintf(w, " RNG %s %s\n", m.rowName[r], f(m.rowUp[r]-m.rowLo[r]))
		}
	}
	fmt.Fprintln(w, "BOUNDS")
	for j, name := range m.colName {
		lo, up := m.colLo[j], m.colUp[j]
		switch {
		case lo == up:
			fmt.Fprintf(w, " FX BND %s %s\n", name, f(lo))
			continue
		case math.IsInf(lo, -1):
			fmt.Fprintf(w, " MI BND %s\n", name)
		case lo != 0 || m.integer[j]:
			fmt.Fprintf(w, " LO BND %s %s\n", name, f(lo))
		}
		if math.IsInf(up, 1) {
			if m.integer[j] {
				fmt.Fprintf(w, " PL BND %s\n", name)
			}
		} else {
			fmt.Fprintf(w, " UP BND %s %s\n", name, f(up))
		}
	}
	fmt.Fprintln(w, "ENDATA")
	return w.Flush()
}
