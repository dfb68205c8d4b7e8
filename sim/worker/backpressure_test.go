package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/e2e/harness"
)

// fakeProbe is a queueProbe with settable bounds and backlogs that counts its calls.
type fakeProbe struct {
	bound, backlog           map[string]int64
	backlogErr               error
	boundCalls, backlogCalls map[string]int
}

func newFakeProbe() *fakeProbe {
	return &fakeProbe{bound: map[string]int64{}, backlog: map[string]int64{},
		boundCalls: map[string]int{}, backlogCalls: map[string]int{}}
}

func (f *fakeProbe) Bound(_ context.Context, stage string) (int64, error) {
	f.boundCalls[stage]++
	return f.bound[stage], nil
}

func (f *fakeProbe) Backlog(_ context.Context, stage string) (int64, error) {
	f.backlogCalls[stage]++
	return f.backlog[stage], f.backlogErr
}

// A producer reserves credit against its cached view of a bounded stage: it overshoots the
// bound by at most one completion, counts its own outputs until a backlog read includes them,
// refreshes the backlog at most every backlogRefresh and the bound every boundRefresh, never
// probes an unbounded stage's backlog, and does not block on a backlog it cannot read.
func TestCreditsSoftBound(t *testing.T) {
	ctx := context.Background()
	fp := newFakeProbe()
	c := newCredits(fp, nil)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	tick := func() { now = now.Add(backlogRefresh) }
	four := map[string]int{"b": 4}
	fp.bound["b"] = 10

	for i, want := range []bool{true, true, true, false, false} { // estimate 0, 4, 8, 12
		if got := c.acquire(ctx, four); got != want {
			t.Fatalf("acquire #%d = %v, want %v (estimate %d of bound 10)", i, got, want, c.stages["b"].estimate())
		}
	}
	if est := c.stages["b"].estimate(); est != 12 {
		t.Fatalf("estimate %d, want 12 = bound 10 + overshoot of one 4-output completion - 2", est)
	}
	if fp.backlogCalls["b"] != 1 || fp.boundCalls["b"] != 1 {
		t.Fatalf("probe calls within one refresh: %d backlog, %d bound; want 1 each", fp.backlogCalls["b"], fp.boundCalls["b"])
	}

	// The three completions are stored; the next read includes them: still full.
	c.settle(four)
	c.settle(four)
	c.settle(four)
	tick()
	fp.backlog["b"] = 12
	if c.acquire(ctx, four) {
		t.Fatal("acquired with a backlog of 12 >= 10")
	}
	// The stage consumed 3: room again.
	tick()
	fp.backlog["b"] = 9
	if !c.acquire(ctx, four) {
		t.Fatal("no credit with a backlog of 9 < 10")
	}
	// Reserved but not yet stored when the backlog is read: still counted.
	tick()
	if c.acquire(ctx, four) {
		t.Fatalf("a read that may miss 4 unsettled outputs made room: estimate %d", c.stages["b"].estimate())
	}
	c.settle(four)
	tick()
	fp.backlog["b"] = 5
	if !c.acquire(ctx, four) {
		t.Fatal("no credit with a backlog of 5")
	}
	c.settle(four)

	// An unreadable backlog does not block (liveness over the bound).
	tick()
	fp.backlog["b"], fp.backlogErr = 1000, errors.New("nats down")
	if !c.acquire(ctx, four) {
		t.Fatal("blocked on an unreadable backlog")
	}
	c.settle(four)
	fp.backlogErr = nil

	// An unbounded destination is never probed for its backlog.
	for range 5 {
		tick()
		if !c.acquire(ctx, map[string]int{"u": 100}) {
			t.Fatal("an unbounded stage blocked")
		}
	}
	if fp.backlogCalls["u"] != 0 || fp.boundCalls["u"] != 1 {
		t.Fatalf("unbounded stage: %d backlog reads, %d bound reads; want 0 and 1", fp.backlogCalls["u"], fp.boundCalls["u"])
	}

	// A bound removed by the stage takes effect at the next bound refresh.
	tick()
	if c.acquire(ctx, four) {
		t.Fatal("acquired with a backlog of 1000")
	}
	fp.bound["b"] = 0
	now = now.Add(boundRefresh)
	if !c.acquire(ctx, four) {
		t.Fatal("still blocked after the bound was removed")
	}

	// Once ctx has ended nothing is reserved: the caller hands its inputs back instead.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if c.acquire(done, map[string]int{"u": 1}) {
		t.Fatal("reserved credit after ctx ended")
	}
}

// stallingProbe is a queueProbe whose reads of stage "slow" wait until release is closed.
type stallingProbe struct {
	entered chan struct{} // receives when a read of "slow" starts
	release chan struct{}
}

func (p *stallingProbe) Bound(context.Context, string) (int64, error) { return 10, nil }

func (p *stallingProbe) Backlog(ctx context.Context, stage string) (int64, error) {
	if stage == "slow" {
		p.entered <- struct{}{}
		select {
		case <-p.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 0, nil
}

// A slow read of one stage's backlog holds no lock: other threads reserve credit meanwhile,
// on other stages after their own reads and on the stage being read from its cached state.
func TestCreditsReadWithoutTheLock(t *testing.T) {
	p := &stallingProbe{entered: make(chan struct{}, 1), release: make(chan struct{})}
	c := newCredits(p, nil)
	ctx := context.Background()
	first := make(chan bool, 1)
	go func() { first <- c.acquire(ctx, map[string]int{"slow": 1}) }()
	<-p.entered // the first thread is inside the probe
	others := make(chan bool, 2)
	go func() {
		// "fast" is read by this thread; "slow" is being read by the first one, so its
		// cached state (backlog unknown: no blocking) decides.
		others <- c.acquire(ctx, map[string]int{"fast": 1})
		others <- c.acquire(ctx, map[string]int{"slow": 1})
	}()
	for range 2 {
		select {
		case ok := <-others:
			if !ok {
				t.Fatal("acquire refused while another thread reads a backlog")
			}
		case <-time.After(20 * time.Second):
			close(p.release)
			t.Fatal("acquire waited for another thread's backlog read (lock held across the probe)")
		}
	}
	close(p.release)
	if !<-first {
		t.Fatal("the slow read's acquire was refused")
	}
}

// A completion reserves per destination stage as Pipeline.Route sends its outputs; the sink
// is never bounded.
func TestDestinationsFollowRoute(t *testing.T) {
	p := PDFPipeline()
	seg := &worker{p: p, op: mustOp(t, p, "segment")}
	blocks := pdfBlocks(p.Source(1, 0, 2))
	need := seg.destinations(blocks)
	total := 0
	for stage, n := range need {
		if !strings.HasPrefix(stage, "ocr-") {
			t.Errorf("destination %q, want an ocr stage", stage)
		}
		total += n
	}
	if total != len(blocks) {
		t.Errorf("destinations count %d outputs, want %d", total, len(blocks))
	}
	agg := &worker{p: p, op: mustOp(t, p, "aggregate")}
	if need := agg.destinations(blocks); need != nil {
		t.Errorf("sink outputs reserve %v, want nothing", need)
	}
}

// gather returns the value of the single series of name in m's registry, if registered.
func gather(t *testing.T, m *Metrics, name string) (float64, bool) {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return metricValue(f.GetMetric()[0]), true
		}
	}
	return 0, false
}

func metricValue(s *dto.Metric) float64 {
	if s.Counter != nil {
		return s.Counter.GetValue()
	}
	return s.GetGauge().GetValue()
}

// Every instance exports the output-blocked counter (0 until blocked); only a bounded one
// exports its share of the queue bound. Blocked wall time leaves the busy time.
func TestBackpressureMetricsExport(t *testing.T) {
	m := NewMetrics("pdf", "ocr-text", 0, nil)
	if v, ok := gather(t, m, opcontract.OutputBlockedSeconds); !ok || v != 0 {
		t.Fatalf("fresh instance: %s = %v (registered %v), want 0", opcontract.OutputBlockedSeconds, v, ok)
	}
	if _, ok := gather(t, m, opcontract.QueueCapacity); ok {
		t.Fatalf("unbounded instance exports %s", opcontract.QueueCapacity)
	}
	m.QueueCapacity(queueCapShare(2048, 3))
	m.QueueCapacity(queueCapShare(2048, 4))
	m.OutputBlocked(1.5)
	m.OutputBlocked(0.25)
	if v, ok := gather(t, m, opcontract.QueueCapacity); !ok || v != 512 {
		t.Errorf("%s = %v (registered %v), want 2048/4 = 512", opcontract.QueueCapacity, v, ok)
	}
	if v, _ := gather(t, m, opcontract.OutputBlockedSeconds); v != 1.75 {
		t.Errorf("%s = %v, want 1.75", opcontract.OutputBlockedSeconds, v)
	}
	if s := queueCapShare(30, 0); s != 30 {
		t.Errorf("share with no live instance seen = %v, want the whole bound", s)
	}

	tr := &tracker{last: time.Now(), flushed: time.Now()}
	tr.add(2)
	tr.block(2)
	time.Sleep(20 * time.Millisecond)
	mid := tr.flush()
	tr.unblock(2)
	tr.add(-2)
	if mid.blocked < 0.02 || tr.inService != 0 || tr.blocked != 0 {
		t.Errorf("blocked %v s over a 20 ms block (in service %d, blocked %d after)", mid.blocked, tr.inService, tr.blocked)
	}
	// The blocked records left the busy time: only the instant between add and block counts
	// (microseconds; a tenth of the blocked time leaves ample room and still fails if the
	// blocked interval were counted as busy).
	if mid.busy > mid.blocked/10 || mid.occ > 2*mid.blocked/10 {
		t.Errorf("busy %v s, occupancy %v record-s over %v s with every record blocked, want ~0", mid.busy, mid.occ, mid.blocked)
	}
}

// scrape returns the samples of name summed over series at a /metrics endpoint, and whether
// the metric is exported at all.
func scrape(t *testing.T, addr, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false // not serving yet
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s/metrics: %v", addr, err)
	}
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	sum := 0.0
	for _, s := range f.GetMetric() {
		sum += metricValue(s)
	}
	return sum, true
}

// eventually polls cond every 50 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", d, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func backlogOf(ctx context.Context, js jetstream.JetStream, p *Pipeline, stage string) (*jetstream.ConsumerInfo, error) {
	c, err := js.Consumer(ctx, p.StreamName(), stage)
	if err != nil {
		return nil, err
	}
	return c.CachedInfo(), nil
}

// A fast producer (segment, one instance with two threads, fanning each document out into up
// to maxFan blocks) feeding a slow stage (two aggregate instances) with a bound of 30 records:
// the aggregate queue (undelivered + in service) never exceeds the bound plus the stated
// slack of one completion (a soft bound: one producer instance, whose threads reserve credit
// atomically, overshoots by at most the outputs of the completion it admitted just below the
// bound), the producer's blocked time grows, each aggregate instance exports half the bound,
// and the sink still holds every expected record exactly once.
func TestBoundedQueueBackpressure(t *testing.T) {
	url, _, js := startNATS(t)
	p := PDFMiniPipeline()
	spec := Spec{Pipeline: p.Name, Docs: 30, Regimes: 3, Seed: 21}
	const bound = 30
	maxFan := 0
	parse, seg := mustOp(t, p, "parse"), mustOp(t, p, "segment")
	for _, r := range Generate(p, spec) {
		for _, d := range parse.Expand(r) {
			maxFan = max(maxFan, len(seg.Expand(d)))
		}
	}
	slack := maxFan

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	run := func(stage string, speed float64, queueCap int, metrics string, cfg Config) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := Run(runCtx, Options{Pipeline: p, Stage: stage, NATSURL: url, Speed: speed, QueueCap: queueCap, Config: cfg,
				MetricsAddr: metrics, BatchWait: 20 * time.Millisecond, Storage: jetstream.MemoryStorage,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Errorf("%s: %v", stage, err)
			}
		}()
	}
	aggAddrs := []string{harness.FreeAddr(t), harness.FreeAddr(t)}
	for _, a := range aggAddrs {
		run("aggregate", 0.1, bound, a, nil)
	}
	eventually(t, 30*time.Second, "aggregate to announce its bound", func() (bool, string) {
		kv, err := js.KeyValue(ctx, QueueCapBucket)
		if err != nil {
			return false, err.Error()
		}
		e, err := kv.Get(ctx, queueCapKey(p, "aggregate"))
		if err != nil {
			return false, err.Error()
		}
		return string(e.Value()) == fmt.Sprint(bound), string(e.Value())
	})
	parseAddr, segAddr := harness.FreeAddr(t), harness.FreeAddr(t)
	run("parse", 500, 0, parseAddr, nil)
	run("segment", 500, 0, segAddr, Config{"threads": "2"})

	var peak atomic.Int64
	monCtx, monStop := context.WithCancel(ctx)
	monDone := make(chan struct{})
	go func() {
		defer close(monDone)
		for monCtx.Err() == nil {
			if info, err := backlogOf(monCtx, js, p, "aggregate"); err == nil {
				n := int64(info.NumPending) + int64(info.NumAckPending)
				for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	if err := Publish(ctx, js, p, spec, PublishOptions{Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	// Each aggregate instance exports its share of the bound once both see each other.
	for _, a := range aggAddrs {
		eventually(t, 30*time.Second, "aggregate "+a+" to export half the bound", func() (bool, string) {
			v, ok := scrape(t, a, opcontract.QueueCapacity)
			return ok && v == bound/2, fmt.Sprintf("%s = %v (exported %v)", opcontract.QueueCapacity, v, ok)
		})
	}
	rep, err := WaitVerify(ctx, js, p, 100*time.Millisecond)
	monStop()
	<-monDone
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; aggregate backlog peak %d (bound %d, slack %d)", rep, peak.Load(), bound, slack)
	if !rep.OK() || rep.Expected == 0 || rep.Received != rep.Expected {
		t.Fatalf("sink: %s %v", rep, rep.Samples)
	}
	if got := peak.Load(); got > bound+int64(slack) {
		t.Errorf("aggregate backlog peaked at %d > bound %d + slack %d", got, bound, slack)
	}
	eventually(t, 10*time.Second, "segment's output-blocked time to grow", func() (bool, string) {
		v, ok := scrape(t, segAddr, opcontract.OutputBlockedSeconds)
		return ok && v > 0, fmt.Sprintf("%v (exported %v)", v, ok)
	})
	if v, ok := scrape(t, parseAddr, opcontract.OutputBlockedSeconds); !ok || v != 0 {
		t.Errorf("parse (unbounded downstream): %s = %v (exported %v), want 0", opcontract.OutputBlockedSeconds, v, ok)
	}
	for _, a := range []string{parseAddr, segAddr} {
		if _, ok := scrape(t, a, opcontract.QueueCapacity); ok {
			t.Errorf("unbounded stage at %s exports %s", a, opcontract.QueueCapacity)
		}
	}
}

// publishRecord publishes r to a stage's subject with its Msg-Id.
func publishRecord(t *testing.T, ctx context.Context, js jetstream.JetStream, p *Pipeline, stage string, r Record) {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	subj := p.Subject(stage)
	if _, err := js.Publish(ctx, subj, data, jetstream.WithMsgID(MsgID(subj, r.ID))); err != nil {
		t.Fatal(err)
	}
}

// A producer whose destination is full holds its input in service for many ack waits without
// a redelivery, publishes once the destination has room, and returns promptly on shutdown
// while blocked.
func TestBlockedProducerKeepsInputAliveAndStops(t *testing.T) {
	url, _, js := startNATS(t)
	p := PDFMiniPipeline()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := EnsureStream(ctx, js, p, jetstream.MemoryStorage)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := EnsureConsumer(ctx, s, p, "aggregate", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := announceQueueCap(ctx, js, p, "aggregate", 1, jetstream.MemoryStorage); err != nil {
		t.Fatal(err)
	}
	publishRecord(t, ctx, js, p, "aggregate", Record{ID: "filler", Kind: "text"}) // aggregate is full
	doc := p.Source(3, 0, 0)
	blocks := pdfBlocks(doc)
	publishRecord(t, ctx, js, p, "segment", doc)

	const ackWait = time.Second
	metrics := harness.FreeAddr(t)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, Options{Pipeline: p, Stage: "segment", NATSURL: url, Speed: 1000, AckWait: ackWait,
			BatchWait: 20 * time.Millisecond, Storage: jetstream.MemoryStorage, MetricsAddr: metrics,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()

	segInfo := func() (*jetstream.ConsumerInfo, string) {
		info, err := backlogOf(ctx, js, p, "segment")
		if err != nil {
			return nil, err.Error()
		}
		return info, fmt.Sprintf("pending %d, ack pending %d, redelivered %d", info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
	eventually(t, 30*time.Second, "segment to take its document", func() (bool, string) {
		info, state := segInfo()
		return info != nil && info.NumAckPending == 1, state
	})
	eventually(t, 30*time.Second, "segment's output-blocked time to grow", func() (bool, string) {
		v, ok := scrape(t, metrics, opcontract.OutputBlockedSeconds)
		return ok && v > 0, fmt.Sprintf("%v (exported %v)", v, ok)
	})
	// A second puller on the segment consumer would get the document if its ack wait expired.
	segCons, err := js.Consumer(ctx, p.StreamName(), "segment")
	if err != nil {
		t.Fatal(err)
	}
	stolen, err := segCons.Fetch(1, jetstream.FetchMaxWait(4*ackWait))
	if err != nil {
		t.Fatal(err)
	}
	for m := range stolen.Messages() {
		t.Fatalf("after blocking for up to 4 ack waits the held input %s was redelivered", m.Subject())
	}
	if info, state := segInfo(); info == nil || info.NumAckPending != 1 || info.NumRedelivered != 0 {
		t.Fatalf("after 4 ack waits blocked, segment consumer: %s; want its input held, never redelivered", state)
	}
	if info, err := agg.Info(ctx); err != nil || info.NumPending != 1 {
		t.Fatalf("aggregate queue while full: %+v %v; want only the filler", info, err)
	}

	// Room downstream: the blocks are published and the document acked, once.
	msgs, err := agg.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "segment to publish its blocks", func() (bool, string) {
		info, err := agg.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		seg, state := segInfo()
		return info.NumPending == uint64(len(blocks)) && seg != nil && seg.NumAckPending == 0 && seg.NumPending == 0,
			fmt.Sprintf("aggregate pending %d of %d; segment %s", info.NumPending, len(blocks), state)
	})
	if info, state := segInfo(); info == nil || info.NumRedelivered != 0 {
		t.Fatalf("segment consumer: %s; want no redelivery", state)
	}

	// Blocked again (the blocks fill aggregate), then shut down: Run returns nil promptly.
	blocked0, _ := scrape(t, metrics, opcontract.OutputBlockedSeconds)
	publishRecord(t, ctx, js, p, "segment", p.Source(3, 1, 0))
	eventually(t, 30*time.Second, "segment to block on its second document", func() (bool, string) {
		info, state := segInfo()
		v, _ := scrape(t, metrics, opcontract.OutputBlockedSeconds)
		return info != nil && info.NumAckPending == 1 && v > blocked0, fmt.Sprintf("%s; blocked %v s (was %v)", state, v, blocked0)
	})
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v on shutdown while blocked, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15 s of shutdown while blocked")
	}
	if info, err := agg.Info(ctx); err != nil || info.NumPending != uint64(len(blocks)) {
		t.Fatalf("aggregate after shutdown: %+v %v; want only the first document's %d blocks", info, err, len(blocks))
	}
}

// A bounded stage reports its queue length in the units of its bound (undelivered + in
// service), an unbounded one undelivered records only, as before; both per live instance.
func TestQueueLengthUnitsFollowTheBound(t *testing.T) {
	info := &jetstream.ConsumerInfo{NumPending: 10, NumAckPending: 7}
	unbounded := &worker{}
	bounded := &worker{o: Options{QueueCap: 40}}
	if got := unbounded.queueShare(info, 3); got != 4 {
		t.Errorf("unbounded share of 10 undelivered over 3 instances = %d, want 4", got)
	}
	if got := bounded.queueShare(info, 2); got != 9 {
		t.Errorf("bounded share of 10 undelivered + 7 in service over 2 instances = %d, want 9", got)
	}
	if got := bounded.queueShare(info, 0); got != 17 {
		t.Errorf("bounded share with no instance seen = %d, want 17", got)
	}
}
