package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/e2e/harness"
)

// agentPlugins declares our three autoscaler plugins in the agent config.
const agentPlugins = `
apm "trident-apm" {
  driver = "trident-apm"
}
strategy "trident" {
  driver = "trident"
}
target "trident-target" {
  driver = "trident-target"
}
`

func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatal("python3 is needed to serve the fake operator's metrics")
	return ""
}

// metricsJob is a one-group job whose instances each serve a static Prometheus page with
// a backlog of 50 records, registered as the Nomad service "<job>-<group>", with a
// scaling policy using trident-apm + trident + trident-target.
func metricsJob(py string) string {
	return fmt.Sprintf(`
job "web" {
  datacenters = ["*"]
  group "op" {
    count = 1
    network {
      port "metrics" {}
    }
    service {
      name     = "web-op"
      provider = "nomad"
      port     = "metrics"
      tags     = ["trident", "pipeline=web", "operator=op"]
    }
    scaling {
      enabled = true
      min     = 1
      max     = 3
      policy {
        evaluation_interval = "2s"
        cooldown            = "2s"
        check "backlog" {
          source = "trident-apm"
          query  = "backlog/web/op"
          strategy "trident" {
            target_backlog = "40"
          }
        }
        target "trident-target" {}
      }
    }
    task "serve" {
      driver = "raw_exec"
      config {
        command = %q
        args    = ["-m", "http.server", "${NOMAD_PORT_metrics}", "--bind", "127.0.0.1", "--directory", "${NOMAD_TASK_DIR}"]
      }
      template {
        destination = "local/metrics"
        data        = <<EOT
# TYPE trident_queue_length gauge
trident_queue_length{pipeline="web",operator="op"} 50
# TYPE trident_records_out_total counter
trident_records_out_total{pipeline="web",operator="op"} 10
EOT
      }
      resources {
        cpu    = 50
        memory = 64
      }
    }
  }
}`, py)
}

const gpuJob = `
job "infer" {
  datacenters = ["*"]
  group "llm" {
    count = 2
    task "serve" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo visible=$NVIDIA_VISIBLE_DEVICES; sleep 3600"]
      }
      resources {
        cpu    = 50
        memory = 64
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "40 GiB"
          }
        }
      }
    }
  }
}`

// parseJob has the real Nomad server parse the job file.
func parseJob(t *testing.T, cl *api.Client, hcl string) *api.Job {
	t.Helper()
	job, err := cl.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: hcl, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse job: %v", err)
	}
	return job
}

// waitFor polls cond every 500ms until it returns true or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
}

// TestLoopWired proves the autoscaler loads all three trident plugins and scales a real
// job through them, and that a job requesting nvidia/gpu lands only on the client whose
// trident-gpu device plugin fingerprinted fake GPUs.
func TestLoopWired(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: starts real Nomad and autoscaler processes")
	}
	asDir, devDir := harness.BuildPlugins(t)
	n := harness.StartNomad(t, harness.NomadOptions{
		DevicePluginDir: devDir,
		Clients: []harness.ClientSpec{
			{Name: "cpu1", NodeClass: "cpu", Meta: map[string]string{"trident_pool": "cpu"}},
			{Name: "gpu1", NodeClass: "gpu", Meta: map[string]string{"trident_pool": "gpu"}, FakeGPUs: 2, FakeGPUMemoryMiB: 81920},
		},
	})
	cl := n.API()

	t.Run("device fingerprint", func(t *testing.T) {
		id, err := n.NodeID("gpu1")
		if err != nil {
			t.Fatal(err)
		}
		node, _, err := cl.Nodes().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, d := range node.NodeResources.Devices {
			if d.Vendor != "nvidia" || d.Type != "gpu" {
				continue
			}
			found = true
			mem, ok := d.Attributes["memory"]
			if !ok || mem.IntVal == nil || *mem.IntVal != 81920 || mem.Unit != "MiB" {
				t.Errorf("memory attribute = %+v, want 81920 MiB", mem)
			}
			if len(d.Instances) != 2 {
				t.Errorf("gpu1 has %d GPU instances, want 2", len(d.Instances))
			}
		}
		if !found {
			t.Fatal("gpu1 has no nvidia/gpu device group")
		}
	})

	t.Run("gpu job placed on gpu node only", func(t *testing.T) {
		resp, _, err := cl.Jobs().Register(parseJob(t, cl, gpuJob), nil)
		if err != nil {
			t.Fatalf("register: %v", err)
		}
		_ = resp
		gpuID, _ := n.NodeID("gpu1")
		waitFor(t, 60*time.Second, "2 running GPU allocations", func() (bool, string) {
			allocs, _, err := cl.Jobs().Allocations("infer", false, nil)
			if err != nil {
				return false, err.Error()
			}
			running := 0
			var states []string
			for _, a := range allocs {
				states = append(states, a.NodeName+":"+a.ClientStatus)
				if a.ClientStatus == "running" {
					if a.NodeID != gpuID {
						t.Fatalf("GPU allocation %s placed on %s, want gpu1", a.ID, a.NodeName)
					}
					running++
				}
			}
			return running == 2, strings.Join(states, ",")
		})
		allocs, _, _ := cl.Jobs().Allocations("infer", false, nil)
		seen := map[string]bool{}
		for _, stub := range allocs {
			a, _, err := cl.Allocations().Info(stub.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range a.AllocatedResources.Tasks {
				for _, d := range tr.Devices {
					for _, id := range d.DeviceIDs {
						if seen[id] {
							t.Errorf("GPU %s reserved twice", id)
						}
						seen[id] = true
					}
				}
			}
		}
		if len(seen) != 2 {
			t.Errorf("reserved GPUs = %v, want 2 distinct", seen)
		}
		// A third instance cannot fit: both GPUs are taken, so it must stay pending.
		job := parseJob(t, cl, gpuJob)
		three := 3
		job.TaskGroups[0].Count = &three
		if _, _, err := cl.Jobs().Register(job, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		summ, _, err := cl.Jobs().Summary("infer", nil)
		if err != nil {
			t.Fatal(err)
		}
		if s := summ.Summary["llm"]; s.Running != 2 || (s.Queued+s.Starting) < 1 {
			t.Errorf("with 2 fake GPUs and count=3: summary %+v, want 2 running and 1 queued", s)
		}
		if _, _, err := cl.Jobs().Deregister("infer", true, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("autoscaler scales through trident plugins", func(t *testing.T) {
		as := harness.StartAutoscaler(t, n, harness.AutoscalerOptions{PluginDir: asDir, Plugins: agentPlugins, EvaluationInterval: 2 * time.Second})
		if _, _, err := cl.Jobs().Register(parseJob(t, cl, metricsJob(python(t))), nil); err != nil {
			t.Fatalf("register: %v", err)
		}
		waitFor(t, 120*time.Second, "web/op scaled to 3 by the autoscaler", func() (bool, string) {
			st, _, err := cl.Jobs().ScaleStatus("web", nil)
			if err != nil {
				return false, err.Error()
			}
			tg := st.TaskGroups["op"]
			return tg.Desired == 3 && tg.Running == 3, fmt.Sprintf("desired=%d running=%d", tg.Desired, tg.Running)
		})
		st, _, err := cl.Jobs().ScaleStatus("web", nil)
		if err != nil {
			t.Fatal(err)
		}
		var reasons []string
		for _, e := range st.TaskGroups["op"].Events {
			reasons = append(reasons, e.Message)
		}
		if !strings.Contains(strings.Join(reasons, "|"), "backlog") {
			t.Errorf("scaling events %q do not come from the trident strategy", reasons)
		}
		log := as.Log()
		for _, p := range []string{"trident-apm", "trident-target", "trident"} {
			if !strings.Contains(log, p) {
				t.Errorf("autoscaler log does not mention plugin %s", p)
			}
		}
	})
}
