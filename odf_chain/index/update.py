"""Writing the index: with a head move, after a reader's catch-up, after a rebuild.

Everything here is best effort. The index is a cache: a write that fails, or a crash between
the head move and the index update, leaves it stale, and readers detect a stale index (its head
snapshot does not name the head) and repair it. Order makes a crash harmless: records first,
the head snapshot last, so a head snapshot that names the head comes after everything it needs.

A commit touches one segment record per block (an append at a known offset) and rewrites the
head snapshot (~1 KB, in place); every 64th block brings the prefix buckets and their coverage
up to it, every 256th adds a periodic snapshot, a SetDataSchema or AddFieldLineage rewrites its
small list. No fsync: a cache need not survive a power loss, and appends must not slow down.
A writer makes it under the head lock, once the head has moved (:class:`CommitRecording`); a
handle that appends again and again, for its first commit and then every 4 blocks
(:class:`IndexBatch`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from odf_chain.errors import OdfChainError
from odf_chain.events import SetDataSchema
from odf_chain.index import prefixes
from odf_chain.index.records import (
    HEAD_SNAPSHOT,
    INDEX_DIR,
    LINEAGE_LIST,
    MAX_LIST_BYTES,
    MAX_SNAPSHOT_BYTES,
    PREFIX_BUCKETS,
    SCHEMA_LIST,
    SEGMENT_ENTRIES,
    SEQ_RECORD_BYTES,
    SNAPSHOT_INTERVAL,
    IndexDamage,
    Pointer,
    Pointers,
    SeqEntry,
    SeqTable,
    Snapshot,
    bucket_name,
    decode_list,
    encode_list,
    encode_seq,
    segment_name,
    segment_offset,
    time_us,
)
from odf_chain.state import DatasetState, carries_lineage
from odf_chain.storage import DerivedStore, Storage

if TYPE_CHECKING:
    from odf_chain.chain import BlockEntry
    from odf_chain.format.multihash import Multihash


def snapshot_name(sequence_number: int) -> str:
    return f"{INDEX_DIR}/snap-{sequence_number:012d}"


def seq_entry(entry: BlockEntry) -> SeqEntry:
    return SeqEntry(entry.block.sequence_number, entry.hash, time_us(entry.block.system_time))


def record_commit(
    storage: Storage,
    before: DatasetState,
    steps: Sequence[tuple[BlockEntry, DatasetState]],
    *,
    repair: bool = True,
) -> bool:
    """Add the blocks a head move just committed (each with the state after it), on top of
    ``before``; True when the index then names the head (or a later one). Never raises: False
    leaves a stale or partial index, which the caller repairs (:mod:`odf_chain.transaction`'s
    hook) or readers catch up with.

    ``repair=False`` is the usual path alone (:class:`CommitRecording`, under the head lock):
    anything unusual (a new chain, a stale index, prefix buckets that cannot be extended)
    returns False before it drops or rewrites anything, for the caller to repair once the lock
    is released (a repair may read the whole seq table)."""
    with contextlib.suppress(*_ERRORS), storage.derived_batch():
        return _record_commit(storage, before, steps, repair)
    return False


_ERRORS = (OdfChainError, OSError, IndexDamage, ValueError)


class CommitRecording:
    """The usual index update of one commit (:meth:`record`), which its head move runs once
    the head has moved, under the head lock
    (:meth:`~odf_chain.storage.base.HeadStore.compare_and_swap_head`'s ``once_moved``): no
    other writer's usual update can come between (repairs, a reader's saved catch-up and
    ``odf-chain index`` write unlocked: like everything in the index, what they write is
    checked before it is believed). With a writer's ``batch`` the update may be deferred
    (:class:`IndexBatch`).
    :attr:`done` False leaves the repair to the transaction's post-commit hook."""

    def __init__(
        self,
        storage: Storage,
        before: DatasetState,
        steps: Sequence[tuple[BlockEntry, DatasetState]],
        batch: IndexBatch | None = None,
    ) -> None:
        self.storage, self.before, self.steps, self.batch = storage, before, steps, batch
        self.done = False

    def record(self) -> None:
        batch = self.batch
        if batch is None or not self.storage.locks_head:
            self.done = record_commit(self.storage, self.before, self.steps, repair=False)
        else:
            self.done = batch.record(self.storage, self.before, self.steps)


INDEX_BATCH = 4
"""Blocks of one writer the index's usual update takes at once: a writer that appends again
and again updates it once every 4 blocks (:class:`IndexBatch`)."""


class IndexBatch:
    """A writer's deferred index updates (one :class:`~odf_chain.dataset.Dataset` handle's):
    the blocks it committed since the index last named its head, at most :data:`INDEX_BATCH`
    - 1 of them.

    Why it may wait: the index is a cache, and a reader that finds it behind the head walks back
    to the block its head snapshot names and folds the blocks between
    (:func:`odf_chain.index.read.open_index`, about 0.1 ms a block), which is what a crash
    between a head move and its update leaves anyway. Why it waits: where syncs are cheap the
    update was a fifth of an append's CPU (a read, two writes and an encoding, ~0.2 ms); three
    appends in four now do none of it, and the fourth writes four blocks' records at once.
    What it costs: a reader while the writer appends catches up at most three blocks.

    Written at once: a writer's first commit (a stale index, a crash's, is repaired then, by the
    transaction's hook), a commit not made on top of the last one this batch saw (another writer
    came between: the usual path or the repair then takes it), and a commit carrying a
    SetDataSchema or field lineage (readers of the schema history and of lineage take those
    from the index's lists, which must end at the head's). :meth:`flush` (``Dataset.flush``, a
    ``with`` block's end; best effort, not waiting for the lock, the handle's collection and
    the process's exit) writes what waits, under the head lock, when the head is still the
    batch's last block. Stores without a head lock record every commit: there a flush would
    run unlocked, and a reader's catch-up is a round trip per block. A forked child leaves its
    parent's batch alone."""

    def __init__(self) -> None:
        self.before: DatasetState | None = None
        self.steps: list[tuple[BlockEntry, DatasetState]] = []
        self.recorded: Multihash | None = None  # the head the index named after our update
        self._lock = threading.Lock()  # a flush from another thread (the handle's collection)
        self._pid = os.getpid()

    def record(
        self,
        storage: Storage,
        before: DatasetState,
        steps: Sequence[tuple[BlockEntry, DatasetState]],
    ) -> bool:
        """Under the head lock, the head just moved from ``before`` over ``steps``: defer them
        (True: nothing left to repair), or write them with what was deferred."""
        if self._pid != os.getpid():
            self._forked()
        with self._lock:
            tail = self.steps[-1][0].hash if self.steps else self.recorded
            if tail is not None and before.head == tail:
                if not self.steps:
                    self.before = before
                self.steps.extend(steps)
                if len(self.steps) < INDEX_BATCH and not any(_listed(e) for e, _ in steps):
                    return True
            else:  # another writer came between: what we deferred is theirs to repair
                self.before, self.steps = before, list(steps)
            first, taken = self.before, self.steps
            self.before, self.steps, self.recorded = None, [], None
        assert first is not None
        if not record_commit(storage, first, taken, repair=False):
            return False
        self.recorded = taken[-1][0].hash
        return True

    def _forked(self) -> None:
        """In a forked child: the batch (and its lock, which a parent's thread may have held
        at the fork) is the parent's to write; the child starts its own."""
        self.before, self.steps, self.recorded = None, [], None
        self._lock, self._pid = threading.Lock(), os.getpid()

    @property
    def pending(self) -> int:
        """Blocks deferred."""
        return len(self.steps)

    def flush(self, storage: Storage, timeout: float = 1.0) -> bool:
        """Write what is deferred, under the head lock (waiting at most ``timeout`` s for it),
        if the head is still the last block deferred; True when the index was written (or
        nothing waited). Either way nothing is left deferred. Never raises: a flush that cannot
        be made leaves the index behind, which readers catch up with and the next write on
        this dataset repairs."""
        if self._pid != os.getpid():
            self._forked()
        with self._lock:
            if not self.steps:
                return True
            first, taken = self.before, self.steps
            self.before, self.steps, self.recorded = None, [], None
        assert first is not None
        tail = taken[-1][0].hash
        with contextlib.suppress(Exception), storage.head_lock(timeout):
            if storage.read_head() != str(tail):
                return False  # moved on: its writer's update covers (or repairs) the gap
            if record_commit(storage, first, taken, repair=False):
                self.recorded = tail
                return True
        return False


def _listed(entry: BlockEntry) -> bool:
    """Does the block go in one of the index's lists (schemas, lineage)?"""
    return isinstance(entry.block.event, SetDataSchema) or carries_lineage(entry.block.event)


def _record_commit(
    storage: Storage,
    before: DatasetState,
    steps: Sequence[tuple[BlockEntry, DatasetState]],
    repair: bool,
) -> bool:
    first = steps[0][0].block.sequence_number
    if any(
        entry.block.prev_block_hash != prev
        for (entry, _), prev in zip(steps, [before.head, *(e.hash for e, _ in steps)], strict=False)
    ):
        return False  # not blocks that follow ``before`` one by one: nothing to build on
    if before.head is None:
        if not repair:
            return False
        pointers = Pointers()
        storage.remove_derived(INDEX_DIR)  # a new chain: nothing earlier can be its
    else:
        raw = storage.read_derived(HEAD_SNAPSHOT, MAX_SNAPSHOT_BYTES)
        head = None if raw is None else _decode_head(raw)
        if head is None:  # deleted, or dropped as stale before: to be repaired
            return False
        if (head.sequence_number, head.block_hash) != (before.sequence_number, before.head):
            if not repair:
                return False
            if _already_recorded(storage, head, steps):
                return True
            # Stale (a crash, a failed update) or from a rolled-back branch: drop what is at or
            # past this append's position, so nothing there can lie; the repair does the rest.
            drop_from(storage, first, head)
            return False
        pointers = head.pointers
    entries = [seq_entry(entry) for entry, _ in steps]
    if not write_entries(storage, entries):
        if repair:
            drop_from(storage, first)
        return False
    # the buckets lag the head by fewer than PREFIX_BATCH blocks, and catch up here
    if prefixes.due(first, entries[-1].sequence_number):
        if repair:  # extended, else rewritten from the seq table
            prefixes.record_blocks(storage, entries)
        elif not prefixes.record_blocks(storage, entries, rewrite=False):
            return False  # to rewrite: once the head lock is released
    schemas, lineage = [], []
    for entry, after in steps:
        pointers = pointers.after(entry.block, entry.hash)
        here = Pointer(entry.block.sequence_number, entry.hash)
        if isinstance(entry.block.event, SetDataSchema):
            schemas.append(here)
        if carries_lineage(entry.block.event):
            lineage.append(here)
        if entry.block.sequence_number % SNAPSHOT_INTERVAL == 0:
            write_snapshot(storage, snapshot_name(entry.block.sequence_number), after, pointers)
    for name, added in ((SCHEMA_LIST, schemas), (LINEAGE_LIST, lineage)):
        if added:
            extend_list(storage, name, first, added)
    # in place: the head snapshot changes at every append, and a reader that meets it half
    # written sees a bad checksum and catches up from a periodic snapshot instead
    snapshot = Snapshot.of_state(steps[-1][1], pointers)
    raw = snapshot.encode()
    storage.overwrite_derived(HEAD_SNAPSHOT, raw)
    global _written
    _written = (raw, snapshot)
    return True


_written: tuple[bytes, Snapshot] | None = None
"""The head snapshot this process wrote last, its bytes beside it: the next append (of a writer
that appends again and again) reads those bytes back, and need not decode them."""


def _decode_head(raw: bytes) -> Snapshot:
    """The head snapshot as read: the one this process wrote last when the bytes are the same
    (the file is still read: another writer may have replaced it), else decoded and checked."""
    written = _written
    if written is not None and written[0] == raw:
        return written[1]
    return Snapshot.decode(raw, HEAD_SNAPSHOT)


def _already_recorded(
    storage: Storage, head: Snapshot, steps: Sequence[tuple[BlockEntry, DatasetState]]
) -> bool:
    """Does the head snapshot already describe this commit's last block, or a block past it
    that is the head now? Another writer or a reader that caught up wrote it, while this
    writer was between its head move and this update (concurrent writers on an object
    store): it is kept, else every reader walks the chain from its Seed until one saves a
    new one. A snapshot past this commit that is not the head (a rolled-back branch's) is
    dropped as before."""
    last = steps[-1][0]
    if head.sequence_number < last.block.sequence_number:
        return False
    if head.sequence_number == last.block.sequence_number:
        return head.block_hash == last.hash
    return storage.read_head() == str(head.block_hash)


def write_entries(storage: DerivedStore, entries: Iterable[SeqEntry]) -> bool:
    """Write consecutive entries into their segments, cutting each segment after them (an
    append at block ``s`` drops entries ``>= s``); False when a segment lacks earlier entries."""
    group: list[SeqEntry] = []
    for entry in entries:
        if group and entry.sequence_number % SEGMENT_ENTRIES == 0:
            if not _write_group(storage, group):
                return False
            group = []
        group.append(entry)
    return not group or _write_group(storage, group)


def _write_group(storage: DerivedStore, group: list[SeqEntry]) -> bool:
    first = group[0].sequence_number
    return storage.patch_derived(segment_name(first), segment_offset(first), encode_seq(group))


def write_snapshot(
    storage: DerivedStore, name: str, state: DatasetState, pointers: Pointers
) -> None:
    storage.write_derived(name, Snapshot.of_state(state, pointers).encode())


def extend_list(storage: DerivedStore, name: str, first: int, added: list[Pointer]) -> None:
    """``name`` with its records from block ``first`` on replaced by ``added``."""
    raw = storage.read_derived(name, MAX_LIST_BYTES) or b""
    kept = [p for p in decode_list(raw, name) if p.sequence_number < first]
    storage.write_derived(name, encode_list(kept + added))


def drop_from(storage: DerivedStore, first: int, head: Snapshot | None = None) -> None:
    """Remove everything the index holds about blocks ``>= first``: the head snapshot, later
    segment records and files, later periodic snapshots, later list records.

    ``head``, the head snapshot as the caller read it, is kept when it describes a block
    before ``first``: nothing it needs is dropped, and a reader catches up from it (a few
    blocks) where without it the reader walks the chain from its Seed."""
    if head is None or head.sequence_number >= first:
        storage.remove_derived(HEAD_SNAPSHOT)
    storage.patch_derived(segment_name(first), segment_offset(first), b"")
    own_segment = segment_name(first).rpartition("/")[2]
    for name in storage.list_derived(INDEX_DIR):
        number = name.partition("-")[2]
        if not number.isdigit():
            continue
        if (name.startswith("seq-") and name > own_segment) or (
            name.startswith("snap-") and int(number) >= first
        ):
            storage.remove_derived(f"{INDEX_DIR}/{name}")
    for name in (SCHEMA_LIST, LINEAGE_LIST):
        raw = storage.read_derived(name, MAX_LIST_BYTES)
        if raw is not None:
            try:
                kept = [p for p in decode_list(raw, name) if p.sequence_number < first]
            except IndexDamage:
                storage.remove_derived(name)
                continue
            storage.write_derived(name, encode_list(kept))


SAVE_BATCH = 64 * SEGMENT_ENTRIES
"""Records of a bulk rebuild's table encoded at once by :func:`save_all` (~3.5 MB)."""

PREPARE_MIN_BLOCKS = 1 << 16
"""From this many blocks on, a bulk rebuild that saves creates its files ahead
(:class:`Prepared`)."""


def index_names(blocks: int) -> list[str]:
    """The files a whole index of a sound chain of ``blocks`` blocks is made of, but for the
    head snapshot and the prefix coverage (written last, whole): segments, periodic
    snapshots, the lists, and every prefix bucket (a bucket no block falls in is not kept)."""
    return [
        *(segment_name(s) for s in range(0, blocks, SEGMENT_ENTRIES)),
        *(snapshot_name(s) for s in range(0, blocks, SNAPSHOT_INTERVAL)),
        SCHEMA_LIST,
        LINEAGE_LIST,
        *(bucket_name(b) for b in range(PREFIX_BUCKETS)),
    ]


class Prepared:
    """The index's files created empty ahead of a bulk rebuild's save, by a thread, while the
    rebuild reads the chain.

    At a million blocks the save writes ~9,000 files, and on a busy disk creating them (an
    inode and a directory entry each, through the filesystem's journal) costs more than
    writing them: ~4 s of a 6.5 s save. Created while the walk reads ``blocks/`` (the thread
    spends its time in system calls, which release the interpreter lock), the save then only
    writes into them. Local datasets only: on an object store an empty object is one more
    upload, saving nothing.

    The folder is emptied first, so the old index goes at once (a rebuild replaces it
    anyway). Crash consistency is :func:`save_all`'s: an empty file fails every check a
    reader makes (a segment ending before its blocks, a snapshot without its checksum, a
    bucket shorter than its count, a list not ending at the head snapshot's schema), and
    there is no head snapshot or prefix coverage until the save's end. A rebuild that fails
    (a chain that does not hold) removes the folder: nothing is left. The rebuild touches no
    derived file until it has joined the thread (``files``), so the two never share the
    storage's held descriptors."""

    def __init__(self, storage: Storage, blocks: int) -> None:
        self._storage, self._names = storage, index_names(blocks)
        self._created: list[str] = []
        self._thread = threading.Thread(target=self._create, name="index-prepare", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, storage: Storage, blocks: int) -> Prepared | None:
        from odf_chain.storage import LocalStorage

        if blocks < PREPARE_MIN_BLOCKS or not isinstance(storage, LocalStorage):
            return None
        return cls(storage, blocks)

    def _create(self) -> None:
        with (
            contextlib.suppress(OdfChainError, OSError, ValueError),
            self._storage.derived_batch(),
        ):
            self._storage.remove_derived(INDEX_DIR)
            for name in self._names:
                self._storage.overwrite_derived(name, b"")
                self._created.append(name)

    def files(self) -> frozenset[str]:
        """Wait for the thread; the files it created (empty), the only ones in the folder."""
        self._thread.join()
        return frozenset(self._created)

    def abandon(self) -> None:
        """The rebuild failed: leave no index behind."""
        self.files()
        with contextlib.suppress(OdfChainError, OSError, ValueError):
            self._storage.remove_derived(INDEX_DIR)


def save_all(
    storage: DerivedStore,
    entries: Sequence[SeqEntry] | SeqTable,
    snapshots: Mapping[int, Snapshot],
    head: Snapshot,
    schemas: list[Pointer],
    lineage: list[Pointer],
    *,
    prepared: frozenset[str] | None = None,
) -> None:
    """Write a whole index (after a rebuild), replacing whatever was there. Never raises.
    ``prepared``: the folder was emptied and holds only these files, created empty
    (:class:`Prepared`); the ones the index does not need are removed before the coverage
    and the head snapshot are written.

    Some 9,000 files at a million blocks, so each is written the cheapest way that keeps a
    crash harmless: in place (:meth:`~odf_chain.storage.DerivedStore.overwrite_derived`: no
    temporary file, no rename), no fsync, the folder's descriptors held (``derived_batch``).
    Why a crash at any point (of the process, or of the machine) leaves an index that is whole
    or found wanting, never one that is believed while wrong:

    - The folder is emptied first, so no file of an earlier index survives beside the new
      ones (removals are metadata the filesystem journals in order: a new file that survives
      a power loss comes after the removal that preceded it).
    - Each file carries its own checks: a record of a segment, list or bucket is believed only
      with its CRC-32 and at its place (its sequence number, its offset), a snapshot or the
      prefix coverage only whole with its checksum. A file the crash cut short, left empty or
      filled with zeros (written data not yet on disk) fails them, or holds fewer records
      than what names it needs (a segment ending before the block a reader wants, a bucket
      shorter than its coverage count, a list not ending at the head snapshot's schema):
      :class:`~odf_chain.index.records.IndexDamage`, and the reader rebuilds or lists.
    - What names other files comes after them: the prefix coverage after the buckets, the
      head snapshot (the one file that makes a reader take the index without a catch-up)
      last. Without it a reader walks back from the head to a periodic snapshot (itself
      checked against the block it names) or rebuilds.
    - Whatever the files say, a reader checks it against the blocks it names before using it
      (:mod:`odf_chain.index.read`); verify compares every file with the chain.

    So durability is not needed, only detection: the index is derived, and losing it costs a
    rebuild."""
    with contextlib.suppress(OdfChainError, OSError, ValueError), storage.derived_batch():
        if prepared is None:
            storage.remove_derived(INDEX_DIR)
        written: set[str] = set()

        def write(name: str, raw: bytes) -> None:
            storage.overwrite_derived(name, raw)
            written.add(name)

        if isinstance(entries, SeqTable):  # a bulk rebuild's columns, encoded in batches
            step = SEGMENT_ENTRIES * SEQ_RECORD_BYTES
            for first in range(0, len(entries), SAVE_BATCH):
                raw = entries.encode(first, first + SAVE_BATCH)
                for at in range(0, len(raw), step):
                    write(segment_name(first + at // SEQ_RECORD_BYTES), raw[at : at + step])
        else:
            for start in range(0, len(entries), SEGMENT_ENTRIES):
                write(
                    segment_name(start), encode_seq(list(entries[start : start + SEGMENT_ENTRIES]))
                )
        for seq, snapshot in snapshots.items():
            write(snapshot_name(seq), snapshot.encode())
        write(SCHEMA_LIST, encode_list(schemas))
        write(LINEAGE_LIST, encode_list(lineage))
        if isinstance(entries, SeqTable):
            buckets = prefixes.write_bucket_table(
                storage, entries.hashes, emptied=prepared is not None
            )
            written.update(buckets)
        else:
            prefixes.write_prefixes(storage, ((e.sequence_number, e.block_hash) for e in entries))
        for name in sorted((prepared or frozenset()) - written):  # created, not needed
            storage.remove_derived(name)
        if isinstance(entries, SeqTable) and buckets:
            prefixes.write_coverage(storage, entries.hashes)
        storage.write_derived(HEAD_SNAPSHOT, head.encode())


def save_catch_up(
    storage: DerivedStore,
    base: int,
    entries: Sequence[SeqEntry],
    snapshots: dict[int, Snapshot],
    head: Snapshot,
    schemas: list[Pointer],
    lineage: list[Pointer],
    kept: Snapshot | None = None,
) -> None:
    """After a reader folded blocks ``base+1..head`` onto a checked snapshot at ``base``: write
    them (dropping anything past them first; ``kept``, the head snapshot the reader found, is
    overwritten last instead, see :func:`drop_from`). Never raises."""
    with contextlib.suppress(OdfChainError, OSError, ValueError, IndexDamage):
        drop_from(storage, base + 1, kept)
        if not write_entries(storage, entries):
            return
        prefixes.record_blocks(storage, entries)
        for seq, snapshot in snapshots.items():
            storage.write_derived(snapshot_name(seq), snapshot.encode())
        for name, added in ((SCHEMA_LIST, schemas), (LINEAGE_LIST, lineage)):
            if added:
                extend_list(storage, name, base + 1, added)
        storage.write_derived(HEAD_SNAPSHOT, head.encode())
