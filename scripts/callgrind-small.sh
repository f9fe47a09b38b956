#!/usr/bin/env bash
# callgrind-small.sh — instructions per small request (T=32, E=64, demo model), the figure
# the small-request speed work is proved with: machine load does not move it.
# Runs $BUILD/attnd (one worker, OpenBLAS 1 thread) under valgrind --tool=callgrind twice —
# with no request and with N POSTs of one T=32 x 64 body over one keep-alive curl — and prints
# (Ir with N - Ir with none) / N, then the top functions of the N run.
#   scripts/callgrind-small.sh [N]        (default 300; BUILD defaults to build)
# The callgrind files are left in $OUT (default a temp dir) for callgrind_annotate.
set -euo pipefail
N=${1:-300}
BUILD=${BUILD:-build}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/attnd-callgrind.XXXXXX")}
command -v valgrind >/dev/null || { echo "callgrind-small: valgrind missing (scripts/deps.sh)" >&2; exit 1; }

body="$OUT/request.json"
awk 'BEGIN { srand(7); printf "{\"id\":\"bench\",\"query\":[";
             for (r = 0; r < 32; r++) { printf "%s[", r ? "," : "";
               for (c = 0; c < 64; c++) printf "%s%.4f", c ? "," : "", 2 * rand() - 1;
               printf "]" }
             printf "]}" }' > "$body"

# run FILE COUNT: attnd under callgrind answering COUNT requests, then SIGTERM.
run() {
    local file=$1 count=$2 port
    port=$((20000 + RANDOM % 20000))
    OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$file" \
        "$BUILD/attnd" --model demo=config/demo.safetensors --listen "127.0.0.1:$port" \
        --log-level warn --workers 1 > "$file.log" 2>&1 &
    local pid=$!
    for _ in $(seq 150); do
        curl -s -o /dev/null "http://127.0.0.1:$port/readyz" && break
        sleep 0.2
    done
    local args=()
    for _ in $(seq "$count"); do
        args+=(-s -o /dev/null -H 'Content-Type: application/json' --data-binary "@$body"
               "http://127.0.0.1:$port/v1/attention" --next)
    done
    curl "${args[@]}" -s -o /dev/null "http://127.0.0.1:$port/readyz"
    kill -TERM "$pid"
    wait "$pid" || true
}

run "$OUT/none.cg" 0
run "$OUT/small.cg" "$N"
ir() { awk '/^summary:/ { print $2 }' "$1"; }
base=$(ir "$OUT/none.cg") total=$(ir "$OUT/small.cg")
echo "callgrind: $(( (total - base) / N )) instructions per T=32/E=64 request ($N requests; start-up and shutdown subtracted); files in $OUT"
callgrind_annotate "$OUT/small.cg" 2>/dev/null | sed -n '/^Ir/,$p' | sed -n 3,14p | cut -c1-120
