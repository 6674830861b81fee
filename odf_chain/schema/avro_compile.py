"""Avro schema JSON -> a checked tree of named types: the first half of
:mod:`odf_chain.schema.avro_paths`.

Compiling does what avro-python's parser does before DataHub sees a schema (resolve names and
namespaces, refuse what Avro refuses, keep the properties DataHub reads); walking the tree into
v2 field paths is :mod:`~odf_chain.schema.avro_paths`' part. They are apart because the first is
Avro's rules and the second DataHub's procedure: a fix to one must not move the other. Like the
walk, compiling never recurses per nesting level.
"""

from __future__ import annotations

import math
import re
from typing import Any

import fastavro

from odf_chain.errors import SchemaError
from odf_chain.schema._json import MAX_NESTING, loads, show

_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
# Keys avro-python keeps out of a schema's / a field's "other props" (DataHub reads the rest:
# native_data_type, _nullable, deprecated, logicalType).
_SCHEMA_RESERVED = frozenset(
    ("type", "name", "namespace", "fields", "items", "size", "symbols", "values", "doc")
)
_FIELD_RESERVED = frozenset(("default", "name", "doc", "order", "type"))
_ORDERS = frozenset(("ascending", "descending", "ignore"))
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# DataHub's type classes, lower-cased without "TypeClass", by Avro type and by logical type.
TYPE_CLASS = {
    "null": "null",
    "boolean": "boolean",
    "int": "number",
    "long": "number",
    "float": "number",
    "double": "number",
    "bytes": "bytes",
    "string": "string",
    "record": "record",
    "error": "record",  # DataHub has no class for it (and fails); see the module docstring
    "map": "map",
    "enum": "enum",
    "array": "array",
    "union": "union",
    "fixed": "fixed",
}
LOGICAL_CLASS = {
    "date": "date",
    "decimal": "number",
    "time-micros": "time",
    "time-millis": "time",
    "timestamp-micros": "time",
    "timestamp-millis": "time",
    "uuid": "string",
}

MISSING: Any = object()
_TOKENS = {t: f"[type={t}]" for t in TYPE_CLASS}


class Node:
    """One Avro schema (a definition, or a primitive)."""

    __slots__ = (
        "doc",
        "fullname",
        "kind",
        "members",
        "nullable",
        "props",
        "subs",
        "token",
        "type_name",
        "under",
        "where",
    )

    def __init__(self, kind: str, type_name: str, props: dict, where: Any) -> None:
        self.kind = kind  # primitive, enum, fixed, record, array, map, union
        self.type_name = type_name  # avro-python's Schema.type
        self.props = props  # non-reserved properties
        self.doc = None  # records and enums only, as in avro-python
        self.fullname = ""
        self.token = _TOKENS.get(type_name) or f"[type={type_name}]"
        self.subs: tuple | list = ()  # what DataHub walks below this schema
        self.under: Node | None = None  # the non-null member of a null + one other union
        self.members: list = []
        # DataHub's _is_nullable (unions are settled once their members are known)
        self.nullable = type_name == "null" or (bool(props.get("_nullable")) if props else False)
        self.where = where


class Field:
    __slots__ = ("cache", "default", "doc", "kind", "name", "props", "token", "type")

    def __init__(self, name: str, doc: Any, default: Any, props: dict) -> None:
        self.kind = "field"
        self.name = name
        token = name.rsplit(".", 1)[-1] if "." in name else name
        self.token = _rewrite(token) if token.startswith("__struct") else token
        self.doc = doc
        self.default = default  # None when absent or null: DataHub shows neither
        self.props = props
        self.type: Node = None  # type: ignore[assignment]
        self.cache: tuple | None = None


# --------------------------------------------------------------------------- decoding


def decode_schema(schema: Any) -> Any:
    if isinstance(schema, (dict, list)):
        return schema
    if not isinstance(schema, str):
        raise TypeError(f"an Avro schema is JSON text, a dict or a list, not {type(schema)}")
    return loads(schema, what="Avro schema")  # at any depth: too deep for json.loads is fine


# --------------------------------------------------------------------------- compiling


def _rewrite(name: str) -> str:
    """DataHub's special case for Spark's generated struct names."""
    if name.startswith("__struct_"):
        return "struct"
    if name.startswith("__structn_"):
        return "struct" + name.split("_")[3]
    return name


def _render(where: Any) -> str:
    """A location kept as nested (parent, label) pairs, as text (its middle elided if long)."""
    labels = []
    while isinstance(where, tuple):
        if len(where) == 3:  # (parent, record name, field name)
            where, record, field = where
            labels.append(f"field {record}.{field}")
            continue
        where, label = where
        labels.append(f"union member {label}" if type(label) is int else label)
    labels.append(where)
    labels.reverse()
    if len(labels) > 6:
        labels[2:-3] = [f"... {len(labels) - 5} levels ..."]
    return " > ".join(labels)


def _fail(where: Any, message: str) -> SchemaError:
    return SchemaError(f"{_render(where)}: {message}")


def compile_schema(obj: Any) -> Node:
    """Validate the decoded schema and build its graph, without recursion.

    Named types are registered in the order avro-python (and fastavro) meet them: depth first,
    in document order, a record before its fields, so that exactly the same references resolve.
    """
    names: dict[str, Node] = {}
    prims = {t: Node("primitive", t, _NO_PROPS, "schema") for t in _PRIMITIVES}
    unions: list[Node] = []
    defaults: list[tuple[Field, Any, Any]] = []
    root: list[Any] = [None]
    # (json, enclosing namespace, depth, target, slot, where)
    work: list[tuple] = [(obj, "", 1, root, 0, "schema")]
    pop = work.pop
    push = work.append
    while work:
        js, ns, depth, target, slot, where = pop()
        if depth > MAX_NESTING and type(js) is not str:
            raise _fail(where, f"the schema nests deeper than {MAX_NESTING} levels")
        if type(js) is str:
            node = prims.get(js)
            if node is None:
                full = js if "." in js or not ns else f"{ns}.{js}"
                node = names.get(full)
                if node is None:
                    known = f" (resolved as {full!r})" if full != js else ""
                    raise _fail(where, f"unknown type {js!r}{known}")
        elif type(js) is list:
            node = Node("union", "union", _NO_PROPS, where)
            node.members = members = [None] * len(js)
            unions.append(node)
            for i in range(len(js) - 1, -1, -1):
                member = js[i]
                if type(member) is str and member in prims:
                    members[i] = prims[member]  # the common case, short-cut
                else:
                    push((member, ns, depth + 1, members, i, (where, i)))
        elif isinstance(js, dict):
            node = _compile_object(js, ns, depth, where, names, prims, defaults, push)
        else:
            raise _fail(where, f"not an Avro schema: {js!r}")
        if type(slot) is int:
            target[slot] = node
        else:
            target.type = node

    for union in unions:
        _finish_union(union)
    for field, default, where in defaults:
        if not _default_ok(default, field.type):
            raise _fail(where, f"default {show(default)} does not match the field's type")

    try:
        # fastavro is the reference validator; the checks above name the field for everything
        # it looks at, except defaults, which we check ourselves (fastavro refuses an integer
        # default for {"type": "double"} yet accepts one for "double").
        fastavro.parse_schema(obj, _ignore_default_error=True)
    except TypeError as e:
        if "_ignore_default_error" not in str(e):
            raise SchemaError(f"invalid Avro schema: {e}") from None
        try:
            fastavro.parse_schema(obj)
        except Exception as e2:
            raise SchemaError(f"invalid Avro schema: {e2}") from None
    except RecursionError:
        # Only fastavro's pure-Python fallback recurses in Python; our own checks above cover
        # what it would look at, so a deep schema is not refused for that.
        pass
    except Exception as e:
        raise SchemaError(f"invalid Avro schema: {type(e).__name__}: {e}") from None
    return root[0]


def _compile_object(
    js: dict,
    ns: str,
    depth: int,
    where: Any,
    names: dict,
    prims: dict,
    defaults: list,
    push: Any,
) -> Node:
    t = js.get("type", MISSING)
    if t is MISSING:
        raise _fail(where, 'a schema object needs a "type"')
    if type(t) is not str:
        raise _fail(where, f'"type" must name a type, not {t!r}')
    props = _other_props(js, _SCHEMA_RESERVED)
    logical = props.get("logicalType")
    if logical is not None:
        if not isinstance(logical, str):
            raise _fail(where, f"logicalType must be a string, not {logical!r}")
        if logical == "decimal":
            _check_decimal(js, where)

    if t in _PRIMITIVES:
        return Node("primitive", t, props, where)
    if t == "array" or t == "map":
        key = "items" if t == "array" else "values"
        if key not in js:
            raise _fail(where, f'an {t} needs "{key}"' if t == "array" else f'a map needs "{key}"')
        node = Node(t, t, props, where)
        node.subs = [None]
        push((js[key], ns, depth + 1, node.subs, 0, (where, f"{t} {key}")))
        return node
    if t in ("union", "error_union", "request"):
        raise _fail(where, f"{t!r} is not a schema type (a union is a JSON list)")
    if t not in ("record", "error", "enum", "fixed"):
        raise _fail(where, f"unknown type {t!r} (a named type is referenced by its name alone)")

    # named types
    name = js.get("name")
    if type(name) is not str or not name:
        raise _fail(where, f'a {t} needs a non-empty string "name", not {name!r}')
    namespace = js.get("namespace", MISSING)
    if namespace is not MISSING and type(namespace) is not str:
        raise _fail(where, f"{t} {name!r}: namespace must be a string, not {namespace!r}")
    if "." in name:
        full = name
    else:
        space = ns if namespace is MISSING else namespace
        full = f"{space}.{name}" if space else name
    short = full.rsplit(".", 1)[-1]
    label = f"{t} {full!r}"
    if short in _PRIMITIVES:
        raise _fail(where, f"{label}: {short!r} is a primitive type and cannot be a name")
    if full in names:
        raise _fail(where, f"{label}: named type redefined")
    here = (where, label)

    if t == "fixed":
        size = js.get("size")
        if type(size) is not int or size < 0:
            raise _fail(here, f'"size" must be a non-negative integer, not {size!r}')
        node = Node("fixed", "fixed", props, here)
    elif t == "enum":
        symbols = js.get("symbols")
        if not isinstance(symbols, list):
            raise _fail(here, f'"symbols" must be a list of names, not {symbols!r}')
        for symbol in symbols:
            if type(symbol) is not str or not _SYMBOL.fullmatch(symbol):
                raise _fail(here, f"invalid symbol {symbol!r} (must match {_SYMBOL.pattern})")
        if len(set(symbols)) != len(symbols):
            dup = next(s for i, s in enumerate(symbols) if s in symbols[:i])
            raise _fail(here, f"duplicate symbol {dup!r}")
        if "default" in js and js["default"] not in symbols:
            raise _fail(here, f"default {show(js['default'])} is not one of the symbols")
        node = Node("enum", "enum", props, here)
        node.doc = _doc(js, here)
    else:
        fields = js.get("fields")
        if not isinstance(fields, list):
            raise _fail(here, f'"fields" must be a list, not {fields!r}')
        node = Node("record", t, props, here)
        node.token = f"[type={_rewrite(short)}]"
        node.doc = _doc(js, here)
        child_ns = full.rsplit(".", 1)[0] if "." in full else ""
        compiled: list[Field] = []
        types: list[tuple] = []
        seen: set[str] = set()
        for i, fj in enumerate(fields):
            if not isinstance(fj, dict):
                raise _fail(here, f"field {i} is not an object: {fj!r}")
            get = fj.get
            fname = get("name")
            if type(fname) is not str or not fname:
                raise _fail(here, f'field {i} needs a non-empty string "name", not {fname!r}')
            if fname in seen:
                raise _fail((where, full, fname), "duplicate field name")
            seen.add(fname)
            ftype = get("type", MISSING)
            if ftype is MISSING:
                raise _fail((where, full, fname), 'missing "type"')
            if len(fj) == 2:  # just a name and a type: the common case, short-cut
                field = Field(fname, None, None, _NO_PROPS)
            else:
                order = get("order")
                if order is not None and order not in _ORDERS:
                    raise _fail((where, full, fname), f"invalid order {order!r}")
                aliases = get("aliases", [])
                if not isinstance(aliases, list):
                    raise _fail((where, full, fname), f"aliases must be a list, not {aliases!r}")
                doc = _doc(fj, (where, full, fname))
                field = Field(fname, doc, get("default"), _other_props(fj, _FIELD_RESERVED))
                if "default" in fj:
                    defaults.append((field, fj["default"], (where, full, fname)))
            compiled.append(field)
            if type(ftype) is str and ftype in prims:
                field.type = prims[ftype]  # the common case, short-cut
            else:
                types.append((ftype, child_ns, depth + 1, field, None, (where, full, fname)))
        node.subs = compiled
        for item in reversed(types):
            push(item)
    node.fullname = full
    names[full] = node
    return node


_NO_PROPS: dict = {}  # shared, never written to


def _doc(js: dict, where: Any) -> str | None:
    doc = js.get("doc")
    if doc is not None and type(doc) is not str:
        raise _fail(where, f'"doc" must be a string, not {doc!r}')
    return doc


def _other_props(js: dict, reserved: frozenset) -> dict:
    """The keys avro-python keeps as "other props" (usually none: skip building a dict)."""
    for k in js:
        if k not in reserved:
            return {k: v for k, v in js.items() if k not in reserved}
    return _NO_PROPS


def _check_decimal(js: dict, where: Any) -> None:
    """fastavro's decimal checks (avro-python silently drops a bad decimal instead)."""
    scale = js.get("scale")
    precision = js.get("precision")
    if scale and (type(scale) is not int or scale < 0):
        raise _fail(where, f"decimal scale must be a non-negative integer, not {scale!r}")
    if precision:
        if type(precision) is not int or precision <= 0:
            raise _fail(where, f"decimal precision must be a positive integer, not {precision!r}")
        size = js.get("size")
        if js.get("type") == "fixed" and type(size) is int and size > 0:
            most = math.floor(math.log10(2) * (8 * size - 1))
            if precision > most:
                raise _fail(where, f"decimal precision {precision} does not fit in {size} bytes")
        if scale and precision < scale:
            raise _fail(where, f"decimal scale {scale} exceeds the precision {precision}")


def _finish_union(union: Node) -> None:
    members = union.members
    kinds: set[str] = set()
    for i, member in enumerate(members):
        if member.kind == "union":
            raise _fail((union.where, i), "a union cannot contain a union")
        key = member.fullname or member.type_name
        if key in kinds:
            raise _fail((union.where, i), f"the union already has {key!r}")
        kinds.add(key)
    subs = []
    nullable = False
    for member in members:
        if member.type_name != "null":
            subs.append(member)
        nullable = nullable or member.nullable
    union.subs = subs
    union.nullable = nullable
    if len(members) == 2 and len(subs) == 1:
        union.under = subs[0]


def _as_float(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _primitive_default_ok(value: Any, t: str) -> bool:
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t in ("string", "bytes"):
        return isinstance(value, str)
    if t in ("int", "long"):
        return isinstance(value, int)
    return _as_float(value)  # float, double


def _default_ok(value: Any, node: Node) -> bool:
    """fastavro's default rules: JSON shapes, and a union default matching any member."""
    kind = node.kind
    if kind == "primitive":
        return _primitive_default_ok(value, node.type_name)
    if kind == "union":
        return any(
            m.kind != "primitive" or _primitive_default_ok(value, m.type_name) for m in node.members
        )
    if kind == "array":
        return isinstance(value, list)
    if kind in ("map", "record"):
        return isinstance(value, dict)
    return isinstance(value, str)  # enum, fixed
