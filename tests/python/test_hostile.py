"""test_hostile.py — the attnd Python client against a hostile server (issue 27, defect 7).

A raw-socket HTTP/1.1 server on 127.0.0.1, started by the test itself in a thread, answers
every request with scripted bytes: a Content-Length of 2^62, answers past the client's
max_answer_bytes (framed by a length, chunked, or by closing), bodies that are not JSON or
nest 100000 deep, JSON of the wrong shape, v2 headers that are lists, outputs without a
shape, short, mis-sized or mis-typed binary tensors, bad Inference-Header-Content-Length
values. Each case must raise attnd.ProtocolError (nothing else: a raw MemoryError,
ValueError, KeyError, AttributeError or TypeError fails the test as an error) whose message
names the problem, with .status the HTTP status and .request_id the answer's X-Request-Id.

Needs no daemon. Run by tests/scripts/test_python_client.sh with numpy and with numpy hidden
(tests/python/no_numpy.py test_hostile); the binary cases need numpy and are skipped without.
"""
import json
import socket
import threading
import unittest

import attnd

np = None
if attnd.HAVE_NUMPY:
    import numpy as np


class RawServer:
    """Accepts connections; reads one request (headers, then Content-Length bytes), sends
    the scripted bytes and closes. ``answers`` is a list of bytes; the last one repeats."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.closed = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v.strip())
            while len(rest) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                rest += chunk
            self.requests.append(head.split(b"\r\n")[0].decode())
            answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
            conn.sendall(answer)
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(65536):       # until the client closes (or the timeout)
                pass
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.closed = True
        self.sock.close()


RID = "hostile-req-1"


def http_answer(body, status=200, headers=None, content_length=True, reason="OK"):
    """The raw bytes of an answer: status line, headers (X-Request-Id always), body."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    lines = ["HTTP/1.1 %d %s" % (status, reason), "X-Request-Id: " + RID,
             "Content-Type: application/json", "Connection: close"]
    if content_length is True:
        lines.append("Content-Length: %d" % len(body))
    elif content_length is not None and content_length is not False:
        lines.append("Content-Length: %s" % content_length)
    for k, v in (headers or {}).items():
        lines.append("%s: %s" % (k, v))
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked_answer(pieces, status=200):
    head = ("HTTP/1.1 %d OK\r\nX-Request-Id: %s\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" % (status, RID)).encode()
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return head + body


def v2_binary_answer(header, blob, hlen=None):
    """A v2 binary answer: the JSON header (any JSON value), then blob; the header's length
    in Inference-Header-Content-Length (or the given hlen text)."""
    head = header if isinstance(header, bytes) else json.dumps(header).encode()
    return http_answer(head + blob, headers={
        "Inference-Header-Content-Length": str(len(head)) if hlen is None else hlen,
        "Content-Type": "application/octet-stream"})


def out(name, shape, size=None, data=None, datatype="FP32"):
    o = {"name": name, "datatype": datatype, "shape": shape}
    if size is not None:
        o["parameters"] = {"binary_data_size": size}
    if data is not None:
        o["data"] = data
    return o


def f32s(n):
    return b"\x00\x00\x80\x3f" * n           # n float32 ones


V1_OK = {"model": "m", "output": [[1.0, 2.0]], "timing": {"queue_us": 1}}
SESSION = {"id": "ab" * 16, "model": "m", "kind": "self", "window": 0, "ttl_s": 600,
           "length": 0, "max_length": 256, "cached": 0}


# ---------------------------------------------------------------- calls
def v1_attention(c):
    return c.attention([[0.0, 0.0]], model="m")


def v1_weights(c):
    return c.attention([[0.0, 0.0]], model="m", need_weights=True)


def v2_json(c):
    return c.infer("m", [[0.0, 0.0]], binary=False)


def v2_binary(c):
    return c.attention(np.zeros((2, 4), np.float32), model="m")


def v2_binary_weights(c):
    return c.attention(np.zeros((2, 4), np.float32), model="m", need_weights=True)


def models(c):
    return c.models()


def model(c):
    return c.model("m")


def session(c):
    return c.session("m")


def metadata(c):
    return c.metadata("m")


def sessions(c):
    return list(c.sessions())


def repo_index(c):
    return c.repository_index()


# (name, answer bytes, call, words the message must contain, needs numpy, client kwargs)
CASES = [
    # sizes
    ("content_length_2_62", http_answer(b"{}", content_length=str(2 ** 62)), v1_attention,
     ["4611686018427387904", "max_answer_bytes", "1073741824"], False, {}),
    ("content_length_over_limit", http_answer(json.dumps(dict(V1_OK, pad="x" * 3000)).encode()),
     v1_attention, ["max_answer_bytes", "2048"], False, {"max_answer_bytes": 2048}),
    ("chunked_over_limit", chunked_answer([b"[" + b"1," * 600, b"1," * 600, b"1]"]),
     v1_attention, ["max_answer_bytes", "2048", "chunked"], False, {"max_answer_bytes": 2048}),
    ("unframed_over_limit", http_answer(b"[" + b"1," * 3000 + b"1]", content_length=None),
     models, ["max_answer_bytes", "2048"], False, {"max_answer_bytes": 2048}),
    ("error_answer_over_limit", http_answer(b"x" * 5000, status=400, reason="Bad Request"),
     v1_attention, ["max_answer_bytes"], False, {"max_answer_bytes": 2048}),
    # JSON
    ("v1_not_json", http_answer(b"<html>hello</html>"), v1_attention, ["not JSON"], False, {}),
    ("v1_not_utf8", http_answer(b"\xff\xfe{}"), v1_attention, ["not JSON"], False, {}),
    ("v1_nested_100000", http_answer(b"[" * 100000 + b"]" * 100000), v1_attention,
     ["not JSON", "deep"], False, {}),
    ("v1_list", http_answer([1, 2]), v1_attention, ["not a JSON object"], False, {}),
    ("v1_no_output", http_answer({"model": "m"}), v1_attention, ["output"], False, {}),
    ("v1_output_strings", http_answer({"output": [["a", "b"]]}), v1_attention,
     ["output", "number"], False, {}),
    ("v1_output_flat", http_answer({"output": [1.0, 2.0]}), v1_attention,
     ["output", "nest"], False, {}),
    ("v1_output_bools", http_answer({"output": [[True, False]]}), v1_attention,
     ["output", "number"], False, {}),
    ("v1_timing_list", http_answer(dict(V1_OK, timing=[1])), v1_attention, ["timing"], False, {}),
    ("v1_weights_missing", http_answer(V1_OK), v1_weights, ["weights"], False, {}),
    ("v1_model_number", http_answer(dict(V1_OK, model=7)), v1_attention, ["model"], False, {}),
    # v2 JSON
    ("v2_json_header_list", http_answer([{"outputs": []}]), v2_json, ["not a JSON object"],
     False, {}),
    ("v2_json_outputs_dict", http_answer({"outputs": {"output": 1}}), v2_json,
     ["outputs", "list"], False, {}),
    ("v2_json_output_not_object", http_answer({"outputs": [3]}), v2_json,
     ["outputs[0]", "object"], False, {}),
    ("v2_json_no_shape", http_answer({"outputs": [{"name": "output", "datatype": "FP32",
                                                   "data": [1.0]}]}), v2_json,
     ["output", "shape"], False, {}),
    ("v2_json_shape_strings", http_answer({"outputs": [out("output", ["1", "2"], data=[1, 2])]}),
     v2_json, ["output", "shape"], False, {}),
    ("v2_json_shape_negative", http_answer({"outputs": [out("output", [1, -1, 2], data=[])]}),
     v2_json, ["output", "shape"], False, {}),
    ("v2_json_data_short", http_answer({"outputs": [out("output", [1, 1, 3], data=[1.0, 2.0])]}),
     v2_json, ["output", "3", "2"], False, {}),
    ("v2_json_shape_huge", http_answer({"outputs": [out("output", [1, 2 ** 40, 2 ** 40],
                                                        data=[])]}),
     v2_json, ["output", "shape"], False, {}),
    ("v2_json_data_strings", http_answer({"outputs": [out("output", [1, 1, 2], data=["a", "b"])]}),
     v2_json, ["output", "number"], False, {}),
    ("v2_json_no_output", http_answer({"outputs": []}), v2_json, ["no output"], False, {}),
    ("v2_json_rank", http_answer({"outputs": [out("output", [2], data=[1.0, 2.0])]}), v2_json,
     ["output", "shape"], False, {}),
    ("v2_json_batch", http_answer({"outputs": [out("output", [2, 1, 1], data=[1.0, 2.0])]}),
     v2_json, ["output", "batch"], False, {}),
    ("v2_json_parameters_list", http_answer({"outputs": [out("output", [1, 1, 1], data=[1.0])],
                                             "parameters": [1]}),
     v2_json, ["parameters"], False, {}),
    # v2 binary
    ("v2_header_list", v2_binary_answer([1, 2], b""), v2_binary, ["not a JSON object"], True, {}),
    ("v2_header_not_json", v2_binary_answer(b"{oops", b""), v2_binary, ["not JSON"], True, {}),
    ("v2_hlen_text", v2_binary_answer({"outputs": []}, b"", hlen="abc"), v2_binary,
     ["Inference-Header-Content-Length", "abc"], True, {}),
    ("v2_hlen_negative", v2_binary_answer({"outputs": []}, b"", hlen="-5"), v2_binary,
     ["Inference-Header-Content-Length", "-5"], True, {}),
    ("v2_hlen_past_body", v2_binary_answer({"outputs": []}, b"", hlen="99999"), v2_binary,
     ["Inference-Header-Content-Length", "99999"], True, {}),
    ("v2_binary_short", v2_binary_answer({"outputs": [out("output", [1, 2, 4], size=32)]},
                                         f32s(4)),
     v2_binary, ["output", "32", "16"], True, {}),
    ("v2_binary_misshaped", v2_binary_answer({"outputs": [out("output", [1, 2, 4], size=12)]},
                                             f32s(3)),
     v2_binary, ["output", "shape", "12"], True, {}),
    ("v2_binary_size_string", v2_binary_answer({"outputs": [out("output", [1, 2, 4],
                                                                size="32")]}, f32s(8)),
     v2_binary, ["output", "binary_data_size"], True, {}),
    ("v2_binary_fp64", v2_binary_answer({"outputs": [out("output", [1, 2, 4], size=64,
                                                         datatype="FP64")]}, f32s(16)),
     v2_binary, ["output", "FP64"], True, {}),
    ("v2_binary_no_shape", v2_binary_answer({"outputs": [{"name": "output", "datatype": "FP32",
                                                          "parameters": {"binary_data_size": 32}}]},
                                            f32s(8)),
     v2_binary, ["output", "shape"], True, {}),
    ("v2_binary_second_short", v2_binary_answer(
        {"outputs": [out("output", [1, 2, 4], size=32), out("attn_weights", [1, 2, 2], size=16)]},
        f32s(10)), v2_binary_weights, ["attn_weights", "16", "8"], True, {}),
    ("v2_binary_weights_missing", v2_binary_answer({"outputs": [out("output", [1, 2, 4], size=32)]},
                                                   f32s(8)),
     v2_binary_weights, ["attn_weights"], True, {}),
    ("v2_binary_batch", v2_binary_answer({"outputs": [out("output", [3, 2, 4], size=96)]},
                                         f32s(24)),
     v2_binary, ["output", "batch"], True, {}),
    # other routes
    ("models_not_list", http_answer({"models": 3}), models, ["models"], False, {}),
    ("models_answer_list", http_answer([{"name": "m"}]), models, ["not a JSON object"], False, {}),
    ("model_list", http_answer([1]), model, ["not a JSON object"], False, {}),
    ("session_no_id", http_answer({"model": "m"}, status=201, reason="Created"), session,
     ["id"], False, {}),
    ("session_list", http_answer([SESSION], status=201, reason="Created"), session,
     ["not a JSON object"], False, {}),
    ("metadata_not_json", http_answer(b"nope"), metadata, ["not JSON"], False, {}),
    ("sessions_page_list", http_answer({"sessions": 5, "next": None}), sessions, ["sessions"],
     False, {}),
    ("repository_index_object", http_answer({"models": []}), repo_index, ["list"], False, {}),
]


# Answers that are not HTTP/1.x at all: ProtocolError without a status or request id.
NOT_HTTP = [
    ("garbage_status_line", b"HELLO WORLD\r\n\r\n", ["not valid HTTP", "BadStatusLine"]),
    ("status_out_of_range", b"HTTP/1.1 7 Odd\r\nContent-Length: 0\r\n\r\n",
     ["not valid HTTP", "BadStatusLine"]),
    ("header_line_70000", b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
     ["not valid HTTP", "LineTooLong"]),
    ("headers_150", b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(150))
     + b"Content-Length: 2\r\n\r\n{}", ["not valid HTTP", "100 headers"]),
]


class TestHostileAnswers(unittest.TestCase):
    def test_answers_that_are_not_http(self):
        for name, answer, words in NOT_HTTP:
            with self.subTest(name):
                srv = RawServer([answer])
                self.addCleanup(srv.close)
                c = attnd.Client(srv.url, retries=0, timeout=10)
                self.addCleanup(c.close)
                with self.assertRaises(attnd.ProtocolError) as cm:
                    v1_attention(c)
                for w in words:
                    self.assertIn(w, str(cm.exception), name)
                self.assertIsNone(cm.exception.status)
                self.assertEqual(len(srv.requests), 1, "%s: retried" % name)

    def test_body_cut_short_is_a_transport_error(self):
        srv = RawServer([http_answer(b'{"output": [[1.0]]}', content_length="500")])
        self.addCleanup(srv.close)
        c = attnd.Client(srv.url, retries=0)
        with self.assertRaises(attnd.TransportError) as cm:
            v1_attention(c)
        self.assertIn("cut short", str(cm.exception))

    def test_each_malformed_answer_is_a_protocol_error(self):
        self.assertTrue(issubclass(attnd.ProtocolError, attnd.Error))
        ran = 0
        for name, answer, call, words, needs_numpy, kw in CASES:
            with self.subTest(name):
                if needs_numpy and np is None:
                    continue
                srv = RawServer([answer])
                self.addCleanup(srv.close)
                c = attnd.Client(srv.url, retries=0, timeout=10, **kw)
                self.addCleanup(c.close)
                with self.assertRaises(attnd.ProtocolError) as cm:
                    call(c)
                e = cm.exception
                text = str(e)
                for w in words:
                    self.assertIn(w, text, "%s: %r does not name %r" % (name, text, w))
                self.assertEqual(e.request_id, RID, name)
                self.assertIsInstance(e.status, int, name)
                self.assertEqual(len(srv.requests), 1, "%s: a malformed answer was retried" % name)
                ran += 1
        print("hostile answers: %d cases, each a ProtocolError naming the problem" % ran)

    def test_default_limit_and_option(self):
        self.assertEqual(attnd.Client("http://127.0.0.1:1").max_answer_bytes, 1 << 30)
        self.assertEqual(attnd.Client("http://127.0.0.1:1", max_answer_bytes=10).max_answer_bytes,
                         10)
        for bad in (0, -1, "1", 1.5, None, True):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError):
                    attnd.Client("http://127.0.0.1:1", max_answer_bytes=bad)

    def test_answer_at_the_limit_is_read(self):
        body = json.dumps(V1_OK).encode()
        for framing in ("length", "chunked", "close"):
            with self.subTest(framing):
                if framing == "length":
                    ans = http_answer(body)
                elif framing == "chunked":
                    ans = chunked_answer([body[:10], body[10:]])
                else:
                    ans = http_answer(body, content_length=None)
                srv = RawServer([ans])
                self.addCleanup(srv.close)
                c = attnd.Client(srv.url, max_answer_bytes=len(body), retries=0)
                self.assertEqual(c.attention([[0.0, 0.0]], model="m").output[0], [1.0, 2.0])
                c.close()

    def test_connection_usable_after_a_refused_answer(self):
        # the limit is hit on the first answer; the client must close that connection and
        # open a new one for the next request (the second answer is fine)
        body = json.dumps(V1_OK).encode()
        srv = RawServer([http_answer(body + b" " * 5000), http_answer(body)])
        self.addCleanup(srv.close)
        c = attnd.Client(srv.url, max_answer_bytes=1000, retries=0)
        with self.assertRaises(attnd.ProtocolError):
            c.attention([[0.0, 0.0]], model="m")
        self.assertEqual(c.attention([[0.0, 0.0]], model="m").output[0], [1.0, 2.0])

    def test_request_id_on_http_errors(self):
        srv = RawServer([http_answer({"error": {"code": "invalid_shape", "message": "bad",
                                                "field": "query[0]", "request_id": "body-id"}},
                                     status=400, reason="Bad Request"),
                         http_answer({"error": "v2 bad", "request_id": "body-id"},
                                     status=404, reason="Not Found")])
        self.addCleanup(srv.close)
        c = attnd.Client(srv.url, retries=0)
        with self.assertRaises(attnd.BadRequest) as cm:
            c.attention([[0.0]], model="m")
        self.assertEqual(cm.exception.request_id, RID)      # the header wins
        self.assertIn(RID, repr(cm.exception))
        with self.assertRaises(attnd.ModelNotFound) as cm:
            c.infer("m", [[0.0]], binary=False)
        self.assertEqual(cm.exception.request_id, RID)


if __name__ == "__main__":
    unittest.main(verbosity=2)
