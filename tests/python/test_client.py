"""test_client.py — the attnd Python client (clients/python) against a real daemon and
against local fake servers. Run by tests/scripts/test_python_client.sh, twice: with numpy
and with numpy made unimportable (tests/python/no_numpy.py).

Environment:
  ATTND_URL         the daemon: demo (config/demo.safetensors, the default model) and llama
                    (tests/fixtures/ckpt/llama_gqa, layer 1), --max-seq-len 256,
                    --max-body-bytes 2000000, one API key
  ATTND_API_KEY     that key
  ATTND_SLOW_URL    a daemon on demo without keys whose queue waits 500 ms for a batch
                    (--max-queue-delay-us 500000): appends and requests stay in flight
  ATTND_DEMO_MODEL  config/demo.safetensors (for the PyTorch reference)
  TORCH_PYTHON      an interpreter with torch (Debian's /usr/bin/python3), for
                    tests/python/torch_ref.py; without torch the references are the
                    daemon's own raw HTTP answers (sent with urllib, not the client)
  EXPECT_NUMPY      1 or 0: what attnd.HAVE_NUMPY must be
  ATTND_REPO_URL    a daemon on demo with the same API key and an admin key
  ATTND_ADMIN_KEY   that admin key (model repository load/unload)
"""
import email.utils
import http.server
import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request

import attnd
from attnd._tensors import nested_shape

URL = os.environ["ATTND_URL"]
KEY = os.environ["ATTND_API_KEY"]
SLOW_URL = os.environ["ATTND_SLOW_URL"]
REPO_URL = os.environ["ATTND_REPO_URL"]
ADMIN_KEY = os.environ["ATTND_ADMIN_KEY"]
DEMO = os.environ.get("ATTND_DEMO_MODEL", "config/demo.safetensors")
TORCH_PYTHON = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")
HERE = os.path.dirname(os.path.abspath(__file__))
E = 64
TOL = 1e-5

np = None
if attnd.HAVE_NUMPY:
    import numpy as np


# ---------------------------------------------------------------- deterministic inputs
def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def matrix(seed, rows, cols=E, scale=1.0):
    r = random.Random(seed)
    return [[f32(r.gauss(0.0, scale)) for _ in range(cols)] for _ in range(rows)]


CASES = {
    "self5": {"query": matrix(1, 5), "need_weights": True},
    "self5_heads": {"query": matrix(1, 5), "need_weights": True, "average_attn_weights": False},
    "causal10": {"query": matrix(2, 10), "is_causal": True, "need_weights": True},
    "cross": {"query": matrix(3, 3), "key": matrix(4, 6), "value": matrix(5, 6),
              "key_padding_mask": [False, False, True, False, False, True],
              "need_weights": True},
    "boolmask": {"query": matrix(6, 4),
                 "attn_mask": [[False, True, False, True], [True, False, False, False],
                               [False, False, False, True], [True, True, False, False]],
                 "need_weights": True},
    "floatmask": {"query": matrix(7, 4),
                  "attn_mask": [[f32(-0.75 * ((i * 3 + j) % 5)) for j in range(4)]
                                for i in range(4)]},
    "window_causal": {"query": matrix(8, 8), "is_causal": True, "window": 3,
                      "need_weights": True},
    "window_sym": {"query": matrix(9, 6), "window": 2},
    "ragA": {"query": matrix(10, 3)},
    "ragB": {"query": matrix(11, 5)},
    "cross_mem": {"query": matrix(12, 4), "key": matrix(13, 7), "value": matrix(14, 7)},
    "window_stream": {"query": matrix(15, 12), "is_causal": True, "window": 4},
}

REF = {}
REFERENCE = None


def raw_post(url, path, body, key=None):
    """The daemon's answer to a raw /v1 JSON request (urllib, not the client)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def setUpModule():
    global REFERENCE
    have_torch = subprocess.run([TORCH_PYTHON, "-c", "import torch"],
                                capture_output=True).returncode == 0
    if have_torch:
        p = subprocess.run([TORCH_PYTHON, os.path.join(HERE, "torch_ref.py")],
                           input=json.dumps({"model": DEMO, "cases": CASES}).encode(),
                           capture_output=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError("torch_ref.py failed: " + p.stderr.decode())
        REF.update(json.loads(p.stdout))
        REFERENCE = "torch"
    else:
        for name, case in CASES.items():
            REF[name] = raw_post(URL, "/v1/models/demo/attention", case, KEY)
        REFERENCE = "raw HTTP"
    print("reference: %s (%s); numpy: %s" % (REFERENCE, TORCH_PYTHON if have_torch else URL,
                                             attnd.HAVE_NUMPY), file=sys.stderr)


def flat(x):
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        out = []
        for e in x:
            out.extend(flat(e))
        return out
    return [x]


def shape(x):
    if hasattr(x, "shape"):
        return list(x.shape)
    return nested_shape(x)


def max_diff(a, b):
    fa, fb = flat(a), flat(b)
    assert len(fa) == len(fb), "sizes differ: %d vs %d" % (len(fa), len(fb))
    return max((abs(x - y) for x, y in zip(fa, fb)), default=0.0)


def arr(x, dtype=None):
    """A numpy array of a nested list (numpy runs only)."""
    return np.asarray(x, dtype=dtype if dtype is not None else np.float32)


def to_np(v):
    """A case's list -> an array: booleans stay bool, numbers become float32."""
    if not isinstance(v, list):
        return v
    a = np.asarray(v)
    return a if a.dtype == np.bool_ else a.astype(np.float32)


class Base(unittest.TestCase):
    def setUp(self):
        self.c = attnd.Client(URL, api_key=KEY)

    def tearDown(self):
        self.c.close()

    def assertClose(self, got, want, tol=TOL, what="output"):
        self.assertEqual(shape(got), shape(want), what + " shape")
        d = max_diff(got, want)
        self.assertLessEqual(d, tol, "%s differs from the %s reference by %g"
                             % (what, REFERENCE, d))

    def assertMatchesCase(self, result, name):
        ref = REF[name]
        self.assertClose(result.output, ref["output"])
        if "weights" in ref:
            self.assertClose(result.weights, ref["weights"], what="weights")
        else:
            self.assertIsNone(result.weights)

    def call(self, name, **over):
        kw = dict(CASES[name])
        kw.update(over)
        q = kw.pop("query")
        return self.c.attention(q, model=kw.pop("model", "demo"), **kw)


# ---------------------------------------------------------------- the real daemon
class TestModels(Base):
    def test_numpy_mode(self):
        self.assertEqual(attnd.HAVE_NUMPY, os.environ.get("EXPECT_NUMPY") == "1")
        if not attnd.HAVE_NUMPY:
            self.assertNotIn("numpy", sys.modules)

    def test_models_and_probes(self):
        self.assertTrue(self.c.health())
        self.assertTrue(self.c.ready())
        names = [m["name"] for m in self.c.models()]
        self.assertEqual(sorted(names), ["demo", "llama", "seq.0", "seq.1"])  # seq: a group
        m = self.c.model("demo")
        self.assertEqual((m["num_heads"], m["embed_q"], m["embed_out"]), (8, 64, 64))
        self.assertEqual(self.c.model("llama")["num_kv_heads"], 2)

    def test_probes_of_a_dead_server(self):
        c = attnd.Client("http://127.0.0.1:%d" % free_port(), retries=0)
        self.assertFalse(c.health())
        self.assertFalse(c.ready())


class TestRepository(unittest.TestCase):
    """Model management through the client; re-runnable on the same daemon (the second run
    of this file finds the versions the first left)."""

    def setUp(self):
        self.c = attnd.Client(REPO_URL, api_key=KEY)

    def tearDown(self):
        self.c.close()

    def version(self, name):
        for e in self.c.repository_index():
            if e["name"] == name:
                return int(e["version"])
        return None

    def test_load_use_unload(self):
        v = self.version("demo")
        self.assertEqual(self.c.load_model("demo", admin_key=ADMIN_KEY)["version"], str(v + 1))
        self.assertEqual(self.c.model("demo")["version"], v + 1)
        r = self.c.load_model("copy", DEMO, admin_key=ADMIN_KEY, max_batch_requests=4)
        self.assertEqual(r["state"], "READY")
        self.assertEqual(self.c.model("copy")["scheduler"]["max_batch_requests"], 4)
        q = CASES["self5"]["query"]
        self.assertEqual(self.c.attention(q, model="copy").model, "copy")
        ready = [e["name"] for e in self.c.repository_index(ready=True)]
        self.assertIn("copy", ready)
        self.assertEqual(self.c.unload_model("copy", admin_key=ADMIN_KEY)["state"],
                         "UNAVAILABLE")
        with self.assertRaises(attnd.ModelNotFound):
            self.c.attention(q, model="copy")
        self.assertNotIn("copy", [e["name"] for e in self.c.repository_index(ready=True)])

    def test_admin_rights(self):
        with self.assertRaises(attnd.Forbidden) as cm:   # the client key is not an admin key
            self.c.unload_model("demo")
        self.assertEqual(cm.exception.status, 403)
        with self.assertRaises(attnd.Unauthorized):
            self.c.load_model("demo", admin_key="not-the-admin-key")
        with self.assertRaises(attnd.BadRequest) as cm:
            self.c.load_model("nope", "/nonexistent.safetensors", admin_key=ADMIN_KEY)
        self.assertIn("nonexistent", cm.exception.message)
        with self.assertRaises(attnd.ModelNotFound):
            self.c.unload_model("never-loaded", admin_key=ADMIN_KEY)
        self.assertEqual(self.c.model("demo")["name"], "demo")   # still served


class TestAttention(Base):
    def test_cases_as_lists(self):
        for name in CASES:
            with self.subTest(name):
                r = self.call(name)
                self.assertEqual(r.protocol, "v1")
                self.assertIsInstance(r.output, list)
                self.assertMatchesCase(r, name)
                self.assertEqual(r.model, "demo")
                self.assertEqual(set(r.timing), {"queue_us", "compute_us", "batch_size"})

    def test_default_model_and_id(self):
        r = self.c.attention(CASES["self5"]["query"], id="req-7")
        self.assertEqual((r.model, r.id), ("demo", "req-7"))
        self.assertClose(r.output, REF["self5"]["output"])

    def test_ragged_batch(self):
        q = [CASES["ragA"]["query"], CASES["ragB"]["query"]]
        r = self.c.attention(q, model="demo")
        self.assertEqual(len(r.output), 2)
        self.assertClose(r.output[0], REF["ragA"]["output"])
        self.assertClose(r.output[1], REF["ragB"]["output"])

    def test_equals_raw_http(self):
        for name in ("causal10", "cross"):
            raw = raw_post(URL, "/v1/models/demo/attention", CASES[name], KEY)
            r = self.call(name)
            self.assertEqual(flat(r.output), [float(x) for x in flat(raw["output"])])

    def test_rope_model_position_ids(self):
        q = matrix(20, 6)
        pos = [100, 101, 102, 103, 104, 105]
        raw = raw_post(URL, "/v1/models/llama/attention", {"query": q, "position_ids": pos,
                                                           "is_causal": True}, KEY)
        r = self.c.attention(q, model="llama", position_ids=pos, is_causal=True)
        self.assertEqual(flat(r.output), flat(raw["output"]))
        # RoPE sees relative positions only: a uniform shift changes nothing, gaps do
        shifted = self.c.attention(q, model="llama", is_causal=True)
        self.assertLess(max_diff(shifted.output, r.output), 1e-5)
        gaps = self.c.attention(q, model="llama", is_causal=True,
                                position_ids=[0, 3, 4, 10, 11, 30])
        self.assertGreater(max_diff(gaps.output, r.output), 1e-3, "positions had no effect")

    def test_nan_is_refused_locally(self):
        with self.assertRaises(ValueError) as cm:
            self.c.attention([[float("-inf")] + [0.0] * 63], model="demo")
        self.assertIn("bool mask", str(cm.exception))


@unittest.skipUnless(attnd.HAVE_NUMPY, "numpy hidden")
class TestNumpy(Base):
    def route_count(self, route, status="200"):
        text = urllib.request.urlopen(URL + "/metrics", timeout=10).read().decode()
        want = 'attnd_requests_total{model="demo",route="%s",status="%s"} ' % (route, status)
        for line in text.splitlines():
            if line.startswith(want):
                return int(line.split()[-1])
        return 0

    def test_cases_as_numpy_use_v2_binary(self):
        before = self.route_count("/v2/models/{name}/infer")
        for name, case in CASES.items():
            with self.subTest(name):
                kw = {k: to_np(v) for k, v in case.items()}
                q = kw.pop("query")
                r = self.c.attention(q, model="demo", **kw)
                self.assertEqual((r.protocol, r.binary), ("v2", True), name)
                self.assertIsInstance(r.output, np.ndarray)
                self.assertEqual(r.output.dtype, np.float32)
                self.assertMatchesCase(r, name)
                # the same request as /v1 JSON answers the same float32 numbers
                j = self.c.attention(q, model="demo", binary=False, **kw)
                self.assertEqual(j.protocol, "v1")
                self.assertIsInstance(j.output, np.ndarray)
                self.assertLessEqual(float(np.abs(j.output - r.output).max()), 1e-6)
                if r.weights is not None:
                    self.assertLessEqual(float(np.abs(j.weights - r.weights).max()), 1e-6)
        after = self.route_count("/v2/models/{name}/infer")
        self.assertGreaterEqual(after - before, len(CASES), "the daemon saw no v2 requests")

    def test_v2_batch_shared_mask_and_v1_fallback(self):
        qa, qb = arr(matrix(30, 4)), arr(matrix(31, 4))
        mask = arr(CASES["boolmask"]["attn_mask"], bool)
        batch = np.stack([qa, qb])
        r = self.c.attention(batch, model="demo", attn_mask=mask, need_weights=True)
        self.assertEqual(r.protocol, "v2")
        self.assertEqual(r.output.shape, (2, 4, 64))
        self.assertEqual(r.weights.shape, (2, 4, 4))
        for i, q in enumerate((qa, qb)):
            one = self.c.attention(q.tolist(), model="demo", attn_mask=mask.tolist(),
                                   need_weights=True)
            self.assertClose(r.output[i], one.output, 1e-6)
        # a mask per sequence (B,T,S) is not expressible in v2: /v1 carries it
        per_seq = np.stack([mask, mask[::-1]])
        r2 = self.c.attention(batch, model="demo", attn_mask=per_seq)
        self.assertEqual(r2.protocol, "v1")
        self.assertIsInstance(r2.output, np.ndarray)
        one = self.c.attention(qb.tolist(), model="demo", attn_mask=per_seq[1].tolist())
        self.assertClose(r2.output[1], one.output, 1e-6)
        with self.assertRaises(ValueError):
            self.c.attention(batch, model="demo", attn_mask=per_seq, binary=True)

    def test_ragged_numpy_batch(self):
        q = [arr(CASES["ragA"]["query"]), arr(CASES["ragB"]["query"])]
        r = self.c.attention(q, model="demo")
        self.assertEqual(r.protocol, "v1")
        self.assertEqual([o.shape for o in r.output], [(3, 64), (5, 64)])
        self.assertClose(r.output[1], REF["ragB"]["output"])

    def test_rope_v2_position_ids(self):
        q = arr(matrix(20, 6))
        pos = np.arange(100, 106, dtype=np.int64)
        r = self.c.attention(q, model="llama", position_ids=pos, is_causal=True)
        self.assertEqual(r.protocol, "v2")
        raw = raw_post(URL, "/v1/models/llama/attention",
                       {"query": q.tolist(), "position_ids": pos.tolist(), "is_causal": True}, KEY)
        self.assertLessEqual(float(np.abs(r.output - arr(raw["output"])).max()), 1e-6)

    def test_infer_explicit(self):
        q = CASES["causal10"]["query"]
        rb = self.c.infer("demo", arr(q), is_causal=True, need_weights=True, id="v2-1")
        rj = self.c.infer("demo", q, is_causal=True, need_weights=True, binary=False)
        self.assertEqual((rb.protocol, rb.binary, rb.id), ("v2", True, "v2-1"))
        self.assertEqual((rj.protocol, rj.binary), ("v2", False))
        self.assertIsInstance(rj.output, list)
        self.assertMatchesCase(rb, "causal10")
        self.assertMatchesCase(rj, "causal10")

    def test_float_mask_with_infinity_goes_binary(self):
        m = np.where(arr(CASES["boolmask"]["attn_mask"], bool), -np.inf, 0).astype(np.float32)
        r = self.c.attention(arr(CASES["boolmask"]["query"]), model="demo", attn_mask=m,
                             need_weights=True)
        self.assertMatchesCase(r, "boolmask")

    def test_torch_tensor_input(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch for this interpreter")
        q = torch.tensor(CASES["self5"]["query"], requires_grad=True)
        r = self.c.attention(q, model="demo", need_weights=True)
        self.assertEqual(r.protocol, "v2")
        self.assertMatchesCase(r, "self5")


@unittest.skipIf(attnd.HAVE_NUMPY, "numpy present")
class TestWithoutNumpy(Base):
    def test_infer_uses_v2_json(self):
        r = self.c.infer("demo", CASES["causal10"]["query"], is_causal=True, need_weights=True)
        self.assertEqual((r.protocol, r.binary), ("v2", False))
        self.assertIsInstance(r.output, list)
        self.assertMatchesCase(r, "causal10")
        with self.assertRaises(ValueError):
            self.c.infer("demo", CASES["causal10"]["query"], binary=True)

    def test_cross_via_v2_json(self):
        case = CASES["cross"]
        r = self.c.infer("demo", case["query"], key=case["key"], value=case["value"],
                         key_padding_mask=case["key_padding_mask"], need_weights=True)
        self.assertMatchesCase(r, "cross")


class TestSessions(Base):
    def test_chunks_equal_one_causal_request(self):
        q = CASES["causal10"]["query"]
        one = self.c.attention(q, model="demo", is_causal=True)
        outs = []
        with self.c.session("demo") as s:
            self.assertEqual((s.kind, s.length, s.model), ("self", 0, "demo"))
            start = 0
            for n in (2, 3, 1, 4):
                r = s.append(q[start:start + n])
                start += n
                self.assertEqual(r.session["length"], start)
                outs.extend(r.output)
            self.assertEqual(s.length, 10)
            self.assertEqual(s.info()["length"], 10)
        self.assertTrue(s.closed)
        self.assertClose(outs, one.output, TOL)
        self.assertClose(outs, REF["causal10"]["output"])
        with self.assertRaises(attnd.SessionNotFound):
            s.info()
        s.close()                       # idempotent

    def test_numpy_chunks(self):
        if not attnd.HAVE_NUMPY:
            self.skipTest("numpy hidden")
        q = arr(CASES["causal10"]["query"])
        with self.c.session("demo") as s:
            parts = [s.append(q[:4]).output, s.append(q[4:]).output]
        self.assertIsInstance(parts[0], np.ndarray)
        self.assertClose(np.vstack(parts), REF["causal10"]["output"])

    def test_window_session(self):
        q = CASES["window_stream"]["query"]
        outs = []
        with self.c.session("demo", window=4) as s:
            self.assertEqual(s.window, 4)
            for i in range(0, 12, 3):
                outs.extend(s.append(q[i:i + 3]).output)
        self.assertClose(outs, REF["window_stream"]["output"])

    def test_cross_session(self):
        case = CASES["cross_mem"]
        with self.c.session("demo", key=case["key"], value=case["value"]) as s:
            self.assertEqual((s.kind, s.cached), ("cross", 7))
            a = s.append(case["query"][:1], need_weights=True)
            b = s.append(case["query"][1:])
        self.assertEqual(shape(a.weights), [1, 7])
        self.assertClose(list(a.output) + list(b.output), REF["cross_mem"]["output"])

    def test_rope_session(self):
        q = matrix(40, 9)
        one = self.c.attention(q, model="llama", is_causal=True)
        with self.c.session("llama") as s:
            outs = s.append(q[:5]).output + s.append(q[5:]).output
        self.assertClose(outs, one.output)

    def test_fork_goes_its_own_way(self):
        q = CASES["causal10"]["query"]
        one = self.c.attention(q, model="demo", is_causal=True)
        other = matrix(41, 4)
        with self.c.session("demo") as s:
            s.append(q[:6])
            with s.fork() as f:
                self.assertNotEqual(f.id, s.id)
                self.assertEqual((f.length, f.created["forked_from"]), (6, s.id))
                branch = f.append(other).output
                self.assertEqual(f.length, 10)
            rest = s.append(q[6:]).output
        self.assertTrue(f.closed)
        self.assertClose(rest, one.output[6:])          # the fork changed nothing here
        both = self.c.attention(q[:6] + other, model="demo", is_causal=True)
        self.assertClose(branch, both.output[6:])

    def test_sessions_listing_pages(self):
        opened = [self.c.session("demo") for _ in range(5)]
        try:
            seen = list(self.c.sessions(limit=2))
            ids = [i["id"] for i in seen]
            self.assertEqual(len(ids), len(set(ids)), "a session listed twice")
            self.assertEqual(ids, sorted(ids), "not in id order")
            for s in opened:
                self.assertIn(s.id, ids)
            self.assertEqual({i["model"] for i in seen if i["id"] == opened[0].id}, {"demo"})
        finally:
            for s in opened:
                s.close()
        self.assertFalse(set(s.id for s in opened) & set(i["id"] for i in self.c.sessions()))

    def test_append_position_ids(self):
        q = matrix(42, 5)
        one = self.c.attention(q, model="llama", is_causal=True, position_ids=list(range(5)))
        with self.c.session("llama") as s:
            a = s.append(q[:3], position_ids=[0, 1, 2]).output
            with self.assertRaises(ValueError):
                s.append(q[3:], position_ids=[3])           # one per appended row
            self.assertEqual(s.length, 3)
            b = s.append(q[3:], position_ids=[[3, 4]]).output
        self.assertClose(list(a) + list(b), one.output)
        # left padding, as a Hugging Face decode loop passes it: the rows sit at 7..11
        shifted = self.c.attention(q, model="llama", is_causal=True, position_ids=list(range(7, 12)))
        with self.c.session("llama") as s:
            got = s.append(q, position_ids=list(range(7, 12))).output
        self.assertClose(got, shifted.output)

    def test_binary_append(self):
        if not attnd.HAVE_NUMPY:
            self.skipTest("numpy hidden")
        q = arr(CASES["causal10"]["query"])
        with self.c.session("demo") as s:
            a = s.append(q[:4])
            b = s.append(q[4:], need_weights=True)         # weights: the JSON form
            self.assertEqual((a.protocol, a.binary), ("v2", True))
            self.assertEqual(a.session, {"id": s.id, "length": 4, "cached": 4})
            self.assertIn("compute_us", a.timing)
            self.assertEqual((b.protocol, b.binary, s.length), ("v1", False, 10))
            self.assertEqual(shape(b.weights), [6, 10])
            c = s.append(q[:1], binary=False)
            self.assertEqual(c.protocol, "v1")
        self.assertIsInstance(a.output, np.ndarray)
        self.assertClose(np.vstack([a.output, b.output]), REF["causal10"]["output"])
        with self.assertRaises(attnd.SessionNotFound):
            s.append(q[:1])                                 # binary form, closed session

    def test_metadata(self):
        self.assertEqual(self.c.metadata()["name"], "attnd")
        names = [t["name"] for t in self.c.metadata("demo")["inputs"]]
        self.assertIn("query", names)
        with self.assertRaises(attnd.ModelNotFound):
            self.c.metadata("nope")

    def test_close_is_idempotent(self):
        s = self.c.session("demo", ttl_s=30)
        self.assertEqual(s.ttl_s, 30)
        req = urllib.request.Request(URL + "/v1/sessions/" + s.id, method="DELETE",
                                     headers={"Authorization": "Bearer " + KEY})
        urllib.request.urlopen(req, timeout=10).read()      # deleted behind its back
        s.close()
        s.close()
        self.assertTrue(s.closed)
        with self.assertRaises(attnd.SessionNotFound) as cm:
            s.append(matrix(1, 1))
        self.assertEqual((cm.exception.status, cm.exception.code), (404, "session_not_found"))


class TestSequence(Base):
    """A sequence session on the model group "seq" (llama_gqa, layers=all): s.layer(l)."""

    def test_group_session_equals_layer_sessions(self):
        rows = [matrix(60 + l, 5) for l in range(2)]
        with self.c.session("seq") as s:
            self.assertEqual(s.created.get("num_layers"), 2)
            got = [list(s.layer(l).append(rows[l][:3]).output) for l in range(2)]
            with self.assertRaises(attnd.Conflict):        # layer 1 may not pass layer 0
                s.layer(1).append(rows[1][3:])
            for l in range(2):
                got[l] += list(s.layer(l).append(rows[l][3:], position_ids=[3, 4]).output)
            info = s.info()
            self.assertEqual([x["length"] for x in info["layers"]], [5, 5])
            f = s.fork()
            self.assertEqual(f.layer(0).append(rows[0][:1]).session["length"], 6)
            f.close()
        for l in range(2):
            with self.c.session("seq.%d" % l) as one:
                want = list(one.append(rows[l][:3]).output) + list(one.append(rows[l][3:]).output)
            self.assertClose(got[l], want, tol=0.0)


class TestErrors(Base):
    def test_model_not_found(self):
        for f in (lambda: self.c.attention(matrix(1, 2), model="nope"),
                  lambda: self.c.model("nope"),
                  lambda: self.c.session("nope"),
                  lambda: self.c.infer("nope", matrix(1, 2))):
            with self.assertRaises(attnd.ModelNotFound) as cm:
                f()
            e = cm.exception
            self.assertEqual((e.status, e.code), (404, "model_not_found"))
            self.assertIsInstance(e, attnd.NotFound)
            self.assertIn("nope", e.message)

    def test_bad_shape(self):
        with self.assertRaises(attnd.BadRequest) as cm:
            self.c.attention([[0.5] * 63], model="demo")
        e = cm.exception
        self.assertEqual((e.status, e.code, e.field), (400, "invalid_shape", "query[0]"))
        self.assertIn("expected 64", e.message)
        # the daemon's X-Request-Id (16 hex digits), the same id its error body carries
        self.assertRegex(e.request_id or "", r"^[0-9a-f]{16}$")
        self.assertEqual(e.request_id, e.body["error"]["request_id"])
        if attnd.HAVE_NUMPY:
            with self.assertRaises(attnd.BadRequest) as cm:
                self.c.attention(arr([[0.5] * 63]), model="demo")
            self.assertEqual((cm.exception.status, cm.exception.code), (400, None))
            self.assertIn("query", cm.exception.message)
            self.assertRegex(cm.exception.request_id or "", r"^[0-9a-f]{16}$")
        r = self.c.attention(matrix(1, 2), model="demo")
        self.assertRegex(r.request_id or "", r"^[0-9a-f]{16}$")
        self.assertNotEqual(r.request_id, e.request_id)

    def test_bad_session_option(self):
        with self.assertRaises(attnd.BadRequest) as cm:
            self.c.session("demo", window=-1)
        self.assertEqual(cm.exception.field, "window")

    def test_unauthorized(self):
        for key in (None, "wrong"):
            c = attnd.Client(URL, api_key=key)
            with self.assertRaises(attnd.Unauthorized) as cm:
                c.models()
            self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))
            self.assertTrue(c.health())          # probes need no key

    def test_too_large(self):
        with self.assertRaises(attnd.TooLarge) as cm:
            self.c.attention([[0.0] * 64] * 257, model="demo")
        self.assertEqual((cm.exception.status, cm.exception.code), (413, "limit_exceeded"))

    def test_body_too_large(self):
        # over --max-body-bytes (2 MB): attnd answers 413 before reading the body and closes;
        # the client reads that answer rather than reporting the broken pipe
        big = [[0.0] * 64] * 8000
        for _ in range(2):
            with self.assertRaises(attnd.TooLarge) as cm:
                self.c.attention(big, model="demo")
            self.assertEqual((cm.exception.status, cm.exception.code), (413, "body_too_large"))
        if attnd.HAVE_NUMPY:
            with self.assertRaises(attnd.TooLarge):
                self.c.attention(np.zeros((8000, 64), np.float32), model="demo")
        self.assertEqual(self.c.model("demo")["name"], "demo")     # and goes on working

    def test_session_not_found(self):
        ghost = attnd.Session(self.c, {"id": "0" * 32})
        with self.assertRaises(attnd.SessionNotFound):
            ghost.append(matrix(1, 1))
        ghost.close()            # nothing to delete: still fine

    def test_session_expired(self):
        s = self.c.session("demo", ttl_s=1)
        s.append(matrix(1, 1))
        deadline = time.monotonic() + 10
        while True:
            time.sleep(0.5)
            try:
                s.info()
            except attnd.SessionExpired as e:
                self.assertEqual((e.status, e.code), (410, "session_expired"))
                self.assertIsInstance(e, attnd.Gone)
                break
            self.assertLess(time.monotonic(), deadline, "session never expired")
        with self.assertRaises(attnd.SessionExpired):
            s.append(matrix(2, 1))
        s.close()
        self.assertTrue(s.closed)

    def test_session_busy_on_the_real_daemon(self):
        slow = attnd.Client(SLOW_URL)
        with slow.session("demo") as s:
            got = {}

            def first():
                got["r"] = s.append(matrix(1, 1))
            t = threading.Thread(target=first)
            t.start()
            time.sleep(0.15)                   # the first append waits 500 ms in the queue
            with self.assertRaises(attnd.SessionBusy) as cm:
                s.append(matrix(2, 1))
            t.join()
            self.assertEqual((cm.exception.status, cm.exception.code), (409, "session_busy"))
            self.assertIsInstance(cm.exception, attnd.Conflict)
            self.assertEqual(got["r"].session["length"], 1)   # the refused one left no trace
            self.assertEqual(s.info()["length"], 1)

    def test_timeout_on_the_real_daemon(self):
        slow = attnd.Client(SLOW_URL)
        with self.assertRaises(attnd.Timeout) as cm:
            slow.attention(matrix(1, 2), model="demo", timeout_ms=50)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.field), (504, "timeout", "timeout_ms"))
        self.assertIsInstance(e, attnd.ServerError)


# ---------------------------------------------------------------- fake servers
def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Fake:
    """A local HTTP/1.1 server answering from a script: a list of (status, headers, body)
    or callables; the last entry repeats. Records every request."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                fake.requests.append({"method": self.command, "path": self.path,
                                      "headers": dict(self.headers), "body": body,
                                      "peer": self.client_address, "t": time.monotonic()})
                step = fake.script[min(len(fake.requests), len(fake.script)) - 1]
                if callable(step):
                    step = step(self)
                if step is None:                 # drop the connection without answering
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, headers, payload = step
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = handle_any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


OK = (200, {}, {"model": "demo", "output": [[1.0, 2.0]], "timing": {"queue_us": 1,
                                                                    "compute_us": 2,
                                                                    "batch_size": 1}})


def v1_error(status, code, message="m", field="", headers=None):
    return (status, headers or {}, {"error": {"code": code, "message": message, "field": field}})


class TestFakeServer(unittest.TestCase):
    def fake(self, script):
        f = Fake(script)
        self.addCleanup(f.close)
        return f

    def test_api_key_sent_and_keep_alive(self):
        f = self.fake([OK])
        c = attnd.Client(f.url, api_key="sekrit")
        for _ in range(3):
            self.assertEqual(c.attention([[0.0, 0.0]], model="m").output, [[1.0, 2.0]])
        self.assertEqual([r["headers"].get("Authorization") for r in f.requests],
                         ["Bearer sekrit"] * 3)
        self.assertEqual(len({r["peer"] for r in f.requests}), 1, "connection not reused")
        self.assertEqual(f.requests[0]["path"], "/v1/models/m/attention")
        self.assertEqual(json.loads(f.requests[0]["body"]), {"query": [[0.0, 0.0]]})

    def test_503_retry_after_honoured(self):
        f = self.fake([v1_error(503, "queue_full", headers={"Retry-After": "1"}), OK])
        c = attnd.Client(f.url)
        t0 = time.monotonic()
        r = c.attention([[0.0, 0.0]], model="m")
        self.assertEqual(r.output, [[1.0, 2.0]])
        self.assertEqual(len(f.requests), 2)
        gap = f.requests[1]["t"] - f.requests[0]["t"]
        self.assertGreaterEqual(gap, 0.95, "Retry-After: 1 not waited")
        self.assertLess(time.monotonic() - t0, 5)

    def test_503_http_date_and_bound(self):
        when = email.utils.formatdate(time.time() + 3600, usegmt=True)
        f = self.fake([v1_error(503, "draining", headers={"Retry-After": when}),
                       v1_error(503, "draining", headers={"Retry-After": "3600"}), OK])
        c = attnd.Client(f.url, max_retry_wait=0.2)
        t0 = time.monotonic()
        c.attention([[0.0, 0.0]], model="m")
        self.assertLess(time.monotonic() - t0, 2.0, "the wait was not bounded")
        self.assertEqual(len(f.requests), 3)

    def test_503_exhausted(self):
        f = self.fake([v1_error(503, "overloaded", headers={"Retry-After": "0"})])
        c = attnd.Client(f.url, retries=2)
        with self.assertRaises(attnd.Unavailable) as cm:
            c.attention([[0.0, 0.0]], model="m")
        e = cm.exception
        self.assertEqual((e.status, e.code, e.retry_after), (503, "overloaded", 0.0))
        self.assertIsInstance(e, attnd.ServerError)
        self.assertEqual(len(f.requests), 3)
        with self.assertRaises(attnd.Unavailable):
            attnd.Client(f.url, retries=0).models()
        self.assertEqual(len(f.requests), 4)

    def test_each_status_its_class(self):
        cases = [
            (v1_error(400, "invalid_value", field="window"), attnd.BadRequest),
            (v1_error(401, "unauthorized"), attnd.Unauthorized),
            (v1_error(404, "not_found"), attnd.NotFound),
            (v1_error(404, "model_not_found"), attnd.ModelNotFound),
            (v1_error(404, "session_not_found"), attnd.SessionNotFound),
            (v1_error(409, "session_busy"), attnd.SessionBusy),
            (v1_error(410, "session_expired"), attnd.SessionExpired),
            (v1_error(413, "body_too_large"), attnd.TooLarge),
            (v1_error(504, "timeout"), attnd.Timeout),
            (v1_error(500, "internal"), attnd.ServerError),
            ((502, {}, b"<html>bad gateway</html>"), attnd.ServerError),
            ((415, {}, b"nope"), attnd.Error),
        ]
        for step, cls in cases:
            with self.subTest(cls.__name__, status=step[0]):
                f = self.fake([step])
                with self.assertRaises(cls) as cm:
                    attnd.Client(f.url).attention([[0.0]], model="m")
                e = cm.exception
                self.assertIs(type(e), cls)
                self.assertEqual(e.status, step[0])
                if isinstance(step[2], dict):
                    self.assertEqual(e.code, step[2]["error"]["code"])
                    self.assertEqual(e.field, step[2]["error"]["field"])
                else:
                    self.assertIsNone(e.code)
                    self.assertTrue(e.message)
        self.assertTrue(issubclass(attnd.SessionBusy, attnd.Conflict))
        self.assertTrue(issubclass(attnd.SessionExpired, attnd.Gone))

    def test_v2_error_form(self):
        f = self.fake([(400, {}, {"error": "input \"query\": bad"})])
        c = attnd.Client(f.url)
        with self.assertRaises(attnd.BadRequest) as cm:
            c.infer("m", [[0.0]], binary=False)
        self.assertEqual((cm.exception.code, cm.exception.message), (None, 'input "query": bad'))
        self.assertEqual(f.requests[0]["path"], "/v2/models/m/infer")

    def test_busy_from_a_fake(self):
        created = (201, {}, {"id": "ab" * 16, "model": "m", "kind": "self", "window": 0,
                             "ttl_s": 600, "length": 0, "max_length": 4096, "cached": 0})
        f = self.fake([created, v1_error(409, "session_busy", field="id"), (204, {}, b"")])
        c = attnd.Client(f.url)
        with c.session("m") as s:
            with self.assertRaises(attnd.SessionBusy):
                s.append([[0.0]])
        self.assertEqual([r["method"] for r in f.requests], ["POST", "POST", "DELETE"])
        self.assertEqual(f.requests[1]["path"], "/v1/sessions/%s/append" % ("ab" * 16))
        self.assertEqual(len(f.requests), 3, "409 must not be retried")

    def test_lost_connection_retried_only_when_idempotent(self):
        created = (201, {}, {"id": "cd" * 16, "model": "m", "kind": "self", "window": 0,
                             "ttl_s": 600, "length": 0, "max_length": 4096, "cached": 0})
        # attention: answered, then the next request on that connection is dropped; the
        # client sends it once more on a new connection
        f = self.fake([OK, None, OK])
        c = attnd.Client(f.url)
        c.attention([[0.0]], model="m")
        c.attention([[0.0]], model="m")
        self.assertEqual(len(f.requests), 3)
        # an append is never re-sent: the server might have advanced the stream
        g = self.fake([created, None, OK])
        c = attnd.Client(g.url)
        s = c.session("m")
        with self.assertRaises(attnd.TransportError):
            s.append([[0.0]])
        self.assertEqual(len(g.requests), 2)

    def test_server_closing_connections(self):
        f = self.fake([(200, {"Connection": "close"}, OK[2])])
        c = attnd.Client(f.url)
        for _ in range(3):
            c.attention([[0.0]], model="m")
        self.assertEqual(len({r["peer"] for r in f.requests}), 3)

    def test_connection_refused(self):
        c = attnd.Client("http://127.0.0.1:%d" % free_port(), retries=1, max_retry_wait=0.05)
        with self.assertRaises(attnd.TransportError) as cm:
            c.models()
        self.assertIsNone(cm.exception.status)

    def test_threads_have_their_own_connections(self):
        f = self.fake([OK])
        c = attnd.Client(f.url)
        errors = []

        def work():
            try:
                for _ in range(5):
                    c.attention([[0.0]], model="m")
            except Exception as e:      # pragma: no cover
                errors.append(e)
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(f.requests), 20)
        self.assertEqual(len({r["peer"] for r in f.requests}), 4)


class TestNoNumpyEnv(unittest.TestCase):
    def test_env_var_disables_numpy(self):
        env = dict(os.environ, ATTND_NO_NUMPY="1")
        p = subprocess.run([sys.executable, "-c",
                            "import attnd, sys; print(attnd.HAVE_NUMPY, 'numpy' in sys.modules)"],
                           env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.split(), ["False", "False"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
