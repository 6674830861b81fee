"""ODF's structured ``DataSchema`` (SetDataSchema field id 1) <-> ``pyarrow.Schema``.

Newer ODF tools may write the schema in this logical form instead of raw Arrow bytes, and
odf_chain writes it beside them (:func:`arrow_to_data_schema`). The codec keeps it as plain data
(tables as dicts, union members tagged ``kind``); this module reads that into Arrow so the rest
of odf_chain sees one kind of schema, and :func:`first_difference` says where two readings
differ (rule ``schema-forms``). Nullability is ODF's ``Option``
wrapper: a field is nullable exactly when its type is wrapped in it. Defaults are the spec's
(time units Millisecond, timestamps in "UTC"), and the ``arrow.apache.org/*Encoding`` field
attributes (ODF RFC-016) restore the Arrow encoding: large and view strings, binaries and lists,
date64, the decimal bit width.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from odf_chain.errors import FormatError, SchemaError
from odf_chain.format.arrow_schema import MAX_NESTING, check_schema, shown_path, too_deep

_UNITS = {0: "s", 1: "ms", 2: "us", 3: "ns"}

_SIMPLE: dict[str, pa.DataType] = {
    "DataTypeBool": pa.bool_(),
    "DataTypeDate": pa.date32(),
    "DataTypeFloat16": pa.float16(),
    "DataTypeFloat32": pa.float32(),
    "DataTypeFloat64": pa.float64(),
    "DataTypeInt8": pa.int8(),
    "DataTypeInt16": pa.int16(),
    "DataTypeInt32": pa.int32(),
    "DataTypeInt64": pa.int64(),
    "DataTypeUInt8": pa.uint8(),
    "DataTypeUInt16": pa.uint16(),
    "DataTypeUInt32": pa.uint32(),
    "DataTypeUInt64": pa.uint64(),
    "DataTypeNull": pa.null(),
    "DataTypeString": pa.string(),
}


_DEFAULT_UNIT = "ms"
_DEFAULT_TIMEZONE = "UTC"


def _unit(value: Any, default: str, where: str) -> str:
    if value is None:
        return default
    if value not in _UNITS:
        raise FormatError(f"{where}: unknown time unit {value}")
    return _UNITS[value]


def _text(value: Any, what: str, where: str) -> str | None:
    """A string of the schema; the codec leaves bytes that are not UTF-8 as bytes."""
    if value is None or isinstance(value, str):
        return value
    raise FormatError(f"{where}: {what} {value!r} is not valid UTF-8")


def _type(spec: Mapping[str, Any] | None, where: str, level: int) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) for one DataType union value of a field at ``level`` (a top-level
    column is level 1)."""
    if spec is None:
        raise FormatError(f"{where}: missing type")
    kind = spec.get("kind")
    if kind == "DataTypeOption":
        inner = spec.get("inner")
        if isinstance(inner, Mapping) and inner.get("kind") == "DataTypeOption":
            raise FormatError(f"{where}: an Option directly inside an Option")
        return _type(inner, where, level)[0], True
    if kind in ("DataTypeList", "DataTypeMap", "DataTypeStruct") and level >= MAX_NESTING:
        raise too_deep(shown_path(where.split(".")), level + 1)
    if kind in _SIMPLE:
        return _SIMPLE[kind], False
    if kind == "DataTypeBinary":
        n = spec.get("fixed_length")
        return (pa.binary() if n is None else pa.binary(n)), False
    if kind == "DataTypeDecimal":
        precision, scale = spec.get("precision") or 0, spec.get("scale") or 0
        if not 1 <= precision <= 76:
            raise FormatError(f"{where}: decimal precision {precision} outside 1..76")
        factory = pa.decimal128 if precision <= 38 else pa.decimal256
        return factory(precision, scale), False
    if kind == "DataTypeDuration":
        return pa.duration(_unit(spec.get("unit"), _DEFAULT_UNIT, where)), False
    if kind == "DataTypeTime":
        unit = _unit(spec.get("unit"), _DEFAULT_UNIT, where)
        return (pa.time32(unit) if unit in ("s", "ms") else pa.time64(unit)), False
    if kind == "DataTypeTimestamp":
        unit = _unit(spec.get("unit"), _DEFAULT_UNIT, where)
        timezone = _text(spec.get("timezone"), "timezone", where)
        return pa.timestamp(unit, tz=timezone or _DEFAULT_TIMEZONE), False
    if kind == "DataTypeList":
        item, item_nullable = _type(spec.get("item_type"), f"{where}.[item]", level + 1)
        field = pa.field("item", item, nullable=item_nullable)
        n = spec.get("fixed_length")
        return (pa.list_(field) if n is None else pa.list_(field, n)), False
    if kind == "DataTypeMap":
        key, _ = _type(spec.get("key_type"), f"{where}.[key]", level + 1)
        value, value_nullable = _type(spec.get("value_type"), f"{where}.[value]", level + 1)
        return pa.map_(
            key, pa.field("value", value, nullable=value_nullable), bool(spec.get("keys_sorted"))
        ), False
    if kind == "DataTypeStruct":
        return pa.struct(_fields(spec.get("fields") or (), where, level + 1)), False
    raise FormatError(f"{where}: unknown data type {kind!r}")


def _fields(fields: Any, where: str, level: int) -> list[pa.Field]:
    out = []
    for i, spec in enumerate(fields):
        name = _text(spec.get("name"), "the name", f"{where or 'the schema'}: field #{i}")
        if name is None:
            raise FormatError(f"{where}: field #{i} has no name")
        path = f"{where}.{name}" if where else name
        arrow_type, nullable = _type(spec.get("type"), path, level)
        arrow_type = _apply_encoding(arrow_type, _extra(spec.get("extra"), path), path)
        out.append(pa.field(name, arrow_type, nullable=nullable))
    return out


def _extra(extra: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    text = _text((extra or {}).get("entries"), "the extra attributes", where)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{where}: extra attributes are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError(f"{where}: extra attributes must be a JSON object")
    return value


def _apply_encoding(t: pa.DataType, extra: dict[str, Any], where: str) -> pa.DataType:
    """Re-apply the Arrow encoding ODF records beside a logical type."""
    buffer = extra.get("arrow.apache.org/bufferEncoding")
    if isinstance(buffer, dict):
        view = buffer.get("kind") == "View"
        wide = buffer.get("offsetBitWidth") == 64
        if pa.types.is_string(t):
            return pa.string_view() if view else pa.large_string() if wide else t
        if pa.types.is_binary(t):
            return pa.binary_view() if view else pa.large_binary() if wide else t
        if pa.types.is_list(t):
            item = t.value_field
            if view:
                return pa.large_list_view(item) if wide else pa.list_view(item)
            return pa.large_list(item) if wide else t
    date = extra.get("arrow.apache.org/dateEncoding")
    if isinstance(date, dict) and date.get("unit") == "Millisecond" and pa.types.is_date32(t):
        return pa.date64()
    decimal = extra.get("arrow.apache.org/decimalEncoding")
    if isinstance(decimal, dict) and pa.types.is_decimal(t):
        factories = {32: pa.decimal32, 64: pa.decimal64, 128: pa.decimal128, 256: pa.decimal256}
        factory = factories.get(decimal.get("bitWidth"))
        if factory is None:
            raise FormatError(f"{where}: unknown decimal bit width {decimal.get('bitWidth')}")
        try:
            return factory(t.precision, t.scale)
        except ValueError as exc:
            raise FormatError(f"{where}: {exc}") from None
    return t


def data_schema_to_arrow(schema: Mapping[str, Any] | None) -> pa.Schema:
    """Read ODF's structured DataSchema (as decoded plain data) into Arrow."""
    if schema is None:
        raise FormatError("SetDataSchema carries no schema")
    arrow = pa.schema(_fields(schema.get("fields") or (), "", 1))
    check_schema(arrow)  # the same limits as a raw Arrow schema (nesting is already bounded)
    return arrow


# ---------------------------------------------------------------------------------------------
# Arrow -> the structured form


_UNIT_IDS = {unit: i for i, unit in _UNITS.items()}
_SIMPLE_KINDS = [
    (t, kind) for kind, t in _SIMPLE.items() if kind not in ("DataTypeDate", "DataTypeString")
]
_BUFFER = "arrow.apache.org/bufferEncoding"
_DATE = "arrow.apache.org/dateEncoding"
_DECIMAL = "arrow.apache.org/decimalEncoding"


def _contiguous(bits: int) -> dict[str, Any]:
    return {_BUFFER: {"kind": "Contiguous", "offsetBitWidth": bits}}


def _view(bits: int) -> dict[str, Any]:
    return {_BUFFER: {"kind": "View", "offsetBitWidth": bits}}


def _no_form(where: str, t: pa.DataType, why: str) -> SchemaError:
    return SchemaError(f"field {where!r} ({t}) has no structured ODF form: {why}")


def _arrow_type(t: pa.DataType, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the DataType union value, the extra attributes that restore the Arrow encoding) of one
    Arrow type, nullability aside (the caller wraps the result in an Option)."""
    for simple, kind in _SIMPLE_KINDS:
        if t == simple:
            return {"kind": kind}, {}
    if pa.types.is_string(t):
        return {"kind": "DataTypeString"}, _contiguous(32)
    if pa.types.is_large_string(t):
        return {"kind": "DataTypeString"}, _contiguous(64)
    if pa.types.is_string_view(t):
        return {"kind": "DataTypeString"}, _view(32)
    if pa.types.is_binary(t):
        return {"kind": "DataTypeBinary", "fixed_length": None}, _contiguous(32)
    if pa.types.is_large_binary(t):
        return {"kind": "DataTypeBinary", "fixed_length": None}, _contiguous(64)
    if pa.types.is_binary_view(t):
        return {"kind": "DataTypeBinary", "fixed_length": None}, _view(32)
    if pa.types.is_fixed_size_binary(t) and not pa.types.is_decimal(t):
        return {"kind": "DataTypeBinary", "fixed_length": t.byte_width}, {}
    if pa.types.is_date32(t):
        return {"kind": "DataTypeDate"}, {}
    if pa.types.is_date64(t):
        return {"kind": "DataTypeDate"}, {_DATE: {"unit": "Millisecond"}}
    if pa.types.is_decimal(t):
        spec = {"kind": "DataTypeDecimal", "precision": t.precision, "scale": t.scale}
        return spec, {_DECIMAL: {"bitWidth": t.bit_width}}
    if pa.types.is_time(t):
        return {"kind": "DataTypeTime", "unit": _UNIT_IDS[t.unit]}, {}
    if pa.types.is_duration(t):
        return {"kind": "DataTypeDuration", "unit": _UNIT_IDS[t.unit]}, {}
    if pa.types.is_timestamp(t):
        if not t.tz:
            raise _no_form(
                where,
                t,
                "ODF's Timestamp always has a timezone (UTC when none is written), so a "
                "timestamp without one would read back as UTC instants",
            )
        spec = {"kind": "DataTypeTimestamp", "unit": _UNIT_IDS[t.unit], "timezone": t.tz}
        return spec, {}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        item = _nested(t.value_field, f"{where}.[item]")
        fixed = t.list_size if pa.types.is_fixed_size_list(t) else None
        extra = {} if fixed is not None else _contiguous(64 if pa.types.is_large_list(t) else 32)
        return {"kind": "DataTypeList", "item_type": item, "fixed_length": fixed}, extra
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        item = _nested(t.value_field, f"{where}.[item]")
        extra = _view(64 if pa.types.is_large_list_view(t) else 32)
        return {"kind": "DataTypeList", "item_type": item, "fixed_length": None}, extra
    if pa.types.is_map(t):
        spec = {
            "kind": "DataTypeMap",
            "key_type": _nested(t.key_field, f"{where}.[key]"),
            "value_type": _nested(t.item_field, f"{where}.[value]"),
            "keys_sorted": t.keys_sorted,
        }
        return spec, {}
    if pa.types.is_struct(t):
        fields = tuple(_arrow_field(t.field(i), where) for i in range(t.num_fields))
        return {"kind": "DataTypeStruct", "fields": fields}, {}
    raise _no_form(where, t, "ODF 0.39 defines no logical type for it")


def _with_option(spec: dict[str, Any], nullable: bool) -> dict[str, Any]:
    return {"kind": "DataTypeOption", "inner": spec} if nullable else spec


def _nested(field: pa.Field, where: str) -> dict[str, Any]:
    """The DataType of a list item, map key or map value: a bare type, with no place for extra
    attributes, so only an Arrow type that reads back without them has a structured form."""
    spec, _ = _arrow_type(field.type, where)
    back, _ = _type(spec, where, 1)
    if back != field.type:
        raise _no_form(
            where,
            field.type,
            f"inside a list or map it reads back as {back} (a list item or map entry has no "
            "extra attributes to record its Arrow encoding in)",
        )
    return _with_option(spec, field.nullable)


def _arrow_field(field: pa.Field, parent: str) -> dict[str, Any]:
    where = f"{parent}.{field.name}" if parent else field.name
    spec, extra = _arrow_type(field.type, where)
    entries = None
    if extra:
        entries = {"entries": json.dumps(extra, sort_keys=True, separators=(",", ":"))}
    return {"name": field.name, "type": _with_option(spec, field.nullable), "extra": entries}


def arrow_to_data_schema(schema: pa.Schema) -> dict[str, Any]:
    """The structured ``DataSchema`` (ODF 0.39, RFC-016) of an Arrow schema, as the plain data
    the codec reads and writes (the form :func:`data_schema_to_arrow` takes).

    The mapping is kamu's (the ODF reference implementation), so a schema reads the same in
    either tool: a nullable field is its type wrapped in ``Option``; units are always written;
    the Arrow encoding of a type (32/64-bit offsets, views, date64, the decimal's bit width) is
    kept in the field's ``arrow.apache.org/*Encoding`` extra attributes, written for plain
    strings, binaries and lists too (``Contiguous``, 32 bits), as kamu does.

    ``data_schema_to_arrow(arrow_to_data_schema(s)) == s`` for every schema this returns: what
    pyarrow compares (names, types, nullability) survives. What the structured form does not
    hold: metadata (field docs, pandas' schema) and the names of list items and map entries
    (Arrow and Parquet spell them differently; pyarrow's equality ignores them); the raw Arrow
    form, written beside it, keeps both.

    Raises :class:`SchemaError` naming the first field that has no structured form: unions,
    dictionaries, intervals, run-end encoded and extension types (ODF defines no logical type
    for them); timestamps without a timezone (ODF reads them as UTC); a list item or map entry
    whose Arrow encoding differs from the default (large or view strings inside a list: the
    encoding attributes exist only on fields).
    """
    return {"fields": tuple(_arrow_field(f, "") for f in schema), "extra": None}


def first_difference(a: pa.Schema, b: pa.Schema) -> str | None:
    """The first place where two schemas differ in what pyarrow compares (names, types,
    nullability; metadata and list item and map entry names aside), as ``path: x != y``; None
    when they are equal."""
    if a == b:
        return None
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b):
            extra = b.field(i) if i >= len(a) else a.field(i)
            return f"field #{i} {extra.name!r} is in one schema only"
        found = _field_difference(a.field(i), b.field(i), "")
        if found:
            return found
    return "the schemas differ"  # not reached: equal fields make equal schemas


def _field_difference(a: pa.Field, b: pa.Field, parent: str, label: str | None = None) -> str:
    where = label if label is not None else a.name
    where = f"{parent}.{where}" if parent else where
    if label is None and a.name != b.name:
        return f"{where}: named {a.name!r} in one, {b.name!r} in the other"
    if a.nullable != b.nullable:
        return f"{where}: nullable {a.nullable} != {b.nullable}"
    if a.type == b.type:
        return ""
    ka, kb = _kids(a.type), _kids(b.type)
    if type(a.type) is type(b.type) and ka and kb and len(ka) == len(kb):
        for (la, fa), (_, fb) in zip(ka, kb, strict=True):
            found = _field_difference(fa, fb, where, la)
            if found:
                return found
    return f"{where}: {a.type} != {b.type}"


def _kids(t: pa.DataType) -> list[tuple[str | None, pa.Field]]:
    if pa.types.is_map(t):
        return [("[key]", t.key_field), ("[value]", t.item_field)]
    if hasattr(t, "value_field"):
        return [("[item]", t.value_field)]
    if pa.types.is_struct(t):
        return [(None, t.field(i)) for i in range(t.num_fields)]
    return []
