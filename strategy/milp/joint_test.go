package milp_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/trident-sched/trident/strategy/milp"
)

// gpuNodes returns n nodes with 16 cores, 64 GiB and g devices of the model and memory.
func gpuNodes(prefix string, n, g int, model string, memMB float64) []milp.Node {
	out := make([]milp.Node, n)
	for k := range out {
		out[k] = milp.Node{Name: prefix + string(rune('a'+k)), CPU: 16, MemMB: 65536,
			Devices: []milp.Device{{Model: model, MemMB: memMB, Count: g}}, EgressBps: math.Inf(1)}
	}
	return out
}

// twoStage is a CPU stage (4 records/s per core-instance) feeding a one-GPU stage
// (10 records/s per instance).
func twoStage(gpuMemMB float64) []milp.Operator {
	return []milp.Operator{
		{Name: "parse", CPU: 1, MemMB: 1024, Capacity: 4, Amplification: 1},
		{Name: "infer", CPU: 1, MemMB: 2048, GPUs: 1, GPUMemMB: gpuMemMB, Capacity: 10, Amplification: 1},
	}
}

func solveJoint(t *testing.T, pipes []milp.JointPipeline, nodes []milp.Node, obj milp.Objective) *milp.JointShares {
	t.Helper()
	s, err := milp.SolveJoint(context.Background(), pipes, nodes, obj, milp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Bound < s.Objective-1e-9 {
		t.Fatalf("bound %.6g below the objective %.6g", s.Bound, s.Objective)
	}
	return s
}

// Two identical pipelines on 4 GPUs: the GPUs bind (parse needs 2.5 cores per GPU, there
// are 32 cores). Max-min with weights 1 and 3 splits the GPUs 1:3; with equal weights 2:2.
func TestJointMaxMinFollowsWeights(t *testing.T) {
	nodes := gpuNodes("n", 2, 2, "L4", 24*gib)
	for _, tc := range []struct {
		w1, w2     float64
		gpu1, gpu2 int
	}{{1, 1, 2, 2}, {1, 3, 1, 3}, {3, 1, 3, 1}} {
		pipes := []milp.JointPipeline{
			{Name: "a", Weight: tc.w1, Operators: twoStage(0)},
			{Name: "b", Weight: tc.w2, Operators: twoStage(0)},
		}
		s := solveJoint(t, pipes, nodes, milp.ObjectiveMaxMin)
		if s.Instances[0][1] != tc.gpu1 || s.Instances[1][1] != tc.gpu2 {
			t.Errorf("weights %v:%v: GPU instances %d:%d, want %d:%d", tc.w1, tc.w2, s.Instances[0][1], s.Instances[1][1], tc.gpu1, tc.gpu2)
		}
		// each pipeline alone could use all 4 GPUs: 40 records/s
		if math.Abs(s.Scale[0]-40) > 1e-6 {
			t.Errorf("scale %.6g, want 40", s.Scale[0])
		}
		if want := 10 * float64(tc.gpu1); math.Abs(s.Throughput[0]-want) > 1e-6 {
			t.Errorf("weights %v:%v: T_a = %.6g, want %v", tc.w1, tc.w2, s.Throughput[0], want)
		}
	}
}

// The sum objective gives every GPU beyond the minimum to the heavier pipeline; max-min
// does not starve the lighter one beyond its weight.
func TestJointSumAndMinimums(t *testing.T) {
	nodes := gpuNodes("n", 2, 2, "L4", 24*gib)
	pipes := []milp.JointPipeline{
		{Name: "a", Weight: 1, Operators: twoStage(0)},
		{Name: "b", Weight: 2, Operators: twoStage(0)},
	}
	s := solveJoint(t, pipes, nodes, milp.ObjectiveSum)
	if s.Instances[0][1] != 1 || s.Instances[1][1] != 3 {
		t.Errorf("sum: GPU instances %d:%d, want 1:3 (a keeps its minimum of one)", s.Instances[0][1], s.Instances[1][1])
	}
	// A guaranteed 20 records/s for a takes two GPUs first.
	pipes[0].MinThroughput = 20
	s = solveJoint(t, pipes, nodes, milp.ObjectiveSum)
	if s.Throughput[0] < 20-1e-6 || s.Instances[0][1] != 2 {
		t.Errorf("minimum 20: T_a = %.6g on %d GPUs, want >= 20 on 2", s.Throughput[0], s.Instances[0][1])
	}
	// Minimums that do not fit together are reported as such.
	pipes[1].MinThroughput = 30
	_, err := milp.SolveJoint(context.Background(), pipes, nodes, milp.ObjectiveSum, milp.Options{})
	if !errors.Is(err, milp.ErrJointInfeasible) {
		t.Errorf("minimums 20 + 30 on 40 records/s of GPUs: err %v, want ErrJointInfeasible", err)
	}
}

// An operator needing 40 GiB only counts the 80 GiB class: pipeline "big" can use the one
// A100, "small" any GPU; max-min gives big the A100 (its only class) and small the L4s.
func TestJointDeviceClasses(t *testing.T) {
	nodes := append(gpuNodes("l", 1, 2, "L4", 24*gib), gpuNodes("a", 1, 1, "A100", 80*gib)...)
	pipes := []milp.JointPipeline{
		{Name: "big", Weight: 1, Operators: twoStage(40 * gib)},
		{Name: "small", Weight: 1, Operators: twoStage(0)},
	}
	s := solveJoint(t, pipes, nodes, milp.ObjectiveMaxMin)
	if s.Instances[0][1] != 1 || s.Instances[1][1] != 2 {
		t.Errorf("GPU instances big %d, small %d; want 1 and 2", s.Instances[0][1], s.Instances[1][1])
	}
	if math.Abs(s.Scale[0]-10) > 1e-6 || math.Abs(s.Scale[1]-30) > 1e-6 {
		t.Errorf("scales %v, want [10 30]", s.Scale)
	}
	// small alone could use all three GPUs (30); jointly it keeps the two L4s
	if math.Abs(s.Objective-2.0/3) > 1e-6 {
		t.Errorf("objective %.6g, want 2/3", s.Objective)
	}
	// A 40 GiB operator on a cluster of L4s only has no share at all.
	_, err := milp.SolveJoint(context.Background(), pipes[:1], gpuNodes("l", 2, 2, "L4", 24*gib), milp.ObjectiveMaxMin, milp.Options{})
	if !errors.Is(err, milp.ErrJointInfeasible) {
		t.Errorf("40 GiB operator on L4s: err %v, want ErrJointInfeasible", err)
	}
}

func TestJointInputErrors(t *testing.T) {
	nodes := gpuNodes("n", 1, 1, "L4", 24*gib)
	for _, jp := range []milp.JointPipeline{
		{Name: "w0", Weight: 0, Operators: twoStage(0)},
		{Name: "winf", Weight: math.Inf(1), Operators: twoStage(0)},
		{Name: "min", Weight: 1, MinThroughput: -1, Operators: twoStage(0)},
	} {
		if _, err := milp.SolveJoint(context.Background(), []milp.JointPipeline{jp}, nodes, milp.ObjectiveMaxMin, milp.Options{}); err == nil {
			t.Errorf("%s: no error", jp.Name)
		}
	}
	if _, err := milp.ParseObjective("fair"); err == nil {
		t.Error("objective fair accepted")
	}
}

func TestValue(t *testing.T) {
	w, sc, T := []float64{1, 2}, []float64{10, 10}, []float64{5, 8}
	if v := milp.Value(milp.ObjectiveMaxMin, w, sc, T); math.Abs(v-0.4) > 1e-12 {
		t.Errorf("maxmin %v, want 0.4", v)
	}
	if v := milp.Value(milp.ObjectiveSum, w, sc, T); math.Abs(v-2.1) > 1e-12 {
		t.Errorf("sum %v, want 2.1", v)
	}
}

// TestJointOnThread: the joint model solved on a solver thread gives the same shares.
func TestJointOnThread(t *testing.T) {
	th := milp.NewThread()
	defer th.Close()
	nodes := gpuNodes("n", 2, 2, "L4", 24*gib)
	pipes := []milp.JointPipeline{{Name: "a", Weight: 1, Operators: twoStage(0)}, {Name: "b", Weight: 3, Operators: twoStage(0)}}
	s, err := milp.SolveJoint(context.Background(), pipes, nodes, milp.ObjectiveMaxMin, milp.Options{}.OnThread(th))
	if err != nil {
		t.Fatal(err)
	}
	if s.Instances[0][1] != 1 || s.Instances[1][1] != 3 {
		t.Fatalf("on a thread: GPU instances %d:%d, want 1:3", s.Instances[0][1], s.Instances[1][1])
	}
}

// Two pipelines whose only operator saturates a node's network per instance at full rate
// (10 records/s, weight 1), on 2 nodes with cores for 32 instances: alone, the pooled
// network carries 20 records/s (each pipeline's Scale); together the pooled contention
// row splits those 20 evenly under max-min (10 each, +-1e-6), though the cores would
// allow far more.
func TestJointContention(t *testing.T) {
	fetch := []milp.Operator{{Name: "fetch", CPU: 1, MemMB: 1024, Capacity: 10, Amplification: 1,
		Contention: []milp.Contention{{Kind: "network", Weight: 1}}}}
	nodes := []milp.Node{{Name: "a", CPU: 16, MemMB: 65536, EgressBps: math.Inf(1)}, {Name: "b", CPU: 16, MemMB: 65536, EgressBps: math.Inf(1)}}
	pipes := []milp.JointPipeline{{Name: "p", Weight: 1, Operators: fetch}, {Name: "q", Weight: 1, Operators: fetch}}
	s := solveJoint(t, pipes, nodes, milp.ObjectiveMaxMin)
	for p := range pipes {
		if math.Abs(s.Scale[p]-20) > 1e-6 || math.Abs(s.Throughput[p]-10) > 1e-6 {
			t.Errorf("pipeline %d: scale %.9g, share %.9g; want 20 and 10 (+-1e-6)", p, s.Scale[p], s.Throughput[p])
		}
	}
}
