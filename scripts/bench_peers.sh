#!/usr/bin/env bash
# bench_peers.sh — the peers section of make bench: attnd's library against the engines a
# user would pick instead, measured side by side in this run.
#   ONNX Runtime (onnxruntime-node from npm, CPU EP; graphs built by Debian's python3-onnx
#     from the very weights attnd runs): the layer forward on every bench_core shape and a
#     causal row, and a Llama-3.2-1B decode step (32 query / 8 KV heads, d 64) against
#     GroupQueryAttention; interleaved rounds, outputs compared (tests/bench/peers/ort_peer.js).
#   ggml (llama.cpp's CPU flash attention): not measured here — its source is in no registry
#     this machine reaches, and nothing that builds it is kept in the repository; the section
#     says so and points at ../shared/peers/ggml/RESULTS.md (measured side by side there).
# The issue-28 targets go to $BENCH_TARGETS in bench_target's format, for bench.sh's closing
# table. Never fails the bench: whatever is missing, the section says so and returns 0.
#
#   scripts/bench_peers.sh [run]    the section (scripts/bench.sh calls it; BUILD=build)
#   scripts/bench_peers.sh setup    python3-onnx via apt and onnxruntime-node via npm into
#                                   $PEER_CACHE/ort-$ORT_VERSION (scripts/deps.sh --bench calls it)
# Env: BUILD (build), BENCH_SECONDS (1.0 per measurement), PEER_ROUNDS (3),
#      PEER_CACHE (${XDG_CACHE_HOME:-~/.cache}/attnd-bench: outside the checkout),
#      ORT_VERSION (1.30.0), PEER_ORT=0 (skip ORT), PEER_ORT_COPY=1 (also ORT's copying decode),
#      PEER_NO_INSTALL=1 (run: never install; what is missing is reported as missing).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 0
BUILD=${BUILD:-build}
PEER_CACHE=${PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attnd-bench}
ORT_VERSION=${ORT_VERSION:-1.30.0}
ORT_DIR=$PEER_CACHE/ort-$ORT_VERSION
PEER_ROUNDS=${PEER_ROUNDS:-3}
export BENCH_SECONDS=${BENCH_SECONDS:-1.0} PEER_ROUNDS
PY=/usr/bin/python3   # Debian's Python: python3-onnx and python3-numpy install for it
PEER_BIN=$BUILD/bench/bench_peer

have_onnx() { [ -x "$PY" ] && "$PY" -c 'import onnx, numpy' 2>/dev/null; }
have_ort() {
    command -v node >/dev/null 2>&1 &&
        [ "$(NODE_PATH="$ORT_DIR/node_modules" node -p "try{require('onnxruntime-node/package.json').version}catch(e){''}" 2>/dev/null)" = "$ORT_VERSION" ]
}

# Installs what the ORT rows need; returns non-zero (having said why) when something is missing.
setup() {
    local rc=0
    if ! have_onnx; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "bench_peers: python3-onnx missing and not root: apt-get install python3-onnx python3-numpy" >&2
        else
            export DEBIAN_FRONTEND=noninteractive
            apt-get install -y -q --no-install-recommends python3-onnx python3-numpy >/dev/null 2>&1 ||
                { apt-get update -q >/dev/null 2>&1 &&
                      apt-get install -y -q --no-install-recommends python3-onnx python3-numpy >/dev/null; }
        fi
        have_onnx || { echo "bench_peers: python3-onnx could not be installed" >&2; rc=1; }
    fi
    if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
        echo "bench_peers: node and npm are needed for onnxruntime-node (not found)" >&2
        return 1
    fi
    if ! have_ort; then
        mkdir -p "$ORT_DIR" && [ -f "$ORT_DIR/package.json" ] ||
            echo '{ "name": "attnd-bench-ort", "private": true }' >"$ORT_DIR/package.json"
        # the CPU binary ships inside the package; the post-install step would fetch CUDA parts
        (cd "$ORT_DIR" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --loglevel=error \
            "onnxruntime-node@$ORT_VERSION" >/dev/null) ||
            echo "bench_peers: npm install onnxruntime-node@$ORT_VERSION failed" >&2
        have_ort || { echo "bench_peers: onnxruntime-node $ORT_VERSION is not usable from $ORT_DIR" >&2; rc=1; }
    fi
    return $rc
}

# One "not measured" line per ORT target, with the reason.
ort_absent() {
    echo "ONNX Runtime not measured: $1"
    printf '%s\t%s\t%s\n' "layer forward >= 1.1x ORT on every bench_core shape, >= 1.5x causal" "$1" "not measured" \
        "decode >= 1.5x ORT GQA on every (P, n) row" "$1" "not measured" >>"$BENCH_TARGETS"
}

ort_section() {
    echo
    echo "-- ONNX Runtime $ORT_VERSION (onnxruntime-node, CPU EP) vs attn_forward --"
    if [ "${PEER_ORT:-1}" = 0 ]; then ort_absent "skipped (PEER_ORT=0)"; return; fi
    if { ! have_onnx || ! have_ort; } && [ "${PEER_NO_INSTALL:-0}" != 1 ]; then
        echo "bench_peers: installing the ORT peer's dependencies (scripts/bench_peers.sh setup)" >&2
        setup >&2
    fi
    have_onnx || { ort_absent "python3-onnx unavailable ($PY cannot import onnx, numpy)"; return; }
    have_ort || { ort_absent "onnxruntime-node $ORT_VERSION unavailable in $ORT_DIR (not installed by npm)"; return; }
    "$PEER_BIN" export "$WORK" || { ort_absent "bench_peer export failed"; return; }
    "$PY" tests/bench/peers/build_graphs.py "$WORK" || { ort_absent "build_graphs.py failed"; return; }
    local before
    before=$(wc -l <"$BENCH_TARGETS")
    NODE_PATH="$ORT_DIR/node_modules" node tests/bench/peers/ort_peer.js "$WORK" "$PEER_BIN" ||
        echo "ort_peer.js failed (see above)"
    [ "$(wc -l <"$BENCH_TARGETS")" -gt "$before" ] || ort_absent "ort_peer.js failed before its targets (see above)"
    rm -f "$WORK"/*.onnx "$WORK"/*.f32
}

ggml_section() {
    echo
    echo "-- ggml (llama.cpp's CPU flash attention, ggml_flash_attn_ext) vs attn_forward, decode attention --"
    echo "ggml not measured: its source is in neither Debian's nor npm's registry, and nothing that" \
         "builds it is kept in this repository; ../shared/peers/ggml/RESULTS.md has the side-by-side runs"
}

run() {
    echo "== peers: ONNX Runtime and ggml vs attn_forward (scripts/bench_peers.sh) =="
    echo "$(date -u +%H:%M:%SZ); load average $(cut -d' ' -f1-3 /proc/loadavg); $PEER_ROUNDS rounds," \
         "BENCH_SECONDS=$BENCH_SECONDS, 2 threads each side"
    own=""   # global: the EXIT trap removes it after run() returns
    if [ -z "${BENCH_TARGETS:-}" ]; then
        BENCH_TARGETS=$(mktemp "${TMPDIR:-/tmp}/attnd-peer-targets.XXXXXX") && own=$BENCH_TARGETS
        export BENCH_TARGETS
    fi
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/attnd-peers.XXXXXX") || return 0
    trap 'rm -rf "$WORK" ${own:+"$own"}' EXIT
    if [ ! -x "$PEER_BIN" ]; then
        ort_absent "$PEER_BIN not built (make BUILD=$BUILD $PEER_BIN)"
    else
        ort_section
        ggml_section
    fi
    echo "peers done $(date -u +%H:%M:%SZ); load average $(cut -d' ' -f1-3 /proc/loadavg)"
    if [ -n "$own" ]; then
        echo
        awk -F'\t' '{ printf "%-58s | %-44s | %s\n", $1, $2, $3 }' "$own"
    fi
    return 0
}

case "${1:-run}" in
    setup) setup ;;
    run) run ;;
    *) echo "usage: scripts/bench_peers.sh [run|setup]" >&2; exit 2 ;;
esac
