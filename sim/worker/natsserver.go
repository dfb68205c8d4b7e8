package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSOptions configure the embedded NATS server of the example pipelines.
type NATSOptions struct {
	Host     string // always loopback in this project: 127.0.0.1
	Port     int    // client port; -1 picks a free one
	HTTPPort int    // monitoring port (/varz, /jsz, /healthz); 0 = none
	StoreDir string // JetStream file store
	Name     string // server name
}

// StartNATSServer starts an embedded nats-server with JetStream and waits until it accepts
// connections. The caller must Shutdown it.
func StartNATSServer(o NATSOptions) (*server.Server, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Name == "" {
		o.Name = "trident-nats"
	}
	s, err := server.NewServer(&server.Options{
		ServerName: o.Name,
		Host:       o.Host,
		Port:       o.Port,
		HTTPHost:   o.Host,
		HTTPPort:   o.HTTPPort,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("nats-server options: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("nats-server on %s:%d not ready after 15s", o.Host, o.Port)
	}
	return s, nil
}

// RunNATSServer runs an embedded nats-server until ctx ends, then shuts it down cleanly
// (flushing the JetStream store). A nil log discards the startup message.
func RunNATSServer(ctx context.Context, o NATSOptions, log *slog.Logger) error {
	log = orDiscard(log)
	s, err := StartNATSServer(o)
	if err != nil {
		return err
	}
	log.Info("nats-server ready", "url", s.ClientURL(), "store", o.StoreDir)
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}
