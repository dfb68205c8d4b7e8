package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DedupWindow is how long JetStream remembers Msg-Ids of a pipeline stream. It must exceed the
// longest time between a crashed publish and its redelivered retry, which includes any time
// the retry waits for room in a bounded downstream queue (backpressure.go); a demo run is far
// shorter.
const DedupWindow = 2 * time.Hour

// Connect dials NATS (retrying until ctx ends, so operators may start before the server) and
// returns the connection and its JetStream context. A nil log discards the retry messages.
func Connect(ctx context.Context, url, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
	log = orDiscard(log)
	var nc *nats.Conn
	err := retry(ctx, log, "connect to NATS "+url, func() error {
		var err error
		nc, err = nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond))
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream on %s: %w", url, err)
	}
	return nc, js, nil
}

// EnsureStream creates or updates the pipeline's stream: subjects <pipeline>.>, limits
// retention (the sink subject is kept for the verifier), Msg-Id dedup over DedupWindow.
func EnsureStream(ctx context.Context, js jetstream.JetStream, p *Pipeline, storage jetstream.StorageType) (jetstream.Stream, error) {
	cfg := jetstream.StreamConfig{
		Name:       p.StreamName(),
		Subjects:   []string{p.Name + ".>"},
		Retention:  jetstream.LimitsPolicy,
		Storage:    storage,
		Duplicates: DedupWindow,
		Discard:    jetstream.DiscardOld,
		Replicas:   1,
	}
	s, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		return s, nil // never rewrite a live stream's config (e.g. its storage type)
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("look up stream %s: %w", cfg.Name, err)
	}
	s, err = js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// EnsureConsumer creates or binds the durable pull consumer of a stage. All instances of the
// operator share it, so JetStream splits the stage's records between them.
func EnsureConsumer(ctx context.Context, s jetstream.Stream, p *Pipeline, stage string, ackWait time.Duration) (jetstream.Consumer, error) {
	c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       stage,
		FilterSubject: p.Subject(stage),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 20000,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", stage, s.CachedInfo().Config.Name, err)
	}
	return c, nil
}

// orDiscard returns log, or a logger that discards everything when log is nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// retry runs fn until it succeeds or ctx ends, backing off up to 2 s.
func retry(ctx context.Context, log *slog.Logger, what string, fn func() error) error {
	wait := 100 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		log.Debug("retrying", "what", what, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
