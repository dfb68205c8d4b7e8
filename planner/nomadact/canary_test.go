package nomadact

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/fsm"
)

// canaryUntil steps decision d until its canaries are all healthy (or promoted), and
// returns them; it fails the test on a final status or after timeout.
func canaryUntil(t *testing.T, a *Actuator, p *fsm.Pipeline, d fsm.Decision, timeout time.Duration, promoted bool) []planner.CanaryStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		res, err := a.Step(t.Context(), p, d)
		if err == nil && res.Status != fsm.StatusApplying {
			deps, _, _ := a.c.Jobs().Deployments(p.Job, false, nil)
			for _, dep := range deps {
				for g, s := range dep.TaskGroups {
					t.Logf("deployment %s v%d %s: %s desired canaries %d placed %v promoted %v healthy %d", dep.ID[:8], dep.JobVersion, dep.Status, g, s.DesiredCanaries, s.PlacedCanaries, s.Promoted, s.HealthyAllocs)
				}
			}
			t.Fatalf("decision %d: %+v before its canary was judged (versions %v)", d.Index, res, versionsByPhase(t, a.c, p.Job))
		}
		ready := len(res.Canaries) > 0
		for _, c := range res.Canaries {
			ready = ready && c.Healthy && c.Promoted == promoted
		}
		if err == nil && ready {
			return res.Canaries
		}
		if time.Now().After(deadline) {
			t.Fatalf("decision %d: no healthy canary within %v (last: %+v, %v)", d.Index, timeout, res, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// nomadCLI runs the real nomad command against n, as a user would.
func nomadCLI(t *testing.T, n *harness.Nomad, args ...string) string {
	t.Helper()
	bin, err := harness.ToolPath("nomad")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+n.Addr)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nomad %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// slotConfig returns the config the running allocation of op's canary slot runs.
func slotConfig(t *testing.T, c *api.Client, job, op string) string {
	t.Helper()
	var cfgs []string
	for _, r := range slotRuns(t, c, job, op) {
		cfgs = append(cfgs, r.meta["trident_config"])
	}
	return strings.Join(cfgs, " ")
}

// slotRun is a running allocation of a canary slot and its group's meta.
type slotRun struct {
	id   string
	meta map[string]string
}

// slotRuns returns the running allocations of op's canary slot.
func slotRuns(t *testing.T, c *api.Client, job, op string) []slotRun {
	t.Helper()
	return groupRuns(t, c, job, SlotGroupName(op))
}

// TestCanaryAgainstNomad: a candidate config's first instance is a Nomad canary of the
// operator's canary slot group, on a node whose GPUs the operator holds entirely (the
// canary takes the GPU of one old instance stopped in the same version). The planner's
// promote finishes the deployment and the rest rolls; its fail (a measured regression)
// reverts; a user's `nomad deployment promote` and `nomad deployment fail` are seen; a
// canary that dies with a CUDA OOM message fails early.
func TestCanaryAgainstNomad(t *testing.T) {
	n := startNomad(t)
	a := newTestActuator(n)
	a.o.Canary = true
	a.o.OOMLogPattern = regexp.MustCompile(DefaultOOMLogPattern)
	job := "canary"
	p, err := a.Pipeline(t.Context(), job, mustJSON(t, testJob(job)))
	if err != nil {
		t.Fatal(err)
	}
	src := fsm.OpTarget{Nodes: map[string]fsm.Placement{"c1": {Current: 1}}, Config: "mode=fast"}
	gpu := func(cfg string, epoch uint64, cand string, cur, next int) fsm.OpTarget {
		t := fsm.OpTarget{Nodes: map[string]fsm.Placement{"c2": {Current: cur, Candidate: next}}, Config: cfg, Epoch: epoch, CandidateConfig: cand}
		if next > 0 {
			t.Transitions = 1
		}
		return t
	}
	decide := func(idx uint64, g fsm.OpTarget) fsm.Decision {
		return fsm.Decision{Index: idx, Job: job, Operators: map[string]fsm.OpTarget{"src": src, "gpu": g}}
	}
	expect := func(what string, want map[string]int) {
		t.Helper()
		if got := runningByGroup(t, n.API(), job); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: running %v, want %v", what, got, want)
		}
	}

	// Both GPUs of c2 held by gpu: one instance in its per-node group, one in its slot
	// (src has no parameter space, hence no slot).
	if res := stepUntil(t, a, p, decide(100, gpu("batch=8", 0, "", 2, 0)), 120*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 100: %+v", res)
	}
	expect("decision 100", map[string]int{"gpu@c2.g0|c2": 1, "gpu@canary|c2": 1, "src@c1.g0|c1": 1})

	// Canary promoted by the planner.
	d := decide(101, gpu("batch=8", 0, "batch=16", 1, 1))
	cs := canaryUntil(t, a, p, d, 90*time.Second, false)
	if len(cs) != 1 || cs[0].Operator != "gpu" || cs[0].Group != "gpu@canary" || cs[0].Node != "c2" || cs[0].Config != "batch=16" {
		t.Fatalf("canaries %+v", cs)
	}
	// The canary runs beside the slot's old allocation, on the GPU the old per-node
	// instance gave up.
	expect("canary of decision 101", map[string]int{"gpu@canary|c2": 2, "src@c1.g0|c1": 1})
	status := nomadCLI(t, n, "deployment", "status", cs[0].Deployment)
	t.Logf("nomad deployment status (canary of decision 101):\n%s", status)
	if !strings.Contains(status, "Canaries") || !regexp.MustCompile(`(?m)^gpu@canary\s.*\bfalse\b`).MatchString(status) {
		t.Fatalf("nomad deployment status does not show the unpromoted canary:\n%s", status)
	}
	if err := a.PromoteCanary(t.Context(), job, cs[0].Deployment); err != nil {
		t.Fatal(err)
	}
	if res := stepUntil(t, a, p, d, 90*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 101 after promotion: %+v", res)
	}
	expect("decision 101", map[string]int{"gpu@c2.g0|c2": 1, "gpu@canary|c2": 1, "src@c1.g0|c1": 1})
	if got := slotConfig(t, n.API(), job, "gpu"); got != "batch=16" {
		t.Fatalf("slot runs %q after the promotion, want batch=16", got)
	}
	if got := versionsByPhase(t, n.API(), job); got["101/canary"] != 1 || got["101/final"] != 1 || got["101/surge"] != 0 {
		t.Fatalf("versions of decision 101 %v: want one canary and one final version", got)
	}

	// The rest rolls without a canary (the candidate already runs).
	if res := stepUntil(t, a, p, decide(102, gpu("batch=8", 0, "batch=16", 0, 2)), 90*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 102: %+v", res)
	}
	expect("decision 102", map[string]int{"gpu@c2.g1|c2": 1, "gpu@canary|c2": 1, "src@c1.g0|c1": 1})
	if got := versionsByPhase(t, n.API(), job); got["102/canary"] != 0 {
		t.Fatalf("versions %v: decision 102 canaried a config that already runs", got)
	}
	stable := map[string]int{"gpu@c2.g1|c2": 1, "gpu@canary|c2": 1, "src@c1.g0|c1": 1}

	// Canary failed by the planner (a measured regression): Nomad reverts.
	d = decide(103, gpu("batch=16", 1, "batch=32", 1, 1))
	cs = canaryUntil(t, a, p, d, 90*time.Second, false)
	if err := a.FailCanary(t.Context(), job, cs[0].Deployment); err != nil {
		t.Fatal(err)
	}
	if res := stepUntil(t, a, p, d, 60*time.Second); res.Status != fsm.StatusFailed {
		t.Fatalf("decision 103 after its canary failed: %+v", res)
	}
	waitReverted(t, n.API(), job, 102, stable)

	// A user's nomad deployment promote: Step reports the canary promoted, and the
	// decision finishes.
	d = decide(104, gpu("batch=16", 1, "batch=24", 1, 1))
	cs = canaryUntil(t, a, p, d, 90*time.Second, false)
	nomadCLI(t, n, "deployment", "promote", cs[0].Deployment)
	if res := stepUntil(t, a, p, d, 90*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 104 after a user's promote: %+v", res)
	}
	if got := slotConfig(t, n.API(), job, "gpu"); got != "batch=24" {
		t.Fatalf("slot runs %q after the user's promote, want batch=24", got)
	}
	if res := stepUntil(t, a, p, decide(105, gpu("batch=16", 1, "batch=24", 0, 2)), 90*time.Second); res.Status != fsm.StatusDone {
		t.Fatalf("decision 105: %+v", res)
	}
	stable = map[string]int{"gpu@c2.g2|c2": 1, "gpu@canary|c2": 1, "src@c1.g0|c1": 1}
	expect("decision 105", stable)

	// A user's nomad deployment fail: the decision fails, Nomad reverts.
	d = decide(106, gpu("batch=24", 2, "batch=40", 1, 1))
	cs = canaryUntil(t, a, p, d, 90*time.Second, false)
	nomadCLI(t, n, "deployment", "fail", cs[0].Deployment)
	if res := stepUntil(t, a, p, d, 60*time.Second); res.Status != fsm.StatusFailed || !strings.Contains(res.Detail, "marked as failed") {
		t.Fatalf("decision 106 after a user's fail: %+v", res)
	}
	waitReverted(t, n.API(), job, 105, stable)

	// A canary that dies with a CUDA OOM (exit 1 + the log pattern) fails early.
	d = decide(107, gpu("batch=24", 2, "batch=48,fail=cudaoom", 1, 1))
	res := stepUntil(t, a, p, d, 120*time.Second)
	if res.Status != fsm.StatusFailed || !strings.Contains(res.Detail, "CUDA out of memory") {
		t.Fatalf("OOMing canary: %+v, want failed early on the stderr pattern", res)
	}
	waitReverted(t, n.API(), job, 105, stable)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
