"""Array helpers: numpy when importable (and not disabled with ATTND_NO_NUMPY=1), nested
lists otherwise. Nothing here talks to the network."""
import os

__all__ = ["np", "HAVE_NUMPY", "is_array", "json_default", "nested_shape", "reshape_flat",
           "flat_ints", "row_count",
           "to_numpy_float", "V2Unsupported", "v2_inputs"]


def _load_numpy():
    if os.environ.get("ATTND_NO_NUMPY", "").strip() not in ("", "0"):
        return None
    try:
        import numpy
    except ImportError:
        return None
    return numpy


np = _load_numpy()
HAVE_NUMPY = np is not None


def is_array(x):
    """True for a numpy array or an object numpy can view as one (a CPU torch tensor),
    when numpy is in use. Lists and tuples are never arrays here."""
    if np is None or x is None or isinstance(x, (list, tuple, str, bytes, dict)):
        return False
    return isinstance(x, np.ndarray) or hasattr(x, "__array__")


def _as_ndarray(x, dtype=None):
    if hasattr(x, "detach") and hasattr(x, "cpu"):   # a torch tensor
        x = x.detach().cpu()
    a = np.asarray(x)
    if dtype is not None and a.dtype != dtype:
        a = a.astype(dtype)
    return np.ascontiguousarray(a)


def json_default(o):
    """json.dumps hook: arrays, tensors and numpy scalars become plain Python values."""
    if hasattr(o, "detach") and hasattr(o, "tolist"):
        return o.detach().cpu().tolist()
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise TypeError("%s is not JSON serializable" % type(o).__name__)


def nested_shape(x):
    """The shape of a nested list (the first element at each level)."""
    shape = []
    while isinstance(x, (list, tuple)):
        shape.append(len(x))
        if not x:
            break
        x = x[0]
    return shape


def flat_ints(x):
    """position_ids as a flat list: a numpy array / tensor, or nested lists (a leading
    batch of one is flattened away like any other level)."""
    if is_array(x):
        return _as_ndarray(x).reshape(-1).tolist()
    out = []
    stack = [x]
    while stack:
        e = stack.pop()
        if isinstance(e, (list, tuple)):
            stack.extend(reversed(e))
        else:
            out.append(e)
    return out


def row_count(query):
    """T of a T×E query (nested lists or an array)."""
    return int(query.shape[0]) if hasattr(query, "shape") else len(query)


def reshape_flat(flat, shape):
    """A flat list -> nested lists of the given shape (row-major)."""
    flat = list(flat)
    if not shape:
        return flat[0] if flat else flat
    for d in reversed(shape[1:]):
        flat = [flat[i:i + d] for i in range(0, len(flat), d)]
    return flat


def to_numpy_float(nested):
    """Nested lists of numbers -> float32 arrays; a ragged level becomes a list of arrays."""
    if nested is None:
        return None
    try:
        return np.asarray(nested, dtype=np.float32)
    except ValueError:
        return [to_numpy_float(e) for e in nested]


class V2Unsupported(Exception):
    """The request cannot be expressed as a v2 infer request (then /v1 is used)."""


_FP32 = "<f4"


def v2_inputs(query, key=None, value=None, key_padding_mask=None, attn_mask=None,
              position_ids=None):
    """Builds the v2 input tensors from numpy-convertible arguments.

    Returns (tensors, squeeze) where tensors is a list of (name, ndarray, datatype) in
    request order and squeeze is True when the query was one sequence (T, E) and the
    answers' leading batch dimension is to be dropped. Raises V2Unsupported when the
    arguments need /v1 (ragged batches, per-sequence or per-head masks, non-bool padding
    masks, integer data that is not integral...)."""
    try:
        q = _as_ndarray(query)
    except ValueError:                   # a ragged batch: a list of arrays of unequal T
        raise V2Unsupported("query is a ragged batch")
    if q.ndim not in (2, 3) or q.dtype.kind not in "fiu":
        raise V2Unsupported("query is not a 2-D or 3-D numeric array")
    single = q.ndim == 2
    q = q.astype(_FP32, copy=False)
    if single:
        q = q[None]
    B = q.shape[0]
    out = [("query", q, "FP32")]

    def seq_tensor(name, x, rank_single):
        try:
            a = _as_ndarray(x)
        except ValueError:
            raise V2Unsupported("%s is ragged" % name)
        if a.ndim != rank_single + (0 if single else 1):
            raise V2Unsupported("%s rank does not match query" % name)
        return a if not single else a[None]

    if key is not None:
        k = seq_tensor("key", key, 2)
        if k.dtype.kind not in "fiu":
            raise V2Unsupported("key is not numeric")
        out.append(("key", k.astype(_FP32, copy=False), "FP32"))
    if value is not None:
        v = seq_tensor("value", value, 2)
        if v.dtype.kind not in "fiu":
            raise V2Unsupported("value is not numeric")
        out.append(("value", v.astype(_FP32, copy=False), "FP32"))
    if key_padding_mask is not None:
        m = seq_tensor("key_padding_mask", key_padding_mask, 1)
        if m.dtype != np.bool_:
            raise V2Unsupported("key_padding_mask is not boolean")
        out.append(("key_padding_mask", m.astype(np.uint8), "BOOL"))
    if attn_mask is not None:
        try:
            m = _as_ndarray(attn_mask)
        except ValueError:
            raise V2Unsupported("attn_mask is ragged")
        if m.ndim != 2:                  # (T,S) is the only shape v2 has (shared by the batch)
            raise V2Unsupported("attn_mask is not 2-D")
        if m.dtype == np.bool_:
            out.append(("attn_mask", m.astype(np.uint8), "BOOL"))
        elif m.dtype.kind in "fiu":
            out.append(("attn_mask", m.astype(_FP32, copy=False), "FP32"))
        else:
            raise V2Unsupported("attn_mask dtype")
    if position_ids is not None:
        p = seq_tensor("position_ids", position_ids, 1)
        if p.dtype.kind not in "iu":
            raise V2Unsupported("position_ids is not integral")
        out.append(("position_ids", p.astype("<i8", copy=False), "INT64"))
    for name, a, _ in out:
        if name != "attn_mask" and a.shape[0] != B:
            raise V2Unsupported("%s batch size differs from query" % name)
    return [(n, np.ascontiguousarray(a), t) for n, a, t in out], single
