"""What changed between two blocks of a chain: ``odf-chain diff`` and :func:`diff_blocks`.

The answer compares the states at the two blocks (schema, rows, slices, vocabulary, SetInfo,
SetLicense, watermark) and lists what the blocks after the first, up to and including the
second, recorded: the schema changes, the lineage runs, the transactions and the derive runs.
The older block comes first; a second block older than the first is refused
(:class:`BlockOrderError`), since a chain only grows: what block 5 has and block 2 has not
is what was appended, never what was taken away.

Schema fields are named by their v2 paths, as ``odf-chain schema`` and ``odf-chain fields``
name them (:func:`odf_chain.schema.evolution.diff_schemas`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from odf_chain import replay
from odf_chain.chain import BlockEntry, walk_back
from odf_chain.derived import RunRecord
from odf_chain.errors import OdfChainError
from odf_chain.events import AddFieldLineage, ExecuteTransform, SetDataSchema
from odf_chain.schema.evolution import diff_schemas
from odf_chain.schema.paths import schema_fields
from odf_chain.state import DatasetState, lineage_of, recorded_transaction
from odf_chain.storage import Storage


class BlockOrderError(OdfChainError):
    """The second block of a diff comes before the first."""


@dataclass(frozen=True, slots=True)
class BlockPoint:
    """One end of a diff: a block, by sequence number, hash and system time."""

    sequence_number: int
    hash: str
    system_time: datetime | None


@dataclass(frozen=True, slots=True)
class SchemaChanges:
    """Fields by v2 path; ``blocks``: the SetDataSchema blocks in between."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    retyped: tuple[tuple[str, str, str], ...] = ()  # path, old type, new type
    nullability: tuple[tuple[str, bool, bool], ...] = ()  # path, old nullable, new nullable
    blocks: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.retyped or self.nullability)


@dataclass(frozen=True, slots=True)
class DataChanges:
    """Rows, slices and Parquet bytes added; ``offsets``: the first and last offset added."""

    rows: int = 0
    slices: int = 0
    bytes: int = 0
    offsets: tuple[int, int] | None = None
    watermark: tuple[datetime | None, datetime | None] | None = None  # old, new when it moved


@dataclass(frozen=True, slots=True)
class ValueChange:
    """One named value of the vocabulary, SetInfo or SetLicense: before and after."""

    name: str
    old: Any
    new: Any


@dataclass(frozen=True, slots=True)
class LineageRunAdded:
    block: int
    run_id: str
    job_name: str
    operations: int


@dataclass(frozen=True, slots=True)
class TransactionAdded:
    block: int
    app_id: str
    version: int


@dataclass(frozen=True, slots=True)
class DeriveRunAdded:
    """An ExecuteTransform: each input's dataset id and the offset it was read to."""

    block: int
    inputs: tuple[tuple[str, int | None], ...]
    rows: int
    reproducible: bool | None  # None: the block records no run of odf_chain's derive


@dataclass(frozen=True, slots=True)
class ChainDiff:
    """What the blocks after ``a`` up to ``b`` changed (:func:`diff_blocks`)."""

    a: BlockPoint
    b: BlockPoint
    events: tuple[tuple[str, int], ...]  # event name -> blocks of it, in first-seen order
    schema: SchemaChanges
    data: DataChanges
    vocabulary: tuple[ValueChange, ...]
    info: tuple[ValueChange, ...]
    license: tuple[ValueChange, ...]
    lineage_runs: tuple[LineageRunAdded, ...]
    transactions: tuple[TransactionAdded, ...]
    derive_runs: tuple[DeriveRunAdded, ...]

    @property
    def blocks(self) -> int:
        return self.b.sequence_number - self.a.sequence_number

    def to_json(self) -> dict[str, Any]:
        """The diff as JSON-ready data: times ISO-8601, tuples as lists."""
        out = {"blocks": self.blocks, **{f.name: getattr(self, f.name) for f in _FIELDS}}
        out["events"] = dict(self.events)
        return _jsonable(out)


_FIELDS = dataclasses.fields(ChainDiff)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def diff_blocks(storage: Storage, a: replay.Ref, b: replay.Ref = "head") -> ChainDiff:
    """What changed from block ``a`` to block ``b`` (any refs; ``b`` not before ``a``)."""
    before = replay.state_at(storage, a)
    after = replay.state_at(storage, b)
    if after.sequence_number < before.sequence_number:
        raise BlockOrderError(
            f"block {b} (sequence number {after.sequence_number}) comes before block {a} "
            f"({before.sequence_number}): give the older block first "
            f"(diff DIR {after.sequence_number} {before.sequence_number})"
        )
    assert after.head is not None and before.head is not None
    entries = list(walk_back(storage, after.head, stop_at=before.head))
    entries.reverse()  # oldest first: the blocks after a, up to and including b
    return ChainDiff(
        a=_point(before),
        b=_point(after),
        events=_event_counts(entries),
        schema=_schema_changes(before, after, entries),
        data=_data_changes(before, after),
        vocabulary=_changes(before.vocab, after.vocab),
        info=_changes(before.info, after.info),
        license=_changes(before.license, after.license),
        lineage_runs=tuple(_lineage_runs(entries)),
        transactions=tuple(
            TransactionAdded(e.block.sequence_number, *pair)
            for e in entries
            if (pair := recorded_transaction(e.block.event)) is not None
        ),
        derive_runs=tuple(_derive_runs(entries)),
    )


def _point(state: DatasetState) -> BlockPoint:
    return BlockPoint(state.sequence_number, str(state.head), state.system_time)


def _event_counts(entries: list[BlockEntry]) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.block.event_name] = counts.get(entry.block.event_name, 0) + 1
    return tuple(counts.items())


def _schema_changes(
    before: DatasetState, after: DatasetState, entries: list[BlockEntry]
) -> SchemaChanges:
    diff = diff_schemas(before.schema or pa.schema([]), after.schema or pa.schema([]))
    added = tuple(diff.added)
    if before.schema is None and after.schema is not None:
        # the first schema adds every field, nested ones too, as 'schema --history' lists it
        added = tuple(info.path for info in schema_fields(after.schema))
    return SchemaChanges(
        added=added,
        removed=tuple(diff.removed),
        retyped=tuple(diff.retyped),
        nullability=tuple(diff.nullability),
        blocks=tuple(
            e.block.sequence_number for e in entries if isinstance(e.block.event, SetDataSchema)
        ),
    )


def _data_changes(before: DatasetState, after: DatasetState) -> DataChanges:
    offsets = None
    if after.last_offset is not None and after.last_offset != before.last_offset:
        offsets = (before.next_offset, after.last_offset)
    watermark = None
    if after.watermark != before.watermark:
        watermark = (before.watermark, after.watermark)
    return DataChanges(
        rows=after.num_records - before.num_records,
        slices=after.num_slices - before.num_slices,
        bytes=after.data_size - before.data_size,
        offsets=offsets,
        watermark=watermark,
    )


def _changes(old: Any, new: Any) -> tuple[ValueChange, ...]:
    """The fields of two values of one event class (either may be None) that differ."""
    if old == new:
        return ()
    kind = type(new if new is not None else old)
    out = []
    for f in dataclasses.fields(kind):
        was = None if old is None else getattr(old, f.name)
        now = None if new is None else getattr(new, f.name)
        if was != now:
            out.append(ValueChange(f.name, was, now))
    return tuple(out)


def _lineage_runs(entries: list[BlockEntry]):
    for entry in entries:
        carried = lineage_of(entry.block.event)
        if carried is None:
            continue
        assert isinstance(carried, AddFieldLineage)
        yield LineageRunAdded(
            entry.block.sequence_number,
            carried.run.run_id,
            carried.run.job_name,
            len(carried.operations),
        )


def _derive_runs(entries: list[BlockEntry]):
    for entry in entries:
        event = entry.block.event
        if not isinstance(event, ExecuteTransform):
            continue
        record = RunRecord.of(event)
        yield DeriveRunAdded(
            entry.block.sequence_number,
            tuple((str(i.dataset_id), i.new_offset) for i in event.query_inputs),
            0 if event.new_data is None else event.new_data.num_records,
            None if record is None else record.reproducible,
        )


def diff_lines(diff: ChainDiff) -> list[str]:
    """The diff as ``odf-chain diff`` prints it: only what changed, one item a line."""

    def point(p: BlockPoint) -> str:
        return f"block {p.sequence_number} ({short(p.hash)})"

    out = [f"from {point(diff.a)} to {point(diff.b)}: {_count(diff.blocks, 'block')}"]
    if diff.events:
        out.append("  " + ", ".join(f"{n} {name}" for name, n in diff.events))
    s = diff.schema
    if not s.empty or s.blocks:
        at = ", ".join(str(n) for n in s.blocks)
        out.append(f"schema (set at block{'s' if len(s.blocks) != 1 else ''} {at}):")
        out += [f"  + {p}" for p in s.added]
        out += [f"  - {p}" for p in s.removed]
        out += [f"  ~ {p}: {old} -> {new}" for p, old, new in s.retyped]
        out += [f"  ~ {p}: {_null(old)} -> {_null(new)}" for p, old, new in s.nullability]
        if s.empty:
            out.append("  (the same fields)")
    d = diff.data
    if d.rows or d.slices or d.offsets:
        offsets = "" if d.offsets is None else f", offsets {d.offsets[0]}..{d.offsets[1]}"
        out.append(
            f"data: {_count(d.rows, 'row')} added in {_count(d.slices, 'slice')} "
            f"({_count(d.bytes, 'byte')}){offsets}"
        )
    if d.watermark is not None:
        out.append(f"watermark: {_value(d.watermark[0])} -> {_value(d.watermark[1])}")
    for title, changes in (
        ("vocabulary", diff.vocabulary),
        ("info", diff.info),
        ("license", diff.license),
    ):
        if changes:
            out.append(f"{title}:")
            out += [f"  {c.name}: {_value(c.old)} -> {_value(c.new)}" for c in changes]
    if diff.lineage_runs:
        out.append("lineage runs:")
        out += [
            f"  block {r.block}: run {r.run_id} of job {r.job_name} "
            f"({_count(r.operations, 'field operation')})"
            for r in diff.lineage_runs
        ]
    if diff.transactions:
        out.append("transactions:")
        out += [f"  block {t.block}: {t.app_id} version {t.version}" for t in diff.transactions]
    if diff.derive_runs:
        out.append("derive runs:")
        for r in diff.derive_runs:
            read = ", ".join(f"{dataset} to offset {offset}" for dataset, offset in r.inputs)
            verdict = {None: "", True: "", False: " (not reproducible)"}[r.reproducible]
            out.append(
                f"  block {r.block}: {_count(r.rows, 'row')} from {read or 'no inputs'}{verdict}"
            )
    if diff.blocks == 0:
        out.append("no change: the same block")
    return out


def short(block_hash: str) -> str:
    from odf_chain.views.blocks import short_hash_text

    return short_hash_text(block_hash)


def _count(n: int, unit: str) -> str:
    return f"{n:,} {unit}{'' if n == 1 else 's'}"


def _null(nullable: bool) -> str:
    return "nullable" if nullable else "required"


def _value(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)
