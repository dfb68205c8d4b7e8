package milp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// ErrThreadClosed is returned for a HiGHS run submitted to a closed Thread.
var ErrThreadClosed = errors.New("milp: the solver thread is closed")

// Thread is one dedicated OS thread that runs HiGHS, one call at a time. glibc gives
// every thread that calls malloc an arena of its own (up to 8 per core) and a per-thread
// cache, and keeps what a solve freed there; HiGHS runs on whichever thread the Go
// scheduler hands it unless every call goes through one Thread, so a long-running process
// (the planner leader) otherwise accumulates freed C memory in several arenas at once.
// Calls from concurrent solves sharing a Thread take turns; the wait counts against each
// call's deadline and ends early when its context does. Use HiGHS.Thread to solve on it.
type Thread struct {
	jobs   chan func()
	quit   chan struct{}
	exited chan struct{}
	once   sync.Once
}

// NewThread starts a solver thread. Close stops it.
func NewThread() *Thread {
	t := &Thread{jobs: make(chan func()), quit: make(chan struct{}), exited: make(chan struct{})}
	go t.serve()
	return t
}

// serve runs the submitted calls on its locked OS thread until Close. The goroutine exits
// still locked, so the Go runtime ends the OS thread with it.
func (t *Thread) serve() {
	runtime.LockOSThread()
	defer close(t.exited)
	for {
		select {
		case f := <-t.jobs:
			f()
		case <-t.quit:
			return
		}
	}
}

// submit waits until the thread takes f (it then runs f at once) and returns nil. It
// returns an error without f having run when ctx ends or deadline fires first, or when the
// thread is closed.
func (t *Thread) submit(ctx context.Context, deadline <-chan time.Time, f func()) error {
	select {
	case t.jobs <- f:
		return nil
	case <-t.quit:
		return ErrThreadClosed
	case <-deadline:
		return errors.New("the solver thread stayed busy until the deadline")
	case <-ctx.Done():
		return fmt.Errorf("waiting for the solver thread: %w", ctx.Err())
	}
}

// Close stops the thread after the call it runs, if any, returns; calls submitted later
// fail with ErrThreadClosed. It is safe to call more than once.
func (t *Thread) Close() {
	t.once.Do(func() { close(t.quit) })
	<-t.exited
}
