"""Data slices: system columns, conforming a table to the schema in force, Parquet files.

Used by :meth:`Dataset.write` (small data, no Spark); the Spark ingest produces the same
columns and the same content-addressed files at scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from odf_chain.errors import SchemaError, StorageError
from odf_chain.events import AddData, DataSlice, OffsetInterval
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
    """A user schema with ODF's system columns in front (event time added if missing)."""
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


def logical_hash(table: pa.Table, algorithm: str) -> Multihash:
    """odf_chain's logical hash: the digest of the Arrow IPC stream of the slice's data.

    Independent of Parquet encoding and compression, so re-encoding a slice keeps it. (ODF's
    own arrow-digest algorithm is not implemented; this is not interchangeable with it.)
    """
    hashing = HashingSink(algorithm)  # streamed: the IPC bytes are never held in memory
    schema = table.schema.remove_metadata()
    with pa.PythonFile(hashing, mode="w") as sink, pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(table.replace_schema_metadata(None).combine_chunks())
    return hashing.multihash()


def write_parquet(
    table: pa.Table, path: str, algorithm: str, filesystem: pafs.FileSystem
) -> WrittenFile:
    """Write ``table`` as one Parquet file at ``path`` of ``filesystem``, and hash it as
    stored."""
    try:
        pq.write_table(table, path, compression="zstd", filesystem=filesystem)
    except pa.ArrowException as exc:
        raise SchemaError(f"cannot write the slice as Parquet: {exc}") from None
    try:
        with filesystem.open_input_stream(path) as fh:
            physical, size = Multihash.digest_stream(algorithm, fh)
    except OSError as exc:  # gone meanwhile (gc took a staged file), or unreadable
        raise StorageError(f"cannot read back the slice just written to {path}: {exc}") from None
    return WrittenFile(path, physical, logical_hash(table, algorithm), size, table.num_rows)
