package kvserve

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/trident-sched/trident/strategy/configspace"
)

func mustConfig(t *testing.T, s string) configspace.Config {
	t.Helper()
	c, err := Space().ParseConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The default configuration is a deployment that fits: it starts, and a sustained hour
// carries no OOM risk on either model.
func TestDefaultFits(t *testing.T) {
	for _, m := range []Model{Chat13B(), RAG8B()} {
		d := Space().Default()
		x, err := m.Model(d)
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.OOMProbability(d, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if x.StartFails || !(x.Throughput > 0) || p > 1e-6 {
			t.Errorf("%s default: start fails %v, throughput %.3f, P(OOM over 1 h) %.2g", m.Name, x.StartFails, x.Throughput, p)
		}
	}
}

// OOMProbability is the law Evaluate draws from: over 4000 runs of a configuration near
// the memory wall, the share of OOMs matches it within 3 percentage points (allocator
// noise, which OOMProbability ignores, is small against the prompt-driven spikes there).
func TestOOMProbabilityMatchesEvaluate(t *testing.T) {
	m := RAG8B()
	c := mustConfig(t, "gpu_memory_utilization=0.93,max_num_seqs=16,max_num_batched_tokens=1024,block_size=32,enforce_eager=false")
	for _, d := range []time.Duration{2 * time.Minute, 4 * time.Minute} {
		p, err := m.OOMProbability(c, d)
		if err != nil {
			t.Fatal(err)
		}
		if p < 0.05 || p > 0.95 {
			t.Fatalf("%v: P(OOM) %.3f: pick a configuration nearer the wall", d, p)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		ooms := 0
		const n = 4000
		for range n {
			r, err := m.Evaluate(c, d, rng)
			if err != nil {
				t.Fatal(err)
			}
			if r.OOM {
				ooms++
			}
		}
		if got := float64(ooms) / n; math.Abs(got-p) > 0.03 {
			t.Errorf("%v: %.3f of runs failed with OOM, OOMProbability says %.3f", d, got, p)
		}
	}
}

// A sustained run peaks higher than a short one: the longest prompt of an hour is longer
// than that of two minutes, and fragmentation grows with the run. A configuration with a
// 40 % chance of OOM in a two-minute evaluation is all but certain to fail within the hour.
func TestSustainedRunPeaksHigher(t *testing.T) {
	m := RAG8B()
	c := mustConfig(t, "gpu_memory_utilization=0.93,max_num_seqs=16,max_num_batched_tokens=1024,block_size=32,enforce_eager=false")
	short, err := m.OOMProbability(c, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	long, err := m.OOMProbability(c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !(long > short) || long < 0.9 {
		t.Errorf("P(OOM) over 2 min %.3f, over 1 h %.3f: want the hour > 0.9 and above the short run", short, long)
	}
}

// Throughput rises with gpu_memory_utilization while the KV pool limits the concurrency
// (more sequences fit), and an engine whose pool cannot hold one sequence of the model's
// context refuses to start.
func TestUtilisationBuysConcurrency(t *testing.T) {
	m := Chat13B()
	prev := 0.0
	for _, u := range []float64{0.8, 0.85, 0.9, 0.95} {
		c := mustConfig(t, "max_num_seqs=64,max_num_batched_tokens=2048,block_size=16,enforce_eager=true,gpu_memory_utilization="+ftoa(u))
		x, err := m.Model(c)
		if err != nil {
			t.Fatal(err)
		}
		if !(x.Throughput > prev) {
			t.Errorf("utilisation %.2f: throughput %.3f not above %.3f", u, x.Throughput, prev)
		}
		prev = x.Throughput
	}
	c := mustConfig(t, "max_num_seqs=64,max_num_batched_tokens=16384,block_size=16,enforce_eager=true,gpu_memory_utilization=0.7")
	x, err := m.Model(c)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := m.OOMProbability(c, time.Minute)
	if !x.StartFails || p != 1 {
		t.Errorf("pool of 0.7 x 40 GB less 26 GB of weights and 3 GB of profiled activations: start fails %v, P(OOM) %v; want true, 1", x.StartFails, p)
	}
}

// Admitting more sequences than the KV pool holds costs throughput (preemption and
// recomputation) instead of adding any.
func TestOvercommitPreempts(t *testing.T) {
	m := Chat13B()
	base := "gpu_memory_utilization=0.9,max_num_batched_tokens=2048,block_size=16,enforce_eager=true,max_num_seqs="
	fit, err := m.Model(mustConfig(t, base+"8"))
	if err != nil {
		t.Fatal(err)
	}
	over, err := m.Model(mustConfig(t, base+"64"))
	if err != nil {
		t.Fatal(err)
	}
	if !(over.Throughput < fit.Throughput) {
		t.Errorf("64 sequences on a pool that holds about 10: throughput %.3f, want below 8 sequences' %.3f", over.Throughput, fit.Throughput)
	}
}

func ftoa(f float64) string { return configspace.Num(f).String() }

// TestKVCacheReportedAtStart: an engine reports the KV cache it sized, (utilisation ×
// device − weights − profiled activations) / KV per token, whether it serves or refuses
// to start (vLLM's start-up error states it); it refuses exactly when the cache is below
// one MaxModelLen sequence, and an empty cache reads 0.
func TestKVCacheReportedAtStart(t *testing.T) {
	m := Chat13B()
	rng := rand.New(rand.NewPCG(3, 3))
	for _, c := range []struct {
		cfg   string
		fails bool
	}{
		{"gpu_memory_utilization=0.8,max_num_seqs=16,max_num_batched_tokens=2048,block_size=16,enforce_eager=true", false},
		{"gpu_memory_utilization=0.72,max_num_seqs=16,max_num_batched_tokens=16384,block_size=16,enforce_eager=true", true},
		{"gpu_memory_utilization=0.7,max_num_seqs=16,max_num_batched_tokens=16384,block_size=16,enforce_eager=true", true},
	} {
		cfg := mustConfig(t, c.cfg)
		want := (cfg.Float(ParamGPUMemUtil)*m.DeviceGB - m.WeightsGB - float64(cfg.Int(ParamMaxBatchTokens))*m.ActBytesPerToken/1e9) * 1e9 / m.KVBytesPerToken
		r, err := m.Evaluate(cfg, 2*time.Minute, rng)
		if err != nil {
			t.Fatal(err)
		}
		if r.StartFailed != c.fails || (c.fails && !r.OOM) {
			t.Errorf("%s: start failed %v (OOM %v), want %v", c.cfg, r.StartFailed, r.OOM, c.fails)
		}
		if math.Abs(r.KVTokens-math.Max(want, 0)) > 1e-6*math.Abs(want)+1e-9 {
			t.Errorf("%s: KV cache %.1f tokens, want %.1f", c.cfg, r.KVTokens, math.Max(want, 0))
		}
		if (r.KVTokens < m.MaxModelLen) != c.fails {
			t.Errorf("%s: KV cache %.0f tokens against max_model_len %.0f, yet start failed %v", c.cfg, r.KVTokens, m.MaxModelLen, r.StartFailed)
		}
	}
}
