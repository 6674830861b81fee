"""Well-sized slices from Spark: ``target_slice_bytes`` (issue 10).

The Spark tests share the session-scoped fixture; every check reads the files back with pyarrow
and the blocks with the chain reader, and compares the rows with values computed here.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from odf_chain.dataset import Dataset
from odf_chain.errors import OdfChainError
from odf_chain.events import AddData, OffsetInterval
from odf_chain.format.multihash import BLAKE3
from odf_chain.spark import write
from odf_chain.spark.errors import IngestError
from odf_chain.spark.file_checks import WrittenSlice, _check_files
from odf_chain.spark.ingest import ingest_files
from odf_chain.spark.offsets import _merged_counts
from odf_chain.spark.sizing import (
    ARROW_BATCH_BYTES,
    DEFAULT_TARGET_SLICE_BYTES,
    PlannedSlice,
    RowBytes,
    SliceSizeError,
    arrow_batch_rows,
    merge_to,
    planned_slices,
    records_per_file,
    sample_rows,
    target_slice_bytes,
)
from tests.cli_run import run_main
from tests.helpers import snapshot_tree
from tests.test_spark_write import check_clean, check_transaction, partition_sizes

KIB = 1024
TARGET = 256 * KIB


def slice_sizes(path: Path) -> list[int]:
    """Sizes of the slices the chain names, in offset order, from the files themselves."""
    adds = [
        e.block.event for e in Dataset.open(path).blocks() if isinstance(e.block.event, AddData)
    ]
    return [(path / "data" / str(a.new_data.physical_hash)).stat().st_size for a in adds]


def payload_frame(spark, rows: int, partitions: int):
    """Rows whose Parquet size is known roughly: a SHA-256 hex digest (incompressible to about
    32 bytes) beside the id."""
    return spark.range(0, rows, numPartitions=partitions).select(
        F.col("id"), F.sha2(F.col("id").cast("string"), 256).alias("payload")
    )


def check_payload_rows(files: list[pa.Table], rows: int) -> None:
    """The rows read back are exactly the input's, offset i holding id i (ranges keep order)."""
    table = pa.concat_tables(files).sort_by("offset")
    assert table.column("offset").to_pylist() == list(range(rows))
    ids = table.column("id").to_pylist()
    assert sorted(ids) == list(range(rows))
    expected = {i: hashlib.sha256(str(i).encode()).hexdigest() for i in ids}
    assert table.column("payload").to_pylist() == [expected[i] for i in ids]


# -- the plan, without Spark ---------------------------------------------------------------------


def test_target_sizes_parse_and_bad_ones_are_refused():
    assert target_slice_bytes(None) is None
    assert target_slice_bytes(4096) == 4096
    assert target_slice_bytes("268435456") == DEFAULT_TARGET_SLICE_BYTES == 256 * 1024 * 1024
    assert target_slice_bytes("256MiB") == 268_435_456
    assert target_slice_bytes(" 1.5 GB ") == 1_500_000_000
    assert target_slice_bytes("64kib") == 65_536
    for bad in (0, -1, -(2**40), "0", "-5MiB", "12 parsecs", "MiB", "", 512, True, 1.5, b"1"):
        with pytest.raises(SliceSizeError, match=r"target[ _]slice") as caught:
            target_slice_bytes(bad)
        assert isinstance(caught.value, OdfChainError)


def test_the_plan_tiles_the_offsets():
    # partitions 1 and 3 are empty; no cut: one slice per non-empty partition
    assert planned_slices({0: 5, 2: 3, 4: 1}, 10, 0) == [
        PlannedSlice(0, 0, OffsetInterval(10, 14)),
        PlannedSlice(2, 0, OffsetInterval(15, 17)),
        PlannedSlice(4, 0, OffsetInterval(18, 18)),
    ]
    # cut every 2 rows: a partition's files in order, the last one shorter
    assert planned_slices({0: 5, 1: 2}, 0, 2) == [
        PlannedSlice(0, 0, OffsetInterval(0, 1)),
        PlannedSlice(0, 1, OffsetInterval(2, 3)),
        PlannedSlice(0, 2, OffsetInterval(4, 4)),
        PlannedSlice(1, 0, OffsetInterval(5, 6)),
    ]
    assert planned_slices({}, 0, 0) == []


def test_merge_and_cut_decisions():
    # 82 tiny partitions of a 100-row result: one
    tiny = {p: 1 + p % 2 for p in range(82)}
    assert merge_to(tiny, 40.0, DEFAULT_TARGET_SLICE_BYTES) == 1
    assert records_per_file({0: 100}, 40.0, DEFAULT_TARGET_SLICE_BYTES) == 0
    # 40 partitions of 100 KB, a 1 MB target: 4 merged partitions
    assert merge_to({p: 1000 for p in range(40)}, 100.0, 1_000_000) == 4
    # partitions already about the target stay as they are, and are not cut
    assert merge_to({p: 1000 for p in range(4)}, 1000.0, 1_000_000) is None
    assert records_per_file({p: 1000 for p in range(4)}, 1000.0, 1_000_000) == 0
    assert records_per_file({0: 1200}, 1000.0, 1_000_000) == 0  # within the slack
    # one partition of 10 MB and a 1 MB target: 10 equal files
    assert records_per_file({0: 10_000}, 1000.0, 1_000_000) == 1000
    # rows bigger than the target: a row per file, never zero
    assert records_per_file({0: 3}, 5e6, 1_000_000) == 1


def test_the_sample_stays_in_the_partitions_spark_scans_first():
    assert sample_rows({0: 625_000, 1: 625_000}) == 1000  # one task, the first partition
    assert sample_rows({0: 300, 1: 500}) == 300  # a tenth of the sample is enough
    assert sample_rows({0: 30, 1: 500}) == 530  # less: the next round too
    assert sample_rows({0: 3, 4: 500, 7: 9}) == 503  # two rounds: partitions 0..4
    assert sample_rows({p: 1 for p in range(1, 200, 2)}) == 12  # rounds of 1, 5, 25 partitions
    assert sample_rows({0: 0, 3: 2, 199: 98}) == 100  # all of a small result
    assert sample_rows({9: 1}) == 1


def _file(partition: int, number: int, low: int, high: int) -> WrittenSlice:
    """What the per-file task reports for a file holding offsets low..high."""
    return WrittenSlice(
        f"part-{partition:05d}-0000-c{number:03d}.zstd.parquet",
        partition,
        "f1e20" + "00" * 32,
        "f1e20" + "11" * 32,
        100,
        high - low + 1,
        low,
        high,
        number,
    )


def test_files_that_do_not_follow_the_plan_are_refused():
    """Step 3's safety net: a file per planned slice, each with exactly its offsets."""
    plan = planned_slices({0: 5, 2: 3}, 10, 2)  # 10..11, 12..13, 14 | 15..16, 17
    good = [_file(0, 0, 10, 11), _file(0, 1, 12, 13), _file(0, 2, 14, 14)]
    good += [_file(2, 0, 15, 16), _file(2, 1, 17, 17)]
    assert _check_files(good, plan) == [p.interval for p in plan]
    assert [(i.start, i.end) for i in _check_files(good, plan)] == [
        (10, 11),
        (12, 13),
        (14, 14),
        (15, 16),
        (17, 17),
    ]
    bad_cases = {
        # a file of partition 0 missing: its offsets would be a gap
        "missing": [good[0], good[2], *good[3:]],
        # one more file than planned
        "extra": [*good, _file(2, 2, 18, 18)],
        # the write cut the partition elsewhere (3 + 2 rows instead of 2 + 2 + 1)
        "cut elsewhere": [_file(0, 0, 10, 12), _file(0, 1, 13, 14), *good[3:]],
        # offsets not the planned ones (a write that saw other partitions)
        "shifted": [*good[:3], _file(2, 0, 16, 17), _file(2, 1, 18, 18)],
        # a partition the count never saw
        "other partition": [*good[:3], _file(3, 0, 15, 16), _file(3, 1, 17, 17)],
    }
    for name, files in bad_cases.items():
        with pytest.raises(IngestError, match="expected") as caught:
            _check_files(files, plan)
        assert "nothing was appended" in str(caught.value), name


# -- real Spark ----------------------------------------------------------------------------------


def test_an_aggregate_of_100_rows_after_a_join_is_one_slice(spark, tmp_path):
    """Issue 10's case: a join and an aggregation over 2,000 rows with the default 200 shuffle
    partitions used to give a slice (and an AddData) per non-empty shuffle partition."""
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "200")  # Spark's default
    try:
        facts = spark.range(0, 2000, numPartitions=4).select(
            (F.col("id") % 100).alias("key"), F.col("id").alias("amount")
        )
        names = spark.range(0, 100, numPartitions=2).select(
            F.col("id").alias("key"), F.concat(F.lit("k"), F.col("id").cast("string")).alias("n")
        )
        df = facts.join(names, "key").groupBy("key", "n").agg(F.sum("amount").alias("total"))

        # the writer caches a shuffled input and used to write a slice per non-empty
        # partition of the cache: many
        cached = df.persist()
        try:
            assert cached.groupBy(F.spark_partition_id()).count().count() > 10
        finally:
            cached.unpersist()

        clock = time.perf_counter()
        result = write(df, tmp_path / "sized", create=True)
        took = time.perf_counter() - clock
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    assert (result.rows, result.slices) == (100, 1), took
    files = check_transaction(tmp_path / "sized", result, 0, 100, BLAKE3)
    assert len(files) == 1
    adds = [
        e for e in Dataset.open(tmp_path / "sized").blocks() if isinstance(e.block.event, AddData)
    ]
    assert len(adds) == 1 and len(list((tmp_path / "sized" / "data").iterdir())) == 1
    table = files[0]
    rows = sorted(zip(*(table.column(c).to_pylist() for c in ("key", "n", "total")), strict=True))
    expected = [(k, f"k{k}", sum(i for i in range(2000) if i % 100 == k)) for k in range(100)]
    assert rows == expected
    check_clean(tmp_path / "sized")


@pytest.mark.parametrize("shuffled", [False, True], ids=["narrow", "shuffled"])
def test_a_few_megabytes_give_about_bytes_over_target_slices(spark, tmp_path, shuffled):
    """40 small partitions are merged (coalesce, then a count of the merged partitions: after
    a shuffle the input is cached and Spark's coalescer groups cached partitions by location,
    not by number) into slices of about the target."""
    rows = 60_000
    df = payload_frame(spark, rows, 40)
    if shuffled:
        df = df.repartition(40, "id")
    sizes = partition_sizes(df)
    assert len(sizes) == 40 and all(sizes)

    result = write(df, tmp_path / "ds", create=True, target_slice_bytes=TARGET)

    files = check_transaction(tmp_path / "ds", result, 0, rows, BLAKE3)
    check_payload_rows(files, rows)
    sizes = slice_sizes(tmp_path / "ds")
    assert sum(sizes) == result.bytes > 2_000_000  # "a few MB"
    ideal = result.bytes / TARGET
    assert ideal / 2 <= result.slices <= ideal * 2, (result.slices, ideal, sizes)
    assert result.slices < 40
    assert all(TARGET / 4 <= s <= TARGET * 2 for s in sizes[:-1]), sizes
    check_clean(tmp_path / "ds")


@pytest.mark.parametrize("shuffled", [False, True], ids=["narrow", "shuffled"])
def test_merged_partition_rows_are_read_from_the_plan(spark, shuffled):
    """The rows of coalesced partitions, summed from the coalescer's groups in the JVM plan
    (no job), are what a count of the coalesced frame finds; for a cached input the groups
    follow block locations, so only such a count or the plan can say which rows go where."""
    from pyspark import StorageLevel

    df = payload_frame(spark, 6000, 40)
    if shuffled:  # as the writer does: persisted, then cached by the first count
        df = df.repartition(40, "id").persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = dict(enumerate(partition_sizes(df)))
        merged = df.coalesce(7)
        summed = _merged_counts(merged, counts)
        assert summed is not None and len(summed) == 7
        assert summed == dict(enumerate(partition_sizes(merged)))
    finally:
        df.unpersist()


def test_one_huge_partition_is_cut_into_several_files(spark, tmp_path):
    rows = 40_000
    df = payload_frame(spark, rows, 1)
    path = tmp_path / "ds"
    write(
        spark.range(0, 5, numPartitions=1).select("id", F.lit("x").alias("payload")),
        path,
        create=True,
    )

    result = write(
        df.select((F.col("id") + 5).alias("id"), "payload"), path, target_slice_bytes=TARGET
    )

    assert result.slices >= 4, result.slices
    files = check_transaction(path, result, 5, rows, BLAKE3)
    offsets = [t.column("offset").to_pylist() for t in files]
    assert [o[0] for o in offsets] == sorted(o[0] for o in offsets)
    sizes = slice_sizes(path)[1:]
    ideal = result.bytes / TARGET
    assert ideal / 2 <= result.slices <= ideal * 2, (result.slices, ideal, sizes)
    assert all(TARGET / 4 <= s <= TARGET * 2 for s in sizes[:-1]), sizes
    table = pa.concat_tables(files)
    assert table.column("id").to_pylist() == list(range(5, rows + 5))  # order kept
    assert table.column("payload").to_pylist() == [
        hashlib.sha256(str(i).encode()).hexdigest() for i in range(rows)
    ]
    check_clean(path)


def test_an_empty_frame_appends_nothing_whatever_the_target(spark, tmp_path):
    path = tmp_path / "ds"
    write(spark.range(0, 3, numPartitions=1), path, create=True)
    before = snapshot_tree(path)
    empty = spark.range(0, 100, numPartitions=3).filter(F.col("id") < 0)
    for df in (empty, empty.groupBy((F.col("id") % 7).alias("k")).count()):
        for target in (TARGET, DEFAULT_TARGET_SLICE_BYTES, None):
            result = write(
                df.select(F.col(df.columns[0]).alias("id")), path, target_slice_bytes=target
            )
            assert (result.rows, result.slices, result.blocks) == (0, 0, [])
    assert snapshot_tree(path) == before


def test_a_bad_target_is_refused_before_anything_is_made(spark, tmp_path):
    df = spark.range(0, 10, numPartitions=1)
    for bad in (0, -1, "0B", "ten"):
        with pytest.raises(SliceSizeError, match="target"):
            write(df, tmp_path / "ds", create=True, target_slice_bytes=bad)
        assert not (tmp_path / "ds").exists()


def test_ingest_files_passes_the_target_on(spark, tmp_path):
    rows = 30_000
    table = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "payload": [hashlib.sha256(str(i).encode()).hexdigest() for i in range(rows)],
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    done = ingest_files(
        spark,
        tmp_path / "ds",
        [str(tmp_path / "in.parquet")],
        "parquet",
        create=True,
        target_slice_bytes="256KiB",
    )
    result = done.result
    assert result.rows == rows and result.slices > 1
    files = check_transaction(tmp_path / "ds", result, 0, rows, BLAKE3)
    check_payload_rows(files, rows)
    check_clean(tmp_path / "ds")


def test_cli_refuses_a_bad_target_in_one_line(tmp_path):
    (tmp_path / "in.csv").write_text("a\n1\n")
    for bad in ("0", "-1", "lots"):
        # by main in this process, as the process would answer (tests/cli_run.py)
        p = run_main(
            [
                "ingest",
                tmp_path / "ds",
                tmp_path / "in.csv",
                "--format",
                "csv",
                "--create",
                "--target-slice-size",
                bad,
            ]
        )
        assert p.returncode == 2, (p.returncode, p.stderr)
        assert p.stderr.startswith("odf-chain: error: target slice size"), p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not (tmp_path / "ds").exists()


def test_work_beside_a_job_is_cancelled_when_no_longer_wanted(spark) -> None:
    """What the driver runs beside the count (the sample) is cancelled when the count is done
    long before it: its Spark job stops, the thread ends, and the caller samples itself."""
    from odf_chain.spark.beside import Beside

    def slow(batches):
        for batch in batches:
            time.sleep(600)
            yield batch

    started = time.monotonic()
    stuck = Beside(
        spark,
        "sample",
        lambda: spark.range(0, 4, 1, 1).mapInArrow(slow, "id long").collect(),
    )
    assert stuck.done_or_cancel(wait=0.5) == (False, None)
    assert time.monotonic() - started < 300  # the task's 600 s sleep was cut short
    assert spark.sparkContext.statusTracker().getActiveJobsIds() == []
    # work that ends gives its result, and an error is not taken for one
    done = Beside(spark, "sample", lambda: spark.range(0, 7, 1, 1).count())
    assert done.done_or_cancel(wait=300) == (True, 7)
    failed = Beside(spark, "sample", lambda: 1 // 0)
    assert failed.done_or_cancel(wait=300) == (False, None)
    with pytest.raises(ZeroDivisionError):
        failed.result()


def test_arrow_batches_are_sized_by_rows_from_the_sample():
    """Batches of about ARROW_BATCH_BYTES of the sample's rows, never more rows than Spark's
    maxRecordsPerBatch, never none."""
    narrow = RowBytes(parquet=20.0, memory=150.0)
    assert arrow_batch_rows(narrow, 10_000) == 10_000  # 1.5 MB: Spark's row limit rules
    assert arrow_batch_rows(narrow, 500) == 500
    wide = RowBytes(parquet=2_000.0, memory=64 * KIB)  # 64 KiB rows: 256 of them fill 16 MiB
    assert arrow_batch_rows(wide, 10_000) == ARROW_BATCH_BYTES // (64 * KIB) == 256
    assert arrow_batch_rows(RowBytes(1e9, 1e9), 10_000) == 1


def test_the_arrow_write_puts_spark_s_batch_settings_back(spark, tmp_path):
    """The write's job runs with rows per batch from the sample and Spark's per-row size check
    off; afterwards the session holds what it held before (a user's own value included), and
    wide rows (a struct, long strings) come through intact."""
    records, size = (
        "spark.sql.execution.arrow.maxRecordsPerBatch",
        "spark.sql.execution.arrow.maxBytesPerBatch",
    )
    before = spark.conf.get(size)
    spark.conf.set(records, "777")
    try:
        df = spark.range(0, 3000, numPartitions=3).select(
            F.col("id"),
            F.struct(F.col("id").alias("a"), F.repeat(F.lit("x"), 5000).alias("b")).alias("s"),
        )
        result = write(df, tmp_path / "wide", create=True)
        assert spark.conf.get(records) == "777"
        assert spark.conf.get(size) == before
    finally:
        spark.conf.unset(records)
    assert result.rows == 3000
    files = check_transaction(tmp_path / "wide", result, 0, 3000, BLAKE3)
    table = pa.concat_tables(files)
    assert sorted(table.column("id").to_pylist()) == list(range(3000))
    assert {len(s["b"]) for s in table.column("s").to_pylist()} == {5000}


def test_the_batch_settings_hold_for_the_job_and_yield_to_a_chosen_bound(spark):
    """Inside the write job's settings: Spark's per-row size check off, rows per batch from the
    sample. A maxBytesPerBatch someone set (not Spark's 64 MiB) is kept, with its check, as
    are Spark's settings when the estimate comes from the types alone."""
    from odf_chain.spark.conf import _arrow_batches

    records, size = (
        "spark.sql.execution.arrow.maxRecordsPerBatch",
        "spark.sql.execution.arrow.maxBytesPerBatch",
    )
    wide = RowBytes(parquet=100.0, memory=4096.0)
    before = (spark.conf.get(records), spark.conf.get(size))
    with _arrow_batches(spark, wide):
        assert spark.conf.get(size).rstrip("b") == str(2**31 - 1)
        assert int(spark.conf.get(records)) == ARROW_BATCH_BYTES // 4096 == 4096
    assert (spark.conf.get(records), spark.conf.get(size)) == before
    with _arrow_batches(spark, RowBytes(100.0, 4096.0, sampled=False)):
        assert (spark.conf.get(records), spark.conf.get(size)) == before
    spark.conf.set(size, "32m")
    try:
        with _arrow_batches(spark, wide):
            assert spark.conf.get(size) in ("32m", "33554432b")
            assert spark.conf.get(records) == before[0]
    finally:
        spark.conf.unset(size)
    assert (spark.conf.get(records), spark.conf.get(size)) == before
