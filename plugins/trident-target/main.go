// Command trident-target is a Nomad Autoscaler plugin of Trident for Nomad (target/plugin). Put it in the
// agent's plugin_dir.
package main

import (
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/plugins"

	targetplugin "github.com/trident-sched/trident/target/plugin"
)

func main() {
	plugins.Serve(func(log hclog.Logger) interface{} { return targetplugin.New(log) })
}
