package opcontract

import (
	"reflect"
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
	want := Instance{Operator: "ocr", Config: map[string]string{"batch": "8", "threads": "2"}, Epoch: 2}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadInstance = %+v, %v; want %+v", got, err, want)
	}
	// A group of the job file as written: no operator meta, no epoch yet.
	got, err = ReadInstance(env(map[string]string{"NOMAD_GROUP_NAME": "parse"}))
	if want := (Instance{Operator: "parse", Config: map[string]string{}}); err != nil || !reflect.DeepEqual(got, want) {
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
