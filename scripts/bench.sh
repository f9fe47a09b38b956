#!/usr/bin/env bash
# bench.sh — runs every benchmark binary present in $BUILD/bench, one titled
# section each, with OpenBLAS's thread count set explicitly (not left to the
# machine), so the figures in one run are comparable with each other.
#   BUILD=build scripts/bench.sh      (make bench does this)
#   OPENBLAS_NUM_THREADS=1 BENCH_SECONDS=0.5 scripts/bench.sh
set -euo pipefail
BUILD=${BUILD:-build}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$(nproc)}
export BENCH_SECONDS=${BENCH_SECONDS:-1.0}

echo "attnd benchmarks — $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, $(uname -m)"
echo "OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS (set explicitly by scripts/bench.sh), BENCH_SECONDS=$BENCH_SECONDS"

ran=0
for b in "$BUILD"/bench/bench_*; do
    [ -x "$b" ] && [ -f "$b" ] || continue
    case "$b" in *.d|*.o) continue ;; esac
    echo
    echo "== $(basename "$b") =="
    "$b"
    ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
    echo "bench.sh: no benchmark binaries in $BUILD/bench (run: make BUILD=$BUILD bench)" >&2
    exit 1
fi
