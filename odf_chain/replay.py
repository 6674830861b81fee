"""Replay: the dataset state at any block, by folding the chain from its Seed.

A *ref* names a block: ``"head"``, a block hash (``f1e20…``), a sequence number (``7`` or
``"7"``), or an ISO-8601 time, meaning the last block written at or before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

from odf_chain.chain import BlockEntry, advance, read_head, walk_back
from odf_chain.errors import FormatError, NotFoundError
from odf_chain.events import SetDataSchema
from odf_chain.format.multihash import Multihash
from odf_chain.schema.evolution import SchemaDiff, diff_schemas
from odf_chain.state import EMPTY, DatasetState
from odf_chain.storage import Storage

Ref = str | int | datetime | Multihash


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
    sequence_number: int | None = None
    time: datetime | None = None


def parse_ref(ref: Ref) -> _Selector:
    if isinstance(ref, Multihash):
        return _Selector(block_hash=ref)
    if isinstance(ref, datetime):
        return _Selector(time=ref if ref.tzinfo else ref.replace(tzinfo=UTC))
    if isinstance(ref, int):
        return _Selector(sequence_number=ref)
    text = ref.strip()
    if text == "head":
        return _Selector()
    if text.isdigit():
        return _Selector(sequence_number=int(text))
    if text.startswith("f") and len(text) > 8:
        return _Selector(block_hash=Multihash.from_multibase(text))
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FormatError(
            f"unrecognised ref {ref!r}: expected 'head', a block hash (f…), a sequence number "
            "or an ISO-8601 time"
        ) from None
    return _Selector(time=moment if moment.tzinfo else moment.replace(tzinfo=UTC))


def select(entries: list[BlockEntry], ref: Ref) -> int:
    """Index into ``entries`` (oldest first) of the block ``ref`` names."""
    sel = parse_ref(ref)
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


def state_at(storage: Storage, ref: Ref = "head") -> DatasetState:
    """The state as of the block ``ref`` names, validated by every rule on the way."""
    entries = load_chain(storage)
    return fold(entries[: select(entries, ref) + 1])


@dataclass(frozen=True)
class SchemaChange:
    """One SetDataSchema in the chain and what it changed from the schema before it."""

    entry: BlockEntry
    schema: pa.Schema
    diff: SchemaDiff | None  # None for the first schema


def schema_history(storage: Storage) -> list[SchemaChange]:
    """Every schema the dataset has had, oldest first, each with its diff from the previous."""
    history: list[SchemaChange] = []
    previous: pa.Schema | None = None
    state = EMPTY
    for entry in load_chain(storage):
        state = advance(state, entry.block, entry.hash)
        if isinstance(entry.block.event, SetDataSchema):
            assert state.schema is not None
            diff = None if previous is None else diff_schemas(previous, state.schema)
            history.append(SchemaChange(entry, state.schema, diff))
            previous = state.schema
    return history
