package fsm

import "fmt"

// Canary verdicts and who gave them.
const (
	VerdictPromoted = "promoted"
	VerdictFailed   = "failed"

	ByPlanner = "planner"
	ByUser    = "user"
	ByNomad   = "nomad"
)

// Canary is the record of one operator's canary: the first instance of a candidate config,
// placed as a Nomad canary by a decision's canary version and judged by the leader. The
// leader records it when it first sees the canary healthy (so that a new leader keeps the
// probe window), and again with the verdict; a verdict, once recorded, never changes.
type Canary struct {
	// Decision is the decision whose canary version placed it.
	Decision uint64 `json:"decision"`
	// Config is the candidate config the canary runs; Node and Deployment where it runs and
	// the Nomad deployment that holds it.
	Config     string `json:"config"`
	Node       string `json:"node,omitempty"`
	Deployment string `json:"deployment"`
	// HealthyUnixMilli is when the leader first saw the canary healthy: its probe window
	// starts there.
	HealthyUnixMilli int64 `json:"healthy_unix_ms"`
	// CurrentCapacity is the running config's estimate when the canary became healthy
	// (records/s per instance).
	CurrentCapacity float64 `json:"current_capacity"`
	// Index is the raft index of the first record: observations of the candidate
	// committed after it measure the canary.
	Index uint64 `json:"index"`
	// Verdict is "" while the canary is measured, then VerdictPromoted or VerdictFailed;
	// By says who gave it (ByPlanner, ByUser for a nomad deployment promote / fail, ByNomad
	// for Nomad's own health checks and deadlines) and Detail why.
	Verdict string `json:"verdict,omitempty"`
	By      string `json:"by,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// CandidateCapacity is the canary's measured capacity behind a planner's verdict.
	CandidateCapacity float64 `json:"candidate_capacity,omitempty"`
	// VerdictUnixMilli is the leader's clock when the verdict was recorded.
	VerdictUnixMilli int64 `json:"verdict_unix_ms,omitempty"`
}

// checkCanary validates an OpCanary command: the operator is registered, the record
// belongs to the job's latest decision, a verdict is one of the known ones, and a
// recorded verdict is not changed.
func checkCanary(st *State, c Command) error {
	if err := knownOp(st, c.Job, c.Operator); err != nil {
		return err
	}
	k := c.Canary
	if k == nil {
		return fmt.Errorf("canary of %q/%q: no record", c.Job, c.Operator)
	}
	latest, ok := st.LatestDecision(c.Job)
	if !ok || latest.Index != k.Decision {
		return fmt.Errorf("canary of %q/%q: decision %d is not the job's latest", c.Job, c.Operator, k.Decision)
	}
	switch k.Verdict {
	case "", VerdictPromoted, VerdictFailed:
	default:
		return fmt.Errorf("canary of %q/%q: unknown verdict %q", c.Job, c.Operator, k.Verdict)
	}
	if k.Verdict != "" && k.By != ByPlanner && k.By != ByUser && k.By != ByNomad {
		return fmt.Errorf("canary of %q/%q: verdict by %q: want %q, %q or %q", c.Job, c.Operator, k.By, ByPlanner, ByUser, ByNomad)
	}
	if !finite(k.CurrentCapacity) || k.CurrentCapacity < 0 || !finite(k.CandidateCapacity) || k.CandidateCapacity < 0 {
		return fmt.Errorf("canary of %q/%q: capacities must be finite and >= 0", c.Job, c.Operator)
	}
	if prev, ok := st.Canaries[c.Job][c.Operator]; ok && prev.Decision == k.Decision && prev.Verdict != "" {
		return fmt.Errorf("canary of %q/%q in decision %d was already %s by %s", c.Job, c.Operator, k.Decision, prev.Verdict, prev.By)
	}
	return nil
}

// applyCanary records c.Canary as the operator's newest canary; the first record of a
// decision's canary sets its Index, later ones keep it.
func applyCanary(st *State, c Command, idx uint64) error {
	k := *c.Canary
	k.Index = idx
	if prev, ok := st.Canaries[c.Job][c.Operator]; ok && prev.Decision == k.Decision {
		k.Index = prev.Index
		if k.HealthyUnixMilli == 0 {
			k.HealthyUnixMilli = prev.HealthyUnixMilli
		}
		if k.CurrentCapacity == 0 {
			k.CurrentCapacity = prev.CurrentCapacity
		}
	}
	if st.Canaries == nil { // state restored from a snapshot that predates the field
		st.Canaries = map[string]map[string]Canary{}
	}
	setIn(st.Canaries, c.Job, c.Operator, k)
	return nil
}
