package sched

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/trident-sched/trident/planner/fsm"
)

// Holding is what one pipeline's decision in force holds: its operators and their
// instances per node.
type Holding struct {
	// Pipeline is the pipeline's operators (resources per instance).
	Pipeline *fsm.Pipeline
	// Targets maps operator name to its instances per node.
	Targets map[string]fsm.OpTarget
	// Egress maps node name to the traffic the decision routes out of it (bytes/s;
	// fsm.Decision.Egress; nil: none).
	Egress map[string]float64
}

// egressTol is the relative slack of the egress check: plans are routed by an LP whose
// residuals are relative to each node's bound (about 1e-9), and a decision's egress was
// planned against what was left when it was solved.
const egressTol = 1e-6

// EgressOver starts the part of an Oversubscribed or Conflicts line that reports a node's
// egress overfilled.
const EgressOver = "egress over by"

// residualNode is a node's capacity left while holdings are taken from it.
type residualNode struct {
	cpu     float64
	mem     int
	devices []fsm.Device
}

func newResidual(n fsm.Node) *residualNode {
	return &residualNode{cpu: n.CPU, mem: n.MemoryMB, devices: deviceClasses(n)}
}

// take removes k instances of o; it reports what did not fit ("" when all did). GPUs come
// from the class o accepts with the most devices left (a decision does not record which
// class an instance got; Nomad fills the devices the request's constraints allow).
func (r *residualNode) take(o fsm.Operator, k int) string {
	var short []string
	r.cpu -= float64(k) * o.CPU
	r.mem -= k * o.MemoryMB
	if r.cpu < -1e-9 {
		short = append(short, fmt.Sprintf("%.3g cores", -r.cpu))
	}
	if r.mem < 0 {
		short = append(short, fmt.Sprintf("%d MB", -r.mem))
	}
	for range k * o.GPUs {
		best := -1
		for c, d := range r.devices {
			if acceptsDevice(o, d) && d.Count > 0 && (best < 0 || d.Count > r.devices[best].Count) {
				best = c
			}
		}
		if best < 0 {
			short = append(short, "a GPU")
			continue
		}
		r.devices[best].Count--
	}
	return strings.Join(short, ", ")
}

// node returns n with the residual's capacity (never below 0).
func (r *residualNode) node(n fsm.Node) fsm.Node {
	n.CPU = math.Max(0, math.Floor(r.cpu*1e6)/1e6)
	n.MemoryMB = max(0, r.mem)
	if len(n.Devices.List()) > 0 {
		n.Devices = fsm.MakeDevices(r.devices...)
	}
	n.GPUs = 0
	for _, d := range r.devices {
		n.GPUs += max(0, d.Count)
	}
	return n
}

// holdingsOrder lists the holdings' (operator, node, count) in a deterministic order.
func (h Holding) each(f func(o fsm.Operator, node string, k int)) {
	for _, o := range h.Pipeline.Operators {
		t, ok := h.Targets[o.Name]
		if !ok {
			continue
		}
		nodes := make([]string, 0, len(t.Nodes))
		for n := range t.Nodes {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		for _, n := range nodes {
			if k := t.Nodes[n].Total(); k > 0 {
				f(o, n, k)
			}
		}
	}
}

// Residual returns the nodes less what the holdings (the decisions in force of the other
// pipelines) hold on them, so that a pipeline is planned only on what is left. Nodes
// the holdings overfill are left empty.
func Residual(nodes []fsm.Node, holdings []Holding) []fsm.Node {
	rs := make([]*residualNode, len(nodes))
	idx := map[string]int{}
	for i, n := range nodes {
		rs[i], idx[n.Name] = newResidual(n), i
	}
	for _, h := range holdings {
		h.each(func(o fsm.Operator, node string, k int) {
			if i, ok := idx[node]; ok {
				rs[i].take(o, k)
			}
		})
	}
	out := make([]fsm.Node, len(nodes))
	for i, n := range nodes {
		out[i] = rs[i].node(n)
	}
	return out
}

// Pressure returns, per node and contended resource kind (fsm.Operator.Contention), the
// share of the node's resource that the holdings' instances use at full rate, capped at
// 1: PlanInput.Pressure for a pipeline planned beside them. Nodes and kinds without
// contending instances are absent; nil when there are none.
func Pressure(holdings []Holding) map[string]map[string]float64 {
	var out map[string]map[string]float64
	for _, h := range holdings {
		h.each(func(o fsm.Operator, node string, k int) {
			for _, c := range o.Contention {
				if out == nil {
					out = map[string]map[string]float64{}
				}
				if out[node] == nil {
					out[node] = map[string]float64{}
				}
				out[node][c.Kind] = math.Min(1, out[node][c.Kind]+c.Weight*float64(k))
			}
		})
	}
	return out
}

// EgressUse returns, per node, the egress (bytes/s) the holdings route out of it:
// PlanInput.EgressUsed for a pipeline planned beside them. nil when there is none.
func EgressUse(holdings []Holding) map[string]float64 {
	var out map[string]float64
	for _, h := range holdings {
		for _, node := range slices.Sorted(maps.Keys(h.Egress)) {
			if b := h.Egress[node]; b > 0 {
				if out == nil {
					out = map[string]float64{}
				}
				out[node] += b
			}
		}
	}
	return out
}

// Oversubscribed checks that the holdings together (the decisions in force of every
// pipeline) fit every node of the inventory, in cores, memory, devices and egress (the
// node's EgressBps, or the planner's stand-in for an unknown link); it returns one line
// per node they overfill ("" for none). Nodes missing from the inventory (left the
// cluster) are not checked.
func Oversubscribed(nodes []fsm.Node, holdings []Holding) []string {
	return overfilled(nodes, nil, holdings)
}

// Conflicts returns what Oversubscribed would report of h placed beside others (the
// other pipelines' decisions in force), blaming only h: one line per node where h takes
// more cores, memory, devices or egress than others leave. A node others overfill
// already (another job grew) conflicts only where h holds something there.
func Conflicts(nodes []fsm.Node, others []Holding, h Holding) []string {
	return overfilled(Residual(nodes, others), EgressUse(others), []Holding{h})
}

// overfilled is Oversubscribed of holdings on nodes whose egress others already use
// (bytes/s per node; nil: none).
func overfilled(nodes []fsm.Node, egressUsed map[string]float64, holdings []Holding) []string {
	rs := map[string]*residualNode{}
	egressLeft := map[string]float64{}
	for _, n := range nodes {
		rs[n.Name] = newResidual(n)
		// what others overfill already is theirs: the holdings are checked against
		// what is left, never below nothing (as Residual leaves cores and memory)
		egressLeft[n.Name] = max(0, egressCap(n)-egressUsed[n.Name])
	}
	short := map[string][]string{}
	for _, h := range holdings {
		h.each(func(o fsm.Operator, node string, k int) {
			if r, ok := rs[node]; ok {
				if s := r.take(o, k); s != "" {
					short[node] = append(short[node], fmt.Sprintf("%s/%s ×%d short of %s", h.Pipeline.Job, o.Name, k, s))
				}
			}
		})
	}
	egress := map[string][]string{}
	for _, h := range holdings {
		for _, node := range slices.Sorted(maps.Keys(h.Egress)) {
			if _, ok := rs[node]; ok && h.Egress[node] > 0 {
				egressLeft[node] -= h.Egress[node]
				egress[node] = append(egress[node], fmt.Sprintf("%s %.3g", h.Pipeline.Job, h.Egress[node]))
			}
		}
	}
	for _, n := range nodes {
		if left := egressLeft[n.Name]; len(egress[n.Name]) > 0 && left < -egressTol*egressCap(n) {
			short[n.Name] = append(short[n.Name], fmt.Sprintf("%s %.3g of %.3g bytes/s (%s)", EgressOver,
				-left, egressCap(n), strings.Join(egress[n.Name], ", ")))
		}
	}
	var out []string
	for n, s := range short {
		out = append(out, n+": "+strings.Join(s, "; "))
	}
	sort.Strings(out)
	return out
}

// Ledger tracks what is left of every node while instances are taken from it, by the
// same accounting as Residual and Oversubscribed (benchmarks place instances one by one
// with it).
type Ledger struct {
	nodes map[string]*residualNode
}

// NewLedger starts a ledger with the nodes' capacities.
func NewLedger(nodes []fsm.Node) *Ledger {
	l := &Ledger{nodes: map[string]*residualNode{}}
	for _, n := range nodes {
		l.nodes[n.Name] = newResidual(n)
	}
	return l
}

// Fits reports whether k more instances of o fit on node.
func (l *Ledger) Fits(o fsm.Operator, node string, k int) bool {
	r, ok := l.nodes[node]
	if !ok {
		return false
	}
	trial := &residualNode{cpu: r.cpu, mem: r.mem, devices: append([]fsm.Device(nil), r.devices...)}
	return trial.take(o, k) == ""
}

// Take removes k instances of o from node and reports what did not fit ("" when all did).
func (l *Ledger) Take(o fsm.Operator, node string, k int) string {
	r, ok := l.nodes[node]
	if !ok {
		return "an unknown node"
	}
	return r.take(o, k)
}

// CPULeft returns the cores left on node.
func (l *Ledger) CPULeft(node string) float64 {
	if r, ok := l.nodes[node]; ok {
		return r.cpu
	}
	return 0
}
