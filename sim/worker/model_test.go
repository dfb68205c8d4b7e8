package worker

import (
	"math"
	"testing"
)

func mustConfig(t *testing.T, s string) Config {
	t.Helper()
	c, err := ParseConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustOp(t *testing.T, p *Pipeline, name string) *Operator {
	t.Helper()
	op, err := p.Operator(name)
	if err != nil {
		t.Fatal(err)
	}
	return op
}

func TestParseConfig(t *testing.T) {
	c := mustConfig(t, " max_num_seqs=64, block_size = 16;threads=2 ")
	if got := c.String(); got != "block_size=16,max_num_seqs=64,threads=2" {
		t.Fatalf("String() = %q", got)
	}
	if n, err := c.Int("max_num_seqs", 1); err != nil || n != 64 {
		t.Fatalf("Int = %d, %v", n, err)
	}
	if _, err := ParseConfig("a=1,b"); err == nil {
		t.Fatal("want error for entry without =")
	}
	if _, err := c.Merge(Config{"block_size": "x"}).Int("block_size", 0); err == nil {
		t.Fatal("want error for non-numeric value")
	}
	op := mustOp(t, PDFPipeline(), "ocr-text")
	if err := op.Validate(mustConfig(t, "max_num_seqs=8,bogus=1")); err == nil {
		t.Fatal("Validate accepted an unknown key")
	}
	if err := op.Validate(op.DefaultConfig()); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

// Throughput of an LLM operator rises with max_num_seqs up to its knee and then flattens.
func TestLLMThroughputKnee(t *testing.T) {
	op := mustOp(t, PDFPipeline(), "ocr-text")
	m := op.LLMModel
	r := Record{ID: "x", Features: map[string]float64{"input_tokens": 1000, "output_tokens": 300}}
	c := op.DefaultConfig()
	prev := 0.0
	for b := 1; b <= 512; b *= 2 {
		thr := m.Throughput(r, b, c)
		gain := thr / prev
		switch {
		case b == 1:
		case float64(b) <= m.Knee/2:
			if gain < 1.6 { // well below the knee a doubling nearly doubles throughput
				t.Errorf("b=%d: throughput gain %.2f < 1.6 below the knee", b, gain)
			}
		case float64(b) >= 2*m.Knee:
			if gain > 1.25 || gain < 0.95 { // above the knee it saturates
				t.Errorf("b=%d: throughput gain %.2f outside [0.95,1.25] above the knee", b, gain)
			}
		}
		if b > 1 && thr < prev*0.95 {
			t.Errorf("b=%d: throughput fell from %.3f to %.3f", b, prev, thr)
		}
		prev = thr
	}
}

// The batched vision models behave the same way in batch_size.
func TestVisionThroughputKnee(t *testing.T) {
	op := mustOp(t, VideoPipeline(), "aesthetic")
	m := op.VisionModel
	r := Record{ID: "x", Features: map[string]float64{"frames": 8, "height": 720}}
	lo, knee, hi := m.Throughput(r, 1), m.Throughput(r, int(m.Knee)), m.Throughput(r, 8*int(m.Knee))
	if knee < 5*lo {
		t.Errorf("throughput at the knee %.1f/s is not >5x batch 1 (%.1f/s)", knee, lo)
	}
	if hi > 1.5*knee {
		t.Errorf("throughput at 8x knee %.1f/s is not within 1.5x of the knee (%.1f/s)", hi, knee)
	}
}

// Peak memory grows with the batch and with the records' features; above the device limit the
// worker treats it as an OOM kill.
func TestMemoryAndOOMThreshold(t *testing.T) {
	op := mustOp(t, PDFPipeline(), "ocr-table")
	m := op.LLMModel
	long := Record{ID: "t", Features: map[string]float64{"input_tokens": 3500, "output_tokens": 1400}}
	short := Record{ID: "s", Features: map[string]float64{"input_tokens": 1000, "output_tokens": 200}}
	limit := float64(op.GPUMemoryMB)
	batch := func(r Record, n int) []Record {
		b := make([]Record, n)
		for i := range b {
			b[i] = r
		}
		return b
	}
	c8, c16 := mustConfig(t, "max_num_seqs=8"), mustConfig(t, "max_num_seqs=16")
	if mem := m.PeakMemMiB(batch(long, 8), c8); mem > limit {
		t.Errorf("8 long tables need %.0f MiB > %.0f: the default would OOM", mem, limit)
	}
	if mem := m.PeakMemMiB(batch(long, 16), c16); mem <= limit {
		t.Errorf("16 long tables need %.0f MiB <= %.0f: expected an OOM", mem, limit)
	}
	if mem := m.PeakMemMiB(batch(short, 16), c16); mem > limit {
		t.Errorf("16 short tables need %.0f MiB > %.0f: regime should matter", mem, limit)
	}
	// Block rounding: a larger block never needs less memory.
	if a, b := m.SeqMemMiB(long, mustConfig(t, "block_size=8")), m.SeqMemMiB(long, mustConfig(t, "block_size=32")); b < a {
		t.Errorf("block 32 needs %.1f MiB < block 8 %.1f MiB", b, a)
	}
	vm := mustOp(t, VideoPipeline(), "text-detect").VisionModel
	k4 := Record{ID: "k", Features: map[string]float64{"frames": 16, "height": 2160}}
	if mem := vm.PeakMemMiB(batch(k4, 4)); mem > limit {
		t.Errorf("text-detect default batch 4 on 4K needs %.0f MiB > limit", mem)
	}
	if mem := vm.PeakMemMiB(batch(k4, 64)); mem <= limit {
		t.Errorf("text-detect batch 64 on 4K needs %.0f MiB <= limit: expected an OOM", mem)
	}
}

// With default configs no record of any regime can push an accelerator operator over its
// device memory even in a full batch of the worst records; the largest configs can.
func TestDefaultsNeverOOM(t *testing.T) {
	for _, p := range []*Pipeline{PDFPipeline(), VideoPipeline()} {
		s := Spec{Pipeline: p.Name, Docs: 300, Regimes: len(p.Regimes), Seed: 3}
		worst := map[string]Record{} // operator -> input with the largest single-record memory
		walkInputs(t, p, s, func(op *Operator, r Record) {
			if op.GPUs == 0 {
				return
			}
			if w, ok := worst[op.Name]; !ok || memOne(op, r) > memOne(op, w) {
				worst[op.Name] = r
			}
		})
		for name, r := range worst {
			op := mustOp(t, p, name)
			c := op.DefaultConfig()
			n, _ := c.Int(op.BatchKey(), 1)
			full := make([]Record, n)
			for i := range full {
				full[i] = r
			}
			if mem := memBatch(op, full, c); mem > float64(op.GPUMemoryMB) {
				t.Errorf("%s/%s: default config, full batch of worst record: %.0f MiB > %d", p.Name, name, mem, op.GPUMemoryMB)
			}
			big := c.Merge(Config{op.BatchKey(): "256"})
			full = make([]Record, 256)
			for i := range full {
				full[i] = r
			}
			if mem := memBatch(op, full, big); mem <= float64(op.GPUMemoryMB) {
				t.Errorf("%s/%s: batch 256 of worst record fits (%.0f MiB): no OOM region", p.Name, name, mem)
			}
		}
	}
}

func memOne(op *Operator, r Record) float64 { return memBatch(op, []Record{r}, op.DefaultConfig()) }

func memBatch(op *Operator, b []Record, c Config) float64 {
	if op.Engine == EngineLLM {
		return op.LLMModel.PeakMemMiB(b, c)
	}
	return op.VisionModel.PeakMemMiB(b)
}

// walkInputs calls fn with every (operator, input record) of the dataset.
func walkInputs(t *testing.T, p *Pipeline, s Spec, fn func(*Operator, Record)) {
	t.Helper()
	type item struct {
		op  string
		rec Record
	}
	var q []item
	for _, r := range Generate(p, s) {
		q = append(q, item{p.Operators[0].Name, r})
	}
	for len(q) > 0 {
		it := q[0]
		q = q[1:]
		op := mustOp(t, p, it.op)
		fn(op, it.rec)
		for _, out := range op.Expand(it.rec) {
			if next := op.Next(out); next != "" {
				q = append(q, item{next, out})
			}
		}
	}
}

// Fan-out and filters are deterministic in the record, so redelivery reproduces output IDs.
func TestExpandDeterministicAndRegimes(t *testing.T) {
	p := PDFPipeline()
	s := Spec{Pipeline: "pdf", Docs: 90, Regimes: 3, Seed: 7}
	a, err := Expected(p, s)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Expected(PDFPipeline(), s)
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("expected sets differ or empty: %d vs %d", len(a), len(b))
	}
	for id := range a {
		if _, ok := b[id]; !ok {
			t.Fatalf("id %s not reproduced", id)
		}
	}
	// Regimes are contiguous and in order, and shift the workload: annual reports have longer
	// tables than academic papers.
	tok := map[int][]float64{}
	walkInputs(t, p, s, func(op *Operator, r Record) {
		if op.Name == "ocr-table" {
			tok[r.Regime] = append(tok[r.Regime], r.F("input_tokens"))
		}
	})
	if mean(tok[1]) < 1.4*mean(tok[0]) {
		t.Errorf("annual-report tables (%.0f tokens) not clearly longer than academic (%.0f)", mean(tok[1]), mean(tok[0]))
	}
	for i := 1; i < s.Docs; i++ {
		if s.Regime(i) < s.Regime(i-1) {
			t.Fatalf("regime goes back at record %d", i)
		}
	}
	if s.Regime(0) != 0 || s.Regime(s.Docs-1) != 2 {
		t.Fatalf("regimes span %d..%d, want 0..2", s.Regime(0), s.Regime(s.Docs-1))
	}
	// Video: filters drop a deterministic share of clips (0.65*0.8 = 52% survive, +-10 points).
	v := VideoPipeline()
	vs := Spec{Pipeline: "video", Docs: 40, Regimes: 2, Seed: 1}
	clips := 0
	walkInputs(t, v, vs, func(op *Operator, r Record) {
		if op.Name == "aesthetic" {
			clips++
		}
	})
	final, err := Expected(v, vs)
	if err != nil {
		t.Fatal(err)
	}
	if frac := float64(len(final)) / float64(clips); math.Abs(frac-0.52) > 0.10 {
		t.Errorf("video filters keep %.2f of clips, want 0.52+-0.10", frac)
	}
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

// Threads beyond the cores slow each record down proportionally.
func TestCPUContention(t *testing.T) {
	op := mustOp(t, PDFPipeline(), "parse")
	r := Record{ID: "d", Features: map[string]float64{"pages": 10}}
	one := op.CPUModel.ServiceTime(r, 1, 2)
	if two := op.CPUModel.ServiceTime(r, 2, 2); two != one {
		t.Errorf("2 threads on 2 cores: %.3f != %.3f", two, one)
	}
	if four := op.CPUModel.ServiceTime(r, 4, 2); math.Abs(four-2*one) > 1e-9 {
		t.Errorf("4 threads on 2 cores: %.3f, want %.3f", four, 2*one)
	}
}

// The feature window keeps the last featureWindow values and reports their mean and std.
func TestFeatureWindow(t *testing.T) {
	r := &ring{buf: make([]float64, 0, 4)}
	for _, x := range []float64{100, 100, 1, 2, 3, 4} { // the two 100s fall out of the window
		r.add(x)
	}
	mean, std := r.stats()
	if math.Abs(mean-2.5) > 1e-12 || math.Abs(std-math.Sqrt(1.25)) > 1e-12 {
		t.Fatalf("mean %v std %v, want 2.5 and sqrt(1.25)", mean, std)
	}
}
