"""Reading through the index: the state at any block from a checked snapshot plus a bounded
number of blocks, never believing the index before checking it against the blocks it names.

How a reader gets the head state (:func:`open_index`):

1. The head snapshot names the head (seq + hash): load that block (hash checked), check its
   sequence number and system time, load every block a pointer names (hash, sequence number
   at or below the snapshot's, event kind) and take the schema, vocab, info, license, last
   offset, checkpoint and watermark from them; cross-check what can be (records = last offset
   + 1, slices only with a data block, the lineage event pending is one). No fold.
2. Otherwise (a crash or a failed update left it behind, another writer did not update it, a
   writer's batch is still waiting (:class:`~odf_chain.index.update.IndexBatch`), an operator
   rolled the head back): walk back from the head at most :data:`CATCH_UP` blocks to
   a block a snapshot names (the old head snapshot, or a periodic one whose block the walk
   reached, so it is on this chain), restore that snapshot as in 1, then fold the walked blocks
   forward with :func:`odf_chain.chain.advance` (every rule runs).
3. Otherwise: :func:`rebuild`, one full fold through the existing code.

A reader keeps what 2 and 3 derived in memory: reads never write the index. ``save=True``
writes it back, for the writers' post-commit hook (:mod:`odf_chain.transaction`), ``odf-chain
index`` and gc.

``state_at(seq k)``: the nearest snapshot ``j <= k`` (restored as in 1), then blocks ``j+1..k``
by hash from the sequence-number table, each checked against its hash, sequence number, system
time and ``prev`` link, folded with ``advance``. A lookup by hash loads that block and requires
the table to name it at its sequence number; by time, a binary search of the table whose answer
is checked against the block found and the one after it.

Every snapshot a read starts from (the head's, the one a catch-up walks back to, a periodic one)
must agree with the schema and lineage lists up to its block, which are read a record at a time
(:meth:`ChainIndex.check_list_tails`), never whole on an open.

What a reader cannot check without a fold: that a block a snapshot names below the head is an
ancestor of the head (a forged index can name genuine blocks of another branch); that it is the
last block of its kind (an older genuine SetInfo or watermark block of this chain named
instead); that a list names every schema or lineage block (one left out); and the values a
snapshot holds as values (record and byte counters, push sources). An append checks its rules
against the state as read, so a forged index can make it write a block that breaks one. Whoever
can forge ``info/`` can write ``blocks/`` and ``refs/`` too; what catches both is ``verify``,
which re-derives all of it and fails on an index that contradicts the chain
(:mod:`odf_chain.index.check`). Data reads and transactional writes prove what they take
(:func:`odf_chain.replay.slices_at`, :func:`odf_chain.replay.proven_transactions`);
``answer(..., verified=True)`` takes nothing from the index. Any damage or disagreement found
here is never shown: the reader falls back to the full fold.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from odf_chain import progress
from odf_chain.chain import BlockEntry, advance, load_block, read_head, walk_back
from odf_chain.errors import IntegrityError, NotFoundError, OdfChainError
from odf_chain.events import (
    SetDataSchema,
)
from odf_chain.format.multihash import BLAKE3, SHA3_256, Multihash
from odf_chain.index import prefixes, update
from odf_chain.index.records import (
    COVERAGE_BYTES,
    HEAD_SNAPSHOT,
    KINDS,
    LINEAGE_LIST,
    LIST_RECORD_BYTES,
    MAX_BUCKET_BYTES,
    MAX_LIST_BYTES,
    MAX_SNAPSHOT_BYTES,
    PREFIX_COVERAGE,
    PREFIX_KEY_BYTES,
    PREFIX_RECORD_BYTES,
    PREFIX_TAIL,
    SCHEMA_LIST,
    SEGMENT_BYTES,
    SEGMENT_ENTRIES,
    SEQ_RECORD_BYTES,
    SNAPSHOT_INTERVAL,
    IndexDamage,
    Pointer,
    Pointers,
    PrefixCoverage,
    SeqEntry,
    SeqTable,
    Snapshot,
    bucket_name,
    bucket_of,
    decode_list,
    decode_prefixes,
    decode_seq,
    raw_seq,
    segment_name,
    segment_offset,
    time_us,
)
from odf_chain.state import EMPTY, DatasetState, Vocabulary, carries_lineage, lineage_of
from odf_chain.storage import Storage

if TYPE_CHECKING:
    from odf_chain.index.derive import Positions
    from odf_chain.walked import WalkedChain

CATCH_UP = 2 * SNAPSHOT_INTERVAL
_LIST_TAIL = 64
"""Records of a list read from its end to check its tail (a record is 46 bytes)."""
"""Blocks a reader walks back from the head to meet a stale index before rebuilding it."""

_HEADERS = tuple(str(Multihash(a, bytes(32)))[: -2 * 32] for a in (BLAKE3, SHA3_256))

T = TypeVar("T")


def _checked(action: Callable[[], T]) -> T:
    """Run a read the index directed: any error it meets (a missing or damaged block, a rule
    broken) means the index cannot be believed, not that the chain is broken; the full fold
    then finds out which, and reports it as usual."""
    try:
        return action()
    except OdfChainError as exc:
        raise IndexDamage(str(exc)) from None


@dataclass
class ChainIndex:
    """A checked view of the index for one head. Built by :func:`open_index`; ``rebuilt``
    when it was derived by a full fold (then everything is in memory and authoritative)."""

    storage: Storage
    head: DatasetState
    pointers: Pointers
    rebuilt: bool = False
    how: str = "checked"  # or "caught up" (from a stale index), "rebuilt" (one full fold)
    _entries: dict[int, SeqEntry] = field(default_factory=dict)  # checked or derived
    _segments: dict[int, list[SeqEntry]] = field(default_factory=dict)
    _states: dict[int, DatasetState] = field(default_factory=dict)  # checked or derived
    _lists: dict[str, list[Pointer]] = field(default_factory=dict)
    _table: SeqTable | None = None  # a bulk rebuild's table, compact
    block_reads: int = 0

    # -- the sequence-number table -------------------------------------------------------------

    @property
    def length(self) -> int:
        return self.head.sequence_number + 1

    def entry(self, seq: int) -> SeqEntry:
        """The table's entry for block ``seq`` (not yet checked against the block)."""
        known = self._entries.get(seq)
        if known is not None:
            return known
        if self._table is not None and 0 <= seq < len(self._table):
            return self._table[seq]
        if self.rebuilt:
            raise IndexDamage(f"block {seq} is not in the rebuilt index")
        number = seq // SEGMENT_ENTRIES
        segment = self._segments.get(number)
        if segment is None:
            name = segment_name(seq)
            raw = _checked(lambda: self.storage.read_derived(name, SEGMENT_BYTES))
            if raw is None:
                raise IndexDamage(f"{name} is missing")
            segment = decode_seq(raw, number * SEGMENT_ENTRIES, name)
            self._segments[number] = segment
        position = seq - number * SEGMENT_ENTRIES
        if position >= len(segment):
            raise IndexDamage(f"{segment_name(seq)} ends before block {seq}")
        return segment[position]

    def one_entry(self, seq: int) -> SeqEntry:
        """:meth:`entry` for a lookup of one block: from a segment not yet read, only that
        record is decoded (and checked), the segment is not kept."""
        number = seq // SEGMENT_ENTRIES
        if self.rebuilt or seq in self._entries or number in self._segments:
            return self.entry(seq)
        name = segment_name(seq)
        raw = _checked(lambda: self.storage.read_derived(name, SEGMENT_BYTES))
        if raw is None:
            raise IndexDamage(f"{name} is missing")
        offset = segment_offset(seq)
        record = raw[offset : offset + SEQ_RECORD_BYTES]
        if len(raw) % SEQ_RECORD_BYTES or len(record) < SEQ_RECORD_BYTES:
            raise IndexDamage(f"{name} ends before block {seq}, or is cut")
        return decode_seq(record, seq, name)[0]

    def table_hashes(self, first: int, stop: int) -> list[bytes]:
        """The table's block hashes (multihash bytes) of blocks ``first..stop-1``, in bulk:
        each segment read once, its records checked (checksum, place), no Multihash built and
        nothing cached. Not yet checked against the blocks: a bulk reader loads each block,
        checks its hash and links it to the next (:func:`odf_chain.replay.listed_slices_at`)."""
        if not 0 <= first <= stop <= self.length:
            raise IndexDamage(f"blocks {first}..{stop - 1} are not all in the table")
        if self.rebuilt:  # everything derived in memory
            return [bytes(self.entry(s).block_hash) for s in range(first, stop)]
        out: list[bytes] = []
        seq = first
        while seq < stop:
            number = seq // SEGMENT_ENTRIES
            end = min(stop, (number + 1) * SEGMENT_ENTRIES)
            if all(s in self._entries for s in range(seq, end)):  # a catch-up derived them
                out += [bytes(self._entries[s].block_hash) for s in range(seq, end)]
                seq = end
                continue
            known = self._segments.get(number)
            if known is not None:
                records = [(e.sequence_number, 0, bytes(e.block_hash)) for e in known]
            else:
                name = segment_name(seq)
                raw = _checked(lambda name=name: self.storage.read_derived(name, SEGMENT_BYTES))
                if raw is None:
                    raise IndexDamage(f"{name} is missing")
                records = raw_seq(raw, number * SEGMENT_ENTRIES, name)
            base = number * SEGMENT_ENTRIES
            if end - base > len(records):
                raise IndexDamage(f"{segment_name(seq)} ends before block {end - 1}")
            out += [records[s - base][2] for s in range(seq, end)]
            seq = end
        for s in range(first, stop):  # what this reader derived itself wins over the files
            known = self._entries.get(s)
            if known is not None:
                out[s - first] = bytes(known.block_hash)
        return out

    # -- hash prefixes ---------------------------------------------------------------------

    def blocks_with_prefix(self, forms: tuple[str, ...]) -> list[Multihash]:
        """The blocks of this chain whose hash (multibase text) starts with one of ``forms``,
        oldest first: from the prefix bucket of each form (one file each) and the seq table
        past the coverage, every candidate confirmed (the table names a block of that hash at
        that sequence number, and that block loads, hash checked, with that number). A bucket
        or coverage that is missing, damaged, of another branch or far behind the head, or a
        record the table and the block do not confirm, raises IndexDamage: the caller lists
        ``blocks/`` instead. So does a coverage whose counts are not one record a block, or a
        bucket with a record outside its bucket or out of sequence order (a record deleted or
        added). A rebuilt index answers from memory.

        The buckets make a lookup fast; they do not decide it. Finding nothing, the caller
        lists ``blocks/`` before it says there is no such block
        (:func:`odf_chain.replay._in_chain`). What a reader cannot rule out without listing
        every time: a bucket rewritten so that every count still adds up (a record deleted,
        and a valid one added to another bucket), which could make a prefix two chain blocks
        share look unique. Verify derives every bucket from the chain and reports that as
        ``index-mismatch`` (:mod:`odf_chain.index.check`)."""
        top = self.head.sequence_number
        if self.rebuilt:
            return [
                self.entry(s).block_hash
                for s in range(top + 1)
                if str(self.entry(s).block_hash).startswith(forms)
            ]
        raw = _checked(lambda: self.storage.read_derived(PREFIX_COVERAGE, COVERAGE_BYTES))
        if raw is None:
            raise IndexDamage(f"{PREFIX_COVERAGE} is missing")
        coverage = PrefixCoverage.decode(raw, PREFIX_COVERAGE)
        covered = coverage.sequence_number
        if covered > top or bytes(self.one_entry(covered).block_hash) != coverage.block_hash:
            raise IndexDamage(f"{PREFIX_COVERAGE} names a block that is not the table's")
        if top - covered > PREFIX_TAIL:
            raise IndexDamage(f"{PREFIX_COVERAGE} is {top - covered} blocks behind the head")
        if sum(coverage.counts) != covered + 1:  # one record a block: none dropped or added
            raise IndexDamage(f"{PREFIX_COVERAGE} counts other than one record a block")
        wanted: dict[int, str] = {}  # candidate sequence number -> the digest prefix it matched
        for form in forms:
            header = next((h for h in _HEADERS if form.startswith(h)), None)
            if header is None:
                continue  # no block hash this dataset can hold starts so
            digest = form[len(header) :]
            if len(digest) < 3:
                raise IndexDamage(f"{form!r} is too short to name a bucket")
            bucket = int(digest[:3], 16)
            count = coverage.counts[bucket]
            name = bucket_name(bucket)
            data = b""
            if count:  # its counted records only: what a crash left past them is never read
                found = _checked(
                    lambda name=name, count=count: self.storage.read_derived_range(
                        name, 0, count * PREFIX_RECORD_BYTES, MAX_BUCKET_BYTES
                    )
                )
                if found is None:
                    raise IndexDamage(f"{name} is missing")
                data = found[1]
            key = digest[: 2 * PREFIX_KEY_BYTES]
            last = -1
            for found, seq in decode_prefixes(data, count, name):
                if bucket_of(found) != bucket or seq <= last:
                    raise IndexDamage(f"{name}: a record out of its bucket or out of order")
                last = seq
                if found.hex().startswith(key):
                    if seq > covered:
                        raise IndexDamage(f"{name}: block {seq} is past its coverage")
                    wanted[seq] = key
            for seq in range(covered + 1, top + 1):  # the tail the buckets do not hold yet
                if str(self.entry(seq).block_hash).startswith(form):
                    wanted[seq] = key
        out = []
        for seq in sorted(wanted):
            block_hash = self.one_entry(seq).block_hash
            if not str(block_hash)[len(_HEADERS[0]) :].startswith(wanted[seq]):
                raise IndexDamage(f"the prefix record of block {seq} is not the table's block")
            if not str(block_hash).startswith(forms):
                continue  # the same digest under another algorithm's header
            if self._load(block_hash).block.sequence_number != seq:
                raise IndexDamage(f"block {seq} of the table does not carry that number")
            out.append(block_hash)
        return out

    def _load(self, block_hash: Multihash) -> BlockEntry:
        self.block_reads += 1
        return _checked(lambda: load_block(self.storage, block_hash))

    # -- states ----------------------------------------------------------------------------------

    def state_at_seq(self, seq: int) -> DatasetState:
        if not 0 <= seq < self.length:
            raise NotFoundError(
                f"no block with sequence number {seq} "
                f"(the chain has {self.length} blocks, 0..{self.length - 1})"
            )
        if seq == self.head.sequence_number:
            return self.head
        if seq in self._states:
            return self._states[seq]
        base = seq - seq % SNAPSHOT_INTERVAL
        state = self._states.get(base)
        if state is None:
            state = self._periodic(base)
        for s in range(base + 1, seq + 1):
            state = self._fold_one(state, s)
        return state

    def _periodic(self, seq: int) -> DatasetState:
        """The periodic snapshot at block ``seq``, restored and checked."""
        name = update.snapshot_name(seq)
        raw = _checked(lambda: self.storage.read_derived(name, MAX_SNAPSHOT_BYTES))
        if raw is None:
            raise IndexDamage(f"{name} is missing")
        snapshot = Snapshot.decode(raw, name)
        if snapshot.sequence_number != seq or snapshot.block_hash != self.entry(seq).block_hash:
            raise IndexDamage(f"{name} does not name block {seq} of the table")
        state, pointers = restore(self, snapshot)
        self.check_list_tails(state, pointers)
        self._states[seq] = state
        return state

    def _fold_one(self, state: DatasetState, seq: int) -> DatasetState:
        """``state`` (at ``seq - 1``) advanced by block ``seq``, found through the table."""
        entry = self.entry(seq)
        loaded = self._load(entry.block_hash)
        block = loaded.block
        if (
            block.sequence_number != seq
            or block.prev_block_hash != state.head
            or time_us(block.system_time) != entry.time_us
        ):
            raise IndexDamage(f"the table's block {seq} ({entry.block_hash}) does not fit there")
        return _checked(lambda: advance(state, block, loaded.hash))

    def seq_of_hash(self, block_hash: Multihash) -> int:
        """The sequence number of ``block_hash`` in this chain.

        A block file that is not in the chain (an orphan: a losing or crashed writer's block,
        one a rollback left behind) is told apart without a fold when its sequence number is
        past the head, or when the table's block at that number loads (hash checked) and is
        another block of that number: the trust a fold through the table gives its blocks."""
        try:
            loaded = load_block(self.storage, block_hash)
        except NotFoundError:
            raise NotFoundError(f"block {block_hash} is not in this chain") from None
        self.block_reads += 1
        seq = loaded.block.sequence_number
        orphan = NotFoundError(
            f"block {block_hash} (sequence number {seq}) is a block file of "
            f"{self.storage.location} but not in its chain (an orphan; verify lists them)"
        )
        if seq >= self.length:
            raise orphan
        listed = self.entry(seq).block_hash
        if listed == block_hash:
            return seq
        if self.rebuilt:
            raise orphan
        if self._load(listed).block.sequence_number == seq:
            raise orphan
        raise IndexDamage(f"block {block_hash} is not where the table says")

    def seq_at_time(self, moment: datetime) -> int:
        """The last block written at or before ``moment``: a binary search of the table, then
        the block found and the one after it are checked."""
        wanted = time_us(moment)
        times = _LazyTimes(self)
        found = bisect.bisect_right(times, wanted) - 1
        for seq in (found, found + 1):
            if 0 <= seq < self.length:
                entry = self.entry(seq)
                block = self._load(entry.block_hash).block
                if block.sequence_number != seq or time_us(block.system_time) != entry.time_us:
                    raise IndexDamage(f"the table's block {seq} does not match its time")
        if found < 0:
            raise NotFoundError(f"no block was written at or before {moment.isoformat()}")
        return found

    # -- lists -----------------------------------------------------------------------------------

    def _list(self, name: str) -> list[Pointer]:
        pointers = self._lists.get(name)
        if pointers is None:
            raw = _checked(lambda: self.storage.read_derived(name, MAX_LIST_BYTES))
            # missing: none yet (the callers check the last one against the state)
            pointers = [] if raw is None else decode_list(raw, name)
            self._lists[name] = pointers
        return pointers

    def check_list_tails(self, state: DatasetState, pointers: Pointers) -> None:
        """A restored snapshot's schema and last lineage event (``state``, ``pointers``) must be
        the last the lists name up to its block: a snapshot pointing at an older (genuine)
        schema block is caught here, whichever snapshot a read starts from (the head's, one a
        catch-up walked back to, a periodic one)."""
        upto = state.sequence_number
        if self._last_listed(SCHEMA_LIST, upto) != pointers.schema:
            raise IndexDamage(f"{SCHEMA_LIST} does not end at the snapshot's schema at {upto}")
        lineage = self._last_listed(LINEAGE_LIST, upto)
        if (None if lineage is None else lineage.sequence_number) != (
            state.last_lineage_sequence_number
        ):
            raise IndexDamage(f"{LINEAGE_LIST} does not end at the last lineage event at {upto}")

    def _last_listed(self, name: str, upto: int) -> Pointer | None:
        """The last record of list ``name`` at or before block ``upto``, from the list's last
        :data:`_LIST_TAIL` records (one positioned read locally; object stores read the file
        once either way), not the whole list: every open checks the lists' tails, and a chain
        whose writes carry lineage has a record per write. Only when records past ``upto``
        fill that tail is the list read whole (once, kept)."""
        known = self._lists.get(name)
        if known is None:
            found = _checked(
                lambda: self.storage.read_derived_range(
                    name,
                    -_LIST_TAIL * LIST_RECORD_BYTES,
                    _LIST_TAIL * LIST_RECORD_BYTES,
                    MAX_LIST_BYTES,
                )
            )
            if found is None:
                return None  # none yet
            size, tail = found
            if size % LIST_RECORD_BYTES:
                raise IndexDamage(f"{name}: {size} bytes, not whole records (torn or cut)")
            first = (size - len(tail)) // LIST_RECORD_BYTES
            records = decode_list(tail, name, first)
            if first == 0 or (records and records[0].sequence_number <= upto):
                return next((p for p in reversed(records) if p.sequence_number <= upto), None)
            known = self._list(name)
        return next((p for p in reversed(known) if p.sequence_number <= upto), None)

    def listed(self, name: str, upto: int) -> list[BlockEntry]:
        """The blocks list ``name`` (schemas or lineage) names up to block ``upto``, loaded and
        checked (kind, sequence number, the table's hash there)."""
        pointers = self._list(name)
        is_kind = _is_schema if name == SCHEMA_LIST else carries_lineage
        kind = "SetDataSchema" if name == SCHEMA_LIST else "lineage event"
        out: list[BlockEntry] = []
        for pointer in pointers:
            if pointer.sequence_number > upto:
                break
            if self.entry(pointer.sequence_number).block_hash != pointer.block_hash:
                raise IndexDamage(f"{name}: block {pointer.sequence_number} is not the table's")
            loaded = self._load(pointer.block_hash)
            if loaded.block.sequence_number != pointer.sequence_number or not is_kind(
                loaded.block.event
            ):
                raise IndexDamage(f"{name}: block {pointer.sequence_number} is not a {kind}")
            out.append(loaded)
        return out

    def schema_blocks(self) -> list[BlockEntry]:
        """Every SetDataSchema, oldest first; the last must be the head snapshot's schema."""
        found = self.listed(SCHEMA_LIST, self.head.sequence_number)
        last = found[-1].block.sequence_number if found else None
        if last != self.head.schema_sequence_number:
            raise IndexDamage(f"{SCHEMA_LIST} does not end at the schema in force")
        return found

    def lineage_blocks(self, state: DatasetState) -> list[BlockEntry]:
        """Every block that is or carries field lineage up to ``state``'s block (a state of this
        chain), oldest first."""
        found = self.listed(LINEAGE_LIST, state.sequence_number)
        last = found[-1].block.sequence_number if found else None
        if last != state.last_lineage_sequence_number:
            raise IndexDamage(f"{LINEAGE_LIST} does not end at the last lineage event")
        return found


class _LazyTimes:
    """The table's times as a sequence, read segment by segment as a binary search asks."""

    def __init__(self, index: ChainIndex) -> None:
        self._index = index

    def __len__(self) -> int:
        return self._index.length

    def __getitem__(self, seq: int) -> int:
        return self._index.entry(seq).time_us


def _is_schema(event: object) -> bool:
    return isinstance(event, SetDataSchema)


def restore(index: ChainIndex, snapshot: Snapshot) -> tuple[DatasetState, Pointers]:
    """The state a snapshot describes, from the genuine blocks it names (see the module)."""
    seq = snapshot.sequence_number
    named = index._load(snapshot.block_hash)
    if named.block.sequence_number != seq or time_us(named.block.system_time) != snapshot.time_us:
        raise IndexDamage(f"snapshot of block {seq}: the block it names does not match")
    events = {}
    for kind, pointer in snapshot.pointers.named():
        if pointer.sequence_number > seq:
            raise IndexDamage(f"snapshot of block {seq}: {kind} points past it")
        loaded = named if pointer.block_hash == named.hash else index._load(pointer.block_hash)
        event = loaded.block.event
        if loaded.block.sequence_number != pointer.sequence_number or not KINDS[kind](event):
            raise IndexDamage(f"snapshot of block {seq}: {kind} names the wrong block")
        events[kind] = event
    seed = events.get("seed")
    if seed is None or snapshot.pointers.seed.sequence_number != 0:
        raise IndexDamage(f"snapshot of block {seq}: no Seed at block 0")
    data, checkpoint = events.get("data"), events.get("checkpoint")
    watermark = events.get("watermark")
    schema_pointer = snapshot.pointers.schema
    state = DatasetState(
        head=named.hash,
        sequence_number=seq,
        system_time=named.block.system_time,
        dataset_id=seed.dataset_id,
        dataset_kind=seed.dataset_kind,
        schema=None if "schema" not in events else events["schema"].arrow_schema,
        schema_sequence_number=None if schema_pointer is None else schema_pointer.sequence_number,
        vocab=Vocabulary.from_event(events["vocab"]) if "vocab" in events else Vocabulary(),
        info=events.get("info"),
        license=events.get("license"),
        last_offset=None if data is None else data.new_data.offset_interval.end,
        last_checkpoint=None if checkpoint is None else checkpoint.new_checkpoint.physical_hash,
        watermark=None if watermark is None else watermark.new_watermark,
        transform=events.get("transform"),
        last_run_inputs=events["run"].query_inputs if "run" in events else (),
        **snapshot.values(),
    )
    _cross_check(index, snapshot, state)
    return state, snapshot.pointers


def _cross_check(index: ChainIndex, snapshot: Snapshot, state: DatasetState) -> None:
    """What a snapshot's values must agree with, by the rules, without a fold."""
    where = f"snapshot of block {snapshot.sequence_number}"
    if state.num_records != state.next_offset:
        raise IndexDamage(
            f"{where}: {state.num_records} records, but offsets end at {state.last_offset}"
        )
    if (state.num_slices == 0) != (state.last_offset is None) or state.data_size < 0:
        raise IndexDamage(f"{where}: slice count and last offset disagree")
    last = state.last_lineage_sequence_number
    if last is not None and last > snapshot.sequence_number:
        raise IndexDamage(f"{where}: the last lineage event is past it")
    pending = state.lineage_pending
    if pending is not None:
        if pending.sequence_number != last:
            raise IndexDamage(f"{where}: pending lineage is not the last lineage event")
        event = index._load(pending.block_hash).block
        carried = lineage_of(event.event)
        if (
            event.sequence_number != pending.sequence_number
            or carried is None
            or carried.run.offsets is None
            or carried.run.offsets.end != pending.uncovered.end
        ):
            raise IndexDamage(f"{where}: pending lineage names the wrong block")


# -- opening ------------------------------------------------------------------------------------


def open_index(
    storage: Storage, head: Multihash | None = None, *, save: bool = False
) -> ChainIndex:
    """A checked index for the current head (or ``head``): from the files when they check out
    (reading a bounded number of blocks), else rebuilt by one full fold. ``save``: write the
    catch-up or rebuild back, best effort (a writer's post-commit hook, ``odf-chain index``,
    gc). Readers never write: a stale index costs each reader its catch-up (at most
    :data:`CATCH_UP` blocks) or a rebuild in memory until a writer or the command repairs it."""
    head = read_head(storage) if head is None else head
    try:
        return _from_files(storage, head, save=save)
    except IndexDamage:
        return rebuild(storage, head, save=save)


def _read_snapshot(storage: Storage, name: str) -> Snapshot | None:
    """The snapshot ``name``, or None when it is missing or damaged (another may serve)."""
    try:
        raw = _checked(lambda: storage.read_derived(name, MAX_SNAPSHOT_BYTES))
        return None if raw is None else Snapshot.decode(raw, name)
    except IndexDamage:
        return None


def _from_files(storage: Storage, head: Multihash, *, save: bool = False) -> ChainIndex:
    head_snapshot = _read_snapshot(storage, HEAD_SNAPSHOT)
    probe = ChainIndex(storage, EMPTY, Pointers())
    if head_snapshot is not None and head_snapshot.block_hash == head:
        state, pointers = restore(probe, head_snapshot)
        index = replace(probe, head=state, pointers=pointers)
        index.check_list_tails(state, pointers)
        return index
    # Catch up: walk back to a block a snapshot names, then fold forward.
    walked: list[BlockEntry] = []
    base: tuple[DatasetState, Pointers] | None = None
    walker = walk_back(storage, head)
    while base is None and len(walked) < CATCH_UP:
        entry = _checked(lambda: next(walker, None))
        probe.block_reads += 1
        if entry is None:  # reached the Seed: the walk holds the whole chain
            base = (EMPTY, Pointers())
            break
        seq = entry.block.sequence_number
        if head_snapshot is not None and head_snapshot.block_hash == entry.hash:
            base = restore(probe, head_snapshot)
        elif seq % SNAPSHOT_INTERVAL == 0 and seq > 0:
            snapshot = _read_snapshot(storage, update.snapshot_name(seq))
            if snapshot is not None and snapshot.block_hash == entry.hash:
                base = restore(probe, snapshot)
        if base is None:
            walked.append(entry)
    if base is None:
        raise IndexDamage(f"no snapshot within {CATCH_UP} blocks of the head")
    state, pointers = base
    if state.head is not None:  # a snapshot, not the Seed: checked as the head's is
        probe.check_list_tails(state, pointers)
    walked.reverse()
    catch_up = _Derived(state, pointers)
    for entry in walked:
        _checked(lambda entry=entry: catch_up.add(entry))
    index = replace(probe, head=catch_up.state, pointers=catch_up.pointers, how="caught up")
    index._entries.update({e.sequence_number: e for e in catch_up.entries})
    index._states.update(catch_up.states)
    if state.head is None:  # the whole chain was walked: authoritative, like a rebuild
        index.rebuilt, index.how = True, "rebuilt"
        index._lists.update({SCHEMA_LIST: catch_up.schemas, LINEAGE_LIST: catch_up.lineage})
        if save:
            catch_up.save_all(storage)
    elif save:
        catch_up.save_catch_up(storage, state.sequence_number, head_snapshot)
    return index


@dataclass
class _Derived:
    """What a fold over blocks derives for the index (a rebuild's, or a catch-up's)."""

    state: DatasetState
    pointers: Pointers
    entries: list[SeqEntry] = field(default_factory=list)
    states: dict[int, DatasetState] = field(default_factory=dict)
    snapshots: dict[int, Snapshot] = field(default_factory=dict)
    schemas: list[Pointer] = field(default_factory=list)
    lineage: list[Pointer] = field(default_factory=list)

    def add(self, entry: BlockEntry) -> None:
        """Fold ``entry`` (by the one fold: every rule runs) and note what the index keeps."""
        block = entry.block
        self.state = advance(self.state, block, entry.hash)
        self.pointers = self.pointers.after(block, entry.hash)
        seq = block.sequence_number
        self.entries.append(update.seq_entry(entry))
        if isinstance(block.event, SetDataSchema):
            self.schemas.append(Pointer(seq, entry.hash))
        if carries_lineage(block.event):
            self.lineage.append(Pointer(seq, entry.hash))
        if seq % SNAPSHOT_INTERVAL == 0:
            self.states[seq] = self.state
            self.snapshots[seq] = Snapshot.of_state(self.state, self.pointers)

    def head_snapshot(self) -> Snapshot:
        return Snapshot.of_state(self.state, self.pointers)

    def save_all(self, storage: Storage) -> None:
        update.save_all(
            storage, self.entries, self.snapshots, self.head_snapshot(), self.schemas, self.lineage
        )

    def save_catch_up(self, storage: Storage, base: int, kept: Snapshot | None) -> None:
        update.save_catch_up(
            storage,
            base,
            self.entries,
            self.snapshots,
            self.head_snapshot(),
            self.schemas,
            self.lineage,
            kept,
        )


class _Findings:
    """What a bulk rebuild wants of verify's walk and fold: was there an error? (The fold
    block by block then words it, as a rebuild always did.)"""

    def __init__(self) -> None:
        self.head: str | None = None
        self.bytes_hashed = self.blocks_checked = 0
        self.errors = 0

    def add(self, severity: str, rule: str, message: str, **where: object) -> None:
        self.errors += severity == "error"


def rebuild(storage: Storage, head: Multihash | None = None, *, save: bool = False) -> ChainIndex:
    """Derive the whole index (the chain's own errors propagate: a missing or altered block, a
    broken rule) and return it; ``save``: also write it (best effort: a dataset that cannot be
    written still answers).

    In bulk where it can (:func:`_rebuild_in_bulk`: verify's one pass over ``blocks/`` and its
    fold, in memory that holds columns, not objects); by one fold block by block otherwise."""
    head = read_head(storage) if head is None else head
    progress.tell(f"{storage.location}: building its index (reading every block)")
    index = _rebuild_in_bulk(storage, head, save=save)
    if index is None:
        index = _rebuild_by_fold(storage, head, save=save)
    progress.tell(f"index of {index.length:,} blocks built" + (" and saved" if save else ""))
    return index


def _rebuild_in_bulk(storage: Storage, head: Multihash, *, save: bool) -> ChainIndex | None:
    """The index from verify's walk and fold (every rule runs, runs of plain blocks at a
    time), or None where those found anything wrong (the fold block by block then says
    what) or the chain is too short to pay for a pass over ``blocks/``."""
    from odf_chain.chain_fold import refold
    from odf_chain.chain_walk import walk_chain
    from odf_chain.index.derive import kind_positions, lists_of, pointers_of

    findings = _Findings()

    def read(n: int) -> None:
        progress.tell(f"read {n:,} block files", done=False)

    prepared = None
    if save:  # the index's files created while the chain is read (update.Prepared)
        with contextlib.suppress(OdfChainError):
            blocks = load_block(storage, head).block.sequence_number + 1
            prepared = update.Prepared.start(storage, blocks)
    saved = False
    try:
        walk = walk_chain(storage, findings, head=str(head), progress=read)
        chain = walk.chain
        if findings.errors or not walk.complete or not len(chain):
            return None
        progress.tell(f"read {len(chain):,} blocks; checking every rule")
        _, state, periodic = refold(chain, findings, every=SNAPSHOT_INTERVAL)
        chain.folded()
        if findings.errors or state.head != head:
            return None
        try:
            table = SeqTable(*chain.hashes_and_times())
        except OdfChainError:
            return None
        positions = kind_positions(chain)
        head_pointers = pointers_of(chain)
        schemas, lineage = lists_of(chain)
        if save:
            progress.tell(f"writing the index of {len(chain):,} blocks")
            snapshots = _Snapshots(chain, positions, periodic)
            update.save_all(
                storage,
                table,
                snapshots,
                Snapshot.of_state(state, head_pointers),
                schemas,
                lineage,
                prepared=None if prepared is None else prepared.files(),
            )
            saved = True
    finally:
        if prepared is not None and not saved:  # a chain that does not hold: no index left
            prepared.abandon()
    index = ChainIndex(storage, state, head_pointers, rebuilt=True, how="rebuilt")
    index.block_reads = len(chain)
    index._table = table
    index._states.update(periodic)
    index._lists.update({SCHEMA_LIST: schemas, LINEAGE_LIST: lineage})
    return index


class _Snapshots(Mapping[int, Snapshot]):
    """The periodic snapshots of a bulk rebuild, each made when it is asked for (as it is
    written): never all at once."""

    def __init__(
        self, chain: WalkedChain, positions: dict[str, Positions], periodic: dict[int, DatasetState]
    ) -> None:
        self._chain, self._positions, self._periodic = chain, positions, periodic

    def __getitem__(self, seq: int) -> Snapshot:
        from odf_chain.index.derive import pointers_from

        pointers = pointers_from(self._chain, self._positions, seq)
        return Snapshot.of_state(self._periodic[seq], pointers)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._periodic))

    def __len__(self) -> int:
        return len(self._periodic)


def _rebuild_by_fold(storage: Storage, head: Multihash, *, save: bool) -> ChainIndex:
    """One fold block by block from the Seed (every block an object: memory grows with the
    chain): where the bulk rebuild found something wrong, this words it."""
    entries = list(walk_back(storage, head))
    entries.reverse()
    derived = _Derived(EMPTY, Pointers())
    for entry in entries:  # errors here are the chain's: shown as they are
        derived.add(entry)
    if save:
        derived.save_all(storage)
    index = ChainIndex(storage, derived.state, derived.pointers, rebuilt=True, how="rebuilt")
    index.block_reads = len(entries)
    index._entries.update({e.sequence_number: e for e in derived.entries})
    index._states.update(derived.states)
    index._lists.update({SCHEMA_LIST: derived.schemas, LINEAGE_LIST: derived.lineage})
    return index


def answer(
    storage: Storage,
    question: Callable[[ChainIndex], T],
    head: Multihash | None = None,
    *,
    verified: bool = False,
) -> T:
    """``question`` asked of the checked index (of the current head, or of ``head``); if the
    index turns out not to be believable on the way (a table entry that does not fit its block,
    a damaged segment), asked again of a rebuilt one. ``verified``: asked of a rebuilt one
    straight away (one full fold from the head: nothing the index holds is believed)."""
    index = rebuild(storage, head) if verified else open_index(storage, head)
    if not index.rebuilt:
        try:
            return question(index)
        except IndexDamage:
            index = rebuild(storage, index.head.head)
    try:
        return question(index)
    except IndexDamage as exc:  # derived just now: only a chain changing under us gets here
        raise IntegrityError(f"{storage.location}: the chain changed while read ({exc})") from None


@dataclass(frozen=True, slots=True)
class IndexStatus:
    """What ``odf-chain index`` found: how the head state was obtained, and whether the index
    on disk now names the head (False: the dataset could not be written)."""

    location: str
    blocks: int
    head: Multihash
    how: str
    saved: bool

    def line(self) -> str:
        saved = "saved" if self.saved else "NOT saved (the dataset's info/ cannot be written)"
        return f"{self.location}: index of {self.blocks} blocks at {self.head}: {self.how}, {saved}"


def check_index(location: str, *, from_scratch: bool = False) -> IndexStatus:
    """Check the index of the dataset at ``location`` as a reader would (repairing it), or
    rebuild it ``from_scratch`` (one full fold of the chain)."""
    from odf_chain.storage import open_storage

    storage = open_storage(location)
    index = rebuild(storage, save=True) if from_scratch else open_index(storage, save=True)
    head = index.head.head
    assert head is not None
    prefixes.ensure(storage, index.head.sequence_number, bytes(head))
    on_disk = _read_snapshot(storage, HEAD_SNAPSHOT)
    saved = on_disk is not None and on_disk.block_hash == head
    return IndexStatus(storage.location, index.length, head, index.how, saved)
