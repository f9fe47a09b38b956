#!/usr/bin/env bash
# test_export.sh — tools/export/attnd-export on layers made by torch (tests/python/export_models.py):
# a whole TransformerEncoderLayer from a .pt file, a TransformerDecoderLayer's cross-attention
# from a module:attr import path (and --which both), a state_dict prefix, a kdim/vdim layer,
# a bias-free one, a submodule of a TransformerEncoder; each checked by the tool itself
# against a daemon it starts (--verify-with-attnd). Then the files are served together by the
# real daemon and tests/python/check_export.py compares the answers (v1 JSON, v2 binary,
# sessions) with the torch layers. Also: refusals (add_bias_kv, an ambiguous module, a state_dict
# without --heads, no torch) exit 2 with the reason; a wrong layer behind --url exits 1; the
# README's "Serve your own layer" recipe runs as written. Needs Debian's /usr/bin/python3 with
# torch (python3-torch, installed through scripts/deps.sh when missing) and numpy.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

BUILD=${BUILD:-build}
ATTND_BIN=${ATTND_BIN:-$BUILD/attnd}
PY=${ATTND_TEST_PYTHON:-/usr/bin/python3}
EXPORT=tools/export/attnd-export

[ -x "$ATTND_BIN" ] || { echo "FAIL: $ATTND_BIN not built (make all)" >&2; exit 1; }
attnd_abs=$(cd "$(dirname "$ATTND_BIN")" && pwd)/$(basename "$ATTND_BIN")
"$PY" -c 'import torch, numpy' 2>/dev/null || scripts/deps.sh python3-torch python3-numpy ||
    { echo "FAIL: python3-torch could not be installed; attnd-export needs torch" >&2; exit 1; }
"$PY" -c 'import torch, numpy' 2>/dev/null ||
    { echo "FAIL: $PY cannot import torch and numpy" >&2; exit 1; }

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
export PYTHONPATH=$repo/tests/python:$repo/clients/python PYTHONDONTWRITEBYTECODE=1

fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# run_export NAME ARGS...: attnd-export ARGS --json; must exit 0 and report every max_diff <= 1e-5.
run_export() {
    local name=$1; shift
    if ! "$PY" "$EXPORT" "$@" --json >"$tmp/$name.json" 2>"$tmp/$name.err"; then
        cat "$tmp/$name.err" >&2; fail "attnd-export $* exited non-zero"; return
    fi
    cat "$tmp/$name.err"
    "$PY" - "$tmp/$name.json" <<'EOF' || fail "attnd-export $name: report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ok"] and r["checked_with"], r
for f in r["files"]:
    assert f["attnd"] and f["max_diff"] <= 1e-5, f
    assert f["dtype"] != "F32" or f["file_vs_module"] == 0.0, f
EOF
}

# expect_refusal STATUS PATTERN ARGS...: attnd-export exits STATUS with PATTERN on stderr.
expect_refusal() {
    local want=$1 pattern=$2 rc=0; shift 2
    "$PY" "$EXPORT" "$@" >"$tmp/refusal.out" 2>"$tmp/refusal.err" || rc=$?
    if [ "$rc" -ne "$want" ] || ! grep -q -- "$pattern" "$tmp/refusal.err"; then
        cat "$tmp/refusal.out" "$tmp/refusal.err" >&2
        fail "attnd-export $*: expected exit $want and '$pattern', got exit $rc"
    else
        echo "refused as expected (exit $rc): $(tail -n1 "$tmp/refusal.err")"
    fi
}

"$PY" tests/python/export_models.py "$tmp"
v="--verify-with-attnd $ATTND_BIN"
echo "== exports, each checked against a daemon started by the tool"
run_export enc "$tmp/enc.pt" -o "$tmp/enc.safetensors" $v
run_export cross export_models:make_decoder --which cross -o "$tmp/cross.safetensors" $v
run_export both "$tmp/dec.pt" --which both -o "$tmp/dec.safetensors" $v
run_export sd "$tmp/enc_sd.pt" --prefix self_attn. --heads 4 -o "$tmp/sd.safetensors" $v
run_export kdim export_models:make_kdim -o "$tmp/kdim.safetensors" $v
run_export nobias export_models:make_nobias -o "$tmp/nobias.safetensors" $v
run_export stack export_models:make_stack --prefix layers.1.self_attn -o "$tmp/stack.safetensors" $v
run_export f16 "$tmp/enc.pt" --dtype F16 -o "$tmp/enc16.safetensors" $v
for f in dec.self dec.cross; do [ -s "$tmp/$f.safetensors" ] || fail "--which both wrote no $f.safetensors"; done

# The same tensors whatever the route to them (module file, state_dict prefix, import path).
"$PY" - "$tmp" <<'EOF' || fail "exported tensors differ between sources"
import sys, os
sys.path.insert(0, "tests/fixtures")
import st_format
d = sys.argv[1]
def tensors(name):
    meta, t = st_format.read(os.path.join(d, name))
    return meta, t
m1, a = tensors("enc.safetensors"); m2, b = tensors("sd.safetensors")
assert a == b, "enc.pt vs its state_dict"
assert m1["num_heads"] == m2["num_heads"] == "4", (m1, m2)
_, c = tensors("cross.safetensors"); _, e = tensors("dec.cross.safetensors")
assert c == e, "module:attr vs .pt"
_, s = tensors("dec.self.safetensors")
assert s != c, "self and cross attention exported the same tensors"
_, k = tensors("kdim.safetensors")
assert sorted(k) == ["in_proj_bias", "k_proj_weight", "out_proj.bias", "out_proj.weight",
                     "q_proj_weight", "v_proj_weight"], sorted(k)
_, n = tensors("nobias.safetensors")
assert sorted(n) == ["in_proj_weight", "out_proj.weight"], sorted(n)
print("exported tensors: the same from every source; names as PyTorch's state_dict")
EOF

echo "== refusals"
expect_refusal 2 "add_bias_kv" export_models:make_bias_kv -o "$tmp/x.safetensors"
expect_refusal 2 "choose one with --prefix" export_models:make_two -o "$tmp/x.safetensors"
expect_refusal 2 "pass --heads" "$tmp/enc_sd.pt" --prefix self_attn. -o "$tmp/x.safetensors"
expect_refusal 2 "self-attention only" "$tmp/enc.pt" --which cross -o "$tmp/x.safetensors"
expect_refusal 2 "no such file" "$tmp/missing.pt" -o "$tmp/x.safetensors"
# No torch: the import is made to fail; the tool says what it needs.
rc=0
"$PY" -c 'import runpy, sys; sys.modules["torch"] = None; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name="__main__")' \
    "$EXPORT" "$tmp/enc.pt" -o "$tmp/x.safetensors" 2>"$tmp/notorch.err" || rc=$?
if [ "$rc" -ne 2 ] || ! grep -q "PyTorch is needed" "$tmp/notorch.err"; then
    cat "$tmp/notorch.err" >&2; fail "without torch: expected exit 2 and a clear message, got $rc"
else
    echo "without torch (exit 2): $(cat "$tmp/notorch.err")"
fi

# start NAME ARGS...: attnd on a free port, ready within 15 s; sets $url.
start() {
    local name=$1 port pid; shift
    port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$ATTND_BIN" --listen "127.0.0.1:$port" --log-level warn "$@" >"$tmp/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    url="http://127.0.0.1:$port"
    for _ in $(seq 150); do
        curl -fsS -o /dev/null "$url/readyz" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$tmp/$name.log" >&2; echo "FAIL: attnd ($name) exited" >&2; exit 1; }
        sleep 0.1
    done
    cat "$tmp/$name.log" >&2; echo "FAIL: attnd ($name) not ready" >&2; exit 1
}

echo "== a layer that is not the one served: --url must fail"
start wrong --model wrong64=config/demo.safetensors
expect_refusal 1 "FAILED" "$tmp/wrong64.pt" -o "$tmp/wrong64.safetensors" --url "$url" --served-name wrong64
expect_refusal 1 "is not this layer" "$tmp/enc.pt" -o "$tmp/x.safetensors" --url "$url" --served-name wrong64
# ...and passes against a daemon that does serve the file
start right --model mine="$tmp/wrong64.safetensors"
run_export url "$tmp/wrong64.pt" -o "$tmp/wrong64.safetensors" --url "$url" --served-name mine

echo "== the exports served together, compared with the torch layers"
start served --model enc="$tmp/enc.safetensors" --model cross="$tmp/cross.safetensors" \
    --model kdim="$tmp/kdim.safetensors"
"$PY" tests/python/check_export.py "$url" || fail "served exports differ from PyTorch"

echo "== README: Serve your own layer"
mkdir -p "$tmp/readme/build"
ln -s "$repo/tools" "$tmp/readme/tools"
ln -s "$attnd_abs" "$tmp/readme/build/attnd"
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# the three code blocks after the heading: python, sh, python
awk '/^### Serve your own layer/ {on = 1; next} on && /^#/ {exit}
     on && /^```/ {if (inb) {inb = 0; n++} else {inb = 1; close(f); f = sprintf("'"$tmp"'/readme/block%d", n + 1)}; next}
     on && inb {print > f}' README.md
for b in 1 2 3; do [ -s "$tmp/readme/block$b" ] || { fail "README: no code block $b under 'Serve your own layer'"; }; done
if [ -s "$tmp/readme/block3" ]; then
    py_lines=$(cat "$tmp/readme/block1" "$tmp/readme/block3" | grep -cv '^\s*$')
    [ "$py_lines" -le 5 ] || fail "README: the recipe has $py_lines lines of Python, not 5"
    sed -i "s/127\.0\.0\.1:8080/127.0.0.1:$port/g" "$tmp/readme/block2" "$tmp/readme/block3"
    (
        cd "$tmp/readme"
        "$PY" block1 || exit 1
        while IFS= read -r line; do
            case "$line" in
                *'&') eval "${line%&} >\"$tmp/readme.log\" 2>&1 &"; echo "$!" >"$tmp/readme.pid" ;;
                ?*) eval "$line" || exit 1 ;;
            esac
        done <block2
    ) || fail "README recipe: the export or the serve step failed"
    if [ -s "$tmp/readme.pid" ]; then
        pids+=("$(cat "$tmp/readme.pid")")
        for _ in $(seq 150); do curl -fsS -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null && break; sleep 0.1; done
        if out=$(cd "$tmp/readme" && "$PY" block3 2>&1); then
            echo "README recipe printed: $out"
            "$PY" -c 'import sys; d = float(sys.argv[1].split()[-1]); sys.exit(0 if d <= 1e-5 else 1)' "$out" ||
                fail "README recipe: attnd and PyTorch differ by $out"
        else
            echo "$out" >&2; fail "README recipe: the client step failed"
        fi
    fi
fi

[ $fails -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
echo "attnd-export: OK"
