package sim

import (
	"math"
	"math/rand/v2"
	"testing"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

// captionModel returns the video pipeline's captioning engine (an LLMModel that every
// record goes through) and its default configuration.
func captionModel(t *testing.T) (*LLMModel, OpConfig, Attrs) {
	t.Helper()
	p := VideoPipeline(1)
	spec := &p.Ops[p.OpIndex("caption")]
	m, ok := spec.Model.(*LLMModel)
	if !ok {
		t.Fatalf("caption model is %T, want *LLMModel", spec.Model)
	}
	a := p.Regimes[0].Sample(newRand(1))
	return m, DefaultConfig(spec.Space), a
}

// TestLLMEngineRequests checks the engine gauges an LLM engine exports, as vLLM counts
// them: with more requests in flight than max_num_seqs (64 by default) it runs at most 64
// and the rest wait; with fewer, all run and none wait; running plus waiting is the
// requests in flight (every caption record is a request). Exact: the model's arithmetic.
func TestLLMEngineRequests(t *testing.T) {
	m, cfg, a := captionModel(t)
	run, wait, lim := m.EngineRequests(a, cfg, 200)
	if lim != cfg[LLMMaxNumSeqs] || lim != 64 {
		t.Fatalf("limit %v, want max_num_seqs 64", lim)
	}
	if run > 64 || run < 1 || math.Abs(run+wait-200) > 1e-9 || wait < 136-1e-9 {
		t.Fatalf("200 in flight: running %v, waiting %v; want at most 64 running and the rest waiting", run, wait)
	}
	run, wait, _ = m.EngineRequests(a, cfg, 10)
	if run != 10 || wait != 0 {
		t.Fatalf("10 in flight: running %v, waiting %v; want 10 and 0", run, wait)
	}
}

// TestLLMEngineRequestsOnlyGeneration uses the PDF pipeline's table OCR engine, which
// generates only for the share of records that hold a table: the others pass through and
// are neither running nor waiting requests, so a mostly text-only stream with many
// records in flight shows a small running batch and no queue inside the engine.
func TestLLMEngineRequestsOnlyGeneration(t *testing.T) {
	p := PDFPipeline(1)
	spec := &p.Ops[p.OpIndex("table_ocr")]
	m := spec.Model.(*LLMModel)
	cfg := DefaultConfig(spec.Space)
	rng := newRand(2)
	for range 50 {
		a := p.Regimes[0].Sample(rng)
		f := m.frac(a)
		if f >= 0.5 {
			continue
		}
		run, wait, _ := m.EngineRequests(a, cfg, 75)
		if math.Abs(run+wait-75*f) > 1e-9 {
			t.Fatalf("share %.3f of 75 records: running %v + waiting %v, want %v requests", f, run, wait, 75*f)
		}
		return
	}
	t.Fatal("no record with a table share below one half in 50 samples")
}
