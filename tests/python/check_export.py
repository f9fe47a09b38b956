"""check_export.py — files written by tools/export/attnd-export, served by the real daemon,
answer what the torch layers they came from compute. Run by tests/scripts/test_export.sh
with /usr/bin/python3 (torch + numpy) and the attnd client on PYTHONPATH.

  check_export.py URL   the daemon serves enc (export_models.make_encoder's self_attn),
                        cross (make_decoder's multihead_attn) and kdim (make_kdim)."""
import copy
import sys

import numpy as np
import torch

import attnd
import export_models

TOL = 1e-5
worst = {}


def ref(mha, q, k, v, **kw):
    """float64 PyTorch answer of a float32 module, unbatched inputs."""
    m = copy.deepcopy(mha).double().eval()
    with torch.no_grad():
        out, w = m(q.double(), k.double(), v.double(), need_weights=True, **kw)
    return out.numpy(), w.numpy()


def check(name, got, want):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (name, got.shape, want.shape)
    d = float(np.abs(got - want).max())
    worst[name] = d
    assert d <= TOL, "%s: attnd differs from PyTorch by %g" % (name, d)


def main(url):
    c = attnd.Client(url)
    g = torch.Generator().manual_seed(42)
    enc, dec, kd = (export_models.make_encoder(), export_models.make_decoder(),
                    export_models.make_kdim())

    x = torch.randn(9, 32, generator=g)
    causal = torch.triu(torch.ones(9, 9, dtype=torch.bool), 1)
    out, w = ref(enc.self_attn, x, x, x, attn_mask=causal)
    r = c.attention(x.numpy(), model="enc", is_causal=True, need_weights=True)
    assert r.protocol == "v2" and isinstance(r.output, np.ndarray), r
    check("enc causal v2", r.output, out)
    check("enc causal v2 weights", r.weights, w)
    kpm = torch.tensor([False] * 6 + [True, False, True])
    out, w = ref(enc.self_attn, x, x, x, key_padding_mask=kpm)
    r = c.attention(x.tolist(), model="enc", key_padding_mask=kpm.tolist(), need_weights=True)
    assert r.protocol == "v1", r
    check("enc padded v1", r.output, out)
    check("enc padded v1 weights", r.weights, w)
    with c.session("enc") as s:          # a stream in chunks = the causal one-shot
        parts = [s.append(x[:4].numpy()).output, s.append(x[4:].numpy()).output]
    check("enc session", np.vstack(parts), ref(enc.self_attn, x, x, x, attn_mask=causal)[0])

    tgt, mem = torch.randn(4, 48, generator=g), torch.randn(6, 48, generator=g)
    mkpm = torch.tensor([False, False, False, True, False, False])
    out, w = ref(dec.multihead_attn, tgt, mem, mem, key_padding_mask=mkpm)
    r = c.attention(tgt.numpy(), model="cross", key=mem.numpy(), value=mem.numpy(),
                    key_padding_mask=mkpm.numpy(), need_weights=True)
    assert r.protocol == "v2", r
    check("decoder cross-attention v2", r.output, out)
    check("decoder cross-attention v2 weights", r.weights, w)
    r = c.attention(tgt.tolist(), model="cross", key=mem.tolist(),
                    key_padding_mask=mkpm.tolist(), need_weights=True)
    check("decoder cross-attention v1", r.output, out)
    out, _ = ref(dec.multihead_attn, tgt, mem, mem)
    with c.session("cross", key=mem.numpy()) as s:
        parts = [s.append(tgt[:1].numpy()).output, s.append(tgt[1:].numpy()).output]
    check("decoder cross session", np.vstack(parts), out)

    q, k, v = (torch.randn(3, 32, generator=g), torch.randn(5, 24, generator=g),
               torch.randn(5, 40, generator=g))
    out, w = ref(kd, q, k, v)
    r = c.attention(q.numpy(), model="kdim", key=k.numpy(), value=v.numpy(), need_weights=True)
    check("kdim/vdim cross-attention", r.output, out)
    check("kdim/vdim weights", r.weights, w)
    info = c.model("kdim")
    dims = (info["embed_q"], info["embed_k"], info["embed_v"], info["num_heads"])
    assert dims == (32, 24, 40, 4), info
    for name, d in worst.items():
        print("%-36s max |attnd - PyTorch| = %.3g" % (name, d))
    print("served exports: OK")


if __name__ == "__main__":
    main(sys.argv[1])
