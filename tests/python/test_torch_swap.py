"""test_torch_swap.py — attnd.torch.MultiheadAttention in place of PyTorch's attention, through
the real daemon. Run by tests/scripts/test_python_torch.sh, which serves

  enc        the self_attn of export_models.make_encoder() (TransformerEncoderLayer d=32,
             h=4, batch_first=True, seeded), written by tools/export/attnd-export
  dec_self   the self_attn of export_models.make_decoder() (TransformerDecoderLayer d=48,
  dec_cross  h=6) and its multihead_attn (attnd-export --which both)
  llama      a RoPE layer (tests/fixtures/ckpt/llama_gqa), which the module must refuse

Environment: ATTND_URL, ATTND_ADMIN_KEY (repository loads), MODEL_DIR (the .pt and
.safetensors files). Every comparison is under torch.no_grad() against the original layer
in float32 and must be within 1e-5 (max abs difference, printed per case)."""
import copy
import os
import pickle
import sys
import unittest

import torch
from torch import nn

import attnd
import attnd.torch as at
import export_models
import st_format

URL = os.environ["ATTND_URL"]
ADMIN = os.environ["ATTND_ADMIN_KEY"]
DIR = os.environ["MODEL_DIR"]
TOL = 1e-5
DIFFS = []


def maxdiff(a, b):
    return (a.double() - b.double()).abs().max().item()


def gen(seed):
    g = torch.Generator().manual_seed(seed)
    return lambda *shape: torch.randn(*shape, generator=g)


def causal_float(n):
    return nn.Transformer.generate_square_subsequent_mask(n)      # 0 / -inf, float


def encoder(batch_first):
    """A fresh TransformerEncoderLayer with the weights of make_encoder()."""
    src = export_models.make_encoder()
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, batch_first=batch_first)
    layer.load_state_dict(src.state_dict())
    return layer.eval()


def decoder(batch_first):
    src = export_models.make_decoder()
    layer = nn.TransformerDecoderLayer(d_model=48, nhead=6, batch_first=batch_first)
    layer.load_state_dict(src.state_dict())
    return layer.eval()


class Counted:
    """Counts calls of torch's fused encoder-layer kernel (the fast path)."""

    def __enter__(self):
        self.calls = 0
        self.orig = torch._transformer_encoder_layer_fwd

        def counted(*a, **k):
            self.calls += 1
            return self.orig(*a, **k)
        torch._transformer_encoder_layer_fwd = counted
        return self

    def __exit__(self, *exc):
        torch._transformer_encoder_layer_fwd = self.orig


class Base(unittest.TestCase):
    def check(self, name, got, want, tol=TOL):
        self.assertEqual(tuple(got.shape), tuple(want.shape), name)
        self.assertEqual(got.dtype, want.dtype, name)
        self.assertEqual(got.device, want.device, name)
        d = maxdiff(got, want)
        DIFFS.append((name, d))
        self.assertLessEqual(d, tol, "%s: max |attnd - torch| = %.3g" % (name, d))


class TestModule(Base):
    def test_attributes_mirror_the_daemon_model(self):
        m = at.MultiheadAttention(URL, "enc", batch_first=True)
        ref = export_models.make_encoder().self_attn
        for a in ("embed_dim", "kdim", "vdim", "num_heads", "head_dim", "batch_first"):
            self.assertEqual(getattr(m, a), getattr(ref, a), a)
        self.assertFalse(m._qkv_same_embed_dim)     # what declines PyTorch's fast paths
        for a in ("in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight",
                  "v_proj_weight", "bias_k", "bias_v"):
            self.assertIsNone(getattr(m, a), a)
        self.assertIsNone(m.out_proj.weight)
        self.assertIsNone(m.out_proj.bias)
        self.assertEqual((m.out_proj.in_features, m.out_proj.out_features), (32, 32))
        self.assertEqual(list(m.parameters()), [])
        self.assertEqual(m.dropout, 0.0)
        self.assertIn("enc", repr(m))
        self.assertEqual(at.MultiheadAttention(URL, "dec_cross").batch_first, False)

    def test_import_attnd_does_not_load_torch(self):
        import subprocess
        p = subprocess.run([sys.executable, "-s", "-c",
                            "import sys, attnd; print('torch' in sys.modules, "
                            "'attnd.torch' in sys.modules)"],
                           capture_output=True, text=True, env=dict(os.environ))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ["False", "False"])
        p = subprocess.run([sys.executable, "-s", "-c",
                            "import sys; sys.modules['torch'] = None\n"
                            "import attnd\n"
                            "try:\n    import attnd.torch\nexcept ImportError as e:\n"
                            "    print('ImportError', 'torch' in str(e))"],
                           capture_output=True, text=True, env=dict(os.environ))
        self.assertEqual(p.stdout.split(), ["ImportError", "True"], p.stderr)

    def test_direct_calls_with_weights(self):
        ref = export_models.make_encoder().self_attn          # batch_first=True
        m = at.MultiheadAttention(URL, "enc", batch_first=True)
        r = gen(1)
        x = r(3, 7, 32)
        kpm = torch.zeros(3, 7, dtype=torch.bool)
        kpm[0, 5:] = True
        kpm[2, 0] = True
        with torch.no_grad():
            for avg in (True, False):
                for kw in ({}, {"key_padding_mask": kpm}, {"attn_mask": causal_float(7)}):
                    name = "mha self avg=%s %s" % (avg, ",".join(kw) or "plain")
                    want = ref(x, x, x, need_weights=True, average_attn_weights=avg, **kw)
                    got = m(x, x, x, need_weights=True, average_attn_weights=avg, **kw)
                    self.check(name + " output", got[0], want[0])
                    self.check(name + " weights", got[1], want[1])
            out, w = m(x, x, x, need_weights=False)
            self.assertIsNone(w)
            self.check("mha need_weights=False", out, ref(x, x, x, need_weights=False)[0])
            # unbatched (L, E), weights (L, S) and (h, L, S)
            for avg in (True, False):
                want = ref(x[1], x[1], x[1], average_attn_weights=avg)
                got = m(x[1], x[1], x[1], average_attn_weights=avg)
                self.check("mha unbatched avg=%s output" % avg, got[0], want[0])
                self.check("mha unbatched avg=%s weights" % avg, got[1], want[1])

    def test_cross_attention_key_and_value_differ(self):
        ref = export_models.make_decoder().multihead_attn      # batch_first=False
        m = at.MultiheadAttention(URL, "dec_cross")
        r = gen(2)
        q, k, v = r(4, 2, 48), r(9, 2, 48), r(9, 2, 48)
        kpm = torch.zeros(2, 9, dtype=torch.bool)
        kpm[1, 6:] = True
        fm = r(4, 9) * 0.5                                     # float, added to the scores
        with torch.no_grad():
            for name, kw in (("plain", {}), ("kpm", {"key_padding_mask": kpm}),
                             ("float mask", {"attn_mask": fm}),
                             ("float mask+kpm", {"attn_mask": fm, "key_padding_mask": kpm})):
                for avg in (True, False):
                    want = ref(q, k, v, average_attn_weights=avg, **kw)
                    got = m(q, k, v, average_attn_weights=avg, **kw)
                    self.check("cross k!=v %s avg=%s output" % (name, avg), got[0], want[0])
                    self.check("cross k!=v %s avg=%s weights" % (name, avg), got[1], want[1])
            want = ref(q, k, k)[0]
            self.check("cross value is key", m(q, k, k)[0], want)

    def test_masks_per_head_and_float_padding(self):
        ref = export_models.make_encoder().self_attn
        m = at.MultiheadAttention(URL, "enc", batch_first=True)
        r = gen(3)
        B, L, h = 2, 6, 4
        x = r(B, L, 32)
        blocked = torch.rand(B * h, L, L, generator=torch.Generator().manual_seed(4)) < 0.4
        blocked &= ~torch.eye(L, dtype=torch.bool)             # every row sees itself
        per_head_float = r(B * h, L, L) * 0.3
        per_head_float_inf = per_head_float.masked_fill(blocked, float("-inf"))
        per_seq = blocked.reshape(B, h, L, L)[:, :1].expand(B, h, L, L).reshape(B * h, L, L)
        fkpm = torch.zeros(B, L)
        fkpm[0, 4:] = float("-inf")                            # 0 / -inf: a bool mask
        fkpm_real = r(B, L) * 0.5                              # genuinely float
        with torch.no_grad():
            for name, kw in (("per-head bool", {"attn_mask": blocked}),
                             ("per-head float", {"attn_mask": per_head_float}),
                             ("per-head float -inf", {"attn_mask": per_head_float_inf}),
                             ("per-seq bool", {"attn_mask": per_seq}),
                             ("uint8 mask", {"attn_mask": per_seq.to(torch.uint8)}),
                             ("float kpm 0/-inf", {"key_padding_mask": fkpm}),
                             ("float kpm", {"key_padding_mask": fkpm_real}),
                             ("float kpm + causal", {"key_padding_mask": fkpm_real,
                                                     "attn_mask": causal_float(L)})):
                # PyTorch 1.13 cannot combine a float key_padding_mask with a float mask
                # (masked_fill); >= 2.0 adds both: the reference is that sum, per head
                ref_kw = kw
                if name == "float kpm + causal":
                    both = causal_float(L)[None] + fkpm_real[:, None, :]        # (B, L, S)
                    ref_kw = {"attn_mask": both.repeat_interleave(h, dim=0)}
                for avg in (True, False):
                    want = ref(x, x, x, average_attn_weights=avg, **ref_kw)
                    got = m(x, x, x, average_attn_weights=avg, **kw)
                    self.check("%s avg=%s output" % (name, avg), got[0], want[0])
                    self.check("%s avg=%s weights" % (name, avg), got[1], want[1])
            # is_causal without a mask = the causal mask
            want = ref(x, x, x, attn_mask=causal_float(L))
            got = m(x, x, x, is_causal=True)
            self.check("is_causal output", got[0], want[0])
            self.check("is_causal weights", got[1], want[1])

    def test_dtype_and_float64(self):
        ref = export_models.make_encoder().self_attn.double()
        m = at.MultiheadAttention(URL, "enc", batch_first=True)
        x = gen(5)(2, 5, 32).double()
        with torch.no_grad():
            got, w = m(x, x, x)
            want, ww = ref(x, x, x)
        self.check("float64 in, float64 out", got, want)
        self.check("float64 weights", w, ww)

    def test_refusals(self):
        m = at.MultiheadAttention(URL, "enc", batch_first=True)
        x = gen(6)(2, 5, 32)

        def refused(words, f):
            with self.assertRaises(attnd.Unsupported) as cm:
                f()
            self.assertIsInstance(cm.exception, ValueError)
            self.assertIsInstance(cm.exception, attnd.Error)
            for w in words:
                self.assertIn(w, str(cm.exception))
        xg = x.clone().requires_grad_(True)
        refused(["gradients", "no_grad"], lambda: m(xg, xg, xg))
        refused(["dropout"], lambda: at.MultiheadAttention(URL, "enc", dropout=0.1))
        refused(["rotary"], lambda: at.MultiheadAttention(URL, "llama"))
        refused(["num_heads=8", "4"], lambda: at.MultiheadAttention(URL, "enc", num_heads=8))
        with torch.no_grad():
            refused(["attn_mask", "int32"], lambda: m(x, x, x, attn_mask=torch.zeros(
                5, 5, dtype=torch.int32)))
            refused(["attn_mask", "(L, S)"], lambda: m(x, x, x, attn_mask=torch.zeros(4, 5)))
            refused(["(N*num_heads, L, S)"], lambda: m(x, x, x, attn_mask=torch.zeros(3, 5, 5)))
            refused(["key_padding_mask"], lambda: m(x, x, x, key_padding_mask=torch.zeros(
                2, 4, dtype=torch.bool)))
            refused(["embedding size 16"], lambda: m(x[..., :16], x[..., :16], x[..., :16]))
            refused(["must all be 3-D"], lambda: m(x, x, x[0]))
            refused(["value must be a torch.Tensor", "NoneType"], lambda: m(x, x, None))
            refused(["key must be a torch.Tensor", "list"], lambda: m(x, [[0.0]], x))
            full = torch.zeros(2 * 4, 5, 5)
            full[3, 2, :] = float("-inf")                     # one row: every key -inf
            full[0, 0, 1] = 0.25
            refused(["every key"], lambda: m(x, x, x, attn_mask=full))
            m2 = at.MultiheadAttention(URL, "dec_self")
            with self.assertRaises(attnd.BadRequest) as cm:     # the daemon's own refusal
                big = torch.zeros(3, 1, 48)
                big[0, 0, 0] = float("nan")
                m2(big, big, big)
            self.assertRegex(cm.exception.request_id or "", r"^[0-9a-f]{16}$")

    def test_copy_and_pickle(self):
        ref = export_models.make_encoder().self_attn
        m = at.MultiheadAttention(URL, "enc", batch_first=True)
        x = gen(7)(2, 4, 32)
        with torch.no_grad():
            want = ref(x, x, x)[0]
            for name, c in (("deepcopy", copy.deepcopy(m)),
                            ("pickle", pickle.loads(pickle.dumps(m)))):
                self.assertIsNot(c.client, m.client)
                self.check(name, c(x, x, x)[0], want)

    def test_save_and_from_module(self):
        src = export_models.make_encoder().self_attn
        path = os.path.join(DIR, "enc_by_attnd_torch.safetensors")
        at.save(src, path)
        meta, mine = st_format.read(path)
        _, tool = st_format.read(os.path.join(DIR, "enc.safetensors"))
        self.assertEqual(mine, tool, "attnd.torch.save and attnd-export wrote different tensors")
        self.assertEqual(meta["num_heads"], "4")
        m = at.MultiheadAttention.from_module(src, URL, "enc_loaded", path, admin_key=ADMIN)
        self.assertTrue(m.batch_first)
        x = gen(8)(2, 6, 32)
        with torch.no_grad():
            self.check("from_module", m(x, x, x)[0], src(x, x, x)[0])
        with self.assertRaises(attnd.Unsupported):
            at.save(nn.MultiheadAttention(8, 2, add_bias_kv=True), path + ".x")


class TestEncoderLayer(Base):
    def run_layer(self, batch_first):
        orig = encoder(batch_first)
        swapped = encoder(batch_first)
        swapped.self_attn = at.MultiheadAttention(URL, "enc", batch_first=batch_first)
        calls = []
        swapped.self_attn.register_forward_hook(lambda mod, i, o: calls.append(1))
        r = gen(10)
        N, L = 3, 7
        x = r(N, L, 32) if batch_first else r(L, N, 32)
        kpm = torch.zeros(N, L, dtype=torch.bool)
        kpm[0, 5:] = True
        kpm[1, 6] = True
        tag = "encoder bf=%s" % batch_first
        with torch.no_grad():
            cases = [("plain", x, {}),
                     ("key_padding_mask", x, {"src_key_padding_mask": kpm}),
                     ("causal float mask", x, {"src_mask": causal_float(L)}),
                     ("causal bool mask", x, {"src_mask": causal_float(L).isinf()}),
                     ("float mask", x, {"src_mask": r(L, L) * 0.5}),
                     ("kpm + causal", x, {"src_key_padding_mask": kpm,
                                          "src_mask": causal_float(L)}),
                     ("unbatched", x[0] if batch_first else x[:, 0], {}),
                     ("unbatched causal", x[0] if batch_first else x[:, 0],
                      {"src_mask": causal_float(L)})]
            for name, inp, kw in cases:
                before = len(calls)
                with Counted() as fast:
                    got = swapped(inp, **kw)
                self.assertEqual(fast.calls, 0, "%s %s: the fast path ran" % (tag, name))
                self.assertEqual(len(calls), before + 1, "%s %s: attnd not called" % (tag, name))
                self.check("%s %s" % (tag, name), got, orig(inp, **kw))
        return orig, swapped, x, kpm

    def test_batch_first(self):
        orig, swapped, x, kpm = self.run_layer(True)
        # the original takes PyTorch's fused fast path here (batch_first, eval, no_grad):
        # the swapped layer must have declined the same checks
        with torch.no_grad(), Counted() as fast:
            orig(x)
        self.assertEqual(fast.calls, 1, "the reference did not take the fast path")

    def test_sequence_first(self):
        self.run_layer(False)

    def test_encoder_stack_declines_nested_tensors(self):
        # nn.TransformerEncoder clones the layer (deepcopy) and, with a key padding mask,
        # would turn the input into a nested tensor for the fast path: declined here
        r = gen(11)
        x = r(2, 6, 32)
        kpm = torch.zeros(2, 6, dtype=torch.bool)
        kpm[1, 4:] = True
        layer = encoder(True)
        stack = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
        swapped_layer = encoder(True)
        swapped_layer.self_attn = at.MultiheadAttention(URL, "enc", batch_first=True)
        swapped = nn.TransformerEncoder(swapped_layer, num_layers=2).eval()
        with torch.no_grad():
            with Counted() as fast:
                got = swapped(x, src_key_padding_mask=kpm)
            self.assertEqual(fast.calls, 0, "the swapped stack took the fast path")
            want = stack(x, src_key_padding_mask=kpm)
            nested = nn.TransformerEncoder(encoder(True), num_layers=2).eval()
            want_nested = nested(x, src_key_padding_mask=kpm)
        self.check("encoder stack of 2, kpm", got, want)
        # PyTorch's nested-tensor path gives 0 at padded positions; elsewhere the same
        keep = ~kpm
        self.check("encoder stack of 2, kpm, vs nested (unpadded rows)", got[keep],
                   want_nested[keep])


class TestDecoderLayer(Base):
    def run_layer(self, batch_first):
        orig = decoder(batch_first)
        swapped = decoder(batch_first)
        swapped.self_attn = at.MultiheadAttention(URL, "dec_self", batch_first=batch_first)
        swapped.multihead_attn = at.MultiheadAttention(URL, "dec_cross", batch_first=batch_first)
        r = gen(20)
        N, L, S = 2, 5, 9
        tgt = r(N, L, 48) if batch_first else r(L, N, 48)
        mem = r(N, S, 48) if batch_first else r(S, N, 48)
        tkpm = torch.zeros(N, L, dtype=torch.bool)
        tkpm[1, 4] = True
        mkpm = torch.zeros(N, S, dtype=torch.bool)
        mkpm[0, 7:] = True
        tag = "decoder bf=%s" % batch_first

        def one(t):
            return t[0] if batch_first else t[:, 0]
        with torch.no_grad():
            for name, a, b, kw in (
                    ("plain", tgt, mem, {}),
                    ("causal tgt_mask", tgt, mem, {"tgt_mask": causal_float(L)}),
                    ("tgt kpm + memory kpm", tgt, mem, {"tgt_key_padding_mask": tkpm,
                                                        "memory_key_padding_mask": mkpm}),
                    ("causal + memory_mask float", tgt, mem,
                     {"tgt_mask": causal_float(L), "memory_mask": r(L, S) * 0.5}),
                    ("unbatched causal", one(tgt), one(mem), {"tgt_mask": causal_float(L)})):
                self.check("%s %s" % (tag, name), swapped(a, b, **kw), orig(a, b, **kw))

    def test_batch_first(self):
        self.run_layer(True)

    def test_sequence_first(self):
        self.run_layer(False)


class TestSequence(Base):
    """attnd.torch.Sequence on the group "seq" (llama_gqa, layers=all: 2 layers, GQA, RoPE)."""

    def test_decode_loop_equals_layer_sessions(self):
        g = torch.Generator().manual_seed(29)
        steps = [torch.randn(4, 64, generator=g)] + [torch.randn(1, 64, generator=g) for _ in range(3)]
        got = [[], []]
        with torch.no_grad(), at.Sequence(URL, "seq") as seq:
            self.assertEqual(seq.num_layers, 2)
            for x in steps:                       # a decode loop: layer 0, then layer 1
                for l in range(2):
                    got[l].append(seq(l, x))
            self.assertEqual(seq.lengths(), [7, 7])
        for l in range(2):                        # the same rows through each layer model
            with attnd.Client(URL) as c, c.session("seq.%d" % l) as one:
                want = [torch.from_numpy(one.append(x.numpy()).output.copy()) for x in steps]
            for i, (a, b) in enumerate(zip(got[l], want)):
                self.check("Sequence layer %d step %d" % (l, i), a, b, tol=0.0)

    def test_shapes_dtypes_positions(self):
        g = torch.Generator().manual_seed(30)
        x = torch.randn(1, 3, 64, generator=g, dtype=torch.float64)
        with torch.no_grad(), at.Sequence(URL, "seq") as seq:
            y = seq(0, x, position_ids=torch.tensor([[2, 3, 4]]))   # left padding by two
            self.assertEqual((tuple(y.shape), y.dtype), ((1, 3, 64), torch.float64))
            f = seq.fork()
            try:
                self.assertEqual(f.lengths(), [3, 0])
                f(0, x[0, :1])
                self.assertEqual((f.lengths(), seq.lengths()), ([4, 0], [3, 0]))
            finally:
                f.close()
        with attnd.Client(URL) as c:             # positions 2..4 as a one-shot request
            want = c.attention(x[0].float().numpy(), model="seq.0", is_causal=True,
                               position_ids=[2, 3, 4]).output
        self.check("Sequence position_ids", y[0].float(), torch.from_numpy(want.copy()), tol=1e-6)

    def test_refusals_are_attnd_errors(self):
        x = torch.randn(2, 64)
        with self.assertRaises(attnd.Unsupported):
            at.Sequence(URL, "llama")                         # a layer model, not a group
        with torch.no_grad(), at.Sequence(URL, "seq") as seq:
            for bad in (lambda: seq(2, x), lambda: seq(0, x.expand(2, 2, 64)),
                        lambda: seq(0, x.long()), lambda: seq(0, [[0.0] * 64])):
                self.assertRaises(attnd.Unsupported, bad)
            with self.assertRaises(attnd.Conflict):          # layer 1 before layer 0
                seq(1, x)
            with self.assertRaises(attnd.BadRequest):        # the daemon's own 400
                seq(0, torch.randn(2, 63))
            with self.assertRaises(attnd.Error):             # wrong count of positions
                seq(0, x, position_ids=[0])
        with self.assertRaises(attnd.Unsupported), at.Sequence(URL, "seq") as seq:
            seq(0, torch.randn(1, 64, requires_grad=True))    # grad mode on


def tearDownModule():
    print("\nmax |attnd - torch| per case (tolerance %g):" % TOL, file=sys.stderr)
    for name, d in DIFFS:
        print("  %-55s %.3g" % (name, d), file=sys.stderr)
    if DIFFS:
        worst = max(DIFFS, key=lambda nd: nd[1])
        print("  %d comparisons; largest %.3g (%s)" % (len(DIFFS), worst[1], worst[0]),
              file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
