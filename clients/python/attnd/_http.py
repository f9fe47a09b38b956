"""HTTP transport: one keep-alive http.client connection per thread per Client."""
import http.client
import select
import socket
import ssl
import threading
import urllib.parse
import weakref

from .errors import ProtocolError, TransportError

__all__ = ["Response", "Transport", "ConnectFailed", "DEFAULT_MAX_ANSWER_BYTES"]

# The largest answer body a Client reads unless told otherwise: 1 GiB. An attnd answer is
# the output plus, when asked, the weights (per head: h*T*S floats, 4 bytes each in binary,
# up to ~16 as JSON), so 1 GiB holds e.g. per-head weights of 8 heads over T = S = 4096 as
# binary float32 (512 MiB) with room to spare; larger answers need a larger limit.
DEFAULT_MAX_ANSWER_BYTES = 1 << 30
_PIECE = 1 << 20              # what an unframed or chunked answer is read in


class ConnectFailed(TransportError):
    """The connection could not be opened: nothing was sent, so a retry is always safe."""


class Response:
    """A finished HTTP exchange: status, headers (lower-case names), the whole body."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body


class _HTTPConnection(http.client.HTTPConnection):
    def __del__(self):          # a thread's connection, dropped with its thread-local
        self.close()


class _HTTPSConnection(http.client.HTTPSConnection):
    def __del__(self):
        self.close()


def _dropped(sock):
    """True when an idle keep-alive socket is readable: the server closed it (or sent
    something unasked), so it must not carry the next request."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Transport:
    """Sends requests to one server (``http://`` or ``https://``, optional base path).

    Each thread gets its own persistent connection, opened on first use and reused while
    the server keeps it alive. A reused connection the server has closed meanwhile is
    detected before sending; if it still fails mid-exchange, an idempotent request is
    sent once more on a fresh connection (a non-idempotent one — a session append — is
    not, so a stream can never advance twice)."""

    def __init__(self, url, timeout=30.0, ssl_context=None,
                 max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("url must be http://HOST[:PORT] or https://HOST[:PORT], got %r" % url)
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.base_path = u.path.rstrip("/")
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.max_answer_bytes = max_answer_bytes
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns = weakref.WeakSet()

    def _new_connection(self):
        if self.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
            c = _HTTPSConnection(self.host, self.port, timeout=self.timeout, context=ctx)
        else:
            c = _HTTPConnection(self.host, self.port, timeout=self.timeout)
        with self._lock:
            self._conns.add(c)
        return c

    def _connection(self):
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._local.conn = self._new_connection()
        elif c.sock is not None and _dropped(c.sock):
            c.close()
        return c

    def request(self, method, path, body=None, headers=None, idempotent=True):
        """One exchange. Returns a Response; raises ConnectFailed (nothing sent) or
        TransportError."""
        target = self.base_path + path
        for attempt in (0, 1):
            c = self._connection()
            reused = c.sock is not None
            if not reused:
                try:
                    c.connect()
                except (OSError, socket.timeout) as e:
                    c.close()
                    raise ConnectFailed("cannot connect to %s:%d: %s" % (self.host, self.port, e))
            try:
                try:
                    c.request(method, target, body=body, headers=headers or {})
                except (BrokenPipeError, ConnectionResetError):
                    # The server may have refused the request before reading all of it
                    # (413, 401) and closed: its answer can still be waiting to be read.
                    # If it is not there, the error below is handled as a lost connection.
                    pass
                r = c.getresponse()
                headers = {k.lower(): v for k, v in r.getheaders()}
                data = self._read_body(c, r, headers, method, target)
                return Response(r.status, headers, data)
            except socket.timeout:
                c.close()
                raise TransportError("%s %s: no answer within %s s"
                                     % (method, target, self.timeout))
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    ConnectionAbortedError) as e:
                c.close()
                if reused and attempt == 0 and idempotent:
                    continue          # the server closed the idle connection: once more
                raise TransportError("%s %s: connection lost: %s" % (method, target, e))
            except http.client.IncompleteRead as e:
                c.close()
                raise TransportError("%s %s: the answer was cut short: %s" % (method, target, e))
            except http.client.HTTPException as e:
                # not HTTP/1.x: a bad status line, a header line over 64 KiB, more than 100
                # headers... (a connection closed before any answer is RemoteDisconnected,
                # handled above as a lost connection)
                c.close()
                raise ProtocolError("%s %s: the answer is not valid HTTP/1.x: %s: %s"
                                    % (method, target, type(e).__name__, str(e)[:200]))
            except OSError as e:
                c.close()
                raise TransportError("%s %s: %s: %s" % (method, target, type(e).__name__, e))
        raise AssertionError("unreachable")

    def _read_body(self, c, r, headers, method, target):
        """The answer's body, at most max_answer_bytes: an announced Content-Length over
        the limit is refused before anything is read (nothing is allocated for it); a
        chunked or close-delimited body is read a piece at a time and refused once it
        passes the limit. A refusal closes the connection (its rest is unread) and raises
        ProtocolError; a body cut short raises TransportError (via http.client)."""
        limit = self.max_answer_bytes

        def refuse(what):
            c.close()
            raise ProtocolError("%s %s: the answer's body %s max_answer_bytes (%d); raise "
                                "the Client's max_answer_bytes to accept it"
                                % (method, target, what, limit), status=r.status,
                                request_id=headers.get("x-request-id"))
        if r.length is not None:              # a valid Content-Length (http.client parsed it)
            if r.length > limit:
                refuse("announces %d bytes (Content-Length), more than" % r.length)
            return r.read()
        framing = "chunked" if r.chunked else "unframed (read until the connection closes)"
        pieces, total = [], 0
        while True:
            piece = r.read(min(_PIECE, limit + 1 - total))
            if not piece:
                return b"".join(pieces)
            pieces.append(piece)
            total += len(piece)
            if total > limit:
                refuse("(%s) runs past" % framing)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def close(self):
        """Closes every connection this transport opened (in any thread)."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()
