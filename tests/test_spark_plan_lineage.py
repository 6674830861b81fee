"""Field lineage captured from real Spark pipelines (odf_chain.spark.plan_lineage).

Every pipeline runs on the shared local SparkSession over small files written here (Parquet,
CSV, JSON lines) or in-memory rows. The expected lineage of each output field is written by
hand from what the query means: which input field, through which transformation (type and
subtype), masked or opaque. Sources are named by the file they read (``people.parquet``),
fields by dotted name paths (``addr.geo.lat``, ``tags.[item]``, ``attrs.[value]``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import ClassVar

import blake3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Window, functions as F

from odf_chain.dataset import Dataset
from odf_chain.events import (
    FieldOperation,
    InputField,
    LineageInput,
    Transformation,
    TransformationSubtype as Sub,
    TransformationType as Type,
)
from odf_chain.format.multihash import Multihash
from odf_chain.spark.plan_lineage import (
    LineageCaptureWarning,
    PlanLineage,
    capture_plan_lineage,
    lineage_from_plan,
)
from odf_chain.spark.plan_lineage.capture import _Sources, lineage_of_plan
from tests.helpers import multihash_name

try:
    import pandas as pd
except ImportError:  # pandas is a test dependency of the pandas UDF cases only
    pd = None

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

ID = "DIRECT IDENTITY"
TRANSFORM = "DIRECT TRANSFORMATION"
AGG = "DIRECT AGGREGATION"
CONDITION = "INDIRECT CONDITIONAL"
FILTER = "INDIRECT FILTER"
JOIN = "INDIRECT JOIN"
GROUP = "INDIRECT GROUP_BY"
SORT = "INDIRECT SORT"
WINDOW = "INDIRECT WINDOW"
MASKED = "DIRECT TRANSFORMATION masked"
OPAQUE = "DIRECT TRANSFORMATION opaque"

PPL = "people.parquet"
ORD = "orders.csv"
EVT = "events.json"

PEOPLE_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        (
            "addr",
            pa.struct(
                [
                    ("city", pa.string()),
                    ("zip", pa.string()),
                    ("geo", pa.struct([("lat", pa.float64()), ("lon", pa.float64())])),
                ]
            ),
        ),
        ("tags", pa.list_(pa.string())),
        ("attrs", pa.map_(pa.string(), pa.int64())),
    ]
)


# -- inputs ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """people.parquet (nested), orders.csv, events.json: a few rows each."""
    root = tmp_path_factory.mktemp("lineage-inputs")
    people = pa.table(
        {
            "id": [1, 2, 3],
            "name": ["ada", None, "cy"],
            "addr": [
                {"city": "Oslo", "zip": "0150", "geo": {"lat": 59.9, "lon": 10.7}},
                {"city": "Lyon", "zip": "69001", "geo": {"lat": 45.7, "lon": 4.8}},
                None,
            ],
            "tags": [["a", "b"], [], ["c"]],
            "attrs": [[("h", 170)], [], [("w", 60), ("h", 180)]],
        },
        schema=PEOPLE_SCHEMA,
    )
    pq.write_table(people, root / PPL)
    (root / ORD).write_text(
        "order_id,person_id,amount,region\n10,1,120.5,eu\n11,1,30.0,us\n12,2,99.9,eu\n13,3,5.0,eu\n"
    )
    (root / EVT).write_text(
        '{"person_id": 1, "region": "eu", "score": 0.5}\n'
        '{"person_id": 2, "region": "eu", "score": 0.9}\n'
        '{"person_id": 1, "region": "us", "score": 0.1}\n'
    )
    return root


@pytest.fixture(scope="module")
def people(spark, inputs):
    return spark.read.parquet(str(inputs / PPL))


@pytest.fixture(scope="module")
def orders(spark, inputs):
    schema = "order_id long, person_id long, amount double, region string"
    return spark.read.schema(schema).option("header", "true").csv(str(inputs / ORD))


@pytest.fixture(scope="module")
def events(spark, inputs):
    return spark.read.schema("person_id long, region string, score double").json(str(inputs / EVT))


@pytest.fixture(scope="module")
def views(spark, people, orders):
    people.createOrReplaceTempView("people_v")
    orders.createOrReplaceTempView("orders_v")
    yield
    spark.catalog.dropTempView("people_v")
    spark.catalog.dropTempView("orders_v")


# -- reading a capture ----------------------------------------------------------------------------


def kind(transformation: Transformation) -> str:
    text = f"{transformation.type.name} {transformation.subtype.name}"
    if transformation.masking:
        text += " masked"
    if transformation.opaque:
        text += " opaque"
    return text


def lineage(df) -> dict[str, set[tuple[str, str, str]]]:
    """Output field (dotted) -> {(source file, source field (dotted), transformation)}."""
    captured = capture_plan_lineage(df)
    assert captured is not None
    assert captured.unsupported == (), captured.unsupported
    return readable(captured)


def readable(captured: PlanLineage) -> dict[str, set[tuple[str, str, str]]]:
    return {
        ".".join(path): {
            (
                captured.sources[d.field.source].label,
                ".".join(d.field.path),
                kind(d.transformation),
            )
            for d in deps
        }
        for path, deps in captured.fields.items()
    }


# -- the pipelines --------------------------------------------------------------------------------


def test_select_and_alias(people):
    got = lineage(people.select(F.col("id").alias("person"), "name"))
    assert got == {"person": {(PPL, "id", ID)}, "name": {(PPL, "name", ID)}}


def test_arithmetic_and_cast(orders):
    got = lineage(orders.select((F.col("amount") * 100).cast("long").alias("cents"), "region"))
    assert got == {"cents": {(ORD, "amount", TRANSFORM)}, "region": {(ORD, "region", ID)}}


def test_filter_decides_every_column(people):
    got = lineage(people.where(F.col("id") > 1).select("name"))
    assert got == {"name": {(PPL, "name", ID), (PPL, "id", FILTER)}}


def test_inner_join_on_two_keys(orders, events):
    joined = orders.join(events, ["person_id", "region"]).select("order_id", "score")
    keys = {
        (ORD, "person_id", JOIN),
        (ORD, "region", JOIN),
        (EVT, "person_id", JOIN),
        (EVT, "region", JOIN),
    }
    got = lineage(joined)
    assert got == {"order_id": {(ORD, "order_id", ID)} | keys, "score": {(EVT, "score", ID)} | keys}


def test_left_join_with_extra_condition(people, orders):
    joined = people.join(
        orders, (people.id == orders.person_id) & (orders.amount > 10), "left"
    ).select(people.name, orders.amount)
    condition = {(PPL, "id", JOIN), (ORD, "person_id", JOIN), (ORD, "amount", JOIN)}
    got = lineage(joined)
    assert got == {
        "name": {(PPL, "name", ID)} | condition,
        "amount": {(ORD, "amount", ID)} | condition,
    }


def test_group_by_aggregation(orders):
    totals = orders.groupBy("region").agg(
        F.sum("amount").alias("total"), F.count(F.lit(1)).alias("n")
    )
    got = lineage(totals)
    assert got == {
        "region": {(ORD, "region", ID), (ORD, "region", GROUP)},
        "total": {(ORD, "amount", AGG), (ORD, "region", GROUP)},
        "n": {(ORD, "region", GROUP)},  # count(*): which groups exist is all it depends on
    }


def test_distinct(people):
    got = lineage(people.select("name").distinct())
    assert got == {"name": {(PPL, "name", ID), (PPL, "name", GROUP)}}


def test_drop_duplicates_on_a_key(people):
    got = lineage(people.select("id", "name").dropDuplicates(["name"]))
    assert got == {
        "id": {(PPL, "id", ID), (PPL, "name", GROUP)},
        "name": {(PPL, "name", ID), (PPL, "name", GROUP)},
    }


def test_sort(people):
    got = lineage(people.select("id").orderBy(F.col("name").desc()))
    assert got == {"id": {(PPL, "id", ID), (PPL, "name", SORT)}}


def test_window_row_number(orders):
    ranked = orders.select(
        "order_id",
        F.row_number().over(Window.partitionBy("region").orderBy("amount")).alias("rank"),
    )
    got = lineage(ranked)
    assert got == {
        "order_id": {(ORD, "order_id", ID)},
        "rank": {(ORD, "region", WINDOW), (ORD, "amount", WINDOW)},
    }


def test_window_sum_over_partition(orders):
    totals = orders.select(
        "order_id", F.sum("amount").over(Window.partitionBy("person_id")).alias("person_total")
    )
    got = lineage(totals)
    assert got == {
        "order_id": {(ORD, "order_id", ID)},
        "person_total": {(ORD, "amount", AGG), (ORD, "person_id", WINDOW)},
    }


def test_explode_array(people):
    got = lineage(people.select("id", F.explode("tags").alias("tag")))
    assert got == {"id": {(PPL, "id", ID)}, "tag": {(PPL, "tags.[item]", ID)}}


def test_explode_map(people):
    got = lineage(people.select("id", F.explode("attrs").alias("attr", "amount")))
    assert got == {
        "id": {(PPL, "id", ID)},
        "attr": {(PPL, "attrs.[key]", ID)},
        "amount": {(PPL, "attrs.[value]", ID)},
    }


def test_union_is_positional(people, orders):
    got = lineage(people.select("id").union(orders.select("person_id")))
    assert got == {"id": {(PPL, "id", ID), (ORD, "person_id", ID)}}


def test_union_by_name_aligns_names(people, events):
    left = people.select("id", "name")
    right = events.select(F.col("region").alias("name"), F.col("person_id").alias("id"))
    got = lineage(left.unionByName(right))
    assert got == {
        "id": {(PPL, "id", ID), (EVT, "person_id", ID)},
        "name": {(PPL, "name", ID), (EVT, "region", ID)},
    }


def test_scalar_subquery(spark, views):
    above = spark.sql(
        "SELECT order_id, amount - (SELECT avg(amount) FROM orders_v) AS above_avg FROM orders_v"
    )
    got = lineage(above)
    assert got == {
        "order_id": {(ORD, "order_id", ID)},
        # the row's own amount, changed; and the average of every amount
        "above_avg": {(ORD, "amount", TRANSFORM), (ORD, "amount", AGG)},
    }


def test_exists_subquery(spark, views):
    buyers = spark.sql(
        "SELECT name FROM people_v p WHERE EXISTS "
        "(SELECT 1 FROM orders_v o WHERE o.person_id = p.id AND o.amount > 50)"
    )
    got = lineage(buyers)
    assert got == {
        "name": {
            (PPL, "name", ID),
            (PPL, "id", FILTER),
            (ORD, "person_id", FILTER),
            (ORD, "amount", FILTER),
        }
    }


def test_case_when(orders):
    bucket = (
        F.when(F.col("amount") > 100, F.lit("big"))
        .when(F.col("region") == "eu", F.col("region"))
        .otherwise(F.upper("region"))
    )
    got = lineage(orders.select(bucket.alias("bucket")))
    assert got == {
        "bucket": {
            (ORD, "amount", CONDITION),
            (ORD, "region", CONDITION),
            (ORD, "region", TRANSFORM),  # a value returned: region, as is or upper-cased
        }
    }


def test_coalesce(people):
    got = lineage(people.select(F.coalesce("name", "addr.city").alias("label")))
    # each argument is tested for null (CONDITIONAL) and may be returned (TRANSFORMATION)
    assert got == {
        "label": {
            (PPL, "name", TRANSFORM),
            (PPL, "name", CONDITION),
            (PPL, "addr.city", TRANSFORM),
            (PPL, "addr.city", CONDITION),
        }
    }


def test_nested_struct_fields_in(people):
    got = lineage(people.select(F.col("addr.city").alias("city"), "addr.geo.lat"))
    assert got == {"city": {(PPL, "addr.city", ID)}, "lat": {(PPL, "addr.geo.lat", ID)}}


def test_whole_struct_keeps_its_fields(people):
    got = lineage(people.select("addr"))
    assert got == {
        "addr": {(PPL, "addr", ID)},
        "addr.city": {(PPL, "addr.city", ID)},
        "addr.zip": {(PPL, "addr.zip", ID)},
        "addr.geo": {(PPL, "addr.geo", ID)},
        "addr.geo.lat": {(PPL, "addr.geo.lat", ID)},
        "addr.geo.lon": {(PPL, "addr.geo.lon", ID)},
    }


def test_nested_struct_out(people):
    person = F.struct(
        F.col("name"), F.struct(F.col("addr.city").alias("town")).alias("place")
    ).alias("person")
    got = lineage(people.select(person))
    assert got == {
        "person": {(PPL, "name", ID), (PPL, "addr.city", ID)},
        "person.name": {(PPL, "name", ID)},
        "person.place": {(PPL, "addr.city", ID)},
        "person.place.town": {(PPL, "addr.city", ID)},
    }


def test_struct_field_renamed_through_nesting(people):
    nested = people.select(F.struct(F.col("addr.zip").alias("postcode")).alias("where"))
    got = lineage(nested.select(F.col("where.postcode").alias("pc")))
    assert got == {"pc": {(PPL, "addr.zip", ID)}}


def test_with_field_replaces_one_field(people):
    got = lineage(people.select(F.col("addr").withField("city", F.upper("name")).alias("a")))
    assert got["a.city"] == {(PPL, "name", TRANSFORM)}
    assert got["a.zip"] == {(PPL, "addr.zip", ID)}
    assert got["a.geo.lat"] == {(PPL, "addr.geo.lat", ID)}


def test_sha2_masks(people):
    got = lineage(
        people.select(F.sha2("name", 256).alias("name_hash"), F.md5("addr.zip").alias("z"))
    )
    assert got == {"name_hash": {(PPL, "name", MASKED)}, "z": {(PPL, "addr.zip", MASKED)}}


def test_python_udf_is_opaque(people):
    shout = F.udf(lambda s: None if s is None else s.upper() + "!", "string")
    got = lineage(people.select(shout("name").alias("loud"), "id"))
    assert got == {"loud": {(PPL, "name", OPAQUE)}, "id": {(PPL, "id", ID)}}


@pytest.mark.skipif(pd is None, reason="pandas UDFs need pandas (a test dependency)")
def test_pandas_udf_is_opaque(orders):
    @F.pandas_udf("double")
    def with_tax(amount: pd.Series) -> pd.Series:
        return amount * 1.2

    got = lineage(orders.select(with_tax("amount").alias("gross")))
    assert got == {"gross": {(ORD, "amount", OPAQUE)}}


@pytest.mark.skipif(pd is None, reason="mapInPandas needs pandas (a test dependency)")
def test_map_in_pandas_sees_every_input_column(orders):
    def double(batches):
        for batch in batches:
            yield batch.assign(amount=batch.amount * 2)

    mapped = orders.select("order_id", "amount").mapInPandas(double, "order_id long, amount double")
    seen = {(ORD, "order_id", OPAQUE), (ORD, "amount", OPAQUE)}
    assert lineage(mapped) == {"order_id": seen, "amount": seen}


def test_python_udtf_is_opaque(spark, views):
    from pyspark.sql.functions import udtf

    @udtf(returnType="word: string")
    class Words:
        def eval(self, text):
            for word in (text or "").split():
                yield (word,)

    spark.udtf.register("words_of", Words)
    got = lineage(spark.sql("SELECT p.id, word FROM people_v p, LATERAL words_of(p.name)"))
    assert got == {"id": {(PPL, "id", ID)}, "word": {(PPL, "name", OPAQUE)}}


def test_rdd_round_trip_is_opaque_over_what_the_rdd_read(people):
    upper = people.select("id", "name").rdd.map(lambda r: (r.id, (r.name or "").upper()))
    got = lineage(upper.toDF(["id", "shout"]))
    seen = {(PPL, "id", OPAQUE), (PPL, "name", OPAQUE)}  # the scan read exactly id and name
    assert got == {"id": seen, "shout": seen}


def test_rows_made_in_memory_are_a_local_input(spark):
    got = lineage(spark.createDataFrame([(1, "a")], "k long, v string").select("v"))
    assert got == {"v": {("local", "v", ID)}}


def test_lateral_subquery(spark, views):
    got = lineage(
        spark.sql("SELECT p.id, x.loud FROM people_v p, LATERAL (SELECT upper(p.name) AS loud) x")
    )
    assert got == {"id": {(PPL, "id", ID)}, "loud": {(PPL, "name", TRANSFORM)}}


def test_same_plan_gives_the_same_operations_every_time(people, orders):
    def build():
        joined = people.join(orders, people.id == orders.person_id)
        return joined.groupBy("name").agg(F.sum("amount").alias("spent"))

    schema = pa.schema([("name", pa.string()), ("spent", pa.float64())])
    assert lineage_from_plan(build(), schema) == lineage_from_plan(build(), schema)


# -- from a capture to the event's inputs and operations --------------------------------------


def v2(kind_: str, name: str) -> str:
    return f"[version=2.0].[type={kind_}].{name}"


def test_inputs_and_operations_for_external_files(people, orders, inputs):
    spent = (
        people.join(orders, people.id == orders.person_id)
        .where(F.col("region") == "eu")
        .groupBy("name")
        .agg(F.sum("amount").alias("spent"))
    )
    output = pa.schema(
        [("offset", pa.int64()), ("op", pa.int32()), ("name", pa.string()), ("spent", pa.float64())]
    )
    found = lineage_from_plan(spent, output)
    assert found is not None
    got_inputs, operations = found
    assert got_inputs == (
        LineageInput(
            ORD,
            (inputs / ORD).as_uri(),
            content_hash=Multihash.from_multibase(multihash_name((inputs / ORD).read_bytes())),
        ),
        LineageInput(
            PPL,
            (inputs / PPL).as_uri(),
            content_hash=Multihash.from_multibase(multihash_name((inputs / PPL).read_bytes())),
        ),
    )
    name, spent_ = v2("string", "name"), v2("double", "spent")
    decided = (
        InputField(ORD, v2("long", "person_id")),
        InputField(ORD, v2("string", "region")),
        InputField(PPL, v2("long", "id")),
        InputField(PPL, v2("string", "name")),
    )
    assert operations == (
        FieldOperation(
            "direct-identity-1",
            (InputField(PPL, v2("string", "name")),),
            (name,),
            Transformation(Type.DIRECT, Sub.IDENTITY),
            "DIRECT IDENTITY (captured from the Spark plan)",
        ),
        FieldOperation(
            "indirect-join-1",
            (decided[0], decided[2]),
            (name, spent_),
            Transformation(Type.INDIRECT, Sub.JOIN),
            "INDIRECT JOIN (captured from the Spark plan)",
        ),
        FieldOperation(
            "indirect-filter-1",
            (decided[1],),
            (name, spent_),
            Transformation(Type.INDIRECT, Sub.FILTER),
            "INDIRECT FILTER (captured from the Spark plan)",
        ),
        FieldOperation(
            "indirect-group-by-1",
            (decided[3],),
            (name, spent_),
            Transformation(Type.INDIRECT, Sub.GROUP_BY),
            "INDIRECT GROUP_BY (captured from the Spark plan)",
        ),
        FieldOperation(
            "direct-aggregation-1",
            (InputField(ORD, v2("double", "amount")),),
            (spent_,),
            Transformation(Type.DIRECT, Sub.AGGREGATION),
            "DIRECT AGGREGATION (captured from the Spark plan)",
        ),
    )


def test_nested_output_paths_and_masking_and_opacity(people):
    shout = F.udf(lambda s: s, "string")
    df = people.select(
        F.struct(F.sha2("name", 256).alias("h"), shout("addr.city").alias("c")).alias("s")
    )
    output = pa.schema([("s", pa.struct([("h", pa.string()), ("c", pa.string())]))])
    _, operations = lineage_from_plan(df, output)
    s = "[version=2.0].[type=struct].[type=struct].s"
    # s holds both fields, so it shares each field's operation: one masked, one opaque
    masked = Transformation(Type.DIRECT, Sub.TRANSFORMATION, masking=True)
    opaque = Transformation(Type.DIRECT, Sub.TRANSFORMATION, opaque=True)
    city = "[version=2.0].[type=struct].[type=struct].addr.[type=string].city"
    assert [(op.name, op.inputs, op.outputs, op.transformation) for op in operations] == [
        (
            "direct-transformation-opaque-1",
            (InputField(PPL, city),),
            (s, f"{s}.[type=string].c"),
            opaque,
        ),
        (
            "direct-transformation-masked-1",
            (InputField(PPL, v2("string", "name")),),
            (s, f"{s}.[type=string].h"),
            masked,
        ),
    ]
    assert "opaque (Python UDF <lambda>)" in operations[0].description


def test_derived_event_time_is_an_output_but_other_system_columns_are_not(orders):
    df = orders.where(F.col("amount") > 0).select(
        "order_id",
        F.lit(0).alias("op"),  # a system column the job fills with a constant: not derived
        (F.col("order_id") * 1000).cast("timestamp").alias("event_time"),
    )
    output = pa.schema(
        [
            ("offset", pa.int64()),
            ("op", pa.int32()),
            ("system_time", pa.timestamp("ms", tz="UTC")),
            ("event_time", pa.timestamp("us", tz="UTC")),
            ("order_id", pa.int64()),
        ]
    )
    _, operations = lineage_from_plan(df, output)
    outputs = {o for op in operations for o in op.outputs}
    # (DataHub's lakehouse convention shows a timestamp column as [type=int])
    assert outputs == {v2("int", "event_time"), v2("long", "order_id")}


def test_directory_read_is_one_input_with_a_manifest_hash(spark, tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(pa.table({"x": [1, 2]}), folder / "b.parquet")
    pq.write_table(pa.table({"x": [3]}), folder / "a.parquet")
    df = spark.read.parquet(str(folder))
    got_inputs, operations = lineage_from_plan(df, pa.schema([("x", pa.int64())]))
    manifest = "".join(
        f"{name}\t{multihash_name((folder / name).read_bytes())}\n"
        for name in ("a.parquet", "b.parquet")
    )
    expected_hash = "f1e20" + blake3.blake3(manifest.encode()).hexdigest()
    assert got_inputs == (
        LineageInput(
            "parts", folder.as_uri() + "/", content_hash=Multihash.from_multibase(expected_hash)
        ),
    )
    assert operations == (
        FieldOperation(
            "direct-identity-1",
            (InputField("parts", v2("long", "x")),),
            (v2("long", "x"),),
            Transformation(),
            "DIRECT IDENTITY (captured from the Spark plan)",
        ),
    )


def test_odf_chain_dataset_input_is_pinned_at_the_block_of_the_slice_read(spark, people, tmp_path):
    scores = Dataset.create(tmp_path / "scores")
    first = scores.write(pa.table({"pid": [1, 2], "score": [0.5, 0.7]}))[-1]
    second = scores.write(pa.table({"pid": [3], "score": [0.2]}))[-1]
    data = tmp_path / "scores" / "data"
    first_file = data / str(first.block.event.new_data.physical_hash)
    second_file = data / str(second.block.event.new_data.physical_hash)
    dataset_id = Dataset.open(tmp_path / "scores").state.dataset_id
    output = pa.schema([("name", pa.string()), ("score", pa.float64())])

    def joined(*files: Path):
        slices = spark.read.parquet(*(str(f) for f in files))
        return people.join(slices, people.id == slices.pid).select("name", "score")

    both_inputs, operations = lineage_from_plan(joined(first_file, second_file), output)
    pinned = LineageInput(
        "scores", (tmp_path / "scores").as_uri(), dataset_id=dataset_id, block_hash=second.hash
    )
    assert both_inputs[1] == pinned  # the later of the two blocks that named what was read
    assert both_inputs[0].name == PPL
    score_op = next(op for op in operations if op.outputs == (v2("double", "score"),))
    assert score_op.inputs == (InputField("scores", v2("double", "score")),)
    join_op = next(op for op in operations if op.name == "indirect-join-1")
    assert join_op.inputs == (
        InputField(PPL, v2("long", "id")),
        InputField("scores", v2("long", "pid")),
    )

    first_only, _ = lineage_from_plan(joined(first_file), output)
    assert first_only[1] == LineageInput(
        "scores", (tmp_path / "scores").as_uri(), dataset_id=dataset_id, block_hash=first.hash
    )


# -- without a JVM plan, and with a plan node nobody knows -------------------------------------


class ConnectLikeFrame:
    """What a Spark Connect DataFrame looks like to capture: no ``_jdf``."""

    columns: ClassVar[list[str]] = ["a"]


def test_spark_connect_frame_gives_none_and_warns():
    with pytest.warns(LineageCaptureWarning, match="Spark Connect"):
        assert capture_plan_lineage(ConnectLikeFrame()) is None
    with pytest.warns(LineageCaptureWarning):
        assert lineage_from_plan(ConnectLikeFrame(), pa.schema([("a", pa.int64())])) is None


def _attribute(name: str, attr_id: int, data_type: str = "long") -> list[dict]:
    return [
        {
            "class": "org.apache.spark.sql.catalyst.expressions.AttributeReference",
            "num-children": 0,
            "name": name,
            "dataType": data_type,
            "nullable": True,
            "exprId": {"id": attr_id},
        }
    ]


def test_unknown_node_is_opaque_over_everything_below_and_reported():
    plan = [
        {
            "class": "com.example.MysteryNode",
            "num-children": 1,
            "output": [_attribute("out", 7)],
            "child": 0,
        },
        {
            "class": "org.apache.spark.sql.catalyst.plans.logical.LocalRelation",
            "num-children": 0,
            "output": [_attribute("a", 1), _attribute("b", 2, "string")],
        },
    ]
    schema = {"type": "struct", "fields": [{"name": "out", "type": "long", "nullable": True}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        captured = lineage_of_plan(plan, schema, _Sources(None, lambda: ()))
    assert captured.unsupported == ("com.example.MysteryNode",)
    assert readable(captured) == {"out": {("local", "a", OPAQUE), ("local", "b", OPAQUE)}}


def test_file_relation_falls_back_to_the_frames_input_files():
    """When the JVM cannot be asked about a leaf, the relation gets every file the DataFrame
    reads (df.inputFiles()), and says so."""
    plan = [
        {
            "class": "org.apache.spark.sql.execution.datasources.LogicalRelation",
            "num-children": 0,
            "relation": None,
            "output": [_attribute("a", 1)],
        }
    ]
    schema = {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True}]}
    files = ("file:///data/x.parquet", "file:///data/y.parquet")
    captured = lineage_of_plan(plan, schema, _Sources(None, lambda: files))
    assert captured.sources[0].files == files
    assert any("every file the DataFrame reads" in note for note in captured.notes)
    assert readable(captured) == {"a": {("files", "a", ID)}}


def test_a_local_checkpoint_is_an_rdd_of_unknown_origin_not_local_rows(spark, tmp_path):
    """localCheckpoint cuts the plan: what it held came from somewhere Spark no longer shows,
    so the fields come from an opaque RDD, never from 'rows made in the driver'."""
    from odf_chain.spark.plan_lineage import capture_plan_lineage
    from odf_chain.spark.plan_lineage.model import SourceKind

    src = tmp_path / "people.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [1, 2], "name": ["a", "b"]}), src)
    df = spark.read.parquet(str(src)).select("id", "name").localCheckpoint()
    captured = capture_plan_lineage(df)
    kinds = {s.kind for s in captured.sources}
    assert SourceKind.LOCAL not in kinds and SourceKind.RDD in kinds


def test_a_condition_on_a_nested_field_depends_on_that_field_only(people):
    """Found by review: a filter or group-by key ``addr.geo.lat`` also added its enclosing
    structs ``addr`` and ``addr.geo`` as inputs."""
    got = lineage(people.filter(F.col("addr.geo.lat") > 0).select("name"))
    assert got == {"name": {(PPL, "name", ID), (PPL, "addr.geo.lat", FILTER)}}
    by_city = lineage(people.groupBy(F.col("addr.city").alias("city")).count())
    assert by_city["city"] == {(PPL, "addr.city", GROUP), (PPL, "addr.city", ID)}


def test_max_by_takes_the_value_and_only_picks_by_the_ordering(orders):
    """Found by review: the ordering column of max_by was recorded as a direct input."""
    got = lineage(orders.groupBy("region").agg(F.max_by("order_id", "amount").alias("top")))
    assert got["top"] == {
        (ORD, "order_id", AGG),
        (ORD, "amount", SORT),
        (ORD, "region", GROUP),
    }
