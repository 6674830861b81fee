"""One lineage event's operation DAG, resolved into direct relations between the fields of the
run's inputs and the fields the run wrote.

The meaning of an operation (also the rules' and the Spark capture's reading of the event):
every output derives from every input, except an IDENTITY operation with as many outputs as
inputs, which copies them pairwise in order (the i-th input becomes the i-th output), as a read
or a write of several fields does. An operation with no outputs is a drop. An output that is
not written into the dataset and that no operation reads (a field read and then used by
nothing) ends there: as CDAP keeps such a field with its read operation, it is resolved as
*unused*, so that the field stays in the graph.

Resolution walks the operations once in a topological order and keeps, for each operation's
output, which input fields reach it, by which combined transformation and through which
operations; no recursion, and paths are never enumerated one by one (a source reaching a field
along many paths is one entry per distinct combined transformation), so a wide event costs time
in proportion to its fields and edges.
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass

from odf_chain.errors import LineageError
from odf_chain.events import (
    AddFieldLineage,
    FieldOperation,
    InputField,
    LineageInput,
    Transformation,
    TransformationSubtype,
    TransformationType,
)
from odf_chain.lineage.transformations import NEUTRAL, combine

# A transformation as plain values (type, subtype, masking, opaque): hashed in C, which matters
# when every source of a wide event is looked up by it.
_Step = tuple[int, int, bool, bool]
# (input name, field path in that input) -> combined step -> positions of the operations on the
# way (positions in the topological order).
_Source = tuple[str, str]
_Reach = dict[_Source, dict[_Step, frozenset[int]]]

_NO_OPS: frozenset[int] = frozenset()


def _step(transformation: Transformation) -> _Step:
    t = transformation
    return (int(t.type), int(t.subtype), bool(t.masking), bool(t.opaque))


@functools.cache  # 72 possible steps
def _transformation(step: _Step) -> Transformation:
    kind, subtype, masking, opaque = step
    return Transformation(TransformationType(kind), TransformationSubtype(subtype), masking, opaque)


@functools.cache  # at most 72 x 72 pairs
def _then(before: _Step, step: _Step) -> _Step:
    return _step(combine(_transformation(before), _transformation(step)))


_NEUTRAL = _step(NEUTRAL)


@dataclass(frozen=True, slots=True)
class ResolvedEdge:
    """``source`` (a field of ``input``) reaches ``target`` (a field of the event's dataset)."""

    input: LineageInput
    source: str
    target: str
    transformation: Transformation
    operations: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ResolvedDrop:
    """``source`` (a field of ``input``) flows into the drop ``operation``. ``only_dropped``:
    the source reaches no written field in this event."""

    input: LineageInput
    source: str
    operation: str
    transformation: Transformation
    operations: tuple[str, ...]
    only_dropped: bool


@dataclass(frozen=True, slots=True)
class ResolvedUnused:
    """``source`` (a field of ``input``) reaches ``output`` of ``operation`` (a read, say),
    which no later operation reads and which is not written into the dataset. ``only_unused``:
    the source reaches no written field in this event."""

    input: LineageInput
    source: str
    operation: str
    output: str
    transformation: Transformation
    operations: tuple[str, ...]
    only_unused: bool


@dataclass(frozen=True, slots=True)
class Resolution:
    edges: tuple[ResolvedEdge, ...]
    drops: tuple[ResolvedDrop, ...]
    written: tuple[str, ...]  # every path the event writes, also those with no source field
    order: tuple[str, ...]  # the operation names in the topological order used
    unused: tuple[ResolvedUnused, ...] = ()


def copies_pairwise(operation: FieldOperation) -> bool:
    """True when ``operation`` copies its i-th input to its i-th output (see module doc)."""
    return (
        operation.transformation.subtype == TransformationSubtype.IDENTITY
        and len(operation.inputs) == len(operation.outputs) > 1
    )


def topological_order(event: AddFieldLineage) -> list[int]:
    """Indexes of the event's operations, each after the operations it reads from (event order
    among the ready ones). Refuses duplicate names, unknown origins and cycles."""
    inputs = {i.name for i in event.inputs}
    index: dict[str, int] = {}
    for i, op in enumerate(event.operations):
        if op.name in index:
            raise LineageError(f"two operations are named {op.name!r}")
        if op.name in inputs:
            raise LineageError(f"operation {op.name!r} has the name of an input")
        index[op.name] = i
    waiting = [0] * len(event.operations)
    readers: list[list[int]] = [[] for _ in event.operations]
    for i, op in enumerate(event.operations):
        for origin in {f.origin for f in op.inputs}:
            if origin in index:
                waiting[i] += 1
                readers[index[origin]].append(i)
            elif origin not in inputs:
                raise LineageError(
                    f"operation {op.name!r} reads from {origin!r}, "
                    "which is neither an input nor an operation of the event"
                )
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for reader in readers[i]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(order) < len(event.operations):
        stuck = sorted(event.operations[i].name for i, n in enumerate(waiting) if n)
        raise LineageError(f"operations read from each other in a cycle: {', '.join(stuck)}")
    return order


def _merge_into(target: _Reach, reach: _Reach) -> None:
    """Add ``reach`` to ``target`` (whose inner dicts are its own: copies are taken)."""
    for source, paths in reach.items():
        known = target.get(source)
        if known is None:
            target[source] = dict(paths)
            continue
        for step, ops in paths.items():
            before = known.get(step)
            known[step] = ops if before is None else before | ops


def _extend(reach: _Reach, step: _Step, position: int) -> _Reach:
    """``reach`` carried one operation further."""
    here = frozenset((position,))
    grown: dict[frozenset[int], frozenset[int]] = {}  # sources sharing a path share its set

    def grow(ops: frozenset[int]) -> frozenset[int]:
        found = grown.get(ops)
        if found is None:
            found = grown[ops] = ops | here
        return found

    if step == _NEUTRAL:
        return {
            source: {before: grow(ops) for before, ops in paths.items()}
            for source, paths in reach.items()
        }
    out: _Reach = {}
    for source, paths in reach.items():
        extended: dict[_Step, frozenset[int]] = {}
        for before, ops in paths.items():
            after = _then(before, step)
            known = extended.get(after)
            extended[after] = grow(ops) if known is None else known | grow(ops)
        out[source] = extended
    return out


def resolve(event: AddFieldLineage) -> Resolution:
    """The direct relations of ``event`` (see module doc)."""
    order = topological_order(event)
    operations = event.operations
    inputs = {i.name: i for i in event.inputs}
    position = {i: p for p, i in enumerate(order)}
    names = [operations[i].name for i in order]
    outputs: dict[str, dict[str, _Reach]] = {}  # operation name -> output -> reach

    def reach_of(field: InputField, reader: str) -> _Reach:
        if field.origin in inputs:
            return {(field.origin, field.field): {_NEUTRAL: _NO_OPS}}
        reach = outputs[field.origin].get(field.field)
        if reach is None:
            raise LineageError(
                f"operation {reader!r} reads {field.field!r} from operation {field.origin!r}, "
                "which has no such output"
            )
        return reach

    written: dict[str, _Reach] = {}  # written path -> what reaches it
    ended: list[tuple[int, _Reach]] = []  # drop operation -> what reaches it
    read: set[tuple[str, str]] = set()  # (operation, output) some operation reads
    for i in order:
        op = operations[i]
        read.update((f.origin, f.field) for f in op.inputs if f.origin not in inputs)
        step, here = _step(op.transformation), position[i]
        produced: dict[str, _Reach] = {}
        if copies_pairwise(op):
            for field, out in zip(op.inputs, op.outputs, strict=True):
                copied = _extend(reach_of(field, op.name), step, here)
                if out in produced:  # two inputs copied into one output (a union)
                    _merge_into(copied, produced[out])
                produced[out] = copied
        else:
            merged: _Reach = {}
            for field in op.inputs:
                _merge_into(merged, reach_of(field, op.name))
            shared = _extend(merged, step, here)
            if not op.outputs:
                ended.append((i, shared))
                continue
            produced = dict.fromkeys(op.outputs, shared)
        outputs[op.name] = produced
        if op.writes:
            for target, reach in produced.items():
                before = written.get(target)
                if before is not None:  # written by several operations: merge into a copy
                    combined: _Reach = {}
                    _merge_into(combined, before)
                    _merge_into(combined, reach)
                    reach = combined
                written[target] = reach

    named_before: dict[frozenset[int], tuple[str, ...]] = {}

    def named(ops: frozenset[int]) -> tuple[str, ...]:
        found = named_before.get(ops)
        if found is None:  # many edges share their operations: name each set once
            found = named_before[ops] = tuple(names[p] for p in sorted(ops))
        return found

    reaching: set[_Source] = set()
    for reach in {id(r): r for r in written.values()}.values():  # shared reaches once
        reaching.update(reach)
    unused = [
        (i, out, reach)
        for i in order
        if not operations[i].writes
        for out, reach in outputs.get(operations[i].name, {}).items()
        if (operations[i].name, out) not in read
    ]
    return Resolution(
        edges=tuple(
            ResolvedEdge(inputs[source[0]], source[1], target, _transformation(step), named(ops))
            for target, reach in written.items()
            for source, paths in reach.items()
            for step, ops in paths.items()
        ),
        drops=tuple(
            ResolvedDrop(
                inputs[source[0]],
                source[1],
                operations[i].name,
                _transformation(step),
                named(ops),
                only_dropped=source not in reaching,
            )
            for i, reach in ended
            for source, paths in reach.items()
            for step, ops in paths.items()
        ),
        written=tuple(written),
        order=tuple(names),
        unused=tuple(
            ResolvedUnused(
                inputs[source[0]],
                source[1],
                operations[i].name,
                out,
                _transformation(step),
                named(ops),
                only_unused=source not in reaching,
            )
            for i, out, reach in unused
            for source, paths in reach.items()
            for step, ops in paths.items()
        ),
    )
