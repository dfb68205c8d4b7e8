package plugin

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trident-sched/trident/sim/worker"
)

const sample = `# TYPE trident_records_in_total counter
trident_records_in_total{pipeline="pdf",operator="ocr",epoch="1"} 1200
# TYPE trident_records_out_total counter
trident_records_out_total{pipeline="pdf",operator="ocr",epoch="1"} 1100
# TYPE trident_useful_seconds_total counter
trident_useful_seconds_total{pipeline="pdf",operator="ocr"} 60
# TYPE trident_queue_length gauge
trident_queue_length{pipeline="pdf",operator="ocr"} 37
# TYPE trident_queue_capacity gauge
trident_queue_capacity{pipeline="pdf",operator="ocr"} 400
# TYPE trident_output_blocked_seconds_total counter
trident_output_blocked_seconds_total{pipeline="pdf",operator="ocr"} 12.5
# TYPE trident_accelerator_utilization gauge
trident_accelerator_utilization{pipeline="pdf",operator="ocr"} 0.8
# TYPE trident_workload_feature gauge
trident_workload_feature{pipeline="pdf",operator="ocr",feature="tokens_in",stat="mean"} 512
trident_workload_feature{pipeline="pdf",operator="ocr",feature="tokens_in",stat="std"} 40
`

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if m.RecordsIn != 1200 || m.RecordsOut != 1100 || m.QueueLength != 37 || m.AccelUtil != 0.8 || !m.HasAccelerator {
		t.Errorf("parsed %+v", m)
	}
	if m.QueueCapacity != 400 || m.OutputBlocked != 12.5 {
		t.Errorf("queue capacity %v, output blocked %v s: want 400, 12.5", m.QueueCapacity, m.OutputBlocked)
	}
	if m.FeatureMean["tokens_in"] != 512 || m.FeatureStd["tokens_in"] != 40 {
		t.Errorf("features %v %v", m.FeatureMean, m.FeatureStd)
	}
	if _, err := ParseMetrics(strings.NewReader("trident_queue_length NaN\n")); err == nil || !strings.Contains(err.Error(), "trident_queue_length") {
		t.Errorf("NaN metric: err = %v, want it named", err)
	}
}

func TestParseQuery(t *testing.T) {
	if m, j, g, err := ParseQuery("capacity/pdf/ocr"); err != nil || m != "capacity" || j != "pdf" || g != "ocr" {
		t.Errorf("ParseQuery = %s %s %s %v", m, j, g, err)
	}
	for _, q := range []string{"capacity/pdf", "latency/pdf/ocr", "//", ""} {
		if _, _, _, err := ParseQuery(q); err == nil {
			t.Errorf("ParseQuery(%q) accepted", q)
		}
	}
}

// TestBacklogPerInstance: backlog_per_instance is the group's backlog over its instances
// (each instance reports its share of the stage backlog), for target-value policies.
func TestBacklogPerInstance(t *testing.T) {
	if m, _, _, err := ParseQuery("backlog_per_instance/pdf/ocr"); err != nil || m != MetricBacklogPerInstance {
		t.Fatalf("ParseQuery = %s %v", m, err)
	}
	p := New(hclog.NewNullLogger())
	s := snapshot{time: time.Now(), instances: map[string]InstanceMetrics{"a": {QueueLength: 30}, "b": {QueueLength: 30}, "c": {QueueLength: 29}}}
	gs := &groupState{job: "pdf", group: "ocr"}
	if v, ok, err := p.value(gs, MetricBacklog, nil, &s); err != nil || !ok || v != 89 {
		t.Errorf("backlog = %v %v %v, want 89", v, ok, err)
	}
	if v, ok, err := p.value(gs, MetricBacklogPerInstance, nil, &s); err != nil || !ok || v != 89.0/3 {
		t.Errorf("backlog_per_instance = %v %v %v, want 89/3", v, ok, err)
	}
	if _, ok, _ := p.value(gs, MetricBacklogPerInstance, nil, &snapshot{}); ok {
		t.Error("backlog_per_instance without instances has a value")
	}
}

func TestGroupRateHandlesRestart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := snapshot{time: t0, instances: map[string]InstanceMetrics{"a": {RecordsOut: 100}, "b": {RecordsOut: 500}}}
	cur := snapshot{time: t0.Add(10 * time.Second), instances: map[string]InstanceMetrics{"a": {RecordsOut: 150}, "b": {RecordsOut: 20}, "c": {RecordsOut: 99}}}
	// a: +50; b restarted: counts 20 from zero; c is new (no baseline): ignored.
	if got := groupRate(&prev, &cur); got != 7 {
		t.Errorf("rate = %v, want 7 records/s", got)
	}
}

// TestSetConfigTune checks the `tune` option: a malformed value is an error naming the
// field; "true" starts the feeder with tuning.
func TestSetConfigTune(t *testing.T) {
	p := New(hclog.NewNullLogger())
	err := p.SetConfig(map[string]string{ConfigPlannerAddr: "http://127.0.0.1:1", ConfigTune: "maybe"})
	if err == nil || !strings.Contains(err.Error(), ConfigTune) {
		t.Fatalf("tune=maybe: err = %v, want an error naming %q", err, ConfigTune)
	}
	if err := p.SetConfig(map[string]string{ConfigPlannerAddr: "http://127.0.0.1:1", ConfigTune: "true"}); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	stop := p.stopFeed
	p.mu.Unlock()
	if stop == nil {
		t.Fatal("feeder not started")
	}
	stop()
}

// The queue bound reaches the observation layer only from instances that also export the
// output-blocked counter: without it a backpressured instance (full queue, idle engine)
// would pass as saturated.
func TestQueueBoundNeedsTheBlockedCounter(t *testing.T) {
	with, err := ParseMetrics(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	without, err := ParseMetrics(strings.NewReader(strings.ReplaceAll(sample,
		"trident_output_blocked_seconds_total{pipeline=\"pdf\",operator=\"ocr\"} 12.5\n", "")))
	if err != nil {
		t.Fatal(err)
	}
	if !with.HasOutputBlocked || without.HasOutputBlocked {
		t.Fatalf("HasOutputBlocked: %v with the counter, %v without", with.HasOutputBlocked, without.HasOutputBlocked)
	}
	f := toFeed(snapshot{time: time.Unix(1, 0), instances: map[string]InstanceMetrics{"a": with, "b": without}})
	if got := f.Instances["a"].QueueCapacity; got != 400 {
		t.Errorf("with the counter: queue capacity %v, want 400", got)
	}
	if got := f.Instances["b"].QueueCapacity; got != 0 {
		t.Errorf("without the counter: queue capacity %v, want 0 (not forwarded)", got)
	}
}

// The example worker's own metrics, scraped over HTTP, carry the backpressure signal to the
// feed: every instance exports the output-blocked counter (so HasOutputBlocked), a bounded
// one its share of the queue bound, which the feed forwards.
func TestWorkerBackpressureMetricsReachTheSample(t *testing.T) {
	bounded := worker.NewMetrics("pdf", "ocr-text", 0, nil)
	bounded.QueueCapacity(512)
	bounded.OutputBlocked(3.5)
	unbounded := worker.NewMetrics("pdf", "segment", 0, nil)
	scrape := func(m *worker.Metrics) InstanceMetrics {
		t.Helper()
		srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
		defer srv.Close()
		im, err := ScrapeInstance(context.Background(), srv.Client(), srv.URL, "a")
		if err != nil {
			t.Fatal(err)
		}
		return im
	}
	b, u := scrape(bounded), scrape(unbounded)
	if !b.HasOutputBlocked || b.QueueCapacity != 512 || b.OutputBlocked != 3.5 {
		t.Errorf("bounded worker: HasOutputBlocked %v, QueueCapacity %v, OutputBlocked %v; want true, 512, 3.5",
			b.HasOutputBlocked, b.QueueCapacity, b.OutputBlocked)
	}
	if !u.HasOutputBlocked || u.QueueCapacity != 0 || u.OutputBlocked != 0 {
		t.Errorf("unbounded worker: HasOutputBlocked %v, QueueCapacity %v, OutputBlocked %v; want true, 0, 0",
			u.HasOutputBlocked, u.QueueCapacity, u.OutputBlocked)
	}
	f := toFeed(snapshot{time: time.Unix(1, 0), instances: map[string]InstanceMetrics{"b": b, "u": u}})
	if got := f.Instances["b"].QueueCapacity; got != 512 {
		t.Errorf("feed queue capacity %v, want 512", got)
	}
	if got := f.Instances["b"].OutputBlockedSeconds; got != 3.5 {
		t.Errorf("feed output blocked %v s, want 3.5", got)
	}
}

// The planner token is read under the APM plugin's own key (planner_token) and under the
// key the strategy and target plugins use (token); the feeder sends it on every call.
func TestSetConfigTokenKeys(t *testing.T) {
	for _, key := range []string{ConfigPlannerToken, ConfigToken} {
		got := make(chan string, 16)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case got <- r.Header.Get("X-Trident-Token"):
			default:
			}
			fmt.Fprint(w, "[]")
		}))
		p := New(hclog.NewNullLogger())
		if err := p.SetConfig(map[string]string{ConfigPlannerAddr: srv.URL, key: "s3cret", ConfigFeedInterval: "50ms"}); err != nil {
			t.Fatal(err)
		}
		select {
		case tok := <-got:
			if tok != "s3cret" {
				t.Errorf("%s: the planner saw token %q, want s3cret", key, tok)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: no call reached the planner", key)
		}
		p.mu.Lock()
		stop := p.stopFeed
		p.mu.Unlock()
		stop()
		srv.Close()
	}
}

// The tuning margin, sustained-peak allowance and production exposure are configurable: absent keys keep the
// tuner's defaults (0 in feed.TunerOptions), an explicit 0 means none (negative there),
// anything else must be a finite number >= 0. Trials are on unless tune_trials = "false";
// tune_parallel is a slot count from 1 to fsm.MaxTrialSlots.
func TestTuningConfigKeys(t *testing.T) {
	o, err := tuningOptions(map[string]string{})
	if err != nil || o.MarginMB != 0 || o.PeakK != 0 || !o.Trials {
		t.Errorf("no keys: %+v, %v; want the defaults, with trials", o, err)
	}
	if o, err := tuningOptions(map[string]string{ConfigTuneTrials: "false"}); err != nil || o.Trials {
		t.Errorf("tune_trials false: %+v, %v; want no trials", o, err)
	}
	o, err = tuningOptions(map[string]string{ConfigTuneMarginMB: "2048", ConfigTunePeakK: "0"})
	if err != nil || o.MarginMB != 2048 || o.PeakK != -1 {
		t.Errorf("margin 2048, k 0: %+v, %v; want 2048 and none (-1)", o, err)
	}
	if o, err := tuningOptions(map[string]string{ConfigTuneExposureHours: "0"}); err != nil || o.ExposureHours != -1 {
		t.Errorf("tune_exposure_hours 0: %+v, %v; want none (-1)", o, err)
	}
	if o, err := tuningOptions(map[string]string{ConfigTuneExposureHours: "6"}); err != nil || o.ExposureHours != 6 {
		t.Errorf("tune_exposure_hours 6: %+v, %v; want 6", o, err)
	}
	if o, err := tuningOptions(map[string]string{ConfigTuneParallel: "3"}); err != nil || o.Parallel != 3 {
		t.Errorf("tune_parallel 3: %+v, %v; want 3 trials at once", o, err)
	}
	for _, bad := range []map[string]string{{ConfigTuneMarginMB: "-1"}, {ConfigTunePeakK: "NaN"}, {ConfigTunePeakK: "two"}, {ConfigTuneMarginMB: "Inf"}, {ConfigTuneTrials: "maybe"}, {ConfigTuneExposureHours: "-2"},
		{ConfigTuneParallel: "0"}, {ConfigTuneParallel: "17"}, {ConfigTuneParallel: "2.5"}} {
		if _, err := tuningOptions(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
