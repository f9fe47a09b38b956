#!/usr/bin/python3
"""llama_decode.py — a whole Llama-layout model decoding through attnd: the embeddings,
RMSNorms, MLPs and LM head in PyTorch, every attention layer on attnd through ONE sequence
session (a model group, --model tiny=DIR,layers=all), printed next to the same greedy decode
run all in PyTorch.

    /usr/bin/python3 examples/llama_decode.py [--attnd build/attnd] [--steps 12] [--layers 4]

It writes its own small checkpoint (Hugging Face layout, seeded weights: config.json +
model.safetensors) to a temporary directory, starts attnd on it, and per decode step appends
each layer's normed hidden state to that layer of the session (layer 0 first, then 1, ...),
as an attention-FFN disaggregated deployment would. Exit status 0 when the tokens are
identical and the logits within 1e-4; 1 otherwise. Needs torch (Debian's /usr/bin/python3).
"""
import argparse
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
import attnd  # noqa: E402  (the repo's client)

CFG = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
           vocab_size=96, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=256)


# ------------------------------------------------------------------ the checkpoint

def write_safetensors(path, tensors):
    """tensors: {name: float32 tensor}, written as F32 safetensors (by hand: no library)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        flat = t.contiguous().to(torch.float32).flatten().tolist()
        b = struct.pack("<%df" % len(flat), *flat)
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_checkpoint(d, layers, seed=26):
    g = torch.Generator().manual_seed(seed)
    E, H, G = CFG["hidden_size"], CFG["num_attention_heads"], CFG["num_key_value_heads"]
    D, F, V = E // H, CFG["intermediate_size"], CFG["vocab_size"]

    def w(*shape, scale=None):
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[-1])
        return torch.randn(*shape, generator=g) * scale

    t = {"model.embed_tokens.weight": w(V, E, scale=1.0), "model.norm.weight": 1 + 0.1 * w(E, scale=1),
         "lm_head.weight": w(V, E)}
    for i in range(layers):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = 1 + 0.1 * w(E, scale=1)
        t[p + "post_attention_layernorm.weight"] = 1 + 0.1 * w(E, scale=1)
        t[p + "self_attn.q_proj.weight"] = w(H * D, E)
        t[p + "self_attn.k_proj.weight"] = w(G * D, E)
        t[p + "self_attn.v_proj.weight"] = w(G * D, E)
        t[p + "self_attn.o_proj.weight"] = w(E, H * D)
        t[p + "mlp.gate_proj.weight"] = w(F, E)
        t[p + "mlp.up_proj.weight"] = w(F, E)
        t[p + "mlp.down_proj.weight"] = w(E, F)
    os.makedirs(d, exist_ok=True)
    cfg = dict(CFG, architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
               num_hidden_layers=layers, attention_bias=False, tie_word_embeddings=False,
               torch_dtype="float32")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    return t


# ------------------------------------------------------------------ the model in PyTorch

def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + CFG["rms_norm_eps"]) * w


def rope(x, pos):
    """x: (heads, T, D), half-rotation (Hugging Face's rotate_half) at positions pos."""
    D = x.shape[-1]
    inv = 1.0 / (CFG["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    ang = pos.to(torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention(t, i, h):
    """Layer i's causal self-attention over h (T, E): the all-PyTorch reference."""
    E, H, G = CFG["hidden_size"], CFG["num_attention_heads"], CFG["num_key_value_heads"]
    D, T = E // H, h.shape[0]
    p = "model.layers.%d.self_attn." % i
    q = (h @ t[p + "q_proj.weight"].T).view(T, H, D).transpose(0, 1)
    k = (h @ t[p + "k_proj.weight"].T).view(T, G, D).transpose(0, 1)
    v = (h @ t[p + "v_proj.weight"].T).view(T, G, D).transpose(0, 1)
    pos = torch.arange(T)
    q, k = rope(q, pos), rope(k, pos)
    k, v = k.repeat_interleave(H // G, 0), v.repeat_interleave(H // G, 0)
    s = q @ k.transpose(-1, -2) / math.sqrt(D)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    o = torch.softmax(s, -1) @ v
    return o.transpose(0, 1).reshape(T, H * D) @ t[p + "o_proj.weight"].T


def mlp(t, i, x):
    p = "model.layers.%d." % i
    h = rms_norm(x, t[p + "post_attention_layernorm.weight"])
    a = torch.nn.functional.silu(h @ t[p + "mlp.gate_proj.weight"].T) * (h @ t[p + "mlp.up_proj.weight"].T)
    return x + a @ t[p + "mlp.down_proj.weight"].T


def logits_of(t, x):
    return rms_norm(x, t["model.norm.weight"]) @ t["lm_head.weight"].T


def decode_torch(t, layers, prompt, steps):
    """Greedy decode with the whole sequence recomputed each step (no cache)."""
    tokens, all_logits = list(prompt), []
    for _ in range(steps):
        x = t["model.embed_tokens.weight"][torch.tensor(tokens)]
        for i in range(layers):
            x = x + attention(t, i, rms_norm(x, t["model.layers.%d.input_layernorm.weight" % i]))
            x = mlp(t, i, x)
        lg = logits_of(t, x[-1:])[0]
        all_logits.append(lg)
        tokens.append(int(lg.argmax()))
    return tokens[len(prompt):], all_logits


def decode_attnd(t, layers, prompt, steps, client):
    """The same decode, each layer's attention an append to one sequence session."""
    tokens, all_logits = list(prompt), []
    with client.session("tiny") as s:
        new = list(prompt)   # the rows not yet in the session's caches: the prompt, then one
        for _ in range(steps):
            x = t["model.embed_tokens.weight"][torch.tensor(new)]
            for i in range(layers):
                h = rms_norm(x, t["model.layers.%d.input_layernorm.weight" % i])
                out = s.layer(i).append(h.tolist()).output
                x = x + torch.tensor(out, dtype=torch.float32)
                x = mlp(t, i, x)
            lg = logits_of(t, x[-1:])[0]
            all_logits.append(lg)
            tokens.append(int(lg.argmax()))
            new = [tokens[-1]]
        info = s.info()
    return tokens[len(prompt):], all_logits, info


# ------------------------------------------------------------------ running attnd

def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attnd", default=os.path.join(REPO, "build", "attnd"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp(prefix="attnd-llama-")
    proc = None
    try:
        ckpt = os.path.join(tmp, "tiny")
        t = make_checkpoint(ckpt, a.layers)
        port = free_port()
        log = open(os.path.join(tmp, "attnd.log"), "w")
        proc = subprocess.Popen([a.attnd, "--listen", "127.0.0.1:%d" % port, "--model",
                                 "tiny=%s,layers=all" % ckpt], stdout=log, stderr=subprocess.STDOUT)
        url = "http://127.0.0.1:%d" % port
        client = attnd.Client(url)
        client.wait_ready(timeout=30)
        group = client.model("tiny")
        print("attnd serves model group %s: %d layers, %d KV bytes per position"
              % (group["name"], group["num_layers"], group["kv_bytes_per_position"]))
        prompt = [3, 17, 42, 5, 88]
        want, want_logits = decode_torch(t, a.layers, prompt, a.steps)
        got, got_logits, info = decode_attnd(t, a.layers, prompt, a.steps, client)
        diff = max(float((x - y).abs().max()) for x, y in zip(want_logits, got_logits))
        print("prompt           ", prompt)
        print("PyTorch          ", want)
        print("attnd (1 session)", got)
        print("session %s: layer lengths %s" % (info["id"], [l["length"] for l in info["layers"]]))
        ok = want == got and diff <= 1e-4
        print("tokens %s, logits max |diff| %.3g" % ("identical" if want == got else "DIFFER", diff))
        client.close()
        return 0 if ok else 1
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
