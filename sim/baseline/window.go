// Package baseline implements the schedulers Trident is compared with, each following its
// source: Static (tuned once), the Nomad Autoscaler target-value and threshold strategies
// (v0.4.7 formulas), Ray Data's actor-pool autoscaling, DS2, ContTune and SCOOT.
package baseline

import "github.com/trident-sched/trident/sim"

// Window accumulates per-operator metrics between two decisions.
type Window struct {
	// Ops holds one accumulator per operator.
	Ops []OpWindow
}

// OpWindow is one operator's accumulated metrics.
type OpWindow struct {
	// Processed counts records processed in the window.
	Processed float64
	// UtilSum sums the per-tick utilisation (divide by Ticks).
	UtilSum float64
	Ticks   int
}

// Reset empties the window for n operators.
func (w *Window) Reset(n int) {
	if len(w.Ops) != n {
		w.Ops = make([]OpWindow, n)
	}
	clear(w.Ops)
}

// Add folds one snapshot in.
func (w *Window) Add(s *sim.Snapshot) {
	if len(w.Ops) != len(s.Ops) {
		w.Reset(len(s.Ops))
	}
	for i, o := range s.Ops {
		a := &w.Ops[i]
		a.Processed += o.Processed
		a.UtilSum += o.Util
		a.Ticks++
	}
}

// MeanUtil returns the mean utilisation of operator i over the window.
func (w *Window) MeanUtil(i int) float64 {
	if w.Ops[i].Ticks == 0 {
		return 0
	}
	return w.Ops[i].UtilSum / float64(w.Ops[i].Ticks)
}

// currentPerNode copies the per-node placement of every operator from a snapshot.
func currentPerNode(s *sim.Snapshot) [][]int {
	out := make([][]int, len(s.Ops))
	for i, o := range s.Ops {
		out[i] = append([]int(nil), o.PerNode...)
	}
	return out
}

// freeOf returns the cluster's free resources for placements perNode.
func freeOf(env *sim.Env, perNode [][]int) []sim.Resources {
	return sim.FreeAfter(env.Cluster, env.Pipeline, perNode)
}
