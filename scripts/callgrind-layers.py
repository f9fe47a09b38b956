#!/usr/bin/env python3
"""callgrind-layers.py — the per-request instructions of a small request by layer.

    scripts/callgrind-layers.py WARM.cg FULL.cg N

Reads both callgrind files through callgrind_annotate (self cost per file:function),
subtracts the warm-up run from the full one function by function, divides by N (the
requests the full run answered beyond the warm-up) and sums the functions into layers:
libmicrohttpd, jansson, attnd's codec and JSON numbers, the protocol handlers and HTTP
glue, the scheduler hand-off (engine + pthread/futex), metrics, logging, libc malloc,
libc string/stdio, OpenBLAS, the lib forward, and the rest. Printed as a table with the
three largest functions of each layer. Used by scripts/callgrind-small.sh. Lines of
intrinsics headers (immintrin.h and friends) count with the function they are inlined in.
Note: glibc runs memset/memcpy of 2 KiB and more as `rep stosb` / `rep movsb`, which
callgrind counts as one instruction per byte: the "libc string" layer is mostly bytes
zeroed or copied (libmicrohttpd's connection pool reset, calloc), far cheaper on the
hardware than its count says.
"""
import re
import subprocess
import sys
from collections import defaultdict

LINE = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)(?:\s+\[(.*)\])?\s*$")


def self_costs(path):
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no", "--auto=no", path],
                         capture_output=True, text=True, check=True).stdout
    costs = defaultdict(int)
    started = False
    for line in out.splitlines():
        if line.startswith("Ir"):
            started = True
            continue
        if not started:
            continue
        if line.startswith("--") and costs:
            break  # the function list ends where the annotated sources begin
        m = LINE.match(line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        costs[(m.group(2), m.group(3) or "")] += int(m.group(1).replace(",", ""))
    return costs


def layer(fn, obj):
    """The layer of one file:function [object]."""
    fname = fn.split(":", 1)[0]
    if "libmicrohttpd" in obj:
        return "libmicrohttpd"
    if "libjansson" in obj:
        return "jansson"
    if "openblas" in obj:
        return "OpenBLAS"
    if "ld-linux" in obj:
        return "dynamic linker"
    if "libc.so" in obj or "libpthread" in obj or "libm.so" in obj:
        if "/malloc/" in fname:
            return "libc malloc"
        if "nptl" in fname or "futex" in fname or "pthread" in fn or "lowlevellock" in fname:
            return "scheduler hand-off"
        if "/string/" in fname:
            return "libc string (memset/memcpy)"
        if "stdio" in fname or "printf" in fn or "strftime" in fn or "/time/" in fname:
            return "libc stdio/time"
        return "libc other"
    if fname.startswith("server/protocol/json") or fname.startswith("server/protocol/codec"):
        return "codec + JSON numbers"
    if fname.startswith("server/protocol/") or fname.startswith("server/http/"):
        return "http glue + handlers"
    if fname.startswith("server/engine/"):
        return "scheduler hand-off"
    if fname.startswith("server/core/metrics"):
        return "metrics"
    if fname.startswith("server/core/log") or "access_log" in fname:
        return "logging"
    if fname.startswith("server/"):
        return "server other"
    if fname.startswith("lib/") or "/include/" in fname:  # intrinsics headers: lib kernels
        return "lib forward"
    return "other"


def main():
    warm, full, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    a, b = self_costs(warm), self_costs(full)
    layers = defaultdict(int)
    per_fn = defaultdict(lambda: defaultdict(int))  # layer -> function name -> Ir
    # Intrinsics headers' lines inlined into a function count with the layer of that
    # function's own source lines (the AVX2 float printer is codec, small_avx2 lib).
    own = {}
    for fn, obj in sorted(set(a) | set(b)):
        if "/include/" not in fn.split(":", 1)[0]:
            own.setdefault(fn.split(":")[-1], layer(fn, obj))
    for key in set(a) | set(b):
        d = b.get(key, 0) - a.get(key, 0)
        if d == 0:
            continue
        lay = layer(*key)
        if "/include/" in key[0].split(":", 1)[0]:
            lay = own.get(key[0].split(":")[-1], lay)  # these lines name no object
        layers[lay] += d
        per_fn[lay][key[0].split(':')[-1]] += d
    total = sum(layers.values())
    print(f"{'layer':30s} {'Ir/request':>11s}  share  largest functions (Ir/request)")
    for lay, d in sorted(layers.items(), key=lambda kv: -kv[1]):
        if abs(d) < n * 100:  # under 100 per request: noise of the run
            continue
        top = sorted(per_fn[lay].items(), key=lambda kv: -kv[1])[:3]
        names = ", ".join(f"{f} {v // n}" for f, v in top)
        print(f"{lay:30s} {d // n:11d} {100 * d / total:5.1f}%  {names}"[:150])
    print(f"{'total':30s} {total // n:11d}")


if __name__ == "__main__":
    main()
