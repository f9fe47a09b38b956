#!/usr/bin/env bash
# test_bench_peers.sh — scripts/bench_peers.sh (make bench's ONNX Runtime / ggml section)
# never fails the bench and never prints a figure it did not measure: with bench_peer not
# built, with onnxruntime-node missing (PEER_NO_INSTALL=1, an empty cache) and with PEER_ORT=0
# it exits 0, says why (and that ggml is not measured here), and
# writes the ORT targets to $BENCH_TARGETS as "not measured" lines in bench_target's
# three-field format. Runs no peer and installs nothing (a stub stands in for bench_peer).
set -euo pipefail
cd "$(dirname "$0")/../.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# run NAME [VAR=value ...]: the section with a fresh targets file; output in $tmp/NAME.out
run() {
    local name=$1; shift
    : >"$tmp/$name.tsv"
    env BENCH_TARGETS="$tmp/$name.tsv" PEER_CACHE="$tmp/cache" PEER_NO_INSTALL=1 "$@" \
        scripts/bench_peers.sh >"$tmp/$name.out" 2>&1 || fail "$name: bench_peers.sh exited $? ($(tail -3 "$tmp/$name.out"))"
}
# expect_not_measured NAME REASON: both ORT targets "not measured", naming REASON (an ERE), no verdict
expect_not_measured() {
    local f=$tmp/$1.tsv
    [ "$(wc -l <"$f")" -eq 2 ] || fail "$1: $(wc -l <"$f") target lines, expected 2: $(cat "$f")"
    awk -F'\t' 'NF != 3 || $3 != "not measured" { bad = 1 } END { exit bad }' "$f" ||
        fail "$1: a target line is not 'what<TAB>why<TAB>not measured': $(cat "$f")"
    grep -q "^layer forward >= 1.1x ORT" "$f" && grep -q "^decode >= 1.5x ORT GQA" "$f" ||
        fail "$1: the layer and decode targets are not both named: $(cat "$f")"
    grep -qE -- "$2" "$f" || fail "$1: the reason '$2' is not given: $(cat "$f")"
    grep -qE "ONNX Runtime not measured: .*$2" "$tmp/$1.out" || fail "$1: the section does not say why: $(cat "$tmp/$1.out")"
    if grep -E '^TARGET .*\| (met|NOT met)$' "$tmp/$1.out"; then fail "$1: printed a verdict it did not measure"; fi
}

# bench_peer not built
mkdir -p "$tmp/nobuild"
run nobuild BUILD="$tmp/nobuild"
expect_not_measured nobuild "bench_peer not built"

# a stub bench_peer: reached only if the section got past its dependency checks
mkdir -p "$tmp/build/bench"
printf '#!/bin/sh\necho "stub bench_peer $*" >&2\nexit 1\n' >"$tmp/build/bench/bench_peer"
chmod +x "$tmp/build/bench/bench_peer"

# onnxruntime-node missing from the (empty) cache, nothing installed
run noort BUILD="$tmp/build"
# (python3-onnx is checked first: on a machine without it, that is the reason given)
expect_not_measured noort "(python3-onnx|onnxruntime-node [0-9.]+) unavailable"
[ ! -e "$tmp/cache/ort-1.30.0/node_modules" ] || fail "noort: PEER_NO_INSTALL=1 still ran npm"
grep -q "ggml not measured: its source is in neither" "$tmp/noort.out" ||
    fail "noort: no line saying ggml was not measured and why: $(cat "$tmp/noort.out")"
if grep -q "stub bench_peer" "$tmp/noort.out"; then fail "noort: bench_peer ran without ORT"; fi

# PEER_ORT=0
run skipped BUILD="$tmp/build" PEER_ORT=0
expect_not_measured skipped "skipped \(PEER_ORT=0\)"

# standalone (no BENCH_TARGETS): the section prints its own targets table
env -u BENCH_TARGETS BUILD="$tmp/nobuild" PEER_CACHE="$tmp/cache" PEER_NO_INSTALL=1 \
    scripts/bench_peers.sh >"$tmp/alone.out" 2>&1 || fail "alone: exit $?"
grep -qE '^decode >= 1.5x ORT GQA on every \(P, n\) row +\| .* \| not measured$' "$tmp/alone.out" ||
    fail "alone: no closing table: $(cat "$tmp/alone.out")"
echo "ok: bench_peers.sh reports every missing peer as not measured, exit 0"
