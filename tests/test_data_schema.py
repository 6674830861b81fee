"""ODF's structured DataSchema (SetDataSchema field id 1) read into Arrow, and written from it.

Expected Arrow types are written by hand from the ODF spec (defaults) and RFC-016 (encodings);
the structured form of Arrow types from RFC-016 and kamu's conversion (the reference
implementation).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from odf_chain.dataset import Dataset
from odf_chain.errors import FormatError, RuleViolation, SchemaError
from odf_chain.events import MetadataBlock, SetDataSchema, StructuredSchemaWarning
from odf_chain.format.arrow_schema import schema_to_bare_flatbuffer
from odf_chain.format.codec import decode_block, encode_block
from odf_chain.format.data_schema import arrow_to_data_schema, data_schema_to_arrow
from odf_chain.verify import verify_path
from tests.helpers import snapshot_tree
from tests.test_arrow_paths import tables
from tests.test_arrow_schema import NESTED_TYPES, PRIMITIVE_TYPES, _schemas
from tests.test_schema_limits import cli, forged_block, store_as_head


def field(name, type_, extra=None):
    out = {"name": name, "type": type_, "extra": None}
    if extra is not None:
        out["extra"] = {"entries": json.dumps(extra, separators=(",", ":"))}
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


# ---------------------------------------------------------------------------------------------
# Arrow -> the structured form (what odf_chain writes beside the raw Arrow bytes)


def _enc(key, **value):
    return {f"arrow.apache.org/{key}": value}


_CONTIGUOUS_32 = _enc("bufferEncoding", kind="Contiguous", offsetBitWidth=32)


@pytest.mark.parametrize(
    ("arrow", "logical", "extra"),
    [
        (pa.int8(), kind("Int8"), None),
        (pa.uint64(), kind("UInt64"), None),
        (pa.float16(), kind("Float16"), None),
        (pa.bool_(), kind("Bool"), None),
        (pa.string(), kind("String"), _CONTIGUOUS_32),
        (
            pa.large_string(),
            kind("String"),
            _enc("bufferEncoding", kind="Contiguous", offsetBitWidth=64),
        ),
        (pa.string_view(), kind("String"), _enc("bufferEncoding", kind="View", offsetBitWidth=32)),
        (pa.binary(), kind("Binary", fixed_length=None), _CONTIGUOUS_32),
        (
            pa.binary_view(),
            kind("Binary", fixed_length=None),
            _enc("bufferEncoding", kind="View", offsetBitWidth=32),
        ),
        (pa.binary(16), kind("Binary", fixed_length=16), None),
        (pa.date32(), kind("Date"), None),
        (pa.date64(), kind("Date"), _enc("dateEncoding", unit="Millisecond")),
        (
            pa.decimal128(5, -2),
            kind("Decimal", precision=5, scale=-2),
            _enc("decimalEncoding", bitWidth=128),
        ),
        (
            pa.decimal32(9, 3),
            kind("Decimal", precision=9, scale=3),
            _enc("decimalEncoding", bitWidth=32),
        ),
        (pa.time32("s"), kind("Time", unit=0), None),
        (pa.time64("ns"), kind("Time", unit=3), None),
        (pa.duration("us"), kind("Duration", unit=2), None),
        (pa.timestamp("ms", tz="UTC"), kind("Timestamp", unit=1, timezone="UTC"), None),
        (pa.timestamp("ns", tz="+05:30"), kind("Timestamp", unit=3, timezone="+05:30"), None),
        (
            pa.list_(pa.field("element", pa.int32(), nullable=False)),
            kind("List", item_type=kind("Int32"), fixed_length=None),
            _CONTIGUOUS_32,
        ),
        (
            pa.large_list_view(pa.int32()),
            kind("List", item_type=opt(kind("Int32")), fixed_length=None),
            _enc("bufferEncoding", kind="View", offsetBitWidth=64),
        ),
        (
            pa.list_(pa.string(), 3),
            kind("List", item_type=opt(kind("String")), fixed_length=3),
            None,
        ),
        (
            pa.map_(pa.string(), pa.int64(), keys_sorted=True),
            kind("Map", key_type=kind("String"), value_type=opt(kind("Int64")), keys_sorted=True),
            None,
        ),
        (
            pa.struct([pa.field("s", pa.large_string(), nullable=False)]),
            kind(
                "Struct",
                fields=(
                    field(
                        "s",
                        kind("String"),
                        _enc("bufferEncoding", kind="Contiguous", offsetBitWidth=64),
                    ),
                ),
            ),
            None,
        ),
    ],
    ids=str,
)
def test_arrow_type_mapping(arrow, logical, extra):
    """Written by hand from RFC-016 and kamu's conversion (the reference implementation):
    logical type, Option when nullable, the Arrow encoding in the field's extra attributes."""
    schema = pa.schema([pa.field("c", arrow, nullable=False), pa.field("n", arrow)])
    structured = arrow_to_data_schema(schema)
    expected = field("c", logical, extra)
    assert structured["fields"][0] == expected
    assert structured["fields"][1] == {**expected, "name": "n", "type": opt(logical)}
    assert data_schema_to_arrow(structured) == schema


def test_null_is_an_option_and_metadata_stays_in_the_raw_form():
    schema = pa.schema(
        [pa.field("z", pa.null(), metadata={"doc": "always empty"})], metadata={"k": "v"}
    )
    structured = arrow_to_data_schema(schema)
    assert structured == {"fields": (field("z", opt(kind("Null"))),), "extra": None}
    assert data_schema_to_arrow(structured) == schema  # == leaves metadata aside


@pytest.mark.parametrize(
    ("arrow", "where", "fragment"),
    [
        (pa.timestamp("us"), "c", "always has a timezone"),
        (pa.dictionary(pa.int8(), pa.string()), "c", "no logical type"),
        (pa.dense_union([pa.field("a", pa.int8())]), "c", "no logical type"),
        (pa.month_day_nano_interval(), "c", "no logical type"),
        (pa.run_end_encoded(pa.int32(), pa.int8()), "c", "no logical type"),
        (pa.uuid(), "c", "no logical type"),
        (pa.list_(pa.large_string()), "c.[item]", "reads back as string"),
        (pa.map_(pa.string(), pa.date64()), "c.[value]", "reads back as date32"),
        (pa.map_(pa.large_binary(), pa.int8()), "c.[key]", "reads back as binary"),
        (pa.list_(pa.decimal256(10, 2)), "c.[item]", "decimal128"),
        (
            pa.struct([pa.field("s", pa.list_(pa.timestamp("s")))]),
            "c.s.[item]",
            "always has a timezone",
        ),
    ],
    ids=str,
)
def test_types_without_a_structured_form_are_refused_by_field(arrow, where, fragment):
    with pytest.raises(SchemaError, match=re.escape(f"field {where!r}") + ".*" + fragment):
        arrow_to_data_schema(pa.schema([pa.field("ok", pa.int8()), pa.field("c", arrow)]))


def test_set_data_schema_from_arrow_carries_both_forms_or_says_why_not():
    schema = pa.schema([pa.field("offset", pa.int64(), nullable=False)])
    event = SetDataSchema.from_arrow(schema)
    assert event.raw_arrow_schema == schema_to_bare_flatbuffer(schema)
    assert event.schema == arrow_to_data_schema(schema)
    assert SetDataSchema(schema=event.schema).to_arrow() == event.to_arrow() == schema

    naive = pa.schema([pa.field("t", pa.timestamp("us"))])
    with pytest.warns(StructuredSchemaWarning, match="raw Arrow form only.*field 't'"):
        event = SetDataSchema.from_arrow(naive)
    assert event.schema is None and event.to_arrow() == naive


# -- every schema odf_chain stores: round trip, or a refusal naming a field with no form ----


def _refused(t: pa.DataType, nested: bool) -> bool:
    """Whether ``t`` has no structured form (written out from the mapping's rules)."""
    if isinstance(t, pa.BaseExtensionType) or pa.types.is_dictionary(t):
        return True
    if pa.types.is_union(t) or pa.types.is_interval(t) or pa.types.is_run_end_encoded(t):
        return True
    if pa.types.is_timestamp(t) and not t.tz:
        return True
    if nested:
        non_default = (
            pa.types.is_large_string,
            pa.types.is_string_view,
            pa.types.is_large_binary,
            pa.types.is_binary_view,
            pa.types.is_large_list,
            pa.types.is_list_view,
            pa.types.is_large_list_view,
            pa.types.is_date64,
        )
        if any(test(t) for test in non_default):
            return True
        if pa.types.is_decimal(t) and t.bit_width != (128 if t.precision <= 38 else 256):
            return True
    if pa.types.is_map(t):
        return _refused(t.key_type, True) or _refused(t.item_type, True)
    if hasattr(t, "value_field"):
        return _refused(t.value_type, True)
    if pa.types.is_struct(t):
        return any(_refused(t.field(i).type, False) for i in range(t.num_fields))
    return False


def _check_round_trip(schema: pa.Schema) -> None:
    if any(_refused(f.type, False) for f in schema):
        with pytest.raises(SchemaError, match="has no structured ODF form"):
            arrow_to_data_schema(schema)
        return
    structured = arrow_to_data_schema(schema)
    assert data_schema_to_arrow(structured) == schema
    # through the bytes: both forms written, each alone reads back the same schema
    event = SetDataSchema.from_arrow(schema)
    block = MetadataBlock(datetime(2020, 1, 1, tzinfo=UTC), None, 1, event)
    data = encode_block(block)
    assert decode_block(data) == block
    assert encode_block(decode_block(data)) == data
    assert SetDataSchema(schema=decode_block(data).event.schema).to_arrow() == schema
    assert SetDataSchema(raw_arrow_schema=event.raw_arrow_schema).to_arrow() == schema


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas())
def test_random_arrow_schemas_round_trip_or_are_refused(schema):
    _check_round_trip(schema)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # tables()' repr
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_lakehouse_schemas_round_trip_or_are_refused(table):
    _check_round_trip(table[0])


@pytest.mark.parametrize("arrow", PRIMITIVE_TYPES + NESTED_TYPES, ids=str)
def test_every_reference_type_round_trips_or_is_refused(arrow):
    _check_round_trip(pa.schema([pa.field("c", arrow)]))


# -- a dataset: written with both forms; two forms that disagree refused and reported ---------


def test_written_dataset_carries_both_forms_that_agree(tmp_path):
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"station": ["a"], "tags": [["x", "y"]], "t": [1.5]}))
    (entry,) = [e for e in ds.blocks() if isinstance(e.block.event, SetDataSchema)]
    event = entry.block.event
    assert event.raw_arrow_schema is not None and event.schema is not None
    assert data_schema_to_arrow(event.schema) == event.to_arrow() == ds.state.schema
    assert ds.verify().ok


def test_disagreeing_forms_are_refused_on_append_and_reported_by_verify(tmp_path):
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    ds.write(pa.table({"station": ["a"], "reading": [1.5]}))
    schema = ds.state.schema
    other = pa.schema([f if f.name != "reading" else f.with_type(pa.float32()) for f in schema])
    event = SetDataSchema(
        raw_arrow_schema=schema_to_bare_flatbuffer(schema.append(pa.field("extra", pa.int8()))),
        schema=arrow_to_data_schema(other.append(pa.field("extra", pa.int8()))),
    )
    before = snapshot_tree(root)
    with pytest.raises(RuleViolation) as caught:
        ds.append(event)
    assert caught.value.rule == "schema-forms"
    sequence_number = ds.state.sequence_number + 1
    assert f"block {sequence_number}" in str(caught.value)
    assert "reading: double != float" in str(caught.value)
    assert snapshot_tree(root) == before

    block = replace(forged_block(ds, b""), event=event)
    name = store_as_head(root, block)
    errors = verify_path(root).errors
    assert [(p.rule, p.block_hash, p.sequence_number) for p in errors] == [
        ("schema-forms", name, sequence_number)
    ]
    run = cli("verify", root)
    assert run.returncode == 1
    assert f"block {sequence_number} {name}: [schema-forms]" in run.stdout
    assert "reading: double != float" in run.stdout
