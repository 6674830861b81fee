"""The one-pass slice writer: record batches in, Parquet slices and their facts out.

Everything a slice's AddData records is computed while the slice is written, never by reading
it back: the physical hash from the bytes on their way to the sink, the logical hash from the
batches on their way to the Parquet writer, the row count, the offset range and the latest event
time alongside. The system columns are built per row group with numpy (an ``arange`` for the
offsets, constants for ``op`` and ``system_time``), so memory holds one row group of them, not
the table's. The input is laid out like the slice's schema by a plan computed once per input
schema, by name lookups in a dict: O(columns), whatever the width.

It knows nothing of datasets or chains: :meth:`Dataset.write` gives it staged files, and a Spark
task can give it the batches ``mapInArrow`` hands over and a sink on an object store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from odf_chain.errors import SchemaError
from odf_chain.events import OffsetInterval
from odf_chain.format.multihash import HashingSink, Multihash
from odf_chain.schema.widening import widened
from odf_chain.slices import (
    OP_APPEND,
    OPERATION_TYPE,
    TIME_TYPE,
    LogicalHasher,
    event_time_moment,
    own_metadata,
    with_system_fields,
)
from odf_chain.state import Vocabulary

ROW_GROUP_ROWS = 1 << 20
"""Rows per Parquet row group: pyarrow's own default, so a slice is laid out as
``pq.write_table`` would lay it out; also how far past ``target_slice_bytes`` a slice can go."""

_CONSTANT_ROWS = 1 << 16
"""Rows in the one chunk of ``op`` and ``system_time`` values a row group repeats."""

DICTIONARY_PAGE_BYTES = 128 * 1024
"""Dictionary bytes per column chunk past which the Parquet writer gives up on a column's
dictionary and writes the rest of the chunk plain (pyarrow's default: 1 MiB). A column of few
distinct values (a station, a country, a status) fits in far less; a column of mostly distinct
ones (ids, measurements, hashes) never pays off, and until the writer gives up it hashes every
value into the dictionary and writes its pages: with 1 MiB that was a third of the writing time
of ``tools/bench_ingest.py``'s rows, and their files came out 4% larger (356 MB against
341 MB)."""

_SINK_BUFFER = 1 << 20
"""Bytes gathered before they cross into Python to be hashed and written: the Parquet writer
emits many small pieces (page headers, statistics), each would be a call otherwise."""


# -- the slice's schema ------------------------------------------------------------------------


def slice_schema(
    schema: pa.Schema,
    in_force: pa.Schema | None,
    vocab: Vocabulary,
    *,
    with_nulls: Collection[str] = (),
) -> pa.Schema:
    """The schema of a slice written from data of ``schema``, laid out like ``in_force``, so
    that writing the same shape of data twice does not look like a schema change.

    System columns go in front (event time added if missing), each type as Parquet stores it
    (see :func:`~odf_chain.slices.storable_schema`). Then the columns take the order of the
    schema in force; a missing nullable column is filled with nulls; a new column goes after the
    known ones. A column of the known type keeps the field in force, made nullable only if it
    holds nulls (``with_nulls`` names the columns that do). A column of a type that widens into
    the known one (:mod:`odf_chain.schema.widening`: int32 into int64, ...) takes the known
    type, and is cast to it as it is written; a column of another type keeps its own field, for
    the writers to refuse (:func:`~odf_chain.schema.widening.refuse_narrowing`).
    """
    full = with_system_fields(schema, vocab)
    if in_force is None:
        return full
    given = {f.name: f for f in full}
    fields: list[pa.Field] = []
    for field in in_force:
        column = given.get(field.name)
        if column is None:
            if field.nullable:
                fields.append(field)
        elif column.type.equals(field.type):
            fields.append(field.with_nullable(field.nullable or field.name in with_nulls))
        elif (adopted := widened(column.type, field.type))[1]:
            fields.append(column)  # a narrower or other type: refused by the writers' check
        elif adopted[0].equals(field.type):  # widens into the declared type: cast on write
            fields.append(field.with_nullable(field.nullable or field.name in with_nulls))
        else:  # widens member by member, with new members (for the new-column check)
            fields.append(column.with_type(adopted[0]))
    known = set(in_force.names)
    fields.extend(f for f in full if f.name not in known)
    metadata = own_metadata(schema) or in_force.metadata
    return pa.schema(fields, metadata=metadata)


# -- options and facts ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SliceSpec:
    """What to write: the slice's ``schema`` (from :func:`slice_schema`: system columns
    first), the vocabulary naming those columns, the first offset, the transaction's system
    time, the hash algorithm, the codec, and when to roll over to a new slice."""

    schema: pa.Schema
    vocab: Vocabulary
    first_offset: int
    system_time: datetime
    algorithm: str
    compression: str = "zstd"
    row_group_rows: int = ROW_GROUP_ROWS
    dictionary_page_bytes: int = DICTIONARY_PAGE_BYTES
    target_slice_bytes: int | None = None  # None: one slice, however large
    changelog: bool = False  # the input carries its own ``op`` column (a derivative's run)

    def __post_init__(self) -> None:
        if self.row_group_rows < 1:
            raise ValueError(f"row_group_rows must be positive, got {self.row_group_rows}")
        if self.target_slice_bytes is not None and self.target_slice_bytes < 1:
            raise ValueError(f"target_slice_bytes must be positive, got {self.target_slice_bytes}")


@dataclass(frozen=True, slots=True)
class SliceFacts:
    """One written slice, as its AddData records it (the sink holds the bytes)."""

    physical_hash: Multihash
    logical_hash: Multihash
    size: int
    num_rows: int
    offsets: OffsetInterval
    max_event_time: datetime | None


# -- the physical hash on the way out ------------------------------------------------------------


class _HashingWriter:
    """Passes bytes through to ``sink`` and hashes them on the way: the physical hash of the
    file without reading the file."""

    def __init__(self, sink: BinaryIO, algorithm: str) -> None:
        self._sink = sink
        self._hash = HashingSink(algorithm)
        self.closed = False

    def write(self, data: Any) -> int:
        self._sink.write(data)
        return self._hash.write(data)

    def tell(self) -> int:
        return self._hash.size

    def flush(self) -> None:
        self._sink.flush()

    def close(self) -> None:  # the sink is its owner's to close
        self.closed = True

    def writable(self) -> bool:
        return True

    @property
    def size(self) -> int:
        return self._hash.size

    def multihash(self) -> Multihash:
        return self._hash.multihash()


# -- laying the input out like the slice ---------------------------------------------------------


class _Plan:
    """How each column of the slice is made from a table of ``source`` schema: taken (and cast
    to the stored type), filled with nulls, or built (offset, op, system time, event time).
    Computed once per input schema."""

    def __init__(self, source: pa.Schema, spec: SliceSpec) -> None:
        vocab = spec.vocab
        index = {name: i for i, name in enumerate(source.names)}
        built = {
            vocab.offset_column: "offset",
            vocab.operation_type_column: "op",
            vocab.system_time_column: "time",
        }
        if spec.changelog:  # retractions and appends: the rows say which they are
            if vocab.operation_type_column not in index:
                raise SchemaError(f"a changelog needs its {vocab.operation_type_column!r} column")
            del built[vocab.operation_type_column]
        self.steps: list[tuple[str, Any]] = []
        for field in spec.schema:
            if field.name in built:
                self.steps.append((built[field.name], None))
            elif field.name in index:
                self.steps.append(("take", index[field.name]))
            elif field.name == vocab.event_time_column:
                self.steps.append(("time", None))
            elif field.nullable:
                self.steps.append(("nulls", None))
            else:
                raise SchemaError(f"column {field.name!r} is required and missing")
        self.schema = spec.schema
        self.event_index = spec.schema.get_field_index(vocab.event_time_column)
        self._time = pa.scalar(spec.system_time, type=TIME_TYPE).value
        self._constants: tuple[pa.Array, pa.Array] | None = None

    def _op_and_time(self, n: int) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
        """The ``op`` and ``system_time`` columns of ``n`` rows: one chunk of constants,
        repeated (a row group of 1 Mi rows holds 768 KiB of them, not 12 MiB)."""
        if self._constants is None:
            op = pa.array(np.full(_CONSTANT_ROWS, OP_APPEND, dtype=np.int32), OPERATION_TYPE)
            time = pa.array(np.full(_CONSTANT_ROWS, self._time, dtype=np.int64)).view(TIME_TYPE)
            self._constants = (op, time)
        op, time = self._constants
        whole, rest = divmod(n, _CONSTANT_ROWS)
        return (
            pa.chunked_array([op] * whole + [op.slice(0, rest)] * bool(rest), OPERATION_TYPE),
            pa.chunked_array([time] * whole + [time.slice(0, rest)] * bool(rest), TIME_TYPE),
        )

    def apply(self, table: pa.Table, first_offset: int) -> pa.Table:
        n = table.num_rows
        op, time = self._op_and_time(n)
        columns: list[pa.Array | pa.ChunkedArray] = []
        for field, (kind, arg) in zip(self.schema, self.steps, strict=True):
            if kind == "take":
                column = _as_stored(table.column(arg), field)
                if not field.nullable and column.null_count:
                    raise SchemaError(
                        f"column {field.name!r} holds nulls, but the slice's schema requires "
                        "a value in every row"
                    )
            elif kind == "offset":
                column = pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64))
            elif kind == "op":
                column = op
            elif kind == "time":
                column = time
            else:
                column = pa.nulls(n, type=field.type)
            columns.append(column)
        return pa.Table.from_arrays(columns, schema=self.schema)


def _as_stored(column: pa.ChunkedArray, field: pa.Field) -> pa.ChunkedArray:
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


def _row_groups(data: pa.Table | Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """The input in tables of ``rows`` rows (the last one shorter), without copying: slices of
    a table, or batches gathered until they fill a row group."""
    if isinstance(data, pa.Table):
        for start in range(0, data.num_rows, rows):
            yield data.slice(start, rows)
        return
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in data:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        count += batch.num_rows
        while count >= rows:
            gathered = pa.Table.from_batches(pending)
            yield gathered.slice(0, rows)
            rest = gathered.slice(rows)
            pending, count = rest.to_batches(), rest.num_rows
    if count:
        yield pa.Table.from_batches(pending)


# -- one slice -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _FileLayout:
    """What the Parquet file of a slice schema looks like to a reader: the Arrow schema it reads
    back (a list's item is called ``element`` in a file) and the paths of its leaf columns."""

    read_back: pa.Schema
    leaf_paths: tuple[str, ...]

    @classmethod
    def of(cls, schema: pa.Schema) -> _FileLayout:
        sink = pa.BufferOutputStream()
        pq.write_table(schema.empty_table(), sink)
        parquet = pq.ParquetFile(pa.BufferReader(sink.getvalue()))
        paths = tuple(parquet.schema.column(i).path for i in range(len(parquet.schema)))
        return cls(parquet.schema_arrow, paths)


class _OpenSlice:
    """A slice being written: the Parquet writer over the hashing sink in this thread, the
    logical hasher beside it in ``hashing`` (one worker), and the counts."""

    def __init__(
        self,
        sink: BinaryIO,
        spec: SliceSpec,
        first_offset: int,
        layout: _FileLayout,
        hashing: ThreadPoolExecutor,
    ) -> None:
        self._spec = spec
        self._hashing = _HashingWriter(sink, spec.algorithm)
        self._stream = pa.BufferedOutputStream(
            pa.PythonFile(self._hashing, mode="w"), buffer_size=_SINK_BUFFER
        )
        # The system columns are contiguous (offset) or constant (op, system time): delta
        # encoding stores them in almost nothing, at a fraction of the dictionary's cost (the
        # writer builds one first, and gives up on it for offsets)
        built = set(spec.vocab.system_columns)
        self._writer = pq.ParquetWriter(
            self._stream,
            spec.schema,
            compression=spec.compression,
            use_dictionary=[p for p in layout.leaf_paths if p not in built],
            dictionary_pagesize_limit=spec.dictionary_page_bytes,
            column_encoding=dict.fromkeys(spec.vocab.system_columns, "DELTA_BINARY_PACKED"),
        )
        self._logical = LogicalHasher(layout.read_back, spec.algorithm)
        # the logical hash is of the rows as a reader gets them, of the types it gives
        self._read_back = None if layout.read_back.equals(spec.schema) else layout.read_back
        self._pool = hashing
        self.first_offset = first_offset
        self.num_rows = 0
        self._latest: pa.Scalar | None = None

    def _hash(self, table: pa.Table) -> None:
        for batch in table.to_batches():
            self._logical.update(batch if self._read_back is None else batch.cast(self._read_back))

    def add(self, table: pa.Table, event_index: int) -> None:
        """Write and hash one row group: the hash runs beside the write and is done when this
        returns, so memory never holds more than one row group."""
        hashed = self._pool.submit(self._hash, table)
        try:
            self._writer.write_table(table, row_group_size=self._spec.row_group_rows)
        finally:
            hashed.result()
        self.num_rows += table.num_rows
        column = table.column(event_index)
        if pa.types.is_timestamp(column.type) or pa.types.is_date(column.type):
            latest = pc.max(column)
            if latest.is_valid and (
                self._latest is None or pc.greater(latest, self._latest).as_py()
            ):
                self._latest = latest

    def written(self) -> int:
        """Bytes in the file so far (those still buffered included)."""
        return self._stream.tell()

    def finish(self) -> SliceFacts:
        self._writer.close()
        self._stream.close()
        self._hashing.flush()
        latest = self._latest
        moment = None
        if latest is not None:
            moment = event_time_moment(latest, self._spec.vocab.event_time_column)
        return SliceFacts(
            physical_hash=self._hashing.multihash(),
            logical_hash=self._logical.multihash(),
            size=self._hashing.size,
            num_rows=self.num_rows,
            offsets=OffsetInterval(self.first_offset, self.first_offset + self.num_rows - 1),
            max_event_time=moment,
        )

    def abandon(self) -> None:
        """Stop writing after a failure (the sink's owner discards what it holds)."""
        for close in (self._writer.close, self._stream.close):
            with contextlib.suppress(Exception):
                close()


def write_slices(
    data: pa.Table | Iterable[pa.RecordBatch],
    spec: SliceSpec,
    open_sink: Callable[[int], BinaryIO],
) -> list[SliceFacts]:
    """Write ``data`` (a table, or record batches of one schema, user columns only) as Parquet
    slices of ``spec.schema`` in one pass; return each slice's facts, in offset order.

    ``open_sink(i)`` gives the writable binary file for the ``i``-th slice (opened only when
    rows come for it: no rows, no slice, no sink); it is flushed when the slice is complete,
    and closing it, making it durable and naming it by its hash stay with the caller. A new
    slice begins at the first row-group boundary at or past ``spec.target_slice_bytes``;
    offsets go on from slice to slice.

    Raises :class:`SchemaError` when a column cannot be stored as the schema says (a lossy
    cast, nulls in a required column), and whatever the sink raises (``OSError``).
    """
    plan: _Plan | None = None
    layout = _FileLayout.of(spec.schema)
    hashing = ThreadPoolExecutor(1, thread_name_prefix="odf-chain-logical-hash")
    facts: list[SliceFacts] = []
    current: _OpenSlice | None = None
    offset = spec.first_offset
    try:
        for group in _row_groups(data, spec.row_group_rows):
            if plan is None:
                plan = _Plan(group.schema, spec)
            conformed = plan.apply(group, offset)
            if current is None:
                current = _OpenSlice(open_sink(len(facts)), spec, offset, layout, hashing)
            current.add(conformed, plan.event_index)
            del conformed  # before the next row group is built
            offset += group.num_rows
            target = spec.target_slice_bytes
            if target is not None and current.written() >= target:
                facts.append(current.finish())
                current = None
        if current is not None:
            facts.append(current.finish())
            current = None
    finally:
        if current is not None:
            current.abandon()
        hashing.shutdown()
    return facts
