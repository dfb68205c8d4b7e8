// Package cluster implements Trident's online workload categorisation (paper §5.2): every
// request's feature vector (e.g. input and output token lengths, video duration) is assigned
// to the nearest cluster centroid if it lies within a distance threshold, otherwise it opens
// a new cluster; centroids are running means; when the cluster limit is reached the two
// closest clusters merge; sample counts decay periodically and faded clusters are removed.
// Each cluster carries its tuning status and best configuration, and the clusterer reports
// regime shifts: a change of the dominant (recently most frequent) cluster.
//
// A sample prefers established clusters (Options.MatureCount) over young ones, which keeps
// clusters opened by tail samples or outliers from splitting an established cluster.
//
// Distances are Euclidean on standardised features: features flagged in Options.Log are
// log-transformed (log1p), and every feature is divided by a scale, either given or
// estimated as the pooled within-cluster standard deviation (robustly initialised from the
// first WarmUp samples, then updated from the residuals of assigned samples). The threshold
// is thus in units of a typical cluster's spread and does not depend on how many clusters
// the data hold or how far apart they are.
package cluster

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/trident-sched/trident/strategy/configspace"
)

// Status is a cluster's tuning state.
type Status int

// Tuning states.
const (
	Untuned Status = iota
	Tuning
	Tuned
)

// String names the status.
func (s Status) String() string {
	switch s {
	case Untuned:
		return "untuned"
	case Tuning:
		return "tuning"
	case Tuned:
		return "tuned"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Options configures a Clusterer. Zero fields take the defaults in brackets.
type Options struct {
	// Threshold τ is the distance, in standardised units, within which a sample joins the
	// nearest cluster [3.5].
	Threshold float64
	// MergeThreshold is the centroid distance below which two clusters merge after an
	// update, e.g. two clusters opened by the first samples of one new regime [Threshold/2].
	MergeThreshold float64
	// MaxClusters K bounds the number of clusters [8].
	MaxClusters int
	// DecayEvery is the number of samples between decays of the counts [50].
	DecayEvery int
	// Decay λ multiplies every count at each decay [0.8].
	Decay float64
	// MinCount removes clusters whose decayed count falls below it [1].
	MinCount float64
	// Log marks features to log-transform (log1p; values must be > −1).
	Log []bool
	// Scale fixes the per-feature scale (in transformed units); nil estimates it online.
	Scale []float64
	// CentroidMemory caps the sample count used in the centroid update
	// c ← c + (x − c)/n [200]: n is the number of samples assigned, at most CentroidMemory,
	// so a centroid is a running mean that keeps following slow drift. (The decayed count
	// is not used here: after a regime shift it becomes small, and the faded cluster's
	// centroid would slide towards the samples of a nearby new cluster and capture them.)
	CentroidMemory int
	// MatureCount is the number of samples after which a cluster is established [10].
	// A sample joins the nearest established cluster within the threshold if there is one,
	// and only otherwise the nearest young cluster, so that clusters opened by tail samples
	// do not split an established cluster; young clusters that stay small fade away.
	MatureCount int
	// WarmUp is the number of samples buffered to initialise the estimated scale [30].
	WarmUp int
	// ScaleRate is the weight of one residual in the running within-cluster variance
	// [0.01]; negative freezes the scale after the warm-up.
	ScaleRate float64
	// RecentHalfLife is the half-life, in samples, of the recent weights that decide the
	// dominant cluster [50].
	RecentHalfLife float64
	// ShiftShare is the share of the recent weight a cluster must exceed to become
	// dominant [0.6].
	ShiftShare float64
	// RangeFraction, if positive, floors every feature's scale at this fraction of the
	// range (in transformed units) the feature has spanned so far. Clustering windowed
	// feature means needs it: a regime whose windows average to a near constant (all
	// 720p clips) sets a tiny scale during the warm-up, and a later regime whose window
	// means do vary then scatters over young clusters for minutes before any becomes
	// dominant. With the floor, two workloads are told apart when they differ by about
	// Threshold·RangeFraction of the range seen, however tight the first one was.
	RangeFraction float64
}

func (o Options) withDefaults() Options {
	if o.Threshold == 0 {
		o.Threshold = 3.5
	}
	if o.MergeThreshold == 0 {
		o.MergeThreshold = o.Threshold / 2
	}
	if o.MaxClusters == 0 {
		o.MaxClusters = 8
	}
	if o.DecayEvery == 0 {
		o.DecayEvery = 50
	}
	if o.Decay == 0 {
		o.Decay = 0.8
	}
	if o.MinCount == 0 {
		o.MinCount = 1
	}
	if o.CentroidMemory == 0 {
		o.CentroidMemory = 200
	}
	if o.MatureCount == 0 {
		o.MatureCount = 10
	}
	if o.WarmUp == 0 {
		o.WarmUp = 30
	}
	if o.ScaleRate == 0 {
		o.ScaleRate = 0.01
	}
	if o.RecentHalfLife == 0 {
		o.RecentHalfLife = 50
	}
	if o.ShiftShare == 0 {
		o.ShiftShare = 0.6
	}
	return o
}

// Cluster is a snapshot of one workload cluster.
type Cluster struct {
	// ID identifies the cluster; IDs are never reused.
	ID int
	// Centroid is the mean feature vector, in the caller's (untransformed) units.
	Centroid []float64
	// Count is the decayed sample count.
	Count float64
	// Total is the number of samples ever assigned (merges add up).
	Total int
	// Recent is the exponentially weighted recent sample weight.
	Recent float64
	// Status is the tuning status.
	Status Status
	// Best is the best configuration found for the cluster (nil until tuned).
	Best configspace.Config
	// BestThroughput is the throughput measured with Best.
	BestThroughput float64
}

// Shift is a regime-shift event: the dominant cluster changed.
type Shift struct {
	// From is the previous dominant cluster (-1 if none).
	From int
	// To is the new dominant cluster.
	To int
}

// Event reports what one Observe did.
type Event struct {
	// Cluster is the ID of the cluster the sample joined (-1 while warming up).
	Cluster int
	// Created reports that the sample opened a new cluster.
	Created bool
	// WarmedUp holds, on the call that completes the warm-up, the cluster IDs of the
	// buffered warm-up samples in arrival order.
	WarmedUp []int
	// Merged lists clusters merged away during this call (into surviving clusters).
	Merged []int
	// Removed lists clusters removed by decay during this call.
	Removed []int
	// Shift is non-nil when the dominant cluster changed.
	Shift *Shift
}

// state is one live cluster. Centroids live in transformed (log) units.
type state struct {
	id       int
	mean     []float64
	count    float64
	total    int
	recent   float64
	recentAt int // sample index at which recent was last brought up to date
	status   Status
	best     configspace.Config
	bestThr  float64
}

// winsorConsistency is E[min(z², 4)] for a standard normal z.
const winsorConsistency = 0.9201

// Clusterer is the online clustering state. It is not safe for concurrent use.
type Clusterer struct {
	dim      int
	o        Options
	scale    []float64
	varEst   []float64 // pooled within-cluster variance (online scale)
	buf      [][]float64
	clusters []*state
	nextID   int
	n        int // samples observed
	alias    map[int]int
	dominant int
	recentF  float64   // per-sample decay of recent weights
	lo, hi   []float64 // per-feature range seen (transformed units), for RangeFraction
	floor    []float64 // per-feature scale floor from the range
}

// New returns a Clusterer of dim-dimensional feature vectors.
func New(dim int, o Options) (*Clusterer, error) {
	if dim < 1 {
		return nil, fmt.Errorf("cluster: dimension %d must be at least 1", dim)
	}
	o = o.withDefaults()
	switch {
	case !(o.Threshold > 0):
		return nil, fmt.Errorf("cluster: threshold %v must be positive", o.Threshold)
	case o.CentroidMemory < 1:
		return nil, fmt.Errorf("cluster: centroid memory %d must be at least 1", o.CentroidMemory)
	case o.MaxClusters < 2:
		return nil, fmt.Errorf("cluster: max clusters %d must be at least 2", o.MaxClusters)
	case !(o.Decay > 0 && o.Decay <= 1):
		return nil, fmt.Errorf("cluster: decay %v must be in (0,1]", o.Decay)
	case o.DecayEvery < 1:
		return nil, fmt.Errorf("cluster: decay period %d must be at least 1", o.DecayEvery)
	case o.Log != nil && len(o.Log) != dim:
		return nil, fmt.Errorf("cluster: %d log flags for %d features", len(o.Log), dim)
	case o.Scale != nil && len(o.Scale) != dim:
		return nil, fmt.Errorf("cluster: %d scales for %d features", len(o.Scale), dim)
	case !(o.ShiftShare > 0.5 && o.ShiftShare <= 1):
		return nil, fmt.Errorf("cluster: shift share %v must be in (0.5,1]", o.ShiftShare)
	case o.RangeFraction < 0 || o.RangeFraction >= 1 || math.IsNaN(o.RangeFraction):
		return nil, fmt.Errorf("cluster: range fraction %v must be in [0,1)", o.RangeFraction)
	}
	for d, s := range o.Scale {
		if !(s > 0) || math.IsInf(s, 0) {
			return nil, fmt.Errorf("cluster: scale of feature %d = %v must be positive and finite", d, s)
		}
	}
	c := &Clusterer{dim: dim, o: o, alias: map[int]int{}, dominant: -1,
		recentF: math.Exp2(-1 / o.RecentHalfLife)}
	if o.Scale != nil {
		c.scale = slices.Clone(o.Scale)
	}
	return c, nil
}

// transform applies the log flags and checks the sample.
func (c *Clusterer) transform(x []float64) ([]float64, error) {
	if len(x) != c.dim {
		return nil, fmt.Errorf("cluster: sample has %d features, want %d", len(x), c.dim)
	}
	t := make([]float64, c.dim)
	for d, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("cluster: feature %d = %v is not finite", d, v)
		}
		if c.o.Log != nil && c.o.Log[d] {
			if v <= -1 {
				return nil, fmt.Errorf("cluster: log feature %d = %v must be > -1", d, v)
			}
			v = math.Log1p(v)
		}
		t[d] = v
	}
	return t, nil
}

func (c *Clusterer) untransform(t []float64) []float64 {
	x := slices.Clone(t)
	for d := range x {
		if c.o.Log != nil && c.o.Log[d] {
			x[d] = math.Expm1(x[d])
		}
	}
	return x
}

// dist returns the standardised distance between transformed points.
func (c *Clusterer) dist(a, b []float64) float64 {
	var s float64
	for d := range a {
		r := (a[d] - b[d]) / c.scale[d]
		s += r * r
	}
	return math.Sqrt(s)
}

// Observe assigns one sample's feature vector to a cluster.
func (c *Clusterer) Observe(x []float64) (Event, error) {
	t, err := c.transform(x)
	if err != nil {
		return Event{}, err
	}
	c.trackRange(t)
	if c.scale == nil {
		c.buf = append(c.buf, t)
		if len(c.buf) < c.o.WarmUp {
			return Event{Cluster: -1}, nil
		}
		c.initScale()
		var ev Event
		buf := c.buf
		c.buf = nil
		for _, b := range buf {
			e := c.assign(b)
			ev.WarmedUp = append(ev.WarmedUp, e.Cluster)
			ev.Merged = append(ev.Merged, e.Merged...)
			ev.Removed = append(ev.Removed, e.Removed...)
			if e.Shift != nil {
				ev.Shift = e.Shift
			}
			ev.Cluster, ev.Created = e.Cluster, e.Created
		}
		return ev, nil
	}
	return c.assign(t), nil
}

// trackRange widens the per-feature range by t and raises the scale floors it implies.
func (c *Clusterer) trackRange(t []float64) {
	if c.o.RangeFraction <= 0 {
		return
	}
	if c.lo == nil {
		c.lo, c.hi, c.floor = slices.Clone(t), slices.Clone(t), make([]float64, c.dim)
		return
	}
	for d, v := range t {
		c.lo[d], c.hi[d] = math.Min(c.lo[d], v), math.Max(c.hi[d], v)
		c.floor[d] = c.o.RangeFraction * (c.hi[d] - c.lo[d])
		if c.scale != nil {
			c.scale[d] = c.floored(d, c.scale[d])
		}
	}
}

// floored returns scale s of feature d raised to the RangeFraction floor, if any.
func (c *Clusterer) floored(d int, s float64) float64 {
	if c.floor == nil {
		return s
	}
	return math.Max(s, c.floor[d])
}

// initScale sets the scale from the warm-up buffer: 1.4826·MAD per feature (the standard
// deviation for normal data, robust to a minority of samples from other clusters), with a
// floor against constant features.
func (c *Clusterer) initScale() {
	c.scale = make([]float64, c.dim)
	c.varEst = make([]float64, c.dim)
	col := make([]float64, len(c.buf))
	for d := 0; d < c.dim; d++ {
		for i, b := range c.buf {
			col[i] = b[d]
		}
		med := median(col)
		dev := make([]float64, len(col))
		for i, v := range col {
			dev[i] = math.Abs(v - med)
		}
		s := 1.4826 * median(dev)
		if !(s > 1e-9*math.Max(1, math.Abs(med))) {
			s = math.Max(1e-3*math.Abs(med), 1e-6)
		}
		s = c.floored(d, s)
		c.scale[d] = s
		c.varEst[d] = s * s
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// assign places transformed sample t and runs the maintenance steps.
func (c *Clusterer) assign(t []float64) Event {
	c.n++
	var ev Event
	best, bd := -1, math.Inf(1)
	for _, mature := range []bool{true, false} {
		for i, s := range c.clusters {
			if (s.total >= c.o.MatureCount) != mature {
				continue
			}
			if d := c.dist(t, s.mean); d < bd {
				best, bd = i, d
			}
		}
		if bd <= c.o.Threshold {
			break
		}
	}
	var cl *state
	if best >= 0 && bd <= c.o.Threshold {
		cl = c.clusters[best]
		if c.varEst != nil && c.o.ScaleRate > 0 {
			// Pooled within-cluster variance from the residual before the update,
			// winsorised at ±2σ (divided by E[min(z²,4)] = 0.920 for z ~ N(0,1), so the
			// estimate stays consistent for normal clusters) so that samples of a nearby
			// cluster cannot inflate the scale and pull in more of their kind.
			for d := range t {
				r := math.Max(-2*c.scale[d], math.Min(2*c.scale[d], t[d]-cl.mean[d]))
				c.varEst[d] += c.o.ScaleRate * (r*r/winsorConsistency - c.varEst[d])
				c.scale[d] = c.floored(d, math.Sqrt(c.varEst[d]))
			}
		}
		cl.count++
		cl.total++
		for d := range t {
			cl.mean[d] += (t[d] - cl.mean[d]) / float64(min(cl.total, c.o.CentroidMemory))
		}
	} else {
		if len(c.clusters) >= c.o.MaxClusters {
			ev.Merged = append(ev.Merged, c.mergeClosest())
		}
		cl = &state{id: c.nextID, mean: slices.Clone(t), count: 1, total: 1, recentAt: c.n}
		c.nextID++
		c.clusters = append(c.clusters, cl)
		ev.Created = true
	}
	c.bumpRecent(cl)
	ev.Cluster = cl.id
	// Merge clusters whose centroids have come within the merge threshold.
	for {
		j := -1
		for k, o := range c.clusters {
			if o != cl && c.dist(o.mean, cl.mean) < c.o.MergeThreshold {
				j = k
				break
			}
		}
		if j < 0 {
			break
		}
		other := c.clusters[j]
		keep, gone := cl, other
		if other.count > cl.count {
			keep, gone = other, cl
		}
		c.merge(keep, gone)
		ev.Merged = append(ev.Merged, gone.id)
		cl = keep
	}
	ev.Cluster = cl.id
	if c.n%c.o.DecayEvery == 0 {
		ev.Removed = c.decay()
	}
	ev.Shift = c.checkShift()
	return ev
}

// bumpRecent decays cl's recent weight to now and adds one sample.
func (c *Clusterer) bumpRecent(cl *state) {
	cl.recent = cl.recent*math.Pow(c.recentF, float64(c.n-cl.recentAt)) + 1
	cl.recentAt = c.n
}

func (c *Clusterer) recentNow(s *state) float64 {
	return s.recent * math.Pow(c.recentF, float64(c.n-s.recentAt))
}

// merge folds gone into keep (count-weighted centroid; tuned state kept if either has it).
func (c *Clusterer) merge(keep, gone *state) {
	w := keep.count + gone.count
	for d := range keep.mean {
		keep.mean[d] = (keep.mean[d]*keep.count + gone.mean[d]*gone.count) / w
	}
	keep.recent = c.recentNow(keep) + c.recentNow(gone)
	keep.recentAt = c.n
	keep.count = w
	keep.total += gone.total
	if keep.status != Tuned && gone.status == Tuned {
		keep.status, keep.best, keep.bestThr = gone.status, gone.best, gone.bestThr
	}
	c.alias[gone.id] = keep.id
	if c.dominant == gone.id {
		c.dominant = keep.id
	}
	c.clusters = slices.DeleteFunc(c.clusters, func(s *state) bool { return s == gone })
}

// mergeClosest merges the two closest clusters and returns the ID merged away.
func (c *Clusterer) mergeClosest() int {
	bi, bj, bd := 0, 1, math.Inf(1)
	for i := range c.clusters {
		for j := i + 1; j < len(c.clusters); j++ {
			if d := c.dist(c.clusters[i].mean, c.clusters[j].mean); d < bd {
				bi, bj, bd = i, j, d
			}
		}
	}
	keep, gone := c.clusters[bi], c.clusters[bj]
	if gone.count > keep.count {
		keep, gone = gone, keep
	}
	c.merge(keep, gone)
	return gone.id
}

// decay multiplies every count by λ and removes faded clusters (never the dominant one).
func (c *Clusterer) decay() []int {
	var removed []int
	c.clusters = slices.DeleteFunc(c.clusters, func(s *state) bool {
		s.count *= c.o.Decay
		if s.count < c.o.MinCount && s.id != c.dominant {
			removed = append(removed, s.id)
			return true
		}
		return false
	})
	return removed
}

// checkShift makes a cluster dominant once its share of the recent weight exceeds
// ShiftShare (or, with no dominant yet, the first cluster to lead).
func (c *Clusterer) checkShift() *Shift {
	var total float64
	var lead *state
	var leadW float64
	for _, s := range c.clusters {
		w := c.recentNow(s)
		total += w
		if w > leadW {
			lead, leadW = s, w
		}
	}
	if lead == nil || lead.id == c.dominant {
		return nil
	}
	if c.dominant >= 0 && leadW <= c.o.ShiftShare*total {
		return nil
	}
	sh := &Shift{From: c.dominant, To: lead.id}
	c.dominant = lead.id
	return sh
}

// Resolve follows merges from a cluster ID to the ID of the cluster that absorbed it
// (itself if it was never merged; removed clusters resolve to themselves).
func (c *Clusterer) Resolve(id int) int {
	for {
		next, ok := c.alias[id]
		if !ok {
			return id
		}
		id = next
	}
}

func (c *Clusterer) find(id int) *state {
	id = c.Resolve(id)
	for _, s := range c.clusters {
		if s.id == id {
			return s
		}
	}
	return nil
}

func (c *Clusterer) snapshot(s *state) Cluster {
	return Cluster{ID: s.id, Centroid: c.untransform(s.mean), Count: s.count, Total: s.total,
		Recent: c.recentNow(s), Status: s.status, Best: s.best.Clone(), BestThroughput: s.bestThr}
}

// Clusters returns snapshots of the live clusters, by ID.
func (c *Clusterer) Clusters() []Cluster {
	out := make([]Cluster, 0, len(c.clusters))
	for _, s := range c.clusters {
		out = append(out, c.snapshot(s))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Cluster returns the live cluster id (after following merges).
func (c *Clusterer) Cluster(id int) (Cluster, bool) {
	s := c.find(id)
	if s == nil {
		return Cluster{}, false
	}
	return c.snapshot(s), true
}

// Dominant returns the current dominant cluster.
func (c *Clusterer) Dominant() (Cluster, bool) {
	if c.dominant < 0 {
		return Cluster{}, false
	}
	return c.Cluster(c.dominant)
}

// Scale returns the current per-feature scale (nil during warm-up).
func (c *Clusterer) Scale() []float64 { return slices.Clone(c.scale) }

// ErrNoCluster is returned for an unknown or removed cluster ID.
var ErrNoCluster = errors.New("cluster: no such cluster")

// SetStatus sets the tuning status of cluster id.
func (c *Clusterer) SetStatus(id int, st Status) error {
	s := c.find(id)
	if s == nil {
		return fmt.Errorf("cluster: set status of %d: %w", id, ErrNoCluster)
	}
	s.status = st
	return nil
}

// SetBest records the tuned configuration of cluster id and marks it Tuned.
func (c *Clusterer) SetBest(id int, cfg configspace.Config, throughput float64) error {
	s := c.find(id)
	if s == nil {
		return fmt.Errorf("cluster: set best config of %d: %w", id, ErrNoCluster)
	}
	s.status, s.best, s.bestThr = Tuned, cfg.Clone(), throughput
	return nil
}
