package worker

// Bounded stage queues with credit-based backpressure.
//
// A stage started with Options.QueueCap > 0 announces the bound of its input queue (records
// undelivered + in service: NumPending + NumAckPending of its consumer) in QueueCapBucket.
// Every producer (an upstream stage) caches, per downstream stage it publishes to, the
// announced bound and the stage's backlog, and before publishing a completion's outputs it
// reserves credit: it waits while any destination's estimated backlog is at or above its
// bound. The estimate is the backlog read at the last refresh plus the outputs this instance
// reserved since and that the read may not include, so one instance (all its threads) never
// overshoots a bound by more than the outputs of one completion. The bound is soft across
// instances: each instance sees the others' outputs only at its next refresh, so a stage's
// backlog can exceed its bound by what the other producers publish within one backlogRefresh,
// plus one completion per producer instance. A bound that cannot be read (no bucket, no
// consumer, NATS unavailable) does not block: liveness wins over the bound.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// QueueCapBucket is the KV bucket where each bounded stage announces the bound of its input
// queue: key <pipeline>.<stage>, value the bound in records (decimal). No key means unbounded.
const QueueCapBucket = "trident_queue_caps"

// QueueCapTTL is how long an announced bound outlives its last announcement: a bounded
// stage's instances re-announce it every boundRefresh, so the bound of a stage that no
// longer runs (its group removed from the job) stops holding its producers back.
const QueueCapTTL = 30 * time.Second

// Refresh periods of a producer's view of its downstream stages: the backlog of a bounded
// stage (one consumer-info call per stage) and the announced bound (one KV read per stage).
// A new or changed bound therefore takes effect within boundRefresh.
const (
	backlogRefresh = 250 * time.Millisecond
	boundRefresh   = 5 * time.Second
	probeTimeout   = 2 * time.Second
)

// queueCapKey is the QueueCapBucket key of a stage.
func queueCapKey(p *Pipeline, stage string) string { return p.Name + "." + stage }

// queueCapKV returns QueueCapBucket, creating it with the given storage if it does not exist
// (an existing bucket's config is never rewritten).
func queueCapKV(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, QueueCapBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: QueueCapBucket, Storage: storage, History: 1, TTL: QueueCapTTL})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, QueueCapBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", QueueCapBucket, err)
	}
	return kv, nil
}

// existingQueueCapKV returns QueueCapBucket, or nil when it does not exist (no stage was
// ever bounded).
func existingQueueCapKV(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, QueueCapBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", QueueCapBucket, err)
	}
	return kv, nil
}

// announceQueueCap records a stage's input queue bound for its producers, or, with bound 0,
// removes a bound an earlier run announced (the latest instance to start wins).
func announceQueueCap(ctx context.Context, js jetstream.JetStream, p *Pipeline, stage string, bound int, storage jetstream.StorageType) error {
	key := queueCapKey(p, stage)
	if bound <= 0 {
		kv, err := existingQueueCapKV(ctx, js)
		if kv == nil {
			return err // nil: nothing was ever bounded
		}
		if err := kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("clear queue bound %s: %w", key, err)
		}
		return nil
	}
	kv, err := queueCapKV(ctx, js, storage)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, key, []byte(strconv.Itoa(bound))); err != nil {
		return fmt.Errorf("announce queue bound %s: %w", key, err)
	}
	return nil
}

// queueProbe reads a downstream stage's announced bound and its backlog.
type queueProbe interface {
	Bound(ctx context.Context, stage string) (int64, error)   // 0 = unbounded
	Backlog(ctx context.Context, stage string) (int64, error) // undelivered + in service
}

// natsProbe reads bounds from QueueCapBucket and backlogs from the stages' consumers. It is
// not safe for concurrent use (credits serializes its calls).
type natsProbe struct {
	js jetstream.JetStream
	p  *Pipeline
	kv jetstream.KeyValue // nil until the bucket exists
}

// Bound returns the stage's announced bound; no bucket or no key is 0 (unbounded).
func (n *natsProbe) Bound(ctx context.Context, stage string) (int64, error) {
	if n.kv == nil {
		kv, err := existingQueueCapKV(ctx, n.js)
		if kv == nil {
			return 0, err // nil: no bucket, so unbounded
		}
		n.kv = kv
	}
	key := queueCapKey(n.p, stage)
	e, err := n.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("queue bound %s: %w", key, err)
	}
	b, err := strconv.ParseInt(strings.TrimSpace(string(e.Value())), 10, 64)
	if err != nil || b < 0 {
		return 0, fmt.Errorf("queue bound %s = %q: not a non-negative integer", key, e.Value())
	}
	return b, nil
}

// Backlog returns NumPending + NumAckPending of the stage's consumer (one info request).
func (n *natsProbe) Backlog(ctx context.Context, stage string) (int64, error) {
	c, err := n.js.Consumer(ctx, n.p.StreamName(), stage)
	if err != nil {
		return 0, fmt.Errorf("consumer %s of %s: %w", stage, n.p.StreamName(), err)
	}
	info := c.CachedInfo()
	return int64(info.NumPending) + int64(info.NumAckPending), nil
}

// credits is one producer instance's view of its downstream stages' bounds, shared by its
// threads.
type credits struct {
	probe queueProbe
	log   *slog.Logger
	now   func() time.Time

	mu     sync.Mutex
	stages map[string]*downstream
}

// newCredits returns a producer's credits over probe, knowing nothing yet.
func newCredits(probe queueProbe, log *slog.Logger) *credits {
	return &credits{probe: probe, log: orDiscard(log), now: time.Now, stages: map[string]*downstream{}}
}

// downstream is the cached state of one destination stage.
type downstream struct {
	bound                int64 // 0 = unbounded
	boundAt, backlogAt   time.Time
	backlog              int64 // at backlogAt; -1 = unknown (does not block)
	reserved, settled    int64 // outputs this instance reserved / finished publishing, ever
	seen                 int64 // settled when backlog was read: those are in backlog
	boundErr, backlogErr bool  // a read is failing (logged once per episode)
	reading              bool  // a thread is reading the bound or backlog (without the lock)
}

// estimate is the last backlog read plus the outputs reserved that the read may not include.
func (d *downstream) estimate() int64 { return d.backlog + d.reserved - d.seen }

// full reports that the stage is bounded, its backlog known, and its estimate at the bound.
func (d *downstream) full() bool { return d.bound > 0 && d.backlog >= 0 && d.estimate() >= d.bound }

// acquire reserves need (outputs per destination stage) unless a destination is full or ctx
// has ended (a failed read then is no reason to publish). It first re-reads the stale bounds
// and backlogs that no other thread is reading, without holding the lock: a slow read delays
// only its caller, and the other threads decide on the cached state meanwhile.
func (c *credits) acquire(ctx context.Context, need map[string]int) bool {
	if ctx.Err() != nil {
		return false
	}
	for _, stage := range c.claimStale(need) {
		c.read(ctx, stage)
	}
	if ctx.Err() != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for stage := range need {
		if c.stages[stage].full() {
			return false
		}
	}
	for stage, n := range need {
		c.stages[stage].reserved += int64(n)
	}
	return true
}

// settle marks reserved outputs as published (or abandoned): the next backlog read has them.
func (c *credits) settle(need map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for stage, n := range need {
		if d := c.stages[stage]; d != nil {
			d.settled += int64(n)
		}
	}
}

// claimStale returns need's stages whose bound or backlog is stale and that no other thread
// is reading, marked as being read by the caller.
func (c *credits) claimStale(need map[string]int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	var mine []string
	for stage := range need {
		d := c.stages[stage]
		if d == nil {
			d = &downstream{backlog: -1}
			c.stages[stage] = d
		}
		if d.reading {
			continue
		}
		if now.Sub(d.boundAt) >= boundRefresh || (d.bound > 0 && now.Sub(d.backlogAt) >= backlogRefresh) {
			d.reading = true
			mine = append(mine, stage)
		}
	}
	return mine
}

// read re-reads a claimed stage's bound (when stale) and then its backlog (when stale and
// the stage is bounded), calling the probe without the lock, and stores the results.
func (c *credits) read(ctx context.Context, stage string) {
	c.mu.Lock()
	d := c.stages[stage]
	now := c.now()
	readBound := now.Sub(d.boundAt) >= boundRefresh
	if readBound {
		d.boundAt = now
	}
	bound := d.bound
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		d.reading = false
		c.mu.Unlock()
	}()

	if readBound {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		b, err := c.probe.Bound(pctx, stage)
		cancel()
		if err != nil && ctx.Err() != nil {
			return // shutting down: keep the cached state, acquire refuses anyway
		}
		c.mu.Lock()
		c.report(&d.boundErr, stage, "queue bound", err) // on error the last known bound stays
		if err == nil {
			d.bound, bound = b, b
		}
		c.mu.Unlock()
	}

	c.mu.Lock()
	if bound <= 0 || now.Sub(d.backlogAt) < backlogRefresh {
		c.mu.Unlock()
		return
	}
	d.backlogAt = now
	// Outputs settled before the read are in the backlog it returns. Those settled while it
	// is in flight may be counted twice, which errs towards blocking early.
	seen := d.settled
	c.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	n, err := c.probe.Backlog(pctx, stage)
	cancel()
	if err != nil && ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.report(&d.backlogErr, stage, "backlog", err)
	if err != nil {
		d.backlog = -1
		return
	}
	d.backlog, d.seen = n, seen
}

// report logs the start and the end of an episode of failing reads. The caller holds c.mu.
func (c *credits) report(failing *bool, stage, what string, err error) {
	switch {
	case err != nil && !*failing:
		c.log.Warn("cannot read downstream "+what+"; not applying backpressure to it", "stage", stage, "err", err)
	case err == nil && *failing:
		c.log.Info("downstream "+what+" readable again", "stage", stage)
	}
	*failing = err != nil
}

// holding is what a completion's wait for downstream room stalls: msgs lists the unacked
// inputs to keep alive (built only once a wait begins: most completions never wait), and
// hb is the time of their last InProgress.
type holding struct {
	msgs func() []jetstream.Msg
	hb   *time.Time
}

// held is the holding of a fixed set of messages.
func held(msgs []jetstream.Msg, hb *time.Time) holding {
	return holding{msgs: func() []jetstream.Msg { return msgs }, hb: hb}
}

// keepAlive tells JetStream that msgs are still in progress once a third of the ack wait has
// passed since *hb.
func (w *worker) keepAlive(msgs []jetstream.Msg, hb *time.Time) {
	if time.Since(*hb) < w.o.AckWait/3 {
		return
	}
	for _, m := range msgs {
		_ = m.InProgress()
	}
	*hb = time.Now()
}

// destinations counts outs per downstream stage (Operator.Next, the stage Pipeline.Route
// sends them to); the sink ("") is never bounded and is left out. A nil map means nothing to
// reserve.
func (w *worker) destinations(outs []Record) map[string]int {
	var need map[string]int
	for _, r := range outs {
		next := w.op.Next(r)
		if next == "" {
			continue
		}
		if need == nil {
			need = map[string]int{}
		}
		need[next]++
	}
	return need
}

// awaitCredit waits until every destination in need has room for its outputs and reserves
// it. While waiting, hold's records (every record the wait stalls: a CPU thread's one, a
// batch, or an LLM engine's finished and running sequences) leave the busy time and enter
// the output-blocked time, and their messages are kept alive. It returns ctx's error if ctx
// ends first.
func (w *worker) awaitCredit(ctx context.Context, need map[string]int, hold holding) error {
	if len(need) == 0 || w.credits.acquire(ctx, need) {
		return nil
	}
	w.log.Debug("output blocked by a full downstream queue", "destinations", need)
	msgs := hold.msgs()
	w.t.block(len(msgs))
	defer w.t.unblock(len(msgs))
	// Poll often enough that keepAlive fires close to a third of the ack wait; a poll between
	// backlog refreshes only re-checks the cached state.
	poll := backlogRefresh
	if a := w.o.AckWait / 6; a > 0 && a < poll {
		poll = a
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		w.keepAlive(msgs, hold.hb)
		if w.credits.acquire(ctx, need) {
			return nil
		}
	}
}
