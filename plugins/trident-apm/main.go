// Command trident-apm is the Nomad Autoscaler APM plugin serving Trident's observation
// layer (capacity, throughput, backlog per operator). Put it in the agent's plugin_dir.
package main

import (
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/plugins"

	apmplugin "github.com/trident-sched/trident/apm/plugin"
)

func main() {
	plugins.Serve(func(log hclog.Logger) interface{} { return apmplugin.New(log) })
}
