"""The rules on odf_chain's field lineage (an AddFieldLineage, or its JSON in the extra attributes
of the AddData or ExecuteTransform holding the run's first slice): well formed, writing fields of
the schema in force, promising offsets that slice and the next ones cover, never empty.

:func:`lineage_input_problems` is here too, though it is not a rule over (state, block): it
checks the fields read from other datasets, given a way to find their schemas, so append and
verify word its findings the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa

from odf_chain.errors import FormatError, OdfChainError, RuleViolation
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    ExecuteTransform,
    FieldOperation,
    LineageInput,
    MetadataBlock,
)
from odf_chain.format.multihash import Multihash
from odf_chain.state import DatasetState, carries_lineage, embedded_lineage, schema_path_set

_SHOWN = 10  # problems spelled out in one message; the rest are counted


def _joined(problems: list[str]) -> str:
    shown = "; ".join(problems[:_SHOWN])
    more = len(problems) - _SHOWN
    return shown + (f"; and {more} more" if more > 0 else "")


def _shorten(names: Iterable[str], limit: int = 5) -> str:
    names = list(names)
    listed = ", ".join(repr(n) for n in names[:limit])
    return listed + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _input_problems(inputs: tuple[LineageInput, ...]) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for i, put in enumerate(inputs):
        label = f"input {put.name!r}" if put.name else f"input #{i}"
        if not put.name:
            problems.append(f"{label} has an empty name")
        elif put.name in seen:
            problems.append(f"{label} is named twice (input names must be unique)")
        seen.add(put.name)
        if put.dataset_id is not None:
            if put.block_hash is None:
                problems.append(
                    f"{label} names dataset {put.dataset_id} but no block_hash (the block it "
                    "was read at)"
                )
        elif put.uri is None:
            problems.append(
                f"{label} is neither a dataset (dataset_id and block_hash) nor an external "
                "source (uri)"
            )
        elif put.block_hash is not None:
            problems.append(f"{label} has a block_hash but no dataset_id it belongs to")
    return problems


def _operation_problems(operations: tuple[FieldOperation, ...], input_names: set[str]) -> list[str]:
    problems: list[str] = []
    by_name: dict[str, FieldOperation] = {}
    for i, op in enumerate(operations):
        if not op.name:
            problems.append(f"operation #{i} has an empty name")
        elif op.name in by_name:
            problems.append(f"operation {op.name!r} is named twice (names must be unique)")
        elif op.name in input_names:
            problems.append(
                f"operation {op.name!r} has the name of an input (a field's origin would be "
                "ambiguous)"
            )
        by_name.setdefault(op.name, op)
    outputs_of: dict[str, frozenset[str]] = {}
    for op in operations:
        for read in op.inputs:
            if read.origin in input_names:
                continue
            source = by_name.get(read.origin)
            if source is None:
                problems.append(
                    f"operation {op.name!r} reads field {read.field!r} from {read.origin!r}, "
                    "which is neither an input nor an operation of this event"
                )
                continue
            outputs = outputs_of.setdefault(source.name, frozenset(source.outputs))
            if read.field not in outputs:
                problems.append(
                    f"operation {op.name!r} reads field {read.field!r} from operation "
                    f"{source.name!r}, which does not output it (its outputs: "
                    f"{_shorten(source.outputs) or 'none'})"
                )
    return problems


def _operation_cycle(
    operations: tuple[FieldOperation, ...], input_names: set[str]
) -> list[str] | None:
    """The first cycle in 'operation -> operations it reads from', as a closed list of names
    (``["a", "b", "a"]``), or None. Iterative: an event may hold thousands of operations.
    An origin that names an input is read from that input (a clash is reported elsewhere)."""
    names = {op.name for op in operations} - input_names
    reads: dict[str, list[str]] = {}
    for op in operations:
        targets = reads.setdefault(op.name, [])
        for read in op.inputs:
            if read.origin in names and read.origin not in targets:
                targets.append(read.origin)
    done: set[str] = set()
    for start in reads:
        if start in done:
            continue
        path = [start]
        on_path = {start}
        pending = [iter(reads[start])]
        while pending:
            target = next(pending[-1], None)
            if target is None:  # every operation this one reads from is explored
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                pending.pop()
                continue
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target in done:
                continue
            path.append(target)
            on_path.add(target)
            pending.append(iter(reads[target]))
    return None


def _lineage(block: MetadataBlock) -> AddFieldLineage | None:
    """The lineage a block is or carries (an AddData's or ExecuteTransform's, in its extra
    attributes: see :data:`odf_chain.state.LINEAGE_KEY`); carried lineage that does not decode
    breaks rule ``lineage-structure``."""
    event = block.event
    if isinstance(event, AddFieldLineage):
        return event
    if not carries_lineage(event):
        return None
    try:
        return embedded_lineage(event)  # type: ignore[arg-type]
    except FormatError as exc:
        raise RuleViolation("lineage-structure", str(exc)) from None


def check_lineage_structure(
    state: DatasetState, block: MetadataBlock, block_hash: Multihash
) -> None:
    event = _lineage(block)
    if event is None:
        return
    problems = _input_problems(event.inputs)
    input_names = {i.name for i in event.inputs}
    problems += _operation_problems(event.operations, input_names)
    cycle = _operation_cycle(event.operations, input_names)
    if cycle is not None:
        problems.append(
            "operations read from each other in a cycle: " + " -> ".join(map(repr, cycle))
        )
    if problems:
        raise RuleViolation("lineage-structure", _joined(problems))


def check_lineage_writes(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    """CDAP's FieldLineageInfo refuses operations without a WRITE: lineage that reaches no field
    of the dataset says nothing about it. Here a write is an operation with ``writes`` set and
    at least one output."""
    event = _lineage(block)
    if event is None or not event.operations:
        return  # an event without operations is a no-op (rule no-op)
    if any(op.writes and op.outputs for op in event.operations):
        return
    shown = [
        f"{op.name!r} ({'no outputs' if not op.outputs else 'intermediate outputs only'})"
        for op in event.operations[:_SHOWN]
    ]
    more = len(event.operations) - len(shown)
    listed = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
    raise RuleViolation(
        "lineage-writes",
        f"AddFieldLineage for run {event.run.run_id!r} of job {event.run.job_name!r} writes no "
        f"field of the dataset: expected an operation that writes an output into it, found "
        f"{listed}",
    )


def check_lineage_outputs(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = _lineage(block)
    if event is None:
        return
    written = [(op.name, path) for op in event.operations if op.writes for path in op.outputs]
    if not written:
        return
    if state.schema is None:
        name, path = written[0]
        raise RuleViolation(
            "lineage-outputs",
            f"operation {name!r} writes {path!r}, but no schema is in force (expected a "
            "SetDataSchema before the lineage event)",
        )
    try:
        paths = state.field_path_set
    except (OdfChainError, ValueError) as exc:  # a malformed Avro writer schema in the metadata
        raise RuleViolation(
            "lineage-outputs",
            f"the field paths of the schema in force (block {state.schema_sequence_number}) "
            f"cannot be computed: {exc}",
        ) from None
    problems = [
        f"operation {name!r} writes {path!r}, which is not a field path of the schema in force"
        for name, path in written
        if path not in paths
    ]
    if problems:
        raise RuleViolation(
            "lineage-outputs",
            _joined(problems) + f" (schema set at block {state.schema_sequence_number})",
        )


def check_lineage_data(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = block.event
    pending = state.lineage_pending
    if pending is not None:
        gap = pending.uncovered
        promised = (
            f"offsets {gap.start}..{gap.end}, which the run recorded at block "
            f"{pending.sequence_number} wrote"
        )
        if isinstance(event, AddData | ExecuteTransform) and event.new_data is not None:
            interval = event.new_data.offset_interval
            if interval.start != gap.start or interval.end > gap.end:
                raise RuleViolation(
                    "lineage-data",
                    f"expected a slice starting at {gap.start} within {promised}; found "
                    f"offsets {interval.start}..{interval.end}",
                )
            if carries_lineage(event):
                raise RuleViolation(
                    "lineage-data",
                    f"expected the slice covering {promised} to carry no lineage of its own "
                    "(its records were written by that run)",
                )
            return
        found = block.event_name + (
            " without data" if isinstance(event, AddData | ExecuteTransform) else ""
        )
        raise RuleViolation(
            "lineage-data",
            f"expected data slices covering {promised}, before any other event; found {found}",
        )
    if isinstance(event, ExecuteTransform) and carries_lineage(event):
        carried = _lineage(block)
        assert carried is not None
        wrote = carried.run.offsets
        held = None if event.new_data is None else event.new_data.offset_interval
        if wrote != held:
            shown = "none" if held is None else f"{held.start}..{held.end}"
            raise RuleViolation(
                "lineage-data",
                f"expected the lineage's run to have written this block's slice (offsets "
                f"{shown}), found {'none' if wrote is None else f'{wrote.start}..{wrote.end}'}",
            )
    if isinstance(event, AddData) and carries_lineage(event):
        _check_first_slice(_lineage(block), event)
    if isinstance(event, AddFieldLineage) and event.run.offsets is not None:
        offsets = event.run.offsets
        if offsets.start != state.next_offset or offsets.end < offsets.start:
            raise RuleViolation(
                "lineage-data",
                f"expected the run's offsets to start at the next offset {state.next_offset} "
                f"and end at or after it, found {offsets.start}..{offsets.end}",
            )


def _check_first_slice(carried: AddFieldLineage | None, event: AddData) -> None:
    """An AddData carries the lineage of the run that wrote its slice: the run's offsets start
    with the slice and end with it or in the slices of the blocks right after it."""
    assert carried is not None
    wrote, held = carried.run.offsets, event.new_data
    written = "none" if wrote is None else f"{wrote.start}..{wrote.end}"
    if held is None:
        raise RuleViolation(
            "lineage-data",
            f"expected the block carrying the lineage of run {carried.run.run_id!r} to hold "
            f"the run's first slice, found no slice (the run wrote offsets {written})",
        )
    interval = held.offset_interval
    if wrote is None or wrote.start != interval.start or wrote.end < interval.end:
        raise RuleViolation(
            "lineage-data",
            f"expected the lineage's run to have written offsets starting with this block's "
            f"slice ({interval.start}..{interval.end}), found {written}",
        )


def lineage_input_problems(
    event: AddFieldLineage, schema_of: Callable[[LineageInput], pa.Schema | None]
) -> list[str]:
    """Input fields of ``event`` that are not v2 paths of the schema of the dataset they were
    read from. ``schema_of`` gives that dataset's schema at the pinned block, or None when it
    cannot be found (unreachable is unknown, not wrong: those inputs are skipped). External
    inputs are not looked up. Pure apart from what ``schema_of`` does; append and verify call it
    with their own way of opening other datasets.
    """
    paths_of: dict[str, frozenset[str] | None] = {}
    for put in event.inputs:
        if put.is_dataset and put.name not in paths_of:
            schema = schema_of(put)
            paths_of[put.name] = None if schema is None else schema_path_set(schema)
    where = {put.name: put for put in event.inputs}
    problems: list[str] = []
    for op in event.operations:
        for read in op.inputs:
            paths = paths_of.get(read.origin)
            if paths is not None and read.field not in paths:
                put = where[read.origin]
                problems.append(
                    f"operation {op.name!r} reads field {read.field!r} from input "
                    f"{read.origin!r} (dataset {put.dataset_id} at block {put.block_hash}), "
                    "which has no such field path"
                )
    return problems


def check_no_op(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    """Only odf_chain's own lineage event: ODF's events that change nothing are accepted (see
    :mod:`odf_chain.rules`); lineage an ExecuteTransform carries counts as that event."""
    event = _lineage(block)
    if event is not None and not event.operations:
        raise RuleViolation(
            "no-op",
            f"AddFieldLineage for run {event.run.run_id!r} of job {event.run.job_name!r} has "
            "no field operations",
        )
