#!/usr/bin/env bash
# deps.sh — installs the Debian packages attnd needs to build and test, when missing.
# Usage: scripts/deps.sh [--bench] [extra-package ...]
#   --bench adds what make bench needs beyond make test: wrk (bench_daemon drives every
#   target with it), and the ONNX Runtime peer (scripts/bench_peers.sh setup).
# Runs apt-get only when something is missing; needs root for that (as CI has).
# nginx-light, gettext-base (envsubst): tests/scripts/test_gateway.sh and test_k8s_manifests.sh
# run docker/nginx.conf and the k8s gateway template in front of local replicas.
set -euo pipefail
bench=()
if [ "${1:-}" = --bench ]; then bench=(wrk); shift; fi

packages=(gcc make pkg-config libmicrohttpd-dev libjansson-dev libopenblas-dev
          libcurl4-openssl-dev curl ca-certificates
          python3-yaml
          nginx-light gettext-base
          openssl valgrind
          ${bench[@]+"${bench[@]}"} "$@")

# --bench: the ONNX Runtime peer's python3-onnx (apt) and onnxruntime-node (npm, into a cache
# outside the checkout); optional: when it fails, make bench's peers section says why.
[ ${#bench[@]} -eq 0 ] || "$(dirname "$0")/bench_peers.sh" setup || echo "deps: ONNX Runtime peer not set up" >&2

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing missing Debian packages: ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "deps: not root and no sudo; install these by hand: ${missing[*]}" >&2; exit 1
    fi
else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
