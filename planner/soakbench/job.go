package soakbench

import (
	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
)

// Operators of the soak pipeline, source side first.
var Operators = []string{"src", "work"}

// Node sizes the planner models for the Nomad node the soak runs on (its client meta):
// 1.5 cores fit six instances of 0.25 cores, so the two capacity settings of the busy
// phase have different optimal splits (2+4 and 4+2).
const (
	nodeCPUCores = "1.5"
	nodeMemoryMB = "4096"
)

func ptr[T any](v T) *T { return &v }

// PipelineJob returns the Nomad job the soak registers as its pipeline: two operators
// (src -> work), each a task group of one raw_exec /bin/sleep task with trident_* group
// meta (0.25 cores and 256 MB per instance for the planner; Nomad reserves only 20 MHz and
// 32 MB, since the sleepers use nothing).
func PipelineJob(id string) *api.Job {
	group := func(name, order string) *api.TaskGroup {
		return &api.TaskGroup{
			Name: ptr(name), Count: ptr(1),
			Meta: map[string]string{
				opcontract.MetaOrder: order, opcontract.MetaCPU: "0.25", opcontract.MetaMemoryMB: "256",
				opcontract.MetaConfig: "mode=a",
			},
			Tasks: []*api.Task{{
				Name: "run", Driver: "raw_exec",
				Config:    map[string]any{"command": "/bin/sleep", "args": []string{"3600"}},
				Resources: &api.Resources{CPU: ptr(20), MemoryMB: ptr(32)},
			}},
		}
	}
	return &api.Job{
		ID: ptr(id), Name: ptr(id), Type: ptr("service"), Datacenters: []string{"*"},
		TaskGroups: []*api.TaskGroup{group(Operators[0], "0"), group(Operators[1], "1")},
	}
}

// capacities are the two settings the busy phase alternates between (records/s per
// instance of src and work).
var capacities = [2][2]float64{{10, 5}, {5, 10}}
