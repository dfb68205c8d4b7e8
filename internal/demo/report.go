package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/trident-sched/trident/internal/benchfmt"
)

// writeReport prints the comparison table and writes report.txt, throughput.csv and
// throughput.svg into o.OutDir.
func writeReport(o Options, r *Report) error {
	var sb strings.Builder
	t := benchfmt.Table{
		Title:  fmt.Sprintf("Demo report: %s pipeline, %d %s per phase", r.Pipeline, r.Docs, inputNoun(r.Pipeline)),
		Header: []string{"phase", "elapsed_s", "final_records", "records/s", "missing", "duplicates", "unexpected", "final parallelism"},
	}
	for _, p := range r.Phases {
		t.AddRow(p.Name, p.Elapsed.Seconds(), p.Records, p.Throughput, p.Verify.Missing, p.Verify.Duplicates, p.Verify.Unexpected, countsString(p.FinalCount))
	}
	_ = t.Write(&sb)
	if s, tr := find(r, "static"), find(r, "trident"); s != nil && tr != nil && s.Throughput > 0 {
		fmt.Fprintf(&sb, "\nTrident end-to-end throughput: %.2fx the static allocation (%.1f vs %.1f records/s)\n", tr.Throughput/s.Throughput, tr.Throughput, s.Throughput)
	}
	for _, p := range r.Phases {
		for _, n := range p.Notes {
			fmt.Fprintf(&sb, "note (%s): %s\n", p.Name, n)
		}
	}
	fmt.Fprint(o.Out, sb.String())
	if err := os.WriteFile(filepath.Join(o.OutDir, "report.txt"), []byte(sb.String()), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	var csv strings.Builder
	csv.WriteString("phase,t_s,sink_total,rate\n")
	for _, p := range r.Phases {
		for _, pt := range p.Series {
			fmt.Fprintf(&csv, "%s,%.1f,%d,%.3f\n", p.Name, pt.T, pt.SinkTotal, pt.Rate)
		}
	}
	if err := os.WriteFile(filepath.Join(o.OutDir, "throughput.csv"), []byte(csv.String()), 0o644); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	svg := plotSVG(r)
	if err := os.WriteFile(filepath.Join(o.OutDir, "throughput.svg"), []byte(svg), 0o644); err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	fmt.Fprintf(o.Out, "report: %s, %s, %s\n", filepath.Join(o.OutDir, "report.txt"), filepath.Join(o.OutDir, "throughput.csv"), filepath.Join(o.OutDir, "throughput.svg"))
	return nil
}

func find(r *Report, name string) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

func countsString(c map[string]int) string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, c[k])
	}
	return strings.Join(parts, " ")
}

// plotSVG draws cumulative sink records over time, one line per phase.
func plotSVG(r *Report) string {
	const w, h, ml, mb, mt, mr = 720.0, 400.0, 60.0, 40.0, 30.0, 120.0
	maxT, maxY := 1.0, 1.0
	for _, p := range r.Phases {
		for _, pt := range p.Series {
			maxT = max(maxT, pt.T)
			maxY = max(maxY, float64(pt.SinkTotal))
		}
	}
	x := func(t float64) float64 { return ml + (w-ml-mr)*t/maxT }
	y := func(v float64) float64 { return h - mb - (h-mb-mt)*v/maxY }
	colors := []string{"#888888", "#d62728", "#1f77b4", "#2ca02c"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="14">%s pipeline: final records at the sink over time</text>`+"\n", ml, r.Pipeline)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", ml, h-mb, w-mr, h-mb)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", ml, mt, ml, h-mb)
	for i := 0; i <= 4; i++ {
		v := maxY * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", ml-4, y(v)+4, v)
		tv := maxT * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0fs</text>`+"\n", x(tv), h-mb+16, tv)
	}
	for i, p := range r.Phases {
		c := colors[i%len(colors)]
		var pts []string
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(0), y(0)))
		for _, pt := range p.Series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(pt.T), y(float64(pt.SinkTotal))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s (%.1f rec/s)</text>`+"\n", w-mr+8, mt+16+float64(i)*18, c, p.Name, p.Throughput)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
