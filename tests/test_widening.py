"""Type widening (odf_chain.schema.widening): an input narrower than the schema in force is
cast to it on write, by Dataset.write, odf_chain.spark.write and odf-chain ingest alike; any
other type change is refused before a file or block is written, naming the input and field."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.dataset import Dataset
from odf_chain.errors import SchemaEvolutionError, TypeChangeError
from odf_chain.events import AddData
from odf_chain.schema.widening import adopt_schema, widened, widens
from tests.cli_run import run_ingest
from tests.helpers import snapshot_tree

I8, I16, I32, I64 = pa.int8(), pa.int16(), pa.int32(), pa.int64()
U8, U16, U32, U64 = pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()
F16, F32, F64 = pa.float16(), pa.float32(), pa.float64()


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (I8, I16),
        (I8, I64),
        (I16, I32),
        (I32, I64),
        (U8, U16),
        (U32, U64),
        (U8, I16),
        (U32, I64),
        (I8, F16),
        (I16, F32),
        (U16, F32),
        (I32, F64),
        (U32, F64),
        (F16, F32),
        (F32, F64),
        (pa.decimal128(5, 2), pa.decimal128(7, 3)),
        (pa.decimal128(5, 2), pa.decimal256(40, 2)),
        (I32, pa.decimal128(12, 2)),
        (I64, pa.decimal128(19, 0)),
    ],
)
def test_lossless_types_widen(source: pa.DataType, target: pa.DataType) -> None:
    assert widens(source, target)
    assert widened(source, target) == (target, [])


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (I64, I32),  # narrower
        (I16, U32),  # a negative value has no unsigned form
        (U64, I64),  # 2**64 - 1 does not fit
        (I32, F32),  # 2**24 + 1 is not a float32
        (I64, F64),  # 2**53 + 1 is not a float64
        (F64, F32),
        (F32, I64),
        (pa.decimal128(7, 3), pa.decimal128(7, 2)),  # a digit lost
        (pa.decimal128(7, 2), pa.decimal128(7, 3)),  # an integer digit lost
        (I32, pa.decimal128(10, 2)),
        (pa.date32(), pa.timestamp("ms", tz="UTC")),  # which zone's midnight?
        (pa.timestamp("ms"), pa.timestamp("ms", tz="UTC")),
        (pa.string(), I64),
        (I64, pa.string()),
    ],
)
def test_lossy_or_other_types_do_not_widen(source: pa.DataType, target: pa.DataType) -> None:
    assert not widens(source, target)
    adopted, found = widened(source, target)
    assert adopted == source and [(n.source, n.target) for n in found] == [(source, target)]


def test_nested_members_widen_by_name_and_narrowing_is_named() -> None:
    target = pa.struct(
        [("a", I64), ("tags", pa.list_(F64)), ("m", pa.map_(pa.string(), I64)), ("b", I64)]
    )
    source = pa.struct(
        [("b", I8), ("a", I32), ("tags", pa.list_(F32)), ("m", pa.map_(pa.string(), I16))]
    )
    adopted, found = widened(source, target)
    assert found == []
    assert adopted == pa.struct(
        [("b", I64), ("a", I64), ("tags", pa.list_(F64)), ("m", pa.map_(pa.string(), I64))]
    )
    _, found = widened(
        pa.struct([("a", I64), ("tags", pa.list_(F64))]),
        pa.struct([("a", I32), ("tags", pa.list_(F32))]),
    )
    assert [n.path for n in found] == ["a", "tags.[item]"]
    schema, found = adopt_schema(
        pa.schema([("s", pa.struct([("a", I64)])), ("new", I8)]),
        pa.schema([("s", pa.struct([("a", I32)]))]),
    )
    assert [str(n) for n in found] == ["field s.a is int64 where the dataset has int32"]
    assert schema.names == ["s", "new"]  # a new column is kept, for the new-column check


# -- Dataset.write ---------------------------------------------------------------------------


def _dataset(root: Path) -> Dataset:
    ds = Dataset.create(root)
    ds.write(
        pa.table(
            {
                "n": pa.array([1], I64),
                "x": pa.array([0.5], F64),
                "s": pa.array(
                    [{"a": 1, "v": [1.0]}], pa.struct([("a", I64), ("v", pa.list_(F64))])
                ),
            }
        )
    )
    return ds


def test_dataset_write_casts_a_narrower_input_to_the_schema_in_force(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds")
    schema = ds.state.schema
    narrow = pa.table(
        {
            "n": pa.array([2], I32),
            "x": pa.array([1.5], F32),
            "s": pa.array([{"a": 2, "v": [2.5]}], pa.struct([("a", I8), ("v", pa.list_(F32))])),
        }
    )
    blocks = ds.write(narrow)
    assert [type(b.block.event) for b in blocks] == [AddData]  # no SetDataSchema
    assert ds.state.schema.equals(schema, check_metadata=True)
    rows = ds.to_table().select(["n", "x", "s"])
    assert rows.schema.field("n").type == I64 and rows.schema.field("x").type == F64
    assert rows.to_pylist()[-1] == {"n": 2, "x": 1.5, "s": {"a": 2, "v": [2.5]}}
    assert ds.verify().problems == []


def test_dataset_write_refuses_a_narrowing_naming_the_field_not_a_block(tmp_path: Path) -> None:
    ds = _dataset(tmp_path / "ds")
    before = snapshot_tree(ds.path)
    wide = pa.table(
        {
            "n": pa.array(["3"]),
            "x": pa.array([1.5], F64),
            "s": pa.array(
                [{"a": 1, "v": [1.0]}], pa.struct([("a", I64), ("v", pa.list_(pa.float64()))])
            ),
        }
    )
    with pytest.raises(TypeChangeError) as info:
        ds.write(wide)
    message = str(info.value)
    assert isinstance(info.value, SchemaEvolutionError)
    assert "field n is string where the dataset has int64" in message, message
    assert str(ds.location) in message and "block" not in message, message
    assert snapshot_tree(ds.path) == before


# -- Spark: odf_chain.spark.write and odf-chain ingest -----------------------------------------


def test_spark_write_casts_int_to_long_and_refuses_long_to_int(spark, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    from odf_chain.spark import write

    ds = _dataset(tmp_path / "ds")
    schema = ds.state.schema
    narrow = spark.range(10, 13, numPartitions=1).select(
        F.col("id").cast("int").alias("n"),
        (F.col("id") / 2).cast("float").alias("x"),
        F.struct(
            F.col("id").cast("tinyint").alias("a"), F.array(F.lit(1.5).cast("float")).alias("v")
        ).alias("s"),
    )
    result = write(narrow, ds.path)
    assert [type(b.block.event) for b in result.blocks] == [AddData]
    assert Dataset.open(ds.path).state.schema.equals(schema, check_metadata=True)
    rows = Dataset.open(ds.path).to_table().select(["n", "x", "s"]).to_pylist()
    assert rows[-1] == {"n": 12, "x": 6.0, "s": {"a": 12, "v": [1.5]}}

    before = snapshot_tree(ds.path)
    other = spark.range(1).select(F.lit("x").alias("n"), F.lit(1.0).cast("double").alias("x"))
    with pytest.raises(TypeChangeError) as info:
        write(other, ds.path)
    message = str(info.value)
    assert "the DataFrame: field n is string where the dataset has int64" in message, message
    assert "block" not in message
    assert snapshot_tree(ds.path) == before
    assert Dataset.open(ds.path).verify().problems == []


def test_ingest_widens_a_csv_int_column_and_names_the_file_of_a_narrowing(
    spark, tmp_path: Path
) -> None:
    """The case of issue 20: a CSV whose small numbers Spark infers as int32, into a dataset
    whose column is int64 (refused as "block 3: ... changed type from int64 to int32" before)."""
    root = tmp_path / "ds"
    first = tmp_path / "first.parquet"
    pq.write_table(pa.table({"id": pa.array([1], I64), "v": pa.array([0.5], F64)}), first)
    p = run_ingest(spark, ["ds", first, "--format", "parquet", "--create"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    schema = Dataset.open(root).state.schema
    (tmp_path / "small.csv").write_text("id,v\n2,1.5\n3,2.5\n")
    p = run_ingest(spark, ["ds", "small.csv", "--format", "csv"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "blocks     1 appended (AddData)" in p.stdout, p.stdout
    assert "\nlineage    " in p.stdout and "field operation" in p.stdout, p.stdout
    ds = Dataset.open(root)
    assert ds.state.schema.equals(schema, check_metadata=True)
    assert ds.to_table().column("id").to_pylist() == [1, 2, 3]

    (tmp_path / "text.csv").write_text("id,v\nfour,1.5\n")
    before = snapshot_tree(root)
    p = run_ingest(spark, ["ds", "text.csv", "--format", "csv"], cwd=tmp_path)
    assert p.returncode == 2, (p.stdout, p.stderr)
    (line,) = p.stderr.splitlines()
    assert line.startswith("odf-chain: error: ") and "input text.csv: " in line, line
    assert "field id is string where the dataset has int64" in line and "block" not in line
    assert snapshot_tree(root) == before
