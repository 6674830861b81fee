"""DataHub v2 field paths (and DataHub's per-field facts) from an Avro schema.

:func:`avro_fields` returns, in DataHub's order, one :class:`FieldInfo` per path that DataHub's
own converter (``avro_schema_to_mce_fields`` in ``acryl-datahub``) emits for the same schema:
the path, DataHub's type class (``string``, ``number``, ``record``, ...), ``nativeDataType``,
``nullable``, ``description`` and ``isPartOfKey``. :func:`avro_field_paths` returns just the
paths. The rules are DataHub's, warts included (see ``docs/field-paths.md``):

- records appear by short name (``[type=E]`` for ``some.event.E``), enum and fixed as
  ``[type=enum]`` / ``[type=fixed]``, logical types by their physical type (``[type=int]`` for a
  date) while the type class follows the logical type (``date``, ``time``, ``number``);
- a union of null and one other type collapses to that type and makes the field nullable; any
  other union emits one path for the union and one per non-null member; arrays and maps add a
  token and no path of their own;
- a record is not expanded again below itself (recursion ends at a record already on the path);
- a top-level non-record schema has paths too; key schemas carry ``[key=True]``;
- ``nativeDataType`` is what DataHub puts there: the field's own name for a field whose type is
  not a union, the member's type for a union member, and a schema's ``native_data_type``
  property when present; ``description`` is the field's doc (else the record's or enum's doc),
  plus DataHub's ``Field default value:`` suffix and ``DEPRECATED`` prefix.

Where this module deliberately differs from DataHub:

- **Recursion DataHub never finishes.** DataHub checks for recursion only when it meets a
  record directly, not through an optional union (``["null", "Node"]``), and it forgets an
  enclosing record after the first back-reference to it, so a second one (``{a: R, b: R}``
  inside ``R``) expands ``R`` again. Either way it recurses until Python's recursion limit and
  then returns no fields at all (or, with branching, effectively never returns). We run
  DataHub's procedure exactly and detect, exactly, when it would not terminate (a record
  expansion that repeats an enclosing expansion of the same record with the same set of
  records DataHub believes it is inside: from there DataHub repeats itself forever). For such
  a schema we apply the rule DataHub intends everywhere: a record already being expanded on
  the current path is emitted but not expanded again. Where DataHub does terminate we match it
  exactly, including the extra level that its forgetting adds in some mutually recursive
  schemas.
- **Depth.** DataHub's converter is recursive and returns no fields beyond roughly 150-200
  nested records; ours is iterative (JSON too deep for ``json.loads`` is decoded without
  recursion). Schemas nesting deeper than :data:`MAX_NESTING` (1000) levels are refused with
  :class:`SchemaError`, as by ``avro_to_arrow``: fastavro's compiled parser recurses in C and
  would crash the process on a small thread stack a few thousand levels down. Schemas
  expanding to more than :data:`MAX_FIELDS` paths (possible when a named type is reused at
  every level) are refused rather than ground through.
- **``"type": "error"``** records (protocol error types) make DataHub fail an assertion and
  return nothing; we treat them as records (type ``record``).
- **Validation.** DataHub parses with avro-python and ``validate_names=False``; we validate with
  fastavro plus our own checks, which name the offending field: invalid JSON, unknown or
  redefined named types, primitive type names used as names, duplicate field names, bad enums
  (symbols, duplicates, default), bad fixed sizes, unions holding unions or the same type twice,
  decimal precision/scale, non-string names and namespaces, and defaults that do not match the
  field's type. Names themselves are not checked against Avro's pattern, as in DataHub. Name
  resolution follows the Avro specification (as fastavro does); avro-python differs only for an
  explicit empty namespace inside a namespaced record.

DataHub's encoding is not injective in a few corners, and we reproduce it: two enums (or two
fixed types) in one union both become ``[type=enum]`` (``[type=fixed]``); two records with the
same short name in different namespaces in one union share ``[type=Name]``; field names are
cut at their last dot (``a.b`` and ``b`` collide); names starting with ``__struct_`` become
``struct``. Everything else yields unique paths.

The input is JSON text, or the already-decoded JSON (a dict for a named or complex type, a list
for a union; a primitive is the JSON string ``'"string"'``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import fastavro

from odf_chain.errors import SchemaError
from odf_chain.schema._json import MAX_NESTING, loads, show
from odf_chain.schema.fields import KEY_TOKEN, VERSION_TOKEN, FieldInfo

__all__ = ["MAX_FIELDS", "MAX_NESTING", "avro_field_paths", "avro_fields"]

# MAX_NESTING (odf_chain.schema._json's, shared with convert): schemas nesting deeper than this
# many levels (records, arrays, maps, unions) are refused.

#: Schemas expanding to more than this many field paths are refused.
MAX_FIELDS = 1_000_000

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
_TYPE_CLASS = {
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
_LOGICAL_CLASS = {
    "date": "date",
    "decimal": "number",
    "time-micros": "time",
    "time-millis": "time",
    "timestamp-micros": "time",
    "timestamp-millis": "time",
    "uuid": "string",
}

_MISSING: Any = object()
_TOKENS = {t: f"[type={t}]" for t in _TYPE_CLASS}


class _Node:
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
        self.under: _Node | None = None  # the non-null member of a null + one other union
        self.members: list = []
        # DataHub's _is_nullable (unions are settled once their members are known)
        self.nullable = type_name == "null" or (bool(props.get("_nullable")) if props else False)
        self.where = where


class _Field:
    __slots__ = ("cache", "default", "doc", "kind", "name", "props", "token", "type")

    def __init__(self, name: str, doc: Any, default: Any, props: dict) -> None:
        self.kind = "field"
        self.name = name
        token = name.rsplit(".", 1)[-1] if "." in name else name
        self.token = _rewrite(token) if token.startswith("__struct") else token
        self.doc = doc
        self.default = default  # None when absent or null: DataHub shows neither
        self.props = props
        self.type: _Node = None  # type: ignore[assignment]
        self.cache: tuple | None = None


class _Diverges(Exception):
    """DataHub's procedure would not terminate on this schema."""


def avro_fields(schema: str | dict | list, is_key_schema: bool = False) -> list[FieldInfo]:
    """Every v2 field path of an Avro schema with DataHub's facts about it, in DataHub's order.

    Raises :class:`SchemaError` for a malformed schema, naming the offending field or type.
    """
    return _convert(schema, is_key_schema, paths_only=False)[0]


def avro_field_paths(schema: str | dict | list, is_key_schema: bool = False) -> list[str]:
    """Every v2 field path of an Avro schema, in DataHub's order (see :func:`avro_fields`)."""
    return _convert(schema, is_key_schema, paths_only=True)[0]


def _convert(schema: Any, is_key_schema: bool, paths_only: bool) -> tuple[list, bool]:
    """The fields (or paths), and whether DataHub's own procedure would never terminate."""
    root = _compile(_decode(schema))
    try:
        return _walk(root, bool(is_key_schema), paths_only, on_path=False), False
    except _Diverges:
        return _walk(root, bool(is_key_schema), paths_only, on_path=True), True


# --------------------------------------------------------------------------- decoding


def _decode(schema: Any) -> Any:
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


def _compile(obj: Any) -> _Node:
    """Validate the decoded schema and build its graph, without recursion.

    Named types are registered in the order avro-python (and fastavro) meet them: depth first,
    in document order, a record before its fields, so that exactly the same references resolve.
    """
    names: dict[str, _Node] = {}
    prims = {t: _Node("primitive", t, _NO_PROPS, "schema") for t in _PRIMITIVES}
    unions: list[_Node] = []
    defaults: list[tuple[_Field, Any, Any]] = []
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
            node = _Node("union", "union", _NO_PROPS, where)
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
) -> _Node:
    t = js.get("type", _MISSING)
    if t is _MISSING:
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
        return _Node("primitive", t, props, where)
    if t == "array" or t == "map":
        key = "items" if t == "array" else "values"
        if key not in js:
            raise _fail(where, f'an {t} needs "{key}"' if t == "array" else f'a map needs "{key}"')
        node = _Node(t, t, props, where)
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
    namespace = js.get("namespace", _MISSING)
    if namespace is not _MISSING and type(namespace) is not str:
        raise _fail(where, f"{t} {name!r}: namespace must be a string, not {namespace!r}")
    if "." in name:
        full = name
    else:
        space = ns if namespace is _MISSING else namespace
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
        node = _Node("fixed", "fixed", props, here)
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
        node = _Node("enum", "enum", props, here)
        node.doc = _doc(js, here)
    else:
        fields = js.get("fields")
        if not isinstance(fields, list):
            raise _fail(here, f'"fields" must be a list, not {fields!r}')
        node = _Node("record", t, props, here)
        node.token = f"[type={_rewrite(short)}]"
        node.doc = _doc(js, here)
        child_ns = full.rsplit(".", 1)[0] if "." in full else ""
        compiled: list[_Field] = []
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
            ftype = get("type", _MISSING)
            if ftype is _MISSING:
                raise _fail((where, full, fname), 'missing "type"')
            if len(fj) == 2:  # just a name and a type: the common case, short-cut
                field = _Field(fname, None, None, _NO_PROPS)
            else:
                order = get("order")
                if order is not None and order not in _ORDERS:
                    raise _fail((where, full, fname), f"invalid order {order!r}")
                aliases = get("aliases", [])
                if not isinstance(aliases, list):
                    raise _fail((where, full, fname), f"aliases must be a list, not {aliases!r}")
                doc = _doc(fj, (where, full, fname))
                field = _Field(fname, doc, get("default"), _other_props(fj, _FIELD_RESERVED))
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


def _finish_union(union: _Node) -> None:
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


def _default_ok(value: Any, node: _Node) -> bool:
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


# --------------------------------------------------------------------------- walking

_VISIT, _POP_TOKEN, _POP_FIELD, _FORGET, _DEACTIVATE = range(5)
_LEAVES = frozenset(("primitive", "enum", "fixed"))
_EMITTING = frozenset(("primitive", "enum", "fixed", "union"))


def _strip(token: str) -> str:
    return token[6:-1] if token.startswith("[type=") else token


def _type_class(act: _Node, logical: Any) -> str:
    base = _TYPE_CLASS[act.type_name]
    if logical is not None and isinstance(logical, str):
        return _LOGICAL_CLASS.get(logical, base)
    return base


def _description(text: Any, act: _Node, default: Any, merged: list[dict]) -> Any:
    if not text and act.doc:
        text = act.doc
    if default is not None:
        try:
            shown = str(default)  # what DataHub prints (Python's str of the JSON value)
        except RecursionError:
            shown = show(default)
        text = f"{text if text else ''}\nField default value: {shown}"
    deprecated = _MISSING
    for props in merged:
        deprecated = props.get("deprecated", deprecated)
    if deprecated is not _MISSING:
        text = f'<span style="color:red">DEPRECATED: {deprecated}</span>\n' + text if text else ""
    return text


def _field_facts(field: _Field) -> tuple:
    """What DataHub says about a field, except a union-typed field's native type (which is
    the type token just before the field's name, so depends on where the field is met)."""
    ftype = field.type
    act = ftype.under or ftype
    override = act.props.get("native_data_type", _MISSING)
    native = None if ftype.kind == "union" else _strip(field.token)
    logical = act.props.get("logicalType") or field.props.get("logicalType")
    doc = _description(
        field.doc if field.doc else None, act, field.default, [field.props, ftype.props, act.props]
    )
    field.cache = (override, native, _type_class(act, logical), ftype.nullable, doc)
    return field.cache


def _plain(schema: _Node, act: _Node, tokens: list[str], path: str, key: bool) -> FieldInfo:
    """DataHub's entry for a schema met outside any field (top-level non-records)."""
    native = act.props.get("native_data_type", _MISSING)
    if native is _MISSING:
        native = _strip(tokens[-2] if schema.kind == "union" else tokens[-1])
    doc = _description(None, act, None, [schema.props, schema.props, act.props])
    logical = act.props.get("logicalType")
    return FieldInfo(path, _type_class(act, logical), native, schema.nullable, doc, key)


def _walk(root: _Node, key: bool, paths_only: bool, on_path: bool) -> list:
    """DataHub's traversal (``AvroToMceSchemaConverter``), with an explicit stack.

    ``seen`` is DataHub's list of records it believes it is inside; with ``on_path`` it is the
    set of records really being expanded on the current path (and records met through an
    optional union are checked too), which is the rule DataHub means to apply.
    """
    tokens = [VERSION_TOKEN]
    prefixes = [VERSION_TOKEN]
    if key:
        tokens.append(KEY_TOKEN)
        prefixes.append(f"{VERSION_TOKEN}.{KEY_TOKEN}")
    out: list = []
    fields: list[_Field] = []
    seen: set[str] = set()
    active: set[tuple[str, frozenset]] = set()
    work: list[tuple[int, Any]] = [(_VISIT, root)]
    push = work.append
    pop = work.pop
    emit = out.append

    def emit_field(field: _Field, prefix: str, last_token: str) -> None:
        """DataHub's entry for ``field`` met at ``prefix`` (whose last token is given)."""
        path = f"{prefix}.{field.token}"
        if paths_only:
            emit(path)
            return
        override, native, type_class, nullable, doc = field.cache or _field_facts(field)
        if override is not _MISSING:
            native = override
        elif native is None:
            native = _strip(last_token)
        emit(FieldInfo(path, type_class, native, nullable, doc, key))

    while work:
        op, arg = pop()
        if op == _POP_TOKEN:
            tokens.pop()
            prefixes.pop()
            continue
        if op == _POP_FIELD:
            fields.pop()
            continue
        if op == _FORGET:
            seen.discard(arg)
            continue
        if op == _DEACTIVATE:
            active.discard(arg)
            continue

        node = arg
        kind = node.kind
        if kind == "field":
            act = node.type.under or node.type
            if act.kind in _LEAVES:
                # The common case, short-cut: a leaf (or null + a leaf) is one path.
                emit_field(node, f"{prefixes[-1]}.{act.token}", act.token)
                continue
            fields.append(node)
            push((_POP_FIELD, None))
            push((_VISIT, node.type))
            continue
        if kind in _LEAVES:
            tokens.append(node.token)
            prefixes.append(f"{prefixes[-1]}.{node.token}")
            if fields:
                emit_field(fields[-1], prefixes[-1], node.token)
            elif paths_only:
                emit(prefixes[-1])
            else:
                emit(_plain(node, node, tokens, prefixes[-1], key))
            tokens.pop()
            prefixes.pop()
            continue

        # record, union, array, map
        expand = True
        if kind == "record" and not on_path:
            if node.fullname in seen:
                expand = False
            else:
                seen.add(node.fullname)
            # DataHub forgets the record when *any* visit of it ends, even a visit that found
            # it already there: that is what lets a second back-reference expand it again.
            push((_FORGET, node.fullname))
        act = node.under or node
        tokens.append(act.token)
        prefixes.append(f"{prefixes[-1]}.{act.token}")
        push((_POP_TOKEN, None))
        akind = act.kind
        if akind in _EMITTING:
            if fields:
                emit_field(fields[-1], prefixes[-1], act.token)
            elif paths_only:
                emit(prefixes[-1])
            else:
                emit(_plain(node, act, tokens, prefixes[-1], key))
        if akind == "record":
            if on_path:
                expand = act.fullname not in seen
                if expand:
                    seen.add(act.fullname)
                    push((_FORGET, act.fullname))
            elif expand:
                state = (act.fullname, frozenset(seen))
                if state in active:
                    raise _Diverges
                active.add(state)
                push((_DEACTIVATE, state))
            if len(out) > MAX_FIELDS:
                raise SchemaError(f"the schema expands to more than {MAX_FIELDS} field paths")
            if fields:
                field = fields[-1]
                emit_field(field, prefixes[-1], act.token)
                if expand:
                    tokens.append(field.token)
                    prefixes.append(f"{prefixes[-1]}.{field.token}")
                    push((_POP_TOKEN, None))
                else:
                    continue
            elif not expand:
                continue
        for sub in reversed(act.subs):
            push((_VISIT, sub))
    return out
