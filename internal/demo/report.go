package demo

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/trident-sched/trident/internal/benchfmt"
)

// writeReport prints the per-run and summary tables and writes report.txt, runs.csv,
// throughput.csv and throughput.svg into o.OutDir.
func writeReport(o Options, r *Report) error {
	var sb strings.Builder
	writeTables(&sb, r)
	fmt.Fprint(o.Out, sb.String())
	if err := os.WriteFile(filepath.Join(o.OutDir, "report.txt"), []byte(sb.String()), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(o.OutDir, "runs.csv"), []byte(runsCSV(r)), 0o644); err != nil {
		return fmt.Errorf("write runs csv: %w", err)
	}
	var csv strings.Builder
	csv.WriteString("phase,round,t_s,sink_total,rate\n")
	for _, p := range r.Phases {
		for _, pt := range p.Series {
			fmt.Fprintf(&csv, "%s,%d,%.1f,%d,%.3f\n", p.Name, p.Round, pt.T, pt.SinkTotal, pt.Rate)
		}
	}
	if err := os.WriteFile(filepath.Join(o.OutDir, "throughput.csv"), []byte(csv.String()), 0o644); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	svg := plotSVG(r)
	if err := os.WriteFile(filepath.Join(o.OutDir, "throughput.svg"), []byte(svg), 0o644); err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	fmt.Fprintf(o.Out, "report: %s, %s, %s, %s\n", filepath.Join(o.OutDir, "report.txt"), filepath.Join(o.OutDir, "runs.csv"), filepath.Join(o.OutDir, "throughput.csv"), filepath.Join(o.OutDir, "throughput.svg"))
	return nil
}

// writeTables writes the per-run table, the per-phase summary (median and spread over
// rounds), the throughput ratios and the notes.
func writeTables(w io.Writer, r *Report) {
	runs := benchfmt.Table{
		Title:  fmt.Sprintf("Demo runs: %s pipeline, %d %s per phase", r.Pipeline, r.Docs, inputNoun(r.Pipeline)),
		Header: []string{"phase", "round", "elapsed_s", "final_records", "records/s", "missing", "duplicates", "unexpected", "loadavg start", "loadavg end", "final parallelism"},
	}
	for _, p := range r.Phases {
		name := p.Name
		if p.Err != "" {
			name += " (FAILED)"
		}
		runs.AddRow(name, p.Round, p.Elapsed.Seconds(), p.Records, p.Throughput, p.Verify.Missing, p.Verify.Duplicates, p.Verify.Unexpected, p.LoadStart, p.LoadEnd, countsString(p.FinalCount))
	}
	_ = runs.Write(w)
	sums := summarize(r)
	sum := benchfmt.Table{
		Title:  fmt.Sprintf("Demo summary: %s pipeline, median over rounds", r.Pipeline),
		Header: []string{"phase", "runs", "median records/s", "min", "max", "spread %", "lost", "duplicated", "failed runs", "trident / phase"},
	}
	tr := sums[PhaseTrident]
	for _, name := range phaseOrder(r) {
		s := sums[name]
		ratio := "-"
		if tr != nil && name != PhaseTrident && s.Median > 0 {
			ratio = fmt.Sprintf("%.2fx", tr.Median/s.Median)
		}
		sum.AddRow(name, s.Runs, s.Median, s.Min, s.Max, s.SpreadPct, s.Lost, s.Duplicated, s.Failed, ratio)
	}
	_ = sum.Write(w)
	fmt.Fprintln(w)
	if tr != nil {
		if s := sums[PhaseStatic]; s != nil && s.Median > 0 {
			fmt.Fprintf(w, "Trident end-to-end throughput: %.2fx the static allocation (median %.1f vs %.1f records/s)\n", tr.Median/s.Median, tr.Median, s.Median)
		}
		if best, s := bestAutoscaler(sums); s != nil && s.Median > 0 {
			fmt.Fprintf(w, "Trident end-to-end throughput: %.2fx the best nomad-autoscaler phase, %s (median %.1f vs %.1f records/s)\n", tr.Median/s.Median, best, tr.Median, s.Median)
		}
	}
	if r.Rates != nil {
		fmt.Fprintf(w, "note (autoscaler): per-instance rates from %s (records/s): %s\n", r.TargetsFrom, targetsString(roundRates(r.Rates), sortedKeys(r.Rates)))
		fmt.Fprintf(w, "note (autoscaler): backlog-per-instance target = rate x %s; evaluation_interval %s, cooldown %s, query_window %s; deployments off in the peer's job (update max_parallel = 0)\n",
			r.Peer.Latency, r.Peer.EvaluationInterval, r.Peer.Cooldown, r.Peer.QueryWindow)
	}
	seen := map[string]bool{}
	for _, p := range r.Phases {
		for _, n := range p.Notes {
			if k := p.Name + n; !seen[k] {
				seen[k] = true
				fmt.Fprintf(w, "note (%s): %s\n", p.Name, n)
			}
		}
		if len(p.Targets) > 0 && p.Round == 1 {
			fmt.Fprintf(w, "note (%s): backlog-per-instance targets %s\n", p.Name, targetsString(p.Targets, sortedKeys(p.Targets)))
		}
		if p.Err != "" {
			fmt.Fprintf(w, "note (%s, round %d): FAILED: %s\n", p.Name, p.Round, p.Err)
		}
	}
}

// PhaseSummary is one phase's figures over its rounds.
type PhaseSummary struct {
	Runs                 int     // runs with a figure (the dataset was published)
	Median, Min, Max     float64 // records/s
	SpreadPct            float64 // (max - min) / median, percent
	Lost, Duplicated     int     // summed over runs (missing + unexpected, duplicates)
	Failed               int     // runs that did not complete
	MaxLoad1             float64 // highest 1-minute load average seen at a run's start or end
	MedianElapsedSeconds float64
}

// summarize groups the runs by phase.
func summarize(r *Report) map[string]*PhaseSummary {
	tp := map[string][]float64{}
	el := map[string][]float64{}
	out := map[string]*PhaseSummary{}
	for _, p := range r.Phases {
		s := out[p.Name]
		if s == nil {
			s = &PhaseSummary{}
			out[p.Name] = s
		}
		if p.Err != "" {
			s.Failed++
		}
		if !p.Started {
			continue // failed before its dataset was published: no figure
		}
		s.Runs++
		tp[p.Name] = append(tp[p.Name], p.Throughput)
		el[p.Name] = append(el[p.Name], p.Elapsed.Seconds())
		s.Lost += p.Verify.Missing + p.Verify.Unexpected
		s.Duplicated += p.Verify.Duplicates
		for _, l := range []string{p.LoadStart, p.LoadEnd} {
			if f := strings.Fields(l); len(f) > 0 {
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					s.MaxLoad1 = max(s.MaxLoad1, v)
				}
			}
		}
	}
	for name, s := range out {
		v := tp[name]
		if len(v) == 0 {
			continue
		}
		s.Median, s.Min, s.Max = median(v), slices.Min(v), slices.Max(v)
		if s.Median > 0 {
			s.SpreadPct = 100 * (s.Max - s.Min) / s.Median
		}
		s.MedianElapsedSeconds = median(el[name])
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// bestAutoscaler is the autoscaler phase with the highest median throughput.
func bestAutoscaler(sums map[string]*PhaseSummary) (string, *PhaseSummary) {
	best := ""
	for _, name := range []string{PhaseAutoscalerTarget, PhaseAutoscalerThreshold} {
		if s := sums[name]; s != nil && (best == "" || s.Median > sums[best].Median) {
			best = name
		}
	}
	if best == "" {
		return "", nil
	}
	return best, sums[best]
}

// phaseOrder is the phases' names in the order they first ran.
func phaseOrder(r *Report) []string {
	var out []string
	for _, p := range r.Phases {
		if !slices.Contains(out, p.Name) {
			out = append(out, p.Name)
		}
	}
	return out
}

// runsCSV is one line per run.
func runsCSV(r *Report) string {
	var b strings.Builder
	b.WriteString("pipeline,phase,round,elapsed_s,final_records,records_per_s,missing,duplicates,unexpected,loadavg1_start,loadavg1_end,failed\n")
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "%s,%s,%d,%.1f,%d,%.3f,%d,%d,%d,%s,%s,%t\n", r.Pipeline, p.Name, p.Round, p.Elapsed.Seconds(), p.Records, p.Throughput,
			p.Verify.Missing, p.Verify.Duplicates, p.Verify.Unexpected, firstField(p.LoadStart), firstField(p.LoadEnd), p.Err != "")
	}
	return b.String()
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// Result is the demo's machine-readable outcome: Trident's median records/s, lost and
// duplicated records and its ratios to the static allocation and the best autoscaler phase
// as figures; the other phases' medians as peers. Keys are demo.<pipeline>.<phase>.<figure>.
func (r *Report) Result() benchfmt.Result {
	res := benchfmt.Result{Bench: "demo", Figures: map[string]any{}, Peers: map[string]any{}}
	sums := summarize(r)
	pre := "demo." + r.Pipeline + "."
	load := 0.0
	for name, s := range sums {
		dst := res.Peers
		if name == PhaseTrident {
			dst = res.Figures
		}
		k := pre + name + "."
		dst[k+"records_per_s"] = round3(s.Median)
		dst[k+"records_per_s_min"] = round3(s.Min)
		dst[k+"records_per_s_max"] = round3(s.Max)
		dst[k+"runs"] = s.Runs
		dst[k+"lost"] = s.Lost
		dst[k+"duplicated"] = s.Duplicated
		dst[k+"failed_runs"] = s.Failed
		load = max(load, s.MaxLoad1)
	}
	res.Figures[pre+"docs"] = r.Docs
	res.Figures[pre+"loadavg1_max"] = load
	if tr := sums[PhaseTrident]; tr != nil {
		if s := sums[PhaseStatic]; s != nil && s.Median > 0 {
			res.Figures[pre+"trident_vs_static"] = round3(tr.Median / s.Median)
		}
		if best, s := bestAutoscaler(sums); s != nil && s.Median > 0 {
			res.Figures[pre+"trident_vs_best_autoscaler"] = round3(tr.Median / s.Median)
			res.Figures[pre+"best_autoscaler"] = best
		}
	}
	return res
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

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
	const w, h, ml, mb, mt, mr = 900.0, 400.0, 60.0, 40.0, 30.0, 300.0
	maxT, maxY := 1.0, 1.0
	for _, p := range r.Phases {
		for _, pt := range p.Series {
			maxT = max(maxT, pt.T)
			maxY = max(maxY, float64(pt.SinkTotal))
		}
	}
	x := func(t float64) float64 { return ml + (w-ml-mr)*t/maxT }
	y := func(v float64) float64 { return h - mb - (h-mb-mt)*v/maxY }
	colors := []string{"#888888", "#ff7f0e", "#9467bd", "#d62728", "#1f77b4", "#2ca02c"}
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
	order := phaseOrder(r)
	sums := summarize(r)
	for _, p := range r.Phases {
		c := colors[slices.Index(order, p.Name)%len(colors)]
		var pts []string
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(0), y(0)))
		for _, pt := range p.Series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(pt.T), y(float64(pt.SinkTotal))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
	}
	for i, name := range order {
		c := colors[i%len(colors)]
		label := fmt.Sprintf("%s (%.1f rec/s)", name, sums[name].Median)
		if sums[name].Runs > 1 {
			label = fmt.Sprintf("%s (median %.1f rec/s, %d runs)", name, sums[name].Median, sums[name].Runs)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", w-mr+8, mt+16+float64(i)*18, c, label)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
