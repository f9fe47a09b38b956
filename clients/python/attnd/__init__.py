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
with ``status``, ``code``, ``field``, ``message`` and ``request_id`` (the answer's
``X-Request-Id``). An answer of the wrong form, or larger than ``max_answer_bytes`` (1 GiB
by default), is an :class:`attnd.ProtocolError`.

``attnd.torch`` (importable when torch is) has ``MultiheadAttention``, a drop-in
``torch.nn.MultiheadAttention`` whose computation is done by attnd.
"""
from .client import Client, Result, Session, _VERSION
from .errors import (BadRequest, Conflict, Error, Forbidden, Gone, ModelNotFound, NotFound,
                     ProtocolError, ServerError, SessionBusy, SessionExpired, SessionNotFound,
                     Timeout, TooLarge, TransportError, Unauthorized, Unavailable, Unsupported)
from ._tensors import HAVE_NUMPY

__version__ = _VERSION

__all__ = ["Client", "Result", "Session", "Error", "BadRequest", "Unauthorized", "NotFound",
           "ModelNotFound", "SessionNotFound", "Conflict", "SessionBusy", "Gone",
           "SessionExpired", "TooLarge", "ServerError", "Unavailable", "Timeout",
           "TransportError", "Forbidden", "ProtocolError", "Unsupported", "HAVE_NUMPY",
           "__version__"]
