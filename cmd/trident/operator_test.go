package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/sim/worker"
)

// -queue-cap (or TRIDENT_QUEUE_CAP) reaches the worker: the stage announces its bound to its
// producers and exports its share of it; a negative bound is refused with the flag named.
func TestOperatorQueueCap(t *testing.T) {
	var help bytes.Buffer
	if err := runOperator(context.Background(), []string{"-h"}, io.Discard, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(help.String(), "-queue-cap") || !strings.Contains(help.String(), "TRIDENT_QUEUE_CAP") {
		t.Errorf("usage does not document -queue-cap and TRIDENT_QUEUE_CAP:\n%s", help.String())
	}
	err := runOperator(context.Background(), []string{"-queue-cap", "-1", "-pipeline", "pdfmini", "-stage", "aggregate"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-queue-cap") {
		t.Errorf("-queue-cap -1: err = %v, want it refused", err)
	}
	// A malformed variable is an error naming it, not a silent default.
	t.Setenv("TRIDENT_QUEUE_CAP", "2k")
	err = runOperator(context.Background(), []string{"-pipeline", "pdfmini", "-stage", "aggregate"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `TRIDENT_QUEUE_CAP="2k"`) {
		t.Errorf("TRIDENT_QUEUE_CAP=2k: err = %v, want it refused", err)
	}
	t.Setenv("TRIDENT_QUEUE_CAP", "-3")
	err = runOperator(context.Background(), []string{"-pipeline", "pdfmini", "-stage", "aggregate"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-3") {
		t.Errorf("TRIDENT_QUEUE_CAP=-3: err = %v, want it read and refused", err)
	}
	if testing.Short() {
		t.Skip("starts a NATS server")
	}
	t.Setenv("TRIDENT_QUEUE_CAP", "")
	srv, err := worker.StartNATSServer(worker.NATSOptions{Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	addr := harness.FreeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runOperator(runCtx, []string{"-pipeline", "pdfmini", "-stage", "aggregate", "-nats", srv.ClientURL(),
			"-storage", "memory", "-metrics-addr", addr, "-queue-cap", "12", "-log-level", "error"}, io.Discard, io.Discard)
	}()
	want := `trident_queue_capacity{operator="aggregate",pipeline="pdfmini"} 12`
	var body string
	for body = scrapeText(addr); !strings.Contains(body, want); body = scrapeText(addr) {
		if ctx.Err() != nil {
			t.Fatalf("/metrics never showed %q:\n%s", want, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	nc, js, err := worker.Connect(ctx, srv.ClientURL(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kv, err := js.KeyValue(ctx, worker.QueueCapBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "pdfmini.aggregate"); err != nil || string(e.Value()) != "12" {
		t.Errorf("announced bound: %v %v, want 12", e, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("operator returned %v on shutdown", err)
	}
}

// scrapeText returns the /metrics page at addr, "" if it is not served yet.
func scrapeText(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
