package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/internal/localcluster"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/sim/worker"
)

// pipelineJob is jobs/pdf-curation.nomad.hcl reduced to the four operators of the
// worker's pdfocr pipeline (parse -> segment -> ocr-text -> aggregate), with stage orders
// and the -pipeline argument adjusted.
func pipelineJob(t *testing.T, cl *api.Client, tridentBin, natsURL string) *api.Job {
	t.Helper()
	return pdfocrJob(t, cl, "pdf-curation.nomad.hcl", map[string]string{
		"trident_bin": tridentBin, "nats_url": natsURL, "speed": "20",
	})
}

// pdfocrJob is job file (pdf-curation.nomad.hcl or its docker variant) parsed with vars and
// reduced to the four operators of the pdfocr pipeline.
func pdfocrJob(t *testing.T, cl *api.Client, file string, vars map[string]string) *api.Job {
	t.Helper()
	job, err := harness.ParseJobFile(context.Background(), cl, file, vars)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := worker.LookupPipeline("pdfocr")
	if err != nil {
		t.Fatal(err)
	}
	order := map[string]int{}
	for _, op := range pl.Operators {
		order[op.Name] = op.Order
	}
	var groups []*api.TaskGroup
	for _, g := range job.TaskGroups {
		o, ok := order[*g.Name]
		if !ok {
			continue
		}
		g.Meta["trident_order"] = fmt.Sprint(o)
		for _, task := range g.Tasks {
			args := task.Config["args"].([]interface{})
			for i, a := range args {
				if a == "pdf" && i > 0 && args[i-1] == "-pipeline" {
					args[i] = "pdfocr"
				}
			}
		}
		groups = append(groups, g)
	}
	if len(groups) != 4 {
		t.Fatalf("kept %d groups from pdf-curation, want 4", len(groups))
	}
	job.TaskGroups = groups
	return job
}

// plannerCall does one JSON request against the planner through the planner client (with
// its bounded retries); it answers 200 for every 2xx, else the status (0: no answer).
func plannerCall(t *testing.T, method, u string, in, out any) int {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	pc, err := client.New(client.Config{Address: pu.Scheme + "://" + pu.Host})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = pc.Do(ctx, method, pu.RequestURI(), in, out)
	var se *client.StatusError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &se):
		t.Logf("%v", err)
		return se.Code
	default:
		t.Logf("%s %s: %v", method, u, err)
		return 0
	}
}

type planGroup struct {
	Count           int                       `json:"count"`
	Nodes           map[string]map[string]int `json:"nodes"` // node -> {"current": n, "candidate": m}
	Config          string                    `json:"config"`
	ConfigEpoch     uint64                    `json:"config_epoch"`
	CandidateConfig string                    `json:"candidate_config"`
	TrialConfig     string                    `json:"trial_config"`
	TrialEpoch      uint64                    `json:"trial_epoch"`
}

type plan struct {
	DecisionIndex       uint64                   `json:"decision_index"`
	FailedDecisionIndex uint64                   `json:"failed_decision_index"`
	Status              string                   `json:"status"`
	Groups              map[string]planGroup     `json:"groups"`
	Canaries            map[string]client.Canary `json:"canaries"`
}

// stack is the Trident deployment the pipeline tests run against.
type stack struct {
	n          *harness.Nomad
	cl         *api.Client
	nomadBin   string
	natsURL    string
	tridentBin string
	leader     string
	as         *harness.Autoscaler
	job        *api.Job
}

// startStack starts Nomad (cpu1, cpu2, gpu1 with 4 fake GPUs and 4 modelled cores), NATS, three planners and the
// autoscaler with the three Trident plugins (apmExtra are extra trident-apm config keys),
// registers the 4-operator pipeline job with Nomad and the planner.
func startStack(t *testing.T, ctx context.Context, apmExtra map[string]string) *stack {
	t.Helper()
	asDir, devDir := harness.BuildPlugins(t)
	binDir := t.TempDir()
	if err := harness.BuildPackages(ctx, binDir, "./cmd/trident"); err != nil {
		t.Fatal(err)
	}
	tridentBin := filepath.Join(binDir, "trident")
	n := harness.StartNomad(t, harness.NomadOptions{
		DevicePluginDir: devDir,
		// Every client models the host's 2 cores for the planner (node meta, as the demo
		// does): the operators' trident_cpu is in the planner's cores, not in the MHz
		// their tasks request, so the NATS job's MHz must not shrink the model.
		Clients: []harness.ClientSpec{
			{Name: "cpu1", NodeClass: "cpu", Meta: map[string]string{opcontract.MetaNodeCPUCores: "2"}},
			{Name: "cpu2", NodeClass: "cpu", Meta: map[string]string{opcontract.MetaNodeCPUCores: "2"}},
			// gpu1 models 4 cores: two ocr-text instances (2 cores each), so that a
			// candidate's canary fits by stopping the one beside the canary slot (with a
			// single instance on a full node there is no room for a canary, and the
			// transition starts with its surge).
			{Name: "gpu1", NodeClass: "gpu", FakeGPUs: 4, FakeGPUMemoryMiB: 81920, Meta: map[string]string{opcontract.MetaNodeCPUCores: "4"}},
		},
	})
	cl := n.API()
	nomadBin, err := harness.ToolPath("nomad")
	if err != nil {
		t.Fatal(err)
	}

	natsURL := harness.RunNATS(t, ctx, cl, tridentBin)

	ps := harness.StartPlanners(t, harness.PlannerOptions{
		Binary: tridentBin, NomadAddr: n.Addr,
		// Canary probe windows of 20 s: the planner's warm-up term is off, the APM's
		// observation layer still rejects the canary's first two minutes, and its
		// useful-time rate of the canary's own instances measures it meanwhile.
		Args: []string{"-interval", "3s", "-max-batch", "1", "-min-healthy-time", "1s", "-healthy-deadline", "30s",
			"-canary-warmup", "0", "-canary-probe", "20s"},
	})
	leader, err := ps.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	as := harness.StartAutoscaler(t, n, harness.AutoscalerOptions{PluginDir: asDir, EvaluationInterval: 3 * time.Second,
		Plugins: localcluster.TridentPlugins(leader, apmExtra)})

	job := pipelineJob(t, cl, tridentBin, natsURL)
	if _, _, err := cl.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register pipeline job: %v", err)
	}
	if code := plannerCall(t, http.MethodPut, leader+"/v1/pipelines/pdf-curation", map[string]any{}, nil); code/100 != 2 {
		t.Fatalf("register pipeline with the planner: HTTP %d", code)
	}
	return &stack{n: n, cl: cl, nomadBin: nomadBin, natsURL: natsURL, tridentBin: tridentBin, leader: leader, as: as, job: job}
}

// publishPDF publishes the PDF dataset the stack tests run on (400 documents in 3
// regimes, from seed), enough to keep every stage busy during a test.
func (s *stack) publishPDF(t *testing.T, ctx context.Context, seed uint64) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, js, err := worker.Connect(cctx, s.natsURL, "e2e", nil)
	if err != nil {
		t.Fatalf("connect to NATS: %v", err)
	}
	pl, _ := worker.LookupPipeline("pdfocr")
	spec := worker.Spec{Pipeline: "pdfocr", Docs: 400, Regimes: 3, Seed: seed}
	if err := worker.Publish(ctx, js, pl, spec, worker.PublishOptions{Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("publish dataset: %v", err)
	}
}

// TestPipelineUnderTrident runs a 4-operator pipeline on a 3-client cluster with the real
// autoscaler loading all three Trident plugins and a 3-server planner cluster, and checks
// that the planner's plan (counts, per-node placement, one config transition) is what
// `nomad job status` and `nomad deployment status` show.
func TestPipelineUnderTrident(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: starts Nomad, NATS, the autoscaler and three planners")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s := startStack(t, ctx, nil)
	n, cl, nomadBin, leader, as, job := s.n, s.cl, s.nomadBin, s.leader, s.as, s.job

	// Load: a dataset large enough to keep every stage busy during the test.
	s.publishPDF(t, ctx, 7)

	// 1. The observation layer (trident-apm's feeder) publishes capacities to the planner.
	// Only saturated operators get estimates (starved ones are filtered out, by design):
	// the accelerator operator ocr-text is the bottleneck of this pipeline.
	waitFor(t, 3*time.Minute, "a capacity observation of ocr-text at the planner", func() (bool, string) {
		var st struct {
			Observations map[string]map[string]struct {
				Capacity float64 `json:"capacity"`
			} `json:"observations"`
		}
		plannerCall(t, http.MethodGet, leader+"/v1/state", nil, &st)
		obs := st.Observations["pdf-curation"]
		return obs["ocr-text"].Capacity > 0, fmt.Sprintf("%v", obs)
	})

	// The job file bounds the accelerator operators' input queues (-queue-cap): ocr-text's
	// instances export their share of the bound and the output-blocked counter, the
	// queue signal trident-apm feeds to the observation layer.
	waitFor(t, 2*time.Minute, "ocr-text to export its queue bound", func() (bool, string) {
		pages := operatorMetrics(t, cl, "pdf-curation", "ocr-text")
		if len(pages) == 0 {
			return false, "no running ocr-text allocation serving /metrics"
		}
		for _, page := range pages {
			if v, ok := metricValueIn(page, opcontract.QueueCapacity); !ok || v <= 0 {
				return false, fmt.Sprintf("%s = %v (exported %v)", opcontract.QueueCapacity, v, ok)
			}
			if _, ok := metricValueIn(page, opcontract.OutputBlockedSeconds); !ok {
				return false, opcontract.OutputBlockedSeconds + " not exported"
			}
		}
		return true, ""
	})

	// 2. A committed plan is applied: Nomad runs exactly the planned count per operator and
	// node, in the rendered per-node groups.
	var p plan
	waitFor(t, 3*time.Minute, "Nomad to converge to a committed plan", func() (bool, string) {
		p = plan{}
		if plannerCall(t, http.MethodGet, leader+"/v1/plan/pdf-curation", nil, &p) != http.StatusOK || p.Status != "done" {
			return false, fmt.Sprintf("plan #%d status %q", p.DecisionIndex, p.Status)
		}
		got := runningByOperatorNode(t, cl, "pdf-curation")
		for op, g := range p.Groups {
			for node, pl := range g.Nodes {
				want := 0
				for _, c := range pl {
					want += c
				}
				if got[op+"|"+node] != want {
					return false, fmt.Sprintf("%s on %s: running %d, planned %d (all: %v)", op, node, got[op+"|"+node], want, got)
				}
			}
		}
		return true, ""
	})
	for node := range p.Groups["ocr-text"].Nodes {
		if node != "gpu1" {
			t.Errorf("ocr-text (1 GPU) planned on %s; only gpu1 has GPUs", node)
		}
	}
	status := runCLI(t, nomadBin, n.Addr, "job", "status", "pdf-curation")
	for op := range p.Groups {
		if !strings.Contains(status, op+"@") {
			t.Errorf("nomad job status does not show the rendered groups of %s:\n%s", op, status)
		}
	}

	// 3. A config the adaptation layer proposes first runs on one Nomad canary of
	// ocr-text's canary slot, which the planner measures (through the real APM feed) and
	// then promotes (the rest rolls) or fails (Nomad reverts).
	// 32-token KV blocks: decode steps 4 % faster, the memory of the job file's config
	// (16 sequences OOM on this dataset's long documents, which the canary also catches).
	candidate := "block_size=32,max_num_batched_tokens=8192,max_num_seqs=8"
	// The planner fails a canary it could not measure because the operator ran starved
	// (a faster config would not raise throughput; product behaviour, planner/canary.go).
	// On a loaded machine the pipeline can starve ocr-text for the 20 s window right after
	// the plan's rolling update, so the test proposes again, as the tuner would, at most
	// three times, each after ocr-text's own estimate is saturated again.
	var verdict client.Canary
	var decided plan
	for attempt := 1; ; attempt++ {
		verdict, decided = canaryAttempt(t, s, candidate)
		starved := verdict.By == fsm.ByPlanner && verdict.Verdict == fsm.VerdictFailed && verdict.CandidateCapacity == 0
		if !starved || attempt == 3 {
			break
		}
		t.Logf("attempt %d: the planner failed the canary unmeasured (%s); proposing again", attempt, verdict.Detail)
		waitForRevert(t, cl, candidate)
	}
	t.Logf("canary verdict: %+v", verdict)
	if verdict.By != fsm.ByPlanner || verdict.CandidateCapacity <= 0 || verdict.CurrentCapacity <= 0 {
		t.Errorf("canary verdict %+v: want the planner's, on measured capacities", verdict)
	}
	switch verdict.Verdict {
	case fsm.VerdictPromoted:
		if decided.Status != "done" {
			t.Errorf("canary promoted but the decision is %q", decided.Status)
		}
	case fsm.VerdictFailed:
		if decided.Status != "failed" || decided.FailedDecisionIndex == 0 {
			t.Errorf("canary failed but the plan shows %+v", decided)
		}
		waitForRevert(t, cl, candidate)
	}
	if !strings.Contains(as.Log(), "trident") {
		t.Error("the autoscaler log never mentions the trident plugins")
	}
	// The planner's versions keep every operator's scaling policy (on its count-0 anchor
	// group): the autoscaler keeps evaluating them and does not crash on a vanished policy
	// (nomad-autoscaler v0.4.7 panics when a policy disappears while its handler starts).
	pols, _, err := n.API().Scaling().ListPolicies(nil)
	if err != nil {
		t.Fatal(err)
	}
	withPolicy := map[string]bool{}
	for _, p := range pols {
		if p.Target["Job"] == *job.ID {
			withPolicy[p.Target["Group"]] = true
		}
	}
	for _, op := range []string{"parse", "segment", "ocr-text", "aggregate"} {
		if !withPolicy[op] {
			t.Errorf("no scaling policy left for operator %s after the planner's versions (policies for %v)", op, withPolicy)
		}
	}
	if strings.Contains(as.Log(), "panic:") {
		t.Errorf("the autoscaler panicked:\n%s", as.Log())
	}
}

// canaryAttempt waits until ocr-text's own capacity estimate is saturated (no fallback),
// proposes candidate for it, checks that Nomad runs the candidate on one canary of
// ocr-text's canary slot (also through `nomad deployment status`), and returns the
// planner's verdict on that canary with the plan it left.
func canaryAttempt(t *testing.T, s *stack, candidate string) (client.Canary, plan) {
	t.Helper()
	waitFor(t, 3*time.Minute, "a saturated estimate of ocr-text", func() (bool, string) {
		var st struct {
			Observations map[string]map[string]fsm.Observation `json:"observations"`
		}
		plannerCall(t, http.MethodGet, s.leader+"/v1/state", nil, &st)
		o := st.Observations["pdf-curation"]["ocr-text"]
		return o.Capacity > 0 && !o.Fallback, fmt.Sprintf("%+v", o)
	})
	if code := plannerCall(t, http.MethodPut, s.leader+"/v1/candidates/pdf-curation/ocr-text",
		map[string]any{"config": candidate, "capacity": 1000.0, "cold_start_s": 1.0}, nil); code/100 != 2 {
		t.Fatalf("propose candidate: HTTP %d", code)
	}
	var dep *api.Deployment
	waitFor(t, 3*time.Minute, "a Nomad canary of ocr-text's candidate config", func() (bool, string) {
		d, _, err := s.cl.Jobs().LatestDeployment("pdf-curation", nil)
		if err != nil || d == nil {
			return false, fmt.Sprintf("no deployment: %v", err)
		}
		g, ok := d.TaskGroups["ocr-text@canary"]
		if !ok || g.DesiredCanaries != 1 || len(g.PlacedCanaries) != 1 {
			return false, fmt.Sprintf("latest deployment %s (%s) has no canary of ocr-text@canary", d.ID[:8], d.Status)
		}
		dep = d
		return true, ""
	})
	depStatus := runCLI(t, s.nomadBin, s.n.Addr, "deployment", "status", dep.ID)
	if !regexp.MustCompile(`(?m)^ocr-text@canary\s`).MatchString(depStatus) || !strings.Contains(depStatus, "Canaries") {
		t.Errorf("nomad deployment status does not show the canary of ocr-text:\n%s", depStatus)
	}
	var verdict client.Canary
	var decided plan
	waitFor(t, 5*time.Minute, "the planner's verdict on the canary, measured by the APM feed", func() (bool, string) {
		decided = plan{}
		plannerCall(t, http.MethodGet, s.leader+"/v1/plan/pdf-curation", nil, &decided)
		verdict = decided.Canaries["ocr-text"]
		return verdict.Deployment == dep.ID && verdict.Verdict != "" && decided.Status != "applying",
			fmt.Sprintf("canary %+v, decision status %q", verdict, decided.Status)
	})
	return verdict, decided
}

// waitForRevert waits until Nomad reverted ocr-text's canary slot to a config other
// than the failed candidate's.
func waitForRevert(t *testing.T, cl *api.Client, candidate string) {
	t.Helper()
	waitFor(t, time.Minute, "Nomad to revert the slot", func() (bool, string) {
		j, _, err := cl.Jobs().Info("pdf-curation", nil)
		if err != nil {
			return false, err.Error()
		}
		for _, g := range j.TaskGroups {
			if *g.Name == "ocr-text@canary" {
				return g.Meta["trident_config"] != candidate, "slot config " + g.Meta["trident_config"]
			}
		}
		return false, "no slot group"
	})
}

// runningByOperatorNode counts running allocations per "<operator>|<node>".
func runningByOperatorNode(t *testing.T, cl *api.Client, job string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, a := range runningAllocs(t, cl, job) {
		op, _, _ := strings.Cut(a.TaskGroup, "@")
		out[op+"|"+a.NodeName]++
	}
	return out
}

// runningAllocs returns job's allocations that are running and meant to run.
func runningAllocs(t *testing.T, cl *api.Client, job string) []*api.AllocationListStub {
	t.Helper()
	allocs, _, err := cl.Jobs().Allocations(job, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []*api.AllocationListStub
	for _, a := range allocs {
		if a.DesiredStatus == "run" && a.ClientStatus == "running" {
			out = append(out, a)
		}
	}
	return out
}

// operatorMetrics returns the /metrics page of every running allocation of operator op in
// job (its groups are op or op@<node>), fetched from the allocation's "metrics" port.
func operatorMetrics(t *testing.T, cl *api.Client, job, op string) []string {
	t.Helper()
	var pages []string
	for _, stub := range runningAllocs(t, cl, job) {
		if g, _, _ := strings.Cut(stub.TaskGroup, "@"); g != op {
			continue
		}
		a, _, err := cl.Allocations().Info(stub.ID, nil)
		if err != nil || a.AllocatedResources == nil {
			continue
		}
		for _, p := range a.AllocatedResources.Shared.Ports {
			if p.Label != "metrics" {
				continue
			}
			resp, err := http.Get(fmt.Sprintf("http://%s:%d/metrics", p.HostIP, p.Value))
			if err != nil {
				continue // not serving yet
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			pages = append(pages, string(b))
		}
	}
	return pages
}

// metricValueIn returns the value of the first sample of metric name in a Prometheus text
// page, and whether there is one.
func metricValueIn(page, name string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		return v, err == nil
	}
	return 0, false
}

// runCLI runs the real nomad CLI against the cluster and returns its output.
func runCLI(t *testing.T, bin, addr string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cmd.Environ(), "NOMAD_ADDR="+addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("$ nomad %s\n%s", strings.Join(args, " "), out)
	return string(out)
}
