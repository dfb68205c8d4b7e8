// Package demo runs the local end-to-end demo: a loopback Nomad cluster with several
// clients and fake GPUs, NATS JetStream, and a simulated pipeline run in phases: its static
// allocation, the real nomad-autoscaler with its built-in target-value and threshold
// strategies on each group's backlog (Nomad's scheduler placing the instances), and Trident
// (planner cluster + autoscaler with Trident's plugins), each phase optionally repeated,
// with live progress and a final report (text tables, CSV, SVG throughput plot), and a check
// by record IDs that no record was lost or duplicated in any phase.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/internal/benchfmt"
	"github.com/trident-sched/trident/internal/localcluster"
	"github.com/trident-sched/trident/sim/worker"
)

// Options configures a demo run.
type Options struct {
	// Pipeline is the simulated pipeline: pdf or video (each has a job file in jobs/).
	Pipeline string
	// Docs is the number of input records per phase.
	Docs int
	// Speed is the speed-up of simulated service times.
	Speed float64
	// PhaseTimeout bounds each phase.
	PhaseTimeout time.Duration
	// OutDir receives report.txt, throughput.csv and throughput.svg.
	OutDir string
	// TridentBin is the trident binary run by the operator tasks and the planners.
	TridentBin string
	// BinDir holds autoscaler-plugins/ and nomad-plugins/ (default: bin/ of the checkout),
	// and may hold nomad and nomad-autoscaler; those not in BinDir are found with
	// localcluster.ToolPath (the tools cache of `make tools`).
	BinDir string
	// Phases to run, in order, from AllPhases (default all of them).
	Phases []string
	// Repeat runs the phase list this many times (rounds, default 1); the report gives
	// each phase's median and spread.
	Repeat int
	// Peer configures the nomad-autoscaler phases.
	Peer PeerConfig
	// Tune turns on trident-apm's live tuner in the Trident phase (memory-constrained BO
	// of the operators' declared parameters, candidates proposed to the planner).
	Tune bool
	// Out receives progress and the report; Log receives diagnostics.
	Out io.Writer
	Log *slog.Logger

	// nomadBin and autoscalerBin are the resolved nomad and nomad-autoscaler binaries.
	nomadBin, autoscalerBin string
}

// Phase is the measured outcome of one phase.
type Phase struct {
	Name       string
	Round      int // 1-based repetition
	Elapsed    time.Duration
	Records    int     // final records that reached the sink
	Throughput float64 // final records per second over the phase
	Verify     worker.Report
	Series     []Point
	FinalCount map[string]int // running instances per operator at the end
	Notes      []string
	// Targets are the backlog-per-instance targets of an autoscaler phase, by group.
	Targets map[string]float64
	// LoadStart and LoadEnd are /proc/loadavg when the phase started and ended.
	LoadStart, LoadEnd string
	// Err is why the phase did not complete, if it did not.
	Err string
	// Started is whether the dataset was published (a phase that failed before has no
	// throughput and is left out of the medians).
	Started bool
}

// Point is one progress sample.
type Point struct {
	T         float64 // seconds since the phase started
	SinkTotal int
	Rate      float64 // sink records/s over the last interval
	Counts    map[string]int
	Backlog   map[string]int
	// Done is the records each operator finished so far (delivered minus in service).
	Done map[string]int
}

// Report is the whole demo's outcome.
type Report struct {
	Pipeline string
	Docs     int
	Phases   []Phase
	// Pilot is the static run that measured the per-instance rates for the autoscaler
	// targets when no static phase preceded the first autoscaler phase.
	Pilot *Phase
	// Rates are the per-instance rates (records/s) measured in the pilot (the first static
	// run, or Pilot), and TargetsFrom says which run that was.
	Rates       map[string]float64
	TargetsFrom string
	// Peer is the autoscaler phases' configuration (defaults filled in).
	Peer PeerConfig
}

func (o *Options) defaults() error {
	if o.Pipeline == "" {
		o.Pipeline = "pdf"
	}
	if o.Pipeline != "pdf" && o.Pipeline != "video" {
		return fmt.Errorf("pipeline %q has no demo job file (want pdf or video)", o.Pipeline)
	}
	if o.Docs < 0 || o.Speed < 0 || o.PhaseTimeout < 0 {
		return fmt.Errorf("docs %d, speed %v and phase timeout %v must not be negative", o.Docs, o.Speed, o.PhaseTimeout)
	}
	if o.Docs <= 0 {
		o.Docs = 400
	}
	if o.Speed <= 0 {
		o.Speed = 20
	}
	if o.PhaseTimeout <= 0 {
		o.PhaseTimeout = 8 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(o.Phases) == 0 {
		o.Phases = slices.Clone(AllPhases)
	}
	if o.Repeat < 0 {
		return fmt.Errorf("repeat %d must not be negative", o.Repeat)
	}
	if o.Repeat == 0 {
		o.Repeat = 1
	}
	o.Peer.defaults()
	if o.OutDir == "" {
		o.OutDir = "demo-out"
	}
	for _, p := range o.Phases {
		if !slices.Contains(AllPhases, p) {
			return fmt.Errorf("unknown phase %q (want %s)", p, strings.Join(AllPhases, ", "))
		}
	}
	if o.TridentBin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("locate the trident binary: %w", err)
		}
		o.TridentBin = exe
	}
	if o.BinDir == "" {
		root, err := localcluster.ModuleRoot()
		if err != nil {
			return fmt.Errorf("locate ./bin: %w (run from the checkout or pass -bin-dir)", err)
		}
		o.BinDir = filepath.Join(root, "bin")
	}
	for _, f := range []string{"autoscaler-plugins/trident", "autoscaler-plugins/trident-apm", "autoscaler-plugins/trident-target", "nomad-plugins/trident-gpu"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, f)); err != nil {
			return fmt.Errorf("%s missing in %s: run `make build` (or `make demo`)", f, o.BinDir)
		}
	}
	for _, t := range []struct {
		name string
		dst  *string
	}{{"nomad", &o.nomadBin}, {"nomad-autoscaler", &o.autoscalerBin}} {
		if p := filepath.Join(o.BinDir, t.name); isFile(p) {
			*t.dst = p
			continue
		}
		p, err := localcluster.ToolPath(t.name)
		if err != nil {
			return fmt.Errorf("%w (or `make demo`)", err)
		}
		*t.dst = p
	}
	return nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// Run executes the demo. Everything it starts is stopped before it returns, including
// when ctx is cancelled (Ctrl-C).
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	pl, err := worker.LookupPipeline(o.Pipeline)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.OutDir, err)
	}
	fmt.Fprintf(o.Out, "==> starting a loopback Nomad cluster (server + cpu1 + gpu1 and gpu2 with 4 fake GPUs each)\n")
	// The cluster lives under OutDir so that its logs (nomad, planners, autoscaler) remain
	// for inspection after the run.
	clusterDir, err := filepath.Abs(filepath.Join(o.OutDir, "cluster"))
	if err != nil {
		return nil, fmt.Errorf("cluster dir: %w", err)
	}
	if err := os.RemoveAll(clusterDir); err != nil {
		return nil, fmt.Errorf("clean %s: %w", clusterDir, err)
	}
	if err := os.MkdirAll(clusterDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", clusterDir, err)
	}
	n, err := localcluster.Launch(ctx, localcluster.NomadOptions{
		Dir:             clusterDir,
		Binary:          o.nomadBin,
		DevicePluginDir: filepath.Join(o.BinDir, "nomad-plugins"),
		Logger:          o.Log,
		// Every node models 16 cores for the planner (opcontract.MetaNodeCPUCores): the
		// clients share this host's few cores, and the operators' Nomad reservations are
		// scaled down by the job file, but the MILP plans with the operators' modelled needs.
		ServerClientMeta: map[string]string{opcontract.MetaNodeCPUCores: "16"},
		Clients: []localcluster.ClientSpec{
			{Name: "cpu1", NodeClass: "cpu", Meta: map[string]string{opcontract.MetaNodeCPUCores: "16"}},
			{Name: "gpu1", NodeClass: "gpu", FakeGPUs: 4, FakeGPUMemoryMiB: 81920, Meta: map[string]string{opcontract.MetaNodeCPUCores: "16"}},
			{Name: "gpu2", NodeClass: "gpu", FakeGPUs: 4, FakeGPUMemoryMiB: 81920, Meta: map[string]string{opcontract.MetaNodeCPUCores: "16"}},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("start nomad: %w", err)
	}
	defer func() {
		fmt.Fprintf(o.Out, "==> stopping everything\n")
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := n.Stop(sctx); err != nil {
			fmt.Fprintf(o.Out, "warning: %v\n", err)
		}
	}()
	fmt.Fprintf(o.Out, "    nomad UI/API at %s  (export NOMAD_ADDR=%s to use the nomad CLI meanwhile)\n", n.Addr, n.Addr)

	fmt.Fprintf(o.Out, "==> NATS JetStream job (jobs/nats.nomad.hcl)\n")
	natsURL, err := localcluster.RunNATS(ctx, n.API(), o.TridentBin)
	if err != nil {
		return nil, fmt.Errorf("start NATS: %w", err)
	}
	fmt.Fprintf(o.Out, "    NATS serving at %s\n", natsURL)
	nc, js, err := worker.Connect(ctx, natsURL, "trident-demo", o.Log)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()

	rep := &Report{Pipeline: o.Pipeline, Docs: o.Docs, Peer: o.Peer}
	ops := make([]string, len(pl.Operators))
	for i, op := range pl.Operators {
		ops[i] = op.Name
	}
	var failed []string
	for round := 1; round <= o.Repeat; round++ {
		for _, phase := range o.Phases {
			if isAutoscalerPhase(phase) && rep.Rates == nil {
				// The target-value targets come from a pilot run, as the autoscaler's docs
				// advise: the first static run, or a static run made for it.
				if s := find(rep, PhaseStatic); s != nil && s.Err == "" {
					rep.Rates, rep.TargetsFrom = pilotRates(s, ops), fmt.Sprintf("static run %d", s.Round)
				} else {
					fmt.Fprintf(o.Out, "\n==> pilot: a static run to measure the operators' per-instance rates for the autoscaler targets\n")
					ph, err := runPhase(ctx, o, n, js, pl, natsURL, phasePilot, round, nil)
					rep.Pilot = ph
					if err != nil {
						_ = writeReport(o, rep)
						return rep, fmt.Errorf("pilot run: %w", err)
					}
					rep.Rates, rep.TargetsFrom = pilotRates(ph, ops), "a pilot static run"
				}
				fmt.Fprintf(o.Out, "    per-instance rates (records/s, from %s): %s\n", rep.TargetsFrom, targetsString(roundRates(rep.Rates), ops))
			}
			ph, err := runPhase(ctx, o, n, js, pl, natsURL, phase, round, rep.Rates)
			if ph != nil {
				if err != nil {
					ph.Err = err.Error()
				}
				rep.Phases = append(rep.Phases, *ph)
			}
			if err != nil {
				if ctx.Err() != nil || ph == nil {
					_ = writeReport(o, rep)
					return rep, fmt.Errorf("phase %s (round %d): %w", phase, round, err)
				}
				// A phase that timed out or lost records is a result: keep going and
				// report it.
				fmt.Fprintf(o.Out, "    phase %s (round %d) failed: %v\n", phase, round, err)
				failed = append(failed, fmt.Sprintf("%s#%d", phase, round))
			}
		}
	}
	if err := writeReport(o, rep); err != nil {
		return rep, err
	}
	if len(failed) > 0 {
		return rep, fmt.Errorf("phases that did not complete or lost/duplicated records: %s", strings.Join(failed, ", "))
	}
	return rep, nil
}

// roundRates rounds rates to 0.01 for display.
func roundRates(r map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(r))
	for k, v := range r {
		out[k] = math.Round(v*100) / 100
	}
	return out
}

// inputNoun names a pipeline's input items: PDF documents or videos.
func inputNoun(pipeline string) string {
	if pipeline == "video" {
		return "videos"
	}
	return pipeline + " documents"
}

// jobName is the Nomad job of a pipeline.
func jobName(pipeline string) string { return pipeline + "-curation" }

func jobFile(pipeline string) string {
	if pipeline == "video" {
		return "video-curation.nomad.hcl"
	}
	return "pdf-curation.nomad.hcl"
}

// demoGPUs is the number of fake GPUs of the demo cluster (gpu1 and gpu2, 4 each).
const demoGPUs = 8

// staticAllocation sets the static baseline's counts: what a user tunes once knowing the
// cluster: the accelerators split evenly over the accelerator operators, one instance of
// every CPU operator. It returns a description for the report.
func staticAllocation(job *api.Job, gpus int) string {
	var accel []*api.TaskGroup
	for _, g := range job.TaskGroups {
		if n, _ := strconv.Atoi(g.Meta[opcontract.MetaGPUs]); n > 0 {
			accel = append(accel, g)
		}
	}
	var parts []string
	for _, g := range accel {
		c := gpus / len(accel)
		g.Count = &c
		parts = append(parts, fmt.Sprintf("%s=%d", *g.Name, c))
	}
	return fmt.Sprintf("static allocation: the %d GPUs split evenly, %d per accelerator operator (%s), one instance of each CPU operator", gpus, gpus/max(len(accel), 1), strings.Join(parts, " "))
}

// runPhase runs one phase to completion (every expected record at the sink) or timeout.
// rates are the pilot's per-instance rates, which the autoscaler phases turn into targets.
func runPhase(ctx context.Context, o Options, n *localcluster.Nomad, js jetstream.JetStream, pl *worker.Pipeline, natsURL, phase string, round int, rates map[string]float64) (*Phase, error) {
	fmt.Fprintf(o.Out, "\n==> phase %q (round %d/%d): %d %s  [loadavg %s]\n", phase, round, o.Repeat, o.Docs, inputNoun(o.Pipeline), benchfmt.LoadAvg())
	ph := &Phase{Name: phase, Round: round, LoadStart: benchfmt.LoadAvg()}
	defer func() { ph.LoadEnd = benchfmt.LoadAvg() }()
	// A clean stream per phase.
	if err := js.DeleteStream(ctx, pl.StreamName()); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("reset stream: %w", err)
	}
	vars := map[string]string{"trident_bin": o.TridentBin, "nats_url": natsURL, "speed": fmt.Sprint(o.Speed)}
	// Deferred first so that it runs last: the autoscaler and planners stop before the job
	// (and its scaling policies) goes away — nomad-autoscaler v0.4.7 panics when a policy it
	// handles is deleted.
	defer func() {
		_, _, _ = n.API().Jobs().Deregister(jobName(o.Pipeline), true, nil)
		time.Sleep(2 * time.Second)
	}()
	job, err := localcluster.ParseJobFile(ctx, n.API(), jobFile(o.Pipeline), vars)
	if err != nil {
		return ph, err
	}
	planner := ""
	switch {
	case phase == PhaseTrident:
		leader, stop, err := startTrident(ctx, o, n, round)
		if err != nil {
			return ph, err
		}
		defer stop()
		planner = leader
	case isAutoscalerPhase(phase):
		groups := jobLimits(job)
		targets, err := peerTargets(rates, o.Peer.Targets, groups, o.Peer.Latency)
		if err != nil {
			return ph, err
		}
		ph.Targets = targets
		hcl, err := renderPeerHCL(jobName(o.Pipeline), groups, phase, targets, o.Peer)
		if err != nil {
			return ph, err
		}
		if err := os.WriteFile(filepath.Join(o.OutDir, phase+"-policies.hcl"), []byte(hcl), 0o644); err != nil {
			return ph, fmt.Errorf("write %s policies: %w", phase, err)
		}
		if err := applyPeerPolicies(n.API(), job, hcl); err != nil {
			return ph, err
		}
		fmt.Fprintf(o.Out, "    backlog-per-instance targets: %s (policies in %s)\n", targetsString(targets, groupNames(groups)), filepath.Join(o.OutDir, phase+"-policies.hcl"))
		stop, err := startPeer(ctx, o, n, phase, round)
		if err != nil {
			return ph, err
		}
		defer func() {
			ph.Notes = append(ph.Notes, fmt.Sprintf("round %d: nomad-autoscaler submitted %d scaling actions", round, stop()))
		}()
	}
	if phase == PhaseStatic || phase == phasePilot {
		ph.Notes = append(ph.Notes, staticAllocation(job, demoGPUs))
	}
	if _, _, err := n.API().Jobs().Register(job, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return ph, fmt.Errorf("register %s: %w", jobFile(o.Pipeline), err)
	}
	if planner != "" {
		if err := registerPipeline(ctx, planner, jobName(o.Pipeline)); err != nil {
			return ph, err
		}
		fmt.Fprintf(o.Out, "    pipeline %s registered with the planner\n", jobName(o.Pipeline))
	}
	spec := worker.Spec{Pipeline: pl.Name, Docs: o.Docs, Regimes: len(pl.Regimes), Seed: 1}
	want, err := worker.Expected(pl, spec)
	if err != nil {
		return ph, err
	}
	start := time.Now()
	ph.Started = true
	if err := worker.Publish(ctx, js, pl, spec, worker.PublishOptions{Storage: jetstream.FileStorage}); err != nil {
		return ph, fmt.Errorf("publish dataset: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, o.PhaseTimeout)
	defer cancel()
	err = watch(pctx, o, n, js, pl, ph, start, len(want), planner)
	ph.Elapsed = time.Since(start)
	if planner != "" && o.Tune {
		ph.Notes = append(ph.Notes, transitionSummary(ctx, planner, jobName(o.Pipeline)))
	}
	vctx, vcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer vcancel()
	rep, verr := worker.Verify(vctx, js, pl)
	ph.Verify = rep
	ph.Records = rep.Unique
	if ph.Elapsed > 0 {
		ph.Throughput = float64(rep.Unique) / ph.Elapsed.Seconds()
	}
	fmt.Fprintf(o.Out, "    verify: %s\n", rep.String())
	if err != nil {
		return ph, err
	}
	return ph, verr
}

// watch prints progress every few seconds until all expected records reached the sink.
func watch(ctx context.Context, o Options, n *localcluster.Nomad, js jetstream.JetStream, pl *worker.Pipeline, ph *Phase, start time.Time, expected int, planner string) error {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	lastT, lastN := 0.0, 0
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not finished after %s: %w", time.Since(start).Round(time.Second), ctx.Err())
		case <-tick.C:
		}
		p := Point{T: time.Since(start).Seconds(), Counts: map[string]int{}, Backlog: map[string]int{}, Done: map[string]int{}}
		p.SinkTotal = sinkCount(ctx, js, pl)
		if dt := p.T - lastT; dt > 0 {
			p.Rate = float64(p.SinkTotal-lastN) / dt
		}
		lastT, lastN = p.T, p.SinkTotal
		if s, _, err := n.API().Jobs().Summary(jobName(o.Pipeline), nil); err == nil {
			for g, ts := range s.Summary {
				// Planner-rendered groups are "<operator>@<node>...": count per operator.
				op, _, _ := strings.Cut(g, "@")
				p.Counts[op] += ts.Running
			}
		}
		var parts []string
		for _, op := range pl.Operators {
			if c, err := js.Consumer(ctx, pl.StreamName(), op.Name); err == nil {
				if info, err := c.Info(ctx); err == nil {
					p.Backlog[op.Name] = int(info.NumPending + uint64(info.NumAckPending))
					p.Done[op.Name] = int(info.Delivered.Consumer) - info.NumAckPending
				}
			}
			parts = append(parts, fmt.Sprintf("%s×%d[q%d]", op.Name, p.Counts[op.Name], p.Backlog[op.Name]))
		}
		ph.Series = append(ph.Series, p)
		ph.FinalCount = p.Counts
		fmt.Fprintf(o.Out, "    t=%4.0fs sink %5d/%d (%6.1f rec/s)  %s\n", p.T, p.SinkTotal, expected, p.Rate, strings.Join(parts, " "))
		if planner != "" && int(p.T)%10 < 2 {
			fmt.Fprintf(o.Out, "           planner: %s\n", planSummary(ctx, planner, jobName(o.Pipeline)))
		}
		if p.SinkTotal >= expected {
			return nil
		}
	}
}

// sinkCount is the number of messages on the sink subject.
func sinkCount(ctx context.Context, js jetstream.JetStream, pl *worker.Pipeline) int {
	s, err := js.Stream(ctx, pl.StreamName())
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(pl.SinkSubject()))
	if err != nil {
		return 0
	}
	return int(info.State.Subjects[pl.SinkSubject()])
}
