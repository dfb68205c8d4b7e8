# The Trident planner as a Nomad job: three `trident planner` servers forming one raft
# cluster. The servers find each other through Nomad's native service catalog: the service
# block below registers every allocation with its raft ID and addresses as tags, and each
# server waits for -bootstrap-expect of them before bootstrapping raft.
#
#   nomad job run -var trident_binary=/usr/local/bin/trident jobs/planner.nomad.hcl
#
# Point the autoscaler plugins' planner_addr (jobs/autoscaler.hcl) at any server: followers
# forward writes to the leader. raw_exec keeps the example dependency-free; on a production
# cluster run the binary with the exec or docker driver, and add -token, -tls-* and
# -raft-tls (see docs/planner.md).

variable "trident_binary" {
  type        = string
  default     = "/usr/local/bin/trident"
  description = "absolute path of the trident binary on the clients"
}

variable "nomad_addr" {
  type        = string
  default     = "http://127.0.0.1:4646"
  description = "Nomad HTTP API the planner reads the inventory from and writes job versions to"
}

variable "servers" {
  type        = number
  default     = 3
  description = "raft servers (odd; each on its own client)"
}

job "trident-planner" {
  type = "service"

  group "planner" {
    count = var.servers

    # One server per client: the static ports below, and a raft majority that survives
    # the loss of a node.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    # Raft membership is the bootstrap peer list, so a server must keep its address and
    # its data: static ports, and a sticky, migrating data directory.
    network {
      port "http" {
        static = 4650
      }
      port "raft" {
        static = 4660
      }
    }

    ephemeral_disk {
      sticky  = true
      migrate = true
      size    = 300
    }

    service {
      name     = "trident-planner"
      provider = "nomad"
      port     = "http"
      tags = [
        "raft_id=planner-${NOMAD_ALLOC_INDEX}",
        "raft_addr=${NOMAD_ADDR_raft}",
        "http_addr=http://${NOMAD_ADDR_http}",
      ]

      check {
        type     = "http"
        path     = "/v1/status"
        interval = "10s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 5
      interval = "5m"
      delay    = "10s"
      mode     = "delay"
    }

    task "planner" {
      driver = "raw_exec"

      config {
        command = var.trident_binary
        args = [
          "planner",
          "-id", "planner-${NOMAD_ALLOC_INDEX}",
          "-bind", "${NOMAD_ADDR_raft}",
          "-http", "${NOMAD_ADDR_http}",
          "-data-dir", "${NOMAD_ALLOC_DIR}/data",
          "-nomad-addr", var.nomad_addr,
          "-nomad-service", "trident-planner",
          "-bootstrap-expect", "${var.servers}",
          "-catch-up", "2m",
        ]
      }

      resources {
        cpu    = 1000
        memory = 512
      }
    }
  }
}
