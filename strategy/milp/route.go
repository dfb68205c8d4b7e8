package milp

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Route returns the best routing of the fixed placement d under p's model: the routing
// LP of Solve with every instance and transition fixed (throughput, per-node rates,
// egress, and the contended resources when operators declare Contention). d[i][n] counts
// the instances of operator i on node n by configuration, as Solution.PerNode. It answers
// "what does this placement carry under p": e.g. a plan made without contention, routed
// under a problem that declares it (strategy/milp/contendbench). The plan must keep p's
// pools, bounds and already-transitioned instances; it is returned only if it passes
// Validate. Without a solver answer by opts.TimeLimit it falls back to the routing in
// proportion to node capacity (also checked).
func Route(ctx context.Context, p *Problem, d Deployment, opts Options) (*Solution, error) {
	q, err := newPrep(p)
	if err != nil {
		return nil, err
	}
	if len(d) != q.N {
		return nil, fmt.Errorf("milp: route: placement has %d operator rows, want %d", len(d), q.N)
	}
	opts = opts.withDefaults()
	x, dd := q.zeros(), q.zeros()
	for i := range q.N {
		if len(d[i]) != q.M {
			return nil, fmt.Errorf("milp: route: placement row %d has %d nodes, want %d", i, len(d[i]), q.M)
		}
		for n, pl := range d[i] {
			x[i][n] = pl.Total()
			dd[i][n] = pl.Candidate - q.K[i][n]
			if dd[i][n] < 0 {
				return nil, fmt.Errorf("milp: route: %s on %s: %d already-transitioned instances rolled back",
					p.Operators[i].Name, p.Nodes[n].Name, -dd[i][n])
			}
		}
	}
	if !q.fits(x) || !q.withinBounds(x) {
		return nil, fmt.Errorf("milp: route: the placement exceeds a node's resources or an operator's instance bounds")
	}
	best := q.assemble(x, dd, nil, math.Inf(1))
	m := buildModel(q, opts)
	if r := m.routeLP(ctx, m.startVector(best), opts, time.Now().Add(opts.TimeLimit)); r != nil && r.Objective > best.Objective &&
		Validate(p, r) == nil {
		best = r
	}
	best.Bound, best.Gap, best.Status, best.Source = math.Inf(1), math.Inf(1), StatusHeuristic, "route"
	if err := Validate(p, best); err != nil {
		return nil, fmt.Errorf("milp: route: %w", err)
	}
	return best, nil
}
