"""Step 3: check each data slice the chain names: present, size, physical hash, row count equal
to its offset interval, columns as the schema in force says.

Files are hashed in threads a few slices ahead of the one being reported, so reading and
hashing use both cores while the report stays in chain order.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from odf_chain.chain import BlockEntry
from odf_chain.errors import NotFoundError, OdfChainError
from odf_chain.events import AddData, DataSlice, ExecuteTransform
from odf_chain.format.multihash import Multihash
from odf_chain.schema.evolution import same_columns
from odf_chain.state import DatasetState
from odf_chain.storage import Storage
from odf_chain.verify.deep import check_rows
from odf_chain.verify.report import VerifyReport


@dataclass
class _Hashed:
    """One slice file opened and hashed, off the reporting thread; ``problem`` is set instead
    of the rest when it could not be (``rule``, message)."""

    fh: BinaryIO | None = None
    size: int = 0
    digest: Multihash | None = None
    hashed: int = 0
    problem: tuple[str, str] | None = None


# Slices hashed ahead of the one being reported, in threads: BLAKE3 and file reads release the
# GIL, so two threads use both cores. The window bounds the open files and the memory held.
DATA_THREADS = 2
_DATA_WINDOW = 4


def _hash_slice(storage: Storage, data: DataSlice) -> _Hashed:
    name = str(data.physical_hash)
    try:
        if not storage.has_data(name):  # also when data/ itself is missing
            return _Hashed(problem=("data-missing", "data slice file is missing"))
        fh = storage.open_data(name)
    except NotFoundError:  # removed since has_data looked
        return _Hashed(problem=("data-missing", "data slice file is missing"))
    except OdfChainError as exc:
        return _Hashed(problem=("data-unreadable", str(exc)))
    try:
        size = fh.size() if hasattr(fh, "size") else os.fstat(fh.fileno()).st_size
        if size != data.size:  # not the file the block names, whatever it hashes to: a
            return _Hashed(fh, size)  # sparse 16 TiB file would take hours to hash
        digest, hashed = Multihash.digest_stream(data.physical_hash.algorithm, fh)
    except OSError as exc:
        fh.close()
        path = storage.fs_path(f"data/{name}")
        return _Hashed(problem=("data-unreadable", f"cannot read {path}: {exc}"))
    return _Hashed(fh, size, digest, hashed)


def hashed_slices(
    storage: Storage, entries: Iterable[tuple[BlockEntry, DatasetState]]
) -> Iterator[tuple[BlockEntry, DatasetState, _Hashed]]:
    """Each slice-carrying entry with its file hashed, in chain order, ``_DATA_WINDOW`` ahead."""
    pending: deque = deque()
    with ThreadPoolExecutor(DATA_THREADS, thread_name_prefix="odf-chain-verify-data") as pool:
        try:
            for entry, state in entries:
                data = entry.block.event.new_data  # type: ignore[union-attr]
                pending.append((entry, state, pool.submit(_hash_slice, storage, data)))
                if len(pending) >= _DATA_WINDOW:
                    entry, state, future = pending.popleft()
                    yield entry, state, future.result()
            while pending:
                entry, state, future = pending.popleft()
                yield entry, state, future.result()
        finally:  # the caller stopped early: close what was opened ahead
            for _, _, future in pending:
                if future.exception() is None and (fh := future.result().fh) is not None:
                    fh.close()


def check_slice(
    entry: BlockEntry,
    state: DatasetState,
    hashed: _Hashed,
    report: VerifyReport,
    deep: bool = False,
) -> None:
    event = entry.block.event
    assert isinstance(event, AddData | ExecuteTransform)
    data: DataSlice = event.new_data  # type: ignore[assignment]
    name = str(data.physical_hash)
    where = {
        "sequence_number": entry.block.sequence_number,
        "block_hash": str(entry.hash),
        "path": f"data/{name}",
    }
    report.slices_checked += 1
    if hashed.problem is not None:
        report.add("error", *hashed.problem, **where)
        return
    assert hashed.fh is not None
    with hashed.fh as fh:
        if hashed.size != data.size:
            report.add(
                "error",
                "data-size",
                f"expected {data.size:,} bytes, found {hashed.size:,}: the file was altered "
                "or replaced",
                **where,
            )
            return  # not hashed: the checks below would only restate the damage
        report.bytes_hashed += hashed.hashed
        if hashed.digest != data.physical_hash:
            report.add(
                "error",
                "data-hash",
                f"content hashes to {hashed.digest}: the file was altered or replaced",
                **where,
            )
            return  # the Parquet checks below would only restate the damage
        try:
            fh.seek(0)
            parquet = pq.ParquetFile(fh)
            metadata = parquet.metadata
            file_schema = parquet.schema_arrow
        except (pa.ArrowException, OSError, ValueError) as exc:  # a footer not UTF-8, say
            report.add("error", "data-format", f"not a readable Parquet file: {exc}", **where)
            return
        if metadata.num_rows != data.num_records:
            interval = data.offset_interval
            report.add(
                "error",
                "data-rows",
                f"offsets [{interval.start}, {interval.end}] promise {data.num_records} rows, "
                f"the file holds {metadata.num_rows}",
                **where,
            )
        if state.schema is not None and not same_columns(file_schema, state.schema):
            report.add(
                "error",
                "data-schema",
                "the file's columns differ from the schema in force "
                f"(block {state.schema_sequence_number})",
                **where,
            )
        if deep:
            check_rows(parquet, entry, state, report, where)
