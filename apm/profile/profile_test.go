package profile

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/trident-sched/trident/apm/profile/profiletest"
)

func parseFixture(t *testing.T, file string, p Profile, o Options) Metrics {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := Parse(f, p, o)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	Window(nil, &m)
	return m
}

func mustLookup(t *testing.T, name string) Profile {
	t.Helper()
	p, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Every field of the observation layer's input, from each profile's hand-written fixture.
func TestFixturesMapEveryMetric(t *testing.T) {
	cases := []struct {
		file, profile string
		opts          Options
		want          Metrics
	}{
		{"trident.prom", Trident, Options{}, Metrics{
			RecordsIn: 1200, RecordsOut: 1100, BusySeconds: 55.5, UsefulSeconds: 60,
			QueueLength: 37, QueueCapacity: 400, OutputBlocked: 12.5, HasOutputBlocked: true,
			AccelUtil: 0.8, CPUUtil: 0.1, HasAccelerator: true, DeviceMemPeak: 34359738368,
			OOMRestarts: 1, Epoch: 3, HasEpoch: true,
			FeatureMean: map[string]float64{"tokens_in": 512}, FeatureStd: map[string]float64{"tokens_in": 40},
			FeatureTotals: map[string]Total{},
		}},
		{"vllm.prom", VLLM, Options{}, Metrics{
			// 950 stop + 40 length + 10 abort finished; the aborted produced nothing.
			RecordsIn: 1000, RecordsOut: 990,
			UsefulSeconds: 3400, // RUNNING-phase time, not the 4200 s end-to-end
			QueueLength:   3,
			AccelUtil:     1, HasAccelerator: true, // requests wait: saturated
			EngineReported: true, Running: 12, Waiting: 3, // the engine's own counts
			FeatureMean: map[string]float64{
				FeaturePromptTokens: 1800, FeatureGenerationTokens: 500, FeaturePreemptionsPerRequest: 0.004,
			},
			FeatureStd: map[string]float64{},
			FeatureTotals: map[string]Total{
				FeaturePromptTokens: {1.8e6, 1000}, FeatureGenerationTokens: {5e5, 1000}, FeaturePreemptionsPerRequest: {4, 1000},
			},
		}},
		{"triton.prom", Triton, Options{Model: "layout"}, Metrics{
			RecordsIn: 4020, RecordsOut: 4000, // 20 rejected
			UsefulSeconds: 320, // (20+280+20) s of compute, not the 100 s queued
			QueueLength:   37,
			AccelUtil:     0.87, HasAccelerator: true, DeviceMemPeak: 30064771072,
			FeatureMean: map[string]float64{FeatureItemsPerRequest: 2, FeatureBatchSize: 8},
			FeatureStd:  map[string]float64{},
			FeatureTotals: map[string]Total{
				FeatureItemsPerRequest: {8000, 4000}, FeatureBatchSize: {8000, 1000},
			},
		}},
	}
	for _, c := range cases {
		got := parseFixture(t, c.file, mustLookup(t, c.profile), c.opts)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.file, got, c.want)
		}
	}
	// Without the model filter a Triton instance is every model it serves.
	all := parseFixture(t, "triton.prom", mustLookup(t, Triton), Options{})
	if all.RecordsOut != 4500 || all.RecordsIn != 4523 || all.QueueLength != 37 {
		t.Errorf("triton, all models: records %v in / %v out, queue %v; want 4523 / 4500, 37", all.RecordsIn, all.RecordsOut, all.QueueLength)
	}
}

// The fake servers write what the fixtures hold, in the same format: their output parses
// and maps to the state they were given.
func TestFakeServersMap(t *testing.T) {
	v := profiletest.NewVLLM("m")
	v.Finish(90, "stop", 1000, 200, 0.5, 4, 3)
	v.Finish(10, "length", 1000, 512, 0.5, 9, 0)
	v.Set(8, 0, 0.4)
	m := parseWith(t, v, VLLM, Options{})
	if m.RecordsIn != 100 || m.RecordsOut != 100 || m.UsefulSeconds != 90*4+10*9 || m.QueueLength != 0 || m.AccelUtil != 0.4 {
		t.Errorf("vllm: %+v", m)
	}
	if got := m.FeatureMean[FeatureGenerationTokens]; math.Abs(got-(90*200+10*512)/100.0) > 1e-9 {
		t.Errorf("vllm: generation_tokens %v", got)
	}
	tr := profiletest.NewTriton(2, "detector")
	tr.Infer(100, 4, 16, 2000, 10000)
	tr.Fail(5)
	tr.Set(12, 0.75, 20e9)
	m = parseWith(t, tr, Triton, Options{})
	if m.RecordsIn != 105 || m.RecordsOut != 100 || math.Abs(m.UsefulSeconds-1) > 1e-9 || m.QueueLength != 12 ||
		m.AccelUtil != 0.75 || m.DeviceMemPeak != 40e9 || m.FeatureMean[FeatureItemsPerRequest] != 4 || m.FeatureMean[FeatureBatchSize] != 16 {
		t.Errorf("triton: %+v", m)
	}
}

func parseWith(t *testing.T, src interface{ Write(w io.Writer) }, profile string, o Options) Metrics {
	t.Helper()
	var b bytes.Buffer
	src.Write(&b)
	m, err := Parse(&b, mustLookup(t, profile), o)
	if err != nil {
		t.Fatalf("%s: %v\n%s", profile, err, b.String())
	}
	Window(nil, &m)
	return m
}

func parseErr(src interface{ Write(w io.Writer) }, profile string, o Options) error {
	var b bytes.Buffer
	src.Write(&b)
	p, err := Lookup(profile)
	if err != nil {
		return err
	}
	_, err = Parse(&b, p, o)
	return err
}

// A scrape that lacks metrics a profile needs is an error naming every one of them (with
// their alternatives), the profile, and the model filter.
func TestMissingMetricsAreNamed(t *testing.T) {
	v := profiletest.NewVLLM("m")
	v.Omit = map[string]bool{
		"vllm:num_requests_waiting": true, "vllm:kv_cache_usage_perc": true,
		"vllm:request_inference_time_seconds": true, "vllm:e2e_request_latency_seconds": true,
	}
	err := parseErr(v, VLLM, Options{})
	if !IsMissing(err) {
		t.Fatalf("vllm: err = %v, want a MissingError", err)
	}
	for _, want := range []string{
		"metrics profile vllm", "vllm:num_requests_waiting",
		"vllm:kv_cache_usage_perc | vllm:gpu_cache_usage_perc",
		"vllm:request_inference_time_seconds | vllm:e2e_request_latency_seconds",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("vllm: %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "vllm:num_requests_running") {
		t.Errorf("vllm: %q names a metric that is present", err)
	}

	tr := profiletest.NewTriton(1, "detector")
	tr.Omit = map[string]bool{"nv_inference_pending_request_count": true, "nv_inference_compute_infer_duration_us": true}
	err = parseErr(tr, Triton, Options{})
	var me *MissingError
	if !errors.As(err, &me) || !reflect.DeepEqual(me.Metrics, []string{"nv_inference_pending_request_count", "nv_inference_compute_infer_duration_us"}) {
		t.Fatalf("triton: err = %v, want the pending count and compute duration named", err)
	}
	if !strings.Contains(err.Error(), "Triton 2.38") || !strings.Contains(err.Error(), "counter_latencies=false") {
		t.Errorf("triton: %q gives no hint", err)
	}
	// A model the server does not serve: every per-model metric is missing for it.
	err = parseErr(profiletest.NewTriton(1, "detector"), Triton, Options{Model: "ocr"})
	if !IsMissing(err) || !strings.Contains(err.Error(), `for model "ocr"`) || !strings.Contains(err.Error(), "nv_inference_request_success") {
		t.Fatalf("triton, unknown model: err = %v", err)
	}
	if strings.Contains(err.Error(), "nv_gpu_utilization") {
		t.Errorf("triton, unknown model: %q names the GPU metrics, which carry no model label", err)
	}

	// A vLLM server scraped as a trident operator (the profile meta forgotten): none of the
	// contract's metrics, an error saying which profile meta to set.
	var page bytes.Buffer
	profiletest.NewVLLM("m").Write(&page)
	_, err = Parse(&page, mustLookup(t, Trident), Options{})
	for _, want := range []string{"trident_records_in_total | trident_records_out_total", "trident_queue_length",
		"trident_metrics_profile (vllm, triton)"} {
		if !IsMissing(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("trident, a vLLM page: err %v lacks %q", err, want)
		}
	}
	// An operator that exports only some of the contract (here for backlog queries) is
	// read, the rest as 0.
	m, err := Parse(strings.NewReader("trident_queue_length 50\ntrident_records_out_total 10\n"), mustLookup(t, Trident), Options{})
	if err != nil || m.QueueLength != 50 || m.RecordsOut != 10 || m.RecordsIn != 0 {
		t.Errorf("partial contract: %+v, %v", m, err)
	}
}

// vLLM's names across versions: the KV-cache gauge before 0.9, servers without the
// RUNNING-phase histogram, without the per-request token histograms, and several
// data-parallel engines.
func TestVLLMVersions(t *testing.T) {
	state := func(v *profiletest.VLLM) *profiletest.VLLM {
		v.Finish(40, "stop", 2000, 300, 1, 5, 2)
		v.Set(16, 0, 0.6)
		return v
	}
	ref := parseWith(t, state(profiletest.NewVLLM("m")), VLLM, Options{})

	old := state(profiletest.NewVLLM("m"))
	old.PreV09 = true
	if m := parseWith(t, old, VLLM, Options{}); m.AccelUtil != 0.6 {
		t.Errorf("pre-0.9 KV-cache gauge: utilisation %v, want 0.6", m.AccelUtil)
	}

	noInfer := state(profiletest.NewVLLM("m"))
	noInfer.Omit = map[string]bool{"vllm:request_inference_time_seconds": true}
	if m := parseWith(t, noInfer, VLLM, Options{}); m.UsefulSeconds != 40*6 {
		t.Errorf("without the inference-time histogram: useful %v s, want the e2e latency sum 240", m.UsefulSeconds)
	}

	noHist := state(profiletest.NewVLLM("m"))
	noHist.Omit = map[string]bool{"vllm:request_prompt_tokens": true, "vllm:request_generation_tokens": true}
	m := parseWith(t, noHist, VLLM, Options{})
	if m.FeatureMean[FeaturePromptTokens] != 2000 || m.FeatureMean[FeatureGenerationTokens] != 300 {
		t.Errorf("token counters per request: %v, want prompt 2000, generation 300", m.FeatureMean)
	}
	noHist.Omit["vllm:prompt_tokens_total"] = true
	if err := parseErr(noHist, VLLM, Options{}); err == nil || !strings.Contains(err.Error(), "vllm:request_prompt_tokens | vllm:prompt_tokens_total") {
		t.Errorf("neither prompt token source: err %v", err)
	}

	dp := state(profiletest.NewVLLM("m"))
	dp.Engines = 2
	if m := parseWith(t, dp, VLLM, Options{}); !reflect.DeepEqual(m, ref) {
		t.Errorf("two engines:\n got %+v\nwant %+v", m, ref)
	}
	if m := parseWith(t, state(profiletest.NewVLLM("m")), VLLM, Options{Model: "m"}); !reflect.DeepEqual(m, ref) {
		t.Errorf("model filter on the served model changed the mapping: %+v", m)
	}
}

// vLLM exports no compute utilisation: waiting requests mean saturated, an empty batch
// idle, otherwise the KV-cache usage.
func TestVLLMUtilisationProxy(t *testing.T) {
	for _, c := range []struct{ running, waiting, kv, want float64 }{
		{running: 8, waiting: 2, kv: 0.3, want: 1},
		{running: 0, waiting: 0, kv: 0.2, want: 0},
		{running: 8, waiting: 0, kv: 0.45, want: 0.45},
	} {
		v := profiletest.NewVLLM("m")
		v.Set(c.running, c.waiting, c.kv)
		if m := parseWith(t, v, VLLM, Options{}); m.AccelUtil != c.want || !m.HasAccelerator {
			t.Errorf("running %v waiting %v kv %v: utilisation %v, want %v", c.running, c.waiting, c.kv, m.AccelUtil, c.want)
		}
	}
}

// A Triton server without GPUs reports the host CPU utilisation.
func TestTritonCPUOnly(t *testing.T) {
	tr := profiletest.NewTriton(0, "tokenizer")
	tr.Set(3, 0.7, 0)
	m := parseWith(t, tr, Triton, Options{})
	if m.HasAccelerator || m.CPUUtil != 0.7 || m.AccelUtil != 0 || m.DeviceMemPeak != 0 {
		t.Errorf("cpu-only: %+v", m)
	}
}

// Feature means are over the interval between two scrapes; a restart (counters back to
// zero) is detected and never yields a negative difference; an interval with no finished
// request keeps the previous mean.
func TestWindowAndRestart(t *testing.T) {
	v := profiletest.NewVLLM("m")
	v.StartTime = 1.7e9
	scrape := func() Metrics {
		t.Helper()
		var b bytes.Buffer
		v.Write(&b)
		m, err := Parse(&b, mustLookup(t, VLLM), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	v.Finish(100, "stop", 1000, 100, 0, 2, 0)
	s1 := scrape()
	Window(nil, &s1)
	v.Finish(50, "stop", 3000, 100, 0, 2, 5)
	s2 := scrape()
	if Restarted(s1, s2) {
		t.Fatal("restart reported without one")
	}
	Window(&s1, &s2)
	if s1.FeatureMean[FeaturePromptTokens] != 1000 || s2.FeatureMean[FeaturePromptTokens] != 3000 {
		t.Errorf("prompt_tokens %v then %v, want 1000 then 3000 (the interval's requests, not the lifetime mean)",
			s1.FeatureMean[FeaturePromptTokens], s2.FeatureMean[FeaturePromptTokens])
	}
	if got := s2.FeatureMean[FeaturePreemptionsPerRequest]; got != 0.1 {
		t.Errorf("preemptions per request %v, want 0.1", got)
	}
	s3 := scrape() // nothing finished
	Window(&s2, &s3)
	if s3.FeatureMean[FeaturePromptTokens] != 3000 {
		t.Errorf("idle interval: prompt_tokens %v, want the previous window's 3000", s3.FeatureMean[FeaturePromptTokens])
	}

	v.Restart()
	v.Finish(10, "stop", 500, 100, 0, 2, 0)
	s4 := scrape()
	if !Restarted(s3, s4) {
		t.Fatal("restart not detected")
	}
	s4.Restarted = true
	Window(&s3, &s4)
	if s4.FeatureMean[FeaturePromptTokens] != 500 || s4.FeatureMean[FeaturePreemptionsPerRequest] != 0 {
		t.Errorf("after the restart: %v, want prompt_tokens 500 (since the restart), no preemptions", s4.FeatureMean)
	}
	for name, v := range s4.FeatureMean {
		if v < 0 {
			t.Errorf("feature %s = %v after a restart", name, v)
		}
	}
	// Without a start time, a counter that went down is the restart.
	a := Metrics{RecordsIn: 100, UsefulSeconds: 50}
	if !Restarted(a, Metrics{RecordsIn: 120, UsefulSeconds: 3}) || Restarted(a, Metrics{RecordsIn: 120, UsefulSeconds: 60}) {
		t.Error("Restarted on counters")
	}
	// A restart that outgrew the old counters is caught by the start time.
	if !Restarted(Metrics{StartTime: 1, RecordsIn: 5}, Metrics{StartTime: 2, RecordsIn: 50}) {
		t.Error("Restarted ignores the start time")
	}
	// Totals that went down without Restarted set (a caller that did not check): the
	// mean is since the reset, never negative.
	p := Metrics{FeatureTotals: map[string]Total{"x": {100, 10}}, FeatureMean: map[string]float64{"x": 10}}
	c := Metrics{FeatureTotals: map[string]Total{"x": {6, 2}}}
	Window(&p, &c)
	if c.FeatureMean["x"] != 3 {
		t.Errorf("reset totals: mean %v, want 3", c.FeatureMean["x"])
	}
}

func TestNonFiniteValueIsNamed(t *testing.T) {
	v := profiletest.NewVLLM("m")
	var b bytes.Buffer
	v.Write(&b)
	s := strings.Replace(b.String(), `vllm:num_requests_waiting{engine="0",model_name="m"} 0.0`, `vllm:num_requests_waiting{engine="0",model_name="m"} NaN`, 1)
	_, err := Parse(strings.NewReader(s), mustLookup(t, VLLM), Options{})
	if err == nil || !strings.Contains(err.Error(), "vllm:num_requests_waiting") {
		t.Fatalf("NaN gauge: err = %v, want it named", err)
	}
	if _, err := Parse(strings.NewReader("trident_queue_length NaN\n"), mustLookup(t, Trident), Options{}); err == nil || !strings.Contains(err.Error(), "trident_queue_length") {
		t.Fatalf("trident NaN: err = %v", err)
	}
}

func TestLookup(t *testing.T) {
	if p, err := Lookup(""); err != nil || p.Name() != Trident {
		t.Fatalf("Lookup(\"\") = %v, %v; want trident", p, err)
	}
	for _, n := range Names() {
		if p, err := Lookup(" " + n + " "); err != nil || p.Name() != n {
			t.Errorf("Lookup(%q) = %v, %v", n, p, err)
		}
	}
	if _, err := Lookup("ray-serve"); err == nil || !strings.Contains(err.Error(), "trident, triton, vllm") {
		t.Fatalf("Lookup(ray-serve): err %v, want the known profiles listed", err)
	}
}

// The trident profile reads a serving engine's own running and waiting counts where the
// page exports them: the contract's trident_engine_* gauges, else the vLLM gauges of an
// engine hosted by the operator (summed over its engines, swapped counted as waiting, as
// the vllm profile does). A page with one gauge of a pair, or none, reports no engine.
func TestTridentPageEngineGauges(t *testing.T) {
	tr := mustLookup(t, Trident)
	m := parseFixture(t, "trident-vllm.prom", tr, Options{})
	if !m.EngineReported || m.Running != 62 || m.Waiting != 3 {
		t.Fatalf("vLLM gauges on a contract page: reported %v running %v waiting %v, want true 62 3", m.EngineReported, m.Running, m.Waiting)
	}
	if m.RecordsIn != 840 || m.QueueLength != 64 {
		t.Fatalf("contract metrics next to the engine gauges: records in %v queue %v", m.RecordsIn, m.QueueLength)
	}
	const contract = `# HELP trident_records_in_total Records consumed.
# TYPE trident_records_in_total counter
trident_records_in_total{operator="caption",pipeline="video"} 10
# HELP trident_engine_running Requests in the engine's running batch.
# TYPE trident_engine_running gauge
trident_engine_running{operator="caption",pipeline="video"} 16
# HELP trident_engine_waiting Requests the engine holds but does not run yet.
# TYPE trident_engine_waiting gauge
trident_engine_waiting{operator="caption",pipeline="video"} 0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 99
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 99
`
	m, err := Parse(strings.NewReader(contract), tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.EngineReported || m.Running != 16 || m.Waiting != 0 {
		t.Fatalf("contract engine gauges: reported %v running %v waiting %v, want true 16 0 (the contract's pair first)", m.EngineReported, m.Running, m.Waiting)
	}
	const half = `# TYPE trident_records_in_total counter
trident_records_in_total 10
# TYPE trident_engine_running gauge
trident_engine_running 16
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 4
`
	if m, err = Parse(strings.NewReader(half), tr, Options{}); err != nil {
		t.Fatal(err)
	}
	if m.EngineReported || m.Running != 0 || m.Waiting != 0 {
		t.Fatalf("one gauge of each pair: reported %v running %v waiting %v, want no engine", m.EngineReported, m.Running, m.Waiting)
	}
	if m = parseFixture(t, "trident.prom", tr, Options{}); m.EngineReported {
		t.Fatal("a contract page without engine gauges reports an engine")
	}
}

// TestTridentPagePool: an engine's working pool is read as trident_pool_size over
// trident_pool_need (a vLLM KV cache of 6144 tokens against max_model_len 4096 is 1.5),
// only when both are exported and positive.
func TestTridentPagePool(t *testing.T) {
	tr := mustLookup(t, Trident)
	for _, c := range []struct {
		name, page string
		want       float64
	}{
		{"both", "trident_records_in_total 10\ntrident_pool_size 6144\ntrident_pool_need 4096\n", 1.5},
		{"size only", "trident_records_in_total 10\ntrident_pool_size 6144\n", 0},
		{"need only", "trident_records_in_total 10\ntrident_pool_need 4096\n", 0},
		{"zero need", "trident_records_in_total 10\ntrident_pool_size 6144\ntrident_pool_need 0\n", 0},
		{"none", "trident_records_in_total 10\n", 0},
	} {
		m, err := Parse(strings.NewReader(c.page), tr, Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if m.Pool != c.want {
			t.Errorf("%s: pool %v, want %v", c.name, m.Pool, c.want)
		}
	}
}

// TestVLLMPool: the vllm profile reads the KV cache vLLM sized at start-up from
// vllm:cache_config_info (num_gpu_blocks × block_size tokens, the smallest over engines)
// against the group's trident_pool_need (max_model_len): 400 blocks of 16 tokens against
// 4096 is 1.5625. Without the need, or without a usable info series, no pool.
func TestVLLMPool(t *testing.T) {
	v := mustLookup(t, VLLM)
	base, err := os.ReadFile(filepath.Join("testdata", "vllm.prom"))
	if err != nil {
		t.Fatal(err)
	}
	info := `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="400"} 1.0
vllm:cache_config_info{block_size="16",engine="1",gpu_memory_utilization="0.9",num_gpu_blocks="512"} 1.0
`
	for _, c := range []struct {
		name, extra string
		need, want  float64
	}{
		{"info and need", info, 4096, 400.0 * 16 / 4096},
		{"no need", info, 0, 0},
		{"no info", "", 4096, 0},
		{"blocks not a number", `vllm:cache_config_info{block_size="16",num_gpu_blocks="n/a"} 1` + "\n", 4096, 0},
	} {
		m, err := Parse(strings.NewReader(string(base)+c.extra), v, Options{PoolNeed: c.need})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if math.Abs(m.Pool-c.want) > 1e-12 {
			t.Errorf("%s: pool %v, want %v", c.name, m.Pool, c.want)
		}
	}
}
