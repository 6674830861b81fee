"""What a chain means at one block: the fold ``state' = apply(state, block)``.

:func:`apply` only moves state forward; it assumes the block is valid. Whether it *is* valid is
decided by :mod:`odf_chain.rules`; :func:`odf_chain.chain.advance` runs both — the single fold
that append, replay and verify share, so a chain that appends is a chain that verifies.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from odf_chain.events import (
    AddData,
    AddFieldLineage,
    AddPushSource,
    DatasetKind,
    DisablePollingSource,
    DisablePushSource,
    ExecuteTransform,
    ExecuteTransformInput,
    MetadataBlock,
    OffsetInterval,
    Seed,
    SetDataSchema,
    SetInfo,
    SetLicense,
    SetPollingSource,
    SetTransform,
    SetVocab,
)
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import Multihash

if TYPE_CHECKING:
    # numpy and the bulk columns are verify's, imported where its fold runs
    import numpy as np
    import pyarrow as pa

    from odf_chain.format.columns import BlockColumns
    from odf_chain.schema.fields import FieldInfo  # the field paths: on first use

DEFAULT_OFFSET_COLUMN = "offset"
DEFAULT_OPERATION_TYPE_COLUMN = "op"
DEFAULT_SYSTEM_TIME_COLUMN = "system_time"
DEFAULT_EVENT_TIME_COLUMN = "event_time"

# Keys of an AddData's extra attributes that odf_chain writes and reads back.
SOURCE_KEY = "odf-chain.dev/source"
"""What a write read: ``{"format", "inputs": [{"uri", "size", "hash"}]}`` for an ingest of files
(the hash a BLAKE3 multihash of the file's bytes), or whatever the caller's ``source=`` said."""
LINEAGE_KEY = "odf-chain.dev/field-lineage"
"""Field lineage carried in the extra attributes of the block holding the run's first slice (the
JSON of an AddFieldLineage, :mod:`odf_chain.format.lineage_json`), so a chain holds only events
ODF readers know (docs/lineage-in-odf.md). On an ExecuteTransform the run wrote exactly that
block's slice; on an AddData the run's offsets start with its slice and may go on into the
slices of the blocks right after it (one write, several slices)."""
TRANSACTION_KEY = "odf-chain.dev/transaction"
"""``{"app_id": str, "version": int}`` on the first AddData of a write given ``transaction=``
(a write is one head move, so its first AddData is in the chain exactly when all of it is)."""


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """The names of the system columns, with ODF's defaults filled in."""

    offset_column: str = DEFAULT_OFFSET_COLUMN
    operation_type_column: str = DEFAULT_OPERATION_TYPE_COLUMN
    system_time_column: str = DEFAULT_SYSTEM_TIME_COLUMN
    event_time_column: str = DEFAULT_EVENT_TIME_COLUMN

    @classmethod
    def from_event(cls, event: SetVocab) -> Vocabulary:
        defaults = cls()
        return cls(
            event.offset_column or defaults.offset_column,
            event.operation_type_column or defaults.operation_type_column,
            event.system_time_column or defaults.system_time_column,
            event.event_time_column or defaults.event_time_column,
        )

    def as_event(self) -> SetVocab:
        """The SetVocab that puts these names in force (ODF's default names left out: a
        SetVocab replaces the whole vocabulary, and an absent name is the default)."""
        defaults = Vocabulary()
        return SetVocab(
            *(
                None if getattr(self, name) == getattr(defaults, name) else getattr(self, name)
                for name in (
                    "offset_column",
                    "operation_type_column",
                    "system_time_column",
                    "event_time_column",
                )
            )
        )

    @property
    def system_columns(self) -> tuple[str, str, str]:
        return (self.offset_column, self.operation_type_column, self.system_time_column)

    def spark_clashes(self, names: list[str]) -> list[str]:
        """Of ``names``, those Spark takes for a system column: its names are compared in any
        case (``OFFSET`` is ``offset`` to Spark)."""
        system = {c.lower() for c in self.system_columns}
        return [n for n in names if n.lower() in system]


# -- field paths, computed once per schema object ---------------------------------------------

_PATHS_CACHE_SIZE = 8
_paths_cache: OrderedDict[int, tuple[pa.Schema, tuple[FieldInfo, ...], frozenset[str]]] = (
    OrderedDict()
)
_paths_lock = threading.Lock()


def _schema_paths(schema: pa.Schema) -> tuple[tuple[FieldInfo, ...], frozenset[str]]:
    """The schema's v2 fields and the set of their paths, cached by the schema's identity.

    Every state folded after a SetDataSchema holds the very same schema object, so a chain of
    10,000 blocks computes the paths of each schema once, not once per block. The key is the
    object, not its value: two equal-looking schemas can differ in metadata that decides the
    path convention (an Avro writer schema). A hit is confirmed with ``is`` (the entry keeps the
    schema alive, so its id cannot be reused while cached); the cache holds a few schemas only.
    """
    key = id(schema)
    with _paths_lock:
        hit = _paths_cache.get(key)
        if hit is not None and hit[0] is schema:
            _paths_cache.move_to_end(key)
            return hit[1], hit[2]
    from odf_chain.schema.paths import schema_fields

    fields = tuple(schema_fields(schema))
    paths = frozenset(f.path for f in fields)
    with _paths_lock:
        _paths_cache[key] = (schema, fields, paths)
        _paths_cache.move_to_end(key)
        while len(_paths_cache) > _PATHS_CACHE_SIZE:
            _paths_cache.popitem(last=False)
    return fields, paths


def schema_path_set(schema: pa.Schema) -> frozenset[str]:
    """The v2 field paths of ``schema`` as a set (cached per schema object)."""
    return _schema_paths(schema)[1]


# -- transactions --------------------------------------------------------------------------------


class TransactionVersions(Mapping[str, int]):
    """App id -> the last transaction version the chain records for it (Delta's txnAppId /
    txnVersion), and where: the sequence number of the block that recorded it, so a writer can
    prove a version against that block instead of believing a cache (:func:`odf_chain.replay.
    proven_transactions`). Immutable and hashable like the rest of the state; one entry per app
    id, so it grows with the number of jobs, not with the chain."""

    __slots__ = ("_versions",)

    def __init__(self, versions: Iterable[tuple[str, int, int]] = ()) -> None:
        self._versions: dict[str, tuple[int, int]] = {a: (v, s) for a, v, s in versions}

    def __getitem__(self, app_id: str) -> int:
        return self._versions[app_id][0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)

    def __hash__(self) -> int:
        return hash(frozenset(self._versions.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TransactionVersions):
            return self._versions == other._versions
        return Mapping.__eq__(self, other)

    def __repr__(self) -> str:
        return f"TransactionVersions({self._versions!r})"

    def recorded_at(self, app_id: str) -> int | None:
        """The sequence number of the block that recorded ``app_id``'s last version."""
        found = self._versions.get(app_id)
        return None if found is None else found[1]

    def triples(self) -> list[tuple[str, int, int]]:
        """(app id, version, sequence number) for every app id, in the order first recorded."""
        return [(a, v, s) for a, (v, s) in self._versions.items()]

    def recorded(self, app_id: str, version: int, sequence_number: int) -> TransactionVersions:
        """A copy with ``version`` as the last version of ``app_id``, recorded by block
        ``sequence_number``."""
        copy = TransactionVersions()
        copy._versions = {**self._versions, app_id: (version, sequence_number)}
        return copy


NO_TRANSACTIONS = TransactionVersions()


def transaction_extra(app_id: str, version: int) -> dict[str, Any]:
    """The extra attributes that record a transaction pair (on a write's first AddData)."""
    return {TRANSACTION_KEY: {"app_id": app_id, "version": version}}


def transaction_of(event: object) -> Any:
    """The raw ``odf-chain.dev/transaction`` value an AddData carries (whatever its shape; the
    rule ``transaction-version`` judges it), or None."""
    if isinstance(event, AddData) and isinstance(event.extra, Mapping):
        return event.extra.get(TRANSACTION_KEY)
    return None


def recorded_transaction(event: object) -> tuple[str, int] | None:
    """The well-formed ``(app_id, version)`` an event records, or None (a malformed pair is the
    rule ``transaction-version``'s to report; the fold keeps only well-formed ones)."""
    return _well_formed(transaction_of(event))


def _well_formed(value: Any) -> tuple[str, int] | None:
    if not isinstance(value, Mapping):
        return None
    app_id, version = value.get("app_id"), value.get("version")
    if isinstance(app_id, str) and isinstance(version, int) and not isinstance(version, bool):
        return app_id, version
    return None


# -- lineage bookkeeping ------------------------------------------------------------------------


def carries_lineage(event: object) -> bool:
    """Whether ``event`` is field lineage: an AddFieldLineage (the event older chains hold), or
    an AddData or ExecuteTransform whose extra attributes carry one (:data:`LINEAGE_KEY`)."""
    if isinstance(event, AddFieldLineage):
        return True
    return (
        isinstance(event, AddData | ExecuteTransform)
        and isinstance(event.extra, Mapping)
        and LINEAGE_KEY in event.extra
    )


def lineage_extra(event: AddFieldLineage) -> dict[str, Any]:
    """The extra attributes that carry ``event`` on the block holding its run's first slice."""
    from odf_chain.format.lineage_json import lineage_to_json

    return {LINEAGE_KEY: lineage_to_json(event)}


def embedded_lineage(event: AddData | ExecuteTransform) -> AddFieldLineage:
    """The AddFieldLineage an AddData or ExecuteTransform carries; FormatError when it is
    malformed (rule ``lineage-structure`` reports that)."""
    from odf_chain.format.lineage_json import lineage_from_json

    assert event.extra is not None
    doc = event.extra[LINEAGE_KEY]
    step = _step
    if step.event is event and step.doc is doc:
        return step.lineage  # type: ignore[return-value]
    lineage = lineage_from_json(doc, f"extra attribute {LINEAGE_KEY!r}")
    if step.event is event:
        step.doc, step.lineage = doc, lineage
    return lineage


_NOTHING = object()
"""No document decoded yet (not None: a document can be JSON's null, which must fail)."""


class _Step(threading.local):
    """The fold step this thread is in (:func:`decoding_once`): its event, and the lineage it
    carries once decoded, with the document it was decoded from."""

    event: object = None
    doc: object = _NOTHING
    lineage: AddFieldLineage | None = None


_step = _Step()


@contextlib.contextmanager
def decoding_once(event: object) -> Iterator[None]:
    """Within one fold step over ``event``, its carried lineage is decoded once for the rules
    and the state that ask for it (a write's step decoded it 7 times without this; one run's
    lineage takes 15-34 µs to decode, one to three operations). Only within the step: outside
    it a caller may change the document in place and hand the same event again (a retry), and
    what a step checks must be what gets written."""
    outer = (_step.event, _step.doc, _step.lineage)
    _step.event, _step.doc, _step.lineage = event, _NOTHING, None
    try:
        yield
    finally:
        _step.event, _step.doc, _step.lineage = outer


def lineage_of(event: object) -> AddFieldLineage | None:
    """The field lineage ``event`` is or carries; None when it has none, or when what it
    carries is malformed (the rules refuse such a block; a fold over one verify reports goes
    on without it)."""
    if isinstance(event, AddFieldLineage):
        return event
    if not carries_lineage(event):
        return None
    from odf_chain.errors import FormatError

    try:
        return embedded_lineage(event)  # type: ignore[arg-type]
    except FormatError:
        return None


@dataclass(frozen=True, slots=True)
class PendingLineage:
    """Offsets a lineage run promised (its run wrote them) that no slice has covered yet.

    The blocks right after the lineage event (or after the AddData carrying it, when the run
    wrote more than that block's slice) must be data slices covering ``uncovered`` exactly, in
    order; the rule ``lineage-data`` holds them to it.
    """

    sequence_number: int  # of the block holding the lineage
    block_hash: Multihash
    uncovered: OffsetInterval


@dataclass(frozen=True, slots=True)
class DatasetState:
    """The dataset as of one block. ``EMPTY`` is the state before the Seed.

    Field lineage leaves only constant-size traces here (copied with every block, so nothing
    that grows with the chain): the offsets the latest lineage event promised and no slice has
    covered yet, and that event's sequence number. Which run wrote an offset is found by
    walking the chain (replay), not kept here.
    """

    head: Multihash | None = None
    sequence_number: int = -1
    system_time: datetime | None = None
    dataset_id: DatasetId | None = None
    dataset_kind: DatasetKind | None = None
    schema: pa.Schema | None = None
    schema_sequence_number: int | None = None
    vocab: Vocabulary = Vocabulary()
    push_sources: frozenset[str] = frozenset()
    polling_source: bool = False
    info: SetInfo | None = None
    license: SetLicense | None = None
    last_offset: int | None = None
    last_checkpoint: Multihash | None = None
    watermark: datetime | None = None
    num_records: int = 0
    data_size: int = 0
    num_slices: int = 0
    lineage_pending: PendingLineage | None = None
    last_lineage_sequence_number: int | None = None  # the latest AddFieldLineage, if any
    transactions: TransactionVersions = NO_TRANSACTIONS  # app id -> last version recorded
    transform: SetTransform | None = None  # a derivative dataset's transformation in force
    last_run_inputs: tuple[ExecuteTransformInput, ...] = ()  # the last ExecuteTransform's pins

    def last_pin(self, dataset_id: DatasetId) -> ExecuteTransformInput | None:
        """What the last run recorded for input ``dataset_id`` (its block and offset), or None
        when the last run did not read it (or there was none)."""
        return next((i for i in self.last_run_inputs if i.dataset_id == dataset_id), None)

    @property
    def hash_algorithm(self) -> str | None:
        """The chain's hash algorithm, fixed by its first block."""
        return None if self.head is None else self.head.algorithm

    @property
    def next_offset(self) -> int:
        return 0 if self.last_offset is None else self.last_offset + 1

    @property
    def fields(self) -> list[FieldInfo]:
        """The schema's fields as DataHub lists them (v2 paths, types, nullability)."""
        return [] if self.schema is None else list(_schema_paths(self.schema)[0])

    @property
    def field_paths(self) -> list[str]:
        return [f.path for f in self.fields]

    @property
    def field_path_set(self) -> frozenset[str]:
        """The schema's v2 paths for membership tests (computed once per schema)."""
        return frozenset() if self.schema is None else schema_path_set(self.schema)


EMPTY = DatasetState()


def _data_changes(state: DatasetState, event: AddData | ExecuteTransform) -> dict:
    changes: dict = {}
    if event.new_data is not None:
        interval = event.new_data.offset_interval
        changes.update(
            last_offset=interval.end,
            num_records=state.num_records + interval.end - interval.start + 1,
            data_size=state.data_size + event.new_data.size,
            num_slices=state.num_slices + 1,
        )
    if event.new_checkpoint is not None:
        changes["last_checkpoint"] = event.new_checkpoint.physical_hash
    if event.new_watermark is not None:
        changes["watermark"] = event.new_watermark
    pending = state.lineage_pending
    if pending is not None and event.new_data is not None:
        covered_to = event.new_data.offset_interval.end
        changes["lineage_pending"] = (
            None
            if covered_to >= pending.uncovered.end
            else replace(pending, uncovered=OffsetInterval(covered_to + 1, pending.uncovered.end))
        )
    return changes


def _lineage_changes(event: AddFieldLineage, sequence_number: int, block_hash: Multihash) -> dict:
    offsets = event.run.offsets
    return {
        "last_lineage_sequence_number": sequence_number,
        "lineage_pending": None
        if offsets is None
        else PendingLineage(sequence_number, block_hash, offsets),
    }


def _carried_changes(event: AddData, sequence_number: int, block_hash: Multihash) -> dict:
    """An AddData carrying its run's lineage: the run's offsets past this block's slice are
    promised to the blocks right after it (nothing is, when the lineage is malformed or its
    offsets do not start with the slice: rules ``lineage-structure`` and ``lineage-data``)."""
    carried = lineage_of(event)
    if carried is None:
        return {}
    changes: dict = {"last_lineage_sequence_number": sequence_number, "lineage_pending": None}
    offsets, held = carried.run.offsets, event.new_data
    if offsets is not None and held is not None:
        end = held.offset_interval.end
        if offsets.start == held.offset_interval.start and offsets.end > end:
            changes["lineage_pending"] = PendingLineage(
                sequence_number, block_hash, OffsetInterval(end + 1, offsets.end)
            )
    return changes


def _covers_pending(event: object) -> bool:
    return isinstance(event, AddData | ExecuteTransform) and event.new_data is not None


def _event_changes(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> dict:
    """What ``block``'s event changes, read from the state before the block."""
    event = block.event
    match event:
        case Seed():
            return {"dataset_id": event.dataset_id, "dataset_kind": event.dataset_kind}
        case SetDataSchema():
            return {"schema": event.arrow_schema, "schema_sequence_number": block.sequence_number}
        case AddData():
            changes = _data_changes(state, event)
            if carries_lineage(event):
                changes.update(_carried_changes(event, block.sequence_number, block_hash))
            return changes
        case ExecuteTransform():
            changes = {**_data_changes(state, event), "last_run_inputs": event.query_inputs}
            if carries_lineage(event):  # its run wrote this very block's slice: none pending
                changes["last_lineage_sequence_number"] = block.sequence_number
            return changes
        case SetTransform():
            return {"transform": event}
        case AddFieldLineage():
            return _lineage_changes(event, block.sequence_number, block_hash)
        case SetVocab():
            return {"vocab": Vocabulary.from_event(event)}
        case AddPushSource():
            return {"push_sources": state.push_sources | {event.source_name or ""}}
        case DisablePushSource():
            return {"push_sources": state.push_sources - {event.source_name}}
        case SetPollingSource():
            return {"polling_source": True}
        case DisablePollingSource():
            return {"polling_source": False}
        case SetInfo():
            return {"info": event}
        case SetLicense():
            return {"license": event}
        case _:
            return {}


def apply(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> DatasetState:
    """The state after ``block`` (already validated), stored under ``block_hash``.

    One ``replace`` per block (copying the state is most of what a fold step costs): the
    event's own changes are applied after, so they win over the general ones below.
    """
    event = block.event
    changes: dict = {
        "head": block_hash,
        "sequence_number": block.sequence_number,
        "system_time": block.system_time,
    }
    recorded = recorded_transaction(event)
    if recorded is not None:  # the version as recorded (verify folds on past violations too)
        changes["transactions"] = state.transactions.recorded(*recorded, block.sequence_number)
    if state.lineage_pending is not None and not _covers_pending(event):
        # Only in a chain that broke rule lineage-data (verify folds on past violations):
        # report the uncovered offsets once, not again at every later block.
        changes["lineage_pending"] = None
    changes.update(_event_changes(state, block, block_hash))
    return replace(state, **changes)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def apply_plain_run(state: DatasetState, run: BlockColumns, hashes: np.ndarray) -> DatasetState:
    """The state after a run of plain AddData blocks (:func:`rules.plain_run_passes` vouched for
    every one): what :func:`apply` block by block gives, in one step. Plain blocks carry no
    checkpoint or transaction (a source state, if any, the state does not keep), and no lineage
    is pending, so only the head, the counters, the last offset and the watermark move."""
    import numpy as np

    last = len(run) - 1
    changes: dict = {
        "head": Multihash.from_bytes(hashes[last].tobytes()),
        "sequence_number": int(run.sequence_number[last]),
        "system_time": _EPOCH + timedelta(microseconds=int(run.system_time_us[last])),
    }
    sliced = np.flatnonzero(run.has_data)
    if sliced.size:  # the columns are 0 where a block has no slice: sums over all rows hold
        changes |= {
            "last_offset": int(run.end[sliced[-1]]),
            "num_records": state.num_records
            + sum((run.end - run.start).tolist())
            + int(sliced.size),
            "data_size": state.data_size + sum(run.size.tolist()),  # Python ints: no wrap
            "num_slices": state.num_slices + int(sliced.size),
        }
    marked = np.flatnonzero(run.has_watermark)
    if marked.size:
        micros = int(run.watermark_us[marked[-1]])
        changes["watermark"] = _EPOCH + timedelta(microseconds=micros)
    return replace(state, **changes)
