package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// TestStopLeavesNothing starts a real cluster, runs a raw_exec job whose task would
// outlive the agent, stops the cluster, and checks that no process, mount or directory
// of the cluster remains.
func TestStopLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real Nomad")
	}
	dir, err := os.MkdirTemp("", "trident-harness-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, err := Launch(ctx, NomadOptions{Clients: []ClientSpec{{Name: "c1", NodeClass: "cpu"}}})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	os.RemoveAll(dir)
	dir = n.Dir
	job, err := n.API().Jobs().ParseHCLOpts(&api.JobsParseRequest{Canonicalize: true, JobHCL: `
job "sleeper" {
  datacenters = ["*"]
  group "g" {
    count = 2
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}`})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.API().Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, _, err := n.API().Jobs().Summary("sleeper", nil)
		if err == nil && s.Summary["g"].Running == 2 {
			break
		}
		if time.Now().After(deadline) {
			_ = n.Stop(ctx)
			t.Fatalf("sleeper never ran: %+v %v", s, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cluster dir %s still exists (err=%v)", dir, err)
	}
	if leaked := processesMentioning(dir); len(leaked) > 0 {
		t.Errorf("processes still reference %s: %v", dir, leaked)
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	if strings.Contains(string(mounts), dir) {
		t.Errorf("mounts under %s remain", dir)
	}
}

func processesMentioning(dir string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if err == nil && strings.Contains(string(b), dir+"/") {
				out = append(out, e.Name()+":"+strings.ReplaceAll(string(b[:min(len(b), 80)]), "\x00", " "))
				break
			}
		}
	}
	return out
}

func TestAgentHCLStaysOnLoopback(t *testing.T) {
	h := agentHCL(agentConfig{name: "c", dataDir: "/d", http: 1, rpc: 2, serf: 3, fakeGPUs: 2, pluginDir: "/p"})
	for _, want := range []string{
		`bind_addr = "127.0.0.1"`, `disable_update_check = true`, `network_interface = "lo"`,
		`"fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"`,
		`plugin "trident-gpu"`, `fake_gpus = 2`,
	} {
		if !strings.Contains(h, want) {
			t.Errorf("agent config lacks %s:\n%s", want, h)
		}
	}
}
