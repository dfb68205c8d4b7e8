package baseline

import (
	"context"
	"fmt"
	"math"

	"github.com/trident-sched/trident/apm/gp"
	"github.com/trident-sched/trident/sim"
)

// Advisor supplies configuration recommendations to a baseline scheduler (the controlled
// comparison of paper §8.3: all methods share Trident's adaptation layer; baselines
// switch every instance of an operator at once).
type Advisor interface {
	// Init prepares the advisor for the run.
	Init(ctx context.Context, env *sim.Env) error
	// Observe receives every tick's metrics.
	Observe(s *sim.Snapshot)
	// Apply edits plan (configs, all-at-once transitions, probes) and reports a change.
	Apply(ctx context.Context, s *sim.Snapshot, plan *sim.Plan) bool
}

// CapacitySource estimates one instance's sustainable rate of each operator.
type CapacitySource interface {
	// Init prepares the source.
	Init(ctx context.Context, env *sim.Env) error
	// Observe receives every tick's metrics.
	Observe(s *sim.Snapshot)
	// PerInstance returns records/s one instance of operator op sustains (ok false: no
	// estimate yet).
	PerInstance(op int, s *sim.Snapshot) (rate float64, ok bool)
}

// UsefulTime is DS2's "true processing rate": records processed per second of useful
// (busy) time, per instance, over the last decision window.
type UsefulTime struct {
	// WindowS is the measurement window (default 60 s).
	WindowS float64
	hist    []sim.Snapshot
}

// Init implements CapacitySource.
func (u *UsefulTime) Init(context.Context, *sim.Env) error {
	if u.WindowS == 0 {
		u.WindowS = 60
	}
	return nil
}

// Observe implements CapacitySource.
func (u *UsefulTime) Observe(s *sim.Snapshot) {
	u.hist = append(u.hist, *s)
	for len(u.hist) > 0 && u.hist[0].Time <= s.Time-u.WindowS {
		u.hist = u.hist[1:]
	}
}

// PerInstance implements CapacitySource.
func (u *UsefulTime) PerInstance(op int, _ *sim.Snapshot) (float64, bool) {
	var proc, busy float64
	for i := range u.hist {
		o := &u.hist[i].Ops[op]
		proc += o.Processed
		busy += o.BusySec
	}
	if busy < 1e-9 || proc < 1e-9 {
		return 0, false
	}
	return proc / busy, true
}

// DS2 derives every operator's parallelism from its true processing rate and the
// dataflow's observed selectivities (Kalavri et al., OSDI'18): the parallelism of
// operator i is ceil(target_i / rate_i), where target_i is the input rate operator i must
// sustain for source rate T. On a fixed cluster the source rate is not imposed from
// outside, so T is the largest rate whose parallelism fits the cluster's pools. Decisions
// are taken once metrics are steady (no instance starting) for an activation window;
// placement is left to the cluster scheduler (Ray's hybrid policy).
type DS2 struct {
	// DecideS is the policy interval (default 30 s); ActivationS the steady window
	// required after a reconfiguration (default 90 s).
	DecideS, ActivationS float64
	// Capacity overrides the useful-time estimator (controlled setup).
	Capacity CapacitySource
	// Advisor applies configuration recommendations (controlled setup).
	Advisor Advisor
	// Conservative enables ContTune's per-operator conservative Bayesian optimisation.
	Conservative bool
	// Label overrides Name.
	Label string

	env        *sim.Env
	lastChange float64
	hist       []sim.Snapshot
	// ContTune state: per operator (parallelism, aggregate processing ability) samples.
	ability [][][2]float64
}

// NewContTune returns ContTune (Lian et al., VLDB'23): DS2's "big step" followed by
// conservative Bayesian optimisation of each operator's parallelism.
func NewContTune() *DS2 { return &DS2{Conservative: true} }

// Name implements sim.Scheduler.
func (d *DS2) Name() string {
	if d.Label != "" {
		return d.Label
	}
	if d.Conservative {
		return "conttune"
	}
	return "ds2"
}

// Interval implements sim.Scheduler.
func (d *DS2) Interval() float64 {
	if d.DecideS == 0 {
		d.DecideS = 30
	}
	return d.DecideS
}

// Init implements sim.Scheduler: start from the submitted job (SubmittedJob), which DS2
// then rescales from its measurements.
func (d *DS2) Init(ctx context.Context, env *sim.Env) (*sim.Plan, error) {
	if d.ActivationS == 0 {
		d.ActivationS = 90
	}
	d.env = env
	if d.Capacity == nil {
		d.Capacity = &UsefulTime{}
	}
	if err := d.Capacity.Init(ctx, env); err != nil {
		return nil, fmt.Errorf("%s: %w", d.Name(), err)
	}
	if d.Advisor != nil {
		if err := d.Advisor.Init(ctx, env); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Name(), err)
		}
	}
	d.ability = make([][][2]float64, len(env.Pipeline.Ops))
	// DS2 (like every autoscaler) takes over the job as the user submitted it.
	per, err := SubmittedJob(env)
	if err != nil {
		return nil, fmt.Errorf("%s: initial deployment: %w", d.Name(), err)
	}
	return sim.PlanFromCounts(per), nil
}

func needs(env *sim.Env) []sim.Resources {
	out := make([]sim.Resources, len(env.Pipeline.Ops))
	for i := range out {
		out[i] = env.Pipeline.Ops[i].Need
	}
	return out
}

// Observe implements sim.Scheduler.
func (d *DS2) Observe(s *sim.Snapshot) {
	d.Capacity.Observe(s)
	if d.Advisor != nil {
		d.Advisor.Observe(s)
	}
	d.hist = append(d.hist, *s)
	if len(d.hist) > 120 {
		d.hist = d.hist[len(d.hist)-120:]
	}
}

// Decide implements sim.Scheduler.
func (d *DS2) Decide(ctx context.Context, s *sim.Snapshot) (*sim.Plan, error) {
	k := len(s.Ops)
	plan := sim.PlanFromCounts(currentPerNode(s))
	changed := false
	if d.Advisor != nil && d.Advisor.Apply(ctx, s, plan) {
		changed = true
	}
	steady := true
	for _, o := range s.Ops {
		if o.Settling() {
			steady = false
		}
	}
	if !steady || s.Time-d.lastChange < d.ActivationS {
		if changed {
			return plan, nil
		}
		return nil, nil
	}
	// Cumulative amplification from the window: records processed per source record.
	amp := make([]float64, k)
	cur := make([]int, k)
	for i := range k {
		var proc, src float64
		for j := range d.hist {
			proc += d.hist[j].Ops[i].Processed
			src += d.hist[j].Ops[i].SrcRecords
		}
		if src < 1e-9 {
			if changed {
				return plan, nil
			}
			return nil, nil
		}
		amp[i] = proc / src
		cur[i] = sumInts(s.Ops[i].PerNode)
	}
	rate := make([]float64, k)
	for i := range k {
		r, ok := d.Capacity.PerInstance(i, s)
		if !ok {
			if changed {
				return plan, nil
			}
			return nil, nil
		}
		rate[i] = r
		if d.Conservative && s.Ops[i].Running > 0 {
			d.ability[i] = append(d.ability[i], [2]float64{float64(s.Ops[i].Running), r * float64(s.Ops[i].Running)})
		}
	}
	var n []int
	if d.Conservative {
		n = d.contTune(ctx, amp, rate)
	} else {
		dem := make([]float64, k)
		for i := range k {
			dem[i] = amp[i] / rate[i]
		}
		n = sim.Balance(d.env.Cluster, d.env.Pipeline, dem)
	}
	differs := false
	for i := range k {
		if diff := n[i] - cur[i]; diff != 0 && math.Abs(float64(diff)) >= math.Max(1, 0.05*float64(cur[i])) {
			differs = true
		}
	}
	if !differs {
		if changed {
			return plan, nil
		}
		return nil, nil
	}
	per := currentPerNode(s)
	free := freeOf(d.env, per)
	for i := range k {
		if n[i] < sumInts(per[i]) {
			per[i] = sim.Resize(d.env.Cluster, free, d.env.Pipeline.Ops[i].Need, per[i], n[i], sim.Hybrid)
		}
	}
	for i := range k {
		if n[i] > sumInts(per[i]) {
			per[i] = sim.Resize(d.env.Cluster, free, d.env.Pipeline.Ops[i].Need, per[i], n[i], sim.Hybrid)
		}
	}
	for i := range k {
		plan.Ops[i].PerNode = per[i]
	}
	d.lastChange = s.Time
	d.hist = d.hist[:0]
	return plan, nil
}

// contTune picks, for the largest feasible source rate, each operator's smallest
// parallelism whose conservative (lower-confidence) predicted processing ability meets
// its target input rate, using a GP over (parallelism -> ability) per operator; with
// fewer than three samples it falls back to DS2's linear model.
func (d *DS2) contTune(ctx context.Context, amp, rate []float64) []int {
	k := len(amp)
	type model struct {
		g      *gp.GP
		ok     bool
		maxN   int
		linear float64
	}
	ms := make([]model, k)
	total := d.env.Cluster.Total()
	for i := range k {
		m := model{linear: rate[i]}
		need := d.env.Pipeline.Ops[i].Need
		m.maxN = int(total.CPU / math.Max(need.CPU, 1e-9))
		if need.Acc > 0 {
			m.maxN = total.Acc / need.Acc
		}
		if len(d.ability[i]) >= 3 {
			if g, ok := abilityGP(d.ability[i]); ok {
				m.g, m.ok = g, true
			}
		}
		ms[i] = m
	}
	parallelism := func(i int, target float64) int {
		m := ms[i]
		lin := max(1, int(math.Ceil(target/m.linear)))
		if !m.ok {
			return lin
		}
		// Conservative: the smallest n whose lower confidence bound of the aggregate
		// ability n·g(n) reaches the target (g: per-instance ability, see abilityGP).
		for n := 1; n <= m.maxN; n++ {
			mu, v := m.g.Predict([]float64{float64(n)})
			if float64(n)*(mu-math.Sqrt(math.Max(v, 0))) >= target {
				return n
			}
		}
		return lin
	}
	fits := func(n []int) bool {
		var used sim.Resources
		for i, c := range n {
			used = used.Add(d.env.Pipeline.Ops[i].Need.Scale(c))
		}
		return total.Fits(used) && sim.PlaceStriped(d.env.Cluster, needs(d.env), n) != nil
	}
	count := func(T float64) []int {
		n := make([]int, k)
		for i := range k {
			n[i] = parallelism(i, T*amp[i])
		}
		return n
	}
	lo, hi := 0.0, 1.0
	for fits(count(hi)) && hi < 1e9 {
		lo, hi = hi, hi*2
	}
	for range 30 {
		mid := (lo + hi) / 2
		if fits(count(mid)) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return count(lo)
}

// abilityGP fits a 1-D GP of per-instance processing ability over parallelism to the last
// 20 (parallelism, aggregate ability) samples, with hyperparameters set from the data
// (signal variance = sample variance, noise 5 % of it, length scale a third of the
// parallelism range). Modelling the per-instance ability g(n), with the aggregate n·g(n),
// keeps the model linear away from the samples: a GP of the aggregate itself reverts to
// the samples' mean there, which would size an operator observed at 100 instances to a
// single instance whenever its target is below that mean.
func abilityGP(samples [][2]float64) (*gp.GP, bool) {
	if len(samples) > 20 {
		samples = samples[len(samples)-20:]
	}
	per := make([][2]float64, 0, len(samples))
	for _, s := range samples {
		if s[0] > 0 {
			per = append(per, [2]float64{s[0], s[1] / s[0]})
		}
	}
	if len(per) == 0 {
		return nil, false
	}
	samples = per
	var mean, lo, hi float64
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range samples {
		mean += s[1] / float64(len(samples))
		lo, hi = math.Min(lo, s[0]), math.Max(hi, s[0])
	}
	var vr float64
	for _, s := range samples {
		vr += (s[1] - mean) * (s[1] - mean) / float64(len(samples))
	}
	if vr <= 0 {
		vr = math.Max(1e-6, mean*mean*0.01)
	}
	h := gp.Hyper{Mean: mean, SignalVar: vr, NoiseVar: 0.05 * vr, LengthScales: []float64{math.Max(1, (hi-lo)/3)}}
	g, err := gp.New(1, h)
	if err != nil {
		return nil, false
	}
	for _, s := range samples {
		if err := g.Add([]float64{s[0]}, s[1]); err != nil {
			return nil, false
		}
	}
	return g, true
}
