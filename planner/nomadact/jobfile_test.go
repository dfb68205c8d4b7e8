package nomadact

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/apm/profile"
	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/internal/localcluster"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/configspace"
)

// paramRef matches a task's interpolation of a per-parameter meta key.
var paramRef = regexp.MustCompile(`\$\{NOMAD_META_(` + regexp.QuoteMeta(opcontract.MetaParamPrefix) + `[A-Za-z0-9_]+)\}`)

// vllmJobFile parses jobs/vllm-ocr.nomad.hcl with the nomad binary, without an agent
// (`nomad job validate`, then `nomad job run -output`).
func vllmJobFile(t *testing.T) *api.Job {
	t.Helper()
	bin, err := localcluster.ToolPath("nomad")
	if err != nil {
		t.Fatal(err)
	}
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "jobs", "vllm-ocr.nomad.hcl")
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(bin, args...)
		// No agent: the job is parsed and validated locally, never submitted.
		cmd.Env = append(os.Environ(), "NOMAD_ADDR=http://127.0.0.1:1")
		out, err := cmd.Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("nomad %s: %v\n%s%s", strings.Join(args, " "), err, out, msg)
		}
		return out
	}
	if out := run("job", "validate", file); !strings.Contains(string(out), "Job validation successful") {
		t.Fatalf("nomad job validate: %s", out)
	}
	job, err := DecodeJob(run("job", "run", "-output", file))
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// taskParamRefs returns the per-parameter meta keys the group's tasks interpolate.
func taskParamRefs(g *api.TaskGroup) []string {
	seen := map[string]bool{}
	for _, task := range g.Tasks {
		args, _ := task.Config["args"].([]any)
		for _, a := range args {
			s, _ := a.(string)
			for _, m := range paramRef.FindAllStringSubmatch(s, -1) {
				seen[m[1]] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The vLLM-shaped example job file validates and parses as a pipeline; every tunable
// parameter of each group reaches its task as a flag interpolated from its own meta key;
// the file's defaults of those keys equal its trident_config; and the planner's rendering
// of a candidate config sets exactly the keys the tasks read.
func TestVLLMJobFile(t *testing.T) {
	job := vllmJobFile(t)
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]*api.TaskGroup{}
	for _, g := range job.TaskGroups {
		groups[*g.Name] = g
	}
	if g := groups["ocr"]; g == nil || g.Meta[opcontract.MetaMetricsProfile] != profile.VLLM || g.Tasks[0].Driver != "docker" {
		t.Fatalf("group ocr: want the docker driver and trident_metrics_profile = vllm")
	}
	decision := fsm.Decision{Index: 3, Job: *job.ID, Operators: map[string]fsm.OpTarget{}}
	for _, op := range p.Operators {
		g := groups[op.Name]
		if _, err := profile.Lookup(g.Meta[opcontract.MetaMetricsProfile]); err != nil {
			t.Errorf("group %s: %v", op.Name, err)
		}
		sp, err := configspace.Parse(op.Params)
		if err != nil {
			t.Fatalf("group %s: %v", op.Name, err)
		}
		var want []string
		for _, prm := range sp.Params {
			want = append(want, opcontract.ParamMetaKey(prm.Name))
		}
		sort.Strings(want)
		if got := taskParamRefs(g); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("group %s: tasks interpolate %v, want every parameter %v", op.Name, got, want)
		}
		defaults, err := opcontract.ParamMeta(op.Config)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range defaults {
			if g.Meta[k] != v {
				t.Errorf("group %s: job-file default %s = %q, trident_config says %q", op.Name, k, g.Meta[k], v)
			}
		}
		// A candidate at the space's upper corner, to differ from the defaults.
		u := make([]float64, sp.Dim())
		for i := range u {
			u[i] = 0.999
		}
		cand, err := sp.Decode(u)
		if err != nil {
			t.Fatal(err)
		}
		decision.Operators[op.Name] = fsm.OpTarget{
			Nodes:  map[string]fsm.Placement{"n1": {Current: 1, Candidate: 1}},
			Config: op.Config, CandidateConfig: cand.String(), Transitions: 1,
		}
	}
	p.Template, _ = json.Marshal(job)
	v, err := Render(p, decision, PhaseSurge, nil, nil, New(nil, Options{}).o)
	if err != nil {
		t.Fatal(err)
	}
	rendered := 0
	for _, g := range v.TaskGroups {
		op := g.Meta[MetaOperator]
		if op == "" || g.Meta[MetaAnchor] == "true" {
			continue
		}
		rendered++
		pm, err := opcontract.ParamMeta(g.Meta[opcontract.MetaConfig])
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range taskParamRefs(g) {
			if g.Meta[k] == "" || g.Meta[k] != pm[k] {
				t.Errorf("%s: the task reads %s = %q, its config %q says %q", *g.Name, k, g.Meta[k], g.Meta[opcontract.MetaConfig], pm[k])
			}
		}
	}
	if rendered != 2*len(p.Operators) {
		t.Errorf("%d pinned groups rendered, want %d (current and candidate per operator)", rendered, 2*len(p.Operators))
	}
}

// Against a real Nomad agent, the example job file validates with the agent's checks too,
// and so does the version the planner renders from it.
func TestVLLMJobFileValidatesAgainstNomad(t *testing.T) {
	if testing.Short() {
		t.Skip("real Nomad: skipped in -short")
	}
	n := harness.StartNomad(t, harness.NomadOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job, err := harness.ParseJobFile(ctx, n.API(), "vllm-ocr.nomad.hcl", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, _, err := n.API().Jobs().Validate(job, nil)
	if err != nil {
		t.Fatalf("jobs/vllm-ocr.nomad.hcl does not validate: %v", err)
	}
	if resp.Error != "" || len(resp.ValidationErrors) > 0 {
		t.Fatalf("jobs/vllm-ocr.nomad.hcl: %s %v", resp.Error, resp.ValidationErrors)
	}
	// So does a version the planner renders from it (pinned groups, param meta).
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	p.Template, _ = json.Marshal(job)
	d := fsm.Decision{Index: 1, Job: *job.ID, Operators: map[string]fsm.OpTarget{}}
	for _, op := range p.Operators {
		d.Operators[op.Name] = fsm.OpTarget{Nodes: map[string]fsm.Placement{"n1": {Current: 1}}, Config: op.Config}
	}
	v, err := Render(p, d, PhaseFinal, nil, nil, New(nil, Options{}).o)
	if err != nil {
		t.Fatal(err)
	}
	if resp, _, err := n.API().Jobs().Validate(v, nil); err != nil || resp.Error != "" {
		t.Fatalf("the rendered version does not validate: %v %+v", err, resp)
	}
}
