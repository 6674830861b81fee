"""``odf_chain.schema_files.load_schema_file``: the schema files the CLI accepts (Avro .avsc,
DataMine or Avro .json, Parquet), read from real files, and every way such a file can be bad.

Expected Arrow schemas and field paths are typed by hand from the mapping tables in
``odf_chain/schema/convert.py``'s docstring, the DataMine seed and README "Field paths"."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.errors import NotFoundError, OdfChainError, SchemaError, StorageError
from odf_chain.schema.paths import field_paths
from odf_chain.schema_files import load_schema_file

AVRO_KEY = b"odf_chain.avro.schema"

READING = {
    "type": "record",
    "name": "Reading",
    "namespace": "com.acme",
    "fields": [
        {"name": "station", "type": "string"},
        {"name": "temp", "type": ["null", "double"], "default": None},
        {
            "name": "loc",
            "type": {
                "type": "record",
                "name": "Loc",
                "fields": [{"name": "lat", "type": "double"}, {"name": "lon", "type": "float"}],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "n", "type": "int"},
    ],
}

# by hand, from convert.py's table: record -> struct, ["null", T] -> nullable T, every other
# field required, array<T> -> list<item: T>
READING_ARROW = [
    ("station", pa.string(), False),
    ("temp", pa.float64(), True),
    (
        "loc",
        pa.struct([pa.field("lat", pa.float64(), False), pa.field("lon", pa.float32(), False)]),
        False,
    ),
    ("tags", pa.list_(pa.field("item", pa.string(), False)), False),
    ("n", pa.int32(), False),
]

# by hand, README "Field paths" (Avro): records by short name, null union collapsed, arrays add
# a token only
READING_PATHS = [
    "[version=2.0].[type=Reading].[type=string].station",
    "[version=2.0].[type=Reading].[type=double].temp",
    "[version=2.0].[type=Reading].[type=Loc].loc",
    "[version=2.0].[type=Reading].[type=Loc].loc.[type=double].lat",
    "[version=2.0].[type=Reading].[type=Loc].loc.[type=float].lon",
    "[version=2.0].[type=Reading].[type=array].[type=string].tags",
    "[version=2.0].[type=Reading].[type=int].n",
]

# The seed's example (../shared/seeds/datamine-idl.txt), verbatim apart from layout.
SEED_DOC = {
    "schema": "attribution",
    "table_list": [
        {
            "table": "attribution_result_rule",
            "fields": [
                {
                    "id": 1,
                    "name": "run_num",
                    "type": "Byte",
                    "isRequired": True,
                    "isAscSortKey": True,
                },
                {"id": 2, "name": "category_id", "type": "String", "default": '"Unknown"'},
                {"id": 3, "name": "keyword", "type": "String", "default": '"Unknown"'},
                {"id": 4, "name": "key", "type": "String", "default": '"Unknown"'},
                {"id": 5, "name": "value", "type": "String", "default": '"Unknown"'},
                {
                    "id": 0,
                    "name": "note",
                    "type": "String",
                    "default": '"Unknown"',
                    "isDerived": True,
                },
            ],
        },
        {
            "table": "attribution_result",
            "fields": [
                {"id": 1, "name": "contract_id", "type": "Integer", "isRequired": True},
                {"id": 2, "name": "data_cost", "type": "Float", "isRequired": True},
                {
                    "id": 3,
                    "name": "rules",
                    "type": "List:attribution_result_rule",
                    "isRequired": True,
                },
            ],
        },
    ],
}

RULE_COLUMNS = [
    ("run_num", pa.int8(), False, 1),
    ("category_id", pa.string(), True, 2),
    ("keyword", pa.string(), True, 3),
    ("key", pa.string(), True, 4),
    ("value", pa.string(), True, 5),
    ("note", pa.string(), True, None),  # derived: not stored, no Parquet field id
]
RULE_STRUCT = pa.struct([pa.field(n, t, nullable) for n, t, nullable, _ in RULE_COLUMNS])


def write(tmp_path: Path, name: str, content: str | bytes | object) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_text(json.dumps(content, indent=2), encoding="utf-8")
    return path


def columns(schema: pa.Schema) -> list[tuple[str, pa.DataType, bool]]:
    return [(f.name, f.type, f.nullable) for f in schema]


def field_ids(schema: pa.Schema) -> list[int | None]:
    return [
        int(f.metadata[b"PARQUET:field_id"])
        if f.metadata and b"PARQUET:field_id" in f.metadata
        else None
        for f in schema
    ]


def error_of(path: Path, table: str | None = None) -> OdfChainError:
    with pytest.raises(OdfChainError) as info:
        load_schema_file(path, table=table)
    return info.value


# -- Avro ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["reading.avsc", "READING.AVSC"])
def test_avsc_record(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, name, READING)
    schema = load_schema_file(path)
    assert columns(schema) == READING_ARROW
    assert set(schema.metadata) == {AVRO_KEY}
    assert json.loads(schema.metadata[AVRO_KEY]) == READING  # the writer schema, whole
    assert field_paths(schema) == READING_PATHS  # ... so the paths follow the Avro convention


def test_avsc_accepts_a_str_path(tmp_path: Path) -> None:
    path = write(tmp_path, "r.avsc", READING)
    assert columns(load_schema_file(str(path))) == READING_ARROW


def test_avro_schema_in_a_json_file(tmp_path: Path) -> None:
    path = write(tmp_path, "reading.json", READING)
    schema = load_schema_file(path)
    assert columns(schema) == READING_ARROW
    assert json.loads(schema.metadata[AVRO_KEY]) == READING
    assert field_paths(schema) == READING_PATHS


# -- DataMine -----------------------------------------------------------------------------------


def test_datamine_single_table(tmp_path: Path) -> None:
    doc = {
        "schema": "shop",
        "table_list": [
            {
                "table": "orders",
                "fields": [
                    {"id": 1, "name": "oid", "type": "INT64", "isRequired": True},
                    {"id": 2, "name": "qty", "type": "Short"},
                    {"id": 3, "name": "items", "type": "List:STRING"},
                ],
            }
        ],
    }
    schema = load_schema_file(write(tmp_path, "shop.json", doc))
    assert columns(schema) == [
        ("oid", pa.int64(), False),
        ("qty", pa.int16(), True),
        ("items", pa.list_(pa.field("element", pa.string())), True),
    ]
    assert field_ids(schema) == [1, 2, 3]
    assert AVRO_KEY not in (schema.metadata or {})
    # lakehouse convention (README "Field paths"), typed by hand
    assert field_paths(schema) == [
        "[version=2.0].[type=long].oid",
        "[version=2.0].[type=int].qty",
        "[version=2.0].[type=struct].[type=array].[type=string].items",
    ]
    # naming the only table is fine too
    assert columns(load_schema_file(tmp_path / "shop.json", table="orders")) == columns(schema)


def test_datamine_multi_table_with_table(tmp_path: Path) -> None:
    path = write(tmp_path, "attribution.json", SEED_DOC)
    rule = load_schema_file(path, table="attribution_result_rule")
    assert columns(rule) == [(n, t, nullable) for n, t, nullable, _ in RULE_COLUMNS]
    assert field_ids(rule) == [fid for *_, fid in RULE_COLUMNS]
    result = load_schema_file(path, table="attribution_result")
    assert columns(result) == [
        ("contract_id", pa.int32(), False),
        ("data_cost", pa.float32(), False),
        ("rules", pa.list_(pa.field("element", RULE_STRUCT)), False),
    ]


def test_datamine_multi_table_without_table_lists_the_tables(tmp_path: Path) -> None:
    path = write(tmp_path, "attribution.json", SEED_DOC)
    err = error_of(path)
    assert isinstance(err, SchemaError)
    message = str(err)
    assert "attribution.json" in message
    assert "(attribution_result_rule, attribution_result)" in message
    # an unknown table: also named, with the ones there are
    err = error_of(path, table="nope")
    assert isinstance(err, SchemaError)
    assert "'nope'" in str(err) and "attribution_result_rule" in str(err)


@pytest.mark.parametrize(
    "doc",
    [
        # a bare table (the seed's "table" element on its own)
        {"table": "t", "fields": [{"id": 1, "name": "a", "type": "INT32"}]},
        # the element section's spelling: "name" instead of "schema"
        {
            "name": "t",
            "table_list": [{"table": "t", "fields": [{"id": 1, "name": "a", "type": "INT32"}]}],
        },
        # a "schema" object holding name and table_list
        {
            "schema": {
                "name": "t",
                "table_list": [{"table": "t", "fields": [{"id": 1, "name": "a", "type": "INT32"}]}],
            }
        },
    ],
    ids=["bare-table", "name-key", "nested-schema-object"],
)
def test_datamine_document_shapes(tmp_path: Path, doc: dict) -> None:
    schema = load_schema_file(write(tmp_path, "t.json", doc))
    assert columns(schema) == [("a", pa.int32(), True)]
    assert field_ids(schema) == [1]


def test_datamine_constraint_violation_names_file_table_and_field(tmp_path: Path) -> None:
    doc = {
        "schema": "s",
        "table_list": [
            {
                "table": "t",
                "fields": [
                    {"id": 1, "name": "a", "type": "INT32", "isAscSortKey": True},
                    {"id": 2, "name": "b", "type": "INT32", "isDesSortKey": True},
                ],
            }
        ],
    }
    err = error_of(write(tmp_path, "two_keys.json", doc))
    assert isinstance(err, SchemaError)
    assert "two_keys.json" in str(err) and "'t'" in str(err) and "'b'" in str(err)


def test_datamine_unknown_type_names_the_field(tmp_path: Path) -> None:
    doc = {"table": "t", "fields": [{"id": 1, "name": "weird", "type": "Quaternion"}]}
    err = error_of(write(tmp_path, "t.json", doc))
    assert isinstance(err, SchemaError)
    assert "t.json" in str(err) and "'weird'" in str(err) and "Quaternion" in str(err)


# -- Parquet ------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".parquet", ".parq", ".PARQUET"])
def test_parquet_file_gives_its_schema(tmp_path: Path, suffix: str) -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "s": pa.array([{"a": 1}, None], pa.struct([pa.field("a", pa.int32())])),
            "tags": pa.array([["x"], []], pa.list_(pa.string())),
        }
    )
    path = tmp_path / f"slice{suffix}"
    pq.write_table(table, path)
    schema = load_schema_file(path)
    assert columns(schema) == [
        ("id", pa.int64(), True),
        ("s", pa.struct([pa.field("a", pa.int32())]), True),
        ("tags", pa.list_(pa.field("element", pa.string())), True),
    ]
    assert field_paths(schema) == [
        "[version=2.0].[type=long].id",
        "[version=2.0].[type=struct].[type=struct].s",
        "[version=2.0].[type=struct].[type=struct].s.[type=int].a",
        "[version=2.0].[type=struct].[type=array].[type=string].tags",
    ]


def test_parquet_with_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "empty_rows.parquet"
    pq.write_table(pa.table({"x": pa.array([], pa.float64())}), path)
    assert columns(load_schema_file(path)) == [("x", pa.float64(), True)]


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["missing.avsc", "missing.json", "missing.parquet", "missing"])
def test_missing_file(tmp_path: Path, name: str) -> None:
    err = error_of(tmp_path / name)
    assert isinstance(err, NotFoundError)
    assert name in str(err)


def test_a_directory_is_not_a_schema_file(tmp_path: Path) -> None:
    (tmp_path / "dir.avsc").mkdir()
    err = error_of(tmp_path / "dir.avsc")
    assert isinstance(err, StorageError)  # what any user-named file that is not one gives
    assert "dir.avsc" in str(err) and "not a regular file (a directory)" in str(err)


@pytest.mark.parametrize("name", ["schema.txt", "schema.yaml", "schema", "schema.avro"])
def test_unknown_suffix(tmp_path: Path, name: str) -> None:
    err = error_of(write(tmp_path, name, READING))  # good content; the name decides
    assert isinstance(err, SchemaError)
    assert name in str(err)
    assert ".avsc" in str(err) and ".parquet" in str(err)  # says what is accepted


@pytest.mark.parametrize("name", ["bad.json", "bad.avsc"])
def test_invalid_json(tmp_path: Path, name: str) -> None:
    err = error_of(write(tmp_path, name, '{"type": "record", "name": "R", "fields": ['))
    assert isinstance(err, SchemaError)
    assert name in str(err) and "JSON" in str(err)


@pytest.mark.parametrize("name", ["latin1.avsc", "latin1.json"])
def test_not_utf8(tmp_path: Path, name: str) -> None:
    text = '{"type": "record", "name": "R", "fields": [{"name": "caf\u00e9", "type": "int"}]}'
    err = error_of(write(tmp_path, name, text.encode("latin-1")))
    assert isinstance(err, SchemaError)
    assert name in str(err)


@pytest.mark.parametrize("suffix", [".avsc", ".json"])
@pytest.mark.parametrize(
    ("fields", "fragments"),
    [
        (
            [{"name": "a", "type": "long"}, {"name": "a", "type": "int"}],
            ["'a'", "two fields"],
        ),
        ([{"name": "when", "type": "Instant"}], ["when", "Instant"]),
        (
            [{"name": "mood", "type": {"type": "enum", "name": "M", "symbols": ["X", "X"]}}],
            ["mood"],
        ),
        ([{"name": "u", "type": ["int", "string"]}], ["u"]),
    ],
    ids=["duplicate-field", "unknown-type", "duplicate-symbol", "two-member-union"],
)
def test_malformed_avro_names_file_and_field(
    tmp_path: Path, suffix: str, fields: list, fragments: list[str]
) -> None:
    name = f"bad{suffix}"
    err = error_of(write(tmp_path, name, {"type": "record", "name": "R", "fields": fields}))
    assert isinstance(err, SchemaError)
    message = str(err)
    assert message.startswith(f"{tmp_path / name}: "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("content", ['"string"', "[1, 2]", "42", '["null", "int"]'])
def test_avro_top_level_must_be_a_record(tmp_path: Path, content: str) -> None:
    err = error_of(write(tmp_path, "top.avsc", content))
    assert isinstance(err, SchemaError)
    assert "top.avsc" in str(err) and "record" in str(err)


@pytest.mark.parametrize(
    "content",
    [b"", b"not parquet at all", b"PAR1" + b"\x00" * 64 + b"PAR1"],
    ids=["empty", "text", "bad-footer"],
)
def test_corrupt_parquet(tmp_path: Path, content: bytes) -> None:
    err = error_of(write(tmp_path, "broken.parquet", content))
    assert isinstance(err, SchemaError)
    assert "broken.parquet" in str(err) and "Parquet" in str(err)


def test_truncated_parquet(tmp_path: Path) -> None:
    path = tmp_path / "cut.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    path.write_bytes(path.read_bytes()[:-10])
    err = error_of(path)
    assert isinstance(err, SchemaError)
    assert "cut.parquet" in str(err)


# -- deep and tricky JSON -----------------------------------------------------------------------


def nested_avro_text(levels: int) -> str:
    """R0 { f0: int } wrapped ``levels - 1`` more times: R<i> { f<i>: R<i-1> } (built as text:
    json.dumps itself recurses)."""
    text = '"int"'
    for i in range(levels):
        text = (
            f'{{"type": "record", "name": "R{i}", "fields": [{{"name": "f{i}", "type": {text}}}]}}'
        )
    return text


@pytest.mark.parametrize("suffix", [".avsc", ".json"])
def test_500_level_avro_schema(tmp_path: Path, suffix: str) -> None:
    schema = load_schema_file(write(tmp_path, f"deep{suffix}", nested_avro_text(500)))
    assert schema.names == ["f499"]
    t = schema.field("f499").type
    for i in range(498, -1, -1):
        assert pa.types.is_struct(t) and t.num_fields == 1, i
        assert t.field(0).name == f"f{i}"
        t = t.field(0).type
    assert t == pa.int32()


def test_deep_datamine_struct_in_a_json_file(tmp_path: Path) -> None:
    levels = 400
    fields = '[{"id": 1, "name": "leaf", "type": "INT64"}]'
    for i in range(levels):
        fields = f'[{{"id": 1, "name": "s{i}", "type": "STRUCT", "fields": {fields}}}]'
    text = f'{{"schema": "d", "table_list": [{{"table": "t", "fields": {fields}}}]}}'
    schema = load_schema_file(write(tmp_path, "deep.json", text))
    assert schema.names == [f"s{levels - 1}"]
    t = schema.field(0).type
    for i in range(levels - 2, -1, -1):
        assert t.field(0).name == f"s{i}"
        t = t.field(0).type
    assert t == pa.struct([pa.field("leaf", pa.int64(), metadata={"PARQUET:field_id": "1"})])


@pytest.mark.parametrize("name", ["deep.json", "deep.avsc"])
def test_absurdly_deep_json_is_a_clean_error(tmp_path: Path, name: str) -> None:
    err = error_of(write(tmp_path, name, "[" * 100_000 + "]" * 100_000))
    assert isinstance(err, SchemaError)
    assert name in str(err)


def test_json_string_is_not_a_record(tmp_path: Path) -> None:
    # valid JSON holding an Avro primitive: the complaint is about the shape, not the syntax
    err = error_of(write(tmp_path, "prim.json", '"string"'))
    assert isinstance(err, SchemaError)
    assert "prim.json" in str(err) and "record" in str(err) and "invalid JSON" not in str(err)


def test_datamine_duplicate_key_in_a_json_file(tmp_path: Path) -> None:
    text = '{"table": "t", "fields": [{"id": 1, "name": "a", "name": "b", "type": "INT32"}]}'
    err = error_of(write(tmp_path, "dupkey.json", text))
    assert isinstance(err, SchemaError)
    assert "dupkey.json" in str(err) and "'name'" in str(err)
