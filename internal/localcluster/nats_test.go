package localcluster

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// serve accepts connections on a loopback listener and hands each to greet.
func serve(t *testing.T, greet func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { greet(c); time.Sleep(5 * time.Second); c.Close() }()
		}
	}()
	return l.Addr().String()
}

// TestProbeNATSTellsNATSFromOtherPeers checks the probe RunNATS trusts: a NATS greeting
// passes, a peer that waits for the client to speak first (what took the NATS port in a
// CI run: a Nomad RPC or HTTP listener) fails within the probe's 3 s bound instead of
// hanging, and a peer greeting with something else fails naming what it said.
func TestProbeNATSTellsNATSFromOtherPeers(t *testing.T) {
	ctx := context.Background()
	nats := serve(t, func(c net.Conn) { _, _ = c.Write([]byte("INFO {\"server_id\":\"x\"}\r\n")) })
	if err := probeNATS(ctx, nats); err != nil {
		t.Fatalf("NATS greeting: %v", err)
	}

	silent := serve(t, func(net.Conn) {})
	start := time.Now()
	err := probeNATS(ctx, silent)
	// 3 s is the probe's own bound; 10 s leaves room for a loaded machine.
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("silent peer: err %v after %v, want an error within the 3 s bound", err, time.Since(start))
	}

	other := serve(t, func(c net.Conn) { _, _ = c.Write([]byte("SSH-2.0-OpenSSH\r\n")) })
	if err := probeNATS(ctx, other); err == nil || !strings.Contains(err.Error(), "SSH-2.0") {
		t.Fatalf("other greeting: err %v, want one naming the greeting", err)
	}
}
