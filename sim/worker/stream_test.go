package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trident-sched/trident/e2e/harness"
)

// TestConnectNilLoggerRetriesUntilDeadline checks that Connect with a nil logger retries a
// server that is not (yet) listening and reports the deadline, instead of panicking on the
// first retry message (a clean-clone CI run crashed exactly there).
func TestConnectNilLoggerRetriesUntilDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	nc, js, err := Connect(ctx, "nats://"+harness.FreeAddr(t), "test", nil)
	if err == nil || nc != nil || js != nil {
		t.Fatalf("Connect to a closed port: conn %v, js %v, err %v; want an error", nc, js, err)
	}
	if !strings.Contains(err.Error(), "deadline exceeded") || !strings.Contains(err.Error(), "last error") {
		t.Fatalf("error %q does not name the deadline and the last dial error", err)
	}
}
