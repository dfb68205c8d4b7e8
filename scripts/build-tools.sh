#!/usr/bin/env bash
# build-tools.sh builds the real nomad, nomad-autoscaler and consul binaries this project
# tests against, from the Go module proxy, into a cache directory outside the clone:
# $TRIDENT_TOOLS_BIN, default ${XDG_CACHE_HOME:-$HOME/.cache}/trident-tools, so that every
# clone and worktree shares one build. A binary is rebuilt only when it is missing or
# reports a different version.
set -euo pipefail

BIN="${TRIDENT_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/trident-tools}"
NOMAD_VERSION=1.11.0
NOMAD_API_VERSION=v0.0.0-20260907080526-08ef8f3d26da
AUTOSCALER_VERSION=0.4.7
CONSUL_VERSION=1.20.0
ONLY="${1:-all}"

mkdir -p "$BIN"
WORK="$(mktemp -d)"
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
export GOFLAGS=-mod=mod

log() { printf '[tools %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[tools] ERROR: %s\n' "$*" >&2; exit 1; }

# moddir downloads module@version through the proxy and prints its directory.
moddir() {
  local out
  if ! out="$(cd "$WORK" && go mod download -json "$1@$2" 2>&1)"; then
    die "the Go module proxy refused $1@$2: $out"
  fi
  printf '%s' "$out" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p'
}

have() { # have <binary> <version-substring>
  # The output is captured before it is matched: piping it into `head | grep -q` let the
  # binary (or head) die of SIGPIPE when the reader stopped early, which under pipefail
  # read as "wrong version" and rebuilt consul on every run.
  local out
  [ -x "$BIN/$1" ] || return 1
  out="$("$BIN/$1" version 2>/dev/null)" || return 1
  [[ "$out" == *"$2"* ]]
}

build_nomad() {
  if have nomad "v$NOMAD_VERSION"; then log "nomad v$NOMAD_VERSION cached at $BIN/nomad"; return; fi
  log "downloading nomad v$NOMAD_VERSION sources"
  local dir api
  dir="$(moddir github.com/hashicorp/nomad "v$NOMAD_VERSION")"
  api="$(moddir github.com/hashicorp/nomad/api "$NOMAD_API_VERSION")"
  cp -r "$dir" "$WORK/nomad" && chmod -R u+w "$WORK/nomad"
  rm -rf "$WORK/nomad/api" && cp -r "$api" "$WORK/nomad/api" && chmod -R u+w "$WORK/nomad/api"
  log "building nomad (about 10 minutes on 2 cores)"
  (cd "$WORK/nomad" && go build -o "$BIN/nomad.tmp" .) || die "nomad build failed"
  mv "$BIN/nomad.tmp" "$BIN/nomad"
  log "nomad ready: $("$BIN/nomad" version | head -1)"
}

build_autoscaler() {
  if have nomad-autoscaler "v$AUTOSCALER_VERSION"; then log "nomad-autoscaler v$AUTOSCALER_VERSION cached"; return; fi
  log "downloading nomad-autoscaler v$AUTOSCALER_VERSION sources"
  local dir
  dir="$(moddir github.com/hashicorp/nomad-autoscaler "v$AUTOSCALER_VERSION")"
  cp -r "$dir" "$WORK/nas" && chmod -R u+w "$WORK/nas"
  log "building nomad-autoscaler (about 5 minutes)"
  (cd "$WORK/nas" && go build -o "$BIN/nomad-autoscaler.tmp" .) || die "nomad-autoscaler build failed"
  mv "$BIN/nomad-autoscaler.tmp" "$BIN/nomad-autoscaler"
  log "nomad-autoscaler ready: $("$BIN/nomad-autoscaler" version | head -1)"
}

build_consul() {
  if have consul "v$CONSUL_VERSION"; then log "consul v$CONSUL_VERSION cached"; return; fi
  log "downloading consul v$CONSUL_VERSION sources"
  local dir
  dir="$(moddir github.com/hashicorp/consul "v$CONSUL_VERSION")"
  cp -r "$dir" "$WORK/consul" && chmod -R u+w "$WORK/consul"
  # The module zip lacks the nested modules its replace block points at: use published ones.
  (cd "$WORK/consul" && awk '
      /^replace \($/ {skip=1; next}
      skip && /^\)$/ {skip=0; next}
      skip {next}
      /^replace .* => \.\// {next}
      {print}' go.mod > go.mod.new && mv go.mod.new go.mod &&
    go mod edit -require=github.com/hashicorp/consul/troubleshoot@v0.7.1)
  log "building consul (about 4 minutes)"
  (cd "$WORK/consul" && go build -o "$BIN/consul.tmp" .) || die "consul build failed"
  mv "$BIN/consul.tmp" "$BIN/consul"
  log "consul ready: $("$BIN/consul" version | head -1)"
}

case "$ONLY" in
  all) build_nomad; build_autoscaler; build_consul ;;
  nomad) build_nomad ;;
  nomad-autoscaler) build_autoscaler ;;
  consul) build_consul ;;
  *) die "unknown tool $ONLY (want all, nomad, nomad-autoscaler or consul)" ;;
esac
log "all requested tools are in $BIN"
