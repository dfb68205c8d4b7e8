package enginesim

import (
	"math"
	"reflect"
	"testing"
)

// TestDeterministic checks that a seed fixes the trace.
func TestDeterministic(t *testing.T) {
	a, err := Generate(Config{Kind: BurstyStarvation, Seed: 3, Intervals: 200})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(Config{Kind: BurstyStarvation, Seed: 3, Intervals: 200})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different traces")
	}
	c, _ := Generate(Config{Kind: BurstyStarvation, Seed: 4, Intervals: 200})
	if reflect.DeepEqual(a.Points, c.Points) {
		t.Fatal("different seeds, same trace")
	}
}

// TestKindsShowTheirConditions checks that every kind produces the episodes it is named
// for, exports what it says it exports, and that its ground truth is consistent: clean
// intervals run at the profiled capacity on average (the profile and the trace are the
// same engine), starved ones below it.
func TestKindsShowTheirConditions(t *testing.T) {
	for _, k := range Kinds() {
		t.Run(string(k), func(t *testing.T) {
			tr, err := Generate(Config{Kind: k, Seed: 1, Intervals: 600})
			if err != nil {
				t.Fatal(err)
			}
			cond := map[Condition]int{}
			var cleanRatio, starvedRatio []float64
			epochs := map[uint64]bool{}
			for _, p := range tr.Points {
				s := p.Sample
				cond[p.Condition]++
				epochs[s.Epoch] = true
				if !(p.Capacity > 0) || len(s.Features) != len(Features) || !(s.Engine.AdmissionLimit > 0) {
					t.Fatalf("bad point %+v", p)
				}
				if got := s.Engine.Reported; got != (k != UnreportedBound) {
					t.Fatalf("engine gauges reported = %v", got)
				}
				if (s.QueueCap > 0) != (k != UnreportedBound) {
					t.Fatalf("queue bound %v", s.QueueCap)
				}
				switch p.Condition {
				case Saturated:
					cleanRatio = append(cleanRatio, s.Rate()/p.Capacity)
				case Starved:
					starvedRatio = append(starvedRatio, s.Rate()/p.Capacity)
				}
			}
			if cond[Saturated] < 60 {
				t.Errorf("%d clean intervals of %d: %v", cond[Saturated], len(tr.Points), cond)
			}
			// 60+ clean intervals of 3-12% rate noise each: a mean within 5% of the
			// capacity is several standard errors of slack.
			if m := mean(cleanRatio); math.Abs(m-1) > 0.05 {
				t.Errorf("clean intervals run at %.3f of the profiled capacity", m)
			}
			if len(starvedRatio) > 0 && mean(starvedRatio) > 0.85 {
				t.Errorf("starved intervals run at %.3f of capacity", mean(starvedRatio))
			}
			want := map[Kind]Condition{LongStarvation: Starved, BurstyStarvation: Intermittent, Backpressure: Blocked, ColdStart: WarmUp, ConfigChange: WarmUp}
			if c, ok := want[k]; ok && cond[c] == 0 {
				t.Errorf("no %s interval: %v", c, cond)
			}
			if k == ConfigChange && len(epochs) < 2 {
				t.Errorf("one configuration epoch only")
			}
		})
	}
}

// TestRegimeFixesCapacity checks Point.Regime: within a trace, intervals of the same
// configuration and request population have the same capacity.
func TestRegimeFixesCapacity(t *testing.T) {
	for _, k := range []Kind{ConfigChange, WorkloadShift} {
		tr, err := Generate(Config{Kind: k, Seed: 2, Intervals: 800})
		if err != nil {
			t.Fatal(err)
		}
		capOf := map[[2]int]float64{}
		for i, p := range tr.Points {
			if c, ok := capOf[p.Regime]; ok && c != p.Capacity {
				t.Fatalf("%s interval %d: regime %v has capacity %v and %v", k, i, p.Regime, c, p.Capacity)
			}
			capOf[p.Regime] = p.Capacity
		}
		if len(capOf) < 2 {
			t.Errorf("%s: %d regimes, want several", k, len(capOf))
		}
	}
}

// Point.Current is the share of an interval's completions that were requests of the
// current population: long starvation seed 3 switches workload at interval 160 behind a
// deep queue, and its intervals 160 and 161 are saturated while the engine still completes
// the previous population's requests (0 % and 23 % of the new one); once the old requests
// are gone (interval 193, the next saturated one) the share is 1, as it is everywhere before
// the switch.
func TestCurrentPopulationShare(t *testing.T) {
	tr, err := Generate(Config{Kind: LongStarvation, Seed: 3, Intervals: 200})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range tr.Points[:160] {
		if p.Sample.Records > 0 && p.Current != 1 {
			t.Fatalf("interval %d before any switch: share %.2f, want 1", i, p.Current)
		}
	}
	for _, i := range []int{160, 161} {
		if p := tr.Points[i]; p.Regime == tr.Points[159].Regime || !p.Clean || p.Current >= 0.5 {
			t.Errorf("interval %d: regime %v (before %v), clean %v, share %.2f: want the new workload, saturated, share below 0.5",
				i, p.Regime, tr.Points[159].Regime, p.Clean, p.Current)
		}
	}
	if p := tr.Points[193]; !p.Clean || p.Current != 1 {
		t.Errorf("interval 193: clean %v, share %.2f, want saturated and 1", p.Clean, p.Current)
	}
}
