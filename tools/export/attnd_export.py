"""attnd_export — writes a PyTorch attention layer as a safetensors file attnd serves, then
checks the round trip.

Sources: an ``nn.MultiheadAttention``; a ``TransformerEncoderLayer`` (its ``self_attn``); a
``TransformerDecoderLayer`` (``self_attn``, or with ``which="cross"`` its cross-attention
``multihead_attn``, or both); any module holding exactly one MultiheadAttention (or the one
``prefix`` names); a state_dict (``prefix`` selects the layer's tensors, ``heads`` says how
many heads). From the command line (``tools/export/attnd-export``) the source is a ``.pt``
file (``torch.load``) or a Python import path ``module:attr``.

The file holds PyTorch's own state_dict names (``in_proj_weight``, ``in_proj_bias``, or
``q/k/v_proj_weight`` for kdim/vdim layers, ``out_proj.weight``, ``out_proj.bias``) in
F32 (or F16/BF16), with ``__metadata__.num_heads``; the safetensors format is written
directly (8-byte little-endian header length, JSON header, raw little-endian tensors), no
``safetensors`` package needed.

The check: the written file is read back into a fresh ``nn.MultiheadAttention`` (float64),
which must equal the original module; then random queries (self, causal and cross-attention,
with attention weights) are run through PyTorch and through attnd — a daemon started on the
file (``verify_with_attnd=PATH_TO_ATTND``) or a running server (``url=``, model
``served_name``) via the attnd Python client — and the largest difference is reported. It
fails above ``tolerance`` (1e-5)."""
import importlib
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

__all__ = ["ExportError", "VerifyError", "export", "find_attention", "load_source", "main"]

HERE = os.path.dirname(os.path.abspath(__file__))
_CLIENT_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "clients", "python"))

_ST_DTYPES = {"F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2)}
_MHA_NAMES = ("in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight",
              "v_proj_weight", "out_proj.weight", "out_proj.bias")


class ExportError(Exception):
    """The source cannot be exported (unsupported layer, ambiguous module, no torch...)."""


class VerifyError(Exception):
    """The round trip failed: attnd did not start, did not answer, or answered differently."""


def _torch():
    try:
        import torch
    except ImportError as e:
        hint = "On Debian: apt-get install python3-torch, then run it with /usr/bin/python3."
        debian = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(debian) and \
                os.access(debian, os.X_OK) and subprocess.run(
                    [debian, "-c", "import torch"], capture_output=True).returncode == 0:
            hint = "/usr/bin/python3 has it: /usr/bin/python3 %s ..." % (
                sys.argv[0] if sys.argv and sys.argv[0] else "tools/export/attnd-export")
        raise ExportError("PyTorch is needed, and %s cannot import it (%s). %s"
                          % (sys.executable, e, hint))
    return torch


# ---------------------------------------------------------------- finding the layer
def load_source(source):
    """A ``.pt``/``.pth``/``.bin`` path (``torch.load``, full modules included: only load
    files you trust) or ``module:attr`` (imported with the current directory on the path;
    a class or function there is called with no arguments)."""
    torch = _torch()
    if os.path.exists(source):
        try:
            try:
                return torch.load(source, map_location="cpu", weights_only=False)
            except TypeError:          # torch < 1.13.? has no weights_only
                return torch.load(source, map_location="cpu")
        except Exception as e:
            raise ExportError("cannot torch.load %s: %s: %s" % (source, type(e).__name__, e))
    if ":" not in source:
        raise ExportError("%s: no such file, and not a module:attr import path" % source)
    mod_name, attr = source.split(":", 1)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(mod_name)
    except Exception as e:
        raise ExportError("cannot import %s: %s: %s" % (mod_name, type(e).__name__, e))
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ExportError("%s has no attribute %r" % (source, part))
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, torch.nn.Module):
        try:
            obj = obj()
        except Exception as e:
            raise ExportError("calling %s() failed: %s: %s" % (source, type(e).__name__, e))
    return obj


def _unwrap_checkpoint(obj):
    """A training checkpoint dict holding the state_dict under a usual key."""
    if isinstance(obj, dict):
        for k in ("state_dict", "model_state_dict", "model"):
            if k in obj and isinstance(obj[k], dict):
                return obj[k]
    return obj


def _check_mha(mha, label):
    torch = _torch()
    if getattr(mha, "bias_k", None) is not None or getattr(mha, "bias_v", None) is not None:
        raise ExportError("%s: add_bias_kv=True (bias_k/bias_v) has no attnd equivalent" % label)
    if getattr(mha, "add_zero_attn", False):
        raise ExportError("%s: add_zero_attn=True has no attnd equivalent" % label)
    if not isinstance(mha, torch.nn.MultiheadAttention):
        raise ExportError("%s is %s, not nn.MultiheadAttention" % (label, type(mha).__name__))
    return mha


def _mha_from_state(sd, heads, label):
    """A float64 nn.MultiheadAttention from MHA-named tensors."""
    torch = _torch()
    unknown = sorted(set(sd) - set(_MHA_NAMES))
    if unknown:
        if {"bias_k", "bias_v"} & set(unknown):
            raise ExportError("%s: add_bias_kv (bias_k/bias_v) has no attnd equivalent" % label)
        raise ExportError("%s: not nn.MultiheadAttention tensors: %s" % (label, ", ".join(unknown)))
    if heads is None:
        raise ExportError("%s: a state_dict does not say how many heads it has: pass --heads N"
                          % label)
    if "out_proj.weight" not in sd:
        raise ExportError("%s: out_proj.weight missing" % label)
    e = sd["out_proj.weight"].shape[0]
    if "in_proj_weight" in sd:
        kdim = vdim = sd["in_proj_weight"].shape[1]
    elif all(n in sd for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight")):
        kdim, vdim = sd["k_proj_weight"].shape[1], sd["v_proj_weight"].shape[1]
    else:
        raise ExportError("%s: neither in_proj_weight nor q/k/v_proj_weight" % label)
    bias = "in_proj_bias" in sd
    if e % heads:
        raise ExportError("%s: embed_dim %d is not divisible by %d heads" % (label, e, heads))
    mha = torch.nn.MultiheadAttention(e, heads, bias=bias, kdim=kdim, vdim=vdim,
                                      batch_first=True, dtype=torch.float64)
    try:
        mha.load_state_dict({k: v.detach().to(torch.float64) for k, v in sd.items()}, strict=True)
    except RuntimeError as err:
        raise ExportError("%s: %s" % (label, err))
    return mha.eval()


def _candidates(keys):
    out = []
    for k in keys:
        for tail in ("in_proj_weight", "q_proj_weight"):
            if k.endswith(tail):
                out.append(k[:-len(tail)])
    return sorted(set(out))


def find_attention(obj, which="self", prefix=None, heads=None):
    """The attention layers to export: a list of (label, nn.MultiheadAttention, tag) where
    tag is "self" or "cross" (or "" when not a Transformer*Layer). Raises ExportError with
    what to pass when the choice is ambiguous or impossible."""
    torch = _torch()
    nn = torch.nn
    if which not in ("self", "cross", "both"):
        raise ExportError("which must be self, cross or both, not %r" % which)
    obj = _unwrap_checkpoint(obj)
    if isinstance(obj, nn.Module):
        name = type(obj).__name__
        if prefix:
            path = prefix.rstrip(".")
            try:
                sub = obj.get_submodule(path)
            except AttributeError:
                sub = None
            if sub is None:          # not a module path: a state_dict prefix of this module
                return find_attention(obj.state_dict(), which, prefix,
                                      heads if heads is not None else _guess_heads(obj, path))
            inner = type(sub).__name__
            return [("%s.%s%s" % (name, path, l[len(inner):] if l.startswith(inner) else "." + l),
                     m, t) for l, m, t in find_attention(sub, which, None, heads)]
        if isinstance(obj, nn.MultiheadAttention):
            return [(name, _check_mha(obj, name), "")]
        if isinstance(obj, nn.TransformerEncoderLayer):
            if which != "self":
                raise ExportError("a TransformerEncoderLayer has self-attention only "
                                  "(--which self)")
            return [("%s.self_attn" % name, _check_mha(obj.self_attn, name + ".self_attn"), "self")]
        if isinstance(obj, nn.TransformerDecoderLayer):
            out = []
            if which in ("self", "both"):
                out.append(("%s.self_attn" % name, _check_mha(obj.self_attn, name + ".self_attn"),
                            "self"))
            if which in ("cross", "both"):
                out.append(("%s.multihead_attn" % name,
                            _check_mha(obj.multihead_attn, name + ".multihead_attn"), "cross"))
            return out
        found = [(n, m) for n, m in obj.named_modules() if isinstance(m, nn.MultiheadAttention)]
        if len(found) == 1:
            n, m = found[0]
            return [("%s.%s" % (name, n), _check_mha(m, n), "")]
        if not found:
            raise ExportError("%s holds no nn.MultiheadAttention" % name)
        raise ExportError("%s holds %d attention layers (%s): choose one with --prefix NAME"
                          % (name, len(found), ", ".join(n for n, _ in found)))
    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if not tensors:
            raise ExportError("the dict holds no tensors (not a state_dict)")
        if prefix is not None:
            picks = [prefix]
        elif "in_proj_weight" in tensors or "q_proj_weight" in tensors:
            picks = [""]
        else:
            want = {"self": ["self_attn."], "cross": ["multihead_attn."],
                    "both": ["self_attn.", "multihead_attn."]}[which]
            picks = [p for p in want if p + "in_proj_weight" in tensors or
                     p + "q_proj_weight" in tensors]
            if len(picks) != len(want):
                cands = _candidates(tensors)
                raise ExportError("which attention layer of this state_dict? pass --prefix, "
                                  "one of: %s"
                                  % (", ".join(repr(c) for c in cands) or "(none found)"))
        out = []
        for p in picks:
            sd = {k[len(p):]: v for k, v in tensors.items()
                  if k.startswith(p) and k[len(p):] in _MHA_NAMES + ("bias_k", "bias_v")}
            if not sd:
                raise ExportError("no attention tensors under prefix %r (candidates: %s)"
                                  % (p, ", ".join(repr(c) for c in _candidates(tensors))))
            tag = {"self_attn.": "self", "multihead_attn.": "cross"}.get(p, "")
            out.append(("state_dict[%r]" % p, _mha_from_state(sd, heads, "prefix %r" % p), tag))
        return out
    raise ExportError("cannot export a %s: give an nn.Module or a state_dict" % type(obj).__name__)


def _guess_heads(module, path):
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    try:
        m = module.get_submodule(parent) if parent else module
    except AttributeError:
        return None
    return getattr(m, "num_heads", None)


# ---------------------------------------------------------------- the file
def _tensor_bytes(t, dtype):
    torch = _torch()
    t = t.detach().cpu().contiguous()
    t = {"F32": t.to(torch.float32), "F16": t.to(torch.float16),
         "BF16": t.to(torch.bfloat16)}[dtype].contiguous()
    if sys.byteorder != "little":
        raise ExportError("big-endian hosts are not supported")
    if dtype == "BF16":
        t = t.view(torch.int16)
    try:
        return t.numpy().tobytes()
    except Exception:          # a torch built without numpy
        fmt = {"F32": "f", "F16": "e", "BF16": "h"}[dtype]
        return struct.pack("<%d%s" % (t.numel(), fmt), *t.flatten().tolist())


def write_safetensors(path, mha, dtype="F32", metadata=None):
    """Writes mha's state_dict as a safetensors file with __metadata__.num_heads."""
    if dtype not in _ST_DTYPES:
        raise ExportError("dtype must be F32, F16 or BF16")
    sd = mha.state_dict()
    header, chunks, offset = {}, [], 0
    meta = {"num_heads": str(mha.num_heads), "exported_by": "attnd-export"}
    meta.update({str(k): str(v) for k, v in (metadata or {}).items()})
    header["__metadata__"] = meta
    for name in _MHA_NAMES:
        if name not in sd:
            continue
        raw = _tensor_bytes(sd[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(sd[name].shape),
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


def read_safetensors(path):
    """(metadata, {name: float64 tensor}) of a file written above (or any F32/F16/BF16 one)."""
    torch = _torch()
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[info["dtype"]]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=tdt).reshape(info["shape"])
        out[name] = t.to(torch.float64)
    return meta, out


# ---------------------------------------------------------------- the check
def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _client_module():
    try:
        import attnd
    except ImportError:
        sys.path.insert(0, _CLIENT_DIR)
        try:
            import attnd
        except ImportError as e:
            raise VerifyError("the attnd Python client is not importable (pip install "
                              "./clients/python): %s" % e)
    return attnd


class _Daemon:
    """build/attnd --model NAME=FILE... on a free port, stopped on exit."""

    def __init__(self, binary, models, ready_timeout=30.0):
        self.binary, self.models, self.ready_timeout = binary, models, ready_timeout
        self.proc = None
        self.log = tempfile.TemporaryFile()

    def __enter__(self):
        port = _free_port()
        args = [self.binary, "--listen", "127.0.0.1:%d" % port, "--log-level", "warn",
                "--no-ui"]
        for name, path in self.models:
            args += ["--model", "%s=%s" % (name, path)]
        try:
            self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        except OSError as e:
            raise VerifyError("cannot run %s: %s" % (self.binary, e))
        self.url = "http://127.0.0.1:%d" % port
        client = _client_module().Client(self.url, retries=0)
        deadline = time.monotonic() + self.ready_timeout
        while not client.ready():
            if self.proc.poll() is not None:
                raise VerifyError("%s exited (%d) without serving the file:\n%s"
                                  % (self.binary, self.proc.returncode, self._log()))
            if time.monotonic() > deadline:
                raise VerifyError("%s not ready after %g s:\n%s"
                                  % (self.binary, self.ready_timeout, self._log()))
            time.sleep(0.05)
        client.close()
        return self

    def _log(self):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-4000:]

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _max_diff(a, b):
    torch = _torch()
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    if a.shape != b.shape:
        raise VerifyError("shapes differ: %s vs %s" % (tuple(a.shape), tuple(b.shape)))
    return float((a - b).abs().max()) if a.numel() else 0.0


def _inputs(mha, seed, t=7, s=5):
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(t, mha.embed_dim, generator=g)
    k = torch.randn(s, mha.kdim, generator=g)
    v = torch.randn(s, mha.vdim, generator=g)
    return q, k, v


def _torch_answer(mha, q, k, v, causal=False):
    torch = _torch()
    mask = None
    if causal:
        mask = torch.triu(torch.ones(q.shape[0], k.shape[0], dtype=torch.bool), 1)
    with torch.no_grad():
        out, w = mha(q[None].double(), k[None].double(), v[None].double(), attn_mask=mask,
                     need_weights=True, average_attn_weights=True)
    return out[0], w[0]


def check_against(client, served, mha, seed=0):
    """Runs random inputs through PyTorch (mha, float64) and through attnd's model
    ``served``; returns {case: max |diff|} over outputs and weights."""
    info = client.model(served)
    want = {"num_heads": mha.num_heads, "embed_q": mha.embed_dim, "embed_k": mha.kdim,
            "embed_v": mha.vdim, "embed_out": mha.embed_dim}
    got = {k: info.get(k) for k in want}
    if got != want:
        raise VerifyError("attnd's %r is not this layer: %s, expected %s" % (served, got, want))
    q, k, v = _inputs(mha, seed)
    diffs = {}
    cases = [("cross", dict(key=k, value=v), (q, k, v, False))]
    if mha.kdim == mha.embed_dim and mha.vdim == mha.embed_dim:
        cases = [("self", {}, (q, q, q, False)),
                 ("causal", dict(is_causal=True), (q, q, q, True))] + cases
    for name, kw, args in cases:
        ref_out, ref_w = _torch_answer(mha, *args)
        # numpy arrays go as v2 binary tensors when numpy is there; the causal case goes as
        # /v1 JSON lists, so both transports are checked
        as_lists = name == "causal" or not _client_module().HAVE_NUMPY

        def conv(x):
            return x.tolist() if as_lists else x.numpy()
        r = client.attention(conv(args[0]), model=served, need_weights=True,
                             **{a: (conv(b) if hasattr(b, "numpy") else b) for a, b in kw.items()})
        diffs[name] = max(_max_diff(r.output, ref_out), _max_diff(r.weights, ref_w))
    return diffs


def export(module_or_state, out, which="self", prefix=None, heads=None, dtype="F32",
           verify_with_attnd=None, url=None, served_name=None, api_key=None, tolerance=1e-5,
           seed=0, source_label=None, log=print):
    """Exports and checks. Returns a report dict: {"files": [{"path", "layer", "which",
    "num_heads", "embed_dim", "kdim", "vdim", "bias", "dtype", "bytes", "file_vs_module",
    "attnd": {case: diff} or None, "max_diff"}], "ok": bool, "checked_with": ...}.
    Raises ExportError / VerifyError."""
    _torch()
    layers = find_attention(module_or_state, which, prefix, heads)
    if len(layers) > 1 and url:
        raise ExportError("--url checks one model: export --which self and cross separately, "
                          "or use --verify-with-attnd")
    files = []
    for label, mha, tag in layers:
        if len(layers) > 1:
            root, ext = os.path.splitext(out)
            path = "%s.%s%s" % (root, tag, ext or ".safetensors")
        else:
            path = out
        meta = {"source": source_label or label, "layer": label}
        if tag:
            meta["attention"] = tag
        size = write_safetensors(path, mha, dtype, meta)
        meta_back, tensors = read_safetensors(path)
        back = _mha_from_state(tensors, int(meta_back["num_heads"]), path)
        orig = _mha_from_state({k: v for k, v in mha.state_dict().items()}, mha.num_heads, label)
        q, k, v = _inputs(orig, seed + 1)
        if orig.kdim == orig.embed_dim and orig.vdim == orig.embed_dim:
            a, b = _torch_answer(orig, q, q, q), _torch_answer(back, q, q, q)
        else:
            a, b = _torch_answer(orig, q, k, v), _torch_answer(back, q, k, v)
        file_vs_module = max(_max_diff(a[0], b[0]), _max_diff(a[1], b[1]))
        files.append({"path": path, "layer": label, "which": tag, "num_heads": mha.num_heads,
                      "embed_dim": mha.embed_dim, "kdim": mha.kdim, "vdim": mha.vdim,
                      "bias": mha.in_proj_bias is not None, "dtype": dtype, "bytes": size,
                      "file_vs_module": file_vs_module, "attnd": None, "module": back})
        log("wrote %s: %s -> nn.MultiheadAttention(embed_dim=%d, num_heads=%d%s%s), %s, %d bytes"
            % (path, label, mha.embed_dim, mha.num_heads,
               "" if mha.in_proj_bias is not None else ", bias=False",
               "" if mha.kdim == mha.embed_dim and mha.vdim == mha.embed_dim
               else ", kdim=%d, vdim=%d" % (mha.kdim, mha.vdim), dtype, size))
        log("  read back into PyTorch: max |diff| vs the original module %.3g%s"
            % (file_vs_module, "" if dtype == "F32" else " (%s rounding)" % dtype))
    ok = all(f["file_vs_module"] <= tolerance for f in files if f["dtype"] == "F32")
    checked = None
    if verify_with_attnd or url:
        attnd = _client_module()
        if verify_with_attnd:
            names = [("export%d" % i, os.path.abspath(f["path"])) for i, f in enumerate(files)]
            with _Daemon(verify_with_attnd, names) as d:
                client = attnd.Client(d.url)
                for (name, _), f in zip(names, files):
                    f["attnd"] = check_against(client, name, f["module"], seed)
                client.close()
            checked = verify_with_attnd
        else:
            client = attnd.Client(url, api_key=api_key)
            name = served_name or os.path.splitext(os.path.basename(files[0]["path"]))[0]
            files[0]["attnd"] = check_against(client, name, files[0]["module"], seed)
            client.close()
            checked = "%s (model %s)" % (url, name)
        for f in files:
            worst = max(f["attnd"].values())
            f["max_diff"] = worst
            good = worst <= tolerance
            ok = ok and good
            log("%s: attnd vs PyTorch on random input (%s): max |diff| %.3g (tolerance %g): %s"
                % (f["path"], ", ".join("%s %.2g" % kv for kv in f["attnd"].items()), worst,
                   tolerance, "OK" if good else "FAILED"))
    else:
        log("  not checked against attnd (give --verify-with-attnd PATH_TO_ATTND or --url URL)")
    for f in files:
        f.pop("module")
    return {"files": files, "ok": ok, "checked_with": checked, "tolerance": tolerance}


# ---------------------------------------------------------------- command line
def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(
        prog="attnd-export",
        description="Write a PyTorch attention layer as a safetensors file attnd serves, and "
                    "check that attnd answers as PyTorch does.",
        epilog="Exit status: 0 written (and checked), 1 the check failed, 2 bad input or no "
               "torch. Examples:\n"
               "  attnd-export layer.pt -o layer.safetensors --verify-with-attnd build/attnd\n"
               "  attnd-export mymodels:make_decoder --which cross -o cross.safetensors\n"
               "  attnd-export ckpt.pt --prefix encoder.layers.3.self_attn -o l3.safetensors\n"
               "  attnd-export state.pt --prefix self_attn. --heads 8 -o sa.safetensors "
               "--url http://127.0.0.1:8080 --served-name sa",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a .pt/.pth/.bin file (torch.load: a module or a state_dict) "
                                  "or module:attr (a module, a state_dict, or a zero-argument "
                                  "callable returning one)")
    p.add_argument("-o", "--output", required=True, help="the .safetensors file to write "
                   "(with --which both: NAME.self.safetensors and NAME.cross.safetensors)")
    p.add_argument("--which", choices=("self", "cross", "both"), default="self",
                   help="a TransformerDecoderLayer's self-attention, its cross-attention "
                        "(multihead_attn), or both (default: self)")
    p.add_argument("--prefix", help="the submodule (encoder.layers.0.self_attn) or state_dict "
                                    "prefix (self_attn.) of the attention layer")
    p.add_argument("--heads", type=int, help="number of heads (needed for a bare state_dict)")
    p.add_argument("--dtype", choices=tuple(_ST_DTYPES), default="F32")
    p.add_argument("--verify-with-attnd", metavar="PATH_TO_ATTND",
                   help="start this attnd binary on the written file (a free local port) and "
                        "compare its answers with PyTorch's")
    p.add_argument("--url", help="instead, compare with a running attnd that serves the file")
    p.add_argument("--served-name", help="its model name there (default: the output's stem)")
    p.add_argument("--api-key", default=os.environ.get("ATTND_API_KEY"),
                   help="for --url (default: $ATTND_API_KEY)")
    p.add_argument("--tolerance", type=float, default=1e-5,
                   help="largest accepted |attnd - PyTorch| (default 1e-5)")
    p.add_argument("--seed", type=int, default=0, help="random input seed")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    a = p.parse_args(argv)
    if a.verify_with_attnd and a.url:
        p.error("--verify-with-attnd and --url are alternatives")
    log = (lambda *x: print(*x, file=sys.stderr)) if a.json else print
    try:
        obj = load_source(a.source)
        report = export(obj, a.output, which=a.which, prefix=a.prefix, heads=a.heads,
                        dtype=a.dtype, verify_with_attnd=a.verify_with_attnd, url=a.url,
                        served_name=a.served_name, api_key=a.api_key, tolerance=a.tolerance,
                        seed=a.seed, source_label=a.source, log=log)
    except ExportError as e:
        print("attnd-export: %s" % e, file=sys.stderr)
        return 2
    except VerifyError as e:
        print("attnd-export: check failed: %s" % e, file=sys.stderr)
        return 1
    except Exception as e:          # the client's errors (attnd.Error) and the unexpected
        print("attnd-export: check failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(report, indent=1))
    if not report["ok"]:
        print("attnd-export: FAILED: a difference is above %g" % a.tolerance, file=sys.stderr)
        return 1
    return 0
