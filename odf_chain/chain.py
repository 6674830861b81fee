"""Appending to a chain, and reading it back block by block.

``append`` = build the block on top of the state -> encode -> hash -> validate by every rule ->
write the block file -> move the head by compare-and-swap. A refused block leaves no trace; a
block whose head move loses the race is removed again where that is proven safe
(:func:`withdraw`), else stays an unreferenced file in ``blocks/`` (invisible to readers,
reported by verify), and the caller gets :class:`ConflictError`.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from odf_chain.errors import (
    ConflictError,
    FormatError,
    IntegrityError,
    NotFoundError,
    OdfChainError,
    RuleViolation,
)
from odf_chain.events import AddData, ExecuteTransform, MetadataBlock, MetadataEvent
from odf_chain.format.codec import decode_block, encode_block
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.state import DatasetState, apply, carries_lineage, decoding_once
from odf_chain.storage import BlockStore, ChainStore, HeadStore, Storage


@dataclass(frozen=True, slots=True)
class BlockEntry:
    """A stored block, its hash and its size on disk."""

    hash: Multihash
    block: MetadataBlock
    size: int


def advance(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> DatasetState:
    """The one fold step shared by append, replay and verify: validate, then apply."""
    # the rules and the state each read the lineage a block carries: decoded once for all
    with decoding_once(block.event) if carries_lineage(block.event) else _NO_LINEAGE:
        (_validate or _rules())(state, block, block_hash)
        return apply(state, block, block_hash)


_NO_LINEAGE = contextlib.nullcontext()


_validate = None


def _rules():
    """:func:`odf_chain.rules.validate`, imported by the first fold step: a read answered from
    the index at its head folds nothing, and the rules (with the schema logic they use) are a
    third of a short command's start-up."""
    global _validate
    from odf_chain.rules import validate

    _validate = validate
    return validate


def newest_first(storage: ChainStore, limit: int | None = None) -> Iterator[BlockEntry]:
    """The blocks from the head back, each checked against its hash and read one at a time as
    the caller asks (at most ``limit``): what ``odf-chain log`` streams. Needs no index, no
    fold and none of the reading side, so a short log starts fast."""
    walker = walk_back(storage, read_head(storage))
    return walker if limit is None else itertools.islice(walker, max(limit, 0))


def parse_block_name(name: str) -> Multihash:
    try:
        return Multihash.from_multibase(name)
    except FormatError as exc:
        raise FormatError(f"block name {name!r} is not a multihash: {exc}") from None


def load_block(storage: BlockStore, block_hash: Multihash) -> BlockEntry:
    """Read one block, refusing bytes that do not hash to their name (never re-encoded)."""
    name = str(block_hash)
    data = storage.read_block(name)
    actual = Multihash.digest(block_hash.algorithm, data)
    if actual != block_hash:
        raise IntegrityError(
            f"block {name}: content hashes to {actual}, not to its name (tampered or damaged)"
        )
    try:
        block = decode_block(data)
    except FormatError as exc:
        raise FormatError(f"block {name}: {exc}") from None
    return BlockEntry(block_hash, block, len(data))


def read_head(storage: HeadStore) -> Multihash:
    name = storage.read_head()
    if name is None:
        raise NotFoundError(
            f"{storage.location}: refs/head is missing (not a dataset, or never seeded)"
        )
    return parse_block_name(name)


def walk_back(
    storage: BlockStore, head: Multihash, stop_at: Multihash | None = None
) -> Iterator[BlockEntry]:
    """Blocks from ``head`` back to the Seed (or to just after ``stop_at``), newest first."""
    current: Multihash | None = head
    seen: set[Multihash] = set()
    while current is not None and current != stop_at:
        if current in seen:
            raise IntegrityError(f"block {current}: the chain loops back on itself")
        seen.add(current)
        try:
            entry = load_block(storage, current)
        except NotFoundError:
            raise NotFoundError(
                f"block {current} is referenced but missing from {storage.location}/blocks"
            ) from None
        yield entry
        current = entry.block.prev_block_hash
    if stop_at is not None and current != stop_at:
        raise NotFoundError(f"block {stop_at} is not an ancestor of {head}")


def now(not_before: datetime | None = None) -> datetime:
    """A transaction's system time: UTC, in whole milliseconds (the resolution of the
    ``system_time`` column, so block and rows carry the same instant), and never before
    ``not_before`` (a clock stepping back must not break the chain)."""
    moment = datetime.now(UTC)
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    return moment if not_before is None or moment >= not_before else not_before


@dataclass(frozen=True, slots=True)
class PreparedBlock:
    """A block built and validated on top of a state, not yet written."""

    entry: BlockEntry
    data: bytes
    before: DatasetState
    after: DatasetState


def prepare(
    state: DatasetState,
    event: MetadataEvent,
    *,
    system_time: datetime | None = None,
    algorithm: str | None = None,
) -> PreparedBlock:
    """Build the next block for ``event`` and check it by every rule; write nothing.

    Lets a writer refuse a bad event (say, an incompatible schema) before it writes any data.
    """
    if system_time is None:
        system_time = now(state.system_time)
    block = MetadataBlock(
        system_time=system_time,
        prev_block_hash=state.head,
        sequence_number=state.sequence_number + 1,
        event=event,
    )
    data = encode_block(block)
    block_hash = Multihash.digest(state.hash_algorithm or algorithm or BLAKE3, data)
    try:
        after = advance(state, block, block_hash)
    except RuleViolation as violation:
        # Name the would-be block by position only: its hash never reaches the disk.
        raise violation.at(block.sequence_number, None) from None
    return PreparedBlock(BlockEntry(block_hash, block, len(data)), data, state, after)


def commit(
    storage: Storage,
    *prepared: PreparedBlock,
    created_data: Sequence[str] = (),
    check_rollback: bool | AtTheMove = True,
    once_moved: Callable[[], object] | None = None,
) -> DatasetState:
    """Write the block files, then move the head once, from the state the first was built on
    to the last: several blocks of one transaction become visible together or not at all.
    Where the head has a lock, the move writes them under it, once the head is checked (a
    refused move writes none); elsewhere they are written first.

    Raises :class:`ConflictError` if another writer moved the head meanwhile, or if a block
    or data file the new blocks need was removed before the head moved (gc deletes leftovers
    under the same lock the head moves under); nothing became visible. Where a refused move
    never was the head (a lock, or an object store's compare-and-swap), the block files this
    call created (under a lock, the head move removes those itself) and the slices in
    ``created_data`` (those the caller's ``commit_data`` created) are removed again by
    :func:`withdraw`, which keeps any the winner shares. Elsewhere they stay, reported by
    verify.

    ``once_moved`` (the derived index's update) runs once the head has moved, before any other
    writer can move it (see :meth:`~odf_chain.storage.base.HeadStore.compare_and_swap_head`).

    ``check_rollback``: True checks the head log here, False leaves it (the caller checked),
    :data:`AT_THE_MOVE` has the head move check it under the head lock (where there is none,
    it is checked here).
    """
    if not prepared:
        raise ValueError("commit needs at least one prepared block")
    for earlier, later in itertools.pairwise(prepared):
        if later.before is not earlier.after:
            raise ValueError("prepared blocks must each be built on the one before")
    pending = prepared[-1].after.lineage_pending
    if pending is not None:  # the data a lineage event describes goes in the same transaction
        raise RuleViolation(
            "lineage-data",
            f"the lineage event promises offsets {pending.uncovered.start}.."
            f"{pending.uncovered.end}; commit it together with the data slices covering them",
        ).at(pending.sequence_number, None)
    at_the_move = isinstance(check_rollback, AtTheMove) and storage.locks_head
    if check_rollback and not at_the_move:  # a Transaction checked when it began
        check_not_rolled_back(storage, prepared[0].before)
    if storage.locks_head:  # the move writes them under the lock (and withdraws them)
        created: list[str] = []
        new_blocks = [(str(b.entry.hash), b.data) for b in prepared]
        blocks = []
    else:
        created = [
            str(b.entry.hash) for b in prepared if storage.write_block(str(b.entry.hash), b.data)
        ]
        new_blocks = []
        blocks = [str(p.entry.hash) for p in prepared]
    expected = prepared[0].before.head
    try:
        storage.compare_and_swap_head(
            None if expected is None else str(expected),
            str(prepared[-1].entry.hash),
            # checked under the head lock: gc may have taken a file put in place before it
            blocks=blocks,
            data=[
                str(p.entry.block.event.new_data.physical_hash)
                for p in prepared
                if isinstance(p.entry.block.event, AddData | ExecuteTransform)
                and p.entry.block.event.new_data is not None
            ],
            once_moved=once_moved,
            **({"logged_is_expected": True} if at_the_move else {}),
            **({"new_blocks": new_blocks} if new_blocks else {}),
        )
    except ConflictError:
        if storage.head_moves_atomically:
            withdraw(storage, prepared[0].before, blocks=created, data=created_data)
        raise
    # The head has moved. What derives from it (the index, lineage emission) is the caller's
    # post-commit work (odf_chain.transaction, which hands the index's usual update as once_moved).
    return prepared[-1].after


class Unread:
    """The head log not read yet (None is a log with no head)."""


UNREAD = Unread()


class AtTheMove:
    """The head log not read before the write: the head move checks, under the head lock, that
    its last line names the write's base, and refuses with
    :class:`~odf_chain.errors.StaleBaseError` when it does not (the writer then reads the log
    and the head, :func:`check_not_rolled_back`, and tries again). For a writer whose state is
    the head it set itself: the log then names it, and reading both before the lock only to
    read them again under it is work for nothing."""


AT_THE_MOVE = AtTheMove()


def left_the_line(storage: ChainStore, state: DatasetState, head: Multihash) -> RuleViolation:
    """Rule ``head-rollback`` for a writer that saw ``state`` as the head and finds ``head`` is
    not a descendant of it (moved back by hand, or to another branch): whatever the head log
    says, a write now would orphan blocks it saw as committed."""
    return RuleViolation(
        "head-rollback",
        f"{storage.location}: refs/head left the blocks this handle saw: block "
        f"{state.sequence_number} {state.head} was the head, the head is now {head}; nothing "
        "was written. Write that hash back to refs/head to restore the chain, or open the "
        "dataset anew, then run chain-verify",
    )


def check_not_rolled_back(
    storage: ChainStore, state: DatasetState, *, logged: str | Unread | AtTheMove | None = UNREAD
) -> None:
    """Refuse to write on a head the head log shows was moved back (rule ``head-rollback``).

    The log's last line names the head the last writer set. A head that is that block, or a
    descendant of it (a crash fell between a head move and its log line: the next move repairs
    the log), is fine. Any other head was put back by hand (a restored backup, a mistake,
    tampering): a write on it would be acknowledged and then orphaned by the repair verify
    asks for (writing the logged head back), so nothing is written until the head is
    restored. A dataset from before the log has nothing to compare. A writer whose state is
    not the current head is left to the head move, which refuses it as a conflict.

    The log is read before the head: a move's line is written after the move, so a line past
    ``state`` means the head had left ``state`` before it is read here (read the other way
    round, a writer that moves the head and logs it in between looks like a rollback).

    ``logged``: the log's last head as the caller read it just before the head it built
    ``state`` on (:meth:`odf_chain.Dataset.append`: the head is then not read a second time)."""
    if state.head is None or isinstance(logged, AtTheMove):
        return  # a new chain; or checked by the head move, under the head lock
    if isinstance(logged, Unread):
        logged = storage.logged_head()
        if storage.read_head() != str(state.head):
            return  # another writer moved the head: the move reports a conflict
    if logged is None or logged == str(state.head):
        return
    try:
        logged_hash = parse_block_name(logged)
        was = load_block(storage, logged_hash).block.sequence_number
    except OdfChainError as exc:
        raise IntegrityError(
            f"{storage.location}: the head log's last head {logged} cannot be read ({exc}); "
            "nothing was written: run chain-verify"
        ) from None
    if was < state.sequence_number:
        for entry in walk_back(storage, state.head):
            if entry.block.sequence_number <= was:
                if entry.hash == logged_hash:
                    return  # an ancestor of the head: the log is only behind
                break
    raise RuleViolation(
        "head-rollback",
        f"refs/head moved back: block {was} {logged} was the head (logs/head), the head is now "
        f"block {state.sequence_number}; nothing was written. Write that hash back to "
        "refs/head to restore the chain, then run chain-verify",
        sequence_number=state.sequence_number,
        block_hash=str(state.head),
    )


WITHDRAW_WALK_LIMIT = 100
"""How many blocks appended since a failed write :func:`withdraw` reads, at most, to prove a
file it would remove unreferenced; past that it removes nothing. A lost race usually lies a few
blocks behind; on an object store each block read is a request."""
WITHDRAW_LOCK_SECONDS = 5.0
"""How long :func:`withdraw` waits for the head lock (the write already failed: a busy lock,
perhaps the very reason, is no cause to keep the caller waiting long for a cleanup)."""


def withdraw(
    storage: Storage,
    since: DatasetState,
    *,
    blocks: Sequence[str] = (),
    data: Sequence[str] = (),
) -> list[str]:
    """Remove the block and slice files a failed write created, except those the chain now
    references; return the names removed.

    Files are named by their content, so a racing writer may have made the very same file (the
    same event at the same millisecond, the same rows at the same offsets), found it in place
    and committed it: "this call created it" does not make it this call's to remove. Each
    removal is proven safe at the moment it happens: under the head lock (where the store has
    one; elsewhere the head, having left ``since``, never comes back to it), against every
    block from the head back to ``since``. When that cannot be proven (the lock is busy, a
    block is unreadable, more than :data:`WITHDRAW_WALK_LIMIT` blocks were appended) nothing
    is removed: an unreferenced file is only a leftover,
    which verify reports and gc removes.
    """
    if not blocks and not data:
        return []
    removed: list[str] = []
    try:
        with storage.head_lock(timeout=WITHDRAW_LOCK_SECONDS):
            head = storage.read_head()
            committed = committed_since(
                storage,
                None if head is None else parse_block_name(head),
                since.head,
                since.sequence_number,
                limit=WITHDRAW_WALK_LIMIT,
            )
            if committed is None:
                return []
            for name in reversed(blocks):  # newest first: no block is left without its parent
                if name not in committed.blocks and storage.remove_block(name):
                    removed.append(name)
            for name in data:
                if name not in committed.slices and storage.remove_data(name):
                    removed.append(name)
    except OdfChainError:  # a leftover stays; the caller's own error is what it reports
        pass
    return removed


class Committed(NamedTuple):
    """The names of the block files and data slices some blocks of a chain reference."""

    blocks: frozenset[str]
    slices: frozenset[str]
    reached: bool  # the walk ended at the block it was to stop at (else at its position)


def committed_since(
    storage: Storage,
    head: Multihash | None,
    since: Multihash | None,
    since_sequence_number: int,
    *,
    limit: int | None = None,
) -> Committed | None:
    """What the chain gained after block ``since`` (at ``since_sequence_number``): the blocks
    from ``head`` back to it, or to its position should the head have left its line. For a
    caller about to remove files it believes unreferenced, since a writer may have committed a
    file identical to one of them. None when that is more than ``limit`` blocks."""
    blocks: set[str] = set()
    slices: set[str] = set()
    reached = since is None
    if head is not None:
        for entry in walk_back(storage, head):
            if entry.hash == since:
                reached = True
                break
            if entry.block.sequence_number <= since_sequence_number:
                break
            if limit is not None and len(blocks) == limit:
                return None
            blocks.add(str(entry.hash))
            event = entry.block.event
            if isinstance(event, AddData | ExecuteTransform) and event.new_data is not None:
                slices.add(str(event.new_data.physical_hash))
    return Committed(frozenset(blocks), frozenset(slices), reached)


def append(
    storage: Storage,
    state: DatasetState,
    event: MetadataEvent,
    *,
    system_time: datetime | None = None,
    algorithm: str | None = None,
) -> tuple[DatasetState, BlockEntry]:
    """Append ``event`` on top of ``state`` (which must describe the current head).

    Returns the new state and the stored block. Raises the violated rule before anything is
    written, or :class:`ConflictError` if another writer moved the head since ``state``.
    """
    prepared = prepare(state, event, system_time=system_time, algorithm=algorithm)
    return commit(storage, prepared), prepared.entry
