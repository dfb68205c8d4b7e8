package soakbench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ParseStat returns utime and stime (fields 14 and 15 of proc(5), in clock ticks) from the
// text of /proc/<pid>/stat. The command name (field 2) is in parentheses and may itself
// contain spaces and parentheses, so fields are counted from the last ')'.
func ParseStat(text string) (utime, stime uint64, err error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return 0, 0, errors.New("parse /proc/<pid>/stat: no ')' closing the command name")
	}
	// f[0] is field 3 (state), so field n is f[n-3].
	f := strings.Fields(text[i+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("parse /proc/<pid>/stat: %d fields after the command name, want at least 13", len(f))
	}
	if utime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("parse /proc/<pid>/stat utime: %w", err)
	}
	if stime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("parse /proc/<pid>/stat stime: %w", err)
	}
	return utime, stime, nil
}

// ParseVmRSS returns the resident set size in bytes from the text of /proc/<pid>/status
// (its "VmRSS: <n> kB" line).
func ParseVmRSS(text string) (uint64, error) { return parseStatusKB(text, "VmRSS") }

// parseStatusKB returns the value in bytes of the "<key>: <n> kB" line of a
// /proc/<pid>/status text.
func parseStatusKB(text, key string) (uint64, error) {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, key+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("parse /proc/<pid>/status: %s line %q is not \"<n> kB\"", key, strings.TrimSpace(line))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/<pid>/status %s: %w", key, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("parse /proc/<pid>/status: no %s line (the process has exited or is a zombie)", key)
}

// procSample is one reading of a process's CPU time and resident memory.
type procSample struct {
	// Ticks is utime + stime in clock ticks.
	Ticks uint64
	// RSS is VmRSS in bytes; Anon its private anonymous part (RssAnon: heaps, stacks),
	// without the file-backed pages (the binary's code, first touched as new code paths
	// run, and mapped files such as the raft log).
	RSS, Anon uint64
}

// readProc reads pid's CPU time and RSS from /proc.
func readProc(pid int) (procSample, error) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	u, s, err := ParseStat(string(st))
	if err != nil {
		return procSample{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	rss, err := ParseVmRSS(string(status))
	if err != nil {
		return procSample{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	anon, err := parseStatusKB(string(status), "RssAnon")
	if err != nil {
		return procSample{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return procSample{Ticks: u + s, RSS: rss, Anon: anon}, nil
}

// DefaultClockTick is the clock-tick rate assumed when `getconf CLK_TCK` is unavailable:
// Linux's USER_HZ, 100 on every mainstream architecture.
const DefaultClockTick = 100

// ClockTick returns the clock ticks per second of /proc/<pid>/stat's CPU times from
// `getconf CLK_TCK`. When getconf fails it returns DefaultClockTick and assumed true.
func ClockTick(ctx context.Context) (hz float64, assumed bool) {
	out, err := exec.CommandContext(ctx, "getconf", "CLK_TCK").Output()
	if err != nil {
		return DefaultClockTick, true
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || v <= 0 {
		return DefaultClockTick, true
	}
	return v, false
}

// PerInterval converts count events over elapsed into events per interval
// (count / elapsed * interval); 0 when elapsed is not positive.
func PerInterval(count uint64, elapsed, interval time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(count) / elapsed.Seconds() * interval.Seconds()
}

// AtMostOnePerInterval reports whether count events over elapsed are at most one per
// interval, allowing one more for the window's edges: a window of n intervals that is not
// aligned with the ticker holds n+1 ticks when it starts just before one.
func AtMostOnePerInterval(count uint64, elapsed, interval time.Duration) bool {
	if interval <= 0 {
		return false
	}
	return float64(count) <= math.Floor(elapsed.Seconds()/interval.Seconds())+1
}

// CPUPercent is ticks of CPU time (at hz ticks per second) over wall time, as a percentage
// of one core; 0 when wall or hz is not positive.
func CPUPercent(ticks uint64, hz float64, wall time.Duration) float64 {
	if wall <= 0 || hz <= 0 {
		return 0
	}
	return float64(ticks) / hz / wall.Seconds() * 100
}

// Ratio returns a/b, or 0 when b is 0 (JSON has no NaN).
func Ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Growth returns (end-start)/start, or 0 when start is 0.
func Growth(start, end uint64) float64 {
	if start == 0 {
		return 0
	}
	return (float64(end) - float64(start)) / float64(start)
}

// raftBytes is the size of a planner's raft state on disk: raft.db plus every file under
// snapshots/ of its data dir.
func raftBytes(dataDir string) (int64, error) {
	var total int64
	st, err := os.Stat(filepath.Join(dataDir, "raft.db"))
	if err != nil {
		return 0, fmt.Errorf("raft log size: %w", err)
	}
	total += st.Size()
	err = filepath.WalkDir(filepath.Join(dataDir, "snapshots"), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a snapshot being replaced
			}
			return err
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("raft snapshots size: %w", err)
	}
	return total, nil
}

// load1 is the one-minute load average of a loadAvg string (0 when unknown).
func load1(s string) float64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
