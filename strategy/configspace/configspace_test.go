package configspace

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

const decl = `max_num_seqs=int[8,512,log] default 64;
max_num_batched_tokens=int[1024,65536,log];
block_size=cat{8,16,32} default 16;
chunked_prefill=bool;
scheduler_delay=float[0,1];
constraint: max_num_batched_tokens >= 4*max_num_seqs + 512`

func TestParseDeclaration(t *testing.T) {
	s, err := Parse(decl)
	if err != nil {
		t.Fatal(err)
	}
	if s.Dim() != 5 || len(s.Constraints) != 1 {
		t.Fatalf("dim %d, %d constraints; want 5, 1", s.Dim(), len(s.Constraints))
	}
	p, _ := s.Param("max_num_seqs")
	if p.Kind != Int || !p.Log || p.Min != 8 || p.Max != 512 || p.Default.Int() != 64 {
		t.Fatalf("max_num_seqs parsed as %+v", p)
	}
	// Default of a log range without "default" is the rounded geometric midpoint.
	p, _ = s.Param("max_num_batched_tokens")
	if p.Default.Int() != 8192 {
		t.Fatalf("default of [1024,65536,log] = %v, want 8192", p.Default)
	}
	def := s.Default()
	if got := def.String(); got != "block_size=16,chunked_prefill=false,max_num_batched_tokens=8192,max_num_seqs=64,scheduler_delay=0" {
		t.Fatalf("default config %q", got)
	}
	// String round-trips through Parse.
	s2, err := Parse(s.String())
	if err != nil {
		t.Fatalf("reparse %q: %v", s.String(), err)
	}
	if s2.String() != s.String() {
		t.Fatalf("round trip changed the space:\n%s\n%s", s, s2)
	}
}

func TestParseErrorsNameParameterAndOffset(t *testing.T) {
	for _, tc := range []struct {
		decl, param string
		offset      int
		msg         string
	}{
		{"a=int[1,10]; b=int[5,1]", "b", 19, "empty"},
		{"a=int[1,10]; bb=float[0,x]", "bb", 24, "upper bound"},
		{"a=int[1,10]; c=cat{x,x}", "c", 21, "duplicate choice"},
		{"a=int[1,10]; d=string", "d", 15, "unknown type"},
		{"a=int[0,10,log]", "a", 6, "positive lower bound"},
		{"a=int[1,10] default 11", "a", 12, "outside"},
		{"a=int[1,10]; constraint: a >= b", "constraint", 13, "undeclared parameter"},
		{"a=int[1,10]; constraint: a + >= 3", "constraint", 29, "missing term"},
		{"a=int[1,10]; constraint: a 3", "constraint", 24, "no comparison"},
		{"a=int[1,10]; a=bool", "a", 13, "declared twice"},
	} {
		_, err := Parse(tc.decl)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%q: error %v is not a *ParseError", tc.decl, err)
			continue
		}
		if pe.Param != tc.param || pe.Offset != tc.offset || !strings.Contains(pe.Msg, tc.msg) {
			t.Errorf("%q: got param %q offset %d msg %q; want %q %d ~%q", tc.decl, pe.Param, pe.Offset, pe.Msg, tc.param, tc.offset, tc.msg)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	s := MustParse(decl)
	// Every grid configuration survives Encode -> Decode unchanged.
	grid, err := s.Grid(4)
	if err != nil {
		t.Fatal(err)
	}
	if len(grid) == 0 {
		t.Fatal("empty grid")
	}
	for _, c := range grid {
		u, err := s.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range u {
			if v < 0 || v > 1 {
				t.Fatalf("%s: coordinate %d = %v outside [0,1]", c, i, v)
			}
		}
		back, err := s.Decode(u)
		if err != nil {
			t.Fatal(err)
		}
		if back.String() != c.String() {
			t.Fatalf("round trip %s -> %v -> %s", c, u, back)
		}
		if !s.Satisfies(c) {
			t.Fatalf("grid holds infeasible %s", c)
		}
	}
	// Log scale: the cube's midpoint is the geometric mean.
	c, _ := s.Decode([]float64{0.5, 0.5, 0.5, 0.5, 0.5})
	if c.Int("max_num_seqs") != 64 || c.Int("max_num_batched_tokens") != 8192 {
		t.Fatalf("midpoint decodes to %s", c)
	}
	if c["block_size"].String() != "16" || !c.IsTrue("chunked_prefill") || c.Float("scheduler_delay") != 0.5 {
		t.Fatalf("midpoint decodes to %s", c)
	}
}

func TestConfigStringParse(t *testing.T) {
	c := Config{"b": Num(16), "a": Bool(true), "z": Str("fast"), "f": Num(0.25)}
	if got := c.String(); got != "a=true,b=16,f=0.25,z=fast" {
		t.Fatalf("String = %q", got)
	}
	back, err := ParseConfig(" a = true, b=16,f=0.25 ,z=fast")
	if err != nil {
		t.Fatal(err)
	}
	if back.String() != c.String() {
		t.Fatalf("parse gave %s", back)
	}
	for _, bad := range []string{"a", "a=1,a=2", "=3", "1x=2"} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q) succeeded", bad)
		}
	}
}

// TestNumericLabelsRoundTrip checks categorical choices that read as numbers: a config
// string carries them as numbers ("1.0" parses as 1), so Check maps the value back to its
// label, and a declaration whose choices share a value is refused (found by
// FuzzSpaceRoundTrip).
func TestNumericLabelsRoundTrip(t *testing.T) {
	sp := MustParse("ratio=cat{0.5,1.0,1e3,08} default 1.0")
	for _, lbl := range []string{"0.5", "1.0", "1e3", "08"} {
		c, err := sp.ParseConfig("ratio=" + lbl)
		if err != nil {
			t.Fatalf("ratio=%s: %v", lbl, err)
		}
		if got := c.String(); got != "ratio="+lbl {
			t.Errorf("ratio=%s parses as %q", lbl, got)
		}
	}
	if c, err := sp.ParseConfig(sp.Default().String()); err != nil || c.String() != "ratio=1.0" {
		t.Errorf("default parses back as %v, %v", c, err)
	}
	if _, err := sp.ParseConfig("ratio=1"); err != nil {
		t.Errorf("ratio=1 (the value of label 1.0): %v", err)
	}
	if _, err := sp.ParseConfig("ratio=2"); err == nil {
		t.Error("ratio=2 accepted")
	}
	for _, decl := range []string{"x=cat{1,1.0}", "x=cat{true,a,true}", "x=cat{8,08}"} {
		if _, err := Parse(decl); err == nil || !strings.Contains(err.Error(), "duplicate choice") {
			t.Errorf("Parse(%q): %v, want a duplicate choice", decl, err)
		}
	}
	if _, err := New([]Param{{Name: "x", Kind: Categorical, Choices: []string{"2", "2.0"}, Default: Str("2")}}, nil); err == nil {
		t.Error("New with choices 2 and 2.0 succeeded")
	}
}

func TestCheck(t *testing.T) {
	s := MustParse(decl)
	c, err := s.ParseConfig("max_num_seqs=100,max_num_batched_tokens=2048,block_size=32,chunked_prefill=true,scheduler_delay=0.1")
	if err != nil {
		t.Fatal(err)
	}
	if c["block_size"].String() != "32" || c["block_size"].Float() != 32 {
		t.Fatalf("categorical label: %v", c["block_size"])
	}
	for bad, want := range map[string]string{
		"max_num_seqs=100,max_num_batched_tokens=900,block_size=32,chunked_prefill=true,scheduler_delay=0.1":    "max_num_batched_tokens",
		"max_num_seqs=200,max_num_batched_tokens=1024,block_size=32,chunked_prefill=true,scheduler_delay=0.1":   "constraint",
		"max_num_seqs=100.5,max_num_batched_tokens=8192,block_size=32,chunked_prefill=true,scheduler_delay=0":   "integer",
		"max_num_seqs=100,max_num_batched_tokens=8192,block_size=64,chunked_prefill=true,scheduler_delay=0":     "one of",
		"max_num_seqs=100,max_num_batched_tokens=8192,block_size=16,chunked_prefill=1,scheduler_delay=0":        "true or false",
		"max_num_seqs=100,max_num_batched_tokens=8192,block_size=16,chunked_prefill=true":                       "missing",
		"max_num_seqs=100,max_num_batched_tokens=8192,block_size=16,chunked_prefill=true,scheduler_delay=0,x=1": "unknown",
	} {
		_, err := s.ParseConfig(bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one mentioning %q", bad, err, want)
		}
	}
}

func TestConstraintArithmetic(t *testing.T) {
	s := MustParse("a=float[0,10]; b=float[0,10]; constraint: a - 2*b + 1 > 0.5e-1")
	con := s.Constraints[0]
	for _, tc := range []struct {
		a, b float64
		ok   bool
	}{{3, 1, true}, {1, 1, false}, {0.06, 0.5, true}, {0.04, 0.5, false}} {
		if got := con.Holds(Config{"a": Num(tc.a), "b": Num(tc.b)}); got != tc.ok {
			t.Errorf("a=%v b=%v: holds=%v want %v (a-2b+1 = %v)", tc.a, tc.b, got, tc.ok, tc.a-2*tc.b+1)
		}
	}
	if math.IsNaN(Config{}.Float("a")) == false {
		t.Fatal("missing parameter should read as NaN")
	}
}

func TestFromMeta(t *testing.T) {
	meta := map[string]string{"trident_params": "n=int[1,8] default 2; fast=bool"}
	s, c, err := FromMeta("ocr", meta)
	if err != nil || s == nil || c.String() != "fast=false,n=2" {
		t.Fatalf("FromMeta = %v, %v, %v", s, c, err)
	}
	meta["trident_config"] = "n=4,fast=true"
	if _, c, err = FromMeta("ocr", meta); err != nil || c.String() != "fast=true,n=4" {
		t.Fatalf("with current config: %v, %v", c, err)
	}
	meta["trident_config"] = "n=9,fast=true"
	if _, _, err = FromMeta("ocr", meta); err == nil || !strings.Contains(err.Error(), `group "ocr" meta trident_config`) || !strings.Contains(err.Error(), `"n"`) {
		t.Fatalf("bad current config: %v", err)
	}
	if s, _, err := FromMeta("cpu", map[string]string{}); s != nil || err != nil {
		t.Fatalf("no params: %v %v", s, err)
	}
}

// TestSnapIsEncodeOfDecode checks Snap against its definition on random points, including
// points outside the cube and on cell boundaries: the same coordinates to the bit, the
// same constraint verdict, and equal snapped points exactly for equal configurations.
func TestSnapIsEncodeOfDecode(t *testing.T) {
	s := MustParse(decl)
	rng := rand.New(rand.NewPCG(7, 1))
	byBits := map[[5]uint64]string{}
	feasible := 0
	for n := range 20000 {
		u := make([]float64, s.Dim())
		for i := range u {
			u[i] = rng.Float64()*1.2 - 0.1
			if n%7 == 0 {
				u[i] = float64(rng.IntN(5)) / 4 // cell boundaries and the cube's faces
			}
		}
		c, err := s.Decode(u)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float64, s.Dim())
		ok, err := s.Snap(u, got)
		if err != nil {
			t.Fatal(err)
		}
		var bits [5]uint64
		for i := range got {
			if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
				t.Fatalf("Snap(%v)[%d] = %v, Encode(Decode) = %v", u, i, got[i], want[i])
			}
			bits[i] = math.Float64bits(got[i])
		}
		if ok != s.Satisfies(c) {
			t.Fatalf("Snap(%v) feasible %v, Satisfies(%s) %v", u, ok, c, s.Satisfies(c))
		}
		if ok {
			feasible++
		}
		if prev, dup := byBits[bits]; dup && prev != c.String() {
			t.Fatalf("%s and %s snap to the same point", prev, c)
		}
		byBits[bits] = c.String()
	}
	// The constraint binds on part of the cube, and integers collapse cells: both verdicts
	// and repeated configurations occur, so the comparisons above were exercised.
	if feasible == 0 || feasible == 20000 || len(byBits) == 20000 {
		t.Fatalf("feasible %d of 20000, %d distinct: the sample does not exercise Snap", feasible, len(byBits))
	}
	if _, err := s.Snap([]float64{math.NaN(), 0, 0, 0, 0}, make([]float64, 5)); err == nil {
		t.Fatal("NaN coordinate snapped")
	}
	if _, err := s.Snap([]float64{0}, make([]float64, 5)); err == nil {
		t.Fatal("short point snapped")
	}
}
