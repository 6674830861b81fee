"""The field graph folded from lineage events: which field feeds which, across runs and datasets.

A node is a :class:`FieldRef`: a dataset key and a v2 path. The key of an odf_chain dataset is
its dataset id text (``did:odf:...``), the key of an external source its URI, so the field a
dataset writes and the same field read by a downstream dataset are one node, and graphs of
several datasets joined with :meth:`FieldGraph.merge` connect through them. Each event adds
direct edges, source field -> written field (see :mod:`odf_chain.lineage.resolve`), each with
the run, the block, the operations on the way and the combined transformation, the drops its
source fields end in, and the fields it read that no later operation used (kept with the
operation that read them, as CDAP keeps them: such a field does not vanish from the graph).
Nodes carry no block: the pin of a read (the input's block hash) is on the edge
(``source_input``).

Traversals are breadth-first over adjacency lists, without recursion.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from odf_chain.errors import LineageError
from odf_chain.events import AddFieldLineage, LineageInput, LineageRun, Transformation
from odf_chain.format.did import DatasetId
from odf_chain.lineage.resolve import resolve


@dataclass(frozen=True, slots=True, order=True)
class FieldRef:
    """A field of a dataset (dataset id text) or of an external source (its URI)."""

    dataset: str
    path: str


@dataclass(frozen=True, slots=True)
class BlockRef:
    """The block that holds a lineage event."""

    sequence_number: int
    block_hash: str


@dataclass(frozen=True, slots=True)
class EventRef:
    """One lineage event: the dataset it describes, its run and the block holding it."""

    dataset: str
    run: LineageRun
    block: BlockRef | None = None


@dataclass(frozen=True, slots=True)
class FieldEdge:
    """``target`` derives from ``source`` in the run of ``event``."""

    source: FieldRef
    target: FieldRef
    transformation: Transformation
    operations: tuple[str, ...]  # the run's operations on the way, in order
    event: EventRef
    source_input: LineageInput  # how the run read the source (its pin)

    @property
    def run(self) -> LineageRun:
        return self.event.run


@dataclass(frozen=True, slots=True)
class FieldDrop:
    """``field`` went into the drop ``operation`` in the run of ``event``. ``only_dropped``:
    in that run it reached no written field."""

    field: FieldRef
    operation: str
    transformation: Transformation
    operations: tuple[str, ...]  # the run's operations on the way, the drop last
    event: EventRef
    source_input: LineageInput
    only_dropped: bool

    @property
    def run(self) -> LineageRun:
        return self.event.run


@dataclass(frozen=True, slots=True)
class FieldUnused:
    """``field`` became ``output`` of ``operation`` (typically a read) in the run of ``event``,
    and no later operation used it. ``only_unused``: in that run it reached no written field."""

    field: FieldRef
    operation: str
    output: str
    transformation: Transformation
    operations: tuple[str, ...]  # the run's operations on the way, ``operation`` last
    event: EventRef
    source_input: LineageInput
    only_unused: bool

    @property
    def run(self) -> LineageRun:
        return self.event.run


@dataclass(frozen=True, slots=True)
class Reached:
    """A field found by a traversal, ``distance`` edges away; ``edges``, when asked for, link it
    to the fields found one step nearer."""

    field: FieldRef
    distance: int
    edges: tuple[FieldEdge, ...] = ()


@dataclass(frozen=True, slots=True)
class RunOperations:
    """The operations of one run that a summary's paths go through, in the run's order."""

    event: EventRef
    operations: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IncomingSummary:
    """CDAP's incoming summary: where a field's values come from. ``origins``: the fields at the
    far end (nothing known upstream of them); ``runs``: the operations that produced the field,
    run by run, nearest first."""

    field: FieldRef
    origins: tuple[FieldRef, ...]
    runs: tuple[RunOperations, ...]


@dataclass(frozen=True, slots=True)
class OutgoingSummary:
    """CDAP's outgoing summary: where a field's values go. ``destinations``: every field they
    reach, in any dataset; ``drops``: the drops the field and those fields end in; ``unused``:
    the operations where they were read and then used by nothing; ``runs``: the operations on
    the way, run by run, nearest first (a read whose output nothing used among them)."""

    field: FieldRef
    destinations: tuple[FieldRef, ...]
    drops: tuple[FieldDrop, ...]
    runs: tuple[RunOperations, ...]
    unused: tuple[FieldUnused, ...] = ()


def input_key(pinned: LineageInput) -> str:
    """The dataset key of an input: its dataset id text, else its URI."""
    if pinned.dataset_id is not None:
        return pinned.dataset_id.to_did()
    if pinned.uri:
        return pinned.uri
    raise LineageError(f"input {pinned.name!r} has neither a dataset id nor a URI")


@dataclass(frozen=True, slots=True)
class _Recorded:
    """What one event added, kept so that merging copies it whole."""

    ref: EventRef
    edges: tuple[FieldEdge, ...]
    drops: tuple[FieldDrop, ...]
    written: tuple[FieldRef, ...]
    order: Mapping[str, int]  # operation name -> position in the run
    unused: tuple[FieldUnused, ...] = ()


_EventKey = tuple[str, str | None, str]
_source = operator.attrgetter("source")
_target = operator.attrgetter("target")


class FieldGraph:
    """Field lineage of one or several datasets (see module doc). Add events in chain order."""

    def __init__(self) -> None:
        self._events: dict[_EventKey, _Recorded] = {}
        self._into: dict[FieldRef, list[FieldEdge]] = {}
        self._out_of: dict[FieldRef, list[FieldEdge]] = {}
        self._drops: dict[FieldRef, list[FieldDrop]] = {}
        self._unused: dict[FieldRef, list[FieldUnused]] = {}
        self._fields: dict[str, dict[str, None]] = {}
        self._spans: dict[str, list[tuple[int, int, EventRef]]] = {}

    # -- building --------------------------------------------------------------------------

    def add_event(
        self,
        dataset: DatasetId | str,
        event: AddFieldLineage,
        block: BlockRef | tuple[int, str] | None = None,
    ) -> bool:
        """Fold in the lineage event of ``dataset`` (its id, or the key of its fields) held by
        ``block``. False (nothing added) when this graph already has it (same dataset, block
        and run id)."""
        if isinstance(dataset, DatasetId):
            dataset = dataset.to_did()
        if block is not None and not isinstance(block, BlockRef):
            block = BlockRef(*block)
        key = (dataset, None if block is None else block.block_hash, event.run.run_id)
        if key in self._events:
            return False
        ref = EventRef(dataset, event.run, block)
        resolution = resolve(event)
        keys = {pinned.name: input_key(pinned) for pinned in event.inputs}
        # One FieldRef per field, however many edges it has.
        sources: dict[tuple[str, str], FieldRef] = {}
        targets: dict[str, FieldRef] = {}

        def source(pinned: LineageInput, path: str) -> FieldRef:
            found = sources.get((pinned.name, path))
            if found is None:
                found = sources[(pinned.name, path)] = FieldRef(keys[pinned.name], path)
            return found

        def target(path: str) -> FieldRef:
            found = targets.get(path)
            if found is None:
                found = targets[path] = FieldRef(dataset, path)
            return found

        edges = tuple(
            FieldEdge(
                source(e.input, e.source),
                target(e.target),
                e.transformation,
                e.operations,
                ref,
                e.input,
            )
            for e in resolution.edges
        )
        drops = tuple(
            FieldDrop(
                source(d.input, d.source),
                d.operation,
                d.transformation,
                d.operations,
                ref,
                d.input,
                d.only_dropped,
            )
            for d in resolution.drops
        )
        unused = tuple(
            FieldUnused(
                source(u.input, u.source),
                u.operation,
                u.output,
                u.transformation,
                u.operations,
                ref,
                u.input,
                u.only_unused,
            )
            for u in resolution.unused
        )
        written = tuple(target(path) for path in resolution.written)
        order = {name: position for position, name in enumerate(resolution.order)}
        self._install(key, _Recorded(ref, edges, drops, written, order, unused))
        return True

    def merge(self, other: FieldGraph) -> None:
        """Add every event of ``other`` this graph does not have yet (so merging the graphs of
        datasets that share an upstream counts its events once)."""
        for key, recorded in other._events.items():
            if key not in self._events:
                self._install(key, recorded)

    def _install(self, key: _EventKey, recorded: _Recorded) -> None:
        self._events[key] = recorded
        fields, into, out_of = self._fields, self._into, self._out_of
        last_target: FieldRef | None = None
        last_into: list[FieldEdge] = []
        for edge in recorded.edges:
            if edge.target is not last_target:  # an event's edges come grouped by target
                last_target = edge.target
                last_into = into.setdefault(last_target, [])
            last_into.append(edge)
            out_of.setdefault(edge.source, []).append(edge)
            fields.setdefault(edge.source.dataset, {})[edge.source.path] = None
        for drop in recorded.drops:
            self._drops.setdefault(drop.field, []).append(drop)
            fields.setdefault(drop.field.dataset, {})[drop.field.path] = None
        for unused in recorded.unused:
            self._unused.setdefault(unused.field, []).append(unused)
            fields.setdefault(unused.field.dataset, {})[unused.field.path] = None
        for ref in recorded.written:
            fields.setdefault(ref.dataset, {})[ref.path] = None
        offsets = recorded.ref.run.offsets
        if offsets is not None:
            span = (offsets.start, offsets.end, recorded.ref)
            bisect.insort(self._spans.setdefault(recorded.ref.dataset, []), span, key=_first)

    # -- looking -----------------------------------------------------------------------------

    def datasets(self) -> tuple[str, ...]:
        return tuple(sorted(self._fields))

    def fields(self, dataset: str) -> tuple[str, ...]:
        """The paths of ``dataset`` that appear in the graph, in the order first seen."""
        return tuple(self._fields.get(dataset, ()))

    def events(self, dataset: str | None = None) -> tuple[EventRef, ...]:
        """The events folded in (of ``dataset`` only, when given), in the order added."""
        return tuple(
            r.ref for r in self._events.values() if dataset is None or r.ref.dataset == dataset
        )

    def edges_into(self, field: FieldRef) -> tuple[FieldEdge, ...]:
        return tuple(self._into.get(field, ()))

    def edges_out_of(self, field: FieldRef) -> tuple[FieldEdge, ...]:
        return tuple(self._out_of.get(field, ()))

    def drops_of(self, field: FieldRef) -> tuple[FieldDrop, ...]:
        return tuple(self._drops.get(field, ()))

    def unused_of(self, field: FieldRef) -> tuple[FieldUnused, ...]:
        """Where runs read ``field`` and then used it for nothing."""
        return tuple(self._unused.get(field, ()))

    @property
    def edge_count(self) -> int:
        return sum(len(edges) for edges in self._into.values())

    def upstream(
        self, field: FieldRef, depth: int | None = 1, *, with_edges: bool = False
    ) -> tuple[Reached, ...]:
        """The fields ``field`` derives from, ``depth`` steps back (None: all the way), each
        with its distance; sorted by distance, then dataset and path."""
        return _walk(field, self._into, _source, depth, with_edges)

    def downstream(
        self, field: FieldRef, depth: int | None = 1, *, with_edges: bool = False
    ) -> tuple[Reached, ...]:
        """The fields derived from ``field``, ``depth`` steps on (None: all the way)."""
        return _walk(field, self._out_of, _target, depth, with_edges)

    def incoming(self, field: FieldRef) -> IncomingSummary:
        """Where ``field`` comes from, all the way back (see :class:`IncomingSummary`)."""
        nodes, edges = _closure(field, self._into, _source)
        origins = sorted(n for n in nodes if n != field and not self._into.get(n))
        return IncomingSummary(field, tuple(origins), self._runs_of(edges, ()))

    def outgoing(self, field: FieldRef) -> OutgoingSummary:
        """Where ``field`` goes, all the way on (see :class:`OutgoingSummary`)."""
        nodes, edges = _closure(field, self._out_of, _target)
        destinations = sorted(n for n in nodes if n != field)
        drops = [
            (distance, drop)
            for node, distance in nodes.items()
            for drop in self._drops.get(node, ())
        ]
        drops.sort(key=lambda d: (d[0], _event_order(d[1].event), d[1].field, d[1].operation))
        unused = [
            (distance, found)
            for node, distance in nodes.items()
            for found in self._unused.get(node, ())
        ]
        unused.sort(
            key=lambda u: (u[0], _event_order(u[1].event), u[1].field, u[1].operation, u[1].output)
        )
        ends = [(d + 1, end) for d, end in [*drops, *unused]]
        return OutgoingSummary(
            field,
            tuple(destinations),
            tuple(drop for _, drop in drops),
            self._runs_of(edges, ends),
            tuple(found for _, found in unused),
        )

    def run_for_offset(self, dataset: str, offset: int) -> LineageRun | None:
        """The run that wrote record ``offset`` of ``dataset``, if its event is in the graph."""
        found = self.event_for_offset(dataset, offset)
        return None if found is None else found.run

    def event_for_offset(self, dataset: str, offset: int) -> EventRef | None:
        spans = self._spans.get(dataset, [])
        at = bisect.bisect_right(spans, offset, key=_first) - 1
        if at >= 0 and spans[at][0] <= offset <= spans[at][1]:
            return spans[at][2]
        return None

    def _runs_of(
        self,
        edges: Iterable[tuple[int, FieldEdge]],
        drops: Iterable[tuple[int, FieldDrop | FieldUnused]],
    ) -> tuple[RunOperations, ...]:
        """The operations of each run met, nearest run first (distance, then chain order)."""
        met: dict[EventRef, tuple[int, set[str]]] = {}
        for distance, item in [*edges, *drops]:
            nearest, names = met.get(item.event, (distance, set()))
            names.update(item.operations)
            met[item.event] = (min(nearest, distance), names)
        runs = []
        for ref, (distance, names) in met.items():
            order = self._order_of(ref)
            runs.append((distance, ref, tuple(sorted(names, key=order.__getitem__))))
        runs.sort(key=lambda r: (r[0], _event_order(r[1])))
        return tuple(RunOperations(ref, names) for _, ref, names in runs)

    def _order_of(self, ref: EventRef) -> Mapping[str, int]:
        block = None if ref.block is None else ref.block.block_hash
        return self._events[(ref.dataset, block, ref.run.run_id)].order


def _first(span: tuple[int, int, EventRef]) -> int:
    return span[0]


def _event_order(ref: EventRef) -> tuple[str, int, float, str]:
    """Events of a dataset in chain order (by block, else by start time)."""
    sequence = -1 if ref.block is None else ref.block.sequence_number
    return (ref.dataset, sequence, ref.run.started_at.timestamp(), ref.run.run_id)


def _check_depth(depth: int | None) -> None:
    if depth is not None and depth < 1:
        raise LineageError(f"depth must be at least 1 (or None for all the way), got {depth}")


def _walk(
    start: FieldRef,
    adjacency: Mapping[FieldRef, list[FieldEdge]],
    far_end: Callable[[FieldEdge], FieldRef],
    depth: int | None,
    with_edges: bool,
) -> tuple[Reached, ...]:
    """Breadth-first from ``start``: each field once, at its shortest distance."""
    _check_depth(depth)
    seen = {start}
    frontier = [start]
    found: list[Reached] = []
    distance = 0
    while frontier and (depth is None or distance < depth):
        distance += 1
        level: dict[FieldRef, list[FieldEdge]] = {}
        for node in frontier:
            for edge in adjacency.get(node, ()):
                other = far_end(edge)
                if other not in seen:
                    level.setdefault(other, []).append(edge)
        seen.update(level)
        frontier = sorted(level)
        found.extend(
            Reached(node, distance, tuple(level[node]) if with_edges else ()) for node in frontier
        )
    return tuple(found)


def _closure(
    start: FieldRef,
    adjacency: Mapping[FieldRef, list[FieldEdge]],
    far_end: Callable[[FieldEdge], FieldRef],
) -> tuple[dict[FieldRef, int], list[tuple[int, FieldEdge]]]:
    """Every field reachable from ``start`` (with its distance) and every edge among them (with
    the distance of its far end along the first path met)."""
    nodes = {start: 0}
    edges: list[tuple[int, FieldEdge]] = []
    frontier = [start]
    while frontier:
        following: list[FieldRef] = []
        for node in frontier:
            distance = nodes[node] + 1
            for edge in adjacency.get(node, ()):
                edges.append((distance, edge))
                other = far_end(edge)
                if other not in nodes:
                    nodes[other] = distance
                    following.append(other)
        frontier = following
    return nodes, edges
