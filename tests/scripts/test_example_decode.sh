#!/usr/bin/env bash
# test_example_decode.sh — examples/llama_decode.py runs as the README shows: it writes its
# seeded 4-layer Llama-layout checkpoint, attnd serves it with layers=all, and a greedy decode
# with every attention layer on attnd (the rest in PyTorch) must print the same tokens as the
# all-PyTorch run, logits within 1e-4 (the example exits 1 otherwise), through one sequence
# session on the group (every layer then holds the prompt and every generated token). Needs Debian's
# /usr/bin/python3 with torch and numpy (scripts/deps.sh installs them when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
PY=${ATTND_TEST_PYTHON:-/usr/bin/python3}
[ -x "$ATTND_BIN" ] || { echo "FAIL: $ATTND_BIN not built (make all)" >&2; exit 1; }
"$PY" -c 'import torch, numpy' 2>/dev/null || scripts/deps.sh python3-torch python3-numpy
"$PY" -c 'import torch, numpy' || { echo "FAIL: $PY cannot import torch and numpy" >&2; exit 1; }

tmp=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

"$PY" examples/llama_decode.py make "$tmp/llama4"
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$ATTND_BIN" --listen "127.0.0.1:$port" --log-level warn --model "llama=$tmp/llama4,layers=all" \
    >"$tmp/attnd.log" 2>&1 &
pid=$!
for _ in $(seq 150); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/attnd.log" >&2; echo "FAIL: attnd exited" >&2; exit 1; }
    sleep 0.1
done

out=$(PYTHONPATH=clients/python timeout 120 "$PY" examples/llama_decode.py run "$tmp/llama4" \
    --url "http://127.0.0.1:$port" --tokens 24) || { echo "$out"; echo "FAIL: the decodes differ"; exit 1; }
echo "$out"
grep -q "^tokens equal: yes$" <<<"$out" || { echo "FAIL: no 'tokens equal: yes' line"; exit 1; }
grep -q "one sequence session over 4 layers" <<<"$out" ||
    { echo "FAIL: the example did not use one sequence session (a model group)"; exit 1; }
# every layer holds the prompt (5) and each of the 24 generated tokens (greedy() feeds each one)
grep -q '^layer lengths   \[29, 29, 29, 29\]$' <<<"$out" ||
    { echo "FAIL: the session does not hold 29 positions on every layer"; exit 1; }
# 24 generated tokens, printed on both lines
n=$(grep "^PyTorch alone" <<<"$out" | tr -cd ',' | wc -c)
[ "$n" -eq 23 ] || { echo "FAIL: expected 24 tokens, the PyTorch line has $((n + 1))"; exit 1; }
if grep -Eiq 'sanitizer|assert|segfault' "$tmp/attnd.log"; then
    cat "$tmp/attnd.log" >&2; echo "FAIL: attnd log" >&2; exit 1
fi
echo "example decode: OK"
