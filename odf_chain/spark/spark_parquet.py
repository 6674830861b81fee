"""The ``writer="spark"`` path of the write (:mod:`odf_chain.spark.write_frame`): Spark's own
Parquet writer writes the slices through the store's Hadoop connector, then a task per file
hashes it and reads its offsets back from the Parquet statistics.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from odf_chain.format.multihash import Multihash
from odf_chain.spark.declared import _schema_to_declare
from odf_chain.spark.errors import _spark_failure
from odf_chain.spark.file_checks import WrittenSlice, _check_files
from odf_chain.spark.offsets import _assign_offsets
from odf_chain.spark.sizing import PlannedSlice
from odf_chain.state import DatasetState

_PART = re.compile(r"^part-(\d+)-.*\.parquet$")
_FILE_NUMBER = re.compile(r"-c(\d+)\.")  # part-00003-<job uuid>-c001.zstd.parquet: 2nd file


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
