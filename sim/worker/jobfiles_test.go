package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/strategy/configspace"
)

// The example job files describe exactly the operators of the catalog: one group per
// operator with the opcontract meta keys equal to the models' values, a metrics service and a
// scaling policy querying that group.
func TestJobFilesMatchCatalog(t *testing.T) {
	for _, p := range []*Pipeline{PDFPipeline(), VideoPipeline()} {
		job := p.Name + "-curation"
		b, err := os.ReadFile(filepath.Join("..", "..", "jobs", job+".nomad.hcl"))
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		groups := regexp.MustCompile(`(?m)^  group "([^"]+)" \{`).FindAllStringSubmatchIndex(src, -1)
		if len(groups) != len(p.Operators) {
			t.Errorf("%s: %d groups, catalog has %d operators", job, len(groups), len(p.Operators))
		}
		for i, g := range groups {
			name := src[g[2]:g[3]]
			end := len(src)
			if i+1 < len(groups) {
				end = groups[i+1][0]
			}
			body := src[g[0]:end]
			op, err := p.Operator(name)
			if err != nil {
				t.Errorf("%s: %v", job, err)
				continue
			}
			f := strconv.FormatFloat
			want := map[string]string{
				opcontract.MetaOrder:         fmt.Sprint(op.Order),
				opcontract.MetaCPU:           f(op.CPU, 'f', -1, 64),
				opcontract.MetaMemoryMB:      fmt.Sprint(op.MemoryMB),
				opcontract.MetaGPUs:          fmt.Sprint(op.GPUs),
				opcontract.MetaGPUMemoryMB:   fmt.Sprint(op.GPUMemoryMB),
				opcontract.MetaOutputBytes:   f(op.OutputBytes, 'f', -1, 64),
				opcontract.MetaAmplification: f(op.Amplification, 'f', -1, 64),
				opcontract.MetaFeatures:      strings.Join(op.Features, ","),
				opcontract.MetaParams:        op.Params,
				opcontract.MetaConfig:        op.Defaults,
				opcontract.MetaColdStartSec:  f(op.ColdStartSec, 'f', -1, 64),
				opcontract.MetaMetricsPort:   "metrics",
			}
			for k, v := range want {
				re := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(k) + `\s*=\s*"([^"]*)"`)
				m := re.FindStringSubmatch(body)
				if m == nil {
					t.Errorf("%s/%s: meta %s missing", job, name, k)
				} else if m[1] != v {
					t.Errorf("%s/%s: meta %s = %q, catalog %q", job, name, k, m[1], v)
				}
			}
			for _, must := range []string{
				`name     = "` + job + "-" + name + `"`,
				`query  = "capacity/` + job + "/" + name + `"`,
				`"-pipeline", "` + p.Name + `", "-stage", "` + name + `"`,
			} {
				if !strings.Contains(body, must) {
					t.Errorf("%s/%s: lacks %s", job, name, must)
				}
			}
			if hasDev := strings.Contains(body, `labels   = ["nvidia/gpu"]`); hasDev != (op.GPUs > 0) {
				t.Errorf("%s/%s: device request %v, operator gpus %d", job, name, hasDev, op.GPUs)
			}
			// Accelerator operators bound their input queues; CPU operators do not.
			if hasCap := strings.Contains(body, `"-queue-cap", var.accel_queue_cap]`); hasCap != (op.GPUs > 0) {
				t.Errorf("%s/%s: -queue-cap %v, operator gpus %d", job, name, hasCap, op.GPUs)
			}
		}
		def := regexp.MustCompile(`(?s)variable "accel_queue_cap" \{[^}]*default\s*=\s*"(\d+)"`).FindStringSubmatch(src)
		if def == nil {
			t.Errorf("%s: no variable accel_queue_cap with a numeric default", job)
		} else if maxBatchBound(p) == 0 {
			t.Errorf("%s: no accelerator operator's batch bound found in its parameter space (the check below would pass vacuously)", job)
		} else if n, _ := strconv.Atoi(def[1]); n < maxBatchBound(p) {
			t.Errorf("%s: accel_queue_cap default %d below the largest batch an accelerator operator may be tuned to (%d)", job, n, maxBatchBound(p))
		}
	}
}

// maxBatchBound is the largest batch_size / max_num_seqs the accelerator operators' parameter
// spaces allow, so a default queue bound at least this large never caps one instance's batch.
func maxBatchBound(p *Pipeline) int {
	best := 0
	for _, op := range p.Operators {
		if op.GPUs == 0 {
			continue
		}
		m := regexp.MustCompile(regexp.QuoteMeta(op.BatchKey()) + `=int\[\d+,(\d+)`).FindStringSubmatch(op.Params)
		if m != nil {
			n, _ := strconv.Atoi(m[1])
			best = max(best, n)
		}
	}
	return best
}

// Every operator's parameter space and default config parse with strategy/configspace, the
// parser the planner and the adaptation layer apply to the same meta; every config the space
// can produce (its bounds) is accepted by the operator.
func TestParamsParseWithConfigspace(t *testing.T) {
	for _, p := range []*Pipeline{PDFPipeline(), VideoPipeline()} {
		for _, op := range p.Operators {
			sp, cur, err := configspace.FromMeta(op.Name, map[string]string{
				opcontract.MetaParams: op.Params, opcontract.MetaConfig: op.Defaults})
			if err != nil {
				t.Errorf("%s/%s: %v", p.Name, op.Name, err)
				continue
			}
			for _, u := range [][]float64{zeros(sp.Dim(), 0), zeros(sp.Dim(), 0.999)} {
				c, err := sp.Decode(u)
				if err != nil {
					t.Fatalf("%s/%s: decode %v: %v", p.Name, op.Name, u, err)
				}
				wc, err := ParseConfig(c.String())
				if err != nil {
					t.Fatalf("%s/%s: %q: %v", p.Name, op.Name, c.String(), err)
				}
				if err := op.Validate(op.DefaultConfig().Merge(wc)); err != nil {
					t.Errorf("%s/%s: space config %q rejected: %v", p.Name, op.Name, c.String(), err)
				}
			}
			wc, _ := ParseConfig(cur.String())
			if wc.String() != op.DefaultConfig().String() {
				t.Errorf("%s/%s: configspace reads defaults as %q, worker as %q", p.Name, op.Name, wc, op.DefaultConfig())
			}
		}
	}
}

func zeros(n int, v float64) []float64 {
	u := make([]float64, n)
	for i := range u {
		u[i] = v
	}
	return u
}
