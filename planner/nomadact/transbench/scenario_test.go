package transbench

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/trident-sched/trident/planner/nomadact"
)

// Generate is deterministic per seed, and different seeds give different scenarios.
func TestGenerateDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		a, err := Generate(seed, 2, false)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Generate(seed, 2, false)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two scenarios differ", seed)
		}
		c, err := Generate(seed+100, 2, false)
		if err != nil {
			t.Fatal(err)
		}
		if reflect.DeepEqual(a.Nodes, c.Nodes) && reflect.DeepEqual(a.Initial, c.Initial) {
			t.Errorf("seeds %d and %d: same cluster and plan", seed, seed+100)
		}
	}
}

// Packed scenarios hold every GPU of the target's nodes (placed by the shipped rendering
// on the emulated cluster); the spare variant has exactly one instance's worth free there
// and is otherwise the same. The generator's ranges and the chain's batches hold.
func TestGeneratePacked(t *testing.T) {
	const maxBatch = 3
	seen := map[int]bool{}
	for seed := uint64(1); seed <= 60; seed++ {
		s, err := Generate(seed, maxBatch, false)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := Generate(seed, maxBatch, true)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(s.Initial, sp.Initial) || !reflect.DeepEqual(s.Chain, sp.Chain) || s.Op != sp.Op {
			t.Fatalf("seed %d: the spare variant plans differently", seed)
		}
		ops, accs := len(s.Pipeline.Operators), 0
		for _, o := range s.Pipeline.Operators {
			if o.GPUs > 0 {
				accs++
				if o.Params == "" {
					t.Errorf("seed %d: accelerator operator %s is not tunable", seed, o.Name)
				}
			}
		}
		if ops < 2 || ops > 5 || accs < 1 || accs > 2 {
			t.Errorf("seed %d: %d operators, %d accelerators", seed, ops, accs)
		}
		gpuNodes := 0
		for _, n := range s.Nodes {
			if n.GPUs > 0 {
				gpuNodes++
				seen[n.GPUs] = true
				if n.GPUs != 1 && n.GPUs != 2 && n.GPUs != 4 && n.GPUs != 8 {
					t.Errorf("seed %d: node %s has %d GPUs", seed, n.Name, n.GPUs)
				}
			}
		}
		if gpuNodes < 2 || gpuNodes > 16 || len(s.Nodes)-gpuNodes < 1 || len(s.Nodes)-gpuNodes > 3 {
			t.Errorf("seed %d: %d GPU nodes, %d CPU-only nodes", seed, gpuNodes, len(s.Nodes)-gpuNodes)
		}
		op, _ := s.Pipeline.Operator(s.Op)
		for _, v := range []*Scenario{s, sp} {
			c := NewCluster(v.Pipeline, v.Nodes)
			vs, err := nomadact.RenderVersions(v.Pipeline, v.Initial, nil, nil, nomadact.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if st, err := c.Apply(vs[0].Job, v.Want()); err != nil || st.Stalled {
				t.Fatalf("seed %d spare %v: initial version %+v, %v", seed, v.Spare, st, err)
			}
			for node := range v.Initial.Operators[v.Op].Nodes {
				n := v.NodeMap()[node]
				free := n.GPUs - c.GPUsUsed(node)
				if !v.Spare && free != 0 || v.Spare && free != op.GPUs {
					t.Errorf("seed %d spare %v: node %s has %d of %d GPUs free", seed, v.Spare, node, free, n.GPUs)
				}
			}
		}
		moved := 0
		for i, d := range s.Chain {
			tr := d.Operators[s.Op].Transitions
			if tr < 1 || tr > maxBatch {
				t.Errorf("seed %d decision %d moves %d instances", seed, i, tr)
			}
			moved += tr
			if d.Operators[s.Op].Count() != s.Want()[s.Op] {
				t.Errorf("seed %d decision %d: %d instances of %s, want %d", seed, i, d.Operators[s.Op].Count(), s.Op, s.Want()[s.Op])
			}
		}
		last := s.Chain[len(s.Chain)-1].Operators[s.Op]
		for node, pl := range last.Nodes {
			if pl.Current != 0 {
				t.Errorf("seed %d: the last decision keeps %d old instances on %s", seed, pl.Current, node)
			}
		}
		if moved != s.Want()[s.Op] {
			t.Errorf("seed %d: the chain moves %d of %d instances", seed, moved, s.Want()[s.Op])
		}
	}
	for _, g := range []int{1, 2, 4, 8} {
		if !seen[g] {
			t.Errorf("no node with %d GPUs in 60 seeds", g)
		}
	}
}

// On every packed scenario: the unfitted surge stalls at the first batch asking GPUs
// beyond the nodes'; the fitted surge completes in two versions per batch, each instance
// replaced in place once (one cold start each: lost share = 30 s / 300 s, to 1e-9); the
// canary completes too, at most one canary version more, and touches no other operator.
func TestRunScenarioPacked(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		s, err := Generate(seed, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		n := float64(s.Want()[s.Op])
		un, err := RunScenario(s, UnfittedSurge)
		if err != nil {
			t.Fatal(err)
		}
		if un.Completed || un.StalledAt != 0 || un.Rounds != 1 || un.ExtraGPUs < 1 {
			t.Errorf("seed %d unfitted surge: %+v, want stalled at the first version, GPUs over", seed, un)
		}
		fit, err := RunScenario(s, FittedSurge)
		if err != nil {
			t.Fatal(err)
		}
		if !fit.Completed || fit.Rounds != 2*len(s.Chain) || fit.ExtraGPUs != 0 || fit.ShortAtEnd != 0 || fit.OtherLostSec != 0 {
			t.Errorf("seed %d fitted surge: %+v, want completed in %d versions", seed, fit, 2*len(s.Chain))
		}
		if d := fit.LostSec - n*ColdStartGPU; d < -1e-9 || d > 1e-9 {
			t.Errorf("seed %d fitted surge lost %v instance-s, want %v (each of %v instances once)", seed, fit.LostSec, n*ColdStartGPU, n)
		}
		can, err := RunScenario(s, Canary)
		if err != nil {
			t.Fatal(err)
		}
		if !can.Completed || can.Rounds < 2*len(s.Chain) || can.Rounds > 2*len(s.Chain)+1 || can.ExtraGPUs != 0 || can.ShortAtEnd != 0 || can.OtherLostSec != 0 {
			t.Errorf("seed %d canary: %+v", seed, can)
		}
		switch {
		case can.Canaries == 0 && (n > 1 || can.LostSec != fit.LostSec || can.Seconds != fit.Seconds || can.Rounds != fit.Rounds):
			// Only a lone instance on a full node leaves no sibling to stop: then the
			// transition is the fitted surge.
			t.Errorf("seed %d: no canary for %v instances (canary %+v, fitted surge %+v)", seed, n, can, fit)
		case can.Canaries > 1:
			t.Errorf("seed %d: %d canary versions for one candidate", seed, can.Canaries)
		case can.Canaries == 1 && (can.LostSec < fit.LostSec || can.Seconds <= fit.Seconds):
			t.Errorf("seed %d: canary lost %v in %v s, fitted surge %v in %v s: the canary adds a probe window and costs at least the surge's cold starts", seed, can.LostSec, can.Seconds, fit.LostSec, fit.Seconds)
		}
	}
}

// Run prints a table per variant with a row per mode and returns our figures and the
// peer's; invalid settings are refused.
func TestRunSmall(t *testing.T) {
	var out, progress bytes.Buffer
	res, err := Run(context.Background(), Config{Seeds: 3, MaxBatch: 2, Progress: &progress}, &out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Transitions on packed clusters", "Same plans with spare GPUs", "unfitted-surge", "fitted-surge", "canary"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(progress.String(), "3/3 seeds") {
		t.Errorf("progress %q", progress.String())
	}
	if res.Figures["packed_canary_completed_share"] != 1.0 || res.Figures["packed_fitted_surge_completed_share"] != 1.0 {
		t.Errorf("figures %v", res.Figures)
	}
	if res.Peers["packed_unfitted_surge_completed_share"] != 0.0 {
		t.Errorf("peers %v", res.Peers)
	}
	if _, ok := res.Peers["packed_unfitted_surge_rounds_median"]; ok {
		t.Errorf("peers %v: a median over no completed transition", res.Peers)
	}
	if _, err := Run(context.Background(), Config{Seeds: 1, MaxBatch: 0}, &out); err == nil {
		t.Error("max batch 0 accepted")
	}
}
