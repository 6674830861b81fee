"""JSON at any nesting depth, shared by the schema readers and writers.

The standard library's ``json`` recurses once per nesting level (its C scanner and encoder
check the interpreter's recursion limit), and so does fastavro's schema parser, in C, without
any check. Schema documents may nest deeper than either takes, so:

* :func:`loads` is ``json.loads`` (same values, same errors and positions), falling back to an
  iterative decoder when ``json.loads`` runs out of recursion depth; it raises
  :class:`~odf_chain.errors.SchemaError` naming the document and the position;
* :func:`dumps` and :func:`canonical` write compact JSON iteratively;
* :func:`depth` measures nesting iteratively, and :func:`check_depth` refuses a value nested
  deeper than :data:`MAX_NESTING` levels: the limit for anything handed to a recursive parser
  such as fastavro, which would otherwise crash the process (not raise) a few thousand levels
  down on a small thread stack;
* :func:`show` is ``repr`` for error messages, safe for deep values (``repr`` recurses).

Nothing here changes the interpreter's recursion limit or recurses per nesting level.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from json.decoder import JSONDecodeError, scanstring
from json.encoder import encode_basestring
from typing import Any, NamedTuple

from odf_chain.errors import SchemaError

__all__ = [
    "MAX_NESTING",
    "canonical",
    "check_depth",
    "decode",
    "depth",
    "dumps",
    "loads",
    "show",
]

#: Values nested deeper than this many levels are refused by :func:`check_depth`.
MAX_NESTING = 1000

PairsHook = Callable[[list[tuple[str, Any]]], Any]
Children = Callable[[Any], "Iterable[Any] | None"]

# --------------------------------------------------------------------------------------------
# reading


def loads(
    text: str | bytes | bytearray,
    *,
    what: str,
    object_pairs_hook: PairsHook | None = None,
) -> Any:
    """``json.loads(text, object_pairs_hook=...)`` at any depth.

    Bytes are decoded as UTF-8 (no encoding detection, a byte order mark is an error, as for a
    str). Every failure is a :class:`SchemaError` starting with ``what``: ``"<what> is not
    UTF-8: ..."`` or ``"<what> is not valid JSON: <reason>: line L column C (char P)"``. A
    ``ValueError`` raised by ``object_pairs_hook`` (say, for a duplicate key) is reported the
    same way, at the object's opening brace; to find that position the document is read a
    second time, so the hook may be called again for the same objects.
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{what} is not UTF-8: {exc}") from None
    if not isinstance(text, str):
        raise TypeError(
            f"the JSON object must be str, bytes or bytearray, not {type(text).__name__}"
        )
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except JSONDecodeError as exc:
        raise SchemaError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        pass  # nested deeper than the C scanner goes: read it without recursion
    except ValueError as exc:
        # From the hook or from int() (too many digits): json gives no position, so find it.
        try:
            decode(text, object_pairs_hook=object_pairs_hook)
        except ValueError as positioned:
            raise SchemaError(f"{what} is not valid JSON: {positioned}") from None
        raise SchemaError(f"{what} is not valid JSON: {exc}") from None
    try:
        return decode(text, object_pairs_hook=object_pairs_hook)
    except ValueError as exc:
        raise SchemaError(f"{what} is not valid JSON: {exc}") from None


_WS = re.compile(r"[ \t\n\r]*")
# json.scanner.NUMBER_RE, but ASCII digits only (its \d would take other scripts' digits,
# which the C scanner refuses).
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_CONSTANTS = (
    ("null", None),
    ("true", True),
    ("false", False),
    ("NaN", float("nan")),
    ("Infinity", float("inf")),
    ("-Infinity", float("-inf")),
)


def decode(s: str, object_pairs_hook: PairsHook | None = None) -> Any:
    """``json.loads(s, object_pairs_hook=...)`` without recursion: the same values, and
    :class:`json.JSONDecodeError` with the same message and position for malformed text. A
    ``ValueError`` from the hook, or from ``int()`` for a number with too many digits, becomes a
    ``JSONDecodeError`` at the object's (the number's) start. Prefer :func:`loads`; this is
    the fallback it uses."""
    ws = _WS.match
    n = len(s)
    # one frame per open container: [items, pending key or None for an array, start position]
    stack: list[list[Any]] = []

    def key_at(pos: int) -> tuple[str, int]:
        if pos >= n or s[pos] != '"':
            raise JSONDecodeError("Expecting property name enclosed in double quotes", s, pos)
        key, pos = scanstring(s, pos + 1, True)
        pos = ws(s, pos).end()
        if pos >= n or s[pos] != ":":
            raise JSONDecodeError("Expecting ':' delimiter", s, pos)
        return key, ws(s, pos + 1).end()

    def close_object(pairs: list[tuple[str, Any]], start: int) -> Any:
        if object_pairs_hook is None:
            return dict(pairs)
        try:
            return object_pairs_hook(pairs)
        except JSONDecodeError:
            raise
        except ValueError as exc:
            raise JSONDecodeError(str(exc), s, start) from None

    if s.startswith("\ufeff"):
        raise JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", s, 0)
    pos = ws(s, 0).end()
    while True:
        # read one value at pos (or open a container)
        c = s[pos] if pos < n else ""
        value: Any
        if c == "{":
            start = pos
            pos = ws(s, pos + 1).end()
            if pos < n and s[pos] == "}":
                value = close_object([], start)
                pos += 1
            else:
                key, pos = key_at(pos)
                stack.append([[], key, start])
                continue
        elif c == "[":
            pos = ws(s, pos + 1).end()
            if pos < n and s[pos] == "]":
                value = []
                pos += 1
            else:
                stack.append([[], None, pos])
                continue
        elif c == '"':
            value, pos = scanstring(s, pos + 1, True)
        else:
            m = _NUMBER.match(s, pos)
            if m is not None:
                integer, frac, exp = m.groups()
                try:
                    value = float(m.group()) if frac or exp else int(integer)
                except ValueError as exc:  # more digits than int() converts
                    raise JSONDecodeError(str(exc), s, pos) from None
                pos = m.end()
            else:
                for word, constant in _CONSTANTS:
                    if s.startswith(word, pos):
                        value = constant
                        pos += len(word)
                        break
                else:
                    raise JSONDecodeError("Expecting value", s, pos)
        # hand the value to its container, closing every container that ends here
        while True:
            if not stack:
                pos = ws(s, pos).end()
                if pos != n:
                    raise JSONDecodeError("Extra data", s, pos)
                return value
            frame = stack[-1]
            items, key = frame[0], frame[1]
            items.append(value if key is None else (key, value))
            pos = ws(s, pos).end()
            c = s[pos] if pos < n else ""
            if c == ",":
                pos = ws(s, pos + 1).end()
                if key is not None:
                    frame[1], pos = key_at(pos)
                break
            if c == ("]" if key is None else "}"):
                stack.pop()
                value = items if key is None else close_object(items, frame[2])
                pos += 1
                continue
            raise JSONDecodeError("Expecting ',' delimiter", s, pos)


# --------------------------------------------------------------------------------------------
# writing

_leaf = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


class _Text(str):
    """Already written JSON text on the writer's stack (never a user value: those are plain
    strings or their own subclasses, written as JSON strings)."""

    __slots__ = ()


_CLOSE = object()  # marks the end of a container on the writer's stack


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False,
    sort_keys=sort_keys)`` without recursion: the same text and the same errors (TypeError for
    what JSON cannot hold, ValueError for NaN, infinities and circular references)."""
    return _write(value, sort_keys, str_keys=False)


def canonical(value: Any) -> str:
    """Canonical JSON text: keys sorted, no whitespace, non-ASCII as is, written without
    recursion. Object keys must be strings (``json`` would turn ``1`` into ``"1"``, so that two
    different values got one text): a :class:`SchemaError` otherwise; other errors as
    :func:`dumps`."""
    return _write(value, True, str_keys=True)


def _key_text(key: Any, str_keys: bool) -> str:
    """An object key as ``json`` writes it (it turns numbers, booleans and None into text)."""
    if isinstance(key, str):
        return key
    if str_keys:
        raise SchemaError(f"JSON object key {key!r} is not a string")
    if isinstance(key, float):
        return _leaf(key)
    if key is True or key is False or key is None:
        return _leaf(key)
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


class _Key(NamedTuple):
    """An object key still to be written (and whether a comma goes before it)."""

    key: Any
    comma: bool


def _write(value: Any, sort_keys: bool, str_keys: bool) -> str:
    out: list[str] = []
    open_ids: set[int] = set()  # containers being written: a repeat is a circular reference
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is _Text:
            out.append(item)
        elif type(item) is _Key:
            text = encode_basestring(_key_text(item.key, str_keys)) + ":"
            out.append("," + text if item.comma else text)
        elif item is _CLOSE:
            open_ids.discard(id(stack.pop()))
        elif isinstance(item, dict):
            if id(item) in open_ids:
                raise ValueError("Circular reference detected")
            pairs = list(item.items())
            if sort_keys:
                pairs.sort()
            parts: list[Any] = [item, _CLOSE, _Text("}")]
            for i in range(len(pairs) - 1, -1, -1):
                key, v = pairs[i]
                parts.append(v)
                # the key is turned into text only when reached, as json does (errors in order)
                parts.append(_Key(key, bool(i)))
            open_ids.add(id(item))
            out.append("{")
            stack.extend(parts)
        elif isinstance(item, list | tuple):
            if id(item) in open_ids:
                raise ValueError("Circular reference detected")
            parts = [item, _CLOSE, _Text("]")]
            for i in range(len(item) - 1, -1, -1):
                parts.append(item[i])
                if i:
                    parts.append(_Text(","))
            open_ids.add(id(item))
            out.append("[")
            stack.extend(parts)
        else:
            out.append(_leaf(item))
    return "".join(out)


# --------------------------------------------------------------------------------------------
# depth


def _json_children(value: Any) -> Iterable[Any] | None:
    if isinstance(value, dict):
        return value.values()
    if isinstance(value, list | tuple):
        return value
    return None


def depth(value: Any, children: Children | None = None) -> int:
    """How deeply ``value`` nests: 0 for a scalar, 1 for ``[]`` or ``{"a": 1}``, 2 for
    ``[[]]``, and so on, measured without recursion (a value reused in several places is
    measured once). ``children`` redefines what nests: it returns the values directly inside
    a value (which must be part of ``value``, not made up), or None for a value that does not
    count as a level; the default follows JSON objects and arrays (dicts, lists, tuples).
    Raises ValueError for a circular reference."""
    inside = children or _json_children
    top = inside(value)
    if top is None:
        return 0
    heights: dict[int, int] = {}  # finished containers
    open_ids = {id(value)}
    # frames: [container, iterator over its children, greatest height below it so far]
    stack: list[list[Any]] = [[value, iter(top), 0]]
    while True:
        frame = stack[-1]
        for child in frame[1]:
            known = heights.get(id(child))
            if known is not None:
                frame[2] = max(frame[2], known)
                continue
            below = inside(child)
            if below is None:
                continue
            if id(child) in open_ids:
                raise ValueError("Circular reference detected")
            open_ids.add(id(child))
            stack.append([child, iter(below), 0])
            break
        else:
            stack.pop()
            height = frame[2] + 1
            heights[id(frame[0])] = height
            open_ids.discard(id(frame[0]))
            if not stack:
                return height
            stack[-1][2] = max(stack[-1][2], height)


def check_depth(value: Any, what: str, children: Children | None = None) -> None:
    """Refuse ``value`` (a :class:`SchemaError` naming ``what``) when it nests deeper than
    :data:`MAX_NESTING` levels as :func:`depth` counts them, or refers to itself."""
    try:
        levels = depth(value, children)
    except ValueError:
        raise SchemaError(f"{what} contains a circular reference") from None
    if levels > MAX_NESTING:
        raise SchemaError(
            f"{what} is nested {levels} levels deep; at most {MAX_NESTING} are supported"
        )


_SHOW_LEVELS = 50  # repr takes a frame or two per level: far below the recursion limit


def show(value: Any) -> str:
    """``repr(value)``, for an error message; a value nested more than a few dozen levels
    deep (``repr`` recurses, and would raise RecursionError) is described instead, as in
    ``<list nested 5000 levels deep>``."""
    try:
        levels = depth(value)
    except ValueError:  # circular: repr copes
        return repr(value)
    if levels <= _SHOW_LEVELS:
        return repr(value)
    return f"<{type(value).__name__} nested {levels} levels deep>"
