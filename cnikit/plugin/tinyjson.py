"""JSON for the plugin without importing `json` (which pulls in `re` and `enum`, ~8 ms of a
~20 ms plugin run): the C scanner and string encoder from `_json`, a small encoder on top.
"""

import _json

_WS = " \t\n\r"


class _Ctx:
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name):
        raise ValueError(f"{name} is not valid JSON")


_scan = _json.make_scanner(_Ctx())


def loads(s):
    if isinstance(s, (bytes, bytearray)):
        s = s.decode("utf-8")
    i, n = 0, len(s)
    while i < n and s[i] in _WS:
        i += 1
    try:
        value, end = _scan(s, i)
    except StopIteration:
        raise ValueError(f"expecting a JSON value at char {i}") from None
    except Exception as e:  # the C scanner raises json.JSONDecodeError (a ValueError)
        raise ValueError(str(e)) from None
    while end < n and s[end] in _WS:
        end += 1
    if end != n:
        raise ValueError(f"extra data at char {end}")
    return value


def dumps(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return _json.encode_basestring_ascii(v)
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("out of range float")
        return float.__repr__(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_json.encode_basestring_ascii(str(k))}: {dumps(x)}"
                               for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(dumps(x) for x in v) + "]"
    raise TypeError(f"cannot encode {type(v).__name__}")
