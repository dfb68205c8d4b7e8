package nomadact

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/fsm"
)

// Regression tests of issue #28 ("absurd job meta refused"): values that parsed and then
// yielded throughput-0 plans or job versions Nomad refuses for ever are refused at
// registration, with an error naming the group, the meta key and the allowed range.

// TestParseJobRefusesGroupsNamedLikeRenderedGroups: an operator named like a rendered group
// ("src@c1.g0" next to "src") made every job version redefine a task group, so Nomad
// refused them all and the decision stayed applying. '@' is refused in every group name,
// operator or not (non-operator groups are kept as written in every version), and so are
// repeated group names and the meta keys the planner writes into rendered groups.
func TestParseJobRefusesGroupsNamedLikeRenderedGroups(t *testing.T) {
	cases := []struct {
		edit func(*api.Job)
		want string
	}{
		{func(j *api.Job) { j.TaskGroups[1].Name = ptr(GroupName("src", "c1", 0)) },
			`job "pipe": group "src@c1.g0": operator "src@c1.g0": name contains '@', which is reserved for the groups the planner renders (<op>@<node>.g<generation>)`},
		{func(j *api.Job) {
			j.TaskGroups = append(j.TaskGroups, &api.TaskGroup{Name: ptr("src@c1.g0"), Tasks: j.TaskGroups[0].Tasks})
		}, `job "pipe": group "src@c1.g0": name contains '@', which is reserved`},
		{func(j *api.Job) { j.TaskGroups[1].Name = ptr("ocr/text") }, `group "ocr/text": operator "ocr/text": name contains '/'`},
		{func(j *api.Job) { j.TaskGroups[1].Name = ptr("src") }, `job "pipe": groups 1 and 2 are both named "src"`},
		{func(j *api.Job) {
			j.TaskGroups = append(j.TaskGroups, &api.TaskGroup{Name: ptr("gpu"), Tasks: j.TaskGroups[0].Tasks})
		}, `job "pipe": groups 2 and 3 are both named "gpu"`},
		// Found by FuzzParsePipeline: an unnamed group was skipped by the parser and crashed
		// the renderer (nil name).
		{func(j *api.Job) { j.TaskGroups = append(j.TaskGroups, &api.TaskGroup{}) }, `job "pipe": group 3 has no name`},
		{func(j *api.Job) { j.TaskGroups = append(j.TaskGroups, nil) }, `job "pipe": group 3 has no name`},
		{func(j *api.Job) { j.TaskGroups[0].Meta[MetaOperator] = "gpu" }, `job "pipe": group "src": meta trident_operator is written by the planner; remove it from the job file`},
		{func(j *api.Job) { j.TaskGroups[1].Meta[MetaNode] = "c1" }, `group "gpu": meta trident_node is written by the planner`},
	}
	for _, c := range cases {
		job := testJob("pipe")
		c.edit(job)
		if _, err := ParseJob(job); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to contain %q", err, c.want)
		}
	}
	// No rendered group name is a valid operator name, whatever the operator and node.
	for _, op := range []string{"src", "a.g0", "x"} {
		for _, node := range []string{"c1", "c1.g0", "node@x"} {
			if name := GroupName(op, node, 3); fsm.ValidateOperatorName(name) == nil {
				t.Errorf("rendered group %q is a valid operator name", name)
			}
		}
	}
}

// TestParseJobRefusesAbsurdValues: each value the probe of issue #28 found parsing into a
// pipeline the planner cannot plan, and each other bound, is refused naming the group, the
// key and the range; the bounds themselves parse.
func TestParseJobRefusesAbsurdValues(t *testing.T) {
	cases := []struct {
		group string
		meta  map[string]string
		want  string
	}{
		// The probe's values.
		{"src", map[string]string{"trident_amplification": "1e12"},
			`job "pipe": group "src": operator "src": trident_amplification=1e12 is out of range: want output records per input record in [1e-6, 1e6]`},
		{"src", map[string]string{"trident_amplification": "1e-12"}, `group "src": operator "src": trident_amplification=1e-12 is out of range`},
		{"src", map[string]string{"trident_amplification": "1e200"}, `group "src": operator "src": trident_amplification=1e200 is out of range`},
		{"gpu", map[string]string{"trident_capacity": "1e300"},
			`group "gpu": operator "gpu": trident_capacity=1e300 is out of range: want 0 (unset) or records/s in [0.0001, 1e6]`},
		{"src", map[string]string{"trident_cpu": "1e-9"},
			`group "src": operator "src": trident_cpu=1e-9 is out of range: want cores per instance in [0.01, 1024]`},
		// The other bounds.
		{"src", map[string]string{"trident_cpu": "1025"}, `operator "src": trident_cpu=1025 is out of range`},
		{"src", map[string]string{"trident_memory_mb": "5000000"},
			`operator "src": trident_memory_mb=5000000 is out of range: want MB per instance in [1, 4194304]`},
		{"gpu", map[string]string{"trident_gpus": "65"}, `operator "gpu": trident_gpus=65 is out of range: want accelerators per instance in [0, 64]`},
		{"gpu", map[string]string{"trident_gpu_memory_mb": "2000000"},
			`operator "gpu": trident_gpu_memory_mb=2000000 is out of range: want MB per accelerator in [0, 1048576]`},
		{"src", map[string]string{"trident_output_bytes": "1e11"},
			`operator "src": trident_output_bytes=1e11 is out of range: want bytes per record in [0, 68719476736]`},
		{"gpu", map[string]string{"trident_cold_start_s": "100000"},
			`operator "gpu": trident_cold_start_s=100000 is out of range: want seconds in [0, 86400]`},
		{"gpu", map[string]string{"trident_order": "9999999"}, `operator "gpu": trident_order=9999999 is out of range: want an integer in [0, 1000000]`},
		{"gpu", map[string]string{"trident_features": strings.Repeat("f,", 65) + "g"}, `operator "gpu": trident_features=<66 names> is out of range: want at most 64 names`},
		// Along the pipeline: 1e5 x 1e5 records per pipeline input record after gpu.
		{"", map[string]string{"trident_amplification": "1e5"},
			`pipeline "pipe": operator "gpu": trident_amplification=100000 brings the product of trident_amplification along the pipeline (records per pipeline input record) to 1e10: want it in [1e-9, 1e9] after every operator`},
		{"", map[string]string{"trident_amplification": "1e-5"}, `operator "gpu": trident_amplification=1e-5 brings the product of trident_amplification along the pipeline (records per pipeline input record) to 1e-10`},
	}
	for _, c := range cases {
		job := testJob("pipe")
		for _, g := range job.TaskGroups {
			if c.group == "" || *g.Name == c.group {
				for k, v := range c.meta {
					g.Meta[k] = v
				}
			}
		}
		_, err := ParseJob(job)
		if err == nil || !strings.Contains(strings.TrimPrefix(err.Error(), `job "pipe": `), strings.TrimPrefix(c.want, `job "pipe": `)) {
			t.Errorf("%s %v: error %v, want it to contain %q", c.group, c.meta, err, c.want)
		}
	}
	// A source of 1e6 records/s in front of a stage of one record per ~3 hours.
	job := testJob("pipe")
	job.TaskGroups[0].Meta["trident_capacity"] = "1e6"
	job.TaskGroups[1].Meta["trident_capacity"] = "1e-4"
	want := `pipeline "pipe": operators "gpu" and "src" differ 1e10-fold in instance-seconds per pipeline input record`
	if _, err := ParseJob(job); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("cost spread: error %v, want it to start with %q", err, want)
	}
	// The bounds parse.
	job = testJob("pipe")
	for k, v := range map[string]string{"trident_cpu": "0.01", "trident_amplification": "1e6", "trident_capacity": "1e6",
		"trident_memory_mb": "4194304", "trident_cold_start_s": "86400", "trident_output_bytes": "1e6"} { // 1e12 bytes per input record
		job.TaskGroups[0].Meta[k] = v
	}
	for k, v := range map[string]string{"trident_cpu": "1024", "trident_amplification": "1e3", "trident_gpus": "64",
		"trident_gpu_memory_mb": "1048576", "trident_capacity": "1e4", "trident_order": "1000000"} {
		job.TaskGroups[1].Meta[k] = v
	}
	if _, err := ParseJob(job); err != nil {
		t.Fatalf("bounds: %v", err)
	}
}

// TestParseJobBoundsMetaValues: a trident_* value longer than fsm.MaxMetaValueBytes is
// refused before it is parsed, and an error quoting a long or unprintable value stays
// short.
func TestParseJobBoundsMetaValues(t *testing.T) {
	job := testJob("pipe")
	job.TaskGroups[1].Meta["trident_params"] = "batch=int[1,64]; " + strings.Repeat("x", 5000)
	_, err := ParseJob(job)
	if want := `job "pipe": group "gpu": meta trident_params is 5017 bytes long: want at most 4096`; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	for _, v := range []string{strings.Repeat("\x00", 4096), strings.Repeat("9", 4096), "batch=int[1,64]; " + strings.Repeat("\xff", 4000)} {
		for _, key := range []string{"trident_cpu", "trident_params", "trident_config", "trident_features", "trident_order"} {
			job := testJob("pipe")
			job.TaskGroups[1].Meta[key] = v
			_, err := ParseJob(job)
			if err == nil {
				t.Errorf("%s=%.20q...: accepted", key, v)
			} else if len(err.Error()) > 1024 {
				t.Errorf("%s=%.20q...: error of %d bytes: %.200s", key, v, len(err.Error()), err)
			}
		}
	}
}

// TestParseJobRefusesTooManyGroups: a job of 10,000 operator groups was accepted; at most
// fsm.MaxOperators are, and the refusal is one short line, given before any group is
// parsed.
func TestParseJobRefusesTooManyGroups(t *testing.T) {
	job := testJob("pipe")
	src := job.TaskGroups[0]
	job.TaskGroups = nil
	for i := range 10000 {
		g := *src
		g.Name = ptr(fmt.Sprint("op", i))
		g.Meta = map[string]string{"trident_order": fmt.Sprint(i), "trident_cpu": "1", "trident_memory_mb": "64"}
		job.TaskGroups = append(job.TaskGroups, &g)
	}
	_, err := ParseJob(job)
	if want := `job "pipe": 10000 operator groups (groups with meta trident_order): want at most 256`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	job.TaskGroups = job.TaskGroups[:fsm.MaxOperators]
	if p, err := ParseJob(job); err != nil || len(p.Operators) != fsm.MaxOperators {
		t.Fatalf("%d groups: %v", fsm.MaxOperators, err)
	}
}

// TestParseJobRefusesEqualOrders: two operator groups with one trident_order are refused
// before anything reaches raft, naming both groups (issue #28).
func TestParseJobRefusesEqualOrders(t *testing.T) {
	job := testJob("pipe")
	third := *job.TaskGroups[1]
	third.Name = ptr("gpu2")
	third.Meta = map[string]string{}
	for k, v := range job.TaskGroups[1].Meta {
		third.Meta[k] = v
	}
	job.TaskGroups = append(job.TaskGroups, &third)
	_, err := ParseJob(job)
	if err == nil || !strings.Contains(err.Error(), `of "gpu2" is also the order of "gpu"`) {
		t.Fatalf("error %v, want the duplicate trident_order named", err)
	}
	third.Meta["trident_order"] = "7"
	if _, err := ParseJob(job); err != nil {
		t.Fatal(err)
	}
}

// TestRenderRefusesUnnamedTemplateGroups: a template registered before the parser refused
// unnamed groups is an error for the renderer, not a nil dereference in the leader.
func TestRenderRefusesUnnamedTemplateGroups(t *testing.T) {
	job := testJob("pipe")
	p, err := ParseJob(job)
	if err != nil {
		t.Fatal(err)
	}
	job.TaskGroups = append(job.TaskGroups, &api.TaskGroup{})
	p.Template, _ = json.Marshal(job)
	d := fsm.Decision{Index: 1, Job: "pipe", Operators: map[string]fsm.OpTarget{}}
	if _, err := Render(p, d, PhaseFinal, nil, nil, New(nil, Options{}).o); err == nil || !strings.Contains(err.Error(), "has a group without a name") {
		t.Fatalf("error %v", err)
	}
}
