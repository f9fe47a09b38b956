#!/usr/bin/env bash
# callgrind-small.sh — instructions per small request (T=32, E=64, demo model), the figure
# the small-request speed work is proved with: machine load does not move it.
# Runs $BUILD/attnd (one worker, OpenBLAS 1 thread) under valgrind --tool=callgrind twice —
# with W and with W+N POSTs of one T=32 x 64 body over one keep-alive curl — and prints
# (Ir with W+N - Ir with W) / N, then the top functions of the W+N run. The W warm-up
# requests (WARMUP, default 10) carry the one-time costs of the first request (lazy symbol
# binding, first allocations of the pools), so the figure is the steady per-request cost.
# Every request must be answered 200 (counted from curl's status codes), or the script fails.
# With --binary the requests are v2 infers with binary tensors both ways (POST
# /v2/models/demo/infer: a JSON header naming query FP32 [1,32,64] with binary_data_size 8192
# and binary_data_output, its length in Inference-Header-Content-Length, then the 2048 raw
# little-endian floats; the answer is a JSON header and the raw output).
# After the top functions it prints the per-request cost by layer (scripts/callgrind-layers.py).
#   scripts/callgrind-small.sh [--binary] [N]   (default 300; BUILD defaults to build)
# The callgrind files are left in $OUT (default a temp dir) for callgrind_annotate.
set -euo pipefail
MODE=json
if [ "${1:-}" = "--binary" ]; then MODE=binary; shift; fi
N=${1:-300}
W=${WARMUP:-10}
BUILD=${BUILD:-build}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/attnd-callgrind.XXXXXX")}
command -v valgrind >/dev/null || { echo "callgrind-small: valgrind missing (scripts/deps.sh)" >&2; exit 1; }

body="$OUT/request.json"
awk 'BEGIN { srand(7); printf "{\"id\":\"bench\",\"query\":[";
             for (r = 0; r < 32; r++) { printf "%s[", r ? "," : "";
               for (c = 0; c < 64; c++) printf "%s%.4f", c ? "," : "", 2 * rand() - 1;
               printf "]" }
             printf "]}" }' > "$body"
url=/v1/attention
headers=(-H 'Content-Type: application/json')
if [ "$MODE" = binary ]; then
    body="$OUT/request.bin"
    header='{"inputs":[{"name":"query","datatype":"FP32","shape":[1,32,64],"parameters":{"binary_data_size":8192}}],"parameters":{"binary_data_output":true}}'
    # The same 32 x 64 values as the JSON body, as float32 little-endian after the header.
    python3 -c '
import json, struct, sys
q = json.load(open(sys.argv[1]))["query"]
sys.stdout.buffer.write(sys.argv[2].encode() + struct.pack("<2048f", *[v for r in q for v in r]))
' "$OUT/request.json" "$header" > "$body"
    url=/v2/models/demo/infer
    headers=(-H 'Content-Type: application/octet-stream'
             -H "Inference-Header-Content-Length: ${#header}")
fi

# run FILE COUNT: attnd under callgrind answering COUNT requests, then SIGTERM.
run() {
    local file=$1 count=$2 port
    port=$((20000 + RANDOM % 20000))
    OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$file" \
        "$BUILD/attnd" --model demo=config/demo.safetensors --listen "127.0.0.1:$port" \
        --log-level warn --workers 1 > "$file.log" 2>&1 &
    local pid=$!
    for _ in $(seq 150); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && break
        sleep 0.2
    done
    local args=()
    for _ in $(seq "$count"); do
        args+=(-s -o /dev/null -w '%{http_code}\n' "${headers[@]}"
               --data-binary "@$body" "http://127.0.0.1:$port$url" --next)
    done
    curl "${args[@]}" -s -o /dev/null "http://127.0.0.1:$port/readyz" > "$file.codes"
    kill -TERM "$pid"
    wait "$pid" || true
    local ok
    ok=$(grep -c '^200$' "$file.codes" || true)
    if [ "$ok" -ne "$count" ]; then
        echo "callgrind-small: $ok of $count requests answered 200 ($file.codes, $file.log)" >&2
        exit 1
    fi
}

run "$OUT/warm.cg" "$W"
run "$OUT/small.cg" "$((W + N))"
ir() { awk '/^summary:/ { print $2 }' "$1"; }
base=$(ir "$OUT/warm.cg") total=$(ir "$OUT/small.cg")
echo "callgrind: $(( (total - base) / N )) instructions per T=32/E=64 $MODE request ($N requests after $W warm-up ones; start-up, shutdown and the warm-up subtracted); files in $OUT"
callgrind_annotate "$OUT/small.cg" 2>/dev/null | sed -n '/^Ir/,$p' | sed -n 3,14p | cut -c1-120
echo
"$(dirname "$0")/callgrind-layers.py" "$OUT/warm.cg" "$OUT/small.cg" "$N"
