package fsm

import "fmt"

// TrialEpochBase is the first config epoch of tuning trials. A trial's instance exports
// TrialEpochBase plus the raft index of the command that set the trial, so trial epochs
// never meet a rollout's epochs (which count transitions from 0) and each trial has its
// own. Epochs travel as float64 Prometheus samples: 2^40 plus any raft index below 2^52
// is exact.
const TrialEpochBase uint64 = 1 << 40

// IsTrialEpoch reports whether config epoch e labels a tuning trial's instance.
func IsTrialEpoch(e uint64) bool { return e >= TrialEpochBase }

// Trial is a tuning trial of an operator: one instance of Config that runs beside the
// operator's production instances, consumes from the same input and is measured by the
// tuner. It is never part of a rollout: the MILP plans the production instances, and the
// trial takes the place of one of them (as a canary does on a packed node). At most one
// trial runs per operator; setting another replaces it.
type Trial struct {
	// Config is the configuration under trial.
	Config string `json:"config"`
	// Epoch is the config epoch its instance exports: TrialEpochBase + Index.
	Epoch uint64 `json:"epoch"`
	// Index is the raft index of the command that set it.
	Index uint64 `json:"index"`
}

// checkTrial validates an OpSetTrial command: the operator is registered and declares
// tunable parameters, and the trial names a config.
func checkTrial(st *State, c Command) error {
	if err := knownOp(st, c.Job, c.Operator); err != nil {
		return err
	}
	if c.Trial == nil || c.Trial.Config == "" {
		return fmt.Errorf("operator %q: trial config is empty", c.Operator)
	}
	if o, _ := st.Pipelines[c.Job].Operator(c.Operator); o.Params == "" {
		return fmt.Errorf("operator %q declares no tunable parameters (group meta trident_params): nothing to trial", c.Operator)
	}
	return nil
}

// applySetTrial records the trial of c's operator with its epoch.
func applySetTrial(st *State, c Command, idx uint64) error {
	if st.Trials == nil { // state restored from a snapshot that predates the field
		st.Trials = map[string]map[string]Trial{}
	}
	setIn(st.Trials, c.Job, c.Operator, Trial{Config: c.Trial.Config, Epoch: TrialEpochBase + idx, Index: idx})
	return nil
}

// applyDropTrial ends the trial of c's operator (none: nothing to do).
func applyDropTrial(st *State, c Command) error {
	delete(st.Trials[c.Job], c.Operator)
	if len(st.Trials[c.Job]) == 0 {
		delete(st.Trials, c.Job)
	}
	return nil
}
