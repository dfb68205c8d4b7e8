package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DatasetBucket is the JetStream KV bucket holding each pipeline's current dataset spec (key =
// pipeline name), so the verifier can recompute the expected final records.
const DatasetBucket = "trident_datasets"

// Spec describes a generated input dataset: Docs input records split into Regimes contiguous
// segments (regime r uses the pipeline's r-th workload type, cycling), in order.
type Spec struct {
	Pipeline string `json:"pipeline"`
	Docs     int    `json:"docs"`
	Regimes  int    `json:"regimes"`
	Seed     uint64 `json:"seed"`
}

// Validate checks the spec against the pipeline.
func (s Spec) Validate(p *Pipeline) error {
	if s.Pipeline != p.Name {
		return fmt.Errorf("dataset spec is for pipeline %q, not %q", s.Pipeline, p.Name)
	}
	if s.Docs < 1 {
		return fmt.Errorf("dataset spec: docs must be >= 1, got %d", s.Docs)
	}
	if s.Regimes < 1 {
		return fmt.Errorf("dataset spec: regimes must be >= 1, got %d", s.Regimes)
	}
	return nil
}

// Regime is the regime of the i-th input record.
func (s Spec) Regime(i int) int { return i * s.Regimes / s.Docs }

// Generate returns the spec's input records in publication order (pure).
func Generate(p *Pipeline, s Spec) []Record {
	out := make([]Record, s.Docs)
	for i := range out {
		out[i] = p.Source(s.Seed, i, s.Regime(i))
	}
	return out
}

// Expected runs the spec's inputs through every operator's Expand and Next (pure) and returns
// the IDs of the records that must reach the sink, each exactly once.
func Expected(p *Pipeline, s Spec) (map[string]struct{}, error) {
	if err := s.Validate(p); err != nil {
		return nil, err
	}
	ops := map[string]*Operator{}
	for _, o := range p.Operators {
		ops[o.Name] = o
	}
	want := map[string]struct{}{}
	type item struct {
		stage string
		rec   Record
	}
	var queue []item
	for _, r := range Generate(p, s) {
		queue = append(queue, item{p.Operators[0].Name, r})
	}
	for len(queue) > 0 {
		it := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		op, ok := ops[it.stage]
		if !ok {
			return nil, fmt.Errorf("pipeline %s routes to unknown operator %q", p.Name, it.stage)
		}
		for _, out := range op.Expand(it.rec) {
			if next := op.Next(out); next != "" {
				queue = append(queue, item{next, out})
				continue
			}
			if _, dup := want[out.ID]; dup {
				return nil, fmt.Errorf("pipeline %s derives final id %s twice", p.Name, out.ID)
			}
			want[out.ID] = struct{}{}
		}
	}
	return want, nil
}

// PublishOptions tune Publish.
type PublishOptions struct {
	Rate     float64 // input records per second; 0 = as fast as the stream acks
	Storage  jetstream.StorageType
	Progress func(done int) // called after each acked record (may be nil)
}

// Publish creates the pipeline stream, records the spec in DatasetBucket and publishes the
// spec's input records to the first operator's subject with Msg-Ids (re-running it with the
// same spec within the dedup window publishes nothing new).
func Publish(ctx context.Context, js jetstream.JetStream, p *Pipeline, s Spec, o PublishOptions) error {
	if err := s.Validate(p); err != nil {
		return err
	}
	if _, err := EnsureStream(ctx, js, p, o.Storage); err != nil {
		return err
	}
	if err := saveSpec(ctx, js, s, o.Storage); err != nil {
		return err
	}
	subj := p.Subject(p.Operators[0].Name)
	var interval time.Duration
	if o.Rate > 0 {
		interval = time.Duration(float64(time.Second) / o.Rate)
	}
	const window = 256
	pending := make([]jetstream.PubAckFuture, 0, window)
	flush := func() error {
		for _, f := range pending {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("publish to %s: %w", subj, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pending = pending[:0]
		return nil
	}
	next := time.Now()
	for i, r := range Generate(p, s) {
		if interval > 0 {
			next = next.Add(interval)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Until(next)):
			}
		}
		data, err := encodeRecord(r)
		if err != nil {
			return err
		}
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: subj, Data: data}, jetstream.WithMsgID(MsgID(subj, r.ID)))
		if err != nil {
			return fmt.Errorf("publish %s to %s: %w", r.ID, subj, err)
		}
		pending = append(pending, f)
		if len(pending) == window || interval > 0 {
			if err := flush(); err != nil {
				return err
			}
			if o.Progress != nil {
				o.Progress(i + 1)
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if o.Progress != nil {
		o.Progress(s.Docs)
	}
	return nil
}

func datasetKV(ctx context.Context, js jetstream.JetStream, storage jetstream.StorageType) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, DatasetBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: DatasetBucket, Storage: storage})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, DatasetBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", DatasetBucket, err)
	}
	return kv, nil
}

func saveSpec(ctx context.Context, js jetstream.JetStream, s Spec, storage jetstream.StorageType) error {
	kv, err := datasetKV(ctx, js, storage)
	if err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode dataset spec: %w", err)
	}
	if _, err := kv.Put(ctx, s.Pipeline, b); err != nil {
		return fmt.Errorf("store dataset spec of %s: %w", s.Pipeline, err)
	}
	return nil
}

// LoadSpec reads the spec of the pipeline's current dataset.
func LoadSpec(ctx context.Context, js jetstream.JetStream, pipeline string) (Spec, error) {
	var s Spec
	kv, err := js.KeyValue(ctx, DatasetBucket)
	if err != nil {
		return s, fmt.Errorf("no dataset generated yet (kv bucket %s): %w", DatasetBucket, err)
	}
	e, err := kv.Get(ctx, pipeline)
	if err != nil {
		return s, fmt.Errorf("no dataset generated yet for pipeline %s: %w", pipeline, err)
	}
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return s, fmt.Errorf("decode dataset spec of %s: %w", pipeline, err)
	}
	return s, nil
}

// Report is the verifier's account of a pipeline's sink.
type Report struct {
	Spec       Spec                `json:"spec"`
	Expected   int                 `json:"expected"`           // distinct final records the dataset must yield
	Received   int                 `json:"received"`           // sink messages of this dataset
	Unique     int                 `json:"unique"`             // distinct expected IDs among them
	Missing    int                 `json:"missing"`            // expected IDs not in the sink
	Duplicates int                 `json:"duplicates"`         // sink messages beyond the first per ID
	Unexpected int                 `json:"unexpected"`         // sink IDs of this dataset's seed it cannot produce
	Other      int                 `json:"other"`              // sink messages of datasets with other seeds (ignored)
	Samples    map[string][]string `json:"samples,omitempty"`  // a few IDs per problem kind
	Subjects   map[string]uint64   `json:"subjects,omitempty"` // messages stored per subject
}

// Complete reports whether every expected record reached the sink.
func (r Report) Complete() bool { return r.Missing == 0 }

// OK reports whether the sink holds exactly the expected records, each once.
func (r Report) OK() bool { return r.Missing == 0 && r.Duplicates == 0 && r.Unexpected == 0 }

// String summarises the report in one line.
func (r Report) String() string {
	verdict := "OK"
	if !r.OK() {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s: pipeline %s docs=%d regimes=%d seed=%d expected=%d received=%d unique=%d missing=%d duplicates=%d unexpected=%d other-datasets=%d",
		verdict, r.Spec.Pipeline, r.Spec.Docs, r.Spec.Regimes, r.Spec.Seed, r.Expected, r.Received, r.Unique, r.Missing, r.Duplicates, r.Unexpected, r.Other)
}

// Verify compares the pipeline's sink with the records its current dataset spec (the last
// `dataset gen`) must yield: none missing, none duplicated, none unexpected. Sink records of
// earlier datasets with other seeds are counted in Other and otherwise ignored, so successive
// runs on one stream need distinct seeds.
func Verify(ctx context.Context, js jetstream.JetStream, p *Pipeline) (Report, error) {
	rep := Report{Samples: map[string][]string{}}
	s, err := LoadSpec(ctx, js, p.Name)
	if err != nil {
		return rep, err
	}
	rep.Spec = s
	want, err := Expected(p, s)
	if err != nil {
		return rep, err
	}
	rep.Expected = len(want)
	seen, subjects, err := readSink(ctx, js, p)
	if err != nil {
		return rep, err
	}
	rep.Subjects = subjects
	sample := func(kind, id string) {
		if len(rep.Samples[kind]) < 5 {
			rep.Samples[kind] = append(rep.Samples[kind], id)
		}
	}
	prefix := datasetPrefix(s.Seed)
	for id, n := range seen {
		if !strings.HasPrefix(id, prefix) {
			rep.Other += n
			continue
		}
		rep.Received += n
		if _, ok := want[id]; !ok {
			rep.Unexpected++
			sample("unexpected", id)
			continue
		}
		rep.Unique++
		if n > 1 {
			rep.Duplicates += n - 1
			sample("duplicate", id)
		}
	}
	var missing []string
	for id := range want {
		if _, ok := seen[id]; !ok {
			missing = append(missing, id)
		}
	}
	rep.Missing = len(missing)
	sort.Strings(missing)
	for _, id := range missing {
		sample("missing", id)
	}
	return rep, nil
}

// readSink counts the record IDs on the sink subject and the messages stored per subject.
func readSink(ctx context.Context, js jetstream.JetStream, p *Pipeline) (map[string]int, map[string]uint64, error) {
	st, err := js.Stream(ctx, p.StreamName())
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", p.StreamName(), err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(p.Name+".>"))
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s info: %w", p.StreamName(), err)
	}
	subjects := info.State.Subjects
	total := int(subjects[p.SinkSubject()])
	seen := map[string]int{}
	if total == 0 {
		return seen, subjects, nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{p.SinkSubject()}})
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", p.SinkSubject(), err)
	}
	got := 0
	for got < total {
		batch, err := cons.Fetch(min(total-got, 1000), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", p.SinkSubject(), err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			r, err := decodeRecord(m.Data())
			if err != nil {
				return nil, nil, fmt.Errorf("sink message %d: %w", got+n, err)
			}
			seen[r.ID]++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, nil, fmt.Errorf("read %s: %w", p.SinkSubject(), err)
		}
		if n == 0 {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("read %s: stalled after %d of %d messages", p.SinkSubject(), got, total)
		}
		got += n
	}
	return seen, subjects, nil
}

// Drained reports whether every stage consumer of the pipeline has acked all its records
// (nothing pending, nothing in flight); when not, busy names a stage that is still working.
func Drained(ctx context.Context, js jetstream.JetStream, p *Pipeline) (ok bool, busy string, err error) {
	for _, op := range p.Operators {
		c, err := js.Consumer(ctx, p.StreamName(), op.Name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return false, op.Name + ": no consumer yet", nil
		}
		if err != nil {
			return false, "", fmt.Errorf("consumer %s: %w", op.Name, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return false, "", fmt.Errorf("consumer %s info: %w", op.Name, err)
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			return false, fmt.Sprintf("%s: %d pending, %d unacked", op.Name, info.NumPending, info.NumAckPending), nil
		}
	}
	return true, "", nil
}

// WaitVerify re-runs Verify every poll until every expected record reached the sink and every
// stage is drained (so late redeliveries would have shown up as duplicates), or until ctx ends;
// it returns the last report.
func WaitVerify(ctx context.Context, js jetstream.JetStream, p *Pipeline, poll time.Duration) (Report, error) {
	for {
		rep, err := Verify(ctx, js, p)
		if err == nil && rep.Complete() {
			drained, _, derr := Drained(ctx, js, p)
			if derr == nil && drained {
				// re-read: records may have landed between the two looks
				return Verify(ctx, js, p)
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return rep, err
			}
			return rep, nil
		case <-time.After(poll):
		}
	}
}
