#!/usr/bin/python3
"""build_graphs.py DIR — the ONNX graphs ort_peer.js times (scripts/bench_peers.sh).

DIR holds what `bench_peer export DIR` wrote: manifest.txt (the rows) and the
weights attnd runs on, raw little-endian float32. Every graph takes its weights
from there as initializers, so ONNX Runtime computes the very layer attnd does
and ort_peer.js can compare the two outputs element by element.

Layer forward (nn.MultiheadAttention's computation: Q/K/V projections with
biases, softmax(QK^T/sqrt(d))V per head, output projection with bias), fixed
shapes, fp32; per row, one graph per variant (the best of them is ORT's figure):
  mha        MatMul x3 (x @ W^T) -> com.microsoft.MultiHeadAttention(q, k, v,
             bias = [b_q|b_k|b_v], num_heads) -> MatMul(W_o^T) -> Add(b_o)
             (causal: unidirectional = 1)
  attention  com.microsoft.Attention(x, W_qkv (E, 3E), b_qkv, num_heads): the QKV
             projection fused into the op -> MatMul -> Add (causal: unidirectional = 1)
  gqa        causal rows only: MatMul+Add x3 -> com.microsoft.GroupQueryAttention
             (kv_num_heads = num_heads; GQA is causal by definition) -> MatMul -> Add
Decode step (Llama-3.2-1B attention: hidden 2048, 32 heads, 8 KV heads, d 64,
RoPE half rotation theta 500000, no biases, W_O), dynamic n and cache length:
  decode_gqa MatMul x3 -> GroupQueryAttention(q, k, v, past_key, past_value,
             seqlens_k, total_sequence_length, cos_cache, sin_cache; do_rotary=1,
             rotary_interleaved=0) -> MatMul(W_o^T); outputs y, present_key,
             present_value (BNSH (n, 8, cap, 64)).
The cos/sin caches are computed as lib/rope.c does: the float32 inverse
frequencies 1 / theta^(2i/64), the angle p * inv_freq in double, cos and sin in
double rounded once to float32 (Hugging Face's float32 angle is off by up to
half an ulp of p * inv_freq, ~2e-4 rad at p = 8192).
Needs numpy and onnx (Debian: python3-numpy, python3-onnx); no torch.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]

D_E, D_H, D_G, D_D, THETA = 2048, 32, 8, 64, 500000.0
MAX_POS = 8192 + 64  # rows of the cos/sin caches: every decode row's position P fits


def f32(name, a):
    return numpy_helper.from_array(np.ascontiguousarray(a, dtype=np.float32), name)


def i32(name, a):
    return numpy_helper.from_array(np.asarray(a, dtype=np.int32), name)


def save(nodes, inputs, outputs, inits, path, name):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=OPSETS, producer_name="attnd-bench-peers")
    m.ir_version = 8
    onnx.save(m, path)


def read_f32(path, count):
    a = np.fromfile(path, dtype="<f4")
    if a.size != count:
        sys.exit(f"build_graphs.py: {path}: {a.size} floats, expected {count}")
    return a


def layer_weights(d, E, name):
    """W_Q, W_K, W_V, W_O (out, in), then b_q, b_k, b_v, b_o: bench_peer's layout."""
    a = read_f32(os.path.join(d, name), 4 * E * E + 4 * E)
    w = {k: a[i * E * E:(i + 1) * E * E].reshape(E, E) for i, k in enumerate(("w_q", "w_k", "w_v", "w_o"))}
    for i, k in enumerate(("b_q", "b_k", "b_v", "b_o")):
        w[k] = a[4 * E * E + i * E:4 * E * E + (i + 1) * E]
    return w


def layer_model(path, variant, B, T, E, h, causal, w):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, E])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, T, E])
    inits = [f32("w_o_t", w["w_o"].T), f32("b_o", w["b_o"])]
    nodes = []
    if variant == "mha":
        inits += [f32("w_q_t", w["w_q"].T), f32("w_k_t", w["w_k"].T), f32("w_v_t", w["w_v"].T),
                  f32("b_qkv", np.concatenate([w["b_q"], w["b_k"], w["b_v"]]))]
        nodes += [helper.make_node("MatMul", ["x", "w_q_t"], ["q"]),
                  helper.make_node("MatMul", ["x", "w_k_t"], ["k"]),
                  helper.make_node("MatMul", ["x", "w_v_t"], ["v"]),
                  helper.make_node("MultiHeadAttention", ["q", "k", "v", "b_qkv"], ["z"], domain=MS,
                                   num_heads=h, unidirectional=1 if causal else 0)]
    elif variant == "attention":
        wqkv = np.concatenate([w["w_q"].T, w["w_k"].T, w["w_v"].T], axis=1)  # (E, 3E)
        inits += [f32("w_qkv", wqkv), f32("b_qkv", np.concatenate([w["b_q"], w["b_k"], w["b_v"]]))]
        nodes += [helper.make_node("Attention", ["x", "w_qkv", "b_qkv"], ["z"], domain=MS, num_heads=h,
                                   unidirectional=1 if causal else 0)]
    elif variant == "gqa":
        assert causal
        inits += [f32("w_q_t", w["w_q"].T), f32("w_k_t", w["w_k"].T), f32("w_v_t", w["w_v"].T),
                  f32("b_q", w["b_q"]), f32("b_k", w["b_k"]), f32("b_v", w["b_v"]),
                  i32("seqlens_k", np.full([B], T - 1)), i32("total_seq", np.array(T))]
        for p in "qkv":
            nodes += [helper.make_node("MatMul", ["x", f"w_{p}_t"], [f"{p}0"]),
                      helper.make_node("Add", [f"{p}0", f"b_{p}"], [p])]
        nodes += [helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "seqlens_k", "total_seq"],
                                   ["z", "present_k", "present_v"], domain=MS, num_heads=h, kv_num_heads=h)]
    else:
        raise ValueError(variant)
    nodes += [helper.make_node("MatMul", ["z", "w_o_t"], ["z_o"]), helper.make_node("Add", ["z_o", "b_o"], ["y"])]
    save(nodes, [x], [y], inits, path, f"{variant}_{B}_{T}_{E}_{h}")


def rope_caches():
    """cos/sin (MAX_POS, D/2) as lib/rope.c computes them (see the module comment)."""
    e = (2 * np.arange(D_D // 2, dtype=np.float32)) / np.float32(D_D)
    inv_freq = (np.float32(1.0) / np.power(np.float32(THETA), e)).astype(np.float32)
    a = np.arange(MAX_POS, dtype=np.float64)[:, None] * inv_freq.astype(np.float64)[None, :]
    return np.cos(a).astype(np.float32), np.sin(a).astype(np.float32)


def decode_model(path, w):
    n, cap = "n", "cap"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 1, D_E])
    pk = helper.make_tensor_value_info("past_key", TensorProto.FLOAT, [n, D_G, cap, D_D])
    pv = helper.make_tensor_value_info("past_value", TensorProto.FLOAT, [n, D_G, cap, D_D])
    sk = helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [n])
    ts = helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 1, D_E])
    prk = helper.make_tensor_value_info("present_key", TensorProto.FLOAT, [n, D_G, "cap_out", D_D])
    prv = helper.make_tensor_value_info("present_value", TensorProto.FLOAT, [n, D_G, "cap_out", D_D])
    cos, sin = rope_caches()
    inits = [f32("w_q_t", w["w_q"].T), f32("w_k_t", w["w_k"].T), f32("w_v_t", w["w_v"].T),
             f32("w_o_t", w["w_o"].T), f32("cos_cache", cos), f32("sin_cache", sin)]
    nodes = [helper.make_node("MatMul", ["x", "w_q_t"], ["q"]),
             helper.make_node("MatMul", ["x", "w_k_t"], ["k"]),
             helper.make_node("MatMul", ["x", "w_v_t"], ["v"]),
             helper.make_node("GroupQueryAttention",
                              ["q", "k", "v", "past_key", "past_value", "seqlens_k", "total_sequence_length",
                               "cos_cache", "sin_cache"],
                              ["z", "present_key", "present_value"], domain=MS, num_heads=D_H, kv_num_heads=D_G,
                              do_rotary=1, rotary_interleaved=0),
             helper.make_node("MatMul", ["z", "w_o_t"], ["y"])]
    save(nodes, [x, pk, pv, sk, ts], [y, prk, prv], inits, path, "decode_gqa_llama32_1b")


def decode_weights(d):
    nq, nk = D_H * D_D * D_E, D_G * D_D * D_E
    a = read_f32(os.path.join(d, "decode_w.f32"), 2 * nq + 2 * nk)
    return {"w_q": a[:nq].reshape(D_H * D_D, D_E), "w_k": a[nq:nq + nk].reshape(D_G * D_D, D_E),
            "w_v": a[nq + nk:nq + 2 * nk].reshape(D_G * D_D, D_E),
            "w_o": a[nq + 2 * nk:].reshape(D_E, D_H * D_D)}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: build_graphs.py DIR (a directory `bench_peer export DIR` wrote)")
    d = sys.argv[1]
    graphs = 0
    with open(os.path.join(d, "manifest.txt")) as f:
        rows = [line.split() for line in f if line.strip()]
    for r in rows:
        if r[0] == "layer":
            B, T, E, h, causal = (int(v) for v in r[1:6])
            w = layer_weights(d, E, f"layer_{B}_{T}_{E}_{h}.f32")
            for v in ("mha", "attention", "gqa") if causal else ("mha", "attention"):
                name = f"{v}_{'causal_' if causal else ''}{B}_{T}_{E}_{h}.onnx"
                layer_model(os.path.join(d, name), v, B, T, E, h, causal, w)
                graphs += 1
    if any(r[0] == "decode" for r in rows):
        decode_model(os.path.join(d, "decode_gqa.onnx"), decode_weights(d))
        graphs += 1
    print(f"build_graphs.py: {graphs} graphs (onnx {onnx.__version__}, numpy {np.__version__}) in {d}")


if __name__ == "__main__":
    main()
