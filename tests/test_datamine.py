"""DataMine IDL <-> Arrow (odf_chain.schema.datamine), against the seed
(../shared/seeds/datamine-idl.txt)."""

from __future__ import annotations

import io
import json
import re
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from odf_chain.errors import SchemaError
from odf_chain.schema.datamine import (
    CONSTRAINTS,
    DataMineSchema,
    DataMineWarning,
    arrow_to_datamine,
    datamine_to_arrow,
    parse_datamine,
)

SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "datamine-idl.txt"

# The seed's example, verbatim.
SEED_EXAMPLE = r"""{
  "schema": "attribution",
  "table_list": [
    {
      "table": "attribution_result_rule",
      "fields": [
        {"id": 1,"name": "run_num",    "type": "Byte",   "isRequired": true, "isAscSortKey": true},
        {"id": 2,"name": "category_id","type": "String", "default": "\"Unknown\""},
        {"id": 3,"name": "keyword",    "type": "String", "default": "\"Unknown\""},
        {"id": 4,"name": "key",        "type": "String", "default": "\"Unknown\""},
        {"id": 5,"name": "value",      "type": "String", "default": "\"Unknown\""},
        {"id": 0,"name": "note",      "type": "String", "default": "\"Unknown\"", "isDerived": true}
      ]
    },
    {
      "table": "attribution_result",
      "fields": [
        {"id": 1,"name": "contract_id","type": "Integer","isRequired": true},
        {"id": 2,"name": "data_cost",  "type": "Float",  "isRequired": true},
        {"id": 3,"name": "rules",      "type": "List:attribution_result_rule", "isRequired": true}
      ]
    }
   ]
}"""

UNKNOWN = '"\\"Unknown\\""'  # the JSON text of the seed's default, the string "Unknown" quoted


def md(**kv: str) -> dict[str, str]:
    return {k.replace("__", "."): v for k, v in kv.items()}


def _string(name: str, fid: int) -> pa.Field:
    return pa.field(
        name,
        pa.string(),
        metadata={
            "PARQUET:field_id": str(fid),
            "datamine.type": '"String"',
            "datamine.default": UNKNOWN,
        },
    )


RULE_FIELDS = [
    pa.field(
        "run_num",
        pa.int8(),
        nullable=False,
        metadata={
            "PARQUET:field_id": "1",
            "datamine.type": '"Byte"',
            "datamine.isRequired": "true",
            "datamine.isAscSortKey": "true",
        },
    ),
    _string("category_id", 2),
    _string("keyword", 3),
    _string("key", 4),
    _string("value", 5),
    pa.field(
        "note",
        pa.string(),
        metadata={
            "datamine.id": "0",  # derived: not stored, so no Parquet field id
            "datamine.type": '"String"',
            "datamine.default": UNKNOWN,
            "datamine.isDerived": "true",
        },
    ),
]

EXPECTED_RULE = pa.schema(
    RULE_FIELDS,
    metadata={"datamine.schema": '"attribution"', "datamine.table": '"attribution_result_rule"'},
)

EXPECTED_RESULT = pa.schema(
    [
        pa.field(
            "contract_id",
            pa.int32(),
            nullable=False,
            metadata={
                "PARQUET:field_id": "1",
                "datamine.type": '"Integer"',
                "datamine.isRequired": "true",
            },
        ),
        pa.field(
            "data_cost",
            pa.float32(),
            nullable=False,
            metadata={
                "PARQUET:field_id": "2",
                "datamine.type": '"Float"',
                "datamine.isRequired": "true",
            },
        ),
        pa.field(
            "rules",
            pa.list_(
                pa.field(
                    "element",
                    pa.struct(RULE_FIELDS),
                    metadata={"datamine.table": '"attribution_result_rule"'},
                )
            ),
            nullable=False,
            metadata={"PARQUET:field_id": "3", "datamine.isRequired": "true"},
        ),
    ],
    metadata={"datamine.schema": '"attribution"', "datamine.table": '"attribution_result"'},
)


def assert_same(a: pa.Schema, b: pa.Schema) -> None:
    assert a.equals(b, check_metadata=True), f"\n{a}\n!=\n{b}"


def doc_of(*tables: dict, name: str = "s") -> dict:
    return {"schema": name, "table_list": list(tables)}


def table_of(*fields: dict, name: str = "t") -> dict:
    return {"table": name, "fields": list(fields)}


def fld(fid: int, name: str, type_: str = "INT32", **extra) -> dict:
    return {"id": fid, "name": name, "type": type_, **extra}


def one(*fields: dict) -> dict:
    return doc_of(table_of(*fields))


def json_blocks(text: str) -> list[str]:
    """Every top-level {...} block of a text (brace-balanced, outside JSON strings)."""
    out, depth, start, in_string, escape = [], 0, 0, False, False
    for i, c in enumerate(text):
        if in_string:
            if escape:
                escape = False
            elif c == "\\":
                escape = True
            elif c == '"':
                in_string = False
        elif c == '"' and depth:
            in_string = True
        elif c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            if depth == 0:
                out.append(text[start : i + 1])
    return out


# --------------------------------------------------------------------------------------------
# the seed's examples


def test_seed_example_parses_to_hand_typed_arrow() -> None:
    parsed = parse_datamine(SEED_EXAMPLE)
    assert isinstance(parsed, DataMineSchema)
    assert parsed.name == "attribution"
    assert parsed.table_names == ("attribution_result_rule", "attribution_result")
    assert [v for _, v, _ in parsed.tables] == [None, None]
    assert_same(parsed.table("attribution_result_rule"), EXPECTED_RULE)
    assert_same(parsed.table("attribution_result"), EXPECTED_RESULT)
    assert_same(datamine_to_arrow(SEED_EXAMPLE, "attribution_result"), EXPECTED_RESULT)
    # the decoded object and bytes parse the same
    assert parse_datamine(json.loads(SEED_EXAMPLE)) == parsed
    assert parse_datamine(SEED_EXAMPLE.encode()) == parsed


@pytest.mark.skipif(not SEED.is_file(), reason="seed document not available")
def test_every_example_in_the_seed_file_parses() -> None:
    blocks = json_blocks(SEED.read_text(encoding="utf-8"))
    assert blocks, "the seed has a JSON example"
    for block in blocks:
        parse_datamine(block)
    assert json.loads(blocks[0]) == json.loads(SEED_EXAMPLE)


def test_the_seeds_other_spellings() -> None:
    # Snippets of the seed's prose: primitive names in both spellings, "provider_user_id
    # (STRUCT)" as a group type, "List:Short" and "List:provider_user_id" as collections.
    doc = doc_of(
        table_of(
            fld(1, "provider", "STRING", isRequired=True),
            fld(2, "user_id", "Long"),
            name="provider_user_id",
        ),
        table_of(
            fld(1, "a", "Byte"),
            fld(2, "b", "BOOL"),
            fld(3, "c", "Boolean"),
            fld(4, "d", "Short"),
            fld(5, "e", "INT16"),
            fld(6, "f", "Integer"),
            fld(7, "g", "INT32"),
            fld(8, "h", "Long"),
            fld(9, "i", "INT64"),
            fld(10, "j", "Float"),
            fld(11, "k", "DOUBLE"),
            fld(12, "l", "String"),
            fld(13, "m", "BINARY"),
            fld(14, "owner", "provider_user_id"),
            fld(15, "counts", "List:Short"),
            fld(16, "owners", "List:provider_user_id"),
            name="usage",
        ),
        name="simple_schema",
    )
    schema = datamine_to_arrow(doc, "usage")
    owner = pa.struct([pa.field("provider", pa.string(), False), pa.field("user_id", pa.int64())])
    expected_types = [
        pa.int8(),
        pa.bool_(),
        pa.bool_(),
        pa.int16(),
        pa.int16(),
        pa.int32(),
        pa.int32(),
        pa.int64(),
        pa.int64(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.binary(),
        owner,
        pa.list_(pa.field("element", pa.int16())),
        pa.list_(pa.field("element", owner)),
    ]
    assert [f.type for f in schema] == expected_types
    assert [int(f.metadata[b"PARQUET:field_id"]) for f in schema] == list(range(1, 17))
    assert schema.field("owner").metadata[b"datamine.table"] == b'"provider_user_id"'
    assert schema.field("counts").metadata[b"datamine.type"] == b'"List:Short"'
    assert b"datamine.type" not in schema.field("owners").metadata  # canonical spelling
    # spellings are case-insensitive; List: too
    lower = datamine_to_arrow(one(fld(1, "x", "list:LIST:short"), fld(2, "y", "integer")))
    assert lower.field("x").type == pa.list_(pa.list_(pa.int16()))
    assert lower.field("y").type == pa.int32()


def test_constraints_object_form_and_flat_form_agree() -> None:
    flat = one(fld(1, "a", isRequired=True, isDesSortKey=True), fld(2, "b", isFrequentlyUsed=True))
    boxed = one(
        fld(1, "a", constraints={"isRequired": True, "isDesSortKey": True}),
        fld(2, "b", constraints=["isFrequentlyUsed"]),
    )
    mixed = one(
        fld(1, "a", isRequired=True, constraints={"isDesSortKey": True, "isRequired": True}),
        fld(2, "b", constraints={"isFrequentlyUsed": True}),
    )
    assert_same(datamine_to_arrow(boxed), datamine_to_arrow(flat))
    assert_same(datamine_to_arrow(mixed), datamine_to_arrow(flat))
    # written back in the seed's JSON form: flat keys
    assert arrow_to_datamine(datamine_to_arrow(boxed), "t", "s") == flat


def test_other_document_shapes() -> None:
    fields = [fld(1, "a")]
    expected = datamine_to_arrow(doc_of(table_of(*fields), name="t"))
    # the element section's "name", a nested "schema" object, a bare table
    assert_same(datamine_to_arrow({"name": "t", "table_list": [table_of(*fields)]}), expected)
    nested = {"schema": {"name": "t", "table_list": [table_of(*fields)]}}
    assert_same(datamine_to_arrow(nested), expected)
    assert_same(datamine_to_arrow(table_of(*fields)), expected)


def test_inline_struct_and_versions() -> None:
    doc = doc_of(
        {
            "table": "t",
            "version": 3,
            "fields": [
                fld(1, "id", "INT64", isRequired=True),
                {
                    "id": 2,
                    "name": "address",
                    "type": "STRUCT",
                    "fields": [fld(1, "city", "STRING"), fld(2, "zip", "INT32")],
                },
                {
                    "id": 3,
                    "name": "phones",
                    "type": "List:STRUCT",
                    "fields": [fld(1, "number", "STRING", isRequired=True)],
                },
            ],
        }
    )
    parsed = parse_datamine(doc)
    assert parsed.version("t") == 3
    schema = parsed.table("t")
    assert schema.metadata[b"datamine.version"] == b"3"
    address = schema.field("address").type
    assert address == pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int32())])
    assert address.field("zip").metadata == {b"PARQUET:field_id": b"2"}
    phones = schema.field("phones").type
    assert phones == pa.list_(pa.struct([pa.field("number", pa.string(), False)]))
    assert arrow_to_datamine(schema, "t") == doc


# --------------------------------------------------------------------------------------------
# round trips


def test_seed_round_trips_document_arrow_document() -> None:
    doc = json.loads(SEED_EXAMPLE)
    # the referenced table comes back too, before the table that uses it, as in the seed
    assert (
        arrow_to_datamine(datamine_to_arrow(doc, "attribution_result"), "attribution_result") == doc
    )
    rule_only = {"schema": "attribution", "table_list": [doc["table_list"][0]]}
    rule = datamine_to_arrow(doc, "attribution_result_rule")
    assert arrow_to_datamine(rule, "attribution_result_rule") == rule_only
    assert arrow_to_datamine(rule, "attribution_result_rule", "other")["schema"] == "other"


def test_seed_round_trips_arrow_document_arrow() -> None:
    for schema, name in (
        (EXPECTED_RESULT, "attribution_result"),
        (EXPECTED_RULE, "attribution_result_rule"),
    ):
        back = datamine_to_arrow(json.dumps(arrow_to_datamine(schema, name)), name)
        assert_same(back, schema)


def _parquet(schema: pa.Schema, *, store_schema: bool) -> io.BytesIO:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([], schema=schema), buf, store_schema=store_schema)
    buf.seek(0)
    return buf


def _field_ids(schema: pa.Schema) -> dict[str, int]:
    """Dotted name path -> Parquet field id, for every field that has one."""
    out: dict[str, int] = {}
    stack = [("", f) for f in schema]
    while stack:
        prefix, f = stack.pop()
        path = prefix + f.name
        if f.metadata and b"PARQUET:field_id" in f.metadata:
            out[path] = int(f.metadata[b"PARQUET:field_id"])
        t = f.type
        if pa.types.is_list(t):
            stack.append((path + ".", t.value_field))
        elif pa.types.is_struct(t):
            stack.extend((path + ".", t.field(i)) for i in range(t.num_fields))
    return out


def test_field_ids_survive_a_real_parquet_file() -> None:
    schema = datamine_to_arrow(SEED_EXAMPLE, "attribution_result")
    # without the stored Arrow schema, pyarrow rebuilds field ids from the Parquet schema itself
    bare = pq.read_schema(_parquet(schema, store_schema=False))
    ids = _field_ids(bare)
    assert ids == {
        "contract_id": 1,
        "data_cost": 2,
        "rules": 3,
        "rules.element.run_num": 1,
        "rules.element.category_id": 2,
        "rules.element.keyword": 3,
        "rules.element.key": 4,
        "rules.element.value": 5,
    }  # the derived field "note" has no Parquet field id
    assert ids == _field_ids(schema)
    parquet_text = str(pq.ParquetFile(_parquet(schema, store_schema=False)).schema)
    assert re.search(r"field_id=3 rules", parquet_text)
    assert re.search(r"int32 field_id=1 run_num", parquet_text)
    assert re.search(r"field_id=-1 note", parquet_text)
    # a document written from the Parquet file's own schema keeps the ids; what the Parquet
    # schema cannot carry (constraints, the derived flag) is gone, so "note" is a stored field
    # that gets the next id
    doc = arrow_to_datamine(bare, "attribution_result", "attribution")
    fields = doc["table_list"][-1]["fields"]
    assert [f["id"] for f in fields] == [1, 2, 3]
    assert [f["id"] for f in fields[2]["fields"]] == [1, 2, 3, 4, 5, 6]
    assert datamine_to_arrow(doc, "attribution_result").equals(bare)
    assert _field_ids(datamine_to_arrow(doc, "attribution_result")) == {
        **ids,
        "rules.element.note": 6,
    }
    # with the stored Arrow schema, the file's schema is the one written, metadata and all
    stored = pq.read_schema(_parquet(schema, store_schema=True))
    assert_same(stored, schema)
    assert arrow_to_datamine(stored, "attribution_result") == json.loads(SEED_EXAMPLE)


# --------------------------------------------------------------------------------------------
# rejections: each names the table and the field


def rejects(doc, *fragments: str) -> None:
    with pytest.raises(SchemaError) as err:
        parse_datamine(doc)
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message, message


def test_more_than_one_sort_key() -> None:
    doc = one(fld(1, "a", isAscSortKey=True), fld(2, "b"), fld(3, "c", isDesSortKey=True))
    rejects(doc, "table 't'", "field 'c'", "second sort key", "'a'")
    rejects(one(fld(1, "a", isAscSortKey=True, isDesSortKey=True)), "table 't'", "field 'a'")
    # false sort keys are no sort keys
    parse_datamine(one(fld(1, "a", isAscSortKey=True), fld(2, "b", isDesSortKey=False)))


def test_derived_field_must_be_optional_and_primitive() -> None:
    rejects(
        one(fld(1, "a"), fld(0, "d", isDerived=True, isRequired=True)),
        "table 't'",
        "field 'd'",
        "optional",
    )
    rejects(one(fld(1, "a"), fld(0, "d", "List:INT32", isDerived=True)), "field 'd'", "primitive")
    struct = {"id": 0, "name": "d", "type": "STRUCT", "isDerived": True, "fields": [fld(1, "x")]}
    rejects(one(fld(1, "a"), struct), "table 't'", "field 'd'", "primitive")
    ref = doc_of(
        table_of(fld(1, "x"), name="r"), table_of(fld(1, "a"), fld(0, "d", "r", isDerived=True))
    )
    rejects(ref, "table 't'", "field 'd'", "primitive")


def test_ids_must_increase() -> None:
    rejects(one(fld(1, "a"), fld(3, "b"), fld(2, "c")), "table 't'", "field 'c'", "id 2", "'b'")
    rejects(one(fld(1, "a"), fld(1, "b")), "table 't'", "field 'b'", "does not increase")
    # gaps are allowed ("increases"), derived fields sharing id 0 are outside the order
    parse_datamine(one(fld(1, "a"), fld(5, "b")))
    parse_datamine(
        one(fld(0, "n", "STRING", isDerived=True), fld(1, "a"), fld(0, "m", "BOOL", isDerived=True))
    )
    parse_datamine(SEED_EXAMPLE)


def test_derived_fields_share_one_id() -> None:
    rejects(
        one(fld(1, "a"), fld(0, "d", isDerived=True), fld(7, "e", isDerived=True)),
        "table 't'",
        "field 'e'",
        "share one id",
    )
    rejects(
        one(fld(1, "a"), fld(2, "b"), fld(2, "d", isDerived=True)),
        "table 't'",
        "field 'd'",
        "stored field 'b'",
    )


def test_unknown_type() -> None:
    rejects(one(fld(1, "a"), fld(2, "b", "Int8")), "table 't'", "field 'b'", "unknown type 'Int8'")
    rejects(one(fld(1, "b", "List:")), "table 't'", "field 'b'", "no element type")
    rejects(one(fld(1, "b", "LIST")), "field 'b'", "unknown type")
    rejects(one(fld(1, "b", "List:nowhere")), "field 'b'", "'List:nowhere'")
    rejects(one(fld(1, "b", 7)), "field 'b'", "'type' must be a string")


def test_missing_required_keys() -> None:
    rejects(one({"name": "a", "type": "INT32"}), "table 't'", "field 'a'", "missing 'id'")
    rejects(one({"id": 1, "name": "a"}), "table 't'", "field 'a'", "missing 'type'")
    rejects(
        one(fld(1, "a"), {"id": 2, "type": "INT32"}),
        "table 't'",
        "field 'fields[1]'",
        "missing 'name'",
    )
    rejects(doc_of({"fields": [fld(1, "a")]}), "table_list[0]", "missing its name")
    rejects(doc_of({"table": "t"}), "table 't'", "missing 'fields'")
    rejects({"table_list": [table_of(fld(1, "a"))]}, "missing the schema name")
    rejects({"schema": "s"}, "schema 's'", "missing 'table_list'")
    rejects(one({"id": 1, "name": "s", "type": "STRUCT"}), "table 't'", "field 's'", "'fields'")


def test_duplicate_names() -> None:
    rejects(
        one(fld(1, "a"), fld(2, "b"), fld(3, "a")),
        "table 't'",
        "field 'a'",
        "duplicate field name",
        "fields[0]",
    )
    rejects(
        doc_of(table_of(fld(1, "a")), table_of(fld(1, "a"))), "table 't'", "duplicate table name"
    )


def test_malformed_values() -> None:
    rejects(one(fld(True, "a")), "field 'a'", "'id'")
    rejects(one(fld(-1, "a")), "field 'a'", "'id'")
    rejects(one(fld(2**31, "a")), "field 'a'", "'id'")
    rejects(one(fld("1", "a")), "field 'a'", "'id'")
    rejects(one(fld(1, "")), "field 'fields[0]'", "'name'")
    rejects(one(fld(1, "a", isRequired="yes")), "field 'a'", "true or false")
    rejects(
        one(fld(1, "a", isRequred=True)), "table 't'", "field 'a'", "unknown key", "'isRequred'"
    )
    rejects(one(fld(1, "a", constraints={"isUnique": True})), "field 'a'", "unknown constraint")
    rejects(one(fld(1, "a", constraints="isRequired")), "field 'a'", "'constraints'")
    rejects(
        one(fld(1, "a", isRequired=True, constraints={"isRequired": False})), "field 'a'", "twice"
    )
    rejects(one(fld(1, "a", fields=[fld(1, "x")])), "field 'a'", "only allowed with a STRUCT")
    rejects(one(fld(1, "a", default={1, 2})), "field 'a'", "'default'")
    rejects(one(fld(1, "a", default=float("nan"))), "field 'a'", "'default'")
    rejects(one("a"), "table 't'", "fields[0]", "must be an object")
    rejects(doc_of(table_of()), "table 't'", "empty")
    rejects(doc_of(), "schema 's'", "empty")
    rejects(doc_of({"table": "t", "fields": {}}), "table 't'", "must be a list")
    rejects(
        doc_of({"table": "t", "fields": [fld(1, "a")], "version": "1.0"}), "table 't'", "version"
    )
    rejects(doc_of({"table": "t", "fields": [fld(1, "a")], "owner": "x"}), "table 't'", "'owner'")
    rejects({"schema": "s", "table_list": [], "tables": []}, "'tables'")
    rejects({"schema": "s", "name": "z", "table_list": [table_of(fld(1, "a"))]}, "disagree")
    rejects({"schema": "s", "table_list": {}}, "'table_list' must be a list")
    rejects({"schema": 5, "table_list": []}, "schema name")
    rejects(doc_of(5), "table_list[0]")


def test_nested_errors_name_the_field_path() -> None:
    inner = {"id": 1, "name": "inner", "type": "STRUCT", "fields": [fld(2, "x"), fld(1, "y")]}
    doc = one(fld(1, "a"), {"id": 2, "name": "outer", "type": "List:STRUCT", "fields": [inner]})
    rejects(doc, "table 't'", "field 'outer.inner.y'", "does not increase")
    rejects(
        one({"id": 1, "name": "s", "type": "STRUCT", "fields": []}),
        "table 't'",
        "field 's'",
        "empty",
    )


def test_recursive_table_references() -> None:
    rejects(
        doc_of(table_of(fld(1, "me", "List:t"))), "table 't'", "field 'me'", "recursive", "t -> t"
    )
    doc = doc_of(
        table_of(fld(1, "b", "b"), name="a"),
        table_of(fld(1, "c", "List:c"), name="b"),
        table_of(
            fld(1, "x"),
            {"id": 2, "name": "s", "type": "STRUCT", "fields": [fld(1, "a", "a")]},
            name="c",
        ),
    )
    rejects(doc, "recursive", "a -> b -> c -> a")


def test_invalid_json() -> None:
    rejects("{", "not valid JSON")
    rejects('{"schema": "s", "schema": "t", "table_list": []}', "duplicate key 'schema'")
    rejects("[]", "JSON object")
    rejects(b"\xff", "not UTF-8")
    rejects(42, "JSON object")


def test_table_selection() -> None:
    with pytest.raises(
        SchemaError, match=r"2 tables \(attribution_result_rule, attribution_result\)"
    ):
        datamine_to_arrow(SEED_EXAMPLE)
    with pytest.raises(
        SchemaError,
        match=r"no table 'nope' \(tables: attribution_result_rule, attribution_result\)",
    ):
        datamine_to_arrow(SEED_EXAMPLE, "nope")
    assert datamine_to_arrow(one(fld(1, "a"))).names == ["a"]


# --------------------------------------------------------------------------------------------
# warnings


def _warnings_of(doc) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parse_datamine(doc)
    return [str(w.message) for w in caught if issubclass(w.category, DataMineWarning)]


def test_names_outside_the_recommended_pattern_warn() -> None:
    assert _warnings_of(SEED_EXAMPLE) == []
    messages = _warnings_of(one(fld(1, "ok_name"), fld(2, "bad-name"), fld(3, "_x"), fld(4, "x\n")))
    assert len(messages) == 3
    assert all("table 't'" in m and "recommended pattern" in m for m in messages)
    assert "field 'bad-name'" in messages[0]
    assert "field '_x'" in messages[1]
    assert "field 'x\\n'" in messages[2]
    with pytest.warns(DataMineWarning, match=r"table '1st'.*recommended pattern"):
        parse_datamine(doc_of(table_of(fld(1, "a"), name="1st")))
    with pytest.warns(DataMineWarning, match=r"schema 'my schema'"):
        parse_datamine(doc_of(table_of(fld(1, "a")), name="my schema"))
    # a warning, not an error: the schema is still produced
    with pytest.warns(DataMineWarning):
        assert datamine_to_arrow(one(fld(1, "bad-name"))).names == ["bad-name"]


def test_other_warnings() -> None:
    messages = _warnings_of(one(fld(1, "Name"), fld(2, "name")))
    assert messages == [
        "DataMine table 't', field 'name': name differs only in case from field 'Name'"
    ]
    messages = _warnings_of(one(fld(1, "a", isRequired=True, default=0)))
    assert len(messages) == 1 and "field 'a'" in messages[0] and "default" in messages[0]


# --------------------------------------------------------------------------------------------
# Arrow schemas that did not come from DataMine


def test_foreign_arrow_schema() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("name", pa.large_string()),
            pa.field("tag", pa.dictionary(pa.int32(), pa.string())),
            pa.field("blob", pa.large_binary()),
            pa.field("scores", pa.large_list(pa.float64())),
            pa.field(
                "point",
                pa.struct([pa.field("x", pa.float32(), False), pa.field("y", pa.float32())]),
            ),
            pa.field(
                "items", pa.list_(pa.field("it", pa.struct([pa.field("sku", pa.string())]), False))
            ),
        ]
    )
    doc = arrow_to_datamine(schema, "events", "shop")
    assert doc == {
        "schema": "shop",
        "table_list": [
            {
                "table": "events",
                "fields": [
                    {"id": 1, "name": "id", "type": "INT64", "isRequired": True},
                    {"id": 2, "name": "name", "type": "STRING"},
                    {"id": 3, "name": "tag", "type": "STRING"},
                    {"id": 4, "name": "blob", "type": "BINARY"},
                    {"id": 5, "name": "scores", "type": "List:DOUBLE"},
                    {
                        "id": 6,
                        "name": "point",
                        "type": "STRUCT",
                        "fields": [
                            {"id": 1, "name": "x", "type": "FLOAT", "isRequired": True},
                            {"id": 2, "name": "y", "type": "FLOAT"},
                        ],
                    },
                    {
                        "id": 7,
                        "name": "items",
                        "type": "List:STRUCT",
                        "fields": [{"id": 1, "name": "sku", "type": "STRING"}],
                    },
                ],
            }
        ],
    }
    back = datamine_to_arrow(doc)
    assert back.field("name").type == pa.string()
    assert back.field("scores").type == pa.list_(pa.float64())
    # list items are always nullable in DataMine
    assert back.field("items").type.value_field.nullable
    assert arrow_to_datamine(back, "events") == doc  # stable from here on
    assert arrow_to_datamine(schema, "events")["schema"] == "events"


def test_foreign_struct_tables_option() -> None:
    schema = pa.schema(
        [
            pa.field("a", pa.struct([pa.field("b", pa.struct([pa.field("c", pa.int32())]))])),
            pa.field("l", pa.list_(pa.struct([pa.field("c", pa.int32())]))),
        ]
    )
    doc = arrow_to_datamine(schema, "t", struct_tables=True)
    assert [t["table"] for t in doc["table_list"]] == ["t_a_b", "t_a", "t_l", "t"]
    assert doc["table_list"][-1]["fields"] == [
        {"id": 1, "name": "a", "type": "t_a"},
        {"id": 2, "name": "l", "type": "List:t_l"},
    ]
    assert doc["table_list"][1]["fields"] == [{"id": 1, "name": "b", "type": "t_a_b"}]
    back = datamine_to_arrow(doc, "t")
    assert back.remove_metadata().equals(schema) and [f.type for f in back] == list(schema.types)
    inline = datamine_to_arrow(arrow_to_datamine(schema, "t"))
    assert [f.type for f in inline] == [f.type for f in back]
    # the table form is kept once the structs carry table names
    assert arrow_to_datamine(back, "t") == doc


def test_foreign_field_ids_kept_or_assigned_in_order() -> None:
    schema = pa.schema(
        [
            pa.field("a", pa.int32()),
            pa.field("b", pa.int32(), metadata={"PARQUET:field_id": "10"}),
            pa.field("c", pa.int32()),
            pa.field("d", pa.string(), metadata={"datamine.isDerived": "true"}),
        ]
    )
    fields = arrow_to_datamine(schema, "t")["table_list"][0]["fields"]
    assert [(f["name"], f["id"]) for f in fields] == [("a", 1), ("b", 10), ("c", 11), ("d", 0)]
    assert fields[3]["isDerived"] is True


@pytest.mark.parametrize(
    "arrow_type",
    [
        pa.uint8(),
        pa.uint64(),
        pa.float16(),
        pa.decimal128(10, 2),
        pa.date32(),
        pa.timestamp("ms", "UTC"),
        pa.time64("us"),
        pa.duration("s"),
        pa.null(),
        pa.map_(pa.string(), pa.int32()),
        pa.binary(16),
        pa.list_(pa.int32(), 3),
        pa.list_(pa.timestamp("us")),
    ],
    ids=str,
)
def test_arrow_types_without_datamine_equivalent(arrow_type: pa.DataType) -> None:
    schema = pa.schema(
        [pa.field("ok", pa.int32()), pa.field("s", pa.struct([pa.field("bad", arrow_type)]))]
    )
    with pytest.raises(SchemaError, match=r"table 't', field 's\.bad'.*no DataMine equivalent"):
        arrow_to_datamine(schema, "t")


def test_foreign_schemas_that_break_datamine_rules() -> None:
    dup = pa.schema([pa.field("a", pa.int32()), pa.field("a", pa.int64())])
    with pytest.raises(SchemaError, match=r"table 't', field 'a'.*duplicate"):
        arrow_to_datamine(dup, "t")
    unordered = pa.schema(
        [
            pa.field("a", pa.int32(), metadata={"PARQUET:field_id": "2"}),
            pa.field("b", pa.int32(), metadata={"PARQUET:field_id": "1"}),
        ]
    )
    with pytest.raises(SchemaError, match=r"table 't', field 'b'.*does not increase"):
        arrow_to_datamine(unordered, "t")
    bad_id = pa.schema([pa.field("a", pa.int32(), metadata={"PARQUET:field_id": "x"})])
    with pytest.raises(SchemaError, match=r"table 't', field 'a'.*PARQUET:field_id"):
        arrow_to_datamine(bad_id, "t")
    bad_meta = pa.schema([pa.field("a", pa.int32(), metadata={"datamine.default": "{"})])
    with pytest.raises(SchemaError, match=r"table 't', field 'a'.*not JSON"):
        arrow_to_datamine(bad_meta, "t")
    derived_required = pa.schema(
        [pa.field("a", pa.int32(), False, metadata={"datamine.isDerived": "true"})]
    )
    with pytest.raises(SchemaError, match=r"table 't', field 'a'.*optional"):
        arrow_to_datamine(derived_required, "t")
    with pytest.raises(SchemaError):
        arrow_to_datamine("not a schema", "t")  # type: ignore[arg-type]
    with pytest.raises(SchemaError):
        arrow_to_datamine(pa.schema([pa.field("a", pa.int32())]), "")


def test_evolved_schema_written_back() -> None:
    # required -> optional is allowed by the evolution rules; the document follows the schema
    schema = datamine_to_arrow(one(fld(1, "a", isRequired=True), fld(2, "b", "Integer")))
    evolved = schema.set(0, schema.field(0).with_nullable(True)).append(pa.field("c", pa.int16()))
    evolved = evolved.set(1, evolved.field(1).with_type(pa.int64()))  # spelling no longer fits
    assert arrow_to_datamine(evolved, "t")["table_list"][0]["fields"] == [
        {"id": 1, "name": "a", "type": "INT32"},
        {"id": 2, "name": "b", "type": "INT64"},
        {"id": 3, "name": "c", "type": "INT16"},
    ]


def test_conflicting_table_names_fall_back_to_inline() -> None:
    doc = doc_of(
        table_of(fld(1, "x"), name="r"),
        table_of(fld(1, "a", "r"), fld(2, "b", "List:r")),
    )
    schema = datamine_to_arrow(doc, "t")
    assert arrow_to_datamine(schema, "t") == doc  # both uses share the one table
    # a struct that no longer matches the table named on it is written inline
    changed = pa.struct([*schema.field("b").type.value_type, pa.field("y", pa.int8())])
    item = schema.field("b").type.value_field.with_type(changed)
    evolved = schema.set(1, schema.field("b").with_type(pa.list_(item)))
    out = arrow_to_datamine(evolved, "t")
    assert [t["table"] for t in out["table_list"]] == ["r", "t"]
    b = out["table_list"][1]["fields"][1]
    assert b["type"] == "List:STRUCT" and [f["name"] for f in b["fields"]] == ["x", "y"]
    assert datamine_to_arrow(out, "t").equals(evolved)


# --------------------------------------------------------------------------------------------
# depth


DEPTH = 500


def _deep_inline_doc(depth: int) -> dict:
    leaf = [fld(1, "leaf", "INT32", isRequired=True)]
    fields = leaf
    for level in range(depth):
        fields = [{"id": 1, "name": f"s{level}", "type": "STRUCT", "fields": fields}]
    return one(*fields)


def _nesting(t: pa.DataType) -> int:
    n = 0
    while pa.types.is_struct(t):
        t = t.field(0).type
        n += 1
    return n


def test_500_level_inline_struct_parses() -> None:
    doc = _deep_inline_doc(DEPTH)
    schema = datamine_to_arrow(doc)
    assert _nesting(schema.field(0).type) == DEPTH
    back = arrow_to_datamine(schema, "t")
    assert_same(datamine_to_arrow(back), schema)
    # as JSON text: too deep for json.loads, read without recursion
    text = '{"schema": "s", "table_list": [{"table": "t", "fields": ['
    for level in reversed(range(DEPTH)):
        text += f'{{"id": 1, "name": "s{level}", "type": "STRUCT", "fields": ['
    text += '{"id": 1, "name": "leaf", "type": "INT32", "isRequired": true}'
    text += "]}" * DEPTH + "]}]}"
    assert_same(datamine_to_arrow(text), schema)
    # the table form is flat JSON at any depth
    flat = arrow_to_datamine(schema, "t", struct_tables=True)
    assert len(flat["table_list"]) == DEPTH + 1
    again = datamine_to_arrow(json.dumps(flat), "t")
    assert again.remove_metadata().equals(schema.remove_metadata())
    assert_same(datamine_to_arrow(json.dumps(arrow_to_datamine(again, "t")), "t"), again)


def test_deep_json_values_in_a_document() -> None:
    # a default nested 100,000 levels: read, written to the field metadata and back, no recursion
    deep = "[" * 100_000 + "]" * 100_000
    text = json.dumps(one(fld(1, "a", "STRING", default="@"))).replace('"@"', deep)
    schema = datamine_to_arrow(text)
    assert schema.field("a").metadata[b"datamine.default"] == deep.encode()
    back = arrow_to_datamine(schema, "t")
    assert_same(datamine_to_arrow(back), schema)
    # a duplicate key far down is refused, with its position
    dup = text.replace(deep, "[" * 5000 + '{"x": 1, "x": 2}' + "]" * 5000)
    at = dup.index('{"x"')
    rejects(dup, "DataMine document is not valid JSON", "duplicate key 'x'", f"(char {at})")


def test_500_level_table_reference_chain_parses() -> None:
    tables = [table_of(fld(1, "leaf", "INT64"), name="t0")]
    for level in range(1, DEPTH + 1):
        tables.append(
            table_of(fld(1, "v", "BOOL"), fld(2, "next", f"List:t{level - 1}"), name=f"t{level}")
        )
    text = json.dumps(doc_of(*reversed(tables)))  # references before definitions are fine
    parsed = parse_datamine(text)
    t = parsed.table(f"t{DEPTH}").field("next").type
    depth = 0
    while pa.types.is_list(t):
        t = t.value_type.field(1).type if t.value_type.num_fields == 2 else t.value_type
        depth += 1
    assert depth == DEPTH
    schema = parsed.table(f"t{DEPTH}")
    back = arrow_to_datamine(schema, f"t{DEPTH}")
    assert [x["table"] for x in back["table_list"]] == [f"t{i}" for i in range(DEPTH + 1)]
    assert_same(datamine_to_arrow(back, f"t{DEPTH}"), schema)


def test_deeply_nested_list_type() -> None:
    schema = datamine_to_arrow(one(fld(1, "x", "List:" * DEPTH + "STRING")))
    back = arrow_to_datamine(schema, "t")
    assert back["table_list"][0]["fields"][0]["type"] == "List:" * DEPTH + "STRING"
    assert_same(datamine_to_arrow(back), schema)


# --------------------------------------------------------------------------------------------
# properties

NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
PRIMITIVE_SPELLINGS = [
    "BYTE", "Byte", "BOOL", "Boolean", "INT16", "Short", "INT32", "Integer", "INT64", "Long",
    "FLOAT", "Float", "DOUBLE", "Double", "STRING", "String", "BINARY", "Binary", "integer", "bool",
]  # fmt: skip
LIST_SPELLINGS = ["List:", "LIST:", "list:"]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)


@st.composite
def fields_lists(draw, tables: list[str], depth: int) -> list[dict]:
    names = draw(st.lists(NAMES, min_size=1, max_size=5, unique=True))
    fields: list[dict] = []
    next_id = draw(st.integers(0, 3))
    sort_key_done = False
    for name in names:
        prefix = "".join(draw(st.lists(st.sampled_from(LIST_SPELLINGS), max_size=2)))
        choices = ["prim"] + (["inline"] if depth < 3 else []) + (["ref"] if tables else [])
        kind = draw(st.sampled_from(choices))
        derived = kind == "prim" and not prefix and draw(st.integers(0, 4)) == 0
        f: dict = {}
        if derived:
            f["id"] = 0
        else:
            next_id += draw(st.integers(1, 3))
            f["id"] = next_id
        f["name"] = name
        if kind == "prim":
            f["type"] = prefix + draw(st.sampled_from(PRIMITIVE_SPELLINGS))
        elif kind == "ref":
            f["type"] = prefix + draw(st.sampled_from(tables))
        else:
            f["type"] = prefix + draw(st.sampled_from(["STRUCT", "Struct"]))
        required = not derived and draw(st.booleans())
        if draw(st.booleans()) and not required:
            f["default"] = draw(JSON_VALUES)
        if required or draw(st.integers(0, 3)) == 0:
            f["isRequired"] = required
        if not sort_key_done and draw(st.integers(0, 3)) == 0:
            f[draw(st.sampled_from(["isAscSortKey", "isDesSortKey"]))] = True
            sort_key_done = True
        if draw(st.booleans()):
            f["isFrequentlyUsed"] = draw(st.booleans())
        if derived or draw(st.integers(0, 5)) == 0:
            f["isDerived"] = derived
        if kind == "inline":
            f["fields"] = draw(fields_lists(tables, depth + 1))
        fields.append(f)
    # derived fields anywhere in the list: their shared id 0 is outside the order
    derived_fields = [f for f in fields if f["id"] == 0 and f.get("isDerived")]
    stored = [f for f in fields if f not in derived_fields]
    positions = draw(
        st.lists(
            st.integers(0, len(stored)), min_size=len(derived_fields), max_size=len(derived_fields)
        )
    )
    for f, at in zip(derived_fields, positions, strict=True):
        stored.insert(at, f)
    if all(f.get("isDerived") for f in stored):  # (names are at most 7 characters long)
        stored.insert(0, {"id": 1, "name": "stored_" + stored[0]["name"][:5], "type": "INT32"})
    return stored


@st.composite
def documents(draw) -> dict:
    names = draw(st.lists(NAMES.map(lambda n: "t_" + n), min_size=1, max_size=4, unique=True))
    tables = []
    for i, name in enumerate(names):
        table = {"table": name}
        if draw(st.booleans()):
            table["version"] = draw(st.integers(0, 100))
        table["fields"] = draw(fields_lists(names[:i], 0))
        tables.append(table)
    return {"schema": draw(NAMES), "table_list": tables}


def _references(fields: list[dict], table_names: set[str]) -> set[str]:
    out: set[str] = set()
    stack = list(fields)
    while stack:
        f = stack.pop()
        base = f["type"]
        while base.lower().startswith("list:"):
            base = base[5:]
        if base in table_names:
            out.add(base)
        stack.extend(f.get("fields", []))
    return out


def _reachable(doc: dict, table: str) -> dict[str, dict]:
    by_name = {t["table"]: t for t in doc["table_list"]}
    seen, todo = {table}, [table]
    while todo:
        for ref in _references(by_name[todo.pop()]["fields"], set(by_name)):
            if ref not in seen:
                seen.add(ref)
                todo.append(ref)
    return {name: by_name[name] for name in seen}


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_generated_documents_round_trip(doc: dict) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataMineWarning)
        parsed = parse_datamine(json.dumps(doc))
    assert parsed.table_names == tuple(t["table"] for t in doc["table_list"])
    for table in parsed.table_names:
        schema = parsed.table(table)
        back = arrow_to_datamine(schema, table)
        assert back["schema"] == doc["schema"]
        assert back["table_list"][-1]["table"] == table
        assert {t["table"]: t for t in back["table_list"]} == _reachable(doc, table)
        assert_same(datamine_to_arrow(json.dumps(back), table), schema)
        # and through a Parquet file
        assert_same(pq.read_schema(_parquet(schema, store_schema=True)), schema)
        assert _field_ids(pq.read_schema(_parquet(schema, store_schema=False))) == _field_ids(
            schema
        )


ARROW_LEAVES = st.sampled_from(
    [pa.int8(), pa.bool_(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(),
     pa.string(), pa.binary(), pa.large_string(), pa.large_binary(),
     pa.dictionary(pa.int8(), pa.string())]
)  # fmt: skip


def _arrow_fields(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(
        st.tuples(NAMES, children, st.booleans()), min_size=1, max_size=4, unique_by=lambda x: x[0]
    ).map(lambda items: [pa.field(n, t, nullable) for n, t, nullable in items])


ARROW_TYPES = st.recursive(
    ARROW_LEAVES,
    lambda inner: (
        inner.map(pa.list_) | inner.map(pa.large_list) | _arrow_fields(inner).map(pa.struct)
    ),
    max_leaves=8,
)


def _plain(t: pa.DataType) -> pa.DataType:
    """The type DataMine gives back for a foreign Arrow type."""
    if pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("element", _plain(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in t])
    return t


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_arrow_fields(ARROW_TYPES), st.booleans())
def test_generated_arrow_schemas_convert(fields: list[pa.Field], struct_tables: bool) -> None:
    schema = pa.schema(fields)
    doc = arrow_to_datamine(schema, "t", struct_tables=struct_tables)
    back = datamine_to_arrow(json.dumps(doc), "t")
    assert [f.type for f in back] == [_plain(f.type) for f in schema]
    assert [f.nullable for f in back] == [f.nullable for f in schema]
    assert [int(f.metadata[b"PARQUET:field_id"]) for f in back] == list(range(1, len(fields) + 1))
    # from here on it is lossless
    again = arrow_to_datamine(back, "t")
    assert again == doc
    assert_same(datamine_to_arrow(again, "t"), back)


def test_constraint_names_are_the_seeds() -> None:
    assert CONSTRAINTS == (
        "isRequired",
        "isAscSortKey",
        "isDesSortKey",
        "isFrequentlyUsed",
        "isDerived",
    )
