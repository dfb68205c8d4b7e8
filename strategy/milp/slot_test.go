package milp_test

import (
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/milp"
	"github.com/trident-sched/trident/strategy/milp/hetgen"
)

// Small instances where an accelerator instance's memory or cores leave some of its
// node's devices unusable (the kind of het/128/s10's 2-GPU, 128 GiB nodes beside a
// 128 GiB operator): the slot rows lower the LP relaxation, and never below the optimum
// HiGHS proves on the model without them; the model with the rows has the same optimum.
// The LPs are deterministic: het/8/s35 20.56 -> 15.13 (optimum 11.13), het/10/s68 167.19
// -> 165.04 (160.93), het/6/s31 2.619 -> 2.520 (2.231); the wanted drops are a little
// below these.
func TestSlotRowsTightenLP(t *testing.T) {
	for _, c := range []struct {
		spec hetgen.Spec
		cut  float64 // the least relative drop of the LP relaxation the rows must give
	}{{hetgen.Spec{Nodes: 8, Seed: 35}, 0.2}, {hetgen.Spec{Nodes: 10, Seed: 68}, 0.01}, {hetgen.Spec{Nodes: 6, Seed: 31}, 0.03}} {
		t.Run(c.spec.String(), func(t *testing.T) {
			in, err := hetgen.Generate(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			p := in.Problem
			opt, raw, err := milp.SolveRaw(p, milp.Options{RelGap: 1e-6, NoSlotRows: true}, time.Minute)
			if err != nil || raw == nil {
				t.Fatalf("HiGHS on the model without slot rows: %v", err)
			}
			optWith, rawWith, err := milp.SolveRaw(p, milp.Options{RelGap: 1e-6}, time.Minute)
			if err != nil || rawWith == nil {
				t.Fatalf("HiGHS on the model with slot rows: %v", err)
			}
			without, err := milp.LPRelaxation(p, milp.Options{NoSlotRows: true})
			if err != nil {
				t.Fatal(err)
			}
			with, err := milp.LPRelaxation(p, milp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("optimum %.8g (%.8g with the rows), LP relaxation %.6g without the slot rows, %.6g with", opt, optWith, without, with)
			if with > without*(1-c.cut) {
				t.Errorf("LP relaxation with slot rows %.6g, want at least %.0f %% below %.6g", with, 100*c.cut, without)
			}
			if with < opt-1e-6*opt {
				t.Errorf("LP relaxation with slot rows %.8g below the optimum %.8g: an invalid row", with, opt)
			}
			if d := optWith - opt; d > 2e-6*opt || d < -2e-6*opt {
				t.Errorf("optimum with slot rows %.8g, without %.8g: want equal (both proven to 1e-6)", optWith, opt)
			}
		})
	}
}
