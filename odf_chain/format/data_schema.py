"""ODF's structured ``DataSchema`` (SetDataSchema field id 1) -> ``pyarrow.Schema``.

Newer ODF tools may write the schema in this logical form instead of raw Arrow bytes. The codec
keeps it as plain data (tables as dicts, union members tagged ``kind``); this module reads that
into Arrow so the rest of odf_chain sees one kind of schema. Nullability is ODF's ``Option``
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

from odf_chain.errors import FormatError
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
