// Package localcluster starts real Nomad agents, nomad-autoscaler and a raft cluster of
// `trident planner` processes on loopback, and tears them down without leaking processes,
// mounts or directories. The local demo (internal/demo) uses it directly; the end-to-end
// tests use it through e2e/harness, which adds testing.TB wrappers. It must not import
// the testing package: it is linked into bin/trident (`make lint` checks).
//
// Every agent it starts is confined to 127.0.0.1, never checks for updates and skips the
// cloud metadata fingerprinters (see RECIPES.md).
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"
)

// fingerprintDenylist keeps Nomad from probing cloud metadata endpoints off the machine.
const fingerprintDenylist = "env_aws,env_gce,env_azure,env_digitalocean"

// ClientSpec describes one extra Nomad client node.
type ClientSpec struct {
	// Name is the node name; it must be unique in the cluster.
	Name string
	// NodeClass is the node's node_class.
	NodeClass string
	// Meta is the node's client meta.
	Meta map[string]string
	// FakeGPUs, when > 0, loads the trident-gpu device plugin in fake mode with this many
	// nvidia/gpu devices. Requires NomadOptions.DevicePluginDir.
	FakeGPUs int
	// FakeGPUMemoryMiB is the memory of each fake GPU (default 81920).
	FakeGPUMemoryMiB int
	// FakeGPUVendor is the vendor the fake GPUs are fingerprinted under (default nvidia;
	// e.g. "amd" for amd/gpu devices).
	FakeGPUVendor string
	// CPUTotalMHz overrides the fingerprinted CPU capacity (0 keeps the fingerprint).
	CPUTotalMHz int
	// MemoryMB overrides the fingerprinted memory (0 keeps the fingerprint).
	MemoryMB int
}

// fakeVendor is the vendor c's fake GPUs are fingerprinted under (FakeGPUVendor, nvidia
// by default).
func (c ClientSpec) fakeVendor() string {
	if c.FakeGPUVendor != "" {
		return c.FakeGPUVendor
	}
	return "nvidia"
}

// NomadOptions configures a loopback Nomad cluster: one server (which also runs a client
// named "server") plus the extra clients.
type NomadOptions struct {
	// Clients are the extra client nodes.
	Clients []ClientSpec
	// ServerClientMeta is the meta of the server's own client node.
	ServerClientMeta map[string]string
	// DevicePluginDir holds the trident-gpu binary (required when a client has FakeGPUs).
	DevicePluginDir string
	// Binary is the nomad binary (default: ToolPath("nomad")).
	Binary string
	// Dir is the working directory for data dirs, configs and logs (default: a new temp dir
	// removed on Stop).
	Dir string
	// Logger receives progress messages (default: discard).
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for every node to be ready (default 90s).
	ReadyTimeout time.Duration
}

// Nomad is a running loopback Nomad cluster.
type Nomad struct {
	// Addr is the HTTP address of the server, e.g. http://127.0.0.1:4646.
	Addr string
	// RPCAddr is the server's RPC address (host:port).
	RPCAddr string
	// Dir is the cluster's working directory.
	Dir string
	// NodeNames lists every node: "server" first, then the extra clients in order.
	NodeNames []string

	client  *api.Client
	agents  []*agentProc
	log     *slog.Logger
	ownsDir bool
	once    sync.Once
	stopErr error
}

// agentProc is one started agent process.
type agentProc struct {
	name    string
	cmd     *exec.Cmd
	dataDir string
	logPath string
	done    chan struct{}
}

// ToolPath finds a real tool binary (nomad, nomad-autoscaler, consul), looking in order in
// $TRIDENT_TOOLS_BIN, in the default tools cache that `make tools` (scripts/build-tools.sh)
// builds into when that variable is unset (DefaultToolsDir), in ./bin of the module root,
// then on $PATH. The error tells how to build it.
func ToolPath(name string) (string, error) {
	var dirs []string
	if d := os.Getenv("TRIDENT_TOOLS_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	if d, err := DefaultToolsDir(); err == nil {
		dirs = append(dirs, d)
	}
	if root, err := ModuleRoot(); err == nil {
		dirs = append(dirs, filepath.Join(root, "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s binary not found in %s or $PATH: run `make tools` first", name, strings.Join(dirs, ", "))
}

// DefaultToolsDir is the tools cache outside the clone that scripts/build-tools.sh and the
// GNUmakefile use when $TRIDENT_TOOLS_BIN is unset: ${XDG_CACHE_HOME:-$HOME/.cache}/trident-tools.
func DefaultToolsDir() (string, error) {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home := os.Getenv("HOME")
		if home == "" {
			return "", errors.New("neither $XDG_CACHE_HOME nor $HOME is set")
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "trident-tools"), nil
}

// ModuleRoot returns the directory holding this module's go.mod, searched upwards from the
// working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/trident-sched/trident") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("module root (go.mod of github.com/trident-sched/trident) not found above the working directory")
		}
		dir = parent
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ps, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// dynamicPortBase is the first of the agents' dynamic ports (the tasks' `port` blocks without
// a static port): the server takes 1000 from it, each client the next 1000. They stay below
// listenRange, from which the tests and the agents' own ports are picked, so that a task's
// port never takes a port a test picked (Nomad's default range, 20000-32000, overlapped it).
const dynamicPortBase = 10000

// freePorts returns n distinct loopback ports that were free a moment ago. They are drawn
// at random from below the kernel's ephemeral range: a port the kernel hands out for
// "127.0.0.1:0" can be taken, between our check and the agent's bind, as the local port
// of any outbound connection of a test running in parallel, which made agents fail with
// "address already in use".
func freePorts(n int) ([]int, error) {
	lo, hi := listenRange()
	// Hold every listener until all are chosen so the ports are distinct.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 50*n+1000 {
			return nil, fmt.Errorf("find %d free loopback ports in [%d, %d): gave up after %d tries", n, lo, hi, tries)
		}
		p := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// listenRange is the port range freePorts draws from: up to 12000 ports below the start
// of the kernel's ephemeral range (net.ipv4.ip_local_port_range; 32768 by default).
func listenRange() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				hi = v
			}
		}
	}
	lo = max(1024, hi-12000)
	return lo, hi
}

// Launch starts the cluster and waits until the server has a leader and every node is
// ready. On error everything already started is stopped.
func Launch(ctx context.Context, o NomadOptions) (*Nomad, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(discard{}, nil))
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 90 * time.Second
	}
	if o.Binary == "" {
		p, err := ToolPath("nomad")
		if err != nil {
			return nil, err
		}
		o.Binary = p
	}
	seen := map[string]bool{"server": true}
	for i, c := range o.Clients {
		if c.Name == "" {
			return nil, fmt.Errorf("clients[%d]: name is required", i)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("clients[%d]: duplicate node name %q", i, c.Name)
		}
		seen[c.Name] = true
		if c.FakeGPUs > 0 && o.DevicePluginDir == "" {
			return nil, fmt.Errorf("clients[%d] (%s): fake_gpus needs NomadOptions.DevicePluginDir holding trident-gpu", i, c.Name)
		}
	}
	n := &Nomad{log: o.Logger, Dir: o.Dir}
	if n.Dir == "" {
		d, err := os.MkdirTemp("", "trident-nomad-")
		if err != nil {
			return nil, fmt.Errorf("create cluster dir: %w", err)
		}
		n.Dir, n.ownsDir = d, true
	}
	ok := false
	defer func() {
		if !ok {
			_ = n.Stop(context.Background())
		}
	}()

	// Server (with its own client): http, rpc, serf.
	ports, err := freePorts(3 + 3*len(o.Clients))
	if err != nil {
		return nil, err
	}
	http, rpc, serf := ports[0], ports[1], ports[2]
	n.Addr = fmt.Sprintf("http://127.0.0.1:%d", http)
	n.RPCAddr = fmt.Sprintf("127.0.0.1:%d", rpc)
	serverHCL := agentHCL(agentConfig{
		name: "server", dataDir: filepath.Join(n.Dir, "server"), server: true,
		http: http, rpc: rpc, serf: serf, meta: o.ServerClientMeta, nodeClass: "server",
		dynMin: dynamicPortBase, dynMax: dynamicPortBase + 999,
	})
	if err := n.startAgent(ctx, o.Binary, "server", serverHCL); err != nil {
		return nil, err
	}
	n.NodeNames = append(n.NodeNames, "server")
	for i, c := range o.Clients {
		base := dynamicPortBase + 1000 + 1000*i
		hcl := agentHCL(agentConfig{
			name: c.Name, dataDir: filepath.Join(n.Dir, c.Name), servers: []string{n.RPCAddr},
			http: ports[3+3*i], rpc: ports[4+3*i], serf: ports[5+3*i], meta: c.Meta, nodeClass: c.NodeClass,
			fakeGPUs: c.FakeGPUs, gpuMemMiB: c.FakeGPUMemoryMiB, gpuVendor: c.fakeVendor(), pluginDir: o.DevicePluginDir,
			cpuMHz: c.CPUTotalMHz, memMB: c.MemoryMB, dynMin: base, dynMax: base + 999,
		})
		if c.FakeGPUs > 0 {
			if err := os.MkdirAll(GPUUsageDir(filepath.Join(n.Dir, c.Name)), 0o755); err != nil {
				return nil, fmt.Errorf("clients[%d] (%s): %w", i, c.Name, err)
			}
		}
		if err := n.startAgent(ctx, o.Binary, c.Name, hcl); err != nil {
			return nil, err
		}
		n.NodeNames = append(n.NodeNames, c.Name)
	}

	cfg := api.DefaultConfig()
	cfg.Address = n.Addr
	cl, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("nomad api client: %w", err)
	}
	n.client = cl
	wctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	if err := n.waitReady(wctx, o.Clients); err != nil {
		return nil, err
	}
	o.Logger.Info("nomad cluster ready", "addr", n.Addr, "nodes", strings.Join(n.NodeNames, ","))
	ok = true
	return n, nil
}

type agentConfig struct {
	name, dataDir, nodeClass string
	server                   bool
	servers                  []string
	http, rpc, serf          int
	meta                     map[string]string
	fakeGPUs, gpuMemMiB      int
	gpuVendor                string
	pluginDir                string
	cpuMHz, memMB            int
	dynMin, dynMax           int
}

// agentHCL renders one agent's configuration. Everything binds to loopback.
func agentHCL(c agentConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name = %q\ndata_dir = %q\nbind_addr = \"127.0.0.1\"\ndisable_update_check = true\nlog_level = \"INFO\"\n", c.name, c.dataDir)
	fmt.Fprintf(&b, "advertise {\n  http = \"127.0.0.1\"\n  rpc = \"127.0.0.1\"\n  serf = \"127.0.0.1\"\n}\n")
	fmt.Fprintf(&b, "ports {\n  http = %d\n  rpc = %d\n  serf = %d\n}\n", c.http, c.rpc, c.serf)
	if c.server {
		b.WriteString("server {\n  enabled = true\n  bootstrap_expect = 1\n}\n")
	}
	if c.pluginDir != "" {
		fmt.Fprintf(&b, "plugin_dir = %q\n", c.pluginDir)
	}
	// network_interface = "lo": allocation ports and service addresses stay on loopback.
	b.WriteString("client {\n  enabled = true\n  network_interface = \"lo\"\n")
	if len(c.servers) > 0 {
		fmt.Fprintf(&b, "  servers = [%q]\n", strings.Join(c.servers, `","`))
	}
	if c.nodeClass != "" {
		fmt.Fprintf(&b, "  node_class = %q\n", c.nodeClass)
	}
	fmt.Fprintf(&b, "  min_dynamic_port = %d\n  max_dynamic_port = %d\n", c.dynMin, c.dynMax)
	if c.cpuMHz > 0 {
		fmt.Fprintf(&b, "  cpu_total_compute = %d\n", c.cpuMHz)
	}
	if c.memMB > 0 {
		fmt.Fprintf(&b, "  memory_total_mb = %d\n", c.memMB)
	}
	fmt.Fprintf(&b, "  options = {\n    \"fingerprint.denylist\" = %q\n  }\n", fingerprintDenylist)
	if len(c.meta) > 0 {
		keys := make([]string, 0, len(c.meta))
		for k := range c.meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("  meta = {\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "    %q = %q\n", k, c.meta[k])
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	b.WriteString("plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n")
	if c.fakeGPUs > 0 {
		mem := c.gpuMemMiB
		if mem == 0 {
			mem = 81920
		}
		// The tasks holding the fake devices report their device memory under
		// fake_usage_dir, so that Nomad's alloc stats show it as they would NVML's.
		fmt.Fprintf(&b, "plugin \"trident-gpu\" {\n  config {\n    mode = \"fake\"\n    fake_gpus = %d\n    fake_memory_mib = %d\n    fake_vendor = %q\n    stats_period = \"5s\"\n    fake_usage_dir = %q\n  }\n}\n",
			c.fakeGPUs, mem, c.gpuVendor, GPUUsageDir(c.dataDir))
	}
	return b.String()
}

func (n *Nomad) startAgent(ctx context.Context, bin, name, hcl string) error {
	dir := filepath.Join(n.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("agent %s: create data dir: %w", name, err)
	}
	cfgPath := filepath.Join(n.Dir, name+".hcl")
	if err := os.WriteFile(cfgPath, []byte(hcl), 0o644); err != nil {
		return fmt.Errorf("agent %s: write config: %w", name, err)
	}
	p, err := startProcess(ctx, name, filepath.Join(n.Dir, name+".log"), bin, "agent", "-config", cfgPath)
	if err != nil {
		return err
	}
	p.dataDir = dir
	n.agents = append(n.agents, p)
	n.log.Info("started nomad agent", "name", name, "pid", p.cmd.Process.Pid, "log", p.logPath)
	return nil
}

// startProcess starts a long-running child in its own process group with output to logPath.
func startProcess(ctx context.Context, name, logPath, bin string, args ...string) (*agentProc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: create log: %w", name, err)
	}
	// Not CommandContext: the process must outlive a cancelled start context and be
	// stopped gracefully by Stop.
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Children that leave the process group (go-plugin plugins, raw_exec executors) inherit
	// this variable, so killUnder finds them by their environment.
	cmd.Env = append(os.Environ(), "TRIDENT_HARNESS_DIR="+filepath.Dir(logPath)+"/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	p := &agentProc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	_ = ctx
	return p, nil
}

// waitReady waits for a leader and for every node (with its fake devices) to be ready.
func (n *Nomad) waitReady(ctx context.Context, clients []ClientSpec) error {
	wantGPUs, vendors := map[string]int{}, map[string]string{}
	for _, c := range clients {
		wantGPUs[c.Name], vendors[c.Name] = c.FakeGPUs, c.fakeVendor()
	}
	var last string
	for {
		for _, a := range n.agents {
			select {
			case <-a.done:
				return fmt.Errorf("nomad agent %s exited during startup; last log lines:\n%s", a.name, TailFile(a.logPath, 30))
			default:
			}
		}
		last = n.readiness(wantGPUs, vendors)
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nomad cluster not ready: %s: %w", last, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// readiness returns "" when ready, or what is still missing (vendors: each client's fake
// GPU vendor, ClientSpec.fakeVendor).
func (n *Nomad) readiness(wantGPUs map[string]int, vendors map[string]string) string {
	leader, err := n.client.Status().Leader()
	if err != nil || leader == "" {
		return "no leader yet"
	}
	stubs, _, err := n.client.Nodes().List(nil)
	if err != nil {
		return "list nodes: " + err.Error()
	}
	ready := map[string]string{}
	for _, s := range stubs {
		if s.Status == "ready" {
			ready[s.Name] = s.ID
		}
	}
	for _, name := range n.NodeNames {
		id, ok := ready[name]
		if !ok {
			return "node " + name + " not ready"
		}
		if want := wantGPUs[name]; want > 0 {
			node, _, err := n.client.Nodes().Info(id, nil)
			if err != nil {
				return "node " + name + ": " + err.Error()
			}
			if got := countDevices(node, vendors[name], "gpu"); got < want {
				return fmt.Sprintf("node %s has %d/%d fake GPUs fingerprinted", name, got, want)
			}
		}
	}
	return ""
}

func countDevices(node *api.Node, vendor, typ string) int {
	if node.NodeResources == nil {
		return 0
	}
	c := 0
	for _, d := range node.NodeResources.Devices {
		if d.Vendor == vendor && d.Type == typ {
			for _, inst := range d.Instances {
				if inst.Healthy {
					c++
				}
			}
		}
	}
	return c
}

// API returns a Nomad API client for the cluster.
func (n *Nomad) API() *api.Client { return n.client }

// NodeID returns the ID of the node with the given name.
func (n *Nomad) NodeID(name string) (string, error) {
	stubs, _, err := n.client.Nodes().List(nil)
	if err != nil {
		return "", fmt.Errorf("list nodes: %w", err)
	}
	for _, s := range stubs {
		if s.Name == name {
			return s.ID, nil
		}
	}
	return "", fmt.Errorf("node %q not found", name)
}

// Stop purges every job, waits for allocations to stop, interrupts the agents, unmounts
// leftover allocation mounts and removes the working directory if the harness created it.
// It is safe to call more than once.
func (n *Nomad) Stop(ctx context.Context) error {
	n.once.Do(func() { n.stopErr = n.stop(ctx) })
	return n.stopErr
}

func (n *Nomad) stop(ctx context.Context) error {
	var errs []error
	if n.client != nil {
		n.purgeJobs(ctx)
	}
	// Clients first, the server last, so clients can deregister cleanly.
	for i := len(n.agents) - 1; i >= 0; i-- {
		if err := stopProcess(n.agents[i], 20*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if n.Dir != "" {
		killUnder(n.Dir)
		unmountUnder(n.Dir)
		if n.ownsDir {
			if err := os.RemoveAll(n.Dir); err != nil {
				errs = append(errs, fmt.Errorf("remove %s: %w", n.Dir, err))
			}
		}
	}
	return errors.Join(errs...)
}

// purgeJobs deregisters every job and waits (bounded) for their allocations to stop, so
// tasks, logmon and executors exit before the agents do.
func (n *Nomad) purgeJobs(ctx context.Context) {
	jobs, _, err := n.client.Jobs().List(nil)
	if err != nil {
		return
	}
	for _, j := range jobs {
		_, _, _ = n.client.Jobs().Deregister(j.ID, true, nil)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		allocs, _, err := n.client.Allocations().List(nil)
		if err != nil {
			return
		}
		running := 0
		for _, a := range allocs {
			if a.ClientStatus == "running" || a.ClientStatus == "pending" {
				running++
			}
		}
		if running == 0 {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// stopProcess interrupts p, escalating to SIGKILL of its whole process group.
func stopProcess(p *agentProc, grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	// Children that stayed in the group (logmon, executors) go with it.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	return nil
}

// unmountUnder lazily unmounts every mount point below dir (raw_exec secrets/private
// tmpfs), deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	abs, _ := filepath.Abs(dir)
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasPrefix(f[1], abs+"/") {
			points = append(points, f[1])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// killUnder SIGKILLs every process whose command line or environment mentions dir:
// executors and tasks that left the agent's process group (raw_exec uses setsid).
func killUnder(dir string) {
	abs, _ := filepath.Abs(dir)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if err == nil && strings.Contains(string(b), abs+"/") {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
}

// Logs returns the last lines of every agent's log, each under a "--- name log tail ---"
// header, server first.
func (n *Nomad) Logs(lines int) string {
	var b strings.Builder
	for _, a := range n.agents {
		fmt.Fprintf(&b, "--- %s log tail ---\n%s\n", a.name, TailFile(a.logPath, lines))
	}
	return b.String()
}

// TailFile returns the last lines of the file at path, or a note saying why it could not
// be read.
func TailFile(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// waitHTTP polls url until it answers 200 or ctx ends.
func waitHTTP(ctx context.Context, url string, p *agentProc) error {
	for {
		if p != nil {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited during startup; last log lines:\n%s", p.name, TailFile(p.logPath, 40))
			default:
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", url, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// GPUUsageDir is the fake_usage_dir of the trident-gpu plugin of a client whose data
// directory is dataDir: where the tasks holding its fake devices report their memory.
func GPUUsageDir(dataDir string) string { return filepath.Join(dataDir, "gpu-usage") }
