package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// TrialEpochBase is the first config epoch of tuning trials. A trial's instance exports
// TrialEpochBase plus the raft index of the command that set the trial, so trial epochs
// never meet a rollout's epochs (which count transitions from 0) and each trial has its
// own. Epochs travel as float64 Prometheus samples: 2^40 plus any raft index below 2^52
// is exact.
const TrialEpochBase uint64 = 1 << 40

// MaxTrialSlots bounds the trial slots of one operator (Trial.Slot < MaxTrialSlots).
const MaxTrialSlots = 16

// IsTrialEpoch reports whether config epoch e labels a tuning trial's instance.
func IsTrialEpoch(e uint64) bool { return e >= TrialEpochBase }

// Trial is a tuning trial of an operator: one instance of Config that runs beside the
// operator's production instances, consumes from the same input and is measured by the
// tuner. It is never part of a rollout: the MILP plans the production instances, and the
// trial takes the place of one of them (as a canary does on a packed node). An operator
// runs at most one trial per slot; setting another in a slot replaces it.
type Trial struct {
	// Config is the configuration under trial.
	Config string `json:"config"`
	// Epoch is the config epoch its instance exports: TrialEpochBase + Index.
	Epoch uint64 `json:"epoch"`
	// Index is the raft index of the command that set it.
	Index uint64 `json:"index"`
	// Slot is the trial slot it runs in, 0 to MaxTrialSlots-1 (absent: 0, as in state
	// and commands written before slots existed).
	Slot int `json:"slot,omitempty"`
	// Failed says why the trial's instance failed to run (OOM-killed, or exited with a
	// non-zero status repeatedly, as the actuator saw it; OpFailTrial); "" while it runs
	// or nothing is known. A tuner records a failed trial as a failed evaluation of its
	// config.
	Failed string `json:"failed,omitempty"`
}

// TrialOOMKilled is what a trial failure (Trial.Failed) says when its instance was
// OOM-killed, as opposed to a task that exited by itself (an engine refusing its config at
// start-up). The actuator writes it; TrialFailedOOM reads it.
const TrialOOMKilled = "was OOM-killed"

// TrialFailedOOM reports whether the trial failure why (Trial.Failed) was an OOM kill: it
// says TrialOOMKilled before any parenthesis (a task that exited quotes its last message
// in parentheses, and an engine's own words must not pass for an OOM kill).
func TrialFailedOOM(why string) bool {
	i := strings.Index(why, TrialOOMKilled)
	j := strings.Index(why, "(")
	return i >= 0 && (j < 0 || i < j)
}

// MaxTrialFailureBytes bounds Trial.Failed.
const MaxTrialFailureBytes = 512

// TrialSlots is one operator's running trials, at most one per slot, in ascending slot
// order. Its JSON is an array; a single trial object (state written before slots existed)
// decodes as that trial in slot 0.
type TrialSlots []Trial

// UnmarshalJSON implements json.Unmarshaler, accepting the array and the older single
// trial.
func (s *TrialSlots) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		var tr Trial
		if err := json.Unmarshal(t, &tr); err != nil {
			return fmt.Errorf("decode trial: %w", err)
		}
		tr.Slot = 0
		*s = TrialSlots{tr}
		return nil
	}
	var out []Trial
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("decode trial slots: %w", err)
	}
	*s = out
	return nil
}

// Slot returns the trial in slot k.
func (s TrialSlots) Slot(k int) (Trial, bool) {
	for _, t := range s {
		if t.Slot == k {
			return t, true
		}
	}
	return Trial{}, false
}

// with returns s with t in its slot (replacing the slot's trial).
func (s TrialSlots) with(t Trial) TrialSlots {
	out := slices.DeleteFunc(slices.Clone(s), func(o Trial) bool { return o.Slot == t.Slot })
	out = append(out, t)
	slices.SortFunc(out, func(a, b Trial) int { return a.Slot - b.Slot })
	return out
}

// checkTrial validates an OpSetTrial command: the operator is registered and declares
// tunable parameters, the trial names a config and its slot is in range.
func checkTrial(st *State, c Command) error {
	if err := knownOp(st, c.Job, c.Operator); err != nil {
		return err
	}
	if c.Trial == nil || c.Trial.Config == "" {
		return fmt.Errorf("operator %q: trial config is empty", c.Operator)
	}
	if err := checkSlot(c); err != nil {
		return err
	}
	if o, _ := st.Pipelines[c.Job].Operator(c.Operator); o.Params == "" {
		return fmt.Errorf("operator %q declares no tunable parameters (group meta trident_params): nothing to trial", c.Operator)
	}
	return nil
}

// checkSlot validates the slot of c's trial, if it names one.
func checkSlot(c Command) error {
	if c.Trial != nil && (c.Trial.Slot < 0 || c.Trial.Slot >= MaxTrialSlots) {
		return fmt.Errorf("operator %q: trial slot %d out of range [0, %d)", c.Operator, c.Trial.Slot, MaxTrialSlots)
	}
	return nil
}

// checkFailTrial validates an OpFailTrial command: a known operator, a slot in range and
// a reason of at most MaxTrialFailureBytes.
func checkFailTrial(st *State, c Command) error {
	if err := knownOp(st, c.Job, c.Operator); err != nil {
		return err
	}
	if c.Trial == nil || c.Trial.Failed == "" || c.Trial.Index == 0 {
		return fmt.Errorf("operator %q: a trial failure names the trial (its index) and why it failed", c.Operator)
	}
	if len(c.Trial.Failed) > MaxTrialFailureBytes {
		return fmt.Errorf("operator %q: trial failure of %d bytes: want at most %d", c.Operator, len(c.Trial.Failed), MaxTrialFailureBytes)
	}
	return checkSlot(c)
}

// applyFailTrial marks the trial in c's slot failed when it is still the trial c names
// (its index): a trial replaced in the meantime stays as it is.
func applyFailTrial(st *State, c Command) error {
	ts := st.Trials[c.Job][c.Operator]
	for k, t := range ts {
		if t.Slot == c.Trial.Slot && t.Index == c.Trial.Index {
			ts = slices.Clone(ts)
			ts[k].Failed = c.Trial.Failed
			st.Trials[c.Job][c.Operator] = ts
			return nil
		}
	}
	return nil
}

// checkDropTrial validates an OpDropTrial command.
func checkDropTrial(st *State, c Command) error {
	if err := knownOp(st, c.Job, c.Operator); err != nil {
		return err
	}
	return checkSlot(c)
}

// applySetTrial records the trial of c's operator in its slot, with its epoch.
func applySetTrial(st *State, c Command, idx uint64) error {
	if st.Trials == nil { // state restored from a snapshot that predates the field
		st.Trials = map[string]map[string]TrialSlots{}
	}
	t := Trial{Config: c.Trial.Config, Epoch: TrialEpochBase + idx, Index: idx, Slot: c.Trial.Slot}
	setIn(st.Trials, c.Job, c.Operator, st.Trials[c.Job][c.Operator].with(t))
	return nil
}

// applyDropTrial ends the trial in the slot c.Trial names, or every trial of c's operator
// when c names none (nothing running there: nothing to do).
func applyDropTrial(st *State, c Command) error {
	if c.Trial != nil {
		if s := slices.DeleteFunc(slices.Clone(st.Trials[c.Job][c.Operator]), func(t Trial) bool { return t.Slot == c.Trial.Slot }); len(s) > 0 {
			st.Trials[c.Job][c.Operator] = s
			return nil
		}
	}
	delete(st.Trials[c.Job], c.Operator)
	if len(st.Trials[c.Job]) == 0 {
		delete(st.Trials, c.Job)
	}
	return nil
}
