// Package soakbench is `trident bench planner` (issue #28): a soak benchmark of a 3-server
// planner raft cluster (real `trident planner` processes) driving a real loopback Nomad
// cluster, first idle and then busy.
//
// The run registers a two-operator pipeline of raw_exec sleepers (PipelineJob), waits for
// its first decision to be applied, then
//
//   - idle: nothing changes for Options.Idle; the bench only reads GET /v1/status of every
//     server once per sample;
//   - busy: for Options.Busy it publishes observations of both operators every
//     Options.ObserveEvery, alternating every Options.Flip between two capacity settings
//     whose optimal splits differ, so the leader re-plans, commits decisions and Nomad
//     applies them;
//   - oversize: it sends requests above the 4 MiB body limit of PUT /v1/pipelines/<job>
//     to the leader and to a follower (with Content-Length, and chunked without it) and
//     checks that every one is answered 413.
//
// Throughout, it samples each server's CPU time (/proc/<pid>/stat) and VmRSS
// (/proc/<pid>/status), its rounds, solves and Nomad requests (GET /v1/status) and the
// size of its raft state (raft.db and snapshots/).
package soakbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/internal/localcluster"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/nomadact"
)

// JobID is the ID of the soak's pipeline job.
const JobID = "soak"

// Options configures a soak run.
type Options struct {
	// TridentBin is the trident binary the planner servers run (required).
	TridentBin string
	// NomadBin is the nomad binary (default: localcluster.ToolPath("nomad")).
	NomadBin string
	// Idle and Busy are the lengths of the idle and busy phases (default 2m each).
	Idle, Busy time.Duration
	// Interval is the planners' rescheduling period, their -interval (default 2s).
	Interval time.Duration
	// Flip is how often the busy phase switches between its two capacity settings
	// (default 10s).
	Flip time.Duration
	// ObserveEvery is the busy phase's observation period (default 500ms).
	ObserveEvery time.Duration
	// Sample is the period of the CPU, RSS and status samples (default 2s).
	Sample time.Duration
	// ProgressEvery is the period of the progress lines (default 10s).
	ProgressEvery time.Duration
	// Warmup is how far into each phase the RSS the flatness goal starts from is sampled
	// (default 1m; none when the phase is shorter than twice that): the servers' heaps grow
	// to the phase's working set first (observation bodies, decisions, raft log cache).
	Warmup time.Duration
	// Settle is how long after the oversize requests RSS is sampled once more, to show
	// whether growth is kept or returned (default 10s).
	Settle time.Duration
	// Oversize is the number of requests above the body limit with a Content-Length,
	// alternately to the leader and to a follower (default 20); Chunked the number of
	// chunked ones without a Content-Length (default 5).
	Oversize, Chunked int
	// Dir is the working directory of the clusters (default: a temp dir, removed after a
	// successful run and kept, with the logs, after a failed one).
	Dir string
	// Progress receives progress lines (default: discard).
	Progress io.Writer
	// Logger receives the clusters' diagnostics (default: discard).
	Logger *slog.Logger
	// Debug starts every planner server with a loopback -debug-addr (pprof) and prints
	// the addresses to Progress, to profile a server during the soak.
	Debug bool
}

func (o *Options) defaults() error {
	if o.TridentBin == "" {
		return errors.New("soak: the trident binary of the planner servers is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Idle, 2*time.Minute)
	def(&o.Busy, 2*time.Minute)
	def(&o.Interval, 2*time.Second)
	def(&o.Flip, 10*time.Second)
	def(&o.ObserveEvery, 500*time.Millisecond)
	def(&o.Sample, 2*time.Second)
	def(&o.ProgressEvery, 10*time.Second)
	def(&o.Settle, 10*time.Second)
	def(&o.Warmup, time.Minute)
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle", o.Idle}, {"busy", o.Busy}, {"interval", o.Interval}, {"flip", o.Flip}, {"observe period", o.ObserveEvery}, {"sample period", o.Sample}, {"progress period", o.ProgressEvery}, {"settle period", o.Settle}, {"warm-up", o.Warmup}} {
		if d.v < 0 {
			return fmt.Errorf("soak: %s %v must be positive", d.name, d.v)
		}
	}
	if o.Oversize == 0 {
		o.Oversize = 20
	}
	if o.Chunked == 0 {
		o.Chunked = 5
	}
	if o.Oversize < 0 || o.Chunked < 0 {
		return fmt.Errorf("soak: oversize request counts %d and %d must not be negative", o.Oversize, o.Chunked)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// PlannerArgs are the flags the soak gives every planner server besides its identity,
// addresses, peers and -nomad-addr: the rescheduling interval, and short Nomad update
// settings so that a decision is applied within a few seconds.
func PlannerArgs(interval time.Duration) []string {
	return []string{"-interval", interval.String(), "-min-healthy-time", "1s", "-healthy-deadline", "30s", "-kill-timeout", "1s"}
}

// Phase is the outcome of the idle or the busy phase.
type Phase struct {
	// Name is "idle" or "busy".
	Name string
	// Elapsed is the measured window (between the first and the last status sample).
	Elapsed time.Duration
	// Leader is the server that led at the start; Leaders every server seen leading.
	Leader  string
	Leaders []string
	// LeaderIndex is Leader's position in Report.Servers.
	LeaderIndex int
	// Rounds, Solves and NomadRequests are the increases of the servers' counters (summed
	// over the servers: only a leader runs rounds, so a leadership change is counted
	// right).
	Rounds, Solves, NomadRequests uint64
	// RaftEntries is the increase of the highest last raft index.
	RaftEntries uint64
	// Decisions is the number of decisions committed in the phase.
	Decisions int
	// SentToNomad is the number of those decisions seen as the Nomad job's current
	// version; Done the number seen with status done (sampled, busy phase only).
	SentToNomad, Done int
	// LastStatus is the status of the pipeline's latest decision at the end.
	LastStatus string
	// CPU is each server's CPU time over the phase, in % of one core.
	CPU []float64
	// RSSStart, RSSEnd and RSSMax are each server's VmRSS in bytes; RSSWarm is the first
	// sample at least Options.Warmup into the phase (RSSStart if the phase is shorter than
	// twice the warm-up).
	RSSStart, RSSWarm, RSSEnd, RSSMax []uint64
	// AnonWarm and AnonEnd are each server's RssAnon (private anonymous memory) at the
	// warm-up sample and at the end.
	AnonWarm, AnonEnd []uint64
	// Observations, ObserveErrors and Ignored count the busy phase's observation
	// requests, the failed ones and the observations the planner ignored as stale.
	Observations, ObserveErrors, Ignored int
	// ObserveLastErr is the last failed observation request's error.
	ObserveLastErr string
	// Flips is the number of capacity switches in the busy phase.
	Flips int
	// LoadStart and LoadEnd are /proc/loadavg (1, 5, 15 min) at the phase's edges.
	LoadStart, LoadEnd string
	// Interval is the planners' rescheduling period.
	Interval time.Duration
}

// RoundsPerInterval is the leader's rounds per rescheduling interval.
func (p Phase) RoundsPerInterval() float64 { return PerInterval(p.Rounds, p.Elapsed, p.Interval) }

// SolvesPerInterval is the leader's solves per rescheduling interval.
func (p Phase) SolvesPerInterval() float64 { return PerInterval(p.Solves, p.Elapsed, p.Interval) }

// NomadPerRound is the Nomad API requests per round.
func (p Phase) NomadPerRound() float64 { return Ratio(p.NomadRequests, p.Rounds) }

// Report is the outcome of a soak run.
type Report struct {
	// Start is when the run started.
	Start time.Time
	// Options are the options the run used (defaults applied).
	Options Options
	// Servers are the planner server IDs.
	Servers []string
	// PlannerArgs are the flags of every planner server (PlannerArgs).
	PlannerArgs []string
	// ClockTick is the clock-tick rate of the CPU times; ClockTickAssumed is true when
	// `getconf CLK_TCK` failed and DefaultClockTick was assumed.
	ClockTick        float64
	ClockTickAssumed bool
	// Phases are the idle and the busy phase (those that ran).
	Phases []Phase
	// Raft is each server's raft state size in bytes (raft.db + snapshots/), at the start
	// of the idle phase, after it, after the busy phase and after the oversize requests.
	Raft [][4]int64
	// Oversize are the requests above the body limit, in the order sent.
	Oversize []OversizeRequest
	// OversizeRSS is each server's VmRSS in bytes before the oversize requests, after the
	// Content-Length ones, after the chunked ones and Options.Settle later.
	OversizeRSS [][4]uint64
	// OversizeTarget names the leader and the follower the oversize requests went to.
	OversizeLeader, OversizeFollower string
}

// bench is one run in progress.
type bench struct {
	o    Options
	rep  *Report
	ps   *localcluster.Planners
	n    *localcluster.Nomad
	pids []int
	cls  []*client.Client
}

// Run starts a loopback Nomad cluster and a 3-server planner cluster, runs the idle and
// busy phases and the oversize requests, stops everything it started (also when ctx is
// cancelled or a step fails) and returns the report. When some oversize request is not
// answered 413 it returns the report and an error saying which.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	dir, owned := o.Dir, false
	if dir == "" {
		d, err := os.MkdirTemp("", "trident-soak-")
		if err != nil {
			return nil, fmt.Errorf("soak: working dir: %w", err)
		}
		dir, owned = d, true
	}
	o.Dir = dir
	rep := &Report{Start: time.Now(), Options: o, PlannerArgs: PlannerArgs(o.Interval)}
	rep.ClockTick, rep.ClockTickAssumed = ClockTick(ctx)
	b := &bench{o: o, rep: rep}
	err := b.run(ctx)
	if err != nil {
		return rep, fmt.Errorf("%w (cluster logs kept in %s)", err, dir)
	}
	if owned {
		if rerr := os.RemoveAll(dir); rerr != nil {
			return rep, fmt.Errorf("soak: remove working dir: %w", rerr)
		}
	}
	return rep, b.checkOversize()
}

func (b *bench) run(ctx context.Context) (err error) {
	o := b.o
	fmt.Fprintf(o.Progress, "bench planner: starting a loopback Nomad cluster and 3 planner servers (%s) in %s\n", strings.Join(b.rep.PlannerArgs, " "), o.Dir)
	b.n, err = localcluster.Launch(ctx, localcluster.NomadOptions{
		Dir: filepath.Join(o.Dir, "nomad"), Binary: o.NomadBin, Logger: o.Logger,
		ServerClientMeta: map[string]string{opcontract.MetaNodeCPUCores: nodeCPUCores, opcontract.MetaNodeMemoryMB: nodeMemoryMB},
	})
	if err != nil {
		return fmt.Errorf("soak: start nomad: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if serr := b.n.Stop(sctx); serr != nil && err == nil {
			err = fmt.Errorf("soak: stop nomad: %w", serr)
		}
	}()
	b.ps, err = localcluster.LaunchPlanners(ctx, localcluster.PlannerOptions{
		Binary: o.TridentBin, Count: 3, NomadAddr: b.n.Addr, Args: b.rep.PlannerArgs,
		Dir: filepath.Join(o.Dir, "planners"), Logger: o.Logger, Debug: o.Debug,
	})
	if err != nil {
		return fmt.Errorf("soak: start planners: %w", err)
	}
	for i, u := range b.ps.Debug {
		fmt.Fprintf(o.Progress, "bench planner: p%d (pid %d) serves pprof at %s\n", i+1, b.ps.PID(i), u)
	}
	// Deferred after Nomad's stop, so it runs first: the planners stop acting on Nomad
	// before its jobs are purged.
	defer b.ps.Stop()
	for i, addr := range b.ps.HTTP {
		b.rep.Servers = append(b.rep.Servers, fmt.Sprintf("p%d", i+1))
		b.pids = append(b.pids, b.ps.PID(i))
		cl, err := client.New(client.Config{Address: addr, Retries: 3})
		if err != nil {
			return fmt.Errorf("soak: planner client: %w", err)
		}
		b.cls = append(b.cls, cl)
	}
	if err := b.register(ctx); err != nil {
		return err
	}
	raftStart := b.raftSizes()
	idle, err := b.phase(ctx, "idle", o.Idle, false)
	if err != nil {
		return err
	}
	b.rep.Phases = append(b.rep.Phases, idle)
	raftIdle := b.raftSizes()
	busy, err := b.phase(ctx, "busy", o.Busy, true)
	if err != nil {
		return err
	}
	b.rep.Phases = append(b.rep.Phases, busy)
	raftBusy := b.raftSizes()
	if err := b.oversize(ctx); err != nil {
		return err
	}
	raftEnd := b.raftSizes()
	for i := range b.rep.Servers {
		b.rep.Raft = append(b.rep.Raft, [4]int64{raftStart[i], raftIdle[i], raftBusy[i], raftEnd[i]})
	}
	return nil
}

// register registers the pipeline through the leader and waits for its first decision to
// be applied, then lets the decision's follow-up rounds settle for two intervals.
func (b *bench) register(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	leader, err := b.ps.Leader(wctx)
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	raw, err := json.Marshal(PipelineJob(JobID))
	if err != nil {
		return fmt.Errorf("soak: encode the pipeline job: %w", err)
	}
	cl := b.cls[b.index(leader)]
	if _, err := cl.RegisterPipeline(wctx, JobID, raw); err != nil {
		return fmt.Errorf("soak: register the pipeline: %w", err)
	}
	start := time.Now()
	for {
		p, err := cl.Plan(wctx, JobID)
		if err == nil && p.Status == fsm.StatusDone {
			fmt.Fprintf(b.o.Progress, "bench planner: pipeline %s registered; decision %d applied by Nomad after %s\n", JobID, p.DecisionIndex, time.Since(start).Round(100*time.Millisecond))
			break
		}
		if err == nil && p.Status == fsm.StatusFailed {
			return fmt.Errorf("soak: the first decision failed in Nomad: %+v\n%s", p, b.ps.Logs(30))
		}
		if err != nil && !client.IsNotFound(err) && wctx.Err() == nil {
			return fmt.Errorf("soak: read the plan: %w", err)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("soak: the first decision was not applied: %w\n%s", wctx.Err(), b.ps.Logs(30))
		case <-time.After(250 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("soak: %w", ctx.Err())
	case <-time.After(2 * b.o.Interval):
	}
	return nil
}

// index returns the position of the server with HTTP address addr.
func (b *bench) index(addr string) int {
	for i, a := range b.ps.HTTP {
		if a == addr {
			return i
		}
	}
	return 0
}

func (b *bench) raftSizes() []int64 {
	out := make([]int64, len(b.rep.Servers))
	for i := range out {
		n, err := raftBytes(b.ps.DataDir(i))
		if err != nil {
			n = -1
		}
		out[i] = n
	}
	return out
}

// sample is one reading of every server.
type sample struct {
	t      time.Time
	proc   []procSample
	status []client.StatusResponse
	leader int // -1: none answered as leader
}

// sample reads every server's /proc entries, then its status.
func (b *bench) sample(ctx context.Context) (sample, error) {
	s := sample{leader: -1}
	for i, pid := range b.pids {
		p, err := readProc(pid)
		if err != nil {
			return s, fmt.Errorf("soak: planner %s: %w\n%s", b.rep.Servers[i], err, b.ps.Logs(20))
		}
		s.proc = append(s.proc, p)
	}
	s.t = time.Now()
	for i, cl := range b.cls {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := cl.Status(sctx)
		cancel()
		if err != nil {
			return s, fmt.Errorf("soak: status of planner %s: %w", b.rep.Servers[i], err)
		}
		if st.State == "Leader" && s.leader < 0 {
			s.leader = i
		}
		s.status = append(s.status, st)
	}
	return s, nil
}

// sampleWithLeader samples until some server answers as the leader (an election may be
// under way).
func (b *bench) sampleWithLeader(ctx context.Context) (sample, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := b.sample(ctx)
		if err != nil || s.leader >= 0 {
			return s, err
		}
		if time.Now().After(deadline) {
			return s, errors.New("soak: no planner server is the leader for 30 s")
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("soak: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func sum(s sample, f func(client.StatusResponse) uint64) uint64 {
	var n uint64
	for _, st := range s.status {
		n += f(st)
	}
	return n
}

func maxIndex(s sample) uint64 {
	var n uint64
	for _, st := range s.status {
		n = max(n, st.LastIndex)
	}
	return n
}

func rounds(st client.StatusResponse) uint64 { return st.Rounds }
func solves(st client.StatusResponse) uint64 { return st.Solves }
func nomadReqs(st client.StatusResponse) uint64 {
	return st.NomadRequests
}

// phase runs one phase of length d (busy: with the observation feed).
func (b *bench) phase(ctx context.Context, name string, d time.Duration, busy bool) (Phase, error) {
	ph := Phase{Name: name, Interval: b.o.Interval, LoadStart: benchfmt.LoadAvg()}
	s0, err := b.sampleWithLeader(ctx)
	if err != nil {
		return ph, err
	}
	ph.LeaderIndex, ph.Leader = s0.leader, b.rep.Servers[s0.leader]
	leaders := map[int]bool{s0.leader: true}
	ph.RSSStart = make([]uint64, len(b.pids))
	ph.RSSMax = make([]uint64, len(b.pids))
	for i, p := range s0.proc {
		ph.RSSStart[i], ph.RSSMax[i] = p.RSS, p.RSS
	}
	if d < 2*b.o.Warmup {
		ph.RSSWarm = slices.Clone(ph.RSSStart)
		for _, p := range s0.proc {
			ph.AnonWarm = append(ph.AnonWarm, p.Anon)
		}
	}
	since := maxIndex(s0)
	fmt.Fprintf(b.o.Progress, "bench planner: %s phase for %s (leader %s, load %s)\n", name, d, ph.Leader, ph.LoadStart)

	var feed *observer
	sentToNomad, done := map[uint64]bool{}, map[uint64]bool{}
	if busy {
		feed = b.startObserver(ctx, b.cls[s0.leader])
	}
	stopFeed := func() {
		if feed != nil {
			feed.stop()
			ph.Observations, ph.ObserveErrors, ph.Ignored, ph.Flips = feed.sent, feed.errs, feed.ignored, feed.flips
			if feed.lastErr != nil {
				ph.ObserveLastErr = feed.lastErr.Error()
			}
			feed = nil
		}
	}
	defer stopFeed()

	tick := time.NewTicker(b.o.Sample)
	defer tick.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	lastProgress := s0.t
	last := s0
	for running := true; running; {
		select {
		case <-ctx.Done():
			return ph, fmt.Errorf("soak: %s phase: %w", name, ctx.Err())
		case <-end.C:
			running = false
		case <-tick.C:
		}
		s, err := b.sample(ctx)
		if err != nil {
			return ph, err
		}
		last = s
		if s.leader >= 0 {
			leaders[s.leader] = true
		}
		for i, p := range s.proc {
			ph.RSSMax[i] = max(ph.RSSMax[i], p.RSS)
		}
		if ph.RSSWarm == nil && s.t.Sub(s0.t) >= b.o.Warmup {
			for _, p := range s.proc {
				ph.RSSWarm = append(ph.RSSWarm, p.RSS)
				ph.AnonWarm = append(ph.AnonWarm, p.Anon)
			}
		}
		if busy && s.leader >= 0 {
			b.trackDecisions(ctx, b.cls[s.leader], since, sentToNomad, done)
		}
		if running && s.t.Sub(lastProgress) >= b.o.ProgressEvery {
			lastProgress = s.t
			b.progress(name, d, s0, s)
		}
	}
	stopFeed()
	s1 := last
	if ph.RSSWarm == nil { // the phase ended (or its context) before the warm-up
		ph.RSSWarm = slices.Clone(ph.RSSStart)
		for _, p := range s0.proc {
			ph.AnonWarm = append(ph.AnonWarm, p.Anon)
		}
	}
	ph.Elapsed = s1.t.Sub(s0.t)
	ph.Rounds = sum(s1, rounds) - sum(s0, rounds)
	ph.Solves = sum(s1, solves) - sum(s0, solves)
	ph.NomadRequests = sum(s1, nomadReqs) - sum(s0, nomadReqs)
	ph.RaftEntries = maxIndex(s1) - since
	for i := range b.pids {
		ph.CPU = append(ph.CPU, CPUPercent(s1.proc[i].Ticks-s0.proc[i].Ticks, b.rep.ClockTick, ph.Elapsed))
		ph.RSSEnd = append(ph.RSSEnd, s1.proc[i].RSS)
		ph.AnonEnd = append(ph.AnonEnd, s1.proc[i].Anon)
	}
	for i := range b.rep.Servers {
		if leaders[i] {
			ph.Leaders = append(ph.Leaders, b.rep.Servers[i])
		}
	}
	cl := b.cls[s0.leader]
	if s1.leader >= 0 {
		cl = b.cls[s1.leader]
	}
	ds, err := cl.Decisions(ctx, JobID, since)
	if err != nil {
		return ph, fmt.Errorf("soak: %s phase: list decisions: %w", name, err)
	}
	ph.Decisions = len(ds)
	if busy {
		b.trackDecisions(ctx, cl, since, sentToNomad, done)
	}
	ph.SentToNomad, ph.Done = len(sentToNomad), len(done)
	if p, err := cl.Plan(ctx, JobID); err == nil {
		ph.LastStatus = p.Status
	}
	ph.LoadEnd = benchfmt.LoadAvg()
	fmt.Fprintf(b.o.Progress, "bench planner: %s phase done: %d rounds, %d solves, %d Nomad requests, %d decisions in %s\n",
		name, ph.Rounds, ph.Solves, ph.NomadRequests, ph.Decisions, ph.Elapsed.Round(time.Millisecond))
	return ph, nil
}

// trackDecisions records the decisions after since that the Nomad job carries now, and the
// pipeline's latest decision if it is done.
func (b *bench) trackDecisions(ctx context.Context, cl *client.Client, since uint64, sent, done map[uint64]bool) {
	if j, _, err := b.n.API().Jobs().Info(JobID, nil); err == nil {
		if d := nomadact.DecisionOf(j); d > since {
			sent[d] = true
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if p, err := cl.Plan(sctx, JobID); err == nil && p.DecisionIndex > since && p.Status == fsm.StatusDone {
		done[p.DecisionIndex] = true
	}
}

func (b *bench) progress(name string, d time.Duration, s0, s sample) {
	el := s.t.Sub(s0.t)
	leader := "none"
	cpu := 0.0
	if s.leader >= 0 {
		leader = b.rep.Servers[s.leader]
		cpu = CPUPercent(s.proc[s.leader].Ticks-s0.proc[s.leader].Ticks, b.rep.ClockTick, el)
	}
	rss := make([]string, len(s.proc))
	for i, p := range s.proc {
		rss[i] = fmt.Sprintf("%s %.1f", b.rep.Servers[i], mib(p.RSS))
	}
	fmt.Fprintf(b.o.Progress, "bench planner: %s %s/%s: leader %s, %.2f rounds and %.2f solves per interval, leader CPU %.1f %%, RSS %s MiB, load %s\n",
		name, el.Round(time.Second), d, leader,
		PerInterval(sum(s, rounds)-sum(s0, rounds), el, b.o.Interval), PerInterval(sum(s, solves)-sum(s0, solves), el, b.o.Interval),
		cpu, strings.Join(rss, ", "), benchfmt.LoadAvg())
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// observer is the busy phase's observation feed.
type observer struct {
	cancel                     context.CancelFunc
	done                       chan struct{}
	sent, errs, ignored, flips int
	lastErr                    error
}

func (o *observer) stop() {
	o.cancel()
	<-o.done
}

// startObserver publishes both operators' capacities through cl every ObserveEvery,
// switching between the two settings every Flip, at the operators' current config epochs.
func (b *bench) startObserver(ctx context.Context, cl *client.Client) *observer {
	ctx, cancel := context.WithCancel(ctx)
	ob := &observer{cancel: cancel, done: make(chan struct{})}
	epochs := func() map[string]uint64 {
		out := map[string]uint64{}
		if p, err := cl.Plan(ctx, JobID); err == nil {
			for op, g := range p.Groups {
				out[op] = g.ConfigEpoch
			}
		}
		return out
	}
	go func() {
		defer close(ob.done)
		t := time.NewTicker(b.o.ObserveEvery)
		defer t.Stop()
		start := time.Now()
		ep := epochs()
		setting := 0
		for {
			k := int(time.Since(start)/b.o.Flip) % 2
			if k != setting {
				setting = k
				ob.flips++
			}
			now := time.Now().UnixMilli()
			var req []client.ObservationRequest
			for i, op := range Operators {
				req = append(req, client.ObservationRequest{Job: JobID, Operator: op, Capacity: capacities[k][i], Epoch: ep[op], UnixMilli: now})
			}
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			resp, err := cl.Observe(rctx, req)
			rcancel()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				ob.errs++
				ob.lastErr = err
			default:
				ob.sent++
				if len(resp.Ignored) > 0 {
					ob.ignored += len(resp.Ignored)
					ep = epochs()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return ob
}

// oversize sends the requests above the body limit and samples RSS around them.
func (b *bench) oversize(ctx context.Context) error {
	s, err := b.sampleWithLeader(ctx)
	if err != nil {
		return err
	}
	leader, follower := s.leader, (s.leader+1)%len(b.pids)
	b.rep.OversizeLeader, b.rep.OversizeFollower = b.rep.Servers[leader], b.rep.Servers[follower]
	body := oversizePayload()
	rss := func() []uint64 {
		out := make([]uint64, len(b.pids))
		for i, pid := range b.pids {
			if p, err := readProc(pid); err == nil {
				out[i] = p.RSS
			}
		}
		return out
	}
	send := func(i int, chunked bool) {
		idx, target := leader, "leader"
		if i%2 == 1 {
			idx, target = follower, "follower"
		}
		code, lat, msg, err := sendOversize(ctx, b.ps.HTTP[idx], JobID, body, chunked)
		r := OversizeRequest{Target: target, Server: b.rep.Servers[idx], Chunked: chunked, Code: code, Latency: lat}
		switch {
		case err != nil:
			r.Err = err.Error()
		case !r.Refused():
			r.Err = msg
		}
		b.rep.Oversize = append(b.rep.Oversize, r)
	}
	before := rss()
	for i := 0; i < b.o.Oversize; i++ {
		send(i, false)
	}
	afterCL := rss()
	for i := 0; i < b.o.Chunked; i++ {
		send(i, true)
	}
	after := rss()
	fmt.Fprintf(b.o.Progress, "bench planner: sent %d oversize requests (%d with Content-Length, %d chunked) to %s (leader) and %s (follower); sampling RSS again in %s\n",
		len(b.rep.Oversize), b.o.Oversize, b.o.Chunked, b.rep.OversizeLeader, b.rep.OversizeFollower, b.o.Settle)
	select {
	case <-ctx.Done():
		return fmt.Errorf("soak: %w", ctx.Err())
	case <-time.After(b.o.Settle):
	}
	later := rss()
	for i := range b.pids {
		b.rep.OversizeRSS = append(b.rep.OversizeRSS, [4]uint64{before[i], afterCL[i], after[i], later[i]})
	}
	return nil
}

// checkOversize fails the run when some oversize request was not refused (Refused).
func (b *bench) checkOversize() error {
	var bad []string
	for _, r := range b.rep.Oversize {
		if !r.Refused() {
			kind := "Content-Length"
			if r.Chunked {
				kind = "chunked"
			}
			bad = append(bad, fmt.Sprintf("%s to the %s %s: HTTP %d %s", kind, r.Target, r.Server, r.Code, r.Err))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("soak: %d of %d requests above the body limit were not refused (413, or 411 for a chunked body):\n  %s", len(bad), len(b.rep.Oversize), strings.Join(bad, "\n  "))
	}
	return nil
}
