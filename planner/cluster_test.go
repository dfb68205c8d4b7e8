package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner/client"
	"github.com/trident-sched/trident/planner/fsm"
)

// testCluster is n in-process planner servers with real TCP raft transports on loopback.
type testCluster struct {
	t       testing.TB
	peers   []Peer
	dirs    []string
	servers []*Server
	cancels []context.CancelFunc
	done    []chan error
	loop    func(i int) *LoopConfig
	token   string
	// layers, when non-nil, are cuttable raft stream layers (one per server).
	layers []*cutLayer
	// tls, when set, runs raft (and the API) over TLS with these files.
	tls *pkiFiles
	// logs receives the servers' logs (default: discarded).
	logs slog.Handler
}

func newTestCluster(t testing.TB, n int, loop func(i int) *LoopConfig) *testCluster {
	return newTestClusterOpts(t, n, loop, false)
}

func newTestClusterOpts(t testing.TB, n int, loop func(i int) *LoopConfig, cuttable bool) *testCluster {
	return newTestClusterLogs(t, n, loop, cuttable, nil)
}

// newTestClusterLogs is newTestClusterOpts with the servers' logs sent to logs (nil:
// discarded).
func newTestClusterLogs(t testing.TB, n int, loop func(i int) *LoopConfig, cuttable bool, logs slog.Handler) *testCluster {
	t.Helper()
	// A port picked free can be taken by another process before a server binds it (the
	// suite runs packages in parallel): such a start is retried on new ports, at most
	// three times, as a production launcher would.
	for attempt := 1; ; attempt++ {
		c := &testCluster{t: t, loop: loop, token: "s3cret", logs: logs}
		if cuttable {
			c.layers = make([]*cutLayer, n)
		}
		for i := 0; i < n; i++ {
			c.peers = append(c.peers, Peer{ID: fmt.Sprintf("p%d", i), RaftAddr: harness.FreeAddr(t), HTTPAddr: "http://" + harness.FreeAddr(t)})
			c.dirs = append(c.dirs, t.TempDir())
		}
		c.servers = make([]*Server, n)
		c.cancels = make([]context.CancelFunc, n)
		c.done = make([]chan error, n)
		var err error
		for i := 0; i < n && err == nil; i++ {
			err = c.tryStart(i)
		}
		if err == nil {
			t.Cleanup(func() {
				for i := range c.servers {
					c.stop(i)
				}
			})
			return c
		}
		for i := range c.servers {
			c.stop(i)
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 3 {
			t.Fatalf("start the test cluster: %v", err)
		}
	}
}

// start starts server i (again, on its addresses and data dir) or fails the test.
func (c *testCluster) start(i int) {
	c.t.Helper()
	if err := c.tryStart(i); err != nil {
		c.t.Fatal(err)
	}
}

// tryStart starts server i on its addresses and data dir.
func (c *testCluster) tryStart(i int) error {
	var lc *LoopConfig
	if c.loop != nil {
		lc = c.loop(i)
	}
	var layer raft.StreamLayer
	if c.layers != nil {
		l, err := newCutLayer(c.peers[i].RaftAddr)
		if err != nil {
			return fmt.Errorf("start %s: %w", c.peers[i].ID, err)
		}
		c.layers[i], layer = l, l
	}
	s, err := New(Config{
		StreamLayer: layer,
		ID:          c.peers[i].ID, RaftAddr: c.peers[i].RaftAddr, HTTPAddr: c.peers[i].HTTPAddr[len("http://"):],
		DataDir: c.dirs[i], Peers: c.peers, Bootstrap: true, Token: c.token,
		RaftTLS: c.tls != nil, TLSCert: c.tls.certOr(), TLSKey: c.tls.keyOr(), TLSCA: c.tls.caOr(),
		HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
		SnapshotThreshold: 16, SnapshotInterval: 200 * time.Millisecond,
		Loop: lc, Logger: slog.New(c.logHandler()),
	})
	if err != nil {
		if layer != nil {
			_ = layer.Close()
		}
		return fmt.Errorf("start %s: %w", c.peers[i].ID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.servers[i], c.cancels[i], c.done[i] = s, cancel, make(chan error, 1)
	go func(ch chan error) { ch <- s.Serve(ctx) }(c.done[i])
	return nil
}

func (c *testCluster) logHandler() slog.Handler {
	if c.logs != nil {
		return c.logs
	}
	return slog.NewTextHandler(io.Discard, nil)
}

func (c *testCluster) stop(i int) {
	if c.servers[i] == nil {
		return
	}
	c.cancels[i]()
	<-c.done[i]
	c.servers[i] = nil
}

// leader waits for exactly one leader among the running servers.
func (c *testCluster) leader(timeout time.Duration) (int, time.Duration) {
	c.t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		idx := -1
		n := 0
		for i, s := range c.servers {
			if s != nil && s.IsLeader() {
				idx = i
				n++
			}
		}
		if n == 1 {
			return idx, time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no single leader within %v", timeout)
	return -1, 0
}

// do sends one request through the planner client (with its bounded retries) to the full
// URL u; it answers the HTTP status (200 for every 2xx) and the body, or the error message.
func (c *testCluster) do(method, u string, body any) (int, []byte) {
	c.t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, u, err)
	}
	cl, err := client.New(client.Config{Address: pu.Scheme + "://" + pu.Host, Token: c.token})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var raw json.RawMessage
	err = cl.Do(ctx, method, pu.RequestURI(), body, &raw)
	var se *client.StatusError
	switch {
	case err == nil:
		return http.StatusOK, raw
	case errors.As(err, &se):
		return se.Code, []byte(se.Message)
	default:
		c.t.Fatalf("%s %s: %v", method, u, err)
		return 0, nil
	}
}

func stateOf(s *Server) string {
	var b []byte
	s.FSM().Read(func(st *fsm.State) { b, _ = json.Marshal(st) })
	return string(b)
}

// TestClusterReplicatesForwardsAndRecovers: three servers elect one leader; a write sent to
// a follower is forwarded and replicated to all; a stopped follower catches up from a
// snapshot after restart; the token is enforced.
func TestClusterReplicatesForwardsAndRecovers(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li, _ := c.leader(10 * time.Second)
	f := (li + 1) % 3
	// Without a token: 403.
	resp, err := http.Post(c.peers[f].HTTPAddr+"/v1/observations", "application/json", bytes.NewReader([]byte(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no token: HTTP %d, want 403", resp.StatusCode)
	}
	inv := []fsm.Node{{Name: "n1", CPU: 4, MemoryMB: 8192}, {Name: "n2", CPU: 8, MemoryMB: 16384, GPUs: 1, GPUMemoryMB: 16000}}
	code, body := c.do(http.MethodPut, c.peers[f].HTTPAddr+"/v1/inventory", inv)
	if code != http.StatusOK {
		t.Fatalf("PUT inventory via follower: HTTP %d %s", code, body)
	}
	waitEqual(t, c, 5*time.Second)

	// Stop a follower, write enough to force snapshots+compaction, restart it.
	other := (li + 2) % 3
	c.stop(other)
	for k := 0; k < 40; k++ {
		inv[0].CPU = float64(4 + k)
		if code, body := c.do(http.MethodPut, c.peers[li].HTTPAddr+"/v1/inventory", inv); code != http.StatusOK {
			t.Fatalf("PUT inventory %d: HTTP %d %s", k, code, body)
		}
	}
	code, body = c.do(http.MethodPost, c.peers[li].HTTPAddr+"/v1/snapshot", nil)
	if code != http.StatusOK {
		t.Fatalf("snapshot: HTTP %d %s", code, body)
	}
	c.start(other)
	waitEqual(t, c, 10*time.Second)
	var got []fsm.Node
	code, body = c.do(http.MethodGet, c.peers[other].HTTPAddr+"/v1/inventory", nil)
	if err := json.Unmarshal(body, &got); err != nil || code != 200 || len(got) != 2 || got[0].CPU != 43 {
		t.Fatalf("restarted follower inventory: HTTP %d %s", code, body)
	}
}

// TestLeadershipTransferAndElectionBound: POST /v1/leadership/transfer moves leadership;
// stopping the leader yields a new one within 2*heartbeat + 2*election timeout (raft
// randomises both in [T, 2T]) plus 1s of scheduling slack on a loaded 2-core machine.
func TestLeadershipTransferAndElectionBound(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li, _ := c.leader(10 * time.Second)
	target := c.peers[(li+1)%3].ID
	code, body := c.do(http.MethodPost, c.peers[li].HTTPAddr+"/v1/leadership/transfer", map[string]string{"id": target})
	if code != http.StatusOK {
		t.Fatalf("transfer: HTTP %d %s", code, body)
	}
	ni, _ := c.leader(5 * time.Second)
	if c.peers[ni].ID != target {
		t.Fatalf("leader after transfer is %s, want %s", c.peers[ni].ID, target)
	}
	c.stop(ni)
	bound := 2*500*time.Millisecond + 2*500*time.Millisecond + time.Second
	_, took := c.leader(bound)
	t.Logf("new leader %v after the leader stopped (bound %v)", took, bound)
}

func waitEqual(t *testing.T, c *testCluster, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var states []string
		for _, s := range c.servers {
			if s != nil {
				states = append(states, stateOf(s))
			}
		}
		same := true
		for _, s := range states[1:] {
			same = same && s == states[0]
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas did not converge within %v:\n%s", timeout, states)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
