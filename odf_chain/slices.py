"""Data slices: system columns, stored types, the AddData of a slice, its logical hash.

:mod:`odf_chain.slice_writer` writes slices with them (:meth:`Dataset.write`); the Spark ingest
produces the same columns and the same content-addressed files at scale, and ``verify --deep``
recomputes the logical hash from the files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from odf_chain.errors import SchemaError
from odf_chain.events import AddData, DataSlice, OffsetInterval
from odf_chain.format.arrow_schema import check_schema
from odf_chain.format.multihash import HashingSink, Multihash
from odf_chain.state import DatasetState, Vocabulary

OFFSET_TYPE = pa.int64()
OPERATION_TYPE = pa.int32()
TIME_TYPE = pa.timestamp("ms", tz="UTC")
OP_APPEND = 0
OWN_METADATA_PREFIX = b"odf_chain."


def own_metadata(schema: pa.Schema) -> dict[bytes, bytes] | None:
    """The schema metadata odf_chain keeps (its own keys, e.g. the Avro writer schema); other
    tools' metadata (pandas' index description, Spark's row metadata) is not part of a
    dataset's schema."""
    kept = {k: v for k, v in (schema.metadata or {}).items() if k.startswith(OWN_METADATA_PREFIX)}
    return kept or None


def system_fields(vocab: Vocabulary) -> list[pa.Field]:
    return [
        pa.field(vocab.offset_column, OFFSET_TYPE, nullable=False),
        pa.field(vocab.operation_type_column, OPERATION_TYPE, nullable=False),
        pa.field(vocab.system_time_column, TIME_TYPE, nullable=False),
    ]


def with_system_fields(schema: pa.Schema, vocab: Vocabulary) -> pa.Schema:
    """A user schema with ODF's system columns in front (event time added if missing).

    The schema's limits (nesting depth, UTF-8 strings) are checked first: a schema nested
    hundreds of levels deep would otherwise cost gigabytes in the Parquet writer below.
    """
    check_schema(schema)
    if len(schema) == 0:
        raise SchemaError("the table has no columns")
    seen: set[str] = set()
    for name in schema.names:
        if name in seen:
            raise SchemaError(f"column {name!r} appears more than once")
        seen.add(name)
    reserved = set(vocab.system_columns)
    clashes = [f.name for f in schema if f.name in reserved]
    if clashes:
        raise SchemaError(
            f"column(s) {', '.join(clashes)} are reserved for ODF system columns; rename them"
        )
    fields = system_fields(vocab)
    if vocab.event_time_column in schema.names:
        event_time = schema.field(vocab.event_time_column)
        rest = [f for f in schema if f.name != vocab.event_time_column]
    else:
        event_time = pa.field(vocab.event_time_column, TIME_TYPE, nullable=False)
        rest = list(schema)
    return storable_schema(pa.schema([*fields, event_time, *rest], metadata=own_metadata(schema)))


def storable_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each type as a Parquet file stores it and reads it back.

    Parquet has no second-resolution timestamps or times and no date64: pyarrow writes them as
    milliseconds and date32. Declaring the stored types keeps the SetDataSchema equal to what the
    data files hold (verify checks that), and lets the same data be written again without a
    spurious schema change. A type Parquet cannot store at all is refused here, naming the column,
    before it can become the schema in force.
    """
    try:
        stored = parquet_round_trip(schema)
    except pa.ArrowException as whole:
        for field in schema:
            try:
                parquet_round_trip(pa.schema([field]))
            except pa.ArrowException as exc:
                raise SchemaError(
                    f"column {field.name!r} has type {field.type}, which Parquet cannot store "
                    f"({exc})"
                ) from None
        raise SchemaError(f"Parquet cannot store this schema: {whole}") from None
    fields = [
        f if f.type.equals(s.type) else f.with_type(s.type)
        for f, s in zip(schema, stored, strict=True)
    ]
    return pa.schema(fields, metadata=schema.metadata)


def parquet_round_trip(schema: pa.Schema) -> pa.Schema:
    """The schema a Parquet reader gives for a file written with ``schema``."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    return pq.read_schema(pa.BufferReader(sink.getvalue()))


def max_event_time(table: pa.Table, vocab: Vocabulary) -> datetime | None:
    """The latest event time in ``table``, as a block records it (None when there is none)."""
    column = table.column(vocab.event_time_column)
    if not pa.types.is_timestamp(column.type) and not pa.types.is_date(column.type):
        return None
    import pyarrow.compute as pc  # ~90 ms to import: only where a watermark is computed

    value = pc.max(column)
    if not value.is_valid:
        return None
    return event_time_moment(value, vocab.event_time_column)


def event_time_moment(value: pa.Scalar, column: str) -> datetime:
    """A valid timestamp or date scalar of the event time ``column`` as a block records it:
    an aware datetime, to the microsecond; a value outside that range is a SchemaError."""
    import pyarrow.compute as pc

    if pa.types.is_timestamp(value.type) and value.type.unit == "ns":
        # a datetime holds microseconds (as blocks do); as_py() refuses to drop nanoseconds
        value = pc.cast(value, pa.timestamp("us", tz=value.type.tz), safe=False)
    try:
        moment = (
            pc.cast(value, TIME_TYPE).as_py() if pa.types.is_date(value.type) else value.as_py()
        )
    except (OverflowError, ValueError, pa.ArrowException) as exc:
        raise SchemaError(
            f"column {column!r}: latest event time {value} is outside the "
            f"range blocks can record ({exc})"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def add_data_for(
    state: DatasetState,
    *,
    physical_hash: Multihash,
    logical_hash: Multihash,
    size: int,
    num_rows: int,
    watermark: datetime | None,
    extra: Mapping[str, Any] | None = None,
) -> AddData:
    """The AddData appending one slice of ``num_rows`` rows on top of ``state``: offsets go on
    from the last one, the checkpoint is carried, and the watermark never goes back."""
    if state.watermark is not None:
        watermark = max(watermark or state.watermark, state.watermark)
    start = state.next_offset
    return AddData(
        prev_checkpoint=state.last_checkpoint,
        prev_offset=state.last_offset,
        new_data=DataSlice(
            logical_hash=logical_hash,
            physical_hash=physical_hash,
            offset_interval=OffsetInterval(start, start + num_rows - 1),
            size=size,
        ),
        new_watermark=watermark,
        extra=extra,
    )


LOGICAL_BATCH_ROWS = 65_536
"""Rows per record batch in the stream that the logical hash digests."""


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with dictionary encoding replaced by the values it encodes (a Parquet reader
    builds dictionaries per row group, so their content depends on the file's layout)."""
    if pa.types.is_dictionary(t):
        return _plain_type(t.value_type)
    # view layouts are an in-memory choice (and Arrow's take has no kernel for them)
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        value = t.value_field.with_type(_plain_type(t.value_type))
        return pa.large_list(value) if pa.types.is_large_list_view(t) else pa.list_(value)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain_type(f.type)) for f in t])
    if pa.types.is_map(t):
        item = t.item_field
        return pa.map_(_plain_type(t.key_type), item.with_type(_plain_type(item.type)))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        value = t.value_field.with_type(_plain_type(t.value_type))
        if pa.types.is_fixed_size_list(t):
            return pa.list_(value, t.list_size)
        return pa.large_list(value) if pa.types.is_large_list(t) else pa.list_(value)
    return t


def _bytes_exact(column: pa.Array) -> bool:
    """True when the IPC writer gives the same bytes for ``column`` as for a fresh copy of it:
    no nulls (no validity bitmap is written, nothing hides under a null), fixed-width values,
    which the writer cuts to exactly the column's rows, and a whole number of 8-byte words (else
    the writer's padding comes from the bytes after the rows). Booleans (bits beside the rows'),
    strings and binaries (value bytes past the rows may be kept) and nested types are copied:
    tests/test_logical_hash.py shows the difference."""
    t = column.type
    if column.null_count or not (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return False
    return len(column) * t.bit_width % 64 == 0


def _holds_struct(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return True
    return any(_holds_struct(t.field(i).type) for i in range(t.num_fields))


def _nulls_pushed_down(array: pa.Array) -> pa.Array:
    """``array`` with every struct's nulls made nulls of its fields too, as a Parquet reader
    gives them (a file has no value for a field of a null struct); in memory the fields keep
    whatever they held, which would make the hash of the rows written differ from the hash of
    the rows read back."""
    t = array.type
    if not _holds_struct(t):
        return array
    if pa.types.is_struct(t):
        mask = array.is_null() if array.null_count else None
        children = array.flatten() if mask is not None else [array.field(i) for i in range(len(t))]
        return pa.StructArray.from_arrays(
            [_nulls_pushed_down(c) for c in children], fields=list(t), mask=mask
        )
    # lists, large lists, maps, fixed-size lists: the same offsets and validity over the
    # whole child (their ``values``, which ignore the slicing) with its nulls pushed down
    return pa.Array.from_buffers(
        t,
        len(array),
        array.buffers()[: 1 if pa.types.is_fixed_size_list(t) else 2],
        offset=array.offset,
        children=[_nulls_pushed_down(array.values)],
    )


class LogicalHasher:
    """odf_chain's logical hash of a slice, fed record batch by record batch.

    The hash is the digest of an Arrow IPC stream of the slice's rows: the schema without its
    metadata and with dictionaries decoded, then record batches of exactly
    :data:`LOGICAL_BATCH_ROWS` rows (the last one shorter), each copied into fresh buffers by
    Arrow's ``take``, which also zeroes the bytes under null values. The stream therefore
    depends only on the rows: not on how a Parquet file splits them into row groups, pages or
    read batches, not on its encoding or compression, and not on what a reader leaves under a
    null (a reader reuses its buffers, so those bytes can be the previous batch's values).
    A struct's nulls are pushed down into its fields first, as a Parquet reader does, so that
    the rows hash alike in memory and read back from a file.
    Memory stays bounded by one batch; the IPC bytes are never held (ODF's own arrow-digest
    algorithm is not implemented; this is not interchangeable with it).
    """

    def __init__(self, schema: pa.Schema, algorithm: str) -> None:
        plain = pa.schema([f.with_type(_plain_type(f.type)) for f in schema])
        self._schema = plain
        self._cast = not plain.equals(schema.remove_metadata())
        self._structs = [i for i, f in enumerate(plain) if _holds_struct(f.type)]
        self._sink = HashingSink(algorithm)
        self._file = pa.PythonFile(self._sink, mode="w")
        self._writer = pa.ipc.new_stream(self._file, plain)
        self._pending: list[pa.RecordBatch] = []
        self._count = 0
        self._indices = pa.array(range(LOGICAL_BATCH_ROWS), pa.int64())

    def update(self, batch: pa.RecordBatch) -> None:
        batch = batch.replace_schema_metadata(None)
        if self._cast:
            batch = batch.cast(self._schema)
        for i in self._structs:
            batch = batch.set_column(i, self._schema.field(i), _nulls_pushed_down(batch.column(i)))
        self._pending.append(batch)
        self._count += batch.num_rows
        while self._count >= LOGICAL_BATCH_ROWS:
            self._emit(LOGICAL_BATCH_ROWS)

    def _emit(self, n: int) -> None:
        rows = pa.Table.from_batches(self._pending, self._schema)
        head = rows.slice(0, n)
        chunks = head.to_batches()
        # one batch of n rows, whatever the input's batches: concat copies the rows when they
        # span several (a single one is only sliced: the IPC writer cuts buffers to the rows)
        batch = chunks[0] if len(chunks) == 1 else pa.concat_batches(chunks)
        # take copies a column into fresh buffers with zeros under nulls; a column without
        # nulls, of a type whose IPC bytes the writer cuts exactly to the rows, needs no copy
        indices = self._indices.slice(0, n)
        columns = [c if _bytes_exact(c) else c.take(indices) for c in batch.columns]
        self._writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=self._schema))
        rest = rows.slice(n)
        self._pending, self._count = rest.to_batches(), rest.num_rows

    def multihash(self) -> Multihash:
        """The hash of every row given; the hasher is finished afterwards."""
        if self._count:
            self._emit(self._count)
        self._writer.close()
        self._file.close()
        return self._sink.multihash()


def logical_hash(
    data: pa.Table | Iterable[pa.RecordBatch], algorithm: str, schema: pa.Schema | None = None
) -> Multihash:
    """The logical hash (see :class:`LogicalHasher`) of a table, or of record batches of
    ``schema``."""
    if isinstance(data, pa.Table):
        schema, data = data.schema, data.to_batches()
    if schema is None:
        raise TypeError("logical_hash of record batches needs their schema")
    hasher = LogicalHasher(schema, algorithm)
    for batch in data:
        hasher.update(batch)
    return hasher.multihash()


def read_batches(parquet: pq.ParquetFile) -> Iterator[pa.RecordBatch]:
    """A Parquet file's rows in batches of at most :data:`LOGICAL_BATCH_ROWS` rows, in bounded
    memory: about one row group's worth, never the file's. Each row group gets a reader of its
    own: one reader across the whole file keeps memory from row group to row group (its live
    allocations grew from 41 to 97 MB over 6 row groups of 1 Mi rows)."""
    for index in range(parquet.metadata.num_row_groups):
        yield from parquet.iter_batches(
            batch_size=LOGICAL_BATCH_ROWS, row_groups=[index], use_threads=False
        )


def parquet_logical_hash(parquet: pq.ParquetFile, algorithm: str) -> Multihash:
    """The logical hash of a Parquet file's rows, read in bounded memory: what writers record
    and what ``verify --deep`` recomputes."""
    return logical_hash(read_batches(parquet), algorithm, parquet.schema_arrow)


def os_reason(exc: OSError) -> str:
    """What the OS said, without pyarrow's wrapping ("[Errno 28] Error writing bytes to file.
    Detail: [errno 28] No space left on device")."""
    return os.strerror(exc.errno) if exc.errno else str(exc)
