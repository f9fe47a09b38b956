"""attnd — a Python client for the attnd attention inference server.

Standard library only; numpy is used when importable (set ``ATTND_NO_NUMPY=1`` to act as
if it were not). Quick start::

    import attnd
    client = attnd.Client("http://127.0.0.1:8080", api_key=None)
    r = client.attention([[0.1] * 64] * 3, model="demo", is_causal=True, need_weights=True)
    r.output, r.weights, r.timing
    with client.session("demo") as s:
        s.append([[0.1] * 64])

Errors are :class:`attnd.Error` subclasses (``attnd.errors`` documents the tree), each
with ``status``, ``code``, ``field`` and ``message``.
"""
from .client import Client, Result, Session, _VERSION
from .errors import (BadRequest, Conflict, Error, Forbidden, Gone, ModelNotFound, NotFound,
                     ServerError, SessionBusy, SessionExpired, SessionNotFound, Timeout,
                     TooLarge, TransportError, Unauthorized, Unavailable)
from ._tensors import HAVE_NUMPY

__version__ = _VERSION

__all__ = ["Client", "Result", "Session", "Error", "BadRequest", "Unauthorized", "NotFound",
           "ModelNotFound", "SessionNotFound", "Conflict", "SessionBusy", "Gone",
           "SessionExpired", "TooLarge", "ServerError", "Unavailable", "Timeout",
           "TransportError", "Forbidden", "HAVE_NUMPY", "__version__"]
