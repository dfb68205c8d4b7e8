# A container pipeline without Trident code in it: a CPU stage in the user's own image
# (render: PDF pages to images) feeding an LLM-based OCR stage served by an off-the-shelf
# vLLM OpenAI-compatible server (ocr). Both run under the docker driver.
#
# What makes it work with Trident, per group:
#   - meta describes the operator to the planner (docs/job-spec.md);
#   - trident_metrics_profile says which metrics its /metrics serves: "vllm" reads vLLM's
#     own vllm:* metrics, the default "trident" the operator contract that render's image
#     exports (docs/operator-contract.md);
#   - the tunable parameters reach the server as command-line flags: the planner renders
#     each parameter of the config as its own meta key, trident_param_<name>, which the args
#     interpolate ("${NOMAD_META_trident_param_max_num_seqs}"). The trident_param_* values
#     written below are the defaults for running the file without the planner; keep them
#     equal to trident_config (the planner rewrites both on every config change).
#
# The images are placeholders: set -var render_image=... and -var vllm_image=... (the
# vllm/vllm-openai image, or one built from it with the model baked in). The ocr group needs
# an nvidia/gpu device (the trident-gpu device plugin, or Nomad's nvidia plugin) and the
# NVIDIA container runtime on the client: the device plugin sets NVIDIA_VISIBLE_DEVICES for
# the task and the docker driver starts it with the runtime named by its nvidia_runtime
# option. Host networking: each server binds the dynamic port Nomad assigned.
#
#   nomad job run -var render_image=registry.example/pdf-render:1 \
#     -var vllm_image=vllm/vllm-openai:v0.9.2 jobs/vllm-ocr.nomad.hcl

variable "render_image" {
  type        = string
  default     = "registry.example/pdf-render:latest"
  description = "placeholder: the CPU stage's image (exports the trident operator metrics on $NOMAD_PORT_metrics)"
}

variable "vllm_image" {
  type        = string
  default     = "vllm/vllm-openai:latest"
  description = "placeholder: a vLLM OpenAI-compatible server image"
}

variable "model" {
  type        = string
  default     = "allenai/olmOCR-7B-0225-preview"
  description = "model the vLLM server loads (a path inside the image, or a Hugging Face name when the client can download)"
}

variable "gpu_devices" {
  type        = bool
  default     = true
  description = "request an nvidia/gpu device for the OCR server"
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

job "vllm-ocr" {
  type        = "service"
  datacenters = var.datacenters

  update {
    max_parallel      = 1
    health_check      = "checks"
    min_healthy_time  = "10s"
    healthy_deadline  = "15m" # a vLLM server loads its model before /health answers
    progress_deadline = "20m"
    auto_revert       = false
  }

  meta {
    trident_pipeline = "true"
  }

  group "render" {
    count = 1

    meta {
      trident_order         = "0"
      trident_cpu           = "2"
      trident_memory_mb     = "2048"
      trident_gpus          = "0"
      trident_output_bytes  = "400000"
      trident_amplification = "8" # pages per document
      trident_features      = "pages"
      trident_synchronous   = "true"
      trident_params        = "threads=int[1,8] default 2; dpi=cat{150,200,300} default 200"
      trident_config        = "dpi=200,threads=2"
      trident_config_epoch  = "0"
      trident_cold_start_s  = "5"
      trident_metrics_port  = "metrics"
      # trident_metrics_profile unset: the image exports the trident operator metrics.
      trident_param_threads = "2"
      trident_param_dpi     = "200"
    }

    network {
      port "metrics" {}
    }

    service {
      provider = "nomad"
      name     = "vllm-ocr-render"
      port     = "metrics"
      tags     = ["trident", "operator=render"]

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "render" {
      driver = "docker"

      config {
        image        = var.render_image
        network_mode = "host"
        args = [
          "--metrics-addr", "${NOMAD_ADDR_metrics}",
          "--threads", "${NOMAD_META_trident_param_threads}",
          "--dpi", "${NOMAD_META_trident_param_dpi}",
        ]
      }

      resources {
        cpu    = 2000
        memory = 2048
      }
    }

    scaling {
      enabled = true
      min     = 1
      max     = 16

      policy {
        evaluation_interval = "10s"
        cooldown            = "30s"

        check "capacity" {
          source = "trident-apm"
          query  = "capacity/vllm-ocr/render"
          strategy "trident" {}
        }

        target "trident-target" {}
      }
    }
  }

  group "ocr" {
    count = 1

    meta {
      trident_order         = "1"
      trident_cpu           = "4"
      trident_memory_mb     = "32768"
      trident_gpus          = "1"
      trident_gpu_memory_mb = "40960"
      trident_output_bytes  = "4000"
      trident_features      = "prompt_tokens,generation_tokens"
      trident_params        = "max_num_seqs=int[8,256,log] default 64; max_num_batched_tokens=int[2048,32768,log] default 8192; gpu_memory_utilization=float[0.8,0.95] default 0.9; constraint: max_num_batched_tokens >= max_num_seqs"
      trident_config        = "gpu_memory_utilization=0.9,max_num_batched_tokens=8192,max_num_seqs=64"
      trident_config_epoch  = "0"
      trident_cold_start_s  = "180"
      trident_metrics_port  = "http"
      # The server's own metrics, on its API port; only the series of the served model.
      trident_metrics_profile = "vllm"
      trident_metrics_model   = "ocr"
      # Defaults of the per-parameter keys (the planner renders them from the config).
      trident_param_max_num_seqs           = "64"
      trident_param_max_num_batched_tokens = "8192"
      trident_param_gpu_memory_utilization = "0.9"
    }

    network {
      port "http" {}
    }

    service {
      provider = "nomad"
      name     = "vllm-ocr-ocr"
      port     = "http"
      tags     = ["trident", "operator=ocr"]

      check {
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "vllm" {
      driver = "docker"

      config {
        image        = var.vllm_image
        network_mode = "host"
        args = [
          "--model", var.model,
          "--served-model-name", "ocr",
          "--host", "${NOMAD_IP_http}",
          "--port", "${NOMAD_PORT_http}",
          "--max-num-seqs", "${NOMAD_META_trident_param_max_num_seqs}",
          "--max-num-batched-tokens", "${NOMAD_META_trident_param_max_num_batched_tokens}",
          "--gpu-memory-utilization", "${NOMAD_META_trident_param_gpu_memory_utilization}",
        ]
      }

      # On scale-down, time to finish the requests in flight (the planner's default too).
      kill_timeout = "30s"

      resources {
        cpu    = 4000
        memory = 32768

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

    scaling {
      enabled = true
      min     = 1
      max     = 8

      policy {
        evaluation_interval = "10s"
        cooldown            = "60s"

        check "capacity" {
          source = "trident-apm"
          query  = "capacity/vllm-ocr/ocr"
          strategy "trident" {}
        }

        target "trident-target" {}
      }
    }
  }
}
