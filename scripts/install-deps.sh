#!/usr/bin/env bash
# install-deps.sh installs the Debian reference tools the cross-check tests use:
# glpsol and cbc (MILP optima) and scikit-learn (GP and clustering references), and docker.io
# (dockerd, runc and the docker CLI) for the docker-driver e2e test, which starts its own
# dockerd (e2e/harness/docker.go).
set -euo pipefail
need=()
command -v glpsol >/dev/null || need+=(glpk-utils)
command -v cbc >/dev/null || need+=(coinor-cbc)
/usr/bin/python3 -c 'import sklearn, numpy' 2>/dev/null || need+=(python3-sklearn python3-numpy)
command -v dockerd >/dev/null || need+=(docker.io)
if [ ${#need[@]} -eq 0 ]; then echo "[deps] reference tools present"; exit 0; fi
echo "[deps] installing ${need[*]}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
echo "[deps] installed ${need[*]}"
