package soakbench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
)

// Goals of issue #28.
const (
	// GoalIdleRounds is the most rounds per interval an idle leader may run (one more per
	// window is allowed for the window's edges, see AtMostOnePerInterval).
	GoalIdleRounds = 1.0
	// GoalIdleCPU is the CPU of an idle leader, in % of one core, it must stay below.
	GoalIdleCPU = 2.0
	// GoalRSSFlat is the largest relative change of a server's RSS over the soak.
	GoalRSSFlat = 0.10
	// GoalOversizeLatency bounds the time to the 413 of a request above the body limit.
	GoalOversizeLatency = 100 * time.Millisecond
	// GoalOversizeRSS is the RSS growth of a server over all the oversize requests it
	// must stay below: the size of one 5 MiB body. A server that kept even one whole
	// oversize body would grow by at least that much, while the Go runtime's own drift
	// between two samples (heap growth, the scavenger returning pages) is about 1 MiB.
	GoalOversizeRSS = 5 << 20
)

// Goal is one goal with the figure it is judged on.
type Goal struct {
	// Key names the goal in the RESULT line.
	Key string
	// Name and Figure are for people.
	Name, Figure string
	// Met reports whether the figure meets the goal.
	Met bool
}

func metText(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// phase returns the named phase, if it ran.
func (r *Report) phase(name string) (Phase, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return Phase{}, false
}

// RSSGrowth is each server's relative RSS change over the whole soak: from the start of
// the idle phase (after the first decision applied and two intervals settled) to the end
// of the busy phase. It includes the growth of the heap to each phase's working set.
func (r *Report) RSSGrowth() []float64 {
	idle, ok1 := r.phase("idle")
	busy, ok2 := r.phase("busy")
	if !ok1 || !ok2 {
		return nil
	}
	out := make([]float64, len(r.Servers))
	for i := range out {
		out[i] = Growth(idle.RSSStart[i], busy.RSSEnd[i])
	}
	return out
}

// RSSDrift is each server's largest relative RSS change within a phase after its
// warm-up (Phase.RSSWarm to Phase.RSSEnd), over the phases that ran: the growth a leak
// would show, without the step to a phase's working set.
func (r *Report) RSSDrift() []float64 {
	if len(r.Phases) == 0 {
		return nil
	}
	out := make([]float64, len(r.Servers))
	for _, p := range r.Phases {
		if len(p.RSSWarm) != len(out) || len(p.RSSEnd) != len(out) {
			continue
		}
		for i := range out {
			if g := Growth(p.RSSWarm[i], p.RSSEnd[i]); math.Abs(g) > math.Abs(out[i]) {
				out[i] = g
			}
		}
	}
	return out
}

// AnonDrift is RSSDrift of the servers' private anonymous memory (RssAnon): the part a
// leak of the Go heap or of C allocations grows, without code pages first touched late.
func (r *Report) AnonDrift() []float64 {
	if len(r.Phases) == 0 {
		return nil
	}
	out := make([]float64, len(r.Servers))
	for _, p := range r.Phases {
		if len(p.AnonWarm) != len(out) || len(p.AnonEnd) != len(out) {
			continue
		}
		for i := range out {
			if g := Growth(p.AnonWarm[i], p.AnonEnd[i]); math.Abs(g) > math.Abs(out[i]) {
				out[i] = g
			}
		}
	}
	return out
}

// OversizeRSSGrowth is each server's RSS change in bytes over the oversize requests.
func (r *Report) OversizeRSSGrowth() []int64 {
	out := make([]int64, len(r.OversizeRSS))
	for i, v := range r.OversizeRSS {
		out[i] = int64(v[2]) - int64(v[0])
	}
	return out
}

// oversizeStats returns the requests refused (Refused) and the highest latency of all.
func (r *Report) oversizeStats(filter func(OversizeRequest) bool) (n, ok int, maxLat, median time.Duration) {
	var lats []time.Duration
	for _, q := range r.Oversize {
		if !filter(q) {
			continue
		}
		n++
		if q.Refused() {
			ok++
		}
		lats = append(lats, q.Latency)
		maxLat = max(maxLat, q.Latency)
	}
	if len(lats) > 0 {
		slices.Sort(lats)
		median = lats[len(lats)/2]
	}
	return n, ok, maxLat, median
}

func all(OversizeRequest) bool { return true }

// Goals judges the run against issue #28's goals.
func (r *Report) Goals() []Goal {
	var out []Goal
	if idle, ok := r.phase("idle"); ok {
		intervals := idle.Elapsed.Seconds() / idle.Interval.Seconds()
		changed := len(idle.Leaders) > 1
		fig := fmt.Sprintf("%.2f (%d rounds in %.1f intervals)", idle.RoundsPerInterval(), idle.Rounds, intervals)
		if changed {
			fig += "; leadership moved: " + strings.Join(idle.Leaders, ", ")
		}
		out = append(out, Goal{Key: "idle_rounds", Name: "idle leader <= 1 round per interval",
			Figure: fig, Met: AtMostOnePerInterval(idle.Rounds, idle.Elapsed, idle.Interval)})
		cpu := idle.CPU[idle.LeaderIndex]
		out = append(out, Goal{Key: "idle_cpu", Name: "idle leader < 2 % of a core",
			Figure: fmt.Sprintf("%.2f %% (%s)", cpu, idle.Leader), Met: cpu < GoalIdleCPU && !changed})
	}
	if g := r.RSSDrift(); g != nil {
		worst, at := 0.0, ""
		for i, v := range g {
			if math.Abs(v) >= math.Abs(worst) {
				worst, at = v, r.Servers[i]
			}
		}
		fig := fmt.Sprintf("largest change within a phase after its %s warm-up %+.1f %% (%s)", r.Options.Warmup, 100*worst, at)
		if whole := r.RSSGrowth(); whole != nil {
			w := 0.0
			for _, v := range whole {
				if math.Abs(v) > math.Abs(w) {
					w = v
				}
			}
			fig += fmt.Sprintf("; over the whole soak, warm-up included, %+.1f %%", 100*w)
		}
		if a := r.AnonDrift(); a != nil {
			w := 0.0
			for _, v := range a {
				if math.Abs(v) > math.Abs(w) {
					w = v
				}
			}
			fig += fmt.Sprintf("; private anonymous memory (RssAnon) after warm-up %+.1f %%", 100*w)
		}
		out = append(out, Goal{Key: "rss_flat", Name: "RSS flat within 10 % over the soak (after warm-up)",
			Figure: fig, Met: math.Abs(worst) <= GoalRSSFlat})
	}
	if len(r.Oversize) > 0 {
		n, ok, maxLat, _ := r.oversizeStats(all)
		out = append(out, Goal{Key: "oversize_413", Name: "above the limit: 413 (411 without Content-Length) in < 100 ms",
			Figure: fmt.Sprintf("%d/%d refused, slowest %.1f ms", ok, n, ms(maxLat)), Met: ok == n && maxLat < GoalOversizeLatency})
		var worst, cl, ch int64
		at := ""
		for i, g := range r.OversizeRSSGrowth() {
			if at == "" || g > worst {
				worst, at = g, r.Servers[i]
			}
			v := r.OversizeRSS[i]
			if i == 0 {
				cl, ch = int64(v[1])-int64(v[0]), int64(v[2])-int64(v[1])
			}
			cl, ch = max(cl, int64(v[1])-int64(v[0])), max(ch, int64(v[2])-int64(v[1]))
		}
		out = append(out, Goal{Key: "oversize_rss", Name: "above the limit: no RSS growth (< 5 MiB)",
			Figure: fmt.Sprintf("largest growth %+.1f MiB (%s); largest over the Content-Length ones %+.1f, over the chunked ones %+.1f", mibSigned(worst), at, mibSigned(cl), mibSigned(ch)),
			Met:    worst < GoalOversizeRSS})
	}
	return out
}

func mibSigned(b int64) float64 { return float64(b) / (1 << 20) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// Tables renders the report for people.
func (r *Report) Tables() []benchfmt.Table {
	hz := fmt.Sprintf("CLK_TCK %g from getconf", r.ClockTick)
	if r.ClockTickAssumed {
		hz = fmt.Sprintf("CLK_TCK assumed %g: getconf failed", r.ClockTick)
	}
	var ts []benchfmt.Table
	sch := benchfmt.Table{
		Title:  fmt.Sprintf("planner soak: 3 servers on real Nomad, -interval %s", r.Options.Interval),
		Header: []string{"phase", "window", "leader", "rounds/interval", "solves/interval", "Nomad req/round", "raft entries", "decisions committed / sent to Nomad / done", "load avg start -> end"},
	}
	cpu := benchfmt.Table{Title: "CPU, % of one core (" + hz + "; * = leader)", Header: append([]string{"phase"}, r.Servers...)}
	for _, p := range r.Phases {
		dec := fmt.Sprint(p.Decisions)
		if p.Name == "busy" {
			dec = fmt.Sprintf("%d / %d / %d", p.Decisions, p.SentToNomad, p.Done)
		}
		sch.AddRow(p.Name, p.Elapsed.Round(100*time.Millisecond), strings.Join(p.Leaders, ","),
			fmt.Sprintf("%.2f", p.RoundsPerInterval()), fmt.Sprintf("%.2f", p.SolvesPerInterval()), fmt.Sprintf("%.2f", p.NomadPerRound()),
			p.RaftEntries, dec, p.LoadStart+" -> "+p.LoadEnd)
		row := []any{p.Name}
		for i, c := range p.CPU {
			mark := ""
			if i == p.LeaderIndex {
				mark = "*"
			}
			row = append(row, fmt.Sprintf("%.2f%s", c, mark))
		}
		cpu.AddRow(row...)
	}
	ts = append(ts, sch, cpu)
	if busy, ok := r.phase("busy"); ok {
		failed := fmt.Sprint(busy.ObserveErrors)
		if busy.ObserveLastErr != "" {
			failed += " (last: " + busy.ObserveLastErr + ")"
		}
		ts = append(ts, benchfmt.Table{Title: "busy phase feed", Header: []string{"observation requests", "failed", "ignored (stale epoch)", "capacity switches", "last decision"},
			Rows: [][]string{{fmt.Sprint(busy.Observations), failed, fmt.Sprint(busy.Ignored), fmt.Sprint(busy.Flips), busy.LastStatus}}})
	}
	idle, ok1 := r.phase("idle")
	busy, ok2 := r.phase("busy")
	if ok1 && ok2 {
		rss := benchfmt.Table{Title: "RSS, MiB (sampled every " + r.Options.Sample.String() + "; warm = " + r.Options.Warmup.String() + " into the phase)",
			Header: []string{"server", "idle start", "idle warm", "idle end", "busy warm", "busy end", "max", "after warm-up", "whole soak"}}
		g, d := r.RSSGrowth(), r.RSSDrift()
		f := func(v []uint64, i int) string {
			if i >= len(v) {
				return "-"
			}
			return fmt.Sprintf("%.1f", mib(v[i]))
		}
		for i, id := range r.Servers {
			rss.AddRow(id, f(idle.RSSStart, i), f(idle.RSSWarm, i), f(idle.RSSEnd, i), f(busy.RSSWarm, i), f(busy.RSSEnd, i),
				fmt.Sprintf("%.1f", mib(max(idle.RSSMax[i], busy.RSSMax[i]))), fmt.Sprintf("%+.1f %%", 100*d[i]), fmt.Sprintf("%+.1f %%", 100*g[i]))
		}
		ts = append(ts, rss)
	}
	if len(r.Raft) > 0 {
		rt := benchfmt.Table{Title: "raft state (raft.db + snapshots/), KiB", Header: []string{"server", "start", "after idle", "after busy", "after oversize"}}
		for i, id := range r.Servers {
			v := r.Raft[i]
			rt.AddRow(id, kib(v[0]), kib(v[1]), kib(v[2]), kib(v[3]))
		}
		ts = append(ts, rt)
	}
	if len(r.Oversize) > 0 {
		ot := benchfmt.Table{Title: fmt.Sprintf("requests above the 4 MiB limit: PUT /v1/pipelines/%s with a 5 MiB body", JobID),
			Header: []string{"body", "target", "requests", "refused", "median ms", "max ms"}}
		for _, chunked := range []bool{false, true} {
			for _, target := range []string{"leader", "follower"} {
				n, ok, maxLat, med := r.oversizeStats(func(q OversizeRequest) bool { return q.Chunked == chunked && q.Target == target })
				if n == 0 {
					continue
				}
				body, srv := "Content-Length", r.OversizeLeader
				if chunked {
					body = "chunked"
				}
				if target == "follower" {
					srv = r.OversizeFollower
				}
				ot.AddRow(body, target+" "+srv, n, ok, fmt.Sprintf("%.1f", ms(med)), fmt.Sprintf("%.1f", ms(maxLat)))
			}
		}
		orss := benchfmt.Table{Title: "RSS around the oversize requests, MiB", Header: []string{"server", "before", "after Content-Length ones", "after chunked ones", "growth", r.Options.Settle.String() + " later"}}
		for i, id := range r.Servers {
			v := r.OversizeRSS[i]
			orss.AddRow(id, fmt.Sprintf("%.1f", mib(v[0])), fmt.Sprintf("%.1f", mib(v[1])), fmt.Sprintf("%.1f", mib(v[2])),
				fmt.Sprintf("%+.1f", mibSigned(r.OversizeRSSGrowth()[i])), fmt.Sprintf("%.1f", mib(v[3])))
		}
		ts = append(ts, ot, orss)
	}
	gt := benchfmt.Table{Title: "goals (issue #28)", Header: []string{"goal", "figure", ""}}
	for _, g := range r.Goals() {
		gt.AddRow(g.Name, g.Figure, metText(g.Met))
	}
	return append(ts, gt)
}

func kib(b int64) string {
	if b < 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f", float64(b)/1024)
}

// Result is the machine-readable outcome. There is no external peer: peers holds the
// goals the figures are judged against.
func (r *Report) Result() benchfmt.Result {
	f := map[string]any{
		"interval_s":      r.Options.Interval.Seconds(),
		"clk_tck":         r.ClockTick,
		"clk_tck_assumed": r.ClockTickAssumed,
	}
	for _, p := range r.Phases {
		k := p.Name + "."
		f[k+"window_s"] = round2(p.Elapsed.Seconds())
		f[k+"rounds"] = p.Rounds
		f[k+"solves"] = p.Solves
		f[k+"nomad_requests"] = p.NomadRequests
		f[k+"rounds_per_interval"] = round2(p.RoundsPerInterval())
		f[k+"solves_per_interval"] = round2(p.SolvesPerInterval())
		f[k+"nomad_requests_per_round"] = round2(p.NomadPerRound())
		f[k+"raft_entries"] = p.RaftEntries
		f[k+"decisions"] = p.Decisions
		f[k+"leader"] = p.Leader
		f[k+"leader_changes"] = len(p.Leaders) - 1
		f[k+"leader_cpu_pct"] = round2(p.CPU[p.LeaderIndex])
		fol := 0.0
		for i, c := range p.CPU {
			if i != p.LeaderIndex {
				fol = max(fol, c)
			}
		}
		f[k+"follower_cpu_pct_max"] = round2(fol)
		f[k+"load_avg_start"] = load1(p.LoadStart)
		f[k+"load_avg_end"] = load1(p.LoadEnd)
		if p.Name == "busy" {
			f[k+"decisions_sent_to_nomad"] = p.SentToNomad
			f[k+"decisions_done"] = p.Done
			f[k+"observation_requests"] = p.Observations
			f[k+"observation_errors"] = p.ObserveErrors
		}
	}
	if g := r.RSSGrowth(); g != nil {
		idle, _ := r.phase("idle")
		busy, _ := r.phase("busy")
		for i, id := range r.Servers {
			k := "rss." + id + "."
			f[k+"start_mib"] = round2(mib(idle.RSSStart[i]))
			f[k+"end_mib"] = round2(mib(busy.RSSEnd[i]))
			f[k+"max_mib"] = round2(mib(max(idle.RSSMax[i], busy.RSSMax[i])))
			f[k+"change_pct"] = round2(100 * g[i])
			f[k+"drift_after_warmup_pct"] = round2(100 * r.RSSDrift()[i])
			if a := r.AnonDrift(); a != nil {
				f[k+"anon_drift_after_warmup_pct"] = round2(100 * a[i])
			}
		}
	}
	for i, id := range r.Servers {
		if i < len(r.Raft) {
			f["raft."+id+".start_kib"] = round2(float64(r.Raft[i][0]) / 1024)
			f["raft."+id+".end_kib"] = round2(float64(r.Raft[i][3]) / 1024)
		}
	}
	if len(r.Oversize) > 0 {
		n, ok, maxLat, _ := r.oversizeStats(all)
		f["oversize.requests"] = n
		f["oversize.answered_413"] = ok
		f["oversize.max_latency_ms"] = round2(ms(maxLat))
		var worst int64
		for i, g := range r.OversizeRSSGrowth() {
			if i == 0 || g > worst {
				worst = g
			}
		}
		f["oversize.rss_growth_mib_max"] = round2(mibSigned(worst))
	}
	for _, g := range r.Goals() {
		f["goal."+g.Key] = metText(g.Met)
	}
	return benchfmt.Result{Bench: "planner", Figures: f, Peers: map[string]any{
		"goal.idle_rounds_per_interval_max": GoalIdleRounds,
		"goal.idle_leader_cpu_pct_max":      GoalIdleCPU,
		"goal.rss_change_pct_max":           100 * GoalRSSFlat,
		"goal.oversize_latency_ms_max":      ms(GoalOversizeLatency),
		"goal.oversize_rss_growth_mib_max":  float64(GoalOversizeRSS) / (1 << 20),
	}}
}
