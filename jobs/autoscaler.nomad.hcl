# Runs nomad-autoscaler with Trident's plugins as a Nomad service job (raw_exec).
#   nomad job run -var autoscaler_bin=$PWD/bin/nomad-autoscaler \
#     -var plugin_dir=$PWD/bin/autoscaler-plugins -var planner=http://127.0.0.1:4650 \
#     jobs/autoscaler.nomad.hcl
variable "autoscaler_bin" {
  type        = string
  description = "absolute path of the nomad-autoscaler binary"
}

variable "plugin_dir" {
  type        = string
  description = "directory holding trident, trident-apm and trident-target"
}

variable "nomad_addr" {
  type    = string
  default = "http://127.0.0.1:4646"
}

variable "planner" {
  type    = string
  default = "http://127.0.0.1:4650"
}

job "trident-autoscaler" {
  type = "service"

  group "autoscaler" {
    count = 1

    network {
      port "http" {}
    }

    task "agent" {
      driver = "raw_exec"

      config {
        command = var.autoscaler_bin
        args    = ["agent", "-config", "${NOMAD_TASK_DIR}/agent.hcl"]
      }

      template {
        destination = "local/agent.hcl"
        data        = <<EOT
plugin_dir = "${var.plugin_dir}"
http {
  bind_address = "127.0.0.1"
  bind_port    = {{ env "NOMAD_PORT_http" }}
}
nomad {
  address = "${var.nomad_addr}"
}
policy {
  default_evaluation_interval = "10s"
  default_cooldown            = "30s"
}
apm "trident-apm" {
  driver = "trident-apm"
  config = {
    planner_addr = "${var.planner}"
  }
}
strategy "trident" {
  driver = "trident"
  config = {
    planner_addr = "${var.planner}"
  }
}
target "trident-target" {
  driver = "trident-target"
  config = {
    planner_addr = "${var.planner}"
  }
}
EOT
      }

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
