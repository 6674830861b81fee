"""Avro <-> Arrow schema conversion: mappings, round trips, the writer-schema rule, bad input."""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pytest
from fastavro.schema import parse_schema, to_parsing_canonical_form
from hypothesis import HealthCheck, given, settings, strategies as st

from odf_chain.errors import SchemaError
from odf_chain.schema import avro_paths
from odf_chain.schema.avro_paths import avro_fields
from odf_chain.schema.convert import (
    AVRO_DEFAULT_KEY,
    AVRO_NAME_KEY,
    AVRO_SCHEMA_KEY,
    AVRO_SIZE_KEY,
    AVRO_SYMBOLS_KEY,
    DOC_KEY,
    MAX_NESTING,
    arrow_to_avro,
    avro_to_arrow,
    canonical_json,
)


def record(name: str, *fields: dict, **extra) -> dict:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name: str, type_, **extra) -> dict:
    return {"name": name, "type": type_, **extra}


def column_types(schema: pa.Schema) -> dict[str, tuple[pa.DataType, bool]]:
    return {f.name: (f.type, f.nullable) for f in schema}


def strip(schema: pa.Schema) -> pa.Schema:
    """The schema without the kept writer schema (as if it came from somewhere else)."""
    return schema.with_metadata({})


# --------------------------------------------------------------------------------------------
# Avro -> Arrow mapping


def test_avro_to_arrow_mapping():
    fixed_dec = {
        "type": "fixed",
        "name": "Money",
        "size": 8,
        "logicalType": "decimal",
        "precision": 18,
        "scale": 2,
    }
    schema = record(
        "Everything",
        field("n", "null"),
        field("b", "boolean"),
        field("i", "int"),
        field("l", "long"),
        field("f", "float"),
        field("d", "double"),
        field("by", "bytes"),
        field("s", "string"),
        field("fx", {"type": "fixed", "name": "Hash", "size": 32}),
        field("e", {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}),
        field("date", {"type": "int", "logicalType": "date"}),
        field("tm", {"type": "int", "logicalType": "time-millis"}),
        field("tu", {"type": "long", "logicalType": "time-micros"}),
        field("tsm", {"type": "long", "logicalType": "timestamp-millis"}),
        field("tsu", {"type": "long", "logicalType": "timestamp-micros"}),
        field("tsn", {"type": "long", "logicalType": "timestamp-nanos"}),
        field("ltm", {"type": "long", "logicalType": "local-timestamp-millis"}),
        field("ltu", {"type": "long", "logicalType": "local-timestamp-micros"}),
        field("ltn", {"type": "long", "logicalType": "local-timestamp-nanos"}),
        field("dec", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}),
        field("wide", {"type": "bytes", "logicalType": "decimal", "precision": 60}),
        field("money", fixed_dec),
        field("uuid", {"type": "string", "logicalType": "uuid"}),
        field("fuuid", {"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}),
        field("dur", {"type": "fixed", "name": "D", "size": 12, "logicalType": "duration"}),
        field("odd", {"type": "string", "logicalType": "date"}),  # invalid: ignored
        field("unknown", {"type": "long", "logicalType": "my-own"}),
        field("bad_dec", {"type": "bytes", "logicalType": "decimal", "precision": 0}),
        field("no_prec", {"type": "bytes", "logicalType": "decimal", "scale": 2}),
        field("opt", ["null", "int"]),
        field("opt2", ["string", "null"], default="x"),
        field("only_null", ["null"]),
        field("single", ["long"]),
        field("arr", {"type": "array", "items": ["null", "string"]}),
        field("map", {"type": "map", "values": "double"}),
        field("rec", record("Inner", field("x", "int"))),
    )
    got = column_types(avro_to_arrow(schema))
    assert got == {
        "n": (pa.null(), True),
        "b": (pa.bool_(), False),
        "i": (pa.int32(), False),
        "l": (pa.int64(), False),
        "f": (pa.float32(), False),
        "d": (pa.float64(), False),
        "by": (pa.binary(), False),
        "s": (pa.string(), False),
        "fx": (pa.binary(32), False),
        "e": (pa.dictionary(pa.int32(), pa.string()), False),
        "date": (pa.date32(), False),
        "tm": (pa.time32("ms"), False),
        "tu": (pa.time64("us"), False),
        "tsm": (pa.timestamp("ms", tz="UTC"), False),
        "tsu": (pa.timestamp("us", tz="UTC"), False),
        "tsn": (pa.timestamp("ns", tz="UTC"), False),
        "ltm": (pa.timestamp("ms"), False),
        "ltu": (pa.timestamp("us"), False),
        "ltn": (pa.timestamp("ns"), False),
        "dec": (pa.decimal128(10, 2), False),
        "wide": (pa.decimal256(60, 0), False),
        "money": (pa.decimal128(18, 2), False),
        "uuid": (pa.string(), False),
        "fuuid": (pa.binary(16), False),
        "dur": (pa.binary(12), False),
        "odd": (pa.string(), False),
        "unknown": (pa.int64(), False),
        "bad_dec": (pa.binary(), False),
        "no_prec": (pa.binary(), False),
        "opt": (pa.int32(), True),
        "opt2": (pa.string(), True),
        "only_null": (pa.null(), True),
        "single": (pa.int64(), False),
        "arr": (pa.list_(pa.field("item", pa.string(), True)), False),
        "map": (pa.map_(pa.string(), pa.field("value", pa.float64(), False)), False),
        "rec": (pa.struct([pa.field("x", pa.int32(), False)]), False),
    }


def test_avro_metadata_kept_on_fields():
    schema = record(
        "R",
        field("a", "int", doc="the a", default=3),
        field("e", {"type": "enum", "name": "E", "namespace": "x.y", "symbols": ["A", "B"]}),
        field(
            "f", {"type": "fixed", "name": "F", "size": 4, "logicalType": "decimal", "precision": 4}
        ),
        namespace="com.acme",
    )
    a, e, f = avro_to_arrow(schema)
    assert a.metadata == {DOC_KEY: b"the a", AVRO_DEFAULT_KEY: b"3"}
    assert e.metadata == {AVRO_NAME_KEY: b"x.y.E", AVRO_SYMBOLS_KEY: b'["A","B"]'}
    assert f.metadata == {AVRO_NAME_KEY: b"com.acme.F", AVRO_SIZE_KEY: b"4"}
    assert f.type == pa.decimal128(4, 0)


def test_writer_schema_is_canonical_json():
    schema = record("R", field("a", "int", doc="ü"), namespace="n")
    pretty = json.dumps(schema, indent=4)
    reordered = json.dumps(dict(reversed(list(schema.items()))))
    texts = {avro_to_arrow(s).metadata[AVRO_SCHEMA_KEY] for s in (schema, pretty, reordered)}
    assert texts == {
        b'{"fields":[{"doc":"\xc3\xbc","name":"a","type":"int"}],"name":"R","namespace":"n",'
        b'"type":"record"}'
    }
    assert json.loads(texts.pop()) == schema


def test_named_types_are_expanded_where_reused():
    inner = record("Inner", field("x", "int"), namespace="p")
    schema = record(
        "R",
        field("a", inner),
        field("b", ["null", "p.Inner"]),
        field("c", {"type": "array", "items": "p.Inner"}),
        namespace="q",
    )
    arrow = avro_to_arrow(schema)
    struct = pa.struct([pa.field("x", pa.int32(), False)])
    assert column_types(arrow) == {
        "a": (struct, False),
        "b": (struct, True),
        "c": (pa.list_(pa.field("item", struct, False)), False),
    }
    # Unqualified references resolve in the enclosing namespace.
    same_ns = record(
        "R", field("a", record("I", field("x", "int"))), field("b", "I"), namespace="q"
    )
    assert avro_to_arrow(same_ns).field("b").type == struct


# --------------------------------------------------------------------------------------------
# Arrow -> Avro mapping

SPARK_TYPES: list[tuple[pa.DataType, object, pa.DataType]] = [
    # (Arrow type, its Avro type, what it reads back as)
    (pa.bool_(), "boolean", pa.bool_()),
    (pa.int8(), "int", pa.int32()),
    (pa.int16(), "int", pa.int32()),
    (pa.int32(), "int", pa.int32()),
    (pa.int64(), "long", pa.int64()),
    (pa.uint8(), "int", pa.int32()),
    (pa.uint16(), "int", pa.int32()),
    (pa.uint32(), "long", pa.int64()),
    (
        pa.uint64(),
        {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0},
        pa.decimal128(20, 0),
    ),
    (pa.float16(), "float", pa.float32()),
    (pa.float32(), "float", pa.float32()),
    (pa.float64(), "double", pa.float64()),
    (
        pa.decimal32(7, 2),
        {"type": "bytes", "logicalType": "decimal", "precision": 7, "scale": 2},
        pa.decimal128(7, 2),
    ),
    (
        pa.decimal64(15, 0),
        {"type": "bytes", "logicalType": "decimal", "precision": 15, "scale": 0},
        pa.decimal128(15, 0),
    ),
    (
        pa.decimal128(38, 10),
        {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 10},
        pa.decimal128(38, 10),
    ),
    (
        pa.decimal256(20, 3),
        {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 3},
        pa.decimal128(20, 3),
    ),
    (
        pa.decimal256(76, 38),
        {"type": "bytes", "logicalType": "decimal", "precision": 76, "scale": 38},
        pa.decimal256(76, 38),
    ),
    (pa.string(), "string", pa.string()),
    (pa.large_string(), "string", pa.string()),
    (pa.string_view(), "string", pa.string()),
    (pa.binary(), "bytes", pa.binary()),
    (pa.large_binary(), "bytes", pa.binary()),
    (pa.binary_view(), "bytes", pa.binary()),
    (pa.binary(16), {"type": "fixed", "name": "c", "size": 16}, pa.binary(16)),
    (pa.date32(), {"type": "int", "logicalType": "date"}, pa.date32()),
    (pa.date64(), {"type": "int", "logicalType": "date"}, pa.date32()),
    (pa.time32("s"), {"type": "int", "logicalType": "time-millis"}, pa.time32("ms")),
    (pa.time32("ms"), {"type": "int", "logicalType": "time-millis"}, pa.time32("ms")),
    (pa.time64("us"), {"type": "long", "logicalType": "time-micros"}, pa.time64("us")),
    (pa.time64("ns"), {"type": "long", "logicalType": "time-micros"}, pa.time64("us")),
    (
        pa.timestamp("s", tz="UTC"),
        {"type": "long", "logicalType": "timestamp-millis"},
        pa.timestamp("ms", tz="UTC"),
    ),
    (
        pa.timestamp("ms", tz="UTC"),
        {"type": "long", "logicalType": "timestamp-millis"},
        pa.timestamp("ms", tz="UTC"),
    ),
    (
        pa.timestamp("us", tz="Europe/Paris"),
        {"type": "long", "logicalType": "timestamp-micros"},
        pa.timestamp("us", tz="UTC"),
    ),
    (
        pa.timestamp("ns", tz="+02:00"),
        {"type": "long", "logicalType": "timestamp-nanos"},
        pa.timestamp("ns", tz="UTC"),
    ),
    (
        pa.timestamp("s"),
        {"type": "long", "logicalType": "local-timestamp-millis"},
        pa.timestamp("ms"),
    ),
    (
        pa.timestamp("us"),
        {"type": "long", "logicalType": "local-timestamp-micros"},
        pa.timestamp("us"),
    ),
    (
        pa.timestamp("ns"),
        {"type": "long", "logicalType": "local-timestamp-nanos"},
        pa.timestamp("ns"),
    ),
    (pa.duration("us"), "long", pa.int64()),
    (pa.null(), "null", pa.null()),
    (pa.dictionary(pa.int32(), pa.string()), "string", pa.string()),
    (pa.dictionary(pa.int8(), pa.int64()), "long", pa.int64()),
    (pa.run_end_encoded(pa.int32(), pa.float64()), "double", pa.float64()),
    (pa.uuid(), {"type": "fixed", "name": "c", "size": 16}, pa.binary(16)),
    (pa.json_(), "string", pa.string()),
]


@pytest.mark.parametrize(("arrow", "avro", "back"), SPARK_TYPES)
def test_arrow_to_avro_mapping(arrow, avro, back):
    out = arrow_to_avro(pa.schema([pa.field("c", arrow, avro == "null")]))
    assert out == {"type": "record", "name": "Record", "fields": [{"name": "c", "type": avro}]}
    parse_schema(out)
    assert avro_to_arrow(out).field("c").type == back
    nullable = arrow_to_avro(pa.schema([pa.field("c", arrow, True)]))
    expected = avro if avro == "null" else ["null", avro]
    assert nullable["fields"][0]["type"] == expected


def test_arrow_to_avro_names_and_metadata():
    schema = pa.schema(
        [
            pa.field("s", pa.struct([pa.field("x", pa.int32(), metadata={"comment": "c"})])),
            pa.field("l", pa.list_(pa.struct([pa.field("y", pa.int8())]))),
            pa.field("m", pa.map_(pa.large_string(), pa.struct([pa.field("z", pa.int8())]))),
            pa.field("s_item", pa.struct([pa.field("w", pa.int8())]), False),
            pa.field("f", pa.binary(3), False, metadata={"doc": "three bytes"}),
            pa.field(
                "cnt",
                pa.int64(),
                metadata={AVRO_DEFAULT_KEY: b"5"},
            ),
        ]
    )
    out = arrow_to_avro(schema, name="Top", namespace="org.example")
    parse_schema(out)
    assert out == {
        "type": "record",
        "name": "Top",
        "namespace": "org.example",
        "fields": [
            {
                "name": "s",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "s",
                        "fields": [{"name": "x", "type": ["null", "int"], "doc": "c"}],
                    },
                ],
            },
            {
                "name": "l",
                "type": [
                    "null",
                    {
                        "type": "array",
                        "items": [
                            "null",
                            {
                                "type": "record",
                                "name": "l_item",
                                "fields": [{"name": "y", "type": ["null", "int"]}],
                            },
                        ],
                    },
                ],
            },
            {
                "name": "m",
                "type": [
                    "null",
                    {
                        "type": "map",
                        "values": [
                            "null",
                            {
                                "type": "record",
                                "name": "m_value",
                                "fields": [{"name": "z", "type": ["null", "int"]}],
                            },
                        ],
                    },
                ],
            },
            {
                "name": "s_item",
                "type": {
                    "type": "record",
                    "name": "s_item",
                    "fields": [{"name": "w", "type": ["null", "int"]}],
                },
            },
            {
                "name": "f",
                "type": {"type": "fixed", "name": "f", "size": 3},
                "doc": "three bytes",
            },
            {"name": "cnt", "type": ["long", "null"], "default": 5},
        ],
    }


def test_generated_names_do_not_collide():
    inner = pa.struct([pa.field("v", pa.int32())])
    schema = pa.schema(
        [
            pa.field("a", pa.struct([pa.field("a", inner, False)]), False),
            pa.field(
                "b",
                pa.list_(pa.field("item", pa.struct([pa.field("a", inner, False)]), False)),
                False,
            ),
        ]
    )
    out = arrow_to_avro(schema)
    parse_schema(out)
    names = []
    stack = [out]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") in ("record", "fixed", "enum"):
                names.append(node["name"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    assert len(names) == len(set(names)) == 5
    assert avro_to_arrow(out).equals(schema, check_metadata=False)


# --------------------------------------------------------------------------------------------
# generated round trips: Avro -> Arrow -> Avro


@st.composite
def avro_schemas(draw) -> dict:
    """Avro record schemas in the supported subset (no multi-type unions, no recursion), with
    namespaces, docs, defaults, logical types and references to earlier named types."""
    counter = [0]
    defined: list[tuple[str, dict]] = []  # (full name, definition) in document order
    open_: set[str] = set()

    def new_name(ns: str) -> tuple[str, str | None, str]:
        counter[0] += 1
        short = f"T{counter[0]}"
        choice = draw(st.sampled_from(["inherit", "inherit", "own", "dotted", "empty"]))
        if choice == "own":
            own = draw(st.sampled_from(["com.acme", "org.x.y"]))
            return short, own, f"{own}.{short}"
        if choice == "dotted":
            return f"z.q.{short}", None, f"z.q.{short}"
        if choice == "empty" and ns:
            return short, "", short
        return short, None, f"{ns}.{short}" if ns else short

    def named(kind: str, ns: str, body: dict) -> tuple[dict, str]:
        name, namespace, fullname = new_name(ns)
        out = {"type": kind, "name": name}
        if namespace is not None:
            out["namespace"] = namespace
        out.update(body)
        return out, fullname

    def gen(depth: int, ns: str):
        """(Avro type, a default that fits it or None)."""
        options = ["prim", "prim", "logical", "enum", "fixed"]
        if depth < 3:
            options += ["record", "array", "map", "record"]
        # Not recursive, and not in the null namespace when inside another (no Avro reader
        # can resolve such a reference).
        usable = [(n, d) for n, d in defined if n not in open_ and ("." in n or not ns)]
        if usable:
            options.append("ref")
        kind = draw(st.sampled_from(options))
        if kind == "prim":
            prim = draw(
                st.sampled_from(["boolean", "int", "long", "float", "double", "bytes", "string"])
            )
            sample = {
                "boolean": True,
                "int": 7,
                "long": -1,
                "float": 1.5,
                "double": 0.0,
                "bytes": "\u00ff",
                "string": "s",
            }[prim]
            return prim, sample
        if kind == "logical":
            lt = draw(
                st.sampled_from(
                    [
                        {"type": "int", "logicalType": "date"},
                        {"type": "int", "logicalType": "time-millis"},
                        {"type": "long", "logicalType": "time-micros"},
                        {"type": "long", "logicalType": "timestamp-millis"},
                        {"type": "long", "logicalType": "timestamp-micros"},
                        {"type": "long", "logicalType": "timestamp-nanos"},
                        {"type": "long", "logicalType": "local-timestamp-micros"},
                        {"type": "string", "logicalType": "uuid"},
                        {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3},
                        {"type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 0},
                    ]
                )
            )
            return lt, (0 if lt["type"] in ("int", "long") else None)
        if kind == "enum":
            symbols = draw(
                st.lists(st.sampled_from(["A", "B", "C_1", "d"]), min_size=1, unique=True)
            )
            definition, fullname = named("enum", ns, {"symbols": symbols})
            defined.append((fullname, definition))
            return definition, symbols[0]
        if kind == "fixed":
            size = draw(st.integers(0, 20))
            body: dict = {"size": size}
            if size >= 4 and draw(st.booleans()):
                body.update(logicalType="decimal", precision=draw(st.integers(1, 9)), scale=0)
            definition, fullname = named("fixed", ns, body)
            defined.append((fullname, definition))
            return definition, None
        if kind == "ref":
            fullname, _ = draw(st.sampled_from(usable))
            own_ns = fullname.rsplit(".", 1)[0] if "." in fullname else ""
            return (fullname.rsplit(".", 1)[-1] if own_ns == ns else fullname), None
        if kind == "array":
            items, _ = gen_field_type(depth + 1, ns, in_record=False)
            return {"type": "array", "items": items}, []
        if kind == "map":
            values, _ = gen_field_type(depth + 1, ns, in_record=False)
            return {"type": "map", "values": values}, {}
        # record
        definition, fullname = named("record", ns, {})
        own_ns = fullname.rsplit(".", 1)[0] if "." in fullname else ""
        defined.append((fullname, definition))
        open_.add(fullname)
        fields = []
        for i in range(draw(st.integers(0 if depth else 1, 4))):
            ftype, default = gen_field_type(depth + 1, own_ns)
            entry = {"name": f"f{i}", "type": ftype}
            if draw(st.booleans()):
                entry["doc"] = draw(st.sampled_from(["doc", "ünï", ""]))
            add_default(entry, default)
            fields.append(entry)
        definition["fields"] = fields
        open_.discard(fullname)
        return definition, None

    def gen_field_type(depth: int, ns: str, in_record: bool = True):
        """A field's type, maybe nullable, and a default that fits it (or _NONE). [T, "null"]
        comes with its non-null default: without one its order is not kept (documented)."""
        t, sample = gen(depth, ns)
        shape = draw(st.sampled_from(["plain", "null_first", "null_last"]))
        if t == "null":
            return t, None
        if shape == "null_first":
            return ["null", t], None
        if shape == "null_last" and sample is not None and in_record:
            return [t, "null"], _Must(sample)
        return t, (sample if sample is not None else _NONE)

    def add_default(entry: dict, default) -> None:
        if isinstance(default, _Must):
            entry["default"] = default.value
        elif default is not _NONE and draw(st.booleans()):
            entry["default"] = default

    top, _ = named("record", "", {})
    top_ns = top.get("namespace") or (top["name"].rsplit(".", 1)[0] if "." in top["name"] else "")
    fullname = f"{top_ns}.{top['name']}" if top_ns and "." not in top["name"] else top["name"]
    defined.append((fullname, top))
    open_.add(fullname)
    fields = []
    for i in range(draw(st.integers(1, 5))):
        ftype, default = gen_field_type(0, top_ns)
        entry = {"name": f"c{i}", "type": ftype}
        add_default(entry, default)
        fields.append(entry)
    top["fields"] = fields
    return top


_NONE = object()


class _Must:
    def __init__(self, value) -> None:
        self.value = value


def _top_name(schema: dict) -> tuple[str, str | None]:
    name = schema["name"]
    if "." in name:
        ns, short = name.rsplit(".", 1)
        return short, ns
    return name, schema.get("namespace") or None


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(avro_schemas())
def test_avro_round_trip(schema):
    parse_schema(schema)  # the generator makes valid Avro
    arrow = avro_to_arrow(schema)
    # The writer-schema rule: unchanged schema -> the writer schema itself.
    assert arrow_to_avro(arrow) == schema
    # Without it, the conversion alone keeps names, symbols, docs, defaults and logical types.
    name, ns = _top_name(schema)
    converted = arrow_to_avro(strip(arrow), name=name, namespace=ns)
    parse_schema(converted)
    assert to_parsing_canonical_form(converted) == to_parsing_canonical_form(schema)
    again = avro_to_arrow(converted)
    assert strip(again).equals(strip(arrow), check_metadata=True)


# --------------------------------------------------------------------------------------------
# generated round trips: Arrow (as Spark/Parquet give it) -> Avro -> Arrow


def _back(t: pa.DataType) -> pa.DataType:
    """What an Arrow type reads back as after Avro (the documented lossy mappings)."""
    for arrow, _, back in SPARK_TYPES:
        if t == arrow and type(t) is type(arrow):
            return back
    if pa.types.is_decimal(t):
        return (pa.decimal128 if t.precision <= 38 else pa.decimal256)(t.precision, t.scale)
    if pa.types.is_fixed_size_binary(t):
        return t
    if pa.types.is_struct(t):
        return pa.struct(
            [
                pa.field(f.name, _back(f.type), f.nullable)
                for f in (t.field(i) for i in range(t.num_fields))
            ]
        )
    if pa.types.is_map(t):
        return pa.map_(pa.string(), pa.field("value", _back(t.item_type), t.item_field.nullable))
    if hasattr(t, "value_field"):
        return pa.list_(pa.field("item", _back(t.value_type), t.value_field.nullable))
    raise AssertionError(t)


_leaf = st.sampled_from([a for a, _, _ in SPARK_TYPES])
leaf_types = st.one_of(
    _leaf,
    _leaf,
    st.integers(1, 76).flatmap(
        lambda p: st.integers(0, p).map(
            lambda s: (pa.decimal128 if p <= 38 else pa.decimal256)(p, s)
        )
    ),
    st.integers(0, 32).map(pa.binary),
)
avro_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True)


def _nullable_field(name: str, t: pa.DataType, nullable: bool) -> pa.Field:
    return pa.field(name, t, nullable or pa.types.is_null(t))


def _extend(inner):
    members = st.lists(
        st.tuples(avro_names, inner, st.booleans()), max_size=4, unique_by=lambda m: m[0]
    )
    item = st.tuples(inner, st.booleans()).map(lambda p: _nullable_field("item", *p))
    return (
        members.map(lambda ms: pa.struct([_nullable_field(*m) for m in ms]))
        | item.map(pa.list_)
        | item.map(pa.large_list)
        | item.map(lambda f: pa.list_(f, 2))
        | item.map(pa.list_view)
        | st.tuples(st.sampled_from([pa.string(), pa.large_string()]), inner, st.booleans()).map(
            lambda p: pa.map_(p[0], _nullable_field("value", p[1], p[2]))
        )
    )


arrow_types = st.recursive(leaf_types, _extend, max_leaves=10)
arrow_schemas = st.lists(
    st.tuples(avro_names, arrow_types, st.booleans()),
    min_size=1,
    max_size=5,
    unique_by=lambda c: c[0],
).map(lambda cols: pa.schema([_nullable_field(*c) for c in cols]))


@pytest.mark.slow
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrow_schemas)
def test_arrow_round_trip(schema):
    avro = arrow_to_avro(schema)
    parse_schema(avro)
    back = avro_to_arrow(avro)
    expected = pa.schema([pa.field(f.name, _back(f.type), f.nullable) for f in schema])
    assert back.equals(expected), f"\n{back}\n!=\n{expected}"
    # A second trip is exact (the writer schema is now kept).
    assert arrow_to_avro(back) == avro
    assert strip(avro_to_arrow(arrow_to_avro(strip(back)))).equals(strip(back))


# --------------------------------------------------------------------------------------------
# the writer-schema rule


EVENT = record(
    "Event",
    field("id", "long"),
    field("kind", {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}),
    field("name", ["null", "string"], default=None),
    field("tags", {"type": "array", "items": "string"}),
    field("props", {"type": "map", "values": {"type": "bytes"}}),
    field("at", {"type": "long", "logicalType": "timestamp-millis"}),
    namespace="com.acme.events",
)


def test_writer_schema_returned_while_it_corresponds():
    arrow = avro_to_arrow(EVENT)
    assert arrow_to_avro(arrow, name="Other", namespace="x") == EVENT

    # Encodings and metadata do not matter: Parquet gives enums back as dictionaries or strings,
    # strings as large strings, lists as large lists; docs may be edited.
    def field_types(**changes):
        return pa.schema([changes.get(f.name, f) for f in arrow], metadata=arrow.metadata)

    for changed in (
        field_types(kind=pa.field("kind", pa.string(), False)),
        field_types(kind=pa.field("kind", pa.dictionary(pa.int8(), pa.large_string()), False)),
        field_types(name=pa.field("name", pa.string_view(), True, metadata={"doc": "new"})),
        field_types(
            tags=pa.field("tags", pa.large_list(pa.field("element", pa.string(), False)), False)
        ),
        field_types(
            props=pa.field(
                "props", pa.map_(pa.large_string(), pa.field("v", pa.large_binary(), False)), False
            )
        ),
    ):
        assert arrow_to_avro(changed) == EVENT


def test_writer_schema_dropped_when_schema_changed():
    arrow = avro_to_arrow(EVENT)
    added = arrow.append(pa.field("extra", pa.int32()))
    out = arrow_to_avro(added, name="Event", namespace="com.acme.events")
    assert out != EVENT
    assert [f["name"] for f in out["fields"]] == [f["name"] for f in EVENT["fields"]] + ["extra"]
    # The kept names, symbols and defaults still carry over.
    assert out["fields"][1]["type"] == {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}
    assert out["fields"][2] == {"name": "name", "type": ["null", "string"], "default": None}
    assert out["fields"][-1] == {"name": "extra", "type": ["null", "int"]}
    for changed in (
        arrow.set(0, pa.field("id", pa.int64(), True)),  # nullability
        arrow.set(0, pa.field("id", pa.int32(), False)),  # type
        arrow.set(0, pa.field("ident", pa.int64(), False)),  # name
        arrow.remove(5),  # a column gone
        pa.schema([arrow.field(1), arrow.field(0), *list(arrow)[2:]], metadata=arrow.metadata),
        arrow.set(3, pa.field("tags", pa.list_(pa.field("item", pa.string(), True)), False)),
        arrow.set(5, pa.field("at", pa.timestamp("us", tz="UTC"), False)),
    ):
        assert arrow_to_avro(changed, name="Event", namespace="com.acme.events") != EVENT


def test_unusable_kept_schema_is_an_error():
    arrow = pa.schema([pa.field("a", pa.int32())], metadata={AVRO_SCHEMA_KEY: b"{not json"})
    with pytest.raises(SchemaError, match=r"odf_chain\.avro\.schema holds an unusable Avro schema"):
        arrow_to_avro(arrow)


# --------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ('{"type": "record", ', "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (42, "JSON text or a dict"),
        ('"int"', "top-level Avro schema must be a record"),
        (["null", record("R", field("a", "int"))], "top-level Avro schema must be a record"),
        (record("R", field("a", "int"), field("a", "string")), "field a: record R has two fields"),
        (
            record("R", field("s", record("S", field("x", "Nope")))),
            "field s.x: unknown type 'Nope'",
        ),
        (record("R", field("a", {"type": "Nope"})), "field a: unknown type 'Nope'"),
        (record("R", field("a", ["int", "string"])), r"field a: the union \['int', 'string'\]"),
        (
            record("R", field("m", {"type": "map", "values": ["null", "int", "string"]})),
            r"field m\.\[value\]: the union",
        ),
        (record("R", field("a", ["int", "int"])), "field a: the union lists int twice"),
        (record("R", field("a", ["null", ["int"]])), "field a: a union may not contain a union"),
        (record("R", field("a", [])), "field a: an empty union"),
        (record("R", field("next", ["null", "R"])), "field next: recursive type R"),
        (
            record("R", field("t", record("T", field("kids", {"type": "array", "items": "T"})))),
            r"field t\.kids\.\[item\]: recursive type T",
        ),
        (record("R", field("a", "int", default="x")), "field a: the default 'x' does not fit"),
        (
            record("R", field("a", ["null", "int"], default="x")),
            "field a: the default 'x' does not fit",
        ),
        (
            record(
                "R",
                field("a", {"type": "fixed", "name": "F", "size": 1}),
                field("b", {"type": "fixed", "name": "F", "size": 1}),
            ),
            "field b: the name F is defined twice",
        ),
        (
            record("R", field("e", {"type": "enum", "name": "E", "symbols": ["A", "A"]})),
            "field e: enum E needs a list of unique symbols",
        ),
        (
            record(
                "R", field("e", {"type": "enum", "name": "E", "symbols": ["A"], "default": "Z"})
            ),
            "field e: the default of enum E is not a symbol",
        ),
        (record("R", field("f", {"type": "fixed", "name": "F"})), "field f: fixed F needs"),
        (
            record("R", field("f", {"type": "record", "fields": []})),
            "field f: a record needs a non",
        ),
        (record("R", field("a", {"type": "array"})), "field a: an array needs 'items'"),
        (record("R", field("a", {"type": "map"})), "field a: a map needs 'values'"),
        (record("R", field("a", {"type": {"type": "int"}})), "field a: 'type' of a type object"),
        (record("R", field("a", 5)), "field a: 5 is not an Avro type"),
        (
            record("R", field("d", {"type": "bytes", "logicalType": "decimal", "precision": -1})),
            "field d: decimal precision -1 is not a positive int",
        ),
        (
            record(
                "R",
                field("d", {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 4}),
            ),
            "field d: decimal scale 4 is not an int from 0 to the precision",
        ),
        (
            record(
                "R",
                field(
                    "d",
                    {
                        "type": "fixed",
                        "name": "F",
                        "size": 2,
                        "logicalType": "decimal",
                        "precision": 5,
                    },
                ),
            ),
            "field d: decimal precision 5 does not fit in 2 bytes",
        ),
        (
            record(
                "R",
                field("a", {"type": "enum", "name": "E", "namespace": "", "symbols": ["A"]}),
                field("b", "E"),
                namespace="n",
            ),
            "field b: unknown type 'E'",
        ),
        (record("R", {"name": "a"}), "field a: the field has no 'type'"),
        (record("R", {"type": "int"}), "record R has a field without a non-empty name"),
        ({"type": "record", "name": "R"}, "record R needs a list of 'fields'"),
        (record("int", field("a", "int")), "the primitive type name 'int' cannot be reused"),
        (
            record("R", field("d", {"type": "bytes", "logicalType": "decimal", "precision": 80})),
            r"field d: decimal\(80,0\) is wider than Arrow's 76 digits",
        ),
    ],
)
def test_bad_avro_is_named(schema, message):
    with pytest.raises(SchemaError, match=message):
        avro_to_arrow(schema)


def test_fastavro_backstop():
    # Something only fastavro checks still becomes a SchemaError.
    # (A decimal on a string is ignored by the conversion, but fastavro checks its parameters.)
    bad = {"type": "string", "logicalType": "decimal", "precision": -1}
    with pytest.raises(SchemaError, match=r"invalid Avro schema \(SchemaParseException\)"):
        avro_to_arrow(record("R", field("a", bad)))
    with pytest.raises(SchemaError, match="namespace 5 is not a string"):
        avro_to_arrow(record("R", field("a", "int"), namespace=5))


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            pa.schema([pa.field("u", pa.dense_union([pa.field("a", pa.int8())]))]),
            "field u: Arrow type dense_union",
        ),
        (
            pa.schema([pa.field("s", pa.struct([pa.field("i", pa.month_day_nano_interval())]))]),
            "field s.i: Arrow type month_day_nano_interval has no Avro",
        ),
        (
            pa.schema([pa.field("l", pa.list_(pa.map_(pa.int32(), pa.int8())))]),
            r"field l\.\[item\]: map keys of type int32",
        ),
        (pa.schema([pa.field("a-b", pa.int8())]), "field a-b: 'a-b' is not a valid Avro name"),
        (
            pa.schema(
                [pa.field("s", pa.struct([pa.field("x", pa.int8()), pa.field("x", pa.int8())]))]
            ),
            "field s.x: the name 'x' appears twice",
        ),
    ],
)
def test_bad_arrow_is_named(schema, message):
    with pytest.raises(SchemaError, match=message):
        arrow_to_avro(schema)


def test_bad_record_names():
    schema = pa.schema([pa.field("a", pa.int8())])
    with pytest.raises(SchemaError, match="record name"):
        arrow_to_avro(schema, name="not valid")
    with pytest.raises(SchemaError, match="namespace"):
        arrow_to_avro(schema, namespace="a..b")


# --------------------------------------------------------------------------------------------
# depth


def _nested_avro(depth: int) -> dict:
    t: object = "int"
    for i in range(depth):
        t = record(f"R{i}", field("f", ["null", t] if i % 2 else t))
    return t  # type: ignore[return-value]


@pytest.mark.parametrize("depth", [500, 667])  # 750 and 1000 levels with the unions
def test_deep_avro(depth):
    limit = sys.getrecursionlimit()
    schema = _nested_avro(depth)
    text = canonical_json(schema)
    arrow = avro_to_arrow(text)
    assert sys.getrecursionlimit() == limit
    assert canonical_json(arrow_to_avro(arrow)) == text
    t, levels = arrow.field(0).type, 1
    while pa.types.is_struct(t):
        t, levels = t.field(0).type, levels + 1
    assert levels == depth and t == pa.int32()
    converted = arrow_to_avro(strip(arrow), name=f"R{depth - 1}")
    assert canonical_json(converted) == text
    assert sys.getrecursionlimit() == limit


def _deep_arrow(depth: int) -> pa.Schema:
    t = pa.int64()
    for i in range(depth):
        t = (
            pa.list_(t)
            if i % 3 == 0
            else pa.struct([pa.field("x", t)])
            if i % 3 == 1
            else pa.map_(pa.string(), t)
        )
    return pa.schema([pa.field("c", t)])


def test_deep_arrow():
    # 499 levels of nullable lists, structs and maps are 1000 Avro levels (each adds a union)
    schema = _deep_arrow(499)
    avro = arrow_to_avro(schema)
    assert avro_to_arrow(avro).equals(schema, check_metadata=False)
    # Arrow -> Avro has no limit (no fastavro), but one level more cannot be read back
    avro = arrow_to_avro(_deep_arrow(500))
    with pytest.raises(SchemaError, match="nested 1002 levels deep; at most 1000 are supported"):
        avro_to_arrow(avro)


def test_recursive_avro_deeply_nested():
    schema = _nested_avro(400)
    # The innermost record refers back to the outermost one.
    node = schema
    while isinstance(node, dict) and node.get("type") == "record":
        inner = node["fields"][0]["type"]
        inner = inner[1] if isinstance(inner, list) else inner
        if inner == "int":
            node["fields"][0]["type"] = ["null", schema["name"]]
            break
        node = inner
    with pytest.raises(SchemaError, match="recursive type R399"):
        avro_to_arrow(schema)


def test_absurd_depth_is_refused():
    text = '{"type":' * 30_000 + '"int"' + "}" * 30_000
    with pytest.raises(SchemaError, match="nested 30000 levels deep"):
        avro_to_arrow(text)


@pytest.mark.parametrize("as_text", [False, True])
def test_deeper_than_the_limit_is_refused(as_text):
    # (this used to be converted, with the interpreter's recursion limit raised for fastavro)
    limit = sys.getrecursionlimit()
    schema = _nested_avro(2000)
    with pytest.raises(
        SchemaError,
        match=r"^the Avro schema is nested 3000 levels deep; at most 1000 are supported$",
    ):
        avro_to_arrow(canonical_json(schema) if as_text else schema)
    assert sys.getrecursionlimit() == limit


def _chain(levels: int, kind: str) -> dict:
    """A record schema nesting exactly ``levels`` levels (records, arrays, maps, unions)."""
    t: object = "int"
    for i in range(levels - 1):
        step = kind if kind != "mixed" else ("record", "array", "union", "map")[i % 4]
        if step == "record":
            t = record(f"R{i}", field("f", t))
        elif step == "array":
            t = {"type": "array", "items": t}
        elif step == "map":
            t = {"type": "map", "values": t}
        else:
            t = ["null", t]
    return record("Top", field("f", t))


@pytest.mark.parametrize("kind", ["record", "array", "map", "mixed"])
def test_the_limit_is_avro_paths_limit(kind):
    """avro_to_arrow refuses exactly what avro_paths refuses: more than MAX_NESTING levels."""
    assert avro_paths.MAX_NESTING == MAX_NESTING == 1000
    at_limit, beyond = _chain(MAX_NESTING, kind), _chain(MAX_NESTING + 1, kind)
    avro_to_arrow(at_limit)
    avro_fields(at_limit)
    with pytest.raises(SchemaError, match="nested 1001 levels deep; at most 1000 are supported"):
        avro_to_arrow(beyond)
    with pytest.raises(SchemaError, match="deeper than 1000 levels"):
        avro_fields(beyond)


@pytest.mark.slow
def test_deep_json_inside_a_schema():
    """JSON values nested far deeper than the limit where they are not schemas (defaults, other
    properties) are read, checked and written without recursion: converted or a SchemaError."""
    deep = "[" * 100_000 + "]" * 100_000
    # a default that does not fit its type: the message describes it instead of repr()
    text = canonical_json(record("R", field("a", "string", default="@"))).replace('"@"', deep)
    with pytest.raises(SchemaError, match="default <list nested 100000 levels deep> does not fit"):
        avro_to_arrow(text)
    # a default that fits, and a property no one reads
    array = {"type": "array", "items": "int"}
    schema = record("R", field("a", array, default="@"), field("b", "int", x="@"))
    text = canonical_json(schema).replace('"@"', deep)
    arrow = avro_to_arrow(text)
    assert arrow.field("a").metadata[AVRO_DEFAULT_KEY] == deep.encode()
    assert arrow.metadata[AVRO_SCHEMA_KEY] == text.encode()  # canonical already
    assert canonical_json(arrow_to_avro(strip(arrow))["fields"][0]) == (
        '{"default":' + deep + ',"name":"a","type":{"items":"int","type":"array"}}'
    )
    # a deep namespace or a deep top-level "type" is named, not repr()'d
    with pytest.raises(SchemaError, match=r"must be a record .*not <list nested 999 levels deep>"):
        avro_to_arrow('{"type": ' + "[" * 999 + "]" * 999 + "}")


def test_null_namespace_type_reused_inside_a_namespace():
    enum = {AVRO_NAME_KEY: b"E", AVRO_SYMBOLS_KEY: b'["A"]'}
    dictionary = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema(
        [
            pa.field("a", dictionary, False, metadata=enum),
            pa.field("b", dictionary, False, metadata=enum),
        ]
    )
    out = arrow_to_avro(schema, name="R", namespace="n")
    parse_schema(out)
    assert out["fields"] == [
        {"name": "a", "type": {"type": "enum", "name": "E", "namespace": "", "symbols": ["A"]}},
        {"name": "b", "type": {"type": "enum", "name": "b", "symbols": ["A"]}},
    ]
    # Outside a namespace the second use is a plain reference.
    assert arrow_to_avro(schema, name="R")["fields"][1] == {"name": "b", "type": "E"}
