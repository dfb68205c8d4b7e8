// Package worker is the operator worker library of the example pipelines and the simulated
// operator behaviours. An operator instance pulls records from its stage's durable JetStream
// consumer (shared by all instances, so they split the work), services them with a behaviour
// model (model.go), publishes the outputs downstream with idempotent IDs and Msg-Id dedup, acks
// its inputs only after the outputs are stored (at-least-once), and serves the
// operator metrics of apm/opcontract on /metrics. The last operators publish to <pipeline>.sink, which
// Verify checks against the dataset spec for lost or duplicated records. A stage may bound its
// input queue (Options.QueueCap): its producers then hold their outputs while it is full
// (backpressure.go).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure one operator instance.
type Options struct {
	Pipeline          *Pipeline
	Stage             string        // operator name within the pipeline
	NATSURL           string        // e.g. nats://127.0.0.1:4222
	Config            Config        // overrides of the operator's default config
	Epoch             int64         // config epoch, exported on every records series
	Speed             float64       // service times are divided by this (1 = model time)
	CPUs              float64       // cores of the instance (CPU contention of threads)
	DeviceMemoryMiB   float64       // accelerator memory; a higher peak exits like an OOM kill
	MetricsAddr       string        // host:port of /metrics; "" serves none
	StateDir          string        // survives restarts of the task (OOM counter); "" = none
	BatchWait         time.Duration // how long an idle engine waits to fill a batch
	AckWait           time.Duration // JetStream ack wait of the stage consumer
	Storage           jetstream.StorageType
	CrashAfterPublish int    // fault injection: exit after publishing the outputs of the n-th completion, before acking
	Instance          string // unique instance name (NOMAD_ALLOC_ID); "" = random
	Log               *slog.Logger
	// DeviceUsageDir and VisibleDevices (TRIDENT_GPU_USAGE_DIR and NVIDIA_VISIBLE_DEVICES,
	// which trident-gpu's fake mode sets) make the instance report its device memory to
	// the plugin, so that Nomad's alloc stats show it; empty: no report.
	DeviceUsageDir, VisibleDevices string
	// QueueCap bounds this stage's input queue, in records undelivered + in service (the
	// NumPending + NumAckPending of its consumer), over all its instances; 0 = unbounded.
	// Producers wait while the queue is at or above it (a soft bound: see backpressure.go).
	QueueCap int
}

// OOMError is returned when a batch needs more device memory than the instance has. The
// operator command exits with code 137, like a kernel OOM kill.
type OOMError struct {
	Operator          string
	PeakMiB, LimitMiB float64
}

// Error describes the peak and the limit.
func (e *OOMError) Error() string {
	return fmt.Sprintf("operator %s: device out of memory: peak %.0f MiB > limit %.0f MiB", e.Operator, e.PeakMiB, e.LimitMiB)
}

// ErrInjectedCrash is returned after -crash-after-publish: outputs published, inputs not acked.
var ErrInjectedCrash = errors.New("injected crash after publishing outputs, before acking inputs")

type worker struct {
	o       Options
	p       *Pipeline
	op      *Operator
	cfg     Config
	js      jetstream.JetStream
	cons    jetstream.Consumer
	m       *Metrics
	t       *tracker
	log     *slog.Logger
	batch   int
	publish atomic.Int64
	credits *credits     // producer side of the downstream stages' queue bounds
	usage   *deviceUsage // device memory reports to trident-gpu in fake mode (nil: none)
}

// Run runs one operator instance until ctx ends (then it returns nil after handing its
// in-flight records back), or until an OOM (*OOMError), an injected crash or a fatal error.
func Run(ctx context.Context, o Options) error {
	if o.Pipeline == nil {
		return errors.New("worker: no pipeline")
	}
	op, err := o.Pipeline.Operator(o.Stage)
	if err != nil {
		return err
	}
	cfg := op.DefaultConfig().Merge(o.Config)
	if err := op.Validate(cfg); err != nil {
		return err
	}
	if o.QueueCap < 0 {
		return fmt.Errorf("worker: queue cap %d must not be negative", o.QueueCap)
	}
	if o.Speed <= 0 {
		o.Speed = 1
	}
	if o.CPUs <= 0 {
		o.CPUs = op.CPU
	}
	if o.DeviceMemoryMiB <= 0 {
		o.DeviceMemoryMiB = float64(op.GPUMemoryMB)
	}
	if o.BatchWait <= 0 {
		o.BatchWait = 200 * time.Millisecond
	}
	if o.AckWait <= 0 {
		o.AckWait = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	batch, _ := cfg.Int(op.BatchKey(), 1)
	w := &worker{o: o, p: o.Pipeline, op: op, cfg: cfg, batch: max(batch, 1),
		log: o.Log.With("pipeline", o.Pipeline.Name, "operator", op.Name)}
	w.m = NewMetrics(w.p.Name, op.Name, o.Epoch, op.Features)
	w.usage = newDeviceUsage(o.DeviceUsageDir, o.VisibleDevices)
	defer w.usage.close()
	now := time.Now()
	w.t = &tracker{last: now, flushed: now}
	if n, err := w.readOOMs(); err != nil {
		w.log.Warn("cannot read OOM counter", "err", err)
	} else {
		w.m.OOMs(n)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.MetricsAddr != "" {
		stop, err := serveMetrics(o.MetricsAddr, w.m, w.log)
		if err != nil {
			return err
		}
		defer stop()
	}
	nc, js, err := Connect(ctx, o.NATSURL, "trident-"+w.p.Name+"-"+op.Name, w.log)
	if err != nil {
		return ignoreIfDone(ctx, err)
	}
	defer nc.Close()
	w.js = js
	w.credits = newCredits(&natsProbe{js: js, p: w.p}, w.log)
	var s jetstream.Stream
	if err := retry(ctx, w.log, "ensure stream", func() (err error) {
		s, err = EnsureStream(ctx, js, w.p, o.Storage)
		return err
	}); err != nil {
		return ignoreIfDone(ctx, err)
	}
	if err := retry(ctx, w.log, "ensure consumer", func() (err error) {
		w.cons, err = EnsureConsumer(ctx, s, w.p, op.Name, o.AckWait)
		return err
	}); err != nil {
		return ignoreIfDone(ctx, err)
	}
	// After the consumer exists, so a producer that sees the bound can read the backlog.
	if err := retry(ctx, w.log, "announce queue bound", func() error {
		return announceQueueCap(ctx, js, w.p, op.Name, o.QueueCap, o.Storage)
	}); err != nil {
		return ignoreIfDone(ctx, err)
	}
	w.log.Info("operator serving", "engine", op.Engine, "config", cfg.String(), "epoch", o.Epoch,
		"speed", o.Speed, "device_memory_mib", o.DeviceMemoryMiB, "queue_cap", o.QueueCap, "metrics", o.MetricsAddr)

	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); w.observe(ctx) }()
	defer bg.Wait()
	defer cancel()

	switch op.Engine {
	case EngineCPU:
		err = w.runCPU(ctx)
	case EngineBatch:
		err = w.runBatch(ctx)
	default:
		err = w.runLLM(ctx)
	}
	var oom *OOMError
	if errors.As(err, &oom) {
		if werr := w.writeOOMs(); werr != nil {
			w.log.Warn("cannot persist OOM counter", "err", werr)
		}
	}
	if err != nil && ctx.Err() != nil && !errors.As(err, &oom) && !errors.Is(err, ErrInjectedCrash) {
		return nil // shutting down
	}
	return err
}

// ignoreIfDone drops an error caused by shutting down (ctx ended) before serving started.
func ignoreIfDone(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// serveMetrics serves /metrics on addr until the returned stop is called.
func serveMetrics(addr string, m *Metrics, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Info("serving metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func (w *worker) oomFile() string {
	if w.o.StateDir == "" {
		return ""
	}
	return filepath.Join(w.o.StateDir, "trident-oom-"+w.p.Name+"-"+w.op.Name+".count")
}

func (w *worker) readOOMs() (int, error) {
	f := w.oomFile()
	if f == "" {
		return 0, nil
	}
	b, err := os.ReadFile(f)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", f, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", f, err)
	}
	return n, nil
}

func (w *worker) writeOOMs() error {
	f := w.oomFile()
	if f == "" {
		return nil
	}
	n, err := w.readOOMs()
	if err != nil {
		n = 0
	}
	if err := os.WriteFile(f, []byte(strconv.Itoa(n+1)+"\n"), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", f, err)
	}
	return nil
}

// PresenceBucket is the KV bucket where live operator instances announce themselves (keys
// <pipeline>.<stage>.<instance>, expiring after PresenceTTL), so each instance can report its
// share of the stage's shared backlog.
const (
	PresenceBucket = "trident_instances"
	PresenceTTL    = 10 * time.Second
)

// presence announces this instance and counts the live instances of its stage.
type presence struct {
	kv  jetstream.KeyValue
	key string
	pat string
}

func (w *worker) newPresence(ctx context.Context) (*presence, error) {
	kv, err := w.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: PresenceBucket,
		TTL: PresenceTTL, Storage: jetstream.MemoryStorage, History: 1})
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", PresenceBucket, err)
	}
	id := w.o.Instance
	if id == "" {
		id = nats.NewInbox()[len(nats.InboxPrefix):]
	}
	prefix := w.p.Name + "." + w.op.Name + "."
	return &presence{kv: kv, key: prefix + id, pat: prefix + "*"}, nil
}

// beat refreshes this instance's key and returns the number of live instances (>= 1).
func (pr *presence) beat(ctx context.Context) (int, error) {
	if _, err := pr.kv.Put(ctx, pr.key, []byte(time.Now().UTC().Format(time.RFC3339))); err != nil {
		return 1, fmt.Errorf("presence %s: %w", pr.key, err)
	}
	lister, err := pr.kv.ListKeysFiltered(ctx, pr.pat)
	if err != nil {
		return 1, fmt.Errorf("presence list %s: %w", pr.pat, err)
	}
	n := 0
	for range lister.Keys() {
		n++
	}
	return max(n, 1), nil
}

func (pr *presence) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = pr.kv.Delete(ctx, pr.key)
}

// queueCapShare is one instance's share of a stage's queue bound.
func queueCapShare(bound, instances int) float64 { return float64(bound) / float64(max(instances, 1)) }

// queueShare is one instance's share (rounded up) of the stage's queue as trident_queue_length
// reports it: the undelivered records, plus the records in service when the queue is bounded,
// so that it is in the units of trident_queue_capacity (the bound holds both).
func (w *worker) queueShare(info *jetstream.ConsumerInfo, instances int) uint64 {
	n := info.NumPending
	if w.o.QueueCap > 0 {
		n += uint64(max(info.NumAckPending, 0))
	}
	k := uint64(max(instances, 1))
	return (n + k - 1) / k
}

// observe refreshes the queue length and utilization gauges once a second. The queue length
// is this instance's share of the stage backlog (records not yet delivered to any instance,
// and, in a bounded stage, those in service, divided by the live instances), so summing over
// instances gives the stage backlog; the queue capacity (bounded stages only) is its share of
// the stage's bound, likewise.
func (w *worker) observe(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	pr, err := w.newPresence(ctx)
	if err != nil {
		w.log.Warn("no presence; queue length is the whole stage backlog", "err", err)
	} else {
		defer pr.leave()
	}
	instances := 1
	if w.o.QueueCap > 0 {
		w.m.QueueCapacity(queueCapShare(w.o.QueueCap, instances))
	}
	announced := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if w.o.QueueCap > 0 && time.Since(announced) >= boundRefresh {
			// Keep the bound alive (QueueCapTTL) while this stage runs.
			announced = time.Now()
			actx, cancel := context.WithTimeout(ctx, probeTimeout)
			if err := announceQueueCap(actx, w.js, w.p, w.op.Name, w.o.QueueCap, w.o.Storage); err != nil {
				w.log.Debug("re-announce queue bound", "err", err)
			}
			cancel()
		}
		u := w.t.flush()
		w.m.Busy(u.busy)
		w.m.OutputBlocked(u.blocked)
		if u.dt > 0 {
			if w.op.GPUs > 0 {
				w.m.Utilization(u.busy/u.dt, 0.1*u.busy/u.dt)
			} else {
				w.m.Utilization(0, u.occ/(u.dt*w.o.CPUs))
			}
		}
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if pr != nil {
			if n, err := pr.beat(ictx); err == nil {
				instances = n
			}
		}
		info, err := w.cons.Info(ictx)
		cancel()
		if err == nil {
			w.m.Queue(w.queueShare(info, instances))
		}
		if w.o.QueueCap > 0 {
			w.m.QueueCapacity(queueCapShare(w.o.QueueCap, instances))
		}
	}
}

// tracker integrates wall time with records in service (busy time), the number of records
// in service (occupancy) and wall time with a completion waiting for downstream room (output
// blocked time) between flushes.
type tracker struct {
	mu        sync.Mutex
	inService int
	blocked   int       // completions waiting for downstream room
	last      time.Time // last advance
	flushed   time.Time // last flush
	busy, occ float64
	blockedS  float64
}

func (t *tracker) advance(now time.Time) {
	dt := now.Sub(t.last).Seconds()
	if t.inService > 0 {
		t.busy += dt
		t.occ += dt * float64(t.inService)
	}
	if t.blocked > 0 {
		t.blockedS += dt
	}
	t.last = now
}

// block moves n records out of service into a completion waiting for downstream room.
func (t *tracker) block(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(time.Now())
	t.inService -= n
	t.blocked++
}

// unblock reverses block once the completion may publish.
func (t *tracker) unblock(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(time.Now())
	t.inService += n
	t.blocked--
}

func (t *tracker) add(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(time.Now())
	t.inService += n
}

// usage is what a tracker integrated since its last flush.
type usage struct {
	busy    float64 // wall seconds with at least one record in service
	occ     float64 // record-seconds in service
	blocked float64 // wall seconds with at least one completion waiting for downstream room
	dt      float64 // wall seconds since the last flush
}

// flush returns the usage since the last flush and starts a new period.
func (t *tracker) flush() usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	start, now := t.flushed, time.Now()
	t.advance(now)
	u := usage{busy: t.busy, occ: t.occ, blocked: t.blockedS, dt: now.Sub(start).Seconds()}
	t.busy, t.occ, t.blockedS, t.flushed = 0, 0, 0, now
	return u
}

// serve sleeps for sec model seconds (scaled by speed), telling JetStream that msgs are still
// in progress whenever a third of the ack wait has passed since *hb.
func (w *worker) serve(ctx context.Context, sec float64, msgs []jetstream.Msg, hb *time.Time) error {
	left := time.Duration(sec / w.o.Speed * float64(time.Second))
	for left > 0 {
		step := min(left, w.o.AckWait/3)
		if step <= 0 {
			step = left
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step):
		}
		left -= step
		w.keepAlive(msgs, hb)
	}
	return nil
}

// complete waits until every bounded destination stage has room (keeping hold's messages
// alive), publishes outs downstream (each with its Msg-Id, waiting for the stream's acks) and
// only then acks the inputs. If ctx ends while waiting for room, the inputs are handed back.
func (w *worker) complete(ctx context.Context, in []jetstream.Msg, outs []Record, hold holding) error {
	need := w.destinations(outs)
	if err := w.awaitCredit(ctx, need, hold); err != nil {
		w.giveBack(in)
		return err
	}
	err := w.publishAll(ctx, outs)
	w.credits.settle(need)
	if err != nil {
		return err
	}
	w.m.Out(len(outs))
	if n := w.publish.Add(1); w.o.CrashAfterPublish > 0 && n == int64(w.o.CrashAfterPublish) {
		return ErrInjectedCrash
	}
	for _, m := range in {
		if err := m.DoubleAck(ctx); err != nil {
			return fmt.Errorf("ack input: %w", err)
		}
	}
	return nil
}

// publishAll publishes outs, each to its Route subject with its Msg-Id, and waits for the
// stream's acks.
func (w *worker) publishAll(ctx context.Context, outs []Record) error {
	futures := make([]jetstream.PubAckFuture, 0, len(outs))
	for _, r := range outs {
		subj := w.p.Route(w.op, r)
		data, err := encodeRecord(r)
		if err != nil {
			return err
		}
		f, err := w.js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: data}, jetstream.WithMsgID(MsgID(subj, r.ID)))
		if err != nil {
			return fmt.Errorf("publish %s to %s: %w", r.ID, subj, err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return fmt.Errorf("publish %s: no ack from the stream after 30s", f.Msg().Subject)
		}
	}
	return nil
}

// fetchBackoff is the pause after a failed fetch (e.g. while NATS reconnects).
const fetchBackoff = 500 * time.Millisecond

// pause sleeps for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// giveBack naks in-flight inputs on shutdown so another instance takes them at once.
func (w *worker) giveBack(msgs []jetstream.Msg) {
	for _, m := range msgs {
		_ = m.Nak()
	}
}

// fetch pulls up to n records, waiting up to wait (0 = only what is there now). Undecodable
// messages are terminated (never redelivered) and logged.
func (w *worker) fetch(n int, wait time.Duration) ([]jetstream.Msg, []Record, error) {
	var batch jetstream.MessageBatch
	var err error
	if wait <= 0 {
		batch, err = w.cons.FetchNoWait(n)
	} else {
		batch, err = w.cons.Fetch(n, jetstream.FetchMaxWait(wait))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("fetch from %s: %w", w.p.Subject(w.op.Name), err)
	}
	var msgs []jetstream.Msg
	var recs []Record
	for m := range batch.Messages() {
		r, err := decodeRecord(m.Data())
		if err != nil {
			w.log.Error("dropping undecodable message", "subject", m.Subject(), "err", err)
			_ = m.Term()
			continue
		}
		msgs = append(msgs, m)
		recs = append(recs, r)
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return msgs, recs, fmt.Errorf("fetch from %s: %w", w.p.Subject(w.op.Name), err)
	}
	return msgs, recs, nil
}

// runCPU runs `threads` threads, each servicing one record at a time.
func (w *worker) runCPU(ctx context.Context) error {
	threads := w.batch
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.cpuThread(ctx, threads); err != nil {
				cancel(err)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func (w *worker) cpuThread(ctx context.Context, threads int) error {
	hb := time.Now()
	for ctx.Err() == nil {
		msgs, recs, err := w.fetch(1, w.o.BatchWait)
		if err != nil {
			w.log.Warn("fetch", "err", err)
			pause(ctx, fetchBackoff)
			continue
		}
		for i, r := range recs {
			w.m.In(r)
			w.t.add(1)
			sec := w.op.CPUModel.ServiceTime(r, threads, w.o.CPUs)
			if err := w.serve(ctx, sec, msgs[i:i+1], &hb); err != nil {
				w.t.add(-1)
				w.giveBack(msgs[i:])
				return nil
			}
			err := w.complete(ctx, msgs[i:i+1], w.op.Expand(r), held(msgs[i:i+1], &hb))
			w.t.add(-1)
			// Useful time is counted in instance-seconds (each of the threads contributes
			// 1/threads), so that records per useful second is the instance's capacity,
			// as trident_synchronous declares.
			w.m.Useful(sec / w.o.Speed / float64(threads))
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// runBatch collects up to batch_size records, then services them as one padded batch.
func (w *worker) runBatch(ctx context.Context) error {
	vm := w.op.VisionModel
	hb := time.Now()
	for ctx.Err() == nil {
		msgs, recs, err := w.fetch(w.batch, w.o.BatchWait)
		if err != nil {
			w.log.Warn("fetch", "err", err)
			pause(ctx, fetchBackoff)
			continue
		}
		if len(recs) == 0 {
			continue
		}
		w.m.In(recs...)
		sec := vm.BatchTime(recs)
		if err := w.checkMemory(ctx, vm.PeakMemMiB(recs), sec, msgs, &hb); err != nil {
			return err
		}
		w.t.add(len(recs))
		if err := w.serve(ctx, sec, msgs, &hb); err != nil {
			w.t.add(-len(recs))
			w.giveBack(msgs)
			return nil
		}
		var outs []Record
		for _, r := range recs {
			outs = append(outs, w.op.Expand(r)...)
		}
		err = w.complete(ctx, msgs, outs, held(msgs, &hb))
		w.t.add(-len(recs))
		w.m.Useful(sec / w.o.Speed)
		if err != nil {
			return err
		}
	}
	return nil
}

// checkMemory records the device memory level; above the limit the instance dies midway
// through the work, like an OOM kill (inputs stay unacked and are redelivered).
func (w *worker) checkMemory(ctx context.Context, mib, sec float64, msgs []jetstream.Msg, hb *time.Time) error {
	w.m.DeviceMemory(math.Min(mib, w.o.DeviceMemoryMiB))
	if err := w.usage.report(math.Min(mib, w.o.DeviceMemoryMiB), time.Now()); err != nil {
		w.log.Warn("device usage not reported", "err", err)
	}
	if mib <= w.o.DeviceMemoryMiB {
		return nil
	}
	_ = w.serve(ctx, sec/2, msgs, hb)
	return &OOMError{Operator: w.op.Name, PeakMiB: mib, LimitMiB: w.o.DeviceMemoryMiB}
}

// admitEvery bounds how many decode steps pass before the LLM engine admits new sequences.
const admitEvery = 16

type sequence struct {
	msg       jetstream.Msg
	rec       Record
	remaining float64 // decode steps left
	latency   float64 // model seconds since admission
}

// runLLM is continuous batching: up to max_num_seqs sequences decode together; new ones are
// admitted (and prefilled, stalling decode) every admitEvery steps or when one finishes.
func (w *worker) runLLM(ctx context.Context) error {
	lm := w.op.LLMModel
	hb := time.Now()
	var active []*sequence
	activeMsgs := func() []jetstream.Msg { return seqMsgs(active) }
	activeRecs := func() []Record {
		rs := make([]Record, len(active))
		for i, s := range active {
			rs[i] = s.rec
		}
		return rs
	}
	for ctx.Err() == nil {
		if free := w.batch - len(active); free > 0 {
			wait := time.Duration(0)
			if len(active) == 0 {
				wait = w.o.BatchWait
			}
			msgs, recs, err := w.fetch(free, wait)
			if err != nil {
				w.log.Warn("fetch", "err", err)
				if len(active) == 0 {
					pause(ctx, fetchBackoff)
				}
			}
			if len(recs) > 0 {
				w.m.In(recs...)
				w.t.add(len(recs))
				for i, r := range recs {
					active = append(active, &sequence{msg: msgs[i], rec: r, remaining: math.Max(1, r.F("output_tokens"))})
				}
				prefill := lm.PrefillTime(recs, w.cfg)
				if err := w.checkMemory(ctx, lm.PeakMemMiB(activeRecs(), w.cfg), prefill, activeMsgs(), &hb); err != nil {
					return err
				}
				if err := w.serve(ctx, prefill, activeMsgs(), &hb); err != nil {
					w.giveBack(activeMsgs())
					return nil
				}
				for _, s := range active {
					s.latency += prefill
				}
			}
		}
		if len(active) == 0 {
			continue
		}
		steps := math.Inf(1)
		for _, s := range active {
			steps = math.Min(steps, s.remaining)
		}
		if len(active) < w.batch {
			steps = math.Min(steps, admitEvery)
		}
		sec := steps * lm.StepTime(len(active), w.cfg)
		if err := w.serve(ctx, sec, activeMsgs(), &hb); err != nil {
			w.giveBack(activeMsgs())
			return nil
		}
		kept := active[:0]
		var done []*sequence
		for _, s := range active {
			s.remaining -= steps
			s.latency += sec
			if s.remaining <= 0 {
				done = append(done, s)
			} else {
				kept = append(kept, s)
			}
		}
		active = kept
		for j, s := range done {
			// While the output waits for downstream room, the finished sequences not yet
			// acked and the active ones stay alive.
			hold := holding{msgs: func() []jetstream.Msg { return append(seqMsgs(done[j:]), activeMsgs()...) }, hb: &hb}
			err := w.complete(ctx, []jetstream.Msg{s.msg}, w.op.Expand(s.rec), hold)
			w.t.add(-1)
			w.m.Useful(s.latency / w.o.Speed)
			if err != nil && ctx.Err() != nil && !errors.Is(err, ErrInjectedCrash) {
				w.giveBack(append(seqMsgs(done[j:]), activeMsgs()...)) // done[j] may be unacked after a failed publish
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	w.giveBack(activeMsgs())
	return nil
}

// seqMsgs returns the messages of seqs.
func seqMsgs(seqs []*sequence) []jetstream.Msg {
	ms := make([]jetstream.Msg, len(seqs))
	for i, s := range seqs {
		ms[i] = s.msg
	}
	return ms
}
