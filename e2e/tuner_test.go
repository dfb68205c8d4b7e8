package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// startTuned starts the stack with trident-apm's live tuner on, measuring on trials or
// rolling evaluations out, and publishes the PDF dataset.
func startTuned(t *testing.T, trials bool) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: starts Nomad, NATS, the autoscaler and three planners")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	s := startStack(t, ctx, map[string]string{"tune": "true", "tune_trials": strconv.FormatBool(trials)})
	s.publishPDF(t, ctx, 11)
	return s
}

// topUp adds input the way a producer with more data would: a further PDF dataset once
// every period passes without the progress a test waits for, at most limit times. A tuner
// measures an operator only while it is saturated, and on a loaded machine the first
// dataset can drain before the measurement it waits for is stable.
type topUp struct {
	s      *stack
	period time.Duration
	next   time.Time
	limit  int
	done   int
	seed   uint64
}

func newTopUp(s *stack, seed uint64, period time.Duration, limit int) *topUp {
	return &topUp{s: s, period: period, next: time.Now().Add(period), limit: limit, seed: seed}
}

// poll publishes the next dataset when the period has passed and the limit allows.
func (u *topUp) poll(t *testing.T) {
	t.Helper()
	if time.Now().Before(u.next) || u.done >= u.limit {
		return
	}
	u.done++
	u.next = time.Now().Add(u.period)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u.s.publishPDF(t, ctx, u.seed+uint64(u.done))
	t.Logf("input topped up (%d of %d)", u.done, u.limit)
}

// TestLiveTunerFromRealMetrics runs the pipeline with trident-apm's live tuner rolling each
// evaluation out (tune_trials = "false"): the tuner must record the accelerator operator's
// running configuration as a BO evaluation from the real workers' metrics
// (observation-layer capacity and the device memory peak the worker exports) and propose
// a different configuration to the planner as a candidate. The input is topped up every 2
// minutes without that, at most twice (topUp): once a CI run on a loaded machine timed out
// with ocr-text waiting 102 intervals for a stable capacity after the dataset drained.
func TestLiveTunerFromRealMetrics(t *testing.T) {
	s := startTuned(t, false)

	evalRE := regexp.MustCompile(`tune: evaluation recorded:.*`)
	peakRE := regexp.MustCompile(`peak_mib=([0-9.]+)`)
	var running string
	more := newTopUp(s, 11, 2*time.Minute, 2)
	waitFor(t, 6*time.Minute, "the tuner to record ocr-text and propose a candidate", func() (bool, string) {
		more.poll(t)
		// 1. An evaluation of ocr-text with the device memory peak of its instances.
		evaluated := false
		for _, line := range evalRE.FindAllString(s.as.Log(), -1) {
			if !regexp.MustCompile(`operator=ocr-text\b`).MatchString(line) {
				continue
			}
			m := peakRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if peak, _ := strconv.ParseFloat(m[1], 64); peak > 0 {
				evaluated = true
			}
		}
		if !evaluated {
			return false, "no ocr-text evaluation with a device memory peak in the autoscaler log yet"
		}
		// 2. A candidate at the planner for an accelerator operator, different from what runs.
		var st struct {
			Candidates map[string]map[string]struct {
				Config   string  `json:"config"`
				Capacity float64 `json:"capacity"`
			} `json:"candidates"`
		}
		plannerCall(t, http.MethodGet, s.leader+"/v1/state", nil, &st)
		var p plan
		plannerCall(t, http.MethodGet, s.leader+"/v1/plan/pdf-curation", nil, &p)
		for op, c := range st.Candidates["pdf-curation"] {
			if op != "ocr-text" && op != "ocr-table" {
				continue
			}
			if c.Config != "" && c.Config != p.Groups[op].Config && c.Capacity > 0 {
				running = p.Groups[op].Config
				return true, ""
			}
		}
		// A candidate may already be rolling out (or done): the plan then shows it.
		for _, op := range []string{"ocr-text", "ocr-table"} {
			if g := p.Groups[op]; g.CandidateConfig != "" || g.ConfigEpoch > 0 {
				running = g.Config
				return true, ""
			}
		}
		return false, fmt.Sprintf("candidates %v", st.Candidates)
	})
	t.Logf("tuner proposed a candidate next to the running config %q", running)
}

// TestLiveTunerTrials runs the live tuner in its trial mode (tune_trials) against the
// Nomad actuator: the planner commits a trial of ocr-text, Nomad runs it in ocr-text's
// canary slot with the trial's config and epoch while the production instances keep
// theirs, and the tuner records the trial's evaluation from the real workers' metrics at
// the trial's epoch.
func TestLiveTunerTrials(t *testing.T) {
	s := startTuned(t, true)

	// 1. A committed trial of ocr-text, running in its slot.
	var trial planGroup
	waitFor(t, 5*time.Minute, "a trial of ocr-text running in its canary slot", func() (bool, string) {
		var p plan
		plannerCall(t, http.MethodGet, s.leader+"/v1/plan/pdf-curation", nil, &p)
		trial = p.Groups["ocr-text"]
		if trial.TrialConfig == "" {
			return false, fmt.Sprintf("no trial in the plan (ocr-text: %+v)", trial)
		}
		for _, a := range runningAllocs(t, s.cl, "pdf-curation") {
			if a.TaskGroup != "ocr-text@canary" {
				continue
			}
			full, _, err := s.cl.Allocations().Info(a.ID, nil)
			if err != nil {
				return false, err.Error()
			}
			for _, g := range full.Job.TaskGroups {
				if *g.Name == a.TaskGroup && g.Meta["trident_config"] == trial.TrialConfig &&
					g.Meta["trident_config_epoch"] == strconv.FormatUint(trial.TrialEpoch, 10) {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("trial %s at epoch %d committed; the slot does not run it yet", trial.TrialConfig, trial.TrialEpoch)
	})
	for _, a := range runningAllocs(t, s.cl, "pdf-curation") {
		if a.TaskGroup == "ocr-text@canary" || !regexp.MustCompile(`^ocr-text@`).MatchString(a.TaskGroup) {
			continue
		}
		full, _, err := s.cl.Allocations().Info(a.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range full.Job.TaskGroups {
			if *g.Name == a.TaskGroup && g.Meta["trident_config"] != trial.Config {
				t.Errorf("production group %s runs %q during the trial, want the running config %q", a.TaskGroup, g.Meta["trident_config"], trial.Config)
			}
		}
	}

	// 2. The tuner measures a trial: an evaluation of ocr-text at a trial epoch. A trial is
	// measured only under load (its samples must show saturation); on a loaded machine
	// the first dataset can drain before a trial's samples accumulate, and the tuner then
	// sets the trial aside. Like a producer with more input, the test tops the input up
	// every 2 minutes without an evaluation, at most twice.
	evalRE := regexp.MustCompile(`tune: evaluation recorded:? .*operator=ocr-text\b.*`)
	epochRE := regexp.MustCompile(`\bepoch=([0-9]+)`)
	more := newTopUp(s, 11, 2*time.Minute, 2)
	waitFor(t, 6*time.Minute, "the tuner to record a trial evaluation of ocr-text", func() (bool, string) {
		more.poll(t)
		for _, line := range evalRE.FindAllString(s.as.Log(), -1) {
			m := epochRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if e, _ := strconv.ParseUint(m[1], 10, 64); e >= 1<<40 {
				return true, ""
			}
		}
		return false, "no trial evaluation of ocr-text in the autoscaler log yet"
	})
}
