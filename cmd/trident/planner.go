package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/observe"
	"github.com/trident-sched/trident/planner"
	"github.com/trident-sched/trident/planner/discovery"
	"github.com/trident-sched/trident/planner/nomadact"
	"github.com/trident-sched/trident/planner/sched"
	"github.com/trident-sched/trident/strategy/milp"
)

// runPlanner runs one raft-replicated planner server until ctx is cancelled.
func runPlanner(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("planner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	id := fs.String("id", "", "raft server ID (required)")
	bind := fs.String("bind", "127.0.0.1:4660", "raft TCP bind address (advertised to peers)")
	advertise := fs.String("advertise", "", "raft address advertised to peers (default: -bind)")
	httpAddr := fs.String("http", "127.0.0.1:4650", "HTTP API listen address")
	dataDir := fs.String("data-dir", "", "directory for raft.db and snapshots (required)")
	peers := fs.String("peers", "", "static raft peers id=raft_addr[@http_url],... (including this server)")
	bootstrap := fs.Bool("bootstrap", false, "bootstrap the cluster from -peers if the data dir is empty")
	nomadAddr := fs.String("nomad-addr", "", "Nomad HTTP address; empty runs without an actuator (decisions are committed only)")
	nomadToken := fs.String("nomad-token", "", "Nomad ACL token (visible to local users in ps: prefer -nomad-token-file or $NOMAD_TOKEN)")
	nomadTokenFile := fs.String("nomad-token-file", "", "file holding the Nomad ACL token")
	token := fs.String("token", "", "ACL token required in X-Trident-Token (visible to local users in ps: prefer -token-file or $TRIDENT_TOKEN)")
	tokenFile := fs.String("token-file", "", "file holding the ACL token required in X-Trident-Token")
	tlsCert := fs.String("tls-cert", "", "TLS certificate for the HTTP API")
	tlsKey := fs.String("tls-key", "", "TLS key for the HTTP API")
	tlsCA := fs.String("tls-ca", "", "CA bundle to verify the leader when forwarding (and raft peers with -raft-tls)")
	raftTLS := fs.Bool("raft-tls", false, "run raft over mutual TLS with -tls-cert/-tls-key, peers verified against -tls-ca")
	interval := fs.Duration("interval", 10*time.Second, "rescheduling period")
	scheduler := fs.String("scheduler", "milp", "scheduler: milp (HiGHS) | greedy (milp greedy) | proportional")
	solveTimeout := fs.Duration("solve-timeout", 20*time.Second, "time limit of one solve")
	objective := fs.String("objective", "maxmin", "how pipelines sharing the cluster are weighed: maxmin (smallest weighted share first) or sum (weighted sum); see docs/planner.md#many-pipelines")
	joint := fs.Bool("joint", true, "cap every pipeline at its share of the joint round when several are registered (false: first come, first served)")
	marginal := fs.Bool("admit-marginal", true, "admit a waiting batch pipeline beside running batch pipelines only when the joint round with it carries more normalised work (false: whenever its minimums fit)")
	maxBatch := fs.Int("max-batch", 1, "max config transitions per operator and round, like Nomad's max_parallel (0 = no cap)")
	catchUpF := fs.Duration("catch-up", 0, "also size operators to process their backlog within this time (e.g. 2m; 0 = steady state only)")
	heartbeat := fs.Duration("heartbeat-timeout", time.Second, "raft heartbeat timeout")
	election := fs.Duration("election-timeout", time.Second, "raft election timeout")
	commitTimeout := fs.Duration("commit-timeout", planner.DefaultCommitTimeout, "raft commit timeout: without writes, the leader still sends followers the commit index this often (staggered up to 2x); raft's default is 50ms")
	snapThreshold := fs.Uint64("snapshot-threshold", 8192, "raft log entries between snapshots (also the trailing log kept after one)")
	snapInterval := fs.Duration("snapshot-interval", 30*time.Second, "how often raft checks the snapshot threshold")
	minHealthy := fs.Duration("min-healthy-time", 5*time.Second, "Nomad update.min_healthy_time of planner-written groups")
	healthyDeadline := fs.Duration("healthy-deadline", 2*time.Minute, "Nomad update.healthy_deadline of planner-written groups")
	oomPattern := fs.String("oom-log-pattern", nomadact.DefaultOOMLogPattern, "regexp (Go syntax) that marks a candidate-config task's non-zero exit as an OOM when its stderr tail matches; empty: exit 137 and Nomad's oom_killed only")
	canary := fs.Bool("canary", true, "start a config transition with one Nomad canary of the operator's canary slot group, measured for its cold start + -canary-warmup + -canary-probe, then promoted or failed by its measured gain")
	canaryProbe := fs.Duration("canary-probe", planner.DefaultCanaryProbe, "a canary's probe window beyond the candidate's cold start and -canary-warmup")
	canaryWarmUp := fs.Duration("canary-warmup", observe.DefaultWarmUp, "the observation layer's warm-up (samples of a new instance's first minutes are rejected), part of every canary's probe window; 0: none")
	oomAbort := fs.Int("oom-abort-after", 2, "fail a config rollout's deployment (auto_revert) once a candidate-config instance has been OOM-killed this many times; -1 = wait for the healthy deadline")
	killTimeout := fs.Duration("kill-timeout", 30*time.Second, "task kill_timeout (graceful drain on scale-down) when the job sets none")
	nodePool := fs.String("node-pool", "", "plan only on nodes of this Nomad node pool (set it to the pipeline jobs' node_pool)")
	datacenters := fs.String("datacenters", "", "comma-separated: plan only on nodes of these datacenters (the pipeline jobs' datacenters)")
	progressDeadline := fs.Duration("progress-deadline", 0, "Nomad update.progress_deadline of planner-written groups (0: healthy-deadline + 1m)")
	applyTimeout := fs.Duration("apply-timeout", 0, "fail a submitted job version (and its decision) that has not converged within this time, e.g. a group pinned to a node that cannot place it (0: twice the progress deadline)")
	autoRegister := fs.Bool("auto-register", false, "register every running Nomad job whose job meta has trident_pipeline = \"true\" (with -nomad-addr)")
	logLevel := fs.String("log-level", "info", "debug | info | warn | error")
	debugAddr := fs.String("debug-addr", "", "serve Go's net/http/pprof profiles on this loopback address (e.g. 127.0.0.1:6060; off when empty)")
	consulAddr := fs.String("consul-addr", "", "Consul HTTP address for peer discovery (used when -peers is empty)")
	consulService := fs.String("consul-service", "trident-planner", "Consul service name of the planner servers")
	nomadService := fs.String("nomad-service", "", "with -nomad-addr and empty -peers: discover the planner servers in this Nomad (native) service; each instance tags raft_id=, raft_addr=, http_addr= (see jobs/planner.nomad.hcl)")
	bootstrapExpect := fs.Int("bootstrap-expect", 3, "with -consul-addr or -nomad-service: servers to wait for before bootstrapping")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if *token, err = secret("token", *token, *tokenFile, "TRIDENT_TOKEN"); err != nil {
		return err
	}
	if *nomadToken, err = secret("nomad-token", *nomadToken, *nomadTokenFile, "NOMAD_TOKEN"); err != nil {
		return err
	}
	var oomRE *regexp.Regexp
	if *oomPattern != "" {
		if oomRE, err = regexp.Compile(*oomPattern); err != nil {
			return fmt.Errorf("-oom-log-pattern: %w", err)
		}
	}
	switch *scheduler {
	case "milp", "greedy", "proportional":
	default:
		return fmt.Errorf("-scheduler=%q: want milp, greedy or proportional", *scheduler)
	}
	if *id == "" || *dataDir == "" {
		fs.Usage()
		return errors.New("-id and -data-dir are required")
	}
	if (*tlsCert == "") != (*tlsKey == "") {
		return errors.New("-tls-cert and -tls-key go together")
	}
	if *catchUpF < 0 {
		return errors.New("-catch-up must not be negative")
	}
	if *raftTLS && (*tlsCert == "" || *tlsCA == "") {
		return errors.New("-raft-tls needs -tls-cert, -tls-key and -tls-ca (peer certificates must be valid for their raft IPs)")
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	if *debugAddr != "" {
		ln, err := debugListen(*debugAddr)
		if err != nil {
			return err
		}
		dctx, stopDebug := context.WithCancel(ctx)
		defer stopDebug()
		go serveDebug(dctx, ln, log)
	}
	ps, err := planner.ParsePeers(*peers)
	if err != nil {
		return fmt.Errorf("-peers: %w", err)
	}
	if len(ps) == 0 && *consulAddr != "" {
		disc, err := consulDiscovery(*consulAddr, *consulService)
		if err != nil {
			return err
		}
		adv := *advertise
		if adv == "" {
			adv = *bind
		}
		scheme := "http://"
		if *tlsCert != "" {
			scheme = "https://"
		}
		if err := disc.Register(ctx, planner.Peer{ID: *id, RaftAddr: adv, HTTPAddr: scheme + *httpAddr}); err != nil {
			return err
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := disc.Deregister(dctx, *id); err != nil {
				log.Warn("consul deregister", "err", err)
			}
		}()
		if ps, err = discoverPeers(ctx, log, "consul", *consulService, *bootstrapExpect, disc.WaitPeers); err != nil {
			return err
		}
		*bootstrap = true
	}
	var nomadClient *api.Client
	var calls *countingTransport
	if *nomadAddr != "" {
		cfg := api.DefaultConfig()
		cfg.Address, cfg.SecretID = *nomadAddr, *nomadToken
		// Nomad's own HTTP client setup (TLS from NOMAD_CACERT & co.), with every
		// request counted.
		hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		if err := api.ConfigureTLS(hc, cfg.TLSConfig); err != nil {
			return fmt.Errorf("nomad client TLS: %w", err)
		}
		calls = &countingTransport{next: hc.Transport}
		hc.Transport = calls
		cfg.HttpClient = hc
		if nomadClient, err = api.NewClient(cfg); err != nil {
			return fmt.Errorf("nomad client: %w", err)
		}
	}
	if len(ps) == 0 && *consulAddr == "" && *nomadService != "" {
		if nomadClient == nil {
			return errors.New("-nomad-service needs -nomad-addr")
		}
		disc := discovery.Nomad{Client: nomadClient, Service: *nomadService}
		if ps, err = discoverPeers(ctx, log, "nomad", *nomadService, *bootstrapExpect, disc.WaitPeers); err != nil {
			return err
		}
		if !slices.ContainsFunc(ps, func(p planner.Peer) bool { return p.ID == *id }) {
			return fmt.Errorf("-id %q is not among the %d servers of nomad service %s (their raft_id tags must match -id)", *id, len(ps), *nomadService)
		}
		*bootstrap = true
	}
	lc := &planner.LoopConfig{Interval: *interval, SolveTimeout: *solveTimeout, MaxBatch: *maxBatch, CatchUpSec: catchUpF.Seconds(),
		AutoRegister: *autoRegister, CanaryProbe: *canaryProbe, CanaryWarmUp: *canaryWarmUp, NoJoint: !*joint, NoMarginalAdmission: !*marginal}
	if lc.Objective, err = milp.ParseObjective(*objective); err != nil {
		return fmt.Errorf("%w: -objective: %v", errUsage, err)
	}
	if *canaryWarmUp == 0 {
		lc.CanaryWarmUp = -1
	}
	switch *scheduler {
	case "milp":
		// Every HiGHS call of the server's solves runs on one OS thread, so that HiGHS's C
		// heap lives in one glibc arena (see milp.Thread).
		th := milp.NewThread()
		defer th.Close()
		lc.Scheduler = sched.MILP{Solver: milp.HiGHS{Thread: th}, Options: milp.Options{TimeLimit: *solveTimeout}}
		lc.SolverThread = th
	case "greedy":
		lc.Scheduler = sched.MILP{Solver: milp.Greedy{}}
	case "proportional":
		lc.Scheduler = sched.Proportional{}
	}
	if nomadClient != nil {
		act := nomadact.New(nomadClient, nomadact.Options{MinHealthyTime: *minHealthy, HealthyDeadline: *healthyDeadline, ProgressDeadline: *progressDeadline,
			ApplyTimeout: *applyTimeout, KillTimeout: *killTimeout, OOMAbortAfter: *oomAbort, OOMLogPattern: oomRE, NodePool: *nodePool, Canary: *canary,
			Datacenters: strings.FieldsFunc(*datacenters, func(r rune) bool { return r == ',' || r == ' ' }), Logger: log})
		lc.Actuator = act
		lc.Invalidator = act
	}
	srv, err := planner.New(planner.Config{
		ID: *id, RaftAddr: *bind, RaftAdvertise: *advertise, HTTPAddr: *httpAddr, DataDir: *dataDir,
		Peers: ps, Bootstrap: *bootstrap, Token: *token, TLSCert: *tlsCert, TLSKey: *tlsKey, TLSCA: *tlsCA, RaftTLS: *raftTLS,
		HeartbeatTimeout: *heartbeat, ElectionTimeout: *election, CommitTimeout: *commitTimeout, SnapshotThreshold: *snapThreshold, SnapshotInterval: *snapInterval,
		Loop: lc, Logger: log, RaftLogOutput: stderr, NomadRequests: calls.count,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "trident planner %s: raft %s, api %s, data %s, nomad %q, scheduler %s, peers %d\n",
		*id, *bind, srv.HTTPAddr(), *dataDir, *nomadAddr, *scheduler, len(ps))
	return srv.Serve(ctx)
}

// consulDiscovery returns the Consul peer discovery for service at addr.
func consulDiscovery(addr, service string) (discovery.Consul, error) {
	cfg := consul.DefaultConfig()
	cfg.Address = addr
	cl, err := consul.NewClient(cfg)
	if err != nil {
		return discovery.Consul{}, fmt.Errorf("consul client: %w", err)
	}
	return discovery.Consul{Client: cl, Service: service}, nil
}

// discoverPeers waits up to five minutes for expect planner servers in a service catalog.
func discoverPeers(ctx context.Context, log *slog.Logger, catalog, service string, expect int, wait func(context.Context, int) ([]planner.Peer, error)) ([]planner.Peer, error) {
	log.Info("waiting for planner peers", "catalog", catalog, "service", service, "expect", expect)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	ps, err := wait(wctx, expect)
	if err != nil {
		return nil, err
	}
	log.Info("discovered planner peers", "catalog", catalog, "peers", len(ps))
	return ps, nil
}

// secret returns a token from its flag -name, else from the file of -name-file (surrounding
// whitespace trimmed), else from the environment variable env; setting both the flag and
// the file is an error, and so is an empty file.
func secret(name, flagValue, file, env string) (string, error) {
	switch {
	case flagValue != "" && file != "":
		return "", fmt.Errorf("-%s and -%s-file are exclusive", name, name)
	case flagValue != "":
		return flagValue, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("-%s-file: %w", name, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("-%s-file %s is empty", name, file)
		}
		return v, nil
	default:
		return os.Getenv(env), nil
	}
}

// countingTransport counts the requests sent to Nomad (GET /v1/status shows the count).
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Uint64
}

// count returns the requests sent so far (0 for a planner without Nomad).
func (c *countingTransport) count() uint64 {
	if c == nil {
		return 0
	}
	return c.n.Load()
}

// RoundTrip implements http.RoundTripper.
func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}
