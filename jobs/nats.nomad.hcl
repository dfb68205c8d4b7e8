# The data plane of the example pipelines: an embedded nats-server with JetStream, run by
# `trident operator -role nats-server` (raw_exec). It listens on 127.0.0.1 only, on the static
# port nats_port (default 4222, the default of every `trident operator` and `trident dataset`),
# and registers the Nomad service "trident-nats". nats_port = 0 lets Nomad pick a port from the
# client's dynamic range (read it from `nomad alloc status` or the service); the local demo and
# the end-to-end tests run it that way, so that no other process can take the port first.
#   nomad job run -var trident_bin=$PWD/bin/trident jobs/nats.nomad.hcl
# The JetStream store lives in the allocation directory unless store_dir is set; set it to keep
# streams across job replacements.

variable "trident_bin" {
  type        = string
  description = "absolute path of the trident binary"
}

variable "nats_port" {
  type        = number
  default     = 4222
  description = "static client port on 127.0.0.1 (0 = a dynamic port picked by Nomad)"
}

variable "store_dir" {
  type        = string
  default     = ""
  description = "JetStream store directory (empty = inside the allocation)"
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

job "trident-nats" {
  type        = "service"
  datacenters = var.datacenters

  group "nats" {
    count = 1

    network {
      port "nats" {
        static = var.nats_port
      }
      port "nats_http" {}
    }

    service {
      provider = "nomad"
      name     = "trident-nats"
      port     = "nats"
      tags     = ["trident", "nats"]

      check {
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 10
      interval = "10m"
      delay    = "2s"
      mode     = "delay"
    }

    task "nats-server" {
      driver = "raw_exec"

      config {
        command = var.trident_bin
        args = concat(["operator", "-role", "nats-server"],
        var.store_dir == "" ? [] : ["-store-dir", var.store_dir])
      }

      kill_timeout = "10s"

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
