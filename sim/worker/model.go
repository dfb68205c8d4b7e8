package worker

import (
	"fmt"
	"math"
	"strings"
)

// This file holds the behaviour models of the simulated operators as pure functions of the
// records and the config: fan-out (Expand), routing (Next), service time (seconds, before the
// -speed scaling) and peak device memory (MiB). The worker runtime and the dataset verifier call
// exactly these functions, so a test of the models is a test of what the pipeline does.

// Engine is how an operator services records.
type Engine int

const (
	// EngineCPU services records one at a time on `threads` concurrent threads.
	EngineCPU Engine = iota
	// EngineBatch is a synchronous batched vision model on an accelerator: it collects up to
	// batch_size records, then runs them together (padded to the largest item).
	EngineBatch
	// EngineLLM is an LLM-like engine with continuous batching on an accelerator: up to
	// max_num_seqs sequences in flight, new ones admitted while others decode.
	EngineLLM
)

// String names the engine.
func (e Engine) String() string {
	switch e {
	case EngineCPU:
		return "cpu"
	case EngineBatch:
		return "batch"
	case EngineLLM:
		return "llm"
	}
	return fmt.Sprintf("engine(%d)", int(e))
}

// CPUModel is the cost of a per-record CPU operator.
type CPUModel struct {
	Time func(r Record) float64 // seconds of one core for one record
}

// ServiceTime is the time of one record when threads threads share cpus cores.
func (m CPUModel) ServiceTime(r Record, threads int, cpus float64) float64 {
	t := m.Time(r)
	if cpus > 0 && float64(threads) > cpus {
		t *= float64(threads) / cpus
	}
	return t
}

// VisionModel is a synchronous batched accelerator model. A batch is padded to its largest item.
type VisionModel struct {
	WeightsMiB  float64                // resident model weights
	ActMiB      float64                // activation memory per work unit per batch slot
	OverheadSec float64                // launch overhead per batch
	UnitSec     float64                // seconds per work unit at saturation
	Knee        float64                // batch size where the device saturates
	Work        func(r Record) float64 // work units of one record
}

func (m VisionModel) maxWork(batch []Record) float64 {
	w := 0.0
	for _, r := range batch {
		w = math.Max(w, m.Work(r))
	}
	return w
}

// BatchTime is the service time of one batch: overhead + unit*w_max*sqrt(B^2+knee^2), so the
// throughput B/t rises almost linearly below the knee and saturates above it.
func (m VisionModel) BatchTime(batch []Record) float64 {
	b := float64(len(batch))
	if b == 0 {
		return 0
	}
	return m.OverheadSec + m.UnitSec*m.maxWork(batch)*math.Hypot(b, m.Knee)
}

// PeakMemMiB is the peak device memory of one batch.
func (m VisionModel) PeakMemMiB(batch []Record) float64 {
	return m.WeightsMiB + float64(len(batch))*m.maxWork(batch)*m.ActMiB
}

// LLMModel is an LLM inference engine with paged KV cache and continuous batching. Config keys:
// max_num_seqs (sequences in flight), block_size (KV page, tokens), max_num_batched_tokens
// (prefill chunk; sizes the activation buffer).
type LLMModel struct {
	WeightsMiB        float64 // resident weights
	KVMiBPerToken     float64 // KV cache per token
	ActMiBPerBatchTok float64 // activation memory per max_num_batched_tokens
	StepSec           float64 // decode step time at batch 1
	Knee              float64 // batch size where decode turns compute-bound
	PrefillTokPerSec  float64 // prefill rate at max_num_batched_tokens=8192
}

// Default LLM knobs.
const (
	defaultBlockSize   = 16
	defaultBatchedToks = 8192
)

// SeqMemMiB is the KV memory of one sequence: its prompt and output rounded up to whole blocks.
func (m LLMModel) SeqMemMiB(r Record, c Config) float64 {
	bs := c.knob("block_size", defaultBlockSize)
	if bs < 1 {
		bs = 1
	}
	tok := r.F("input_tokens") + r.F("output_tokens")
	return math.Ceil(tok/bs) * bs * m.KVMiBPerToken
}

// PeakMemMiB is the device memory with the given sequences in flight.
func (m LLMModel) PeakMemMiB(active []Record, c Config) float64 {
	mem := m.WeightsMiB + m.ActMiBPerBatchTok*c.knob("max_num_batched_tokens", defaultBatchedToks)
	for _, r := range active {
		mem += m.SeqMemMiB(r, c)
	}
	return mem
}

// StepTime is the time of one decode step with b sequences in flight. Larger KV blocks make
// attention kernels slightly faster.
func (m LLMModel) StepTime(b int, c Config) float64 {
	if b <= 0 {
		return 0
	}
	bs := c.knob("block_size", defaultBlockSize)
	blockFactor := 1 - 0.04*math.Log2(math.Max(bs, 1)/defaultBlockSize)
	return m.StepSec * math.Hypot(1, float64(b)/m.Knee) * blockFactor
}

// PrefillTime is the time to prefill the prompts of newly admitted sequences; larger
// max_num_batched_tokens chunks prefill faster.
func (m LLMModel) PrefillTime(admitted []Record, c Config) float64 {
	mnbt := c.knob("max_num_batched_tokens", defaultBatchedToks)
	rate := m.PrefillTokPerSec * 1.5 * mnbt / (mnbt + 4096)
	tok := 0.0
	for _, r := range admitted {
		tok += r.F("input_tokens")
	}
	return tok / rate
}

// Throughput is the steady-state records/s of the engine when it keeps b copies of r in flight
// (used by tests and by anyone who wants the model's capacity curve).
func (m LLMModel) Throughput(r Record, b int, c Config) float64 {
	batch := make([]Record, b)
	for i := range batch {
		batch[i] = r
	}
	t := m.PrefillTime(batch, c) + r.F("output_tokens")*m.StepTime(b, c)
	return float64(b) / t
}

// Throughput is the steady-state records/s of the vision model on batches of b copies of r.
func (m VisionModel) Throughput(r Record, b int) float64 {
	batch := make([]Record, b)
	for i := range batch {
		batch[i] = r
	}
	return float64(b) / m.BatchTime(batch)
}

// Operator is one stage of a simulated pipeline: its Nomad description (the trident_* group
// meta) and its behaviour model.
type Operator struct {
	Name          string  // group name in the job file and stage name in subjects
	Order         int     // trident_order: stage index, 0 = source side
	Engine        Engine  // how records are serviced
	CPU           float64 // trident_cpu: cores per instance
	MemoryMB      int     // trident_memory_mb: host memory per instance
	GPUs          int     // trident_gpus: accelerators per instance
	GPUMemoryMB   int     // trident_gpu_memory_mb: device memory per accelerator (the OOM limit)
	OutputBytes   float64 // trident_output_bytes: mean bytes per output record
	Amplification float64 // trident_amplification: mean output records per input record
	Features      []string
	Params        string  // trident_params: config space, strategy/configspace syntax
	Defaults      string  // trident_config of the job files: default config "k=v,..."
	ColdStartSec  float64 // trident_cold_start_s

	Expand func(r Record) []Record // outputs of one input (deterministic in r)
	Next   func(out Record) string // downstream stage of an output; "" = the pipeline sink

	CPUModel    CPUModel    // EngineCPU
	VisionModel VisionModel // EngineBatch
	LLMModel    LLMModel    // EngineLLM
}

// BatchKey is the config key bounding how many records the operator services together.
func (o *Operator) BatchKey() string {
	switch o.Engine {
	case EngineBatch:
		return "batch_size"
	case EngineLLM:
		return "max_num_seqs"
	}
	return "threads"
}

// DefaultConfig is the operator's default config.
func (o *Operator) DefaultConfig() Config {
	c, err := ParseConfig(o.Defaults)
	if err != nil {
		panic(fmt.Sprintf("operator %s: bad defaults: %v", o.Name, err)) // catalog bug
	}
	return c
}

// Validate checks that c only holds the operator's parameters with sane values.
func (o *Operator) Validate(c Config) error {
	allowed := map[string]bool{}
	for _, p := range strings.Split(o.Params, ";") {
		if k, _, ok := strings.Cut(strings.TrimSpace(p), "="); ok {
			allowed[strings.TrimSpace(k)] = true
		}
	}
	for k := range c {
		if !allowed[k] {
			return fmt.Errorf("operator %s: unknown config key %q (params: %s)", o.Name, k, o.Params)
		}
	}
	for k := range c {
		v, err := c.Float(k, 0)
		if err != nil {
			return fmt.Errorf("operator %s: %w", o.Name, err)
		}
		if v <= 0 {
			return fmt.Errorf("operator %s: config %s=%v must be positive", o.Name, k, v)
		}
	}
	if _, err := c.Int(o.BatchKey(), 1); err != nil {
		return fmt.Errorf("operator %s: %w", o.Name, err)
	}
	return nil
}

// Pipeline is a simulated pipeline: operators in stage order; the first is the source side
// (fed by `trident dataset gen`).
type Pipeline struct {
	Name      string
	Regimes   []string                                // workload regimes, processed in sequence
	Operators []*Operator                             // in stage order
	Source    func(seed uint64, i, regime int) Record // the i-th input record of a dataset
}

// Operator returns the named operator.
func (p *Pipeline) Operator(name string) (*Operator, error) {
	for _, o := range p.Operators {
		if o.Name == name {
			return o, nil
		}
	}
	names := make([]string, len(p.Operators))
	for i, o := range p.Operators {
		names[i] = o.Name
	}
	return nil, fmt.Errorf("pipeline %s has no operator %q (operators: %s)", p.Name, name, strings.Join(names, ", "))
}

// Subject is the JetStream subject of an operator's input queue.
func (p *Pipeline) Subject(stage string) string { return p.Name + "." + stage }

// SinkSubject is where the last operators record every final record.
func (p *Pipeline) SinkSubject() string { return p.Name + ".sink" }

// StreamName is the JetStream stream holding all of the pipeline's subjects.
func (p *Pipeline) StreamName() string { return "TRIDENT_" + strings.ToUpper(p.Name) }

// Route is the subject an output of op goes to.
func (p *Pipeline) Route(op *Operator, out Record) string {
	if next := op.Next(out); next != "" {
		return p.Subject(next)
	}
	return p.SinkSubject()
}

// Pipelines returns the catalog of simulated pipelines: pdf, pdfmini (parse -> segment ->
// aggregate, for tests and small machines) and video.
func Pipelines() map[string]*Pipeline {
	return map[string]*Pipeline{"pdf": PDFPipeline(), "pdfmini": PDFMiniPipeline(), "pdfocr": PDFOCRPipeline(), "video": VideoPipeline()}
}

// LookupPipeline returns the named pipeline from the catalog.
func LookupPipeline(name string) (*Pipeline, error) {
	p, ok := Pipelines()[name]
	if !ok {
		return nil, fmt.Errorf("unknown pipeline %q (pdf, pdfmini, pdfocr, video)", name)
	}
	return p, nil
}

// sourceID is the ID of the i-th input of the dataset with the given seed; every derived ID
// keeps it as prefix, so datasets with different seeds can share a stream.
func sourceID(seed uint64, kind string, i int) string {
	return fmt.Sprintf("s%d.%s%06d", seed, kind, i)
}

// datasetPrefix is the ID prefix of every record of the dataset with the given seed.
func datasetPrefix(seed uint64) string { return fmt.Sprintf("s%d.", seed) }

func same(r Record) []Record { return []Record{r} }

func to(stage string) func(Record) string { return func(Record) string { return stage } }

func withFeatures(r Record, kv ...any) Record {
	f := make(map[string]float64, len(r.Features)+len(kv)/2)
	for k, v := range r.Features {
		f[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		f[kv[i].(string)] = kv[i+1].(float64)
	}
	r.Features = f
	return r
}

const cpuParams = "threads=int[1,8]"

// PDF document types (the paper's three regimes, processed in sequence).
func pdfTypes() []string { return []string{"academic", "annual-report", "financial-report"} }

func pdfSource(seed uint64, i, regime int) Record {
	id := sourceID(seed, "d", i)
	rng := rngFor(id, "doc")
	var pages, density float64
	switch regime % 3 {
	case 0:
		pages, density = math.Round(uniform(rng, 8, 20)), uniform(rng, 0.5, 0.8)
	case 1:
		pages, density = math.Round(uniform(rng, 60, 200)), uniform(rng, 0.3, 0.6)
	default:
		pages, density = math.Round(uniform(rng, 20, 60)), uniform(rng, 0.6, 0.9)
	}
	return Record{ID: id, Regime: regime, Kind: "doc", Bytes: pages * 100e3,
		Features: map[string]float64{"pages": pages, "density": density}}
}

// pdfBlocks fans a document out into content blocks (text, table, formula) whose token
// lengths depend on the document type.
func pdfBlocks(doc Record) []Record {
	pages := doc.F("pages")
	var n int
	var mix [3]float64 // text, table, formula cumulative weights
	switch doc.Regime % 3 {
	case 0:
		n, mix = int(math.Ceil(pages/2)), [3]float64{0.70, 0.80, 1}
	case 1:
		n, mix = int(math.Ceil(pages/10)), [3]float64{0.60, 0.95, 1}
	default:
		n, mix = int(math.Ceil(pages/4)), [3]float64{0.45, 0.95, 1}
	}
	out := make([]Record, n)
	for i := range out {
		id := ChildID(doc.ID, "b", i)
		rng := rngFor(id, "block")
		u := rng.Float64()
		var kind string
		var in, outTok float64
		switch {
		case u < mix[0]:
			kind = "text"
			in, outTok = uniform(rng, 600, 1400), uniform(rng, 150, 500)*doc.F("density")/0.6
		case u < mix[1]:
			kind = "table"
			switch doc.Regime % 3 {
			case 0:
				in, outTok = uniform(rng, 1000, 2000), uniform(rng, 200, 600)
			case 1:
				in, outTok = uniform(rng, 2000, 3500), uniform(rng, 600, 1400)
			default:
				in, outTok = uniform(rng, 1500, 3000), uniform(rng, 800, 1600)
			}
		default:
			kind = "formula"
			in, outTok = uniform(rng, 200, 600), uniform(rng, 40, 200)
		}
		in, outTok = math.Round(in), math.Round(outTok)
		out[i] = Record{ID: id, Regime: doc.Regime, Kind: kind, Bytes: in * 40,
			Features: map[string]float64{"input_tokens": in, "output_tokens": outTok}}
	}
	return out
}

func ocrOutput(r Record) []Record {
	r.Bytes = r.F("output_tokens") * 4
	return []Record{r}
}

func ocrOperator(kind string, order int, m LLMModel, defaults string) *Operator {
	return &Operator{
		Name: "ocr-" + kind, Order: order, Engine: EngineLLM,
		CPU: 2, MemoryMB: 4096, GPUs: 1, GPUMemoryMB: 40960,
		OutputBytes: 2000, Amplification: 1,
		Features:     []string{"input_tokens", "output_tokens"},
		Params:       "max_num_seqs=int[4,256,log]; block_size=cat{8,16,32}; max_num_batched_tokens=int[2048,32768,log]",
		Defaults:     defaults,
		ColdStartSec: 30,
		Expand:       ocrOutput, Next: to("aggregate"),
		LLMModel: m,
	}
}

func pdfOperators() (parse, layout, segment, ocrText, ocrTable, ocrFormula, aggregate *Operator) {
	parse = &Operator{Name: "parse", Order: 0, Engine: EngineCPU, CPU: 1, MemoryMB: 1024,
		OutputBytes: 1.2e6, Amplification: 1, Features: []string{"pages"},
		Params: cpuParams, Defaults: "threads=1", ColdStartSec: 2,
		Expand:   func(r Record) []Record { r.Bytes = r.F("pages") * 20e3; return []Record{r} },
		Next:     to("layout"),
		CPUModel: CPUModel{Time: func(r Record) float64 { return 0.02 + 0.01*r.F("pages") }}}
	layout = &Operator{Name: "layout", Order: 1, Engine: EngineCPU, CPU: 2, MemoryMB: 2048,
		OutputBytes: 1.5e6, Amplification: 1, Features: []string{"pages", "density"},
		Params: cpuParams, Defaults: "threads=2", ColdStartSec: 5,
		Expand: same, Next: to("segment"),
		CPUModel: CPUModel{Time: func(r Record) float64 { return 0.04 * r.F("pages") * (0.5 + r.F("density")) }}}
	segment = &Operator{Name: "segment", Order: 2, Engine: EngineCPU, CPU: 1, MemoryMB: 1024,
		OutputBytes: 60e3, Amplification: 10, Features: []string{"pages"},
		Params: cpuParams, Defaults: "threads=1", ColdStartSec: 2,
		Expand: pdfBlocks, Next: func(b Record) string { return "ocr-" + b.Kind },
		CPUModel: CPUModel{Time: func(r Record) float64 { return 0.01 + 0.005*r.F("pages") }}}
	ocrText = ocrOperator("text", 3, LLMModel{WeightsMiB: 15360, KVMiBPerToken: 0.5, ActMiBPerBatchTok: 0.25,
		StepSec: 0.02, Knee: 48, PrefillTokPerSec: 16000}, "max_num_seqs=8,block_size=16,max_num_batched_tokens=8192")
	ocrTable = ocrOperator("table", 4, LLMModel{WeightsMiB: 15360, KVMiBPerToken: 0.5, ActMiBPerBatchTok: 0.25,
		StepSec: 0.025, Knee: 32, PrefillTokPerSec: 14000}, "max_num_seqs=8,block_size=16,max_num_batched_tokens=8192")
	ocrFormula = ocrOperator("formula", 5, LLMModel{WeightsMiB: 7168, KVMiBPerToken: 0.25, ActMiBPerBatchTok: 0.125,
		StepSec: 0.012, Knee: 64, PrefillTokPerSec: 24000}, "max_num_seqs=16,block_size=16,max_num_batched_tokens=8192")
	aggregate = &Operator{Name: "aggregate", Order: 6, Engine: EngineCPU, CPU: 1, MemoryMB: 1024,
		OutputBytes: 2000, Amplification: 1, Features: []string{"output_tokens"},
		Params: cpuParams, Defaults: "threads=1", ColdStartSec: 2,
		Expand: same, Next: to(""),
		CPUModel: CPUModel{Time: func(r Record) float64 { return 0.002 + 2e-6*r.F("output_tokens") }}}
	return
}

// PDFPipeline is the PDF curation pipeline: parse -> layout -> segment (documents fan out into
// blocks) -> ocr-text | ocr-table | ocr-formula (LLM-like, one accelerator each) -> aggregate.
func PDFPipeline() *Pipeline {
	parse, layout, segment, t, tb, f, agg := pdfOperators()
	return &Pipeline{Name: "pdf", Regimes: pdfTypes(), Source: pdfSource,
		Operators: []*Operator{parse, layout, segment, t, tb, f, agg}}
}

// PDFMiniPipeline is a three-stage PDF pipeline (parse -> segment -> aggregate) with the same
// behaviours, small enough for integration tests.
func PDFMiniPipeline() *Pipeline {
	parse, _, segment, _, _, _, agg := pdfOperators()
	parse.Next = to("segment")
	segment.Next = to("aggregate")
	agg.Order = 2
	return &Pipeline{Name: "pdfmini", Regimes: pdfTypes(), Source: pdfSource,
		Operators: []*Operator{parse, segment, agg}}
}

// PDFOCRPipeline is a four-stage PDF pipeline with one accelerator operator (parse ->
// segment -> ocr-text -> aggregate; every block goes to ocr-text), used by the
// end-to-end test of the planner and the autoscaler plugins.
func PDFOCRPipeline() *Pipeline {
	parse, _, segment, text, _, _, agg := pdfOperators()
	parse.Next = to("segment")
	segment.Order, segment.Next = 1, to("ocr-text")
	text.Order = 2
	agg.Order = 3
	return &Pipeline{Name: "pdfocr", Regimes: pdfTypes(), Source: pdfSource,
		Operators: []*Operator{parse, segment, text, agg}}
}

// Video categories (the paper's two regimes).
func videoTypes() []string { return []string{"short-form", "long-form"} }

func videoSource(seed uint64, i, regime int) Record {
	id := sourceID(seed, "v", i)
	rng := rngFor(id, "video")
	var dur, height float64
	if regime%2 == 0 {
		dur, height = math.Round(uniform(rng, 10, 30)), 720
	} else {
		dur = math.Round(uniform(rng, 300, 600))
		height = []float64{1080, 1440, 2160}[rng.IntN(3)]
	}
	return Record{ID: id, Regime: regime, Kind: "video", Bytes: dur * height * 2000,
		Features: map[string]float64{"duration_s": dur, "height": height}}
}

func scenes(v Record) []Record {
	rng := rngFor(v.ID, "scenes")
	sceneLen := uniform(rng, 3, 6)
	if v.Regime%2 == 1 {
		sceneLen = uniform(rng, 8, 15)
	}
	n := int(math.Ceil(v.F("duration_s") / sceneLen))
	out := make([]Record, n)
	for i := range out {
		id := ChildID(v.ID, "c", i)
		cr := rngFor(id, "clip")
		d := math.Round(v.F("duration_s")/float64(n)*uniform(cr, 0.7, 1.3)*10) / 10
		frames := math.Min(16, math.Max(4, math.Round(d)))
		out[i] = Record{ID: id, Regime: v.Regime, Kind: "clip", Bytes: d * v.F("height") * 1500,
			Features: map[string]float64{"duration_s": d, "height": v.F("height"), "frames": frames}}
	}
	return out
}

// keep is a deterministic filter: it keeps a record with probability p, decided by its ID.
func keep(salt string, p float64) func(Record) []Record {
	return func(r Record) []Record {
		if rngFor(r.ID, salt).Float64() >= p {
			return nil
		}
		return []Record{r}
	}
}

func captionTokens(r Record) Record {
	rng := rngFor(r.ID, "caption")
	h := r.F("height") / 720
	perFrame := math.Min(1280, 256*h*h)
	out := uniform(rng, 60, 200)
	if r.Regime%2 == 1 {
		out = uniform(rng, 120, 300)
	}
	return withFeatures(r, "input_tokens", math.Round(r.F("frames")*perFrame), "output_tokens", math.Round(out))
}

// VideoPipeline is the video curation pipeline: decode -> scene-split (videos fan out into
// clips) -> aesthetic (CLIP filter, batched, accelerator) -> text-detect (CRAFT filter, batched,
// accelerator) -> caption (VLM, LLM-like, accelerator).
func VideoPipeline() *Pipeline {
	decode := &Operator{Name: "decode", Order: 0, Engine: EngineCPU, CPU: 2, MemoryMB: 4096,
		OutputBytes: 200e6, Amplification: 1, Features: []string{"duration_s", "height"},
		Params: cpuParams, Defaults: "threads=2", ColdStartSec: 3,
		Expand: same, Next: to("scene-split"),
		CPUModel: CPUModel{Time: func(r Record) float64 {
			h := r.F("height") / 720
			return 0.005 * r.F("duration_s") * h * h
		}}}
	split := &Operator{Name: "scene-split", Order: 1, Engine: EngineCPU, CPU: 1, MemoryMB: 2048,
		OutputBytes: 8e6, Amplification: 25, Features: []string{"duration_s"},
		Params: cpuParams, Defaults: "threads=1", ColdStartSec: 3,
		Expand: scenes, Next: to("aesthetic"),
		CPUModel: CPUModel{Time: func(r Record) float64 { return 0.01 + 0.003*r.F("duration_s") }}}
	aesthetic := &Operator{Name: "aesthetic", Order: 2, Engine: EngineBatch,
		CPU: 2, MemoryMB: 4096, GPUs: 1, GPUMemoryMB: 40960,
		OutputBytes: 8e6, Amplification: 0.65, Features: []string{"frames", "height"},
		Params: "batch_size=int[1,256,log]", Defaults: "batch_size=16", ColdStartSec: 15,
		Expand: keep("aesthetic", 0.65), Next: to("text-detect"),
		VisionModel: VisionModel{WeightsMiB: 1024, ActMiB: 40, OverheadSec: 0.02, UnitSec: 0.004, Knee: 32,
			Work: func(r Record) float64 { return r.F("frames") }}}
	textDetect := &Operator{Name: "text-detect", Order: 3, Engine: EngineBatch,
		CPU: 2, MemoryMB: 4096, GPUs: 1, GPUMemoryMB: 40960,
		OutputBytes: 8e6, Amplification: 0.8, Features: []string{"frames", "height"},
		Params: "batch_size=int[1,64,log]", Defaults: "batch_size=4", ColdStartSec: 15,
		Expand: func(r Record) []Record {
			kept := keep("text", 0.8)(r)
			for i := range kept {
				kept[i] = captionTokens(kept[i]) // the caption prompt: frames x visual tokens
			}
			return kept
		},
		Next: to("caption"),
		VisionModel: VisionModel{WeightsMiB: 512, ActMiB: 200, OverheadSec: 0.03, UnitSec: 0.02, Knee: 8,
			Work: func(r Record) float64 {
				h := r.F("height") / 720
				return h * h * math.Min(r.F("frames"), 8) / 2
			}}}
	caption := &Operator{Name: "caption", Order: 4, Engine: EngineLLM,
		CPU: 2, MemoryMB: 8192, GPUs: 1, GPUMemoryMB: 40960,
		OutputBytes: 1000, Amplification: 1, Features: []string{"input_tokens", "output_tokens"},
		Params:       "max_num_seqs=int[4,256,log]; block_size=cat{8,16,32}; max_num_batched_tokens=int[2048,32768,log]",
		Defaults:     "max_num_seqs=8,block_size=16,max_num_batched_tokens=8192",
		ColdStartSec: 40,
		Expand: func(r Record) []Record {
			r.Kind, r.Bytes = "caption", r.F("output_tokens")*4
			return []Record{r}
		},
		Next: to(""),
		LLMModel: LLMModel{WeightsMiB: 16384, KVMiBPerToken: 0.12, ActMiBPerBatchTok: 0.25,
			StepSec: 0.03, Knee: 32, PrefillTokPerSec: 12000}}
	return &Pipeline{Name: "video", Regimes: videoTypes(), Source: videoSource,
		Operators: []*Operator{decode, split, aesthetic, textDetect, caption}}
}
