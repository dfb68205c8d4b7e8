// Command trident-gpu is the Nomad device plugin that exposes NVIDIA GPUs (or a fake
// inventory on hosts without GPUs) as `nvidia/gpu` devices. Put it in the client's
// plugin_dir and configure it with a `plugin "trident-gpu"` block.
package main

import (
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins"

	"github.com/trident-sched/trident/plugins/gpu"
)

func main() {
	plugins.Serve(func(log hclog.Logger) interface{} { return gpu.New(log) })
}
