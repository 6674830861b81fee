"""ODF's structured DataSchema (SetDataSchema field id 1) read into Arrow.

Expected Arrow types are written by hand from the ODF spec (defaults) and RFC-016 (encodings).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from odf_chain.errors import FormatError
from odf_chain.format.data_schema import data_schema_to_arrow


def field(name, type_, extra=None):
    out = {"name": name, "type": type_, "extra": None}
    if extra is not None:
        out["extra"] = {"entries": json.dumps(extra)}
    return out


def opt(inner):
    return {"kind": "DataTypeOption", "inner": inner}


def kind(name, **attrs):
    return {"kind": f"DataType{name}", **attrs}


def test_primitives_nullability_and_spec_defaults():
    schema = data_schema_to_arrow(
        {
            "fields": (
                field("offset", kind("Int64")),
                field("ts", kind("Timestamp", unit=None, timezone=None)),
                field("t", opt(kind("Time", unit=None))),
                field("d", kind("Duration", unit=3)),
                field("name", opt(kind("String"))),
                field("raw", kind("Binary", fixed_length=4)),
                field("amount", kind("Decimal", precision=10, scale=2)),
            )
        }
    )
    assert schema == pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("ts", pa.timestamp("ms", tz="UTC"), nullable=False),
            pa.field("t", pa.time32("ms")),
            pa.field("d", pa.duration("ns"), nullable=False),
            pa.field("name", pa.string()),
            pa.field("raw", pa.binary(4), nullable=False),
            pa.field("amount", pa.decimal128(10, 2), nullable=False),
        ]
    )


def test_nested_types():
    schema = data_schema_to_arrow(
        {
            "fields": (
                field("tags", opt(kind("List", item_type=opt(kind("String")), fixed_length=None))),
                field(
                    "attrs",
                    kind(
                        "Map",
                        key_type=kind("String"),
                        value_type=opt(kind("Int32")),
                        keys_sorted=None,
                    ),
                ),
                field("s", kind("Struct", fields=(field("a", kind("Bool")),))),
            )
        }
    )
    assert schema.field("tags").type == pa.list_(pa.field("item", pa.string()))
    assert schema.field("tags").nullable
    assert schema.field("attrs").type == pa.map_(pa.string(), pa.int32())
    assert schema.field("s").type == pa.struct([pa.field("a", pa.bool_(), nullable=False)])


@pytest.mark.parametrize(
    ("logical", "extra", "expected"),
    [
        (kind("String"), {"kind": "Contiguous", "offsetBitWidth": 64}, pa.large_string()),
        (kind("String"), {"kind": "View", "offsetBitWidth": 32}, pa.string_view()),
        (kind("Binary", fixed_length=None), {"kind": "View"}, pa.binary_view()),
        (
            kind("List", item_type=kind("Int8"), fixed_length=None),
            {"kind": "Contiguous", "offsetBitWidth": 64},
            pa.large_list(pa.field("item", pa.int8(), nullable=False)),
        ),
    ],
)
def test_buffer_encoding_restores_arrow_layout(logical, extra, expected):
    schema = data_schema_to_arrow(
        {"fields": (field("c", logical, {"arrow.apache.org/bufferEncoding": extra}),)}
    )
    assert schema.field("c").type == expected


def test_date_and_decimal_encodings():
    schema = data_schema_to_arrow(
        {
            "fields": (
                field(
                    "d", kind("Date"), {"arrow.apache.org/dateEncoding": {"unit": "Millisecond"}}
                ),
                field(
                    "x",
                    kind("Decimal", precision=40, scale=3),
                    {"arrow.apache.org/decimalEncoding": {"bitWidth": 256}},
                ),
            )
        }
    )
    assert schema.field("d").type == pa.date64()
    assert schema.field("x").type == pa.decimal256(40, 3)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"fields": (field("a", kind("Nope")),)}, "a: unknown data type"),
        ({"fields": (field("a", None),)}, "a: missing type"),
        ({"fields": ({"name": None, "type": kind("Int8")},)}, "no name"),
        ({"fields": (field("a", kind("Timestamp", unit=9)),)}, "a: unknown time unit 9"),
        ({"fields": (field("a", kind("Decimal", precision=99, scale=0)),)}, "precision 99"),
        ({"fields": (field("s", kind("Struct", fields=(field("b", kind("X")),))),)}, "s.b"),
        (
            {"fields": ({"name": "a", "type": kind("Int8"), "extra": {"entries": "{"}},)},
            "not valid JSON",
        ),
    ],
)
def test_malformed_schemas_name_the_field(spec, fragment):
    with pytest.raises(FormatError, match=fragment):
        data_schema_to_arrow(spec)
