package sim

import "math"

// PDF document attributes (Attrs indexes of the PDF pipeline).
const (
	PDFPages = iota
	PDFBlocksPerPage
	PDFTextFrac
	PDFTableFrac
	PDFFormulaFrac
	PDFTextTok
	PDFTableTok
	PDFFormulaTok
	PDFMBPerPage
	pdfNAttrs
)

// lognorm draws a log-normal value with the given median and log-sd.
func lognorm(r RandSource, median, sigma float64) float64 {
	return median * math.Exp(sigma*r.NormFloat64())
}

func clamp(x, lo, hi float64) float64 { return math.Min(hi, math.Max(lo, x)) }

// pdfDoc builds a document sampler for one document type.
func pdfDoc(pages, bpp, text, table, formula, textTok, tableTok, formulaTok, mbpp float64) func(r RandSource) Attrs {
	return func(r RandSource) Attrs {
		a := make(Attrs, pdfNAttrs)
		a[PDFPages] = math.Max(1, math.Round(lognorm(r, pages, 0.45)))
		a[PDFBlocksPerPage] = math.Max(2, lognorm(r, bpp, 0.25))
		t := clamp(text+0.06*r.NormFloat64(), 0.02, 0.95)
		tb := clamp(table+0.05*r.NormFloat64(), 0.005, 0.9)
		f := clamp(formula+0.04*r.NormFloat64(), 0.002, 0.9)
		s := t + tb + f
		if s > 0.98 {
			t, tb, f = t/s*0.98, tb/s*0.98, f/s*0.98
		}
		a[PDFTextFrac], a[PDFTableFrac], a[PDFFormulaFrac] = t, tb, f
		a[PDFTextTok] = lognorm(r, textTok, 0.3)
		a[PDFTableTok] = lognorm(r, tableTok, 0.35)
		a[PDFFormulaTok] = lognorm(r, formulaTok, 0.3)
		a[PDFMBPerPage] = lognorm(r, mbpp, 0.3)
		return a
	}
}

func blocks(a Attrs) float64 { return a[PDFPages] * a[PDFBlocksPerPage] }

// ocrModel builds one modality-specific OCR operator (1 NPU, a ~3B VLM OCR model).
func ocrModel(frac, tok int, promptTok float64) *LLMModel {
	return &LLMModel{
		Frac: func(a Attrs) float64 { return a[frac] },
		Tokens: func(a Attrs) (float64, float64, float64) {
			out := a[tok]
			return promptTok + 0.6*out, out, 0.45
		},
		T0: 0.03, T1: 0.00025, P1: 0.00008, P0: 0.2, DeviceGB: 64,
		PassCost:  0.002,
		WeightsGB: 8, KVGBPerTok: 1.1e-4, ActGBPerTok: 1.2e-3,
		Out: func(a Attrs) float64 { return 0.02 },
		Feat: func(a Attrs) []float64 {
			out := a[tok]
			return []float64{a[frac], promptTok + 0.6*out, out}
		},
	}
}

// PDFPipeline returns the 17-operator document curation pipeline of the paper (§8.1):
// file I/O, parsing and layout detection, block segmentation, modality-specific OCR
// (three LLM-based OCR operators with 1 NPU each) and aggregation. The dataset holds
// academic papers, annual reports and financial reports, processed by type in sequence.
// scale multiplies the number of documents.
func PDFPipeline(scale float64) *Pipeline {
	docMB := func(a Attrs) float64 { return a[PDFPages] * a[PDFMBPerPage] }
	pageFeat := func(a Attrs) []float64 { return []float64{a[PDFPages], a[PDFBlocksPerPage]} }
	cpu := func(c, m float64) Resources { return Resources{CPU: c, MemGB: m} }
	npu := Resources{CPU: 8, MemGB: 48, Acc: 1}
	feat := []string{"pages", "blocks_per_page"}
	ocrFeat := []string{"modality_frac", "in_tokens", "out_tokens"}
	ops := []OpSpec{
		{Name: "read_files", Need: cpu(2, 4), ColdStartS: 10, StopS: 2, QueueCap: 200, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.01 + docMB(a)/150 }, Out: docMB, Feat: pageFeat}},
		{Name: "validate", Need: cpu(1, 2), ColdStartS: 8, StopS: 2, QueueCap: 200, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.02 + 0.004*a[PDFPages] }, Out: docMB, Feat: pageFeat}},
		{Name: "normalize", Need: cpu(2, 4), ColdStartS: 8, StopS: 2, QueueCap: 200, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.05 + 0.02*a[PDFPages] }, Out: docMB, Feat: pageFeat}},
		{Name: "split_pages", Need: cpu(2, 4), ColdStartS: 8, StopS: 2, QueueCap: 200, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.05 + 0.015*a[PDFPages] },
				Amp: func(a Attrs) float64 { return a[PDFPages] }, Out: func(a Attrs) float64 { return a[PDFMBPerPage] }, Feat: pageFeat}},
		{Name: "render_pages", Need: cpu(2, 6), ColdStartS: 10, StopS: 2, QueueCap: 2000, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.45 + 0.5*a[PDFMBPerPage] }, Out: func(Attrs) float64 { return 2.5 }, Feat: pageFeat}},
		{Name: "layout_detect", Need: cpu(8, 16), ColdStartS: 25, StopS: 3, QueueCap: 2000, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 1.2 + 0.06*a[PDFBlocksPerPage] }, Out: func(Attrs) float64 { return 2.6 }, Feat: pageFeat}},
		{Name: "reading_order", Need: cpu(1, 2), ColdStartS: 8, StopS: 2, QueueCap: 2000, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.01 + 0.004*a[PDFBlocksPerPage] }, Out: func(Attrs) float64 { return 2.6 }, Feat: pageFeat}},
		{Name: "block_segment", Need: cpu(2, 4), ColdStartS: 8, StopS: 2, QueueCap: 2000, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.05 + 0.01*a[PDFBlocksPerPage] },
				Amp: func(a Attrs) float64 { return a[PDFBlocksPerPage] }, Out: func(Attrs) float64 { return 0.25 }, Feat: pageFeat}},
		{Name: "block_classify", Need: cpu(4, 8), ColdStartS: 20, StopS: 2, QueueCap: 12000, FeatureNames: feat,
			Model: &CPUModel{Cost: func(Attrs) float64 { return 0.04 }, Out: func(Attrs) float64 { return 0.25 }, Feat: pageFeat}},
		{Name: "crop_text", Need: cpu(1, 2), ColdStartS: 6, StopS: 1, QueueCap: 12000, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.001 + 0.012*a[PDFTextFrac] }, Out: func(Attrs) float64 { return 0.25 }, Feat: pageFeat}},
		{Name: "crop_table", Need: cpu(1, 2), ColdStartS: 6, StopS: 1, QueueCap: 12000, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.001 + 0.03*a[PDFTableFrac] }, Out: func(Attrs) float64 { return 0.25 }, Feat: pageFeat}},
		{Name: "crop_formula", Need: cpu(1, 2), ColdStartS: 6, StopS: 1, QueueCap: 12000, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.001 + 0.01*a[PDFFormulaFrac] }, Out: func(Attrs) float64 { return 0.25 }, Feat: pageFeat}},
		{Name: "text_ocr", Need: npu, Async: true, MaxInFlight: 4096, ColdStartS: 60, StopS: 5, QueueCap: 12000,
			Space: LLMSpace(96, 4096), FeatureNames: ocrFeat, Model: ocrModel(PDFTextFrac, PDFTextTok, 420)},
		{Name: "table_ocr", Need: npu, Async: true, MaxInFlight: 4096, ColdStartS: 60, StopS: 5, QueueCap: 12000,
			Space: LLMSpace(96, 4096), FeatureNames: ocrFeat, Model: ocrModel(PDFTableFrac, PDFTableTok, 520)},
		{Name: "formula_ocr", Need: npu, Async: true, MaxInFlight: 4096, ColdStartS: 60, StopS: 5, QueueCap: 12000,
			Space: LLMSpace(96, 4096), FeatureNames: ocrFeat, Model: ocrModel(PDFFormulaFrac, PDFFormulaTok, 380)},
		{Name: "merge_blocks", Need: cpu(2, 8), ColdStartS: 8, StopS: 2, QueueCap: 12000, FeatureNames: feat,
			Model: &CPUModel{Cost: func(Attrs) float64 { return 0.004 },
				Amp: func(a Attrs) float64 { return 1 / blocks(a) }, Out: func(a Attrs) float64 { return 0.05 * a[PDFPages] }, Feat: pageFeat}},
		{Name: "write_output", Need: cpu(2, 4), ColdStartS: 8, StopS: 2, QueueCap: 200, FeatureNames: feat,
			Model: &CPUModel{Cost: func(a Attrs) float64 { return 0.02 + 0.002*a[PDFPages] }, Out: func(Attrs) float64 { return 0.01 }, Feat: pageFeat}},
	}
	return &Pipeline{
		Name: "pdf",
		Ops:  ops,
		AttrNames: []string{"pages", "blocks_per_page", "text_frac", "table_frac", "formula_frac",
			"text_tokens", "table_tokens", "formula_tokens", "mb_per_page"},
		Regimes: []Regime{
			{Name: "academic", Records: 7000 * scale, Sample: pdfDoc(12, 14, 0.68, 0.06, 0.24, 180, 500, 90, 0.25)},
			{Name: "annual_report", Records: 650 * scale, Sample: pdfDoc(90, 9, 0.48, 0.40, 0.01, 150, 900, 60, 0.6)},
			{Name: "financial_report", Records: 1100 * scale, Sample: pdfDoc(45, 12, 0.76, 0.20, 0.02, 320, 700, 60, 0.35)},
		},
		BatchDocs: 2,
	}
}
