"""Checks of what the server answers. Every answer the client hands back has first been
checked to have the form its route promises (JSON types, nesting, numbers; v2 tensor
headers, shapes, datatypes and byte counts); anything else raises :class:`Malformed`, which
the client turns into :class:`attnd.ProtocolError` carrying the answer's status and
``X-Request-Id``. Nothing here talks to the network."""
import json

from . import _tensors as T

__all__ = ["Malformed", "parse_json", "kind", "need", "opt", "nested_numbers",
           "v2_tensors", "header_length"]


class Malformed(Exception):
    """The answer does not have the form the route promises (the message says how)."""


def kind(x):
    """A JSON value's kind, for messages."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, (int, float)):
        return "a number"
    if isinstance(x, str):
        return "a string"
    if isinstance(x, list):
        return "a list"
    if isinstance(x, dict):
        return "an object"
    return type(x).__name__


def parse_json(body, what="the answer"):
    """JSON from bytes; Malformed when it is not UTF-8 JSON or nests too deep for Python's
    parser (RecursionError)."""
    try:
        return json.loads(bytes(body).decode("utf-8"))
    except RecursionError:
        raise Malformed("%s is not JSON the client can read: it nests too deep" % what)
    except (ValueError, UnicodeDecodeError) as e:
        raise Malformed("%s is not JSON: %s" % (what, e))


_KIND_NAME = {dict: "a JSON object", list: "a JSON list", str: "a string", int: "an integer"}


def need(d, key, types, what=None):
    """d[key], which must be present and of ``types`` (bool never counts as int)."""
    if key not in d:
        raise Malformed("%s has no '%s'" % (what or "the answer", key))
    return opt(d, key, types)


def opt(d, key, types):
    """d[key] when present and not null, else None; Malformed when of another type."""
    v = d.get(key)
    if v is None:
        return None
    types = types if isinstance(types, tuple) else (types,)
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
        raise Malformed("%s is not %s (got %s)" % (key, " or ".join(
            _KIND_NAME.get(t, t.__name__) for t in types), kind(v)))
    return v


_NUMS = frozenset((float, int))       # JSON numbers as json.loads makes them (bool excluded)


def _first_not_number(v):
    return next(i for i, e in enumerate(v) if type(e) not in _NUMS)


def _depth(x):
    d = 0
    while isinstance(x, list):
        d += 1
        if not x:
            break
        x = x[0]
    return d


def nested_numbers(x, depth, name):
    """x must be lists nested exactly ``depth`` deep (a level may be ragged) with numbers
    (not booleans) at the bottom."""
    got = _depth(x)
    if got != depth:
        raise Malformed("%s: expected numbers nested %d deep, got %s nested %d deep"
                        % (name, depth, kind(x), got))

    def walk(v, level, path):
        if not isinstance(v, list):
            raise Malformed("%s%s is %s, not a list" % (name, path, kind(v)))
        if level == depth - 1:
            if not set(map(type, v)) <= _NUMS:
                i = _first_not_number(v)
                raise Malformed("%s%s[%d] is not a number (%s)" % (name, path, i, kind(v[i])))
        else:
            for i, e in enumerate(v):
                walk(e, level + 1, "%s[%d]" % (path, i))
    walk(x, 0, "")


def header_length(value, body_len):
    """The Inference-Header-Content-Length header's value: decimal digits, at most the
    body's length."""
    text = value.strip()
    if not (text.isascii() and text.isdigit()):
        raise Malformed("Inference-Header-Content-Length %r is not a byte count" % value)
    n = int(text)
    if n > body_len:
        raise Malformed("Inference-Header-Content-Length %d runs past the body's %d bytes"
                        % (n, body_len))
    return n


def _shape(o, label):
    shape = o.get("shape")
    if shape is None:
        raise Malformed("%s has no shape" % label)
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise Malformed("%s: shape %s is not a list of integers >= 0"
                        % (label, json.dumps(shape)[:80]))
    return shape


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _flatten(data, label):
    """v2 ``data``: a flat list of numbers (as attnd sends it) or nested lists of them."""
    if not isinstance(data, list):
        raise Malformed("%s: data is %s, not a list" % (label, kind(data)))
    kinds = set(map(type, data))
    if kinds <= _NUMS:
        return data
    out = []
    for i, e in enumerate(data):
        if isinstance(e, list):
            out.extend(_flatten(e, label))
        elif type(e) in _NUMS:
            out.append(e)
        else:
            raise Malformed("%s: data[%d] is not a number (%s)" % (label, len(out), kind(e)))
    return out


def v2_tensors(header, body, offset, binary_ok):
    """The ``outputs`` of a v2 answer's header as {name: (shape, flat source)}: a source is
    ``("bin", offset)`` for binary data at that offset of ``body`` (each output's bytes
    follow the previous one's) or ``("data", flat list of numbers)``. Checks every
    output: an object with a name, a shape of integers >= 0, datatype FP32 (when given),
    binary_data_size an integer equal to 4 x the shape's count and within the body, or
    ``data`` numbers as many as the shape holds. ``binary_ok`` False (no header length, or
    no numpy): binary outputs are Malformed."""
    outputs = header.get("outputs", [])
    if not isinstance(outputs, list):
        raise Malformed("outputs is not a list (got %s)" % kind(outputs))
    found = {}
    for i, o in enumerate(outputs):
        if not isinstance(o, dict):
            raise Malformed("outputs[%d] is not a JSON object (got %s)" % (i, kind(o)))
        name = o.get("name")
        if not isinstance(name, str):
            raise Malformed("outputs[%d] has no name (a string)" % i)
        label = "outputs[%d] (%r)" % (i, name)
        if name in found:
            raise Malformed("%s: a second output of that name" % label)
        shape = _shape(o, label)
        dt = o.get("datatype", "FP32")
        if dt != "FP32":
            raise Malformed("%s: datatype %s (attnd answers FP32 only)" % (label, dt))
        params = o.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise Malformed("%s: parameters is not a JSON object" % label)
        size = (params or {}).get("binary_data_size")
        count = _count(shape)
        if size is not None:
            if type(size) is not int or size < 0:
                raise Malformed("%s: binary_data_size %s is not an integer >= 0"
                                % (label, json.dumps(size)[:40]))
            if not binary_ok:
                raise Malformed("%s is binary data, which this answer cannot carry here "
                                "(no Inference-Header-Content-Length, or numpy not in use)"
                                % label)
            if size != 4 * count:
                raise Malformed("%s: shape %s is %d bytes of FP32, binary_data_size says %d"
                                % (label, shape, 4 * count, size))
            if offset + size > len(body):
                raise Malformed("%s: binary_data_size %d but only %d bytes follow"
                                % (label, size, len(body) - offset))
            found[name] = (shape, ("bin", offset))
            offset += size
        else:
            if "data" not in o:
                raise Malformed("%s has neither data nor binary_data_size" % label)
            flat = _flatten(o["data"], label)
            if len(flat) != count:
                raise Malformed("%s: shape %s holds %d numbers, data has %d"
                                % (label, shape, count, len(flat)))
            found[name] = (shape, ("data", flat))
    return found


def v2_array(body, shape, source, numpy_out):
    """One checked output as a float32 array (numpy_out, numpy in use) or nested lists."""
    how, src = source
    if how == "bin":
        a = T.np.frombuffer(body, dtype="<f4", count=_count(shape), offset=src)
        a = a.astype(T.np.float32).reshape(shape)
        return a if numpy_out else a.tolist()
    if numpy_out and T.HAVE_NUMPY:
        return T.np.asarray(src, dtype=T.np.float32).reshape(shape)
    return T.reshape_flat(src, shape)
