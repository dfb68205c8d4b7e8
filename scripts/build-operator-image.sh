#!/usr/bin/env bash
# build-operator-image.sh builds the operator image into the docker daemon that DOCKER_HOST
# (or the default socket) names: FROM scratch, one static trident binary as /trident, so the
# container runs `trident operator ...` from its args (jobs/*-docker.nomad.hcl). No registry
# is needed: the base is scratch and the binary is built here.
#
#   scripts/build-operator-image.sh [TAG]     (default trident-operator:dev; `make image`)
#
# BIN_OUT=path also keeps the static binary there (the e2e harness runs NATS with it).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-trident-operator:dev}
GO=${GO:-go}
command -v docker >/dev/null || { echo "build-operator-image: no docker CLI (apt-get install docker.io)" >&2; exit 1; }
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
# Static with cgo (the HiGHS MILP solver is C++): netgo/osusergo keep glibc's NSS out.
CGO_ENABLED=1 "$GO" build -trimpath -tags osusergo,netgo \
	-ldflags '-linkmode external -extldflags "-static"' -o "$ctx/trident" ./cmd/trident
cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY trident /trident
ENTRYPOINT ["/trident"]
DOCKERFILE
# The classic builder: it needs no BuildKit plugin and works with docker.io's daemon.
DOCKER_BUILDKIT=0 docker build --quiet --tag "$tag" "$ctx" >/dev/null 2>"$ctx/build.log" ||
	{ cat "$ctx/build.log" >&2; exit 1; }
if [ -n "${BIN_OUT:-}" ]; then cp "$ctx/trident" "$BIN_OUT"; fi
echo "[image] built $tag"
