// Command trident is a Nomad Autoscaler plugin of Trident for Nomad (strategy/plugin). Put it in the
// agent's plugin_dir.
package main

import (
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad-autoscaler/plugins"

	stratplugin "github.com/trident-sched/trident/strategy/plugin"
)

func main() {
	plugins.Serve(func(log hclog.Logger) interface{} { return stratplugin.New(log) })
}
