"""Avro schemas <-> Arrow schemas.

``avro_to_arrow`` (the top-level Avro schema must be a record; its fields become the columns):

=======================================  ===============================================
Avro                                     Arrow
=======================================  ===============================================
null                                     null
boolean, int, long, float, double        bool, int32, int64, float32, float64
bytes, string                            binary, string
fixed(n)                                 fixed_size_binary(n)
enum                                     dictionary<int32, string>
record                                   struct
array<T>                                 list<item: T>
map<T>                                   map<string, T>
["null", T] / [T, "null"]                T, nullable (every other field is not nullable)
["null"]                                 null
[T]                                      T
date                                     date32
time-millis, time-micros                 time32[ms], time64[us]
timestamp-millis / -micros / -nanos      timestamp[ms/us/ns, tz=UTC]
local-timestamp-millis / -micros / -n..  timestamp[ms/us/ns] (no zone)
decimal(p, s) on bytes or fixed          decimal128(p, s) (decimal256 when p > 38)
uuid on string                           string
=======================================  ===============================================

Enums become ``dictionary<int32, string>``, Arrow's categorical type (Parquet stores them
dictionary-encoded; Spark and most readers see a plain string). Logical types Arrow has no
equivalent for (``duration``, ``big-decimal``, ``uuid`` on fixed, unknown or invalid ones) keep
their underlying type, as the Avro spec says readers should. Refused with :class:`SchemaError`,
naming the field: unions of two or more non-null types (Arrow's union types cannot be written to
Parquet nor read by Spark, so a dataset could not hold them), recursive types (Arrow types are
finite trees), decimals wider than 76 digits, and anything malformed: invalid JSON, unknown type
names, duplicate field names, redefined names, nested or repeated union members, bad defaults,
decimal parameters fastavro refuses.
Names are accepted as DataHub and fastavro accept them (the spec's pattern is not enforced on
the way in; it is on the way out). fastavro then parses the whole schema as a second check.

What Arrow cannot say is kept in field metadata, so that ``arrow_to_avro`` can give it back:
``doc`` (the field's doc), ``odf_chain.avro.name`` (the full name of a record, enum or fixed),
``odf_chain.avro.symbols`` (an enum's symbols, JSON), ``odf_chain.avro.size`` (the size of a
fixed that carries a decimal) and ``odf_chain.avro.default`` (the field default, JSON).

The whole writer schema is kept too, as canonical JSON text (keys sorted, no whitespace, UTF-8)
in the schema metadata under ``odf_chain.avro.schema``: a dataset ingested from Avro keeps
Avro-convention field paths. **The rule**: ``arrow_to_avro`` returns that writer schema unchanged
when the Arrow schema still corresponds to it, meaning that ``avro_to_arrow(writer)`` and the
schema have the same columns in the same order with the same names, nullability and types at
every level, where types are compared *up to encoding* (dictionary-encoded = its values; large and
view strings, binaries and lists = the plain ones; extension types = their storage) and metadata
is ignored. Otherwise (a column added, retyped, made nullable, ...) it converts the Arrow schema,
using the metadata above where it still fits.

``arrow_to_avro``:

==================================================  ============================================
Arrow                                               Avro
==================================================  ============================================
null                                                null
bool                                                boolean
int8, int16, int32, uint8, uint16                   int
int64, uint32                                       long
uint64                                              bytes decimal(20, 0)
float16, float32 / float64                          float / double
decimal32/64/128/256(p, s)                          bytes decimal(p, s) (fixed if named so)
string, large_string, string_view                   string
binary, large_binary, binary_view                   bytes
fixed_size_binary(n)                                fixed(n)
date32, date64                                      int date
time32(s|ms) / time64(us|ns)                        int time-millis / long time-micros
timestamp(s|ms|us|ns, tz)                           long timestamp-millis/-millis/-micros/-nanos
timestamp(s|ms|us|ns)                               long local-timestamp-...
duration                                            long (the count, in the type's unit)
struct                                              record
list, large_list, fixed_size_list, list views       array
map<string-like, V>                                 map<V>
dictionary<_, V>                                    V (an enum if the field names its symbols)
extension types, run_end_encoded<_, V>              their storage type / V
nullable field (not of type null)                   ["null", T] ([T, "null"] if it has a
                                                    non-null default)
==================================================  ============================================

Refused with :class:`SchemaError` naming the field: unions, ``month_day_nano_interval`` (Avro's
duration is months/days/milliseconds, unsigned), maps whose keys are not strings, and names that
are not valid Avro names. Records, enums and fixeds are named after the metadata above, or else
after their field (``<field>``, ``<field>_item`` for list items, ``<field>_value`` for map
values), made unique with ``_2``, ``_3``, ... A named type reused from the null namespace inside
a namespaced record is written out again under a new name (a dotless reference resolves in the
enclosing namespace only, in fastavro as in the spec, so it cannot be referred to).

Round trips. Avro -> Arrow -> Avro is exact through the writer-schema rule; without that metadata
it keeps names, namespaces, symbols, field docs, defaults and logical types (the result has the
same Parsing Canonical Form and converts back to the same Arrow schema), and loses aliases,
``order``, custom properties, the doc of a record/enum/fixed type, an enum's own default, logical
types Arrow has no type for, and the order of ``[T, "null"]`` in a field without a default (it
comes back as ``["null", T]``).

Arrow -> Avro -> Arrow is exact for bool, int32, int64, float32, float64, decimal128 (p <= 38),
decimal256 (p > 38), string, binary, fixed_size_binary, date32, time32[ms], time64[us],
timestamp[ms|us|ns] with tz UTC or none, null, struct, list and map<string, _>, and lossy
(widened or re-encoded) for the rest: int8/int16/uint8/uint16 -> int32, uint32 -> int64,
uint64 -> decimal128(20, 0), float16 -> float32, decimal32/64 and decimal256 with p <= 38 ->
decimal128, large/view strings, binaries and lists -> plain ones, fixed_size_list -> list,
date64 -> date32, time32[s] -> time32[ms], time64[ns] -> time64[us], timestamp[s] ->
timestamp[ms], any time zone -> UTC, duration -> int64, dictionary -> its values
(string dictionaries with enum symbols -> dictionary<int32, string>), extension -> storage.

Everything walks iteratively (explicit stacks), and JSON text is read and written without
recursion (:mod:`odf_chain.schema._json`). An Avro schema nesting deeper than ``MAX_NESTING``
(1000) levels - records, enums, fixed, arrays, maps and unions, counted as
:mod:`~odf_chain.schema.avro_paths` counts them - is refused with :class:`SchemaError` before
fastavro sees it: fastavro's compiled parser recurses in C, and would crash the process instead
of raising a few thousand levels down on a small thread stack. Arrow -> Avro has no such limit
(it does not call fastavro), but what it writes past that depth cannot be read back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterable
from typing import Any

import fastavro
import pyarrow as pa

from odf_chain.errors import SchemaError
from odf_chain.schema._json import (
    MAX_NESTING,
    canonical as canonical_json,
    check_depth,
    loads,
    show,
)
from odf_chain.schema.arrow_paths import is_list_like, unwrap_encoding

__all__ = [
    "AVRO_DEFAULT_KEY",
    "AVRO_NAME_KEY",
    "AVRO_SCHEMA_KEY",
    "AVRO_SIZE_KEY",
    "AVRO_SYMBOLS_KEY",
    "DOC_KEY",
    "MAX_NESTING",
    "arrow_to_avro",
    "avro_to_arrow",
]

AVRO_SCHEMA_KEY = b"odf_chain.avro.schema"
DOC_KEY = b"doc"
AVRO_NAME_KEY = b"odf_chain.avro.name"
AVRO_SYMBOLS_KEY = b"odf_chain.avro.symbols"
AVRO_SIZE_KEY = b"odf_chain.avro.size"
AVRO_DEFAULT_KEY = b"odf_chain.avro.default"

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# A converter step is a generator that yields sub-steps and receives their results.
Step = Generator["Step", Any, Any]


def _run(step: Step) -> Any:
    """Drive a tree of generator steps without Python recursion."""
    stack = [step]
    value: Any = None
    while True:
        try:
            child = stack[-1].send(value)
        except StopIteration as stop:
            stack.pop()
            if not stack:
                return stop.value
            value = stop.value
        else:
            stack.append(child)
            value = None


# --------------------------------------------------------------------------------------------
# deep schemas: JSON is read and written without recursion (odf_chain.schema._json), and fastavro,
# which recurses in C, is not given a schema nesting deeper than MAX_NESTING levels


def _avro_children(schema: Any) -> list | None:
    """The schemas directly inside an Avro schema, for measuring its nesting the way
    :mod:`~odf_chain.schema.avro_paths` does: every record, enum, fixed, array, map and union
    (any JSON object or list in a type position, including an invalid ``{"type": {...}}``) is
    a level; a type name is not."""
    if isinstance(schema, list):
        return schema
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, dict | list):
        return [kind]
    if kind == "array":
        return [schema["items"]] if "items" in schema else []
    if kind == "map":
        return [schema["values"]] if "values" in schema else []
    if kind in ("record", "error") and isinstance(schema.get("fields"), list):
        return [f["type"] for f in schema["fields"] if isinstance(f, dict) and "type" in f]
    return []


def _load(schema: str | bytes | dict) -> Any:
    if isinstance(schema, dict | list):
        return schema
    if not isinstance(schema, str | bytes):
        raise SchemaError(f"an Avro schema is JSON text or a dict, not {type(schema).__name__}")
    return loads(schema, what="the Avro schema")


# --------------------------------------------------------------------------------------------
# names and defaults (shared by both directions)


def _where(where: str) -> str:
    return f"field {where}" if where else "the top-level record"


def _split_fullname(name: str, namespace: Any, enclosing: str) -> tuple[str, str]:
    """(full name, namespace) of a named type, per the Avro spec."""
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    ns = enclosing if namespace is None else namespace
    if not isinstance(ns, str):
        raise SchemaError(f"namespace {show(ns)} is not a string")
    return (f"{ns}.{name}" if ns else name), ns


def _valid_fullname(name: str) -> bool:
    return all(_NAME.fullmatch(part) for part in name.split("."))


def _default_matches(value: Any, schema: Any, lookup: Callable[[str], Any]) -> bool:
    """Does a field default fit its type, at the top level (as fastavro checks it)?"""
    if isinstance(schema, list):
        return any(_default_matches(value, s, lookup) for s in schema if not isinstance(s, list))
    if isinstance(schema, str) and schema not in PRIMITIVES:
        schema = lookup(schema)
        if schema is None:
            return True
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(kind, str) and kind not in PRIMITIVES and kind not in _COMPLEX:
        schema = lookup(kind)
        if not isinstance(schema, dict):
            return True
        kind = schema.get("type")
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("int", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in ("float", "double"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind in ("bytes", "string", "fixed"):
        return isinstance(value, str)
    if kind == "enum":
        return isinstance(value, str) and value in (schema.get("symbols") or ())
    if kind == "array":
        return isinstance(value, list)
    if kind in ("map", "record", "error"):
        return isinstance(value, dict)
    return True


_COMPLEX = frozenset({"record", "error", "enum", "fixed", "array", "map"})
_RESERVED = PRIMITIVES | _COMPLEX | {"union"}


# --------------------------------------------------------------------------------------------
# Avro -> Arrow

Converted = tuple[pa.DataType, bool, dict[bytes, bytes]]  # type, nullable, field metadata

_TIMESTAMPS = {
    "timestamp-millis": ("ms", "UTC"),
    "timestamp-micros": ("us", "UTC"),
    "timestamp-nanos": ("ns", "UTC"),
    "local-timestamp-millis": ("ms", None),
    "local-timestamp-micros": ("us", None),
    "local-timestamp-nanos": ("ns", None),
}


def _max_decimal_digits(size: int) -> int:
    return len(str(2 ** (8 * size - 1) - 1)) - 1 if size > 0 else 0


class _AvroToArrow:
    def __init__(self) -> None:
        self.defined: dict[str, dict] = {}  # full name -> definition
        self.done: dict[str, Converted] = {}  # full name -> its Arrow form
        self.open: set[str] = set()  # records being converted (recursion guard)

    def scoped_lookup(self, ns: str) -> Callable[[str], dict | None]:
        return lambda name: self.defined.get(self.resolve(name, ns) or name)

    def resolve(self, name: str, ns: str) -> str | None:
        """The full name a reference stands for (a name without a dot is in the enclosing
        namespace, with no fallback to the null namespace: as fastavro and the spec say)."""
        fullname = f"{ns}.{name}" if "." not in name and ns else name
        return fullname if fullname in self.defined else None

    def define(self, schema: dict, ns: str, where: str) -> tuple[str, str]:
        name = schema.get("name")
        if not isinstance(name, str) or not name:
            raise SchemaError(
                f"{_where(where)}: a {schema.get('type')} needs a non-empty string name"
            )
        try:
            fullname, own_ns = _split_fullname(name, schema.get("namespace"), ns)
        except SchemaError as e:
            raise SchemaError(f"{_where(where)}: {e}") from None
        if fullname in PRIMITIVES or name in PRIMITIVES:
            raise SchemaError(f"{_where(where)}: the primitive type name {name!r} cannot be reused")
        if fullname in self.defined:
            raise SchemaError(f"{_where(where)}: the name {fullname} is defined twice")
        self.defined[fullname] = schema
        return fullname, own_ns

    def reference(self, name: str, ns: str, where: str) -> Converted:
        fullname = self.resolve(name, ns)
        if fullname is None:
            raise SchemaError(f"{_where(where)}: unknown type {name!r}")
        if fullname in self.open:
            raise SchemaError(
                f"{_where(where)}: recursive type {fullname}; Arrow cannot express a type that "
                "contains itself"
            )
        return self.done[fullname]

    def convert(self, schema: Any, ns: str, where: str) -> Step:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return _primitive(schema, None, {})
            return self.reference(schema, ns, where)
        if isinstance(schema, list):
            return (yield self.union(schema, ns, where))
        if not isinstance(schema, dict):
            raise SchemaError(f"{_where(where)}: {schema!r} is not an Avro type")
        kind = schema.get("type")
        if isinstance(kind, list | dict):
            raise SchemaError(f"{_where(where)}: 'type' of a type object must be a type name")
        if not isinstance(kind, str):
            raise SchemaError(f"{_where(where)}: a type object needs a 'type'")
        if kind in ("record", "error"):
            return (yield self.record(schema, ns, where))
        if kind == "enum":
            return self.enum(schema, ns, where)
        if kind == "fixed":
            return self.fixed(schema, ns, where)
        if kind == "array":
            if "items" not in schema:
                raise SchemaError(f"{_where(where)}: an array needs 'items'")
            t, nullable, meta = yield self.convert(schema["items"], ns, f"{where}.[item]")
            return pa.list_(pa.field("item", t, nullable, metadata=meta or None)), False, {}
        if kind == "map":
            if "values" not in schema:
                raise SchemaError(f"{_where(where)}: a map needs 'values'")
            t, nullable, meta = yield self.convert(schema["values"], ns, f"{where}.[value]")
            value = pa.field("value", t, nullable, metadata=meta or None)
            return pa.map_(pa.field("key", pa.string(), False), value), False, {}
        if kind in PRIMITIVES:
            return _primitive(kind, schema.get("logicalType"), schema, where)
        return self.reference(kind, ns, where)

    def union(self, members: list, ns: str, where: str) -> Step:
        if not members:
            raise SchemaError(f"{_where(where)}: an empty union has no values")
        seen: set[str] = set()
        non_null = []
        for member in members:
            if isinstance(member, list):
                raise SchemaError(f"{_where(where)}: a union may not contain a union")
            key = self.member_key(member, ns)
            if key in seen:
                raise SchemaError(f"{_where(where)}: the union lists {key} twice")
            seen.add(key)
            if key != "null":
                non_null.append(member)
        if len(non_null) > 1:
            raise SchemaError(
                f"{_where(where)}: the union {sorted(seen)} is not supported: only a union of "
                "null and one other type maps to Arrow"
            )
        if not non_null:
            return pa.null(), True, {}
        t, _, meta = yield self.convert(non_null[0], ns, where)
        return t, "null" in seen, meta

    def member_key(self, member: Any, ns: str) -> str:
        """What makes a union member distinct: its primitive/complex kind, or its full name."""
        if isinstance(member, str):
            return member if member in PRIMITIVES else (self.resolve(member, ns) or member)
        if isinstance(member, dict):
            kind = member.get("type")
            if kind in ("record", "error", "enum", "fixed") and isinstance(member.get("name"), str):
                try:
                    return _split_fullname(member["name"], member.get("namespace"), ns)[0]
                except SchemaError:
                    return str(member["name"])
            if isinstance(kind, str) and kind not in PRIMITIVES and kind not in _COMPLEX:
                return self.resolve(kind, ns) or kind
            return str(kind)
        return repr(member)

    def record(self, schema: dict, ns: str, where: str) -> Step:
        fullname, own_ns = self.define(schema, ns, where)
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise SchemaError(f"{_where(where)}: record {fullname} needs a list of 'fields'")
        self.open.add(fullname)
        arrow_fields = []
        seen: set[str] = set()
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not f["name"]:
                raise SchemaError(
                    f"{_where(where)}: record {fullname} has a field without a non-empty name"
                )
            name = f["name"]
            here = f"{where}.{name}" if where else name
            if name in seen:
                raise SchemaError(f"field {here}: record {fullname} has two fields named {name!r}")
            seen.add(name)
            if "type" not in f:
                raise SchemaError(f"field {here}: the field has no 'type'")
            t, nullable, meta = yield self.convert(f["type"], own_ns, here)
            meta = dict(meta)
            doc = f.get("doc")
            if isinstance(doc, str) and doc:
                meta[DOC_KEY] = doc.encode()
            if "default" in f:
                lookup = self.scoped_lookup(own_ns)
                if not _default_matches(f["default"], f["type"], lookup):
                    raise SchemaError(
                        f"field {here}: the default {show(f['default'])} does not fit the type"
                    )
                meta[AVRO_DEFAULT_KEY] = canonical_json(f["default"]).encode()
            if pa.types.is_null(t):
                nullable = True
            arrow_fields.append(pa.field(name, t, nullable, metadata=meta or None))
        self.open.discard(fullname)
        result: Converted = pa.struct(arrow_fields), False, {AVRO_NAME_KEY: fullname.encode()}
        self.done[fullname] = result
        return result

    def enum(self, schema: dict, ns: str, where: str) -> Converted:
        fullname, _ = self.define(schema, ns, where)
        symbols = schema.get("symbols")
        if (
            not isinstance(symbols, list)
            or not all(isinstance(s, str) and _NAME.fullmatch(s) for s in symbols)
            or len(set(symbols)) != len(symbols)
        ):
            raise SchemaError(
                f"{_where(where)}: enum {fullname} needs a list of unique symbols, each a valid "
                "Avro name"
            )
        if "default" in schema and schema["default"] not in symbols:
            raise SchemaError(f"{_where(where)}: the default of enum {fullname} is not a symbol")
        meta = {
            AVRO_NAME_KEY: fullname.encode(),
            AVRO_SYMBOLS_KEY: canonical_json(symbols).encode(),
        }
        result: Converted = pa.dictionary(pa.int32(), pa.string()), False, meta
        self.done[fullname] = result
        return result

    def fixed(self, schema: dict, ns: str, where: str) -> Converted:
        fullname, _ = self.define(schema, ns, where)
        size = schema.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise SchemaError(f"{_where(where)}: fixed {fullname} needs a non-negative int size")
        meta = {AVRO_NAME_KEY: fullname.encode()}
        decimal = _decimal(schema, where, _max_decimal_digits(size))
        if decimal is not None:
            meta[AVRO_SIZE_KEY] = str(size).encode()
            result: Converted = decimal, False, meta
        else:
            result = pa.binary(size), False, meta
        self.done[fullname] = result
        return result


def _decimal(schema: dict, where: str, max_digits: int | None) -> pa.DataType | None:
    """The Arrow decimal of a ``decimal`` logical type; None when it has no precision (then it
    is ignored, per spec). Parameters fastavro refuses are refused here, naming the field."""
    if schema.get("logicalType") != "decimal":
        return None
    precision, scale = schema.get("precision"), schema.get("scale", 0)
    if precision is None or precision == 0 or precision is False:
        return None
    if not isinstance(precision, int) or isinstance(precision, bool) or precision < 0:
        raise SchemaError(
            f"{_where(where)}: decimal precision {show(precision)} is not a positive int"
        )
    if scale is None or scale is False:
        scale = 0
    if not isinstance(scale, int) or isinstance(scale, bool) or not 0 <= scale <= precision:
        raise SchemaError(
            f"{_where(where)}: decimal scale {show(scale)} is not an int from 0 to the precision"
        )
    if max_digits is not None and precision > max_digits:
        raise SchemaError(
            f"{_where(where)}: decimal precision {precision} does not fit in "
            f"{schema.get('size')} bytes"
        )
    if precision > 76:
        raise SchemaError(
            f"{_where(where)}: decimal({precision},{scale}) is wider than Arrow's 76 digits"
        )
    return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)


def _primitive(kind: str, logical: Any, schema: dict, where: str = "") -> Converted:
    if kind == "null":
        return pa.null(), True, {}
    if logical == "decimal" and kind == "bytes":
        decimal = _decimal(schema, where, None)
        if decimal is not None:
            return decimal, False, {}
    if kind == "int" and logical == "date":
        return pa.date32(), False, {}
    if kind == "int" and logical == "time-millis":
        return pa.time32("ms"), False, {}
    if kind == "long" and logical == "time-micros":
        return pa.time64("us"), False, {}
    if kind == "long" and logical in _TIMESTAMPS:
        unit, tz = _TIMESTAMPS[logical]
        return pa.timestamp(unit, tz=tz), False, {}
    plain = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "bytes": pa.binary(),
        "string": pa.string(),
    }
    return plain[kind], False, {}


def avro_to_arrow(schema: str | bytes | dict) -> pa.Schema:
    """The Arrow schema of an Avro record schema (see the module doc for the mapping), with the
    writer schema kept in the schema metadata under ``odf_chain.avro.schema``."""
    obj = _load(schema)
    check_depth(obj, "the Avro schema", _avro_children)  # before fastavro, as avro_paths does
    if not (isinstance(obj, dict) and obj.get("type") in ("record", "error")):
        kind = obj.get("type") if isinstance(obj, dict) else obj
        raise SchemaError(
            "the top-level Avro schema must be a record (its fields become columns), "
            f"not {show(kind)}"
        )
    converter = _AvroToArrow()
    struct, _, _ = _run(converter.convert(obj, "", ""))
    try:
        text = canonical_json(obj)
    except (TypeError, ValueError) as e:
        raise SchemaError(f"the Avro schema is not JSON: {e}") from None
    try:
        fastavro.parse_schema(obj)
    except Exception as e:  # fastavro's exceptions are not one hierarchy
        raise SchemaError(f"invalid Avro schema ({type(e).__name__}): {e}") from None
    fields = [struct.field(i) for i in range(struct.num_fields)]
    return pa.schema(fields, metadata={AVRO_SCHEMA_KEY: text.encode()})


# --------------------------------------------------------------------------------------------
# Arrow -> Avro

_is_string_view = getattr(pa.types, "is_string_view", lambda t: False)
_is_binary_view = getattr(pa.types, "is_binary_view", lambda t: False)
_TYPE_KEYS = (AVRO_NAME_KEY, AVRO_SYMBOLS_KEY, AVRO_SIZE_KEY)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or _is_binary_view(t)


def _normalized(t: pa.DataType) -> Step:
    """The type up to encoding (see the module doc), for the writer-schema rule."""
    t = unwrap_encoding(t)
    if _is_string(t):
        return pa.string()
    if _is_binary(t):
        return pa.binary()
    if pa.types.is_struct(t):
        fields = []
        for i in range(t.num_fields):
            f = t.field(i)
            fields.append(pa.field(f.name, (yield _normalized(f.type)), f.nullable))
        return pa.struct(fields)
    if is_list_like(t) and not pa.types.is_fixed_size_list(t):
        item = t.value_field
        return pa.list_(pa.field("item", (yield _normalized(item.type)), item.nullable))
    if pa.types.is_fixed_size_list(t):
        item = t.value_field
        item_type = yield _normalized(item.type)
        return pa.list_(pa.field("item", item_type, item.nullable), t.list_size)
    if pa.types.is_map(t):
        key_type = yield _normalized(t.key_type)
        value = t.item_field
        value_type = yield _normalized(value.type)
        return pa.map_(key_type, pa.field("value", value_type, value.nullable))
    return t


def _normalized_schema(schema: pa.Schema) -> list[tuple[str, pa.DataType, bool]]:
    return [(f.name, _run(_normalized(f.type)), f.nullable) for f in schema]


def corresponds(schema: pa.Schema, writer: Any) -> bool:
    """The writer-schema rule: does ``schema`` still say what ``avro_to_arrow(writer)`` says?"""
    expected = avro_to_arrow(writer)
    return _normalized_schema(expected) == _normalized_schema(schema)


class _ArrowToAvro:
    def __init__(self) -> None:
        self.defined: dict[str, Any] = {}  # full name -> emitted definition
        self.sources: dict[str, tuple[pa.DataType, dict]] = {}  # full name -> what it came from

    def lookup(self, name: str) -> Any:
        return self.defined.get(name)

    def name_for(self, t: pa.DataType, meta: dict, hint: str, ns: str) -> tuple[str, bool]:
        """(full name, already defined by an identical type) for a record/enum/fixed."""
        wanted = meta.get(AVRO_NAME_KEY)
        if wanted is not None:
            wanted = wanted.decode("utf-8", errors="replace")
            if _valid_fullname(wanted) and wanted.rsplit(".", 1)[-1] not in _RESERVED:
                if wanted not in self.defined:
                    return wanted, False
                source = self.sources.get(wanted)
                if (
                    source is not None
                    and source[0].equals(t, check_metadata=True)
                    and source[1] == {k: meta[k] for k in _TYPE_KEYS if k in meta}
                    # A type in the null namespace cannot be referred to from inside another.
                    and ("." in wanted or not ns)
                ):
                    return wanted, True
        base = re.sub(r"[^A-Za-z0-9_]", "_", hint) or "type"
        if not _NAME.fullmatch(base):
            base = f"_{base}"
        if base in _RESERVED:
            base = f"{base}_"
        candidate, n = base, 1
        while (f"{ns}.{candidate}" if ns else candidate) in self.defined:
            n += 1
            candidate = f"{base}_{n}"
        return (f"{ns}.{candidate}" if ns else candidate), False

    def named(self, fullname: str, kind: str, ns: str, body: dict) -> dict:
        short = fullname.rsplit(".", 1)[-1]
        own_ns = fullname.rsplit(".", 1)[0] if "." in fullname else ""
        out: dict[str, Any] = {"type": kind, "name": short}
        if own_ns != ns:
            out["namespace"] = own_ns
        out.update(body)
        return out

    def ref(self, fullname: str, ns: str) -> str:
        own_ns = fullname.rsplit(".", 1)[0] if "." in fullname else ""
        return fullname.rsplit(".", 1)[-1] if own_ns == ns else fullname

    def remember(self, fullname: str, definition: Any, t: pa.DataType, meta: dict) -> None:
        self.defined[fullname] = definition
        self.sources[fullname] = (t, {k: meta[k] for k in _TYPE_KEYS if k in meta})

    def field_type(self, f: pa.Field, ns: str, where: str, hint: str) -> Step:
        """The Avro type of a field, nullability included."""
        meta = dict(f.metadata or {})
        t = f.type
        base = yield self.type(t, meta, ns, where, hint)
        if base == "null" or not f.nullable:
            return base
        raw_default = meta.get(AVRO_DEFAULT_KEY)
        if raw_default is not None:
            try:
                default = loads(raw_default, what=AVRO_DEFAULT_KEY.decode())
            except SchemaError:
                default = None
            if default is not None and _default_matches(default, base, self.lookup):
                return [base, "null"]
        return ["null", base]

    def type(self, t: pa.DataType, meta: dict, ns: str, where: str, hint: str) -> Step:
        if isinstance(t, pa.DictionaryType):
            value = unwrap_encoding(t.value_type)
            symbols = _symbols(meta)
            if symbols is not None and _is_string(value):
                fullname, exists = self.name_for(t, meta, hint, ns)
                if exists:
                    return self.ref(fullname, ns)
                definition = self.named(fullname, "enum", ns, {"symbols": symbols})
                self.remember(fullname, definition, t, meta)
                return definition
        t = unwrap_encoding(t)
        if pa.types.is_null(t):
            return "null"
        if pa.types.is_boolean(t):
            return "boolean"
        if pa.types.is_integer(t):
            if t in (pa.int64(), pa.uint32()):
                return "long"
            if t == pa.uint64():
                return {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}
            return "int"
        if pa.types.is_float16(t) or pa.types.is_float32(t):
            return "float"
        if pa.types.is_float64(t):
            return "double"
        if pa.types.is_decimal(t):
            body = {"logicalType": "decimal", "precision": t.precision, "scale": t.scale}
            size = _int(meta.get(AVRO_SIZE_KEY))
            if size is not None and _max_decimal_digits(size) >= t.precision:
                fullname, exists = self.name_for(t, meta, hint, ns)
                if exists:
                    return self.ref(fullname, ns)
                definition = self.named(fullname, "fixed", ns, {"size": size, **body})
                self.remember(fullname, definition, t, meta)
                return definition
            return {"type": "bytes", **body}
        if _is_string(t):
            return "string"
        if pa.types.is_fixed_size_binary(t):
            fullname, exists = self.name_for(t, meta, hint, ns)
            if exists:
                return self.ref(fullname, ns)
            definition = self.named(fullname, "fixed", ns, {"size": t.byte_width})
            self.remember(fullname, definition, t, meta)
            return definition
        if _is_binary(t):
            return "bytes"
        if pa.types.is_date(t):
            return {"type": "int", "logicalType": "date"}
        if pa.types.is_time32(t):
            return {"type": "int", "logicalType": "time-millis"}
        if pa.types.is_time64(t):
            return {"type": "long", "logicalType": "time-micros"}
        if pa.types.is_timestamp(t):
            unit = {"s": "millis", "ms": "millis", "us": "micros", "ns": "nanos"}[t.unit]
            prefix = "timestamp" if t.tz is not None else "local-timestamp"
            return {"type": "long", "logicalType": f"{prefix}-{unit}"}
        if pa.types.is_duration(t):
            return "long"
        if pa.types.is_struct(t):
            return (yield self.record(t, meta, ns, where, hint))
        if is_list_like(t):
            item = t.value_field
            items = yield self.field_type(item, ns, f"{where}.[item]", f"{hint}_item")
            return {"type": "array", "items": items}
        if pa.types.is_map(t):
            key = unwrap_encoding(t.key_type)
            if not _is_string(key):
                raise SchemaError(
                    f"{_where(where)}: map keys of type {t.key_type} cannot be written as Avro "
                    "(Avro map keys are strings)"
                )
            values = yield self.field_type(t.item_field, ns, f"{where}.[value]", f"{hint}_value")
            return {"type": "map", "values": values}
        raise SchemaError(f"{_where(where)}: Arrow type {t} has no Avro equivalent")

    def record(self, t: pa.DataType, meta: dict, ns: str, where: str, hint: str) -> Step:
        fullname, exists = self.name_for(t, meta, hint, ns)
        if exists:
            return self.ref(fullname, ns)
        own_ns = fullname.rsplit(".", 1)[0] if "." in fullname else ""
        definition = self.named(fullname, "record", ns, {})
        # Define the name before the fields: Avro resolves names in document order.
        self.remember(fullname, definition, t, meta)
        definition["fields"] = yield self.fields(
            [t.field(i) for i in range(t.num_fields)], own_ns, where
        )
        return definition

    def fields(self, fields: Iterable[pa.Field], ns: str, where: str) -> Step:
        out = []
        seen: set[str] = set()
        for f in fields:
            here = f"{where}.{f.name}" if where else f.name
            if not _NAME.fullmatch(f.name):
                raise SchemaError(f"field {here}: {f.name!r} is not a valid Avro name")
            if f.name in seen:
                raise SchemaError(f"field {here}: the name {f.name!r} appears twice")
            seen.add(f.name)
            field_type = yield self.field_type(f, ns, here, f.name)
            entry: dict[str, Any] = {"name": f.name, "type": field_type}
            meta = f.metadata or {}
            doc = meta.get(DOC_KEY) or meta.get(b"comment")
            if doc:
                entry["doc"] = doc.decode("utf-8", errors="replace")
            raw_default = meta.get(AVRO_DEFAULT_KEY)
            if raw_default is not None:
                try:
                    default = loads(raw_default, what=AVRO_DEFAULT_KEY.decode())
                except SchemaError:
                    pass
                else:
                    first = field_type[0] if isinstance(field_type, list) else field_type
                    if _default_matches(default, first, self.lookup):
                        entry["default"] = default
            out.append(entry)
        return out


def _int(raw: bytes | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _symbols(meta: dict) -> list[str] | None:
    raw = meta.get(AVRO_SYMBOLS_KEY)
    if raw is None:
        return None
    try:
        symbols = loads(raw, what=AVRO_SYMBOLS_KEY.decode())
    except SchemaError:
        return None
    if (
        isinstance(symbols, list)
        and all(isinstance(s, str) and _NAME.fullmatch(s) for s in symbols)
        and len(set(symbols)) == len(symbols)
    ):
        return symbols
    return None


def arrow_to_avro(schema: pa.Schema, name: str = "Record", namespace: str | None = None) -> dict:
    """The Avro record schema of an Arrow schema (see the module doc for the mapping and for the
    writer-schema rule). ``name`` and ``namespace`` name the top-level record when converting;
    a writer schema that still corresponds is returned as it is, with its own name."""
    raw = (schema.metadata or {}).get(AVRO_SCHEMA_KEY)
    if raw is not None:
        try:
            writer = _load(raw)
            still = corresponds(schema, writer)
        except SchemaError as e:
            raise SchemaError(
                f"schema metadata {AVRO_SCHEMA_KEY.decode()} holds an unusable Avro schema: {e}"
            ) from None
        if still:
            return writer
    if not _NAME.fullmatch(name):
        raise SchemaError(f"the record name {name!r} is not a valid Avro name")
    if namespace and not _valid_fullname(namespace):
        raise SchemaError(f"the namespace {namespace!r} is not a valid Avro namespace")
    converter = _ArrowToAvro()
    fullname = f"{namespace}.{name}" if namespace else name
    top: dict[str, Any] = {"type": "record", "name": name}
    if namespace:
        top["namespace"] = namespace
    converter.defined[fullname] = top
    top["fields"] = _run(converter.fields(list(schema), namespace or "", ""))
    return top
