package nomadact

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/fsm"
)

// TestParseJobErrorsNameTheField: each malformed meta value yields an error naming the
// group and the meta key.
func TestParseJobErrorsNameTheField(t *testing.T) {
	cases := []struct {
		group, key, val, want string
	}{
		{"src", "trident_cpu", "lots", `group "src": meta trident_cpu="lots": not a number`},
		{"src", "trident_cpu", "-1", `group "src": operator "src": trident_cpu=-1 is out of range: want cores per instance in [0.01, 1024]`},
		{"src", "trident_memory_mb", "", `group "src": meta trident_memory_mb is required`},
		{"src", "trident_order", "first", `group "src": meta trident_order="first": not an integer`},
		{"gpu", "trident_gpus", "1.5", `group "gpu": meta trident_gpus="1.5": not an integer`},
		{"gpu", "trident_params", "batch=int[64,1]", `group "gpu": meta trident_params=`},
		{"gpu", "trident_config", "batch=999", `group "gpu": meta trident_config="batch=999"`},
		// Found by FuzzParsePipeline: without trident_params a config is opaque, yet it is
		// rendered into per-parameter meta, so it must still be k=v.
		{"src", "trident_config", "fast", `group "src": meta trident_config="fast": config "fast": entry "fast" is not k=v`},
		{"src", "trident_amplification", "NaN", `trident_amplification=NaN is out of range: want output records per input record in [1e-6, 1e6]`},
		{"src", "trident_cold_start_s", "Inf", `trident_cold_start_s=+Inf is out of range: want seconds in [0, 86400]`},
		{"src", "trident_synchronous", "sometimes", `group "src": meta trident_synchronous="sometimes": not true or false`},
	}
	for _, c := range cases {
		job := testJob("pipe")
		for _, g := range job.TaskGroups {
			if *g.Name == c.group {
				g.Meta[c.key] = c.val
			}
		}
		_, err := ParseJob(job)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s=%q: error %v, want it to contain %q", c.group, c.key, c.val, err, c.want)
		}
	}
	ok, err := ParseJob(testJob("pipe"))
	if err != nil {
		t.Fatal(err)
	}
	if ok.Operators[0].Name != "src" || ok.Operators[0].Amplification != 1 || ok.Operators[1].Params != "batch=int[1,64]" {
		t.Fatalf("parsed: %+v", ok.Operators)
	}
	sj := testJob("pipe")
	sj.TaskGroups[0].Meta["trident_synchronous"] = "true"
	if p, err := ParseJob(sj); err != nil || !p.Operators[0].Synchronous || p.Operators[1].Synchronous {
		t.Fatalf("trident_synchronous=true on src: %+v, %v", p, err)
	}
	if err := CheckConfig(ok.Operators[1], "batch=100"); err == nil {
		t.Fatal("out-of-range candidate config accepted")
	}
	if err := CheckConfig(ok.Operators[1], "batch=16"); err != nil {
		t.Fatal(err)
	}
	if ok.Operators[0].Params != "" {
		t.Fatalf("src declares trident_params %q; the case below needs an operator without", ok.Operators[0].Params)
	}
	if err := CheckConfig(ok.Operators[0], "fast"); err == nil || !strings.Contains(err.Error(), "not k=v") {
		t.Fatalf("candidate config %q without k=v on an operator without params: %v", "fast", err)
	}
	if err := CheckConfig(ok.Operators[0], "mode=slow"); err != nil {
		t.Fatal(err)
	}
	// Also found by the fuzzer: an opaque config is stored in canonical form, so a
	// stray separator does not survive into the decision's configs.
	for in, want := range map[string]string{",": "", " b=2; a=1,": "a=1,b=2"} {
		cj := testJob("pipe")
		cj.TaskGroups[0].Meta["trident_config"] = in
		p, err := ParseJob(cj)
		if err != nil || p.Operators[0].Config != want {
			t.Errorf("src trident_config=%q: parsed %+v, %v; want config %q", in, p, err, want)
		}
	}
}

// TestRenderPinsGroupsToNodes checks group names, counts, node constraints, GPU device
// requests, meta, and that the surge phase keeps old-config instances.
func TestRenderPinsGroupsToNodes(t *testing.T) {
	job := testJob("pipe")
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	p.Template, _ = json.Marshal(job)
	d1 := fsm.Decision{Index: 7, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"a": {Current: 2}, "b": {Current: 1}}, Config: "mode=fast"},
		"gpu": {Nodes: map[string]fsm.Placement{"b": {Current: 2}}, Config: "batch=8"},
	}}
	o := New(nil, Options{}).o
	v1, err := Render(p, d1, PhaseFinal, nil, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	anchors := map[string]bool{}
	for _, g := range v1.TaskGroups {
		if g.Meta[MetaAnchor] == "true" {
			// The user's group stays as a count-0 anchor holding its scaling policy.
			if *g.Count != 0 || len(g.Constraints) != len(job.TaskGroups[0].Constraints) && *g.Name == "src" {
				t.Fatalf("anchor %s: count %d constraints %v", *g.Name, *g.Count, g.Constraints)
			}
			anchors[*g.Name] = true
			continue
		}
		c := g.Constraints[len(g.Constraints)-1]
		got[*g.Name] = strings.Join([]string{c.LTarget, c.Operand, c.RTarget, g.Meta["trident_config"]}, " ") + " n=" + itoa(*g.Count)
		if g.Meta[MetaOperator] == "gpu" {
			devs := g.Tasks[0].Resources.Devices
			if len(devs) != 1 || devs[0].Name != "nvidia/gpu" || *devs[0].Count != 1 || devs[0].Constraints[0].RTarget != "8000 MiB" {
				t.Fatalf("gpu device request: %+v", devs)
			}
		}
		if g.Scaling != nil || g.Update == nil || !*g.Update.AutoRevert {
			t.Fatalf("group %s: scaling %v update %+v", *g.Name, g.Scaling, g.Update)
		}
	}
	want := map[string]string{
		"src@a.g0": "${node.unique.name} = a mode=fast n=2",
		"src@b.g0": "${node.unique.name} = b mode=fast n=1",
		"gpu@b.g0": "${node.unique.name} = b batch=8 n=2",
	}
	if len(got) != len(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	if !anchors["src"] || !anchors["gpu"] || len(anchors) != 2 {
		t.Fatalf("anchors %v, want src and gpu", anchors)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("group %s: %q, want %q", k, got[k], v)
		}
	}
	// Versions written by earlier planners kept the decision in job meta.
	old := testJob("pipe")
	old.Meta = map[string]string{MetaDecision: "5", MetaPhase: PhaseSurge}
	if DecisionOf(old) != 5 || PhaseOf(old) != PhaseSurge {
		t.Fatalf("job-meta version: decision %d phase %q", DecisionOf(old), PhaseOf(old))
	}
	if _, err := ParseJob(old); err == nil {
		t.Fatal("a rendered (job-meta) version accepted as a pipeline template")
	}
	if _, err := ParseJob(v1); err == nil {
		t.Fatal("a rendered version accepted as a pipeline template")
	}
	if DecisionOf(v1) != 7 || PhaseOf(v1) != PhaseFinal {
		t.Fatalf("rendered version: decision %d phase %q", DecisionOf(v1), PhaseOf(v1))
	}
	// A later decision with the same placement must not touch the meta of a group that
	// runs allocations (nor the job's): Nomad replaces every allocation whose combined
	// job+group+task meta changed.
	d1b := d1
	d1b.Index = 8
	v1b, err := Render(p, d1b, PhaseFinal, v1, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if DecisionOf(v1b) != 8 || !reflect.DeepEqual(v1.Meta, v1b.Meta) {
		t.Fatalf("decision 8: decision %d, job meta %v -> %v", DecisionOf(v1b), v1.Meta, v1b.Meta)
	}
	for i, g := range v1b.TaskGroups {
		if *g.Count > 0 && !reflect.DeepEqual(g.Meta, v1.TaskGroups[i].Meta) {
			t.Fatalf("group %s meta changed with the decision index: %v -> %v", *g.Name, v1.TaskGroups[i].Meta, g.Meta)
		}
	}
	// Transition one gpu instance: surge keeps both old ones, final drops one.
	d2 := fsm.Decision{Index: 9, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": d1.Operators["src"],
		"gpu": {Nodes: map[string]fsm.Placement{"b": {Current: 1, Candidate: 1}}, Config: "batch=8", CandidateConfig: "batch=16", Transitions: 1},
	}}
	counts := func(phase string) map[string]int {
		j, err := Render(p, d2, phase, v1, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, g := range j.TaskGroups {
			m[*g.Name] = *g.Count
		}
		return m
	}
	if s := counts(PhaseSurge); s["gpu@b.g0"] != 2 || s["gpu@b.g1"] != 1 {
		t.Fatalf("surge counts %v", s)
	}
	if f := counts(PhaseFinal); f["gpu@b.g0"] != 1 || f["gpu@b.g1"] != 1 {
		t.Fatalf("final counts %v", f)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestAnchorKeepsScalingPolicy(t *testing.T) {
	g := testJob("pipe").TaskGroups[0]
	g.Count = ptr(3)
	g.Scaling = &api.ScalingPolicy{Min: ptr(int64(2)), Max: ptr(int64(10)), Enabled: ptr(true), Policy: map[string]interface{}{"cooldown": "1m"}}
	a, err := anchor(g)
	if err != nil {
		t.Fatal(err)
	}
	if *a.Count != 0 || a.Meta[MetaAnchor] != "true" || a.Meta[MetaScalingMin] != "2" {
		t.Fatalf("anchor count %d meta %v", *a.Count, a.Meta)
	}
	if a.Scaling == nil || *a.Scaling.Min != 0 || *a.Scaling.Max != 10 || a.Scaling.Policy["cooldown"] != "1m" {
		t.Fatalf("anchor scaling %+v", a.Scaling)
	}
	if *g.Scaling.Min != 2 || *g.Count != 3 {
		t.Fatal("anchor modified the template group")
	}
}

// A group's scaling policy min and max become the operator's instance bounds; a min above
// the max is refused naming the operator.
func TestParseJobReadsScalingBounds(t *testing.T) {
	job := testJob("pipe")
	job.TaskGroups[1].Scaling = &api.ScalingPolicy{Min: ptr(int64(2)), Max: ptr(int64(12)), Enabled: ptr(true)}
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	if o := p.Operators[1]; o.MinInstances != 2 || o.MaxInstances != 12 {
		t.Errorf("gpu: bounds %d..%d, want 2..12", o.MinInstances, o.MaxInstances)
	}
	if o := p.Operators[0]; o.MinInstances != 0 || o.MaxInstances != 0 {
		t.Errorf("src (no scaling block): bounds %d..%d, want none", o.MinInstances, o.MaxInstances)
	}
	job.TaskGroups[1].Scaling.Min = ptr(int64(20))
	if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), `operator "gpu": scaling min=20 max=12`) {
		t.Errorf("min above max: err = %v", err)
	}
}

// The pipeline's weight comes from job meta trident_weight, else the job's priority / 50;
// trident_min_throughput is its guaranteed throughput. Bad values name the key.
func TestParseJobReadsWeightAndMinimum(t *testing.T) {
	job := testJob("pipe")
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	if p.Weight != 0 || p.MinThroughput != 0 {
		t.Errorf("defaults: weight %v, minimum %v; want 0 (weight 1) and 0", p.Weight, p.MinThroughput)
	}
	job.Priority = ptr(80)
	if p, _ = ParseJob(job); p.Weight != 1.6 {
		t.Errorf("priority 80: weight %v, want 1.6", p.Weight)
	}
	job.Meta = map[string]string{"trident_weight": "4", "trident_min_throughput": "12.5"}
	if p, _ = ParseJob(job); p.Weight != 4 || p.MinThroughput != 12.5 {
		t.Errorf("meta: weight %v, minimum %v; want 4 and 12.5", p.Weight, p.MinThroughput)
	}
	for key, val := range map[string]string{"trident_weight": "0", "trident_min_throughput": "-1"} {
		job.Meta = map[string]string{key: val}
		if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: err = %v, want it named", key, val, err)
		}
	}
	job.Meta = map[string]string{"trident_weight": "5000"}
	if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), "trident_weight=5000") {
		t.Errorf("weight 5000: err = %v", err)
	}
}

// trident_capacity is optional; when set it must be within [fsm.MinCapacity, fsm.MaxCapacity].
func TestParseJobReadsCapacityHint(t *testing.T) {
	job := testJob("pipe")
	job.TaskGroups[1].Meta["trident_capacity"] = "12.5"
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	if p.Operators[1].CapacityHint != 12.5 || p.Operators[0].CapacityHint != 0 {
		t.Errorf("hints %v, %v: want 0 and 12.5", p.Operators[0].CapacityHint, p.Operators[1].CapacityHint)
	}
	for val, want := range map[string]string{"fast": `meta trident_capacity="fast": not a number`, "-3": `trident_capacity=-3 is out of range: want 0 (unset) or records/s in [0.0001, 1e6]`} {
		job.TaskGroups[1].Meta["trident_capacity"] = val
		if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("trident_capacity=%q: err = %v, want %q", val, err, want)
		}
	}
}

// Rendered groups (named op@node.gN, not a valid service name) give every service an
// explicit name, the one Nomad would have given it in the user's group, with ${TASKGROUP}
// resolved to the operator; the accelerator request goes to the main task, not to a
// prestart hook listed first.
func TestRenderNamesServicesAndPicksTheMainTask(t *testing.T) {
	job := testJob("pipe")
	gpu := job.TaskGroups[1]
	gpu.Services = []*api.Service{{PortLabel: "metrics"}, {Name: "${JOB}-${TASKGROUP}-api"}}
	hook := &api.Task{Name: "fetch-model", Driver: "raw_exec", Lifecycle: &api.TaskLifecycle{Hook: api.TaskLifecycleHookPrestart}}
	gpu.Tasks[0].Services = []*api.Service{{PortLabel: "health"}}
	gpu.Tasks = append([]*api.Task{hook}, gpu.Tasks...)
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	p.Template, _ = json.Marshal(job)
	d := fsm.Decision{Index: 7, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"a": {Current: 1}}, Config: "mode=fast"},
		"gpu": {Nodes: map[string]fsm.Placement{"b": {Current: 1}}, Config: "batch=8"},
	}}
	v, err := Render(p, d, PhaseFinal, nil, nil, New(nil, Options{}).o)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range v.TaskGroups {
		if *g.Name != "gpu@b.g0" {
			continue
		}
		if len(g.Services) != 2 || g.Services[0].Name != "pipe-gpu" || g.Services[1].Name != "${JOB}-gpu-api" {
			t.Fatalf("group services %+v %+v, want pipe-gpu and ${JOB}-gpu-api", g.Services[0], g.Services[1])
		}
		if s := g.Tasks[1].Services; len(s) != 1 || s[0].Name != "pipe-gpu-run" {
			t.Fatalf("task services %+v, want pipe-gpu-run", s)
		}
		if g.Tasks[0].Resources != nil && len(g.Tasks[0].Resources.Devices) > 0 {
			t.Fatal("the GPU was requested by the prestart hook")
		}
		if r := g.Tasks[1].Resources; r == nil || len(r.Devices) != 1 || r.Devices[0].Name != "nvidia/gpu" {
			t.Fatalf("main task resources %+v, want the nvidia/gpu request", r)
		}
		return
	}
	t.Fatal("no rendered gpu group")
}

// distinct_hosts and distinct_property conflict with the planner packing several instances
// of an operator on one node: registration refuses them, naming job or group.
func TestParseJobRefusesDistinctConstraints(t *testing.T) {
	job := testJob("pipe")
	job.TaskGroups[1].Constraints = []*api.Constraint{api.NewConstraint("", api.ConstraintDistinctHosts, "true")}
	if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), `group "gpu": constraint distinct_hosts conflicts`) {
		t.Fatalf("group distinct_hosts: err %v", err)
	}
	job = testJob("pipe")
	job.Constraints = []*api.Constraint{api.NewConstraint("${meta.rack}", api.ConstraintDistinctProperty, "2")}
	if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), `job "pipe": constraint distinct_property conflicts`) {
		t.Fatalf("job distinct_property: err %v", err)
	}
}

// TestGPUModels: trident_gpu_models lists the accelerator models an operator accepts;
// the scheduler plans it only on those, and the rendered device request constrains
// ${device.model} to them so Nomad does not hand it another model on the node. A list
// without a GPU, an empty or a non-printable name is refused naming the key.
// renderGPU parses job (testJob's shape) and renders the final version of a decision
// placing src on c1 and gpu on c2: the pipeline and the rendered gpu group.
func renderGPU(t *testing.T, job *api.Job) (*fsm.Pipeline, *api.TaskGroup) {
	t.Helper()
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	p.Template, _ = json.Marshal(job)
	d := fsm.Decision{Index: 1, Job: "pipe", Operators: map[string]fsm.OpTarget{
		"src": {Nodes: map[string]fsm.Placement{"c1": {Current: 1}}, Config: "mode=fast"},
		"gpu": {Nodes: map[string]fsm.Placement{"c2": {Current: 1}}, Config: "batch=8"},
	}}
	out, err := Render(p, d, PhaseFinal, nil, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range out.TaskGroups {
		if *g.Name == "gpu@c2.g0" {
			return p, g
		}
	}
	t.Fatal("no rendered gpu group on c2")
	return nil, nil
}

func TestGPUModels(t *testing.T) {
	job := testJob("pipe")
	job.TaskGroups[1].Meta["trident_gpu_models"] = " NVIDIA A100-SXM4-80GB, H100 (80GB),NVIDIA A100-SXM4-80GB "
	p, g := renderGPU(t, job)
	if got := fmt.Sprint(p.Operators[1].GPUModels); got != "[NVIDIA A100-SXM4-80GB H100 (80GB)]" {
		t.Fatalf("models %s", got)
	}
	var cons []string
	for _, c := range g.Tasks[0].Resources.Devices[0].Constraints {
		cons = append(cons, c.LTarget+" "+c.Operand+" "+c.RTarget)
	}
	if want := `[${device.attr.memory} >= 8000 MiB ${device.model} regexp ^(NVIDIA A100-SXM4-80GB|H100 \(80GB\))$]`; fmt.Sprint(cons) != want {
		t.Fatalf("device constraints %v, want %s", cons, want)
	}
	for val, want := range map[string]string{" , ": "no model listed", "bad\x01name": "non-printable"} {
		job.TaskGroups[1].Meta["trident_gpu_models"] = val
		if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), "trident_gpu_models") || !strings.Contains(err.Error(), want) {
			t.Errorf("trident_gpu_models=%q: err = %v, want it named and %q", val, err, want)
		}
	}
	job = testJob("pipe")
	job.TaskGroups[0].Meta["trident_gpu_models"] = "A100"
	if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), "trident_gpu_models") {
		t.Errorf("models on a CPU operator: err = %v", err)
	}
}

// TestParseJobReadsContention: trident_contention reaches fsm.Operator (kind, weight
// default 1), sched hands it to the MILP, and bad values are named.
func TestParseJobReadsContention(t *testing.T) {
	job := testJob("pipe")
	job.TaskGroups[0].Meta["trident_contention"] = " Network , io:0.25 "
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	want := []fsm.Contention{{Kind: "network", Weight: 1}, {Kind: "io", Weight: 0.25}}
	if !reflect.DeepEqual(p.Operators[0].Contention, want) || p.Operators[1].Contention != nil {
		t.Fatalf("contention %+v / %+v, want %+v on src only", p.Operators[0].Contention, p.Operators[1].Contention, want)
	}
	// the declaration survives the raft state's JSON
	b, err := json.Marshal(p.Operators[0])
	if err != nil {
		t.Fatal(err)
	}
	var back fsm.Operator
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Contention, want) {
		t.Fatalf("JSON round trip: %+v, %v", back.Contention, err)
	}
	for val, want := range map[string]string{
		"cpu":            `kind "cpu": want one of network, io`,
		"network:lots":   `network weight "lots": not a number`,
		"network:0":      `network weight 0: want a share of the node's resource in [0.01, 1]`,
		"io:1.5":         `io weight 1.5`,
		"io:NaN":         `io weight NaN`,
		"io, io:0.5":     `kind "io" listed twice`,
		" , ":            `no kind listed`,
		"network:0.5:1":  `network weight "0.5:1": not a number`,
		"disk,network:1": `kind "disk"`,
	} {
		job.TaskGroups[0].Meta["trident_contention"] = val
		if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), `meta trident_contention=`) || !strings.Contains(err.Error(), want) {
			t.Errorf("trident_contention=%q: err = %v, want it named and %q", val, err, want)
		}
	}
}

// TestGPUVendor: trident_gpu_vendor reaches fsm.Operator ("nvidia", the default, as "")
// and the rendered device request (<vendor>/gpu); bad values and a vendor on a CPU
// operator are refused by name.
func TestGPUVendor(t *testing.T) {
	render := func(vendor string) (string, string) {
		t.Helper()
		job := testJob("pipe")
		if vendor != "" {
			job.TaskGroups[1].Meta["trident_gpu_vendor"] = vendor
		}
		p, g := renderGPU(t, job)
		return p.Operators[1].GPUVendor, g.Tasks[0].Resources.Devices[0].Name
	}
	for vendor, want := range map[string][2]string{"": {"", "nvidia/gpu"}, "nvidia": {"", "nvidia/gpu"}, " amd ": {"amd", "amd/gpu"}, "intel": {"intel", "intel/gpu"}} {
		if v, req := render(vendor); v != want[0] || req != want[1] {
			t.Errorf("trident_gpu_vendor=%q: vendor %q, request %q; want %q, %q", vendor, v, req, want[0], want[1])
		}
	}
	for _, val := range []string{"amd/gpu", "a md", strings.Repeat("x", 65)} {
		job := testJob("pipe")
		job.TaskGroups[1].Meta["trident_gpu_vendor"] = val
		if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), "trident_gpu_vendor") {
			t.Errorf("trident_gpu_vendor=%q: err = %v, want it named", val, err)
		}
	}
	job := testJob("pipe")
	job.TaskGroups[0].Meta["trident_gpu_vendor"] = "amd"
	if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), "trident_gpu_vendor") {
		t.Errorf("a vendor on a CPU operator: err = %v", err)
	}
}
