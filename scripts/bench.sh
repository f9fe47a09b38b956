#!/usr/bin/env bash
# bench.sh — runs every benchmark binary present in $BUILD/bench, one titled
# section each, with OpenBLAS's thread count set explicitly (not left to the
# machine), so the figures in one run are comparable with each other. Each bench
# opens with the OpenBLAS kernel, the load average and the AVX-512 sgemm line
# (tests/common/benchutil.c: bench_start) and states its targets
# (bench_target); the run ends with the table of every target, measured here.
#   BUILD=build scripts/bench.sh      (make bench does this)
#   OPENBLAS_NUM_THREADS=1 BENCH_SECONDS=0.5 scripts/bench.sh
set -euo pipefail
BUILD=${BUILD:-build}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$(nproc)}
export BENCH_SECONDS=${BENCH_SECONDS:-1.0}

echo "attnd benchmarks — $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, $(uname -m)"
echo "OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS (set explicitly by scripts/bench.sh), BENCH_SECONDS=$BENCH_SECONDS"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; load average $(cat /proc/loadavg)"
bench_t0=$(date +%s)
BENCH_TARGETS=$(mktemp "${TMPDIR:-/tmp}/attnd-bench-targets.XXXXXX")
export BENCH_TARGETS
BENCH_DATA=""
trap 'rm -rf "$BENCH_TARGETS" ${BENCH_DATA:+"$BENCH_DATA"}' EXIT

# Core vs PyTorch (bench_core + tests/bench/bench_torch.py): PyTorch writes the
# layers and inputs, bench_core times the library on them and leaves its timings
# and outputs in $BENCH_DATA, then PyTorch times itself on the same data.
# python3-torch is installed via apt when missing; without it bench_core runs on
# generated data and the PyTorch section says why it is absent.
TORCH_PY=/usr/bin/python3
torch_note=""
have_torch() { [ -x "$TORCH_PY" ] && "$TORCH_PY" -c 'import torch' 2>/dev/null; }
if ! have_torch; then
    echo "bench.sh: PyTorch missing; trying: apt-get install -y python3-torch" >&2
    sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo -n"
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch >&2 || true
    have_torch || torch_note="PyTorch unavailable ($TORCH_PY cannot import torch, apt-get install python3-torch failed): no PyTorch comparison in this run"
fi
if [ -z "$torch_note" ]; then
    BENCH_DATA=$(mktemp -d "${TMPDIR:-/tmp}/attnd-bench.XXXXXX")
    if ! OPENBLAS_NUM_THREADS=2 "$TORCH_PY" tests/bench/bench_torch.py gen "$BENCH_DATA"; then
        torch_note="bench_torch.py gen failed: no PyTorch comparison in this run"
        BENCH_DATA=""
    fi
fi

ran=0
for b in "$BUILD"/bench/bench_*; do
    [ -x "$b" ] && [ -f "$b" ] || continue
    case "$b" in *.d|*.o|*/bench_peer) continue ;; esac   # bench_peer: run by bench_peers.sh below
    echo
    echo "== $(basename "$b") =="
    if [ "$(basename "$b")" = bench_core ]; then
        BENCH_DATA="$BENCH_DATA" "$b"
        echo
        echo "== PyTorch nn.MultiheadAttention vs attn_forward (bench_torch.py) =="
        if [ -n "$torch_note" ]; then
            echo "$torch_note"
        else
            OPENBLAS_NUM_THREADS=2 "$TORCH_PY" tests/bench/bench_torch.py run "$BENCH_DATA" ||
                echo "bench_torch.py run failed (see above)"
        fi
    else
        "$b"
    fi
    ran=$((ran + 1))
done
# Whole-model decode (issue 25): a 4-layer Llama, every attention layer on attnd, vs PyTorch
# alone (tests/bench/bench_whole_model.py); its TARGET line joins the closing table.
echo
echo "== bench_whole_model.py (4-layer Llama decode: attention on attnd vs PyTorch alone) =="
if [ -n "$torch_note" ]; then
    echo "$torch_note"
elif [ -x "$BUILD/attnd" ]; then
    whole=$(OPENBLAS_NUM_THREADS=2 "$TORCH_PY" tests/bench/bench_whole_model.py --attnd "$BUILD/attnd" 2>&1) ||
        echo "bench_whole_model.py failed (see below)"
    echo "$whole"
    echo "$whole" | sed -n 's/^TARGET  \(.*\) | \(.*\) | \(.*\)$/\1\t\2\t\3/p' >>"$BENCH_TARGETS"
fi

if [ "$ran" -eq 0 ]; then
    echo "bench.sh: no benchmark binaries in $BUILD/bench (run: make BUILD=$BUILD bench)" >&2
    exit 1
fi

# attnd vs ONNX Runtime (scripts/bench_peers.sh), its targets into the table below
scripts/bench_peers.sh || echo "bench_peers.sh failed (see above)"

# The closing table: every target the benches measured in this run (issue 18's,
# bench_decode_http's issue 16 and 25 targets, bench_decode_loop's and
# bench_whole_model.py's issue 25 ones, issue 28's from bench_decode, bench_daemon
# and the peers).
echo
echo "== targets (measured in this run; $(( $(date +%s) - bench_t0 )) s; load average $(cat /proc/loadavg)) =="
if [ -s "$BENCH_TARGETS" ]; then
    awk -F'\t' '{ printf "%-58s | %-44s | %s\n", $1, $2, $3 }' "$BENCH_TARGETS"
else
    echo "no bench reported a target (see the sections above)"
fi
