"""Exceptions raised by the attnd client.

Every failure the server reports is an :class:`Error` (or a subclass chosen by the HTTP
status and, where the server gives one, the stable error ``code``), carrying

- ``status``  — the HTTP status (``None`` for transport failures),
- ``code``    — the server's stable code (``"invalid_shape"``, ``"session_busy"``...;
  ``None`` for a v2 answer, whose errors carry a message only),
- ``field``   — the culprit as a path into the request (``"query[1][3]"``), ``""`` when no
  field is to blame, ``None`` when the server did not say,
- ``message`` — the server's sentence,
- ``retry_after`` — seconds from a ``Retry-After`` header, else ``None``,
- ``request_id`` — the answer's ``X-Request-Id`` (the id the server's logs and access log
  carry; the error body's ``request_id`` when the header is missing), ``None`` when there
  was no HTTP answer.

Hierarchy::

    Error
    ├── BadRequest          400
    ├── Unauthorized        401
    ├── Forbidden           403 (no admin key configured, or a client key for an admin route)
    ├── NotFound            404
    │   ├── ModelNotFound       code model_not_found
    │   └── SessionNotFound     code session_not_found
    ├── Conflict            409
    │   └── SessionBusy         code session_busy
    ├── Gone                410
    │   └── SessionExpired      code session_expired
    ├── TooLarge            413
    ├── ServerError         5xx
    │   ├── Unavailable         503 (after the client's retries)
    │   └── Timeout             504
    ├── TransportError      no HTTP answer (refused, reset, socket timeout, cut short)
    ├── ProtocolError       an answer the client cannot take: larger than the Client's
    │                       max_answer_bytes, not JSON, or JSON / binary tensors of the
    │                       wrong form (never retried)
    └── Unsupported         (also a ValueError) a call attnd cannot express, refused
                            before anything is sent (attnd.torch)
"""

__all__ = ["Error", "BadRequest", "Unauthorized", "NotFound", "ModelNotFound",
           "SessionNotFound", "Conflict", "SessionBusy", "Gone", "SessionExpired",
           "TooLarge", "ServerError", "Unavailable", "Timeout", "TransportError",
           "Forbidden", "ProtocolError", "Unsupported", "error_for"]


class Error(Exception):
    """Base of every attnd client error."""

    def __init__(self, message, status=None, code=None, field=None, retry_after=None,
                 body=None, request_id=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.retry_after = retry_after
        self.body = body
        self.request_id = request_id

    def __str__(self):
        parts = []
        if self.status is not None:
            parts.append(str(self.status))
        if self.code:
            parts.append(self.code)
        head = " ".join(parts)
        text = "%s: %s" % (head, self.message) if head else self.message
        if self.field:
            text += " (field %s)" % self.field
        return text

    def __repr__(self):
        return "%s(status=%r, code=%r, field=%r, message=%r, request_id=%r)" % (
            type(self).__name__, self.status, self.code, self.field, self.message,
            self.request_id)


class BadRequest(Error):
    """400: the request is malformed (shape, type, value, unknown field...)."""


class Unauthorized(Error):
    """401: a missing or wrong API key."""


class Forbidden(Error):
    """403: the key does not allow this (model repository changes need an admin key, and
    the server must have one configured)."""


class NotFound(Error):
    """404: no such route, model or session."""


class ModelNotFound(NotFound):
    """404 ``model_not_found``: no model of that name (or no default model)."""


class SessionNotFound(NotFound):
    """404 ``session_not_found``: no such session (never existed, or deleted)."""


class Conflict(Error):
    """409."""


class SessionBusy(Conflict):
    """409 ``session_busy``: another append to this session is in flight."""


class Gone(Error):
    """410."""


class SessionExpired(Gone):
    """410 ``session_expired``: evicted under the cache budget, or idle past its TTL."""


class TooLarge(Error):
    """413: the body or a size limit (``field`` names it) was exceeded."""


class ServerError(Error):
    """5xx: the server failed (the base of Unavailable and Timeout)."""


class Unavailable(ServerError):
    """503: not ready, draining, queue full, overloaded — still so after the retries."""


class Timeout(ServerError):
    """504: ``timeout_ms`` passed before the request was started."""


class TransportError(Error):
    """No HTTP answer: connection refused or reset, a socket timeout, a reply cut short
    or whose status line and headers are not HTTP."""


class ProtocolError(Error):
    """An HTTP answer the client cannot take: larger than the Client's
    ``max_answer_bytes`` (announced or as it arrives), a body that is not JSON (or nests
    too deep to parse), JSON of the wrong form for the route, or v2 tensors whose header,
    shape, datatype, ``binary_data_size`` or bytes do not agree. ``status`` and
    ``request_id`` are the answer's; the message names the culprit. Never retried: a
    server answering so is broken or is not attnd."""


class Unsupported(Error, ValueError):
    """A call attnd cannot express (raised before anything is sent), e.g. by
    :mod:`attnd.torch` for a mask form, dropout or gradients attnd does not have. Also a
    ``ValueError``."""


_BY_CODE = {
    "model_not_found": ModelNotFound,
    "session_not_found": SessionNotFound,
    "session_busy": SessionBusy,
    "session_expired": SessionExpired,
}

_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
              413: TooLarge, 503: Unavailable, 504: Timeout}


def error_for(status, message, code=None, field=None, retry_after=None, body=None,
              request_id=None):
    """The exception instance for an HTTP failure: by ``code`` first, then by status."""
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status is not None and status >= 500 else Error
    return cls(message, status=status, code=code, field=field, retry_after=retry_after,
               body=body, request_id=request_id)
