package planner

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/trident-sched/trident/planner/fsm"
)

// Peer is one member of the static raft configuration.
type Peer struct {
	// ID is the raft server ID.
	ID string
	// RaftAddr is the raft TCP address (host:port).
	RaftAddr string
	// HTTPAddr is the peer's API base URL (e.g. http://127.0.0.1:4650); used to forward
	// writes to the leader. May be empty (then followers answer with the leader's address).
	HTTPAddr string
}

// ParsePeers parses "id=raft_addr[@http_url],..." .
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		id, rest, ok := strings.Cut(part, "=")
		if !ok || id == "" || rest == "" {
			return nil, fmt.Errorf("peer %q: want id=raft_addr[@http_url]", part)
		}
		raftAddr, httpAddr, _ := strings.Cut(rest, "@")
		if _, _, err := net.SplitHostPort(raftAddr); err != nil {
			return nil, fmt.Errorf("peer %q: raft address %q: %w", id, raftAddr, err)
		}
		if httpAddr != "" && !strings.Contains(httpAddr, "://") {
			httpAddr = "http://" + httpAddr
		}
		out = append(out, Peer{ID: id, RaftAddr: raftAddr, HTTPAddr: httpAddr})
	}
	return out, nil
}

// Config configures one planner server.
type Config struct {
	// ID is this server's raft ID.
	ID string
	// RaftAddr is the raft TCP bind address; it is also advertised, so it must be
	// reachable by the peers (e.g. 127.0.0.1:7001).
	RaftAddr string
	// RaftAdvertise overrides the advertised raft address (e.g. behind a proxy).
	RaftAdvertise string
	// HTTPAddr is the API listen address (host:port).
	HTTPAddr string
	// DataDir holds raft.db and the snapshots.
	DataDir string
	// Peers is the static raft configuration (including this server).
	Peers []Peer
	// Bootstrap bootstraps the cluster from Peers when the data dir has no raft state.
	// Every server may be started with it: identical configurations are safe.
	Bootstrap bool
	// Token, when set, is required in X-Trident-Token on every request but GET /v1/status.
	Token string
	// TLSCert and TLSKey enable HTTPS on the API; TLSCA verifies peers when forwarding.
	TLSCert, TLSKey, TLSCA string
	// RaftTLS runs the raft transport over mutual TLS with TLSCert/TLSKey, peers verified
	// against TLSCA (all three required; see TLSStreamLayer).
	RaftTLS bool
	// HeartbeatTimeout and ElectionTimeout of raft (default 1s each).
	HeartbeatTimeout, ElectionTimeout time.Duration
	// CommitTimeout is how long the leader goes without a write before it sends each
	// follower an AppendEntries anyway, so that followers learn the commit index of the
	// last write (default DefaultCommitTimeout; raft staggers it up to twice that).
	CommitTimeout time.Duration
	// SnapshotThreshold is the number of log entries between snapshots (default 8192).
	SnapshotThreshold uint64
	// SnapshotInterval is how often raft checks whether to snapshot (default 30s).
	SnapshotInterval time.Duration
	// StreamLayer, when set, replaces the plain TCP listener/dialer of the raft transport
	// (e.g. TLS, or fault injection in tests); RaftAddr is then only the advertised ID.
	StreamLayer raft.StreamLayer
	// InMemory keeps raft's log, stable store and snapshots in memory and uses an
	// in-memory transport: a single server whose state dies with it, for a simulator
	// driving the planner (DataDir, RaftAddr and Peers are then unused).
	InMemory bool
	// Loop configures the leader's rescheduling loop; nil disables it (API-only server).
	Loop *LoopConfig
	// NomadRequests, when set, reports how many requests the planner sent to Nomad so far
	// (GET /v1/status shows it).
	NomadRequests func() uint64
	// Logger receives server logs (default: slog.Default()).
	Logger *slog.Logger
	// RaftLogOutput receives raft's own log (default: io.Discard).
	RaftLogOutput io.Writer
}

// Server is one running planner server.
type Server struct {
	cfg     Config
	log     *slog.Logger
	fsm     *fsm.FSM
	raft    *raft.Raft
	trans   io.Closer
	store   io.Closer
	httpSrv *http.Server
	httpLn  net.Listener
	fwd     *http.Client
	notify  chan bool
	closeCh chan struct{}
	loop    *Loop

	// manual serialises Round calls; manualTerm is the raft term Round last started the
	// loop's per-term state in.
	manual     sync.Mutex
	manualTerm string

	mu       sync.Mutex
	shutdown bool
	wg       sync.WaitGroup
}

// DefaultCommitTimeout is Config.CommitTimeout's default. Raft's own default, 50 ms, makes
// an idle leader send each follower an AppendEntries every 50-100 ms besides the
// heartbeats (every HeartbeatTimeout/10); profiled on an idle 3-server planner, those sends
// and the log reads behind them were half of the leader's CPU. With 250 ms a follower
// applies the last write of a burst at most 500 ms after the leader; writes that follow
// each other are replicated at once either way.
const DefaultCommitTimeout = 250 * time.Millisecond

// ErrNotLeader is returned by Propose on a follower.
var ErrNotLeader = errors.New("not the raft leader")

// New starts the raft node and the HTTP listener (Serve must be called to answer requests).
func New(cfg Config) (*Server, error) {
	if cfg.ID == "" || (!cfg.InMemory && (cfg.RaftAddr == "" || cfg.DataDir == "")) {
		return nil, errors.New("planner: id, raft address and data dir are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RaftLogOutput == nil {
		cfg.RaftLogOutput = io.Discard
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("server", cfg.ID), notify: make(chan bool, 64), closeCh: make(chan struct{})}
	s.fsm = fsm.New(nil)

	rc := raftConfig(cfg)
	rc.NotifyCh = s.notify
	if cfg.InMemory {
		if err := s.startInMemory(rc); err != nil {
			return nil, err
		}
		return s.finish(cfg)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("planner: create data dir: %w", err)
	}

	store, err := raftboltdb.NewBoltStore(filepath.Join(cfg.DataDir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("planner: open raft store: %w", err)
	}
	s.store = store
	snaps, err := raft.NewFileSnapshotStore(cfg.DataDir, 3, cfg.RaftLogOutput)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("planner: snapshot store: %w", err)
	}
	adv := cfg.RaftAdvertise
	if adv == "" {
		adv = cfg.RaftAddr
	}
	advAddr, err := net.ResolveTCPAddr("tcp", adv)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("planner: raft advertise address %q: %w", adv, err)
	}
	var trans *raft.NetworkTransport
	if cfg.RaftTLS && cfg.StreamLayer == nil {
		l, err := NewTLSStreamLayer(cfg.RaftAddr, cfg.RaftAdvertise, cfg.TLSCert, cfg.TLSKey, cfg.TLSCA)
		if err != nil {
			store.Close()
			return nil, err
		}
		cfg.StreamLayer = l
	}
	if cfg.StreamLayer != nil {
		trans = raft.NewNetworkTransport(cfg.StreamLayer, 4, 5*time.Second, cfg.RaftLogOutput)
	} else {
		trans, err = raft.NewTCPTransport(cfg.RaftAddr, advAddr, 4, 5*time.Second, cfg.RaftLogOutput)
	}
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("planner: raft transport on %s: %w", cfg.RaftAddr, err)
	}
	s.trans = trans
	hasState, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		s.closeStores()
		return nil, fmt.Errorf("planner: inspect raft state: %w", err)
	}
	r, err := raft.NewRaft(rc, s.fsm, store, store, snaps, trans)
	if err != nil {
		s.closeStores()
		return nil, fmt.Errorf("planner: start raft: %w", err)
	}
	s.raft = r
	if cfg.Bootstrap && !hasState {
		var servers []raft.Server
		for _, p := range cfg.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
		if len(servers) == 0 {
			servers = []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}}
		}
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			_ = s.Close()
			return nil, fmt.Errorf("planner: bootstrap: %w", err)
		}
		s.log.Info("bootstrapped raft cluster", "peers", len(servers))
	} else if hasState {
		s.log.Info("restored raft state from data dir", "dir", cfg.DataDir, "last_index", r.LastIndex())
	}
	return s.finish(cfg)
}

// startInMemory starts a single-server raft whose log, stores, snapshots and transport
// live in memory (Config.InMemory).
func (s *Server) startInMemory(rc *raft.Config) error {
	store := raft.NewInmemStore()
	addr, trans := raft.NewInmemTransport("")
	r, err := raft.NewRaft(rc, s.fsm, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		return fmt.Errorf("planner: start in-memory raft: %w", err)
	}
	s.raft, s.trans = r, trans
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: addr}}}).Error(); err != nil {
		_ = s.Close()
		return fmt.Errorf("planner: bootstrap in-memory raft: %w", err)
	}
	return nil
}

// finish sets up the HTTP listener and the loop of a server whose raft runs.
func (s *Server) finish(cfg Config) (*Server, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLSCA != "" {
		pem, err := os.ReadFile(cfg.TLSCA)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("planner: read TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			_ = s.Close()
			return nil, fmt.Errorf("planner: TLS CA %s holds no certificate", cfg.TLSCA)
		}
		tlsCfg.RootCAs = pool
	}
	s.fwd = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}

	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("planner: http listen %s: %w", cfg.HTTPAddr, err)
		}
		if cfg.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
			if err != nil {
				ln.Close()
				_ = s.Close()
				return nil, fmt.Errorf("planner: load TLS key pair: %w", err)
			}
			ln = tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}})
		}
		s.httpLn = ln
		s.httpSrv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	}
	if cfg.Loop != nil {
		s.loop = newLoop(s, *cfg.Loop)
	}
	s.log.Info("planner server started", "raft", s.raft.String(), "http", s.HTTPAddr(), "data_dir", cfg.DataDir, "bootstrap", cfg.Bootstrap)
	return s, nil
}

// raftConfig is raft's configuration for cfg: raft's defaults overridden by cfg's non-zero
// timeouts and snapshot settings, and the commit timeout defaulting to DefaultCommitTimeout.
func raftConfig(cfg Config) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft." + cfg.ID, Output: cfg.RaftLogOutput, Level: hclog.Info})
	if cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = cfg.HeartbeatTimeout
		rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	rc.CommitTimeout = DefaultCommitTimeout
	if cfg.CommitTimeout > 0 {
		rc.CommitTimeout = cfg.CommitTimeout
	}
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
		rc.TrailingLogs = cfg.SnapshotThreshold
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	return rc
}

// HTTPAddr returns the API's base URL ("" when there is no listener).
func (s *Server) HTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	scheme := "http"
	if s.cfg.TLSCert != "" {
		scheme = "https"
	}
	return scheme + "://" + s.httpLn.Addr().String()
}

// FSM returns the server's state machine (read it with FSM().Read).
func (s *Server) FSM() *fsm.FSM { return s.fsm }

// Raft returns the underlying raft node.
func (s *Server) Raft() *raft.Raft { return s.raft }

// IsLeader reports whether this server is the raft leader.
func (s *Server) IsLeader() bool { return s.raft.State() == raft.Leader }

// Serve answers HTTP requests and runs the leader loop until ctx is done, then closes the
// server.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	if s.httpSrv != nil {
		go func() {
			if err := s.httpSrv.Serve(s.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("planner: http: %w", err)
			}
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.leadership(ctx)
	}()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	return errors.Join(err, s.Close())
}

// leadership runs the loop while this server leads.
func (s *Server) leadership(ctx context.Context) {
	type term struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	var cur *term
	stop := func() {
		if cur != nil {
			cur.cancel()
			<-cur.done
			cur = nil
		}
	}
	defer stop()
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for {
		leader := s.IsLeader()
		switch {
		case leader && cur == nil:
			s.log.Info("became raft leader", "term", s.raft.Stats()["term"], "last_index", s.raft.LastIndex())
			cur = &term{done: make(chan struct{})}
			var lctx context.Context
			lctx, cur.cancel = context.WithCancel(ctx)
			go func(done chan struct{}) {
				defer close(done)
				if s.loop != nil && !s.loop.cfg.Manual {
					s.loop.runLeader(lctx)
				}
			}(cur.done)
		case !leader && cur != nil:
			s.log.Info("lost raft leadership")
			stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.closeCh:
			return
		case <-s.notify:
		case <-check.C:
		}
	}
}

// Round runs one interval of the rescheduling loop of a server whose LoopConfig.Manual is
// set: one round (solving every pipeline when solve is set, else only advancing in-flight
// decisions), the solves it started, their commits, and the round that starts applying
// them. It returns ErrNotLeader on a follower. A simulator calls it once per interval of
// its virtual clock; deployed planners never do.
func (s *Server) Round(ctx context.Context, solve bool) error {
	if s.loop == nil || !s.loop.cfg.Manual {
		return errors.New("planner: Round needs a loop with LoopConfig.Manual")
	}
	if !s.IsLeader() {
		return ErrNotLeader
	}
	s.manual.Lock()
	defer s.manual.Unlock()
	if term := s.raft.Stats()["term"]; term != s.manualTerm {
		if err := s.loop.beginTerm(); err != nil {
			return fmt.Errorf("planner: barrier before the first round: %w", err)
		}
		s.manualTerm = term
	}
	s.loop.roundSync(ctx, solve)
	return ctx.Err()
}

// Propose commits cmd through raft on the leader and returns its index. A command that the
// FSM rejects returns an error wrapping fsm.ErrRejected; one the current state already
// rejects is refused before raft, so it leaves no log entry.
func (s *Server) Propose(ctx context.Context, cmd fsm.Command) (uint64, error) {
	if !s.IsLeader() {
		return 0, ErrNotLeader
	}
	if err := s.fsm.Check(cmd); err != nil {
		return 0, err
	}
	b, err := cmd.Encode()
	if err != nil {
		return 0, err
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return 0, ctx.Err()
		}
	}
	f := s.raft.Apply(b, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return 0, fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return 0, fmt.Errorf("raft apply %s: %w", cmd.Op, err)
	}
	res, _ := f.Response().(fsm.Result)
	if res.Err != nil {
		return res.Index, res.Err
	}
	return f.Index(), nil
}

// Leader returns the leader's ID, raft address and HTTP URL (each may be empty).
func (s *Server) Leader() (id, raftAddr, httpAddr string) {
	addr, lid := s.raft.LeaderWithID()
	id, raftAddr = string(lid), string(addr)
	if id == s.cfg.ID {
		return id, raftAddr, s.HTTPAddr()
	}
	for _, p := range s.cfg.Peers {
		if p.ID == id || (p.RaftAddr == raftAddr && raftAddr != "") {
			return id, raftAddr, p.HTTPAddr
		}
	}
	return id, raftAddr, ""
}

// TransferLeadership hands leadership to id ("" = any up-to-date follower).
func (s *Server) TransferLeadership(id string) error {
	if !s.IsLeader() {
		return ErrNotLeader
	}
	var f raft.Future
	if id == "" {
		f = s.raft.LeadershipTransfer()
	} else {
		cf := s.raft.GetConfiguration()
		if err := cf.Error(); err != nil {
			return fmt.Errorf("raft configuration: %w", err)
		}
		var addr raft.ServerAddress
		for _, srv := range cf.Configuration().Servers {
			if string(srv.ID) == id {
				addr = srv.Address
			}
		}
		if addr == "" {
			return fmt.Errorf("no raft server with id %q", id)
		}
		f = s.raft.LeadershipTransferToServer(raft.ServerID(id), addr)
	}
	if err := f.Error(); err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	return nil
}

// Close stops the HTTP server, the loop and raft, and closes the stores.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		return nil
	}
	s.shutdown = true
	close(s.closeCh)
	s.mu.Unlock()
	var errs []error
	if s.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.httpSrv.Shutdown(ctx)
		cancel()
	} else if s.httpLn != nil {
		s.httpLn.Close()
	}
	if s.raft != nil {
		if err := s.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("raft shutdown: %w", err))
		}
	}
	s.wg.Wait()
	errs = append(errs, s.closeStores())
	s.log.Info("planner server stopped")
	return errors.Join(errs...)
}

func (s *Server) closeStores() error {
	var errs []error
	if s.trans != nil {
		errs = append(errs, s.trans.Close())
	}
	if s.store != nil {
		errs = append(errs, s.store.Close())
	}
	return errors.Join(errs...)
}
