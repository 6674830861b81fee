"""ODF's structured ``DataSchema`` (plain data) -> flatbuffer, in flatc's builder order.

The plain data is what the decoder reads (``block_decoder._plain``) and what
:func:`~odf_chain.format.data_schema.arrow_to_data_schema` returns: tables as dicts keyed by
the schema's field names, ``DataType`` union members tagged ``kind``, vectors as tuples. It is
turned into the generated object-API values and packed by their ``Pack`` methods, which *are*
flatc's order (each table's strings, vectors and sub-tables first, in field order, depth
first; then its fields in field order; optional scalars whenever present), so a structured
schema another ODF tool wrote re-encodes to its own bytes. Every value is checked first and a
wrong one is refused by its path (``SetDataSchema.schema.fields[2].type.unit``), never left for
the builder to fail on.

Also usable for the ``schema`` of ODF's read steps (the same ``DataSchema`` table).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import flatbuffers

from odf_chain.errors import FormatError
from odf_chain.format.generated.DataField import DataFieldT
from odf_chain.format.generated.DataSchema import DataSchemaT
from odf_chain.format.generated.DataType import DataType
from odf_chain.format.generated.ExtraAttributes import ExtraAttributesT

__all__ = ["pack_data_schema"]

# Each DataType member's fields (snake_case, as in the plain data) and what each holds.
_MEMBERS: dict[str, dict[str, str]] = {
    "DataTypeBinary": {"fixed_length": "uint64?"},
    "DataTypeBool": {},
    "DataTypeDate": {},
    "DataTypeDecimal": {"precision": "uint32", "scale": "int32"},
    "DataTypeDuration": {"unit": "unit?"},
    "DataTypeFloat16": {},
    "DataTypeFloat32": {},
    "DataTypeFloat64": {},
    "DataTypeInt8": {},
    "DataTypeInt16": {},
    "DataTypeInt32": {},
    "DataTypeInt64": {},
    "DataTypeUInt8": {},
    "DataTypeUInt16": {},
    "DataTypeUInt32": {},
    "DataTypeUInt64": {},
    "DataTypeList": {"item_type": "type", "fixed_length": "uint64?"},
    "DataTypeMap": {"key_type": "type", "value_type": "type", "keys_sorted": "bool?"},
    "DataTypeNull": {},
    "DataTypeOption": {"inner": "type"},
    "DataTypeStruct": {"fields": "fields"},
    "DataTypeTime": {"unit": "unit?"},
    "DataTypeTimestamp": {"unit": "unit?", "timezone": "string"},
    "DataTypeString": {},
}

_RANGES = {
    "uint64": (0, 2**64 - 1),
    "uint32": (0, 2**32 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "unit": (-(2**15), 2**15 - 1),  # TimeUnit is an int16 enum; unknown values are read as such
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _table(value: Any, names: tuple[str, ...], where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FormatError(f"{where}: expected a mapping, got {_kind(value)}")
    unknown = [key for key in value if key not in names]
    if unknown:
        raise FormatError(f"{where}: unknown field {unknown[0]!r} (it has {', '.join(names)})")
    return value


def _text(value: Any, where: str) -> str | bytes | None:
    """A string field: text, or the bytes the decoder kept when they were not UTF-8 (so such a
    block re-encodes as read)."""
    if value is None or isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise FormatError(f"{where}: expected text, got {_kind(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise FormatError(f"{where}: text is not encodable as UTF-8 ({exc.reason})") from None
    return value


def _scalar(value: Any, kind: str, where: str) -> Any:
    optional = kind.endswith("?")
    kind = kind.rstrip("?")
    if value is None:
        if optional:
            return None
        raise FormatError(f"{where}: required, found nothing")
    if kind == "bool":
        if not isinstance(value, bool):
            raise FormatError(f"{where}: expected a bool, got {_kind(value)}")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(f"{where}: expected a number, got {_kind(value)}")
    low, high = _RANGES[kind]
    if not low <= value <= high:
        raise FormatError(f"{where}: {value} is outside {low}..{high}")
    return value


def _extra(value: Any, where: str) -> ExtraAttributesT | None:
    if value is None:
        return None
    f = _table(value, ("entries",), where)
    return ExtraAttributesT(entries=_text(f.get("entries"), f"{where}.entries"))


def _data_type(value: Any, where: str) -> tuple[int, Any]:
    """(union tag, object-API value) of one DataType; (NONE, None) for nothing."""
    if value is None:
        return DataType.NONE, None
    kind = value.get("kind") if isinstance(value, Mapping) else None
    members = _MEMBERS.get(kind) if isinstance(kind, str) else None
    if members is None:
        raise FormatError(f"{where}.kind: unknown data type {kind!r}")
    f = _table(value, ("kind", *members), where)
    obj = getattr(importlib.import_module(f"odf_chain.format.generated.{kind}"), f"{kind}T")()
    for name, held in members.items():
        item, at, attr = f.get(name), f"{where}.{name}", _camel(name)
        if held == "type":
            tag, member = _data_type(item, at)
            setattr(obj, f"{attr}Type", tag)
            setattr(obj, attr, member)
        elif held == "fields":
            setattr(obj, attr, _fields(item, at))
        elif held == "string":
            setattr(obj, attr, _text(item, at))
        else:
            setattr(obj, attr, _scalar(item, held, at))
    return getattr(DataType, kind), obj


def _fields(value: Any, where: str) -> list[DataFieldT] | None:
    if value is None:
        return None
    if not isinstance(value, tuple | list):
        raise FormatError(f"{where}: expected a tuple, got {_kind(value)}")
    out = []
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        f = _table(item, ("name", "type", "extra"), at)
        tag, member = _data_type(f.get("type"), f"{at}.type")
        out.append(
            DataFieldT(
                name=_text(f.get("name"), f"{at}.name"),
                typeType=tag,
                type=member,
                extra=_extra(f.get("extra"), f"{at}.extra"),
            )
        )
    return out


def pack_data_schema(builder: flatbuffers.Builder, value: Any, where: str) -> int:
    """Write one ``DataSchema`` table given as plain data; returns its offset."""
    f = _table(value, ("fields", "extra"), where)
    schema = DataSchemaT(
        fields=_fields(f.get("fields"), f"{where}.fields"),
        extra=_extra(f.get("extra"), f"{where}.extra"),
    )
    return schema.Pack(builder)
