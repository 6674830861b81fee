"""Slices written and read inside the Spark tasks, through Arrow: each task writes its planned
slices straight to the dataset's store and sends the driver only their facts.

Spark's own Parquet writer needs a Hadoop connector for the store (``hadoop-aws`` for S3, which
no Python package ships) and leaves the files to be read back for their hashes. Here a task
gets its partition's rows as Arrow record batches (``mapInArrow``), feeds them to
:func:`odf_chain.slice_writer.write_slices` over a ``pyarrow.fs`` output stream (local path,
``s3://``, ``gs://``, ``abfs://``), hashes the bytes on their way out and the batches on their
way in, and returns one small row per slice: where it is, its hashes, size, rows, offsets and
latest event time. Nothing is read back.

The slice plan (:mod:`odf_chain.spark.sizing`) says which rows of which partition go to which
slice with which offsets; a task writes exactly that and numbers the rows itself (the offsets
are an ``arange`` from the planned start, never a column computed by Spark). A task that finds
more rows than counted reports the surplus instead of writing it, so the driver's per-slice check
(:func:`odf_chain.spark.file_checks._check_files`) sees every difference between the count and the
write.

The schema every task writes is decided on the driver before the job, from the DataFrame's
Spark schema: the types Spark's own Parquet writer would store (timestamps in milliseconds,
lists of ``element``), laid out like the schema in force, user columns nullable unless the
schema in force says otherwise. A dataset written by either writer therefore declares the same
schema and the same logical hashes for the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.fs as pafs

from odf_chain.errors import SchemaError, StorageError
from odf_chain.slice_writer import SliceSpec, write_slices
from odf_chain.slices import os_reason
from odf_chain.spark.arrow_reads import ArrowRead, remember
from odf_chain.spark.sizing import PlannedSlice

_FACTS_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("partition", pa.int32()),
        ("file_number", pa.int32()),
        ("physical_hash", pa.string()),
        ("logical_hash", pa.string()),
        ("size", pa.int64()),
        ("num_rows", pa.int64()),
        ("offset_min", pa.int64()),
        ("offset_max", pa.int64()),
        ("max_event_time_us", pa.int64()),
    ]
)
_DDL_TYPES = {pa.string(): "string", pa.int32(): "int", pa.int64(): "long"}
FACTS_DDL = ", ".join(f"{f.name} {_DDL_TYPES[f.type]}" for f in _FACTS_SCHEMA)
_EPOCH = datetime.fromtimestamp(0, UTC)
SURPLUS = -1
"""``file_number`` of the row a task sends for rows it found beyond its plan (not written)."""


@dataclass(frozen=True, slots=True)
class TaskSlice:
    """One slice a task wrote (or, with ``file_number == SURPLUS``, rows it did not expect)."""

    path: str
    partition: int
    file_number: int
    physical_hash: str
    logical_hash: str
    size: int
    num_rows: int
    offset_min: int | None
    offset_max: int | None
    max_event_time_us: int | None

    @property
    def max_event_time(self) -> datetime | None:
        if self.max_event_time_us is None:
            return None
        return _EPOCH + timedelta(microseconds=self.max_event_time_us)


# -- the schema the tasks write --------------------------------------------------------------


def stored_arrow_type(t: pa.DataType) -> pa.DataType:
    """The Arrow type a Spark column of Arrow type ``t`` is stored as: what Spark's Parquet
    writer gives with ``outputTimestampType=TIMESTAMP_MILLIS`` (timestamps in milliseconds in
    "UTC"; ``timestamp_ntz`` keeps its microseconds, that setting does not apply to it), lists
    of ``element``, nested types likewise."""
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp("ms", tz="UTC")
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(stored_arrow_type(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(stored_arrow_type(t.key_type)),
            t.item_field.with_type(stored_arrow_type(t.item_type)),
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field
        return pa.list_(pa.field("element", stored_arrow_type(item.type), item.nullable))
    return t


def arrow_schema_of(spark_schema) -> pa.Schema:
    """The Arrow schema of a Spark schema's rows as stored (see :func:`stored_arrow_type`)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    fields = []
    for field in spark_schema.fields:
        try:
            (arrow,) = to_arrow_schema(StructType([field]), timezone="UTC")
        except Exception as exc:  # PySparkTypeError: intervals of months, CHAR/VARCHAR, UDTs
            raise SchemaError(
                f"column {field.name!r} has Spark type {field.dataType.simpleString()}, which "
                "has no Arrow form for the tasks to write: cast it (to a string, say), or pass "
                f"writer='spark' ({type(exc).__name__})"
            ) from None
        fields.append(arrow.with_type(stored_arrow_type(arrow.type)))
    return pa.schema(fields)


# -- the task ------------------------------------------------------------------------------------


ROW_GROUP_BYTES = 64 * 1024 * 1024
"""In-memory bytes of a row group a task gathers before writing it (at most the slice writer's
1 Mi rows): a task's memory stays bounded however wide the rows (Spark does not bound the Python
side of a task)."""


class _Rows:
    """A partition's record batches, handed out ``n`` rows at a time."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self._held: pa.RecordBatch | None = None

    def bytes_per_row(self) -> float:
        """In-memory bytes per row of the first batch (read ahead and held), 0 when empty."""
        batch = self._next()
        if batch is None:
            return 0.0
        self._held = batch
        return batch.nbytes / batch.num_rows

    def take(self, n: int) -> Iterator[pa.RecordBatch]:
        while n > 0:
            batch = self._next()
            if batch is None:
                return
            if batch.num_rows > n:
                self._held = batch.slice(n)
                batch = batch.slice(0, n)
            n -= batch.num_rows
            yield batch

    def remaining(self) -> int:
        count = 0
        while (batch := self._next()) is not None:
            count += batch.num_rows
        return count

    def _next(self) -> pa.RecordBatch | None:
        if self._held is not None:
            batch, self._held = self._held, None
            return batch
        for batch in self._batches:
            if batch.num_rows:
                return batch
        return None


def write_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    partition: int,
    attempt: int,
    plan: Sequence[PlannedSlice],
    spec: SliceSpec,
    filesystem: pafs.FileSystem,
    folder: str,
    dataset: str = "",
) -> list[TaskSlice]:
    """Write one partition's rows as its planned slices into ``folder``; return their facts.
    A store's refusal is a :class:`StorageError` naming ``dataset`` and the file.

    Each slice is a file of its own, named by partition, slice and task attempt (a retried or
    speculative attempt never writes over another's file; the driver keeps the files of the
    attempts whose results it got, and the staging folder goes with the rest).
    """
    where = f"dataset {dataset}: " if dataset else ""
    rows = _Rows(batches)
    if plan and (width := rows.bytes_per_row()):
        fitting = max(1024, int(ROW_GROUP_BYTES / width))
        spec = replace(spec, row_group_rows=min(spec.row_group_rows, fitting))
    found: list[TaskSlice] = []
    for planned in plan:
        path = f"{folder}/part-{partition:05d}-{planned.index:04d}-a{attempt}.parquet"
        sinks = []

        def open_sink(_: int, path: str = path, sinks: list = sinks):
            sinks.append(filesystem.open_output_stream(path, compression=None))
            return sinks[-1]

        try:
            try:
                written = write_slices(
                    rows.take(planned.rows),
                    replace(spec, first_offset=planned.interval.start, target_slice_bytes=None),
                    open_sink,
                )
            finally:
                for sink in sinks:
                    sink.close()
        except OSError as exc:  # the store refused (a full disk, no permission): say which file
            raise StorageError(f"{where}Spark could not write {path}: {os_reason(exc)}") from None
        for facts in written:  # none when the partition ran out of rows before this slice
            moment = facts.max_event_time
            found.append(
                TaskSlice(
                    path,
                    partition,
                    planned.index,
                    str(facts.physical_hash),
                    str(facts.logical_hash),
                    facts.size,
                    facts.num_rows,
                    facts.offsets.start,
                    facts.offsets.end,
                    None if moment is None else _to_microseconds(moment),
                )
            )
    surplus = rows.remaining()
    if surplus:
        found.append(TaskSlice("", partition, SURPLUS, "", "", 0, surplus, None, None, None))
    return found


def _to_microseconds(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def write_in_tasks(
    df,
    planned: Sequence[PlannedSlice],
    spec: SliceSpec,
    filesystem: pafs.FileSystem,
    folder: str,
    dataset: str = "",
) -> list[TaskSlice]:
    """Run :func:`write_partition` in a Spark task per partition of ``df`` (its columns are the
    slice's user columns and event time; the writer builds the system columns) and collect
    the facts. Works on a classic session and under Spark Connect alike."""
    # Spark's Python map operators parse the column names, and fail on some a DataFrame may
    # hold (a backtick, say): the batches cross under positional names and get theirs back here
    names = list(df.columns)
    positional = df.toDF(*[f"_{i}" for i in range(len(names))])
    by_partition: dict[int, list[PlannedSlice]] = {}
    for p in planned:
        by_partition.setdefault(p.partition, []).append(p)
    plans: Mapping[int, list[PlannedSlice]] = by_partition

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId()
        found = write_partition(
            (batch.rename_columns(names) for batch in batches),
            partition=partition,
            attempt=context.attemptNumber(),
            plan=plans.get(partition, ()),
            spec=spec,
            filesystem=filesystem,
            folder=folder,
            dataset=dataset,
        )
        if found:
            rows = [{name: getattr(f, name) for name in _FACTS_SCHEMA.names} for f in found]
            yield pa.RecordBatch.from_pylist(rows, schema=_FACTS_SCHEMA)

    rows = positional.mapInArrow(task, FACTS_DDL).collect()
    return [TaskSlice(**row.asDict()) for row in rows]


# -- reading slices in tasks ---------------------------------------------------------------------


def _conform(batch: pa.RecordBatch, target: pa.Schema, path: str) -> pa.RecordBatch:
    """``batch`` (of the slice at ``path``) with ``target``'s columns, in its order and types (a
    column the slice lacks, from before an evolution, is nulls). A value the cast would change
    (a timestamp with nanoseconds, which Spark keeps in microseconds) is refused, named."""
    names = set(batch.schema.names)
    columns = []
    for f in target:
        if f.name not in names:
            columns.append(pa.nulls(len(batch), f.type))
            continue
        try:
            columns.append(batch.column(f.name).cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                f"{path}: column {f.name!r} cannot be given to Spark as {f.type} without "
                f"changing a value ({exc}): read the dataset with Dataset.to_table() instead"
            ) from None
    return pa.RecordBatch.from_arrays(columns, schema=target)


def read_in_tasks(
    spark,
    filesystem: pafs.FileSystem,
    paths: Sequence[str],
    schema: pa.Schema,
    uris: Sequence[str] | None = None,
):
    """A DataFrame of the Parquet slices at ``paths`` read with ``schema`` (the schema in force),
    a Spark task per slice reading it through ``pyarrow.fs``, batch by batch: no Hadoop
    connector needed for the store (what :func:`odf_chain.spark.read` uses on object stores,
    and for timestamps in nanoseconds). ``uris``: the slices as Spark's own reader would name
    them, so field lineage sees the read as a scan of them (:mod:`arrow_reads`)."""
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    spark_schema = from_arrow_schema(schema)
    names = list(spark_schema.names)
    positional = spark_schema
    for i, field in enumerate(positional.fields):  # see write_in_tasks: names cross by position
        field.name = f"_{i}"
    target = to_arrow_schema(positional, timezone="UTC")  # the types Spark takes from Arrow
    target = pa.schema([f.with_name(n) for f, n in zip(target, names, strict=True)])

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for path in batch.column(0).to_pylist():
                with filesystem.open_input_file(path) as source:
                    for rows in pq.ParquetFile(source).iter_batches():
                        conformed = _conform(rows, target, path)
                        yield conformed.rename_columns([f"_{i}" for i in range(len(names))])

    listed = spark.createDataFrame([(path,) for path in paths], "path string")
    frame = listed.repartition(max(len(paths), 1)).mapInArrow(task, positional)
    if uris is not None:
        remember(frame, ArrowRead(tuple(uris), tuple(names)))
    return frame.toDF(*names)
