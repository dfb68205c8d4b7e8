package adapt

import (
	"math"
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

// The default margin scales with the device: 5 % of it, never below 1 GiB; the BO gets
// it; a fraction of half the device or more is rejected.
func TestMarginScalesWithTheDevice(t *testing.T) {
	live := LiveTuning()
	for _, c := range []struct{ mem, want float64 }{{8192, 1024}, {24576, 1228.8}, {65536, 3276.8}, {81920, 4096}} {
		if got := live.Margin(c.mem); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("margin on %v MiB = %v, want %v", c.mem, got, c.want)
		}
		if o := live.BOOptions(c.mem); math.Abs(o.Margin-c.want) > 1e-9 {
			t.Errorf("BO margin on %v MiB = %v, want %v", c.mem, o.Margin, c.want)
		}
	}
	if got := (Tuning{MarginMiB: 2048}).Margin(81920); got != 2048 {
		t.Errorf("an absolute margin became %v", got)
	}
	if err := (Tuning{Budget: 1, InitPoints: 1, MarginFrac: 0.5}).Validate(); err == nil {
		t.Error("a margin of half the device accepted")
	}
}
