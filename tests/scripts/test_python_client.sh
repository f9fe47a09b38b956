#!/usr/bin/env bash
# test_python_client.sh — the Python client (clients/python, package attnd) against the real
# daemon: installs it with pip into a temporary --target directory (no network: no build
# isolation, no dependencies, no index; Debian's python3-setuptools builds it), starts two
# attnd instances on free ports (the main one: demo + llama, an API key, --max-seq-len 256,
# --max-body-bytes 2000000; a slow one whose queue waits 500 ms, for session_busy and
# timeout; and one with an admin key, for the model repository calls), then runs
# tests/python/test_client.py with Debian's /usr/bin/python3 twice:
#   1. numpy hidden: tests/python/no_numpy.py makes `import numpy` fail (lists, /v1 JSON, v2 JSON)
#   2. with numpy (python3-numpy, installed through scripts/deps.sh when missing): numpy
#      queries to a named model travel as v2 binary tensors
# Answers are compared with torch.nn.MultiheadAttention (tests/python/torch_ref.py) when
# /usr/bin/python3 has torch, else with the daemon's raw HTTP answers. Then
# tests/python/test_hostile.py (no daemon: a raw-socket server of its own sends malformed
# and oversized answers, each of which must raise attnd.ProtocolError) runs with numpy
# hidden and with numpy. Every attnd started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=${BUILD:-build}
ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
PY=${ATTND_TEST_PYTHON:-/usr/bin/python3}

[ -x "$ATTND_BIN" ] || { echo "FAIL: $ATTND_BIN not built (make all)" >&2; exit 1; }
[ -x "$PY" ] || { echo "FAIL: $PY missing" >&2; exit 1; }
"$PY" -c 'import setuptools, pip' 2>/dev/null || scripts/deps.sh python3-setuptools python3-pip
"$PY" -c 'import numpy' 2>/dev/null || scripts/deps.sh python3-numpy ||
    { echo "FAIL: python3-numpy could not be installed; the numpy half of the client tests cannot run" >&2; exit 1; }
"$PY" -c 'import numpy' 2>/dev/null ||
    { echo "FAIL: numpy not importable by $PY even after installing python3-numpy" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

# The package is installed from a copy so pip's in-tree build leaves nothing in the checkout.
cp -r clients/python "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info
if ! timeout 120 "$PY" -m pip install --quiet --disable-pip-version-check --no-index \
        --no-build-isolation --no-deps --target "$tmp/site" "$tmp/src" >"$tmp/pip.log" 2>&1; then
    cat "$tmp/pip.log" >&2; echo "FAIL: pip install ./clients/python" >&2; exit 1
fi
[ -f "$tmp/site/attnd/__init__.py" ] || { echo "FAIL: pip installed no attnd package" >&2; exit 1; }
echo "installed: $(ls -d "$tmp"/site/attnd-*.dist-info | xargs -n1 basename)"

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start NAME ARGS...: starts attnd on a free port, waits (15 s at most) for /readyz; sets $url.
start() {
    local name=$1 port pid; shift
    port=$(free_port)
    "$ATTND_BIN" --listen "127.0.0.1:$port" --log-level warn "$@" >"$tmp/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    url="http://127.0.0.1:$port"
    for _ in $(seq 150); do
        curl -fsS -o /dev/null "$url/readyz" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$tmp/$name.log" >&2; echo "FAIL: attnd ($name) exited" >&2; exit 1; }
        sleep 0.1
    done
    cat "$tmp/$name.log" >&2; echo "FAIL: attnd ($name) not ready after 15 s" >&2; exit 1
}

key=pyclient-$$-$RANDOM
start main --model demo=config/demo.safetensors \
    --model llama=tests/fixtures/ckpt/llama_gqa,layer=1 --default-model demo \
    --model seq=tests/fixtures/ckpt/llama_gqa,layers=all \
    --max-seq-len 256 --max-body-bytes 2000000 --api-keys "$key"
main_url=$url
start slow --model demo=config/demo.safetensors --max-queue-delay-us 500000 --workers 1
slow_url=$url
admin=pyadmin-$$-$RANDOM
printf '%s\n' "$admin" >"$tmp/admin.keys"; chmod 600 "$tmp/admin.keys"
start repo --model demo=config/demo.safetensors --api-keys "$key" \
    --admin-key-file "$tmp/admin.keys"
repo_url=$url

export ATTND_URL=$main_url ATTND_API_KEY=$key ATTND_SLOW_URL=$slow_url
export ATTND_REPO_URL=$repo_url ATTND_ADMIN_KEY=$admin
export ATTND_DEMO_MODEL=$PWD/config/demo.safetensors TORCH_PYTHON=$PY
export PYTHONPATH=$tmp/site PYTHONDONTWRITEBYTECODE=1
unset ATTND_NO_NUMPY

rc=0
echo "== run 1: numpy hidden"
EXPECT_NUMPY=0 timeout 300 "$PY" -s tests/python/no_numpy.py test_client -v || rc=1
echo "== run 2: with numpy"
EXPECT_NUMPY=1 timeout 300 "$PY" -s tests/python/test_client.py -v || rc=1
echo "== hostile answers (numpy hidden, then with numpy)"
timeout 120 "$PY" -s tests/python/no_numpy.py test_hostile -v || rc=1
timeout 120 "$PY" -s tests/python/test_hostile.py -v || rc=1

# The usage examples in README.md ("## Python") and clients/python/README.md ("## Usage") run
# as written, with numpy, against the slow daemon (no key; the URL is substituted).
snippet() {  # snippet FILE HEADING: the first ```python block after the heading
    "$PY" -c '
import re, sys
text = open(sys.argv[1]).read()
at = text.index("\n" + sys.argv[2] + "\n")
print(re.search(r"```python\n(.*?)```", text[at:], re.S).group(1))' "$1" "$2"
}
for doc in "README.md|## Python" "clients/python/README.md|## Usage"; do
    file=${doc%%|*}; heading=${doc#*|}
    if ! snippet "$file" "$heading" >"$tmp/snippet.py" 2>"$tmp/snippet.err"; then
        cat "$tmp/snippet.err" >&2; echo "FAIL: no python example under '$heading' in $file" >&2; rc=1; continue
    fi
    sed -i "s#http://127\.0\.0\.1:8080#$slow_url#g" "$tmp/snippet.py"
    # the main README's example ends with the stream: it must equal the one-shot answer
    if grep -q '^    rows = ' "$tmp/snippet.py"; then
        echo 'assert np.allclose(np.vstack(rows), r.output, atol=1e-5), "stream != one-shot"' >>"$tmp/snippet.py"
    fi
    if (cd "$tmp" && EXPECT_NUMPY=1 timeout 60 "$PY" -s snippet.py >"$tmp/snippet.out" 2>&1); then
        echo "the example in $file runs: $(tr '\n' ' ' <"$tmp/snippet.out")"
    else
        cat "$tmp/snippet.py" "$tmp/snippet.out" >&2; echo "FAIL: the example in $file" >&2; rc=1
    fi
done

for n in main slow repo; do
    if grep -Eiq 'sanitizer|assert|segfault' "$tmp/$n.log"; then
        cat "$tmp/$n.log" >&2; echo "FAIL: attnd ($n) log" >&2; rc=1
    fi
done
[ $rc -eq 0 ] && echo "python client: OK (both runs)"
exit $rc
