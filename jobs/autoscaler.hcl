# Nomad Autoscaler agent configuration for Trident. Copy the plugins from
# bin/autoscaler-plugins into plugin_dir. Every field is documented in docs/job-spec.md.

log_level  = "INFO"
plugin_dir = "/opt/nomad-autoscaler/plugins"

http {
  bind_address = "127.0.0.1"
  bind_port    = 8080
}

nomad {
  address = "http://127.0.0.1:4646"
}

policy {
  default_evaluation_interval = "10s"
  default_cooldown            = "30s"
}

# Observation layer: capacity/throughput/backlog per operator, scraped from the
# operators' Prometheus endpoints found through Nomad services "<job>-<group>".
apm "trident-apm" {
  driver = "trident-apm"
  config = {
    scrape_timeout = "2s"
    stale_after    = "2m"
    history        = "15m"
    # Publish every operator's capacity estimate to the planner every feed_interval.
    planner_addr  = "http://127.0.0.1:4650"
    feed_interval = "5s"
    # Opt-in live tuning: measure each tunable operator's running config (capacity, peak
    # device memory, OOM restarts) and propose candidate configs to the planner.
    tune = "false"
  }
}

# Adaptation + scheduling: returns the planner's committed count per group.
strategy "trident" {
  driver = "trident"
  config = {
    planner_addr = "http://127.0.0.1:4650"
  }
}

# Hands actions to the planner, which is the only writer of pipeline jobs.
target "trident-target" {
  driver = "trident-target"
  config = {
    planner_addr = "http://127.0.0.1:4650"
  }
}
