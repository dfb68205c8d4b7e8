package adapt

import (
	"testing"

	"github.com/trident-sched/trident/strategy/bo"
)

// The live tuning configuration is constrained BO with a margin and a sustained-peak
// allowance on a device, unconstrained on a CPU operator, and validated.
func TestLiveTuning(t *testing.T) {
	live := LiveTuning()
	if err := live.Validate(); err != nil {
		t.Fatal(err)
	}
	o := live.BOOptions(81920)
	if o.Method != bo.Constrained || o.MemLimit != 81920 || !(o.Margin > 0) || !(o.PeakK > 0) || o.Delta != live.Delta || o.InitPoints != live.InitPoints {
		t.Errorf("device options %+v", o)
	}
	if c := live.BOOptions(0); c.Method != bo.Unconstrained || c.Margin != 0 || c.PeakK != 0 {
		t.Errorf("CPU options %+v", c)
	}
	for _, bad := range []Tuning{{Budget: 0, InitPoints: 1}, {Budget: 1, InitPoints: 1, Delta: 1}, {Budget: 1, InitPoints: 1, MarginMiB: -1}, {Budget: 1, InitPoints: 1, PeakK: -2}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
