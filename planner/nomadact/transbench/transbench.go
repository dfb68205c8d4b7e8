package transbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/nomadact"
)

// Mode is how the actuator renders a transition.
type Mode string

// The modes compared.
const (
	// UnfittedSurge is the rendering before the surge was fitted to the inventory: surge
	// (every old instance kept beside the new ones), then final.
	UnfittedSurge Mode = "unfitted-surge"
	// FittedSurge is the planner with -canary=false: a surge that replaces old instances
	// in place on full nodes (fitSurge), then final.
	FittedSurge Mode = "fitted-surge"
	// Canary is the planner's default: the candidate's first instance is a Nomad canary of
	// the operator's canary slot, promoted, then the surge and final versions.
	Canary Mode = "canary"
)

// Modes are the modes in the order the tables show them.
func Modes() []Mode { return []Mode{Canary, FittedSurge, UnfittedSurge} }

// options are the actuator options of m, and whether its versions are fitted to the
// inventory.
func (m Mode) options() (nomadact.Options, bool) {
	switch m {
	case Canary:
		return nomadact.Options{Canary: true}, true
	case FittedSurge:
		return nomadact.Options{}, true
	}
	return nomadact.Options{}, false
}

// Outcome is one transition (a scenario's whole chain) in one mode.
type Outcome struct {
	// Completed: every instance of the operator runs the candidate; otherwise a version
	// stalled (StalledAt is the index in Chain of its decision) and Nomad reverted it.
	Completed bool
	StalledAt int
	// Rounds is the job versions submitted (the stalled one included); Batches the
	// decisions applied (the stalled one included); Canaries the canary versions (none
	// when no canary slot had room: the transition then starts with its surge).
	Rounds, Batches, Canaries int
	// ExtraGPUs is the most GPUs a version asked beyond the nodes' capacity.
	ExtraGPUs int
	// LostSec is the operator's instance-seconds out of service; LostShare that over its
	// instances × WindowSec; OtherLostSec the other operators' (0 when the rendering
	// touches only the transitioning operator).
	LostSec, LostShare, OtherLostSec float64
	// Seconds is the time the versions took (the stall's apply timeout and the revert
	// included).
	Seconds float64
	// ShortAtEnd is how many planned instances of the operator do not run at the end.
	ShortAtEnd int
}

// RunScenario plays scenario s in mode m: the initial decision's final version, then each
// decision of the chain with the versions the actuator renders for it, against a Cluster.
func RunScenario(s *Scenario, m Mode) (Outcome, error) {
	o, fitted := m.options()
	var nodes map[string]fsm.Node
	if fitted {
		nodes = s.NodeMap()
	}
	c := NewCluster(s.Pipeline, s.Nodes)
	want := s.Want()
	first, err := nomadact.RenderVersions(s.Pipeline, s.Initial, nil, nil, o)
	if err != nil {
		return Outcome{}, fmt.Errorf("seed %d %s: initial decision: %w", s.Seed, m, err)
	}
	var job *api.Job
	for _, v := range first {
		st, err := c.Apply(v.Job, want)
		if err != nil {
			return Outcome{}, fmt.Errorf("seed %d %s: initial decision: %w", s.Seed, m, err)
		}
		if st.Stalled {
			return Outcome{}, fmt.Errorf("seed %d %s: the initial decision does not fit nodes %v", s.Seed, m, st.Blocked)
		}
		job = v.Job
	}
	out := Outcome{Completed: true, StalledAt: -1}
	add := func(st Step) {
		out.Seconds += st.Seconds
		out.ExtraGPUs = max(out.ExtraGPUs, st.ExtraGPUs)
		for op, l := range st.Lost {
			if op == s.Op {
				out.LostSec += l
			} else {
				out.OtherLostSec += l
			}
		}
	}
chain:
	for i, d := range s.Chain {
		vs, err := nomadact.RenderVersions(s.Pipeline, d, job, nodes, o)
		if err != nil {
			return out, fmt.Errorf("seed %d %s: %w", s.Seed, m, err)
		}
		out.Batches++
		for _, v := range vs {
			st, err := c.Apply(v.Job, want)
			if err != nil {
				return out, fmt.Errorf("seed %d %s: decision %d, %s version: %w", s.Seed, m, d.Index, v.Phase, err)
			}
			out.Rounds++
			if v.Phase == nomadact.PhaseCanary {
				out.Canaries++
			}
			add(st)
			if st.Stalled {
				// The apply timeout fails the deployment; auto_revert restores the last
				// stable version, and the decision (the candidate) is dropped.
				rev, err := c.Apply(job, want)
				if err != nil {
					return out, fmt.Errorf("seed %d %s: revert of decision %d: %w", s.Seed, m, d.Index, err)
				}
				add(rev)
				out.Completed, out.StalledAt = false, i
				break chain
			}
			job = v.Job
		}
	}
	out.LostShare = out.LostSec / (float64(want[s.Op]) * WindowSec)
	out.ShortAtEnd = max(0, want[s.Op]-c.Serving(s.Op))
	return out, nil
}

// Config selects the scenarios of Run.
type Config struct {
	// Seeds: scenarios 1..Seeds, each packed and with spare GPUs.
	Seeds int
	// MaxBatch caps the instances one decision moves (the planner's -max-batch).
	MaxBatch int
	// Progress, when set, receives progress lines; Verbose adds one per scenario and mode.
	Progress io.Writer
	Verbose  bool
}

// variant is a row group of the tables: packed clusters or spare GPUs.
type variant struct {
	spare       bool
	key, title  string
	description string
}

func variants() []variant {
	return []variant{
		{false, "packed", "Transitions on packed clusters", "the operator holds every GPU of its nodes"},
		{true, "spare", "Same plans with spare GPUs", "its nodes have one instance's worth of GPUs free"},
	}
}

// Run plays every scenario of cfg in every mode, writes the tables to w and returns the
// result for the RESULT line: our figures (canary, fitted surge) and the peer's (the
// unfitted surge, the rendering before the fix).
func Run(ctx context.Context, cfg Config, w io.Writer) (benchfmt.Result, error) {
	res := benchfmt.Result{Bench: "transitions", Figures: map[string]any{}, Peers: map[string]any{}}
	if cfg.Seeds <= 0 || cfg.MaxBatch <= 0 {
		return res, fmt.Errorf("transbench: seeds %d and max batch %d must be > 0", cfg.Seeds, cfg.MaxBatch)
	}
	start := time.Now()
	outcomes := map[string]map[Mode][]Outcome{}
	var instances []float64
	for _, v := range variants() {
		outcomes[v.key] = map[Mode][]Outcome{}
	}
	for seed := uint64(1); seed <= uint64(cfg.Seeds); seed++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		for _, v := range variants() {
			s, err := Generate(seed, cfg.MaxBatch, v.spare)
			if err != nil {
				return res, err
			}
			if !v.spare {
				instances = append(instances, float64(s.Want()[s.Op]))
			}
			for _, m := range Modes() {
				o, err := RunScenario(s, m)
				if err != nil {
					return res, err
				}
				outcomes[v.key][m] = append(outcomes[v.key][m], o)
				if cfg.Verbose && cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "seed %d %s %s: %d instances of %s on %d nodes, %d batches: completed %v, %d versions, lost %.0f instance-s (%.1f %%), +%d GPUs\n",
						seed, v.key, m, s.Want()[s.Op], s.Op, len(s.Initial.Operators[s.Op].Nodes), len(s.Chain), o.Completed, o.Rounds, o.LostSec, 100*o.LostShare, o.ExtraGPUs)
				}
			}
		}
		if cfg.Progress != nil && (seed%10 == 0 || seed == uint64(cfg.Seeds)) {
			fmt.Fprintf(cfg.Progress, "transitions: %d/%d seeds (%s)\n", seed, cfg.Seeds, time.Since(start).Round(time.Millisecond))
		}
	}
	fmt.Fprintf(w, "config transitions of one accelerator operator, %d seeds, at most %d instance(s) per decision; %s instances per transition (median), load average %s\n",
		cfg.Seeds, cfg.MaxBatch, num(median(instances)), benchfmt.LoadAvg())
	fmt.Fprintf(w, "rounds, lost and seconds are over the completed transitions; lost = the operator's instance-seconds out of service, share = lost / (instances × %.0f s)\n", WindowSec)
	for _, v := range variants() {
		t := benchfmt.Table{Title: fmt.Sprintf("%s (%s)", v.title, v.description),
			Header: []string{"mode", "completed", "canaried", "rounds med", "worst", "versions/batch", "lost inst-s med", "worst", "lost share med", "worst", "extra GPUs max", "seconds med"}}
		for _, m := range Modes() {
			st := summarise(outcomes[v.key][m])
			t.AddRow(string(m), fmt.Sprintf("%d/%d", st.completed, st.n), fmt.Sprintf("%d/%d", st.canaried, st.n), opt(st.roundsMed), opt(st.roundsWorst), opt(st.perBatch),
				opt(st.lostMed), opt(st.lostWorst), pct(st.shareMed), pct(st.shareWorst), st.extraGPUs, opt(st.secondsMed))
			dst := res.Figures
			if m == UnfittedSurge {
				dst = res.Peers
			}
			st.put(dst, v.key+"_"+strings.ReplaceAll(string(m), "-", "_"))
		}
		if err := t.Write(w); err != nil {
			return res, fmt.Errorf("transbench: %w", err)
		}
	}
	fmt.Fprintln(w)
	res.Figures["seeds"] = cfg.Seeds
	res.Figures["max_batch"] = cfg.MaxBatch
	res.Figures["instances_median"] = median(instances)
	return res, nil
}

// stats summarise the outcomes of one mode and variant; NaN where no transition completed.
type stats struct {
	n, completed, canaried, extraGPUs, otherLost, short            int
	roundsMed, roundsWorst, perBatch, lostMed, lostWorst, shareMed float64
	shareWorst, secondsMed                                         float64
}

func summarise(outs []Outcome) stats {
	st := stats{n: len(outs)}
	var rounds, perBatch, lost, share, secs []float64
	for _, o := range outs {
		st.extraGPUs = max(st.extraGPUs, o.ExtraGPUs)
		if o.OtherLostSec > 0 {
			st.otherLost++
		}
		if o.Canaries > 0 {
			st.canaried++
		}
		if !o.Completed {
			continue
		}
		st.completed++
		if o.ShortAtEnd > 0 {
			st.short++
		}
		rounds = append(rounds, float64(o.Rounds))
		perBatch = append(perBatch, float64(o.Rounds)/float64(o.Batches))
		lost = append(lost, o.LostSec)
		share = append(share, o.LostShare)
		secs = append(secs, o.Seconds)
	}
	st.roundsMed, st.roundsWorst = median(rounds), worst(rounds)
	st.perBatch = median(perBatch)
	st.lostMed, st.lostWorst = median(lost), worst(lost)
	st.shareMed, st.shareWorst = median(share), worst(share)
	st.secondsMed = median(secs)
	return st
}

// put records st under prefix in m (figures left out where no transition completed).
func (st stats) put(m map[string]any, prefix string) {
	m[prefix+"_completed_share"] = round(float64(st.completed)/float64(max(1, st.n)), 3)
	m[prefix+"_canaried_share"] = round(float64(st.canaried)/float64(max(1, st.n)), 3)
	m[prefix+"_extra_gpus_max"] = st.extraGPUs
	m[prefix+"_other_operators_lost"] = st.otherLost
	m[prefix+"_short_at_end"] = st.short
	for k, v := range map[string]float64{
		"rounds_median": st.roundsMed, "rounds_worst": st.roundsWorst, "versions_per_batch_median": st.perBatch,
		"lost_instance_s_median": st.lostMed, "lost_instance_s_worst": st.lostWorst,
		"lost_share_median": st.shareMed, "lost_share_worst": st.shareWorst, "seconds_median": st.secondsMed,
	} {
		if !math.IsNaN(v) {
			m[prefix+"_"+k] = round(v, 4)
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func worst(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	w := v[0]
	for _, x := range v {
		w = math.Max(w, x)
	}
	return w
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

func num(v float64) string { return fmt.Sprintf("%.4g", v) }

// opt formats v, "–" for NaN.
func opt(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return num(v)
}

// pct formats a share as a percentage, "–" for NaN.
func pct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.1f %%", 100*v)
}
