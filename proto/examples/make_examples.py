#!/usr/bin/python3
"""make_examples.py — writes proto/examples/: request bodies, the responses attnd must give
(computed by PyTorch's nn.MultiheadAttention from config/demo.safetensors, in float64), error
cases, and index.json, the manifest that tests/integration/test_examples.c and
tests/scripts/test_openapi.sh walk.

    /usr/bin/python3 proto/examples/make_examples.py [--model config/demo.safetensors] [--out proto/examples]

Deterministic: inputs come from random.Random(seed), uniform in [-2, 2], rounded to 3 decimals; outputs and weights
are rounded to 6 decimals (the tests compare within 1e-4). Rerun after the demo model changes.
The generator reads each request the way the wire protocol (proto/README.md) defines it, so it
is a second, independent reading of the protocol: nesting, masks, defaults.
"""
import argparse
import json
import math
import os
import random
import struct
import sys

import torch
import torch.nn as nn

TOL = 1e-4
ILLUSTRATIVE_KEYS = ["queue_us", "compute_us", "batch_size", "message", "loaded_at", "file"]


# ------------------------------------------------------------------ model

def read_safetensors(path):
    """Returns ({name: float64 tensor}, metadata dict). Parses the format by hand:
    u64 LE header length, JSON header, raw little-endian data."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    data = blob[8 + hlen:]
    meta = header.pop("__metadata__", {}) or {}
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        raw = bytearray(data[begin:end])
        x = torch.frombuffer(raw, dtype=dtypes[t["dtype"]]) if raw else torch.zeros(0)
        tensors[name] = x.reshape(t["shape"]).to(torch.float64)
    return tensors, meta


def load_mha(path, heads):
    """nn.MultiheadAttention (batch_first, float64) holding the file's weights."""
    w, meta = read_safetensors(path)
    h = heads or int(meta.get("num_heads", 0))
    if h <= 0:
        sys.exit("make_examples: number of heads unknown (no __metadata__.num_heads); pass --heads")
    if "in_proj_weight" in w:
        in_w = w["in_proj_weight"]
    elif all(k in w for k in ("q_proj_weight", "k_proj_weight", "v_proj_weight")):
        in_w = torch.cat([w["q_proj_weight"], w["k_proj_weight"], w["v_proj_weight"]])
    else:
        sys.exit("make_examples: expected nn.MultiheadAttention tensor names (in_proj_weight ...)")
    e = in_w.shape[1]
    if in_w.shape[0] != 3 * e:
        sys.exit("make_examples: only E_q = E_k = E_v models are supported (demo model)")
    has_bias = "in_proj_bias" in w
    mha = nn.MultiheadAttention(e, h, bias=has_bias, batch_first=True).double().eval()
    state = {"in_proj_weight": in_w, "out_proj.weight": w["out_proj.weight"]}
    if has_bias:
        state["in_proj_bias"] = w["in_proj_bias"]
        state["out_proj.bias"] = w.get("out_proj.bias", torch.zeros(e, dtype=torch.float64))
    mha.load_state_dict(state, strict=True)
    return mha


# ------------------------------------------------------------------ protocol reading

def depth(x):
    d = 0
    while isinstance(x, list):
        d, x = d + 1, x[0]
    return d


def leaf(x):
    while isinstance(x, list):
        x = x[0]
    return x


def split_request(req, h):
    """The request as a list of per-sequence dicts, as proto/README.md defines the nesting."""
    batched = depth(req["query"]) == 3
    n = len(req["query"]) if batched else 1
    pick = (lambda v, b: v[b]) if batched else (lambda v, b: v)
    mask = req.get("attn_mask")
    seqs = []
    for b in range(n):
        s = {"query": pick(req["query"], b)}
        if "key" in req:
            s["key"] = pick(req["key"], b)
            s["value"] = pick(req["value"], b) if "value" in req else s["key"]
        if "key_padding_mask" in req:
            s["key_padding_mask"] = pick(req["key_padding_mask"], b)
        if mask is not None:
            d = depth(mask)
            if batched and d == 2:
                m = mask               # T×S shared by the batch
            else:
                m = pick(mask, b)
            s["attn_mask"] = m
            s["attn_mask_per_head"] = depth(m) == 3
            assert not s["attn_mask_per_head"] or len(m) == h
        seqs.append(s)
    return batched, seqs


def structural_block(t_len, s_len, causal, window):
    """(T,S) bool, True = blocked, from is_causal / window (README rules)."""
    blk = torch.zeros(t_len, s_len, dtype=torch.bool)
    for t in range(t_len):
        for j in range(s_len):
            if causal and j > t:
                blk[t, j] = True
            if window > 0:
                inside = (t - window + 1 <= j <= t) if causal else abs(t - j) < window
                if not inside:
                    blk[t, j] = True
    return blk


def run_seq(mha, s, causal, window):
    """One sequence through PyTorch. Returns (output (T,E_out), weights (h,T,S)) in float64,
    with fully masked rows given the protocol's zero mixture / zero weights."""
    h = mha.num_heads
    q = torch.tensor(s["query"], dtype=torch.float64)
    k = torch.tensor(s["key"], dtype=torch.float64) if "key" in s else q
    v = torch.tensor(s["value"], dtype=torch.float64) if "value" in s else q
    t_len, s_len = q.shape[0], k.shape[0]

    mask = torch.zeros(t_len, s_len, dtype=torch.float64)
    if "attn_mask" in s:
        m = s["attn_mask"]
        if isinstance(leaf(m), bool):
            mt = torch.zeros(torch.tensor(m).shape, dtype=torch.float64)
            mt.masked_fill_(torch.tensor(m, dtype=torch.bool), float("-inf"))
        else:
            mt = torch.tensor(m, dtype=torch.float64)
        mask = mt + mask  # broadcasts (T,S) or (h,T,S)
    blk = structural_block(t_len, s_len, causal, window)
    mask = mask.masked_fill(blk, float("-inf"))
    if mask.dim() == 2:
        mask = mask.unsqueeze(0).expand(h, t_len, s_len)
    mask = mask.contiguous()
    kpm = None
    if "key_padding_mask" in s:
        kpm = torch.tensor([s["key_padding_mask"]], dtype=torch.bool)

    # Grad stays enabled so 1.13 takes the documented (non-fast) path every time.
    out, w = mha(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), key_padding_mask=kpm,
                 attn_mask=mask, need_weights=True, average_attn_weights=False)
    out, w = out.detach()[0], w.detach()[0]          # (T,E_out), (h,T,S)

    # Recompute the output from the per-head weights (fully masked rows -> 0): this checks our
    # reading of torch on every normal row and gives the protocol's answer on masked rows.
    w0 = torch.nan_to_num(w, nan=0.0)
    e = mha.embed_dim
    d_v = e // h
    v_proj = v @ mha.in_proj_weight[2 * e:].T
    if mha.in_proj_bias is not None:
        v_proj = v_proj + mha.in_proj_bias[2 * e:]
    mix = torch.cat([w0[i] @ v_proj[:, i * d_v:(i + 1) * d_v] for i in range(h)], dim=1)
    rec = mha.out_proj(mix).detach()
    finite = ~torch.isnan(out).any(dim=1)
    err = (rec[finite] - out[finite]).abs().max().item() if finite.any() else 0.0
    assert err < 1e-9, f"reconstruction differs from torch by {err}"
    return rec, w0


def compute(mha, req):
    batched, seqs = split_request(req, mha.num_heads)
    causal = bool(req.get("is_causal", False))
    window = int(req.get("window", 0))
    outs, weights = [], []
    for s in seqs:
        o, w = run_seq(mha, s, causal, window)
        outs.append(r6(o.tolist()))
        if req.get("average_attn_weights", True):
            weights.append(r6(w.mean(dim=0).tolist()))
        else:
            weights.append(r6(w.tolist()))
    resp = {"model": "demo"}
    if "id" in req:
        resp["id"] = req["id"]
    resp["output"] = outs if batched else outs[0]
    if req.get("need_weights", False):
        resp["weights"] = weights if batched else weights[0]
    resp["timing"] = {"queue_us": 412, "compute_us": 180, "batch_size": 1}
    return resp


def r6(x):
    if isinstance(x, list):
        return [r6(y) for y in x]
    return round(float(x), 6) + 0.0  # + 0.0 turns -0.0 into 0.0


# ------------------------------------------------------------------ inputs

class Inputs:
    def __init__(self, e, seed=20240601):
        self.e = e
        self.rng = random.Random(seed)

    def mat(self, rows):
        return [[round(self.rng.uniform(-2.0, 2.0), 3) for _ in range(self.e)] for _ in range(rows)]


# ------------------------------------------------------------------ writing

def dumps(x, indent=0):
    """JSON with one matrix row per line: readable diffs, reasonable size."""
    pad = "  " * indent
    if isinstance(x, dict):
        if not x:
            return "{}"
        items = [f'{pad}  {json.dumps(k)}: {dumps(v, indent + 1)}' for k, v in x.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(x, list) and x and isinstance(x[0], (list, dict)):
        items = [pad + "  " + dumps(v, indent + 1) for v in x]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(x)


def write(out_dir, name, obj_or_text):
    path = os.path.join(out_dir, name)
    with open(path, "w") as f:
        f.write(obj_or_text if isinstance(obj_or_text, str) else dumps(obj_or_text) + "\n")
    return name


def error_body(code, field, message):
    return {"error": {"code": code, "message": message, "field": field}}


# ------------------------------------------------------------------ the examples

def attention_examples(x, h):
    """(name, summary, path, request) for every 200 example."""
    ex = []
    ex.append(("self_single", "One sequence (T=3), self-attention; id and timeout_ms echoed/used",
               {"query": x.mat(3), "timeout_ms": 10000, "id": "self-single-1"}))
    ex.append(("self_batch_ragged", "A batch of two sequences of different lengths (T=2, T=4)",
               {"query": [x.mat(2), x.mat(4)]}))
    ex.append(("cross", "Cross-attention: T=2 queries over S=3 keys and separate values",
               {"query": x.mat(2), "key": x.mat(3), "value": x.mat(3)}))
    ex.append(("cross_value_defaults_to_key", "Cross-attention without value: value = key",
               {"query": x.mat(2), "key": x.mat(3)}))
    ex.append(("key_padding_mask", "Ragged batch with a key padding mask (true = ignore), averaged weights",
               {"query": [x.mat(3), x.mat(2)], "key_padding_mask": [[False, False, True], [False, True]],
                "need_weights": True}))
    ex.append(("attn_mask_bool", "Boolean attn_mask T×S (true = blocked)",
               {"query": x.mat(3),
                "attn_mask": [[False, True, True], [False, False, True], [True, False, False]]}))
    ex.append(("attn_mask_float", "Float attn_mask T×S, added to the scaled scores",
               {"query": x.mat(3),
                "attn_mask": [[0.0, -1.0, -2.5], [0.5, 0.0, -1.0], [-3.0, 0.25, 0.0]]}))
    ex.append(("attn_mask_per_head", "Boolean per-head attn_mask h×T×S",
               {"query": x.mat(2),
                "attn_mask": [[[False, i % 2 == 0], [i % 3 == 0, False]] for i in range(h)]}))
    ex.append(("attn_mask_batch_shared", "One float T×S mask shared by every sequence of a batch",
               {"query": [x.mat(2), x.mat(2)], "attn_mask": [[0.0, -0.75], [-1.5, 0.0]]}))
    ex.append(("causal", "is_causal: query t sees keys <= t; averaged weights show the triangle",
               {"query": x.mat(4), "is_causal": True, "need_weights": True}))
    ex.append(("window", "Sliding window 2 without is_causal: |t - j| < 2",
               {"query": x.mat(4), "window": 2, "need_weights": True}))
    ex.append(("window_causal", "Sliding window 2 with is_causal: keys in [t-1, t]",
               {"query": x.mat(4), "is_causal": True, "window": 2}))
    ex.append(("need_weights_averaged", "Weights averaged over heads: T×S",
               {"query": x.mat(3), "need_weights": True}))
    ex.append(("need_weights_per_head", "Weights per head: h×T×S",
               {"query": x.mat(2), "need_weights": True, "average_attn_weights": False}))
    ex.append(("need_weights_per_head_batch", "Ragged batch, weights per head: B×h×T×S",
               {"query": [x.mat(1), x.mat(2)], "need_weights": True, "average_attn_weights": False}))
    ex.append(("fully_masked_row", "Row 0 sees no key: zero mixture (output = out_proj.bias), zero weights",
               {"query": x.mat(2), "attn_mask": [[True, True], [False, False]], "need_weights": True}))
    return ex


def error_examples(x):
    """(name, summary, method, path, request (dict, str or None), content_type, status, code,
    field, schema_valid). schema_valid: whether the request is valid against AttentionRequest
    (the schema cannot see model widths, so shape errors pass it)."""
    q1 = x.mat(1)
    bad_row = x.mat(4)
    bad_row[3] = bad_row[3][:-1]
    big = x.mat(1)
    big[0][5] = 1e39
    qtxt = json.dumps(x.mat(1))
    nan = [row[:] for row in q1]  # a copy: drawing new numbers would shift every later example
    nan[0][2] = float("nan")
    nantxt = json.dumps({"query": nan})  # NaN: what Python writes, and not JSON
    return [
        ("error_unknown_field", "A misspelt field is rejected, not ignored", "POST",
         "/v1/models/demo/attention", {"query": q1, "need_weight": True}, None,
         400, "unknown_field", "need_weight", False),
        ("error_invalid_type", "is_causal must be a boolean", "POST",
         "/v1/models/demo/attention", {"query": q1, "is_causal": "yes"}, None,
         400, "invalid_type", "is_causal", False),
        ("error_invalid_value", "window must be >= 0", "POST",
         "/v1/models/demo/attention", {"query": q1, "window": -1}, None,
         400, "invalid_value", "window", False),
        ("error_invalid_shape", "Row 3 of sequence 1 has 63 numbers, the model needs 64", "POST",
         "/v1/models/demo/attention", {"query": [x.mat(2), bad_row]}, None,
         400, "invalid_shape", "query[1][3]", True),
        ("error_key_padding_mask_shape", "key_padding_mask needs S = 3 entries, has 2", "POST",
         "/v1/models/demo/attention", {"query": x.mat(3), "key_padding_mask": [False, True]}, None,
         400, "invalid_shape", "key_padding_mask", True),
        ("error_value_without_key", "value is only allowed together with key", "POST",
         "/v1/models/demo/attention", {"query": q1, "value": x.mat(1)}, None,
         400, "invalid_value", "value", False),
        ("error_non_finite", "1e39 does not fit in float32", "POST",
         "/v1/models/demo/attention", {"query": big}, None,
         400, "non_finite", "query[0][5]", False),
        ("error_nan_token", "NaN, as Python's json.dumps writes float('nan'): non_finite naming the value",
         "POST", "/v1/models/demo/attention", nantxt + "\n", None,
         400, "non_finite", "query[0][2]", None),
        ("error_invalid_json", "Truncated JSON (message gives line and column)", "POST",
         "/v1/models/demo/attention", '{"query": [[0.1, 0.2]', None,
         400, "invalid_json", "", None),
        ("error_duplicate_field", "The same key twice in one object", "POST",
         "/v1/models/demo/attention",
         '{"query": ' + qtxt + ', "is_causal": true, "is_causal": false}\n', None,
         400, "duplicate_field", "is_causal", None),
        ("error_model_not_found", "No model of that name", "POST",
         "/v1/models/nope/attention", {"query": q1}, None,
         404, "model_not_found", "", True),
        ("error_media_type", "The body must be application/json", "POST",
         "/v1/models/demo/attention", {"query": q1}, "text/plain",
         415, "unsupported_media_type", "", True),
        ("error_method", "GET on a POST route (Allow: POST)", "GET",
         "/v1/attention", None, None, 405, "method_not_allowed", "", None),
        ("error_route", "A route that does not exist", "GET",
         "/v1/nothing", None, None, 404, "not_found", "", None),
        ("error_model_info_not_found", "GET a model that is not loaded", "GET",
         "/v1/models/nope", None, None, 404, "model_not_found", "", None),
    ]


def model_info(mha, model_file):
    e, h = mha.embed_dim, mha.num_heads
    has_b = mha.in_proj_bias is not None
    n = sum(p.numel() for p in mha.parameters())
    return {"name": "demo", "num_heads": h, "head_dim_k": e // h, "head_dim_v": e // h,
            "embed_q": e, "embed_k": e, "embed_v": e, "embed_out": e, "has_out_proj": True,
            "has_bias": {"q": has_b, "k": has_b, "v": has_b, "out": mha.out_proj.bias is not None},
            "dtype": "F32", "file": model_file, "loaded_at": "2024-06-01T12:00:00Z",
            "param_count": n, "family": "mha", "layer": None, "num_kv_heads": h, "rope": None,
            "sliding_window": None}



# ------------------------------------------------------------------ Open Inference Protocol (v2)

def unflatten(flat, shape):
    """Row-major flat list -> nested lists of `shape`."""
    if len(shape) == 1:
        return list(flat)
    n = len(flat) // shape[0]
    return [unflatten(flat[i * n:(i + 1) * n], shape[1:]) for i in range(shape[0])]


def flatten(x):
    return [y for v in x for y in flatten(v)] if isinstance(x, list) else [x]


def v2_to_v1(req):
    """A v2 infer request read as the equivalent /v1 batch request (proto/openapi.yaml, v2
    routes): inputs [B,T,E] / [B,S,E] / [B,S] / [T,S] (shared), data flat or nested."""
    v1 = {}
    for t in req["inputs"]:
        data = t["data"]
        nested = bool(data) and isinstance(data[0], list)
        assert len(flatten(data)) == math.prod(t["shape"])
        v1[t["name"]] = data if nested else unflatten(data, t["shape"])
    params = dict(req.get("parameters", {}))
    v1.update({k: v for k, v in params.items() if k != "binary_data_output"})
    names = [o["name"] for o in req.get("outputs", [])]
    if names:
        v1["need_weights"] = "attn_weights" in names
    return v1, names or (["output", "attn_weights"] if v1.get("need_weights") else ["output"])


def compute_v2(mha, req):
    v1, names = v2_to_v1(req)
    r = compute(mha, v1)
    b, t = len(v1["query"]), len(v1["query"][0])
    s = len(v1["key"][0]) if "key" in v1 else t
    tensors = {"output": (r["output"], [b, t, mha.embed_dim])}
    if "weights" in r:
        per_head = not v1.get("average_attn_weights", True)
        tensors["attn_weights"] = (r["weights"], [b, mha.num_heads, t, s] if per_head else [b, t, s])
    resp = {"model_name": "demo", "model_version": "1"}
    if "id" in req:
        resp["id"] = req["id"]
    resp["parameters"] = r["timing"]
    resp["outputs"] = [{"name": n, "datatype": "FP32", "shape": tensors[n][1],
                        "data": flatten(tensors[n][0])} for n in names]
    return resp


def v2_tensor(name, shape, data, nested=False):
    return {"name": name, "datatype": "FP32", "shape": shape,
            "data": data if nested else flatten(data)}


def v2_examples(x):
    """(name, summary, path, request) for every 200 v2 infer example."""
    return [
        ("v2_infer_flat", "v2 infer, flat row-major data: B=1, T=3, is_causal; id echoed",
         "/v2/models/demo/infer",
         {"id": "v2-flat-1", "parameters": {"is_causal": True},
          "inputs": [v2_tensor("query", [1, 3, x.e], [x.mat(3)])]}),
        ("v2_infer_nested", "v2 infer, data nested as the shape: cross-attention B=2, T=2, S=3, "
         "with attn_weights (versioned path)",
         "/v2/models/demo/versions/1/infer",
         {"inputs": [v2_tensor("query", [2, 2, x.e], [x.mat(2), x.mat(2)], nested=True),
                     v2_tensor("key", [2, 3, x.e], [x.mat(3), x.mat(3)], nested=True)],
          "outputs": [{"name": "output"}, {"name": "attn_weights"}]}),
    ]


def v2_error_examples(x):
    """(name, summary, method, path, request, status, message). The message is what attnd says
    today; the tests compare it by type only (v2 errors carry no stable code)."""
    return [
        ("v2_error_shape", "v2: query rows of 63 numbers, the model needs 64", "POST",
         "/v2/models/demo/infer",
         {"inputs": [v2_tensor("query", [1, 2, x.e - 1], [row[:-1] for row in x.mat(2)])]},
         400, 'input "query": shape [1,2,63], expected [B,T,64]'),
        ("v2_error_model_not_found", "v2: no model of that name", "POST",
         "/v2/models/nope/infer", {"inputs": [v2_tensor("query", [1, 1, x.e], [x.mat(1)])]},
         404, 'no model named "nope"'),
    ]


def v2_metadata(mha):
    e = mha.embed_dim

    def meta(name, dtype, shape):
        return {"name": name, "datatype": dtype, "shape": shape}
    return {"name": "demo", "versions": ["1"], "platform": "attnd_multihead_attention",
            "inputs": [meta("query", "FP32", [-1, -1, e]), meta("key", "FP32", [-1, -1, e]),
                       meta("value", "FP32", [-1, -1, e]),
                       meta("key_padding_mask", "BOOL", [-1, -1]),
                       meta("attn_mask", "BOOL", [-1, -1]),
                       meta("position_ids", "INT64", [-1, -1])],
            "outputs": [meta("output", "FP32", [-1, -1, e]),
                        meta("attn_weights", "FP32", [-1, -1, -1])],
            "parameters": {"num_heads": mha.num_heads, "num_kv_heads": mha.num_heads,
                           "head_dim": e // mha.num_heads, "rope": None}}


def v2_index(mha, x, out):
    """The v2 entries of index.json (after every v1 one, so v1 inputs stay as they were).
    request_schema / response_schema name the v2 schemas; an entry's illustrative_keys add
    to the global list for that entry only."""
    index = []
    for name, summary, path, req in v2_examples(x):
        index.append({"name": name, "summary": summary, "method": "POST", "path": path,
                      "request": write(out, name + ".request.json", req),
                      "request_schema": "InferRequest", "request_valid": True, "status": 200,
                      "response": write(out, name + ".response.json", compute_v2(mha, req)),
                      "response_schema": "InferResponse"})
    for name, summary, method, path, req, status, message in v2_error_examples(x):
        index.append({"name": name, "summary": summary, "method": method, "path": path,
                      "request": write(out, name + ".request.json", req),
                      "request_schema": "InferRequest", "request_valid": True, "status": status,
                      "response": write(out, name + ".response.json", {"error": message}),
                      "response_schema": "V2Error", "illustrative_keys": ["error"]})
    gets = [
        ("v2_server_metadata", "v2 server metadata", "/v2",
         {"name": "attnd", "version": "0.1.0", "extensions": ["binary_tensor_data", "model_repository"]},
         "ServerMetadata", ["version"]),
        ("v2_health_live", "v2 liveness", "/v2/health/live", {"live": True}, "V2Live", None),
        ("v2_health_ready", "v2 readiness", "/v2/health/ready", {"ready": True}, "V2Ready", None),
        ("v2_model_metadata", "v2 model metadata: tensors, -1 = any size", "/v2/models/demo",
         v2_metadata(mha), "ModelMetadata", None),
        ("v2_model_ready", "v2 model readiness (versioned path)", "/v2/models/demo/versions/1/ready",
         {"ready": True}, "V2Ready", None),
    ]
    for name, summary, path, body, schema, illustrative in gets:
        entry = {"name": name, "summary": summary, "method": "GET", "path": path, "status": 200,
                 "response": write(out, name + ".response.json", body), "response_schema": schema}
        if illustrative:
            entry["illustrative_keys"] = illustrative
        index.append(entry)
    return index


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="config/demo.safetensors")
    ap.add_argument("--heads", type=int, default=0)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()

    torch.set_default_dtype(torch.float64)
    mha = load_mha(args.model, args.heads)
    x = Inputs(mha.embed_dim)
    index = []

    for name, summary, req in attention_examples(x, mha.num_heads):
        entry = {"name": name, "summary": summary, "method": "POST",
                 "path": "/v1/models/demo/attention",
                 "request": write(args.out, name + ".request.json", req), "request_valid": True,
                 "status": 200,
                 "response": write(args.out, name + ".response.json", compute(mha, req)),
                 "response_schema": "AttentionResponse"}
        if not req.get("need_weights", False):
            entry["absent"] = ["weights"]
        index.append(entry)
    index.append({"name": "default_route", "summary": "POST /v1/attention runs the only model",
                  "method": "POST", "path": "/v1/attention",
                  "request": "self_single.request.json", "request_valid": True, "status": 200,
                  "response": "self_single.response.json", "response_schema": "AttentionResponse",
                  "absent": ["weights"]})

    for (name, summary, method, path, req, ctype, status, code, field,
         valid) in error_examples(x):
        entry = {"name": name, "summary": summary, "method": method, "path": path}
        if isinstance(req, str):
            entry["request"] = write(args.out, name + ".request.txt", req)
        elif req is not None:
            entry["request"] = write(args.out, name + ".request.json", req)
            entry["request_valid"] = valid
        if ctype:
            entry["content_type"] = ctype
        entry["status"] = status
        if status == 405:
            entry["allow_contains"] = "POST"  # the Allow header must name the right method
        entry["response"] = write(args.out, name + ".response.json",
                                  error_body(code, field, summary))
        entry["response_schema"] = "Error"
        index.append(entry)

    info = model_info(mha, args.model)
    index += [
        {"name": "models_list", "summary": "Every loaded model", "method": "GET",
         "path": "/v1/models", "status": 200,
         "response": write(args.out, "models_list.response.json", {"models": [info]}),
         "response_schema": "ModelList"},
        {"name": "model_info", "summary": "One model's shapes and provenance", "method": "GET",
         "path": "/v1/models/demo", "status": 200,
         "response": write(args.out, "model_info.response.json", info),
         "response_schema": "ModelInfo"},
        {"name": "healthz", "summary": "Liveness", "method": "GET", "path": "/healthz",
         "status": 200, "response": write(args.out, "healthz.response.json", {"status": "ok"}),
         "response_schema": "Health"},
        {"name": "readyz", "summary": "Readiness", "method": "GET", "path": "/readyz",
         "status": 200, "response": write(args.out, "readyz.response.json", {"status": "ready"}),
         "response_schema": "Health"},
        {"name": "metrics", "summary": "Prometheus text format 0.0.4", "method": "GET",
         "path": "/metrics", "status": 200, "response_content_type": "text/plain"},
    ]
    index += v2_index(mha, x, args.out)

    manifest = {
        "format": "attnd-examples", "version": 1,
        "generator": "proto/examples/make_examples.py",
        "model": {"name": "demo", "file": args.model, "embed": mha.embed_dim,
                  "num_heads": mha.num_heads},
        "tolerance": TOL,
        "rules": ("Compare the response JSON with the example: every key of the example must be "
                  "present with an equal value (numbers within tolerance, arrays of equal length); "
                  "keys named in illustrative_keys only need the same JSON type; keys in an "
                  "entry's absent list must not appear; extra keys in the response are allowed. "
                  "content_type: the request's Content-Type (default application/json); "
                  "response_content_type: a prefix the response's Content-Type must have; "
                  "allow_contains: a method the Allow header must list."),
        "illustrative_keys": ILLUSTRATIVE_KEYS,
        "examples": index,
    }
    write(args.out, "index.json", json.dumps(manifest, indent=2) + "\n")
    print(f"make_examples: {len(index)} examples written to {args.out}")


if __name__ == "__main__":
    main()
