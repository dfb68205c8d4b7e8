// Package depcheck pins the module's chosen dependencies so that go.sum covers them all
// before every package that uses them exists. It is never imported.
package depcheck

import (
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	_ "github.com/bartolsthoorn/gohighs/highs"
	_ "github.com/hashicorp/consul/api"
	_ "github.com/hashicorp/nomad-autoscaler/plugins"
	_ "github.com/hashicorp/nomad-autoscaler/plugins/apm"
	_ "github.com/hashicorp/nomad-autoscaler/plugins/strategy"
	_ "github.com/hashicorp/nomad-autoscaler/plugins/target"
	_ "github.com/hashicorp/nomad-autoscaler/sdk"
	_ "github.com/hashicorp/nomad/api"
	_ "github.com/hashicorp/nomad/plugins/device"
	_ "github.com/hashicorp/raft"
	_ "github.com/hashicorp/raft-boltdb/v2"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/common/expfmt"
	_ "gonum.org/v1/gonum/mat"
	_ "gonum.org/v1/gonum/optimize"
	_ "gonum.org/v1/gonum/stat/distuv"
)
