package fsm

import "testing"

// TestTrialFailedOOM: the actuator's OOM-kill failure reads as one, an exit does not, even
// when the engine's last message (quoted in parentheses) says "was OOM-killed".
func TestTrialFailedOOM(t *testing.T) {
	for why, want := range map[string]bool{
		"allocation 1234abcd on c2: task run " + TrialOOMKilled + " 2 times":                               true,
		"allocation 1234abcd on c2: task run exited 2 times with a non-zero status (exit code 1)":          false,
		"task run exited 2 times with a non-zero status (worker " + TrialOOMKilled + " by its supervisor)": false,
		"": false,
	} {
		if got := TrialFailedOOM(why); got != want {
			t.Errorf("TrialFailedOOM(%q) = %v, want %v", why, got, want)
		}
	}
}
