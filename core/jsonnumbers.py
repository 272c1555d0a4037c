"""JSON numbers as written: decode and re-encode JSON without turning numbers into floats.

orjson reads an integer beyond 64 bits (`98765432109876543210`) or a decimal
(`0.10000000000000000555`, `1.50`) as a Python float and writes that float back
(`9.876543210987654e+19`, `0.1`, `1.5`). A 20-digit account number a user typed would then be
missing from the arguments lexkeep keeps "as recorded", and the guard would scan a number that
was never proposed. A value that holds a float is therefore decoded again by the standard
library, which hands over each number's text (`Number`), and written from that. Values without
a float (nearly all tool arguments) never get there: they keep orjson's speed and its output.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson


class Number(str):
    """A JSON number as its text in the source (`98765432109876543210`, `1.50`, `1E5`)."""

    __slots__ = ()


def holds_float(value: Any) -> bool:
    """True when a value decoded by orjson is, or holds, a float (a number it may have changed).

    Only containers are walked, with exact type checks: a few hundred nanoseconds for usual
    tool arguments (a flat object), a few microseconds for a list of objects (a todo list).
    """
    kind = type(value)
    if kind is float:
        return True
    if kind is not dict and kind is not list:
        return False
    stack = [value]
    while stack:
        item = stack.pop()
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is float:
                return True
            if kind is dict or kind is list:
                stack.append(child)
    return False


def loads_exact(text: str | bytes) -> Any:
    """Decode JSON text as orjson would, except that every number is a `Number` (its text).

    For text orjson accepted: the standard library reads the same values (a repeated key keeps
    its first place and its last value in both) and, unlike orjson, no NaN or Infinity is left
    to meet. Raises ValueError or RecursionError (nesting deeper than Python's limit).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(text, parse_int=Number, parse_float=Number)


def compact_text(value: Any) -> str:
    """orjson's compact JSON text of a decoded value, also when it nests deeper than orjson
    writes (254 levels; orjson reads up to 1024): then the standard library's, same form."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        pass
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * _MAX_DEPTH))  # the encoder recurses once per level
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    finally:
        sys.setrecursionlimit(limit)


_MAX_DEPTH = 1024  # orjson refuses to read JSON nested deeper than this


def _fragment(value: Any) -> orjson.Fragment:
    if type(value) is Number:
        return orjson.Fragment(str(value))
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps_exact(value: Any) -> str:
    """Compact JSON text of a `loads_exact` value: orjson's output, each number as written."""
    # A Number is a str: without PASSTHROUGH_SUBCLASS orjson would write it as a JSON string.
    return orjson.dumps(value, default=_fragment, option=orjson.OPT_PASSTHROUGH_SUBCLASS).decode()


def parsed_json(text: str) -> Any:
    """The decoded value of JSON `text` as a store's JSON column should get it (the parsed
    `arguments` of a tool call): orjson's value, or, when that holds a float (a number orjson
    may have changed: an integer beyond 64 bits, a decimal), the text compacted with every
    number as written, as an `orjson.Fragment` that orjson writes as it is. DuckDB reads that
    back with integers of any size exact, decimals as the numbers they write (`1.50` is 1.5).

    Raises orjson.JSONDecodeError when `text` is not JSON.
    """
    value = orjson.loads(text)
    if not holds_float(value):
        return value
    try:
        return orjson.Fragment(dumps_exact(loads_exact(text)))
    except (ValueError, RecursionError, orjson.JSONEncodeError):
        return value  # deeper than either writer goes: orjson's reading


_MISSING = object()


def counterparts(root: Any, source: str | bytes) -> dict[int, Any]:
    """Each dict, list and float inside `root` (orjson's decoding of `source`), by id(), mapped
    to the same value as `loads_exact` decodes it; empty when `source` cannot be decoded again.

    Keep `root` alive while the map is used: the ids are those of its values.
    """
    try:
        exact = loads_exact(source)
    except (ValueError, RecursionError):
        return {}
    found: dict[int, Any] = {}
    stack = [(root, exact)]
    while stack:
        mine, theirs = stack.pop()
        kind = type(mine)
        if kind is dict and type(theirs) is dict:
            if list(mine) == list(theirs):  # same keys, same order: the same object
                found[id(mine)] = theirs
                stack.extend(zip(mine.values(), theirs.values(), strict=True))
        elif kind is list and type(theirs) is list and len(mine) == len(theirs):
            found[id(mine)] = theirs
            stack.extend(zip(mine, theirs, strict=True))
        elif kind is float:
            found[id(mine)] = theirs
    return found


def exact_text(
    part: Any, root: Any, source: str | bytes, *, parts: dict[int, Any] | None = None
) -> str:
    """`part` as compact JSON text, every number written as in `source`.

    `root` is what orjson decoded from the JSON text `source`, and `part` is `root` or a value
    inside it (a tool call's `input` inside its trace line). Without a float in `part`, or when
    `source` cannot be read again, this is orjson's text of `part`, as it always was. `parts`
    is `counterparts(root, source)` when the caller keeps it for several values of one source.
    """
    if source and holds_float(part):
        return float_text(part, counterparts(root, source) if parts is None else parts)
    return compact_text(part)


def float_text(part: Any, parts: dict[int, Any]) -> str:
    """`exact_text` of a `part` known to hold a float (`holds_float`), given `counterparts`
    of its source: for a caller that made that test already."""
    exact = parts.get(id(part), _MISSING)
    if exact is not _MISSING:
        try:
            return dumps_exact(exact)
        except orjson.JSONEncodeError:
            pass  # nested deeper than orjson writes: its numbers as orjson read them
    return compact_text(part)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _canonical(text: str) -> str | None:
    """`text`'s JSON value written with its keys sorted, compactly, each number as written;
    None when `text` is not JSON (or nests deeper than that can be written)."""
    try:
        value = json.loads(text, parse_int=Number, parse_float=Number, parse_constant=_no_constant)
        return orjson.dumps(
            value,
            default=_fragment,
            option=orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_SORT_KEYS,
        ).decode()
    except (ValueError, RecursionError, orjson.JSONEncodeError):
        return None


def same_json(first: str, second: str) -> bool:
    """True when two texts are one JSON value written twice: equal, or JSON that differs only
    in key order, spacing and escapes (a client that sends a tool call's arguments back as it
    decoded them). Numbers are compared as written (`1.50` is not `1.5`), as lexkeep keeps
    them; text that is not JSON only equals itself."""
    if first == second:
        return True
    canonical = _canonical(first)
    return canonical is not None and canonical == _canonical(second)
