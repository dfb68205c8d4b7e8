package clusterbench

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/trident-sched/trident/planner/sched"
	"github.com/trident-sched/trident/strategy/milp"
)

// TestJointRoundOnSmallClusters: on the small sizes the joint round never oversubscribes a
// node, reaches the pooled bound within the MILP's 1 % gap (every share packs: the bound
// is reached exactly on these seeds, so 1 % is slack for solver tolerance, not for a
// packing loss), and per-pipeline planning on the whole inventory oversubscribes (each
// pipeline alone takes the GPUs the others take too). Deterministic: seeded draws and the
// greedy phase that proves these plans.
func TestJointRoundOnSmallClusters(t *testing.T) {
	cs, err := Run(context.Background(), Config{Sizes: [][2]int{{2, 16}, {5, 32}}, Seeds: 3, Objective: milp.ObjectiveMaxMin})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		tr := c.Methods["trident"]
		if tr.Oversubscribed != 0 {
			t.Errorf("%s: trident oversubscribes %d nodes", c.Spec, tr.Oversubscribed)
		}
		if c.Gap > 0.01 {
			t.Errorf("%s: gap %.3g to the pooled bound", c.Spec, c.Gap)
		}
		if tr.MinShare <= 0 {
			t.Errorf("%s: a pipeline got nothing (min share %v)", c.Spec, tr.MinShare)
		}
		if c.Methods["per-pipeline"].Oversubscribed == 0 {
			t.Errorf("%s: per-pipeline planning fits: the scenario does not contend", c.Spec)
		}
	}
	sum := Summarise(cs)
	if len(sum) != 2 || sum[0].Scenarios != 3 || sum[1].Pipelines != 5 {
		t.Fatalf("summary %+v", sum)
	}
}

// TestAutoscalerEmulationStopsWhenFull: the emulated autoscaler's instances fit the
// nodes, and it stopped growing a pipeline only because its bottleneck's next instance
// fits on no node.
func TestAutoscalerEmulationStopsWhenFull(t *testing.T) {
	sc, err := Generate(Spec{Pipelines: 3, Nodes: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	plans := autoscaler(sc.Inputs, sc.Nodes)
	led := sched.NewLedger(sc.Nodes)
	var hs []sched.Holding
	for _, in := range sc.Inputs {
		h := sched.HoldingOf(in, plans[in.Job])
		hs = append(hs, h)
		for op, nodes := range plans[in.Job].Targets {
			o, _ := h.Pipeline.Operator(op)
			for n, pl := range nodes {
				led.Take(o, n, pl.Total())
			}
		}
	}
	if over := sched.Oversubscribed(sc.Nodes, hs); len(over) > 0 {
		t.Fatalf("oversubscribed: %v", over)
	}
	for _, in := range sc.Inputs {
		amps := in.Amplifications()
		neck, T := -1, math.Inf(1)
		for i, o := range in.Operators {
			n := 0
			for _, pl := range plans[in.Job].Targets[o.Name] {
				n += pl.Total()
			}
			if c := float64(n) * o.Capacity / amps[i]; c < T {
				neck, T = i, c
			}
		}
		if math.Abs(T-plans[in.Job].Throughput) > 1e-9 || T <= 0 {
			t.Errorf("%s: throughput %v, bottleneck carries %v", in.Job, plans[in.Job].Throughput, T)
		}
		for _, n := range sc.Nodes {
			if led.Fits(in.Operators[neck].Operator, n.Name, 1) {
				t.Errorf("%s: its bottleneck %s still fits on %s", in.Job, in.Operators[neck].Name, n.Name)
			}
		}
	}
}

// TestSharedLinks: with finite node egress and large records (Spec.Links) the scenario is
// the one without links but for the egress and record sizes; the joint round's plans
// together overfill no node, links included, while per-pipeline planning (each pipeline
// alone on the whole inventory, every link its own) overfills some links; the
// autoscaler's placements, routed in turn, record their egress and together overfill no
// link either.
func TestSharedLinks(t *testing.T) {
	plain, err := Generate(Spec{Pipelines: 5, Nodes: 64, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Generate(Spec{Pipelines: 5, Nodes: 64, Seed: 1, Links: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range sc.Nodes {
		p := plain.Nodes[i]
		if n.Name != p.Name || n.CPU != p.CPU || n.GPUs != p.GPUs || p.EgressBps != 0 || n.EgressBps < 10e9/8 || n.EgressBps > 100e9/8 {
			t.Fatalf("node %d: %+v with links, %+v without", i, n, p)
		}
	}
	slow, err := Generate(Spec{Pipelines: 5, Nodes: 64, Seed: 1, Links: true, LinkScale: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range slow.Nodes {
		if math.Abs(n.EgressBps-0.1*sc.Nodes[i].EgressBps) > 1e-6*sc.Nodes[i].EgressBps {
			t.Fatalf("node %s: egress %.4g with LinkScale 0.1, %.4g without", n.Name, n.EgressBps, sc.Nodes[i].EgressBps)
		}
	}
	for p := range sc.Inputs {
		if sc.Inputs[p].Job != plain.Inputs[p].Job || sc.Inputs[p].Operators[0].OutputBytes < 1e4 || plain.Inputs[p].Operators[0].OutputBytes != 1e5 {
			t.Fatalf("pipeline %d: %s / %s", p, sc.Inputs[p].Job, plain.Inputs[p].Job)
		}
	}
	c, err := Compare(context.Background(), sc, milp.ObjectiveMaxMin, milp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Methods["trident"]; o.Oversubscribed != 0 || o.EgressOversubscribed != 0 {
		t.Errorf("trident overfills %d nodes (%d links)", o.Oversubscribed, o.EgressOversubscribed)
	}
	if o := c.Methods["per-pipeline"]; o.EgressOversubscribed == 0 {
		t.Errorf("per-pipeline planning overfills no link (%d nodes overfilled): the scenario does not contend for links", o.Oversubscribed)
	}
	routed := routedInTurn(context.Background(), sc.Inputs, autoscaler(sc.Inputs, sc.Nodes), sc.Nodes)
	var hs []sched.Holding
	sends := 0
	for _, in := range sc.Inputs {
		hs = append(hs, sched.HoldingOf(in, routed[in.Job]))
		if len(routed[in.Job].Egress) > 0 {
			sends++
		}
	}
	if sends == 0 {
		t.Error("no routed autoscaler plan sends anything over a link: routing recorded no egress")
	}
	for _, l := range sched.Oversubscribed(sc.Nodes, hs) {
		if strings.Contains(l, sched.EgressOver) {
			t.Errorf("routed autoscaler plans overfill a link: %s", l)
		}
	}
}

// TestNomadRates: the cluster without Trident (Nomad's placement with the autoscaler) runs
// one pipeline alone at a positive rate no higher than its pooled bound alone, and refuses
// a set whose groups' first instances do not all place (twenty pipelines on four nodes).
func TestNomadRates(t *testing.T) {
	sc, err := Generate(Spec{Pipelines: 20, Nodes: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	one := sc.Inputs[:1]
	r, fits, err := nomadRates(one, sc.Nodes)
	if err != nil || !fits {
		t.Fatalf("one pipeline: fits %v, err %v", fits, err)
	}
	j, err := sched.Shares(context.Background(), one, sc.Nodes, milp.ObjectiveMaxMin, milp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, bound := r[one[0].Job], j.Shares[one[0].Job].Scale; !(got > 0) || got > bound*(1+1e-9) {
		t.Errorf("%s alone on Nomad: %.4g records/s, pooled bound %.4g", one[0].Job, got, bound)
	}
	if _, fits, err := nomadRates(sc.Inputs, sc.Nodes); err != nil || fits {
		t.Errorf("twenty pipelines on four nodes: fits %v (err %v), want refused", fits, err)
	}
}
