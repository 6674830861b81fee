"""How a Spark write's rows become slices, decided before anything is written.

Every slice costs an AddData block and a file that every reader opens, so one tiny file per
shuffle partition (a 100-row aggregate over 200 partitions) multiplies the chain and slows
every read; a slice far above the target makes a reader fetch much to read a little. The
writer aims at ``target_slice_bytes`` of Parquet per slice: it merges small partitions and cuts
big ones, and plans each slice as a contiguous group of rows of one partition with its offset
range, so the per-file check (and a writer other than Spark's) can follow the plan exactly.

The size of the output is estimated, not known: rows (counted exactly, per partition) times
bytes per row, measured by writing a small sample to Parquet in memory. Catalyst's
``sizeInBytes`` is no help after joins and aggregates (it multiplies or keeps input sizes), and
Spark Connect has no plan to ask.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from odf_chain.errors import OdfChainError
from odf_chain.events import OffsetInterval

DEFAULT_TARGET_SLICE_BYTES = 256 * 1024 * 1024
MIN_TARGET_SLICE_BYTES = 1024  # smaller targets would make a slice (and a block) per few rows
SAMPLE_ROWS = 1000
ARROW_BATCH_BYTES = 16 * 1024 * 1024
"""Arrow memory per batch of rows a Spark task gets, estimated from the sample: a quarter of
Spark's own ``maxBytesPerBatch`` (64 MiB), since the sample gives an average row, not the
widest. Spark checks that limit by asking the batch its size after every row, which for a
struct column walks all its children each time: most of a task's time in
``tools/bench_ingest.py``. The writer sizes batches by rows instead (see
:func:`arrow_batch_rows`) and turns that check off for its job."""
# A partition is cut only when its estimate exceeds the target by a quarter: estimates are
# rough, and cutting a partition of 1.05x the target leaves a sliver of a file behind.
SPLIT_SLACK = 1.25

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


class SliceSizeError(OdfChainError, ValueError):
    """A target slice size that is not a size (zero, negative, unparsable, too small)."""


def target_slice_bytes(value: int | str | None) -> int | None:
    """``value`` as a number of bytes, checked before any job runs: an int, or a string such
    as ``"268435456"``, ``"256MiB"``, ``"1.5GB"``; None keeps one slice per partition."""
    if value is None:
        return None
    if isinstance(value, str):
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise SliceSizeError(
                f"target slice size {value!r} is not a size: give bytes (268435456) or a number "
                "with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 256MiB"
            )
        number = int(float(match.group(1)) * _UNITS[unit])
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise SliceSizeError(
            f"target_slice_bytes takes a number of bytes, found {type(value).__name__} {value!r}"
        )
    if number < MIN_TARGET_SLICE_BYTES:
        raise SliceSizeError(
            f"target slice size {value!r} is too small: it must be at least "
            f"{MIN_TARGET_SLICE_BYTES} bytes (1 KiB)"
        )
    return number


@dataclass(frozen=True, slots=True)
class PlannedSlice:
    """One slice to write: the ``index``-th file of partition ``partition``, its offsets."""

    partition: int
    index: int
    interval: OffsetInterval

    @property
    def rows(self) -> int:
        return self.interval.end - self.interval.start + 1


def merge_to(counts: Mapping[int, int], bytes_per_row: float, target: int) -> int | None:
    """How many partitions to coalesce the input into (None: keep its partitions), so that
    merged partitions hold about ``target`` bytes each."""
    non_empty = sum(1 for n in counts.values() if n)
    wanted = max(1, math.ceil(sum(counts.values()) * bytes_per_row / target))
    return wanted if wanted < non_empty else None


def records_per_file(counts: Mapping[int, int], bytes_per_row: float, target: int) -> int:
    """Rows per file (Spark's ``maxRecordsPerFile``; 0: one file per partition).

    Spark takes one number for all partitions: it is chosen to cut the largest partition into
    equal files of at most about ``target`` bytes, so a uniformly partitioned input (ranges,
    hash shuffles, file splits) gives equal slices."""
    largest = max(counts.values(), default=0)
    if largest * bytes_per_row <= target * SPLIT_SLACK:
        return 0
    files = math.ceil(largest * bytes_per_row / target)
    return max(1, math.ceil(largest / files))


def planned_slices(
    counts: Mapping[int, int], first_offset: int, records: int
) -> list[PlannedSlice]:
    """The slices a write makes, in offset order: each non-empty partition's rows from its
    first offset (prefix sums, by partition number), cut every ``records`` rows when set."""
    planned = []
    start = first_offset
    for partition in range(max(counts, default=-1) + 1):
        rows = counts.get(partition, 0)
        step = records or rows
        for index, low in enumerate(range(0, rows, step or 1)):
            high = min(rows, low + step)
            planned.append(
                PlannedSlice(partition, index, OffsetInterval(start + low, start + high - 1))
            )
        start += rows
    return planned


@dataclass(frozen=True, slots=True)
class RowBytes:
    """Bytes per row: in zstd Parquet (what slices are sized by) and in Arrow memory (what a
    batch of rows handed to a Spark task holds); ``sampled`` is False for the estimate from
    the types alone, which says little about memory (a string is 20 bytes to it)."""

    parquet: float
    memory: float
    sampled: bool = True


def bytes_per_row(df, counts: Mapping[int, int] | None) -> RowBytes:
    """Bytes per row of ``df`` (plus an int64 offset column), from a sample of its first rows
    written to Parquet (zstd, as the writer's files) in memory: no more rows than
    :func:`sample_rows` finds in the first partitions, or :data:`SAMPLE_ROWS` when the counts
    are not known yet. A frame whose rows cannot be sampled (types without an Arrow form) falls
    back on Spark's own default sizes per type."""
    try:
        return sampled_bytes_per_row(df, SAMPLE_ROWS if counts is None else sample_rows(counts))
    except Exception:  # odd types (UDTs, intervals, variants): a static estimate will do
        return _static(df.schema)


def sampled_bytes_per_row(df, wanted: int) -> RowBytes:
    """Bytes per row of ``df``'s first ``wanted`` rows (Spark's failures raised).

    The difference between the sample and its first row discounts per-column-chunk overhead,
    which a small sample would otherwise spread over few rows."""
    from pyspark.sql.pandas.types import to_arrow_schema

    rows = df.limit(wanted).collect()
    schema = to_arrow_schema(df.schema, timezone="UTC")
    table = pa.Table.from_pylist([r.asDict(recursive=True) for r in rows], schema=schema)
    if table.num_rows == 0:
        return _static(df.schema)
    table = table.append_column("offset", pa.array(range(table.num_rows), pa.int64()))
    memory = max(table.nbytes / table.num_rows, 1.0)
    whole = _parquet_data_bytes(table)
    if table.num_rows == 1:
        return RowBytes(max(whole, 1.0), memory)
    one = _parquet_data_bytes(table.slice(0, 1))
    return RowBytes(max((whole - one) / (table.num_rows - 1), 0.1), memory)


def _static(schema) -> RowBytes:
    size = schema_row_bytes(schema)
    return RowBytes(size, size, sampled=False)


def arrow_batch_rows(row: RowBytes, limit: int) -> int:
    """Rows per Arrow batch Spark hands a task, so that a batch of rows as wide as the sample's
    holds about :data:`ARROW_BATCH_BYTES`; at most ``limit`` (Spark's ``maxRecordsPerBatch``)."""
    return max(1, min(limit, int(ARROW_BATCH_BYTES / row.memory)))


def sample_rows(counts: Mapping[int, int]) -> int:
    """How many rows to sample: ``limit(n).collect()`` scans partitions in rounds from the
    first (1, then 4 more, then 20 more: Spark's default scale-up), one job each, until it has
    ``n`` rows, and a shuffle leaves many partitions small or empty. So the sample asks for no
    more rows than the first rounds' partitions hold (the counts say how many), stopping at
    the first round that holds a tenth of the wanted sample: one task when the first
    partition is big enough, a few small jobs at most otherwise."""
    total = sum(counts.values())
    enough = max(1, min(SAMPLE_ROWS, total) // 10)
    last = max(counts, default=0)
    scanned = 1
    while True:
        rows = sum(n for p, n in counts.items() if p < scanned)
        if rows >= enough or scanned > last:
            return max(1, min(SAMPLE_ROWS, rows))
        scanned *= 5


def _parquet_data_bytes(table: pa.Table) -> float:
    """Compressed bytes of ``table``'s column chunks (no footer) in a zstd Parquet file."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    metadata = pq.ParquetFile(pa.BufferReader(buffer.getvalue())).metadata
    return float(
        sum(
            metadata.row_group(g).column(c).total_compressed_size
            for g in range(metadata.num_row_groups)
            for c in range(metadata.num_columns)
        )
    )


def schema_row_bytes(schema) -> float:
    """Bytes per row from the types alone (Spark's ``defaultSize``s), plus the offset."""
    from pyspark.sql import types as T

    def size(t) -> int:
        if isinstance(t, T.StructType):
            return sum(size(f.dataType) for f in t.fields)
        if isinstance(t, T.ArrayType):
            return size(t.elementType)
        if isinstance(t, T.MapType):
            return size(t.keyType) + size(t.valueType)
        if isinstance(t, T.StringType):
            return 20
        if isinstance(t, T.BinaryType):
            return 100
        if isinstance(t, T.BooleanType | T.ByteType):
            return 1
        if isinstance(t, T.ShortType):
            return 2
        if isinstance(t, T.IntegerType | T.FloatType | T.DateType):
            return 4
        if isinstance(t, T.DecimalType):
            return 8 if t.precision <= 18 else 16
        return 8

    return float(8 + size(schema))
