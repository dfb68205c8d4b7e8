package nomadact

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// testJob is a two-operator pipeline: "src" (CPU) and "gpu" (one accelerator with at least
// 8000 MiB). Its task exits at once when its config contains "bad", so a transition to
// such a config fails its deployment, exits 137 (like an OOM kill) when it contains
// "oom", and exits 1 after printing PyTorch's CUDA OOM message when it contains "cudaoom". "src" never restarts a task; "gpu" restarts it three times, then waits out the
// restart interval (mode "delay"), so Nomad alone would fail an OOMing rollout only at
// the healthy deadline.
func testJob(id string) *api.Job {
	task := func(name string) *api.Task {
		return &api.Task{
			Name: name, Driver: "raw_exec",
			Config: map[string]any{
				"command": "/bin/sh",
				"args":    []string{"-c", `case "$NOMAD_META_trident_config" in *bad*) exit 3;; *cudaoom*) echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2; exit 1;; *oom*) exit 137;; esac; exec sleep 3600`},
			},
			Resources:   &api.Resources{CPU: ptr(20), MemoryMB: ptr(32)},
			KillTimeout: ptr(2 * time.Second),
		}
	}
	group := func(name string, meta map[string]string, restart *api.RestartPolicy) *api.TaskGroup {
		return &api.TaskGroup{
			Name: ptr(name), Count: ptr(1), Meta: meta, Tasks: []*api.Task{task("run")},
			RestartPolicy:    restart,
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)},
		}
	}
	never := &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	delayed := &api.RestartPolicy{Attempts: ptr(3), Interval: ptr(10 * time.Minute), Delay: ptr(time.Second), Mode: ptr("delay")}
	return &api.Job{
		ID: ptr(id), Name: ptr(id), Type: ptr("service"), Datacenters: []string{"*"},
		Meta: map[string]string{"trident_pipeline": "true"},
		TaskGroups: []*api.TaskGroup{
			group("src", map[string]string{
				"trident_order": "0", "trident_cpu": "0.25", "trident_memory_mb": "64",
				"trident_output_bytes": "100", "trident_config": "mode=fast",
			}, never),
			group("gpu", map[string]string{
				"trident_order": "1", "trident_cpu": "0.25", "trident_memory_mb": "64",
				"trident_gpus": "1", "trident_gpu_memory_mb": "8000",
				"trident_params": "batch=int[1,64]", "trident_config": "batch=8",
			}, delayed),
		},
	}
}
