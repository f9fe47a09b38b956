#!/usr/bin/env bash
# bench_peers_ggml.sh BENCH_PEER — the ggml rows of scripts/bench_peers.sh: llama.cpp's CPU
# flash attention (ggml_flash_attn_ext) against attn_forward on one decode step's attention
# (32 query / 8 KV heads, d 64, one query per sequence over P cached rows, n sequences, no
# mask; F32 and F16 K/V), with the streaming read bandwidth of the same rounds.
# The source is the user's: LLAMA_SRC names a ggml-org/ggml tree or a llama.cpp one (its
# ggml/ folder); nothing is downloaded. ggml is built once per tree into
# $PEER_CACHE/ggml-<hash> (CMake Release, GGML_NATIVE=ON: -march=native, no BLAS, OpenMP as
# llama.cpp's default), tests/bench/peers/ggml_decode.c against it.
# Rounds (PEER_ROUNDS): the bandwidth, then ggml's rows and attnd's ("attn" rows of
# bench_peer: a thin layer over contiguous caches, what the ggml node computes), ggml first in
# odd rounds and attnd first in even ones; medians over the rounds. Exit 1 when ggml cannot be
# built (the caller prints that ggml was not measured).
# Env: LLAMA_SRC, PEER_CACHE, PEER_ROUNDS (3), BENCH_SECONDS (1.0: 0.5 s per row),
#      PEER_GGML_ROWS (2048x1,2048x16,8192x1,8192x16).
set -uo pipefail
PEER_BIN=${1:?usage: bench_peers_ggml.sh BENCH_PEER}
: "${LLAMA_SRC:?LLAMA_SRC: a ggml or llama.cpp source tree}"
PEER_CACHE=${PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attnd-bench}
ROUNDS=${PEER_ROUNDS:-3}
ROWS=${PEER_GGML_ROWS:-2048x1,2048x16,8192x1,8192x16}
SECS=$(awk -v s="${BENCH_SECONDS:-1.0}" 'BEGIN { printf "%.3f", s * 0.5 }')
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

src=$(cd "$LLAMA_SRC" 2>/dev/null && pwd) || { echo "ggml: LLAMA_SRC=$LLAMA_SRC is not a directory"; exit 1; }
if [ -f "$src/ggml/include/ggml.h" ]; then cmake_src=$src inc=$src/ggml/include   # llama.cpp
elif [ -f "$src/include/ggml.h" ]; then cmake_src=$src inc=$src/include           # ggml-org/ggml
else echo "ggml: no include/ggml.h or ggml/include/ggml.h under $src"; exit 1; fi
command -v cmake >/dev/null || { echo "ggml: cmake not found (apt-get install cmake)"; exit 1; }
rev=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "unknown (not a git tree)")
build=$PEER_CACHE/ggml-$(printf '%s %s' "$src" "$rev" | md5sum | cut -c1-12)
mkdir -p "$build" || exit 1
echo "ggml source: $src (commit $rev)${GGML_NOTE:+; $GGML_NOTE}; build: $build"

if [ ! -x "$build/ggml_decode" ] || [ "$HERE/tests/bench/peers/ggml_decode.c" -nt "$build/ggml_decode" ]; then
    echo "building ggml (nice, CMake Release, GGML_NATIVE=ON, no BLAS; log: $build/build.log)"
    { nice -n 10 cmake -S "$cmake_src" -B "$build/cmake" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
          -DGGML_BLAS=OFF -DBUILD_SHARED_LIBS=ON -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF \
          -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF \
          -DLLAMA_CURL=OFF &&
        nice -n 10 cmake --build "$build/cmake" -j2 --target ggml ggml-base ggml-cpu; } >"$build/build.log" 2>&1 ||
        { tail -15 "$build/build.log"; echo "ggml: build failed"; exit 1; }
    libdir=$(dirname "$(find "$build/cmake" -name 'libggml-cpu.so' | head -1)")
    gcc -std=gnu11 -O2 -march=native -Wall -Wextra -I"$inc" "$HERE/tests/bench/peers/ggml_decode.c" \
        -L"$libdir" -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$libdir" -lm -o "$build/ggml_decode" ||
        { echo "ggml: ggml_decode.c did not build against $inc"; exit 1; }
fi
"$build/ggml_decode" --check || echo "ggml: numerics check FAILED (its rows below are not a comparison)"

raw=$(mktemp "${TMPDIR:-/tmp}/attnd-ggml.XXXXXX") || exit 1
trap 'rm -f "$raw"' EXIT
attnd_rows() {
    local cmds="" r
    for r in ${ROWS//,/ }; do cmds+="attn ${r%x*} ${r#*x} f32 $SECS"$'\n'"attn ${r%x*} ${r#*x} f16 $SECS"$'\n'; done
    printf '%squit\n' "$cmds" | "$PEER_BIN" serve | grep -v '^DONE$'
}
ggml_rows() { "$build/ggml_decode" --threads 2 --seconds "$SECS" --rows "$ROWS"; }
for r in $(seq 1 "$ROUNDS"); do
    echo "ggml round $r/$ROUNDS start $(date -u +%H:%M:%S), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    { printf 'bw\nquit\n' | "$PEER_BIN" serve | grep -v '^DONE$'
      if [ $((r % 2)) = 1 ]; then ggml_rows; attnd_rows; else attnd_rows; ggml_rows; fi; } >>"$raw"
    echo "ggml round $r/$ROUNDS end $(date -u +%H:%M:%S), load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
grep '^ERROR' "$raw"

# medians over the rounds: ms per step, K/V GB/s (n P 8 64 2 elem / ms), % of the bandwidth
awk -F'\t' -v rows="$ROWS" '
function med(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j] + 0 < a[j - 1] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n == 0 ? -1 : n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
$1 == "RESULT" && $2 == "bw" { bw = bw " " $4 }
$1 == "RESULT" && ($2 == "ggml" || $2 == "attn") { t[$2 "|" $3] = t[$2 "|" $3] " " $4 }
END {
    b = med(bw)
    printf "streaming read bandwidth, 2 threads (sum of floats over 1 GiB, best of 5): median %.2f GB/s over the rounds\n", b
    printf "(K/V GB/s = n P 8 64 2 elem / median ms, both sides; K/V that fits the last-level cache, e.g. P 2048 n 1, can beat it)\n"
    printf "%-6s %3s %-4s | %10s %7s %5s | %10s %7s %5s | %s\n", "P", "n", "K/V", "ggml ms", "GB/s", "%bw", "attnd ms", "GB/s", "%bw", "ggml/attnd"
    nr = split(rows, rr, ",")
    for (i = 1; i <= nr; i++) for (k = 0; k < 2; k++) {
        split(rr[i], pn, "x"); dt = k ? "f16" : "f32"; key = pn[1] "," pn[2] "," dt
        g = med(t["ggml|" key]); a = med(t["attn|" key])
        by = pn[2] * pn[1] * 8 * 64 * 2 * (k ? 2 : 4)
        gg = (g > 0) ? by / (g * 1e-3) * 1e-9 : 0; ag = (a > 0) ? by / (a * 1e-3) * 1e-9 : 0
        gp = (b > 0) ? 100 * gg / b : 0; ap = (b > 0) ? 100 * ag / b : 0
        sp = (g > 0 && a > 0) ? sprintf("%.2fx", g / a) : "-"
        printf "%-6d %3d %-4s | %10.3f %7.2f %4.0f%% | %10.3f %7.2f %4.0f%% | %s\n", pn[1], pn[2], dt, g, gg, gp, a, ag, ap, sp
    }
}' "$raw"
