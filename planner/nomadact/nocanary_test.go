package nomadact

import (
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/fsm"
)

// A decision whose candidate ran already (OpTarget.NoCanary: measured on a tuning trial,
// or the OOM guard's revert) gets no canary version; the same decision without the mark
// canaries the operator's slot.
func TestNoCanaryTargetsSkipTheCanary(t *testing.T) {
	p := &fsm.Pipeline{Job: "pdf", Operators: []fsm.Operator{{Name: "embed", CPU: 1, MemoryMB: 512, Config: "batch=8"}}}
	group := func(name string, slot bool) *api.TaskGroup {
		meta := map[string]string{MetaOperator: "embed", MetaNode: "n1", MetaConfigEpoch: "0"}
		if slot {
			meta[MetaCanarySlot] = "true"
		}
		return &api.TaskGroup{Name: ptr(name), Count: ptr(1), Meta: meta}
	}
	job := &api.Job{ID: ptr("pdf"), TaskGroups: []*api.TaskGroup{group(GroupName("embed", "n1", 0), false), group(SlotGroupName("embed"), true)}}
	nodes := map[string]fsm.Node{"n1": {Name: "n1", CPU: 8, MemoryMB: 8192}}
	d := fsm.Decision{Index: 3, Job: "pdf", Operators: map[string]fsm.OpTarget{"embed": {
		Config: "batch=8", CandidateConfig: "batch=16", Transitions: 1,
		Nodes: map[string]fsm.Placement{"n1": {Current: 1, Candidate: 1}},
	}}}
	if _, ops, err := renderCanary(p, d, job, nodes); err != nil || len(ops) != 1 {
		t.Fatalf("ordinary candidate: canaried %v (%v), want embed", ops, err)
	}
	tgt := d.Operators["embed"]
	tgt.NoCanary = true
	d.Operators["embed"] = tgt
	if j, ops, err := renderCanary(p, d, job, nodes); err != nil || len(ops) != 0 || j != nil {
		t.Errorf("NoCanary candidate: canaried %v (job %v, %v), want no canary version", ops, j != nil, err)
	}
}
