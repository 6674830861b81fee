"""Avro -> Arrow: :func:`avro_to_arrow`, the direction of :mod:`odf_chain.schema.convert` that
reads an Avro writer schema (data ingested from Avro, a ``.avsc`` file) into the Arrow schema of
its columns.

The mapping is described in :mod:`odf_chain.schema.convert`, which re-exports this function.
Apart from Arrow -> Avro because that direction depends on this one (a writer schema is kept
while the Arrow schema still says what :func:`avro_to_arrow` says), never the reverse; what both
share lives in :mod:`odf_chain.schema.avro_terms`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fastavro
import pyarrow as pa

from odf_chain.errors import SchemaError
from odf_chain.schema._json import canonical as canonical_json, check_depth, show
from odf_chain.schema.avro_terms import (
    AVRO_DEFAULT_KEY,
    AVRO_NAME_KEY,
    AVRO_SCHEMA_KEY,
    AVRO_SIZE_KEY,
    AVRO_SYMBOLS_KEY,
    COMPLEX,
    DOC_KEY,
    NAME,
    PRIMITIVES,
    Step,
    avro_children,
    default_matches,
    load_avro,
    max_decimal_digits,
    place,
    run_steps,
    split_fullname,
)

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
                f"{place(where)}: a {schema.get('type')} needs a non-empty string name"
            )
        try:
            fullname, own_ns = split_fullname(name, schema.get("namespace"), ns)
        except SchemaError as e:
            raise SchemaError(f"{place(where)}: {e}") from None
        if fullname in PRIMITIVES or name in PRIMITIVES:
            raise SchemaError(f"{place(where)}: the primitive type name {name!r} cannot be reused")
        if fullname in self.defined:
            raise SchemaError(f"{place(where)}: the name {fullname} is defined twice")
        self.defined[fullname] = schema
        return fullname, own_ns

    def reference(self, name: str, ns: str, where: str) -> Converted:
        fullname = self.resolve(name, ns)
        if fullname is None:
            raise SchemaError(f"{place(where)}: unknown type {name!r}")
        if fullname in self.open:
            raise SchemaError(
                f"{place(where)}: recursive type {fullname}; Arrow cannot express a type that "
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
            raise SchemaError(f"{place(where)}: {schema!r} is not an Avro type")
        kind = schema.get("type")
        if isinstance(kind, list | dict):
            raise SchemaError(f"{place(where)}: 'type' of a type object must be a type name")
        if not isinstance(kind, str):
            raise SchemaError(f"{place(where)}: a type object needs a 'type'")
        if kind in ("record", "error"):
            return (yield self.record(schema, ns, where))
        if kind == "enum":
            return self.enum(schema, ns, where)
        if kind == "fixed":
            return self.fixed(schema, ns, where)
        if kind == "array":
            if "items" not in schema:
                raise SchemaError(f"{place(where)}: an array needs 'items'")
            t, nullable, meta = yield self.convert(schema["items"], ns, f"{where}.[item]")
            return pa.list_(pa.field("item", t, nullable, metadata=meta or None)), False, {}
        if kind == "map":
            if "values" not in schema:
                raise SchemaError(f"{place(where)}: a map needs 'values'")
            t, nullable, meta = yield self.convert(schema["values"], ns, f"{where}.[value]")
            value = pa.field("value", t, nullable, metadata=meta or None)
            return pa.map_(pa.field("key", pa.string(), False), value), False, {}
        if kind in PRIMITIVES:
            return _primitive(kind, schema.get("logicalType"), schema, where)
        return self.reference(kind, ns, where)

    def union(self, members: list, ns: str, where: str) -> Step:
        if not members:
            raise SchemaError(f"{place(where)}: an empty union has no values")
        seen: set[str] = set()
        non_null = []
        for member in members:
            if isinstance(member, list):
                raise SchemaError(f"{place(where)}: a union may not contain a union")
            key = self.member_key(member, ns)
            if key in seen:
                raise SchemaError(f"{place(where)}: the union lists {key} twice")
            seen.add(key)
            if key != "null":
                non_null.append(member)
        if len(non_null) > 1:
            raise SchemaError(
                f"{place(where)}: the union {sorted(seen)} is not supported: only a union of "
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
                    return split_fullname(member["name"], member.get("namespace"), ns)[0]
                except SchemaError:
                    return str(member["name"])
            if isinstance(kind, str) and kind not in PRIMITIVES and kind not in COMPLEX:
                return self.resolve(kind, ns) or kind
            return str(kind)
        return repr(member)

    def record(self, schema: dict, ns: str, where: str) -> Step:
        fullname, own_ns = self.define(schema, ns, where)
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise SchemaError(f"{place(where)}: record {fullname} needs a list of 'fields'")
        self.open.add(fullname)
        arrow_fields = []
        seen: set[str] = set()
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str) or not f["name"]:
                raise SchemaError(
                    f"{place(where)}: record {fullname} has a field without a non-empty name"
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
                if not default_matches(f["default"], f["type"], lookup):
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
            or not all(isinstance(s, str) and NAME.fullmatch(s) for s in symbols)
            or len(set(symbols)) != len(symbols)
        ):
            raise SchemaError(
                f"{place(where)}: enum {fullname} needs a list of unique symbols, each a valid "
                "Avro name"
            )
        if "default" in schema and schema["default"] not in symbols:
            raise SchemaError(f"{place(where)}: the default of enum {fullname} is not a symbol")
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
            raise SchemaError(f"{place(where)}: fixed {fullname} needs a non-negative int size")
        meta = {AVRO_NAME_KEY: fullname.encode()}
        decimal = _decimal(schema, where, max_decimal_digits(size))
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
            f"{place(where)}: decimal precision {show(precision)} is not a positive int"
        )
    if scale is None or scale is False:
        scale = 0
    if not isinstance(scale, int) or isinstance(scale, bool) or not 0 <= scale <= precision:
        raise SchemaError(
            f"{place(where)}: decimal scale {show(scale)} is not an int from 0 to the precision"
        )
    if max_digits is not None and precision > max_digits:
        raise SchemaError(
            f"{place(where)}: decimal precision {precision} does not fit in "
            f"{schema.get('size')} bytes"
        )
    if precision > 76:
        raise SchemaError(
            f"{place(where)}: decimal({precision},{scale}) is wider than Arrow's 76 digits"
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
    obj = load_avro(schema)
    check_depth(obj, "the Avro schema", avro_children)  # before fastavro, as avro_paths does
    if not (isinstance(obj, dict) and obj.get("type") in ("record", "error")):
        kind = obj.get("type") if isinstance(obj, dict) else obj
        raise SchemaError(
            "the top-level Avro schema must be a record (its fields become columns), "
            f"not {show(kind)}"
        )
    converter = _AvroToArrow()
    struct, _, _ = run_steps(converter.convert(obj, "", ""))
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
