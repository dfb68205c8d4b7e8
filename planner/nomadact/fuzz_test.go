package nomadact

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/fsm"
)

// pdfJob is a job shaped like jobs/pdf-curation.nomad.hcl: its operator groups with their
// meta (three OCR branches share trident_order 4), scaling policies, and a non-operator
// group.
func pdfJob() *api.Job {
	job := testJob("pdf-curation")
	task := job.TaskGroups[0].Tasks
	group := func(name string, meta map[string]string) *api.TaskGroup {
		return &api.TaskGroup{Name: ptr(name), Count: ptr(1), Meta: meta, Tasks: task,
			Scaling: &api.ScalingPolicy{Min: ptr(int64(1)), Max: ptr(int64(16)), Enabled: ptr(true)}}
	}
	cpu := func(order, cores, mem, out, amp, feats, config, cold string) map[string]string {
		return map[string]string{"trident_order": order, "trident_cpu": cores, "trident_memory_mb": mem, "trident_gpus": "0",
			"trident_synchronous": "true", "trident_gpu_memory_mb": "0", "trident_output_bytes": out, "trident_amplification": amp,
			"trident_features": feats, "trident_params": "threads=int[1,8]", "trident_config": config, "trident_config_epoch": "0",
			"trident_cold_start_s": cold, "trident_metrics_port": "metrics"}
	}
	ocr := func(config string) map[string]string {
		return map[string]string{"trident_order": "4", "trident_cpu": "2", "trident_memory_mb": "4096", "trident_gpus": "1",
			"trident_gpu_memory_mb": "40960", "trident_output_bytes": "2000", "trident_amplification": "1",
			"trident_features": "input_tokens,output_tokens",
			"trident_params":   "max_num_seqs=int[4,256,log]; block_size=cat{8,16,32}; max_num_batched_tokens=int[2048,32768,log]",
			"trident_config":   config, "trident_config_epoch": "0", "trident_cold_start_s": "30", "trident_capacity": "12.5",
			"trident_metrics_port": "metrics"}
	}
	job.TaskGroups = []*api.TaskGroup{
		group("parse", cpu("0", "1", "1024", "1200000", "1", "pages", "threads=1", "2")),
		group("layout", cpu("1", "2", "2048", "1500000", "1", "pages,density", "threads=2", "5")),
		group("segment", cpu("2", "1", "1024", "60000", "10", "pages", "threads=1", "2")),
		group("ocr-text", ocr("max_num_seqs=8,block_size=16,max_num_batched_tokens=8192")),
		group("ocr-table", ocr("max_num_seqs=8,block_size=16,max_num_batched_tokens=8192")),
		group("ocr-formula", ocr("max_num_seqs=16,block_size=16,max_num_batched_tokens=8192")),
		group("aggregate", cpu("5", "1", "1024", "2000", "1", "output_tokens", "threads=1", "2")),
		{Name: ptr("nats-sidecar"), Count: ptr(1), Tasks: task},
	}
	return job
}

// FuzzParsePipeline feeds arbitrary job JSON through the parser. It must never panic; a
// pipeline it accepts passes fsm.ValidatePipeline and renders into a job version whose
// group names are all distinct (Nomad refuses a version that redefines a task group); an
// error it returns stays under 4 KiB.
func FuzzParsePipeline(f *testing.F) {
	seed := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(testJob("pipe"))
	seed(pdfJob())
	seed(map[string]any{"Job": pdfJob()}) // `nomad job run -output`
	collide := testJob("pipe")
	collide.TaskGroups[1].Name = ptr("src@c1.g0")
	seed(collide)
	absurd := testJob("pipe")
	absurd.TaskGroups[0].Meta["trident_amplification"] = "1e12"
	absurd.TaskGroups[1].Meta["trident_capacity"] = "1e300"
	seed(absurd)
	f.Add([]byte(`{"ID":"j","TaskGroups":[{"Name":"a","Meta":{"trident_order":"0","trident_cpu":"1e-9","trident_memory_mb":"1"},"Tasks":[{}]}]}`))
	f.Add([]byte(`{"ID":"j","TaskGroups":[{"Name":"a","Meta":{"trident_order":"0","trident_cpu":"1","trident_memory_mb":"1","trident_params":"x=int[1,9]","trident_config":"x=10"},"Tasks":[{}]}]}`))
	f.Add([]byte(`{}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		job, err := DecodeJob(data)
		if err != nil {
			if len(err.Error()) >= 4096 {
				t.Fatalf("DecodeJob error of %d bytes: %.300s", len(err.Error()), err)
			}
			return
		}
		p, err := ParseJob(job)
		if err != nil {
			if len(err.Error()) >= 4096 {
				t.Fatalf("ParseJob error of %d bytes: %.300s", len(err.Error()), err)
			}
			return
		}
		if err := fsm.ValidatePipeline(p); err != nil {
			t.Fatalf("accepted pipeline fails ValidatePipeline: %v", err)
		}
		// Render a decision that runs every operator on two nodes, on the current and on a
		// candidate configuration: every group name of the version must be distinct.
		if p.Template, err = json.Marshal(job); err != nil {
			t.Fatal(err)
		}
		d := fsm.Decision{Index: 3, Job: p.Job, Operators: map[string]fsm.OpTarget{}}
		for _, o := range p.Operators {
			t := fsm.OpTarget{Config: o.Config, Epoch: 1, Nodes: map[string]fsm.Placement{"c1": {Current: 1}, "c1.g0": {Current: 1}}}
			if o.Config != "" {
				// A candidate exists only for an operator with a config (the planner
				// refuses one for an operator without: CheckConfig); appending to the last
				// value keeps it k=v.
				t.CandidateConfig, t.Nodes["c1"] = o.Config+"x", fsm.Placement{Current: 1, Candidate: 1}
			}
			d.Operators[o.Name] = t
		}
		v, err := Render(p, d, PhaseFinal, nil, nil, New(nil, Options{}).o)
		if err != nil {
			t.Fatalf("render an accepted pipeline: %v", err)
		}
		names := map[string]bool{}
		for _, g := range v.TaskGroups {
			if g == nil || g.Name == nil {
				continue
			}
			if names[*g.Name] {
				t.Fatalf("rendered version redefines task group %q (operators %v)", *g.Name, operatorNames(p))
			}
			names[*g.Name] = true
		}
	})
}

func operatorNames(p *fsm.Pipeline) string {
	s := ""
	for _, o := range p.Operators {
		s += fmt.Sprintf("%q ", o.Name)
	}
	return s
}
