"""What one Spark task of the Arrow writer does, run here without Spark on real files: it writes
exactly its planned slices (rows cut where the plan says, offsets from the plan), names each
file by partition, slice and attempt, reports rows it did not expect instead of writing them,
and gathers row groups by bytes, not only rows. The hashes it reports are those of the files
(physical: BLAKE3 of the bytes on disk; logical: recomputed from the file, as verify does)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from odf_chain.events import OffsetInterval
from odf_chain.format.multihash import BLAKE3
from odf_chain.slice_writer import SliceSpec, slice_schema
from odf_chain.slices import parquet_logical_hash
from odf_chain.spark.arrow_tasks import SURPLUS, write_partition
from odf_chain.spark.sizing import PlannedSlice
from odf_chain.state import Vocabulary
from tests.helpers import multihash_name

VOCAB = Vocabulary()
WHEN = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _batches(first: int, n: int, size: int, width: int = 8) -> list[pa.RecordBatch]:
    """Spark-like input: batches of ``size`` rows, ids from ``first``, a text column."""
    return [
        pa.record_batch(
            {
                "id": pa.array(range(s, min(s + size, first + n)), pa.int64()),
                "text": pa.array(["x" * width] * (min(s + size, first + n) - s)),
            }
        )
        for s in range(first, first + n, size)
    ]


def _spec(batch: pa.RecordBatch) -> SliceSpec:
    return SliceSpec(slice_schema(batch.schema, None, VOCAB), VOCAB, 0, WHEN, BLAKE3)


def _plan(partition: int, start: int, rows: list[int]) -> list[PlannedSlice]:
    plan = []
    for index, n in enumerate(rows):
        plan.append(PlannedSlice(partition, index, OffsetInterval(start, start + n - 1)))
        start += n
    return plan


def test_a_task_writes_its_planned_slices_and_nothing_else(tmp_path: Path) -> None:
    batches = _batches(0, 2500, 300)  # slice boundaries fall inside batches
    plan = _plan(3, 1000, [1000, 1000, 500])
    found = write_partition(
        iter(batches),
        partition=3,
        attempt=2,
        plan=plan,
        spec=_spec(batches[0]),
        filesystem=pafs.LocalFileSystem(),
        folder=str(tmp_path),
    )
    assert [Path(f.path).name for f in found] == [f"part-00003-000{i}-a2.parquet" for i in range(3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(f.path).name for f in found]
    ids = 0
    for facts, planned in zip(found, plan, strict=True):
        data = Path(facts.path).read_bytes()
        assert facts.physical_hash == multihash_name(data, BLAKE3) and facts.size == len(data)
        parquet = pq.ParquetFile(facts.path)
        assert facts.logical_hash == str(parquet_logical_hash(parquet, BLAKE3))
        table = parquet.read()
        offsets = table.column("offset").to_pylist()
        assert offsets == list(range(planned.interval.start, planned.interval.end + 1))
        assert (facts.offset_min, facts.offset_max, facts.num_rows) == (
            planned.interval.start,
            planned.interval.end,
            planned.rows,
        )
        assert table.column("id").to_pylist() == list(range(ids, ids + planned.rows))
        ids += planned.rows
        assert facts.file_number == planned.index and facts.partition == 3
        assert facts.max_event_time == WHEN  # no event time column: the system time


def test_rows_beyond_the_plan_are_reported_not_written(tmp_path: Path) -> None:
    batches = _batches(0, 1300, 250)
    found = write_partition(
        iter(batches),
        partition=0,
        attempt=0,
        plan=_plan(0, 0, [1000]),
        spec=_spec(batches[0]),
        filesystem=pafs.LocalFileSystem(),
        folder=str(tmp_path),
    )
    written, surplus = found
    assert written.num_rows == 1000 and pq.read_metadata(written.path).num_rows == 1000
    assert (surplus.file_number, surplus.num_rows, surplus.path) == (SURPLUS, 300, "")
    assert len(list(tmp_path.iterdir())) == 1


def test_a_partition_short_of_its_plan_shows_in_the_facts(tmp_path: Path) -> None:
    """Fewer rows than counted: the slice is short and the next planned one is missing; the
    driver's per-slice check compares these facts with the plan."""
    batches = _batches(0, 700, 250)
    found = write_partition(
        iter(batches),
        partition=1,
        attempt=0,
        plan=_plan(1, 0, [500, 500]),
        spec=_spec(batches[0]),
        filesystem=pafs.LocalFileSystem(),
        folder=str(tmp_path),
    )
    assert [(f.file_number, f.num_rows) for f in found] == [(0, 500), (1, 200)]
    empty = write_partition(
        iter([]),
        partition=2,
        attempt=0,
        plan=_plan(2, 0, [10]),
        spec=_spec(batches[0]),
        filesystem=pafs.LocalFileSystem(),
        folder=str(tmp_path / "e"),
    )
    assert empty == [] and not (tmp_path / "e").exists()


def test_wide_rows_make_smaller_row_groups(tmp_path: Path) -> None:
    """A task gathers a row group of at most ROW_GROUP_BYTES in memory, not a fixed count of
    rows: 20 KB rows give row groups of a few thousand rows, not a million."""
    batches = _batches(0, 8000, 1000, width=20_000)
    (facts,) = write_partition(
        iter(batches),
        partition=0,
        attempt=0,
        plan=_plan(0, 0, [8000]),
        spec=_spec(batches[0]),
        filesystem=pafs.LocalFileSystem(),
        folder=str(tmp_path),
    )
    metadata = pq.read_metadata(facts.path)
    assert metadata.num_rows == 8000 and metadata.num_row_groups >= 2
    assert max(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)) < 4000


def test_a_spark_type_without_an_arrow_form_is_named() -> None:
    """Refused on the driver, before any job, naming the column and the way out."""
    import pytest
    from pyspark.sql.types import LongType, StructField, StructType, YearMonthIntervalType

    from odf_chain.errors import SchemaError
    from odf_chain.spark.arrow_tasks import arrow_schema_of

    schema = StructType(
        [StructField("id", LongType()), StructField("age", YearMonthIntervalType())]
    )
    with pytest.raises(SchemaError, match="column 'age' has Spark type interval year to month"):
        arrow_schema_of(schema)
    assert arrow_schema_of(StructType(schema.fields[:1])).names == ["id"]
