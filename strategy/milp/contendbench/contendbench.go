// Package contendbench measures the MILP's contention term (milp.Contention, CAPSys-style,
// seed 003): on small CPU clusters running a pipeline whose network- and IO-heavy
// operators slow each other down when co-located, it compares the plan made with the term
// against the plan made without it (same problem, declarations stripped), both evaluated
// under the same simulated contention models:
//
//   - shared: a node's contended resource of one kind is shared work-conservingly by the
//     instances of that kind on the node; each uses Weight/Capacity of it per record it
//     processes, so the placement carries the best routing whose per-node use stays
//     within 1 (milp.Route of the placement under the declaring problem). The term is
//     this model's constraint: a plan made with it loses nothing here.
//   - flat: every contending instance runs flat out (a pull-based data plane with a
//     backlog), so node n's demand of kind k is L = sum_i Weight_i x_in whatever the
//     routing, and when L > 1 every such instance on n runs at 1/L of its capacity; the
//     pipeline carries min_i (sum_n x_in mu_i f_in) / A_i, f_in the smallest slowdown of
//     i's kinds on n (egress is unlimited in these instances). The term does not model
//     this (it charges the resource by routed rate, not by instance), so it is an
//     independent check.
package contendbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/strategy/milp"
)

// Spec selects one instance.
type Spec struct {
	// Nodes is the cluster size.
	Nodes int
	// Seed drives the operators' profiles.
	Seed uint64
}

// String names the instance, e.g. "contend/8/s3".
func (s Spec) String() string { return fmt.Sprintf("contend/%d/s%d", s.Nodes, s.Seed) }

// op is the nominal profile of one operator of the generated pipeline.
type op struct {
	name string
	cpu  float64 // cores per instance
	rate float64 // input records/s per instance, before jitter
	amp  float64 // multiplier of the amplification after this operator
	kind string  // contended resource ("" none)
}

// ops is an ingest-transform-write pipeline: fetching and uploading saturate the network,
// spilling and indexing the local disk.
var ops = []op{
	{"fetch", 1, 20, 1, "network"},
	{"decode", 2, 8, 4, ""},
	{"spill-sort", 1, 30, 1, "io"},
	{"transform", 2, 10, 1, ""},
	{"index", 1, 25, 0.5, "io"},
	{"upload", 1, 15, 1, "network"},
}

// Generate builds the instance of s: nodes of 16 or 32 cores with unlimited egress, and
// the pipeline above with capacities jittered by +-25 % and contention weights drawn so
// that, at the throughput the pooled cores allow, each kind's pooled demand is 60-100 %
// of the cluster's (spreading the contending instances is needed, and enough).
func Generate(s Spec) (*milp.Problem, error) {
	if s.Nodes <= 0 {
		return nil, fmt.Errorf("contendbench: Nodes must be > 0, got %d", s.Nodes)
	}
	rng := rand.New(rand.NewPCG(s.Seed, uint64(s.Nodes)*104729))
	p := &milp.Problem{Params: milp.Params{WindowSec: 300}}
	C := 0.0
	for n := range s.Nodes {
		cpu := 16.0
		if n%3 == 2 {
			cpu = 32
		}
		C += cpu
		p.Nodes = append(p.Nodes, milp.Node{Name: fmt.Sprintf("node-%02d", n), CPU: cpu, MemMB: 64 << 10, EgressBps: math.Inf(1)})
	}
	amp, cpuPerT := 1.0, 0.0
	for _, o := range ops {
		mu := o.rate * (0.75 + 0.5*rng.Float64())
		p.Operators = append(p.Operators, milp.Operator{Name: o.name, CPU: o.cpu, MemMB: 2048, Capacity: mu,
			Amplification: amp, OutputBytes: 1e5, LaunchSec: 5 + 5*rng.Float64(), TerminateSec: 2})
		cpuPerT += o.cpu * amp / mu
		amp *= o.amp
	}
	Tcpu := C / cpuPerT
	for _, kind := range []string{"network", "io"} {
		var idx []int
		raw := make([]float64, len(ops))
		demand := 0.0 // pooled resource use at Tcpu with the raw weights
		for i, o := range ops {
			if o.kind != kind {
				continue
			}
			idx = append(idx, i)
			raw[i] = 0.5 + 0.5*rng.Float64()
			op := &p.Operators[i]
			demand += raw[i] * op.Amplification * Tcpu / op.Capacity
		}
		f := float64(s.Nodes) * (0.6 + 0.4*rng.Float64()) / demand
		for _, i := range idx {
			w := math.Min(1, math.Max(0.01, math.Round(raw[i]*f*1000)/1000))
			p.Operators[i].Contention = []milp.Contention{{Kind: kind, Weight: w}}
		}
	}
	return p, p.Check()
}

// Blind returns p without any operator's Contention: what a contention-blind planner sees.
func Blind(p *milp.Problem) *milp.Problem {
	b := *p
	b.Operators = slices.Clone(p.Operators)
	for i := range b.Operators {
		b.Operators[i].Contention = nil
	}
	return &b
}

// Flat is the throughput placement d carries under the flat model (package doc): every
// contending instance demands its full weight of its node's resource, and every instance
// of a kind on a node whose demand exceeds 1 runs at 1/demand of its capacity. It
// assumes no candidate configuration (startup plans).
func Flat(p *milp.Problem, d milp.Deployment) float64 {
	T := math.Inf(1)
	demand := make([]map[string]float64, len(p.Nodes))
	for n := range p.Nodes {
		demand[n] = map[string]float64{}
		for i, o := range p.Operators {
			for _, c := range o.Contention {
				demand[n][c.Kind] += c.Weight * float64(d[i][n].Total())
			}
		}
	}
	for i, o := range p.Operators {
		capT := 0.0
		for n := range p.Nodes {
			f := 1.0
			for _, c := range o.Contention {
				if l := demand[n][c.Kind]; l > 1 {
					f = math.Min(f, 1/l)
				}
			}
			capT += float64(d[i][n].Total()) * o.Capacity * f
		}
		T = math.Min(T, capT/o.Amplification)
	}
	return T
}

// Config selects the instances and the solver budget.
type Config struct {
	// Sizes are the cluster sizes; Seeds the instances per size.
	Sizes []int
	Seeds int
	// TimeLimit and RelGap of each solve.
	TimeLimit time.Duration
	RelGap    float64
	// Progress, when set, gets one line per instance.
	Progress io.Writer
}

// DefaultConfig is 4- and 8-node clusters, 10 seeds each, 3 s per solve, gap 1 %.
func DefaultConfig() Config {
	return Config{Sizes: []int{4, 8}, Seeds: 10, TimeLimit: 3 * time.Second, RelGap: 0.01}
}

// Sample is one instance's outcome: the throughputs of the plan made with the term
// (With*) and without it (Blind*) under each model, and what the blind plan promised.
type Sample struct {
	Spec                              Spec
	WithShared, WithFlat              float64
	BlindShared, BlindFlat, BlindPlan float64
	// WithStatus is the with-term solve's status (optimal: proven within RelGap).
	WithStatus milp.Status
}

// Measure solves spec with and without the term and evaluates both plans.
func Measure(ctx context.Context, spec Spec, cfg Config) (Sample, error) {
	sm := Sample{Spec: spec}
	p, err := Generate(spec)
	if err != nil {
		return sm, err
	}
	opts := milp.Options{TimeLimit: cfg.TimeLimit, RelGap: cfg.RelGap}
	with, err := milp.HiGHS{}.Solve(ctx, p, opts)
	if err != nil {
		return sm, fmt.Errorf("contendbench: %s with the term: %w", spec, err)
	}
	blind, err := milp.HiGHS{}.Solve(ctx, Blind(p), opts)
	if err != nil {
		return sm, fmt.Errorf("contendbench: %s without the term: %w", spec, err)
	}
	ws, err := milp.Route(ctx, p, with.PerNode, opts)
	if err != nil {
		return sm, fmt.Errorf("contendbench: %s: route the with-term plan: %w", spec, err)
	}
	bs, err := milp.Route(ctx, p, blind.PerNode, opts)
	if err != nil {
		return sm, fmt.Errorf("contendbench: %s: route the blind plan: %w", spec, err)
	}
	sm.WithShared, sm.WithFlat, sm.WithStatus = math.Max(ws.Throughput, with.Throughput), Flat(p, with.PerNode), with.Status
	sm.BlindShared, sm.BlindFlat, sm.BlindPlan = bs.Throughput, Flat(p, blind.PerNode), blind.Throughput
	return sm, nil
}

// Run measures every instance of cfg, writes the table to w and returns the RESULT.
func Run(ctx context.Context, cfg Config, w io.Writer) (benchfmt.Result, error) {
	res := benchfmt.Result{Bench: "milp-contention", Figures: map[string]any{}, Peers: map[string]any{}}
	if cfg.Seeds <= 0 || len(cfg.Sizes) == 0 {
		return res, fmt.Errorf("contendbench: need at least one size and seed")
	}
	tab := benchfmt.Table{
		Title: fmt.Sprintf("Contention term: plans with / without it, evaluated under contention (%d cores, time limit %v, gap %.3g)",
			runtime.NumCPU(), cfg.TimeLimit, cfg.RelGap),
		Header: []string{"nodes", "n", "model", "median with/blind", "worst with/blind", "best with/blind", "with < blind", "median blind loss vs its plan", "with-term optimal"},
	}
	for _, size := range cfg.Sizes {
		var ss []Sample
		for seed := 1; seed <= cfg.Seeds; seed++ {
			if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("contendbench: %w", err)
			}
			sm, err := Measure(ctx, Spec{Nodes: size, Seed: uint64(seed)}, cfg)
			if err != nil {
				return res, err
			}
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "%-16s with: shared %.4g flat %.4g (%s) | blind: plan %.4g shared %.4g flat %.4g\n",
					sm.Spec, sm.WithShared, sm.WithFlat, sm.WithStatus, sm.BlindPlan, sm.BlindShared, sm.BlindFlat)
			}
			ss = append(ss, sm)
		}
		opt := 0
		loss := make([]float64, len(ss))
		for k, s := range ss {
			if s.WithStatus == milp.StatusOptimal {
				opt++
			}
			loss[k] = 1 - s.BlindShared/s.BlindPlan
		}
		for _, model := range []string{"shared", "flat"} {
			r := make([]float64, len(ss))
			worse := 0
			for k, s := range ss {
				with, blind := s.WithShared, s.BlindShared
				if model == "flat" {
					with, blind = s.WithFlat, s.BlindFlat
				}
				r[k] = with / blind
				if with < blind*(1-1e-6) {
					worse++
				}
			}
			med, lo, hi := median(r), slices.Min(r), slices.Max(r)
			tab.AddRow(size, len(ss), model, med, lo, hi, fmt.Sprintf("%d/%d", worse, len(ss)), median(loss), fmt.Sprintf("%d/%d", opt, len(ss)))
			pre := fmt.Sprintf("%d_%s_", size, model)
			res.Figures[pre+"median_ratio"] = round(med, 4)
			res.Figures[pre+"worst_ratio"] = round(lo, 4)
			res.Figures[pre+"best_ratio"] = round(hi, 4)
			res.Figures[pre+"with_below_blind"] = worse
		}
		res.Figures[fmt.Sprintf("%d_blind_median_loss_vs_plan", size)] = round(median(loss), 4)
		res.Figures[fmt.Sprintf("%d_with_optimal", size)] = opt
	}
	if err := tab.Write(w); err != nil {
		return res, err
	}
	res.Figures["seeds"] = cfg.Seeds
	res.Figures["time_limit_s"] = cfg.TimeLimit.Seconds()
	res.Figures["rel_gap"] = cfg.RelGap
	fmt.Fprintf(w, "\nwith/blind: throughput of the plan made with the contention term over the plan made without it (same problem,\n"+
		"declarations stripped), both under the same model. shared: the resource is shared work-conservingly (each plan\n"+
		"carries its best routing within each node's resource); flat: every contending instance demands its full weight\n"+
		"and all slow down by 1/demand on a saturated node. Blind loss vs its plan: what the blind plan promised and did\n"+
		"not carry under the shared model.\n")
	return res, nil
}

// median returns the median of v (v is not modified).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func round(v float64, digits int) float64 {
	f := math.Pow(10, float64(digits))
	return math.Round(v*f) / f
}
