"""The attnd client: Client, Session, Result."""
import email.utils
import json
import threading
import time
import urllib.parse

from . import _answers as A
from . import _tensors as T
from ._http import DEFAULT_MAX_ANSWER_BYTES, ConnectFailed, Transport
from .errors import ProtocolError, TransportError, Unsupported, error_for

__all__ = ["Client", "Session", "SessionLayer", "Result"]

_VERSION = "0.2.0"


class Result:
    """One answer of the server.

    Attributes:
        output:  the attention output, nested like the query (``T×E_out`` or
                 ``B×T×E_out``). A numpy float32 array when numpy is in use and the query
                 was a numpy array (a list of arrays for a ragged batch), else nested lists.
        weights: the attention weights when ``need_weights`` was asked (``T×S``, or
                 ``h×T×S`` with ``average_attn_weights=False``; a leading ``B`` for a
                 batch), else ``None``. Same type rule as ``output``.
        timing:  ``{"queue_us", "compute_us", "batch_size"}`` as the server measured them.
        model:   the model that answered.
        id:      the request's ``id`` echoed back (``None`` when none was sent).
        session: for a session append, ``{"id", "length", "cached"}``; else ``None``.
        protocol: ``"v1"`` (JSON) or ``"v2"`` (Open Inference Protocol; binary tensors when
                 ``binary`` is true).
        binary:  whether the tensors travelled as raw bytes (v2 binary tensor data).
        request_id: the answer's ``X-Request-Id`` (what the server's logs carry).
    """

    __slots__ = ("output", "weights", "timing", "model", "id", "session", "protocol",
                 "binary", "request_id")

    def __init__(self, output, weights=None, timing=None, model=None, id=None, session=None,
                 protocol="v1", binary=False, request_id=None):
        self.output = output
        self.weights = weights
        self.timing = timing or {}
        self.model = model
        self.id = id
        self.session = session
        self.protocol = protocol
        self.binary = binary
        self.request_id = request_id

    def __repr__(self):
        def shape(x):
            if x is None:
                return None
            if hasattr(x, "shape"):
                return tuple(x.shape)
            return tuple(T.nested_shape(x))
        return "Result(model=%r, output=%s, weights=%s, protocol=%r, timing=%r)" % (
            self.model, shape(self.output), shape(self.weights), self.protocol, self.timing)


def _input_is_numpy(query):
    if T.is_array(query):
        return True
    return isinstance(query, (list, tuple)) and len(query) > 0 and T.is_array(query[0])


def _query_rank(query):
    """2 for one sequence (T×E), 3 for a batch: what the answer's output must nest like."""
    if hasattr(query, "ndim"):
        return int(query.ndim)
    if isinstance(query, (list, tuple)) and query and hasattr(query[0], "ndim"):
        return 1 + int(query[0].ndim)       # a ragged batch: a list of arrays
    return len(T.nested_shape(query))


def _parse_retry_after(value):
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _quote(name):
    return urllib.parse.quote(str(name), safe="")


class Client:
    """A client of one attnd server.

    ``Client(url, api_key=None, timeout=30.0, retries=3)``

    - ``url``: ``http://host:port`` (or ``https://``; a base path is kept as a prefix).
    - ``api_key``: sent as ``Authorization: Bearer <key>`` on every request.
    - ``timeout``: socket timeout in seconds for connecting and for each read.
    - ``retries``: how many times a request is sent again after a 503 (waiting what the
      ``Retry-After`` header says, at most ``max_retry_wait`` seconds each; exponential
      backoff from 0.1 s without the header) or after a failure to connect. After the last
      retry the 503 is raised as :class:`attnd.Unavailable`.

    Keyword-only extras: ``max_retry_wait`` (10 s), ``binary`` (``None`` = automatic: v2
    binary tensors for numpy input to a named model; ``False`` = always /v1 JSON; ``True`` =
    always v2 binary, an error when the request cannot be expressed in v2),
    ``ssl_context`` for https, ``max_answer_bytes`` (1 GiB): the largest answer body read —
    a larger ``Content-Length`` is refused before anything is read or allocated, a chunked
    or unframed body once it passes the limit — raising :class:`attnd.ProtocolError`
    naming the limit.

    Every answer is checked before it is returned: a body that is not JSON, JSON of the
    wrong form, or v2 tensors whose shape, datatype or bytes disagree raise
    :class:`attnd.ProtocolError` (with the answer's ``status`` and ``request_id``), never
    a raw exception.

    A Client may be shared by threads: each thread keeps its own keep-alive connection.
    Use it as a context manager (or call :meth:`close`) to close the connections.
    """

    def __init__(self, url, api_key=None, timeout=30.0, retries=3, *, max_retry_wait=10.0,
                 binary=None, ssl_context=None, max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES):
        if type(max_answer_bytes) is not int or max_answer_bytes <= 0:
            raise ValueError("max_answer_bytes must be a positive integer (bytes), got %r"
                             % (max_answer_bytes,))
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.max_retry_wait = float(max_retry_wait)
        self.binary = binary
        self.max_answer_bytes = max_answer_bytes
        self._transport = Transport(url, timeout=timeout, ssl_context=ssl_context,
                                    max_answer_bytes=max_answer_bytes)
        self._sleep = time.sleep

    # ------------------------------------------------------------------ plumbing
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Closes the client's connections (it reconnects if used again)."""
        self._transport.close()

    def __repr__(self):
        return "Client(%r)" % self.url

    def _headers(self, content_type=None, extra=None):
        h = {"User-Agent": "attnd-python/" + _VERSION, "Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        if content_type:
            h["Content-Type"] = content_type
        if extra:
            h.update(extra)
        return h

    def _backoff(self, attempt):
        return min(0.1 * (2 ** attempt), self.max_retry_wait)

    def _send(self, method, path, body=None, headers=None, idempotent=True, retries=None):
        """Sends with the retry policy; returns the final Response (any status)."""
        retries = self.retries if retries is None else retries
        attempt = 0
        while True:
            try:
                resp = self._transport.request(method, path, body, headers, idempotent)
            except ConnectFailed:
                if attempt >= retries:
                    raise
                self._sleep(self._backoff(attempt))
                attempt += 1
                continue
            if resp.status == 503 and attempt < retries:
                wait = _parse_retry_after(resp.headers.get("retry-after"))
                if wait is None:
                    wait = self._backoff(attempt)
                self._sleep(min(wait, self.max_retry_wait))
                attempt += 1
                continue
            return resp

    def _json_body(self, obj):
        try:
            return json.dumps(obj, default=T.json_default, allow_nan=False,
                              separators=(",", ":")).encode()
        except ValueError as e:   # NaN / inf: JSON cannot carry them
            raise ValueError("%s (JSON has no NaN or infinity; for a float attn_mask with "
                             "-inf use a bool mask, or numpy input to a named model, which "
                             "travels as v2 binary)" % e) from None

    def _error(self, resp, v2=False):
        retry_after = _parse_retry_after(resp.headers.get("retry-after"))
        code = field = None
        message = None
        parsed = None
        try:
            parsed = A.parse_json(resp.body) if resp.body else None
        except A.Malformed:
            parsed = None
        request_id = resp.headers.get("x-request-id")
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            e = parsed["error"]
            code, field, message = e.get("code"), e.get("field"), e.get("message")
            code = code if isinstance(code, str) else None
            field = field if isinstance(field, str) else None
            message = message if isinstance(message, str) else None
            if request_id is None and isinstance(e.get("request_id"), str):
                request_id = e["request_id"]
        elif isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            message = parsed["error"]      # the v2 form: a message only
            if request_id is None and isinstance(parsed.get("request_id"), str):
                request_id = parsed["request_id"]
            if v2 and resp.status == 404:
                code = "model_not_found"   # the client only builds valid v2 routes
            elif v2 and resp.status == 504:
                code = "timeout"
        if message is None:
            text = resp.body.decode("utf-8", "replace").strip() if resp.body else ""
            message = text[:300] or "HTTP %d" % resp.status
        return error_for(resp.status, message, code=code, field=field,
                         retry_after=retry_after, body=parsed, request_id=request_id)

    @staticmethod
    def _protocol(resp, method, path, message):
        """The ProtocolError for an answer of the wrong form (message says how)."""
        return ProtocolError("%s %s: %s" % (method, path.split("?")[0], message),
                             status=resp.status, request_id=resp.headers.get("x-request-id"))

    def _json(self, method, path, obj=None, expect=(200,), idempotent=True, retries=None,
              extra=None, v2=False, kind=dict, check=None):
        """Sends, raises the answer's error, parses the JSON answer and checks it: it must
        be a ``kind`` (dict, list; None = anything, and an empty body is allowed), then
        ``check(answer)`` (raising A.Malformed) gives what is returned. Any such failure
        is a ProtocolError."""
        body = None if obj is None else self._json_body(obj)
        headers = self._headers("application/json" if body is not None else None, extra)
        resp = self._send(method, path, body, headers, idempotent, retries)
        if resp.status not in expect:
            raise self._error(resp, v2)
        try:
            if not resp.body:
                if kind is None:
                    return None
                raise A.Malformed("the answer is empty")
            j = A.parse_json(resp.body)
            if kind is not None and not isinstance(j, kind):
                raise A.Malformed("the answer is not %s (got %s)"
                                  % ("a JSON object" if kind is dict else "a JSON list",
                                     A.kind(j)))
            return check(j, resp) if check is not None else j
        except A.Malformed as e:
            raise self._protocol(resp, method, path, str(e))

    # ------------------------------------------------------------------ models, probes
    def models(self):
        """``GET /v1/models``: the list of ModelInfo dicts (name, num_heads, embed_q...)."""
        def check(j, resp):
            models = A.need(j, "models", list)
            for i, m in enumerate(models):
                if not isinstance(m, dict):
                    raise A.Malformed("models[%d] is not a JSON object (got %s)" % (i, A.kind(m)))
            return models
        return self._json("GET", "/v1/models", check=check)

    def model(self, name):
        """``GET /v1/models/{name}``: one ModelInfo dict; :class:`ModelNotFound` if absent."""
        return self._json("GET", "/v1/models/" + _quote(name))

    def health(self):
        """``GET /healthz``: True when the process answers 200, False otherwise
        (including when it cannot be reached). Never retried."""
        try:
            return self._send("GET", "/healthz", headers=self._headers(), retries=0).status == 200
        except (TransportError, ProtocolError):
            return False

    def ready(self):
        """``GET /readyz``: True when every model is loaded and the server is not
        draining; False on 503 or when it cannot be reached. Never retried."""
        try:
            return self._send("GET", "/readyz", headers=self._headers(), retries=0).status == 200
        except (TransportError, ProtocolError):
            return False

    # ------------------------------------------------------------------ model repository
    def repository_index(self, ready=False):
        """``/v2/repository/index``: ``[{"name", "version", "state", "reason"}]`` for every
        model the server knows (``state``: READY, LOADING or UNAVAILABLE); ``ready=True``
        lists the loaded ones only."""
        if ready:
            return self._json("POST", "/v2/repository/index", {"ready": True}, v2=True,
                              kind=list)
        return self._json("GET", "/v2/repository/index", v2=True, kind=list)

    def _admin(self, admin_key):
        return {"Authorization": "Bearer " + admin_key} if admin_key else None

    def load_model(self, name, path=None, *, admin_key=None, **parameters):
        """``POST /v2/repository/models/{name}/load`` with ``admin_key`` (else the
        Client's key): a new version of ``name`` from its own source, or, given ``path``
        (a checkpoint on the server's filesystem) or ``parameters`` (the keys of a
        config-file model entry: ``layer=3``, ``format="llama"``, ``workers=2``...), from
        that. Returns ``{"name", "version", "state"}``; :class:`Forbidden` without admin
        rights, :class:`BadRequest` when the source does not load."""
        if path is not None:
            parameters["path"] = path
        body = {"parameters": parameters} if parameters else None
        return self._json("POST", "/v2/repository/models/%s/load" % _quote(name), body,
                          idempotent=False, extra=self._admin(admin_key), v2=True)

    def unload_model(self, name, *, admin_key=None):
        """``POST /v2/repository/models/{name}/unload`` with ``admin_key`` (else the
        Client's key): the model stops taking requests; those in flight finish. Returns
        ``{"name", "state"}``."""
        return self._json("POST", "/v2/repository/models/%s/unload" % _quote(name),
                          idempotent=False, extra=self._admin(admin_key), v2=True)

    def wait_ready(self, timeout=30.0, interval=0.1):
        """Polls :meth:`ready` until True; raises :class:`attnd.Unavailable` after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if self.ready():
                return True
            if time.monotonic() >= deadline:
                raise error_for(503, "%s not ready after %s s" % (self.url, timeout))
            time.sleep(interval)

    def metadata(self, model=None):
        """``GET /v2`` (the server: name, version, extensions) or, with ``model``,
        ``GET /v2/models/{model}`` (its input and output tensors)."""
        path = "/v2" if model is None else "/v2/models/" + _quote(model)
        return self._json("GET", path, v2=True)

    def sessions(self, limit=100):
        """``GET /v1/sessions``: an iterator over every live session's description (as
        :meth:`Session.info` returns it), fetched ``limit`` at a time in id order, each
        page asked for with ``after`` = the previous page's ``next``."""
        after = None
        while True:
            query = {"limit": int(limit)}
            if after is not None:
                query["after"] = after
            def check(page, resp):
                infos = A.opt(page, "sessions", list) or []
                for i, info in enumerate(infos):
                    if not isinstance(info, dict):
                        raise A.Malformed("sessions[%d] is not a JSON object" % i)
                return infos, A.opt(page, "next", str)
            infos, after = self._json("GET", "/v1/sessions?" + urllib.parse.urlencode(query),
                                      check=check)
            for info in infos:
                yield info
            if after is None:
                return

    # ------------------------------------------------------------------ attention
    def attention(self, query, *, model=None, key=None, value=None, key_padding_mask=None,
                  attn_mask=None, is_causal=False, window=None, position_ids=None,
                  need_weights=False, average_attn_weights=True, timeout_ms=None, id=None,
                  binary=None):
        """Runs attention; returns a :class:`Result`.

        Arguments are PyTorch's ``nn.MultiheadAttention.forward`` names (see the server's
        ``proto/README.md``): ``query`` ``T×E_q`` (one sequence) or ``B×T×E_q`` (a batch;
        as nested lists a batch may be ragged), ``key``/``value`` for cross-attention,
        ``key_padding_mask`` (``True`` = ignore that key), ``attn_mask`` (bool: ``True`` =
        blocked; float: added to the scores), ``is_causal``, ``window``, ``position_ids``
        (RoPE models), ``need_weights``, ``average_attn_weights``, ``timeout_ms``, ``id``.
        ``model=None`` uses ``POST /v1/attention`` (the server's only or default model).

        Each argument may be nested lists or a numpy array (or a CPU torch tensor). When
        numpy is in use, the query is an array and ``model`` is named, the request goes as
        ``POST /v2/models/{model}/infer`` with binary tensors (no JSON numbers either way)
        unless the Client or this call says ``binary=False`` or the request needs /v1
        (a ragged batch, a per-sequence or per-head ``attn_mask``, a non-bool
        ``key_padding_mask``). The answers are the same; ``Result.protocol`` tells which
        way it went. v2 errors have no ``code``/``field`` (only a message).
        """
        binary = self.binary if binary is None else binary
        numpy_in = _input_is_numpy(query)
        if binary is not False and numpy_in and model is not None:
            try:
                tensors, single = T.v2_inputs(query, key, value, key_padding_mask, attn_mask,
                                              position_ids)
            except T.V2Unsupported as e:
                if binary is True:
                    raise ValueError("binary=True: this request cannot be sent as v2: %s" % e)
            else:
                return self._infer_binary(model, tensors, single, True, is_causal, window,
                                          need_weights, average_attn_weights, timeout_ms, id)
        elif binary is True:
            raise ValueError("binary=True needs numpy, a numpy query and a model name")
        body = {"query": query}
        for name, v in (("key", key), ("value", value), ("key_padding_mask", key_padding_mask),
                        ("attn_mask", attn_mask), ("position_ids", position_ids)):
            if v is not None:
                body[name] = v
        # /v1 takes the options as top-level members with the v2 parameters' names
        body.update(self._v2_parameters(is_causal, window, need_weights, average_attn_weights,
                                        timeout_ms))
        if id is not None:
            body["id"] = id
        path = "/v1/models/%s/attention" % _quote(model) if model is not None else "/v1/attention"
        rank = _query_rank(query)
        return self._json("POST", path, body, check=lambda j, resp: self._v1_result(
            j, numpy_in, rank, need_weights, average_attn_weights, resp))

    @staticmethod
    def _v1_result(j, numpy_out, rank, need_weights, average_attn_weights, resp):
        """A checked /v1 answer (a dict) as a Result; A.Malformed when output is not
        numbers nested like the query (``rank`` 2: T×E, 3: B×T×E), weights are missing
        though asked for or not nested T×S / h×T×S per sequence, or timing, model, id or
        session have the wrong type."""
        out = A.need(j, "output", list)
        A.nested_numbers(out, rank, "output")
        w = A.opt(j, "weights", list)
        if w is None and need_weights:
            raise A.Malformed("need_weights was asked, but the answer has no 'weights'")
        if w is not None:
            A.nested_numbers(w, rank + (0 if average_attn_weights else 1), "weights")
        timing = A.opt(j, "timing", dict)
        model = A.opt(j, "model", str)
        rid = A.opt(j, "id", str)
        session = A.opt(j, "session", dict)
        if numpy_out and T.HAVE_NUMPY:
            out = T.to_numpy_float(out)
            w = T.to_numpy_float(w)
        return Result(out, w, timing, model, rid, session, "v1", False,
                      resp.headers.get("x-request-id"))

    # ------------------------------------------------------------------ v2
    def infer(self, model, query, *, key=None, value=None, key_padding_mask=None,
              attn_mask=None, is_causal=False, window=None, position_ids=None,
              need_weights=False, average_attn_weights=True, timeout_ms=None, id=None,
              binary=None):
        """Runs ``POST /v2/models/{model}/infer`` (the Open Inference Protocol) explicitly;
        returns a :class:`Result` shaped as :meth:`attention`'s (the batch dimension v2
        always has is dropped again for a 2-D query).

        ``binary=None``: binary tensors when numpy is in use, JSON ``data`` otherwise.
        v2 needs rectangular batches and a ``T×S`` ``attn_mask`` shared by the batch;
        anything else is a ValueError here (:meth:`attention` would use /v1 for it).
        Outputs are numpy arrays when the query was one, else nested lists."""
        numpy_in = _input_is_numpy(query)
        if binary is None:
            binary = T.HAVE_NUMPY
        if binary:
            if not T.HAVE_NUMPY:
                raise ValueError("binary v2 tensors need numpy (not importable, or "
                                 "ATTND_NO_NUMPY is set)")
            try:
                tensors, single = T.v2_inputs(query, key, value, key_padding_mask, attn_mask,
                                              position_ids)
            except T.V2Unsupported as e:
                raise ValueError("not expressible as a v2 request: %s" % e)
            return self._infer_binary(model, tensors, single, numpy_in, is_causal, window,
                                      need_weights, average_attn_weights, timeout_ms, id)
        return self._infer_json(model, query, key, value, key_padding_mask, attn_mask,
                                position_ids, numpy_in, is_causal, window, need_weights,
                                average_attn_weights, timeout_ms, id)

    @staticmethod
    def _v2_parameters(is_causal, window, need_weights, average_attn_weights, timeout_ms):
        p = {}
        if is_causal:
            p["is_causal"] = True
        if window is not None:
            p["window"] = window
        if need_weights:
            p["need_weights"] = True
        if not average_attn_weights:
            p["average_attn_weights"] = False
        if timeout_ms is not None:
            p["timeout_ms"] = timeout_ms
        return p

    def _infer_binary(self, model, tensors, single, numpy_out, is_causal, window, need_weights,
                      average_attn_weights, timeout_ms, id):
        params = self._v2_parameters(is_causal, window, need_weights, average_attn_weights,
                                     timeout_ms)
        params["binary_data_output"] = True
        path = "/v2/models/%s/infer" % _quote(model)
        resp = self._send_binary(path, tensors, params, id)
        q = tensors[0][1]
        return self._v2_result(resp, path, single, numpy_out, q.shape[:2], need_weights,
                               average_attn_weights)

    def _send_binary(self, path, tensors, params, id, idempotent=True):
        """POSTs a v2 body with binary tensor data (a JSON header, then the raw tensors;
        the header's length in Inference-Header-Content-Length)."""
        header = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": t,
                              "parameters": {"binary_data_size": a.nbytes}}
                             for n, a, t in tensors],
                  "parameters": params}
        if id is not None:
            header["id"] = id
        head = json.dumps(header, separators=(",", ":")).encode()
        body = b"".join([head] + [a.tobytes() for _, a, _ in tensors])
        headers = self._headers("application/octet-stream",
                                {"Inference-Header-Content-Length": str(len(head))})
        return self._send("POST", path, body, headers, idempotent)

    def _infer_json(self, model, query, key, value, key_padding_mask, attn_mask, position_ids,
                    numpy_out, is_causal, window, need_weights, average_attn_weights,
                    timeout_ms, id):
        def plain(x):
            return json.loads(self._json_body(x)) if not isinstance(x, (list, tuple)) else x
        q = plain(query)
        single = len(T.nested_shape(q)) == 2
        inputs = []

        def add(name, x, datatype, batched=True):
            x = plain(x)
            if single and batched:
                x = [x]
            inputs.append({"name": name, "shape": T.nested_shape(x), "datatype": datatype,
                           "data": x})
        add("query", q, "FP32")
        if key is not None:
            add("key", key, "FP32")
        if value is not None:
            add("value", value, "FP32")
        if key_padding_mask is not None:
            add("key_padding_mask", key_padding_mask, "BOOL")
        if attn_mask is not None:
            m = plain(attn_mask)
            if len(T.nested_shape(m)) != 2:
                raise ValueError("v2 takes a T×S attn_mask only (use attention() for others)")
            flat = [e for row in m for e in row]
            dt = "BOOL" if flat and all(isinstance(e, bool) for e in flat) else "FP32"
            add("attn_mask", m, dt, batched=False)
        if position_ids is not None:
            add("position_ids", position_ids, "INT64")
        body = {"inputs": inputs,
                "parameters": self._v2_parameters(is_causal, window, need_weights,
                                                  average_attn_weights, timeout_ms)}
        if id is not None:
            body["id"] = id
        path = "/v2/models/%s/infer" % _quote(model)
        resp = self._send("POST", path, self._json_body(body),
                          self._headers("application/json"), True)
        q0 = q[0] if not single and q else q
        bt = (1 if single else len(q), len(q0))
        return self._v2_result(resp, path, single, numpy_out, bt, need_weights,
                               average_attn_weights)

    def _v2_result(self, resp, path, single, numpy_out, batch_rows, need_weights,
                   average_attn_weights, v2_errors=True):
        """A checked v2 infer answer as a Result (the leading batch of one dropped when
        ``single``). ``batch_rows`` = (B, T) of the query: output must be [B, T, E_out],
        attn_weights [B, T, S] (or [B, h, T, S] per head) and present when asked for.
        ProtocolError for anything else: a bad Inference-Header-Content-Length, a header
        that is not a JSON object, outputs failing A.v2_tensors' checks."""
        if resp.status != 200:
            raise self._error(resp, v2=v2_errors)
        try:
            return self._v2_checked(resp, single, numpy_out, batch_rows, need_weights,
                                    average_attn_weights)
        except A.Malformed as e:
            raise self._protocol(resp, "POST", path, str(e))

    @staticmethod
    def _v2_checked(resp, single, numpy_out, batch_rows, need_weights, average_attn_weights):
        body = resp.body
        hlen = resp.headers.get("inference-header-content-length")
        if hlen is not None:
            n = A.header_length(hlen, len(body))
            header = A.parse_json(body[:n], "the v2 answer's header")
        else:
            n = len(body)
            header = A.parse_json(body, "the v2 answer")
        if not isinstance(header, dict):
            raise A.Malformed("the v2 answer's header is not a JSON object (got %s)"
                              % A.kind(header))
        params = A.opt(header, "parameters", dict)
        model = A.opt(header, "model_name", str)
        rid = A.opt(header, "id", str)
        found = A.v2_tensors(header, body, n, hlen is not None and T.HAVE_NUMPY)
        if "output" not in found:
            raise A.Malformed("the v2 answer has no output tensor named 'output'")
        if need_weights and "attn_weights" not in found:
            raise A.Malformed("need_weights was asked, but the v2 answer has no 'attn_weights'")
        B, rows = int(batch_rows[0]), int(batch_rows[1])
        want = {"output": 3, "attn_weights": 3 if average_attn_weights else 4}
        values = {}
        for name, (shape, source) in found.items():
            if name not in want:
                continue                          # an output this client does not know
            if len(shape) != want[name]:
                raise A.Malformed("%s: shape %s is not %d-D" % (name, shape, want[name]))
            t_axis = 1 if len(shape) == 3 else 2
            if shape[0] != B or shape[t_axis] != rows:
                raise A.Malformed("%s: shape %s does not match the query (a batch of %d, "
                                  "%d rows each)" % (name, shape, B, rows))
            a = A.v2_array(body, shape, source, numpy_out)
            values[name] = a[0] if single else a
        return Result(values.get("output"), values.get("attn_weights"), params, model, rid,
                      None, "v2", hlen is not None, resp.headers.get("x-request-id"))

    # ------------------------------------------------------------------ sessions
    def session(self, model, window=None, key=None, value=None, ttl_s=None):
        """Opens a streaming session on ``model`` (``POST /v1/models/{model}/sessions``)
        and returns its :class:`Session`, also a context manager that closes it::

            with client.session("demo") as s:
                r1 = s.append(rows[:3])
                r2 = s.append(rows[3:])    # == rows 3.. of one is_causal request

        ``window``: keep and attend to the last ``window`` positions only (streams
        forever); ``key``/``value``: a cross session's memory (projected once);
        ``ttl_s``: idle seconds before the server expires it."""
        body = {}
        if window is not None:
            body["window"] = window
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        if key is not None:
            body["key"] = key
        if value is not None:
            body["value"] = value
        info = self._json("POST", "/v1/models/%s/sessions" % _quote(model), body,
                          expect=(201,), idempotent=False, check=_session_info)
        return Session(self, info)


def _session_info(j, resp):
    """A session's description (create, fork): an object with an 'id' string."""
    A.need(j, "id", str, "the session description")
    for key in ("length", "cached", "max_length", "window", "ttl_s"):
        A.opt(j, key, int)
    for key in ("model", "kind"):
        A.opt(j, key, str)
    return j


class Session:
    """A streaming session (a KV cache on the server). Create with
    :meth:`Client.session`.

    Attributes from the server: ``id``, ``model``, ``kind`` (``"self"``/``"cross"``),
    ``window``, ``ttl_s``, ``max_length``; ``length`` and ``cached`` are updated by every
    :meth:`append` and :meth:`info`. ``closed`` turns True after :meth:`close`.

    One append at a time per session: a concurrent second append raises
    :class:`attnd.SessionBusy` (the client does not queue it, so a stream's order is
    always the caller's)."""

    def __init__(self, client, created):
        self._client = client
        self.created = created
        self.id = created["id"]
        self.model = created.get("model")
        self.kind = created.get("kind")
        self.window = created.get("window")
        self.ttl_s = created.get("ttl_s")
        self.max_length = created.get("max_length")
        self.length = created.get("length", 0)
        self.cached = created.get("cached", 0)
        self.closed = False
        self._lock = threading.Lock()

    def __repr__(self):
        return "Session(id=%r, model=%r, kind=%r, length=%r%s)" % (
            self.id, self.model, self.kind, self.length, ", closed" if self.closed else "")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except Exception:
            if exc_type is None:
                raise      # closing failed and nothing else is propagating: say so

    def append(self, query, need_weights=False, average_attn_weights=True, timeout_ms=None,
               id=None, *, position_ids=None, binary=None):
        """``POST /v1/sessions/{id}/append``: the next ``T×E_q`` rows of the stream.
        Returns a :class:`Result` whose ``session`` is ``{"id", "length", "cached"}``.
        A self session answers exactly the rows ``length … length+T−1`` of the one-shot
        ``is_causal`` request over the whole stream (RoPE models: at those positions).

        ``position_ids`` (one integer per row, as a Hugging Face decode loop with left
        padding passes them) place the rows for RoPE; without them the rows sit at
        ``length … length+T−1``. They are sent as JSON.

        ``binary=None``: a numpy query without ``need_weights`` or ``position_ids`` travels
        as raw float32 (the v2 binary tensor encoding, ``Inference-Header-Content-Length``)
        when numpy is in use and the Client's ``binary`` is not False; ``False`` = always JSON.

        Never re-sent after a lost connection (the server may have advanced the stream);
        re-sent after a 503 (then nothing was done)."""
        return self._append("/v1/sessions/%s/append" % _quote(self.id), self, query,
                            need_weights, average_attn_weights, timeout_ms, id, position_ids,
                            binary)

    def _append(self, path, owner, query, need_weights, average_attn_weights, timeout_ms, id,
                position_ids, binary):
        """One append to path (the session's, or one of its layers'); owner (the Session or
        a SessionLayer) gets the answer's length and cached."""
        positions = self._positions(query, position_ids)
        binary = self._client.binary if binary is None else binary
        if (binary is not False and _input_is_numpy(query) and not need_weights and
                positions is None):
            try:
                r = self._append_binary(path, query, timeout_ms, id)
            except T.V2Unsupported as e:
                if binary is True:
                    raise ValueError("binary=True: not a binary append: %s" % e)
            else:
                return _note_length(owner, r)
        elif binary is True:
            raise ValueError("binary=True needs numpy, a numpy query, need_weights=False and "
                             "no position_ids")
        body = {"query": query}
        if positions is not None:
            body["position_ids"] = positions
        if need_weights:
            body["need_weights"] = True
        if not average_attn_weights:
            body["average_attn_weights"] = False
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        if id is not None:
            body["id"] = id
        numpy_in = _input_is_numpy(query)
        r = self._client._json("POST", path, body, idempotent=False,
                               check=lambda j, resp: Client._v1_result(
                                   j, numpy_in, 2, need_weights, average_attn_weights, resp))
        return _note_length(owner, r)

    @staticmethod
    def _positions(query, position_ids):
        if position_ids is None:
            return None
        try:  # attnd.Unsupported is also a ValueError
            got = [int(p) for p in T.flat_ints(position_ids)]
        except (TypeError, ValueError):
            raise Unsupported("position_ids must be integers")
        if len(got) != T.row_count(query):
            raise Unsupported("position_ids has %d entries for %d rows" % (len(got),
                                                                          T.row_count(query)))
        return got

    def _append_binary(self, path, query, timeout_ms, id):
        tensors, single = T.v2_inputs(query)      # V2Unsupported: the caller uses JSON
        params = Client._v2_parameters(False, None, False, True, timeout_ms)
        params["binary_data_output"] = True
        resp = self._client._send_binary(path, tensors, params, id, idempotent=False)
        r = self._client._v2_result(resp, path, single, True, tensors[0][1].shape[:2], False,
                                    True, v2_errors=False)
        p = r.timing
        r.session = {"id": p.pop("session_id", self.id),
                     "length": p.pop("session_length", None),
                     "cached": p.pop("session_cached", None)}
        r.protocol = "v2"
        return r

    def layer(self, layer):
        """Layer ``layer`` of a sequence session (one opened on a model group,
        ``--model NAME=DIR,layers=...``, which holds a cache for every layer):
        ``s.layer(l).append(rows)`` appends to that layer, ``POST
        /v1/sessions/{id}/layers/{l}/append`` (see :class:`SessionLayer`). Fork, close and
        expiry act on the whole sequence."""
        return SessionLayer(self, layer)

    def fork(self):
        """``POST /v1/sessions/{id}/fork``: a new :class:`Session` starting from a copy of
        this one's cache (``forked_from`` names this one); appends to either never change
        the other's answers. 409 :class:`attnd.SessionBusy` while an append is in flight."""
        info = self._client._json("POST", "/v1/sessions/%s/fork" % _quote(self.id), {},
                                  expect=(201,), idempotent=False, check=_session_info)
        return Session(self._client, info)

    def info(self):
        """``GET /v1/sessions/{id}``: ``{"id", "model", "kind", "window", "ttl_s",
        "length", "cached", "bytes", "idle_s", "busy"}`` (does not count as use)."""
        j = self._client._json("GET", "/v1/sessions/" + _quote(self.id))
        self.length = j.get("length", self.length)
        self.cached = j.get("cached", self.cached)
        return j

    def close(self):
        """``DELETE /v1/sessions/{id}``. Idempotent: a second call does nothing, and a
        session the server already forgot (404) or expired (410) counts as closed."""
        from .errors import Gone, NotFound
        with self._lock:
            if self.closed:
                return
            try:
                self._client._json("DELETE", "/v1/sessions/" + _quote(self.id),
                                   expect=(200, 204), kind=None)
            except (NotFound, Gone):
                pass
            self.closed = True


def _note_length(owner, r):
    """Keeps owner's length and cached (a Session's or a SessionLayer's) as r reports them."""
    if r.session and r.session.get("length") is not None:
        owner.length = r.session["length"]
        owner.cached = r.session.get("cached", owner.cached)
    return r


class SessionLayer:
    """One layer of a sequence session (:meth:`Session.layer`). ``length`` and ``cached``
    are this layer's, updated by :meth:`append`. Layer ``l`` may never hold more positions
    than layer ``l-1``: such an append raises :class:`attnd.Conflict` (409
    ``layer_out_of_order``, both lengths in the message); a decode loop appends layer 0,
    then 1, ... for every step."""

    def __init__(self, session, layer):
        self.session = session
        self.layer = int(layer)
        self.length = None
        self.cached = None

    def __repr__(self):
        return "SessionLayer(%r, layer=%d, length=%r)" % (self.session.id, self.layer, self.length)

    def append(self, query, need_weights=False, average_attn_weights=True, timeout_ms=None,
               id=None, *, position_ids=None, binary=None):
        """``POST /v1/sessions/{id}/layers/{l}/append``: the next ``T×E_q`` rows of this
        layer, as :meth:`Session.append` sends them (numpy rows as v2 binary tensors, JSON
        otherwise; ``position_ids`` place them for RoPE). Returns a :class:`Result` whose
        ``session`` gives this layer's ``length`` and ``cached``. Never re-sent after a lost
        connection."""
        path = "/v1/sessions/%s/layers/%d/append" % (_quote(self.session.id), self.layer)
        return self.session._append(path, self, query, need_weights, average_attn_weights,
                                    timeout_ms, id, position_ids, binary)

