#!/usr/bin/python3
"""llama_decode.py — a whole Llama-layout model decoding greedily, with every attention layer
served by attnd and the rest (embeddings, RMSNorm, SwiGLU MLP, lm_head) in PyTorch, printed
next to the same model run all in PyTorch.

The model is small and made here from a seed (no download): `make DIR` writes it as a Hugging
Face directory (config.json + model.safetensors, every tensor of the model) that attnd serves
with `--model llama=DIR,layers=all`; `run` rebuilds the same weights from DIR for the PyTorch
parts and decodes. The attention tier is reached through the Python client (clients/python):
one sequence session across every layer when attnd serves the group (`attnd.torch.Sequence`,
`POST /v1/models/llama/sessions`), else one session per layer model (`llama.0` ...). A decode step
appends the normed hidden state of each layer to that layer's cache, layer 0 first.

  /usr/bin/python3 examples/llama_decode.py make /tmp/llama4
  build/attnd --model llama=/tmp/llama4,layers=all --listen 127.0.0.1:8080 &
  PYTHONPATH=clients/python /usr/bin/python3 examples/llama_decode.py run /tmp/llama4 \\
      --url http://127.0.0.1:8080 --tokens 16

`run` exits 1 when the two decodes differ in a token or the logits differ by more than
--tolerance (1e-4). `--bench` also times both per token (wall time, N rounds) and prints the
ratio and the attention tier's HTTP round trips per token.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch

CONFIG = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64,
              num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=4,
              intermediate_size=128, vocab_size=96, rms_norm_eps=1e-5, rope_theta=10000.0,
              max_position_embeddings=512, hidden_act="silu", tie_word_embeddings=False,
              torch_dtype="float32")


# ---- the model's weights: made from a seed, written and read as safetensors ----------------

def make_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    e, h, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, inter, vocab = e // h, cfg["intermediate_size"], cfg["vocab_size"]

    def w(rows, cols):
        return torch.randn(rows, cols, generator=g) / math.sqrt(cols)

    def norm():
        return 1.0 + 0.1 * torch.randn(e, generator=g)

    t = {"model.embed_tokens.weight": torch.randn(vocab, e, generator=g)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = norm()
        t[p + "self_attn.q_proj.weight"] = w(h * d, e)
        t[p + "self_attn.k_proj.weight"] = w(kv * d, e)
        t[p + "self_attn.v_proj.weight"] = w(kv * d, e)
        t[p + "self_attn.o_proj.weight"] = w(e, h * d)
        t[p + "post_attention_layernorm.weight"] = norm()
        t[p + "mlp.gate_proj.weight"] = w(inter, e)
        t[p + "mlp.up_proj.weight"] = w(inter, e)
        t[p + "mlp.down_proj.weight"] = w(e, inter)
    t["model.norm.weight"] = norm()
    t["lm_head.weight"] = w(vocab, e)
    return t


def save_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        b = tensors[name].contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, base, out = json.loads(raw[8:8 + n]), 8 + n, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit("llama_decode: %s is %s; this example writes F32" % (name, info["dtype"]))
        a, b = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(raw[base + a:base + b], dtype=np.float32)
                                     .reshape(info["shape"]).copy())
    return out


# ---- the model in PyTorch, Hugging Face's Llama semantics -----------------------------------

def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class TorchAttention:
    """One layer's self_attn with its own KV cache: q/k/v projections, RoPE, repeat_kv,
    causal softmax(QKᵀ/√d)V, o_proj — what attnd computes for this layer."""

    def __init__(self, cfg, t, i):
        p = "model.layers.%d.self_attn." % i
        self.wq, self.wk, self.wv, self.wo = (t[p + n + "_proj.weight"] for n in "qkvo")
        self.h, self.kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.d = cfg["hidden_size"] // self.h
        self.inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, self.d, 2).float() / self.d))
        self.k = self.v = None

    def __call__(self, x, pos):
        T = x.shape[0]
        q = (x @ self.wq.T).view(T, self.h, self.d).transpose(0, 1)
        k = (x @ self.wk.T).view(T, self.kv, self.d).transpose(0, 1)
        v = (x @ self.wv.T).view(T, self.kv, self.d).transpose(0, 1)
        freqs = torch.outer(pos.double(), self.inv_freq.double())
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().float(), emb.sin().float()
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        self.k = k if self.k is None else torch.cat((self.k, k), dim=1)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=1)
        rep = self.h // self.kv
        kk, vv = self.k.repeat_interleave(rep, dim=0), self.v.repeat_interleave(rep, dim=0)
        S = kk.shape[1]
        scores = q @ kk.transpose(1, 2) / math.sqrt(self.d)
        visible = torch.arange(S)[None, :] <= (S - T + torch.arange(T))[:, None]
        scores = scores.masked_fill(~visible, float("-inf"))
        o = torch.softmax(scores, dim=-1) @ vv
        return o.transpose(0, 1).reshape(T, self.h * self.d) @ self.wo.T

    def close(self):
        pass


class Model:
    def __init__(self, cfg, t, attention):
        self.cfg, self.t, self.attn = cfg, t, attention  # attention[i](x, positions) -> (T, E)
        self.length = 0

    def step(self, ids):
        """Feeds token ids (a prompt, or one token) and returns the logits of the last one."""
        t, cfg, eps = self.t, self.cfg, self.cfg["rms_norm_eps"]
        pos = torch.arange(self.length, self.length + len(ids))
        x = t["model.embed_tokens.weight"][torch.tensor(ids)]
        for i in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d." % i
            x = x + self.attn[i](rms_norm(x, t[p + "input_layernorm.weight"], eps), pos)
            y = rms_norm(x, t[p + "post_attention_layernorm.weight"], eps)
            gate = torch.nn.functional.silu(y @ t[p + "mlp.gate_proj.weight"].T)
            x = x + (gate * (y @ t[p + "mlp.up_proj.weight"].T)) @ t[p + "mlp.down_proj.weight"].T
        self.length += len(ids)
        x = rms_norm(x, t["model.norm.weight"], eps)
        return x[-1] @ t["lm_head.weight"].T


def greedy(model, prompt, n):
    """n greedy tokens after prompt; returns (tokens, [logits of each step])."""
    logits, out, all_logits = model.step(prompt), [], []
    for _ in range(n):
        all_logits.append(logits)
        out.append(int(torch.argmax(logits)))
        logits = model.step([out[-1]])
    return out, all_logits


# ---- the attention tier on attnd -------------------------------------------------------------

def _tensor(out):
    return torch.from_numpy(out.copy()) if hasattr(out, "copy") else torch.tensor(out)


class AttndTier:
    """Every layer's attention on attnd: one sequence session across the group when attnd
    serves one of that name (GET /v1/models/NAME lists its layers), else one session per
    layer model (NAME.0 ...). Counts the HTTP round trips."""

    def __init__(self, client, group, n_layers):
        import attnd
        try:
            grouped = bool(client.model(group).get("layers"))
        except attnd.ModelNotFound:
            grouped = False
        if grouped:  # attnd.torch.Sequence: the one-line swap a decode loop makes
            import attnd.torch
            self.seq = attnd.torch.Sequence(None, group, client=client)
            self.sessions = [self.seq.session]
            self.mode = "one sequence session over %d layers" % n_layers
        else:
            self.sessions = [client.session("%s.%d" % (group, i)) for i in range(n_layers)]
            self.mode = "one session per layer model (%s.0 .. %s.%d)" % (group, group,
                                                                        n_layers - 1)
        self.grouped, self.round_trips = grouped, 1 + len(self.sessions)

    def layer(self, i):
        def call(x, pos):  # positions: the session gives each row length, length + 1, ...
            self.round_trips += 1
            if self.grouped:
                return self.seq(i, x)             # was: this layer's self_attn(x, pos)
            return _tensor(self.sessions[i].append(x.numpy()).output)
        return call

    def lengths(self):
        """Each layer's cached positions, as attnd reports them."""
        if self.grouped:
            return self.seq.lengths()
        return [s.info()["length"] for s in self.sessions]

    def close(self):
        for s in self.sessions:
            s.close()


def load_model(path):
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    return cfg, load_safetensors(os.path.join(path, "model.safetensors"))


def torch_model(cfg, t):
    return Model(cfg, t, [TorchAttention(cfg, t, i) for i in range(cfg["num_hidden_layers"])])


def attnd_model(cfg, t, client, group):
    tier = AttndTier(client, group, cfg["num_hidden_layers"])
    return Model(cfg, t, [tier.layer(i) for i in range(cfg["num_hidden_layers"])]), tier


def cmd_make(a):
    os.makedirs(a.dir, exist_ok=True)
    cfg = dict(CONFIG, num_hidden_layers=a.layers)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    save_safetensors(os.path.join(a.dir, "model.safetensors"), make_weights(cfg, a.seed))
    print("llama_decode: wrote %s (%d layers, hidden %d, %d heads / %d KV heads)" % (
        a.dir, cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
        cfg["num_key_value_heads"]))


def timed_decode(make, prompt, n):
    model, tier = make()
    t0 = time.perf_counter()
    model.step(prompt)
    t1 = time.perf_counter()
    logits = None
    tok = prompt[-1]
    for _ in range(n):
        logits = model.step([tok])
        tok = int(torch.argmax(logits))
    t2 = time.perf_counter()
    trips = tier.round_trips if tier else 0
    if tier:
        tier.close()
    return (t2 - t1) / n, t1 - t0, trips


def cmd_run(a):
    import attnd
    torch.set_grad_enabled(False)
    cfg, t = load_model(a.dir)
    prompt = [int(s) for s in a.prompt.split(",")]
    ref_tokens, ref_logits = greedy(torch_model(cfg, t), prompt, a.tokens)
    with attnd.Client(a.url) as c:
        model, tier = attnd_model(cfg, t, c, a.model)
        try:
            tokens, logits = greedy(model, prompt, a.tokens)
            lengths = tier.lengths()
        finally:
            tier.close()
        diff = max(float((x - y).abs().max()) for x, y in zip(logits, ref_logits))
        print("attention tier: attnd at %s, %s" % (a.url, tier.mode))
        print("prompt         ", prompt)
        print("PyTorch alone  ", ref_tokens)
        print("attnd attention", tokens)
        print("layer lengths  ", lengths)
        print("max |logits difference| over %d steps: %.3g (tolerance %g)" % (a.tokens, diff,
                                                                         a.tolerance))
        ok = tokens == ref_tokens and diff <= a.tolerance
        if a.bench:
            rows = []
            for _ in range(a.rounds):  # interleaved: PyTorch, attnd, PyTorch, attnd ...
                rows.append((timed_decode(lambda: (torch_model(cfg, t), None), prompt, a.tokens),
                             timed_decode(lambda: attnd_model(cfg, t, c, a.model), prompt,
                                          a.tokens)))
            tp = sorted(r[0][0] for r in rows)[len(rows) // 2]
            ta = sorted(r[1][0] for r in rows)[len(rows) // 2]
            trips = rows[0][1][2]
            print("per token (median of %d rounds, %d tokens each): PyTorch %.3f ms, with attnd "
                  "%.3f ms (%.2fx); %.1f attention round trips per token, %.3f ms each above "
                  "PyTorch's attention" % (a.rounds, a.tokens, tp * 1e3, ta * 1e3, ta / tp,
                                           trips / (a.tokens + 1), (ta - tp) * 1e3 /
                                           cfg["num_hidden_layers"]))
            print("load average %s" % open("/proc/loadavg").read().split()[0])
        print("tokens equal: %s" % ("yes" if tokens == ref_tokens else "NO"))
        return 0 if ok else 1


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="write the seeded checkpoint directory")
    m.add_argument("dir")
    m.add_argument("--layers", type=int, default=4)
    m.add_argument("--seed", type=int, default=1234)
    r = sub.add_parser("run", help="decode with PyTorch alone and with attnd's attention")
    r.add_argument("dir")
    r.add_argument("--url", default="http://127.0.0.1:8080")
    r.add_argument("--model", default="llama", help="the group's name on attnd (--model NAME=DIR,layers=all)")
    r.add_argument("--prompt", default="1,5,9,13,42")
    r.add_argument("--tokens", type=int, default=16)
    r.add_argument("--tolerance", type=float, default=1e-4)
    r.add_argument("--bench", action="store_true", help="also time both per token")
    r.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    return cmd_make(a) if a.cmd == "make" else cmd_run(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
