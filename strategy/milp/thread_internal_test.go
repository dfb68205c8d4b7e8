package milp

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Calls submitted to one Thread from many goroutines run one at a time, all on the same
// OS thread.
func TestThreadSerialisesOnOneOSThread(t *testing.T) {
	th := NewThread()
	defer th.Close()
	var running, maxRunning atomic.Int32
	var mu sync.Mutex
	tids := map[int]int{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				err := th.submit(context.Background(), nil, func() {
					n := running.Add(1)
					for {
						m := maxRunning.Load()
						if n <= m || maxRunning.CompareAndSwap(m, n) {
							break
						}
					}
					mu.Lock()
					tids[syscall.Gettid()]++
					mu.Unlock()
					running.Add(-1)
				})
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	// submit returns once the thread has taken f, not when f is done: one more call
	// through the thread orders the check after the last of them.
	if err := th.submit(context.Background(), nil, func() {}); err != nil {
		t.Fatal(err)
	}
	if m := maxRunning.Load(); m != 1 {
		t.Errorf("%d calls ran at once, want 1", m)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tids) != 1 {
		t.Errorf("calls ran on %d OS threads (%v), want 1", len(tids), tids)
	}
	for _, n := range tids {
		if n != 160 {
			t.Errorf("%d calls ran, want 160", n)
		}
	}
}

// A call waiting for a busy Thread gives up, without running, when its context ends, when
// its deadline fires, or when the thread is closed.
func TestThreadWaitRespectsContextDeadlineAndClose(t *testing.T) {
	th := NewThread()
	release := make(chan struct{})
	started := make(chan struct{})
	if err := th.submit(context.Background(), nil, func() { close(started); <-release }); err != nil {
		t.Fatal(err)
	}
	<-started
	var ran atomic.Bool
	never := func() { ran.Store(true) }

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := th.submit(ctx, nil, never); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v, want context.Canceled", err)
	}
	fired := make(chan time.Time, 1)
	fired <- time.Time{}
	if err := th.submit(context.Background(), fired, never); err == nil {
		t.Error("deadline fired: err = nil, want an error")
	}
	close(release)

	closed := make(chan struct{})
	go func() { th.Close(); close(closed) }()
	<-closed
	if err := th.submit(context.Background(), nil, never); !errors.Is(err, ErrThreadClosed) {
		t.Errorf("closed thread: err = %v, want ErrThreadClosed", err)
	}
	th.Close() // a second Close is harmless
	if ran.Load() {
		t.Error("a call that gave up ran anyway")
	}
}

// A solve whose HiGHS calls cannot get the busy thread before its context ends still
// returns a checked plan (the greedy one), as a cancelled solve does without a thread.
func TestSolveOnBusyThreadWithCancelledContext(t *testing.T) {
	th := NewThread()
	defer th.Close()
	release := make(chan struct{})
	started := make(chan struct{})
	if err := th.submit(context.Background(), nil, func() { close(started); <-release }); err != nil {
		t.Fatal(err)
	}
	<-started
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := threadTestProblem()
	sol, err := HiGHS{Thread: th}.Solve(ctx, p, Options{AlwaysMIP: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, sol); err != nil {
		t.Fatal(err)
	}
	if sol.Source == "highs" {
		t.Errorf("plan source %q: HiGHS ran although the thread was busy and ctx cancelled", sol.Source)
	}
}

// A solve on a Thread gives the same plan as one without.
func TestSolveOnThreadMatchesUnthreaded(t *testing.T) {
	th := NewThread()
	defer th.Close()
	p := threadTestProblem()
	a, err := HiGHS{}.Solve(context.Background(), p, Options{AlwaysMIP: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := HiGHS{Thread: th}.Solve(context.Background(), p, Options{AlwaysMIP: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Objective != b.Objective || a.Source != b.Source {
		t.Errorf("on a thread: objective %v from %s, without: %v from %s", b.Objective, b.Source, a.Objective, a.Source)
	}
}

// threadTestProblem is two operators on two nodes.
func threadTestProblem() *Problem {
	return &Problem{
		Operators: []Operator{
			{Name: "src", CPU: 1, MemMB: 256, Capacity: 10, Amplification: 1, OutputBytes: 100},
			{Name: "work", CPU: 1, MemMB: 256, Capacity: 5, Amplification: 1},
		},
		Nodes: []Node{{Name: "n1", CPU: 4, MemMB: 4096, EgressBps: 1e9}, {Name: "n2", CPU: 4, MemMB: 4096, EgressBps: 1e9}},
	}
}
