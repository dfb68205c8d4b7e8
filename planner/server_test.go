package planner

import (
	"testing"
	"time"
)

func TestRaftConfigCommitTimeout(t *testing.T) {
	rc := raftConfig(Config{ID: "p1"})
	if rc.CommitTimeout != DefaultCommitTimeout {
		t.Errorf("default commit timeout = %v, want %v", rc.CommitTimeout, DefaultCommitTimeout)
	}
	if rc.HeartbeatTimeout != time.Second || rc.ElectionTimeout != time.Second {
		t.Errorf("default heartbeat/election timeouts = %v/%v, want raft's 1s", rc.HeartbeatTimeout, rc.ElectionTimeout)
	}
	rc = raftConfig(Config{ID: "p1", CommitTimeout: 5 * time.Millisecond, HeartbeatTimeout: 400 * time.Millisecond,
		ElectionTimeout: 300 * time.Millisecond, SnapshotThreshold: 16, SnapshotInterval: time.Second})
	if rc.CommitTimeout != 5*time.Millisecond {
		t.Errorf("commit timeout = %v, want the configured 5ms", rc.CommitTimeout)
	}
	if rc.HeartbeatTimeout != 400*time.Millisecond || rc.LeaderLeaseTimeout != 200*time.Millisecond || rc.ElectionTimeout != 300*time.Millisecond {
		t.Errorf("timeouts = heartbeat %v, lease %v, election %v; want 400ms, 200ms, 300ms", rc.HeartbeatTimeout, rc.LeaderLeaseTimeout, rc.ElectionTimeout)
	}
	if rc.SnapshotThreshold != 16 || rc.TrailingLogs != 16 || rc.SnapshotInterval != time.Second {
		t.Errorf("snapshot settings = %d/%d/%v, want 16/16/1s", rc.SnapshotThreshold, rc.TrailingLogs, rc.SnapshotInterval)
	}
	if string(rc.LocalID) != "p1" {
		t.Errorf("local ID = %q, want p1", rc.LocalID)
	}
}
