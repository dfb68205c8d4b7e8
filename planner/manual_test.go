package planner

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/trident-sched/trident/planner/fsm"
)

// virtualClock is a settable clock for a loop driven by Server.Round.
type virtualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *virtualClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *virtualClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// manualServer starts a planner with raft in memory, auto-registration and a manual loop
// (10 s interval) on clk, with act as its actuator, and waits for it to lead. It stops
// when the test ends; ctx is cancelled then.
func manualServer(t *testing.T, id string, act Actuator, clk *virtualClock, set ...func(*LoopConfig)) (*Server, context.Context) {
	t.Helper()
	lc := &LoopConfig{Interval: 10 * time.Second, Actuator: act, AutoRegister: true, Clock: clk.now, Manual: true}
	for _, f := range set {
		f(lc)
	}
	srv, err := New(Config{ID: id, InMemory: true, HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Loop: lc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-served })
	waitFor(t, "in-memory leader", 5*time.Second, srv.IsLeader)
	return srv, ctx
}

// A planner with raft in memory and a manual loop runs its rounds only when Round is
// called, on the virtual clock: the first round registers the pipeline, solves it and
// starts applying the decision; the decision completes after the actuator's delay in
// rounds; its stamp is the virtual time; and nothing runs between Round calls.
func TestManualRoundsOnAVirtualClock(t *testing.T) {
	clk := &virtualClock{t: time.Unix(1_000_000, 0)}
	p := testPipeline()
	fc := &fakeCluster{steps: map[uint64]int{}, delay: 2, live: &p,
		nodes: []fsm.Node{{Name: "n1", CPU: 16, MemoryMB: 32768, GPUs: 4, GPUMemoryMB: 16000}}}
	act := &finder{fakeCluster: fc, ids: []string{"docs"}, parses: map[string]int{}}
	srv, ctx := manualServer(t, "sim", act, clk)

	if err := srv.Round(ctx, true); err != nil {
		t.Fatal(err)
	}
	var dec fsm.Decision
	var ok bool
	var prog fsm.Progress
	read := func() {
		srv.FSM().Read(func(st *fsm.State) { dec, ok = st.LatestDecision("docs"); prog = st.Progress["docs"] })
	}
	read()
	if !ok {
		t.Fatal("the first round committed no decision")
	}
	if want := clk.now().UnixMilli(); dec.UnixMilli != want {
		t.Errorf("decision stamped %d, want the virtual clock's %d", dec.UnixMilli, want)
	}
	if prog.Status != fsm.StatusApplying {
		t.Errorf("after the first round the decision is %q, want applying", prog.Status)
	}
	// Nothing runs between rounds: the loop has no ticker of its own.
	time.Sleep(300 * time.Millisecond)
	if n := srv.loop.Stats().Rounds; n != 2 {
		t.Errorf("%d rounds ran, want 2 (the round and the one that starts applying)", n)
	}
	clk.advance(10 * time.Second)
	if err := srv.Round(ctx, false); err != nil {
		t.Fatal(err)
	}
	read()
	if prog.Decision != dec.Index || prog.Status != fsm.StatusDone {
		t.Errorf("after the actuator's two steps progress is %+v, want decision %d done", prog, dec.Index)
	}
}

// Round refuses a server whose loop runs by itself.
func TestRoundNeedsAManualLoop(t *testing.T) {
	srv, err := New(Config{ID: "a", InMemory: true, Logger: slog.New(slog.DiscardHandler), Loop: &LoopConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Round(context.Background(), true); err == nil {
		t.Fatal("Round on a self-running loop: want an error")
	}
}
