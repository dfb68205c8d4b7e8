// Package profile reads the Prometheus metrics of an operator instance and reduces them to
// what the observation layer needs (records, useful time, input queue, utilisation, device
// memory, OOMs, workload features, config epoch).
//
// A profile names the metric set an instance exports. The group meta
// trident_metrics_profile (opcontract.MetaMetricsProfile) chooses it per operator:
//
//	trident  the operator metrics contract (apm/opcontract), exported by `trident operator`
//	         and by operators written against it; the default
//	vllm     a vLLM OpenAI-compatible server's own /metrics (vllm:* metrics)
//	triton   Triton Inference Server's /metrics (nv_* metrics)
//
// The server profiles map each observation-layer input to the closest native signal, and
// say where there is none (docs/operator-contract.md has the tables). A metric a profile
// needs and the scrape lacks is a *MissingError naming every missing metric.
//
// Counters of a restarted server start again from zero. Restarted tells a restart from the
// previous scrape, and Window turns cumulative totals into interval means without ever
// producing a negative difference.
package profile

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of one operator instance, reduced to the observation layer's inputs.
// Counters (the *Total and *Seconds fields, RecordsIn, RecordsOut, OOMRestarts) are
// cumulative since the instance started; gauges are the values at the scrape.
type Metrics struct {
	// AllocID and Time identify the scrape; the scraper sets them.
	AllocID string
	Time    time.Time
	// RecordsIn counts records consumed from the input queue, RecordsOut records produced.
	RecordsIn  float64
	RecordsOut float64
	// BusySeconds is wall time with at least one record in service (0: not exported).
	BusySeconds float64
	// UsefulSeconds is per-record service time summed over records; overlapping records
	// each count in full (see opcontract.UsefulSeconds).
	UsefulSeconds float64
	// QueueLength is the records waiting in this instance's input queue.
	QueueLength float64
	// QueueCapacity is this instance's share of a bounded input queue (0: unbounded).
	QueueCapacity float64
	// OutputBlocked is the time the output waited on a full downstream queue (seconds,
	// counter).
	OutputBlocked float64
	// HasOutputBlocked reports that the instance exports the output-blocked counter: only
	// then does a full bounded queue tell saturation from backpressure.
	HasOutputBlocked bool
	// AccelUtil and CPUUtil are utilisations, 0..1; HasAccelerator reports that AccelUtil
	// was exported (or derived).
	AccelUtil      float64
	CPUUtil        float64
	HasAccelerator bool
	// EngineReported marks Running and Waiting as a serving engine's own counts of the
	// requests in its batches and held back by its scheduler (vLLM's num_requests_running
	// and num_requests_waiting): the observation layer's starvation evidence.
	EngineReported   bool
	Running, Waiting float64
	// DeviceMemPeak is the peak accelerator memory in bytes (0: unknown).
	DeviceMemPeak float64
	// Pool is the working pool the engine sized at start-up relative to the least it
	// starts with (opcontract.PoolSize over opcontract.PoolNeed; 0: not reported).
	Pool float64
	// OOMRestarts counts accelerator OOM exits of this allocation (0: not exported).
	OOMRestarts float64
	// Epoch is the config epoch the instance runs; HasEpoch reports that the instance
	// exported it. Server profiles never do: the scraper takes it from the allocation's
	// group meta (opcontract.MetaConfigEpoch).
	Epoch    float64
	HasEpoch bool
	// FeatureMean and FeatureStd are workload feature statistics over recent records.
	// Profiles that read features from cumulative totals fill FeatureTotals; Window turns
	// them into FeatureMean (interval means).
	FeatureMean   map[string]float64
	FeatureStd    map[string]float64
	FeatureTotals map[string]Total
	// StartTime is the instance's process_start_time_seconds (Unix seconds), 0 when the
	// instance does not export it. A changed start time marks a restart (Restarted).
	StartTime float64
	// Restarted is set by the scraper when this scrape follows a restart of the instance
	// (Restarted(prev, this)): no interval between the two scrapes may be measured.
	Restarted bool
}

// Total is a cumulative sum with its count, e.g. a histogram's _sum and _count, or a
// token counter and a request counter: the mean over an interval is ΔSum/ΔCount.
type Total struct{ Sum, Count float64 }

// Options refine how a profile reads a scrape.
type Options struct {
	// Model keeps only the series of this model (vLLM label model_name, Triton label
	// model); series without the label (e.g. Triton's GPU metrics) are kept. "" keeps
	// every series.
	Model string
	// PoolNeed is the least start-up pool of the engine (group meta trident_pool_need;
	// vLLM: max_model_len tokens); 0 reads no pool from a server's own metrics.
	PoolNeed float64
}

// Profile maps one metric set to Metrics.
type Profile interface {
	// Name is the profile's trident_metrics_profile value.
	Name() string
	// Map reduces the parsed metric families of one scrape. A metric the profile needs
	// and fams lacks is a *MissingError; a non-finite value of a metric it reads is an
	// error naming the metric.
	Map(fams map[string]*dto.MetricFamily, o Options) (Metrics, error)
}

// Profile names.
const (
	Trident = "trident"
	VLLM    = "vllm"
	Triton  = "triton"
)

var profiles = map[string]Profile{Trident: tridentProfile{}, VLLM: vllmProfile{}, Triton: tritonProfile{}}

// Names lists the profiles, sorted.
func Names() []string {
	out := make([]string, 0, len(profiles))
	for n := range profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the named profile; "" is Trident.
func Lookup(name string) (Profile, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		name = Trident
	}
	p, ok := profiles[name]
	if !ok {
		return nil, fmt.Errorf("unknown metrics profile %q (want one of %s)", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Parse reads one scrape in the Prometheus text format and maps it with p.
func Parse(r io.Reader, p Profile, o Options) (Metrics, error) {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(r)
	if err != nil {
		return Metrics{}, fmt.Errorf("parse metrics: %w", err)
	}
	m, err := p.Map(fams, o)
	if err != nil {
		return Metrics{}, err
	}
	if f, ok := fams["process_start_time_seconds"]; ok && len(f.GetMetric()) > 0 {
		if v := value(f.GetMetric()[0]); !math.IsNaN(v) && !math.IsInf(v, 0) {
			m.StartTime = v
		}
	}
	return m, nil
}

// MissingError reports the metrics a profile needs and a scrape lacks.
type MissingError struct {
	// Profile is the profile's name.
	Profile string
	// Model is Options.Model ("" when unset).
	Model string
	// Metrics are the missing metrics; "a | b" when either would do.
	Metrics []string
	// Hint says what usually causes the absence (may be empty).
	Hint string
}

// Error names the profile and every missing metric.
func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "metrics profile %s: the scrape lacks ", e.Profile)
	b.WriteString(strings.Join(e.Metrics, ", "))
	if e.Model != "" {
		fmt.Fprintf(&b, " (for model %q)", e.Model)
	}
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// IsMissing reports whether err is (or wraps) a *MissingError.
func IsMissing(err error) bool {
	var me *MissingError
	return errors.As(err, &me)
}

// reader reads the series of one scrape, filtered by model, and collects the names of
// missing metrics and the first non-finite value.
type reader struct {
	fams       map[string]*dto.MetricFamily
	modelLabel string
	model      string
	missing    []string
	err        error
}

func newReader(fams map[string]*dto.MetricFamily, modelLabel string, o Options) *reader {
	return &reader{fams: fams, modelLabel: modelLabel, model: strings.TrimSpace(o.Model)}
}

// series returns name's series that pass the model filter (nil when none).
func (r *reader) series(name string) []*dto.Metric {
	f, ok := r.fams[name]
	if !ok {
		return nil
	}
	var out []*dto.Metric
	for _, s := range f.GetMetric() {
		if r.model != "" && r.modelLabel != "" {
			if v, ok := label(s, r.modelLabel); ok && v != r.model {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// has reports whether name has a series that passes the model filter.
func (r *reader) has(name string) bool { return len(r.series(name)) > 0 }

// first returns the first of names that has series ("" when none).
func (r *reader) first(names ...string) string {
	for _, n := range names {
		if r.has(n) {
			return n
		}
	}
	return ""
}

// need records names as missing (alternatives joined by " | ") unless one is present, and
// returns the present one.
func (r *reader) need(names ...string) string {
	n := r.first(names...)
	if n == "" {
		r.missing = append(r.missing, strings.Join(names, " | "))
	}
	return n
}

// finite records a non-finite value of name as the reader's error.
func (r *reader) finite(name string, v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		if r.err == nil {
			r.err = fmt.Errorf("metric %s has non-finite value %v", name, v)
		}
		return 0
	}
	return v
}

// sum adds name's series whose labels pass keep (nil keeps all).
func (r *reader) sum(name string, keep func(*dto.Metric) bool) float64 {
	t := 0.0
	for _, s := range r.series(name) {
		if keep == nil || keep(s) {
			t += r.finite(name, value(s))
		}
	}
	return t
}

// mean averages name's series (0 when none).
func (r *reader) mean(name string) float64 {
	ss := r.series(name)
	if len(ss) == 0 {
		return 0
	}
	return r.sum(name, nil) / float64(len(ss))
}

// total reads histogram (or summary) name as a Total of its _sum and _count, summed over
// series; exposition without TYPE lines yields untyped name_sum and name_count families,
// which are read too. ok is false when neither form is present.
func (r *reader) total(name string) (Total, bool) {
	var t Total
	found := false
	for _, s := range r.series(name) {
		switch {
		case s.Histogram != nil:
			t.Sum += r.finite(name, s.Histogram.GetSampleSum())
			t.Count += r.finite(name, float64(s.Histogram.GetSampleCount()))
			found = true
		case s.Summary != nil:
			t.Sum += r.finite(name, s.Summary.GetSampleSum())
			t.Count += r.finite(name, float64(s.Summary.GetSampleCount()))
			found = true
		}
	}
	if found {
		return t, true
	}
	if r.has(name+"_sum") && r.has(name+"_count") {
		return Total{Sum: r.sum(name+"_sum", nil), Count: r.sum(name+"_count", nil)}, true
	}
	return Total{}, false
}

// hasTotal reports whether histogram name is present in either form.
func (r *reader) hasTotal(name string) bool {
	_, ok := r.total(name)
	return ok
}

// needTotal is need for histograms: the first of names present, else "" with the names
// recorded as missing.
func (r *reader) needTotal(names ...string) string {
	for _, n := range names {
		if r.hasTotal(n) {
			return n
		}
	}
	r.missing = append(r.missing, strings.Join(names, " | "))
	return ""
}

// done returns the reader's error: the first non-finite value, else the missing metrics.
func (r *reader) done(profile, hint string) error {
	if r.err != nil {
		return r.err
	}
	if len(r.missing) > 0 {
		return &MissingError{Profile: profile, Model: r.model, Metrics: r.missing, Hint: hint}
	}
	return nil
}

// value returns a counter, gauge or untyped sample's value (NaN for other types).
func value(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Untyped != nil:
		return s.Untyped.GetValue()
	}
	return math.NaN()
}

// label returns the value of label name of s.
func label(s *dto.Metric, name string) (string, bool) {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue(), true
		}
	}
	return "", false
}

func newMetrics() Metrics {
	return Metrics{FeatureMean: map[string]float64{}, FeatureStd: map[string]float64{}, FeatureTotals: map[string]Total{}}
}
