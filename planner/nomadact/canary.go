package nomadact

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/fsm"
)

// Canaries through Nomad's own mechanism.
//
// Nomad places a canary only for a destructive update of a group that already runs
// allocations, and promoting it replaces every allocation of that group. The per-node
// groups of a plan (GroupName) carry the config generation in their name, so a config
// change is a new group, never a canary. Each tunable operator therefore keeps one of its
// instances in a group of its own, its canary slot SlotGroupName(op) (count 1, pinned to
// a node like any rendered group). A candidate config's first instance is a canary of
// that group: the decision's canary version changes the slot's config (and, when the
// candidate's instances are planned elsewhere, its node) with update { canary = 1,
// auto_promote = false, auto_revert = true }. Nomad places the canary beside the slot's
// old allocation; on a node without room the same version stops one old-config instance
// of the operator there. The planner measures the canary, then promotes the deployment
// (Nomad stops the slot's old allocation: the canary is the slot) and rolls the rest in
// the scheduler's batches, or fails it (Nomad reverts to the stable version).

const (
	// PhaseCanary is the phase of a decision's canary version.
	PhaseCanary = "canary"
	// MetaCanarySlot (group meta) marks an operator's canary slot group.
	MetaCanarySlot = "trident_canary_slot"
)

// SlotGroupName is the canary slot group of operator op.
func SlotGroupName(op string) string { return op + "@canary" }

// takeSlot moves one instance of the decision's groups ws of operator op into its canary
// slot (ws[SlotGroupName(op)]): the slot of the existing job stays where the decision
// keeps an instance of the slot's config generation on the slot's node; otherwise the
// slot goes to the node with the most current-config instances (names break ties). An
// operator without instances has no slot.
func takeSlot(op string, t fsm.OpTarget, ws map[string]groupWant, existing *api.Job) {
	if g := slotGroup(existing, op); g != nil {
		gen, err := strconv.ParseUint(g.Meta[MetaConfigEpoch], 10, 64)
		tr, base, trial, terr := slotTrial(g)
		if trial && terr == nil {
			gen = base.Epoch // a running trial stays while its production generation does
		}
		name := GroupName(op, g.Meta[MetaNode], gen)
		if w, ok := ws[name]; ok && err == nil && terr == nil && w.count >= 1 && w.final >= 1 {
			w.count--
			w.final--
			ws[name] = w
			sw := groupWant{node: w.node, config: w.config, gen: w.gen, count: 1, final: 1, slot: true}
			if trial {
				sw.trial = &tr
			}
			ws[SlotGroupName(op)] = sw
			return
		}
	}
	names := make([]string, 0, len(ws))
	for n := range ws {
		names = append(names, n)
	}
	sort.Strings(names)
	best := ""
	for _, n := range names {
		w := ws[n]
		if w.slot || w.count < 1 || w.final < 1 {
			continue
		}
		if best == "" {
			best = n
			continue
		}
		b := ws[best]
		if (w.gen == t.Epoch) != (b.gen == t.Epoch) {
			if w.gen == t.Epoch {
				best = n
			}
			continue
		}
		if w.count > b.count {
			best = n
		}
	}
	if best == "" {
		return
	}
	w := ws[best]
	w.count--
	w.final--
	ws[best] = w
	ws[SlotGroupName(op)] = groupWant{node: w.node, config: w.config, gen: w.gen, count: 1, final: 1, slot: true}
}

// slotGroup returns op's canary slot group in job, nil when it has none running.
func slotGroup(job *api.Job, op string) *api.TaskGroup {
	if job == nil {
		return nil
	}
	for _, g := range job.TaskGroups {
		if g != nil && g.Name != nil && *g.Name == SlotGroupName(op) && g.Count != nil && *g.Count > 0 {
			return g
		}
	}
	return nil
}

// renderCanary builds the canary version of decision d from the existing job: for every
// operator whose candidate config starts in d (no instance of the candidate's generation
// runs yet) and that has a canary slot, the slot's group gets the candidate config, the
// node of one of the candidate's planned instances and a canary update block; nothing
// else changes, except one old-config instance of the operator stopped on a node that
// has no room for the canary beside it (in the planner's model, nodes; a node missing
// from it is left to Nomad). It returns the operators canaried; none (and a nil job)
// when no operator qualifies, and the decision goes straight to its surge version.
func renderCanary(p *fsm.Pipeline, d fsm.Decision, existing *api.Job, nodes map[string]fsm.Node) (*api.Job, []string, error) {
	if existing == nil {
		return nil, nil, nil
	}
	raw, err := json.Marshal(existing)
	if err != nil {
		return nil, nil, fmt.Errorf("copy job %q: %w", p.Job, err)
	}
	var job api.Job
	if err := json.Unmarshal(raw, &job); err != nil {
		return nil, nil, fmt.Errorf("copy job %q: %w", p.Job, err)
	}
	type use struct {
		cpu       float64
		mem, gpus int
	}
	used := map[string]use{}
	add := func(node string, op fsm.Operator, k int) {
		u := used[node]
		u.cpu += float64(k) * op.CPU
		u.mem += k * op.MemoryMB
		u.gpus += k * op.GPUs
		used[node] = u
	}
	byName := map[string]*api.TaskGroup{}
	for _, g := range job.TaskGroups {
		if g == nil || g.Name == nil {
			continue
		}
		byName[*g.Name] = g
		if op, ok := p.Operator(g.Meta[MetaOperator]); ok && g.Count != nil && g.Meta[MetaAnchor] != "true" {
			add(g.Meta[MetaNode], op, *g.Count)
		}
	}
	fits := func(node string, op fsm.Operator) bool {
		n, ok := nodes[node]
		if !ok {
			return true
		}
		u := used[node]
		return u.gpus+op.GPUs <= n.GPUs && u.cpu+op.CPU <= n.CPU+1e-9 && u.mem+op.MemoryMB <= n.MemoryMB
	}
	var canaried []string
	for _, op := range p.Operators {
		t := d.Operators[op.Name]
		slot := slotGroup(&job, op.Name)
		if t.Transitions == 0 || t.CandidateConfig == "" || t.NoCanary || slot == nil || runsGen(&job, op.Name, t.Epoch+1) ||
			slot.Meta[MetaConfigEpoch] == strconv.FormatUint(t.Epoch+1, 10) {
			continue // no slot, the candidate runs already (its later batches are not canaried) or ran on a trial
		}
		// Nodes of the candidate's planned instances: the slot's node first, then the
		// most instances, then names.
		var cands []string
		for n, pl := range t.Nodes {
			if pl.Candidate > 0 {
				cands = append(cands, n)
			}
		}
		slotNode := slot.Meta[MetaNode]
		sort.Slice(cands, func(i, j int) bool {
			a, b := cands[i], cands[j]
			if (a == slotNode) != (b == slotNode) {
				return a == slotNode
			}
			if t.Nodes[a].Candidate != t.Nodes[b].Candidate {
				return t.Nodes[a].Candidate > t.Nodes[b].Candidate
			}
			return a < b
		})
		for _, c := range cands {
			var sibling *api.TaskGroup
			if !fits(c, op) {
				sibling = byName[GroupName(op.Name, c, t.Epoch)]
				if sibling == nil || sibling.Count == nil || *sibling.Count == 0 {
					continue
				}
				add(c, op, -1)
				if !fits(c, op) {
					add(c, op, 1)
					continue
				}
				*sibling.Count--
			}
			add(c, op, 1)
			if err := makeCanary(slot, c, t.CandidateConfig, t.Epoch+1); err != nil {
				return nil, nil, fmt.Errorf("job %q group %q: %w", p.Job, *slot.Name, err)
			}
			canaried = append(canaried, op.Name)
			break
		}
	}
	if len(canaried) == 0 {
		return nil, nil, nil
	}
	for _, g := range job.TaskGroups {
		if g.Meta[MetaAnchor] == "true" {
			g.Meta[MetaDecision] = strconv.FormatUint(d.Index, 10)
			g.Meta[MetaPhase] = PhaseCanary
			if d.Planner != "" {
				g.Meta[MetaPlanner] = d.Planner
			}
		}
	}
	return &job, canaried, nil
}

// runsGen reports whether job has a non-slot group of operator op at generation gen with
// instances.
func runsGen(job *api.Job, op string, gen uint64) bool {
	for _, g := range job.TaskGroups {
		if g.Meta[MetaOperator] == op && g.Meta[MetaCanarySlot] != "true" && g.Meta[MetaAnchor] != "true" &&
			g.Meta[MetaConfigEpoch] == strconv.FormatUint(gen, 10) && g.Count != nil && *g.Count > 0 {
			return true
		}
	}
	return false
}

// makeCanary turns slot group g into the canary of config at generation gen on node.
func makeCanary(g *api.TaskGroup, node, config string, gen uint64) error {
	pinned := false
	for _, c := range g.Constraints {
		if c != nil && c.LTarget == "${node.unique.name}" {
			c.RTarget, pinned = node, true
		}
	}
	if !pinned {
		g.Constraints = append(g.Constraints, api.NewConstraint("${node.unique.name}", "=", node))
	}
	g.Meta[MetaNode] = node
	params := map[string]string(nil)
	if _, base, trial, err := slotTrial(g); err != nil {
		return err
	} else if trial {
		params = base.Params // the canary takes the slot over from a trial
	} else {
		params = paramMeta(g.Meta)
	}
	delete(g.Meta, MetaTrialBase)
	if err := setConfig(g, config, gen, params); err != nil {
		return err
	}
	u := api.UpdateStrategy{}
	if g.Update != nil {
		u = *g.Update
	}
	u.Canary, u.MaxParallel, u.AutoPromote, u.AutoRevert = ptr(1), ptr(1), ptr(false), ptr(true)
	g.Update = &u
	return nil
}

// canaryStatus reports the canaries of deployment dep (groups with desired canaries).
func canaryStatus(dep *api.Deployment, job *api.Job) []planner.CanaryStatus {
	var out []planner.CanaryStatus
	names := make([]string, 0, len(dep.TaskGroups))
	for n := range dep.TaskGroups {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := dep.TaskGroups[n]
		if s == nil || s.DesiredCanaries == 0 {
			continue
		}
		c := planner.CanaryStatus{Group: n, Deployment: dep.ID, Promoted: s.Promoted,
			Healthy: len(s.PlacedCanaries) >= s.DesiredCanaries && s.HealthyAllocs >= s.DesiredCanaries}
		if g := groupNamed(job, n); g != nil {
			c.Operator, c.Node, c.Config = g.Meta[MetaOperator], g.Meta[MetaNode], g.Meta[opcontract.MetaConfig]
		}
		out = append(out, c)
	}
	return out
}

// PromoteCanary implements planner.CanaryActuator: it promotes deployment (Nomad then
// stops the canary slots' old allocations and finishes the deployment).
func (a *Actuator) PromoteCanary(ctx context.Context, job, deployment string) error {
	if _, _, err := a.c.Deployments().PromoteAll(deployment, a.w(ctx)); err != nil {
		return fmt.Errorf("promote deployment %s of %q: %w", deployment, job, err)
	}
	a.log.Info("canary promoted", "job", job, "deployment", deployment)
	return nil
}

// FailCanary implements planner.CanaryActuator: it fails deployment (Nomad's auto_revert
// restores the job's stable version, stopping the canaries).
func (a *Actuator) FailCanary(ctx context.Context, job, deployment string) error {
	if _, _, err := a.c.Deployments().Fail(deployment, a.w(ctx)); err != nil {
		return fmt.Errorf("fail deployment %s of %q: %w", deployment, job, err)
	}
	a.log.Info("canary failed", "job", job, "deployment", deployment)
	return nil
}
