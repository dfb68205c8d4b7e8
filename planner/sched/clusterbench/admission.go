package clusterbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/trident-sched/trident/planner/admit"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/sched"
	"github.com/trident-sched/trident/strategy/milp"
)

// AdmissionSpec selects an admission scenario: Batch batch pipelines (the scenario's
// shapes, all finite) submitted within Window seconds on Nodes nodes, more than fit at once.
type AdmissionSpec struct {
	Batch, Nodes int
	Seed         uint64
	// Window spreads the arrivals uniformly over [0, Window) seconds (seed 001 submits
	// its pipelines within one 15 s window).
	Window float64
	// NomadPlacement runs every admitted set at what Nomad's own scheduler reaches with
	// the autoscaler's target-value strategy per group (the emulation of Compare's
	// "autoscaler": binpacking, the bottleneck grown until it no longer places), and a set
	// fits when every group's first instances place; without it the set runs at its joint
	// round's throughputs. With FIFO admission this is the cluster without Trident, the
	// peer seed 001 measures against (Kubernetes' default scheduler, arrival order).
	NomadPlacement bool
}

// AdmissionOutcome is one policy's completion times on one scenario.
type AdmissionOutcome struct {
	MeanCompletion, P95Completion, MaxWait, Makespan float64
}

// Admission simulates the spec's batch pipelines under the admission policy pol: at every
// arrival and completion, planner/admit decides who starts (its Admit, the code the
// planner runs), and the admitted set runs at the throughputs of its joint round (the
// pooled joint model of sched.Shares under obj; a set whose minimums do not fit is refused).
func Admission(ctx context.Context, spec AdmissionSpec, pol admit.Policy, obj milp.Objective) (AdmissionOutcome, error) {
	sc, err := Generate(Spec{Pipelines: spec.Batch, Nodes: spec.Nodes, Seed: spec.Seed})
	if err != nil {
		return AdmissionOutcome{}, err
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 17))
	byName := map[string]sched.PlanInput{}
	var jobs []admit.SimJob
	for p, in := range sc.Inputs {
		rec := sc.Records[p]
		if rec == 0 { // every pipeline of an admission scenario is batch
			rec = 2e4 + rng.Float64()*4.8e5
		}
		// sizes in records of the pipeline's input: scale so that jobs run minutes to
		// hours alone, whatever the shape's record cost
		in.Weight = 1
		byName[in.Job] = in
		jobs = append(jobs, admit.SimJob{Name: in.Job, Arrival: rng.Float64() * spec.Window, Records: rec, Weight: 1})
	}
	// a job's size is its records over its rate alone on the whole cluster, times the
	// records' scale: shapes whose records are cheap get proportionally more of them
	alone := map[string]float64{}
	for _, in := range sc.Inputs {
		j, err := sched.Shares(ctx, []sched.PlanInput{byName[in.Job]}, sc.Nodes, obj, milp.Options{})
		if err != nil {
			return AdmissionOutcome{}, fmt.Errorf("%s alone: %w", in.Job, err)
		}
		alone[in.Job] = j.Shares[in.Job].Throughput
	}
	for k := range jobs {
		jobs[k].Records *= alone[jobs[k].Name] / 100 // 100 records/s alone: 200-5000 s
	}
	rates := func(ctx context.Context, set []admit.SimJob) (map[string]float64, bool, error) {
		ins := make([]sched.PlanInput, 0, len(set))
		for _, j := range set {
			ins = append(ins, byName[j.Name])
		}
		slices.SortFunc(ins, func(a, b sched.PlanInput) int {
			if a.Job < b.Job {
				return -1
			}
			return 1
		})
		if spec.NomadPlacement {
			return nomadRates(ins, sc.Nodes)
		}
		j, err := sched.Shares(ctx, ins, sc.Nodes, obj, milp.Options{})
		if errors.Is(err, milp.ErrJointInfeasible) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		out := map[string]float64{}
		for name, sh := range j.Shares {
			out[name] = sh.Throughput
		}
		return out, true, nil
	}
	res, err := admit.Simulate(ctx, admit.SimConfig{Jobs: jobs, Policy: pol, Rates: rates})
	if err != nil {
		return AdmissionOutcome{}, fmt.Errorf("%s: %w", sc.Spec, err)
	}
	return AdmissionOutcome{MeanCompletion: res.MeanCompletion, P95Completion: res.P95Completion, MaxWait: res.MaxWait, Makespan: res.Makespan}, nil
}

// nomadRates is the admitted set ins run by Nomad's scheduler and the autoscaler
// (autoscaler): each pipeline's throughput, and whether every group got its first
// instances (at least one, and its scaling policy's min).
func nomadRates(ins []sched.PlanInput, nodes []fsm.Node) (map[string]float64, bool, error) {
	plans := autoscaler(ins, nodes)
	out := map[string]float64{}
	for _, in := range ins {
		pl := plans[in.Job]
		for _, o := range in.Operators {
			n := 0
			for _, p := range pl.Targets[o.Name] {
				n += p.Total()
			}
			if n < max(1, o.MinInstances) {
				return nil, false, nil
			}
		}
		out[in.Job] = pl.Throughput
	}
	return out, true, nil
}
