#!/usr/bin/python3
"""bench_torch.py — the PyTorch side of the core benchmark (scripts/bench.sh).

  bench_torch.py gen DIR   writes, per shape, layer_B_T_E_h.safetensors (an
                           nn.MultiheadAttention state_dict, PyTorch names) and
                           x_B_T_E_h.safetensors (input "x", (B*T, E)) for bench_core
  bench_torch.py run DIR   times nn.MultiheadAttention (eval, inference_mode,
                           need_weights=False, batch_first=True) on the same layers
                           and inputs, checks bench_core's outputs (DIR/out_*.f32)
                           against PyTorch's, and prints ours/torch from DIR/core.tsv

Threads: run with OPENBLAS_NUM_THREADS=2 (torch.set_num_threads does not limit
OpenBLAS); torch's own pool is set to the same count. BENCH_SECONDS per shape.
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import st_format  # noqa: E402  (the repo's stdlib-only safetensors writer)

SHAPES = [(1, 32, 64, 8), (8, 128, 256, 8), (8, 512, 512, 8), (1, 2048, 512, 8), (1, 8192, 512, 8)]


def tag(shape):
    return "%d_%d_%d_%d" % shape


def f32(t):
    return ("F32", list(t.shape), t.detach().contiguous().float().numpy().tobytes())


def gen(d):
    for i, (b, t, e, h) in enumerate(SHAPES):
        torch.manual_seed(1000 + i)
        mha = torch.nn.MultiheadAttention(e, h, batch_first=True)
        with torch.no_grad():  # torch inits biases to 0: make them matter
            mha.in_proj_bias.uniform_(-0.1, 0.1)
            mha.out_proj.bias.uniform_(-0.1, 0.1)
        sd = mha.state_dict()
        st_format.write(os.path.join(d, "layer_%s.safetensors" % tag((b, t, e, h))),
                        [(k,) + f32(v) for k, v in sd.items()], {"num_heads": str(h)})
        x = torch.randn(b * t, e)
        st_format.write(os.path.join(d, "x_%s.safetensors" % tag((b, t, e, h))), [("x",) + f32(x)])


def load(d, shape):
    b, t, e, h = shape
    _, ts = st_format.read(os.path.join(d, "layer_%s.safetensors" % tag(shape)))
    mha = torch.nn.MultiheadAttention(e, h, batch_first=True).eval()
    sd = {k: torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shp)
          for k, (_, shp, raw) in ts.items()}
    mha.load_state_dict(sd)
    _, xs = st_format.read(os.path.join(d, "x_%s.safetensors" % tag(shape)))
    x = torch.frombuffer(bytearray(xs["x"][2]), dtype=torch.float32).reshape(b, t, e)
    return mha, x


def median_time(fn, budget):
    t0 = time.perf_counter()
    fn()  # warm-up
    reps = 2 if time.perf_counter() - t0 > 1.0 else 3
    times, start = [], time.perf_counter()
    while len(times) < reps or (time.perf_counter() - start < budget and len(times) < 1000):
        a = time.perf_counter()
        fn()
        times.append(time.perf_counter() - a)
    return statistics.median(times)


def read_core(d):
    ours = {}
    with open(os.path.join(d, "core.tsv")) as f:
        for line in f:
            b, t, e, h, ms, flops = line.split()
            ours[(int(b), int(t), int(e), int(h))] = (float(ms), float(flops))
    return ours


def target(what, measured, met):
    """One issue-18 target line, as tests/common/benchutil.c's bench_target writes it:
    printed, and appended to $BENCH_TARGETS (tab-separated) for bench.sh's closing table."""
    verdict = {True: "met", False: "NOT met", None: "not measured"}[met]
    print("TARGET  %s | %s | %s" % (what, measured, verdict))
    path = os.environ.get("BENCH_TARGETS")
    if path:
        with open(path, "a") as f:
            f.write("%s\t%s\t%s\n" % (what, measured, verdict))


def run(d):
    budget = float(os.environ.get("BENCH_SECONDS", "1.0"))
    threads = int(os.environ.get("OPENBLAS_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    ours = read_core(d)
    print("torch %s, OPENBLAS_NUM_THREADS=%s, torch.set_num_threads(%d); same layers and inputs "
          "as bench_core; ratio = torch ms / ours ms (> 1: ours faster)" %
          (torch.__version__, os.environ.get("OPENBLAS_NUM_THREADS", "unset"), threads))
    print(" B     T    E  h |  torch ms GFLOP/s |   ours ms GFLOP/s | speed-up | max |ours - torch|")
    for shape in SHAPES:
        goal = "core (%d,%d,%d,%d) >= 3x PyTorch" % shape \
            if shape[0] * shape[1] * shape[2] >= 8 * 128 * 256 else None  # shapes >= (8,128,256,8)
        if shape not in ours:
            print("%2d %5d %4d %2d | bench_core has no figure for this shape" % shape)
            if goal:
                target(goal, "bench_core has no figure", None)
            continue
        mha, x = load(d, shape)
        ms_ours, flops = ours[shape]

        def fwd():
            return mha(x, x, x, need_weights=False)[0]

        try:
            with torch.inference_mode():
                out = fwd()
                t = median_time(fwd, budget)
        except RuntimeError as e:  # e.g. the scores do not fit in memory
            print("%2d %5d %4d %2d | torch failed: %s" % (shape + (str(e).splitlines()[0][:80],)))
            if goal:
                target(goal, "torch failed", None)
            continue
        path = os.path.join(d, "out_%s.f32" % tag(shape))
        with open(path, "rb") as f:
            mine = torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(out.shape)
        diff = (mine - out).abs().max().item()
        print("%2d %5d %4d %2d | %9.2f %7.1f | %9.2f %7.1f | %7.2fx | %.2e" %
              (shape + (t * 1e3, flops / t * 1e-9, ms_ours, flops / ms_ours * 1e-6, t * 1e3 / ms_ours,
                        diff)))
        if goal:
            target(goal, "%.2fx" % (t * 1e3 / ms_ours), t * 1e3 / ms_ours >= 3)
        sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "run"):
        sys.exit("usage: bench_torch.py gen|run DIR")
    (gen if sys.argv[1] == "gen" else run)(sys.argv[2])
