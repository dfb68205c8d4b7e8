// Package transbench measures config transitions on packed clusters (`trident bench
// transitions`): the job versions the planner's Nomad actuator renders for a chain of
// transition decisions (nomadact.RenderVersions, the shipped rendering) are played
// against an emulation of Nomad's placement on the pinned nodes, in three modes: the
// unfitted surge (the rendering before the surge was fitted to the inventory), the fitted
// surge (-canary=false) and the canary (the default).
//
// # Nomad emulation
//
// Cluster holds the allocations a converged job version runs: per rendered group its node
// (the `${node.unique.name}` constraint, which must agree with meta trident_node), its
// operator, its spec and its count. Each instance takes its operator's cores, memory and
// GPUs (fsm.Operator) from its node (fsm.Node). Going from the running version to the
// next one (Cluster.Apply):
//
//   - a group whose spec (everything but its name, count and update block) is unchanged
//     keeps its allocations; scaled down, it stops the difference; scaled up, it places it;
//   - a group that disappears (or goes to count 0) stops its allocations; a new group
//     places its count;
//   - a group whose spec changed with update.canary = 1 places one canary beside its old
//     allocation; the old one stops only at the promotion, at the end of the version;
//   - a group whose spec changed without a canary is replaced: its allocations stop and
//     the new ones are placed (max_parallel at a time, which takes as long but needs no
//     more room).
//
// Stops and placements of one version are one plan, as in Nomad's scheduler: a placement
// may use what a stop of the same version frees, but not what a canary's old allocation
// still holds. A node whose use after the version exceeds its cores, memory or GPUs gets
// none of the version's placements, and the version never converges: it stalls. The real
// planner fails it after its apply timeout (default 6 min) and Nomad reverts to the
// previous version, so the transition does not complete.
//
// # Cost model
//
// Time runs per version. Stops take effect at its start; an allocation placed serves
// after its operator's cold start (trident_cold_start_s; 30 s for an accelerator operator
// and 5 s for a CPU one when unset). A version lasts until its deployment is healthy: the
// longest cold start of its placements plus min_healthy_time (5 s); a canary version
// lasts the canary's probe window (cold start + 2 min observation warm-up + 30 s probe),
// after which it is promoted and the old allocation of its group stops; a stalled version
// lasts the apply timeout (360 s); a version that only stops lasts 0 s. An operator's
// instance-seconds out of service are the integral, over the versions, of how many of its
// planned instances (the decision's count) are not serving. An instance stopped before
// its replacement serves costs the replacement's cold start. The sibling a canary
// displaces on a full node costs the canary's cold start once: during the rest of the
// probe window the canary serves in its place. At the promotion the canary slot's old
// allocation stops; the operator then runs one instance short until a later version has
// placed one in the room it freed (another cold start). Throughput lost is the lost
// instance-seconds over the operator's capacity in the scheduling window the MILP weighs
// a transition over: lost / (instances × 300 s).
package transbench

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/planner/nomadact"
)

// Timings of the cost model, in seconds (see the package comment).
const (
	ColdStartGPU   = 30.0  // cold start of an accelerator operator without trident_cold_start_s
	ColdStartCPU   = 5.0   // cold start of a CPU operator without trident_cold_start_s
	MinHealthy     = 5.0   // min_healthy_time of the rendered update blocks (Options default)
	CanaryWarmup   = 120.0 // the observation layer's warm-up (-canary-warmup default)
	CanaryProbe    = 30.0  // -canary-probe default
	ApplyTimeout   = 360.0 // Options.ApplyTimeout default: twice the 3 min progress deadline
	WindowSec      = 300.0 // the scheduling window a transition's cost is weighed over
	canaryOverhead = CanaryWarmup + CanaryProbe
)

// ColdStart is op's cold start in the cost model: trident_cold_start_s, or ColdStartGPU /
// ColdStartCPU when unset.
func ColdStart(op fsm.Operator) float64 {
	switch {
	case op.ColdStartSec > 0:
		return op.ColdStartSec
	case op.GPUs > 0:
		return ColdStartGPU
	}
	return ColdStartCPU
}

// group is the allocations of one rendered group that a converged version runs.
type group struct {
	op, node, spec string
	count          int
}

// Cluster is the emulated Nomad cluster of one pipeline job (see the package comment).
type Cluster struct {
	ops    map[string]fsm.Operator
	nodes  map[string]fsm.Node
	groups map[string]group
}

// NewCluster returns an empty cluster of nodes for pipeline p.
func NewCluster(p *fsm.Pipeline, nodes []fsm.Node) *Cluster {
	c := &Cluster{ops: map[string]fsm.Operator{}, nodes: map[string]fsm.Node{}, groups: map[string]group{}}
	for _, op := range p.Operators {
		c.ops[op.Name] = op
	}
	for _, n := range nodes {
		c.nodes[n.Name] = n
	}
	return c
}

// Step is what one job version did to the cluster.
type Step struct {
	// Stalled: some placement did not fit its pinned node (Blocked), so the version
	// never converges.
	Stalled bool
	Blocked []string
	// ExtraGPUs is how many GPUs the version asked beyond the nodes' capacity (summed
	// over the nodes).
	ExtraGPUs int
	// Seconds is how long the version took (see the package comment).
	Seconds float64
	// Stopped and Placed count, per operator, the allocations stopped at the version's
	// start and placed by it (canaries included); Canaries counts the canaries.
	Stopped, Placed map[string]int
	Canaries        int
	// Lost is, per operator, the instance-seconds below its planned count of serving
	// instances during the version.
	Lost map[string]float64
}

// target is one group of a version to apply.
type target struct {
	group
	canary bool
}

// groupsOf reads the rendered groups of job with a count: operator, pinned node, spec.
func (c *Cluster) groupsOf(job *api.Job) (map[string]target, error) {
	out := map[string]target{}
	for _, g := range job.TaskGroups {
		if g == nil || g.Name == nil {
			return nil, fmt.Errorf("job has a group without a name")
		}
		if g.Count == nil || *g.Count == 0 {
			continue
		}
		op, ok := c.ops[g.Meta[nomadact.MetaOperator]]
		if !ok {
			return nil, fmt.Errorf("group %s: operator %q is not in the pipeline", *g.Name, g.Meta[nomadact.MetaOperator])
		}
		node := ""
		for _, k := range g.Constraints {
			if k != nil && k.LTarget == "${node.unique.name}" && k.Operand == "=" {
				node = k.RTarget
			}
		}
		if node == "" || node != g.Meta[nomadact.MetaNode] {
			return nil, fmt.Errorf("group %s: pinned to %q by its constraint, meta %s is %q", *g.Name, node, nomadact.MetaNode, g.Meta[nomadact.MetaNode])
		}
		if _, ok := c.nodes[node]; !ok {
			return nil, fmt.Errorf("group %s: node %q is not in the cluster", *g.Name, node)
		}
		spec, err := specOf(g)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", *g.Name, err)
		}
		canary := g.Update != nil && g.Update.Canary != nil && *g.Update.Canary > 0
		out[*g.Name] = target{group{op.Name, node, spec, *g.Count}, canary}
	}
	return out, nil
}

// specOf is what of group g makes a change destructive in this emulation: everything but
// its name, count, update block and scaling policy.
func specOf(g *api.TaskGroup) (string, error) {
	s := *g
	s.Name, s.Count, s.Update, s.Scaling = nil, nil, nil, nil
	b, err := json.Marshal(&s)
	if err != nil {
		return "", fmt.Errorf("encode spec: %w", err)
	}
	return string(b), nil
}

// use is a node's cores, memory and GPUs in use.
type use struct {
	cpu       float64
	mem, gpus int
}

func (u *use) add(op fsm.Operator, n int) {
	u.cpu += float64(n) * op.CPU
	u.mem += n * op.MemoryMB
	u.gpus += n * op.GPUs
}

// Apply plays job, the next version of the pipeline job, against the cluster; want is
// each operator's planned number of instances, against which instances out of service
// are counted. A stalled version leaves the cluster as Nomad would until its revert: the
// stops made, the placements on the nodes that had room made, canaries not promoted;
// the caller applies the previous version again to model the revert.
func (c *Cluster) Apply(job *api.Job, want map[string]int) (Step, error) {
	tgt, err := c.groupsOf(job)
	if err != nil {
		return Step{}, err
	}
	st := Step{Stopped: map[string]int{}, Placed: map[string]int{}, Lost: map[string]float64{}}
	type place struct {
		name   string
		t      target
		n      int
		canary bool
	}
	var places []place
	after := map[string]*use{} // node use once the version's stops and placements are made
	for _, g := range c.groups {
		u := after[g.node]
		if u == nil {
			u = &use{}
			after[g.node] = u
		}
		u.add(c.ops[g.op], g.count)
	}
	stop := func(g group, n int) {
		st.Stopped[g.op] += n
		after[g.node].add(c.ops[g.op], -n)
	}
	names := slices.Sorted(maps.Keys(c.groups))
	for n := range tgt {
		if _, ok := c.groups[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	next := map[string]group{}     // groups once the version converged (or stalled)
	promoted := map[string]group{} // canary groups: their state after the promotion
	for _, name := range names {
		cur, running := c.groups[name]
		t, wanted := tgt[name]
		switch {
		case !wanted:
			stop(cur, cur.count)
		case !running:
			places = append(places, place{name, t, t.count, false})
		case cur.spec == t.spec && cur.node == t.node:
			g := cur
			if t.count < cur.count {
				stop(cur, cur.count-t.count)
				g.count = t.count
			} else if t.count > cur.count {
				places = append(places, place{name, t, t.count - cur.count, false}) // added below once placed
			}
			next[name] = g
		case t.canary:
			if t.count != 1 {
				return st, fmt.Errorf("group %s: a canary of a group of %d: only count-1 canary slots are modelled", name, t.count)
			}
			places = append(places, place{name, t, 1, true})
			next[name] = cur // until the promotion
			promoted[name] = t.group
		default: // destructive update without canary: replaced
			stop(cur, cur.count)
			places = append(places, place{name, t, t.count, false})
		}
	}
	for _, pl := range places {
		u := after[pl.t.node]
		if u == nil {
			u = &use{}
			after[pl.t.node] = u
		}
		u.add(c.ops[pl.t.op], pl.n)
	}
	blocked := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(after)) {
		u, n := after[name], c.nodes[name]
		st.ExtraGPUs += max(0, u.gpus-n.GPUs)
		if u.gpus > n.GPUs || u.cpu > n.CPU+1e-9 || u.mem > n.MemoryMB {
			blocked[name] = true
			st.Blocked = append(st.Blocked, name)
		}
	}
	st.Stalled = len(blocked) > 0
	// Serving instances per operator at the version's start (before its stops).
	serving := map[string]int{}
	for _, g := range c.groups {
		serving[g.op] += g.count
	}
	coldest := map[string]float64{} // per operator: seconds until its placements serve
	for _, pl := range places {
		if blocked[pl.t.node] {
			continue
		}
		op := c.ops[pl.t.op]
		st.Placed[op.Name] += pl.n
		coldest[op.Name] = ColdStart(op)
		d := ColdStart(op) + MinHealthy
		if pl.canary {
			st.Canaries++
			d = ColdStart(op) + canaryOverhead
		}
		st.Seconds = max(st.Seconds, d)
		if pl.canary {
			continue // next[name] stays the old allocation until the promotion
		}
		g := next[pl.name]
		if g.spec != pl.t.spec || g.node != pl.t.node {
			g = group{pl.t.op, pl.t.node, pl.t.spec, 0}
		}
		g.count += pl.n
		next[pl.name] = g
	}
	if st.Stalled {
		st.Seconds = ApplyTimeout
	} else {
		for name, g := range promoted {
			next[name] = g
		}
	}
	for _, op := range slices.Sorted(maps.Keys(c.ops)) {
		s0 := serving[op] - st.Stopped[op]
		cold := min(coldest[op], st.Seconds)
		lost := float64(max(0, want[op]-s0))*cold + float64(max(0, want[op]-s0-st.Placed[op]))*(st.Seconds-cold)
		if lost > 0 {
			st.Lost[op] = lost
		}
	}
	c.groups = map[string]group{}
	for name, g := range next {
		if g.count > 0 {
			c.groups[name] = g
		}
	}
	return st, nil
}

// Serving is how many allocations of operator op the cluster runs.
func (c *Cluster) Serving(op string) int {
	n := 0
	for _, g := range c.groups {
		if g.op == op {
			n += g.count
		}
	}
	return n
}

// Running is the cluster's allocations per group, "<group>|<node>" → count.
func (c *Cluster) Running() map[string]int {
	out := map[string]int{}
	for name, g := range c.groups {
		out[name+"|"+g.node] = g.count
	}
	return out
}

// GPUsUsed is how many GPUs of node the cluster's allocations hold.
func (c *Cluster) GPUsUsed(node string) int {
	u := use{}
	for _, g := range c.groups {
		if g.node == node {
			u.add(c.ops[g.op], g.count)
		}
	}
	return u.gpus
}
