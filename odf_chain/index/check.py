"""Verify's view of the index: compare it with what verify derived itself, and fail where it lies.

Verify never trusts or writes the index: after its own walk and fold it calls
:func:`report_index` with the blocks it read, and every entry and snapshot of the index is
compared with them. Readers take from the index what they cannot prove without a fold (that
a block it names below the head is an ancestor of the head; counters), so an index that
*contradicts* the chain is an **error**, ``index-mismatch`` (an entry, list or snapshot field
that differs from the chain, naming the block, file and fields): a forged index must never
make a reader answer from another branch while verify passes. What cannot mislead a reader is
a warning: ``index-damaged`` (a file that fails its checksum, is cut short or cannot be read:
readers rebuild) and ``index-stale`` (entries or snapshots past the head, a head snapshot of a
block not in the chain: readers walk from the head and never reach them). An index merely
behind the head (a crash between a commit and its index update, a writer that does not keep
the index) is no finding: readers catch up.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields

import numpy as np

from odf_chain.errors import OdfChainError
from odf_chain.index.derive import kind_positions, lists_of, pointers_from, pointers_of
from odf_chain.index.prefixes import bucket_records, prefix_keys
from odf_chain.index.records import (
    COVERAGE_BYTES,
    HASH_BYTES,
    HEAD_SNAPSHOT,
    INDEX_DIR,
    LINEAGE_LIST,
    MAX_BUCKET_BYTES,
    MAX_LIST_BYTES,
    MAX_SNAPSHOT_BYTES,
    PREFIX_BUCKETS,
    PREFIX_COVERAGE,
    PREFIX_DIR,
    PREFIX_KEY_BYTES,
    PREFIX_RECORD_BYTES,
    SCHEMA_LIST,
    SEGMENT_BYTES,
    SEGMENT_ENTRIES,
    SNAPSHOT_INTERVAL,
    IndexDamage,
    Pointer,
    Pointers,
    PrefixCoverage,
    Snapshot,
    bucket_name,
    decode_list,
    seq_records,
)
from odf_chain.state import DatasetState, apply
from odf_chain.storage import Storage
from odf_chain.walked import WalkedChain

Add = Callable[..., None]  # VerifyReport.add(severity, rule, message, **where)
_SHOWN = 5  # findings of one kind shown before they are counted


def report_index(
    storage: Storage,
    entries: WalkedChain,
    head: DatasetState,
    periodic: Mapping[int, DatasetState],
    add: Add,
) -> None:
    """Warn about every way the index disagrees with ``entries`` (the whole chain, oldest
    first, as verify read it), ``head`` (the state verify's fold derived there) and
    ``periodic`` (the states it derived at every :data:`SNAPSHOT_INTERVAL`-th block). A missing
    index is no finding: it is a cache.

    Exact everywhere: the table entry by entry, the lists, and every snapshot field by field
    (counters, transactions, push sources included), without a second fold.
    ``odf-chain index --rebuild`` rewrites them all."""
    try:
        names = storage.list_derived(INDEX_DIR)
    except OdfChainError as exc:
        add("warning", "index-damaged", f"the index cannot be listed: {exc}", path=INDEX_DIR)
        return
    if not names:
        return
    _check_table(storage, entries, names, add)
    wanted = {
        int(n[5:]): n for n in names if n.startswith("snap-") and n[5:].isdigit()
    }  # periodic snapshots by block: read, compared and dropped one at a time
    head_snapshot = _read(storage, HEAD_SNAPSHOT, add)
    positions = kind_positions(entries)
    head_seq = len(entries) - 1
    behind_state: tuple[int, DatasetState] | None = None
    if head_snapshot is not None and head_snapshot.sequence_number < head_seq:
        # a head snapshot left behind (a writer that does not keep the index): the state
        # there, from the periodic one below it and the few blocks between (rules already run)
        seq = head_snapshot.sequence_number
        base = seq - seq % SNAPSHOT_INTERVAL
        if base in periodic:
            state = periodic[base]
            for entry in entries[base + 1 : seq + 1]:
                state = apply(state, entry.block, entry.hash)
            behind_state = (seq, state)
    covered = -1  # the lists must be whole up to the last block a snapshot of this chain describes
    for name in [*(f"{INDEX_DIR}/{wanted[seq]}" for seq in sorted(wanted)), HEAD_SNAPSHOT]:
        snapshot = head_snapshot if name == HEAD_SNAPSHOT else _read(storage, name, add)
        if snapshot is None:
            continue
        seq = snapshot.sequence_number
        ours = seq < len(entries) and snapshot.block_hash == entries.hash(seq)
        if ours:
            covered = max(covered, seq)
        if seq >= len(entries):
            add(
                "warning",
                "index-stale",
                f"{name} describes block {seq}, past the head "
                f"(block {head_seq}): a rolled-back head, or another chain",
                path=f"info/{name}",
            )
            continue
        if name == HEAD_SNAPSHOT and seq == head_seq:
            derived = Snapshot.of_state(head, pointers_of(entries))
        elif not ours:
            if name != HEAD_SNAPSHOT:
                add(
                    "error",
                    "index-mismatch",
                    f"{name} names {snapshot.block_hash}, not block {seq} of the chain",
                    sequence_number=seq,
                    path=f"info/{name}",
                )
            continue
        elif seq in periodic or (behind_state is not None and behind_state[0] == seq):
            state = periodic[seq] if seq in periodic else behind_state[1]  # type: ignore[index]
            derived = Snapshot.of_state(state, pointers_from(entries, positions, seq))
        else:
            add(
                "warning",
                "index-damaged",
                f"{name} describes block {seq}, which is not a snapshot's place (never read)",
                sequence_number=seq,
                path=f"info/{name}",
            )
            continue
        # compared field by field with the state verify's own fold derived there
        _compare_snapshot(name, snapshot, derived, add)
    behind = (
        head_snapshot is not None
        and head_snapshot.sequence_number < len(entries)
        and head_snapshot.block_hash == entries.hash(head_snapshot.sequence_number)
    )  # a writer that does not keep the index (another tool, a crash): readers catch up
    if head_snapshot is not None and entries and not behind:
        add(
            "warning",
            "index-stale",
            f"{HEAD_SNAPSHOT} names block {head_snapshot.sequence_number} "
            f"({head_snapshot.block_hash}), which is not in this chain: readers rebuild the index",
            path=f"info/{HEAD_SNAPSHOT}",
        )
    schemas, lineage = lists_of(entries)
    for name, derived in ((SCHEMA_LIST, schemas), (LINEAGE_LIST, lineage)):
        _check_list(storage, name, derived, len(entries), covered, add)
    _check_prefixes(storage, entries, add)


def _compare_snapshot(name: str, stored: Snapshot, derived: Snapshot, add: Add) -> None:
    differ = [
        f.name for f in fields(Snapshot) if getattr(stored, f.name) != getattr(derived, f.name)
    ]
    if "pointers" in differ:  # which of them: the schema, the vocab, ...
        differ.remove("pointers")
        differ += [
            f"the {f.name} pointer"
            for f in fields(Pointers)
            if getattr(stored.pointers, f.name) != getattr(derived.pointers, f.name)
        ]
    if differ:
        add(
            "error",
            "index-mismatch",
            f"{name} (block {derived.sequence_number}) differs from the chain in "
            f"{', '.join(differ)}",
            sequence_number=derived.sequence_number,
            block_hash=str(derived.block_hash),
            path=f"info/{name}",
        )


def _read(storage: Storage, name: str, add: Add) -> Snapshot | None:
    """The snapshot ``name``, or None (missing; or damaged, which is reported)."""
    try:
        raw = storage.read_derived(name, MAX_SNAPSHOT_BYTES)
        return None if raw is None else Snapshot.decode(raw, name)
    except (OdfChainError, IndexDamage) as exc:
        add("warning", "index-damaged", f"{exc}", path=f"info/{name}")
        return None


def _check_table(storage: Storage, entries: WalkedChain, names: list[str], add: Add) -> None:
    """Every entry of the sequence-number table against the block at its place, a segment at
    a time, compared in columns."""
    shown = 0
    for name in sorted(n for n in names if n.startswith("seq-") and n[4:].isdigit()):
        path = f"{INDEX_DIR}/{name}"
        first = int(name[4:]) * SEGMENT_ENTRIES
        try:
            raw = storage.read_derived(path, SEGMENT_BYTES) or b""
            records = seq_records(raw, first, path)
        except (OdfChainError, IndexDamage) as exc:
            add("warning", "index-damaged", str(exc), path=f"info/{path}")
            continue
        inside = max(0, min(len(records), len(entries) - first))
        if inside < len(records):
            add(
                "warning",
                "index-stale",
                f"{path} has entries from block {first + inside} on, past the head "
                f"(block {len(entries) - 1})",
                path=f"info/{path}",
            )
        hashes, times = entries.hashes_and_times(first, first + inside)
        ours = records[:inside]
        hash_wrong = ours["hash"] != hashes.view(f"S{HASH_BYTES}").ravel()
        time_wrong = ours["time"] != times
        for k in np.flatnonzero(hash_wrong | time_wrong).tolist():
            if shown >= _SHOWN:
                return
            shown += 1
            wrong = [
                w
                for w, bad in (("block hash", hash_wrong[k]), ("system time", time_wrong[k]))
                if bad
            ]
            seq = first + k
            add(
                "error",
                "index-mismatch",
                f"{path}: the entry of block {seq} has the wrong {' and '.join(wrong)}",
                sequence_number=seq,
                block_hash=entries.name(seq),
                path=f"info/{path}",
            )


def _check_list(
    storage: Storage, name: str, derived: list[Pointer], length: int, covered: int, add: Add
) -> None:
    """A list may lack the blocks past ``covered`` (behind, like a head snapshot left behind:
    readers extend it as they catch up), never name a block of another kind or chain, nor lack
    one a snapshot relies on."""
    try:
        raw = storage.read_derived(name, MAX_LIST_BYTES)
        if raw is None:
            return
        stored = decode_list(raw, name)
    except (OdfChainError, IndexDamage) as exc:
        add("warning", "index-damaged", str(exc), path=f"info/{name}")
        return
    past = [p.sequence_number for p in stored if p.sequence_number >= length]
    if past:
        add(
            "warning",
            "index-stale",
            f"{name} names blocks past the head (block {length - 1}): {past[:_SHOWN]}",
            path=f"info/{name}",
        )
        stored = [p for p in stored if p.sequence_number < length]
    behind = stored == derived[: len(stored)] and all(
        p.sequence_number > covered for p in derived[len(stored) :]
    )
    if not behind:
        extra = sorted({p.sequence_number for p in stored} ^ {p.sequence_number for p in derived})
        add(
            "error",
            "index-mismatch",
            f"{name} does not list exactly the chain's blocks of its kind"
            + (f" (differs at blocks {extra[:_SHOWN]})" if extra else ""),
            path=f"info/{name}",
        )


_KEY_CHUNK = 1 << 16  # blocks whose hashes are taken from the walked chain at once


def _check_prefixes(storage: Storage, entries: WalkedChain, add: Add) -> None:
    """The hash-prefix buckets against what they must hold: every block up to the block their
    coverage names, derived from the chain's hashes by the one derivation a rebuild writes
    (:func:`odf_chain.index.prefixes.bucket_records`), bucket by bucket in bounded memory (the
    8 key bytes of every block covered, then a sixteenth of the buckets at a time).

    A bucket whose valid records differ from the chain's (one deleted, altered, added or
    moved), or whose coverage count differs from the chain's number, is an **error**
    (``index-mismatch``, naming the bucket): readers take from a bucket which blocks a prefix
    may name, and a bucket that hides a block could make an ambiguous prefix look unique
    (see :meth:`odf_chain.index.read.ChainIndex.blocks_with_prefix`). A bucket cut short or
    torn (a record failing its checksum; what a crash leaves: readers list ``blocks/``
    instead), a coverage that fails its checksum, names a block past the head or not in the
    chain (readers do not use it) is a warning. A missing coverage, or one behind the head,
    is no finding: readers list, or match the tail through the seq table."""
    try:
        raw = storage.read_derived(PREFIX_COVERAGE, COVERAGE_BYTES)
        if raw is None:
            return
        coverage = PrefixCoverage.decode(raw, PREFIX_COVERAGE)
    except (OdfChainError, IndexDamage) as exc:
        add("warning", "index-damaged", str(exc), path=f"info/{PREFIX_COVERAGE}")
        return
    covered = coverage.sequence_number
    if covered >= len(entries) or coverage.block_hash != bytes(entries.hash(covered)):
        add(
            "warning",
            "index-stale",
            f"{PREFIX_COVERAGE} names block {covered}, which is not in this chain "
            f"(head: block {len(entries) - 1}): readers list blocks/ instead",
            path=f"info/{PREFIX_COVERAGE}",
        )
        return
    keys = np.empty((covered + 1, PREFIX_KEY_BYTES), np.uint8)  # 8 bytes a block covered
    for first in range(0, covered + 1, _KEY_CHUNK):
        stop = min(first + _KEY_CHUNK, covered + 1)
        keys[first:stop] = prefix_keys(entries.hashes_and_times(first, stop)[0])
    with storage.derived_batch():  # 4,096 files of one folder: its descriptor held
        shown = _compare_buckets(storage, coverage, bucket_records(keys), add)
    if shown > _SHOWN:
        add(
            "error",
            "index-mismatch",
            f"{shown - _SHOWN} more prefix buckets differ from the chain",
            path=f"info/{PREFIX_DIR}",
        )


def _compare_buckets(
    storage: Storage,
    coverage: PrefixCoverage,
    derived: Iterator[tuple[int, bytes]],
    add: Add,
) -> int:
    """Each bucket against ``derived`` (:func:`bucket_records`, in bucket order); the number
    of buckets that differ (the first :data:`_SHOWN` reported)."""
    pending = next(derived, None)
    shown = 0
    for bucket in range(PREFIX_BUCKETS):
        ours = b""
        if pending is not None and pending[0] == bucket:
            ours, pending = pending[1], next(derived, None)
        count = coverage.counts[bucket]
        if not count and not ours:
            continue
        finding = _compare_bucket(storage, bucket, count, ours)
        if finding is None:
            continue
        severity, rule, message = finding
        if severity == "error":
            shown += 1
            if shown > _SHOWN:
                continue
        add(severity, rule, message, path=f"info/{bucket_name(bucket)}")
    return shown


def _compare_bucket(
    storage: Storage, bucket: int, count: int, ours: bytes
) -> tuple[str, str, str] | None:
    """(severity, rule, message) where the bucket, or its coverage count ``count``, differs
    from ``ours`` (the records the chain gives it), else None."""
    name = bucket_name(bucket)
    try:
        data = storage.read_derived(name, MAX_BUCKET_BYTES) or b""
    except OdfChainError as exc:
        return "warning", "index-damaged", str(exc)
    stored = data[: count * PREFIX_RECORD_BYTES]
    if stored == ours:
        return None
    size = PREFIX_RECORD_BYTES
    valid = 0  # whole records, each passing its checksum, from the start
    for at in range(0, len(stored) - size + 1, size):
        if zlib.crc32(stored[at : at + size - 4]) != int.from_bytes(
            stored[at + size - 4 : at + size], "little"
        ):
            break
        valid += 1
    for k in range(min(valid, len(ours) // size)):
        if stored[k * size : (k + 1) * size] != ours[k * size : (k + 1) * size]:
            seq = struct.unpack_from("<Q", ours, k * size + PREFIX_KEY_BYTES)[0]
            return (
                "error",
                "index-mismatch",
                f"{name} differs from the chain at its record {k}: the chain's block {seq} "
                f"belongs there (a record deleted, altered or added)",
            )
    if valid > len(ours) // size:
        return (
            "error",
            "index-mismatch",
            f"{name} holds {valid} records, but the chain has {len(ours) // size} blocks "
            "whose hashes start so (up to the block its coverage names)",
        )
    if valid < count:  # cut or torn after records that are right: what a crash leaves
        return (
            "warning",
            "index-damaged",
            f"{name} holds {valid} whole records of the {count} its coverage counts "
            "(cut or torn): readers list blocks/ instead",
        )
    return (
        "error",
        "index-mismatch",
        f"{PREFIX_COVERAGE} counts {count} records in {name}, but the chain has "
        f"{len(ours) // size} blocks whose hashes start so",
    )
