// Package plugin is the trident-apm Nomad Autoscaler APM plugin. It discovers a pipeline
// operator's allocations through Nomad's service catalog, scrapes their Prometheus
// metrics (the operator contract of apm/opcontract, or a server's own metrics read through
// the group's metrics profile, apm/profile), feeds the observation layer, and answers
// queries of the form "<metric>/<job>/<group>":
//
//	capacity     sustainable records/s of one instance (observation layer)
//	throughput   records/s the group emits (rate of records_out, summed over instances)
//	backlog      records waiting in the group's input queues
//	backlog_per_instance
//	             backlog divided by the instances exposing metrics (the per-instance queue
//	             metric that nomad-autoscaler's built-in target-value strategy needs)
//	utilization  mean accelerator (or CPU) utilisation, 0..1
//	instances    instances currently exposing metrics
package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/plugins"
	"github.com/hashicorp/nomad-autoscaler/plugins/apm"
	"github.com/hashicorp/nomad-autoscaler/plugins/base"
	"github.com/hashicorp/nomad-autoscaler/sdk"
	nomadHelper "github.com/hashicorp/nomad-autoscaler/sdk/helper/nomad"
	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/feed"
	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/internal/hclogslog"
	"github.com/trident-sched/trident/planner/fsm"
)

// Name is the plugin's name in the autoscaler's `apm` block.
const Name = "trident-apm"

// Config keys of the plugin's `config` block.
const (
	ConfigScrapeTimeout = "scrape_timeout" // per-instance scrape timeout (default 2s)
	ConfigStaleAfter    = "stale_after"    // metrics older than this are an error (default 2m)
	ConfigHistory       = "history"        // how much scrape history to keep (default 15m)
	ConfigPlannerAddr   = "planner_addr"   // publish capacity estimates to this planner
	ConfigPlannerToken  = "planner_token"  // planner ACL token
	ConfigToken         = "token"          // the same, by the name the strategy and target plugins use
	ConfigFeedInterval  = "feed_interval"  // how often estimates are published (default 5s)
	ConfigTune          = "tune"           // "true": also propose candidate configs (feed.Tuner)
	ConfigTuneMarginMB  = "tune_margin_mb" // tuning: memory safety margin below the device memory, MiB (default: 5 % of it, at least 1024)
	ConfigTunePeakK     = "tune_peak_k"    // tuning: sustained-peak allowance, noise deviations of the memory surrogate (default 2)
	ConfigTuneTrials    = "tune_trials"    // tuning: measure evaluations as trials beside production (planner trials API; default true, "false": roll each out)
	ConfigTuneParallel  = "tune_parallel"  // tuning: trials per operator at once (trial slots; default feed.TunerOptions.Parallel's)
	// ConfigTuneExposureHours is the production exposure a measured peak is extrapolated
	// to, hours of every planned instance (default feed.DefaultExposureHours; "0": none).
	ConfigTuneExposureHours = "tune_exposure_hours"
)

// minScrapeGap is the shortest interval between two scrapes of one group.
const minScrapeGap = 2 * time.Second

// Metric names accepted in queries.
const (
	MetricCapacity    = "capacity"
	MetricThroughput  = "throughput"
	MetricBacklog     = "backlog"
	MetricUtilization = "utilization"
	MetricInstances   = "instances"
)

// MetricBacklogPerInstance is the backlog divided by the instances exposing metrics: the
// per-instance queue metric that nomad-autoscaler's built-in target-value strategy needs
// (new count = ceil(count * metric / target)), used by the demo's autoscaler peer.
const MetricBacklogPerInstance = "backlog_per_instance"

// Plugin implements apm.APM.
type Plugin struct {
	log hclog.Logger

	mu       sync.Mutex
	nomad    *api.Client
	http     *http.Client
	timeout  time.Duration
	stale    time.Duration
	history  time.Duration
	groups   map[string]*groupState // key job/group
	capacity *feed.Estimator
	stopFeed context.CancelFunc
	// profiles caches each group's metrics profile, allocs what is read once from each
	// allocation (key job/group, then allocation ID; see allocsOf).
	profiles map[string]groupProfile
	allocs   map[string]map[string]allocFacts
}

var _ apm.APM = (*Plugin)(nil)

// New returns an unconfigured plugin (the autoscaler calls SetConfig first).
func New(log hclog.Logger) *Plugin {
	return &Plugin{
		log:      log,
		http:     &http.Client{},
		timeout:  2 * time.Second,
		stale:    2 * time.Minute,
		history:  15 * time.Minute,
		groups:   map[string]*groupState{},
		profiles: map[string]groupProfile{},
		allocs:   map[string]map[string]allocFacts{},
		capacity: feed.NewEstimator(hclogslog.NewMin(log.Named("observe"), slog.LevelWarn)),
	}
}

// Info is the plugin's identity.
func Info() plugins.PluginID {
	return plugins.PluginID{Name: Name, PluginType: sdk.PluginTypeAPM}
}

// PluginInfo satisfies base.Base.
func (p *Plugin) PluginInfo() (*base.PluginInfo, error) {
	return &base.PluginInfo{Name: Name, PluginType: sdk.PluginTypeAPM}, nil
}

// SetConfig builds the Nomad client (inheriting the agent's nomad block) and reads the
// plugin options.
func (p *Plugin) SetConfig(config map[string]string) error {
	cfg := nomadHelper.ConfigFromNamespacedMap(config)
	cl, err := api.NewClient(cfg)
	if err != nil {
		return fmt.Errorf("trident-apm: nomad client: %w", err)
	}
	durations := map[string]*time.Duration{ConfigScrapeTimeout: &p.timeout, ConfigStaleAfter: &p.stale, ConfigHistory: &p.history}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, dst := range durations {
		if v, ok := config[k]; ok && v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("trident-apm: config %s=%q: want a positive duration like 2s", k, v)
			}
			*dst = d
		}
	}
	p.nomad = cl
	if p.stopFeed != nil {
		p.stopFeed()
		p.stopFeed = nil
	}
	if addr := config[ConfigPlannerAddr]; addr != "" {
		interval := 5 * time.Second
		if v := config[ConfigFeedInterval]; v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("trident-apm: config %s=%q: want a positive duration", ConfigFeedInterval, v)
			}
			interval = d
		}
		tune := false
		if v := config[ConfigTune]; v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("trident-apm: config %s=%q: want true or false", ConfigTune, v)
			}
			tune = b
		}
		tuning, err := tuningOptions(config)
		if err != nil {
			return err
		}
		token := config[ConfigPlannerToken]
		if token == "" {
			token = config[ConfigToken]
		}
		f, err := feed.New(p.capacity, feed.Options{
			Planner: addr, Token: token, Interval: interval, Refresh: p.refreshDeclared,
			Logger: hclogslog.New(p.log.Named("feed")),
			Tune:   tune,
			Tuning: tuning,
		})
		if err != nil {
			return fmt.Errorf("trident-apm: %w", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		p.stopFeed = cancel
		go f.Run(ctx)
		p.log.Info("publishing capacity estimates to the planner", "planner", addr, "interval", interval, "tune", tune)
	}
	return nil
}

// tuningOptions reads the tune_* keys: non-negative numbers, an explicit 0 meaning none
// (feed.TunerOptions takes a negative value for that; absent keys keep its defaults).
func tuningOptions(config map[string]string) (feed.TunerOptions, error) {
	o := feed.TunerOptions{Trials: true} // a planner without trials answers 501: the tuner rolls configs out
	if v := config[ConfigTuneTrials]; v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return o, fmt.Errorf("trident-apm: config %s=%q: want true or false", ConfigTuneTrials, v)
		}
		o.Trials = b
	}
	if v := config[ConfigTuneParallel]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > fsm.MaxTrialSlots {
			return o, fmt.Errorf("trident-apm: config %s=%q: want an integer from 1 to %d", ConfigTuneParallel, v, fsm.MaxTrialSlots)
		}
		o.Parallel = n
	}
	for key, dst := range map[string]*float64{ConfigTuneMarginMB: &o.MarginMB, ConfigTunePeakK: &o.PeakK, ConfigTuneExposureHours: &o.ExposureHours} {
		v := config[key]
		if v == "" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0) || math.IsInf(f, 0) {
			return o, fmt.Errorf("trident-apm: config %s=%q: want a finite number >= 0", key, v)
		}
		if f == 0 {
			f = -1
		}
		*dst = f
	}
	return o, nil
}

// refreshDeclared is the feeder's refresh: the declaration comes from the planner's
// description.
func (p *Plugin) refreshDeclared(ctx context.Context, job, group string, d feed.Declaration) error {
	if err := p.capacity.Declare(job, group, d); err != nil {
		return err
	}
	p.mu.Lock()
	if gs, ok := p.groups[key(job, group)]; ok {
		gs.declared = true
	} else {
		p.groups[key(job, group)] = &groupState{job: job, group: group, declared: true}
	}
	p.mu.Unlock()
	_, err := p.refresh(ctx, job, group)
	return err
}

// SetNomadClient replaces the Nomad client (tests and embedding).
func (p *Plugin) SetNomadClient(c *api.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nomad = c
}

// Query answers "<metric>/<job>/<group>" over the time range.
func (p *Plugin) Query(q string, r sdk.TimeRange) (sdk.TimestampedMetrics, error) {
	metric, job, group, err := ParseQuery(q)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gs, err := p.refresh(ctx, job, group)
	if err != nil {
		return nil, err
	}
	return p.series(gs, metric, r)
}

// QueryMultiple answers a query as one series (Dynamic Application Sizing is not
// supported).
func (p *Plugin) QueryMultiple(q string, r sdk.TimeRange) ([]sdk.TimestampedMetrics, error) {
	m, err := p.Query(q, r)
	if err != nil {
		return nil, err
	}
	return []sdk.TimestampedMetrics{m}, nil
}

// ParseQuery splits "<metric>/<job>/<group>" and validates the metric name.
func ParseQuery(q string) (metric, job, group string, err error) {
	parts := strings.Split(strings.TrimSpace(q), "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", fmt.Errorf("trident-apm: query %q: want <metric>/<job>/<group>, e.g. capacity/pdf-curation/layout", q)
	}
	switch parts[0] {
	case MetricCapacity, MetricThroughput, MetricBacklog, MetricBacklogPerInstance, MetricUtilization, MetricInstances:
	default:
		return "", "", "", fmt.Errorf("trident-apm: query %q: unknown metric %q (want capacity, throughput, backlog, backlog_per_instance, utilization or instances)", q, parts[0])
	}
	return parts[0], parts[1], parts[2], nil
}

// groupState is the scrape history of one job/group.
type groupState struct {
	job, group string
	declared   bool
	snaps      []snapshot
}

// groupDeclaration reads the group's declared workload features and synchronous flag
// (trident_features, trident_synchronous meta).
func groupDeclaration(ctx context.Context, cl *api.Client, job, group string) (feed.Declaration, error) {
	meta, err := groupMeta(ctx, cl, job, group)
	if err != nil {
		return feed.Declaration{}, err
	}
	d := feed.Declaration{Features: opcontract.ParseFeatures(meta[opcontract.MetaFeatures])}
	sync, err := opcontract.ParseSynchronous(meta[opcontract.MetaSynchronous])
	if err != nil {
		return d, fmt.Errorf("trident-apm: job %q group %q: meta %s=%q: want true or false", job, group, opcontract.MetaSynchronous, meta[opcontract.MetaSynchronous])
	}
	d.Synchronous = sync
	return d, nil
}

// snapshot is one scrape of every instance of a group.
type snapshot struct {
	time      time.Time
	instances map[string]InstanceMetrics // by alloc ID
	// admission is each engine instance's admission limit (max_num_seqs from its group's
	// meta), by alloc ID; absent when unknown.
	admission map[string]float64
}

// refresh discovers the group's instances, scrapes them and appends a snapshot.
func (p *Plugin) refresh(ctx context.Context, job, group string) (*groupState, error) {
	p.mu.Lock()
	cl := p.nomad
	timeout, history := p.timeout, p.history
	p.mu.Unlock()
	if cl == nil {
		return nil, errors.New("trident-apm: not configured")
	}
	// The feeder and the autoscaler's checks both refresh; a scrape younger than
	// minScrapeGap is reused so that intervals fed to the estimator are not tiny.
	p.mu.Lock()
	if gs, ok := p.groups[key(job, group)]; ok && gs.declared {
		if last := gs.last(); last != nil && time.Since(last.time) < minScrapeGap {
			p.mu.Unlock()
			return gs, nil
		}
	}
	p.mu.Unlock()
	targets, err := Discover(ctx, cl, job, group)
	if err != nil {
		return nil, err
	}
	gp, err := p.metricsProfile(ctx, cl, job, group)
	if err != nil {
		return nil, err
	}
	snap := snapshot{time: time.Now(), instances: map[string]InstanceMetrics{}}
	var errs []error
	for _, t := range targets {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		m, err := ScrapeInstanceProfile(sctx, p.http, t.URL, t.AllocID, gp.prof, gp.opts)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		snap.instances[t.AllocID] = m
	}
	k := key(job, group)
	facts, ferrs := p.allocsOf(ctx, cl, k, &snap)
	errs = append(errs, ferrs...)
	errs = append(errs, fillEpochs(facts, &snap)...)
	errs = append(errs, fillDeviceMemory(ctx, cl, facts, &snap)...)
	snap.admission = admissionLimits(facts, &snap)
	p.mu.Lock()
	defer p.mu.Unlock()
	gs, ok := p.groups[k]
	if !ok {
		gs = &groupState{job: job, group: group}
		p.groups[k] = gs
	}
	if !gs.declared {
		decl, err := groupDeclaration(ctx, cl, job, group)
		if err != nil {
			return nil, err
		}
		if err := p.capacity.Declare(job, group, decl); err != nil {
			return nil, fmt.Errorf("trident-apm: %s/%s: %w", job, group, err)
		}
		gs.declared = true
	}
	if len(snap.instances) == 0 {
		// Keep the history; stale data is reported by series().
		if last := gs.last(); last == nil || time.Since(last.time) > p.stale {
			return nil, fmt.Errorf("trident-apm: %s/%s: no instance answered a scrape: %w", job, group, errors.Join(errs...))
		}
		p.log.Warn("scrape failed, serving last snapshot", "job", job, "group", group, "error", errors.Join(errs...))
		return gs, nil
	}
	prev := gs.last()
	settle(prev, &snap)
	if prev != nil {
		p.capacity.Observe(job, group, toFeed(withoutRestarted(*prev, snap)), toFeed(snap))
	}
	gs.snaps = append(gs.snaps, snap)
	cut := time.Now().Add(-history)
	i := 0
	for i < len(gs.snaps)-2 && gs.snaps[i].time.Before(cut) {
		i++
	}
	gs.snaps = gs.snaps[i:]
	return gs, nil
}

func (g *groupState) last() *snapshot {
	if len(g.snaps) == 0 {
		return nil
	}
	return &g.snaps[len(g.snaps)-1]
}

// series computes the metric at every snapshot in the range (at least the latest one).
func (p *Plugin) series(gs *groupState, metric string, r sdk.TimeRange) (sdk.TimestampedMetrics, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out sdk.TimestampedMetrics
	for i := range gs.snaps {
		s := &gs.snaps[i]
		if !r.From.IsZero() && s.time.Before(r.From) && i != len(gs.snaps)-1 {
			continue
		}
		var prev *snapshot
		if i > 0 {
			prev = &gs.snaps[i-1]
		}
		v, ok, err := p.value(gs, metric, prev, s)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, sdk.TimestampedMetric{Timestamp: s.time, Value: v})
		}
	}
	if len(out) == 0 {
		if metric == MetricThroughput {
			return nil, fmt.Errorf("trident-apm: throughput/%s/%s: need two scrapes to compute a rate; retry after the next evaluation", gs.job, gs.group)
		}
		return nil, fmt.Errorf("trident-apm: %s/%s/%s: no metrics yet", metric, gs.job, gs.group)
	}
	if age := time.Since(out[len(out)-1].Timestamp); age > p.stale {
		return nil, fmt.Errorf("trident-apm: %s/%s/%s: metrics are stale (last scrape %s ago)", metric, gs.job, gs.group, age.Round(time.Second))
	}
	return out, nil
}

func (p *Plugin) value(gs *groupState, metric string, prev, s *snapshot) (float64, bool, error) {
	switch metric {
	case MetricInstances:
		return float64(len(s.instances)), true, nil
	case MetricBacklog, MetricBacklogPerInstance:
		sum := 0.0
		for _, m := range s.instances {
			sum += m.QueueLength
		}
		if metric == MetricBacklogPerInstance {
			if len(s.instances) == 0 {
				return 0, false, nil
			}
			return sum / float64(len(s.instances)), true, nil
		}
		return sum, true, nil
	case MetricUtilization:
		sum := 0.0
		for _, m := range s.instances {
			if m.HasAccelerator {
				sum += m.AccelUtil
			} else {
				sum += m.CPUUtil
			}
		}
		return sum / float64(len(s.instances)), true, nil
	case MetricThroughput:
		if prev == nil {
			return 0, false, nil
		}
		return groupRate(prev, s), true, nil
	case MetricCapacity:
		est, err := p.capacity.Capacity(gs.job, gs.group)
		if err != nil {
			return 0, false, fmt.Errorf("trident-apm: capacity/%s/%s: %w", gs.job, gs.group, err)
		}
		return est, true, nil
	}
	return 0, false, fmt.Errorf("trident-apm: unknown metric %q", metric)
}

// groupRate is the records_out rate summed over instances present in both snapshots;
// after a restart (a counter went down, or Restarted) the new value counts from zero.
func groupRate(prev, cur *snapshot) float64 {
	dt := cur.time.Sub(prev.time).Seconds()
	if dt <= 0 {
		return 0
	}
	total := 0.0
	for id, m := range cur.instances {
		old, ok := prev.instances[id]
		if !ok {
			continue
		}
		d := m.RecordsOut - old.RecordsOut
		if d < 0 || m.Restarted {
			d = m.RecordsOut
		}
		total += d
	}
	return total / dt
}

// Target is one instance's metrics endpoint.
type Target struct {
	AllocID string
	URL     string
}

// ServiceName is the Nomad service an operator group registers: "<job>-<group>".
func ServiceName(job, group string) string { return job + "-" + group }

// Discover lists the metrics endpoints of job/group from Nomad's service catalog. The
// service is "<job>-<group>"; registrations of other jobs are ignored. Errors say whether
// the job is unknown or merely has no registered instances.
func Discover(ctx context.Context, cl *api.Client, job, group string) ([]Target, error) {
	q := (&api.QueryOptions{}).WithContext(ctx)
	name := ServiceName(job, group)
	regs, _, err := cl.Services().Get(name, q)
	if err != nil && !strings.Contains(err.Error(), "404") {
		return nil, fmt.Errorf("trident-apm: look up service %q in Nomad: %w", name, err)
	}
	var out []Target
	for _, r := range regs {
		if r.JobID != job {
			continue
		}
		out = append(out, Target{AllocID: r.AllocID, URL: "http://" + joinHostPort(r.Address, r.Port) + "/metrics"})
	}
	if len(out) == 0 {
		if _, _, jerr := cl.Jobs().Info(job, q); jerr != nil {
			if strings.Contains(jerr.Error(), "404") {
				return nil, fmt.Errorf("trident-apm: unknown job %q", job)
			}
			return nil, fmt.Errorf("trident-apm: read job %q: %w", job, jerr)
		}
		return nil, fmt.Errorf("trident-apm: job %q group %q has no allocations registered as Nomad service %q", job, group, name)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AllocID < out[j].AllocID })
	return out, nil
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// key names a job's group.
func key(job, group string) string { return job + "/" + group }

// toFeed converts a scrape to the estimator's snapshot type.
func toFeed(s snapshot) feed.Snapshot {
	out := feed.Snapshot{Time: s.time, Instances: make(map[string]feed.Instance, len(s.instances))}
	for id, m := range s.instances {
		// Operators expose both gauges (the unused one at 0): the busier resource is the
		// operator's utilisation.
		util := math.Max(m.CPUUtil, m.AccelUtil)
		// A queue bound without the output-blocked counter would let a backpressured
		// instance (full queue, idle engine) pass as saturated: it is not forwarded.
		qcap := m.QueueCapacity
		if !m.HasOutputBlocked {
			qcap = 0
		}
		out.Instances[id] = feed.Instance{
			RecordsIn: m.RecordsIn, RecordsOut: m.RecordsOut, BusySeconds: m.BusySeconds, UsefulSeconds: m.UsefulSeconds,
			QueueLength: m.QueueLength, QueueCapacity: qcap, OutputBlockedSeconds: m.OutputBlocked,
			Utilization: util, DeviceMemPeak: m.DeviceMemPeak, OOMRestarts: m.OOMRestarts, Pool: m.Pool,
			EngineReported: m.EngineReported, Running: m.Running, Waiting: m.Waiting, AdmissionLimit: s.admission[id],
			FeatureMean: m.FeatureMean, FeatureStd: m.FeatureStd, Epoch: m.Epoch,
		}
	}
	return out
}
