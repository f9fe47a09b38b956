#!/usr/bin/env bash
# test_python_torch.sh — attnd.torch.MultiheadAttention (clients/python/attnd/torch.py) swapped
# into PyTorch's own layers, through the real daemon. Installs the client with pip into a
# temporary --target directory (as test_python_client.sh does), writes seeded layers
# (tests/python/export_models.py: a TransformerEncoderLayer d=32 h=4 batch_first, a
# TransformerDecoderLayer d=48 h=6), exports them with tools/export/attnd-export (the encoder's
# self_attn; the decoder's self_attn and multihead_attn with --which both), starts attnd on a
# free port serving those three (plus the llama RoPE fixture, to be refused) with an admin key
# (for MultiheadAttention.from_module's repository load), and runs
# tests/python/test_torch_swap.py with Debian's /usr/bin/python3: the swapped layers' outputs
# must equal the originals' to 1e-5 (batch_first True and False, batched and unbatched,
# key padding, causal and other masks, need_weights averaged and per head), PyTorch's fused
# fast paths must be declined, and what attnd cannot do must raise attnd.Unsupported.
# Prints the max abs difference of every case. Then the PyTorch example of
# clients/python/README.md runs as written against a second daemon. Daemons are stopped on
# exit.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=${BUILD:-build}
ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
PY=${ATTND_TEST_PYTHON:-/usr/bin/python3}

[ -x "$ATTND_BIN" ] || { echo "FAIL: $ATTND_BIN not built (make all)" >&2; exit 1; }
"$PY" -c 'import torch, numpy' 2>/dev/null || scripts/deps.sh python3-torch python3-numpy ||
    { echo "FAIL: python3-torch could not be installed; attnd.torch needs torch" >&2; exit 1; }
"$PY" -c 'import torch, numpy' 2>/dev/null ||
    { echo "FAIL: $PY cannot import torch and numpy" >&2; exit 1; }
"$PY" -c 'import setuptools, pip' 2>/dev/null || scripts/deps.sh python3-setuptools python3-pip

tmp=$(mktemp -d)
pid=
pid2=
cleanup() {
    for p in $pid $pid2; do
        kill -TERM "$p" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

cp -r clients/python "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info
if ! timeout 120 "$PY" -m pip install --quiet --disable-pip-version-check --no-index \
        --no-build-isolation --no-deps --target "$tmp/site" "$tmp/src" >"$tmp/pip.log" 2>&1; then
    cat "$tmp/pip.log" >&2; echo "FAIL: pip install ./clients/python" >&2; exit 1
fi
[ -f "$tmp/site/attnd/torch.py" ] || { echo "FAIL: pip installed no attnd/torch.py" >&2; exit 1; }

mkdir "$tmp/models"
PYTHONPATH=tests/python PYTHONDONTWRITEBYTECODE=1 "$PY" tests/python/export_models.py "$tmp/models"
"$PY" tools/export/attnd-export "$tmp/models/enc.pt" -o "$tmp/models/enc.safetensors" >"$tmp/export.log" 2>&1 &&
"$PY" tools/export/attnd-export "$tmp/models/dec.pt" --which both -o "$tmp/models/dec.safetensors" \
    >>"$tmp/export.log" 2>&1 || { cat "$tmp/export.log" >&2; echo "FAIL: attnd-export" >&2; exit 1; }
for f in enc dec.self dec.cross; do
    [ -s "$tmp/models/$f.safetensors" ] || { echo "FAIL: attnd-export wrote no $f.safetensors" >&2; exit 1; }
done

admin=pyadmin-$$-$RANDOM
printf '%s\n' "$admin" >"$tmp/admin.keys"; chmod 600 "$tmp/admin.keys"
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$ATTND_BIN" --listen "127.0.0.1:$port" --log-level warn \
    --model enc="$tmp/models/enc.safetensors" \
    --model dec_self="$tmp/models/dec.self.safetensors" \
    --model dec_cross="$tmp/models/dec.cross.safetensors" \
    --model llama=tests/fixtures/ckpt/llama_gqa,layer=1 \
    --model seq=tests/fixtures/ckpt/llama_gqa,layers=all \
    --admin-key-file "$tmp/admin.keys" >"$tmp/attnd.log" 2>&1 &
pid=$!
url="http://127.0.0.1:$port"
for _ in $(seq 150); do
    curl -fsS -o /dev/null "$url/readyz" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/attnd.log" >&2; echo "FAIL: attnd exited" >&2; exit 1; }
    sleep 0.1
done
curl -fsS -o /dev/null "$url/readyz" || { cat "$tmp/attnd.log" >&2; echo "FAIL: attnd not ready" >&2; exit 1; }

rc=0
ATTND_URL=$url ATTND_ADMIN_KEY=$admin MODEL_DIR=$tmp/models \
    PYTHONPATH=$tmp/site:tests/python:tests/fixtures PYTHONDONTWRITEBYTECODE=1 \
    timeout 600 "$PY" -s tests/python/test_torch_swap.py -v || rc=1

# The example in clients/python/README.md ("## PyTorch: `attnd.torch`") runs as written: its
# three blocks (python: save the layer; sh: serve it; python: swap and compare) in a scratch
# directory, on a free port, with build/attnd linked there.
echo "== clients/python/README.md: the PyTorch example"
mkdir -p "$tmp/readme/build"
attnd_abs=$(cd "$(dirname "$ATTND_BIN")" && pwd)/$(basename "$ATTND_BIN")
ln -s "$attnd_abs" "$tmp/readme/build/attnd"
awk '/^## PyTorch: `attnd.torch`/ {on = 1; next} on && /^## / {exit}
     on && /^```/ {if (inb) {inb = 0; n++} else {inb = 1; f = sprintf("'"$tmp"'/readme/block%d", n + 1)}; next}
     on && inb {print > f}' clients/python/README.md
port2=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ -s "$tmp/readme/block1" ] && [ -s "$tmp/readme/block2" ] && [ -s "$tmp/readme/block3" ]; then
    sed -i "s/127\.0\.0\.1:8080/127.0.0.1:$port2/g" "$tmp/readme/block2" "$tmp/readme/block3"
    export PYTHONPATH=$tmp/site PYTHONDONTWRITEBYTECODE=1
    if (cd "$tmp/readme" && "$PY" -s block1) && [ "$(grep -c . "$tmp/readme/block2")" -eq 1 ] &&
            grep -q '&$' "$tmp/readme/block2"; then
        line=$(grep . "$tmp/readme/block2")
        (cd "$tmp/readme" && eval "exec ${line%&} --log-level warn" >"$tmp/readme.log" 2>&1) &
        pid2=$!
        for _ in $(seq 150); do curl -fsS -o /dev/null "http://127.0.0.1:$port2/readyz" 2>/dev/null && break; sleep 0.1; done
        if out=$(cd "$tmp/readme" && "$PY" -s block3 2>&1); then
            echo "README example printed: $out"
            "$PY" -c 'import sys; sys.exit(0 if float(sys.argv[1].split()[-1]) <= 1e-5 else 1)' "$out" ||
                { echo "FAIL: README example: the swapped layer differs by $out" >&2; rc=1; }
        else
            echo "$out" >&2; cat "$tmp/readme.log" >&2; echo "FAIL: README example: block 3" >&2; rc=1
        fi
        kill -TERM "$pid2" 2>/dev/null || true
        wait "$pid2" 2>/dev/null || true
        pid2=
    else
        echo "FAIL: README example: block 1, or block 2 is not one command ending in &" >&2; rc=1
    fi
else
    echo "FAIL: no three code blocks under '## PyTorch: \`attnd.torch\`' in clients/python/README.md" >&2; rc=1
fi

if grep -Eiq 'sanitizer|assert|segfault' "$tmp/attnd.log"; then
    cat "$tmp/attnd.log" >&2; echo "FAIL: attnd log" >&2; rc=1
fi
[ $rc -eq 0 ] && echo "attnd.torch: OK"
exit $rc
