#!/usr/bin/env bash
# test_doc_curls.sh — every curl command in README.md, docs/*.md and proto/README.md runs as written
# against a real attnd and succeeds: 2xx from each request, or the status its comment
# documents (`→ 400`), and exit status 0 (pipefail). tests/scripts/doc_commands.py extracts
# the commands (and the NAME=$(...) assignments and attnd Python client one-liners beside
# them) and rewrites one thing, mechanically: the documented address localhost:8080 /
# 127.0.0.1:8080 becomes the test daemon's 127.0.0.1:PORT. The daemon serves what the docs
# assume: demo (the default model, as `make run`) and llama (the tiny Llama fixture, layer 1),
# with an admin key in the scratch directory's admin.keys (the Model management section).
# Commands run from a scratch directory whose entries link to the checkout's, so relative
# paths (proto/examples/..., clients/python) resolve and files they write land there.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=${BUILD:-build}
ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
PY=${ATTND_TEST_PYTHON:-/usr/bin/python3}
[ -x "$ATTND_BIN" ] || { echo "FAIL: $ATTND_BIN not built (make all)" >&2; exit 1; }
command -v curl >/dev/null || { echo "FAIL: curl missing (scripts/deps.sh installs it)" >&2; exit 1; }

repo=$PWD
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

port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir "$tmp/work"
"$PY" -c 'import secrets; print(secrets.token_hex(16))' >"$tmp/work/admin.keys"
chmod 600 "$tmp/work/admin.keys"
"$ATTND_BIN" --listen "127.0.0.1:$port" --log-level warn --model demo=config/demo.safetensors \
    --model llama=tests/fixtures/ckpt/llama_gqa,layer=1 --default-model demo \
    --admin-key-file "$tmp/work/admin.keys" \
    >"$tmp/attnd.log" 2>&1 &
pid=$!
for _ in $(seq 150); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/attnd.log" >&2; echo "FAIL: attnd exited" >&2; exit 1; }
    sleep 0.1
done
curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" ||
    { cat "$tmp/attnd.log" >&2; echo "FAIL: attnd not ready after 15 s" >&2; exit 1; }

for entry in "$repo"/*; do ln -s "$entry" "$tmp/work/"; done

rc=0
docs_cmds=0
for doc in README.md docs/*.md proto/README.md; do
    name=${doc//\//_}
    n=$("$PY" tests/scripts/doc_commands.py extract "$doc" "$port" | "$PY" -c 'import json, sys; print(len(json.load(sys.stdin)))')
    case $doc in docs/*) docs_cmds=$((docs_cmds + n)) ;; esac
    if [ "$n" -eq 0 ] && [ "${doc#docs/}" != "$doc" ]; then
        echo "== $doc: no command that talks to attnd"   # a docs/ page may have none
        continue
    fi
    mkdir "$tmp/$name.out"
    "$PY" tests/scripts/doc_commands.py script "$doc" "$port" >"$tmp/$name.sh"
    (cd "$tmp/work" && DOC_STATUS="$tmp/$name.status" DOC_OUT="$tmp/$name.out" \
        timeout 120 bash "$tmp/$name.sh") || true   # each command's status is judged below
    touch "$tmp/$name.status"
    echo "== $doc"
    "$PY" tests/scripts/doc_commands.py check "$doc" "$port" "$tmp/$name.status" "$tmp/$name.out" || rc=1
done
# docs/ holds most of the manual: its commands must have been found and run.
[ "$docs_cmds" -ge 8 ] || { echo "FAIL: only $docs_cmds commands found in docs/*.md"; rc=1; }
if grep -Eiq 'sanitizer|assert|segfault' "$tmp/attnd.log"; then
    cat "$tmp/attnd.log" >&2; echo "FAIL: attnd log" >&2; rc=1
fi
[ $rc -eq 0 ] && echo "doc curls: OK"
exit $rc
