"""Bare Arrow ``Schema`` flatbuffers (``SetDataSchema.raw_arrow_schema``) <-> pyarrow schemas."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from odf_chain.errors import FormatError
from odf_chain.format import arrow_schema
from odf_chain.format.arrow_schema import schema_from_bare_flatbuffer, schema_to_bare_flatbuffer

# Written by arrow-rs (kamu-cli serializer-stability tests); copied from
# tests/data/odf-reference-blocks.json (itself a copy of shared/vectors/) so that it stands out.
REFERENCE_RAW_ARROW_SCHEMA = base64.b64decode(
    "DAAAAAgACAAAAAQACAAAAAQAAAACAAAAQAAAAAQAAADY////GAAAAAwAAAAAAAAGEAAAAAAAAAAEAAQABAAAAAEAAABi"
    "AAAAEAAUABAAAAAPAAQAAAAIABAAAAAYAAAAIAAAAAAAAAIcAAAACAAMAAQACwAIAAAAQAAAAAAAAAEAAAAAAQAAAGEA"
    "AAA="
)
REFERENCE_SCHEMA = pa.schema(
    [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.bool_(), nullable=False)]
)
VECTORS_PATH = Path(__file__).resolve().parent / "data" / "odf-reference-blocks.json"


def roundtrip(schema: pa.Schema) -> pa.Schema:
    return schema_from_bare_flatbuffer(schema_to_bare_flatbuffer(schema))


def assert_roundtrips(schema: pa.Schema) -> None:
    back = roundtrip(schema)
    assert back.equals(schema, check_metadata=True), f"{schema}\n!=\n{back}"


# --------------------------------------------------------------------------------------------
# the arrow-rs reference vector


def test_reference_vector_decodes_to_expected_schema() -> None:
    schema = schema_from_bare_flatbuffer(REFERENCE_RAW_ARROW_SCHEMA)
    assert schema.equals(REFERENCE_SCHEMA, check_metadata=True)
    assert schema.metadata is None
    assert [f.nullable for f in schema] == [False, False]


def test_reference_vector_matches_vector_file() -> None:
    cases = json.loads(VECTORS_PATH.read_text())["cases"]
    raw = [
        c["event"]["raw_arrow_schema_base64"]
        for c in cases
        if "raw_arrow_schema_base64" in c["event"]
    ]
    assert [base64.b64decode(r) for r in raw] == [REFERENCE_RAW_ARROW_SCHEMA]


def test_reference_schema_reencodes_to_an_equivalent_bare_schema() -> None:
    # pyarrow's (C++) builder lays the Field tables out differently from arrow-rs, so the bytes
    # differ; both are valid bare Schemas of the same schema.
    ours = schema_to_bare_flatbuffer(REFERENCE_SCHEMA)
    assert schema_from_bare_flatbuffer(ours).equals(REFERENCE_SCHEMA, check_metadata=True)
    assert roundtrip(schema_from_bare_flatbuffer(REFERENCE_RAW_ARROW_SCHEMA)).equals(
        REFERENCE_SCHEMA, check_metadata=True
    )


# --------------------------------------------------------------------------------------------
# round trips over the type system

INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
UINT_TYPES = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
PRIMITIVE_TYPES = [
    *INT_TYPES,
    *UINT_TYPES,
    pa.float16(),
    pa.float32(),
    pa.float64(),
    pa.decimal128(38, 10),
    pa.decimal128(5, -2),
    pa.decimal256(76, 20),
    pa.string(),
    pa.large_string(),
    pa.string_view(),
    pa.binary(),
    pa.large_binary(),
    pa.binary_view(),
    pa.binary(16),
    pa.bool_(),
    pa.date32(),
    pa.date64(),
    pa.time32("s"),
    pa.time32("ms"),
    pa.time64("us"),
    pa.time64("ns"),
    *(pa.timestamp(unit) for unit in ("s", "ms", "us", "ns")),
    *(pa.timestamp(unit, tz="UTC") for unit in ("s", "ms", "us", "ns")),
    pa.timestamp("us", tz="Europe/Paris"),
    pa.timestamp("ns", tz="+05:30"),
    *(pa.duration(unit) for unit in ("s", "ms", "us", "ns")),
    pa.month_day_nano_interval(),
    pa.null(),
]

NESTED_TYPES = [
    pa.struct([pa.field("x", pa.int32()), pa.field("y", pa.string(), nullable=False)]),
    pa.struct([]),
    pa.list_(pa.int64()),
    pa.list_(pa.field("element", pa.string(), nullable=False)),
    pa.large_list(pa.float64()),
    pa.list_(pa.int8(), 3),
    pa.list_view(pa.int32()),
    pa.large_list_view(pa.utf8()),
    pa.map_(pa.string(), pa.int64()),
    pa.map_(pa.int32(), pa.list_(pa.string()), keys_sorted=True),
    pa.sparse_union([pa.field("i", pa.int32()), pa.field("s", pa.string())]),
    pa.dense_union([pa.field("i", pa.int32()), pa.field("s", pa.string())], type_codes=[3, 7]),
    pa.dictionary(pa.int32(), pa.string()),
    pa.dictionary(pa.int8(), pa.large_string(), ordered=True),
    pa.run_end_encoded(pa.int32(), pa.string()),
    # nested combinations
    pa.list_(pa.struct([pa.field("k", pa.string()), pa.field("v", pa.list_(pa.int16()))])),
    pa.struct(
        [
            pa.field("m", pa.map_(pa.string(), pa.struct([pa.field("t", pa.timestamp("ms"))]))),
            pa.field("l", pa.large_list(pa.list_(pa.decimal128(10, 2), 2))),
            pa.field("s", pa.struct([pa.field("deep", pa.struct([pa.field("n", pa.null())]))])),
        ]
    ),
    pa.map_(pa.string(), pa.map_(pa.int64(), pa.list_(pa.binary(4)))),
    pa.list_(pa.list_(pa.list_(pa.list_(pa.bool_())))),
]

NESTED_SCHEMA = pa.schema(
    [pa.field("n", NESTED_TYPES[16], metadata={"doc": "x"})], metadata={"k": "v"}
)


@pytest.mark.parametrize(
    ("typ", "nullable"),
    [
        (t, n)
        for t in PRIMITIVE_TYPES + NESTED_TYPES
        for n in (True, False)
        if n or t != pa.null()  # Arrow forbids a non-nullable field of the null type
    ],
    ids=lambda v: str(v) if isinstance(v, pa.DataType) else ("null" if v else "not-null"),
)
def test_roundtrip_single_type(typ: pa.DataType, nullable: bool) -> None:
    assert_roundtrips(pa.schema([pa.field("c", typ, nullable=nullable)]))


def test_roundtrip_all_types_in_one_schema() -> None:
    fields = [
        pa.field(f"f{i}", t, nullable=i % 2 == 0 or t == pa.null())
        for i, t in enumerate(PRIMITIVE_TYPES + NESTED_TYPES)
    ]
    assert_roundtrips(pa.schema(fields))


def test_roundtrip_empty_schema() -> None:
    assert_roundtrips(pa.schema([]))
    assert_roundtrips(pa.schema([], metadata={"only": "metadata"}))


def test_roundtrip_extension_types() -> None:
    assert_roundtrips(
        pa.schema(
            [
                pa.field("u", pa.uuid()),
                pa.field("j", pa.json_()),
                pa.field("t", pa.fixed_shape_tensor(pa.float32(), [2, 3])),
            ]
        )
    )


def test_roundtrip_metadata_and_nullability() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False, metadata={"doc": "primary key"}),
            pa.field(
                "s",
                pa.struct(
                    [
                        pa.field("inner", pa.string(), metadata={b"k": b"\x00\x01 control"}),
                        pa.field("req", pa.int32(), nullable=False),
                    ]
                ),
                metadata={"ünïcödé": "✓", "": ""},
            ),
            pa.field(
                "l",
                pa.list_(pa.field("item", pa.int32(), nullable=False, metadata={"x": "y"})),
            ),
        ],
        metadata={"schema-level": "yes", "pandas": json.dumps({"columns": []}), "empty": ""},
    )
    back = roundtrip(schema)
    assert back.equals(schema, check_metadata=True)
    assert back.metadata == schema.metadata
    assert back.field("id").metadata == {b"doc": b"primary key"}
    assert back.field("s").type.field("inner").metadata == {b"k": b"\x00\x01 control"}
    assert back.field("l").type.value_field.metadata == {b"x": b"y"}
    assert [f.nullable for f in back] == [False, True, True]
    assert back.field("s").type.field("req").nullable is False


def test_metadata_differences_are_preserved() -> None:
    # check_metadata=True must not be vacuous: metadata really travels through the bytes.
    with_md = pa.schema([pa.field("a", pa.int8())], metadata={"k": "v"})
    without = pa.schema([pa.field("a", pa.int8())])
    assert schema_to_bare_flatbuffer(with_md) != schema_to_bare_flatbuffer(without)
    assert not roundtrip(with_md).equals(without, check_metadata=True)


def test_field_names_are_preserved() -> None:
    names = ["", " ", "a.b", "[type=int]", "名前", "x" * 1000, "nul\x00inside"]
    assert_roundtrips(pa.schema([pa.field(n, pa.int32()) for n in names]))


# --------------------------------------------------------------------------------------------
# hypothesis: random nested schemas

# Composite strategies (not st.builds/st.recursive): hypothesis would otherwise render reprs of
# large nested DataType arguments and warn about it.
_MAP_KEYS = [pa.string(), pa.int64(), pa.binary(), pa.date32()]
_NESTED_KINDS = ["struct", "list", "large_list", "fixed_size_list", "map", "sparse", "dense"]
_MAX_DEPTH = 4


@st.composite
def _metadata(draw: st.DrawFn) -> dict[bytes, bytes] | None:
    if draw(st.booleans()):
        return None
    # flatbuffer strings: any UTF-8 (control characters and NULs included); other bytes are
    # refused (tests/test_schema_limits.py)
    text = st.text(max_size=6).map(str.encode)
    return draw(st.dictionaries(text, text, max_size=3))


@st.composite
def _field(draw: st.DrawFn, depth: int) -> pa.Field:
    typ = draw(_data_type(depth))
    # Arrow forbids a non-nullable field of the null type.
    nullable = draw(st.booleans()) or typ == pa.null()
    return pa.field(draw(st.text(max_size=8)), typ, nullable=nullable, metadata=draw(_metadata()))


@st.composite
def _fields(draw: st.DrawFn, depth: int, min_size: int = 0) -> list[pa.Field]:
    count = draw(st.integers(min_size, 4))
    fields: dict[str, pa.Field] = {}
    for _ in range(count):
        f = draw(_field(depth))
        fields.setdefault(f.name, f)  # names unique within a struct/schema
    return list(fields.values())


@st.composite
def _data_type(draw: st.DrawFn, depth: int) -> pa.DataType:
    if depth >= _MAX_DEPTH or draw(st.integers(0, 2)) == 0:
        if draw(st.booleans()):
            return pa.decimal128(draw(st.integers(1, 38)), draw(st.integers(-5, 10)))
        return PRIMITIVE_TYPES[draw(st.integers(0, len(PRIMITIVE_TYPES) - 1))]
    kind = _NESTED_KINDS[draw(st.integers(0, len(_NESTED_KINDS) - 1))]
    child = depth + 1
    if kind == "struct":
        return pa.struct(draw(_fields(child)))
    if kind == "list":
        return pa.list_(draw(_field(child)))
    if kind == "large_list":
        return pa.large_list(draw(_field(child)))
    if kind == "fixed_size_list":
        return pa.list_(draw(_field(child)), draw(st.integers(1, 5)))
    if kind == "map":
        key = _MAP_KEYS[draw(st.integers(0, len(_MAP_KEYS) - 1))]
        return pa.map_(key, draw(_data_type(child)), keys_sorted=draw(st.booleans()))
    members = draw(_fields(child, min_size=1))
    return pa.sparse_union(members) if kind == "sparse" else pa.dense_union(members)


@st.composite
def _schemas(draw: st.DrawFn) -> pa.Schema:
    return pa.schema(draw(_fields(0)), metadata=draw(_metadata()))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas())
def test_roundtrip_random_nested_schemas(schema: pa.Schema) -> None:
    assert_roundtrips(schema)


# --------------------------------------------------------------------------------------------
# shape of the bare bytes


def _root_table_shape(data: bytes) -> tuple[int, int, int, int]:
    """(root table position, its vtable position, vtable size, table size)."""
    (root,) = struct.unpack_from("<I", data, 0)
    (soffset,) = struct.unpack_from("<i", data, root)
    vtable = root - soffset
    vtable_size, table_size = struct.unpack_from("<HH", data, vtable)
    return root, vtable, vtable_size, table_size


@pytest.mark.parametrize(
    "schema",
    [
        REFERENCE_SCHEMA,
        pa.schema([]),
        pa.schema([pa.field("s", NESTED_TYPES[16])], metadata={"k": "v"}),
        pa.schema([pa.field(f"f{i}", t) for i, t in enumerate(PRIMITIVE_TYPES + NESTED_TYPES)]),
    ],
    ids=["reference", "empty", "nested", "all-types"],
)
def test_bare_bytes_are_a_schema_root_not_an_ipc_message(schema: pa.Schema) -> None:
    data = schema_to_bare_flatbuffer(schema)
    ipc = schema.serialize().to_pybytes()
    assert not data.startswith(b"\xff\xff\xff\xff")
    assert ipc.startswith(b"\xff\xff\xff\xff")
    root, vtable, vtable_size, table_size = _root_table_shape(data)
    assert root % 4 == 0 and root >= 4 and root + table_size <= len(data)
    assert vtable >= 0 and vtable + vtable_size <= len(data)
    # A Schema table has at most 4 fields (endianness, fields, custom_metadata, features); a
    # Message table has 5, and its field 1 (header_type) would be a ubyte union tag.
    assert 4 <= vtable_size <= 4 + 2 * 4
    if vtable_size >= 8:  # field 1 = `fields`, a uoffset to a vector of Field tables
        (rel,) = struct.unpack_from("<H", data, vtable + 6)
        if rel:
            (vec,) = struct.unpack_from("<I", data, root + rel)
            (count,) = struct.unpack_from("<I", data, root + rel + vec)
            assert count == len(schema)
    # The Message table that pyarrow wraps around the schema is dropped: shorter than the IPC
    # message minus its 8-byte framing.
    assert len(data) < len(ipc) - 8


def test_reference_vector_shape() -> None:
    root, vtable, vtable_size, table_size = _root_table_shape(REFERENCE_RAW_ARROW_SCHEMA)
    assert (root, vtable, vtable_size, table_size) == (12, 4, 8, 8)
    ours = schema_to_bare_flatbuffer(REFERENCE_SCHEMA)
    # Same root Schema table and vtable as arrow-rs; the Field tables differ.
    assert _root_table_shape(ours) == (12, 4, 8, 8)
    assert ours[:32] == REFERENCE_RAW_ARROW_SCHEMA[:32]


@pytest.mark.parametrize("schema", [REFERENCE_SCHEMA, NESTED_SCHEMA], ids=["reference", "nested"])
def test_trimmed_and_untrimmed_reroots_both_decode(schema: pa.Schema) -> None:
    # schema_to_bare_flatbuffer falls back to the untrimmed form (pyarrow's whole Message buffer
    # with a new root offset) if trimming ever fails to round-trip: both must be valid.
    ipc = schema.serialize().to_pybytes()
    trimmed, untrimmed = arrow_schema._rerooted(arrow_schema._message_flatbuffer(ipc))
    assert len(trimmed) < len(untrimmed)
    assert trimmed == schema_to_bare_flatbuffer(schema)
    for form in (trimmed, untrimmed):
        assert schema_from_bare_flatbuffer(form).equals(schema, check_metadata=True)


def test_encoding_is_deterministic() -> None:
    def build() -> pa.Schema:
        return pa.schema(
            [pa.field("a", pa.list_(pa.struct([pa.field("b", pa.string())])))],
            metadata={"k": "v"},
        )

    first = schema_to_bare_flatbuffer(build())
    assert all(schema_to_bare_flatbuffer(build()) == first for _ in range(5))


def test_rejects_non_schema_input() -> None:
    with pytest.raises(TypeError):
        schema_to_bare_flatbuffer(b"not a schema")  # type: ignore[arg-type]


def test_accepts_bytes_like_input() -> None:
    data = schema_to_bare_flatbuffer(REFERENCE_SCHEMA)
    for view in (bytearray(data), memoryview(data)):
        assert schema_from_bare_flatbuffer(view).equals(REFERENCE_SCHEMA)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# malformed input: always FormatError, never another exception or a crash


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"abc",
        b"\x00" * 4,
        b"\x00" * 8,
        b"\x00" * 64,
        b"\xff" * 64,
        b"\x04\x00\x00\x00" + b"\x00" * 12,  # root table whose vtable is itself
        b"\x08\x00\x00\x00" + b"\x00" * 4 + b"\xff\xff\xff\x7f",  # vtable far before the buffer
        b"\x08\x00\x00\x00" + b"\x00" * 4 + b"\x00\x00\x00\x80",  # vtable far after the buffer
        b"\xf0\xff\xff\xff" + b"\x00" * 12,  # root offset outside the buffer
        b"\x05\x00\x00\x00" + b"\x00" * 12,  # misaligned root
        REFERENCE_SCHEMA.serialize().to_pybytes(),  # an IPC message, not a bare Schema
    ],
    ids=lambda d: d[:16].hex() or "empty",
)
def test_malformed_bytes_raise_format_error(data: bytes) -> None:
    with pytest.raises(FormatError, match="malformed Arrow schema"):
        schema_from_bare_flatbuffer(data)


def test_ipc_message_without_continuation_is_rejected() -> None:
    ipc = REFERENCE_SCHEMA.serialize().to_pybytes()
    with pytest.raises(FormatError):
        schema_from_bare_flatbuffer(ipc[4:])


@pytest.mark.parametrize(
    ("data", "schema"),
    [
        (REFERENCE_RAW_ARROW_SCHEMA, REFERENCE_SCHEMA),
        (schema_to_bare_flatbuffer(REFERENCE_SCHEMA), REFERENCE_SCHEMA),
        (schema_to_bare_flatbuffer(NESTED_SCHEMA), NESTED_SCHEMA),
    ],
    ids=["arrow-rs", "pyarrow", "nested"],
)
def test_every_truncation_raises_format_error(data: bytes, schema: pa.Schema) -> None:
    # Only trailing alignment padding (zeros that belong to no object) may be cut without loss;
    # any cut into real content must be detected.
    meaningful = len(data.rstrip(b"\x00"))
    for length in range(len(data)):
        prefix = data[:length]
        try:
            decoded = schema_from_bare_flatbuffer(prefix)
        except FormatError:
            continue
        assert length >= meaningful, f"truncation to {length} of {len(data)} bytes decoded"
        assert decoded.equals(schema, check_metadata=True)
    assert schema_from_bare_flatbuffer(data).equals(schema, check_metadata=True)


def _decode_or_format_error(data: bytes) -> None:
    try:
        result = schema_from_bare_flatbuffer(data)
    except FormatError:
        return
    assert isinstance(result, pa.Schema)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_raise_format_error(data: bytes) -> None:
    _decode_or_format_error(data)


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=4, max_size=256))
def test_random_bytes_with_plausible_root_raise_format_error(tail: bytes) -> None:
    # A root offset that lands inside the buffer gets past the cheap checks into pyarrow's verifier.
    root = (len(tail) // 2) & ~3
    _decode_or_format_error(struct.pack("<I", root + 4) + tail)


_VALID = [
    REFERENCE_RAW_ARROW_SCHEMA,
    schema_to_bare_flatbuffer(
        pa.schema(
            [
                pa.field(
                    "all", pa.struct([pa.field(f"f{i}", t) for i, t in enumerate(NESTED_TYPES)])
                )
            ],
            metadata={"k": "v"},
        )
    ),
]


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(
    st.sampled_from(_VALID),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_mutated_valid_bytes_never_crash(data: bytes, edits: list[tuple[int, int]]) -> None:
    mutated = bytearray(data)
    for pos, value in edits:
        mutated[pos % len(mutated)] = value
    _decode_or_format_error(bytes(mutated))
