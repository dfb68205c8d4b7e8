package plugin

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/trident-sched/trident/apm/opcontract"
)

// InstanceMetrics is one scrape of one operator instance's /metrics endpoint, reduced to
// the operator metrics contract (apm/opcontract).
type InstanceMetrics struct {
	AllocID       string
	Time          time.Time
	RecordsIn     float64
	RecordsOut    float64
	BusySeconds   float64
	UsefulSeconds float64
	QueueLength   float64
	QueueCapacity float64
	OutputBlocked float64 // seconds, counter
	// HasOutputBlocked reports that the instance exports the output-blocked counter: only
	// then does a full bounded queue tell saturation from backpressure.
	HasOutputBlocked bool
	AccelUtil        float64
	CPUUtil          float64
	DeviceMemPeak    float64
	OOMRestarts      float64
	Epoch            float64
	FeatureMean      map[string]float64
	FeatureStd       map[string]float64
	HasAccelerator   bool
}

// ScrapeInstance fetches and parses url (a Prometheus text endpoint).
func ScrapeInstance(ctx context.Context, hc *http.Client, url, allocID string) (InstanceMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return InstanceMetrics{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return InstanceMetrics{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return InstanceMetrics{}, fmt.Errorf("scrape %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	m, err := ParseMetrics(resp.Body)
	if err != nil {
		return InstanceMetrics{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	m.AllocID, m.Time = allocID, time.Now()
	return m, nil
}

// ParseMetrics reads Prometheus text format and extracts the contract's metrics. Series
// of one name are summed (an instance exposes one series per name except features).
// Non-finite values are rejected with an error naming the metric.
func ParseMetrics(r io.Reader) (InstanceMetrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return InstanceMetrics{}, fmt.Errorf("parse metrics: %w", err)
	}
	m := InstanceMetrics{FeatureMean: map[string]float64{}, FeatureStd: map[string]float64{}}
	scalars := map[string]*float64{
		opcontract.RecordsIn: &m.RecordsIn, opcontract.RecordsOut: &m.RecordsOut,
		opcontract.BusySeconds: &m.BusySeconds, opcontract.UsefulSeconds: &m.UsefulSeconds,
		opcontract.QueueLength: &m.QueueLength, opcontract.AccelUtilization: &m.AccelUtil,
		opcontract.CPUUtilization: &m.CPUUtil, opcontract.DeviceMemPeak: &m.DeviceMemPeak,
		opcontract.OOMRestarts: &m.OOMRestarts, opcontract.ConfigEpoch: &m.Epoch,
		opcontract.QueueCapacity: &m.QueueCapacity, opcontract.OutputBlockedSeconds: &m.OutputBlocked,
	}
	for name, dst := range scalars {
		f, ok := fams[name]
		if !ok {
			continue
		}
		if name == opcontract.AccelUtilization {
			m.HasAccelerator = true
		}
		if name == opcontract.OutputBlockedSeconds {
			m.HasOutputBlocked = true
		}
		for _, s := range f.GetMetric() {
			v := sampleValue(s)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return InstanceMetrics{}, fmt.Errorf("metric %s has non-finite value %v", name, v)
			}
			*dst += v
		}
	}
	if f, ok := fams[opcontract.WorkloadFeature]; ok {
		for _, s := range f.GetMetric() {
			var feat, stat string
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case opcontract.LabelFeature:
					feat = l.GetValue()
				case opcontract.LabelStat:
					stat = l.GetValue()
				}
			}
			v := sampleValue(s)
			if feat == "" || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			if stat == "std" {
				m.FeatureStd[feat] = v
			} else {
				m.FeatureMean[feat] = v
			}
		}
	}
	return m, nil
}

func sampleValue(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Untyped != nil:
		return s.Untyped.GetValue()
	}
	return math.NaN()
}
