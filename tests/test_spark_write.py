"""odf_chain.spark.write / read on the shared local SparkSession.

Every check reads the files back with pyarrow and the blocks with the chain reader: nothing here
trusts what ``write`` says it did.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from odf_chain.dataset import Dataset
from odf_chain.errors import NewColumnsError, NotFoundError, RuleViolation, SchemaEvolutionError
from odf_chain.events import AddData, Seed, SetDataSchema, SetVocab
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import BLAKE3, SHA3_256
from odf_chain.spark import read, write
from odf_chain.state import SOURCE_KEY
from tests.helpers import multihash_name, snapshot_tree

# -- helpers --------------------------------------------------------------------------------------


def partition_sizes(df) -> list[int]:
    """Rows in each partition of ``df`` (one number per partition reaches the driver)."""
    return df.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()


def data_files(path: Path) -> dict[str, pa.Table]:
    """Every file under data/, read by pyarrow, by name."""
    return {p.name: pq.read_table(p) for p in sorted((path / "data").iterdir())}


def adds(dataset: Dataset) -> list:
    """The AddData blocks of the chain, oldest first."""
    return [e for e in dataset.blocks() if isinstance(e.block.event, AddData)]


def staging_entries(path: Path) -> list[str]:
    staging = path / ".staging"
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


def offsets_of(table: pa.Table) -> list[int]:
    return table.column("offset").to_pylist()


def check_clean(path: Path) -> None:
    """verify: no errors, no warnings; nothing left in .staging."""
    report = Dataset.open(path).verify()
    assert report.ok, [p.line() for p in report.problems]
    assert report.warnings == [], [p.line() for p in report.warnings]
    assert staging_entries(path) == []


def check_transaction(path: Path, result, first_offset: int, rows: int, algorithm: str):
    """The blocks ``result`` reports are the chain's tail and describe exactly the files of the
    write: one AddData per file, in offset order, contiguous from ``first_offset``, each
    interval equal to its file's offsets, hashes and sizes as computed independently, one
    system time for blocks and rows. Returns the write's files, oldest offsets first."""
    dataset = Dataset.open(path)
    chain = dataset.blocks()
    appended = chain[-len(result.blocks) :]
    assert [e.hash for e in appended] == [b.hash for b in result.blocks]
    assert dataset.state.head == result.head == appended[-1].hash
    system_times = {e.block.system_time for e in appended}
    assert len(system_times) == 1
    (system_time,) = system_times
    assert system_time.microsecond % 1000 == 0  # whole milliseconds, as the column stores it

    add_entries = [e for e in appended if isinstance(e.block.event, AddData)]
    assert len(add_entries) == result.slices
    files = []
    expected_start = first_offset
    for entry in add_entries:
        event = entry.block.event
        assert event.prev_offset == (expected_start - 1 if expected_start else None)
        interval = event.new_data.offset_interval
        assert interval.start == expected_start
        name = str(event.new_data.physical_hash)
        raw = (path / "data" / name).read_bytes()
        assert name == multihash_name(raw, algorithm)
        assert event.new_data.size == len(raw)
        table = pq.read_table(path / "data" / name)
        offsets = offsets_of(table)
        # the file's offsets are contiguous, in order, and exactly the interval
        assert offsets == list(range(interval.start, interval.end + 1))
        assert (min(offsets), max(offsets)) == (interval.start, interval.end)
        assert table.column("op").to_pylist() == [0] * table.num_rows
        assert table.schema.field("system_time").type == pa.timestamp("ms", tz="UTC")
        assert set(table.column("system_time").to_pylist()) == {system_time}
        files.append(table)
        expected_start = interval.end + 1
    assert expected_start == first_offset + rows
    assert sum(t.num_rows for t in files) == rows == result.rows
    return files


# -- one write -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "writer"), [(BLAKE3, "spark"), (SHA3_256, "spark"), (BLAKE3, "arrow")]
)
def test_write_several_partitions(spark, tmp_path, algorithm, writer):
    path = tmp_path / "ds"
    n = 1000
    df = (
        spark.range(0, n, numPartitions=5)
        .withColumn("double", F.col("id") * 2)
        .withColumn("label", F.concat(F.lit("row-"), F.col("id").cast("string")))
        .withColumn("when", F.timestamp_seconds(F.col("id") + 1_700_000_000))
    )
    sizes = partition_sizes(df)
    assert sizes == [200] * 5
    source = {"inputs": [{"path": "/in/rows.csv", "hash": "f1e20" + "00" * 32}]}

    assert not path.exists()
    result = write(
        df,
        path,
        event_time="when",
        source=source,
        create=True,
        hash=algorithm,
        target_slice_bytes=None,  # a slice per partition, as partitioned
        writer=writer,
    )

    dataset = Dataset.open(path)
    assert dataset.hash_algorithm == algorithm
    kinds = [type(e.block.event).__name__ for e in dataset.blocks()]
    assert kinds == ["Seed", "SetVocab", "SetDataSchema"] + ["AddData"] * 5
    assert dataset.state.vocab.event_time_column == "when"
    prefix = {BLAKE3: "f1e20", SHA3_256: "f1620"}[algorithm]
    assert all(str(e.hash).startswith(prefix) for e in dataset.blocks())
    # no funnel: one slice per non-empty input partition
    assert result.slices == len([s for s in sizes if s]) == 5
    files = check_transaction(path, result, 0, n, algorithm)
    # one AddData per file in data/, nothing else there
    named = {str(e.block.event.new_data.physical_hash) for e in adds(dataset)}
    assert set(data_files(path)) == named and len(named) == 5

    everything = pa.concat_tables(files)
    # spark.range puts ids in partition order, so each row's offset is its id
    assert everything.column("offset").to_pylist() == list(range(n))
    assert everything.column("id").to_pylist() == list(range(n))
    assert everything.column("double").to_pylist() == [2 * i for i in range(n)]
    assert everything.column("label").to_pylist() == [f"row-{i}" for i in range(n)]
    assert "event_time" not in everything.column_names  # the event time keeps its name
    assert everything.schema.field("when").type == pa.timestamp("ms", tz="UTC")
    assert [t.timestamp() for t in everything.column("when").to_pylist()] == [
        1_700_000_000 + i for i in range(n)
    ]
    watermark = datetime.fromtimestamp(1_700_000_000 + n - 1, UTC)
    for entry in adds(dataset):
        assert entry.block.event.extra == {SOURCE_KEY: source}
        assert entry.block.event.new_watermark == watermark

    # the declared schema is the files' schema
    assert [(f.name, f.type) for f in dataset.state.schema] == [
        (f.name, f.type) for f in files[0].schema
    ]
    check_clean(path)


# -- the event time column ------------------------------------------------------------------------


def _orders(spark, first_day: int, rows: int = 4):
    return spark.createDataFrame(
        [(i, datetime(2024, 3, first_day + i, 12, tzinfo=UTC), f"note-{i}") for i in range(rows)],
        "id long, last_order_ts timestamp, event_time string",
    )


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_event_time_column_keeps_its_name_and_a_set_vocab_names_it(spark, tmp_path, writer):
    """``event_time="last_order_ts"``: the column is stored under its own name, and a SetVocab
    before the SetDataSchema (same transaction) names it as the event time column, as ODF
    readers look for it; a user column that happens to be called ``event_time`` is kept as
    it is. Later writes follow the vocabulary, with or without the option."""
    path = tmp_path / "ds"
    result = write(_orders(spark, 1), path, create=True, event_time="last_order_ts", writer=writer)

    dataset = Dataset.open(path)
    kinds = [type(e.block.event).__name__ for e in dataset.blocks()]
    assert kinds[:3] == ["Seed", "SetVocab", "SetDataSchema"], kinds
    assert [e.block.system_time for e in dataset.blocks()][1] == result.blocks[-1].block.system_time
    assert dataset.blocks()[1].block.event == SetVocab(event_time_column="last_order_ts")
    assert dataset.state.vocab.event_time_column == "last_order_ts"
    schema = dataset.state.schema
    assert schema.names == ["offset", "op", "system_time", "last_order_ts", "id", "event_time"]
    assert schema.field("last_order_ts").type == pa.timestamp("ms", tz="UTC")
    assert schema.field("event_time").type == pa.string()
    rows = dataset.to_table().sort_by("id")
    assert rows.column("last_order_ts").to_pylist() == [
        datetime(2024, 3, 1 + i, 12, tzinfo=UTC) for i in range(4)
    ]
    assert rows.column("event_time").to_pylist() == [f"note-{i}" for i in range(4)]
    assert dataset.state.watermark == datetime(2024, 3, 4, 12, tzinfo=UTC)

    # the vocabulary names the column: no second SetVocab, with the option or without it
    write(_orders(spark, 10), path, event_time="last_order_ts", writer=writer)
    write(_orders(spark, 20), path, writer=writer)
    dataset = Dataset.open(path)
    kinds = [type(e.block.event).__name__ for e in dataset.blocks()]
    assert kinds.count("SetVocab") == 1 and kinds.count("SetDataSchema") == 1, kinds
    assert dataset.state.watermark == datetime(2024, 3, 23, 12, tzinfo=UTC)
    assert dataset.state.num_records == 12
    report = dataset.verify(deep=True)
    assert report.ok, [p.line() for p in report.problems]


def test_event_time_naming_another_column_than_the_schema_has_is_refused(spark, tmp_path):
    """Once a schema is set, naming another event time column would change the event time of
    every row written before (rule vocab-before-schema): one line, before anything is written,
    for a dataset on ODF's default name and for one whose vocabulary names a column."""
    default = tmp_path / "default"
    write(_orders(spark, 1).drop("event_time"), default, create=True)
    named = tmp_path / "named"
    write(_orders(spark, 1), named, create=True, event_time="last_order_ts")
    for path, column, in_force in (
        (default, "last_order_ts", "event_time"),
        (named, "event_time", "last_order_ts"),
    ):
        before = snapshot_tree(path)
        with pytest.raises(RuleViolation) as caught:
            write(_orders(spark, 5), path, event_time=column, evolve=True)
        message = str(caught.value)
        assert caught.value.rule == "vocab-before-schema"
        assert "\n" not in message
        assert f"event_time={column!r}" in message and repr(in_force) in message, message
        assert snapshot_tree(path) == before


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_write_with_empty_partitions(spark, tmp_path, writer):
    path = tmp_path / "ds"
    df = (
        spark.range(0, 1000, numPartitions=5)
        .filter((F.col("id") < 150) | ((F.col("id") >= 600) & (F.col("id") < 700)))
        .withColumn("value", F.col("id").cast("double") / 4)
    )
    sizes = partition_sizes(df)
    assert sizes == [150, 0, 0, 100, 0]

    result = write(df, path, create=True, target_slice_bytes=None, writer=writer)

    assert result.slices == 2 == len([s for s in sizes if s])
    files = check_transaction(path, result, 0, 250, BLAKE3)
    assert [t.num_rows for t in files] == [150, 100]
    everything = pa.concat_tables(files)
    assert everything.column("offset").to_pylist() == list(range(250))
    assert everything.column("id").to_pylist() == list(range(150)) + list(range(600, 700))
    # no event time column: event_time is the transaction's system time
    system_time = Dataset.open(path).blocks()[-1].block.system_time
    assert set(everything.column("event_time").to_pylist()) == {system_time}
    assert len(data_files(path)) == 2
    check_clean(path)


def test_write_after_a_shuffle_keeps_its_partitions(spark, tmp_path):
    path = tmp_path / "ds"
    df = spark.range(0, 2000, numPartitions=3).repartition(7).withColumn("k", F.col("id") % 13)
    sizes = partition_sizes(df)
    assert len(sizes) == 7 and all(sizes)

    result = write(df, path, create=True, target_slice_bytes=None)

    assert result.slices == 7
    files = check_transaction(path, result, 0, 2000, BLAKE3)
    assert sorted(t.num_rows for t in files) == sorted(sizes)
    ids = pa.concat_tables(files).column("id").to_pylist()
    assert sorted(ids) == list(range(2000))
    check_clean(path)


def test_write_needs_create_for_a_missing_dataset(spark, tmp_path):
    path = tmp_path / "missing"
    with pytest.raises(NotFoundError):
        write(spark.range(0, 10, numPartitions=1), path)
    assert not (path / "refs" / "head").exists()
    # create=True on an existing dataset appends, it does not start over
    write(spark.range(0, 10, numPartitions=1), path, create=True)
    result = write(spark.range(10, 30, numPartitions=2), path, create=True)
    check_transaction(path, result, 10, 20, BLAKE3)
    assert [type(e.block.event).__name__ for e in Dataset.open(path).blocks()].count("Seed") == 1
    check_clean(path)


def test_an_empty_dataframe_appends_nothing(spark, tmp_path):
    path = tmp_path / "ds"
    write(spark.range(0, 10, numPartitions=2), path, create=True)
    before = snapshot_tree(path)
    result = write(spark.range(0, 10, numPartitions=3).filter(F.col("id") < 0), path)
    assert (result.rows, result.slices, result.blocks) == (0, 0, [])
    assert snapshot_tree(path) == before


# -- several writes --------------------------------------------------------------------------------


def _without_staging(snapshot: dict) -> dict:
    return {k: v for k, v in snapshot.items() if not k.startswith(".staging")}


def test_writes_continue_evolve_refuse_and_read_back(spark, tmp_path):
    path = tmp_path / "ds"
    first = spark.range(0, 300, numPartitions=3).withColumn("v", F.col("id") * 10)
    r1 = write(first, path, create=True, target_slice_bytes=None)  # a slice per partition
    check_transaction(path, r1, 0, 300, BLAKE3)

    # a second write with a new nullable column: SetDataSchema, then its AddData, offsets go on
    second = (
        spark.range(300, 500, numPartitions=2)
        .withColumn("v", F.col("id") * 10)
        .withColumn("note", F.when(F.col("id") % 2 == 0, F.col("id").cast("string")))
    )
    r2 = write(second, path, evolve=True, target_slice_bytes=None)
    assert [type(b.block.event) for b in r2.blocks] == [SetDataSchema, AddData, AddData]
    files2 = check_transaction(path, r2, 300, 200, BLAKE3)
    dataset = Dataset.open(path)
    history = dataset.schema_history()
    assert len(history) == 2
    assert dataset.state.schema.field("note").nullable
    assert "note" not in history[0].schema.names
    assert history[1].schema.names[-1] == "note"
    notes = pa.concat_tables(files2).column("note").to_pylist()
    assert notes == [str(i) if i % 2 == 0 else None for i in range(300, 500)]
    check_clean(path)

    # an incompatible write is refused before anything is appended or leaves staging
    before = _without_staging(snapshot_tree(path))
    retyped = spark.range(500, 600, numPartitions=2).withColumn("v", F.col("id").cast("string"))
    with pytest.raises(SchemaEvolutionError):
        write(retyped, path)
    assert _without_staging(snapshot_tree(path)) == before
    check_clean(path)

    # reading back at a block: exactly the slices up to it
    chain = Dataset.open(path).blocks()
    kinds = [type(e.block.event).__name__ for e in chain]
    assert kinds == ["Seed", "SetDataSchema", *["AddData"] * 3, "SetDataSchema", *["AddData"] * 2]
    ends = {
        e.block.sequence_number: e.block.event.new_data.offset_interval.end
        for e in chain
        if isinstance(e.block.event, AddData)
    }
    for seq, end in ends.items():
        frame = read(spark, path, at=seq)
        offsets = sorted(r["offset"] for r in frame.select("offset").collect())
        assert offsets == list(range(end + 1)), seq
        assert ("note" in frame.columns) == (seq > 5), seq
    # a block hash selects the same as its sequence number
    assert read(spark, path, at=str(chain[3].hash)).count() == ends[3] + 1

    first_data = read(spark, path, at=2)
    assert first_data.columns == ["offset", "op", "system_time", "event_time", "id", "v"]
    at_head = read(spark, path)
    assert at_head.count() == 500
    rows = {r["offset"]: (r["id"], r["v"], r["note"]) for r in at_head.collect()}
    assert rows == {i: (i, 10 * i, str(i) if i >= 300 and i % 2 == 0 else None) for i in range(500)}
    assert read(spark, path, at="head").count() == 500

    # a file in data/ that no block names is not read
    stray = pq.read_table(next(iter((path / "data").iterdir())))
    stray = stray.set_column(0, "offset", pc.add(stray.column("offset"), 10_000))
    pq.write_table(stray, path / "data" / ("f1e20" + "ab" * 32))
    assert read(spark, path).count() == 500
    assert read(spark, path).filter(F.col("offset") >= 10_000).count() == 0
    report = Dataset.open(path).verify()
    assert report.ok
    assert [p.rule for p in report.warnings] == ["orphan-data"]

    # the next write after all this still continues the offsets
    third = (
        spark.range(500, 520, numPartitions=2)
        .withColumn("v", F.col("id") * 10)
        .withColumn("note", F.lit(None).cast("string"))
    )
    r3 = write(third, path, target_slice_bytes=None)
    check_transaction(path, r3, 500, 20, BLAKE3)
    assert [type(b.block.event) for b in r3.blocks] == [AddData, AddData]


def test_read_without_data(spark, tmp_path):
    path = tmp_path / "ds"
    Dataset.create(path)
    with pytest.raises(NotFoundError):
        read(spark, path)


def test_columns_are_laid_out_like_the_schema_in_force(spark, tmp_path):
    path = tmp_path / "ds"
    first = (
        spark.range(0, 100, numPartitions=2)
        .withColumn("v", F.col("id") * 10)
        .withColumn("note", F.col("id").cast("string"))
    )
    write(first, path, create=True)
    schema_before = Dataset.open(path).state.schema
    # same columns, another order: no schema change
    reordered = spark.range(100, 150, numPartitions=2).select(
        F.col("id").cast("string").alias("note"), (F.col("id") * 10).alias("v"), F.col("id")
    )
    r2 = write(reordered, path, target_slice_bytes=None)
    assert [type(b.block.event) for b in r2.blocks] == [AddData, AddData]
    # a nullable column left out: written as nulls, still no schema change
    without_note = spark.range(150, 170, numPartitions=1).withColumn("v", F.col("id") * 10)
    r3 = write(without_note, path)
    assert [type(b.block.event) for b in r3.blocks] == [AddData]
    dataset = Dataset.open(path)
    assert dataset.state.schema.equals(schema_before, check_metadata=True)
    (last,) = [
        pq.read_table(
            dataset.storage.data_path(str(r3.blocks[0].block.event.new_data.physical_hash))
        )
    ]
    assert last.column("note").null_count == 20
    assert last.column("v").to_pylist() == [i * 10 for i in range(150, 170)]
    assert dataset.verify().ok


def test_write_and_read_through_pyarrow_fs(spark, tmp_path):
    """The same job on the pyarrow.fs backend (as for s3://, gs://, hdfs://): Spark writes to
    the backend's URI, executors hash the files through the pickled pyarrow filesystem, and the
    driver never opens a local path. Here the filesystem is the local one, named by URI."""
    import pyarrow.fs as pafs

    from odf_chain.storage import FsStorage

    path = tmp_path / "remote"
    dataset = Dataset(
        FsStorage.create(pafs.LocalFileSystem(), str(path), f"file://{path}", single_writer=True)
    )
    dataset._append(Seed(dataset_id=DatasetId.generate()), algorithm=BLAKE3)
    df = spark.range(0, 300, numPartitions=3).withColumn("sq", F.col("id") * F.col("id"))
    result = write(df, dataset, target_slice_bytes=None)
    assert (result.rows, result.slices) == (300, 3)
    reopened = Dataset(FsStorage.open(pafs.LocalFileSystem(), str(path), f"file://{path}"))
    assert [type(e.block.event).__name__ for e in reopened.blocks()] == (
        ["Seed", "SetDataSchema"] + ["AddData"] * 3
    )
    back = read(spark, reopened).orderBy("offset").toPandas()
    assert back["offset"].tolist() == list(range(300))
    assert back["sq"].tolist() == [i * i for i in range(300)]
    report = reopened.verify()
    assert report.ok and report.warnings == [], [p.line() for p in report.problems]
    assert staging_entries(path) == []
    # the files on disk are the ones the chain names, hashed independently here
    for entry in adds(reopened):
        data = entry.block.event.new_data
        stored = (path / "data" / str(data.physical_hash)).read_bytes()
        assert multihash_name(stored, BLAKE3) == str(data.physical_hash)


# -- inputs that once broke the writer (found by review) -----------------------------------------


def _rows_once(path: Path, n: int) -> pa.Table:
    """Every row exactly once, offsets 0..n-1 contiguous; returns the data by offset, with
    the declared schema (files from different writers may differ in nullability)."""
    declared = Dataset.open(path).state.schema
    tables = [t.cast(declared) for t in data_files(path).values()]
    table = pa.concat_tables(tables).sort_by("offset")
    assert table.column("offset").to_pylist() == list(range(n))
    return table


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_frames_ending_in_a_sort_or_a_window_write_whole(spark, tmp_path, writer):
    """A sort samples its ranges in each job and a window the count does not need is dropped
    with its shuffle: the writer caches a shuffling input so count and write agree."""
    from pyspark.sql import Window

    sort = spark.range(0, 3000, numPartitions=4).orderBy(F.desc("id"))
    result = write(sort, tmp_path / "sorted", create=True, writer=writer)
    assert result.rows == 3000
    assert sorted(_rows_once(tmp_path / "sorted", 3000).column("id").to_pylist()) == list(
        range(3000)
    )
    window = spark.range(0, 500, numPartitions=3).withColumn(
        "s", F.sum("id").over(Window.partitionBy(F.col("id") % 5))
    )
    write(window, tmp_path / "window", create=True, writer=writer)
    table = _rows_once(tmp_path / "window", 500)
    sums = {k: sum(i for i in range(500) if i % 5 == k) for k in range(5)}
    assert all(
        s == sums[i % 5]
        for i, s in zip(table.column("id").to_pylist(), table.column("s").to_pylist(), strict=True)
    )
    check_clean(tmp_path / "window")


def test_in_memory_rows_odd_names_and_session_settings(spark, tmp_path):
    spark.conf.set("spark.sql.files.maxRecordsPerFile", "7")  # a user's own setting
    try:
        df = spark.createDataFrame([(i, f"v{i}") for i in range(40)], "id long, `a.b``c` string")
        result = write(df, tmp_path / "mem", create=True)
        assert spark.conf.get("spark.sql.files.maxRecordsPerFile") == "7"  # put back
    finally:
        spark.conf.unset("spark.sql.files.maxRecordsPerFile")
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") != "TIMESTAMP_MILLIS"
    table = _rows_once(tmp_path / "mem", 40)
    assert table.column("a.b`c").to_pylist()[:2] == ["v0", "v1"]
    (source,) = result.lineage.inputs  # rows made in the driver, named as such
    assert source.uri == "spark:local-rows" and source.dataset_id is None
    # the run lasts from before the count to after the slices are written
    run = result.lineage.run
    took = result.timings["offsets"] + result.timings["sizing"] + result.timings["task_write"]
    assert (run.ended_at - run.started_at).total_seconds() >= took - 0.002
    check_clean(tmp_path / "mem")


def test_timestamps_finer_than_a_millisecond_are_refused(spark, tmp_path):
    from odf_chain.errors import SchemaError

    fine = spark.sql("select timestamp'2024-01-02 03:04:05.123456' as at, 1 as n")
    with pytest.raises(SchemaError, match="'at' holds timestamps finer than a millisecond"):
        write(fine, tmp_path / "ts", create=True)
    assert not (tmp_path / "ts").exists()  # the refused write created no dataset
    whole = spark.sql("select timestamp'2024-01-02 03:04:05.123' as at, 1 as n")
    write(whole, tmp_path / "ts", create=True)
    (value,) = _rows_once(tmp_path / "ts", 1).column("at").to_pylist()
    assert value == datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
    write(fine, tmp_path / "ts", truncate_timestamps=True)  # asked for: truncated
    values = _rows_once(tmp_path / "ts", 2).column("at").to_pylist()
    assert values == [datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)] * 2


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_an_event_time_is_stored_as_given_or_refused(spark, tmp_path, writer):
    """The event time is a timestamp, kept to the millisecond (finer refused, as any column's,
    unless truncate_timestamps); text is cast, and text the cast cannot read refused, not
    stored as null (what the cast gives without ANSI mode); a date is its day's midnight in
    UTC, not the session zone's."""
    from odf_chain.errors import OdfChainError, SchemaError

    fine = spark.sql("select timestamp'2024-01-02 03:04:05.123456' as ts, 1 as n")
    with pytest.raises(SchemaError, match="'ts' holds timestamps finer than a millisecond"):
        write(fine, tmp_path / "fine", create=True, event_time="ts", writer=writer)
    write(
        fine,
        tmp_path / "fine",
        create=True,
        event_time="ts",
        writer=writer,
        truncate_timestamps=True,
    )
    (value,) = _rows_once(tmp_path / "fine", 1).column("ts").to_pylist()
    assert value == datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)

    rows = [("2024-03-01 10:00:00", 1), ("2024-02-30 10:00:00", 2), (None, 3)]
    text = spark.createDataFrame(rows, "ts string, n int")
    previous = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        with pytest.raises(OdfChainError, match="2024-02-30 10:00:00 is not a time Spark reads"):
            write(text, tmp_path / "text", create=True, event_time="ts", writer=writer)
        assert not (tmp_path / "text").exists()
        write(text.where("n != 2"), tmp_path / "text", create=True, event_time="ts", writer=writer)
    finally:
        spark.conf.set("spark.sql.ansi.enabled", previous)
    stored = _rows_once(tmp_path / "text", 2).column("ts").to_pylist()
    assert datetime(2024, 3, 1, 10, tzinfo=UTC) in stored  # the session zone is UTC here

    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        day = spark.sql("select date'2024-03-01' as day, 1 as n")
        write(day, tmp_path / "day", create=True, event_time="day", writer=writer)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    stored = _rows_once(tmp_path / "day", 1).column("day").to_pylist()
    assert stored == [datetime(2024, 3, 1, tzinfo=UTC)]


def test_timestamps_inside_structs_lists_and_maps_are_checked_too(spark, tmp_path):
    """Spark's own writer stores timestamps in milliseconds inside a struct, a list or a map
    as well: finer ones there are refused with writer='spark' as with the default writer
    (which checks them in its tasks), unless truncate_timestamps; whole milliseconds pass."""
    from odf_chain.errors import SchemaError

    at = "timestamp'2024-01-02 03:04:05.123456'"
    finer = [
        ("s", f"named_struct('at', {at}, 'n', 1)"),
        ("l", f"array(timestamp'2024-01-02 03:04:05.123', {at})"),
        ("m", f"map('k', named_struct('at', {at}))"),
        ("k", f"map({at}, 1)"),
    ]
    for name, value in finer:
        frame = spark.sql(f"select {value} as {name}, 1 as n")
        for writer in ("spark", "arrow"):
            with pytest.raises(SchemaError, match=f"'{name}'|finer than a millisecond"):
                write(frame, tmp_path / name, create=True, writer=writer)
            assert not (tmp_path / name).exists(), (name, writer)
    whole = spark.sql("select named_struct('at', timestamp'2024-01-02 03:04:05.123') as s, 1 n")
    write(whole, tmp_path / "whole", create=True, writer="spark")
    nested = spark.sql(f"select named_struct('at', {at}) as s, 1 as n")
    write(nested, tmp_path / "cut", create=True, writer="spark", truncate_timestamps=True)
    for path in ("whole", "cut"):
        (value,) = _rows_once(tmp_path / path, 1).column("s").to_pylist()
        assert value == {"at": datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)}, path


def test_what_spark_cannot_take_is_named_not_raised_from_spark(spark, tmp_path):
    """Dataset.write keeps columns whose names differ only in case, and unsigned integers:
    spark.read names them (a SchemaError saying what to read it with), not Spark's own
    AnalysisException or PySparkTypeError. A column named like a system column in another
    case is refused on a Spark write, as Spark would take it for that column."""
    from odf_chain.errors import SchemaError

    cased = Dataset.create(tmp_path / "cased")
    cased.write(pa.table({"A": [1], "a": [2]}))
    with pytest.raises(SchemaError, match="'A' and 'a' differ only in case"):
        read(spark, tmp_path / "cased")
    unsigned = Dataset.create(tmp_path / "unsigned")
    unsigned.write(pa.table({"u": pa.array([1], pa.uint64())}))
    with pytest.raises(SchemaError, match="Spark cannot take this dataset's schema"):
        read(spark, tmp_path / "unsigned")
    upper = spark.sql("select 1 as OFFSET, 2 as n")
    with pytest.raises(SchemaError, match="OFFSET are reserved"):
        write(upper, tmp_path / "upper", create=True)
    assert not (tmp_path / "upper").exists()


@pytest.mark.filterwarnings("ignore::odf_chain.events.StructuredSchemaWarning")  # local times
def test_read_timestamps_in_nanoseconds(spark, tmp_path):
    """pandas keeps timestamps in nanoseconds, and Spark's Parquet reader refuses them ("Illegal
    Parquet type"): spark.read reads such a dataset through Arrow, each value exact in Spark's
    microseconds, nested ones too. A value with nanoseconds Spark cannot hold is refused, naming
    the column and the slice, never rounded."""
    import pandas as pd
    from pyspark.errors import PythonException

    moments = pd.to_datetime(["2024-01-02 03:04:05.123456", "1969-12-31 23:59:59.999999"])
    frame = pd.DataFrame({"local": moments, "at": moments.tz_localize("UTC"), "n": [1, 2]})
    dataset = Dataset.create(tmp_path / "ns")
    dataset.write(frame)
    dataset.write(
        pa.table(
            {
                "local": pa.array([moments[0]], pa.timestamp("ns")),
                "at": pa.array([moments[1]], pa.timestamp("ns", tz="UTC")),
                "n": [3],
            }
        )
    )
    assert dataset.state.schema.field("at").type == pa.timestamp("ns", tz="UTC")
    back = read(spark, tmp_path / "ns").orderBy("offset")
    rows = back.select(
        F.col("local").cast("string").alias("local"), F.unix_micros("at").alias("micros"), "n"
    ).collect()
    expected = [str(moments[0]), str(moments[1]), str(moments[0])]
    assert [r["local"] for r in rows] == expected
    micros = [m.value // 1000 for m in (moments[0], moments[1], moments[1])]
    assert [r["micros"] for r in rows] == micros and [r["n"] for r in rows] == [1, 2, 3]

    nested = Dataset.create(tmp_path / "nested")
    nested.write(
        pa.table({"s": pa.array([{"at": moments[0]}], pa.struct([("at", pa.timestamp("ns"))]))})
    )
    (row,) = read(spark, tmp_path / "nested").select(F.col("s.at").cast("string")).collect()
    assert row[0] == str(moments[0])

    finer = Dataset.create(tmp_path / "finer")
    finer.write(pa.table({"at": pa.array([moments[0].value + 7], pa.timestamp("ns", tz="UTC"))}))
    with pytest.raises(PythonException, match=r"column 'at' cannot be given to Spark"):
        read(spark, tmp_path / "finer").collect()


def test_read_a_dataset_whose_path_has_glob_characters(spark, tmp_path):
    path = tmp_path / "br[1]{a,b}?"
    write(spark.range(0, 10, numPartitions=2), path, create=True)
    (tmp_path / "br1a").mkdir()  # what the path would match as a pattern
    back = read(spark, path).orderBy("offset").toPandas()
    assert back["id"].tolist() == list(range(10))


def test_spark_failures_say_what_went_wrong():
    """Spark's wrappers say where a job failed; the message the user gets says what failed."""
    from odf_chain.spark.errors import _first_line

    worker = (
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        'Traceback (most recent call last):\n  File "job.py", line 3, in parse\n'
        "ValueError: bad row 5\n"
    )
    assert _first_line(RuntimeError(worker)) == "ValueError: bad row 5"
    assert _first_line(RuntimeError("[PATH_NOT_FOUND] Path does not exist.")) == (
        "[PATH_NOT_FOUND] Path does not exist."
    )


def test_duplicate_column_names_are_refused_by_name(spark, tmp_path):
    from odf_chain.errors import SchemaError

    left = spark.createDataFrame([(1, "a")], "id long, name string")
    right = spark.createDataFrame([(1, "b")], "id long, Name string")
    with pytest.raises(SchemaError, match="two columns named 'id' and 'id'"):
        write(left.join(right, left.id == right.id), tmp_path / "dup", create=True)
    with pytest.raises(SchemaError, match="'name' and 'Name'"):
        write(left.join(right, "id"), tmp_path / "dup", create=True)
    assert not (tmp_path / "dup").exists()  # refused before anything was written


def _jobs_of(spark, group: str, action) -> list[int]:
    """The Spark jobs ``action()`` ran (by job group), whether or not it raised."""
    context = spark.sparkContext
    context.setJobGroup(group, "odf_chain test")
    try:
        action()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
        context.setLocalProperty("spark.job.description", None)
    return context.statusTracker().getJobIdsForGroup(group)


def test_a_new_column_is_refused_before_any_spark_job(spark, tmp_path):
    path = tmp_path / "sensors"
    location = "location struct<lat: double, lon: double>"
    first = spark.createDataFrame(
        [("a", 12.5, (1.0, 2.0))], f"station string, temperature_c double, {location}"
    )
    write(first, path, create=True)
    typo = spark.createDataFrame(
        [("b", 13.0, (1.0, 2.0))], f"station string, temperature double, {location}"
    )
    nested = spark.createDataFrame(
        [("c", 14.0, (1.0, 2.0, 3.0))],
        "station string, temperature_c double, location struct<lat: double, lon: double, "
        "alt: double>",
    )
    cases = [
        (typo, "new column(s) temperature (did you mean temperature_c?);"),
        (nested, "new column(s) location.alt;"),
    ]
    for n, (df, fragment) in enumerate(cases):
        before = snapshot_tree(path)
        head = Dataset.open(path).state.head
        refused: list[NewColumnsError] = []

        def attempt(df=df, refused=refused) -> None:
            with pytest.raises(NewColumnsError) as info:
                write(df, path)
            refused.append(info.value)

        assert _jobs_of(spark, f"strict-refused-{n}", attempt) == []
        (error,) = refused
        assert fragment in str(error) and str(error).startswith(f"{path}: ")
        assert "pass evolve=True (--evolve) to add them" in str(error)
        assert snapshot_tree(path) == before  # nothing in data/ or .staging/, no block
        assert staging_entries(path) == []
        assert Dataset.open(path).state.head == head

    # asked for: both are added (and the same measure sees the jobs a write runs)
    results = []
    jobs = _jobs_of(
        spark,
        "strict-evolve",
        lambda: results.extend(write(df, path, evolve=True) for df, _ in cases),
    )
    assert jobs != []
    schema = Dataset.open(path).state.schema
    assert schema.names[-4:] == ["station", "temperature_c", "location", "temperature"]
    assert [f.name for f in schema.field("location").type] == ["lat", "lon", "alt"]
    assert [type(b.block.event) for r in results for b in r.blocks][:1] == [SetDataSchema]
    rows = {r["station"]: r for r in read(spark, path).collect()}
    assert rows["b"]["temperature"] == 13.0 and rows["b"]["temperature_c"] is None
    assert rows["c"]["location"]["alt"] == 3.0 and rows["a"]["location"]["alt"] is None
    check_clean(path)


def test_read_refuses_a_slice_that_is_a_symlink_or_fifo(spark, tmp_path):
    """Spark would follow a symlinked slice out of the dataset and wait on a FIFO forever:
    read checks each slice as verify does before Spark sees it (found by review)."""
    import os

    from odf_chain.errors import OdfChainError

    root = tmp_path / "ds"
    ds = Dataset.create(root)
    ds.write(pa.table({"x": [1, 2]}))
    (name,) = [p.name for p in (root / "data").iterdir()]
    slice_path = root / "data" / name
    outside = tmp_path / "outside.parquet"
    slice_path.rename(outside)
    slice_path.symlink_to(outside)
    with pytest.raises(OdfChainError, match=name):
        read(spark, root)
    slice_path.unlink()
    os.mkfifo(slice_path)
    with pytest.raises(OdfChainError, match="FIFO"):
        read(spark, root)


def _typed_frame(spark, first: int, n: int):
    """Rows of most Spark types, nested ones too, with millisecond timestamps."""
    import decimal
    from datetime import date

    rows = [
        (
            i,
            f"s{i}",
            i * 1.5,
            datetime(2024, 1, 1, 0, 0, i % 60, 123000),
            date(2024, 1, 1 + i % 28),
            decimal.Decimal(f"{i}.25"),
            [i, None, i + 1],
            {"a": i},
            (i, f"n{i}"),
            bytes([i % 256]),
            i % 2 == 0,
            datetime(2024, 2, 1, 1, 2, 3, 456789),  # timestamp_ntz keeps its microseconds
        )
        for i in range(first, first + n)
    ]
    schema = (
        "id long, name string, x double, ts timestamp, d date, dec decimal(10,2), "
        "arr array<int>, m map<string,int>, st struct<a:int,b:string>, bin binary, flag boolean, "
        "ntz timestamp_ntz"
    )
    return (
        spark.createDataFrame(rows, schema)
        .withColumn("i8", (F.col("id") % 100).cast("byte"))
        .withColumn("i16", F.col("id").cast("short"))
        .withColumn("nested", F.array(F.struct(F.col("ts").alias("t"), F.col("id").alias("k"))))
    )


def test_both_writers_declare_the_same_schema_and_store_the_same_rows(spark, tmp_path):
    """The two slice writers (Spark's Parquet writer, or Arrow in each task) declare the same
    schema for the same frame, store the same rows, and a dataset can change writers without
    a schema change."""
    tables, schemas = {}, {}
    for first, second in (("spark", "arrow"), ("arrow", "spark")):
        path = tmp_path / first
        write(_typed_frame(spark, 0, 120), path, create=True, event_time="ts", writer=first)
        write(_typed_frame(spark, 120, 80), path, event_time="ts", writer=second)
        dataset = Dataset.open(path)
        kinds = [type(e.block.event).__name__ for e in dataset.blocks()]
        assert kinds.count("SetDataSchema") == 1, kinds  # the second writer changed nothing
        schemas[first] = dataset.state.schema
        table = _rows_once(path, 200)
        tables[first] = table.drop_columns(["system_time"])
        report = dataset.verify(deep=True)
        assert report.ok and report.rows_checked == 200, [p.line() for p in report.problems]
        assert staging_entries(path) == []
    assert schemas["spark"].equals(schemas["arrow"], check_metadata=True)
    spark_rows, arrow_rows = tables["spark"], tables["arrow"]
    assert spark_rows.column_names == arrow_rows.column_names
    for name in spark_rows.column_names:
        assert spark_rows.column(name).to_pylist() == arrow_rows.column(name).to_pylist(), name
    ntz = spark_rows.column("ntz").to_pylist()
    assert set(ntz) == {datetime(2024, 2, 1, 1, 2, 3, 456789)}
    assert schemas["arrow"].field("offset").nullable is False


@pytest.mark.spark  # the job starts its own local Spark
def test_a_job_run_by_the_venv_python_without_activation(tmp_path):
    """``.venv/bin/python job.py`` in a new shell: ``python3`` on PATH is another Python without
    pyarrow, and nothing names an interpreter for Spark's workers; the local workers run this
    one."""
    import os
    import shutil
    import subprocess
    import sys

    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None or subprocess.run([system, "-c", "import pyarrow"]).returncode == 0:
        pytest.skip("needs a python3 on /usr/bin:/bin without pyarrow, as a new shell has")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
    env.update(PATH="/usr/bin:/bin", SPARK_LOCAL_IP="127.0.0.1")
    script = Path(__file__).parent / "scripts" / "venv_job.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ds")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("rows 100 slices 1")
    _rows_once(tmp_path / "ds", 100)
    check_clean(tmp_path / "ds")


def test_what_is_no_spark_dataframe_is_refused_in_one_line(spark, tmp_path):
    """write takes a Spark DataFrame. A pandas-on-Spark one (pyspark.pandas) is refused
    naming its type and the conversion that keeps its index (to_spark(index_col=...)); so is
    a pandas one, and anything else: before anything is created, never as an AttributeError."""
    import pandas as pd
    import pyspark.pandas as ps

    from odf_chain.errors import OdfChainError

    sales = pd.DataFrame({"k": ["a", "b", "a"], "amount": [1, 2, 3]})
    summed = ps.from_pandas(sales).groupby("k").sum()
    target = tmp_path / "ds"
    with pytest.raises(OdfChainError) as info:
        write(summed, target, create=True)
    line = str(info.value)
    assert "\n" not in line
    assert "pyspark.pandas.frame.DataFrame" in line and "to_spark(index_col=" in line
    # what the message says to do keeps the key
    write(summed.to_spark(index_col="k"), target, create=True)
    assert sorted(Dataset.open(target).to_table(columns=["k", "amount"]).to_pylist(), key=str) == [
        {"k": "a", "amount": 4},
        {"k": "b", "amount": 2},
    ]
    before = snapshot_tree(target)
    for given, fragment in (
        (sales.groupby("k").sum(), "pandas.core.frame.DataFrame"),
        ([("a", 1)], "builtins.list"),
    ):
        with pytest.raises(OdfChainError, match=re.escape(fragment)):
            write(given, target)
        with pytest.raises(OdfChainError, match=re.escape(fragment)):
            write(given, tmp_path / "new", create=True)
    assert snapshot_tree(target) == before and not (tmp_path / "new").exists()
