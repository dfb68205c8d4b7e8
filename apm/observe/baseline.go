package observe

import (
	"fmt"
	"math"
)

// DS2 is the "true processing rate" baseline of DS2 (Kalavri et al., OSDI'18): records
// divided by useful time, averaged over the last Window intervals. It ignores workload
// features. For synchronous operators useful time is the wall time spent processing, so the
// ratio is the capacity; for asynchronous batched operators the per-record useful times
// overlap and the ratio falls far below capacity (paper §4.1, §8.4).
type DS2 struct {
	// Window is the number of recent intervals averaged (default 5 when zero).
	Window int
	rates  []float64
}

// Name returns "ds2".
func (d *DS2) Name() string { return "ds2" }

// Observe records the sample's useful-time rate; samples without useful time are rejected.
func (d *DS2) Observe(s Sample) (bool, string) {
	if err := s.validate(len(s.Features)); err != nil {
		return false, ReasonInvalid + ": " + err.Error()
	}
	if !(s.UsefulSeconds > 0) {
		return false, ReasonInvalid + ": no useful time"
	}
	w := d.Window
	if w <= 0 {
		w = 5
	}
	d.rates = append(d.rates, s.Records/s.UsefulSeconds)
	if len(d.rates) > w {
		d.rates = append(d.rates[:0], d.rates[len(d.rates)-w:]...)
	}
	return true, ""
}

// Estimate returns the mean useful-time rate of the window, whatever the features.
func (d *DS2) Estimate([]float64) (Estimate, error) {
	if len(d.rates) == 0 {
		return Estimate{}, ErrNoData
	}
	m, sd := meanStd(d.rates)
	return Estimate{Capacity: m, StdDev: sd, Samples: len(d.rates), Source: SourceRate}, nil
}

// Reset drops all samples.
func (d *DS2) Reset() { d.rates = d.rates[:0] }

// EMA is the exponential-moving-average baseline over every observed rate, without
// filtering and without workload features.
type EMA struct {
	e ema
}

// NewEMA returns an EMA estimator with weight alpha in (0, 1] for the newest rate.
func NewEMA(alpha float64) (*EMA, error) {
	if !(alpha > 0 && alpha <= 1) {
		return nil, fmt.Errorf("observe: EMA alpha %v outside (0, 1]", alpha)
	}
	return &EMA{e: ema{alpha: alpha}}, nil
}

// Name returns "ema".
func (m *EMA) Name() string { return "ema" }

// Observe folds the sample's rate into the average.
func (m *EMA) Observe(s Sample) (bool, string) {
	if err := s.validate(len(s.Features)); err != nil {
		return false, ReasonInvalid + ": " + err.Error()
	}
	m.e.add(s.Rate())
	return true, ""
}

// Estimate returns the current average, whatever the features.
func (m *EMA) Estimate([]float64) (Estimate, error) {
	if m.e.n == 0 {
		return Estimate{}, ErrNoData
	}
	return Estimate{Capacity: m.e.mean, StdDev: math.Sqrt(m.e.vr), Samples: m.e.n, Source: SourceEMA}, nil
}

// Reset drops all samples.
func (m *EMA) Reset() { m.e.reset() }

func meanStd(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)))
}
