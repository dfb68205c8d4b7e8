package opmodel

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/configspace"
)

func cfg(t *testing.T, s string) configspace.Config {
	t.Helper()
	c, err := Space().ParseConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func base(n int) string {
	return "max_num_seqs=" + itoa(n) + ",max_num_batched_tokens=16384,block_size=16,scheduler_delay_factor=0.3,enable_chunked_prefill=true,enable_prefix_caching=true"
}

func itoa(n int) string { return configspace.Num(float64(n)).String() }

func TestThroughputAndMemoryGrowWithConcurrency(t *testing.T) {
	e, w := TextOCR(), DocumentWorkload(1900, 900)
	prevT, prevM := 0.0, 0.0
	for _, n := range []int{8, 16, 32, 64, 128, 256} {
		x, err := e.Model(cfg(t, base(n)), w)
		if err != nil {
			t.Fatal(err)
		}
		if x.Throughput <= prevT || x.MemGB <= prevM {
			t.Fatalf("n=%d: throughput %.3f mem %.1f not above %.3f %.1f", n, x.Throughput, x.MemGB, prevT, prevM)
		}
		prevT, prevM = x.Throughput, x.MemGB
	}
}

func TestOOMAboveDeviceMemory(t *testing.T) {
	e, w := TextOCR(), DocumentWorkload(1900, 900)
	rng := rand.New(rand.NewPCG(1, 1))
	m, err := e.Evaluate(cfg(t, base(512)), w, time.Minute, rng)
	if err != nil {
		t.Fatal(err)
	}
	if !m.OOM || m.Throughput != 0 || m.PeakMemGB != e.DeviceMemGB {
		t.Fatalf("512 sequences of 2.8k tokens: %+v, want OOM at the 80 GB limit", m)
	}
	m, _ = e.Evaluate(cfg(t, base(16)), w, time.Minute, rng)
	if m.OOM || m.Throughput <= 0 || m.PeakMemGB >= e.DeviceMemGB {
		t.Fatalf("16 sequences: %+v, want a normal run", m)
	}
}

func TestEvaluateIsPureGivenRNG(t *testing.T) {
	e, w := Captioning(), VideoWorkload(600)
	c := cfg(t, base(16))
	a, _ := e.Evaluate(c, w, time.Minute, rand.New(rand.NewPCG(7, 7)))
	b, _ := e.Evaluate(c, w, time.Minute, rand.New(rand.NewPCG(7, 7)))
	if a != b {
		t.Fatalf("same rng gave %+v and %+v", a, b)
	}
}

func TestSustainedRunsPeakHigher(t *testing.T) {
	e, w := TextOCR(), DocumentWorkload(1900, 900)
	c := cfg(t, base(150))
	short, _ := e.OOMProbability(c, w, 2*time.Minute)
	long, _ := e.OOMProbability(c, w, time.Hour)
	if !(long > short) {
		t.Fatalf("OOM probability 2 min %.3f, 1 h %.3f: want the sustained run riskier", short, long)
	}
}

func TestLongerInputsCostMoreMemoryAndThroughput(t *testing.T) {
	e := Captioning()
	c := cfg(t, base(16))
	short, _ := e.Model(c, VideoWorkload(30))
	long, _ := e.Model(c, VideoWorkload(600))
	if !(long.MemGB > short.MemGB && long.Throughput < short.Throughput) {
		t.Fatalf("30 s: %+v, 600 s: %+v", short, long)
	}
}

// TestOptimumNearMemoryLimit checks the property that makes constraint-awareness matter:
// the best configuration that survives a sustained hour sits within 10% of device memory.
func TestOptimumNearMemoryLimit(t *testing.T) {
	s := Space()
	for _, tc := range []struct {
		e Engine
		w Workload
	}{{TextOCR(), DocumentWorkload(1900, 900)}, {Captioning(), VideoWorkload(600)}} {
		rng := rand.New(rand.NewPCG(2, 2))
		var best Expected
		for range 4000 {
			u := make([]float64, s.Dim())
			for i := range u {
				u[i] = rng.Float64()
			}
			c, _ := s.Decode(u)
			if !s.Satisfies(c) {
				continue
			}
			x, err := tc.e.Model(c, tc.w)
			if err != nil {
				t.Fatal(err)
			}
			if p, _ := tc.e.OOMProbability(c, tc.w, time.Hour); p < 0.01 && x.Throughput > best.Throughput {
				best = x
			}
		}
		if best.MemGB < 0.9*tc.e.DeviceMemGB {
			t.Errorf("%s: best safe configuration uses %.1f GB of %.0f", tc.e.Name, best.MemGB, tc.e.DeviceMemGB)
		}
	}
}
