#!/usr/bin/python3
"""torch_ref.py — PyTorch references for tests/python/test_client.py.

Reads {"model": PATH, "cases": {name: case}} as JSON on stdin and writes
{name: {"output": ..., "weights": ...}} as JSON on stdout. Each case is one sequence in
the /v1 request form (query, key, value, key_padding_mask, attn_mask, is_causal, window,
need_weights, average_attn_weights), computed by torch.nn.MultiheadAttention loaded from
the safetensors file (PyTorch state_dict names, __metadata__.num_heads) in float64, so the
reference is the exact answer up to float64 rounding. is_causal and window become an
attn_mask with attnd's semantics (causal: keys <= t; window w: with causal keys in
[t-w+1, t], without |t-j| < w). Run with an interpreter that has torch (Debian's
/usr/bin/python3). Exit 3 when torch is not importable."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import st_format  # noqa: E402

try:
    import torch
except ImportError:
    print("torch_ref: torch is not importable by %s" % sys.executable, file=sys.stderr)
    sys.exit(3)

_DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def load_mha(path):
    meta, tensors = st_format.read(path)
    sd = {}
    for name, (dtype, shape, raw) in tensors.items():
        t = torch.frombuffer(bytearray(raw), dtype=_DT[dtype]).reshape(shape)
        sd[name] = t.to(torch.float64)
    heads = int(meta["num_heads"])
    if "in_proj_weight" in sd:
        e = sd["in_proj_weight"].shape[1]
        kdim = vdim = e
    else:
        e = sd["q_proj_weight"].shape[1]
        kdim, vdim = sd["k_proj_weight"].shape[1], sd["v_proj_weight"].shape[1]
    mha = torch.nn.MultiheadAttention(e, heads, bias="in_proj_bias" in sd, kdim=kdim, vdim=vdim,
                                      batch_first=True, dtype=torch.float64)
    mha.load_state_dict(sd, strict=True)
    return mha.eval()


def visibility(t, s, is_causal, window):
    """Bool (T,S): True = blocked, from is_causal and window."""
    blocked = torch.zeros(t, s, dtype=torch.bool)
    i = torch.arange(t).unsqueeze(1)
    j = torch.arange(s).unsqueeze(0)
    if is_causal:
        blocked |= j > i
        if window:
            blocked |= j <= i - window
    elif window:
        blocked |= (i - j).abs() >= window
    return blocked


def run(mha, case):
    q = torch.tensor(case["query"], dtype=torch.float64)
    k = torch.tensor(case["key"], dtype=torch.float64) if "key" in case else q
    v = torch.tensor(case["value"], dtype=torch.float64) if "value" in case else k
    t, s = q.shape[0], k.shape[0]
    mask = torch.zeros(t, s, dtype=torch.float64)
    if "attn_mask" in case:
        m = torch.tensor(case["attn_mask"])
        if m.dtype == torch.bool:
            mask = mask.masked_fill(m, float("-inf"))
        else:
            mask = mask + m.to(torch.float64)
    mask = mask.masked_fill(visibility(t, s, case.get("is_causal", False),
                                       case.get("window", 0)), float("-inf"))
    kpm = None
    if "key_padding_mask" in case:
        kpm = torch.tensor([case["key_padding_mask"]], dtype=torch.bool)
    need = case.get("need_weights", False)
    avg = case.get("average_attn_weights", True)
    with torch.no_grad():
        out, w = mha(q[None], k[None], v[None], key_padding_mask=kpm, attn_mask=mask,
                     need_weights=need, average_attn_weights=avg)
    res = {"output": out[0].tolist()}
    if need:
        res["weights"] = w[0].tolist()
    return res


def main():
    req = json.load(sys.stdin)
    mha = load_mha(req["model"])
    json.dump({name: run(mha, case) for name, case in req["cases"].items()}, sys.stdout)


if __name__ == "__main__":
    main()
