"""Arrow -> v2 field paths (lakehouse convention), differentially against DataHub itself.

The oracle is ``datahub.utilities.hive_schema_to_avro.get_schema_fields_for_hive_column``
(acryl-datahub, a test-only dependency), which is what DataHub's Hive/Glue/Delta/Unity sources
call per column. The generated Arrow types come with the Hive type string Spark shows for them,
written independently here, so the type mapping is checked too.
"""

from __future__ import annotations

import logging
import warnings

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from odf_chain.errors import SchemaError
from odf_chain.schema.arrow_paths import (
    arrow_field_index,
    arrow_field_paths,
    arrow_fields,
    arrow_hive_type,
)
from odf_chain.schema.evolution import children

hive_schema_to_avro = pytest.importorskip("datahub.utilities.hive_schema_to_avro")

V = "[version=2.0]"


@pytest.fixture(autouse=True, scope="module")
def _quiet_datahub():
    # DataHub logs a warning per column it cannot parse, and avro warns that DataHub's
    # timestamp (logicalType timestamp-millis on an int) is ignored.
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    logging.disable(logging.NOTSET)


def datahub_fields(name: str, hive: str, doc: str | None, nullable: bool) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hive_schema_to_avro.get_schema_fields_for_hive_column(
            name, hive, description=doc, default_nullable=nullable
        )


def datahub_type(schema_field) -> str:
    return type(schema_field.type.type).__name__.removesuffix("TypeClass").lower()


# --------------------------------------------------------------------------------------------
# strategies: (Arrow type, the Hive type string Spark shows for it)

LEAVES: list[tuple[pa.DataType, str]] = [
    (pa.bool_(), "boolean"),
    (pa.int8(), "tinyint"),
    (pa.int16(), "smallint"),
    (pa.int32(), "int"),
    (pa.int64(), "bigint"),
    (pa.uint8(), "smallint"),
    (pa.uint16(), "int"),
    (pa.uint32(), "bigint"),
    (pa.uint64(), "decimal(20,0)"),
    (pa.float16(), "float"),
    (pa.float32(), "float"),
    (pa.float64(), "double"),
    (pa.string(), "string"),
    (pa.large_string(), "string"),
    (pa.string_view(), "string"),
    (pa.binary(), "binary"),
    (pa.large_binary(), "binary"),
    (pa.binary_view(), "binary"),
    (pa.binary(16), "binary"),
    (pa.date32(), "date"),
    (pa.date64(), "date"),
    (pa.time32("s"), "time(0)"),
    (pa.time32("ms"), "time(3)"),
    (pa.time64("us"), "time(6)"),
    (pa.time64("ns"), "time(6)"),
    (pa.timestamp("s", tz="UTC"), "timestamp"),
    (pa.timestamp("ms", tz="UTC"), "timestamp"),
    (pa.timestamp("us", tz="UTC"), "timestamp"),
    (pa.timestamp("ns", tz="Europe/Paris"), "timestamp"),
    (pa.timestamp("us", tz="+01:00"), "timestamp"),
    (pa.timestamp("s"), "timestamp_ntz"),
    (pa.timestamp("ms"), "timestamp_ntz"),
    (pa.timestamp("us"), "timestamp_ntz"),
    (pa.timestamp("ns"), "timestamp_ntz"),
    (pa.duration("s"), "interval day to second"),
    (pa.duration("us"), "interval day to second"),
    (pa.month_day_nano_interval(), "interval"),
    (pa.null(), "void"),
    (pa.dictionary(pa.int32(), pa.string()), "string"),
    (pa.dictionary(pa.int8(), pa.int64()), "bigint"),
    (pa.run_end_encoded(pa.int32(), pa.float64()), "double"),
    (pa.uuid(), "binary"),
    (pa.json_(), "string"),
]


@st.composite
def decimals(draw) -> tuple[pa.DataType, str]:
    kind = draw(st.sampled_from(["32", "64", "128", "256"]))
    top = {"32": 9, "64": 18, "128": 38, "256": 76}[kind]
    precision = draw(st.integers(1, top))
    scale = draw(st.integers(0, precision))
    make = {"32": pa.decimal32, "64": pa.decimal64, "128": pa.decimal128, "256": pa.decimal256}
    return make[kind](precision, scale), f"decimal({precision},{scale})"


_leaf = st.sampled_from(LEAVES)
leaf_types = st.one_of(_leaf, _leaf, _leaf, decimals())  # decimals a quarter of the time

# Member names DataHub's Hive-type parser handles (no , : <>()[]{}; backticks only inside),
# including the ones it renders differently (dots, surrounding spaces).
_SAFE = "abcxyzAZ019_ -.é$#"
member_names = st.text(_SAFE, min_size=1, max_size=6).filter(
    lambda n: render_member(n) != "" and not n.startswith("`")
) | st.sampled_from(["a", "b", "id", "x.y", " pad ", "`q`", "a`b", "über", "1"])


def render_member(name: str) -> str:
    """How DataHub shows a struct member's name (expected behaviour, written out here)."""
    name = name.strip()
    if len(name) >= 2 and name.startswith("`") and name.endswith("`"):
        name = name[1:-1]
    return name.split(".")[-1]


def _docs():
    return st.none() | st.sampled_from(["", "a comment", "ünïcode doc"])


def _field(name: str, t: pa.DataType, nullable: bool, doc: str | None) -> pa.Field:
    if pa.types.is_null(t):
        nullable = True
    return pa.field(name, t, nullable, metadata=None if doc is None else {"doc": doc})


@st.composite
def structs(draw, inner) -> tuple[pa.DataType, str]:
    members = draw(
        st.lists(
            st.tuples(member_names, inner, st.booleans(), _docs()),
            min_size=1,
            max_size=4,
            unique_by=lambda m: render_member(m[0]),
        )
    )
    arrow = pa.struct([_field(n, t, nl, d) for n, (t, _), nl, d in members])
    hive = "struct<" + ",".join(f"{n}:{h}" for n, (_, h), _, _ in members) + ">"
    return arrow, hive


@st.composite
def lists(draw, inner) -> tuple[pa.DataType, str]:
    (t, h), nullable = draw(inner), draw(st.booleans())
    item = _field("item", t, nullable, None)
    kind = draw(st.sampled_from(["list", "large", "fixed", "view", "large_view"]))
    arrow = {
        "list": lambda: pa.list_(item),
        "large": lambda: pa.large_list(item),
        "fixed": lambda: pa.list_(item, 3),
        "view": lambda: pa.list_view(item),
        "large_view": lambda: pa.large_list_view(item),
    }[kind]()
    return arrow, f"array<{h}>"


@st.composite
def maps(draw, inner) -> tuple[pa.DataType, str]:
    kt, kh = draw(leaf_types.filter(lambda p: not pa.types.is_null(p[0])) | inner)
    (vt, vh), nullable = draw(inner), draw(st.booleans())
    if pa.types.is_null(kt):
        kt, kh = pa.string(), "string"
    return pa.map_(pa.field("key", kt, False), _field("value", vt, nullable, None)), (
        f"map<{kh},{vh}>"
    )


arrow_types = st.recursive(
    leaf_types,
    lambda inner: structs(inner) | lists(inner) | maps(inner),
    max_leaves=10,
)

column_names = st.text(_SAFE, min_size=1, max_size=6).filter(
    lambda n: n.split(".")[-1] != ""
) | st.sampled_from(["id", "value", "a.b", " s", "Ünï"])


@st.composite
def tables(draw) -> tuple[pa.Schema, list[str]]:
    cols = draw(
        st.lists(
            st.tuples(column_names, arrow_types, st.booleans(), _docs()),
            min_size=1,
            max_size=4,
            unique_by=lambda c: c[0].split(".")[-1],
        )
    )
    schema = pa.schema([_field(n, t, nl, d) for n, (t, _), nl, d in cols])
    return schema, [h for _, (_, h), _, _ in cols]


# --------------------------------------------------------------------------------------------
# differential tests against DataHub


LIST_KINDS = (
    pa.types.is_list,
    pa.types.is_large_list,
    pa.types.is_fixed_size_list,
    pa.types.is_list_view,
    pa.types.is_large_list_view,
)


def expected_nullability(f: pa.Field) -> list[bool]:
    """Arrow's nullability of the field behind each entry of a column, in entry order."""
    out = [f.nullable]

    def members(t: pa.DataType) -> None:
        while True:
            if isinstance(t, pa.DictionaryType):
                t = t.value_type
            elif pa.types.is_map(t):
                t = t.item_type
            elif any(is_list(t) for is_list in LIST_KINDS):
                t = t.value_type
            else:
                break
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                out.append(t.field(i).nullable)
                members(t.field(i).type)

    members(f.type)
    return out


def check_column(f: pa.Field, hive: str) -> None:
    ours = arrow_fields(pa.schema([f]))
    doc = (f.metadata or {}).get(b"doc")
    doc = doc.decode() if doc else None
    theirs = datahub_fields(f.name, hive, doc, f.nullable)
    assert arrow_hive_type(f.type) == hive
    assert [x.path for x in ours] == [x.fieldPath for x in theirs]
    assert [x.type for x in ours] == [datahub_type(x) for x in theirs]
    assert [x.native_type for x in ours] == [x.nativeDataType for x in theirs]
    assert [x.is_part_of_key for x in ours] == [x.isPartOfKey for x in theirs]
    # DataHub knows the comment of the column (its first entry) only.
    assert ours[0].doc == theirs[0].description
    # Nullability: Arrow's own, field by field. DataHub's Hive path cannot know it: it marks
    # primitives nullable and complex fields with the default_nullable it is given (here the
    # column's Arrow nullability), so the two agree on the column entry of a complex column and
    # on every field Arrow calls nullable.
    assert [x.nullable for x in ours] == expected_nullability(f)
    complex_column = hive.startswith(("struct<", "array<", "map<"))
    if complex_column:
        assert ours[0].nullable == theirs[0].nullable
    for mine, dh in zip(ours, theirs, strict=True):
        if mine.nullable and (mine.type not in ("record", "array", "map") or f.nullable):
            assert dh.nullable


@pytest.mark.slow
@settings(
    max_examples=1200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(tables())
def test_paths_match_datahub_hive_columns(table):
    schema, hives = table
    for f, hive in zip(schema, hives, strict=True):
        check_column(f, hive)
    # The schema's list is the columns' lists, in column order.
    assert arrow_fields(schema) == [x for f in schema for x in arrow_fields(pa.schema([f]))]


@pytest.mark.parametrize(("arrow", "hive"), LEAVES)
def test_every_leaf_type_matches_datahub(arrow, hive):
    for nullable in (True, False):
        if pa.types.is_null(arrow) and not nullable:
            continue
        check_column(pa.field("c", arrow, nullable), hive)
        check_column(pa.field("s", pa.struct([pa.field("c", arrow)])), f"struct<c:{hive}>")
        check_column(pa.field("l", pa.list_(arrow)), f"array<{hive}>")
        check_column(pa.field("m", pa.map_(pa.string(), arrow)), f"map<string,{hive}>")


def test_datahub_oracle_facts():
    """The DataHub behaviour the module relies on (fails loudly if a DataHub release changes)."""

    def paths(name, hive):
        return [f.fieldPath for f in datahub_fields(name, hive, None, True)]

    assert paths("ts", "timestamp_ntz") == [f"{V}.[type=null].ts"]
    assert paths("ts", "timestamp") == [f"{V}.[type=int].ts"]
    assert paths("d", "decimal(10,2)") == [f"{V}.[type=bytes].d"]
    assert paths("a.b", "struct<x.y:int>") == [
        f"{V}.[type=struct].[type=struct].b",
        f"{V}.[type=struct].[type=struct].b.[type=int].y",
    ]
    # What DataHub does where we deliberately differ: it gives up on the column.
    assert paths("c", "struct<>") == ["c"]
    assert paths("c", "struct<a,b:int>") == ["c"]
    assert paths("c", "struct<a:int,a:string>") == [
        f"{V}.[type=struct].[type=struct].c",
        f"{V}.[type=struct].[type=struct].c.[type=int].a",
    ]


# --------------------------------------------------------------------------------------------
# hand-written expectations (DESIGN.md's convention)


def test_design_examples():
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), False),
            pa.field("s", pa.struct([pa.field("a", pa.int32())])),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("attrs", pa.map_(pa.string(), pa.int64())),
            pa.field("event_time", pa.timestamp("ms", tz="UTC")),
            pa.field("price", pa.decimal128(10, 2)),
            pa.field(
                "orders",
                pa.list_(
                    pa.struct(
                        [
                            pa.field("sku", pa.string()),
                            pa.field("lines", pa.list_(pa.struct([pa.field("qty", pa.int16())]))),
                        ]
                    )
                ),
            ),
        ]
    )
    assert arrow_field_paths(schema) == [
        f"{V}.[type=int].id",
        f"{V}.[type=struct].[type=struct].s",
        f"{V}.[type=struct].[type=struct].s.[type=int].a",
        f"{V}.[type=struct].[type=array].[type=string].tags",
        f"{V}.[type=struct].[type=map].[type=long].attrs",
        f"{V}.[type=int].event_time",
        f"{V}.[type=bytes].price",
        f"{V}.[type=struct].[type=array].[type=struct].orders",
        f"{V}.[type=struct].[type=array].[type=struct].orders.[type=string].sku",
        f"{V}.[type=struct].[type=array].[type=struct].orders.[type=array].[type=struct].lines",
        f"{V}.[type=struct].[type=array].[type=struct].orders.[type=array].[type=struct].lines"
        ".[type=int].qty",
    ]
    fields = arrow_fields(schema)
    assert (fields[0].type, fields[0].native_type, fields[0].nullable) == ("number", "int", False)
    assert (fields[1].type, fields[1].native_type) == ("record", "struct<a:int>")
    assert (fields[5].type, fields[5].native_type) == ("time", "timestamp")
    assert (fields[7].type, fields[7].native_type) == (
        "array",
        "array<struct<sku:string,lines:array<struct<qty:smallint>>>>",
    )


def test_kamu_system_columns():
    schema = pa.schema(
        [
            pa.field("offset", pa.int64(), False),
            pa.field("op", pa.int32(), False),
            pa.field("system_time", pa.timestamp("ms", tz="UTC"), False),
            pa.field("event_time", pa.timestamp("ms", tz="UTC")),
            pa.field("city", pa.string()),
            pa.field("population", pa.uint64()),
        ]
    )
    assert arrow_field_paths(schema) == [
        f"{V}.[type=long].offset",
        f"{V}.[type=int].op",
        f"{V}.[type=int].system_time",
        f"{V}.[type=int].event_time",
        f"{V}.[type=string].city",
        f"{V}.[type=bytes].population",
    ]


def test_docs_from_field_metadata():
    schema = pa.schema(
        [
            pa.field("a", pa.int32(), metadata={"doc": "the a"}),
            pa.field("b", pa.int32(), metadata={"comment": "Spark comment"}),
            pa.field("s", pa.struct([pa.field("x", pa.int8(), metadata={"doc": "inner"})])),
            pa.field("e", pa.int32(), metadata={"doc": ""}),
        ]
    )
    assert [f.doc for f in arrow_fields(schema)] == ["the a", "Spark comment", None, "inner", None]


# --------------------------------------------------------------------------------------------
# names, uniqueness, the index


wild_names = st.text("ab.,:<>()[]{}` ", min_size=0, max_size=4)


@st.composite
def wild_schemas(draw) -> pa.Schema:
    """Schemas with any names at all (DataHub cannot parse many of them)."""

    def extend(inner):
        return (
            st.lists(st.tuples(wild_names, inner), min_size=0, max_size=3).map(
                lambda ms: pa.struct([pa.field(n, t) for n, t in ms])
            )
            | inner.map(pa.list_)
            | inner.map(lambda t: pa.map_(pa.string(), t))
        )

    types = st.recursive(leaf_types.map(lambda p: p[0]), extend, max_leaves=8)
    cols = draw(st.lists(st.tuples(wild_names, types), min_size=0, max_size=4))
    return pa.schema([pa.field(n, t) for n, t in cols])


def name_paths(schema: pa.Schema) -> list[tuple[str, ...]]:
    out, stack = [], [((f.name,), f.type) for f in reversed(schema)]
    while stack:
        path, t = stack.pop()
        out.append(path)
        kids = children(t.value_type if isinstance(t, pa.DictionaryType) else t) or []
        stack.extend(((*path, n), c.type) for n, c in reversed(kids))
    return out


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wild_schemas())
def test_paths_are_unique_or_refused(schema):
    try:
        fields = arrow_fields(schema)
    except SchemaError as e:
        # Only for a repeated name or two names that render alike, and the message says which.
        assert "appears twice" in str(e) or "is also the path of field" in str(e)
        return
    paths = [f.path for f in fields]
    assert len(paths) == len(set(paths))
    assert all(p.startswith(V + ".[type=") for p in paths)
    index = arrow_field_index(schema)
    assert list(index) == name_paths(schema)
    assert set(index.values()) == set(paths)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_index_points_at_the_representing_entry(table):
    schema, _ = table
    index = arrow_field_index(schema)
    paths = arrow_field_paths(schema)
    assert list(index) == name_paths(schema)
    for name_path, path in index.items():
        assert path in paths
        structural = [p for p in name_path if p in ("[item]", "[key]", "[value]")]
        if not structural or "[key]" in name_path:
            continue
        # A list item / map value maps to its container's entry; a member below it has its own.
        if name_path[-1] in ("[item]", "[value]"):
            assert index[name_path[:-1]] == path


def test_index_example():
    schema = pa.schema(
        [
            pa.field(
                "m",
                pa.map_(
                    pa.struct([pa.field("k", pa.int32())]),
                    pa.list_(pa.struct([pa.field("x", pa.int64())])),
                ),
            ),
            pa.field("tags", pa.list_(pa.list_(pa.string()))),
        ]
    )
    m = f"{V}.[type=struct].[type=map].[type=array].[type=struct].m"
    tags = f"{V}.[type=struct].[type=array].[type=array].[type=string].tags"
    assert arrow_field_index(schema) == {
        ("m",): m,
        ("m", "[key]"): m,
        ("m", "[key]", "k"): m,
        ("m", "[value]"): m,
        ("m", "[value]", "[item]"): m,
        ("m", "[value]", "[item]", "x"): f"{m}.[type=long].x",
        ("tags",): tags,
        ("tags", "[item]"): tags,
        ("tags", "[item]", "[item]"): tags,
    }


def test_where_datahub_gives_up_we_do_not():
    schema = pa.schema(
        [
            pa.field("e", pa.struct([])),
            pa.field("w", pa.struct([pa.field("a,b", pa.int32()), pa.field("", pa.string())])),
        ]
    )
    assert arrow_field_paths(schema) == [
        f"{V}.[type=struct].[type=struct].e",
        f"{V}.[type=struct].[type=struct].w",
        f"{V}.[type=struct].[type=struct].w.[type=int].a,b",
        f"{V}.[type=struct].[type=struct].w.[type=string].",
    ]


def test_datahub_name_rendering():
    schema = pa.schema(
        [
            pa.field("a.b", pa.int32()),
            pa.field("x.y", pa.struct([pa.field(" p.q ", pa.int32()), pa.field("`r`", pa.int8())])),
        ]
    )
    assert arrow_field_paths(schema) == [
        f"{V}.[type=int].a.b",
        f"{V}.[type=struct].[type=struct].y",
        f"{V}.[type=struct].[type=struct].y.[type=int].q",
        f"{V}.[type=struct].[type=struct].y.[type=int].r",
    ]


# --------------------------------------------------------------------------------------------
# bad input and depth


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        (
            pa.schema([pa.field("u", pa.dense_union([pa.field("i", pa.int32())]))]),
            "field u:",
        ),
        (
            pa.schema(
                [
                    pa.field(
                        "s",
                        pa.struct(
                            [pa.field("l", pa.list_(pa.sparse_union([pa.field("i", pa.int8())])))]
                        ),
                    )
                ]
            ),
            "field s.l.[item]:",
        ),
        (
            pa.schema([pa.field("m", pa.map_(pa.string(), pa.dense_union([])))]),
            "field m.[value]:",
        ),
    ],
)
def test_type_without_mapping_is_named(schema, named):
    with pytest.raises(SchemaError, match="no Hive/Spark type") as e:
        arrow_fields(schema)
    assert named in str(e.value)


def test_duplicate_names_are_refused():
    with pytest.raises(SchemaError, match="field a: the column name appears twice"):
        arrow_fields(pa.schema([pa.field("a", pa.int8()), pa.field("a", pa.int8())]))
    dup = pa.struct([pa.field("x", pa.int8()), pa.field("x", pa.string())])
    with pytest.raises(SchemaError, match=r"field s\.x: the name 'x' appears twice in struct s"):
        arrow_fields(pa.schema([pa.field("s", dup)]))


def test_names_that_render_alike_are_refused():
    s = pa.struct([pa.field("x.a", pa.int8()), pa.field("a", pa.int8())])
    with pytest.raises(SchemaError, match=r"field s\.a: its v2 path .*s\.\[type=int\]\.a is also"):
        arrow_fields(pa.schema([pa.field("s", s)]))


@pytest.mark.parametrize("depth", [500, 3000])
def test_deep_nesting(depth):
    t = pa.int32()
    for _ in range(depth):
        t = pa.struct([pa.field("a", t)])
    schema = pa.schema([pa.field("c", t)])
    paths = arrow_field_paths(schema)
    assert len(paths) == depth + 1
    expected = f"{V}.[type=struct].[type=struct].c"
    assert paths[0] == expected
    for level in range(1, depth):
        expected += ".[type=struct].a"
        assert paths[level] == expected
    assert paths[-1] == expected + ".[type=int].a"
    assert arrow_hive_type(t) == "struct<a:" * depth + "int" + ">" * depth
    assert len(arrow_field_index(schema)) == depth + 1


def test_deep_lists_and_maps():
    t = pa.string()
    for i in range(500):
        t = pa.list_(t) if i % 2 else pa.map_(pa.string(), t)
    tokens = ".".join("[type=array]" if i % 2 else "[type=map]" for i in reversed(range(500)))
    assert arrow_field_paths(pa.schema([pa.field("c", t)])) == [
        f"{V}.[type=struct].{tokens}.[type=string].c"
    ]
