package localcluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/trident-sched/trident/planner/client"
)

// PlannerOptions configures a raft cluster of `trident planner` processes on loopback.
type PlannerOptions struct {
	// Binary is the trident binary.
	Binary string
	// Count is the number of servers (default 3).
	Count int
	// NomadAddr is passed as -nomad-addr ("" runs without an actuator).
	NomadAddr string
	// Args are extra flags for every server (e.g. -interval 5s).
	Args []string
	// Dir holds data dirs and logs (default: <cluster dir>/planners or a temp dir).
	Dir string
	// Logger receives progress messages.
	Logger *slog.Logger
	// Debug gives every server a -debug-addr on a free loopback port (Planners.Debug).
	Debug bool
}

// Planners is a running planner cluster.
type Planners struct {
	// HTTP are the servers' API addresses (http://127.0.0.1:port), in server order.
	HTTP []string
	// Dir holds data dirs and logs.
	Dir string
	// Debug are the servers' pprof base URLs (http://127.0.0.1:port/debug/pprof/), in
	// server order, with PlannerOptions.Debug; nil otherwise.
	Debug []string

	procs []*agentProc
	args  [][]string
	bin   string
}

// LaunchPlanners starts the servers (the first bootstraps the cluster) and waits for a
// leader.
func LaunchPlanners(ctx context.Context, o PlannerOptions) (*Planners, error) {
	if o.Count == 0 {
		o.Count = 3
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "trident-planners-")
		if err != nil {
			return nil, fmt.Errorf("planner dir: %w", err)
		}
		o.Dir = d
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("planner dir: %w", err)
	}
	ports, err := freePorts(2 * o.Count)
	if err != nil {
		return nil, err
	}
	var debugPorts []int
	if o.Debug {
		if debugPorts, err = freePorts(o.Count); err != nil {
			return nil, err
		}
	}
	var peers []string
	for i := 0; i < o.Count; i++ {
		peers = append(peers, fmt.Sprintf("p%d=127.0.0.1:%d@http://127.0.0.1:%d", i+1, ports[2*i], ports[2*i+1]))
	}
	p := &Planners{Dir: o.Dir, bin: o.Binary}
	for i := 0; i < o.Count; i++ {
		id := fmt.Sprintf("p%d", i+1)
		args := []string{"planner", "-id", id,
			"-bind", fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
			"-http", fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
			"-data-dir", filepath.Join(o.Dir, id),
			"-peers", strings.Join(peers, ","),
		}
		if o.NomadAddr != "" {
			args = append(args, "-nomad-addr", o.NomadAddr)
		}
		if i == 0 {
			args = append(args, "-bootstrap")
		}
		if o.Debug {
			args = append(args, "-debug-addr", fmt.Sprintf("127.0.0.1:%d", debugPorts[i]))
			p.Debug = append(p.Debug, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", debugPorts[i]))
		}
		args = append(args, o.Args...)
		p.args = append(p.args, args)
		p.HTTP = append(p.HTTP, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]))
		proc, err := startProcess(ctx, "planner-"+id, filepath.Join(o.Dir, id+".log"), o.Binary, args...)
		if err != nil {
			p.Stop()
			return nil, err
		}
		p.procs = append(p.procs, proc)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	leader, err := p.Leader(wctx)
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("planner cluster: %w (logs in %s)", err, o.Dir)
	}
	o.Logger.Info("planner cluster ready", "servers", o.Count, "leader", leader)
	return p, nil
}

// Leader polls the servers until one reports being the raft leader and returns its HTTP
// address.
func (p *Planners) Leader(ctx context.Context) (string, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		for i, a := range p.HTTP {
			if p.procs[i] != nil {
				select {
				case <-p.procs[i].done:
					continue
				default:
				}
			}
			// One attempt per server and poll: the loop is the retry.
			pc, err := client.New(client.Config{Address: a, HTTPClient: hc, Retries: -1})
			if err != nil {
				return "", err
			}
			if st, err := pc.Status(ctx); err == nil && st.State == "Leader" {
				return a, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no planner became leader: %w", ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// PID returns the process ID of server i (0-based), or 0 when it was never started.
func (p *Planners) PID(i int) int {
	if i < 0 || i >= len(p.procs) || p.procs[i] == nil || p.procs[i].cmd.Process == nil {
		return 0
	}
	return p.procs[i].cmd.Process.Pid
}

// DataDir returns the data dir of server i (0-based): its -data-dir, holding raft.db and
// snapshots/.
func (p *Planners) DataDir(i int) string {
	return filepath.Join(p.Dir, fmt.Sprintf("p%d", i+1))
}

// Kill sends SIGKILL to server i (0-based) and waits for it to exit.
func (p *Planners) Kill(i int) {
	_ = syscall.Kill(-p.procs[i].cmd.Process.Pid, syscall.SIGKILL)
	<-p.procs[i].done
}

// Restart starts server i again with its original flags (its data dir is kept).
func (p *Planners) Restart(ctx context.Context, i int) error {
	id := fmt.Sprintf("p%d", i+1)
	proc, err := startProcess(ctx, "planner-"+id, filepath.Join(p.Dir, fmt.Sprintf("%s.restart-%d.log", id, time.Now().UnixNano())), p.bin, p.args[i]...)
	if err != nil {
		return err
	}
	p.procs[i] = proc
	return nil
}

// Logs returns the tail of every server's log.
func (p *Planners) Logs(lines int) string {
	var b strings.Builder
	for _, pr := range p.procs {
		if pr != nil {
			fmt.Fprintf(&b, "--- %s ---\n%s\n", pr.name, TailFile(pr.logPath, lines))
		}
	}
	return b.String()
}

// Stop interrupts every server and waits for them to exit.
func (p *Planners) Stop() {
	for _, pr := range p.procs {
		if pr != nil {
			_ = stopProcess(pr, 10*time.Second)
		}
	}
	killUnder(p.Dir)
}
