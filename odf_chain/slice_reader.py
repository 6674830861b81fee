"""Reading data slices as the chain names them, checked against the AddData that added them.

A reader hands out only rows the chain vouches for (DESIGN.md, "Trust"): a slice swapped for
another valid slice of the dataset, or rewritten with other values, is a valid Parquet file
that decodes without complaint, and only its size and physical hash (the multihash of the
whole file) tell it from the slice the block recorded. So :func:`read_table` reads each slice
into memory once, checks those bytes, and decodes the same bytes: there is no window between
the check and the use. It hashes the next slice in a thread while the current one is decoded
(BLAKE3, SHA3 and pyarrow's decoding release the GIL), holding at most two slices' bytes
beside the result. ``tools/bench_read.py`` over 1.09 GB of slices: checked 1.04x-1.07x the
unchecked read in wall time (medians of 7 alternating runs on a shared machine); BLAKE3 runs at
~5 GB/s, a few percent of what decoding costs.

Whatever goes wrong with a slice is an :class:`OdfChainError` naming its file and the block
(sequence number and hash) that added it: a mismatch or a file that does not decode is an
:class:`IntegrityError`, a file that cannot be read a :class:`StorageError`, one that is not
there a :class:`NotFoundError`; never a bare ``OSError`` or ``ArrowInvalid``, whatever the
check.
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
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

SliceCheck = Literal["hash", "size"] | None
"""What a reader checks of each slice before returning its rows: ``"hash"`` its size and
physical hash, ``"size"`` its size only, ``None`` nothing (a trusted pipeline)."""

CHECKS: tuple[SliceCheck, ...] = (*get_args(Literal["hash", "size"]), None)

READ_AHEAD = 1
"""Slices read and checked in a thread ahead of the one being decoded: with one, the bytes of
at most two slices are held beside the result."""

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
    return [
        NamedSlice(
            data,
            entry.block.sequence_number,
            entry.hash,
            storage.fs_path(f"data/{data.physical_hash}"),
        )
        for entry, data in found
    ]


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


def decode(
    piece: NamedSlice,
    data: pa.Buffer,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    filter: pc.Expression | None,
) -> pa.Table:
    """One slice's rows from its bytes, as of ``schema`` (columns it lacks are nulls), with
    ``columns`` and ``filter`` pushed down to the Parquet reader."""
    try:
        fragment = _parquet().make_fragment(pa.BufferReader(data))
        return fragment.to_table(schema=schema, columns=columns, filter=filter)
    except (pa.ArrowException, OSError) as exc:
        raise IntegrityError(
            f"{piece.where()}: does not decode as a Parquet file of the dataset's schema: {exc}"
        ) from None


def _read_ahead(
    storage: Storage, pieces: Sequence[NamedSlice], check: SliceCheck
) -> Iterator[tuple[NamedSlice, pa.Buffer]]:
    """Each slice's checked bytes in chain order, the next ones read in a thread meanwhile."""
    pending: deque[tuple[NamedSlice, Future[pa.Buffer]]] = deque()

    def oldest() -> tuple[NamedSlice, pa.Buffer]:  # its future not kept here: nor its bytes
        piece, future = pending.popleft()
        return piece, future.result()

    with ThreadPoolExecutor(1, thread_name_prefix="odf-chain-read") as pool:
        try:
            for piece in pieces:
                pending.append((piece, pool.submit(read_slice, storage, piece, check)))
                if len(pending) > READ_AHEAD:
                    yield oldest()
            while pending:
                yield oldest()
        finally:  # stopped early (an error): what was not started is not read
            for _, future in pending:
                future.cancel()


def read_table(
    storage: Storage,
    pieces: Sequence[NamedSlice],
    schema: pa.Schema,
    *,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
    check: SliceCheck = "hash",
) -> pa.Table:
    """The rows of ``pieces`` in chain order as one table of ``schema``, each slice checked
    as ``check`` says before any of its rows is decoded (see the module)."""
    # an unknown column or an ill-typed filter is the caller's mistake, not a slice's: it
    # fails here, as pyarrow reports it, before any slice is read
    import pyarrow.dataset as pads

    empty = pads.InMemoryDataset(schema.empty_table()).to_table(columns=columns, filter=filter)
    tables = []
    for piece, data in _read_ahead(storage, pieces, check):
        tables.append(decode(piece, data, schema, columns, filter))
        del data  # the bytes go as soon as they are decoded
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
