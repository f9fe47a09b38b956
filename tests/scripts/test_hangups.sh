#!/usr/bin/env bash
# test_hangups.sh — clients that hang up before their request is complete give
# their connection back within ~1 s, not after --request-read-timeout-s (60 s):
# libmicrohttpd does not notice such a hang-up while it waits for bytes, so each
# one kept a CLOSE-WAIT socket and a --max-connections slot (found by make
# soak). Clients here are bash's /dev/tcp, which reproduces it every time (a C
# client in tests/integration/test_hangups.c does not, for reasons of timing
# not understood). With --max-connections 4 and 12 hang-ups (mid-headers, after
# the headers, mid-body): no CLOSE-WAIT socket left after 3 s, and 4 requests
# in a row get 200, not 503 too_many_connections.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
MODEL=${ATTND_DEMO_MODEL:-config/demo.safetensors}
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp)
"$ATTND_BIN" --model "demo=$MODEL" --listen "127.0.0.1:$port" --max-connections 4 \
    --log-level warn >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { echo "FAIL: attnd did not start"; cat "$log"; exit 1; }

hang_up() { # text: sent on a new connection, which is then closed
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf '%b' "$1" >&3
    exec 3>&-
}
post='POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n'
for _ in 1 2 3 4; do
    hang_up 'GET /healthz HTTP/1.1\r\nHost: x\r\n'
    hang_up "$post"
    hang_up "$post"'{"query":[[1,2,'
done
close_wait() { ss -tan "( sport = :$port )" | grep -c CLOSE-WAIT || true; }
n=$(close_wait)
for _ in $(seq 30); do [ "$n" -eq 0 ] && break; sleep 0.1; n=$(close_wait); done
echo "CLOSE-WAIT sockets 3 s after 12 hang-ups: $n"
[ "$n" -eq 0 ] || { echo "FAIL: $n hung-up connections still held"; exit 1; }
for i in 1 2 3 4; do
    st=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")
    [ "$st" = 200 ] || { echo "FAIL: request $i after the hang-ups got $st"; exit 1; }
done
echo "ok: the slots are free, 4 requests answered 200"
