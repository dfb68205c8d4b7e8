package plugin

import (
	"errors"
	"sync"
)

// CapacityEstimator turns consecutive scrapes of a group into a per-instance sustainable
// capacity estimate (records/s).
type CapacityEstimator interface {
	// Observe feeds the interval between two snapshots of job/group.
	Observe(job, group string, prev, cur snapshot)
	// Capacity returns the current per-instance estimate.
	Capacity(job, group string) (float64, error)
}

// ObservationEstimator adapts the scrape history to the observation layer.
type ObservationEstimator struct {
	mu  sync.Mutex
	ema map[string]float64
}

// NewObservationEstimator returns an empty estimator.
func NewObservationEstimator() *ObservationEstimator {
	return &ObservationEstimator{ema: map[string]float64{}}
}

// Observe derives each instance's processing rate over the interval and folds it in.
func (e *ObservationEstimator) Observe(job, group string, prev, cur snapshot) {
	dt := cur.time.Sub(prev.time).Seconds()
	if dt <= 0 {
		return
	}
	key := job + "/" + group
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, m := range cur.instances {
		old, ok := prev.instances[id]
		if !ok {
			continue
		}
		in := m.RecordsIn - old.RecordsIn
		useful := m.UsefulSeconds - old.UsefulSeconds
		if in <= 0 || useful <= 0 {
			continue
		}
		rate := in / useful
		if v, ok := e.ema[key]; ok {
			e.ema[key] = 0.7*v + 0.3*rate
		} else {
			e.ema[key] = rate
		}
	}
}

// Capacity returns the estimate or an error while there is none.
func (e *ObservationEstimator) Capacity(job, group string) (float64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.ema[job+"/"+group]
	if !ok {
		return 0, errors.New("no capacity estimate yet: the group has not processed records in two consecutive scrapes")
	}
	return v, nil
}
