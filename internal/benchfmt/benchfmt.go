// Package benchfmt prints benchmark results: aligned tables for people and the single
// machine-readable RESULT line every `trident bench` verb ends with.
package benchfmt

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// Result is the machine-readable outcome of one benchmark verb.
type Result struct {
	// Bench names the verb, e.g. "milp".
	Bench string `json:"bench"`
	// Figures holds every figure the benchmark measured for this project.
	Figures map[string]any `json:"figures"`
	// Peers holds the reference figures compared against (baselines measured in the same
	// run, or published figures labelled as such).
	Peers map[string]any `json:"peers"`
}

// WriteResult prints r as one line: `RESULT {json}`.
func WriteResult(w io.Writer, r Result) error {
	if r.Figures == nil {
		r.Figures = map[string]any{}
	}
	if r.Peers == nil {
		r.Peers = map[string]any{}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode %s result: %w", r.Bench, err)
	}
	_, err = fmt.Fprintf(w, "RESULT %s\n", b)
	return err
}

// Table is a titled text table.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
}

// AddRow appends one row; values are formatted with %v, floats with 4 significant digits.
func (t *Table) AddRow(vals ...any) {
	row := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case float64:
			row[i] = fmt.Sprintf("%.4g", x)
		default:
			row[i] = fmt.Sprint(x)
		}
	}
	t.Rows = append(t.Rows, row)
}

// Write prints the table with aligned columns.
func (t *Table) Write(w io.Writer) error {
	if t.Title != "" {
		if _, err := fmt.Fprintf(w, "\n%s\n%s\n", t.Title, strings.Repeat("=", len(t.Title))); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(t.Header) > 0 {
		fmt.Fprintln(tw, strings.Join(t.Header, "\t"))
	}
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// LoadAvg returns /proc/loadavg's 1, 5 and 15 minute load averages as "a b c" ("" where
// unreadable): benchmarks print it beside their figures, since this project's machines
// are shared.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
