package planner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trident-sched/trident/planner/fsm"
)

// cutLayer is a raft stream layer over real loopback TCP that can be cut in both
// directions: Cut closes every connection it accepted or dialled and refuses new ones.
type cutLayer struct {
	net.Listener
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newCutLayer(addr string) (*cutLayer, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &cutLayer{Listener: l}, nil
}

func (l *cutLayer) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.cut {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns = append(l.conns, c)
		l.mu.Unlock()
		return c, nil
	}
}

func (l *cutLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	l.mu.Lock()
	cut := l.cut
	l.mu.Unlock()
	if cut {
		return nil, errors.New("partitioned")
	}
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return c, nil
}

func (l *cutLayer) set(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = cut
	if cut {
		for _, c := range l.conns {
			c.Close()
		}
		l.conns = nil
	}
}

// stepLog records which server called Step when.
type stepLog struct {
	mu    sync.Mutex
	calls []stepCall
}

type stepCall struct {
	server string
	at     time.Time
}

type recordingActuator struct {
	*fakeCluster
	id  string
	log *stepLog
}

func (r recordingActuator) Step(ctx context.Context, p *fsm.Pipeline, d fsm.Decision) (StepResult, error) {
	r.log.mu.Lock()
	r.log.calls = append(r.log.calls, stepCall{r.id, time.Now()})
	r.log.mu.Unlock()
	return StepResult{Status: fsm.StatusApplying}, nil // a long deployment
}

// TestLeaderPartitionFencing isolates the leader in both directions in the middle of a
// decision: the majority elects a new leader within 2x heartbeat + 2x election timeout
// (+1s slack), which resumes the decision; the isolated server stops acting on Nomad
// within 1s (VerifyLeader fencing, leader lease 250ms) and, after the heal, rejoins as a
// follower with the same state.
func TestLeaderPartitionFencing(t *testing.T) {
	fc := &fakeCluster{steps: map[uint64]int{}, nodes: []fsm.Node{{Name: "n1", CPU: 4, MemoryMB: 8192, GPUs: 2, GPUMemoryMB: 16000}}}
	sl := &stepLog{}
	c := newTestClusterOpts(t, 3, func(i int) *LoopConfig {
		return &LoopConfig{Interval: 100 * time.Millisecond, Actuator: recordingActuator{fc, fmt.Sprintf("p%d", i), sl}}
	}, true)
	li, _ := c.leader(10 * time.Second)
	raw, _ := json.Marshal(testPipeline())
	if code, body := c.do(http.MethodPut, c.peers[li].HTTPAddr+"/v1/pipelines/pdf", map[string]json.RawMessage{"job": raw}); code != 200 {
		t.Fatalf("register: HTTP %d %s", code, body)
	}
	waitFor(t, "the leader stepping a decision", 10*time.Second, func() bool {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		return len(sl.calls) > 2
	})
	old := c.peers[li].ID
	c.layers[li].set(true)
	t0 := time.Now()
	var ni int
	bound := 2*500*time.Millisecond + 2*500*time.Millisecond + time.Second
	waitFor(t, "a new leader in the majority", bound, func() bool {
		for i, s := range c.servers {
			if i != li && s.IsLeader() {
				ni = i
				return true
			}
		}
		return false
	})
	took := time.Since(t0)
	waitFor(t, "the new leader resuming the decision", 5*time.Second, func() bool {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		for _, cl := range sl.calls {
			if cl.server == c.peers[ni].ID && cl.at.After(t0) {
				return true
			}
		}
		return false
	})
	time.Sleep(1500 * time.Millisecond)
	if c.servers[li].IsLeader() {
		t.Fatalf("isolated server %s still claims leadership", old)
	}
	sl.mu.Lock()
	var late int
	for _, cl := range sl.calls {
		if cl.server == old && cl.at.After(t0.Add(time.Second)) {
			late++
		}
	}
	sl.mu.Unlock()
	if late > 0 {
		t.Fatalf("isolated server %s acted on Nomad %d times more than 1s after the partition", old, late)
	}
	t.Logf("leader %s isolated: %s elected after %v (bound %v); the old leader stopped acting", old, c.peers[ni].ID, took, bound)
	c.layers[li].set(false)
	waitEqual(t, c, 10*time.Second)
	if c.servers[li].IsLeader() && c.servers[ni].IsLeader() {
		t.Fatal("two leaders after the heal")
	}
}
