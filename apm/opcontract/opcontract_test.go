package opcontract

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseFeatures(t *testing.T) {
	if got := ParseFeatures(" pages, ,mb_per_page,"); !reflect.DeepEqual(got, []string{"pages", "mb_per_page"}) {
		t.Fatalf("ParseFeatures = %q", got)
	}
	if got := ParseFeatures(""); got != nil {
		t.Fatalf("ParseFeatures(\"\") = %q, want none", got)
	}
}

func TestParseSynchronous(t *testing.T) {
	for v, want := range map[string]bool{"": false, " true ": true, "false": false, "1": true} {
		if got, err := ParseSynchronous(v); err != nil || got != want {
			t.Errorf("ParseSynchronous(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	if _, err := ParseSynchronous("sometimes"); err == nil {
		t.Error("ParseSynchronous accepted \"sometimes\"")
	}
}

func TestReadInstance(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	got, err := ReadInstance(env(map[string]string{
		"NOMAD_GROUP_NAME":                "ocr@gpu1.g2",
		"NOMAD_META_trident_operator":     "ocr",
		"NOMAD_META_trident_config":       "batch=8, threads=2",
		"NOMAD_META_trident_config_epoch": " 2 ",
	}))
	want := Instance{Operator: "ocr", Config: map[string]string{"batch": "8", "threads": "2"}, Epoch: 2,
		Params: map[string]string{"batch": "8", "threads": "2"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadInstance = %+v, %v; want %+v", got, err, want)
	}
	// A group of the job file as written: no operator meta, no epoch yet.
	got, err = ReadInstance(env(map[string]string{"NOMAD_GROUP_NAME": "parse"}))
	if want := (Instance{Operator: "parse", Config: map[string]string{}, Params: map[string]string{}}); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadInstance = %+v, %v; want %+v", got, err, want)
	}
	for name, m := range map[string]map[string]string{
		"bad config": {"NOMAD_META_trident_config": "threads"},
		"bad epoch":  {"NOMAD_META_trident_config_epoch": "-1"},
	} {
		if _, err := ReadInstance(env(m)); err == nil {
			t.Errorf("%s: ReadInstance accepted %v", name, m)
		}
	}
}

func TestParseConfig(t *testing.T) {
	got, err := ParseConfig(" a=1 ; b = x,,c=")
	if want := map[string]string{"a": "1", "b": "x", "c": ""}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseConfig = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"a", "=1", "a=1,b"} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q) accepted", bad)
		}
	}
}

// The per-parameter meta keys: sanitised names, the values of the config, collisions
// refused.
func TestParamMeta(t *testing.T) {
	for name, want := range map[string]string{
		"max_num_seqs": "trident_param_max_num_seqs",
		"kv.Block":     "trident_param_kv_Block",
		"gpu-mem util": "trident_param_gpu_mem_util",
	} {
		if got := ParamMetaKey(name); got != want {
			t.Errorf("ParamMetaKey(%q) = %q, want %q", name, got, want)
		}
	}
	got, err := ParamMeta("max_num_seqs=64, kv.block=16")
	if want := map[string]string{"trident_param_max_num_seqs": "64", "trident_param_kv_block": "16"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParamMeta = %v, %v; want %v", got, err, want)
	}
	if _, err := ParamMeta("a.b=1,a_b=2"); err == nil || !strings.Contains(err.Error(), `"a.b" and "a_b"`) {
		t.Fatalf("colliding keys: err = %v", err)
	}
	if _, err := ParamMeta("novalue"); err == nil {
		t.Fatal("malformed config accepted")
	}
}

// ReadInstance returns the parameters as the task sees them through their own meta keys and
// refuses a key that disagrees with the config.
func TestReadInstanceParams(t *testing.T) {
	env := map[string]string{
		"NOMAD_META_trident_config":              "max_num_seqs=64,kv.block=16",
		"NOMAD_META_trident_param_max_num_seqs":  "64",
		"NOMAD_META_trident_param_kv_block":      "",
		"NOMAD_META_trident_param_not_in_config": "7",
	}
	in, err := ReadInstance(func(k string) string { return env[k] })
	if want := map[string]string{"max_num_seqs": "64", "kv.block": "16"}; err != nil || !reflect.DeepEqual(in.Params, want) {
		t.Fatalf("Params = %v, %v; want %v", in.Params, err, want)
	}
	env["NOMAD_META_trident_param_max_num_seqs"] = "128"
	_, err = ReadInstance(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "NOMAD_META_trident_param_max_num_seqs") || !strings.Contains(err.Error(), "max_num_seqs=\"64\"") {
		t.Fatalf("disagreeing param meta: err = %v", err)
	}
}

func TestIsOOMExit(t *testing.T) {
	for _, c := range []struct {
		code      int
		oomKilled bool
		want      bool
	}{{137, false, true}, {1, true, true}, {0, true, true}, {1, false, false}, {143, false, false}} {
		if got := IsOOMExit(c.code, c.oomKilled); got != c.want {
			t.Errorf("IsOOMExit(%d, %v) = %v", c.code, c.oomKilled, got)
		}
	}
}
