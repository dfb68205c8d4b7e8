package plugin

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"

	"github.com/trident-sched/trident/apm/observe"
)

// CapacityEstimator turns consecutive scrapes of a group into a per-instance sustainable
// capacity estimate (input records/s).
type CapacityEstimator interface {
	// Declare tells the estimator the workload feature names of job/group (from the
	// group's trident_features meta); it is called before the first Observe.
	Declare(job, group string, features []string) error
	// Observe feeds the interval between two snapshots of job/group.
	Observe(job, group string, prev, cur snapshot)
	// Capacity returns the current per-instance estimate at the group's latest features.
	Capacity(job, group string) (float64, error)
	// Invalidate resets job/group after a committed configuration change.
	Invalidate(job, group string)
}

// ObservationEstimator feeds the observation layer (apm/observe): every instance's scrape
// interval becomes one sample (input records, busy/useful time, queue, utilisation,
// workload feature means, config epoch) of its operator, and capacity is the two-stage
// filtered GP estimate (EMA during cold start) at the group's current features.
type ObservationEstimator struct {
	layer *observe.Layer

	mu       sync.Mutex
	features map[string][]string  // key -> declared feature names
	latest   map[string][]float64 // key -> feature means of the latest snapshot
	stats    map[string]*Counters // key -> accepted/rejected counts by reason
}

// Counters counts the samples an operator's filter accepted and rejected (by reason).
type Counters struct {
	Accepted int
	Rejected map[string]int
}

// NewObservationEstimator returns an estimator over a new observation layer.
func NewObservationEstimator(log *slog.Logger) *ObservationEstimator {
	return &ObservationEstimator{
		layer:    observe.NewLayer(log),
		features: map[string][]string{},
		latest:   map[string][]float64{},
		stats:    map[string]*Counters{},
	}
}

func key(job, group string) string { return job + "/" + group }

// Declare registers job/group with the observation layer (idempotent).
func (e *ObservationEstimator) Declare(job, group string, features []string) error {
	k := key(job, group)
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.features[k]; ok {
		return nil
	}
	if len(features) == 0 {
		// An operator without declared features still gets a (constant-input) model.
		features = []string{"const"}
	}
	if err := e.layer.Register(k, observe.OperatorSpec{Features: features}); err != nil {
		return err
	}
	e.features[k] = features
	e.stats[k] = &Counters{Rejected: map[string]int{}}
	return nil
}

// featureVector picks the declared features' means from an instance's metrics; a feature
// the instance does not report is 0 ("const" is always 1).
func featureVector(names []string, m InstanceMetrics) []float64 {
	v := make([]float64, len(names))
	for i, n := range names {
		if n == "const" {
			v[i] = 1
			continue
		}
		if x, ok := m.FeatureMean[n]; ok {
			v[i] = x
		} else if base, ok := strings.CutSuffix(n, "_std"); ok {
			v[i] = m.FeatureStd[base]
		} else if base, ok := strings.CutSuffix(n, "_mean"); ok {
			v[i] = m.FeatureMean[base]
		}
	}
	return v
}

// Observe offers one sample per instance present in both snapshots.
func (e *ObservationEstimator) Observe(job, group string, prev, cur snapshot) {
	k := key(job, group)
	e.mu.Lock()
	names, ok := e.features[k]
	st := e.stats[k]
	e.mu.Unlock()
	if !ok {
		return
	}
	dt := cur.time.Sub(prev.time)
	if dt <= 0 {
		return
	}
	mean := make([]float64, len(names))
	count := 0
	for id, m := range cur.instances {
		fv := featureVector(names, m)
		for i := range mean {
			mean[i] += fv[i]
		}
		count++
		old, ok := prev.instances[id]
		if !ok || m.RecordsIn < old.RecordsIn { // new or restarted instance: no interval
			continue
		}
		util := m.CPUUtil
		if m.HasAccelerator {
			util = m.AccelUtil
		}
		s := observe.Sample{
			Time:          cur.time,
			Interval:      dt,
			Records:       m.RecordsIn - old.RecordsIn,
			BusySeconds:   math.Max(0, m.BusySeconds-old.BusySeconds),
			UsefulSeconds: math.Max(0, m.UsefulSeconds-old.UsefulSeconds),
			QueueStart:    old.QueueLength,
			QueueEnd:      m.QueueLength,
			Utilization:   util,
			Features:      fv,
			Epoch:         uint64(math.Max(0, m.Epoch)),
		}
		accepted, reason := e.layer.Observe(k, s)
		e.mu.Lock()
		if accepted {
			st.Accepted++
		} else {
			st.Rejected[reason]++
		}
		e.mu.Unlock()
	}
	if count > 0 {
		for i := range mean {
			mean[i] /= float64(count)
		}
		e.mu.Lock()
		e.latest[k] = mean
		e.mu.Unlock()
	}
}

// Capacity returns the layer's estimate at the latest features.
func (e *ObservationEstimator) Capacity(job, group string) (float64, error) {
	k := key(job, group)
	e.mu.Lock()
	fv, ok := e.latest[k]
	e.mu.Unlock()
	if !ok {
		return 0, errors.New("no capacity estimate yet: the group has not been scraped twice")
	}
	est, err := e.layer.Capacity(k, fv)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(est.Capacity) || est.Capacity <= 0 {
		return 0, fmt.Errorf("no capacity estimate yet (%d accepted samples)", est.Samples)
	}
	return est.Capacity, nil
}

// Invalidate resets the operator's samples after a committed config change.
func (e *ObservationEstimator) Invalidate(job, group string) { e.layer.Invalidate(key(job, group)) }

// Stats returns a copy of the filter counters of job/group.
func (e *ObservationEstimator) Stats(job, group string) Counters {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := Counters{Rejected: map[string]int{}}
	if st, ok := e.stats[key(job, group)]; ok {
		c.Accepted = st.Accepted
		for r, n := range st.Rejected {
			c.Rejected[r] = n
		}
	}
	return c
}
