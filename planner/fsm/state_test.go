package fsm

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestValidateOperatorRanges: every field outside its range is refused with an error naming
// the operator, the meta key, the value and the allowed range; the bounds themselves pass.
func TestValidateOperatorRanges(t *testing.T) {
	ok := func() Operator {
		return Operator{Name: "embed", Order: 1, CPU: 2, MemoryMB: 1024, GPUs: 1, GPUMemoryMB: 8000,
			OutputBytes: 100, Amplification: 1, ColdStartSec: 30, CapacityHint: 10, Config: "batch=8"}
	}
	if err := ValidateOperator(ok()); err != nil {
		t.Fatal(err)
	}
	edges := map[string]func(*Operator){
		"min cpu":           func(o *Operator) { o.CPU = MinCPU },
		"max cpu":           func(o *Operator) { o.CPU = MaxCPU },
		"max memory":        func(o *Operator) { o.MemoryMB = MaxMemoryMB },
		"max gpus":          func(o *Operator) { o.GPUs = MaxGPUs },
		"max gpu memory":    func(o *Operator) { o.GPUMemoryMB = MaxGPUMemoryMB },
		"max output":        func(o *Operator) { o.OutputBytes = MaxOutputBytes },
		"min amplification": func(o *Operator) { o.Amplification = MinAmplification },
		"max amplification": func(o *Operator) { o.Amplification = MaxAmplification },
		"max cold start":    func(o *Operator) { o.ColdStartSec = MaxColdStartSec },
		"min capacity":      func(o *Operator) { o.CapacityHint = MinCapacity },
		"max capacity":      func(o *Operator) { o.CapacityHint = MaxCapacity },
		"no capacity":       func(o *Operator) { o.CapacityHint = 0 },
		"max order":         func(o *Operator) { o.Order = MaxOrder },
		"max features":      func(o *Operator) { o.Features = make([]string, MaxFeatures); fill(o.Features) },
		"longest name":      func(o *Operator) { o.Name = strings.Repeat("n", MaxNameBytes) },
		"longest config":    func(o *Operator) { o.Config = strings.Repeat("c", MaxMetaValueBytes) },
		"contention":        func(o *Operator) { o.Contention = []Contention{{"network", MinContentionWeight}, {"io", 1}} },
	}
	for name, edit := range edges {
		o := ok()
		edit(&o)
		if err := ValidateOperator(o); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := []struct {
		edit func(*Operator)
		want string
	}{
		{func(o *Operator) { o.CPU = 1e-9 }, `operator "embed": trident_cpu=1e-9 is out of range: want cores per instance in [0.01, 1024]`},
		{func(o *Operator) { o.CPU = 2048 }, `trident_cpu=2048 is out of range`},
		{func(o *Operator) { o.CPU = math.NaN() }, `trident_cpu=NaN is out of range`},
		{func(o *Operator) { o.MemoryMB = 0 }, `trident_memory_mb=0 is out of range: want MB per instance in [1, 4194304]`},
		{func(o *Operator) { o.MemoryMB = 5 << 20 }, `trident_memory_mb=5242880 is out of range`},
		{func(o *Operator) { o.GPUs = 65 }, `trident_gpus=65 is out of range: want accelerators per instance in [0, 64]`},
		{func(o *Operator) { o.GPUs = -1 }, `trident_gpus=-1 is out of range`},
		{func(o *Operator) { o.GPUMemoryMB = 2 << 20 }, `trident_gpu_memory_mb=2097152 is out of range: want MB per accelerator in [0, 1048576]`},
		{func(o *Operator) { o.OutputBytes = 1e12 }, `trident_output_bytes=1e12 is out of range: want bytes per record in [0, 68719476736]`},
		{func(o *Operator) { o.OutputBytes = math.Inf(1) }, `trident_output_bytes=+Inf is out of range`},
		{func(o *Operator) { o.Amplification = 1e12 }, `trident_amplification=1e12 is out of range: want output records per input record in [1e-6, 1e6]`},
		{func(o *Operator) { o.Amplification = 1e-12 }, `trident_amplification=1e-12 is out of range`},
		{func(o *Operator) { o.Amplification = 1e200 }, `trident_amplification=1e200 is out of range`},
		{func(o *Operator) { o.Amplification = 0 }, `trident_amplification=0 is out of range`},
		{func(o *Operator) { o.ColdStartSec = 1e6 }, `trident_cold_start_s=1e6 is out of range: want seconds in [0, 86400]`},
		{func(o *Operator) { o.CapacityHint = 1e300 }, `trident_capacity=1e300 is out of range: want 0 (unset) or records/s in [0.0001, 1e6]`},
		{func(o *Operator) { o.CapacityHint = 1e-9 }, `trident_capacity=1e-9 is out of range`},
		{func(o *Operator) { o.Order = -1 }, `trident_order=-1 is out of range: want an integer in [0, 1000000]`},
		{func(o *Operator) { o.Order = MaxOrder + 1 }, `trident_order=1000001 is out of range`},
		{func(o *Operator) { o.Features = make([]string, MaxFeatures+1); fill(o.Features) }, `trident_features=<65 names> is out of range: want at most 64 names`},
		{func(o *Operator) { o.Features = []string{"a\nb"} }, `trident_features: feature "a\nb" contains the non-printable character '\n'`},
		{func(o *Operator) { o.Params = strings.Repeat("p", MaxMetaValueBytes+1) }, `trident_params=<4097 bytes> is out of range: want at most 4096 bytes`},
		{func(o *Operator) { o.Config = strings.Repeat("c", MaxMetaValueBytes+1) }, `trident_config=<4097 bytes> is out of range`},
		{func(o *Operator) { o.MinInstances = 3; o.MaxInstances = 2 }, `scaling min=3 max=2`},
		{func(o *Operator) { o.Contention = []Contention{{"network", 0.001}} }, `trident_contention: network weight 0.001 is out of range: want [0.01, 1]`},
		{func(o *Operator) { o.Contention = []Contention{{"io", math.NaN()}} }, `trident_contention: io weight NaN is out of range`},
		{func(o *Operator) { o.Contention = []Contention{{"", 1}} }, `trident_contention: kind "" is empty`},
		{func(o *Operator) { o.Contention = []Contention{{"io", 1}, {"io", 0.5}} }, `trident_contention: kind "io" listed twice`},
		{func(o *Operator) { o.Contention = make([]Contention, MaxContention+1) }, `trident_contention lists 5 kinds: want at most 4`},
	}
	for _, c := range bad {
		o := ok()
		c.edit(&o)
		err := ValidateOperator(o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want it to contain %q", err, c.want)
		}
	}
}

func fill(names []string) {
	for i := range names {
		names[i] = fmt.Sprint("f", i)
	}
}

// TestOperatorNamesCannotCollideWithRenderedGroups: '@' is the separator of the groups the
// actuator renders (<op>@<node>.g<generation>), so no operator name may contain it; '/'
// and the path segments are refused because API paths and trident-apm queries split on
// them; names are bounded and printable.
func TestOperatorNamesCannotCollideWithRenderedGroups(t *testing.T) {
	for name, want := range map[string]string{
		"src@c1.g0":                     `operator "src@c1.g0": name contains '@', which is reserved for the groups the planner renders`,
		"a/b":                           `name contains '/'`,
		"..":                            `name is a path segment`,
		"":                              `operator "": name is empty`,
		"tab\there":                     `name contains the non-printable character '\t'`,
		strings.Repeat("x", 129):        `name is 129 bytes long: want at most 128`,
		string([]byte{0xff, 0xfe, 'a'}): `name is not valid UTF-8`,
	} {
		o := Operator{Name: name, CPU: 1, MemoryMB: 1, Amplification: 1}
		if err := ValidateOperator(o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("name %q: error %v, want it to contain %q", name, err, want)
		}
	}
	for _, name := range []string{"ocr-text", "OCR table", "stage_1.v2", "décodeur"} {
		if err := ValidateOperatorName(name); err != nil {
			t.Errorf("name %q: %v", name, err)
		}
	}
}

// TestValidatePipelineProducts: the ranges that depend on the whole pipeline. The product
// of trident_amplification after every operator stays in [1e-9, 1e9] (the probe's 1e200
// per operator overflowed to +Inf, which the MILP refused every round), an
// operator emits at most 1e12 bytes per pipeline input record, and the operators' costs in
// instance-seconds per pipeline input record differ at most 1e8-fold.
func TestValidatePipelineProducts(t *testing.T) {
	op := func(name string, order int, amp, capacity float64) Operator {
		return Operator{Name: name, Order: order, CPU: 1, MemoryMB: 1024, Amplification: amp, OutputBytes: 100, CapacityHint: capacity}
	}
	// costs 1e-3, 1 and 1e3 instance-seconds per input record
	p := &Pipeline{Job: "j", Operators: []Operator{op("a", 0, 1e6, 1e3), op("b", 1, 1e3, 1e6), op("c", 2, 1, 1e6)}}
	if err := ValidatePipeline(p); err != nil {
		t.Fatalf("product 1e9: %v", err)
	}
	p.Operators[1].Amplification = 1e4
	want := `pipeline "j": operator "b": trident_amplification=10000 brings the product of trident_amplification along the pipeline (records per pipeline input record) to 1e10: want it in [1e-9, 1e9] after every operator`
	if err := ValidatePipeline(p); err == nil || err.Error() != want {
		t.Errorf("product 1e10: error %v, want %q", err, want)
	}
	p = &Pipeline{Job: "j", Operators: []Operator{op("a", 0, 1e-3, 0), op("b", 1, 1e-3, 0), op("c", 2, 1e-3, 0), op("d", 3, 1e-3, 0)}}
	if err := ValidatePipeline(p); err == nil || !strings.Contains(err.Error(), `operator "d": trident_amplification=0.001 brings the product of trident_amplification along the pipeline (records per pipeline input record) to 1e-12`) {
		t.Errorf("product 1e-12: error %v", err)
	}
	p.Operators = p.Operators[:3]
	if err := ValidatePipeline(p); err != nil {
		t.Errorf("product 1e-9 (rounded below): %v", err)
	}
	// 1e3 records of 1e9 bytes: 1e12 bytes per pipeline input record.
	p = &Pipeline{Job: "j", Operators: []Operator{op("a", 0, 1e3, 0), op("b", 1, 1, 1e3)}}
	p.Operators[0].OutputBytes = 1e9
	if err := ValidatePipeline(p); err != nil {
		t.Fatalf("1e12 bytes: %v", err)
	}
	p.Operators[0].OutputBytes = 1e10
	want = `pipeline "j": operator "a": trident_output_bytes=1e10 for the 1000 records it emits per pipeline input record (the product of trident_amplification up to it) is 1e13 bytes per pipeline input record: want at most 1e12`
	if err := ValidatePipeline(p); err == nil || err.Error() != want {
		t.Errorf("1e13 bytes: error %v, want %q", err, want)
	}
}

// TestValidatePipelineCostSpread: the MILP gives no instance to an operator that needs
// less than 1e-9 of one at the throughput the most expensive operator allows, and then
// plans throughput 0; the operators' instance-seconds per pipeline input record (records
// received over trident_capacity, 1 record/s when unset) differ at most 1e8-fold.
func TestValidatePipelineCostSpread(t *testing.T) {
	op := func(name string, order int, amp, capacity float64) Operator {
		return Operator{Name: name, Order: order, CPU: 1, MemoryMB: 1024, Amplification: amp, CapacityHint: capacity}
	}
	// Without hints the cost is the records received: 1, 1e6, 1e8.
	p := &Pipeline{Job: "j", Operators: []Operator{op("a", 0, 1e6, 0), op("b", 1, 1e2, 0), op("c", 2, 1, 0)}}
	if err := ValidatePipeline(p); err != nil {
		t.Fatalf("spread 1e8: %v", err)
	}
	p.Operators[1].Amplification = 1e3
	want := `pipeline "j": operators "c" and "a" differ 1e9-fold in instance-seconds per pipeline input record (1e9 and 1: the records they receive per pipeline input record, the product of trident_amplification before them, over trident_capacity or the planner's default of 1 record/s): want at most 1e8-fold (declare trident_capacity where it is missing)`
	if err := ValidatePipeline(p); err == nil || err.Error() != want {
		t.Errorf("spread 1e9: error %v, want %q", err, want)
	}
	p.Operators[2].CapacityHint = 100
	if err := ValidatePipeline(p); err != nil {
		t.Fatalf("spread 1e7 with c's capacity declared: %v", err)
	}
	// A fast source in front of a slow stage: 1e-6 and 1e4 s per input record.
	p = &Pipeline{Job: "j", Operators: []Operator{op("src", 0, 1, 1e6), op("slow", 1, 1, 1e-4)}}
	if err := ValidatePipeline(p); err == nil || !strings.Contains(err.Error(), `operators "slow" and "src" differ 1e10-fold`) {
		t.Errorf("spread 1e10: error %v", err)
	}
}

// TestValidatePipelineBoundsOperators: at most MaxOperators operators, and a short error
// for a pipeline of 10,000.
func TestValidatePipelineBoundsOperators(t *testing.T) {
	p := &Pipeline{Job: "j"}
	for i := range 10000 {
		p.Operators = append(p.Operators, Operator{Name: fmt.Sprint("op", i), Order: i, CPU: 1, MemoryMB: 1, Amplification: 1})
	}
	err := ValidatePipeline(p)
	if want := `pipeline "j": 10000 operator groups (groups with meta trident_order): want at most 256`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	p.Operators = p.Operators[:MaxOperators]
	if err := ValidatePipeline(p); err != nil {
		t.Fatal(err)
	}
	p.Job = strings.Repeat("j", 10000)
	if err := ValidatePipeline(p); err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), "10000 bytes long") {
		t.Fatalf("long job ID: error %v", err)
	}
}

// TestFSMAdmitsOnlyInRangePipelines: Check (run before a registration is proposed)
// refuses every out-of-range pipeline, so none reaches the log; a committed entry is
// applied under the unchanging committed rules, so an entry an older version committed
// replays alike on every server whatever its version.
func TestFSMAdmitsOnlyInRangePipelines(t *testing.T) {
	for _, edit := range []func(*Pipeline){
		func(p *Pipeline) { p.Operators[0].CPU = 1e-9 },
		func(p *Pipeline) { p.Operators[1].CapacityHint = 1e300 },
		func(p *Pipeline) { p.Operators[0].Name = "parse@a.g0" },
		func(p *Pipeline) { p.Operators[0].Amplification, p.Operators[1].Amplification = 1e6, 1e6 },
	} {
		a := &applier{t: t, f: New(nil)}
		p := pipe()
		edit(p)
		if err := a.f.Check(Command{Op: OpRegisterPipeline, Pipeline: p}); !errors.Is(err, ErrRejected) {
			t.Errorf("admitted %+v: %v", p.Operators, err)
		}
		if err := a.do(Command{Op: OpRegisterPipeline, Pipeline: p}); err != nil {
			t.Errorf("a committed registration did not replay: %v", err)
		}
	}
	// What the committed rules refuse, they refuse under every version.
	a := &applier{t: t, f: New(nil)}
	bad := pipe()
	bad.Operators[0].CPU = -1
	if err := a.do(Command{Op: OpRegisterPipeline, Pipeline: bad}); err == nil {
		t.Fatal("a negative cpu was applied")
	}
}

func TestShortListAndClip(t *testing.T) {
	items := make([]string, 10000)
	fill(items)
	if got := ShortList(items, 5); got != "f0, f1, f2, f3, f4 and 9995 more" {
		t.Errorf("ShortList = %q", got)
	}
	if got := ShortList(items[:2], 5); got != "f0, f1" {
		t.Errorf("ShortList = %q", got)
	}
	if got := Clip("ééé", 3); got != "é..." {
		t.Errorf("Clip = %q", got)
	}
	if got := Short(strings.Repeat("x", 1000)); len(got) != 67 {
		t.Errorf("Short: %d bytes", len(got))
	}
}

// TestValidatePipelineUniqueOrder: two operators with one trident_order are refused with an
// error naming both groups (the chain's order would otherwise be the job file's group order).
func TestValidatePipelineUniqueOrder(t *testing.T) {
	op := func(name string, order int) Operator {
		return Operator{Name: name, Order: order, CPU: 1, MemoryMB: 1024, Amplification: 1}
	}
	p := &Pipeline{Job: "j", Operators: []Operator{op("parse", 0), op("ocr-text", 4), op("ocr-table", 4)}}
	want := `pipeline "j": trident_order 4 of "ocr-table" is also the order of "ocr-text": every operator needs its own stage index`
	if err := ValidatePipeline(p); err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	p.Operators[2].Order = 5
	if err := ValidatePipeline(p); err != nil {
		t.Fatal(err)
	}
}
