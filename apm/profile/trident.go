package profile

import (
	"math"

	dto "github.com/prometheus/client_model/go"

	"github.com/trident-sched/trident/apm/opcontract"
)

// tridentProfile reads the operator metrics contract (apm/opcontract). Series of one name
// are summed (an instance exposes one series per name), except the workload features.
type tridentProfile struct{}

func (tridentProfile) Name() string { return Trident }

// tridentAny are the contract metrics of which a scrape must hold at least one: a page with
// none of them is not the operator contract (typically a server scraped without its
// trident_metrics_profile). Absent contract metrics otherwise read as 0, as they always
// have: an operator that exports only what its queries need (e.g. the queue length for
// backlog queries) keeps working.
var tridentAny = []string{
	opcontract.RecordsIn, opcontract.RecordsOut, opcontract.UsefulSeconds, opcontract.QueueLength,
	opcontract.AccelUtilization, opcontract.CPUUtilization,
}

// engineGauges returns the sets of gauges the trident profile reads as a serving engine's
// own scheduler counts (Metrics.EngineReported), the first present wins: the contract's,
// then a vLLM engine's served on the operator's page (an operator that hosts vLLM
// in-process and exposes its registry). swapped, when set, counts as waiting too, as in
// the vllm profile. A page with only one of running and waiting does not report the
// engine.
func engineGauges() []struct{ running, waiting, swapped string } {
	return []struct{ running, waiting, swapped string }{
		{opcontract.EngineRunning, opcontract.EngineWaiting, ""},
		{vllmRunning, vllmWaiting, vllmSwapped},
	}
}

func (tridentProfile) Map(fams map[string]*dto.MetricFamily, o Options) (Metrics, error) {
	r := newReader(fams, "", o)
	m := newMetrics()
	scalars := []struct {
		name string
		dst  *float64
	}{
		{opcontract.RecordsIn, &m.RecordsIn}, {opcontract.RecordsOut, &m.RecordsOut},
		{opcontract.BusySeconds, &m.BusySeconds}, {opcontract.UsefulSeconds, &m.UsefulSeconds},
		{opcontract.QueueLength, &m.QueueLength}, {opcontract.AccelUtilization, &m.AccelUtil},
		{opcontract.CPUUtilization, &m.CPUUtil}, {opcontract.DeviceMemPeak, &m.DeviceMemPeak},
		{opcontract.OOMRestarts, &m.OOMRestarts}, {opcontract.ConfigEpoch, &m.Epoch},
		{opcontract.QueueCapacity, &m.QueueCapacity}, {opcontract.OutputBlockedSeconds, &m.OutputBlocked},
	}
	for _, s := range scalars {
		*s.dst = r.sum(s.name, nil)
		if r.err != nil {
			return Metrics{}, r.err
		}
	}
	m.HasAccelerator = r.has(opcontract.AccelUtilization)
	m.HasOutputBlocked = r.has(opcontract.OutputBlockedSeconds)
	m.HasEpoch = r.has(opcontract.ConfigEpoch)
	for _, g := range engineGauges() {
		if r.has(g.running) && r.has(g.waiting) {
			m.EngineReported = true
			m.Running, m.Waiting = r.sum(g.running, nil), r.sum(g.waiting, nil)
			if g.swapped != "" {
				m.Waiting += r.sum(g.swapped, nil)
			}
			if r.err != nil {
				return Metrics{}, r.err
			}
			break
		}
	}
	if r.has(opcontract.PoolSize) && r.has(opcontract.PoolNeed) {
		if size, need := r.sum(opcontract.PoolSize, nil), r.sum(opcontract.PoolNeed, nil); need > 0 && size > 0 {
			m.Pool = size / need
		}
	}
	r.need(tridentAny...)
	if err := r.done(Trident, "the page has none of the operator contract's metrics "+
		"(docs/operator-contract.md); if the instances serve a server's own metrics, set the group meta "+
		opcontract.MetaMetricsProfile+" (vllm, triton)"); err != nil {
		return Metrics{}, err
	}
	for _, s := range r.series(opcontract.WorkloadFeature) {
		feat, _ := label(s, opcontract.LabelFeature)
		stat, _ := label(s, opcontract.LabelStat)
		v := value(s)
		if feat == "" || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if stat == "std" {
			m.FeatureStd[feat] = v
		} else {
			m.FeatureMean[feat] = v
		}
	}
	return m, nil
}
