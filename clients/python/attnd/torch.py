"""attnd.torch — ``torch.nn.MultiheadAttention`` computed by attnd over HTTP.

Importable only where torch (and numpy) are; ``import attnd`` never loads it.

``MultiheadAttention(url, model, *, api_key=None, batch_first=False, ...)`` is an
``nn.Module`` with ``nn.MultiheadAttention``'s forward signature and semantics::

    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4).eval()
    layer.self_attn = attnd.torch.MultiheadAttention("http://127.0.0.1:8080", "enc")
    with torch.no_grad():
        y = layer(x)              # the attention is computed by attnd's model "enc"

The weights live in the daemon (served from a file the export tool or :func:`save` wrote
from the original ``nn.MultiheadAttention``); the module holds none. Its shape —
``embed_dim``, ``kdim``, ``vdim``, ``num_heads``, ``head_dim`` — comes from
``GET /v1/models/{model}`` when it is built.

Argument mapping (every argument of ``nn.MultiheadAttention.forward``):

- ``query``/``key``/``value``: ``(L, N, E)`` (``(N, L, E)`` with ``batch_first``) or
  unbatched ``(L, E)``; sent as float32 (attnd computes in float32), answers returned on
  the query's dtype and device. ``key is query`` (or equal to it) and ``value`` likewise
  is self-attention (only the query is sent); ``value`` equal to ``key`` is sent once.
- ``key_padding_mask`` ``(N, S)`` / ``(S)``: bool (True = ignore that key) is attnd's
  ``key_padding_mask``; a float one is added to the scores (as PyTorch >= 2.0 does): one
  holding only 0 and -inf is the bool mask it spells, any other is folded into a
  per-sequence float ``attn_mask``.
- ``attn_mask`` ``(L, S)`` or ``(N*num_heads, L, S)`` (unbatched: ``(num_heads, L, S)``):
  bool (True = blocked) or float (added to the scores; uint8 = bool). A float mask of only
  0 and -inf is sent as bool; the upper-triangle (causal) bool mask as ``is_causal``; a
  ``(N*num_heads, L, S)`` mask as per-sequence ``B×T×S`` when the heads agree, shared
  ``T×S`` when the sequences agree too, else per-head ``B×h×T×S``.
- ``is_causal``: attnd's ``is_causal`` (query t sees keys <= t); with an ``attn_mask``
  too, both apply (PyTorch takes ``is_causal`` as a hint that the mask is causal).
- ``need_weights`` / ``average_attn_weights``: the weights, ``(N, L, S)`` averaged or
  ``(N, num_heads, L, S)`` per head (no ``N`` unbatched); ``None`` without
  ``need_weights``.

A shared ``T×S`` mask (or none) travels as v2 binary tensors (-inf included); per-sequence
and per-head masks need ``/v1`` JSON, which has no infinity: there a float mask's -inf
becomes -1e30 (exactly the same softmax), unless a query row would have every key at
-inf (PyTorch answers NaN there), which is refused.

What attnd cannot do is refused with :class:`attnd.Unsupported` (also a ``ValueError``)
before anything is sent: gradients (inputs that require grad while grad mode is on: run
under ``torch.no_grad()`` / ``torch.inference_mode()``), dropout, masks of other dtypes
or shapes, a model with rotary embeddings or a sliding window (not an
``nn.MultiheadAttention``). Shapes that do not fit the model are ``attnd.Unsupported``
too. The daemon's own refusals are the usual :class:`attnd.Error` subclasses.

Inside ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` (and
``nn.TransformerEncoder``): PyTorch's fused fast path (``torch._transformer_encoder_layer_fwd``,
nested tensors) reads the attention's weights from ``self_attn``; this module has none,
so it says ``_qkv_same_embed_dim = False`` (no packed ``in_proj_weight``, as a
``kdim``/``vdim`` ``nn.MultiheadAttention`` does), which makes every fast-path check decline
before any weight is touched; ``in_proj_weight``, ``in_proj_bias``, ``q/k/v_proj_weight``,
``bias_k``, ``bias_v``, ``out_proj.weight`` and ``out_proj.bias`` are ``None``. The layer
then calls ``self_attn(x, x, x, attn_mask=..., key_padding_mask=..., need_weights=False)``.

The module can be deep-copied (``nn.TransformerEncoder`` clones its layer) and pickled: a
copy opens its own connections.
"""
import json
import os
import struct

import torch
from torch import nn

from . import _tensors as T
from .client import Client
from .errors import Unsupported

if not T.HAVE_NUMPY:
    raise ImportError("attnd.torch needs numpy (not importable, or ATTND_NO_NUMPY is set)")
np = T.np

__all__ = ["MultiheadAttention", "save"]

_NEG = -1e30        # stands for -inf in a /v1 JSON float mask: exp(-1e30 - max) is 0 in float32


class _RemoteLinear(nn.Module):
    """``out_proj`` of a :class:`MultiheadAttention`: sizes only; its weight and bias are
    in the daemon (``None`` here)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.register_parameter("weight", None)
        self.register_parameter("bias", None)

    def forward(self, x):
        raise Unsupported("out_proj of attnd.torch.MultiheadAttention has no weights here "
                          "(attnd applies it)")

    def extra_repr(self):
        return "in_features=%d, out_features=%d, in attnd" % (self.in_features,
                                                              self.out_features)


def _err(msg):
    return Unsupported("attnd.torch.MultiheadAttention: " + msg)


class MultiheadAttention(nn.Module):
    """``nn.MultiheadAttention`` whose forward is computed by attnd's ``model`` at ``url``.

    ``MultiheadAttention(url, model, *, api_key=None, batch_first=False, client=None,
    timeout=30.0, embed_dim=None, num_heads=None, kdim=None, vdim=None, dropout=0.0,
    **client_options)``

    - ``url``, ``api_key``, ``timeout``, ``client_options`` (``retries``,
      ``max_answer_bytes``, ``binary``...): the :class:`attnd.Client` it uses; or pass
      ``client=`` to share one (``url`` may then be None).
    - ``model``: the daemon's model name; its shape comes from ``GET /v1/models/{model}``.
    - ``embed_dim``, ``num_heads``, ``kdim``, ``vdim``: when given, checked against the
      model (:class:`attnd.Unsupported` if they differ).
    - ``dropout``: must be 0 (attnd has no dropout).
    """

    def __init__(self, url, model, *, api_key=None, batch_first=False, client=None,
                 timeout=30.0, embed_dim=None, num_heads=None, kdim=None, vdim=None,
                 dropout=0.0, **client_options):
        super().__init__()
        if dropout:
            raise _err("dropout=%r: attnd has no dropout (use 0.0)" % (dropout,))
        if client is None:
            if url is None:
                raise ValueError("give url or client")
            self._client_args = dict(client_options, url=url, api_key=api_key,
                                     timeout=timeout)
            client = Client(**self._client_args)
        else:
            self._client_args = {"url": client.url, "api_key": client.api_key,
                                 "timeout": client.timeout,
                                 "max_answer_bytes": client.max_answer_bytes}
        self._client = client
        self.model = model
        self.info = client.model(model)
        info = self.info
        try:
            h, dk, dv = int(info["num_heads"]), int(info["head_dim_k"]), int(info["head_dim_v"])
            eq, ek, ev = int(info["embed_q"]), int(info["embed_k"]), int(info["embed_v"])
            eo = int(info["embed_out"])
        except (KeyError, TypeError, ValueError) as e:
            raise _err("GET /v1/models/%s lacks the shape fields (%s)" % (model, e))
        if info.get("rope"):
            raise _err("model %r has rotary position embeddings: it is not an "
                       "nn.MultiheadAttention (use attnd.Client with position_ids)" % model)
        if info.get("sliding_window"):
            raise _err("model %r has a sliding window of %s: it is not an "
                       "nn.MultiheadAttention" % (model, info["sliding_window"]))
        for name, want, got in (("embed_dim", embed_dim, eq), ("num_heads", num_heads, h),
                                ("kdim", kdim, ek), ("vdim", vdim, ev)):
            if want is not None and int(want) != got:
                raise _err("%s=%d, but model %r has %d" % (name, want, model, got))
        self.embed_dim = eq
        self.kdim = ek
        self.vdim = ev
        self.num_heads = h
        self.head_dim = dk
        self.head_dim_v = dv
        self.embed_out = eo
        self.batch_first = bool(batch_first)
        self.dropout = 0.0
        # No packed in_proj_weight here (the weights are in attnd): this is also what makes
        # PyTorch's fused encoder fast path decline before it reads any weight.
        self._qkv_same_embed_dim = False
        for name in ("in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight",
                     "v_proj_weight"):
            self.register_parameter(name, None)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self.out_proj = _RemoteLinear(h * dv, eo)

    # ---------------------------------------------------------------- copies, pickling
    @property
    def client(self):
        """The :class:`attnd.Client` (a copy of the module opens its own)."""
        c = self.__dict__.get("_client")
        if c is None:
            c = self.__dict__["_client"] = Client(**self._client_args)
        return c

    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else \
            self.__dict__.copy()
        state = dict(state)
        state["_client"] = None
        return state

    def __setstate__(self, state):
        super().__setstate__(state)

    @classmethod
    def from_module(cls, mha, url, model, path, *, admin_key=None, api_key=None,
                    batch_first=None, **kw):
        """Writes ``mha`` (an ``nn.MultiheadAttention``) to ``path`` with :func:`save`,
        has the daemon load it as ``model`` (``POST /v2/repository/models/{model}/load``
        with ``admin_key``: ``path`` must be readable by the daemon, e.g. on the same
        host) and returns the module for it (``batch_first`` defaults to ``mha``'s)."""
        save(mha, path)
        client = kw.pop("client", None) or Client(url, api_key=api_key,
                                                  timeout=kw.pop("timeout", 30.0))
        client.load_model(model, os.path.abspath(path), admin_key=admin_key)
        return cls(url, model, client=client,
                   batch_first=mha.batch_first if batch_first is None else batch_first,
                   embed_dim=mha.embed_dim, num_heads=mha.num_heads, kdim=mha.kdim,
                   vdim=mha.vdim, **kw)

    def extra_repr(self):
        return "model=%r, url=%r, embed_dim=%d, num_heads=%d, kdim=%d, vdim=%d, " \
               "batch_first=%s" % (self.model, self._client_args.get("url"), self.embed_dim,
                                   self.num_heads, self.kdim, self.vdim, self.batch_first)

    # ---------------------------------------------------------------- forward
    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        """``nn.MultiheadAttention.forward``; returns ``(attn_output, attn_weights)`` on
        ``query``'s dtype and device (``attn_weights`` None without ``need_weights``)."""
        for name, t in (("query", query), ("key", key), ("value", value),
                        ("key_padding_mask", key_padding_mask), ("attn_mask", attn_mask)):
            if (t is not None or name in ("query", "key", "value")) and \
                    not isinstance(t, torch.Tensor):
                raise _err("%s must be a torch.Tensor, got %s" % (name, type(t).__name__))
        if torch.is_grad_enabled() and any(
                t is not None and t.requires_grad
                for t in (query, key, value, key_padding_mask, attn_mask)):
            raise _err("attnd computes no gradients, and an input requires grad: run under "
                       "torch.no_grad() or torch.inference_mode() (or detach the inputs)")
        if query.dim() not in (2, 3):
            raise _err("query must be (L, E) or batched 3-D, got shape %s" % list(query.shape))
        batched = query.dim() == 3
        if key.dim() != query.dim() or value.dim() != query.dim():
            raise _err("query, key and value must all be %s (shapes %s, %s, %s)"
                       % ("3-D" if batched else "2-D", list(query.shape), list(key.shape),
                          list(value.shape)))

        def bf(t):      # -> (B, L, E)
            if not batched:
                return t.unsqueeze(0)
            return t if self.batch_first else t.transpose(0, 1)
        q, k, v = bf(query), bf(key), bf(value)
        B, L, Eq = q.shape
        S = k.shape[1]
        if Eq != self.embed_dim:
            raise _err("query has embedding size %d, model %r takes %d"
                       % (Eq, self.model, self.embed_dim))
        if k.shape[0] != B or v.shape[0] != B:
            raise _err("key and value must have the query's batch size %d (got %d, %d)"
                       % (B, k.shape[0], v.shape[0]))
        if v.shape[1] != S:
            raise _err("key has %d positions, value %d" % (S, v.shape[1]))
        if k.shape[2] != self.kdim or v.shape[2] != self.vdim:
            raise _err("key/value embedding sizes %d/%d, model %r takes %d/%d"
                       % (k.shape[2], v.shape[2], self.model, self.kdim, self.vdim))
        self_attention = _same(key, query) and _same(value, query)
        same_kv = not self_attention and _same(value, key)

        kpm_bool, extra = self._padding(key_padding_mask, B, S, batched)
        mask, causal = self._mask(attn_mask, B, L, S, batched)
        causal = causal or bool(is_causal)
        if extra is not None:                  # a float key_padding_mask: added to the scores
            base = np.zeros((B, L, S), np.float32) if mask is None else mask
            if base.dtype == np.bool_:
                base = np.where(base, np.float32(-np.inf), np.float32(0))
            if base.ndim == 2:
                base = np.broadcast_to(base, (B, L, S))
            add = extra[:, None, :] if base.ndim == 3 else extra[:, None, None, :]
            mask = (base + add).astype(np.float32)
        if mask is not None and mask.ndim > 2 and mask.dtype != np.bool_:
            mask = self._finite_for_json(mask, kpm_bool, causal, L, S)

        def arr(t):
            return np.ascontiguousarray(t.detach().to("cpu", torch.float32).numpy())
        qa = arr(q)
        ka = None if self_attention else arr(k)
        va = None if self_attention or same_kv else arr(v)
        r = self.client.attention(qa, model=self.model, key=ka, value=va,
                                  key_padding_mask=kpm_bool, attn_mask=mask,
                                  is_causal=causal, need_weights=bool(need_weights),
                                  average_attn_weights=bool(average_attn_weights))

        def back(a, transpose):
            t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
            if not batched:
                t = t[0]
            elif transpose and not self.batch_first:
                t = t.transpose(0, 1).contiguous()
            return t.to(device=query.device, dtype=query.dtype)
        out = back(r.output, True)
        w = back(r.weights, False) if need_weights else None
        return out, w

    @staticmethod
    def _padding(kpm, B, S, batched):
        """(bool (B,S) array or None, float (B,S) array to add to the scores or None)."""
        if kpm is None:
            return None, None
        want = (B, S) if batched else (S,)
        if tuple(kpm.shape) != want:
            raise _err("key_padding_mask must be %s, got %s" % (list(want), list(kpm.shape)))
        m = kpm.detach().to("cpu")
        if not batched:
            m = m.unsqueeze(0)
        if m.dtype == torch.bool:
            return m.numpy().copy(), None
        if not m.is_floating_point():
            raise _err("key_padding_mask must be bool or floating point, got %s" % m.dtype)
        f = m.to(torch.float32).numpy()
        blocked = np.isneginf(f)
        if np.all(blocked | (f == 0)):
            return blocked, None
        return None, f

    def _mask(self, attn_mask, B, L, S, batched):
        """attn_mask as (array or None, causal): a bool or float32 array (L,S) shared,
        (B,L,S) per sequence or (B,h,L,S) per head; causal True when it was exactly the
        causal bool mask (then the array is None)."""
        if attn_mask is None:
            return None, False
        m = attn_mask.detach().to("cpu")
        if m.dtype == torch.uint8:
            m = m.to(torch.bool)
        if m.dtype != torch.bool and not m.is_floating_point():
            raise _err("attn_mask must be bool, uint8 or floating point, got %s" % m.dtype)
        h = self.num_heads
        if m.dim() == 2:
            if tuple(m.shape) != (L, S):
                raise _err("a 2-D attn_mask must be (L, S) = %s, got %s"
                           % ([L, S], list(m.shape)))
        elif m.dim() == 3:
            want = (B * h, L, S) if batched else (h, L, S)
            if tuple(m.shape) != want:
                raise _err("a 3-D attn_mask must be %s = %s, got %s"
                           % ("(N*num_heads, L, S)" if batched else "(num_heads, L, S)",
                              list(want), list(m.shape)))
            m = m.reshape(B, h, L, S)
        else:
            raise _err("attn_mask must be 2-D or 3-D, got %d-D" % m.dim())
        if m.dtype == torch.bool:
            a = m.numpy().copy()
        else:
            a = m.to(torch.float32).numpy()
            neg = np.isneginf(a)
            if np.all(neg | (a == 0)):
                a = neg                        # 0 / -inf spells a bool mask
        if a.ndim == 4:
            if np.all(a == a[:, :1]):          # the heads agree: one mask per sequence
                a = a[:, 0]
                if np.all(a == a[:1]):         # ... and the sequences too: shared
                    a = a[0]
        a = np.ascontiguousarray(a)
        if a.dtype == np.bool_ and a.ndim == 2 and np.array_equal(a, _causal(L, S)):
            return None, True
        return a, False

    @staticmethod
    def _finite_for_json(mask, kpm_bool, causal, L, S):
        """A per-sequence or per-head float mask goes as /v1 JSON, which has no -inf: -inf
        becomes -1e30 (the same softmax, exactly) — refused when a query row would have
        every key blocked (PyTorch answers NaN there, attnd an all-zero mixture)."""
        neg = np.isneginf(mask)
        if not neg.any():
            return mask
        blocked = neg
        if kpm_bool is not None:            # (B, S) -> (B, 1, S) or (B, 1, 1, S)
            blocked = blocked | kpm_bool.reshape((kpm_bool.shape[0],) + (1,) * (mask.ndim - 2)
                                                 + (S,))
        if causal:
            blocked = blocked | _causal(L, S)
        if np.any(np.all(blocked, axis=-1)):
            raise _err("a per-sequence or per-head float attn_mask blocks every key of a "
                       "query row with -inf (PyTorch answers NaN there); attnd cannot send "
                       "that as JSON")
        return np.where(neg, np.float32(_NEG), mask).astype(np.float32)


def _same(a, b):
    """a is b, or the same values (the self-attention call passes one tensor thrice)."""
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    return bool(torch.equal(a, b))


def _causal(L, S):
    """Bool (L, S): True above the diagonal (query t sees keys <= t), attnd's is_causal."""
    return np.triu(np.ones((L, S), dtype=np.bool_), k=1)


_NAMES = ("in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight",
          "v_proj_weight", "out_proj.weight", "out_proj.bias")


def save(mha, path):
    """Writes an ``nn.MultiheadAttention``'s weights as a safetensors file attnd serves
    (``--model NAME=PATH``): PyTorch's state_dict names, F32, ``__metadata__.num_heads`` —
    the format of ``tools/export/attnd-export`` (which also checks the round trip).
    ``add_bias_kv`` / ``add_zero_attn`` layers are refused (:class:`attnd.Unsupported`).
    Written to ``path + ".tmp"`` and renamed. Returns the file's size."""
    if not isinstance(mha, nn.MultiheadAttention):
        raise _err("save takes an nn.MultiheadAttention, got %s" % type(mha).__name__)
    if mha.bias_k is not None or mha.add_zero_attn:
        raise _err("add_bias_kv / add_zero_attn layers cannot be served by attnd")
    sd = mha.state_dict()
    header = {"__metadata__": {"num_heads": str(mha.num_heads), "exported_by": "attnd.torch"}}
    chunks, offset = [], 0
    for name in _NAMES:
        if name not in sd or sd[name] is None:
            continue
        t = sd[name].detach().to("cpu", torch.float32).contiguous()
        raw = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)
    return os.path.getsize(path)


class Sequence:
    """One sequence of a decode loop whose attention layers are on attnd: a sequence session
    on a model group (``--model NAME=DIR,layers=all``: one KV cache per layer, one id, fork
    and close of the whole sequence), called per layer with that layer's normed hidden
    states. A hand-written or Hugging Face-style loop replaces its attention call by one line::

        with attnd.torch.Sequence("http://127.0.0.1:8080", "llama") as seq:
            for step in ...:
                for i, layer in enumerate(model.layers):
                    h = layer.input_layernorm(x)
                    x = x + seq(i, h, position_ids=pos)      # was: layer.self_attn(h, ...)
                    x = x + layer.mlp(layer.post_attention_layernorm(x))

    ``seq(layer, hidden_states, position_ids=None)``: ``hidden_states`` is ``(T, E)`` or
    ``(1, T, E)`` (a session is one sequence: batch 1) of any float dtype and device;
    answers the layer's attention output (its ``o_proj`` applied) on the same dtype, device
    and shape. ``position_ids`` (``(T,)`` or ``(1, T)``, as a Hugging Face loop with left
    padding passes them) place the rows for RoPE; without them they sit at the layer's
    ``length … length+T−1``. Layers must be fed in order each step (layer 0 first): a layer
    passing the one before is ``attnd.Conflict`` (409 ``layer_out_of_order``). Every failure
    is an :class:`attnd.Error` (shapes, dtypes and gradients the session cannot take:
    :class:`attnd.Unsupported`); nothing is re-sent after a lost connection.

    ``lengths()`` gives each layer's cached positions; ``fork()`` a new ``Sequence`` from a
    copy-on-write copy of every layer's cache (e.g. for beams); ``close()`` (also on leaving
    a ``with`` block) deletes the session.
    """

    def __init__(self, url, model, *, api_key=None, client=None, window=None, ttl_s=None,
                 _session=None, **client_options):
        if client is None:
            if url is None:
                raise ValueError("give url or client")
            client = Client(url=url, api_key=api_key, **client_options)
        self._client, self.model = client, model
        if _session is None:
            info = client.model(model)
            if info.get("kind") != "group":
                raise Unsupported("attnd.torch.Sequence: model %r is not a model group (serve "
                                  "it with --model %s=DIR,layers=all, or use Client.session "
                                  "for one layer)" % (model, model))
            _session = client.session(model, window=window, ttl_s=ttl_s)
        self.session = _session
        self.num_layers = int(self.session.created.get("num_layers") or 0)
        self._layers = [self.session.layer(i) for i in range(self.num_layers)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "attnd.torch.Sequence(%r, id=%r, layers=%d)" % (self.model, self.session.id,
                                                                self.num_layers)

    @property
    def id(self):
        return self.session.id

    def __call__(self, layer, hidden_states, position_ids=None):
        if not 0 <= int(layer) < self.num_layers:
            raise Unsupported("attnd.torch.Sequence: layer %r: the group has layers 0..%d"
                              % (layer, self.num_layers - 1))
        x = hidden_states
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise Unsupported("attnd.torch.Sequence: hidden_states must be a float tensor")
        if torch.is_grad_enabled() and x.requires_grad:
            raise Unsupported("attnd.torch.Sequence: attnd computes no gradients (run under "
                              "torch.no_grad() or torch.inference_mode())")
        batched = x.dim() == 3
        if batched and x.shape[0] != 1 or x.dim() not in (2, 3):
            raise Unsupported("attnd.torch.Sequence: hidden_states must be (T, E) or (1, T, E) "
                              "(one session is one sequence), not %s" % (tuple(x.shape),))
        rows = x.reshape(x.shape[-2], x.shape[-1]).detach().to("cpu", torch.float32)
        pos = None
        if position_ids is not None:
            p = position_ids
            if isinstance(p, torch.Tensor):
                p = p.detach().to("cpu").reshape(-1).tolist()
            pos = [int(v) for v in p]
        out = self._layers[int(layer)].append(rows.numpy(), position_ids=pos).output
        y = torch.as_tensor(out, dtype=torch.float32).reshape(rows.shape[0], -1)
        y = y.to(device=x.device, dtype=x.dtype)
        return y.unsqueeze(0) if batched else y

    def lengths(self):
        """Each layer's cached positions, as attnd reports them."""
        return [layer["length"] for layer in self.session.info().get("layers", [])]

    def fork(self):
        return Sequence(None, self.model, client=self._client, _session=self.session.fork())

    def close(self):
        self.session.close()
