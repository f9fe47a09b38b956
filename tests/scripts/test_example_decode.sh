#!/usr/bin/env bash
# test_example_decode.sh — runs the shipped whole-model example, examples/llama_decode.py: a
# seeded Llama-layout checkpoint it writes itself, the non-attention parts in PyTorch and every
# attention layer on the real attnd through one sequence session (a model group). It must
# print the same greedy tokens as the all-PyTorch run with logits within 1e-4 (exit 0); the
# output is shown. Needs Debian's /usr/bin/python3 with torch.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PY=${ATTND_TEST_PYTHON:-/usr/bin/python3}
[ -x "$BUILD/attnd" ] || { echo "FAIL: $BUILD/attnd not built (make all)" >&2; exit 1; }
"$PY" -c 'import torch' 2>/dev/null || { echo "FAIL: $PY has no torch" >&2; exit 1; }
out=$("$PY" examples/llama_decode.py --attnd "$BUILD/attnd" --steps 10 --layers 3) || {
    echo "$out"; echo "FAIL: examples/llama_decode.py exited $?" >&2; exit 1; }
echo "$out"
grep -q '^tokens identical' <<<"$out" || { echo "FAIL: the tokens differ" >&2; exit 1; }
grep -q 'layer lengths \[14, 14, 14\]' <<<"$out" ||
    { echo "FAIL: the session does not hold 5 + 10 - 1 positions on every layer" >&2; exit 1; }
echo "test_example_decode: ok"
