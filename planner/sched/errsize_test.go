package sched

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/trident-sched/trident/planner/fsm"
)

// TestImpossibleResourcesErrorIsShort: a job that does not fit got an error listing every
// operator (180 KB for 10,000 groups). The list keeps the five largest needs and counts the
// rest.
func TestImpossibleResourcesErrorIsShort(t *testing.T) {
	var ops []fsm.Operator
	for i := range 10000 {
		ops = append(ops, fsm.Operator{Name: fmt.Sprintf("operator-%05d", i), CPU: 1, MemoryMB: 64, Amplification: 1})
	}
	ops[7].CPU = 3
	err := CheckResources(ops, []fsm.Node{{Name: "a", CPU: 64, MemoryMB: 1 << 20}})
	if !errors.Is(err, ErrImpossible) {
		t.Fatalf("error %v", err)
	}
	if len(err.Error()) > 400 {
		t.Fatalf("error of %d bytes: %.300s", len(err.Error()), err)
	}
	want := "need 10002 cores (operator-00007 1 × 3, operator-00000 1 × 1, operator-00001 1 × 1, operator-00002 1 × 1, operator-00003 1 × 1 and 9995 more) but the inventory has 64"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want it to contain %q", err, want)
	}
}
