package nomadact

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner/fsm"
)

// trialPipeline is the pipeline of testJob with its slot rendered by decision d0: gpu
// holds both GPUs of c2 (one instance in its per-node group, one in its slot).
func trialPipeline(t *testing.T) (*fsm.Pipeline, func(idx uint64, srcCount int, gpuNode string) fsm.Decision) {
	t.Helper()
	a := New(nil, Options{Canary: true})
	p, err := a.Pipeline(t.Context(), "trial", mustJSON(t, testJob("trial")))
	if err != nil {
		t.Fatal(err)
	}
	decide := func(idx uint64, srcCount int, gpuNode string) fsm.Decision {
		return fsm.Decision{Index: idx, Job: "trial", Operators: map[string]fsm.OpTarget{
			"src": {Nodes: map[string]fsm.Placement{"c1": {Current: srcCount}}, Config: "mode=fast"},
			"gpu": {Nodes: map[string]fsm.Placement{gpuNode: {Current: 2}}, Config: "batch=8"},
		}}
	}
	return p, decide
}

// group returns job's group name (nil when absent).
func group(job *api.Job, name string) *api.TaskGroup {
	for _, g := range job.TaskGroups {
		if g.Name != nil && *g.Name == name {
			return g
		}
	}
	return nil
}

// A trial runs in the operator's canary slot: its config, the trial's epoch, its
// per-parameter meta and no auto-revert; the same trials again change nothing; ending it
// gives the slot exactly the group meta it had; a decision keeping an instance on the
// slot's node carries the trial, one that moves the operator away drops it; a canary
// takes the slot over with the production parameters.
func TestTrialRunsInTheCanarySlot(t *testing.T) {
	p, decide := trialPipeline(t)
	o := Options{Canary: true}
	base, err := Render(p, decide(100, 1, "c2"), PhaseFinal, nil, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	slot := SlotGroupName("gpu")
	before := maps.Clone(group(base, slot).Meta)
	tr := fsm.Trial{Config: "batch=32", Epoch: fsm.TrialEpochBase + 7}

	withTrial, changed, err := renderTrials(base, map[string]fsm.TrialSlots{"gpu": {tr}})
	if err != nil || !changed {
		t.Fatalf("start a trial: changed %v, %v", changed, err)
	}
	g := group(withTrial, slot)
	if g.Meta[opcontract.MetaConfig] != "batch=32" || g.Meta[MetaConfigEpoch] != strconv.FormatUint(tr.Epoch, 10) ||
		g.Meta[opcontract.ParamMetaKey("batch")] != "32" || *g.Update.AutoRevert || g.Meta[MetaNode] != "c2" {
		t.Fatalf("trial slot meta %v, auto-revert %v: want batch=32 at epoch %d on c2, no auto-revert", g.Meta, *g.Update.AutoRevert, tr.Epoch)
	}
	if other := group(withTrial, GroupName("gpu", "c2", 0)); fmt.Sprint(other.Meta) != fmt.Sprint(group(base, GroupName("gpu", "c2", 0)).Meta) {
		t.Errorf("the trial changed the production group: %v", other.Meta)
	}
	if _, again, err := renderTrials(withTrial, map[string]fsm.TrialSlots{"gpu": {tr}}); err != nil || again {
		t.Errorf("the same trials again: changed %v (%v), want no new version", again, err)
	}
	if _, _, err := renderTrials(base, map[string]fsm.TrialSlots{"src": {{Config: "mode=slow", Epoch: fsm.TrialEpochBase + 8}}}); err == nil {
		t.Error("a trial of an operator without a slot (no parameter space) was accepted")
	}

	ended, changed, err := renderTrials(withTrial, nil)
	if err != nil || !changed {
		t.Fatalf("end the trial: changed %v, %v", changed, err)
	}
	if g := group(ended, slot); !maps.Equal(g.Meta, before) || !*g.Update.AutoRevert {
		t.Errorf("ended trial: slot meta %v (auto-revert %v), want %v", g.Meta, *g.Update.AutoRevert, before)
	}

	// Decisions over the job running the trial.
	kept, err := Render(p, decide(101, 2, "c2"), PhaseFinal, withTrial, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if g := group(kept, slot); g.Meta[opcontract.MetaConfig] != "batch=32" || g.Meta[MetaConfigEpoch] != strconv.FormatUint(tr.Epoch, 10) || *g.Update.AutoRevert {
		t.Errorf("a decision keeping gpu on c2 dropped the trial: slot meta %v", g.Meta)
	}
	if _, again, err := renderTrials(kept, map[string]fsm.TrialSlots{"gpu": {tr}}); err != nil || again {
		t.Errorf("after a decision that carried the trial: changed %v (%v), want no new version", again, err)
	}
	moved, err := Render(p, decide(102, 1, "c3"), PhaseFinal, withTrial, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if g := group(moved, slot); g.Meta[opcontract.MetaConfig] != "batch=8" || g.Meta[MetaNode] != "c3" || g.Meta[MetaTrialBase] != "" {
		t.Errorf("a decision moving gpu to c3: slot meta %v, want the production config there", g.Meta)
	}

	d := decide(103, 1, "c2")
	gt := d.Operators["gpu"]
	gt.CandidateConfig, gt.Transitions = "batch=16", 1
	gt.Nodes = map[string]fsm.Placement{"c2": {Current: 1, Candidate: 1}}
	d.Operators["gpu"] = gt
	canary, ops, err := renderCanary(p, d, withTrial, map[string]fsm.Node{"c2": {Name: "c2", CPU: 8, MemoryMB: 8192, GPUs: 2}})
	if err != nil || len(ops) != 1 {
		t.Fatalf("canary over a trial: %v (%v)", ops, err)
	}
	if g := group(canary, slot); g.Meta[opcontract.MetaConfig] != "batch=16" || g.Meta[MetaTrialBase] != "" || g.Meta[MetaConfigEpoch] != "1" {
		t.Errorf("canary over a trial: slot meta %v, want the candidate at generation 1 and no trial record", g.Meta)
	}
}

// slotAlloc returns the ID and group meta of the running allocation of op's canary slot
// ("" and nil: none).
func slotAlloc(t *testing.T, c *api.Client, job, op string) (string, map[string]string) {
	t.Helper()
	if rs := slotRuns(t, c, job, op); len(rs) > 0 {
		return rs[0].id, rs[0].meta
	}
	return "", nil
}

// deployTrialPipeline starts Nomad and a canary-enabled actuator and applies
// trialPipeline's decision 100 (gpu on c2), the starting point of the trial tests.
func deployTrialPipeline(t *testing.T) (*harness.Nomad, *Actuator, *fsm.Pipeline, func(idx uint64, srcCount int, gpuNode string) fsm.Decision) {
	t.Helper()
	n := startNomad(t)
	a := newTestActuator(n)
	a.o.Canary = true
	p, decide := trialPipeline(t)
	if res := stepUntil(t, a, p, decide(100, 1, "c2"), 120*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 100: %+v", res)
	}
	return n, a, p, decide
}

// TestTrialAgainstNomad runs a tuning trial in the canary slot of a real Nomad job: the
// slot's allocation is replaced by one running the trial's config and exporting its epoch
// (NOMAD_META_trident_config_epoch) while the operator's other instance keeps running; a
// decision that keeps the slot's node carries the trial without restarting it; a trial
// that crashes does not revert the job; ending the trial restores the production config.
func TestTrialAgainstNomad(t *testing.T) {
	n, a, p, decide := deployTrialPipeline(t)
	job := p.Job
	prodAlloc := func() string {
		allocs, _, err := n.API().Jobs().Allocations(job, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, al := range allocs {
			if al.TaskGroup == GroupName("gpu", "c2", 0) && al.DesiredStatus == "run" && al.ClientStatus == "running" {
				return al.ID
			}
		}
		return ""
	}
	prod := prodAlloc()
	_, before := slotAlloc(t, n.API(), job, "gpu")
	if prod == "" || before == nil {
		t.Fatalf("decision 100 runs no production instance (%q) or slot (%v) of gpu", prod, before)
	}
	waitSlot := func(what string, want func(meta map[string]string) bool) string {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			id, meta := slotAlloc(t, n.API(), job, "gpu")
			if meta != nil && want(meta) {
				return id
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the slot runs %v after 90 s", what, meta)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	version := func() uint64 {
		j, _, err := n.API().Jobs().Info(job, nil)
		if err != nil {
			t.Fatal(err)
		}
		return *j.Version
	}

	tr := fsm.Trial{Config: "batch=32", Epoch: fsm.TrialEpochBase + 7}
	if err := a.SetTrials(t.Context(), job, map[string]fsm.TrialSlots{"gpu": {tr}}); err != nil {
		t.Fatal(err)
	}
	trialAlloc := waitSlot("trial", func(m map[string]string) bool {
		return m[opcontract.MetaConfig] == "batch=32" && m[MetaConfigEpoch] == strconv.FormatUint(tr.Epoch, 10)
	})
	if got := prodAlloc(); got != prod {
		t.Errorf("the trial restarted gpu's production instance (%s -> %s)", prod, got)
	}
	if f, err := a.TrialFailures(t.Context(), job, map[string]fsm.TrialSlots{"gpu": {tr}}); err != nil || len(f) != 0 {
		t.Errorf("a running trial reported failed: %v (%v)", f, err)
	}
	v := version()
	if err := a.SetTrials(t.Context(), job, map[string]fsm.TrialSlots{"gpu": {tr}}); err != nil || version() != v {
		t.Errorf("the same trials again: version %d -> %d (%v), want none", v, version(), err)
	}

	// A decision scaling src keeps gpu's placement: the trial stays, not restarted.
	if res := stepUntil(t, a, p, decide(101, 2, "c2"), 120*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 101: %+v", res)
	}
	if id, meta := slotAlloc(t, n.API(), job, "gpu"); id != trialAlloc || meta[opcontract.MetaConfig] != "batch=32" {
		t.Errorf("after decision 101 the slot runs %s %v, want the trial's allocation %s", id, meta, trialAlloc)
	}

	// A trial that crashes (exit 137, as an OOM kill) fails its deployment but does not
	// revert the job: the slot keeps the trial's config until the trial ends.
	bad := fsm.Trial{Config: "batch=64,fail=oom", Epoch: fsm.TrialEpochBase + 9}
	if err := a.SetTrials(t.Context(), job, map[string]fsm.TrialSlots{"gpu": {bad}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		deps, _, err := n.API().Jobs().Deployments(job, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(deps) > 0 && deps[0].Status == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the crashing trial's deployment did not fail within 90 s (%d deployments)", len(deps))
		}
		time.Sleep(time.Second)
	}
	time.Sleep(3 * time.Second) // what a revert would need to show
	j, _, err := n.API().Jobs().Info(job, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := group(j, SlotGroupName("gpu")); g.Meta[opcontract.MetaConfig] != bad.Config {
		t.Errorf("after the trial's deployment failed the slot group runs %q: Nomad reverted the job", g.Meta[opcontract.MetaConfig])
	}
	// The planner learns of the failure from the actuator (TrialWatcher): the OOM kills
	// of the trial's own allocation, not the slot's earlier ones.
	failures := func(tr fsm.Trial, want string) string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			f, err := a.TrialFailures(t.Context(), job, map[string]fsm.TrialSlots{"gpu": {tr}})
			if err != nil {
				t.Fatal(err)
			}
			if why := f["gpu"][tr.Slot]; strings.Contains(why, want) {
				return why
			}
			if time.Now().After(deadline) {
				t.Fatalf("trial %s: failures %v after 60 s, want one saying %q", tr.Config, f, want)
			}
			time.Sleep(time.Second)
		}
	}
	// The tuner tells an OOM kill (a peak above the device) from an engine that exited by
	// itself (a start failure, fsm.TrialFailedOOM) by what the actuator says.
	if why := failures(bad, fsm.TrialOOMKilled); !fsm.TrialFailedOOM(why) {
		t.Errorf("OOM-killed trial: %q does not read as an OOM kill", why)
	}
	// A trial whose engine refuses to start (exit 3 at once) is a failure too, once it
	// exited twice.
	refused := fsm.Trial{Config: "batch=64,fail=bad", Epoch: fsm.TrialEpochBase + 11}
	if err := a.SetTrials(t.Context(), job, map[string]fsm.TrialSlots{"gpu": {refused}}); err != nil {
		t.Fatal(err)
	}
	if why := failures(refused, "exited 2 times with a non-zero status"); fsm.TrialFailedOOM(why) {
		t.Errorf("refused trial: %q reads as an OOM kill", why)
	}

	if err := a.SetTrials(t.Context(), job, nil); err != nil {
		t.Fatal(err)
	}
	waitSlot("trial ended", func(m map[string]string) bool { return maps.Equal(m, before) })
	if got := prodAlloc(); got != prod {
		t.Errorf("the trials restarted gpu's production instance (%s -> %s)", prod, got)
	}
}

// A trial in slot 1 runs in its trial slot group: one instance taken from gpu's production
// group on c2 (whose count drops by one), at the trial's config and epoch, without
// auto-revert; slot 0 stays in the canary slot; the same trials again change nothing; a
// decision keeping gpu on c2 carries it, one moving gpu away drops it; ending slot 1 gives
// the production group its instance back and leaves slot 0.
func TestTrialSlotGroups(t *testing.T) {
	p, decide := trialPipeline(t)
	o := Options{Canary: true}
	base, err := Render(p, decide(100, 1, "c2"), PhaseFinal, nil, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	prod := GroupName("gpu", "c2", 0)
	if n := *group(base, prod).Count; n != 1 {
		t.Fatalf("production group %s runs %d, want 1", prod, n)
	}
	t0 := fsm.Trial{Config: "batch=32", Epoch: fsm.TrialEpochBase + 7}
	t1 := fsm.Trial{Config: "batch=16", Epoch: fsm.TrialEpochBase + 8, Slot: 1}
	two, changed, err := renderTrials(base, map[string]fsm.TrialSlots{"gpu": {t0, t1}})
	if err != nil || !changed {
		t.Fatalf("start two trials: changed %v, %v", changed, err)
	}
	g := group(two, TrialGroupName("gpu", 1))
	if g == nil || *g.Count != 1 || g.Meta[MetaTrialSlot] != "1" || g.Meta[opcontract.MetaConfig] != "batch=16" ||
		g.Meta[MetaConfigEpoch] != strconv.FormatUint(t1.Epoch, 10) || g.Meta[MetaNode] != "c2" || *g.Update.AutoRevert {
		t.Fatalf("slot 1's group %+v: want batch=16 at its epoch on c2, no auto-revert", g)
	}
	if s := group(two, SlotGroupName("gpu")); s.Meta[opcontract.MetaConfig] != "batch=32" {
		t.Errorf("slot 0 runs %q, want its trial", s.Meta[opcontract.MetaConfig])
	}
	if n := count(two, prod); n != 0 {
		t.Errorf("production group runs %d beside the trial, want 0 (the trial took its instance)", n)
	}
	if _, again, err := renderTrials(two, map[string]fsm.TrialSlots{"gpu": {t0, t1}}); err != nil || again {
		t.Errorf("the same trials again: changed %v (%v)", again, err)
	}
	if _, _, err := renderTrials(two, map[string]fsm.TrialSlots{"gpu": {t0, t1, {Config: "batch=4", Epoch: fsm.TrialEpochBase + 9, Slot: 2}}}); err == nil {
		t.Error("a third trial of an operator with no production instance left was accepted")
	}

	kept, err := Render(p, decide(101, 2, "c2"), PhaseFinal, two, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if g := group(kept, TrialGroupName("gpu", 1)); g == nil || g.Meta[opcontract.MetaConfig] != "batch=16" || g.Meta[MetaTrialSlot] != "1" || count(kept, prod) != 0 {
		t.Errorf("a decision keeping gpu on c2: slot 1's group %v, production count %d; want the trial carried", g, count(kept, prod))
	}
	back, _, err := renderTrials(kept, map[string]fsm.TrialSlots{"gpu": {t0}})
	if err != nil || count(back, prod) != 1 || group(back, prod).Meta[opcontract.MetaConfig] != "batch=8" || group(back, prod).Meta[MetaTrialBase] != "" || !*group(back, prod).Update.AutoRevert {
		t.Errorf("ending slot 1 after a decision left the production group out: %v (%v), want it back with one instance of batch=8", group(back, prod), err)
	}
	if _, again, err := renderTrials(kept, map[string]fsm.TrialSlots{"gpu": {t0, t1}}); err != nil || again {
		t.Errorf("after a decision that carried both trials: changed %v (%v)", again, err)
	}
	moved, err := Render(p, decide(102, 1, "c3"), PhaseFinal, two, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	if g := group(moved, TrialGroupName("gpu", 1)); g != nil {
		t.Errorf("a decision moving gpu to c3 kept slot 1's group %v", g.Meta)
	}

	one, changed, err := renderTrials(two, map[string]fsm.TrialSlots{"gpu": {t0}})
	if err != nil || !changed {
		t.Fatalf("end slot 1: changed %v, %v", changed, err)
	}
	if group(one, TrialGroupName("gpu", 1)) != nil || count(one, prod) != 1 || group(one, SlotGroupName("gpu")).Meta[opcontract.MetaConfig] != "batch=32" {
		t.Errorf("after ending slot 1: want no slot-1 group, the production instance back, slot 0 running")
	}
}

// count returns the count of job's group name (0: absent).
func count(job *api.Job, name string) int {
	if g := group(job, name); g != nil && g.Count != nil {
		return *g.Count
	}
	return 0
}

// groupRuns returns the IDs and group meta of job's running allocations of group name.
func groupRuns(t *testing.T, c *api.Client, job, name string) []slotRun {
	t.Helper()
	allocs, _, err := c.Jobs().Allocations(job, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []slotRun
	for _, al := range allocs {
		if al.TaskGroup != name || al.DesiredStatus != "run" || al.ClientStatus != "running" {
			continue
		}
		full, _, err := c.Allocations().Info(al.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range full.Job.TaskGroups {
			if *g.Name == al.TaskGroup {
				out = append(out, slotRun{id: al.ID, meta: g.Meta})
			}
		}
	}
	return out
}

// TestTrialSlotGroupAgainstNomad runs trials in slots 0 and 1 of gpu on a real Nomad job:
// slot 1's group runs an allocation at its trial's config and epoch in place of gpu's
// production instance on c2 while slot 0 runs in the canary slot; a decision keeping gpu
// on c2 carries it without a restart; ending slot 1 brings the production instance back
// and leaves slot 0's trial running.
func TestTrialSlotGroupAgainstNomad(t *testing.T) {
	n, a, p, decide := deployTrialPipeline(t)
	job := p.Job
	wait := func(what, name string, want func(rs []slotRun) bool) []slotRun {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			rs := groupRuns(t, n.API(), job, name)
			if want(rs) {
				return rs
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: group %s runs %v after 90 s", what, name, rs)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	t0 := fsm.Trial{Config: "batch=32", Epoch: fsm.TrialEpochBase + 7}
	t1 := fsm.Trial{Config: "batch=16", Epoch: fsm.TrialEpochBase + 8, Slot: 1}
	if err := a.SetTrials(t.Context(), job, map[string]fsm.TrialSlots{"gpu": {t0, t1}}); err != nil {
		t.Fatal(err)
	}
	runs := wait("slot 1's trial", TrialGroupName("gpu", 1), func(rs []slotRun) bool {
		return len(rs) == 1 && rs[0].meta[opcontract.MetaConfig] == "batch=16" && rs[0].meta[MetaConfigEpoch] == strconv.FormatUint(t1.Epoch, 10)
	})
	trial1 := runs[0].id
	wait("slot 0's trial", SlotGroupName("gpu"), func(rs []slotRun) bool {
		return len(rs) == 1 && rs[0].meta[MetaConfigEpoch] == strconv.FormatUint(t0.Epoch, 10)
	})
	wait("the production instance stopped", GroupName("gpu", "c2", 0), func(rs []slotRun) bool { return len(rs) == 0 })

	if res := stepUntil(t, a, p, decide(101, 2, "c2"), 120*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 101: %+v", res)
	}
	if rs := groupRuns(t, n.API(), job, TrialGroupName("gpu", 1)); len(rs) != 1 || rs[0].id != trial1 {
		t.Errorf("after decision 101 slot 1 runs %v, want its allocation %s", rs, trial1)
	}

	if err := a.SetTrials(t.Context(), job, map[string]fsm.TrialSlots{"gpu": {t0}}); err != nil {
		t.Fatal(err)
	}
	wait("slot 1 ended", TrialGroupName("gpu", 1), func(rs []slotRun) bool { return len(rs) == 0 })
	wait("the production instance back", GroupName("gpu", "c2", 0), func(rs []slotRun) bool {
		return len(rs) == 1 && rs[0].meta[opcontract.MetaConfig] == "batch=8"
	})
	if rs := groupRuns(t, n.API(), job, SlotGroupName("gpu")); len(rs) != 1 || rs[0].meta[MetaConfigEpoch] != strconv.FormatUint(t0.Epoch, 10) {
		t.Errorf("after ending slot 1 the canary slot runs %v, want slot 0's trial", rs)
	}
}
