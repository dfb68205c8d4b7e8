package configspace

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzSpaceRoundTrip feeds arbitrary declarations (trident_params) and points through the
// space. A declaration Parse accepts must have a default that Check accepts (when it meets
// the constraints), and every configuration the tuner can propose (Decode of any point)
// must survive the string form the planner stores and re-parses: ParseConfig(c.String())
// gives c back, and Snap agrees with Encode(Decode(u)) and with the constraints.
func FuzzSpaceRoundTrip(f *testing.F) {
	for _, decl := range []string{
		"batch=int[1,64]",
		"max_num_seqs=int[4,256,log]; block_size=cat{8,16,32}; max_num_batched_tokens=int[2048,32768,log]",
		"lr=float[1e-4,1e-1,log] default 0.01; eager=bool; mode=cat{fast,slow} default slow; constraint: 2*lr <= 0.1",
		"ratio=cat{0.5,1.0,2}; n=int[0,0]",
		"a=int[1,8]; b=int[1,8]; constraint: a + b <= 9",
	} {
		f.Add(decl, []byte{0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xef, 0x3f})
		f.Add(decl, []byte{0, 0, 0, 0, 0, 0, 0xe0, 0x3f, 0, 0, 0, 0, 0, 0, 0xe0, 0x3f}) // 0.5, 0.5
	}
	f.Fuzz(func(t *testing.T, decl string, raw []byte) {
		sp, err := Parse(decl)
		if err != nil {
			return
		}
		if d := sp.Default(); sp.Satisfies(d) {
			if _, err := sp.ParseConfig(d.String()); err != nil {
				t.Fatalf("space %q: default %q does not parse back: %v", decl, d, err)
			}
		}
		u := make([]float64, sp.Dim())
		for i := range u {
			if len(raw) >= 8*(i+1) {
				u[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
			}
			if math.IsNaN(u[i]) || math.IsInf(u[i], 0) {
				u[i] = 0.5
			}
		}
		c, err := sp.Decode(u)
		if err != nil {
			t.Fatalf("space %q: decode %v: %v", decl, u, err)
		}
		dst := make([]float64, sp.Dim())
		ok, err := sp.Snap(u, dst)
		if err != nil {
			t.Fatalf("space %q: snap %v: %v", decl, u, err)
		}
		if ok != sp.Satisfies(c) {
			t.Fatalf("space %q: snap says feasible=%v, Satisfies(%s)=%v", decl, ok, c, !ok)
		}
		enc, err := sp.Encode(c)
		if err != nil {
			t.Fatalf("space %q: encode decoded %s: %v", decl, c, err)
		}
		for i := range enc {
			if enc[i] != dst[i] {
				t.Fatalf("space %q: snap %v, encode of decode %v", decl, dst, enc)
			}
		}
		if !ok {
			return
		}
		back, err := sp.ParseConfig(c.String())
		if err != nil {
			t.Fatalf("space %q: proposed config %q does not parse back: %v", decl, c, err)
		}
		if back.String() != c.String() {
			t.Fatalf("space %q: config %q parses back as %q", decl, c, back)
		}
	})
}
