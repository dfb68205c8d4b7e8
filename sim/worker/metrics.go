package worker

import (
	"math"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/trident-sched/trident/apm/opcontract"
)

// featureWindow is how many recent records the workload feature mean/std cover.
const featureWindow = 256

// Metrics is one operator instance's implementation of the operator metrics contract
// (apm/opcontract).
type Metrics struct {
	Registry *prometheus.Registry

	epoch      string
	recordsIn  *prometheus.CounterVec
	recordsOut *prometheus.CounterVec
	busy       prometheus.Counter
	useful     prometheus.Counter
	queue      prometheus.Gauge
	accelUtil  prometheus.Gauge
	cpuUtil    prometheus.Gauge
	memPeak    prometheus.Gauge
	ooms       prometheus.Counter
	feature    *prometheus.GaugeVec
	cfgEpoch   prometheus.Gauge
	blocked    prometheus.Counter
	queueCap   prometheus.Gauge // registered by the first QueueCapacity call
	capOnce    sync.Once

	mu       sync.Mutex
	peakMiB  float64
	features map[string]*ring
}

// NewMetrics registers the contract's series for one operator instance running config epoch.
func NewMetrics(pipeline, operator string, epoch int64, features []string) *Metrics {
	cl := prometheus.Labels{opcontract.LabelPipeline: pipeline, opcontract.LabelOperator: operator}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		epoch:    strconv.FormatInt(epoch, 10),
		recordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: opcontract.RecordsIn,
			Help: "Records consumed.", ConstLabels: cl}, []string{opcontract.LabelEpoch}),
		recordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: opcontract.RecordsOut,
			Help: "Records produced.", ConstLabels: cl}, []string{opcontract.LabelEpoch}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{Name: opcontract.BusySeconds,
			Help: "Wall time with at least one record in service.", ConstLabels: cl}),
		useful: prometheus.NewCounter(prometheus.CounterOpts{Name: opcontract.UsefulSeconds,
			Help: "Sum of per-record service times (overlapping requests counted each; a CPU stage with k threads counts 1/k of each, i.e. instance-seconds).", ConstLabels: cl}),
		queue: prometheus.NewGauge(prometheus.GaugeOpts{Name: opcontract.QueueLength,
			Help: "This instance's share of the records waiting in the stage's input queue (undelivered backlog, plus the records in service when the queue is bounded, / live instances).", ConstLabels: cl}),
		accelUtil: prometheus.NewGauge(prometheus.GaugeOpts{Name: opcontract.AccelUtilization,
			Help: "Accelerator busy fraction over the last second.", ConstLabels: cl}),
		cpuUtil: prometheus.NewGauge(prometheus.GaugeOpts{Name: opcontract.CPUUtilization,
			Help: "CPU busy fraction of the instance's cores over the last second.", ConstLabels: cl}),
		memPeak: prometheus.NewGauge(prometheus.GaugeOpts{Name: opcontract.DeviceMemPeak,
			Help: "Peak accelerator memory since start.", ConstLabels: cl}),
		ooms: prometheus.NewCounter(prometheus.CounterOpts{Name: opcontract.OOMRestarts,
			Help: "Accelerator OOM exits of this allocation.", ConstLabels: cl}),
		feature: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: opcontract.WorkloadFeature,
			Help: "Workload feature statistics over the last records.", ConstLabels: cl},
			[]string{opcontract.LabelFeature, opcontract.LabelStat}),
		cfgEpoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: opcontract.ConfigEpoch,
			Help: "Epoch of the config this instance runs.", ConstLabels: cl}),
		blocked: prometheus.NewCounter(prometheus.CounterOpts{Name: opcontract.OutputBlockedSeconds,
			Help: "Wall time with at least one completion waiting to publish because a downstream stage's bounded input queue was full.", ConstLabels: cl}),
		queueCap: prometheus.NewGauge(prometheus.GaugeOpts{Name: opcontract.QueueCapacity,
			Help: "This instance's share of the bound of the stage's input queue in records (undelivered + in service; the stage bound / live instances).", ConstLabels: cl}),
		features: map[string]*ring{},
	}
	// The output-blocked counter is always exported (0 when never blocked) so the observation
	// layer knows this operator reports backpressure; the queue bound only when there is one.
	m.Registry.MustRegister(m.recordsIn, m.recordsOut, m.busy, m.useful, m.queue, m.accelUtil,
		m.cpuUtil, m.memPeak, m.ooms, m.feature, m.cfgEpoch, m.blocked)
	m.cfgEpoch.Set(float64(epoch))
	// Touch every series so a scrape right after start already shows the full contract.
	m.recordsIn.WithLabelValues(m.epoch)
	m.recordsOut.WithLabelValues(m.epoch)
	for _, f := range features {
		m.features[f] = &ring{buf: make([]float64, 0, featureWindow)}
		m.feature.WithLabelValues(f, "mean")
		m.feature.WithLabelValues(f, "std")
	}
	return m
}

// In counts consumed records and folds their features into the window statistics.
func (m *Metrics) In(recs ...Record) {
	m.recordsIn.WithLabelValues(m.epoch).Add(float64(len(recs)))
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, r := range m.features {
		for _, rec := range recs {
			r.add(rec.F(name))
		}
		mean, std := r.stats()
		m.feature.WithLabelValues(name, "mean").Set(mean)
		m.feature.WithLabelValues(name, "std").Set(std)
	}
}

// Out counts produced records.
func (m *Metrics) Out(n int) { m.recordsOut.WithLabelValues(m.epoch).Add(float64(n)) }

// Useful adds per-record service seconds.
func (m *Metrics) Useful(sec float64) { m.useful.Add(sec) }

// Busy adds wall seconds with at least one record in service.
func (m *Metrics) Busy(sec float64) { m.busy.Add(sec) }

// Queue sets the input backlog.
func (m *Metrics) Queue(n uint64) { m.queue.Set(float64(n)) }

// Utilization sets the accelerator and CPU busy fractions.
func (m *Metrics) Utilization(accel, cpu float64) {
	m.accelUtil.Set(clamp01(accel))
	m.cpuUtil.Set(clamp01(cpu))
}

// DeviceMemory records a device memory level (MiB) and keeps the peak.
func (m *Metrics) DeviceMemory(mib float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mib > m.peakMiB {
		m.peakMiB = mib
		m.memPeak.Set(mib * (1 << 20))
	}
}

// OutputBlocked adds wall seconds during which the output waited on a full downstream queue.
func (m *Metrics) OutputBlocked(sec float64) { m.blocked.Add(sec) }

// QueueCapacity sets this instance's share of its stage's input queue bound, in records. The
// first call registers the gauge: an instance that never calls it (unbounded queue) does not
// export it.
func (m *Metrics) QueueCapacity(share float64) {
	m.capOnce.Do(func() { m.Registry.MustRegister(m.queueCap) })
	m.queueCap.Set(share)
}

// OOMs adds accelerator OOM exits.
func (m *Metrics) OOMs(n int) { m.ooms.Add(float64(n)) }

func clamp01(x float64) float64 { return math.Max(0, math.Min(1, x)) }

// ring keeps the last featureWindow values of one feature.
type ring struct {
	buf  []float64
	next int
}

func (r *ring) add(x float64) {
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, x)
		return
	}
	r.buf[r.next] = x
	r.next = (r.next + 1) % len(r.buf)
}

func (r *ring) stats() (mean, std float64) {
	if len(r.buf) == 0 {
		return 0, 0
	}
	for _, x := range r.buf {
		mean += x
	}
	mean /= float64(len(r.buf))
	for _, x := range r.buf {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(r.buf)))
}
