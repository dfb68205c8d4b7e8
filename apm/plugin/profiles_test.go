package plugin

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/trident-sched/trident/apm/profile"
	"github.com/trident-sched/trident/apm/profile/profiletest"
	"github.com/trident-sched/trident/sim/worker"
)

// fakeNomad serves the three Nomad API reads the plugin makes: a job, a service's
// registrations and allocations.
type fakeNomad struct {
	job         *api.Job
	services    map[string][]*api.ServiceRegistration
	allocs      map[string]*api.Allocation
	allocReads  atomic.Int32
	srv         *httptest.Server
	unavailable atomic.Bool
}

func newFakeNomad(t *testing.T, job *api.Job) *fakeNomad {
	f := &fakeNomad{job: job, services: map[string][]*api.ServiceRegistration{}, allocs: map[string]*api.Allocation{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Nomad-Index", "1")
		w.Header().Set("X-Nomad-LastContact", "0")
		w.Header().Set("X-Nomad-KnownLeader", "true")
		var body any
		switch {
		case r.URL.Path == "/v1/job/"+*f.job.ID:
			body = f.job
		case strings.HasPrefix(r.URL.Path, "/v1/service/"):
			body = f.services[strings.TrimPrefix(r.URL.Path, "/v1/service/")]
		case strings.HasPrefix(r.URL.Path, "/v1/allocation/"):
			f.allocReads.Add(1)
			a, ok := f.allocs[strings.TrimPrefix(r.URL.Path, "/v1/allocation/")]
			if !ok || f.unavailable.Load() {
				http.Error(w, "alloc not found", http.StatusNotFound)
				return
			}
			body = a
		default:
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeNomad) client(t *testing.T) *api.Client {
	t.Helper()
	cl, err := api.NewClient(&api.Config{Address: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// register adds an instance of group (rendered group name, config epoch) serving h.
func (f *fakeNomad) register(t *testing.T, service, allocID, group string, epoch int, h http.Handler) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	p, _ := strconv.Atoi(port)
	f.services[service] = append(f.services[service], &api.ServiceRegistration{
		ServiceName: service, JobID: *f.job.ID, AllocID: allocID, Address: host, Port: p,
	})
	op := strings.SplitN(group, "@", 2)[0]
	f.job.TaskGroups = append(f.job.TaskGroups, &api.TaskGroup{Name: ptr(group), Meta: map[string]string{
		"trident_operator": op, "trident_config_epoch": strconv.Itoa(epoch),
	}})
	f.allocs[allocID] = &api.Allocation{ID: allocID, TaskGroup: group, Job: f.job}
}

func ptr[T any](v T) *T { return &v }

// backdate makes the group's latest snapshot look old enough to be scraped again.
func backdate(p *Plugin, job, group string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gs := p.groups[key(job, group)]
	gs.snaps[len(gs.snaps)-1].time = gs.snaps[len(gs.snaps)-1].time.Add(-d)
}

// A group whose meta selects the vllm profile is scraped as vLLM servers: the config epoch
// of each instance comes from its allocation's group meta (read once per allocation),
// features are interval means, and a restarted server neither yields a capacity sample
// across the restart nor a negative throughput.
func TestRefreshReadsServerProfile(t *testing.T) {
	job := &api.Job{ID: ptr("llm"), TaskGroups: []*api.TaskGroup{{Name: ptr("gen"), Meta: map[string]string{
		"trident_order": "1", "trident_metrics_profile": "vllm", "trident_metrics_model": "m",
		"trident_features": "prompt_tokens,generation_tokens",
	}}}}
	nomad := newFakeNomad(t, job)
	va, vb := profiletest.NewVLLM("m"), profiletest.NewVLLM("m")
	va.StartTime = 1.7e9 // a exports process_start_time_seconds, b does not
	nomad.register(t, "llm-gen", "aaaaaaaa-1", "gen@n1.g3", 3, va)
	nomad.register(t, "llm-gen", "bbbbbbbb-2", "gen@n2.g3", 3, vb)
	p := New(hclog.NewNullLogger())
	p.SetNomadClient(nomad.client(t))
	ctx := context.Background()

	offered := func() int {
		st := p.capacity.Stats("llm", "gen")
		n := st.Accepted
		for _, r := range st.Rejected {
			n += r
		}
		return n
	}
	last := func() *snapshot {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.groups[key("llm", "gen")].last()
	}

	va.Finish(100, "stop", 1000, 200, 0.5, 4, 0)
	vb.Finish(80, "stop", 1000, 200, 0.5, 4, 0)
	va.Set(16, 5, 0.9)
	vb.Set(16, 5, 0.9)
	if _, err := p.refresh(ctx, "llm", "gen"); err != nil {
		t.Fatal(err)
	}
	s1 := *last()
	for id, m := range s1.instances {
		if m.Epoch != 3 || m.HasEpoch {
			t.Errorf("%s: epoch %v (exported %v), want 3 from the allocation's meta", id, m.Epoch, m.HasEpoch)
		}
		if m.FeatureMean[profile.FeaturePromptTokens] != 1000 || m.AccelUtil != 1 {
			t.Errorf("%s: features %v, utilisation %v", id, m.FeatureMean, m.AccelUtil)
		}
	}

	backdate(p, "llm", "gen", 10*time.Second)
	va.Finish(50, "stop", 3000, 200, 0.5, 4, 0)
	vb.Finish(30, "stop", 3000, 200, 0.5, 4, 0)
	if _, err := p.refresh(ctx, "llm", "gen"); err != nil {
		t.Fatal(err)
	}
	s2 := *last()
	if got := s2.instances["aaaaaaaa-1"].FeatureMean[profile.FeaturePromptTokens]; got != 3000 {
		t.Errorf("prompt_tokens %v, want 3000 (this interval's requests)", got)
	}
	prev := p.groups[key("llm", "gen")].snaps[0]
	dt := s2.time.Sub(prev.time).Seconds()
	if got, want := groupRate(&prev, &s2), 80/dt; abs(got-want) > 1e-9 {
		t.Errorf("throughput %v, want %v", got, want)
	}
	if n := offered(); n != 2 {
		t.Errorf("%d samples offered to the observation layer, want 2 (one per instance)", n)
	}

	// Server a restarts: its counters start again from zero.
	va.Restart()
	va.Finish(5, "stop", 500, 200, 0.5, 4, 0)
	vb.Finish(20, "stop", 3000, 200, 0.5, 4, 0)
	backdate(p, "llm", "gen", 10*time.Second)
	if _, err := p.refresh(ctx, "llm", "gen"); err != nil {
		t.Fatal(err)
	}
	s3 := *last()
	if !s3.instances["aaaaaaaa-1"].Restarted || s3.instances["bbbbbbbb-2"].Restarted {
		t.Fatalf("restarted: a %v, b %v; want a only", s3.instances["aaaaaaaa-1"].Restarted, s3.instances["bbbbbbbb-2"].Restarted)
	}
	dt = s3.time.Sub(s2.time).Seconds()
	if got, want := groupRate(&s2, &s3), (5+20)/dt; abs(got-want) > 1e-9 {
		t.Errorf("throughput across the restart %v, want %v (a counts from zero)", got, want)
	}
	if n := offered(); n != 3 {
		t.Errorf("%d samples offered after the restart, want 3 (none for the restarted instance)", n)
	}
	if got := s3.instances["aaaaaaaa-1"].FeatureMean[profile.FeaturePromptTokens]; got != 500 {
		t.Errorf("prompt_tokens after the restart %v, want 500", got)
	}

	// a restarts again and finishes more requests than its counters held before: only
	// the changed start time tells the restart.
	va.Restart()
	va.Finish(500, "stop", 500, 200, 0.5, 4, 0)
	vb.Finish(10, "stop", 3000, 200, 0.5, 4, 0)
	backdate(p, "llm", "gen", 10*time.Second)
	if _, err := p.refresh(ctx, "llm", "gen"); err != nil {
		t.Fatal(err)
	}
	s4 := *last()
	if !s4.instances["aaaaaaaa-1"].Restarted {
		t.Fatal("restart with grown counters not detected")
	}
	dt = s4.time.Sub(s3.time).Seconds()
	if got, want := groupRate(&s3, &s4), (500+10)/dt; abs(got-want) > 1e-9 {
		t.Errorf("throughput across the second restart %v, want %v", got, want)
	}
	if n := offered(); n != 4 {
		t.Errorf("%d samples offered after the second restart, want 4", n)
	}
	if n := nomad.allocReads.Load(); n != 2 {
		t.Errorf("%d allocation reads, want 2 (one per allocation, cached)", n)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// An instance whose allocation cannot be read is left out of the snapshot with an error
// (its samples would carry a wrong epoch), and the scrape fails when it was the only one.
func TestEpochUnreadableDropsTheInstance(t *testing.T) {
	job := &api.Job{ID: ptr("llm"), TaskGroups: []*api.TaskGroup{{Name: ptr("gen"), Meta: map[string]string{"trident_metrics_profile": "vllm"}}}}
	nomad := newFakeNomad(t, job)
	nomad.register(t, "llm-gen", "aaaaaaaa-1", "gen@n1.g1", 1, profiletest.NewVLLM("m"))
	nomad.unavailable.Store(true)
	p := New(hclog.NewNullLogger())
	p.SetNomadClient(nomad.client(t))
	_, err := p.refresh(context.Background(), "llm", "gen")
	if err == nil || !strings.Contains(err.Error(), "read allocation aaaaaaaa-1") {
		t.Fatalf("err = %v, want the allocation read named", err)
	}
}

// The group meta selects the profile and the model; an unknown profile is an error naming
// the meta key and the known profiles; a missing metric fails the scrape naming it.
func TestMetricsProfileFromMeta(t *testing.T) {
	job := &api.Job{ID: ptr("cv"), TaskGroups: []*api.TaskGroup{
		{Name: ptr("detect"), Meta: map[string]string{"trident_metrics_profile": "triton", "trident_metrics_model": " yolo "}},
		{Name: ptr("ocr"), Meta: map[string]string{"trident_metrics_profile": "ray"}},
		{Name: ptr("parse"), Meta: map[string]string{}},
	}}
	nomad := newFakeNomad(t, job)
	p := New(hclog.NewNullLogger())
	cl := nomad.client(t)
	ctx := context.Background()
	gp, err := p.metricsProfile(ctx, cl, "cv", "detect")
	if err != nil || gp.prof.Name() != profile.Triton || gp.opts.Model != "yolo" {
		t.Fatalf("detect: %+v, %v; want triton, model yolo", gp, err)
	}
	if gp, err := p.metricsProfile(ctx, cl, "cv", "parse"); err != nil || gp.prof.Name() != profile.Trident {
		t.Fatalf("parse: %+v, %v; want the default trident", gp, err)
	}
	if _, err := p.metricsProfile(ctx, cl, "cv", "ocr"); err == nil || !strings.Contains(err.Error(), "trident_metrics_profile") ||
		!strings.Contains(err.Error(), `"ray"`) || !strings.Contains(err.Error(), "trident, triton, vllm") {
		t.Fatalf("ocr: err = %v", err)
	}

	tr := profiletest.NewTriton(1, "yolo")
	tr.Omit = map[string]bool{"nv_inference_pending_request_count": true}
	nomad.register(t, "cv-detect", "cccccccc-3", "detect@n1.g0", 0, tr)
	p.SetNomadClient(cl)
	_, err = p.refresh(ctx, "cv", "detect")
	if err == nil || !strings.Contains(err.Error(), "nv_inference_pending_request_count") {
		t.Fatalf("missing metric: err = %v, want it named", err)
	}
}

// The reference operator (sim/worker, run by `trident operator`) exports every metric the
// trident profile requires, with its epoch.
func TestReferenceOperatorKeepsTheContract(t *testing.T) {
	m := worker.NewMetrics("pdf", "layout", 4, nil)
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	im, err := ScrapeInstance(context.Background(), srv.Client(), srv.URL, "a")
	if err != nil {
		t.Fatalf("the reference operator's metrics: %v", err)
	}
	if !im.HasEpoch || im.Epoch != 4 {
		t.Errorf("epoch %v (exported %v), want 4", im.Epoch, im.HasEpoch)
	}
}
