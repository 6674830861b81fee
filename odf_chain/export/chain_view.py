"""What both exports read from chains: a dataset as of one block with its lineage runs, and the
datasets those runs pinned, each opened as of its pin.

Reading is done once per export: a chain is loaded (and every block checked against its hash)
once per location, then folded up to each block asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from odf_chain import replay
from odf_chain.chain import BlockEntry, advance
from odf_chain.dataset import Dataset
from odf_chain.errors import NotFoundError, OdfChainError, StorageError
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    DataSlice,
    ExecuteTransform,
    LineageInput,
    OffsetInterval,
    Seed,
    SetDataSchema,
)
from odf_chain.format.multihash import Multihash
from odf_chain.lineage import input_key
from odf_chain.state import EMPTY, DatasetState, lineage_of
from odf_chain.storage import open_storage

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class LineageRunBlock:
    """One lineage run of a chain: the block holding its lineage, the schema in force for the data
    its run wrote, and the data blocks holding the run's records (as far as the view goes)."""

    entry: BlockEntry
    event: AddFieldLineage
    schema: pa.Schema | None
    data: tuple[BlockEntry, ...]

    @property
    def completed_by(self) -> BlockEntry | None:
        """The data block holding the run's last record (None when the view ends before it,
        or the run wrote no records)."""
        offsets = self.event.run.offsets
        if offsets is None or not self.data:
            return None
        last = _new_data(self.data[-1].block.event)
        if last is None or last.offset_interval.end < offsets.end:
            return None
        return self.data[-1]


@dataclass(frozen=True)
class ChainView:
    """A dataset as of one block."""

    key: str  # the dataset id text (did:odf:...): its key in field graphs and exports
    name: str  # readable: the last part of its location
    location: str
    entries: tuple[BlockEntry, ...]  # oldest first, up to the block asked for
    state: DatasetState
    runs: tuple[LineageRunBlock, ...]

    @property
    def schema_entry(self) -> BlockEntry | None:
        """The SetDataSchema block whose schema is in force."""
        seq = self.state.schema_sequence_number
        return None if seq is None else self.entries[seq]


def _new_data(event: object) -> DataSlice | None:
    if isinstance(event, AddData | ExecuteTransform):
        return event.new_data
    return None


def absolute_location(location: str) -> str:
    """A local path made absolute (so ``.`` names the directory); a URI as it is."""
    if "://" in location:
        return location
    return str(Path(location).resolve())


def display_name(location: str) -> str:
    """The last part of a path or URI (``s3://b/sales`` -> ``sales``)."""
    stripped = absolute_location(location).rstrip("/")
    return stripped.rsplit("/", 1)[-1] or stripped


def millis(moment: datetime) -> int:
    """Milliseconds since the Unix epoch, exactly (no float rounding)."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(milliseconds=1)


def _view(location: str, entries: list[BlockEntry], upto: int) -> ChainView:
    part = entries[: upto + 1]
    runs: list[tuple[BlockEntry, AddFieldLineage, pa.Schema | None, list[BlockEntry]]] = []
    waiting: list[tuple[OffsetInterval, list[BlockEntry]]] = []  # runs not fully covered yet
    state = EMPTY
    for entry in part:
        state = advance(state, entry.block, entry.hash)
        event = entry.block.event
        carried = lineage_of(event)
        if isinstance(event, AddFieldLineage):
            data: list[BlockEntry] = []
            runs.append((entry, event, state.schema, data))
            if event.run.offsets is not None:
                waiting.append((event.run.offsets, data))
            continue
        if carried is not None:  # the run's lineage and its first slice in one block
            slice_ = _new_data(event)
            data = [entry] if slice_ else []
            runs.append((entry, carried, state.schema, data))
            offsets = carried.run.offsets
            if slice_ and offsets and offsets.end > slice_.offset_interval.end:  # more follow
                waiting.append((offsets, data))
            continue
        slice_ = _new_data(event)
        if slice_ is None or not waiting:
            continue
        held = slice_.offset_interval
        for offsets, data in waiting:
            if held.start <= offsets.end and offsets.start <= held.end:
                data.append(entry)
        waiting = [(offsets, data) for offsets, data in waiting if offsets.end > held.end]
    if state.dataset_id is None:
        raise NotFoundError(f"{location} has no Seed at block {upto}")
    return ChainView(
        key=state.dataset_id.to_did(),
        name=display_name(location),
        location=absolute_location(location),
        entries=tuple(part),
        state=state,
        runs=tuple(LineageRunBlock(e, ev, sc, tuple(d)) for e, ev, sc, d in runs),
    )


def view_dataset(dataset: Dataset, at: replay.Ref = "head") -> ChainView:
    """``dataset`` as of block ``at`` (any ref :mod:`odf_chain.replay` accepts)."""
    at = replay.resolve_ref(dataset.storage, at)  # a prefix counts every block file, as elsewhere
    entries = dataset.blocks()
    return _view(dataset.location, entries, replay.select(entries, at))


@dataclass(frozen=True)
class PinnedView:
    """A pinned dataset input opened at its pin, or why it could not be."""

    input: LineageInput
    view: ChainView | None
    reason: str | None = None


@dataclass(frozen=True)
class _LoadedChain:
    """A chain loaded once, with what pins need looked up fast."""

    entries: list[BlockEntry]
    positions: dict[Multihash, int]  # block hash -> index
    schema_blocks: list[int]  # index of the SetDataSchema in force at each index (-1: none)
    key: str | None  # the Seed's dataset id text

    @classmethod
    def of(cls, entries: list[BlockEntry]) -> _LoadedChain:
        schema_blocks, last = [], -1
        for i, entry in enumerate(entries):
            if isinstance(entry.block.event, SetDataSchema):
                last = i
            schema_blocks.append(last)
        seed = entries[0].block.event if entries else None
        key = seed.dataset_id.to_did() if isinstance(seed, Seed) else None
        return cls(entries, {e.hash: i for i, e in enumerate(entries)}, schema_blocks, key)


class InputOpener:
    """Opens the datasets that lineage events pin, each chain loaded (and every block checked
    against its hash) once per export."""

    def __init__(self) -> None:
        self._chains: dict[str, _LoadedChain | OdfChainError] = {}

    def _chain(self, pinned: LineageInput) -> _LoadedChain:
        if pinned.dataset_id is None or pinned.block_hash is None:
            raise NotFoundError(f"input {pinned.name!r} is not a pinned dataset")
        if pinned.uri is None:
            raise NotFoundError(f"input {pinned.name!r} names no location")
        found = self._chains.get(pinned.uri)
        if found is None:
            try:
                found = _LoadedChain.of(replay.load_chain(open_storage(pinned.uri)))
            except OdfChainError as exc:
                found = exc
            except OSError as exc:
                found = StorageError(f"cannot read {pinned.uri}: {exc}")
            self._chains[pinned.uri] = found
        if isinstance(found, OdfChainError):
            raise found
        if found.key != input_key(pinned):
            raise NotFoundError(
                f"input {pinned.name!r}: {pinned.uri} holds dataset {found.key}, "
                f"not {input_key(pinned)}"
            )
        return found

    def position(self, pinned: LineageInput) -> int:
        """Where the pin is in its dataset's chain (raises OdfChainError when it cannot be
        followed)."""
        chain = self._chain(pinned)
        at = chain.positions.get(pinned.block_hash)  # type: ignore[arg-type]
        if at is None:
            raise NotFoundError(
                f"input {pinned.name!r}: block {pinned.block_hash} is not in {pinned.uri}"
            )
        return at

    def open(self, pinned: LineageInput) -> PinnedView:
        """The input as of its pinned block, folded by every rule; an input that cannot be
        followed is reported, never fatal (lineage still names it by its dataset id)."""
        try:
            at = self.position(pinned)
            assert pinned.uri is not None
            view = _view(pinned.uri, self._chain(pinned).entries, at)
        except OdfChainError as exc:
            return PinnedView(pinned, None, str(exc))
        return PinnedView(pinned, view)

    def schema(self, pinned: LineageInput) -> pa.Schema | None:
        """The input's schema at its pinned block, looked up without folding (None when the
        input cannot be followed or had no schema yet)."""
        try:
            at = self.position(pinned)
        except OdfChainError:
            return None
        chain = self._chain(pinned)
        index = chain.schema_blocks[at]
        if index < 0:
            return None
        event = chain.entries[index].block.event
        assert isinstance(event, SetDataSchema)
        return event.arrow_schema


def write_text(out: str | Path, text: str) -> None:
    """Write an export file all at once (a reader never sees half of it; on failure the old
    file, if any, stays), naming it when that fails."""
    from odf_chain.storage.local_files import write_atomic

    try:
        write_atomic(Path(out).absolute(), text.encode("utf-8"))
    except OSError as exc:
        raise StorageError(f"cannot write {out}: {exc}") from exc
