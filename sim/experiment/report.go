package experiment

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/sim"
)

// Paper figures (Trident paper §8). Figure 2's per-baseline values are not in the text we
// have (only their ordering), so Figure 2 has no numeric peers except Static.
var (
	paperTable2 = map[string][2]float64{ // PDF, video
		"static": {1.00, 1.00}, "ray-data+shared": {1.22, 1.30}, "ds2+shared": {1.38, 1.25},
		"conttune+shared": {1.42, 1.36}, "trident-all-at-once": {1.92, 1.79}, "trident": {2.01, 1.88},
	}
	paperFig3 = map[string][2]float64{ // % of full Trident
		"trident": {100, 100}, "trident-no-observation": {66.5, 60.9}, "trident-no-adaptation": {79.6, 78.1},
		"trident-no-placement": {90.5, 84.0}, "trident-all-at-once": {95.5, 95.2},
	}
	// Table 6: OOM events, downtime (s), loss vs oracle (%): unconstrained, constrained.
	paperTable6 = map[string]map[string][2]float64{
		"pdf":   {"ooms": {14, 3}, "downtime": {462, 102}, "loss": {8.7, 3.2}},
		"video": {"ooms": {11, 2}, "downtime": {352, 68}, "loss": {7.2, 2.7}},
	}
	paperOverheadMs = map[string]float64{"observe": 2, "adapt": 4, "milp.pdf": 206, "milp.video": 62}
)

var (
	fig2Keys   = []string{"static", "static-striped", "nomad-target-value", "nomad-threshold", "ray-data", "ds2", "conttune", "scoot", "trident", "trident-no-adaptation"}
	table2Keys = []string{"static", "ray-data+shared", "ds2+shared", "conttune+shared", "trident-all-at-once", "trident"}
	fig3Keys   = []string{"trident", "trident-no-observation", "trident-no-adaptation", "trident-no-placement", "trident-all-at-once"}
	fig3Labels = map[string]string{"trident": "Trident (full)", "trident-no-observation": "w/o observation layer",
		"trident-no-adaptation": "w/o adaptation layer", "trident-no-placement": "w/o placement-aware scheduling",
		"trident-all-at-once": "w/o rolling update"}
)

// Report holds the benchmark's runs indexed by pipeline, scheduler key and seed. Every
// figure is the median over seeds of the per-seed figure.
type Report struct {
	Pipelines []string
	Seeds     []uint64
	Runs      map[string]map[string]map[uint64]*Run
	Wall      time.Duration
	// Bounds holds each pipeline's fluid upper bound (optional; see sim.FluidBound).
	Bounds map[string]sim.FluidBound
}

// NewReport indexes runs.
func NewReport(pipelines []string, runs []*Run, wall time.Duration) *Report {
	r := &Report{Pipelines: pipelines, Runs: map[string]map[string]map[uint64]*Run{}, Wall: wall}
	seen := map[uint64]bool{}
	for _, run := range runs {
		if r.Runs[run.Pipeline] == nil {
			r.Runs[run.Pipeline] = map[string]map[uint64]*Run{}
		}
		if r.Runs[run.Pipeline][run.Key] == nil {
			r.Runs[run.Pipeline][run.Key] = map[uint64]*Run{}
		}
		r.Runs[run.Pipeline][run.Key][run.Seed] = run
		if !seen[run.Seed] {
			seen[run.Seed] = true
			r.Seeds = append(r.Seeds, run.Seed)
		}
	}
	sort.Slice(r.Seeds, func(i, j int) bool { return r.Seeds[i] < r.Seeds[j] })
	return r
}

func (r *Report) run(p, key string, seed uint64) *Run { return r.Runs[p][key][seed] }

// goalKeys are the Trident variants whose spread over seeds and share of the simulator's
// bound the RESULT line reports: the full system and the APM plugin's default (tuner off).
var goalKeys = []string{"trident", "trident-no-adaptation"}

// boundPct returns key's median throughput on pipeline p as a percentage of the
// queue-limited bound with the best config per regime (NaN without a bound).
func (r *Report) boundPct(p, key string) float64 {
	return 100 * r.norm(p, key) / r.boundNorm(p, boundQueueTuned)
}

// boundKind selects one of a pipeline's fluid bounds (see sim.FluidBound).
type boundKind int

const (
	boundDefault      boundKind = iota // admission-limited, default configurations
	boundTuned                         // admission-limited, best configuration per regime
	boundQueueDefault                  // queue-limited, default configurations
	boundQueueTuned                    // queue-limited, best configuration per regime
)

// boundNorm returns pipeline p's fluid bound of the given kind divided by the median
// measured Static throughput (NaN without a bound).
func (r *Report) boundNorm(p string, kind boundKind) float64 {
	b, ok := r.Bounds[p]
	if !ok {
		return math.NaN()
	}
	var st []float64
	for _, run := range r.Runs[p]["static"] {
		st = append(st, run.Throughput())
	}
	v := [...]float64{b.DefaultRecPerS, b.TunedRecPerS, b.QueueDefaultRecPerS, b.QueueTunedRecPerS}[kind]
	return v / median(st)
}

// perSeed applies f to every seed with both runs present and returns the values.
func (r *Report) perSeed(p, key, ref string, f func(a, b *Run) float64) []float64 {
	var vs []float64
	for _, seed := range r.Seeds {
		a, b := r.run(p, key, seed), r.run(p, ref, seed)
		if a == nil || b == nil || b.Throughput() <= 0 {
			continue
		}
		vs = append(vs, f(a, b))
	}
	return vs
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spread(vs []float64) (lo, hi float64) {
	if len(vs) == 0 {
		return math.NaN(), math.NaN()
	}
	lo, hi = vs[0], vs[0]
	for _, v := range vs {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	return lo, hi
}

func ratio(a, b *Run) float64 { return a.Throughput() / b.Throughput() }

// normAll returns key's per-seed throughput divided by Static's.
func (r *Report) normAll(p, key string) []float64 { return r.perSeed(p, key, "static", ratio) }

// norm returns the median over seeds of key's throughput divided by Static's (NaN if
// missing).
func (r *Report) norm(p, key string) float64 { return median(r.normAll(p, key)) }

func (r *Report) pct(p, key string) float64 {
	return median(r.perSeed(p, key, "trident", func(a, b *Run) float64 { return 100 * ratio(a, b) }))
}

// below counts the seeds where key's throughput is below full Trident's, of the n seeds
// both ran (a tie is not below): an ablation whose median is near 100 % is distinguishable
// from full Trident only if (nearly) every seed is below it (one-sided sign test: 7 of 7
// seeds has p = 0.008, 6 of 7 p = 0.06).
func (r *Report) below(p, key string) (below, n int) {
	for _, v := range r.perSeed(p, key, "trident", ratio) {
		n++
		if v < 1 {
			below++
		}
	}
	return below, n
}

func (r *Report) col(p string) int {
	if p == "video" {
		return 1
	}
	return 0
}

func f2(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", x)
}

func f1(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", x)
}

// overhead returns the shipped loop's mean wall time per round, in milliseconds, on
// pipeline p: the feed's (scrape, observation layer and tuner) and the planner's (its
// round, MILP solve included).
func (r *Report) overhead(p string) (feed, round float64) {
	var f, rd time.Duration
	var rounds int
	for _, run := range r.Runs[p]["trident"] {
		if run.Shipped == nil {
			continue
		}
		f, rd, rounds = f+run.Shipped.FeedWall, rd+run.Shipped.RoundWall, rounds+run.Shipped.Rounds
	}
	if rounds == 0 {
		return math.NaN(), math.NaN()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(rounds) }
	return ms(f), ms(rd)
}

// oom returns the median OOM events, downtime and throughput loss against the OOM-free
// oracle of the same seed.
func (r *Report) oom(p, key string) (events int, downtime, loss float64) {
	var ev, dt []float64
	for _, seed := range r.Seeds {
		if run := r.run(p, key, seed); run != nil {
			ev = append(ev, float64(run.Result.OOMs))
			dt = append(dt, run.Result.OOMDowntimeS)
		}
	}
	if len(ev) == 0 {
		return 0, math.NaN(), math.NaN()
	}
	loss = median(r.perSeed(p, key, "trident-oom-free", func(a, b *Run) float64 { return 100 * (1 - ratio(a, b)) }))
	return int(math.Round(median(ev))), median(dt), loss
}

// Tables renders every table of the report.
func (r *Report) Tables() []*benchfmt.Table {
	var out []*benchfmt.Table
	hdr := []string{"scheduler"}
	for _, p := range r.Pipelines {
		hdr = append(hdr, p+" (ours)", p+" (paper)")
	}
	t := &benchfmt.Table{Title: "Figure 2: end-to-end throughput normalised to Static (native baselines)", Header: hdr}
	for _, k := range fig2Keys {
		row := []string{k}
		for _, p := range r.Pipelines {
			peer := "n/a"
			if k == "static" {
				peer = "1.00"
			}
			row = append(row, f2(r.norm(p, k)), peer)
		}
		t.Rows = append(t.Rows, row)
	}
	out = append(out, t)

	if len(r.Bounds) > 0 {
		bt := &benchfmt.Table{Title: "Headroom: fluid upper bound of this calibration, normalised to the measured Static run", Header: []string{"figure"}}
		bt.Header = append(bt.Header, r.Pipelines...)
		rows := []struct {
			name string
			f    func(p string) float64
		}{
			{"ideal engines: per-regime accelerator split, default configs", func(p string) float64 { return r.boundNorm(p, boundDefault) }},
			{"ideal engines: per-regime split + best config per regime", func(p string) float64 { return r.boundNorm(p, boundTuned) }},
			{"queue-limited: per-regime split, default configs", func(p string) float64 { return r.boundNorm(p, boundQueueDefault) }},
			{"queue-limited: per-regime split + best config (the simulator's bound)", func(p string) float64 { return r.boundNorm(p, boundQueueTuned) }},
			{"trident (measured)", func(p string) float64 { return r.norm(p, "trident") }},
			{"trident / ideal-engine bound (%)", func(p string) float64 { return 100 * r.norm(p, "trident") / r.boundNorm(p, boundTuned) }},
			{"trident / queue-limited bound (%)", func(p string) float64 { return r.boundPct(p, "trident") }},
			{"trident-no-adaptation / queue-limited bound (%)", func(p string) float64 { return r.boundPct(p, "trident-no-adaptation") }},
		}
		for _, row := range rows {
			cells := []string{row.name}
			for _, p := range r.Pipelines {
				cells = append(cells, f2(row.f(p)))
			}
			bt.Rows = append(bt.Rows, cells)
		}
		out = append(out, bt)
	}

	t = &benchfmt.Table{Title: "Table 2: controlled comparison (shared observation + adaptation; baselines switch all-at-once)", Header: hdr}
	for _, k := range table2Keys {
		row := []string{k}
		for _, p := range r.Pipelines {
			row = append(row, f2(r.norm(p, k)), f2(paperTable2[k][r.col(p)]))
		}
		t.Rows = append(t.Rows, row)
	}
	out = append(out, t)

	h3 := []string{"scheduler"}
	for _, p := range r.Pipelines {
		h3 = append(h3, p+" (ours)", p+" seeds below 100 %", p+" (paper)")
	}
	t = &benchfmt.Table{Title: "Figure 3: ablation, % of full Trident throughput (median; seeds where the ablation is below full Trident)", Header: h3}
	for _, k := range fig3Keys {
		row := []string{fig3Labels[k]}
		for _, p := range r.Pipelines {
			below, n := r.below(p, k)
			row = append(row, f1(r.pct(p, k)), fmt.Sprintf("%d/%d", below, n), f1(paperFig3[k][r.col(p)]))
		}
		t.Rows = append(t.Rows, row)
	}
	out = append(out, t)

	if nt := r.netTable(); nt != nil {
		out = append(out, nt)
	}
	if pt := r.pilotTable(); pt != nil {
		out = append(out, pt)
	}
	if qt := r.queueTable(); qt != nil {
		out = append(out, qt)
	}

	h6 := []string{"metric"}
	for _, p := range r.Pipelines {
		h6 = append(h6, p+" unconstr. (ours)", "(paper)", p+" constr. (ours)", "(paper)")
	}
	t = &benchfmt.Table{Title: "Table 6: OOM events and downtime, unconstrained vs memory-constrained BO", Header: h6}
	for _, m := range []string{"ooms", "downtime", "loss"} {
		label := map[string]string{"ooms": "OOM events", "downtime": "cumulative downtime (s)", "loss": "throughput loss vs OOM-free oracle (%)"}[m]
		row := []string{label}
		for _, p := range r.Pipelines {
			ue, ud, ul := r.oom(p, "trident-unconstrained-bo")
			ce, cd, cl := r.oom(p, "trident")
			pp := paperTable6[p][m]
			switch m {
			case "ooms":
				row = append(row, fmt.Sprint(ue), fmt.Sprint(pp[0]), fmt.Sprint(ce), fmt.Sprint(pp[1]))
			case "downtime":
				row = append(row, fmt.Sprintf("%.0f", ud), fmt.Sprint(pp[0]), fmt.Sprintf("%.0f", cd), fmt.Sprint(pp[1]))
			case "loss":
				row = append(row, f1(ul), f1(pp[0]), f1(cl), f1(pp[1]))
			}
		}
		t.Rows = append(t.Rows, row)
	}
	out = append(out, t)

	t = &benchfmt.Table{Title: "Section 8.7: overhead per round of the shipped loop (ms, wall time on this machine; the paper's per layer beside)", Header: hdr}
	feedRow := []string{"feed round: observation + adaptation layers"}
	roundRow := []string{"planner round: scheduling layer (MILP solve)"}
	for _, p := range r.Pipelines {
		f, rd := r.overhead(p)
		feedRow = append(feedRow, fmt.Sprintf("%.2f", f), f1(paperOverheadMs["observe"]+paperOverheadMs["adapt"]))
		roundRow = append(roundRow, fmt.Sprintf("%.1f", rd), f1(paperOverheadMs["milp."+p]))
	}
	t.Rows = append(t.Rows, feedRow, roundRow)
	out = append(out, t)

	if len(r.Seeds) > 1 {
		hs := []string{"scheduler"}
		for _, p := range r.Pipelines {
			hs = append(hs, p+" median", p+" min", p+" max")
		}
		t = &benchfmt.Table{Title: fmt.Sprintf("Spread over %d seeds: throughput normalised to Static", len(r.Seeds)), Header: hs}
		for _, k := range allKeys() {
			row := []string{k}
			for _, p := range r.Pipelines {
				vs := r.normAll(p, k)
				lo, hi := spread(vs)
				row = append(row, f2(median(vs)), f2(lo), f2(hi))
			}
			t.Rows = append(t.Rows, row)
		}
		out = append(out, t)
	}

	t = &benchfmt.Table{Title: "Runs", Header: []string{"pipeline", "scheduler", "seed", "makespan (h)", "records/s", "vs static", "OOMs", "OOM downtime (s)", "mean egress MB/s/node", "wall (s)"}}
	for _, p := range r.Pipelines {
		for _, k := range allKeys() {
			for _, seed := range r.Seeds {
				run := r.run(p, k, seed)
				if run == nil {
					continue
				}
				res := run.Result
				st := r.run(p, "static", seed)
				vs := math.NaN()
				if st != nil && st.Throughput() > 0 {
					vs = ratio(run, st)
				}
				t.Rows = append(t.Rows, []string{p, k, fmt.Sprint(seed), fmt.Sprintf("%.2f", res.SimSeconds/3600), fmt.Sprintf("%.4g", res.Throughput),
					f2(vs), fmt.Sprint(res.OOMs), fmt.Sprintf("%.0f", res.OOMDowntimeS), fmt.Sprintf("%.0f", res.MeanEgressMBps),
					fmt.Sprintf("%.1f", run.Wall.Seconds())})
			}
		}
	}
	out = append(out, t)
	return out
}

// netFigures returns, per pipeline, the network-sensitivity figures: the placement
// ablation at NetGbps (% of full Trident on the same links), Trident's and Static's
// throughput at NetGbps as % of theirs at 100 Gbps, and the mean egress per node (MB/s)
// of Trident and of the ablation at NetGbps. Nil without the runs.
func (r *Report) netFigures(p string) map[string]float64 {
	tr, np := "trident"+NetSuffix, "trident-no-placement"+NetSuffix
	if r.Runs[p][tr] == nil || r.Runs[p][np] == nil {
		return nil
	}
	pct := func(key, ref string) float64 {
		return median(r.perSeed(p, key, ref, func(a, b *Run) float64 { return 100 * ratio(a, b) }))
	}
	egress := func(key string) float64 {
		var vs []float64
		for _, run := range r.Runs[p][key] {
			vs = append(vs, run.Result.MeanEgressMBps)
		}
		return median(vs)
	}
	return map[string]float64{
		"ablation_pct.trident-no-placement": pct(np, tr),
		"trident_pct_of_100g":               pct(tr, "trident"),
		"static_pct_of_100g":                pct("static"+NetSuffix, "static"),
		"egress_mbps.trident":               egress(tr),
		"egress_mbps.trident-no-placement":  egress(np),
	}
}

// netTable is the network-sensitivity table (nil without its runs).
func (r *Report) netTable() *benchfmt.Table {
	hdr := []string{"figure"}
	var pipes []string
	var figs []map[string]float64
	for _, p := range r.Pipelines {
		if f := r.netFigures(p); f != nil {
			hdr = append(hdr, p+" (ours)", p+" (paper, 100 Gbps)")
			pipes, figs = append(pipes, p), append(figs, f)
		}
	}
	if len(figs) == 0 {
		return nil
	}
	t := &benchfmt.Table{Title: fmt.Sprintf("Network sensitivity: links at %d Gbps instead of 100 (usable %.0f MB/s per node)", NetGbps, sim.LinkMBps(NetGbps)), Header: hdr}
	rows := []struct{ label, key, peer string }{
		{"w/o placement-aware scheduling, % of full Trident on the same links", "ablation_pct.trident-no-placement", "trident-no-placement"},
		{fmt.Sprintf("Trident at %d Gbps, %% of Trident at 100 Gbps", NetGbps), "trident_pct_of_100g", ""},
		{fmt.Sprintf("Static at %d Gbps, %% of Static at 100 Gbps", NetGbps), "static_pct_of_100g", ""},
		{"mean egress MB/s per node: Trident", "egress_mbps.trident", ""},
		{"mean egress MB/s per node: w/o placement-aware", "egress_mbps.trident-no-placement", ""},
	}
	for _, row := range rows {
		cells := []string{row.label}
		for k, p := range pipes {
			peer := "n/a"
			if row.peer != "" {
				peer = f1(paperFig3[row.peer][r.col(p)])
			}
			cells = append(cells, f1(figs[k][row.key]), peer)
		}
		t.Rows = append(t.Rows, cells)
	}
	return t
}

// queueKeys are the schedulers of the queue-sensitivity runs (key + QueueSuffix).
var queueKeys = []string{"static", "scoot", "ds2+shared", "trident"}

// queueFigures returns, per pipeline, the queue-sensitivity figures: each scheduler's
// throughput with the accelerator queues QueueX times larger, normalised to Static with
// the same queues ("norm.<key>") and as % of its own run with the calibrated queues
// ("pct_of_q1.<key>"). Nil without the runs.
func (r *Report) queueFigures(p string) map[string]float64 {
	ref := "static" + QueueSuffix
	if r.Runs[p][ref] == nil || r.Runs[p]["trident"+QueueSuffix] == nil {
		return nil
	}
	out := map[string]float64{}
	for _, k := range queueKeys {
		kq := k + QueueSuffix
		if r.Runs[p][kq] == nil {
			continue
		}
		out["norm."+k] = median(r.perSeed(p, kq, ref, ratio))
		out["pct_of_q1."+k] = median(r.perSeed(p, kq, k, func(a, b *Run) float64 { return 100 * ratio(a, b) }))
	}
	return out
}

// queueTable is the queue-sensitivity table (nil without its runs).
func (r *Report) queueTable() *benchfmt.Table {
	hdr := []string{"scheduler"}
	var figs []map[string]float64
	for _, p := range r.Pipelines {
		if f := r.queueFigures(p); f != nil {
			hdr = append(hdr, p+": norm. to Static", p+": % of own run at x1")
			figs = append(figs, f)
		}
	}
	if len(figs) == 0 {
		return nil
	}
	t := &benchfmt.Table{Title: fmt.Sprintf("Queue sensitivity: accelerator operators' queue bounds x%d (they also bound the records in flight)", QueueX), Header: hdr}
	for _, k := range queueKeys {
		cells := []string{k}
		for _, f := range figs {
			cells = append(cells, f2(f["norm."+k]), f1(f["pct_of_q1."+k]))
		}
		t.Rows = append(t.Rows, cells)
	}
	return t
}

// pilotFigures returns, per pipeline, the Table 2 schedulers and SCOOT normalised to a
// Static tuned on a pilot of the input's first workload regime instead of a sample of the
// whole dataset (key "static" is the calibrated Static on that scale). Nil without the runs.
func (r *Report) pilotFigures(p string) map[string]float64 {
	const ref = "static-pilot"
	if r.Runs[p][ref] == nil {
		return nil
	}
	out := map[string]float64{}
	for _, k := range append(slices.Clone(table2Keys), "scoot") {
		if r.Runs[p][k] != nil {
			out[k] = median(r.perSeed(p, k, ref, ratio))
		}
	}
	return out
}

// pilotTable is the Static-sensitivity table (nil without its runs).
func (r *Report) pilotTable() *benchfmt.Table {
	hdr := []string{"scheduler"}
	var figs []map[string]float64
	var cols []int
	for _, p := range r.Pipelines {
		if f := r.pilotFigures(p); f != nil {
			hdr = append(hdr, p+": norm. to pilot Static", p+" (paper, its Static)")
			figs = append(figs, f)
			cols = append(cols, r.col(p))
		}
	}
	if len(figs) == 0 {
		return nil
	}
	t := &benchfmt.Table{Title: "Static sensitivity: normalised to a Static tuned on a pilot of the first workload regime (not the whole dataset)", Header: hdr}
	for _, k := range append(slices.Clone(table2Keys), "scoot") {
		cells := []string{k}
		for i, f := range figs {
			peer := "n/a"
			if v, ok := paperTable2[k]; ok && k != "static" {
				peer = f2(v[cols[i]])
			}
			cells = append(cells, f2(f[k]), peer)
		}
		t.Rows = append(t.Rows, cells)
	}
	return t
}

func allKeys() []string {
	var ks []string
	for _, s := range specs() {
		ks = append(ks, s.key)
	}
	return ks
}

// Result returns the machine-readable figures and the paper's peers.
func (r *Report) Result() benchfmt.Result {
	fig := map[string]any{}
	peers := map[string]any{}
	round := func(x float64, d float64) any {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return math.Round(x*d) / d
	}
	for _, p := range r.Pipelines {
		c := r.col(p)
		for _, k := range allKeys() {
			if r.Runs[p][k] != nil {
				fig[p+".norm."+k] = round(r.norm(p, k), 1000)
			}
		}
		if _, ok := r.Bounds[p]; ok {
			fig[p+".bound.realloc_norm"] = round(r.boundNorm(p, boundDefault), 1000)
			fig[p+".bound.tuned_norm"] = round(r.boundNorm(p, boundTuned), 1000)
			fig[p+".bound.queue_realloc_norm"] = round(r.boundNorm(p, boundQueueDefault), 1000)
			fig[p+".bound.queue_tuned_norm"] = round(r.boundNorm(p, boundQueueTuned), 1000)
		}
		_, bounded := r.Bounds[p]
		for _, k := range goalKeys {
			if r.Runs[p][k] == nil {
				continue
			}
			if lo, hi := spread(r.normAll(p, k)); len(r.Seeds) > 1 {
				fig[p+".norm."+k+".min"] = round(lo, 1000)
				fig[p+".norm."+k+".max"] = round(hi, 1000)
			}
			if bounded {
				fig[p+".bound_pct."+k] = round(r.boundPct(p, k), 10)
			}
		}
		for _, k := range fig3Keys {
			fig[p+".ablation_pct."+k] = round(r.pct(p, k), 10)
			if below, n := r.below(p, k); n > 0 {
				fig[p+".ablation_seeds_below."+k] = below
				fig[p+".ablation_seeds."+k] = n
			}
			peers["paper."+p+".ablation_pct."+k] = paperFig3[k][c]
		}
		for _, k := range table2Keys {
			peers["paper."+p+".table2."+k] = paperTable2[k][c]
		}
		for k, v := range r.netFigures(p) {
			fig[fmt.Sprintf("%s.net%dg.%s", p, NetGbps, k)] = round(v, 10)
		}
		for k, v := range r.pilotFigures(p) {
			fig[p+".pilot_static.norm."+k] = round(v, 1000)
		}
		for k, v := range r.queueFigures(p) {
			fig[fmt.Sprintf("%s.queue_x%d.%s", p, QueueX, k)] = round(v, 1000)
		}
		ue, ud, ul := r.oom(p, "trident-unconstrained-bo")
		ce, cd, cl := r.oom(p, "trident")
		fig[p+".oom.unconstrained.events"] = ue
		fig[p+".oom.constrained.events"] = ce
		fig[p+".oom.unconstrained.downtime_s"] = round(ud, 1)
		fig[p+".oom.constrained.downtime_s"] = round(cd, 1)
		fig[p+".oom.unconstrained.loss_pct"] = round(ul, 10)
		fig[p+".oom.constrained.loss_pct"] = round(cl, 10)
		pp := paperTable6[p]
		peers["paper."+p+".oom.unconstrained.events"] = pp["ooms"][0]
		peers["paper."+p+".oom.constrained.events"] = pp["ooms"][1]
		peers["paper."+p+".oom.unconstrained.downtime_s"] = pp["downtime"][0]
		peers["paper."+p+".oom.constrained.downtime_s"] = pp["downtime"][1]
		peers["paper."+p+".oom.unconstrained.loss_pct"] = pp["loss"][0]
		peers["paper."+p+".oom.constrained.loss_pct"] = pp["loss"][1]
		f, rd := r.overhead(p)
		fig[p+".overhead_ms.feed_round"] = round(f, 1000)
		fig[p+".overhead_ms.planner_round"] = round(rd, 10)
		peers["paper."+p+".overhead_ms.milp"] = paperOverheadMs["milp."+p]
		var stThr []float64
		for _, st := range r.Runs[p]["static"] {
			stThr = append(stThr, st.Throughput())
		}
		if len(stThr) > 0 {
			fig[p+".static.records_per_s"] = round(median(stThr), 10000)
		}
	}
	peers["paper.overhead_ms.observe"] = paperOverheadMs["observe"]
	peers["paper.overhead_ms.adapt"] = paperOverheadMs["adapt"]
	fig["wall_s"] = round(r.Wall.Seconds(), 10)
	fig["seeds"] = len(r.Seeds)
	return benchfmt.Result{Bench: "e2e", Figures: fig, Peers: peers}
}

// WriteCSV writes one row per run to path.
func (r *Report) WriteCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("e2e csv: %w", err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"pipeline", "scheduler", "seed", "throughput_records_per_s", "normalized_to_static", "pct_of_trident",
		"makespan_s", "done", "ooms", "oom_downtime_s", "mean_egress_mb_s", "decisions", "decide_wall_s", "wall_s"})
	for _, p := range r.Pipelines {
		for _, k := range allKeys() {
			for _, seed := range r.Seeds {
				run := r.run(p, k, seed)
				if run == nil {
					continue
				}
				res := run.Result
				vs, pt := math.NaN(), math.NaN()
				if st := r.run(p, "static", seed); st != nil && st.Throughput() > 0 {
					vs = ratio(run, st)
				}
				if tr := r.run(p, "trident", seed); tr != nil && tr.Throughput() > 0 {
					pt = 100 * ratio(run, tr)
				}
				_ = w.Write([]string{p, k, fmt.Sprint(seed), fmt.Sprintf("%.6g", res.Throughput), fmt.Sprintf("%.4f", vs),
					fmt.Sprintf("%.2f", pt), fmt.Sprintf("%.0f", res.SimSeconds), fmt.Sprint(res.Done),
					fmt.Sprint(res.OOMs), fmt.Sprintf("%.0f", res.OOMDowntimeS), fmt.Sprintf("%.1f", res.MeanEgressMBps),
					fmt.Sprint(res.Decisions), fmt.Sprintf("%.3f", res.DecideWall.Seconds()), fmt.Sprintf("%.3f", run.Wall.Seconds())})
			}
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("e2e csv: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("e2e csv: %w", err)
	}
	return nil
}

// WriteSVG writes a grouped bar chart: Figure 2 (normalised throughput) and Figure 3
// (ablation) for every pipeline, ours next to the paper's where it publishes a number.
func (r *Report) WriteSVG(path string) error {
	var b strings.Builder
	const W, rowH, left = 900, 22, 260
	type bar struct {
		label string
		ours  float64
		paper float64
	}
	type panel struct {
		title string
		bars  []bar
		max   float64
		unit  string
	}
	var panels []panel
	for _, p := range r.Pipelines {
		pn := panel{title: p + ": throughput normalised to Static (Figure 2 / Table 2)", unit: "x"}
		for _, k := range append(append([]string{}, fig2Keys...), "ray-data+shared", "ds2+shared", "conttune+shared", "trident-all-at-once") {
			pv := math.NaN()
			if v, ok := paperTable2[k]; ok {
				pv = v[r.col(p)]
			}
			if k == "trident" || k == "static" {
				pv = paperTable2[k][r.col(p)]
			}
			pn.bars = append(pn.bars, bar{k, r.norm(p, k), pv})
		}
		panels = append(panels, pn)
		pa := panel{title: p + ": ablation, % of full Trident (Figure 3)", unit: "%"}
		for _, k := range fig3Keys {
			pa.bars = append(pa.bars, bar{fig3Labels[k], r.pct(p, k), paperFig3[k][r.col(p)]})
		}
		panels = append(panels, pa)
	}
	height := 40
	for i := range panels {
		for _, br := range panels[i].bars {
			for _, v := range []float64{br.ours, br.paper} {
				if !math.IsNaN(v) && v > panels[i].max {
					panels[i].max = v
				}
			}
		}
		height += 40 + len(panels[i].bars)*rowH + 10
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">Trident e2e benchmark (simulated, median of %d seeds): ours (blue) vs paper (grey)</text>`+"\n", len(r.Seeds))
	y := 40
	for _, pn := range panels {
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+15, esc(pn.title))
		y += 25
		scale := float64(W-left-80) / math.Max(pn.max, 1e-9)
		for _, br := range pn.bars {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+14, esc(br.label))
			if !math.IsNaN(br.ours) {
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="9" fill="#3366cc"/>`+"\n", left, y+2, br.ours*scale)
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10">%s%s</text>`+"\n", float64(left)+br.ours*scale+4, y+10, f2(br.ours), pn.unit)
			}
			if !math.IsNaN(br.paper) {
				fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="8" fill="#aaaaaa"/>`+"\n", left, y+12, br.paper*scale)
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" fill="#666">%s%s</text>`+"\n", float64(left)+br.paper*scale+4, y+20, f2(br.paper), pn.unit)
			}
			y += rowH
		}
		y += 15
	}
	b.WriteString("</svg>\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("e2e svg: %w", err)
	}
	return nil
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Write prints every table and the RESULT line to w and writes e2e.csv and e2e.svg into
// dir (created if needed; skipped when dir is empty).
func (r *Report) Write(w io.Writer, dir string) error {
	for _, t := range r.Tables() {
		if err := t.Write(w); err != nil {
			return err
		}
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("e2e: output directory: %w", err)
		}
		csvPath, svgPath := filepath.Join(dir, "e2e.csv"), filepath.Join(dir, "e2e.svg")
		if err := r.WriteCSV(csvPath); err != nil {
			return err
		}
		if err := r.WriteSVG(svgPath); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nwrote %s and %s\n", csvPath, svgPath)
	}
	fmt.Fprintf(w, "benchmark wall time: %.1f s\n", r.Wall.Seconds())
	return benchfmt.WriteResult(w, r.Result())
}
