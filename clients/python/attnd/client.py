"""The attnd client: Client, Session, Result."""
import email.utils
import json
import threading
import time
import urllib.parse

from . import _tensors as T
from ._http import ConnectFailed, Transport
from .errors import TransportError, error_for

__all__ = ["Client", "Session", "SessionLayer", "Result"]

_VERSION = "0.1.0"


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
    """

    __slots__ = ("output", "weights", "timing", "model", "id", "session", "protocol",
                 "binary")

    def __init__(self, output, weights=None, timing=None, model=None, id=None, session=None,
                 protocol="v1", binary=False):
        self.output = output
        self.weights = weights
        self.timing = timing or {}
        self.model = model
        self.id = id
        self.session = session
        self.protocol = protocol
        self.binary = binary

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
    ``ssl_context`` for https.

    A Client may be shared by threads: each thread keeps its own keep-alive connection.
    Use it as a context manager (or call :meth:`close`) to close the connections.
    """

    def __init__(self, url, api_key=None, timeout=30.0, retries=3, *, max_retry_wait=10.0,
                 binary=None, ssl_context=None):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.max_retry_wait = float(max_retry_wait)
        self.binary = binary
        self._transport = Transport(url, timeout=timeout, ssl_context=ssl_context)
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
            parsed = json.loads(resp.body.decode("utf-8")) if resp.body else None
        except (ValueError, UnicodeDecodeError):
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            e = parsed["error"]
            code, field, message = e.get("code"), e.get("field"), e.get("message")
        elif isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            message = parsed["error"]      # the v2 form: a message only
            if v2 and resp.status == 404:
                code = "model_not_found"   # the client only builds valid v2 routes
            elif v2 and resp.status == 504:
                code = "timeout"
        if message is None:
            text = resp.body.decode("utf-8", "replace").strip() if resp.body else ""
            message = text[:300] or "HTTP %d" % resp.status
        return error_for(resp.status, message, code=code, field=field,
                         retry_after=retry_after, body=parsed)

    def _json(self, method, path, obj=None, expect=(200,), idempotent=True, retries=None,
              extra=None, v2=False):
        body = None if obj is None else self._json_body(obj)
        headers = self._headers("application/json" if body is not None else None, extra)
        resp = self._send(method, path, body, headers, idempotent, retries)
        if resp.status not in expect:
            raise self._error(resp, v2)
        if not resp.body:
            return None
        try:
            return json.loads(resp.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise TransportError("%s %s: answer is not JSON: %s" % (method, path, e))

    # ------------------------------------------------------------------ models, probes
    def models(self):
        """``GET /v1/models``: the list of ModelInfo dicts (name, num_heads, embed_q...)."""
        return self._json("GET", "/v1/models")["models"]

    def model(self, name):
        """``GET /v1/models/{name}``: one ModelInfo dict; :class:`ModelNotFound` if absent."""
        return self._json("GET", "/v1/models/" + _quote(name))

    def health(self):
        """``GET /healthz``: True when the process answers 200, False otherwise
        (including when it cannot be reached). Never retried."""
        try:
            return self._send("GET", "/healthz", headers=self._headers(), retries=0).status == 200
        except TransportError:
            return False

    def ready(self):
        """``GET /readyz``: True when every model is loaded and the server is not
        draining; False on 503 or when it cannot be reached. Never retried."""
        try:
            return self._send("GET", "/readyz", headers=self._headers(), retries=0).status == 200
        except TransportError:
            return False

    # ------------------------------------------------------------------ model repository
    def repository_index(self, ready=False):
        """``/v2/repository/index``: ``[{"name", "version", "state", "reason"}]`` for every
        model the server knows (``state``: READY, LOADING or UNAVAILABLE); ``ready=True``
        lists the loaded ones only."""
        if ready:
            return self._json("POST", "/v2/repository/index", {"ready": True}, v2=True)
        return self._json("GET", "/v2/repository/index", v2=True)

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
        resp = self._send("GET", path, headers=self._headers())
        if resp.status != 200:
            raise self._error(resp, v2=True)
        return json.loads(resp.body.decode("utf-8"))

    def sessions(self, limit=100):
        """``GET /v1/sessions``: an iterator over every live session's description (as
        :meth:`Session.info` returns it), fetched ``limit`` at a time in id order, each
        page asked for with ``after`` = the previous page's ``next``."""
        after = None
        while True:
            query = {"limit": int(limit)}
            if after is not None:
                query["after"] = after
            page = self._json("GET", "/v1/sessions?" + urllib.parse.urlencode(query))
            for info in page.get("sessions", []):
                yield info
            after = page.get("next")
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
        return self._v1_result(self._json("POST", path, body), numpy_in)

    def _v1_result(self, j, numpy_out, session=None):
        out, w = j.get("output"), j.get("weights")
        if numpy_out and T.HAVE_NUMPY:
            out = T.to_numpy_float(out)
            w = T.to_numpy_float(w)
        return Result(out, w, j.get("timing"), j.get("model"), j.get("id"),
                      session if session is not None else j.get("session"), "v1", False)

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
        resp = self._send_binary("/v2/models/%s/infer" % _quote(model), tensors, params, id)
        return self._v2_result(resp, single, numpy_out)

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
        resp = self._send("POST", "/v2/models/%s/infer" % _quote(model), self._json_body(body),
                          self._headers("application/json"), True)
        return self._v2_result(resp, single, numpy_out)

    def _v2_result(self, resp, single, numpy_out, v2_errors=True):
        if resp.status != 200:
            raise self._error(resp, v2=v2_errors)
        hlen = resp.headers.get("inference-header-content-length")
        try:
            if hlen is not None:
                n = int(hlen)
                header = json.loads(resp.body[:n].decode("utf-8"))
                blob, offset = resp.body, n
            else:
                header = json.loads(resp.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise TransportError("v2 answer is not valid: %s" % e)
        values = {}
        for o in header.get("outputs", []):
            shape = o["shape"]
            size = (o.get("parameters") or {}).get("binary_data_size")
            if size is not None:
                if hlen is None or not T.HAVE_NUMPY:
                    raise TransportError("unexpected binary output %s" % o["name"])
                a = T.np.frombuffer(blob, dtype="<f4", count=size // 4, offset=offset)
                offset += size
                a = a.astype(T.np.float32).reshape(shape)
                if single:
                    a = a[0]
                values[o["name"]] = a if numpy_out else a.tolist()
            else:
                data = o.get("data", [])
                if numpy_out and T.HAVE_NUMPY:
                    a = T.np.asarray(data, dtype=T.np.float32).reshape(shape)
                    values[o["name"]] = a[0] if single else a
                else:
                    nested = T.reshape_flat(data, shape)
                    values[o["name"]] = nested[0] if single else nested
        return Result(values.get("output"), values.get("attn_weights"),
                      header.get("parameters"), header.get("model_name"), header.get("id"),
                      None, "v2", hlen is not None)

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
                          expect=(201,), idempotent=False)
        return Session(self, info)


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

        ``position_ids`` (as a Hugging Face decode loop passes them) may be given; the
        server places the rows itself, so they must be ``length … length+T−1`` (checked
        here, then not sent; anything else is a ValueError).

        ``binary=None``: a numpy query without ``need_weights`` travels as raw float32
        (the v2 binary tensor encoding, ``Inference-Header-Content-Length``) when numpy
        is in use and the Client's ``binary`` is not False; ``False`` = always JSON.

        Never re-sent after a lost connection (the server may have advanced the stream);
        re-sent after a 503 (then nothing was done)."""
        self._check_positions(query, position_ids)
        binary = self._client.binary if binary is None else binary
        if binary is not False and _input_is_numpy(query) and not need_weights:
            try:
                return self._append_binary(query, timeout_ms, id)
            except T.V2Unsupported as e:
                if binary is True:
                    raise ValueError("binary=True: not a binary append: %s" % e)
        elif binary is True:
            raise ValueError("binary=True needs numpy, a numpy query and need_weights=False")
        body = {"query": query}
        if need_weights:
            body["need_weights"] = True
        if not average_attn_weights:
            body["average_attn_weights"] = False
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        if id is not None:
            body["id"] = id
        j = self._client._json("POST", "/v1/sessions/%s/append" % _quote(self.id), body,
                               idempotent=False)
        r = self._client._v1_result(j, _input_is_numpy(query))
        if r.session:
            self.length = r.session.get("length", self.length)
            self.cached = r.session.get("cached", self.cached)
        return r

    def _check_positions(self, query, position_ids):
        if position_ids is None:
            return
        try:
            got = [int(p) for p in T.flat_ints(position_ids)]
        except (TypeError, ValueError):
            raise ValueError("position_ids must be integers")
        rows = T.row_count(query)
        want = list(range(self.length, self.length + rows))
        if got != want:
            raise ValueError("position_ids %s...: a session places appended rows at "
                             "length..length+T-1 = %d..%d itself (fork the session to "
                             "branch)" % (got[:4], self.length, self.length + rows - 1))

    def _append_binary(self, query, timeout_ms, id):
        tensors, single = T.v2_inputs(query)      # V2Unsupported: the caller uses JSON
        params = Client._v2_parameters(False, None, False, True, timeout_ms)
        params["binary_data_output"] = True
        resp = self._client._send_binary("/v1/sessions/%s/append" % _quote(self.id), tensors,
                                         params, id, idempotent=False)
        r = self._client._v2_result(resp, single, True, v2_errors=False)
        p = r.timing
        r.session = {"id": p.pop("session_id", self.id),
                     "length": p.pop("session_length", None),
                     "cached": p.pop("session_cached", None)}
        r.protocol = "v2"
        if r.session["length"] is not None:
            self.length = r.session["length"]
            self.cached = r.session["cached"]
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
                                  expect=(201,), idempotent=False)
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
                                   expect=(200, 204))
            except (NotFound, Gone):
                pass
            self.closed = True


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
               id=None, *, position_ids=None):
        """The next ``T×E_q`` rows of this layer, as JSON (``position_ids``, one per row,
        are sent: the server places the rows at them). Returns a :class:`Result` whose
        ``session`` is ``{"id", "layer", "length", "cached"}``. Never re-sent after a lost
        connection."""
        body = {"query": query}
        if position_ids is not None:
            body["position_ids"] = [int(p) for p in T.flat_ints(position_ids)]
        if need_weights:
            body["need_weights"] = True
        if not average_attn_weights:
            body["average_attn_weights"] = False
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        if id is not None:
            body["id"] = id
        c = self.session._client
        j = c._json("POST", "/v1/sessions/%s/layers/%d/append" % (_quote(self.session.id), self.layer),
                    body, idempotent=False)
        r = c._v1_result(j, _input_is_numpy(query))
        if r.session:
            self.length = r.session.get("length", self.length)
            self.cached = r.session.get("cached", self.cached)
        return r

