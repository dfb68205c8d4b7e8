package discovery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/trident-sched/trident/e2e/harness"
	"github.com/trident-sched/trident/planner"
)

// startConsul runs a loopback-only Consul dev agent on free ports.
func startConsul(t *testing.T) *consul.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("real Consul: skipped in -short")
	}
	bin, err := harness.ToolPath("consul")
	if err != nil {
		t.Fatal(err)
	}
	ports := make([]int, 5)
	for i := range ports {
		if ports[i], err = harness.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	logPath := filepath.Join(t.TempDir(), "consul.log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-http-port", strconv.Itoa(ports[0]), "-serf-lan-port", strconv.Itoa(ports[1]), "-serf-wan-port", strconv.Itoa(ports[2]),
		"-server-port", strconv.Itoa(ports[3]), "-grpc-port", strconv.Itoa(ports[4]), "-grpc-tls-port", "-1", "-dns-port", "-1",
		"-hcl", "disable_update_check = true")
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); lf.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	cfg := consul.DefaultConfig()
	cfg.Address = fmt.Sprintf("127.0.0.1:%d", ports[0])
	cl, err := consul.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if leader, err := cl.Status().Leader(); err == nil && leader != "" {
			return cl
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("consul exited:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("consul not ready:\n%s", b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestConsulDiscoveryBootstrapsRaft: three servers register in a real Consul, each waits
// for all three, they agree on the same peer list, and raft bootstrapped from it elects one
// leader whose API address every follower knows (from the service meta).
func TestConsulDiscoveryBootstrapsRaft(t *testing.T) {
	cl := startConsul(t)
	d := Consul{Client: cl, Service: "trident-planner-test"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Ports are picked free but can be taken before the servers bind them (other tests'
	// agents run in parallel): a bind failure picks new addresses, at most three times.
	var servers []*planner.Server
	for attempt := 1; ; attempt++ {
		var err error
		servers, err = discoverAndStart(ctx, t, d)
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; picking new addresses", attempt, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		leaders, known := 0, 0
		var leaderHTTP string
		for _, s := range servers {
			if s.IsLeader() {
				leaders++
				leaderHTTP = s.HTTPAddr()
			}
		}
		for _, s := range servers {
			if _, _, h := s.Leader(); h != "" && h == leaderHTTP {
				known++
			}
		}
		if leaders == 1 && known == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaders %d, servers knowing the leader's API %d", leaders, known)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := d.Deregister(ctx, "s0"); err != nil {
		t.Fatal(err)
	}
	if ps, err := d.Peers(ctx); err != nil || len(ps) != 2 {
		t.Fatalf("after deregister: %v %v", ps, err)
	}
}

// discoverAndStart registers three servers on fresh loopback addresses in d, waits until
// each discovers all three, and starts them from the discovered peers. On an error no
// server is left running.
func discoverAndStart(ctx context.Context, t *testing.T, d Consul) ([]*planner.Server, error) {
	selves := make([]planner.Peer, 3)
	for i := range selves {
		selves[i] = planner.Peer{ID: fmt.Sprintf("s%d", i), RaftAddr: harness.FreeAddr(t), HTTPAddr: "http://" + harness.FreeAddr(t)}
	}
	found := make([][]planner.Peer, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range selves {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 300 * time.Millisecond) // staggered start
			if errs[i] = d.Register(ctx, selves[i]); errs[i] == nil {
				found[i], errs[i] = d.WaitPeers(ctx, 3)
			}
		}(i)
	}
	wg.Wait()
	for i := range found {
		if errs[i] != nil {
			return nil, fmt.Errorf("server %d: %w", i, errs[i])
		}
		if fmt.Sprint(found[i]) != fmt.Sprint(selves) {
			t.Fatalf("server %d discovered %v, want %v", i, found[i], selves)
		}
	}
	servers := make([]*planner.Server, 0, 3)
	for i, p := range selves {
		s, err := planner.New(planner.Config{ID: p.ID, RaftAddr: p.RaftAddr, HTTPAddr: p.HTTPAddr[len("http://"):], DataDir: t.TempDir(),
			Peers: found[i], Bootstrap: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			for _, s := range servers {
				_ = s.Close()
			}
			return nil, err
		}
		servers = append(servers, s)
	}
	for _, s := range servers {
		sctx, scancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(sctx) }()
		t.Cleanup(func() { scancel(); <-done })
	}
	return servers, nil
}
