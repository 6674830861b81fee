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
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from odf_chain.errors import SchemaError
from odf_chain.schema._json import (
    MAX_NESTING,
    canonical as canonical_json,  # noqa: F401  (tests import it from here)
    loads,
)
from odf_chain.schema.arrow_paths import is_list_like, unwrap_encoding
from odf_chain.schema.avro_terms import (
    AVRO_DEFAULT_KEY,
    AVRO_NAME_KEY,
    AVRO_SCHEMA_KEY,
    AVRO_SIZE_KEY,
    AVRO_SYMBOLS_KEY,
    DOC_KEY,
    NAME,
    RESERVED,
    Step,
    default_matches,
    load_avro,
    max_decimal_digits,
    place,
    run_steps,
    valid_fullname,
)
from odf_chain.schema.from_avro import avro_to_arrow

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
    return [(f.name, run_steps(_normalized(f.type)), f.nullable) for f in schema]


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
            if valid_fullname(wanted) and wanted.rsplit(".", 1)[-1] not in RESERVED:
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
        if not NAME.fullmatch(base):
            base = f"_{base}"
        if base in RESERVED:
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
            if default is not None and default_matches(default, base, self.lookup):
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
            if size is not None and max_decimal_digits(size) >= t.precision:
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
                    f"{place(where)}: map keys of type {t.key_type} cannot be written as Avro "
                    "(Avro map keys are strings)"
                )
            values = yield self.field_type(t.item_field, ns, f"{where}.[value]", f"{hint}_value")
            return {"type": "map", "values": values}
        raise SchemaError(f"{place(where)}: Arrow type {t} has no Avro equivalent")

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
            if not NAME.fullmatch(f.name):
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
                    if default_matches(default, first, self.lookup):
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
        and all(isinstance(s, str) and NAME.fullmatch(s) for s in symbols)
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
            writer = load_avro(raw)
            still = corresponds(schema, writer)
        except SchemaError as e:
            raise SchemaError(
                f"schema metadata {AVRO_SCHEMA_KEY.decode()} holds an unusable Avro schema: {e}"
            ) from None
        if still:
            return writer
    if not NAME.fullmatch(name):
        raise SchemaError(f"the record name {name!r} is not a valid Avro name")
    if namespace and not valid_fullname(namespace):
        raise SchemaError(f"the namespace {namespace!r} is not a valid Avro namespace")
    converter = _ArrowToAvro()
    fullname = f"{namespace}.{name}" if namespace else name
    top: dict[str, Any] = {"type": "record", "name": name}
    if namespace:
        top["namespace"] = namespace
    converter.defined[fullname] = top
    top["fields"] = run_steps(converter.fields(list(schema), namespace or "", ""))
    return top
