# GENERATED from jobs/pdf-curation.nomad.hcl by
#   go test ./e2e -run TestDockerJobFiles -update-docker-jobs
# (edit that file, then regenerate). The same pipeline with every operator in a container of
# the operator image: `make image` builds it FROM scratch with a static trident binary,
# whose entrypoint is /trident, so the args start with "operator". Nomad's docker driver runs
# it with host networking: the operator binds the port Nomad assigned, as under raw_exec, and
# reaches NATS on 127.0.0.1. Accelerator groups request nvidia/gpu devices: the device plugin
# sets NVIDIA_VISIBLE_DEVICES, and the docker driver then starts the container with the runtime
# its nvidia_runtime option names (the NVIDIA container runtime on a GPU host). The job keeps
# the name and the service names of the raw_exec file: run one or the other.
#
# PDF curation pipeline (the Trident paper's document pipeline, simulated): parse -> layout -> segment (documents fan out into ~10 content blocks) -> ocr-text | ocr-table | ocr-formula (LLM-based OCR with continuous batching, one accelerator each) -> aggregate (the sink).
#
# One group per operator; each group's meta is the operator's description for Trident (the
# apm/opcontract keys: stage order, per-instance resources, output record size,
# amplification, workload features, tunable parameter space, current config, cold start) and
# its scaling block hands the group to the Trident autoscaler plugins. Every instance runs
# `trident operator` (sim/worker): it pulls from the NATS JetStream subject pdf.<group>, publishes
# downstream, and serves the operator metrics on its "metrics" port, registered as the Nomad
# service "pdf-curation-<group>". The operator reads its config from NOMAD_META_trident_config and its
# epoch from NOMAD_META_trident_config_epoch, so the planner changes configs by rewriting meta.
#
# Needs jobs/nats.nomad.hcl running first, then:
#   make image && nomad job run -var speed=10 jobs/pdf-curation-docker.nomad.hcl
#   trident dataset gen -pipeline pdf -docs 2000 -nats nats://127.0.0.1:4222
#   trident dataset verify -pipeline pdf -nats nats://127.0.0.1:4222 -wait 30m
# Without the trident-gpu device plugin add -var gpu_devices=false (accelerator groups then
# run without a device request; their simulated device memory still comes from meta).
# Accelerator operators bound their input queues (-var accel_queue_cap, default 2048 records
# per operator; 0 = unbounded): the operators feeding them hold their outputs while a queue is
# full and export the time as trident_output_blocked_seconds_total.
# Nomad resources are the meta needs scaled by cpu_mhz_per_core and memory_fraction, so the
# simulated pipeline fits a laptop; the meta keeps the modelled needs for the planner.

variable "image" {
  type        = string
  default     = "trident-operator:dev"
  description = "the operator image (make image)"
}

variable "nats_url" {
  type    = string
  default = "nats://127.0.0.1:4222"
}

variable "speed" {
  type        = string
  default     = "1"
  description = "speed-up factor of the simulated service times"
}

variable "accel_queue_cap" {
  type        = string
  default     = "2048"
  description = "bound of each accelerator operator's input queue in records (undelivered + in service, over all its instances; soft): upstream operators wait while it is full; 0 = unbounded"
}

variable "cpu_mhz_per_core" {
  type        = number
  default     = 100
  description = "Nomad cpu (MHz) reserved per modelled core"
}

variable "memory_fraction" {
  type        = number
  default     = 0.0625
  description = "Nomad memory reserved as a fraction of the modelled trident_memory_mb"
}

variable "gpu_devices" {
  type        = bool
  default     = true
  description = "request an nvidia/gpu device (>= 40 GiB) for accelerator operators"
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

job "pdf-curation" {
  type        = "service"
  datacenters = var.datacenters

  # When the cluster runs other pipelines too (docs/planner.md#many-pipelines): the
  # pipeline's weight in the planner's joint round (default: the job priority / 50), a
  # guaranteed throughput in documents/s, and, for a finite dataset, batch admission
  # (queued while its minimums do not fit; register it with `trident pipeline register
  # -file` so that nothing runs before it is admitted).
  # meta {
  #   trident_weight         = "2"
  #   trident_min_throughput = "5"
  #   trident_batch          = "true"
  #   trident_input_records  = "2000"
  # }

  # Rolling, one instance at a time, healthy when the /healthz check passes; never reverted
  # automatically (the planner never rolls back already-transitioned instances).
  update {
    max_parallel      = 1
    health_check      = "checks"
    min_healthy_time  = "5s"
    healthy_deadline  = "2m"
    progress_deadline = "5m"
    auto_revert       = false
  }

  meta {
    # Informational (Trident reads the groups' meta only): the simulated pipeline the tasks run.
    trident_pipeline = "pdf"
  }

  group "parse" {
    count = 1

    meta {
      trident_order         = "0"
      trident_cpu           = "1"
      trident_memory_mb     = "1024"
      trident_gpus          = "0"
      trident_synchronous   = "true"
      trident_gpu_memory_mb = "0"
      trident_output_bytes  = "1200000"
      trident_amplification = "1"
      trident_features      = "pages"
      trident_params        = "threads=int[1,8]"
      trident_config        = "threads=1"
      trident_config_epoch  = "0"
      trident_cold_start_s  = "2"
      trident_metrics_port  = "metrics"
    }

    network {
      port "metrics" {}
    }

    service {
      provider = "nomad"
      name     = "pdf-curation-parse"
      port     = "metrics"
      tags     = ["trident", "pipeline=pdf", "operator=parse"]

      check {
        type     = "http"
        path     = "/healthz"
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

    scaling {
      enabled = true
      min     = 1
      max     = 16

      policy {
        cooldown            = "20s"
        evaluation_interval = "10s"

        check "capacity" {
          source = "trident-apm"
          query  = "capacity/pdf-curation/parse"

          strategy "trident" {}
        }

        target "trident-target" {}
      }
    }

    task "operator" {
      driver = "docker"

      config {
        image        = var.image
        network_mode = "host"
        args         = ["operator", "-pipeline", "pdf", "-stage", "parse", "-nats", var.nats_url, "-speed", var.speed]
      }

      resources {
        cpu    = ceil(1 * var.cpu_mhz_per_core)
        memory = ceil(1024 * var.memory_fraction)
      }
    }
  }

  group "layout" {
    count = 1

    meta {
      trident_order         = "1"
      trident_cpu           = "2"
      trident_memory_mb     = "2048"
      trident_gpus          = "0"
      trident_synchronous   = "true"
      trident_gpu_memory_mb = "0"
      trident_output_bytes  = "1500000"
      trident_amplification = "1"
      trident_features      = "pages,density"
      trident_params        = "threads=int[1,8]"
      trident_config        = "threads=2"
      trident_config_epoch  = "0"
      trident_cold_start_s  = "5"
      trident_metrics_port  = "metrics"
    }

    network {
      port "metrics" {}
    }

    service {
      provider = "nomad"
      name     = "pdf-curation-layout"
      port     = "metrics"
      tags     = ["trident", "pipeline=pdf", "operator=layout"]

      check {
        type     = "http"
        path     = "/healthz"
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

    scaling {
      enabled = true
      min     = 1
      max     = 16

      policy {
        cooldown            = "20s"
        evaluation_interval = "10s"

        check "capacity" {
          source = "trident-apm"
          query  = "capacity/pdf-curation/layout"

          strategy "trident" {}
        }

        target "trident-target" {}
      }
    }

    task "operator" {
      driver = "docker"

      config {
        image        = var.image
        network_mode = "host"
        args         = ["operator", "-pipeline", "pdf", "-stage", "layout", "-nats", var.nats_url, "-speed", var.speed]
      }

      resources {
        cpu    = ceil(2 * var.cpu_mhz_per_core)
        memory = ceil(2048 * var.memory_fraction)
      }
    }
  }

  group "segment" {
    count = 1

    meta {
      trident_order         = "2"
      trident_cpu           = "1"
      trident_memory_mb     = "1024"
      trident_gpus          = "0"
      trident_synchronous   = "true"
      trident_gpu_memory_mb = "0"
      trident_output_bytes  = "60000"
      trident_amplification = "10"
      trident_features      = "pages"
      trident_params        = "threads=int[1,8]"
      trident_config        = "threads=1"
      trident_config_epoch  = "0"
      trident_cold_start_s  = "2"
      trident_metrics_port  = "metrics"
    }

    network {
      port "metrics" {}
    }

    service {
      provider = "nomad"
      name     = "pdf-curation-segment"
      port     = "metrics"
      tags     = ["trident", "pipeline=pdf", "operator=segment"]

      check {
        type     = "http"
        path     = "/healthz"
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

    scaling {
      enabled = true
      min     = 1
      max     = 16

      policy {
        cooldown            = "20s"
        evaluation_interval = "10s"

        check "capacity" {
          source = "trident-apm"
          query  = "capacity/pdf-curation/segment"

          strategy "trident" {}
        }

        target "trident-target" {}
      }
    }

    task "operator" {
      driver = "docker"

      config {
        image        = var.image
        network_mode = "host"
        args         = ["operator", "-pipeline", "pdf", "-stage", "segment", "-nats", var.nats_url, "-speed", var.speed]
      }

      resources {
        cpu    = ceil(1 * var.cpu_mhz_per_core)
        memory = ceil(1024 * var.memory_fraction)
      }
    }
  }

  group "ocr-text" {
    count = 1

    meta {
      trident_order         = "3"
      trident_cpu           = "2"
      trident_memory_mb     = "4096"
      trident_gpus          = "1"
      trident_gpu_memory_mb = "40960"
      trident_output_bytes  = "2000"
      trident_amplification = "1"
      trident_features      = "input_tokens,output_tokens"
      trident_params        = "max_num_seqs=int[4,256,log]; block_size=cat{8,16,32}; max_num_batched_tokens=int[2048,32768,log]"
      trident_config        = "max_num_seqs=8,block_size=16,max_num_batched_tokens=8192"
      trident_config_epoch  = "0"
      trident_cold_start_s  = "30"
      trident_metrics_port  = "metrics"
    }

    network {
      port "metrics" {}
    }

    service {
      provider = "nomad"
      name     = "pdf-curation-ocr-text"
      port     = "metrics"
      tags     = ["trident", "pipeline=pdf", "operator=ocr-text"]

      check {
        type     = "http"
        path     = "/healthz"
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

    scaling {
      enabled = true
      min     = 1
      max     = 8

      policy {
        cooldown            = "20s"
        evaluation_interval = "10s"

        check "capacity" {
          source = "trident-apm"
          query  = "capacity/pdf-curation/ocr-text"

          strategy "trident" {}
        }

        target "trident-target" {}
      }
    }

    task "operator" {
      driver = "docker"

      config {
        image        = var.image
        network_mode = "host"
        args         = ["operator", "-pipeline", "pdf", "-stage", "ocr-text", "-nats", var.nats_url, "-speed", var.speed, "-queue-cap", var.accel_queue_cap]
      }

      resources {
        cpu    = ceil(2 * var.cpu_mhz_per_core)
        memory = ceil(4096 * var.memory_fraction)

        dynamic "device" {
          for_each = var.gpu_devices ? [1] : []
          iterator = gpu
          labels   = ["nvidia/gpu"]

          content {
            count = 1

            constraint {
              attribute = "${device.attr.memory}"
              operator  = ">="
              value     = "40 GiB"
            }
          }
        }
      }
    }
  }

  group "ocr-table" {
    count = 1

    meta {
      trident_order         = "4"
      trident_cpu           = "2"
      trident_memory_mb     = "4096"
      trident_gpus          = "1"
      trident_gpu_memory_mb = "40960"
      trident_output_bytes  = "2000"
      trident_amplification = "1"
      trident_features      = "input_tokens,output_tokens"
      trident_params        = "max_num_seqs=int[4,256,log]; block_size=cat{8,16,32}; max_num_batched_tokens=int[2048,32768,log]"
      trident_config        = "max_num_seqs=8,block_size=16,max_num_batched_tokens=8192"
      trident_config_epoch  = "0"
      trident_cold_start_s  = "30"
      trident_metrics_port  = "metrics"
    }

    network {
      port "metrics" {}
    }

    service {
      provider = "nomad"
      name     = "pdf-curation-ocr-table"
      port     = "metrics"
      tags     = ["trident", "pipeline=pdf", "operator=ocr-table"]

      check {
        type     = "http"
        path     = "/healthz"
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

    scaling {
      enabled = true
      min     = 1
      max     = 8

      policy {
        cooldown            = "20s"
        evaluation_interval = "10s"

        check "capacity" {
          source = "trident-apm"
          query  = "capacity/pdf-curation/ocr-table"

          strategy "trident" {}
        }

        target "trident-target" {}
      }
    }

    task "operator" {
      driver = "docker"

      config {
        image        = var.image
        network_mode = "host"
        args         = ["operator", "-pipeline", "pdf", "-stage", "ocr-table", "-nats", var.nats_url, "-speed", var.speed, "-queue-cap", var.accel_queue_cap]
      }

      resources {
        cpu    = ceil(2 * var.cpu_mhz_per_core)
        memory = ceil(4096 * var.memory_fraction)

        dynamic "device" {
          for_each = var.gpu_devices ? [1] : []
          iterator = gpu
          labels   = ["nvidia/gpu"]

          content {
            count = 1

            constraint {
              attribute = "${device.attr.memory}"
              operator  = ">="
              value     = "40 GiB"
            }
          }
        }
      }
    }
  }

  group "ocr-formula" {
    count = 1

    meta {
      trident_order         = "5"
      trident_cpu           = "2"
      trident_memory_mb     = "4096"
      trident_gpus          = "1"
      trident_gpu_memory_mb = "40960"
      trident_output_bytes  = "2000"
      trident_amplification = "1"
      trident_features      = "input_tokens,output_tokens"
      trident_params        = "max_num_seqs=int[4,256,log]; block_size=cat{8,16,32}; max_num_batched_tokens=int[2048,32768,log]"
      trident_config        = "max_num_seqs=16,block_size=16,max_num_batched_tokens=8192"
      trident_config_epoch  = "0"
      trident_cold_start_s  = "30"
      trident_metrics_port  = "metrics"
    }

    network {
      port "metrics" {}
    }

    service {
      provider = "nomad"
      name     = "pdf-curation-ocr-formula"
      port     = "metrics"
      tags     = ["trident", "pipeline=pdf", "operator=ocr-formula"]

      check {
        type     = "http"
        path     = "/healthz"
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

    scaling {
      enabled = true
      min     = 1
      max     = 8

      policy {
        cooldown            = "20s"
        evaluation_interval = "10s"

        check "capacity" {
          source = "trident-apm"
          query  = "capacity/pdf-curation/ocr-formula"

          strategy "trident" {}
        }

        target "trident-target" {}
      }
    }

    task "operator" {
      driver = "docker"

      config {
        image        = var.image
        network_mode = "host"
        args         = ["operator", "-pipeline", "pdf", "-stage", "ocr-formula", "-nats", var.nats_url, "-speed", var.speed, "-queue-cap", var.accel_queue_cap]
      }

      resources {
        cpu    = ceil(2 * var.cpu_mhz_per_core)
        memory = ceil(4096 * var.memory_fraction)

        dynamic "device" {
          for_each = var.gpu_devices ? [1] : []
          iterator = gpu
          labels   = ["nvidia/gpu"]

          content {
            count = 1

            constraint {
              attribute = "${device.attr.memory}"
              operator  = ">="
              value     = "40 GiB"
            }
          }
        }
      }
    }
  }

  group "aggregate" {
    count = 1

    meta {
      trident_order         = "6"
      trident_cpu           = "1"
      trident_memory_mb     = "1024"
      trident_gpus          = "0"
      trident_synchronous   = "true"
      trident_gpu_memory_mb = "0"
      trident_output_bytes  = "2000"
      trident_amplification = "1"
      trident_features      = "output_tokens"
      trident_params        = "threads=int[1,8]"
      trident_config        = "threads=1"
      trident_config_epoch  = "0"
      trident_cold_start_s  = "2"
      trident_metrics_port  = "metrics"
    }

    network {
      port "metrics" {}
    }

    service {
      provider = "nomad"
      name     = "pdf-curation-aggregate"
      port     = "metrics"
      tags     = ["trident", "pipeline=pdf", "operator=aggregate"]

      check {
        type     = "http"
        path     = "/healthz"
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

    scaling {
      enabled = true
      min     = 1
      max     = 16

      policy {
        cooldown            = "20s"
        evaluation_interval = "10s"

        check "capacity" {
          source = "trident-apm"
          query  = "capacity/pdf-curation/aggregate"

          strategy "trident" {}
        }

        target "trident-target" {}
      }
    }

    task "operator" {
      driver = "docker"

      config {
        image        = var.image
        network_mode = "host"
        args         = ["operator", "-pipeline", "pdf", "-stage", "aggregate", "-nats", var.nats_url, "-speed", var.speed]
      }

      resources {
        cpu    = ceil(1 * var.cpu_mhz_per_core)
        memory = ceil(1024 * var.memory_fraction)
      }
    }
  }
}
