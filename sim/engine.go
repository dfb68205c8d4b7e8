package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// instance states.
type instState uint8

const (
	stStarting instState = iota
	stRunning
	stRestarting
	stStopping
)

type instance struct {
	node  int
	cfg   OpConfig
	state instState
	// timer counts down the remaining seconds of the current non-running state.
	timer float64
	// probe is the probe slot plus one (0: a production instance).
	probe int
}

type cohort struct {
	amount float64
	attrs  Attrs
	// srcPer is source records per unit of this cohort.
	srcPer float64
}

type opState struct {
	spec      *OpSpec
	insts     []*instance
	queue     []cohort
	target    OpConfig
	unplaced  int
	lastStats OpStats
	lastAttrs Attrs
	// accumulated for the run summary
	processed, busy, runningSec float64
	ooms                        int
	oomDowntime                 float64
	restarts                    int
	launches                    int
}

func (o *opState) queueLen() float64 {
	var q float64
	for _, c := range o.queue {
		q += c.amount
	}
	return q
}

// RunConfig controls one simulation.
type RunConfig struct {
	// Seed makes the run deterministic.
	Seed uint64
	// Tick is the time step in seconds (default 1).
	Tick float64
	// Duration bounds simulated time in seconds; 0 means until the dataset is done (with a
	// safety limit of 48 h).
	Duration float64
	// Cycle restarts the dataset when it ends (for fixed-duration runs).
	Cycle bool
	// OOMRestartS is the downtime of an instance after an OOM (default 33 s: the paper's
	// Table 6 averages 462 s / 14 events).
	OOMRestartS float64
	// NoiseCV is the coefficient of variation of per-tick service-rate noise (default 0.05).
	NoiseCV float64
	// DisturbProb is the per-tick probability that an operator suffers a transient
	// slowdown (GC pause, contention) of 30-70 % for that tick (default 0.01).
	DisturbProb float64
	// TimelineStep is the bucket width in seconds of Result.Timeline (default 60).
	TimelineStep float64
	// NoOOM disables out-of-memory failures (the OOM-free oracle of Table 6); peak memory
	// is still reported.
	NoOOM bool
}

func (c *RunConfig) defaults() {
	if c.Tick <= 0 {
		c.Tick = 1
	}
	if c.OOMRestartS <= 0 {
		c.OOMRestartS = 33
	}
	if c.NoiseCV == 0 {
		c.NoiseCV = 0.05
	}
	if c.DisturbProb == 0 {
		c.DisturbProb = 0.01
	}
	if c.TimelineStep <= 0 {
		c.TimelineStep = 60
	}
}

// OpSummary summarises one operator over a run.
type OpSummary struct {
	Name string
	// MeanInstances is the time-averaged number of running instances.
	MeanInstances float64
	// FinalPerNode is the last placement.
	FinalPerNode []int
	// Processed is the total number of records processed.
	Processed float64
	// Busy is the mean useful-time fraction of running instances.
	Busy float64
	// OOMs and OOMDowntimeS count OOM restarts and their downtime.
	OOMs         int
	OOMDowntimeS float64
	// Restarts counts configuration restarts; Launches counts new instances.
	Restarts, Launches int
	// FinalConfig is the target configuration at the end.
	FinalConfig string
}

// Result is the outcome of one simulation.
type Result struct {
	Scheduler string
	// Completed is the number of source records fully processed.
	Completed float64
	// SimSeconds is the simulated time; Done reports that the dataset was finished.
	SimSeconds float64
	Done       bool
	// Throughput is Completed/SimSeconds in source records per second.
	Throughput float64
	// OOMs and OOMDowntimeS total all operators.
	OOMs         int
	OOMDowntimeS float64
	// Decisions counts Decide calls; DecideWall is their total wall time.
	Decisions  int
	DecideWall time.Duration
	// Timeline holds source records/s per TimelineStep bucket.
	Timeline []float64
	// RegimeEnd holds the simulated time at which the source finished each regime.
	RegimeEnd []float64
	// Ops summarises every operator.
	Ops []OpSummary
	// MeanEgressMBps is the mean per-node cross-node traffic.
	MeanEgressMBps float64
}

// Engine simulates one pipeline on one cluster.
type Engine struct {
	cfg     RunConfig
	cluster Cluster
	pipe    *Pipeline
	rng     *rand.Rand
	ops     []*opState
	alloc   []Resources
	now     float64

	// source position
	regime    int
	regimePos float64
	srcDone   bool
	regimeEnd []float64

	completed float64
	egress    []float64
	egressSum float64
}

// NewEngine builds an engine; it validates the pipeline and cluster.
func NewEngine(p *Pipeline, c Cluster, cfg RunConfig) (*Engine, error) {
	cfg.defaults()
	if len(p.Ops) < 2 {
		return nil, fmt.Errorf("sim: pipeline %q needs at least 2 operators", p.Name)
	}
	if len(c.Nodes) == 0 {
		return nil, errors.New("sim: cluster has no nodes")
	}
	if len(p.Regimes) == 0 {
		return nil, fmt.Errorf("sim: pipeline %q has no workload regimes", p.Name)
	}
	e := &Engine{
		cfg:     cfg,
		cluster: c,
		pipe:    p,
		rng:     rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		alloc:   make([]Resources, len(c.Nodes)),
		egress:  make([]float64, len(c.Nodes)),
	}
	for i := range p.Ops {
		op := &p.Ops[i]
		if op.Model == nil {
			return nil, fmt.Errorf("sim: operator %q has no model", op.Name)
		}
		if op.QueueCap <= 0 {
			return nil, fmt.Errorf("sim: operator %q: queue capacity must be positive", op.Name)
		}
		e.ops = append(e.ops, &opState{spec: op, target: DefaultConfig(op.Space)})
	}
	return e, nil
}

// free returns the unallocated resources of node n.
func (e *Engine) free(n int) Resources { return e.cluster.Nodes[n].Cap.Sub(e.alloc[n]) }

// Apply applies a plan: it stops surplus instances, launches missing ones where they fit,
// starts configuration transitions and probes.
func (e *Engine) Apply(p *Plan) error {
	if p == nil {
		return nil
	}
	if len(p.Ops) != len(e.ops) {
		return fmt.Errorf("sim: plan has %d operators, pipeline has %d", len(p.Ops), len(e.ops))
	}
	// Stops first so that freed resources can host launches of other operators.
	for i, op := range e.ops {
		pl := p.Ops[i]
		if len(pl.PerNode) != len(e.cluster.Nodes) {
			return fmt.Errorf("sim: plan for %q has %d nodes, cluster has %d", op.spec.Name, len(pl.PerNode), len(e.cluster.Nodes))
		}
		if dim := op.spec.dim(); pl.Config != nil && len(pl.Config) != dim {
			return fmt.Errorf("sim: plan config for %q has %d values, space has %d", op.spec.Name, len(pl.Config), dim)
		}
		if pl.Config != nil && !pl.Config.Equal(op.target) {
			op.target = append(OpConfig(nil), pl.Config...)
		}
		for n := range e.cluster.Nodes {
			cur := op.countOn(n)
			for k := cur - pl.PerNode[n]; k > 0; k-- {
				e.stopOne(op, n)
			}
		}
	}
	for i, op := range e.ops {
		pl := p.Ops[i]
		op.unplaced = 0
		for n := range e.cluster.Nodes {
			cur := op.countOn(n)
			for k := pl.PerNode[n] - cur; k > 0; k-- {
				if !e.free(n).Fits(op.spec.Need) {
					op.unplaced += k
					break
				}
				e.alloc[n] = e.alloc[n].Add(op.spec.Need)
				op.insts = append(op.insts, &instance{node: n, cfg: op.target, state: stStarting, timer: op.spec.ColdStartS})
				op.launches++
			}
		}
		e.applyConfig(op, pl)
	}
	return nil
}

func (o *opState) countOn(n int) int {
	c := 0
	for _, in := range o.insts {
		if in.node == n && in.state != stStopping {
			c++
		}
	}
	return c
}

// stopOne stops one instance of op on node n, preferring starting, then off-target,
// then non-probe instances.
func (e *Engine) stopOne(op *opState, n int) {
	var best *instance
	score := func(in *instance) int {
		s := 0
		if in.state == stStarting || in.state == stRestarting {
			s += 4
		}
		if !in.cfg.Equal(op.target) {
			s += 2
		}
		if in.probe == 0 {
			s++
		}
		return s
	}
	for _, in := range op.insts {
		if in.node != n || in.state == stStopping {
			continue
		}
		if best == nil || score(in) > score(best) {
			best = in
		}
	}
	if best == nil {
		return
	}
	best.state = stStopping
	best.timer = op.spec.StopS
	best.probe = 0
}

func (e *Engine) applyConfig(op *opState, pl OpPlan) {
	if !op.spec.Tunable() {
		return
	}
	// Probe handling: one instance per probe slot.
	restart := func(in *instance, cfg OpConfig) {
		in.cfg = cfg
		if in.state != stStarting {
			in.state = stRestarting
			in.timer = e.cfg.OOMRestartS
			op.restarts++
		}
	}
	for _, in := range op.insts {
		if in.probe == 0 || in.state == stStopping {
			continue
		}
		if k := in.probe - 1; k >= len(pl.Probes) || pl.Probes[k] == nil {
			in.probe = 0
			if !in.cfg.Equal(op.target) {
				// A probe whose configuration became the target (a promoted canary) keeps
				// running; any other restarts onto the target.
				restart(in, op.target)
			}
		} else if !in.cfg.Equal(pl.Probes[k]) {
			restart(in, append(OpConfig(nil), pl.Probes[k]...))
		}
	}
	for k, cfg := range pl.Probes {
		if cfg == nil || op.probeOf(k) != nil {
			continue
		}
		// Take an on-target running production instance if possible.
		var pick *instance
		for _, in := range op.insts {
			if in.probe == 0 && in.state == stRunning && in.cfg.Equal(op.target) {
				pick = in
				break
			}
		}
		if pick == nil {
			for _, in := range op.insts {
				if in.probe == 0 && in.state != stStopping {
					pick = in
					break
				}
			}
		}
		if pick != nil {
			pick.probe = k + 1
			restart(pick, append(OpConfig(nil), cfg...))
		}
	}
	// Transition.
	k := pl.Transition
	if k == 0 {
		return
	}
	for _, in := range op.insts {
		if k == 0 {
			break
		}
		if in.probe != 0 || in.state == stStopping || in.cfg.Equal(op.target) {
			continue
		}
		restart(in, op.target)
		if k > 0 {
			k--
		}
	}
}

// probeOf returns the non-stopping instance of probe slot k, or nil.
func (o *opState) probeOf(k int) *instance {
	for _, in := range o.insts {
		if in.probe == k+1 && in.state != stStopping {
			return in
		}
	}
	return nil
}

// group is a set of running instances of one operator sharing a node and configuration
// (a probe instance is a group of its own).
type group struct {
	node  int
	cfg   OpConfig
	n     int
	probe int
}

func (o *opState) groups() []group {
	var gs []group
outer:
	for _, in := range o.insts {
		if in.state != stRunning {
			continue
		}
		for i := range gs {
			if gs[i].node == in.node && gs[i].probe == in.probe && gs[i].cfg.Equal(in.cfg) {
				gs[i].n++
				continue outer
			}
		}
		gs = append(gs, group{node: in.node, cfg: in.cfg, n: 1, probe: in.probe})
	}
	return gs
}

// lifecycle advances instance timers by dt.
func (e *Engine) lifecycle(dt float64) {
	for _, op := range e.ops {
		kept := op.insts[:0]
		for _, in := range op.insts {
			if in.state != stRunning {
				in.timer -= dt
				if in.timer <= 1e-9 {
					if in.state == stStopping {
						e.alloc[in.node] = e.alloc[in.node].Sub(op.spec.Need)
						continue
					}
					in.state = stRunning
				}
			}
			kept = append(kept, in)
		}
		op.insts = kept
	}
}

// refillSource tops up the first operator's queue from the dataset.
func (e *Engine) refillSource(need float64) {
	src := e.ops[0]
	q := src.queueLen()
	batch := float64(max(1, e.pipe.BatchDocs))
	for q < need && !e.srcDone {
		r := &e.pipe.Regimes[e.regime]
		amt := math.Min(batch, r.Records-e.regimePos)
		attrs := e.sampleAttrs(r)
		src.queue = append(src.queue, cohort{amount: amt, attrs: attrs, srcPer: 1})
		q += amt
		e.regimePos += amt
		if e.regimePos >= r.Records-1e-9 {
			e.regimeEnd = append(e.regimeEnd, e.now)
			e.regimePos = 0
			e.regime++
			if e.regime == len(e.pipe.Regimes) {
				if e.cfg.Cycle {
					e.regime = 0
				} else {
					e.srcDone = true
					e.regime--
				}
			}
		}
	}
}

// sampleAttrs averages a few sampled records: one cohort is a small batch of documents.
func (e *Engine) sampleAttrs(r *Regime) Attrs {
	const k = 4
	var sum Attrs
	for range k {
		a := r.Sample(e.rng)
		if sum == nil {
			sum = make(Attrs, len(a))
		}
		for i, v := range a {
			sum[i] += v / k
		}
	}
	return sum
}

// inFlight returns the per-instance in-flight requests of an async operator.
func inFlightPer(spec *OpSpec, cfg OpConfig, queue float64, running int) float64 {
	if !spec.Async || running == 0 {
		return 1
	}
	return math.Min(spec.inFlightLimit(cfg), queue/float64(running))
}

// step advances the simulation by one tick and returns its snapshot.
func (e *Engine) step(dt float64) *Snapshot {
	e.lifecycle(dt)
	nN := len(e.cluster.Nodes)
	budget := make([]float64, nN)
	for n := range budget {
		budget[n] = e.cluster.Nodes[n].EgressMBps * dt
		e.egress[n] = 0
	}
	snap := &Snapshot{Time: e.now + dt, Tick: dt, Ops: make([]OpStats, len(e.ops)), Regime: e.regime, EgressMBps: make([]float64, nN)}

	// Source supply: enough for the source operator's full capacity this tick.
	{
		src := e.ops[0]
		var capRate float64
		for _, g := range src.groups() {
			a := e.pipe.Regimes[e.regime].Sample(e.rng)
			capRate += float64(g.n) * src.spec.Model.Rate(a, g.cfg, 1)
		}
		// The source queue holds the files the source operator can open this tick; the
		// dataset position advances only as they are read.
		e.refillSource(math.Min(2*capRate*dt+1, e.ops[0].spec.QueueCap))
	}
	snap.SourceDone = e.srcDone

	arrived := make([]float64, len(e.ops))
	// Downstream first: consumption frees queue space for upstream output in the same tick.
	for i := len(e.ops) - 1; i >= 0; i-- {
		e.processOp(i, dt, budget, arrived, snap)
	}
	for i := range e.ops {
		snap.Ops[i].Arrived = arrived[i]
	}
	for n := range e.egress {
		snap.EgressMBps[n] = e.egress[n] / dt
		e.egressSum += e.egress[n] / dt
	}
	snap.Free = make([]Resources, nN)
	for n := range snap.Free {
		snap.Free[n] = e.free(n)
	}
	e.now += dt
	snap.TotalCompleted = e.completed
	return snap
}

// processOp runs operator i for one tick: it counts the instances, serves the input queue,
// hands the output on, and records the tick's metrics, probe results and device memory
// (OOM restarts).
func (e *Engine) processOp(i int, dt float64, budget, arrived []float64, snap *Snapshot) {
	op := e.ops[i]
	st := &snap.Ops[i]
	op.census(st, len(e.cluster.Nodes))
	w := e.startTick(op, st, dt)
	e.serve(i, w, dt, budget)
	e.deliver(i, w, arrived, snap)
	w.head = e.headAttrs(op, w.out)
	e.recordMetrics(w, dt)
	cm := w.probeMetrics(dt)

	// Device memory and OOM restarts.
	if op.spec.Need.Acc > 0 && len(w.gs) > 0 && w.head != nil {
		e.deviceMemory(op, w.gs, cm, w.head, st, dt)
	}
	op.lastStats = *st
}

// opTick is one operator's work during one tick, shared by the phases of processOp.
type opTick struct {
	op *opState
	st *OpStats
	// nodes is the cluster size.
	nodes int
	// gs are the running groups; cIn and perInst hold, per group, the in-flight requests
	// per instance and the per-instance rate at the cohort last evaluated by rateAt.
	gs           []group
	cIn, perInst []float64
	// queue0 is the queue length at the start of the tick, noise the tick's service-rate
	// factor and running the number of running instances.
	queue0, noise float64
	running       int

	// Set by serve: the unused part of the tick, the records processed and emitted, the
	// source records they stand for, the emitted MB, the processed records' summed
	// features, the output cohorts and whether the output blocked.
	timeLeft                              float64
	processed, emitted, srcRecs, outMBsum float64
	featSum                               []float64
	out                                   []cohort
	blocked                               bool

	// head is the attributes of the records worked on (headAttrs after the service);
	// active is the fraction of the tick the operator dispatched work (set by
	// recordMetrics).
	head   Attrs
	active float64
}

// census records the operator's queue bound, unplaced instances and target configuration,
// and counts its instances by state, by node and on the target configuration.
func (o *opState) census(st *OpStats, nodes int) {
	st.QueueCap = o.spec.QueueCap
	st.PerNode = make([]int, nodes)
	st.PerNodeOnTarget = make([]int, nodes)
	st.Unplaced = o.unplaced
	st.Config = o.target
	for _, in := range o.insts {
		if in.state != stStopping {
			st.PerNode[in.node]++
		}
		switch in.state {
		case stRunning:
			st.Running++
		case stStarting:
			st.Starting++
		case stRestarting:
			st.Restarting++
		}
		if in.state != stStopping && in.probe == 0 && in.cfg.Equal(o.target) {
			st.OnTarget++
			st.PerNodeOnTarget[in.node]++
			if in.state == stRunning {
				st.RunningOnTarget++
			}
		}
	}
}

// startTick groups the running instances, accounts their running time, draws the tick's
// service noise and sets every group's in-flight requests from the queue at the start.
func (e *Engine) startTick(op *opState, st *OpStats, dt float64) *opTick {
	w := &opTick{op: op, st: st, nodes: len(e.cluster.Nodes)}
	w.gs = op.groups()
	w.queue0 = op.queueLen()
	w.running = st.Running
	op.runningSec += float64(w.running) * dt

	// Noise shared by the operator this tick (service jitter and occasional disturbance).
	w.noise = math.Max(0.2, 1+e.cfg.NoiseCV*e.rng.NormFloat64())
	if e.rng.Float64() < e.cfg.DisturbProb {
		w.noise *= 0.3 + 0.4*e.rng.Float64()
	}

	// Per-group rates at the head cohort determine shares; serve recomputes the total
	// rate per cohort.
	w.perInst = make([]float64, len(w.gs))
	w.cIn = make([]float64, len(w.gs))
	for gi, g := range w.gs {
		w.cIn[gi] = inFlightPer(op.spec, g.cfg, w.queue0, w.running)
	}
	return w
}

// rateAt returns the operator's total rate on records with attributes a and its rate per
// node; it leaves every group's per-instance rate in perInst.
func (w *opTick) rateAt(a Attrs) (total float64, nodeRate []float64) {
	m := w.op.spec.Model
	nodeRate = make([]float64, w.nodes)
	for gi, g := range w.gs {
		r := m.Rate(a, g.cfg, w.cIn[gi]) * w.noise
		w.perInst[gi] = r
		nodeRate[g.node] += float64(g.n) * r
		total += float64(g.n) * r
	}
	return total, nodeRate
}

// serve processes operator i's queue, head cohort first, for the tick: each cohort at the
// groups' rate, limited by the egress budget of nodes whose output leaves the node
// (locality first) and by the free space of the next operator's queue.
func (e *Engine) serve(i int, w *opTick, dt float64, budget []float64) {
	op := w.op
	spec := op.spec
	m := spec.Model
	last := i == len(e.ops)-1
	crossFrac, space := e.route(i, w)
	w.timeLeft = dt
	w.featSum = make([]float64, len(spec.FeatureNames))
	for len(op.queue) > 0 && w.timeLeft > 1e-9 && len(w.gs) > 0 {
		c := &op.queue[0]
		total, nodeRate := w.rateAt(c.attrs)
		if total <= 0 {
			break
		}
		amp := m.Amplification(c.attrs)
		outMB := m.OutMB(c.attrs)
		eff := total
		if !last && crossFrac != nil && outMB > 0 {
			eff = egressLimitedRate(nodeRate, crossFrac, budget, amp, outMB, w.timeLeft)
		}
		x := math.Min(c.amount, eff*w.timeLeft)
		if amp > 0 && !last {
			x = math.Min(x, space/amp)
		}
		if x <= 1e-12 {
			w.blocked = !last && space <= 1e-9
			break
		}
		if !last && amp > 0 && x >= space/amp-1e-9 && x < c.amount-1e-9 {
			w.blocked = true
		}
		w.timeLeft -= x / eff
		if !last && crossFrac != nil {
			e.ship(x, total, nodeRate, crossFrac, budget, amp, outMB)
		}
		w.processed += x
		w.srcRecs += x * c.srcPer
		for k, f := range m.Features(c.attrs) {
			w.featSum[k] += f * x
		}
		o := x * amp
		w.emitted += o
		w.outMBsum += o * outMB
		if !last {
			space -= o
			if o > 0 {
				w.out = append(w.out, cohort{amount: o, attrs: c.attrs, srcPer: c.srcPer / amp})
			}
		}
		op.lastAttrs = c.attrs
		c.amount -= x
		if c.amount <= 1e-9 {
			op.queue = op.queue[1:]
		}
	}
}

// route returns, toward the next operator, the fraction of each node's output that leaves
// the node given the nodes' rates at the head cohort (nil for the last operator or when
// nothing runs or waits), and the free space of the next operator's queue (+Inf for the
// last operator).
func (e *Engine) route(i int, w *opTick) (crossFrac []float64, space float64) {
	op := w.op
	// Routing shares toward the next operator: locality first.
	last := i == len(e.ops)-1
	var next *opState
	if !last {
		next = e.ops[i+1]
	}
	if len(op.queue) > 0 && len(w.gs) > 0 {
		_, nodeRate0 := w.rateAt(op.queue[0].attrs)
		if !last {
			crossFrac = e.crossFractions(nodeRate0, next)
		}
	}

	space = math.Inf(1)
	if !last {
		space = next.spec.QueueCap - next.queueLen()
		if space < 0 {
			space = 0
		}
	}
	return crossFrac, space
}

// egressLimitedRate is the rate at which a cohort can be processed for the timeLeft
// seconds left in the tick when node n can ship only budget[n] MB cross-node: each node's
// rate is capped so that the part of its output leaving the node fits its budget.
func egressLimitedRate(nodeRate, crossFrac, budget []float64, amp, outMB, timeLeft float64) float64 {
	eff := 0.0
	for n, r := range nodeRate {
		if r <= 0 {
			continue
		}
		lim := r
		if cf := crossFrac[n]; cf > 0 {
			bw := budget[n] / (cf * amp * outMB * timeLeft)
			lim = math.Min(r, bw)
		}
		eff += lim
	}
	return eff
}

// ship attributes x processed records to the nodes in proportion to their rates and
// charges the MB of their output that leaves each node to its egress budget.
func (e *Engine) ship(x, total float64, nodeRate, crossFrac, budget []float64, amp, outMB float64) {
	for n, r := range nodeRate {
		if r <= 0 {
			continue
		}
		xn := x * r / total
		mb := xn * crossFrac[n] * amp * outMB
		budget[n] = math.Max(0, budget[n]-mb)
		e.egress[n] += mb
	}
}

// deliver hands the tick's output on: the last operator's records complete, the others'
// join the next operator's queue.
func (e *Engine) deliver(i int, w *opTick, arrived []float64, snap *Snapshot) {
	if i == len(e.ops)-1 {
		e.completed += w.srcRecs
		snap.Completed += w.srcRecs
		return
	}
	for _, c := range w.out {
		e.ops[i+1].push(c)
	}
	arrived[i+1] += w.emitted
}

// recordMetrics fills the operator's metrics of the tick (queue, work done, features,
// blocked time and the running instances' utilisation) and adds the work and busy time to
// the run totals.
func (e *Engine) recordMetrics(w *opTick, dt float64) {
	op, st := w.op, w.st
	st.Queue = op.queueLen()
	st.Processed = w.processed
	st.Emitted = w.emitted
	st.SrcRecords = w.srcRecs
	if w.emitted > 0 {
		st.OutMB = w.outMBsum / w.emitted
	}
	st.Features = w.features()
	// A backpressured operator stops dispatching once its output is blocked: its devices
	// idle for the rest of the tick.
	w.active = 1.0
	if w.blocked {
		w.active = (dt - w.timeLeft) / dt
		st.BlockedSec = w.timeLeft
	}
	busy := w.utilisation(dt)
	op.processed += w.processed
	op.busy += busy
}

// features returns the mean features of the records processed in the tick, else those of
// the queue head, else the last tick's.
func (w *opTick) features() []float64 {
	op := w.op
	if w.processed > 0 {
		for k := range w.featSum {
			w.featSum[k] /= w.processed
		}
		return w.featSum
	}
	if len(op.queue) > 0 {
		return op.spec.Model.Features(op.queue[0].attrs)
	}
	return append([]float64(nil), op.lastStats.Features...)
}

// utilisation fills the running instances' busy and useful time, in-flight requests,
// occupancy and utilisation over the tick, and returns the busy time.
func (w *opTick) utilisation(dt float64) float64 {
	spec, st, gs := w.op.spec, w.st, w.gs
	m := spec.Model
	running, processed, active := w.running, w.processed, w.active
	var capSum float64
	var busy float64
	for gi, g := range gs {
		capSum += float64(g.n) * w.perInst[gi]
	}
	if running > 0 {
		if spec.Async {
			// Any request in flight makes the device (and the instance) busy; occupancy is
			// the batch fill (running batch / admission limit), as device telemetry of a
			// batching engine reports it.
			var u, occ float64
			a := w.head
			for gi, g := range gs {
				u += float64(g.n) * math.Min(1, w.cIn[gi])
				st.InFlight += float64(g.n) * w.cIn[gi] * active
				if a != nil {
					occ += float64(g.n) * occupancy(m, spec, a, g.cfg, w.cIn[gi])
				}
				share := float64(g.n) * w.perInst[gi] / math.Max(capSum, 1e-12)
				useful := 0.0
				if w.perInst[gi] > 0 {
					// Little's law: a record stays c/r seconds in service.
					useful = processed * share * w.cIn[gi] / w.perInst[gi]
					st.UsefulSec += useful
				}
				if g.probe == 0 {
					cs := st.ConfigStat(g.cfg)
					cs.Running += g.n
					cs.Processed += processed * share
					cs.UsefulSec += useful
					cs.BusySec += float64(g.n) * math.Min(1, w.cIn[gi]) * dt * active
					cs.InFlight += float64(g.n) * w.cIn[gi] * active
					if run, wait, lim, ok := engineRequests(m, a, g.cfg, w.cIn[gi]); ok {
						cs.EngineRunning += float64(g.n) * run * active
						cs.EngineWaiting += float64(g.n) * wait * active
						cs.EngineLimit = lim
					}
				}
			}
			busy = u * dt * active
			st.Occupancy = occ / float64(running) * active
		} else if capSum > 0 {
			frac := math.Min(1, processed/(capSum*dt))
			busy = frac * float64(running) * dt
			st.InFlight = math.Min(float64(running), processed/math.Max(1e-9, capSum*dt)*float64(running))
			st.UsefulSec = busy
			for gi, g := range gs {
				if g.probe == 0 {
					cs := st.ConfigStat(g.cfg)
					cs.Running += g.n
					cs.Processed += processed * float64(g.n) * w.perInst[gi] / capSum
					cs.BusySec += frac * float64(g.n) * dt
					cs.UsefulSec += frac * float64(g.n) * dt
					cs.InFlight += frac * float64(g.n)
				}
			}
		}
		st.BusySec = busy
		st.Util = busy / (float64(running) * dt)
		if !spec.Async {
			st.Occupancy = st.Util
		}
	}
	return busy
}

// probeMetrics fills the metrics of the operator's probe slots and returns every group's
// in-flight records for the device-memory model (probes hold their own).
//
// Probes are dispatched first, in slot order, so each runs at its own admission limit
// whenever the queue still holds that much work after the probes before it (an
// evaluation under sustained load).
func (w *opTick) probeMetrics(dt float64) []float64 {
	op, st, gs := w.op, w.st, w.gs
	spec := op.spec
	for _, in := range op.insts {
		if in.probe > 0 && in.state != stStopping {
			st.Probes = growProbes(st.Probes, in.probe)
		}
	}
	var probeGroups []int
	for gi, g := range gs {
		if g.probe > 0 {
			probeGroups = append(probeGroups, gi)
		}
	}
	sort.Slice(probeGroups, func(a, b int) bool { return gs[probeGroups[a]].probe < gs[probeGroups[b]].probe })
	cm := append([]float64(nil), w.cIn...)
	left := w.queue0
	for _, gi := range probeGroups {
		g := gs[gi]
		ps := &st.Probes[g.probe-1]
		ps.Running = true
		if w.head == nil {
			continue
		}
		c := 1.0
		if spec.Async {
			c = math.Min(spec.inFlightLimit(g.cfg), left)
			cm[gi] = c
		}
		r := spec.Model.Rate(w.head, g.cfg, c) * w.noise
		ps.InFlight = c * w.active
		if run, wait, lim, ok := engineRequests(spec.Model, w.head, g.cfg, c); ok {
			ps.EngineRunning, ps.EngineWaiting, ps.EngineLimit = run*w.active, wait*w.active, lim
		}
		ps.Processed = math.Min(r*dt*w.active, left)
		ps.BusySec = dt * w.active
		if left <= 0 {
			ps.BusySec = 0
		}
		left -= ps.Processed
	}
	return cm
}

// growProbes extends ps to at least slot entries.
func growProbes(ps []ProbeStats, slot int) []ProbeStats {
	for len(ps) < slot {
		ps = append(ps, ProbeStats{})
	}
	return ps
}

// Occupier is implemented by models of batching operators that know their batch fill.
type Occupier interface {
	// Occupancy returns the running batch as a fraction of its limit (0..1).
	Occupancy(a Attrs, cfg OpConfig, c float64) float64
}

func occupancy(m Model, spec *OpSpec, a Attrs, cfg OpConfig, c float64) float64 {
	if o, ok := m.(Occupier); ok {
		return math.Min(1, math.Max(0, o.Occupancy(a, cfg, c)))
	}
	return math.Min(1, c/spec.inFlightLimit(cfg))
}

// Batcher is implemented by models of serving engines whose requests are not all the
// records in flight: an LLM engine runs at most max_num_seqs sequences, and no more than
// its KV cache holds, while its other requests wait inside it; records that need no
// generation pass through without a request (what vLLM exports as num_requests_running
// and num_requests_waiting, with max_num_seqs as its admission limit).
type Batcher interface {
	// EngineRequests returns, for c records in flight under cfg, the engine's running and
	// waiting requests and its limit on the running ones.
	EngineRequests(a Attrs, cfg OpConfig, c float64) (running, waiting, limit float64)
}

// engineRequests is m's Batcher figure (ok false for other models, or without records
// to judge by).
func engineRequests(m Model, a Attrs, cfg OpConfig, c float64) (running, waiting, limit float64, ok bool) {
	b, is := m.(Batcher)
	if !is || a == nil {
		return 0, 0, 0, false
	}
	running, waiting, limit = b.EngineRequests(a, cfg, c)
	return running, waiting, limit, true
}

// headAttrs returns the attributes of the records the operator is working on.
func (e *Engine) headAttrs(op *opState, out []cohort) Attrs {
	if len(op.queue) > 0 {
		return op.queue[0].attrs
	}
	if len(out) > 0 {
		return out[len(out)-1].attrs
	}
	return op.lastAttrs
}

// deviceMemory samples per-instance peak memory and triggers OOM restarts.
func (e *Engine) deviceMemory(op *opState, gs []group, cIn []float64, a Attrs, st *OpStats, dt float64) {
	for gi, g := range gs {
		mean, sd := op.spec.Model.PeakMem(a, g.cfg, cIn[gi])
		limit := e.cluster.Nodes[g.node].AccMemGB
		pOOM := 0.0
		if sd > 0 {
			pOOM = 1 - normCDF((limit-mean)/sd)
		} else if mean > limit {
			pOOM = 1
		}
		// Per-tick peak of the group: the max of n draws, approximated by one draw shifted
		// by the expected maximum.
		peak := mean + sd*(e.rng.NormFloat64()*0.5+expMaxNormal(g.n))
		if peak > limit {
			peak = limit
		}
		if g.probe > 0 {
			ps := &st.Probes[g.probe-1]
			ps.PeakMemGB = math.Max(ps.PeakMemGB, math.Min(limit, mean+sd*math.Abs(e.rng.NormFloat64())))
		}
		st.PeakMemGB = math.Max(st.PeakMemGB, peak)
		if g.probe == 0 {
			cs := st.ConfigStat(g.cfg)
			cs.PeakMemGB = math.Max(cs.PeakMemGB, peak)
		}
		if pOOM < 1e-12 || e.cfg.NoOOM {
			continue
		}
		// Scale the hazard to the tick length (pOOM is per second).
		p := 1 - math.Pow(1-pOOM, dt)
		hit := 0
		for range g.n {
			if e.rng.Float64() < p {
				hit++
			}
		}
		if hit == 0 {
			continue
		}
		for _, in := range op.insts {
			if hit == 0 {
				break
			}
			if in.state == stRunning && in.node == g.node && in.probe == g.probe && in.cfg.Equal(g.cfg) {
				in.state = stRestarting
				in.timer = e.cfg.OOMRestartS
				hit--
				st.OOMs++
				op.ooms++
				op.oomDowntime += e.cfg.OOMRestartS
				if g.probe > 0 {
					st.Probes[g.probe-1].OOM = true
					st.Probes[g.probe-1].PeakMemGB = limit
				} else {
					st.ConfigStat(g.cfg).OOMs++
				}
			}
		}
	}
}

// expMaxNormal approximates the expected maximum of n standard normals.
func expMaxNormal(n int) float64 {
	if n <= 1 {
		return 0
	}
	return math.Sqrt(2 * math.Log(float64(n)))
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// crossFractions returns, per node, the fraction of the node's output that must cross the
// network given the next operator's placement: output is consumed locally up to the local
// downstream share, the rest is spread over other nodes.
func (e *Engine) crossFractions(nodeRate []float64, next *opState) []float64 {
	nN := len(e.cluster.Nodes)
	down := make([]float64, nN)
	var dt, ut float64
	for _, in := range next.insts {
		if in.state == stRunning {
			down[in.node]++
			dt++
		}
	}
	if dt == 0 { // nothing running downstream: weigh by placement
		for _, in := range next.insts {
			if in.state != stStopping {
				down[in.node]++
				dt++
			}
		}
	}
	for _, r := range nodeRate {
		ut += r
	}
	cf := make([]float64, nN)
	if dt == 0 || ut == 0 {
		return cf
	}
	for n := range cf {
		p := nodeRate[n] / ut
		if p <= 0 {
			continue
		}
		q := down[n] / dt
		cf[n] = math.Max(0, p-q) / p
	}
	return cf
}

// push appends a cohort, merging identical or excess tail cohorts.
func (o *opState) push(c cohort) {
	if k := len(o.queue); k > 0 {
		t := &o.queue[k-1]
		if sameAttrs(t.attrs, c.attrs) && t.srcPer == c.srcPer {
			t.amount += c.amount
			return
		}
	}
	o.queue = append(o.queue, c)
	const maxCohorts = 48
	if k := len(o.queue); k > maxCohorts {
		// Merge the adjacent pair with the smallest combined amount, so that resolution
		// stays even along the queue (the head cohort is never merged).
		j, best := 1, math.Inf(1)
		for i := 1; i < k-1; i++ {
			if w := o.queue[i].amount + o.queue[i+1].amount; w < best {
				j, best = i, w
			}
		}
		a, b := o.queue[j], o.queue[j+1]
		w := a.amount + b.amount
		if w > 0 {
			m := make(Attrs, len(a.attrs))
			for x := range m {
				m[x] = (a.attrs[x]*a.amount + b.attrs[x]*b.amount) / w
			}
			o.queue[j] = cohort{amount: w, attrs: m, srcPer: (a.srcPer*a.amount + b.srcPer*b.amount) / w}
		}
		o.queue = append(o.queue[:j+1], o.queue[j+2:]...)
	}
}

func sameAttrs(a, b Attrs) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) > 0 && &a[0] == &b[0] {
		return true
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Run simulates the pipeline under the scheduler until the dataset is done or the
// duration elapses.
func Run(ctx context.Context, p *Pipeline, c Cluster, s Scheduler, cfg RunConfig) (*Result, error) {
	e, err := NewEngine(p, c, cfg)
	if err != nil {
		return nil, err
	}
	return e.Run(ctx, s)
}

// Run drives the engine with scheduler s.
func (e *Engine) Run(ctx context.Context, s Scheduler) (*Result, error) {
	if c, ok := s.(io.Closer); ok {
		// A scheduler that holds processes or servers (the shipped planner) stops with
		// the run.
		defer c.Close()
	}
	cfg := e.cfg
	env := &Env{Cluster: e.cluster, Pipeline: e.pipe, Tick: cfg.Tick, Profiler: NewProfiler(e.pipe, e.cluster, cfg.Seed^0xabcdef)}
	plan, err := s.Init(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("sim: %s init: %w", s.Name(), err)
	}
	if err := e.Apply(plan); err != nil {
		return nil, fmt.Errorf("sim: %s initial plan: %w", s.Name(), err)
	}
	limit := cfg.Duration
	if limit <= 0 {
		limit = 48 * 3600
	}
	res := &Result{Scheduler: s.Name()}
	interval := s.Interval()
	nextDecide := interval
	bucket, bucketEnd := 0.0, cfg.TimelineStep
	ticks := 0
	for e.now < limit-1e-9 {
		if ticks%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("sim: %s at t=%.0fs: %w", s.Name(), e.now, err)
			}
		}
		ticks++
		snap := e.step(cfg.Tick)
		bucket += snap.Completed
		if e.now >= bucketEnd-1e-9 {
			res.Timeline = append(res.Timeline, bucket/cfg.TimelineStep)
			bucket, bucketEnd = 0, bucketEnd+cfg.TimelineStep
		}
		s.Observe(snap)
		if e.srcDone && e.pipelineEmpty() {
			res.Done = true
			break
		}
		if e.now >= nextDecide-1e-9 {
			t0 := time.Now()
			pl, err := s.Decide(ctx, snap)
			res.DecideWall += time.Since(t0)
			res.Decisions++
			if err != nil {
				return nil, fmt.Errorf("sim: %s decide at t=%.0fs: %w", s.Name(), e.now, err)
			}
			if err := e.Apply(pl); err != nil {
				return nil, fmt.Errorf("sim: %s plan at t=%.0fs: %w", s.Name(), e.now, err)
			}
			nextDecide += interval
		}
	}
	if bucket > 0 {
		res.Timeline = append(res.Timeline, bucket/cfg.TimelineStep)
	}
	res.Completed = e.completed
	res.SimSeconds = e.now
	if e.now > 0 {
		res.Throughput = e.completed / e.now
		res.MeanEgressMBps = e.egressSum / float64(ticks) / float64(len(e.cluster.Nodes))
	}
	res.RegimeEnd = append([]float64(nil), e.regimeEnd...)
	for _, op := range e.ops {
		sum := OpSummary{
			Name:         op.spec.Name,
			Processed:    op.processed,
			OOMs:         op.ooms,
			OOMDowntimeS: op.oomDowntime,
			Restarts:     op.restarts,
			Launches:     op.launches,
			FinalPerNode: append([]int(nil), op.lastStats.PerNode...),
		}
		if e.now > 0 {
			sum.MeanInstances = op.runningSec / e.now
		}
		if op.runningSec > 0 {
			sum.Busy = op.busy / op.runningSec
		}
		if op.spec.Tunable() {
			sum.FinalConfig = op.target.Format(op.spec.Space)
		}
		res.OOMs += op.ooms
		res.OOMDowntimeS += op.oomDowntime
		res.Ops = append(res.Ops, sum)
	}
	return res, nil
}

func (e *Engine) pipelineEmpty() bool {
	for _, op := range e.ops {
		if op.queueLen() > 1e-6 {
			return false
		}
	}
	return true
}
