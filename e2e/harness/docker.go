package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trident-sched/trident/internal/localcluster"
)

// Docker is a docker daemon started for one test, with its own socket, data and exec roots
// under a temp directory, so it never touches a system daemon's state.
type Docker struct {
	// Host is its endpoint, unix://<dir>/docker.sock (a DOCKER_HOST value).
	Host string
	// Dir holds its socket, data, exec root and log.
	Dir string

	cmd  *exec.Cmd
	done chan struct{}
}

// StartDocker starts dockerd for a test and stops it in t.Cleanup (which also stops every
// container it still runs). It fails the test (never skips) when dockerd is missing.
//
// The daemon changes nothing on the host's network (no iptables rules, no docker0 bridge):
// containers use host networking. It uses the vfs storage driver (no overlay mounts to leak)
// and registers runc under the runtime name "nvidia", so that Nomad's docker driver, which
// switches to that runtime whenever a device plugin sets NVIDIA_VISIBLE_DEVICES, can start
// containers on the fake GPUs of trident-gpu.
//
// DOCKER_HOST is set to the daemon for the rest of the test: Nomad agents started afterwards
// inherit it, so their docker driver uses this daemon.
func StartDocker(t testing.TB) *Docker {
	t.Helper()
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		t.Fatalf("dockerd not found (Debian package docker.io; `make deps` installs it): %v", err)
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatalf("runc not found (installed with docker.io): %v", err)
	}
	dir, err := os.MkdirTemp("", "trident-docker-")
	if err != nil {
		t.Fatalf("docker dir: %v", err)
	}
	d := &Docker{Host: "unix://" + filepath.Join(dir, "docker.sock"), Dir: dir, done: make(chan struct{})}
	cfg := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(cfg, []byte("{}\n"), 0o644); err != nil {
		t.Fatalf("docker config: %v", err)
	}
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		t.Fatalf("docker log: %v", err)
	}
	d.cmd = exec.Command(dockerd,
		"--config-file", cfg,
		"--host", d.Host,
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"),
		"--storage-driver", "vfs",
		"--iptables=false", "--ip6tables=false", "--bridge=none", "--userland-proxy=false",
		"--add-runtime", "nvidia="+runc,
		"--log-level", "warn",
	)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		_ = os.RemoveAll(dir)
		t.Fatalf("start dockerd: %v", err)
	}
	go func() {
		_ = d.cmd.Wait()
		logf.Close()
		close(d.done)
	}()
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("stop dockerd: %v", err)
		}
		if t.Failed() {
			t.Logf("dockerd log tail:\n%s", tail(filepath.Join(dir, "dockerd.log"), 30))
		}
		unmountUnder(dir)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove docker dir: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.waitReady(ctx); err != nil {
		t.Fatalf("dockerd did not answer: %v\n%s", err, tail(filepath.Join(dir, "dockerd.log"), 30))
	}
	t.Setenv("DOCKER_HOST", d.Host)
	return d
}

// waitReady polls the daemon's /_ping until it answers OK.
func (d *Docker) waitReady(ctx context.Context) error {
	hc := d.HTTPClient()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
		resp, err := hc.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "OK" {
				return nil
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
		}
		select {
		case <-d.done:
			return errors.New("dockerd exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// HTTPClient talks to the daemon's API over its socket (URLs with any host, e.g.
// http://docker/containers/json).
func (d *Docker) HTTPClient() *http.Client {
	sock := strings.TrimPrefix(d.Host, "unix://")
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}

// stop terminates dockerd (it stops its containers and its containerd first) and kills what
// is left of its process group after 45 s.
func (d *Docker) stop() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(45 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
		return errors.New("dockerd did not stop within 45s; killed")
	}
	// containerd-shims of containers dockerd failed to stop share its process group.
	_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	return nil
}

// BuildOperatorImage builds the operator image (scripts/build-operator-image.sh: FROM
// scratch, a static trident) into d with tag, and returns the path of the static trident
// binary it contains (for raw_exec tasks of the same test).
func BuildOperatorImage(t testing.TB, d *Docker, tag string) string {
	t.Helper()
	root, err := localcluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "trident")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "build-operator-image.sh"), tag)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+d.Host, "BIN_OUT="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the operator image: %v\n%s", err, out)
	}
	return bin
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			mounts = append(mounts, fields[4])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}

// tail returns the last n lines of file.
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
