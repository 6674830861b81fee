"""Writing Spark DataFrames into a dataset, and reading them back.

The write is one transaction, preceded by the new-column check: a DataFrame whose schema has
columns the schema in force lacks is refused, before Spark runs any job, unless ``evolve=True``.

1. **Offsets without a funnel.** Rows are counted per partition (one small row per partition
   reaches the driver; counting reads no column values), prefix sums give each partition its
   first offset, and a row's offset is that plus its index within the partition (numbered by
   the task that writes it, or the low 33 bits of ``monotonically_increasing_id``). Offsets are
   contiguous and gap-free across the write. The count and the write are two jobs, and must see
   the same partitions. A plan that shuffles cannot promise that (the count prunes columns, so
   adaptive execution re-plans it differently; a sort samples its ranges per job; a window the
   count does not need is dropped with its shuffle), so such an input is persisted first and
   both jobs read the cache; a plan without a shuffle (files read, narrow steps) is partitioned
   the same every time and is not cached. Whatever still differs is caught by step 3's check.
2. **Slices of about ``target_slice_bytes``, decided before Spark writes.** The rows' Parquet
   size is estimated as rows (known from the counts) times bytes per row, measured by writing
   a small sample (the first rows, one task as a rule; for a shuffle-free input, taken in a
   driver thread while the count runs: :mod:`odf_chain.spark.beside`) to Parquet in memory;
   Catalyst's ``sizeInBytes`` is no help after joins and aggregates, and absent under Spark
   Connect.
   Partitions much smaller than the target are merged with ``coalesce`` (no shuffle); since
   Spark's coalescer groups partitions by locality, not by index, the offsets are assigned
   after it, from the rows of the merged partitions (summed from the groups the JVM plan
   shows, or counted again under Spark Connect). A partition larger than the target is cut
   into files of a fixed number of rows (Spark's ``maxRecordsPerFile``). The plan is a list
   of slices, each a contiguous group of rows of one partition with its offset range; a
   writer other than Spark's can follow it.
   The slices are then written into a staging folder inside the dataset, one file per
   planned slice, with ODF's system columns (``offset`` Int64, ``op`` Int32 = 0,
   ``system_time`` timestamp(ms, UTC) of the transaction, the event time column), by one of two
   writers. **Arrow, in the tasks** (the default; :mod:`odf_chain.spark.arrow_tasks`): each
   task gets its partition's rows through ``mapInArrow``, writes its planned slices through
   ``pyarrow.fs`` straight to the store (no Hadoop connector), numbers the rows from the
   planned offsets, hashes the bytes and the rows on their way, and returns only the facts.
   Spark hands those tasks batches bounded by rows sized from the sample, not by a size it
   would otherwise ask each batch for after every row (see :func:`_arrow_batches`).
   **Spark's Parquet writer** (``writer="spark"``): the offsets become a column, Spark writes
   the files through the store's Hadoop connector, and step 3 reads each back.
3. **Each file is checked against its plan**: physical and logical hash, size, row count and
   offset range, which must be exactly the range planned for it: the files of a partition tile
   its offsets, and the partitions tile the write's. A mismatch (a partition with more or fewer
   rows than counted) is an error, never a silent gap. Spark's writer needs a task per file to
   hash it and read the offsets from its Parquet statistics; the Arrow writer reports them as it
   writes (and reports rows beyond its plan instead of writing them).
4. **The schema written** (the files' Arrow schema; for the Arrow writer, decided from the
   DataFrame's schema before the job, as Spark's writer would store it) becomes a
   SetDataSchema if it differs from the schema in force, after the evolution check; an
   incompatible write stops here (the Arrow writer: before the job), before anything leaves
   staging. Both writers declare the same schema for the same DataFrame.
5. **Commit**: files are renamed to ``data/<physical hash>`` (each must hold the bytes its
   writer counted), then one AddData per file in
   offset order (after the SetDataSchema, if any) is appended with a single move of the head.

A failure or a kill at any point leaves the chain exactly as it was, or with the whole
transaction; what it leaves in staging or ``data/`` is reported by verify and removed by gc.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from odf_chain import chain, rules
from odf_chain.chain import BlockEntry
from odf_chain.dataset import Dataset
from odf_chain.errors import NotFoundError, OdfChainError, SchemaError, StorageError
from odf_chain.events import AddFieldLineage, LineageRun, OffsetInterval, SetDataSchema
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.lineage.recorder import LineageRecorder
from odf_chain.replay import settle_lineage, slices_at
from odf_chain.schema.convert import AVRO_SCHEMA_KEY, avro_to_arrow
from odf_chain.schema.evolution import check_new_columns
from odf_chain.schema.widening import Narrowing, adopt_schema, refuse_narrowing
from odf_chain.slice_writer import SliceSpec, slice_schema
from odf_chain.slices import os_reason, own_metadata, system_fields
from odf_chain.spark.arrow_tasks import SURPLUS, arrow_schema_of, read_in_tasks, write_in_tasks
from odf_chain.spark.beside import Beside
from odf_chain.spark.schema_limits import check_nesting
from odf_chain.spark.sizing import (
    DEFAULT_TARGET_SLICE_BYTES,
    SAMPLE_ROWS,
    PlannedSlice,
    RowBytes,
    arrow_batch_rows,
    bytes_per_row,
    merge_to,
    planned_slices,
    records_per_file,
    sampled_bytes_per_row,
    target_slice_bytes as checked_target,
)
from odf_chain.spark.storage_failures import storage_failures
from odf_chain.spark.workers import use_this_python
from odf_chain.state import SOURCE_KEY, DatasetState, Vocabulary
from odf_chain.transaction import Transaction

_PART = re.compile(r"^part-(\d+)-.*\.parquet$")
_FILE_NUMBER = re.compile(r"-c(\d+)\.")  # part-00003-<job uuid>-c001.zstd.parquet: 2nd file
_ROW_BITS = 33  # monotonically_increasing_id: partition id above, row within partition below


class IngestError(OdfChainError):
    """The Spark side of an ingest failed; nothing was appended."""


@dataclass(frozen=True, slots=True)
class WrittenSlice:
    """What the per-file task found out about one Parquet file Spark wrote."""

    file_name: str
    partition: int
    physical_hash: str
    logical_hash: str
    size: int
    num_rows: int
    offset_min: int | None
    offset_max: int | None
    file_number: int = 0  # which of its partition's files (a partition cut into several)


@dataclass(frozen=True)
class IngestResult:
    """What one :func:`write` appended."""

    dataset: Path | str
    rows: int
    slices: int
    bytes: int
    blocks: list[BlockEntry]
    head: Multihash | None
    timings: dict[str, float] = field(default_factory=dict)
    lineage: AddFieldLineage | None = None  # the field lineage appended with the data
    # the (app_id, version) given, when the chain already records that version or a later
    # one for app_id: nothing was appended
    skipped_transaction: tuple[str, int] | None = None


def _inspect_file(
    filesystem: pafs.FileSystem, path: str, algorithm: str, offset_column: str
) -> WrittenSlice:
    """Hash and check one written file (runs in a Spark task, next to the file: on remote
    storage the executor reads it through ``pyarrow.fs``, the driver never does)."""
    from odf_chain.slices import parquet_logical_hash

    name = path.rsplit("/", 1)[-1]
    match = _PART.match(name)
    partition = int(match.group(1)) if match else -1
    number = _FILE_NUMBER.search(name)
    with filesystem.open_input_stream(path) as fh:
        physical, size = Multihash.digest_stream(algorithm, fh)
    parquet = pq.ParquetFile(filesystem.open_input_file(path))
    metadata = parquet.metadata
    index = parquet.schema_arrow.get_field_index(offset_column)
    low = high = None
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(index).statistics
        if stats is None or not stats.has_min_max:
            low = high = None
            break
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    logical = parquet_logical_hash(parquet, algorithm)  # in bounded memory, as verify --deep
    return WrittenSlice(
        name,
        partition,
        str(physical),
        str(logical),
        size,
        metadata.num_rows,
        low,
        high,
        int(number.group(1)) if number else 0,
    )


_WRITTEN_SCHEMA = pa.schema(
    [
        ("file_name", pa.string()),
        ("partition", pa.int32()),
        ("physical_hash", pa.string()),
        ("logical_hash", pa.string()),
        ("size", pa.int64()),
        ("num_rows", pa.int64()),
        ("offset_min", pa.int64()),
        ("offset_max", pa.int64()),
        ("file_number", pa.int32()),
    ]
)
_WRITTEN_DDL = (
    "file_name string, partition int, physical_hash string, logical_hash string, size long, "
    "num_rows long, offset_min long, offset_max long, file_number int"
)


def _inspect_files(
    spark, filesystem: pafs.FileSystem, files: list[str], algorithm: str, offset_column: str
) -> list[WrittenSlice]:
    """:func:`_inspect_file` for every file, one Spark task per file, through the DataFrame
    API (``mapInArrow``), which a Spark Connect session offers as well as a classic one (an RDD
    needs the JVM's SparkContext, which Connect clients do not have)."""

    def inspect(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            found = [
                asdict(_inspect_file(filesystem, path, algorithm, offset_column))
                for path in batch.column(0).to_pylist()
            ]
            yield pa.RecordBatch.from_pylist(found, schema=_WRITTEN_SCHEMA)

    paths = spark.createDataFrame([(path,) for path in files], "path string")
    rows = paths.repartition(max(len(files), 1)).mapInArrow(inspect, _WRITTEN_DDL).collect()
    return [WrittenSlice(**row.asDict()) for row in rows]


def _event_time_max(filesystem: pafs.FileSystem, paths: list[str], column: str) -> datetime | None:
    """The largest event time in the files, from Parquet statistics (footers only)."""
    best = None
    for path in paths:
        parquet = pq.ParquetFile(filesystem.open_input_file(path))
        index = parquet.schema_arrow.get_field_index(column)
        if index < 0:
            return None
        for i in range(parquet.metadata.num_row_groups):
            stats = parquet.metadata.row_group(i).column(index).statistics
            if stats is None or not stats.has_min_max:
                continue
            value = stats.max
            if isinstance(value, datetime):
                best = value if best is None else max(best, value)
    if best is not None and best.tzinfo is None:
        from datetime import UTC

        best = best.replace(tzinfo=UTC)
    return best


def _quoted(name: str) -> str:
    """A column name as Spark's column parser reads it literally (dots, backticks and all)."""
    return "`" + name.replace("`", "``") + "`"


def _user_columns(rest: list[str], in_force: pa.Schema | None, system: set[str]) -> list:
    """User columns laid out like the schema in force: its columns in its order (a nullable
    one the input lacks becomes nulls of its type), then new columns. Writing the same data in
    another column order, or without an optional column, is then no schema change."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    if in_force is None:
        return [F.col(_quoted(c)) for c in rest]
    present = set(rest)
    columns = []
    for f in in_force:
        if f.name in system:
            continue
        if f.name in present:
            columns.append(F.col(_quoted(f.name)))
        elif f.nullable:
            try:
                spark_type = from_arrow_type(f.type)
            except Exception:  # no Spark type for it: leave it out, the evolution check decides
                continue
            columns.append(F.lit(None).cast(spark_type).alias(f.name))
    known = set(in_force.names)
    columns += [F.col(_quoted(c)) for c in rest if c not in known]
    return columns


def _adopt_declared_types(
    df, in_force: pa.Schema | None, vocab: Vocabulary, event_time: str | None
) -> tuple[Any, list[Narrowing]]:
    """``df`` with each column whose type widens into the type the schema in force declares
    (int into long, float into double, member by member inside structs, arrays and maps) cast
    to it, so the write adopts the schema in force instead of changing it; and the fields of
    any other type, which the write refuses (:func:`refuse_narrowing`) once the count has
    found rows, before any file or block. :mod:`odf_chain.schema.widening` decides, for
    Dataset.write as well."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructType

    if in_force is None:
        return df, []
    skip = {*vocab.system_columns, vocab.event_time_column, event_time}
    declared = set(in_force.names)
    stored = []
    for f in df.schema.fields:
        if f.name in skip or f.name not in declared:
            continue
        with contextlib.suppress(SchemaError):  # no Arrow form: the writer says so, later
            stored.append(arrow_schema_of(StructType([f])).field(0))
    adopted, narrowed = adopt_schema(pa.schema(stored), in_force)
    casts = {
        a.name: from_arrow_type(a.type)
        for a, given in zip(adopted, stored, strict=True)
        if not a.type.equals(given.type)
    }
    if not casts:
        return df, narrowed
    return df.select(
        *[
            F.col(_quoted(c)).cast(casts[c]).alias(c) if c in casts else F.col(_quoted(c))
            for c in df.columns
        ]
    ), narrowed


def _names_only(schema) -> pa.Schema:
    """The names and nesting of a Spark schema as an Arrow schema, for the new-column check
    (which needs no more, and so runs on the DataFrame's schema before any Spark job).

    Structs, arrays and maps keep their shape; every leaf becomes a binary placeholder, so no
    Spark type (UDTs, intervals, variants) can make the conversion fail.
    """
    from pyspark.sql.types import ArrayType, MapType, StructType

    def convert(t) -> pa.DataType:
        if isinstance(t, StructType):
            return pa.struct([pa.field(f.name, convert(f.dataType)) for f in t.fields])
        if isinstance(t, ArrayType):
            return pa.list_(convert(t.elementType))
        if isinstance(t, MapType):
            return pa.map_(convert(t.keyType), convert(t.valueType))
        return pa.binary()

    return pa.schema([pa.field(f.name, convert(f.dataType)) for f in schema.fields])


def _refuse_duplicate_columns(df) -> None:
    """A dataset's columns have one name each (a join's ``select("*")`` can give two)."""
    seen: dict[str, str] = {}
    for name in df.columns:
        twin = seen.setdefault(name.lower(), name)  # Spark resolves names case-insensitively
        if twin is not name:
            raise SchemaError(
                f"the DataFrame has two columns named {twin!r} and {name!r}; a dataset's columns "
                "need distinct names (select or rename them after the join)"
            )


def _with_system_columns(
    df,
    vocab: Vocabulary,
    system_time: datetime,
    in_force: pa.Schema | None,
):
    """The DataFrame as it will be stored, minus the offsets (added per partition later).

    The event time is the column the vocabulary names, under its own name (a write given
    ``event_time=`` has made it the vocabulary's, see :func:`write`), cast to a timestamp if
    it is not one; an input without it gets the transaction's system time there."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    reserved = [c for c in df.columns if c in vocab.system_columns]
    if reserved:
        raise SchemaError(
            f"column(s) {', '.join(reserved)} are reserved for ODF system columns; rename them"
        )
    time_literal = F.lit(system_time).cast("timestamp")
    column = vocab.event_time_column
    if column in df.columns:
        event = F.col(_quoted(column))
        if not isinstance(df.schema[column].dataType, TimestampType):
            event = event.cast("timestamp")
        event = event.alias(column)
        rest = [c for c in df.columns if c != column]
    else:
        event = time_literal.alias(column)
        rest = list(df.columns)
    return df.select(
        F.lit(0).cast("int").alias(vocab.operation_type_column),
        time_literal.alias(vocab.system_time_column),
        event,
        *_user_columns(rest, in_force, {*vocab.system_columns, column}),
    )


# Session settings for the write: timestamps in milliseconds, as ODF's system columns are, and
# one file per partition, since a partition's offsets are promised to one slice.
_WRITE_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
    "spark.sql.files.maxRecordsPerFile": "0",  # one file per partition: a slice per partition
}
_EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"
_LOCAL_RELATION_RULE = "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"


def _write_conf(spark) -> dict[str, str]:
    """:data:`_WRITE_CONF`, and Spark's ``ConvertToLocalRelation`` rule excluded (beside any
    rules the session already excludes): on a DataFrame made from local data
    (``createDataFrame`` of a pandas frame or a list) that rule evaluates the count's
    ``spark_partition_id()`` on the driver, where every row is in partition 0, while the write
    runs in the real partitions, so the count and the write disagreed and every such write
    was refused."""
    excluded = [r.strip() for r in (spark.conf.get(_EXCLUDED_RULES, None) or "").split(",")]
    rules = [r for r in excluded if r]
    if _LOCAL_RELATION_RULE not in rules:
        rules.append(_LOCAL_RELATION_RULE)
    return {**_WRITE_CONF, _EXCLUDED_RULES: ",".join(rules)}


_conf_lock = threading.Lock()
_conf_holders: dict[int, tuple[int, dict[str, str | None]]] = {}  # per session: writers, saved


@contextlib.contextmanager
def _session_conf(spark, settings: Mapping[str, str]) -> Iterator[None]:
    """Set ``settings`` on the session while any write in this process needs them, then put
    back what was there before the first: writes in several threads of one session share the
    settings instead of restoring each other's."""
    key = id(spark)
    with _conf_lock:
        holders, saved = _conf_holders.get(key, (0, {}))
        if holders == 0:
            saved = _set_conf(spark, settings)
        _conf_holders[key] = (holders + 1, saved)
    try:
        yield
    finally:
        with _conf_lock:
            holders, saved = _conf_holders.pop(key)
            if holders > 1:
                _conf_holders[key] = (holders - 1, saved)
            else:
                _set_conf(spark, saved)


def _set_conf(spark, settings: Mapping[str, str | None]) -> dict[str, str | None]:
    """Set ``settings`` on the session (None: unset); return what they replaced."""
    saved = {name: spark.conf.get(name, None) for name in settings}
    for name, value in settings.items():
        if value is None:
            spark.conf.unset(name)
        else:
            spark.conf.set(name, value)
    return saved


_MAX_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
_MAX_BATCH_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"
_SPARK_BATCH_BYTES = 64 * 1024 * 1024  # Spark's default maxBytesPerBatch
_batch_locks: dict[int, threading.Lock] = {}


def _conf_bytes(value: str | None) -> int | None:
    """A byte size as Spark's conf shows or takes it (``67108864b``, ``64m``, ``1g``); None
    when unset or not such a size."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([bkmgt]?)b?\s*", str(value).lower())
    if match is None:
        return None
    return int(match.group(1)) * 1024 ** "bkmgt".index(match.group(2) or "b")


@contextlib.contextmanager
def _arrow_batches(spark, row_bytes: RowBytes | None) -> Iterator[None]:
    """The Arrow writer's job gets batches of rows sized from the sample
    (:func:`~odf_chain.spark.sizing.arrow_batch_rows`) and Spark's byte check after every row
    off (:data:`~odf_chain.spark.sizing.ARROW_BATCH_BYTES` says why). These are settings of
    the session: one such job at a time per session holds them, and puts back what was there.
    Spark's own settings stay without a sample of rows (none could be taken), and when the
    session's ``maxBytesPerBatch`` is not Spark's default: someone chose a bound to keep."""
    if row_bytes is None or not row_bytes.sampled:
        yield
        return
    with _conf_lock:
        lock = _batch_locks.setdefault(id(spark), threading.Lock())
    with lock:
        chosen = spark.conf.get(_MAX_BATCH_BYTES, None)  # None: not set, Spark's default
        if chosen is not None and _conf_bytes(chosen) != _SPARK_BATCH_BYTES:
            yield
            return
        try:
            limit = int(str(spark.conf.get(_MAX_BATCH_RECORDS, "10000")))
        except ValueError:
            limit = 10_000
        limit = limit if limit > 0 else 10_000  # Spark reads 0 or less as no limit
        settings = {
            _MAX_BATCH_BYTES: str(2**31 - 1),  # Spark's "no limit": no size asked per row
            _MAX_BATCH_RECORDS: str(arrow_batch_rows(row_bytes, limit)),
        }
        saved = _set_conf(spark, settings)
        try:
            yield
        finally:
            _set_conf(spark, saved)


def _shuffles(df) -> bool:
    """Does ``df``'s physical plan move rows between partitions (an Exchange)?"""
    try:
        return "Exchange" in df._jdf.queryExecution().executedPlan().toString()
    except Exception:  # no plan to look at (Spark Connect): cache to be safe
        return True


def _count_partitions(
    df, vocab: Vocabulary, *, check_timestamps: bool = True, per_file: dict[str, int] | None = None
) -> dict[int, int]:
    """Rows per partition (partitions without rows are left out), one small row each.

    The same pass checks that user timestamp columns hold whole milliseconds: the files store
    timestamps in milliseconds (as ODF's system columns), and finer ones would be truncated
    without a word. Given ``per_file``, it also fills it with rows per input file (Spark's
    ``input_file_name``, files without rows left out): one more grouping key in the same job.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    stamps = [
        f.name
        for f in df.schema.fields
        if check_timestamps
        and isinstance(f.dataType, TimestampType)
        and f.name not in (*vocab.system_columns, vocab.event_time_column)
    ]
    finer = [
        F.max((F.unix_micros(F.col(_quoted(name))) % 1000 != 0).cast("int")).alias(f"_sub{i}")
        for i, name in enumerate(stamps)
    ]
    keys = [F.spark_partition_id().alias("pid")]
    if per_file is not None:
        keys.append(F.input_file_name().alias("file"))
    rows = df.groupBy(*keys).agg(F.count("*").alias("n"), *finer)
    counts: dict[int, int] = {}
    for row in rows.collect():
        counts[row["pid"]] = counts.get(row["pid"], 0) + row["n"]
        if per_file is not None:
            per_file[row["file"]] = per_file.get(row["file"], 0) + row["n"]
        for i, name in enumerate(stamps):
            if row[f"_sub{i}"]:
                raise SchemaError(
                    f"column {name!r} holds timestamps finer than a millisecond; datasets store "
                    "timestamps in milliseconds: truncate them first "
                    f"(F.date_trunc('millisecond', {name!r})), store them as another type, or "
                    "pass truncate_timestamps=True (odf-chain ingest --truncate-timestamps)"
                )
    return counts


def _assign_offsets(df, counts: Mapping[int, int], vocab: Vocabulary, first_offset: int):
    """``df`` with its offsets, without moving rows: a partition's first offset (prefix sums
    of ``counts``) plus the row's index within the partition."""
    from pyspark.sql import functions as F

    # partitions as the count saw them (the plan's own number can differ under adaptive
    # execution); a write that saw others gets null offsets, which the per-file check refuses
    partitions = max(counts, default=-1) + 1
    firsts, running = [], first_offset
    for pid in range(partitions):
        firsts.append(running)
        running += counts.get(pid, 0)
    pid = F.spark_partition_id()
    within = F.monotonically_increasing_id() - F.shiftleft(pid.cast("long"), _ROW_BITS)
    base = F.try_element_at(F.array(*[F.lit(x).cast("long") for x in firsts]), pid + 1)
    with_offsets = df.select(
        (base + within).cast("long").alias(vocab.offset_column),
        *[F.col(_quoted(c)) for c in df.columns],
    )
    return with_offsets


def _merged_counts(merged, counts: Mapping[int, int]) -> dict[int, int] | None:
    """Rows per partition of ``merged`` (a coalesced frame) from the groups Spark's coalescer
    makes of the counted partitions, read from the JVM plan without running a job; None when
    there is no plan to read (Spark Connect) or it has another shape.

    The groups follow the partitions' locations, not their numbers (cached partitions are
    spread over all groups), and are computed again, the same way, for the write: the input is
    persisted and already cached, or has no shuffle, so the locations do not move between."""
    try:
        node = merged._jdf.queryExecution().executedPlan()
        while node.nodeName() != "Coalesce":
            if node.nodeName() == "AdaptiveSparkPlan":
                node = node.executedPlan()
            elif node.children().size() == 1:
                node = node.children().apply(0)
            else:
                return None
        groups = {p.index(): list(p.parentsIndices()) for p in node.execute().partitions()}
    except Exception:  # Spark Connect (no _jdf), or a plan of another shape: count instead
        return None
    merged_counts = {i: sum(counts.get(j, 0) for j in parents) for i, parents in groups.items()}
    if sum(merged_counts.values()) != sum(counts.values()):
        return None  # the groups do not cover the counted partitions: count instead
    return {i: n for i, n in merged_counts.items() if n}


def _size_slices(
    df,
    counts: dict[int, int],
    vocab: Vocabulary,
    target: int | None,
    row_bytes: RowBytes | None = None,
):
    """Step 2's plan: (the frame to write, its rows per partition, rows per file), from
    ``row_bytes`` (sampled while the count ran), or from a sample taken now.

    Merging uses ``coalesce``, whose groups of partitions follow their locations (cached
    blocks, file splits), not their numbers, so the merged partitions' rows are summed from
    the groups the JVM plan shows, or counted anew where there is no plan to read (both ways
    see a persisted or shuffle-free input whose locations no longer move, as the write does;
    step 3 checks that it did). A merge into one partition holds every row."""
    if target is None:
        return df, counts, 0
    per_row = (row_bytes or bytes_per_row(df, counts)).parquet
    merged = merge_to(counts, per_row, target)
    if merged is not None:
        df = df.coalesce(merged)
        if merged == 1:
            counts = {0: sum(counts.values())}
        elif (summed := _merged_counts(df, counts)) is not None:
            counts = summed
        else:
            try:
                counts = _count_partitions(df, vocab, check_timestamps=False)
            except Exception as exc:
                raise _spark_failure("count the merged partitions", exc) from exc
    return df, counts, records_per_file(counts, per_row, target)


def _refuse_what_is_no_spark_dataframe(df: object) -> None:
    """``write`` takes a Spark DataFrame (classic or Connect) and nothing else, refused in one
    line before anything is opened: a pandas-on-Spark DataFrame would otherwise fail on its
    first attribute, and converting it for the caller would have to guess its index's fate
    (``to_spark()`` drops it), the loss a named index must not suffer."""
    from pyspark.sql import DataFrame

    if isinstance(df, DataFrame):
        return
    kind = type(df)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if kind.__module__.split(".")[:2] == ["pyspark", "pandas"]:
        how = (
            "convert it with df.to_spark(index_col=...) (a column name, a list of them for a "
            "MultiIndex) to keep its index as columns, or df.to_spark() to drop the index"
        )
    elif kind.__module__.split(".")[0] in ("pandas", "polars", "pyarrow"):
        how = "write it with Dataset.write, or convert it with spark.createDataFrame(...)"
    else:
        how = "convert it with spark.createDataFrame(...)"
    raise OdfChainError(f"spark.write takes a Spark DataFrame, not a {name}: {how}")


@storage_failures
def write(
    df,
    dataset: str | Path | Dataset,
    *,
    event_time: str | None = None,
    source: Mapping[str, Any] | None = None,
    create: bool = False,
    hash: str = BLAKE3,
    avro_schema: str | None = None,
    persist: bool | None = None,
    lineage: LineageRecorder | bool = True,
    job_name: str | None = None,
    truncate_timestamps: bool = False,
    evolve: bool = False,
    transaction: tuple[str, int] | None = None,
    target_slice_bytes: int | str | None = DEFAULT_TARGET_SLICE_BYTES,
    writer: Literal["arrow", "spark"] | None = None,
    _check_state: Callable[[Dataset, DatasetState], None] | None = None,
    _input: str | None = None,
    _check_rows: Callable[[dict[str, int]], None] | None = None,
) -> IngestResult:
    """Append a Spark DataFrame to ``dataset`` (a path, a ``pyarrow.fs`` URI such as
    ``s3://bucket/sales``, or an open :class:`Dataset`) as Parquet slices. A pandas-on-Spark
    DataFrame is refused in one line: ``df.to_spark(index_col=...)`` keeps its index as columns.

    ``event_time`` names the column holding event times. It keeps its name: a dataset without
    a schema gets a SetVocab naming it as the event time column (ODF's way), appended before
    the SetDataSchema in the same transaction; one whose vocabulary already names it needs
    none; one whose schema is set with another event time column refuses it (rule
    ``vocab-before-schema``) before Spark runs any job. Without it, the column the vocabulary
    names (``event_time`` by default) is the event time, and an input without that column gets
    the transaction's system time there. The watermark is the latest event time written.

    ``source`` is recorded in every AddData's extra attributes (input files and their hashes, or
    an upstream dataset's id and head block). ``create`` makes the dataset (with ``hash``) if it
    does not exist. ``avro_schema`` keeps an Avro writer schema with the SetDataSchema, so field
    paths follow the Avro convention. ``persist`` caches the input between counting and writing
    so both see the same partitions: None (the default) when its plan shuffles, True always (an
    input that is not reproducible for another reason), False never.

    ``lineage``: True (the default) derives the field lineage of ``df`` from its analyzed plan;
    a :class:`LineageRecorder` gives it by hand instead (also the way under Spark Connect, where
    no plan is reachable); False records none. The lineage is appended as an AddFieldLineage
    right before the AddData blocks, in the same transaction, for the run ``job_name`` (default:
    the Spark application's name).

    Timestamps are stored in milliseconds (as ODF's system columns); a user column holding finer
    ones is refused, not silently truncated, unless ``truncate_timestamps`` says to truncate.

    ``evolve`` allows columns (or struct fields) the schema in force lacks; without it such a
    write raises :class:`NewColumnsError` naming them, from the DataFrame's schema, before
    Spark runs any job (missing nullable columns become nulls either way).

    A column of a type that widens into the type the schema in force declares (int into long,
    float into double, ...: :mod:`odf_chain.schema.widening`) is cast to it, so the write adopts
    the schema in force; any other type change is refused with :class:`TypeChangeError` naming
    the column and field, once the count found rows (an empty input appends nothing: a
    header-only CSV's columns are strings), before any file or block is written.

    ``transaction=(app_id, version)`` makes a retried job append nothing twice (Delta's
    txnAppId/txnVersion): the pair is recorded with the first AddData, and a write whose
    version is not above the last one the chain records for ``app_id`` appends nothing and
    returns ``skipped_transaction`` set, before Spark runs any job. Two attempts racing each
    other: one commits, the other gets :class:`ConflictError`, and running it again skips it.
    An empty DataFrame records no transaction (it appends nothing).

    ``target_slice_bytes`` (default 256 MiB; an int, or a string such as ``"64MiB"``) is the
    Parquet size each slice aims at: partitions far smaller are merged (a 100-row aggregate
    over 200 shuffle partitions is one slice), larger ones are cut, from an estimate (a sample
    of rows written to Parquet in memory), so slices come out about that size, not exactly.
    Fewer slices also means fewer tasks writing them: about one per ``target_slice_bytes``.
    None keeps one slice per non-empty partition, as the DataFrame is partitioned.

    ``writer`` says who writes the slices. ``"arrow"``: each Spark task writes its slices itself
    through Arrow, straight to the dataset's store, hashing them on the way (one pass, no Hadoop
    connector needed for ``s3://``, ``gs://``, ``abfs://``). ``"spark"``: Spark's own Parquet
    writer, then a task per file reads it back to hash it (object stores then need the Hadoop
    connector on the classpath, e.g. ``hadoop-aws``). None (the default) is ``"arrow"``, the
    faster of the two on local paths too (``tools/bench_ingest.py``).
    """
    from pyspark import StorageLevel

    _refuse_what_is_no_spark_dataframe(df)
    use_this_python(df.sparkSession)
    if transaction is not None:  # refused before anything is opened or created
        transaction = rules.transaction_argument(transaction)
    target = checked_target(target_slice_bytes)
    if writer not in (None, "arrow", "spark"):
        raise OdfChainError(f"writer must be 'arrow' or 'spark' (or None), not {writer!r}")

    timings: dict[str, float] = {}
    started_at = chain.now()
    clock = time.perf_counter()
    dataset, seed = _open(dataset, create=create, hash=hash)
    try:
        path = dataset.path
        storage = dataset.storage
        state = seed.after if seed is not None else dataset.refresh()
        if _check_state is not None:  # ingest_files: were its inputs ingested meanwhile?
            _check_state(dataset, state)
        # a new dataset's Seed is the transaction's first block: a failed write creates none
        if seed is not None:
            tx = Transaction.create(storage, seed, transaction=transaction)
        else:  # refuses a rolled-back head, proves the transaction pair, before any job
            tx = Transaction.begin(storage, state, transaction=transaction)
        if tx.already_recorded:
            return IngestResult(
                path, 0, 0, 0, [], tx.base.head, timings, skipped_transaction=transaction
            )
        state = tx.state
        algorithm = tx.algorithm
        system_time = tx.system_time  # one time for the transaction's blocks and rows
        spark = df.sparkSession

        _refuse_duplicate_columns(df)
        check_nesting(df.schema)
        if event_time is not None and event_time not in df.columns:
            raise SchemaError(f"event time column {event_time!r} is not in the input")
        # the column keeps its name: a SetVocab names it, the write's first block after the Seed
        tx.name_event_time(event_time)
        state = tx.state
        vocab = state.vocab
        df, narrowed = _adopt_declared_types(df, state.schema, vocab, event_time)
        shaped = _with_system_columns(df, vocab, system_time, state.schema)
        check_new_columns(
            state.schema, _names_only(shaped.schema), evolve=evolve, dataset=dataset.location
        )
        if persist is None:
            persist = _shuffles(shaped)
        if persist:
            shaped = shaped.persist(StorageLevel.MEMORY_AND_DISK)
        in_tasks = writer != "spark"
        staging = storage.staging_area("spark")
        beside: list[Beside] = []  # driver-side work run while a job runs; stopped on the way out
        try:
            with _session_conf(spark, _write_conf(spark)):
                sampling = None
                wants_sample = target is not None or in_tasks  # slice sizes, batch sizes
                if wants_sample and not persist and Beside.possible(spark):
                    # a shuffle-free input: its first rows are sampled while the count runs
                    # (a persisted one is sampled from the cache the count fills)
                    sampling = Beside(
                        spark, "sample", lambda: sampled_bytes_per_row(shaped, SAMPLE_ROWS)
                    )
                    beside.append(sampling)
                per_file: dict[str, int] | None = None if _check_rows is None else {}
                try:
                    counts = _count_partitions(
                        shaped, vocab, check_timestamps=not truncate_timestamps, per_file=per_file
                    )
                except Exception as exc:  # a task of the input's own plan failed: nothing appended
                    raise _spark_failure("count the input", exc) from exc
                if _check_rows is not None:  # ingest_files: rows from every file that has bytes?
                    _check_rows(per_file or {})
                total = sum(counts.values())
                timings["offsets"] = time.perf_counter() - clock
                if total == 0:
                    if seed is not None:  # an empty first write still creates the dataset
                        Transaction.create(storage, seed).commit()
                    return IngestResult(path, 0, 0, 0, [], state.head, timings)
                # refused once there are rows: a header-only CSV's columns are strings by default
                refuse_narrowing(narrowed, f"{dataset.location}: {_input or 'the DataFrame'}")

                clock = time.perf_counter()
                # the sample gets as long again as the count took: its first task is as a rule
                # done by then; cancelling it and sampling anew is for inputs whose first
                # partitions hold too few rows (limit then reads them round after round)
                row_bytes = None
                if sampling is not None:
                    row_bytes = sampling.done_or_cancel(wait=timings["offsets"])[1]
                if row_bytes is None and wants_sample:
                    row_bytes = bytes_per_row(shaped, counts)
                framed, counts, records = _size_slices(shaped, counts, vocab, target, row_bytes)
                planned = planned_slices(counts, state.next_offset, records)
                timings["sizing"] = time.perf_counter() - clock

                clock = time.perf_counter()
                captured: Beside | None = None

                def capture_lineage(schema: pa.Schema) -> None:
                    # the plan's lineage is read on the driver while the tasks write
                    nonlocal captured
                    if lineage is True and Beside.possible(spark):
                        captured = Beside(
                            spark, "lineage", lambda: _plan_lineage(shaped, schema, vocab)
                        )
                        beside.append(captured)

                if in_tasks:
                    written, schema, watermark = _write_in_tasks(
                        framed,
                        planned,
                        state,
                        system_time,
                        algorithm,
                        avro_schema,
                        storage,
                        staging,
                        truncate_timestamps=truncate_timestamps,
                        before_job=capture_lineage,
                        row_bytes=row_bytes,
                    )
                    timings["task_write"] = time.perf_counter() - clock
                else:
                    written, schema, watermark = _write_with_spark(
                        framed,
                        counts,
                        planned,
                        records,
                        state,
                        algorithm,
                        avro_schema,
                        storage,
                        staging,
                        timings,
                    )
            with tx:  # the failure policy: what the transaction created is withdrawn
                clock = time.perf_counter()
                tx.declare_schema(schema)
                current = tx.state
                timings["renames"] = time.perf_counter() - clock

                clock = time.perf_counter()
                event = _lineage_event(
                    shaped,  # with the system columns: event_time's source shows, literals not
                    lineage,
                    schema,
                    run=LineageRun(
                        job_name=job_name or spark.conf.get("spark.app.name", "spark"),
                        run_id=str(uuid.uuid4()),
                        started_at=started_at,
                        ended_at=chain.now(system_time),  # the slices are written: run done
                        offsets=OffsetInterval(
                            current.next_offset, current.next_offset + total - 1
                        ),
                    ),
                    vocab=vocab,
                    captured=None if captured is None else captured.result,
                )
                if event is not None:
                    tx.add(event)
                timings["lineage"] = time.perf_counter() - clock
                clock = time.perf_counter()
                extra = None if source is None else {SOURCE_KEY: dict(source)}
                for slice_info, plan in zip(written, planned, strict=True):
                    if plan.interval.start != tx.state.next_offset:  # _check_files: end to end
                        raise IngestError(f"{slice_info.file_name}: offsets out of order")
                    tx.add_slice(
                        physical_hash=Multihash.from_multibase(slice_info.physical_hash),
                        logical_hash=Multihash.from_multibase(slice_info.logical_hash),
                        size=slice_info.size,
                        num_rows=slice_info.num_rows,
                        watermark=watermark,
                        extra=extra,
                    )
                for slice_info in written:
                    tx.commit_data(
                        f"{staging}/{slice_info.file_name}",
                        slice_info.physical_hash,
                        slice_info.size,
                    )
                timings["renames"] += time.perf_counter() - clock

                clock = time.perf_counter()
                new_state = tx.commit()
                timings["blocks"] = time.perf_counter() - clock
            dataset.refresh()
            return IngestResult(
                dataset=path,
                rows=total,
                slices=len(written),
                bytes=sum(w.size for w in written),
                blocks=[p.entry for p in tx.prepared],
                head=new_state.head,
                timings=timings,
                lineage=event,
            )
        finally:
            for work in beside:
                work.done_or_cancel()
            if persist:
                shaped.unpersist()
            storage.discard_area(staging)
    except BaseException:
        if seed is not None:  # this call laid the dataset out: no head, so no dataset
            dataset.abandon_layout()
        raise


def _schema_to_declare(
    written: pa.Schema, state: DatasetState, avro_schema: str | None
) -> pa.Schema:
    """The SetDataSchema's schema for slices of ``written`` (the Arrow schema they read back
    as, without other tools' metadata): user columns declared as :func:`_declared_schema` says,
    and the dataset's own metadata (an Avro writer schema) carried over."""
    schema = _declared_schema(written, state.schema, state.vocab)
    if avro_schema is not None:
        # the writer schema's names (record names, enum symbols, docs) ride on field metadata,
        # which Spark's schema does not carry: take it from the Avro conversion
        schema = _copy_field_metadata(schema, avro_to_arrow(avro_schema))
        return schema.with_metadata({AVRO_SCHEMA_KEY: avro_schema.encode()})
    if state.schema is not None and own_metadata(state.schema):
        # a dataset keeps its field-path convention when later inputs are not Avro
        return schema.with_metadata(own_metadata(state.schema))
    return schema


def _write_with_spark(
    framed,
    counts: dict[int, int],
    planned: list[PlannedSlice],
    records: int,
    state: DatasetState,
    algorithm: str,
    avro_schema: str | None,
    storage,
    staging: str,
    timings: dict[str, float],
) -> tuple[list[WrittenSlice], pa.Schema, datetime | None]:
    """Steps 2 and 3 with Spark's own Parquet writer (through the store's Hadoop connector),
    then a task per file to hash and check it: the written slices in offset order, the schema
    to declare and the latest event time."""
    vocab = state.vocab
    filesystem = storage.filesystem
    clock = time.perf_counter()
    out = _assign_offsets(framed, counts, vocab, state.next_offset)
    try:
        out.write.option("compression", "zstd").option("maxRecordsPerFile", str(records)).parquet(
            storage.spark_uri(staging)
        )
    except Exception as exc:  # py4j / Spark errors: the job failed, nothing appended
        raise _spark_failure("write the slices", exc) from exc
    timings["spark_write"] = time.perf_counter() - clock

    clock = time.perf_counter()
    files = _part_files(filesystem, staging)
    spark = framed.sparkSession
    try:
        written = _inspect_files(spark, filesystem, files, algorithm, vocab.offset_column)
    except Exception as exc:  # a file could not be read or hashed: nothing appended
        raise _spark_failure("hash the slices", exc) from exc
    # Spark may write a file with no rows (for the first partition when it is empty): it holds
    # no offsets and becomes no slice (it goes with the staging folder)
    written = sorted((w for w in written if w.num_rows), key=lambda w: (w.partition, w.file_number))
    timings["hashing"] = time.perf_counter() - clock
    _check_files(written, planned)
    # Spark's row metadata is not ours
    stored = pq.read_schema(filesystem.open_input_file(files[0])).remove_metadata()
    watermark = _event_time_max(filesystem, files, vocab.event_time_column)
    return written, _schema_to_declare(stored, state, avro_schema), watermark


def _write_in_tasks(
    framed,
    planned: list[PlannedSlice],
    state: DatasetState,
    system_time: datetime,
    algorithm: str,
    avro_schema: str | None,
    storage,
    staging: str,
    *,
    truncate_timestamps: bool,
    before_job: Callable[[pa.Schema], None] | None = None,
    row_bytes: RowBytes | None = None,
) -> tuple[list[WrittenSlice], pa.Schema, datetime | None]:
    """Steps 2 and 3 in one pass (:mod:`odf_chain.spark.arrow_tasks`): each task writes its
    planned slices through Arrow to the store, hashing them on the way. The schema is decided
    (and checked against the evolution rules) before the job runs, and given to ``before_job``
    then."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    vocab = state.vocab
    system = set(vocab.system_columns)

    def column(field):
        # Files hold milliseconds. The event time is truncated to them, as Spark's writer does;
        # user columns only when asked (the count refused finer ones otherwise)
        name = field.name
        if isinstance(field.dataType, TimestampType) and (
            name == vocab.event_time_column or truncate_timestamps
        ):
            return F.date_trunc("millisecond", F.col(_quoted(name))).alias(name)
        return F.col(_quoted(name))

    frame = framed.select(*[column(f) for f in framed.schema.fields if f.name not in system])
    written_schema = slice_schema(arrow_schema_of(frame.schema), state.schema, vocab)
    schema = _schema_to_declare(written_schema, state, avro_schema)
    if state.schema is None or not schema.equals(state.schema, check_metadata=True):
        chain.prepare(state, SetDataSchema.from_arrow(schema), system_time=system_time)
    if before_job is not None:
        before_job(schema)
    spec = SliceSpec(schema, vocab, state.next_offset, system_time, algorithm)
    if isinstance(storage.filesystem, pafs.LocalFileSystem):  # object stores need no folder
        try:
            storage.filesystem.create_dir(staging)
        except OSError as exc:
            raise StorageError(
                f"dataset {storage.location}: cannot create the staging folder {staging}: "
                f"{os_reason(exc)}"
            ) from exc
    try:
        with _arrow_batches(frame.sparkSession, row_bytes):
            found = write_in_tasks(
                frame, planned, spec, storage.filesystem, staging, dataset=storage.location
            )
    except Exception as exc:  # py4j / Spark errors: the job failed, nothing appended
        raise _spark_failure("write the slices", exc) from exc
    surplus = [f for f in found if f.file_number == SURPLUS]
    if surplus:
        rows = sum(f.num_rows for f in surplus)
        partitions = sorted(f.partition for f in surplus)
        raise IngestError(
            f"partitions {partitions} held {rows} more rows in the write than in the count"
            + _UNSTABLE
        )
    written = sorted(
        (
            WrittenSlice(
                f.path.rsplit("/", 1)[-1],
                f.partition,
                f.physical_hash,
                f.logical_hash,
                f.size,
                f.num_rows,
                f.offset_min,
                f.offset_max,
                f.file_number,
            )
            for f in found
        ),
        key=lambda w: (w.partition, w.file_number),
    )
    _check_files(written, planned)
    times = [f.max_event_time for f in found if f.max_event_time is not None]
    return written, schema, max(times, default=None)


def _plan_lineage(df, schema: pa.Schema, vocab: Vocabulary):
    """The inputs and field operations of ``df`` written as ``schema``, from its plan (None
    under Spark Connect)."""
    from odf_chain.spark.plan_lineage import lineage_from_plan

    return lineage_from_plan(df, schema, system_columns=set(vocab.system_columns))


def _lineage_event(
    df,
    lineage: LineageRecorder | bool,
    schema: pa.Schema,
    *,
    run: LineageRun,
    vocab: Vocabulary,
    captured: Callable[[], Any] | None = None,
) -> AddFieldLineage | None:
    """The lineage to append for this write (see :func:`write`), settled on ``schema``: plain
    names turned into v2 paths, input fields checked against the datasets they pin.
    ``captured`` gives what :func:`_plan_lineage` found (read while the job ran); without it,
    the plan is read now."""
    if lineage is False:
        return None
    if isinstance(lineage, LineageRecorder):
        event = lineage.event(started_at=run.started_at, ended_at=run.ended_at, offsets=run.offsets)
        event = replace(event, run=replace(run, job_name=lineage.job_name, run_id=lineage.run_id))
    else:
        parts = captured() if captured is not None else _plan_lineage(df, schema, vocab)
        if parts is None:  # Spark Connect: lineage_from_plan has warned
            return None
        inputs, operations = parts
        if not operations:
            return None
        event = AddFieldLineage(run=run, inputs=tuple(inputs), operations=tuple(operations))
    return settle_lineage(event, schema)


def _open(
    dataset: str | Path | Dataset, *, create: bool, hash: str
) -> tuple[Dataset, chain.PreparedBlock | None]:
    """The dataset, and its unwritten Seed when it is new: the Seed is committed with the
    write's blocks, so a write that fails leaves no dataset behind."""
    if isinstance(dataset, Dataset):
        dataset.refresh()
        return dataset, None
    try:
        return Dataset.open(dataset), None
    except NotFoundError:
        if not create:
            raise
    return Dataset.lay_out(dataset, hash=hash)


def _part_files(filesystem: pafs.FileSystem, folder: str) -> list[str]:
    """The Parquet files Spark wrote into ``folder``, by partition number, then file number."""
    infos = filesystem.get_file_info(pafs.FileSelector(folder))
    parts = [
        (
            int(m.group(1)),
            int(n.group(1)) if (n := _FILE_NUMBER.search(info.base_name)) else 0,
            info.path,
        )
        for info in infos
        if info.type == pafs.FileType.File and (m := _PART.match(info.base_name))
    ]
    return [path for _, _, path in sorted(parts)]


def _nullable(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable."""
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_nullable(f.type)).with_nullable(True) for f in t])
    if pa.types.is_map(t):
        return pa.map_(t.key_type, pa.field(t.item_field.name, _nullable(t.item_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(pa.field(t.value_field.name, _nullable(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _nullable(t.value_type)))
    return t


def _declared_schema(
    written: pa.Schema, in_force: pa.Schema | None, vocab: Vocabulary
) -> pa.Schema:
    """The schema to declare for what Spark wrote.

    Spark's nullability says more about its plan than about the data (a literal column is
    "required", a computed offset "nullable"), so it is not what gets declared. User columns are
    declared nullable, since DataMine's rules forbid new required fields and what the files hold
    then always fits; system columns as ODF defines them (offset, op and system time required).
    A column the schema in force already declares with the same type keeps that declaration, so
    an unchanged write never changes the schema, whichever writer made the files.
    """
    system = {f.name: f for f in system_fields(vocab)}
    fields = []
    for f in written:
        if f.name in system:
            declared = system[f.name] if system[f.name].type.equals(f.type) else f
        else:
            declared = f.with_type(_nullable(f.type)).with_nullable(True)
        if in_force is not None and f.name in in_force.names:
            known = in_force.field(f.name)
            if _nullable(known.type).equals(_nullable(declared.type)):
                declared = known
        fields.append(declared)
    return pa.schema(fields)


def _copy_field_metadata(schema: pa.Schema, reference: pa.Schema) -> pa.Schema:
    """``schema`` with the field metadata of same-named fields of ``reference`` (nested too)."""

    def merge(f: pa.Field, ref: pa.Field | None) -> pa.Field:
        if ref is None:
            return f
        t = f.type
        if pa.types.is_struct(t) and pa.types.is_struct(ref.type):
            names = {ref.type.field(i).name: ref.type.field(i) for i in range(ref.type.num_fields)}
            t = pa.struct([merge(c, names.get(c.name)) for c in t])
        elif pa.types.is_list(t) and pa.types.is_list(ref.type):
            t = pa.list_(merge(t.value_field, ref.type.value_field))
        elif pa.types.is_map(t) and pa.types.is_map(ref.type):
            t = pa.map_(t.key_type, merge(t.item_field, ref.type.item_field))
        out = f.with_type(t)
        return out.with_metadata(ref.metadata) if ref.metadata else out

    names = set(reference.names)
    return pa.schema(
        [merge(f, reference.field(f.name) if f.name in names else None) for f in schema],
        metadata=schema.metadata,
    )


_UNSTABLE = (
    "; the input's partitions came out differently in the count and in the write "
    "(nothing was appended): pass persist=True to cache it between the two"
)


def _check_files(written: list[WrittenSlice], planned: list[PlannedSlice]) -> list[OffsetInterval]:
    """Each file holds exactly the offsets planned for it (the files of a partition in the
    order Spark wrote them); returns the intervals, which tile the write's offsets."""
    expected = sorted({p.partition for p in planned})
    seen = sorted({w.partition for w in written})
    if seen != expected:
        raise IngestError(
            f"Spark wrote files for partitions {seen}, expected {expected}" + _UNSTABLE
        )
    for w, plan in zip(written, planned, strict=False):
        start, end = plan.interval.start, plan.interval.end
        if w.partition != plan.partition or (w.num_rows, w.offset_min, w.offset_max) != (
            plan.rows,
            start,
            end,
        ):
            raise IngestError(
                f"{w.file_name}: expected offsets {start}..{end} ({plan.rows} rows, file "
                f"{plan.index + 1} of partition {plan.partition}), found "
                f"{w.offset_min}..{w.offset_max} ({w.num_rows} rows)" + _UNSTABLE
            )
    if len(written) != len(planned):
        raise IngestError(
            f"Spark wrote {len(written)} files with rows, expected {len(planned)}" + _UNSTABLE
        )
    return [plan.interval for plan in planned]


def _spark_failure(step: str, exc: BaseException) -> OdfChainError:
    """The error to raise when a Spark job failed: the odf_chain error a task raised (say, a
    corrupt input file, named), else an IngestError with Spark's first line."""
    from odf_chain.spark.sources import odf_error

    found = odf_error(exc)
    if found is not None:
        return found
    cause = _first_line(exc)
    if _MISSING_CONNECTOR.search(cause):
        cause += (
            " (this Spark has no Hadoop connector for the dataset's store: add it to the "
            "cluster's classpath, e.g. hadoop-aws for s3a://)"
        )
    return IngestError(f"Spark could not {step}: {cause}")


_MISSING_CONNECTOR = re.compile(
    r"No FileSystem for scheme|ClassNotFoundException: Class org\.apache\.hadoop\.fs\.\S+ not found"
)
# "SomeError: message", also as py4j prints a Java cause (": org.apache...SomeException: ...")
_CAUSE = re.compile(r"^\s*(?::\s*)?(?:[\w.$]+\.)?(\w+(?:Error|Exception)): (.+)$")


def _first_line(exc: BaseException) -> str:
    """What went wrong, in one line: Spark's wrappers ("An error occurred while calling
    o104.parquet.", "An exception was thrown from the Python worker") say where, not what; the
    last ``SomeError: message`` line of the text they carry does."""
    from odf_chain.spark.sources import printable

    lines = str(exc).strip().splitlines()
    causes = [m.group(1) + ": " + m.group(2) for m in map(_CAUSE.match, lines) if m]
    if causes:
        return printable(causes[-1])
    return printable(lines[0]) if lines else type(exc).__name__


def read(spark, dataset: str | Path | Dataset, at: str | int = "head"):
    """The dataset's data as of block ``at``: exactly the slices the chain names up to it."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from odf_chain.spark.sources import escape_glob

    if not isinstance(dataset, Dataset):
        dataset = Dataset.open(dataset)
    storage = dataset.storage
    state, found = slices_at(storage, at)
    names = [str(s.physical_hash) for s in found]
    # Spark follows symlinks and waits on FIFOs: what it is given is checked as verify reads
    # it (real directories, regular files of the dataset), each slice opened and closed once.
    storage.check_layout()
    for name in names:
        storage.open_data(name).close()
    if not names:
        if state.schema is None:
            raise NotFoundError(
                f"{dataset.location} has no schema at block {state.sequence_number}"
            )
        return spark.createDataFrame([], from_arrow_schema(state.schema))
    if not isinstance(storage.filesystem, pafs.LocalFileSystem):
        # Spark's own reader needs the store's Hadoop connector: read through Arrow instead
        use_this_python(spark)
        return read_in_tasks(
            spark, storage.filesystem, [storage.fs_path(f"data/{n}") for n in names], state.schema
        )
    paths = [escape_glob(storage.spark_uri(storage.fs_path(f"data/{name}"))) for name in names]
    # Read with the schema in force at that block: slices from before an evolution lack the
    # newer (nullable) columns, which then read as nulls.
    return spark.read.schema(from_arrow_schema(state.schema)).parquet(*paths)
