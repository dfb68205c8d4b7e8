package adaptbench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"strings"

	"github.com/trident-sched/trident/strategy/cluster"
)

// Regime is one segment of a sequential workload stream.
type Regime struct {
	// Name labels the workload type.
	Name string
	// Samples is the number of requests of the segment.
	Samples int
	// Median and Sigma are the log-normal parameters of every feature.
	Median, Sigma []float64
}

// Stream is a sequence of regimes of one pipeline's workload features.
type Stream struct {
	Name     string
	Features []string
	// Log marks features clustered on a log scale.
	Log     []bool
	Regimes []Regime
	// Outliers is the fraction of requests whose features are drawn log-uniformly over the
	// stream's range (they keep their regime's label).
	Outliers float64
}

// Types returns the number of distinct regime names (the true cluster count).
func (s Stream) Types() int {
	seen := map[string]bool{}
	for _, r := range s.Regimes {
		seen[r.Name] = true
	}
	return len(seen)
}

// DefaultStreams returns the two regime-shift streams of paper §8.5: the PDF pipeline's
// OCR requests (input and output tokens) of three document types processed one after the
// other, and the video pipeline's captioning requests (duration, caption tokens) of
// short-form clips, long-form videos, and short-form clips again.
func DefaultStreams() []Stream {
	return []Stream{
		{
			Name: "PDF", Features: []string{"input_tokens", "output_tokens"}, Log: []bool{true, true},
			Outliers: 0.01,
			Regimes: []Regime{
				{Name: "academic", Samples: 600, Median: []float64{2200, 1000}, Sigma: []float64{0.12, 0.25}},
				{Name: "slides", Samples: 600, Median: []float64{900, 150}, Sigma: []float64{0.12, 0.3}},
				{Name: "forms", Samples: 600, Median: []float64{1500, 400}, Sigma: []float64{0.12, 0.25}},
			},
		},
		{
			Name: "Video", Features: []string{"duration_s", "caption_tokens"}, Log: []bool{true, true},
			Outliers: 0.01,
			Regimes: []Regime{
				{Name: "short-form", Samples: 600, Median: []float64{35, 160}, Sigma: []float64{0.5, 0.25}},
				{Name: "long-form", Samples: 600, Median: []float64{1200, 330}, Sigma: []float64{0.5, 0.25}},
				{Name: "short-form", Samples: 300, Median: []float64{35, 160}, Sigma: []float64{0.5, 0.25}},
			},
		},
	}
}

// Generate draws the stream's samples and their true labels (index of the regime name).
func (s Stream) Generate(rng *rand.Rand) (xs [][]float64, labels []int) {
	ids := map[string]int{}
	lo, hi := make([]float64, len(s.Features)), make([]float64, len(s.Features))
	for d := range lo {
		lo[d], hi[d] = math.Inf(1), math.Inf(-1)
		for _, r := range s.Regimes {
			lo[d] = math.Min(lo[d], math.Log(r.Median[d])-3*r.Sigma[d])
			hi[d] = math.Max(hi[d], math.Log(r.Median[d])+3*r.Sigma[d])
		}
	}
	for _, r := range s.Regimes {
		id, ok := ids[r.Name]
		if !ok {
			id = len(ids)
			ids[r.Name] = id
		}
		for range r.Samples {
			x := make([]float64, len(s.Features))
			outlier := rng.Float64() < s.Outliers
			for d := range x {
				if outlier {
					x[d] = math.Round(math.Exp(lo[d] + rng.Float64()*(hi[d]-lo[d])))
				} else {
					x[d] = math.Round(r.Median[d] * math.Exp(r.Sigma[d]*rng.NormFloat64()))
				}
			}
			xs = append(xs, x)
			labels = append(labels, id)
		}
	}
	return xs, labels
}

// ClusterScore is one method's clustering of one stream.
type ClusterScore struct {
	Method string
	// Clusters is the number of clusters holding at least 2% of the samples.
	Clusters int
	// Transient is the number of further (small) clusters, e.g. opened by outliers.
	Transient int
	Purity    float64
	ARI       float64
	// Shifts is the number of regime-shift events after the first dominant cluster
	// appeared (online method only).
	Shifts int
}

// StreamOutcome is every method's result on one stream.
type StreamOutcome struct {
	Stream Stream
	// TrueClusters is the number of workload types.
	TrueClusters int
	Scores       []ClusterScore
}

// Score returns the score of method name.
func (o StreamOutcome) Score(name string) (ClusterScore, bool) {
	for _, s := range o.Scores {
		if s.Method == name {
			return s, true
		}
	}
	return ClusterScore{}, false
}

// ClusterConfig configures the clustering benchmark.
type ClusterConfig struct {
	// Seed seeds the stream generator.
	Seed uint64
	// Online configures the online clusterer (Log is taken from the stream).
	Online cluster.Options
	// Python is the interpreter running the offline baselines; empty skips them.
	Python string
	// DBSCANEps lists the eps values tried for DBSCAN on standardised features; the one
	// with the best ARI against the true labels is reported (an upper bound for DBSCAN).
	DBSCANEps []float64
	// DBSCANMinSamples is DBSCAN's min_samples.
	DBSCANMinSamples int
}

// DefaultClusterConfig returns the benchmark's configuration.
func DefaultClusterConfig() ClusterConfig {
	return ClusterConfig{Seed: 7, Python: "/usr/bin/python3", DBSCANMinSamples: 10,
		DBSCANEps: []float64{0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5}}
}

// OnlineLabels runs the online clusterer over xs and returns each sample's cluster (as
// assigned on arrival, then followed through later merges) and the number of shift events.
func OnlineLabels(xs [][]float64, logFlags []bool, o cluster.Options) ([]int, int, error) {
	o.Log = logFlags
	c, err := cluster.New(len(xs[0]), o)
	if err != nil {
		return nil, 0, err
	}
	labels := make([]int, 0, len(xs))
	shifts := 0
	for i, x := range xs {
		ev, err := c.Observe(x)
		if err != nil {
			return nil, 0, fmt.Errorf("adaptbench: sample %d: %w", i, err)
		}
		if ev.WarmedUp != nil {
			labels = append(labels, ev.WarmedUp...)
		} else if ev.Cluster >= 0 {
			labels = append(labels, ev.Cluster)
		}
		if ev.Shift != nil && ev.Shift.From >= 0 {
			shifts++
		}
	}
	for i, l := range labels {
		labels[i] = c.Resolve(l)
	}
	if len(labels) != len(xs) {
		return nil, 0, fmt.Errorf("adaptbench: %d samples but %d labels (stream shorter than the warm-up?)", len(xs), len(labels))
	}
	return labels, shifts, nil
}

// score computes a ClusterScore; label -1 (DBSCAN noise) counts as one extra cluster
// of its own for purity and ARI but not towards Clusters.
func score(method string, truth, pred []int) (ClusterScore, error) {
	p, err := cluster.Purity(truth, pred)
	if err != nil {
		return ClusterScore{}, err
	}
	a, err := cluster.ARI(truth, pred)
	if err != nil {
		return ClusterScore{}, err
	}
	size := map[int]int{}
	for _, l := range pred {
		size[l]++
	}
	s := ClusterScore{Method: method, Purity: p, ARI: a}
	for l, n := range size {
		switch {
		case l < 0:
		case float64(n) >= 0.02*float64(len(pred)):
			s.Clusters++
		default:
			s.Transient++
		}
	}
	return s, nil
}

//go:embed testdata/offline_cluster.py
var offlineScript string

type offlineStream struct {
	Name string      `json:"name"`
	K    int         `json:"k"`
	Log  []bool      `json:"log"`
	X    [][]float64 `json:"x"`
	Y    []int       `json:"y"`
}

type offlineResult struct {
	Name      string  `json:"name"`
	KMeans    []int   `json:"kmeans"`
	DBSCAN    []int   `json:"dbscan"`
	DBSCANEps float64 `json:"dbscan_eps"`
}

// ProbeOffline reports whether python can run the offline K-means/DBSCAN baselines: it
// must start and import numpy and scikit-learn. The error says what is missing, e.g.
// "/usr/bin/python3: ModuleNotFoundError: No module named 'sklearn'" or the exec error of
// an interpreter that does not exist.
func ProbeOffline(ctx context.Context, python string) error {
	if python == "" {
		return errors.New("no python interpreter configured")
	}
	cmd := exec.CommandContext(ctx, python, "-c", "import numpy, sklearn")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
			return fmt.Errorf("%s: %s", python, last)
		}
		return err
	}
	return nil
}

// runOffline runs K-means and DBSCAN (scikit-learn) on the streams.
func runOffline(ctx context.Context, cfg ClusterConfig, streams []offlineStream) ([]offlineResult, string, error) {
	req, err := json.Marshal(map[string]any{"streams": streams, "eps": cfg.DBSCANEps, "min_samples": cfg.DBSCANMinSamples})
	if err != nil {
		return nil, "", fmt.Errorf("adaptbench: encode offline request: %w", err)
	}
	cmd := exec.CommandContext(ctx, cfg.Python, "-c", offlineScript)
	cmd.Stdin = bytes.NewReader(req)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("adaptbench: offline baselines (%s with scikit-learn): %w: %s", cfg.Python, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var resp struct {
		Sklearn string          `json:"sklearn"`
		Results []offlineResult `json:"results"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return nil, "", fmt.Errorf("adaptbench: decode offline baselines' output: %w", err)
	}
	return resp.Results, resp.Sklearn, nil
}

// RunClustering generates every stream, clusters it online and, when cfg.Python is set,
// offline with K-means and DBSCAN, and scores all against the true regime labels. It
// returns the scikit-learn version used ("" when skipped).
func RunClustering(ctx context.Context, cfg ClusterConfig, streams []Stream) ([]StreamOutcome, string, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x636c7573))
	var outs []StreamOutcome
	var off []offlineStream
	var truths [][]int
	for _, s := range streams {
		xs, truth := s.Generate(rng)
		labels, shifts, err := OnlineLabels(xs, s.Log, cfg.Online)
		if err != nil {
			return nil, "", fmt.Errorf("adaptbench: online clustering of %s: %w", s.Name, err)
		}
		sc, err := score("Trident (online)", truth, labels)
		if err != nil {
			return nil, "", err
		}
		sc.Shifts = shifts
		outs = append(outs, StreamOutcome{Stream: s, TrueClusters: s.Types(), Scores: []ClusterScore{sc}})
		off = append(off, offlineStream{Name: s.Name, K: s.Types(), Log: s.Log, X: xs, Y: truth})
		truths = append(truths, truth)
	}
	if cfg.Python == "" {
		return outs, "", nil
	}
	res, version, err := runOffline(ctx, cfg, off)
	if err != nil {
		return nil, "", err
	}
	if len(res) != len(outs) {
		return nil, "", fmt.Errorf("adaptbench: offline baselines returned %d streams, want %d", len(res), len(outs))
	}
	for i, r := range res {
		for _, m := range []struct {
			name   string
			labels []int
		}{{"K-means (offline)", r.KMeans}, {fmt.Sprintf("DBSCAN (offline, eps %g)", r.DBSCANEps), r.DBSCAN}} {
			sc, err := score(m.name, truths[i], m.labels)
			if err != nil {
				return nil, "", fmt.Errorf("adaptbench: %s on %s: %w", m.name, r.Name, err)
			}
			outs[i].Scores = append(outs[i].Scores, sc)
		}
	}
	return outs, version, nil
}
