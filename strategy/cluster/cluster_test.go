package cluster

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/trident-sched/trident/strategy/configspace"
)

// blob draws n log-normal samples around median m with shape s per feature.
func blob(rng *rand.Rand, n int, m []float64, s float64) [][]float64 {
	out := make([][]float64, n)
	for i := range out {
		out[i] = make([]float64, len(m))
		for d := range m {
			out[i][d] = m[d] * math.Exp(s*rng.NormFloat64())
		}
	}
	return out
}

func observeAll(t *testing.T, c *Clusterer, xs [][]float64) []Event {
	t.Helper()
	var evs []Event
	for _, x := range xs {
		ev, err := c.Observe(x)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	return evs
}

func TestRegimeShiftDetected(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c, err := New(2, Options{Log: []bool{true, true}})
	if err != nil {
		t.Fatal(err)
	}
	a := blob(rng, 400, []float64{2000, 900}, 0.15)
	b := blob(rng, 400, []float64{600, 120}, 0.15)
	evs := observeAll(t, c, append(a, b...))
	var shifts []int
	for i, ev := range evs {
		if ev.Shift != nil && ev.Shift.From >= 0 {
			shifts = append(shifts, i)
		}
	}
	// One shift. With recent-weight half-life H = 50 and share 0.6, the new cluster's share
	// after k samples is about 1 − 2^(−k/50), which passes 0.6 at k ≈ 66; allow 50..90.
	if len(shifts) != 1 || shifts[0] < 400+50 || shifts[0] > 400+90 {
		t.Fatalf("shift events at %v, want one at 450..490", shifts)
	}
	dom, ok := c.Dominant()
	if !ok || math.Abs(dom.Centroid[0]-600)/600 > 0.05 || math.Abs(dom.Centroid[1]-120)/120 > 0.05 {
		t.Fatalf("dominant %+v, want centroid within 5%% of (600,120)", dom)
	}
	// Both regimes are live clusters holding most of their samples.
	big := 0
	for _, cl := range c.Clusters() {
		if cl.Total >= 300 {
			big++
		}
	}
	if big != 2 {
		t.Fatalf("clusters %+v: want 2 with >= 300 samples", c.Clusters())
	}
	// The estimated scale approaches the true log-spread 0.15 (pooled, winsorised):
	// allow ±25% for the finite sample and the outlier-free winsorising bias.
	for d, s := range c.Scale() {
		if math.Abs(s-0.15)/0.15 > 0.25 {
			t.Errorf("scale of feature %d = %.3f, want 0.15 ± 25%%", d, s)
		}
	}
}

func TestWarmUpReplaysBufferedSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c, err := New(1, Options{WarmUp: 20})
	if err != nil {
		t.Fatal(err)
	}
	evs := observeAll(t, c, blob(rng, 20, []float64{100}, 0.1))
	for _, ev := range evs[:19] {
		if ev.Cluster != -1 {
			t.Fatalf("cluster %d during warm-up, want -1", ev.Cluster)
		}
	}
	if len(evs[19].WarmedUp) != 20 {
		t.Fatalf("warm-up completion reported %d labels, want 20", len(evs[19].WarmedUp))
	}
}

func TestMaxClustersMergesClosestPair(t *testing.T) {
	// Fixed scale 1 and threshold 1: points 0, 10, 11.5, 30 open four clusters; with K = 3 the
	// fourth forces the closest pair (10 and 11.5) to merge into their weighted mean.
	c, err := New(1, Options{Scale: []float64{1}, Threshold: 1, MaxClusters: 3})
	if err != nil {
		t.Fatal(err)
	}
	evs := observeAll(t, c, [][]float64{{0}, {10}, {10}, {11.5}, {30}})
	if len(evs[4].Merged) != 1 || evs[4].Merged[0] != 2 {
		t.Fatalf("merge event %+v, want cluster 2 merged away", evs[4])
	}
	cls := c.Clusters()
	if len(cls) != 3 {
		t.Fatalf("%d clusters, want 3", len(cls))
	}
	got, _ := c.Cluster(2)
	if got.ID != 1 || math.Abs(got.Centroid[0]-(10*2+11.5)/3) > 1e-12 || got.Total != 3 {
		t.Fatalf("merged cluster %+v, want id 1 at 10.5 with 3 samples", got)
	}
	if c.Resolve(2) != 1 {
		t.Fatalf("Resolve(2) = %d, want 1", c.Resolve(2))
	}
}

func TestDecayRemovesFadedClusters(t *testing.T) {
	// An outlier opens a cluster of count 1; the next decay (λ = 0.8) drops it below the
	// minimum count 1, so it is removed at the first decay boundary after it appears.
	c, err := New(1, Options{Scale: []float64{1}, Threshold: 2, DecayEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	xs := [][]float64{}
	for i := range 25 {
		xs = append(xs, []float64{float64(i%3) * 0.1})
	}
	xs[12] = []float64{50}
	evs := observeAll(t, c, xs)
	if !evs[12].Created {
		t.Fatal("outlier did not open a cluster")
	}
	out := evs[12].Cluster
	if len(evs[19].Removed) != 1 || evs[19].Removed[0] != out {
		t.Fatalf("removal at sample 20: %+v, want cluster %d", evs[19].Removed, out)
	}
	if _, ok := c.Cluster(out); ok {
		t.Fatal("removed cluster still live")
	}
	// The main cluster's count decays too: 10 samples, ×0.8, +9 (the outlier went
	// elsewhere), ×0.8, +5.
	main, _ := c.Cluster(0)
	if want := (10*0.8+9)*0.8 + 5; math.Abs(main.Count-want) > 1e-9 {
		t.Fatalf("main count %v, want %v", main.Count, want)
	}
}

func TestTuningStateFollowsMerges(t *testing.T) {
	c, err := New(1, Options{Scale: []float64{1}, Threshold: 1, MaxClusters: 2})
	if err != nil {
		t.Fatal(err)
	}
	observeAll(t, c, [][]float64{{0}, {5}})
	best := configspace.Config{"max_num_seqs": configspace.Num(128)}
	if err := c.SetBest(1, best, 3.5); err != nil {
		t.Fatal(err)
	}
	if err := c.SetStatus(0, Tuning); err != nil {
		t.Fatal(err)
	}
	observeAll(t, c, [][]float64{{20}}) // K = 2: clusters 0 and 1 merge
	got, ok := c.Cluster(1)
	if !ok || got.Status != Tuned || got.Best.String() != "max_num_seqs=128" || got.BestThroughput != 3.5 {
		t.Fatalf("after merge: %+v, want the tuned state kept", got)
	}
	if err := c.SetStatus(99, Tuned); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("SetStatus(99) = %v, want ErrNoCluster", err)
	}
}

func TestBadInput(t *testing.T) {
	c, _ := New(2, Options{Log: []bool{true, false}})
	for _, x := range [][]float64{{1}, {math.NaN(), 1}, {-2, 1}} {
		if _, err := c.Observe(x); err == nil {
			t.Errorf("Observe(%v) succeeded", x)
		}
	}
	if _, err := New(2, Options{Scale: []float64{1, 0}}); err == nil {
		t.Error("zero scale accepted")
	}
}

func TestPurityARI(t *testing.T) {
	truth := []int{0, 0, 0, 1, 1, 1, 2, 2, 2}
	perm := []int{5, 5, 5, 3, 3, 3, 9, 9, 9}
	if p, _ := Purity(truth, perm); p != 1 {
		t.Fatalf("purity of a relabelling = %v", p)
	}
	if a, _ := ARI(truth, perm); math.Abs(a-1) > 1e-12 {
		t.Fatalf("ARI of a relabelling = %v", a)
	}
	pred := []int{0, 0, 1, 1, 1, 2, 2, 2, 2}
	// Reference: sklearn.metrics.adjusted_rand_score(truth, pred) = 0.35714285714285715.
	if a, _ := ARI(truth, pred); math.Abs(a-0.35714285714285715) > 1e-12 {
		t.Fatalf("ARI = %v, want 0.357142857 (scikit-learn)", a)
	}
	if p, _ := Purity(truth, pred); math.Abs(p-7.0/9) > 1e-12 {
		t.Fatalf("purity = %v, want 7/9", p)
	}
	if _, err := ARI([]int{1}, []int{1, 2}); err == nil {
		t.Fatal("length mismatch accepted")
	}
}

// Windowed feature means of a tight regime (every clip 720p: the height mean is constant)
// followed by a wide one (long videos of 1080p to 4K) used to scatter the second regime
// over young clusters: the warm-up scale of the height is ~0.7 px. RangeFraction floors
// the scale at a fraction of the range seen, so the shift is detected within a few
// half-lives and the wide regime stays one cluster. (Each sample is a window's mean.)
func TestRangeFractionDetectsAWiderRegime(t *testing.T) {
	run := func(frac float64) (firstShift, shifts int) {
		rng := rand.New(rand.NewPCG(5, 6))
		c, err := New(2, Options{Threshold: 4, RecentHalfLife: 120, WarmUp: 60, RangeFraction: frac})
		if err != nil {
			t.Fatal(err)
		}
		firstShift = -1
		for i := range 1200 {
			x := []float64{20 + 0.3*rng.NormFloat64(), 720}
			if i >= 600 {
				// A window's mean over four long videos.
				x = []float64{0, 0}
				for range 4 {
					x[0] += (300 + 300*rng.Float64()) / 4
					x[1] += 1080 * math.Exp2(rng.Float64()) / 4
				}
			}
			ev, err := c.Observe(x)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Shift != nil && ev.Shift.From >= 0 {
				shifts++
				if firstShift < 0 {
					firstShift = i - 600
				}
			}
		}
		return firstShift, shifts
	}
	// RecentHalfLife 120: a new cluster needs 0.6 of the recent weight, about 160 samples
	// (measured: 155 with the floor; none within 600 without it).
	if first, n := run(0.1); first < 0 || first > 250 || n != 1 {
		t.Fatalf("with RangeFraction 0.1: shift after %d samples, %d shifts (want one within 250)", first, n)
	}
	if first, n := run(0); first >= 0 && first <= 250 && n == 1 {
		t.Fatalf("without the floor the shift came after %d samples: the scenario no longer shows the defect", first)
	}
	if _, err := New(1, Options{RangeFraction: 1}); err == nil {
		t.Fatal("range fraction 1 accepted")
	}
}
