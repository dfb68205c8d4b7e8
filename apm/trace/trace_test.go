package trace

import (
	"math"
	"reflect"
	"testing"
)

func mustGen(t *testing.T, kind Kind, seed uint64, n int) *Trace {
	t.Helper()
	tr, err := Generate(Config{Kind: kind, Seed: seed, Samples: n})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestDeterministicPerSeed(t *testing.T) {
	a, b := mustGen(t, PDF, 7, 300), mustGen(t, PDF, 7, 300)
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed gave different traces")
	}
	c := mustGen(t, PDF, 8, 300)
	if reflect.DeepEqual(a.Points, c.Points) {
		t.Error("different seeds gave the same trace")
	}
	if _, err := Generate(Config{Kind: "audio"}); err == nil {
		t.Error("unknown kind accepted")
	}
}

// TestPhysics checks the properties the estimators' comparison rests on, per kind, over
// 4000 intervals (standard errors of the means below are < 0.5% of the values compared).
func TestPhysics(t *testing.T) {
	for _, kind := range []Kind{PDF, Video} {
		t.Run(string(kind), func(t *testing.T) {
			tr := mustGen(t, kind, 3, 4000)
			count := map[Regime]int{}
			ratio := map[Regime]float64{}
			var ds2Steady, busyStarved float64
			var nStarvedHalf int
			for i, p := range tr.Points {
				s := p.Sample
				if len(s.Features) != len(tr.Features) {
					t.Fatalf("interval %d: %d features, want %d", i, len(s.Features), len(tr.Features))
				}
				if i > 0 && s.QueueStart != tr.Points[i-1].Sample.QueueEnd {
					t.Fatalf("interval %d: queue starts at %v, previous ended at %v", i, s.QueueStart, tr.Points[i-1].Sample.QueueEnd)
				}
				if s.Utilization < 0 || s.Utilization > 1 || s.BusySeconds > s.Interval.Seconds() {
					t.Fatalf("interval %d: utilisation %v, busy %v s", i, s.Utilization, s.BusySeconds)
				}
				r := s.Rate() / p.Capacity
				count[p.Regime]++
				ratio[p.Regime] += r
				switch p.Regime {
				case Steady:
					ds2Steady += s.Records / s.UsefulSeconds / p.Capacity
				case Starved:
					if r > 0.5 {
						busyStarved += s.BusySeconds / s.Interval.Seconds()
						nStarvedHalf++
					}
				}
			}
			for r := Regime(0); r < numRegimes; r++ {
				if count[r] < 40 {
					t.Errorf("regime %v: only %d intervals", r, count[r])
				}
				ratio[r] /= float64(count[r])
			}
			// Steady intervals measure capacity up to mean-one noise: within 1%.
			if math.Abs(ratio[Steady]-1) > 0.01 {
				t.Errorf("steady rate/capacity %v, want 1", ratio[Steady])
			}
			// Non-steady regimes bias the rate the way the paper describes.
			for _, r := range []Regime{Starved, Backpressure, Contention} {
				if ratio[r] > 0.8 {
					t.Errorf("%v rate/capacity %v, want < 0.8", r, ratio[r])
				}
			}
			if ratio[Burst] < 1.1 {
				t.Errorf("burst rate/capacity %v, want > 1.1", ratio[Burst])
			}
			// DS2's useful-time rate undershoots capacity even in steady state (overlap),
			// and busy time saturates even when half-loaded.
			if d := ds2Steady / float64(count[Steady]); d > 0.6 || d < 0.3 {
				t.Errorf("steady DS2 rate/capacity %v, want in [0.3, 0.6]", d)
			}
			if b := busyStarved / float64(nStarvedHalf); b < 0.9 {
				t.Errorf("busy fraction of half-loaded starved intervals %v, want >= 0.9 (saturated)", b)
			}
			if steadyFrac := float64(count[Steady]) / float64(len(tr.Points)); steadyFrac < 0.4 || steadyFrac > 0.75 {
				t.Errorf("steady fraction %v outside [0.4, 0.75]", steadyFrac)
			}
		})
	}
}
