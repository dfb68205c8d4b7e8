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
