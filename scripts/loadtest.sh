#!/usr/bin/env bash
# loadtest.sh — starts $BUILD/attnd on the demo model at 127.0.0.1:<free port>, runs a short
# attnd-load concurrency sweep against it (about 20 s), leaves results/loadtest.{json,csv,svg}
# and prints the table. attnd is stopped on exit, whatever happens.
# Overrides: LOADTEST_CONCURRENCY (1,4,16,64), LOADTEST_DURATION (4s), LOADTEST_WARMUP (1s),
# LOADTEST_SEQ_LEN (16:64), LOADTEST_ARGS (extra attnd-load flags), RESULTS (results).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ATTND=$BUILD/attnd
LOAD=$BUILD/attnd-load
MODEL=${ATTND_DEMO_MODEL:-config/demo.safetensors}
RESULTS=${RESULTS:-results}
for bin in "$ATTND" "$LOAD"; do
    [ -x "$bin" ] || { echo "loadtest: $bin not built (make BUILD=$BUILD all)" >&2; exit 1; }
done
[ -f "$MODEL" ] || { echo "loadtest: demo model $MODEL missing" >&2; exit 1; }

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
log=$(mktemp "${TMPDIR:-/tmp}/attnd-loadtest.XXXXXX.log")
mkdir -p "$RESULTS"

"$ATTND" --model "demo=$MODEL" --listen "127.0.0.1:$port" --log-level warn >"$log" 2>&1 &
attnd_pid=$!
# shellcheck disable=SC2317  # invoked by the trap
stop_attnd() {
    if kill -0 "$attnd_pid" 2>/dev/null; then
        kill -TERM "$attnd_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$attnd_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$attnd_pid" 2>/dev/null || true
    fi
    wait "$attnd_pid" 2>/dev/null || true
    rm -f "$log"
}
trap stop_attnd EXIT INT TERM

ready=0
for _ in $(seq 150); do
    if curl -fsS -o /dev/null "$url/readyz" 2>/dev/null; then ready=1; break; fi
    kill -0 "$attnd_pid" 2>/dev/null || break
    sleep 0.1
done
if [ $ready -ne 1 ]; then
    echo "loadtest: attnd did not become ready on $url; its log:" >&2
    tail -n 30 "$log" >&2
    exit 1
fi

echo "loadtest: attnd (pid $attnd_pid) ready on $url; sweeping concurrency ${LOADTEST_CONCURRENCY:-1,4,16,64}" >&2
status=0
# shellcheck disable=SC2086  # LOADTEST_ARGS is a list of flags
"$LOAD" --url "$url" --model demo \
    --concurrency "${LOADTEST_CONCURRENCY:-1,4,16,64}" \
    --duration "${LOADTEST_DURATION:-4s}" --warmup "${LOADTEST_WARMUP:-1s}" \
    --seq-len "${LOADTEST_SEQ_LEN:-16:64}" \
    --json "$RESULTS/loadtest.json" --csv "$RESULTS/loadtest.csv" --svg "$RESULTS/loadtest.svg" \
    ${LOADTEST_ARGS:-} || status=$?
echo "loadtest: wrote $RESULTS/loadtest.json, .csv, .svg (attnd-load exit $status)" >&2
exit $status
