"""Replay: the dataset state at any block.

A *ref* names a block: ``"head"`` (any case: ``HEAD``), a block hash (``f1e20…``, the full
multibase text, its hex in either case) or a unique prefix of one (at least :data:`MIN_PREFIX`
characters), a unique prefix of its digest alone, without the multibase and multihash header
that every block of a chain shares (at least :data:`MIN_DIGEST_PREFIX` hex characters, such as
the 12 ``odf-chain log`` prints; BLAKE3 and SHA3-256 chains alike), a sequence number (``7`` or
``"7"``; so a text of digits only is never a hash prefix), or an ISO-8601 time, meaning the
last block written at or before it. A hex text that can be read both ways (``f1e20ab…``) names
the blocks either reading matches, and must name exactly one.

A prefix names a block of the chain, and is ambiguous when two blocks of the chain share it
(:func:`resolve_ref`): block files that are not in the chain (a losing or crashed writer's
block, say) are not counted. The index's prefix buckets answer in a bounded number of file
reads, every candidate confirmed against the seq table and its block; without them the block
files that start with it are listed, and each placed in the chain through the index.

States, schema history and lineage are answered through the derived index
(:mod:`odf_chain.index.read`): a checked snapshot plus a bounded number of blocks, folded by
the one fold; an index that does not check out is rebuilt by one full fold. :func:`load_chain`
and :func:`fold` remain the full pass (verify, ``Dataset.blocks``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from odf_chain.chain import BlockEntry, advance, read_head, walk_back
from odf_chain.errors import (
    AmbiguousRefError,
    FormatError,
    IntegrityError,
    NotFoundError,
    OdfChainError,
    RuleViolation,
)
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    DatasetKind,
    DataSlice,
    ExecuteTransform,
    LineageInput,
    OffsetInterval,
    SetDataSchema,
    SetTransform,
)
from odf_chain.format.multihash import BLAKE3, SHA3_256, Multihash
from odf_chain.index import read as index_read
from odf_chain.index.records import IndexDamage
from odf_chain.schema.evolution import SchemaDiff, diff_schemas
from odf_chain.state import EMPTY, SOURCE_KEY, DatasetState, lineage_of, recorded_transaction
from odf_chain.storage import Storage

if TYPE_CHECKING:  # the field graph is imported by the lineage answers, not by every read
    from odf_chain.lineage.graph import FieldGraph, FieldRef

Ref = str | int | datetime | Multihash

MIN_PREFIX = 8
"""Shortest hash prefix a ref may be: the multibase and multihash header (``f1e20``, ``f1620``)
is the same for every block of a dataset, so 8 characters hold 3 hex digits of the digest."""
MIN_DIGEST_PREFIX = 6
"""Shortest digest prefix (a hash without its header) a ref may be: 24 bits."""
_FULL = len(str(Multihash("blake3", bytes(32))))  # 69: "f", code, length, 32 digest bytes
_HEADERS = tuple(str(Multihash(a, bytes(32)))[: -2 * 32] for a in (BLAKE3, SHA3_256))
_DIGEST = 2 * 32  # hex characters of a digest
_HEX = frozenset("0123456789abcdef")
_CANDIDATES = 100  # block files listed for an ambiguous prefix before "or more"


def load_chain(storage: Storage) -> list[BlockEntry]:
    """Every block of the chain, oldest first, each checked against its hash."""
    entries = list(walk_back(storage, read_head(storage)))
    entries.reverse()
    return entries


def fold(entries: Iterable[BlockEntry], state: DatasetState = EMPTY) -> DatasetState:
    for entry in entries:
        state = advance(state, entry.block, entry.hash)
    return state


@dataclass(frozen=True, slots=True)
class _Selector:
    """A parsed ref: exactly one of the fields is set (none means head)."""

    block_hash: Multihash | None = None
    prefix: str | None = None  # the start of a block hash's multibase text, or of its digest
    sequence_number: int | None = None
    time: datetime | None = None


def parse_ref(ref: Ref) -> _Selector:
    """What ``ref`` names, without looking at any dataset (see the module for the forms)."""
    if isinstance(ref, Multihash):
        return _Selector(block_hash=ref)
    if isinstance(ref, datetime):
        return _Selector(time=ref if ref.tzinfo else ref.replace(tzinfo=UTC))
    if isinstance(ref, int):
        return _Selector(sequence_number=ref)
    text = ref.strip()
    if text.lower() == "head":
        return _Selector()
    if text.isascii() and text.isdigit():
        return _Selector(sequence_number=int(text))
    if text and _HEX.issuperset(text.lower()):
        text = text.lower()  # base16 in either case (multibase's 'f' and 'F')
        if len(text) < _FULL:
            if not _prefix_forms(text) and len(text) > _DIGEST:
                raise FormatError(
                    f"unrecognised ref {text!r}: longer than a digest ({_DIGEST} hex "
                    "characters), and no block hash (they start with 'f')"
                )
            if not _prefix_forms(text):
                raise FormatError(
                    f"block hash prefix {text!r} is too short: give at least "
                    f"{MIN_DIGEST_PREFIX} characters of the hash as 'log' prints it"
                )
            return _Selector(prefix=text)
    if text.startswith("f") and len(text) > MIN_PREFIX:
        return _Selector(block_hash=Multihash.from_multibase(text))
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FormatError(
            f"unrecognised ref {ref!r}: expected 'head', a block hash or a unique prefix of one "
            f"({MIN_DIGEST_PREFIX}+ hex characters, as 'log' prints them), a sequence number or "
            "an ISO-8601 time"
        ) from None
    return _Selector(time=moment if moment.tzinfo else moment.replace(tzinfo=UTC))


def _prefix_forms(prefix: str) -> tuple[str, ...]:
    """The starts of block file names a typed hex ``prefix`` stands for: itself, when it can be
    the start of a multibase text, and each header followed by it, when it can be the start of
    a digest. Empty when it is too short to be either."""
    forms = []
    if prefix.startswith("f") and MIN_PREFIX <= len(prefix) < _FULL:
        forms.append(prefix)
    if MIN_DIGEST_PREFIX <= len(prefix) <= _DIGEST:
        forms += [header + prefix for header in _HEADERS]
    return tuple(forms)


def _one_match(prefix: str, names: list[str], where: str, complete: bool = True) -> str:
    """The one name of ``names`` (those starting with ``prefix``), or why there is none."""
    if len(names) == 1:
        return names[0]
    if not names:
        raise NotFoundError(f"no block of {where} starts with {prefix!r}")
    count = f"{len(names)}{'' if complete else ' or more'}"
    shown = ", ".join(name[: max(16, len(prefix) + 4)] + "…" for name in names[:3])
    raise AmbiguousRefError(
        f"ambiguous ref {prefix!r}: {count} blocks of {where} start with it ({shown}"
        f"{', …' if len(names) > 3 else ''}); give more characters"
    )


def _listed(storage: Storage, forms: tuple[str, ...]) -> tuple[list[Multihash], bool]:
    """The block files whose names start with one of ``forms`` (a listing of ``blocks/``,
    bounded), and whether the listing is complete."""
    names: list[Multihash] = []
    complete = True
    for form in forms:
        listed = storage.block_names_starting(form, _CANDIDATES)
        complete = complete and len(listed) < _CANDIDATES
        for name in listed:
            try:
                found_hash = Multihash.from_multibase(name)
            except FormatError:  # a stray file in blocks/ that is no block's name
                continue
            if found_hash not in names:
                names.append(found_hash)
    return names, complete


def _in_chain(
    storage: Storage, forms: tuple[str, ...], index: index_read.ChainIndex
) -> tuple[list[Multihash], list[NotFoundError], bool]:
    """The blocks of the chain whose hashes start with one of ``forms``, from the index's
    prefix buckets (:meth:`~odf_chain.index.read.ChainIndex.blocks_with_prefix`); where they
    cannot answer (missing, damaged, stale) or find none, from a listing of ``blocks/``, each
    block file listed placed in the chain through the index: also why the block files that
    start so are not in it (orphans), and whether the listing was complete."""
    try:
        found = index.blocks_with_prefix(forms)
    except index_read.IndexDamage:
        if index.rebuilt:
            raise
        found = []
    if found:
        return found, [], True
    listed, complete = _listed(storage, forms)
    in_chain, orphans = [], []
    for block_hash in listed:
        try:
            index.seq_of_hash(block_hash)
        except NotFoundError as orphan:
            orphans.append(orphan)
            continue
        in_chain.append(block_hash)
    return in_chain, orphans, complete


def resolve_ref(storage: Storage, ref: Ref) -> Ref:
    """``ref`` with a hash prefix replaced by the one block of the chain whose hash it starts
    (other refs as they are): none is a NotFoundError (naming a block file that starts so but
    is not in the chain, when there is one), several an AmbiguousRefError. A ref names a block
    of the chain: block files that are not in it (a crashed or losing writer's, one a rollback
    left behind) are neither named by a prefix nor make it ambiguous.

    The index answers in a bounded number of file reads (one prefix bucket, the seq table, the
    candidate blocks: :meth:`~odf_chain.index.read.ChainIndex.blocks_with_prefix`); without
    usable buckets, ``blocks/`` is listed (O(chain length)) and each block file found placed
    in the chain through the index. A chain whose index cannot be built (a later block breaks
    a rule) is answered from the listing alone, its blocks placed by the reader that uses it."""
    sel = parse_ref(ref)
    if sel.prefix is None:
        return ref
    forms = _prefix_forms(sel.prefix)
    try:
        found, orphans, complete = index_read.answer(
            storage, lambda index: _in_chain(storage, forms, index)
        )
    except RuleViolation:
        (found, complete), orphans = _listed(storage, forms), []
    if not found and orphans:
        raise orphans[0]
    chosen = _one_match(sel.prefix, [str(n) for n in found], storage.location, complete)
    return Multihash.from_multibase(chosen)


def select(entries: list[BlockEntry], ref: Ref) -> int:
    """Index into ``entries`` (oldest first) of the block ``ref`` names. A hash prefix is
    matched against these entries' hashes; give a ref from :func:`resolve_ref` to count every
    block file of the dataset, as readers through the index do."""
    sel = parse_ref(ref)
    if sel.prefix is not None:
        names = [str(entry.hash) for entry in entries]
        forms = _prefix_forms(sel.prefix)
        found = _one_match(sel.prefix, [n for n in names if n.startswith(forms)], "the chain")
        return names.index(found)
    if sel.block_hash is not None:
        for i, entry in enumerate(entries):
            if entry.hash == sel.block_hash:
                return i
        raise NotFoundError(f"block {sel.block_hash} is not in this chain")
    if sel.sequence_number is not None:
        if 0 <= sel.sequence_number < len(entries):
            return sel.sequence_number
        raise NotFoundError(
            f"no block with sequence number {sel.sequence_number} "
            f"(the chain has {len(entries)} blocks, 0..{len(entries) - 1})"
        )
    if sel.time is not None:
        found = None
        for i, entry in enumerate(entries):
            if entry.block.system_time <= sel.time:
                found = i
        if found is None:
            raise NotFoundError(f"no block was written at or before {sel.time.isoformat()}")
        return found
    if not entries:
        raise NotFoundError("the chain is empty")
    return len(entries) - 1


def _state_in(index: index_read.ChainIndex, ref: Ref) -> DatasetState:
    sel = parse_ref(ref)
    if sel.prefix is not None:  # resolve_ref first: a listing must not run inside answer()
        raise ValueError(f"unresolved hash prefix {sel.prefix!r}")
    if sel.block_hash is not None:
        return index.state_at_seq(index.seq_of_hash(sel.block_hash))
    if sel.sequence_number is not None:
        return index.state_at_seq(sel.sequence_number)
    if sel.time is not None:
        return index.state_at_seq(index.seq_at_time(sel.time))
    return index.head


def state_at(storage: Storage, ref: Ref = "head", *, verified: bool = False) -> DatasetState:
    """The state as of the block ``ref`` names: a checked index snapshot plus at most a few
    hundred blocks folded by every rule (see :mod:`odf_chain.index.read`), whatever the
    chain's length. ``verified``: from one full fold of the chain walked back from its head
    instead (O(chain length); nothing is taken from the index, which is saved anew).

    A chain whose later blocks break a rule still answers for the blocks before the first
    broken one (an auditor's question: what did it look like then?): the index cannot be built
    over such a chain, so the blocks are walked from the head (hashes checked) and folded only
    up to ``ref``. The broken block itself, and any after it, are refused, naming the rule."""
    ref = resolve_ref(storage, ref)
    try:
        return index_read.answer(storage, lambda index: _state_in(index, ref), verified=verified)
    except RuleViolation as violation:
        entries = load_chain(storage)
        wanted = select(entries, ref)
        if violation.sequence_number is not None and wanted >= violation.sequence_number:
            raise
        return fold(entries[: wanted + 1])


class _Contradiction(Exception):
    """What the index said of a block disagrees with the chain walked from its head."""


def _proven_slices(
    storage: Storage, head: Multihash, state: DatasetState
) -> list[tuple[BlockEntry, DataSlice]]:
    """The slices the chain names up to ``state``'s block, each with the block that added it,
    walked back from ``head`` (the chain's own head): the walk proves that block an ancestor of
    the head, and the schema and slice count the index gave for it are checked against the
    blocks walked. Raises :class:`_Contradiction` when they disagree."""
    found: list[tuple[BlockEntry, DataSlice]] = []
    schema_seen = False
    reached = False
    for entry in walk_back(storage, head):
        seq = entry.block.sequence_number
        if not reached:
            if seq > state.sequence_number:
                continue
            if seq != state.sequence_number or entry.hash != state.head:
                raise _Contradiction(f"block {state.sequence_number} is not {state.head}")
            reached = True
        event = entry.block.event
        if isinstance(event, AddData | ExecuteTransform) and event.new_data is not None:
            found.append((entry, event.new_data))
        elif isinstance(event, SetDataSchema) and not schema_seen:
            schema_seen = True
            if seq != state.schema_sequence_number or not (
                state.schema is not None
                and event.arrow_schema.equals(state.schema, check_metadata=True)
            ):
                raise _Contradiction(f"the schema in force is block {seq}'s")
    if not reached or (not schema_seen and state.schema is not None):
        raise _Contradiction(f"block {state.sequence_number} is not in the chain")
    if len(found) != state.num_slices:
        raise _Contradiction(f"{len(found)} slices up to block {state.sequence_number}")
    found.reverse()
    return found


def slices_at(
    storage: Storage, ref: Ref = "head", *, verified: bool = False
) -> tuple[DatasetState, list[DataSlice]]:
    """The state as of block ``ref`` and the data slices the chain names up to it, oldest
    first: exactly what a reader of the data as of ``ref`` reads (see :func:`slice_blocks_at`)."""
    state, found = slice_blocks_at(storage, ref, verified=verified)
    return state, [data for _, data in found]


def slice_blocks_at(
    storage: Storage, ref: Ref = "head", *, verified: bool = False
) -> tuple[DatasetState, list[tuple[BlockEntry, DataSlice]]]:
    """The state as of block ``ref`` and the data slices the chain names up to it, oldest
    first, each with the block that added it (a reader that finds a slice damaged names it).

    Every block up to ``ref`` may name a slice, so the chain is walked back from its head
    (each block checked against its hash) through ``ref``'s block to the Seed: what the index
    said of that block (which block it is, its schema, its slice count) is proved by the walk,
    never believed. When the walk contradicts the index, the answer comes from a full fold,
    never from the index."""
    ref = resolve_ref(storage, ref)
    head = read_head(storage)
    state = state_at(storage, ref, verified=verified)
    try:
        return state, _proven_slices(storage, head, state)
    except _Contradiction:
        state = state_at(storage, ref, verified=True)
    try:
        return state, _proven_slices(storage, read_head(storage), state)
    except _Contradiction as exc:
        raise IntegrityError(f"{storage.location}: the chain changed while read ({exc})") from None


@dataclass(frozen=True, slots=True)
class ListedSlice:
    """A slice the chain names, with the sequence number and hash of the block that added it."""

    sequence_number: int
    block_hash: Multihash
    data: DataSlice


LIST_CHUNK = 4096
"""Blocks a bulk listing reads, checks and decodes at a time (their bytes held together)."""


def _bulk_slices(storage: Storage, head: Multihash, state: DatasetState) -> list[ListedSlice]:
    """What :func:`_proven_slices` proves, in bulk: the index's table gives the hash of every
    block from the Seed to ``head`` (a hint, never believed), each block is read, checked
    against that hash, and must carry its sequence number and name the one before it as its
    ``prev``: the same hash-linked path from the head to the Seed a walk follows, read in
    sequence order, so each AddData is decoded with the others at once
    (:func:`odf_chain.format.columns.decode_columns`) instead of one by one. Raises
    :class:`_Contradiction` (or IndexDamage, an OdfChainError) on any disagreement: the caller
    then walks, and the chain's own errors are reported as they are."""
    import numpy as np

    from odf_chain.format import extra_json
    from odf_chain.format.codec import decode_block
    from odf_chain.format.columns import decode_columns

    index = index_read.open_index(storage, head)
    top = index.head.sequence_number
    upto = state.sequence_number
    if index.head.head != head or upto > top:
        raise _Contradiction("the index is not of this head")
    hashes = index.table_hashes(0, top + 1)
    if hashes[top] != bytes(head) or hashes[upto] != bytes(state.head):
        raise _Contradiction(f"the table does not end at the head and name block {upto}")
    algorithm = head.algorithm
    found: list[ListedSlice] = []
    schema_at: int | None = None
    schema_block = None
    with storage.block_reader() as read:
        for first in range(0, top + 1, LIST_CHUNK):
            stop = min(first + LIST_CHUNK, top + 1)
            names = [hashes[s] for s in range(first, stop)]
            try:
                data = [read("f" + name.hex()) for name in names]
            except (OdfChainError, IndexDamage) as exc:
                raise _Contradiction(str(exc)) from None
            for name, content in zip(names, data, strict=True):
                if (
                    Multihash.digest(algorithm, content).digest_bytes != name[2:]
                    or name[:2] != bytes(head)[:2]
                ):
                    raise _Contradiction(f"block f{name.hex()} does not hash to its name")
            columns = decode_columns(data)
            columns = columns.judged(extra_json.judge(columns.extras))
            plain = columns.plain
            n = stop - first
            before = bytes(34) if first == 0 else hashes[first - 1]
            prev = np.frombuffer(b"".join([before, *names[:-1]]), np.uint8).reshape(n, 34)
            want_prev = np.ones(n, bool)
            if first == 0:
                want_prev[0] = False
            linked = (
                (columns.sequence_number == np.arange(first, stop, dtype=np.uint64))
                & (columns.has_prev == want_prev)
                & ((columns.prev_hash == prev).all(axis=1) | ~want_prev)
            )
            if not linked[plain].all():
                raise _Contradiction(f"blocks {first}..{stop - 1} are not linked")
            for k in np.flatnonzero(~plain).tolist():
                seq = first + k
                try:
                    block = decode_block(data[k])
                except FormatError as exc:
                    raise _Contradiction(str(exc)) from None
                expected_prev = None if seq == 0 else Multihash.from_bytes(hashes[seq - 1])
                if block.sequence_number != seq or block.prev_block_hash != expected_prev:
                    raise _Contradiction(f"block {seq} is not linked")
                event = block.event
                if seq > upto:
                    continue
                if isinstance(event, AddData | ExecuteTransform) and event.new_data is not None:
                    found.append(ListedSlice(seq, Multihash.from_bytes(names[k]), event.new_data))
                elif isinstance(event, SetDataSchema):
                    schema_at, schema_block = seq, event
            sliced = plain & columns.has_data
            rows = np.flatnonzero(sliced[: max(0, min(n, upto + 1 - first))]).tolist()
            if rows:
                starts = columns.start.tolist()
                ends = columns.end.tolist()
                sizes = columns.size.tolist()
                logical = columns.logical_hash
                physical = columns.physical_hash
                for k in rows:
                    found.append(
                        ListedSlice(
                            first + k,
                            Multihash.from_bytes(names[k]),
                            DataSlice(
                                Multihash.from_bytes(logical[k].tobytes()),
                                Multihash.from_bytes(physical[k].tobytes()),
                                OffsetInterval(starts[k], ends[k]),
                                sizes[k],
                            ),
                        )
                    )
            del data
    if schema_at != state.schema_sequence_number or (
        schema_block is not None
        and not (
            state.schema is not None
            and schema_block.arrow_schema.equals(state.schema, check_metadata=True)
        )
    ):
        raise _Contradiction(f"the schema in force is block {schema_at}'s")
    if len(found) != state.num_slices:
        raise _Contradiction(f"{len(found)} slices up to block {upto}")
    found.sort(key=lambda listed: listed.sequence_number)
    return found


def listed_slices_at(
    storage: Storage, ref: Ref = "head", *, verified: bool = False
) -> tuple[DatasetState, list[ListedSlice]]:
    """What :func:`slice_blocks_at` answers (the state as of ``ref`` and the slices the chain
    names up to it, oldest first, each proved by a hash-linked path from the head), without a
    block object per slice: the blocks are read and checked in bulk (:func:`_bulk_slices`).
    Where the bulk path meets anything it does not expect (no usable index table, a block that
    does not fit), the answer is :func:`slice_blocks_at`'s, with its errors."""
    ref = resolve_ref(storage, ref)
    head = read_head(storage)
    state = state_at(storage, ref, verified=verified)
    if not verified:
        try:
            return state, _bulk_slices(storage, head, state)
        except (_Contradiction, OdfChainError, IndexDamage):
            pass
    state, blocks = slice_blocks_at(storage, ref, verified=verified)
    return state, [ListedSlice(e.block.sequence_number, e.hash, d) for e, d in blocks]


def proven_transactions(storage: Storage, state: DatasetState, app_id: str) -> DatasetState:
    """``state`` (the head's, as a writer read it) once the chain confirms what it says of
    ``app_id``'s last transaction version; else the head state of a full fold.

    A writer decides from that version whether to write at all, and a skipped write is data not
    written, so the version is never taken from a cache: the chain is walked back from the head
    to the block the state says recorded it (which must record exactly that version), and no
    block after it may record ``app_id`` again. An app id the state has never seen is proved
    absent by a walk to the Seed (once per app id: after its first write the walk is short)."""
    if state.head is None:
        return state
    version = state.transactions.get(app_id)
    where = state.transactions.recorded_at(app_id)
    for entry in walk_back(storage, state.head):
        seq = entry.block.sequence_number
        recorded = recorded_transaction(entry.block.event)
        if recorded is not None and recorded[0] == app_id:
            if seq == where and recorded[1] == version:
                return state
            break  # a version the state does not know of, or another one where it says
        if where is not None and seq <= where:
            break  # the block the state names does not record the app id
    else:
        if where is None:
            return state  # the whole chain walked: never recorded, as the state says
    return index_read.answer(storage, lambda index: index.head, state.head, verified=True)


def proven_derivation(storage: Storage, state: DatasetState) -> DatasetState:
    """``state`` (a derivative dataset's head state, as a writer read it) once the chain
    confirms the transformation in force and the inputs its last run pinned; else the head
    state of a full fold.

    A derive run starts each input where the last run stopped and decides from the
    transformation in force whether the query changed: taken from a forged or stale index, a
    run would read the wrong rows or run under the wrong query, and the rules (checked against
    that same state) would not object. So both are proved by a walk back from the head to the
    last SetTransform and the last ExecuteTransform (derive writes a SetTransform only when the
    query changes: the walk reads every run since, one block each)."""
    if state.head is None or state.dataset_kind is not DatasetKind.DERIVATIVE:
        return state
    run: tuple | None = None
    transform: SetTransform | None = None
    for entry in walk_back(storage, state.head):
        event = entry.block.event
        if run is None and isinstance(event, ExecuteTransform):
            run = event.query_inputs
        if transform is None and isinstance(event, SetTransform):
            transform = event
        if run is not None and transform is not None:
            break
    if (run or ()) == state.last_run_inputs and transform == state.transform:
        return state
    return index_read.answer(storage, lambda index: index.head, state.head, verified=True)


@dataclass(frozen=True)
class SchemaChange:
    """One SetDataSchema in the chain and what it changed from the schema before it."""

    entry: BlockEntry
    schema: pa.Schema
    diff: SchemaDiff | None  # None for the first schema


def schema_history(storage: Storage, *, verified: bool = False) -> list[SchemaChange]:
    """Every schema the dataset has had, oldest first, each with its diff from the previous.
    Reads the SetDataSchema blocks the index lists (each checked), not the whole chain;
    ``verified``: from one full fold instead (see :func:`state_at`)."""
    history: list[SchemaChange] = []
    previous: pa.Schema | None = None
    blocks = index_read.answer(storage, lambda index: index.schema_blocks(), verified=verified)
    for entry in blocks:
        event = entry.block.event
        assert isinstance(event, SetDataSchema)
        schema = event.arrow_schema
        diff = None if previous is None else diff_schemas(previous, schema)
        history.append(SchemaChange(entry, schema, diff))
        previous = schema
    return history


@dataclass(frozen=True, slots=True)
class IngestedInput:
    """Where the chain first records an input file's content (an ingest's ``source``)."""

    hash: str  # the BLAKE3 multihash (multibase text) of the file's bytes
    uri: str  # the file it was read from then
    sequence_number: int  # the first AddData that names it
    block_hash: Multihash


def _source_inputs(event: AddData) -> Iterator[tuple[str, str]]:
    """(hash, uri) of each input file an AddData's source names; other shapes of ``source=``
    (a caller's own dictionary) name none."""
    source = event.extra.get(SOURCE_KEY) if isinstance(event.extra, Mapping) else None
    inputs = source.get("inputs") if isinstance(source, dict) else None
    for item in inputs if isinstance(inputs, list) else ():
        if isinstance(item, dict) and isinstance(item.get("hash"), str):
            uri = item.get("uri")
            yield item["hash"], uri if isinstance(uri, str) else ""


def ingested_inputs(
    storage: Storage, head: Multihash | None = None, *, since: Multihash | None = None
) -> dict[str, IngestedInput]:
    """The input files the chain records as ingested, by content hash: what ``odf-chain
    ingest`` skips. Reads blocks only (from ``head``, by default the current one, back to the
    Seed, or to just after ``since``), never a data file.

    Scans the chain (one pass, newest first, so the oldest record of a hash wins); an index
    can answer this later without changing the answer.
    """
    found: dict[str, IngestedInput] = {}
    start = read_head(storage) if head is None else head
    for entry in walk_back(storage, start, stop_at=since):
        event = entry.block.event
        if isinstance(event, AddData):
            for content, uri in _source_inputs(event):
                found[content] = IngestedInput(
                    content, uri, entry.block.sequence_number, entry.hash
                )
    return found


@dataclass(frozen=True, slots=True)
class UnreachableInput:
    """A pinned dataset input whose chain could not be read (moved, deleted, no access)."""

    dataset_id: str
    uri: str | None
    reason: str


@dataclass
class LineageReplay:
    """The field graph at a block, and what could not be followed upstream."""

    dataset: str  # the dataset id text: the key of this dataset's fields in ``graph``
    graph: FieldGraph
    unreachable: list[UnreachableInput]
    schema: pa.Schema | None = None  # this dataset's schema at the block

    def field(self, name: str, dataset: str | None = None) -> FieldRef:
        """The field a user means by ``name``: a v2 path, or a plain dotted name (``id``,
        ``address.city``) that exactly one field has. ``dataset`` defaults to this one."""
        from odf_chain.lineage.graph import FieldRef
        from odf_chain.lineage.names import resolve_name
        from odf_chain.state import schema_path_set

        key = dataset or self.dataset
        known = set(self.graph.fields(key))
        if key == self.dataset and self.schema is not None:
            known |= schema_path_set(self.schema)
        return FieldRef(key, resolve_name(name, known, where=key))


def _lineage_upto(index: index_read.ChainIndex, ref: Ref) -> tuple[DatasetState, list[BlockEntry]]:
    state = _state_in(index, ref)
    return state, index.lineage_blocks(state)


def lineage_at(
    storage: Storage,
    ref: Ref = "head",
    *,
    follow_inputs: bool = True,
    open_input: Callable[[str], Storage] | None = None,
    verified: bool = False,
) -> LineageReplay:
    """The field graph of the dataset as of block ``ref``: every lineage event up to it.

    With ``follow_inputs``, the graphs of the odf_chain datasets it read are merged in,
    each as of the block it was pinned at (the latest pin when several runs read it), and
    theirs in turn, so upstream and downstream queries cross datasets. A dataset input that
    cannot be opened is listed in ``unreachable``, never fatal: lineage is still answered as
    far as it goes. Each chain is read through its index: the lineage blocks it lists, not
    the whole chain; ``verified``: each by one full fold instead (see :func:`state_at`).
    """
    from odf_chain.lineage.graph import FieldGraph
    from odf_chain.storage import open_storage

    opener = open_input or open_storage
    ref = resolve_ref(storage, ref)
    own, blocks = index_read.answer(
        storage, lambda index: _lineage_upto(index, ref), verified=verified
    )
    if own.dataset_id is None:
        raise NotFoundError(f"{storage.location} has no Seed at that block")
    key = own.dataset_id.to_did()
    graph = FieldGraph()
    unreachable: list[UnreachableInput] = []
    pending: list[tuple[str, list[BlockEntry]]] = [(key, blocks)]
    seen: set[str] = {key}
    while pending:
        dataset, lineage_blocks = pending.pop()
        pins: dict[str, tuple[LineageInput, int]] = {}
        for entry in lineage_blocks:
            event = lineage_of(entry.block.event)
            assert event is not None  # the lineage list names lineage blocks only
            graph.add_event(dataset, event, (entry.block.sequence_number, str(entry.hash)))
            for pinned in event.inputs:
                if pinned.dataset_id is None or pinned.block_hash is None:
                    continue
                upstream = pinned.dataset_id.to_did()
                if upstream not in seen:
                    pins[upstream] = (pinned, entry.block.sequence_number)
        if not follow_inputs:
            continue
        for upstream, (pinned, _) in sorted(pins.items()):
            seen.add(upstream)
            try:
                if pinned.uri is None:
                    raise NotFoundError("the input names no location")
                pin = pinned.block_hash
                other_state, other_blocks = index_read.answer(
                    opener(pinned.uri),
                    lambda index, pin=pin: _lineage_upto(index, pin),
                    verified=verified,
                )
                other_id = other_state.dataset_id
                if other_id is None or other_id.to_did() != upstream:
                    raise NotFoundError(
                        f"{pinned.uri} holds {other_id.to_did() if other_id else 'no dataset'}"
                    )
            except OdfChainError as exc:
                unreachable.append(UnreachableInput(upstream, pinned.uri, str(exc)))
                continue
            pending.append((upstream, other_blocks))
    return LineageReplay(key, graph, unreachable, own.schema)


def pinned_schema(pinned: LineageInput, open_input: Callable[[str], Storage] | None = None):
    """The schema of a pinned dataset input at its block; raises NotFoundError (or another
    OdfChainError) naming what is missing when the input cannot be followed."""
    from odf_chain.storage import open_storage

    if pinned.dataset_id is None or pinned.block_hash is None:
        raise NotFoundError(f"input {pinned.name!r} is not a pinned dataset")
    if pinned.uri is None:
        raise NotFoundError(f"input {pinned.name!r} names no location")
    pin = pinned.block_hash

    def schema_at_pin(index: index_read.ChainIndex) -> pa.Schema | None:
        if index.head.dataset_id != pinned.dataset_id:
            raise NotFoundError(f"input {pinned.name!r}: {pinned.uri} holds another dataset")
        try:
            seq = index.seq_of_hash(pin)
        except NotFoundError:
            raise RuleViolation(
                "lineage-input-dangling",
                f"input {pinned.name!r} ({pinned.dataset_id}) is pinned at block "
                f"{pinned.block_hash}, which its chain at {pinned.uri} does not have",
            ) from None
        return index.state_at_seq(seq).schema

    return index_read.answer((open_input or open_storage)(pinned.uri), schema_at_pin)


def _absolute(pinned: LineageInput) -> LineageInput:
    """A pinned dataset named by a relative path is stored by its absolute path: the chain is
    read later, from anywhere."""
    from odf_chain.storage import is_uri

    if pinned.is_dataset and pinned.uri is not None and not is_uri(pinned.uri):
        return replace(pinned, uri=str(Path(pinned.uri).absolute()))
    return pinned


def settle_lineage(event: AddFieldLineage, schema: pa.Schema) -> AddFieldLineage:
    """A lineage event ready to append above ``schema`` (the schema of the data it describes):
    fields named by plain names become v2 paths (of ``schema`` for outputs, of each reachable
    pinned input at its block for inputs), then input fields are checked against those inputs.
    Unreachable inputs are not checked here (verify warns about them)."""
    from odf_chain.lineage.names import with_v2_paths
    from odf_chain.rules import lineage_input_problems
    from odf_chain.state import schema_path_set

    event = replace(event, inputs=tuple(_absolute(pinned) for pinned in event.inputs))
    schemas: dict[str, pa.Schema | None] = {}
    for pinned in event.inputs:
        if pinned.is_dataset:
            try:
                schemas[pinned.name] = pinned_schema(pinned)
            except RuleViolation:
                raise  # reachable, but the pin is wrong: refuse
            except OdfChainError:
                schemas[pinned.name] = None  # unreachable: unknown, not wrong
    event = with_v2_paths(
        event,
        schema_path_set(schema),
        {name: schema_path_set(s) for name, s in schemas.items() if s is not None},
    )
    problems = lineage_input_problems(event, lambda pinned: schemas.get(pinned.name))
    if problems:
        raise RuleViolation("lineage-inputs", "; ".join(problems))
    return event


def head_state(storage: Storage, head: Multihash | None = None) -> DatasetState:
    """The state at the current head (or at ``head``, just read by the caller: not read
    again), through the index (no fold of the chain)."""
    return index_read.answer(storage, lambda index: index.head, head)
