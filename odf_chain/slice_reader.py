"""Reading data slices as the chain names them, checked against the AddData that added them.

A reader hands out only rows the chain vouches for (DESIGN.md, "Trust"): a slice swapped for
another valid slice of the dataset, or rewritten with other values, is a valid Parquet file
that decodes without complaint, and only its size and physical hash (the multihash of the
whole file) tell it from the slice the block recorded. So :func:`read_table` reads each slice
into memory once, checks those bytes, and decodes the same bytes: there is no window between
the check and the use.

Many small slices (an hourly ingest after two years: 16k files of a few KB) cost what each
file costs to open, check and decode, not what its rows cost, so :func:`read_table` spends as
little as it can per file (:class:`Decoder`), has the kernel read files in ahead of their turn
(:class:`_OpenedAhead`), and can spread the files over threads (:data:`READ_THREADS`):
``tools/bench_slices.py`` compares it with ``pyarrow.dataset`` over the same files
(docs/performance.md). Over large slices (``tools/bench_read.py``, 1.09 GB in 20 slices) the
checked read is 1.04x-1.07x the unchecked one in wall time; BLAKE3 runs at ~5 GB/s, a few
percent of what decoding costs.

Whatever goes wrong with a slice is an :class:`OdfChainError` naming its file and the block
(sequence number and hash) that added it: a mismatch or a file that does not decode is an
:class:`IntegrityError`, a file that cannot be read a :class:`StorageError`, one that is not
there a :class:`NotFoundError`; never a bare ``OSError`` or ``ArrowInvalid``, whatever the
check.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Literal, get_args

import pyarrow as pa

from odf_chain.chain import BlockEntry
from odf_chain.errors import IntegrityError, NotFoundError, OdfChainError, StorageError
from odf_chain.events import DataSlice
from odf_chain.format.multihash import Multihash
from odf_chain.storage import DataStore, Storage

if TYPE_CHECKING:
    import pyarrow.compute as pc
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

SliceCheck = Literal["hash", "size"] | None
"""What a reader checks of each slice before returning its rows: ``"hash"`` its size and
physical hash, ``"size"`` its size only, ``None`` nothing (a trusted pipeline)."""

CHECKS: tuple[SliceCheck, ...] = (*get_args(Literal["hash", "size"]), None)

READ_THREADS = 1
"""Threads :func:`read_table` reads, checks and decodes slices in by default: one, the calling
thread. Reading, hashing and pyarrow's decoding release the GIL, but about a third of each
small slice's time is Python (opening it as verify does, pyarrow's ``ParquetFile`` glue), and
on the shared 2-core machine of docs/performance.md (load average ~10) 2, 3 and 4 threads
were each slower than one in every run of ``tools/bench_slices.py`` (the threads wait on
the GIL for one another, and on a preempted holder), using more CPU. ``threads=`` is there
for a machine with idle cores; the rows and the errors are the same whatever it is."""

OPEN_AHEAD = 32
"""Slices :func:`read_table` keeps open ahead of the one it reads, the kernel told to read
them in (see :class:`_OpenedAhead`): 32 file descriptors at most."""

CHECK_THREADS = 2
"""Threads hashing files for :func:`check_files` (as verify hashes them: two cores' worth)."""


@functools.cache
def _parquet() -> pads.ParquetFileFormat:
    """The Parquet format of pyarrow.dataset, imported on first read: importing
    pyarrow.dataset imports pandas where it is installed (~0.4 s), which the commands that
    read only blocks (log, schema, fields) do not need."""
    import pyarrow.dataset as pads

    return pads.ParquetFileFormat()


def check_argument(check: object) -> SliceCheck:
    """``check`` if it is one of :data:`CHECKS`, else an OdfChainError saying what is."""
    if check not in CHECKS:
        raise OdfChainError(
            f"check must be 'hash' (size and physical hash), 'size' or None (no check); "
            f"got {check!r}"
        )
    return check  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class NamedSlice:
    """A slice the chain names, with the block that added it and its path in the storage's
    filesystem: what an error about it must say."""

    data: DataSlice
    sequence_number: int
    block_hash: Multihash
    path: str

    @property
    def name(self) -> str:
        return str(self.data.physical_hash)

    def where(self) -> str:
        return f"data slice {self.path} (added by block {self.sequence_number} {self.block_hash})"


def named_slices(
    storage: Storage, found: Iterable[tuple[BlockEntry, DataSlice]]
) -> list[NamedSlice]:
    """Each slice with the block that added it and its path in the storage's filesystem."""
    return [_named(storage, data, entry.block.sequence_number, entry.hash) for entry, data in found]


def named_listing(storage: Storage, listed: Iterable) -> list[NamedSlice]:
    """:func:`named_slices` of a listing (:func:`odf_chain.replay.listed_slices_at`: each
    with its data, sequence number and block hash)."""
    return [_named(storage, s.data, s.sequence_number, s.block_hash) for s in listed]


def _named(storage: Storage, data: DataSlice, seq: int, block_hash: Multihash) -> NamedSlice:
    return NamedSlice(data, seq, block_hash, storage.fs_path(f"data/{data.physical_hash}"))


def _open(storage: DataStore, piece: NamedSlice) -> BinaryIO:
    """The slice opened as verify opens it (a regular file of the dataset, no symlink)."""
    try:
        return storage.open_data(piece.name)
    except NotFoundError:
        raise NotFoundError(f"{piece.where()} is missing") from None
    except StorageError as exc:
        raise StorageError(f"{piece.where()}: {exc}") from exc


def _size(fh: BinaryIO) -> int:
    return fh.size() if hasattr(fh, "size") else os.fstat(fh.fileno()).st_size  # type: ignore[attr-defined]


def _wrong_size(piece: NamedSlice, found: int) -> IntegrityError:
    return IntegrityError(
        f"{piece.where()}: {found} bytes where its AddData records {piece.data.size}: "
        "the file was altered or replaced"
    )


def _wrong_hash(piece: NamedSlice, found: Multihash) -> IntegrityError:
    return IntegrityError(
        f"{piece.where()}: its content hashes to {found}, not to its name: the file was "
        "altered or replaced"
    )


def _unreadable(piece: NamedSlice, exc: OSError) -> StorageError:
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return StorageError(f"{piece.where()}: cannot read it: {reason}")


def read_slice(storage: Storage, piece: NamedSlice, check: SliceCheck) -> pa.Buffer:
    """The bytes of one slice, read once, checked as ``check`` says (see :data:`SliceCheck`).
    A file of the wrong size is refused before it is read."""
    with _open(storage, piece) as fh:
        return _read_checked(piece, fh, check)


def _read_checked(piece: NamedSlice, fh: BinaryIO, check: SliceCheck) -> pa.Buffer:
    """The bytes of ``piece`` from its open file ``fh``, checked (see :func:`read_slice`)."""
    try:
        if check is None:
            data = fh.read()
        else:
            size = _size(fh)
            if size != piece.data.size:
                raise _wrong_size(piece, size)
            data = fh.read(size + 1)  # one byte more: a file that grew since fstat
    except OSError as exc:
        raise _unreadable(piece, exc) from exc
    if check is not None and len(data) != piece.data.size:
        raise _wrong_size(piece, len(data))
    if check == "hash":
        expected = piece.data.physical_hash
        found = Multihash.digest(expected.algorithm, data)
        if found != expected:
            raise _wrong_hash(piece, found)
    return pa.py_buffer(data)


class _OpenedAhead:
    """The slices' files opened :data:`OPEN_AHEAD` slices ahead of the one read, each with a
    hint to the kernel to read it in meanwhile (``POSIX_FADV_WILLNEED``): a file not in the
    page cache is then read from the disk while the slices before it are decoded, as
    pyarrow.dataset's I/O threads do, instead of stalling the read when its turn comes. The
    bytes checked and decoded are still read from that one descriptor, once (no re-open).
    A file that cannot be opened is that slice's error, raised when the slice is taken."""

    def __init__(self, storage: Storage, pieces: Sequence[NamedSlice]) -> None:
        self.storage = storage
        self.pieces = pieces
        self.opened: dict[int, BinaryIO | OdfChainError] = {}
        self.next = 0  # the first slice not opened yet
        self.lock = threading.Lock()

    def _open(self, i: int) -> BinaryIO | OdfChainError:
        try:
            fh = _open(self.storage, self.pieces[i])
        except OdfChainError as exc:
            return exc
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor, no hint
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_WILLNEED)
        return fh

    def take(self, i: int) -> BinaryIO:
        """Slice ``i``'s open file (the caller closes it), the ones after it opened ahead."""
        with self.lock:
            while self.next < min(i + 1 + OPEN_AHEAD, len(self.pieces)):
                self.opened[self.next] = self._open(self.next)
                self.next += 1
            fh = self.opened.pop(i)
        if isinstance(fh, OdfChainError):
            raise fh
        return fh

    def close(self) -> None:
        """Close what was opened and not taken (a read stopped by an error)."""
        with self.lock:
            for fh in self.opened.values():
                if not isinstance(fh, OdfChainError):
                    fh.close()
            self.opened.clear()


def decode(
    piece: NamedSlice,
    data: pa.Buffer,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    filter: pc.Expression | None,
) -> pa.Table:
    """One slice's rows from its bytes, as of ``schema`` (columns it lacks are nulls), with
    ``columns`` and ``filter`` pushed down to the Parquet reader."""
    return Decoder(schema, columns, filter)(piece, data)


class Decoder:
    """Decodes slices' bytes into tables of one schema, ``columns`` and ``filter``.

    A slice whose file holds exactly the columns asked for, with the types of ``schema`` (every
    slice written since the last schema change), is decoded by ``pq.ParquetFile.read`` in the
    calling thread: that costs less than half the CPU of a pyarrow.dataset fragment's scan,
    whose per-file setup (a scanner, a schema projection, its own thread pool) is most of what
    a slice of a few KB costs (~0.3 ms against ~0.85 ms on the bench's 64-row slices). Any
    other slice (an older schema, other column types, extra columns), and every slice when a
    ``filter`` is to be pushed down to the row groups, goes through the fragment, which reads
    missing columns as nulls and casts what the dataset widened since."""

    def __init__(
        self, schema: pa.Schema, columns: Sequence[str] | None, filter: pc.Expression | None
    ) -> None:
        self.schema = schema
        self.columns = None if columns is None else list(columns)
        self.filter = filter
        wanted = schema.names if columns is None else self.columns
        self.direct: pa.Schema | None = None  # what the direct read must find, when it may
        if filter is None and len(set(wanted)) == len(wanted) and set(wanted) <= set(schema.names):
            self.direct = pa.schema([schema.field(name) for name in wanted], schema.metadata)
        self._fitting: dict[bytes, bool] = {}

    def _fits(self, file: pq.ParquetFile) -> bool:
        """Whether ``file`` reads directly as :attr:`direct`: the columns asked for, each once,
        of the same types (metadata aside), and when all are asked for, no others. Decided once
        per schema pyarrow stored in the files (``ARROW:schema``, the same bytes in every
        slice written under one schema: comparing them costs ~2 µs, building the file's
        schema and comparing it ~17 µs a slice); what the read gives is compared again."""
        stored = (file.metadata.metadata or {}).get(b"ARROW:schema")
        fits = self._fitting.get(stored) if stored is not None else None
        if fits is None:
            fits = self._fields_fit(file.schema_arrow)
            if stored is not None and len(self._fitting) < 64:
                self._fitting[stored] = fits
        return fits

    def _fields_fit(self, found: pa.Schema) -> bool:
        assert self.direct is not None
        if self.columns is None:
            return found.equals(self.direct, check_metadata=False)
        for field in self.direct:
            at = found.get_field_index(field.name)  # -1 when absent or there twice
            if at < 0 or not found.field(at).equals(field):
                return False
        return True

    def __call__(self, piece: NamedSlice, data: pa.Buffer) -> pa.Table:
        import pyarrow.parquet as pq

        try:
            if self.direct is not None:
                file = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False)
                if self._fits(file):
                    table = file.read(self.columns, use_threads=False)
                    if table.schema.equals(self.direct):
                        return table
                    if table.schema.equals(self.direct, check_metadata=False):
                        # the schema's metadata, as the fragment gives it
                        return pa.Table.from_arrays(table.columns, schema=self.direct)
            fragment = _parquet().make_fragment(pa.BufferReader(data))
            return fragment.to_table(schema=self.schema, columns=self.columns, filter=self.filter)
        except (pa.ArrowException, OSError, ValueError, TypeError, LookupError) as exc:
            # what bytes that are not a Parquet file of the schema make pyarrow raise (its
            # Python layer parses the file's metadata too)
            raise IntegrityError(
                f"{piece.where()}: does not decode as a Parquet file of the dataset's schema: {exc}"
            ) from None


def _in_order(work: Callable[[int], pa.Table], count: int, threads: int) -> list[pa.Table]:
    """``work(i)`` for each slice ``i`` below ``count``, in order, done in ``threads`` threads
    (the calling one and ``threads - 1`` more), each taking the next slice not taken yet.

    No queue and no future per piece: a piece costs a counter step and a list slot, so two
    threads cost hardly more CPU than one (futures and a queue cost ~10% more on 64-row
    slices, which a shared machine's other jobs pay for). A failure stops the taking of
    pieces after it, but every piece before it is still done, so the error raised is that of
    the first bad piece in chain order, whichever thread met which first."""
    if threads == 1 or count < 2:
        return [work(i) for i in range(count)]
    results: list[pa.Table | None] = [None] * count
    taken = itertools.count()
    lock = threading.Lock()
    first: list[tuple[int, BaseException]] = []  # the failure of the lowest slice yet
    stop = count  # slices from here on are not taken

    def run() -> None:
        nonlocal stop
        while True:
            with lock:
                i = next(taken)
            if i >= stop:
                return
            try:
                results[i] = work(i)
            except BaseException as exc:  # raised in the calling thread, below
                with lock:
                    if i < stop:
                        stop = i
                        first[:] = [(i, exc)]
                return

    helpers = [
        threading.Thread(target=run, name=f"odf-chain-read-{n}", daemon=True)
        for n in range(min(threads, count) - 1)
    ]
    for helper in helpers:
        helper.start()
    run()  # a failure here (even KeyboardInterrupt) is recorded as any other: the helpers stop
    for helper in helpers:
        helper.join()
    if first:
        raise first[0][1]
    return results  # type: ignore[return-value]


def thread_count(threads: object) -> int:
    """``threads`` if it is a positive int, else an OdfChainError saying what is."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise OdfChainError(f"threads must be a positive integer; got {threads!r}")
    return threads


def read_table(
    storage: Storage,
    pieces: Sequence[NamedSlice],
    schema: pa.Schema,
    *,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
    check: SliceCheck = "hash",
    threads: int = READ_THREADS,
) -> pa.Table:
    """The rows of ``pieces`` in chain order as one table of ``schema``, each slice checked
    as ``check`` says before any of its rows is decoded (see the module).

    ``threads`` threads each take a slice whole: read it into memory, check those bytes,
    decode them (:class:`Decoder`) and drop them, so at most ``threads`` slices' bytes are
    held beside the decoded tables, and no bytes are read twice. The tables are taken in chain
    order and joined by one ``concat_tables`` at the end (no copy: each becomes chunks of the
    result)."""
    thread_count(threads)
    # an unknown column or an ill-typed filter is the caller's mistake, not a slice's: it
    # fails here, as pyarrow reports it, before any slice is read
    import pyarrow.dataset as pads

    empty = pads.InMemoryDataset(schema.empty_table()).to_table(columns=columns, filter=filter)
    decoder = Decoder(schema, columns, filter)
    ahead = _OpenedAhead(storage, pieces)

    def work(i: int) -> pa.Table:
        with ahead.take(i) as fh:
            data = _read_checked(pieces[i], fh, check)
        return decoder(pieces[i], data)

    try:
        tables = _in_order(work, len(pieces), threads)
    finally:
        ahead.close()
    return pa.concat_tables(tables) if tables else empty


def _check_file(storage: Storage, piece: NamedSlice, check: SliceCheck) -> None:
    with _open(storage, piece) as fh:
        if check is None:
            return
        try:
            size = _size(fh)
            if size != piece.data.size:
                raise _wrong_size(piece, size)
            if check == "hash":
                expected = piece.data.physical_hash
                found, hashed = Multihash.digest_stream(expected.algorithm, fh)
                if hashed != piece.data.size:
                    raise _wrong_size(piece, hashed)
                if found != expected:
                    raise _wrong_hash(piece, found)
        except OSError as exc:
            raise _unreadable(piece, exc) from exc


def check_files(storage: Storage, pieces: Sequence[NamedSlice], check: SliceCheck) -> None:
    """Check each slice's file where it is, streamed (nothing kept), :data:`CHECK_THREADS`
    at a time; the first problem in chain order is raised. With ``check=None`` each is only
    opened (a regular file of the dataset)."""
    if check is None or len(pieces) < 2:
        for piece in pieces:
            _check_file(storage, piece, check)
        return
    with ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="odf-chain-check") as pool:
        futures = [pool.submit(_check_file, storage, piece, check) for piece in pieces]
        try:
            for future in futures:
                future.result()
        finally:
            for future in futures:
                future.cancel()
