// Package adapt is the per-operator adaptation loop of Trident (paper §5, Algorithm 1): it
// clusters the operator's per-request workload features online, runs one
// memory-constrained BO tuning session per workload cluster when that cluster becomes
// dominant, and advises the scheduling layer which configuration the operator should run.
// It decides nothing about when a configuration is applied; the planner does.
package adapt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"

	"github.com/trident-sched/trident/strategy/bo"
	"github.com/trident-sched/trident/strategy/cluster"
	"github.com/trident-sched/trident/strategy/configspace"
)

// Options configures an Advisor.
type Options struct {
	// Cluster configures the workload clustering.
	Cluster cluster.Options
	// BO configures each tuning session (Method, MemLimit, Margin, Delta...).
	BO bo.Options
	// Budget is the number of evaluations per tuning session (default 30).
	Budget int
	// WarmStart is how many recommendations of the most recently tuned other clusters
	// (newest first) a new session evaluates first (bo.Options.Initial; default 0). A
	// regime shift usually moves the optimum only part of the way, so a previous optimum
	// is a strong early point.
	WarmStart int
	// Logger receives tuning milestones (default: discard).
	Logger *slog.Logger
}

// Advice tells the caller what the operator should run for the dominant cluster.
type Advice struct {
	// Cluster is the dominant workload cluster the advice is for.
	Cluster int
	// Config is the configuration to run.
	Config configspace.Config
	// Evaluate is true while tuning: run Config under full load and Report the result.
	// It is false once the cluster is tuned: Config is its recommendation.
	Evaluate bool
	// Remaining is the number of evaluations left in the cluster's tuning budget.
	Remaining int
	// Predicted and PFeasible describe a recommendation (Evaluate false): the throughput
	// surrogate's prediction and the probability of feasibility when the session has just
	// finished, the measured throughput and 1 for a cluster tuned earlier. Both are 0 while
	// tuning (use Predict).
	Predicted, PFeasible float64
}

// Advisor is the adaptation loop of one operator. It is not safe for concurrent use.
type Advisor struct {
	space  *configspace.Space
	o      Options
	rng    *rand.Rand
	c      *cluster.Clusterer
	tuners map[int]*bo.Optimizer
}

// New returns an Advisor for an operator with the given space and number of workload
// features. rng drives the tuning sessions.
func New(space *configspace.Space, features int, o Options, rng *rand.Rand) (*Advisor, error) {
	if space == nil {
		return nil, errors.New("adapt: nil configuration space")
	}
	if rng == nil {
		return nil, errors.New("adapt: nil random source")
	}
	if o.Budget == 0 {
		o.Budget = 30
	}
	if o.Budget < 1 {
		return nil, fmt.Errorf("adapt: budget %d must be positive", o.Budget)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := cluster.New(features, o.Cluster)
	if err != nil {
		return nil, fmt.Errorf("adapt: %w", err)
	}
	return &Advisor{space: space, o: o, rng: rng, c: c, tuners: map[int]*bo.Optimizer{}}, nil
}

// Clusterer exposes the workload clusters (read-only use intended).
func (a *Advisor) Clusterer() *cluster.Clusterer { return a.c }

// ObserveRequest feeds one request's workload features to the clustering.
func (a *Advisor) ObserveRequest(features []float64) (cluster.Event, error) {
	ev, err := a.c.Observe(features)
	if err != nil {
		return ev, fmt.Errorf("adapt: %w", err)
	}
	if ev.Shift != nil {
		a.o.Logger.Info("adapt: regime shift", "from", ev.Shift.From, "to", ev.Shift.To)
	}
	return ev, nil
}

// Next returns the advice for the current dominant cluster: its tuned configuration, or the
// next configuration to evaluate while it is being tuned. ok is false before any cluster
// dominates.
func (a *Advisor) Next(ctx context.Context) (adv Advice, ok bool, err error) {
	return a.NextPending(ctx, nil)
}

// NextPending is Next while the configurations in pending are still being evaluated
// (trials running at once): a suggestion is never one of them, and the session's
// surrogates treat them as measured at their posterior mean (bo.Optimizer.SuggestPending).
// Remaining counts recorded evaluations only.
func (a *Advisor) NextPending(ctx context.Context, pending []configspace.Config) (adv Advice, ok bool, err error) {
	dom, ok := a.c.Dominant()
	if !ok {
		return Advice{}, false, nil
	}
	if dom.Status == cluster.Tuned {
		return Advice{Cluster: dom.ID, Config: dom.Best, Predicted: dom.BestThroughput, PFeasible: 1}, true, nil
	}
	t, err := a.tuner(dom.ID)
	if err != nil {
		return Advice{}, false, err
	}
	n := len(t.Observations())
	if n >= a.o.Budget {
		return a.finish(ctx, dom.ID, t)
	}
	c, err := t.SuggestPending(ctx, pending)
	if err != nil {
		return Advice{}, false, fmt.Errorf("adapt: cluster %d: %w", dom.ID, err)
	}
	return Advice{Cluster: dom.ID, Config: c, Evaluate: true, Remaining: a.o.Budget - n}, true, nil
}

// Conclude ends the dominant cluster's tuning session now, with the evaluations it has, as
// if its budget were spent, and returns its recommendation like Next does then. It is for
// a session whose optimiser has nothing left it deems safe to evaluate: every suggestion
// fails the caller's memory-safety threshold, and no evaluation will change that model.
// ok is false when no session runs for the dominant cluster.
func (a *Advisor) Conclude(ctx context.Context) (adv Advice, ok bool, err error) {
	dom, ok := a.c.Dominant()
	if !ok || dom.Status == cluster.Tuned {
		return Advice{}, false, nil
	}
	t, ok := a.tuners[dom.ID]
	if !ok {
		return Advice{}, false, nil
	}
	a.o.Logger.Info("adapt: tuning concluded early: no configuration left that is safe to evaluate", "cluster", dom.ID, "evaluations", len(t.Observations()), "budget", a.o.Budget)
	return a.finish(ctx, dom.ID, t)
}

// Report records the measurement m of an evaluation advised for cluster id (followed
// through merges).
func (a *Advisor) Report(id int, c configspace.Config, m bo.Measurement) error {
	id = a.c.Resolve(id)
	t, ok := a.tuners[id]
	if !ok {
		return fmt.Errorf("adapt: report for cluster %d, which is not being tuned", id)
	}
	if err := t.ObserveMeasurement(c, m); err != nil {
		return fmt.Errorf("adapt: cluster %d: %w", id, err)
	}
	return nil
}

// Record reports a measurement m of configuration c taken while the current dominant
// cluster dominated, whether or not c was advised (e.g. the configuration an operator
// already runs). It starts the cluster's tuning session if needed. recorded is false, with
// no error, when no cluster dominates yet or the dominant cluster is already tuned.
func (a *Advisor) Record(c configspace.Config, m bo.Measurement) (id int, recorded bool, err error) {
	dom, ok := a.c.Dominant()
	if !ok || dom.Status == cluster.Tuned {
		return dom.ID, false, nil
	}
	t, err := a.tuner(dom.ID)
	if err != nil {
		return dom.ID, false, err
	}
	if len(t.Observations()) >= a.o.Budget {
		return dom.ID, false, nil
	}
	if err := t.ObserveMeasurement(c, m); err != nil {
		return dom.ID, false, fmt.Errorf("adapt: cluster %d: %w", dom.ID, err)
	}
	return dom.ID, true, nil
}

// Retune discards the current dominant cluster's tuning (its session, or its tuned
// recommendation, which failed in production): the next Next starts a new session for
// it. Without a dominant cluster it does nothing.
func (a *Advisor) Retune() error {
	dom, ok := a.c.Dominant()
	if !ok {
		return nil
	}
	delete(a.tuners, dom.ID)
	if err := a.c.SetStatus(dom.ID, cluster.Untuned); err != nil {
		return fmt.Errorf("adapt: retune cluster %d: %w", dom.ID, err)
	}
	a.o.Logger.Info("adapt: cluster to be tuned again", "cluster", dom.ID)
	return nil
}

// Predict returns the prediction of cluster id's tuning session (followed through merges)
// at configuration c.
func (a *Advisor) Predict(ctx context.Context, id int, c configspace.Config) (bo.Prediction, error) {
	id = a.c.Resolve(id)
	t, ok := a.tuners[id]
	if !ok {
		return bo.Prediction{}, fmt.Errorf("adapt: predict for cluster %d, which is not being tuned", id)
	}
	p, err := t.Predict(ctx, c)
	if err != nil {
		return bo.Prediction{}, fmt.Errorf("adapt: cluster %d: %w", id, err)
	}
	return p, nil
}

// tuner returns the tuning session of cluster id, starting one if needed.
func (a *Advisor) tuner(id int) (*bo.Optimizer, error) {
	if t, ok := a.tuners[id]; ok {
		return t, nil
	}
	opts := a.o.BO
	opts.Initial = append(slices.Clone(opts.Initial), a.warmStart(id)...)
	t, err := bo.New(a.space, opts, rand.New(rand.NewPCG(a.rng.Uint64(), uint64(id))))
	if err != nil {
		return nil, fmt.Errorf("adapt: start tuning cluster %d: %w", id, err)
	}
	if err := a.c.SetStatus(id, cluster.Tuning); err != nil {
		return nil, err
	}
	a.tuners[id] = t
	a.o.Logger.Info("adapt: tuning started", "cluster", id, "budget", a.o.Budget)
	return t, nil
}

// warmStart returns the recommendations of the WarmStart most recently tuned clusters
// other than id (higher IDs are newer), newest first.
func (a *Advisor) warmStart(id int) []configspace.Config {
	cs := a.c.Clusters()
	var out []configspace.Config
	for i := len(cs) - 1; i >= 0 && len(out) < a.o.WarmStart; i-- {
		if c := cs[i]; c.ID != id && c.Status == cluster.Tuned && c.Best != nil {
			out = append(out, c.Best)
		}
	}
	return out
}

// finish ends cluster id's tuning session with its recommendation.
func (a *Advisor) finish(ctx context.Context, id int, t *bo.Optimizer) (Advice, bool, error) {
	rec, err := t.Recommend(ctx)
	if err != nil {
		return Advice{}, false, fmt.Errorf("adapt: cluster %d: %w", id, err)
	}
	if err := a.c.SetBest(id, rec.Config, rec.Measured); err != nil {
		return Advice{}, false, err
	}
	delete(a.tuners, id)
	a.o.Logger.Info("adapt: tuning finished", "cluster", id, "config", rec.Config.String(), "predicted", rec.Predicted, "p_feasible", rec.PFeasible, "ooms", t.OOMs())
	return Advice{Cluster: id, Config: rec.Config, Predicted: rec.Predicted, PFeasible: rec.PFeasible}, true, nil
}
