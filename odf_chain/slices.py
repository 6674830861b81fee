"""Data slices: system columns, conforming a table to the schema in force, Parquet files.

Used by :meth:`Dataset.write` (small data, no Spark); the Spark ingest produces the same
columns and the same content-addressed files at scale.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from odf_chain.errors import SchemaError, StorageError
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
        stored = _parquet_round_trip(schema)
    except pa.ArrowException as whole:
        for field in schema:
            try:
                _parquet_round_trip(pa.schema([field]))
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


def _parquet_round_trip(schema: pa.Schema) -> pa.Schema:
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    return pq.read_schema(pa.BufferReader(sink.getvalue()))


def add_system_columns(
    table: pa.Table, vocab: Vocabulary, first_offset: int, system_time: datetime
) -> pa.Table:
    """Offsets ``first_offset…``, op = append, the transaction's system time, event time."""
    n = table.num_rows
    schema = with_system_fields(table.schema, vocab)
    time_value = pa.scalar(system_time, type=TIME_TYPE)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        vocab.offset_column: pa.array(range(first_offset, first_offset + n), type=OFFSET_TYPE),
        vocab.operation_type_column: pa.array([OP_APPEND] * n, type=OPERATION_TYPE),
        vocab.system_time_column: pa.repeat(time_value, n),
    }
    if vocab.event_time_column in table.schema.names:
        columns[vocab.event_time_column] = table.column(vocab.event_time_column)
    else:
        columns[vocab.event_time_column] = pa.repeat(time_value, n)
    for name in table.schema.names:
        columns.setdefault(name, table.column(name))
    arrays = [columns[f.name] for f in schema]
    # where the stored type differs (seconds -> ms, date64 -> date32), store what Parquet would
    return pa.Table.from_arrays(
        [_as_stored(a, f) for a, f in zip(arrays, schema, strict=True)], schema=schema
    )


def _as_stored(column: pa.Array | pa.ChunkedArray, field: pa.Field) -> pa.Array | pa.ChunkedArray:
    """Cast to the type Parquet stores, refusing any value the cast would change."""
    if column.type.equals(field.type):
        return column
    try:
        return column.cast(field.type, safe=True)
    except pa.ArrowInvalid as exc:
        raise SchemaError(
            f"column {field.name!r}: values of type {column.type} cannot be stored as "
            f"{field.type} without changing them ({exc})"
        ) from None


def conform(table: pa.Table, schema: pa.Schema | None) -> pa.Table:
    """Lay ``table`` out like the schema in force, so that writing the same shape of data twice
    does not look like a schema change.

    Columns are put in the schema's order, missing nullable columns are filled with nulls and
    new columns go after the known ones. A column without nulls keeps a required field required.
    Type differences are left alone: the evolution rules judge them.
    """
    if schema is None:
        return table
    columns: list[pa.ChunkedArray | pa.Array] = []
    fields: list[pa.Field] = []
    for field in schema:
        if field.name in table.schema.names:
            column = table.column(field.name)
            if column.type.equals(field.type):
                nullable = field.nullable or column.null_count > 0
                fields.append(field.with_nullable(nullable))
            else:
                fields.append(table.schema.field(field.name))
            columns.append(column)
        elif field.nullable:
            fields.append(field)
            columns.append(pa.nulls(table.num_rows, type=field.type))
    for field in table.schema:
        if field.name not in schema.names:
            fields.append(field)
            columns.append(table.column(field.name))
    metadata = own_metadata(table.schema) or schema.metadata
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=metadata))


def max_event_time(table: pa.Table, vocab: Vocabulary) -> datetime | None:
    column = table.column(vocab.event_time_column)
    if not pa.types.is_timestamp(column.type) and not pa.types.is_date(column.type):
        return None
    value = pc.max(column)
    if not value.is_valid:
        return None
    if pa.types.is_timestamp(column.type) and column.type.unit == "ns":
        # a datetime holds microseconds (as blocks do); as_py() refuses to drop nanoseconds
        value = pc.cast(value, pa.timestamp("us", tz=column.type.tz), safe=False)
    try:
        moment = (
            pc.cast(value, TIME_TYPE).as_py() if pa.types.is_date(column.type) else value.as_py()
        )
    except (OverflowError, ValueError, pa.ArrowException) as exc:
        raise SchemaError(
            f"column {vocab.event_time_column!r}: latest event time {value} is outside the "
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


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A Parquet file in staging, hashed and counted, ready to be committed under its hash."""

    path: str
    physical_hash: Multihash
    logical_hash: Multihash
    size: int
    num_rows: int


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


class LogicalHasher:
    """odf_chain's logical hash of a slice, fed record batch by record batch.

    The hash is the digest of an Arrow IPC stream of the slice's rows: the schema without its
    metadata and with dictionaries decoded, then record batches of exactly
    :data:`LOGICAL_BATCH_ROWS` rows (the last one shorter), each copied into fresh buffers by
    Arrow's ``take``, which also zeroes the bytes under null values. The stream therefore
    depends only on the rows: not on how a Parquet file splits them into row groups, pages or
    read batches, not on its encoding or compression, and not on what a reader leaves under a
    null (a reader reuses its buffers, so those bytes can be the previous batch's values).
    Memory stays bounded by one batch; the IPC bytes are never held (ODF's own arrow-digest
    algorithm is not implemented; this is not interchangeable with it).
    """

    def __init__(self, schema: pa.Schema, algorithm: str) -> None:
        plain = pa.schema([f.with_type(_plain_type(f.type)) for f in schema])
        self._schema = plain
        self._cast = not plain.equals(schema.remove_metadata())
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
        self._pending.append(batch)
        self._count += batch.num_rows
        while self._count >= LOGICAL_BATCH_ROWS:
            self._emit(LOGICAL_BATCH_ROWS)

    def _emit(self, n: int) -> None:
        rows = pa.Table.from_batches(self._pending, self._schema)
        # concat copies the rows into one batch; take copies them again with zeros under nulls
        batch = pa.concat_batches(rows.slice(0, n).to_batches())
        self._writer.write_batch(batch.take(self._indices.slice(0, n)))
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


def _reason(exc: OSError) -> str:
    """What the OS said, without pyarrow's wrapping ("[Errno 28] Error writing bytes to file.
    Detail: [errno 28] No space left on device")."""
    return os.strerror(exc.errno) if exc.errno else str(exc)


def write_parquet(
    table: pa.Table, path: str, algorithm: str, filesystem: pafs.FileSystem, *, dataset: str
) -> WrittenFile:
    """Write ``table`` as one Parquet file at ``path`` of ``filesystem``, and hash it as
    stored: the physical hash of its bytes, the logical hash of the rows read back from it (so
    that both are the hashes ``verify --deep`` recomputes from the file).

    A filesystem that refuses (full, read-only, no permission) is a :class:`StorageError`
    naming ``dataset`` and ``path``.
    """
    try:
        pq.write_table(table, path, compression="zstd", filesystem=filesystem)
        with filesystem.open_input_stream(path) as fh:
            physical, size = Multihash.digest_stream(algorithm, fh)
        with filesystem.open_input_file(path) as fh:
            logical = parquet_logical_hash(pq.ParquetFile(fh), algorithm)
    except OSError as exc:
        raise StorageError(
            f"dataset {dataset}: cannot write the data slice {path}: {_reason(exc)}"
        ) from exc
    except pa.ArrowException as exc:
        raise SchemaError(f"cannot write the slice as Parquet: {exc}") from None
    return WrittenFile(path, physical, logical, size, table.num_rows)
