"""The chain's rules: pure checks of one block against the state before it.

Each rule is a small function that raises :class:`RuleViolation` (or its subclass
:class:`SchemaEvolutionError`) naming the rule and saying what was expected and what was found.
They run on every append and again, unchanged, on replay and verify. No I/O here.

Rule names (stable; reports and tests refer to them):

========================  =====================================================================
seed-first                the first block is a Seed at sequence 0 with no predecessor
seed-unique               no Seed after the first block
sequence-number           sequence number = previous + 1
prev-block-hash           prev_block_hash = hash of the previous block
hash-algorithm            every block and slice hash uses the chain's algorithm (so does a
                          lineage input pinned at a block of this very dataset)
system-time               system time never decreases
schema-before-data        a SetDataSchema precedes the first data slice
schema-valid              the SetDataSchema's Arrow schema decodes, every string in it (field
                          names, metadata keys and values, timezones) is UTF-8, and no field
                          sits deeper than 64 levels (the decoder refuses both, naming the
                          field, so nothing else ever sees such a schema)
schema-evolution          schema changes follow the evolution rules
offsets                   slices are contiguous: prev_offset = last offset, start = prev + 1,
                          end >= start
watermark                 once set, the watermark is carried and never decreases
checkpoint                prev_checkpoint = the last checkpoint
dataset-kind              AddData only in root datasets, ExecuteTransform only in derivative ones
vocab-before-schema       a SetVocab that renames a system column only before the first
                          SetDataSchema (the schema and every slice name the columns as they
                          were); one that restates the vocabulary in force is accepted anywhere
lineage-structure         a lineage event is well formed: input and operation names unique and
                          distinct from each other; each input a pinned dataset (dataset_id and
                          block_hash) or an external source (uri); every input field read from
                          an input or from an output of another operation; no cycles
lineage-writes            a lineage event writes at least one field: some operation writes into
                          the dataset (``writes``) and names an output (CDAP refuses an
                          operation set without a write)
lineage-outputs           every field a lineage operation writes is a v2 path of the schema in
                          force
lineage-data              the offsets a lineage event's run wrote start at the next offset and
                          are covered by the data slices right after it, before any other event
transaction-version       a transaction pair (extra attribute ``odf-chain.dev/transaction`` of
                          an AddData) has a non-empty string app id and an integer version in
                          0..2**63-1, above the last version recorded for that app id
no-op                     no AddFieldLineage without field operations (odf_chain's own event)
========================  =====================================================================

What is not a rule: an ODF event that changes nothing (a SetVocab restating ODF's default names
or the vocabulary in force, a SetDataSchema identical to the schema in force, an AddData with no
slice, checkpoint, new watermark or source state, a SetInfo or SetLicense repeating what is in
force, a DisablePushSource or DisablePollingSource of a source that is not active). ODF forbids
none of them and other ODF writers produce them, so a chain holding one opens, replays and
verifies; refusing them would make such a chain unreadable here for no benefit. They are
accepted silently: the fold has no channel for warnings. odf_chain's own writers do not
produce them (a write appends a SetDataSchema or SetVocab only when it changes something, and
nothing at all for an empty input); :meth:`Dataset.append` of such an event appends a harmless
block.

Checks that need other datasets (the input fields of a lineage event against the schemas of the
datasets it read) cannot be pure rules over (state, block): :func:`lineage_input_problems` does
that part, given a way to find those schemas. Append refuses, and verify reports, its findings
under the rule name ``lineage-inputs``, and a pin to a block the input's chain does not have
under ``lineage-input-dangling``; verify warns (``lineage-input-unreachable``) about inputs it
cannot open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from odf_chain.errors import FormatError, OdfChainError, RuleViolation, SchemaEvolutionError
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    DatasetKind,
    ExecuteTransform,
    FieldOperation,
    LineageInput,
    MetadataBlock,
    Seed,
    SetDataSchema,
    SetVocab,
)
from odf_chain.format.columns import BlockColumns
from odf_chain.format.multihash import Multihash
from odf_chain.schema.evolution import check_evolution
from odf_chain.state import (
    TRANSACTION_KEY,
    DatasetState,
    Vocabulary,
    schema_path_set,
    transaction_of,
)

Rule = Callable[[DatasetState, MetadataBlock, Multihash], None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _hash_text(value: Multihash | None) -> str:
    return "none" if value is None else str(value)


def check_seed(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    if state.head is None:
        if not isinstance(block.event, Seed):
            raise RuleViolation(
                "seed-first", f"expected a Seed as the first block, found {block.event_name}"
            )
        if block.sequence_number != 0:
            raise RuleViolation(
                "seed-first",
                f"expected the Seed at sequence number 0, found {block.sequence_number}",
            )
        if block.prev_block_hash is not None:
            raise RuleViolation(
                "seed-first",
                f"expected no prev_block_hash on the Seed, found {block.prev_block_hash}",
            )
    elif isinstance(block.event, Seed):
        raise RuleViolation(
            "seed-unique",
            f"expected no further Seed (dataset {state.dataset_id} was seeded at block 0), "
            "found a second Seed",
        )


def check_sequence(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    if state.head is None:
        return  # the Seed's own rule covers sequence 0
    expected = state.sequence_number + 1
    if block.sequence_number != expected:
        raise RuleViolation(
            "sequence-number", f"expected {expected}, found {block.sequence_number}"
        )


def check_link(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    if state.head is not None and block.prev_block_hash != state.head:
        raise RuleViolation(
            "prev-block-hash",
            f"expected {state.head}, found {_hash_text(block.prev_block_hash)}",
        )


def check_hash_algorithm(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    algorithm = state.hash_algorithm or block_hash.algorithm
    if block_hash.algorithm != algorithm:
        raise RuleViolation(
            "hash-algorithm",
            f"expected the chain's {algorithm} for the block hash, found {block_hash.algorithm}",
        )
    event = block.event
    if isinstance(event, AddData | ExecuteTransform) and event.new_data is not None:
        for label, value in (
            ("logical_hash", event.new_data.logical_hash),
            ("physical_hash", event.new_data.physical_hash),
        ):
            if value is not None and value.algorithm != algorithm:
                raise RuleViolation(
                    "hash-algorithm",
                    f"expected {algorithm} for new_data.{label}, found {value.algorithm}",
                )
    if isinstance(event, AddFieldLineage) and state.dataset_id is not None:
        # A block of another dataset carries that dataset's algorithm; one of ours, ours.
        for put in event.inputs:
            pinned = put.block_hash
            own = put.dataset_id == state.dataset_id and pinned is not None
            if own and pinned.algorithm != algorithm:
                raise RuleViolation(
                    "hash-algorithm",
                    f"expected {algorithm} for the block_hash of input {put.name!r} (a "
                    f"block of this dataset), found {pinned.algorithm}",
                )


def check_system_time(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    if state.system_time is not None and block.system_time < state.system_time:
        raise RuleViolation(
            "system-time",
            f"expected a system time at or after {state.system_time.isoformat()}, "
            f"found {block.system_time.isoformat()}",
        )


def check_schema(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = block.event
    if not isinstance(event, SetDataSchema):
        return
    try:
        new = event.arrow_schema
    except FormatError as exc:
        raise RuleViolation("schema-valid", str(exc)) from None
    if state.schema is None:
        return
    violations = check_evolution(state.schema, new)
    if violations:
        raise SchemaEvolutionError(
            "schema-evolution",
            "; ".join(str(v) for v in violations)
            + f" (schema in force since block {state.schema_sequence_number})",
        )


def check_data(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = block.event
    if not isinstance(event, AddData | ExecuteTransform):
        return
    kind = type(event).__name__
    if event.new_data is not None and state.schema is None:
        raise RuleViolation(
            "schema-before-data",
            f"expected a SetDataSchema before the first data slice, found {kind} with data "
            "and no schema in force",
        )
    if event.prev_offset != state.last_offset:
        raise RuleViolation(
            "offsets",
            f"expected prev_offset {state.last_offset}, found {event.prev_offset}",
        )
    if event.new_data is not None:
        interval = event.new_data.offset_interval
        if interval.start != state.next_offset:
            raise RuleViolation(
                "offsets",
                f"expected the slice to start at offset {state.next_offset}, "
                f"found {interval.start}",
            )
        if interval.end < interval.start:
            raise RuleViolation(
                "offsets",
                f"expected end >= start, found [{interval.start}, {interval.end}]",
            )
    if event.prev_checkpoint != state.last_checkpoint:
        raise RuleViolation(
            "checkpoint",
            f"expected prev_checkpoint {_hash_text(state.last_checkpoint)}, "
            f"found {_hash_text(event.prev_checkpoint)}",
        )
    if state.watermark is not None:
        if event.new_watermark is None:
            raise RuleViolation(
                "watermark",
                f"expected the watermark {state.watermark.isoformat()} to be carried, found none",
            )
        if event.new_watermark < state.watermark:
            raise RuleViolation(
                "watermark",
                f"expected a watermark at or after {state.watermark.isoformat()}, "
                f"found {event.new_watermark.isoformat()}",
            )


def check_dataset_kind(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = block.event
    expected = {AddData: DatasetKind.ROOT, ExecuteTransform: DatasetKind.DERIVATIVE}.get(
        type(event)
    )
    if expected is not None and state.dataset_kind is not None and state.dataset_kind != expected:
        raise RuleViolation(
            "dataset-kind",
            f"expected {type(event).__name__} only in a {expected.name.lower()} dataset, "
            f"found it in a {state.dataset_kind.name.lower()} one",
        )


def check_vocab(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = block.event
    if not isinstance(event, SetVocab) or state.schema is None:
        return
    new = Vocabulary.from_event(event)
    if new == state.vocab:
        return  # restates the names in force: renames nothing
    renamed = [
        f"{label} {getattr(state.vocab, attr)!r} to {getattr(new, attr)!r}"
        for label, attr in _VOCAB_LABELS
        if getattr(state.vocab, attr) != getattr(new, attr)
    ]
    raise RuleViolation(
        "vocab-before-schema",
        f"expected a SetVocab that renames a system column only before the first "
        f"SetDataSchema, found one renaming the {', '.join(renamed)} after the schema was set "
        f"at block {state.schema_sequence_number} (the schema and every slice name the "
        "columns as they were)",
    )


_VOCAB_LABELS = (
    ("offset column", "offset_column"),
    ("operation type column", "operation_type_column"),
    ("system time column", "system_time_column"),
    ("event time column", "event_time_column"),
)


# -- field lineage -------------------------------------------------------------------------------

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


def check_lineage_structure(
    state: DatasetState, block: MetadataBlock, block_hash: Multihash
) -> None:
    event = block.event
    if not isinstance(event, AddFieldLineage):
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
    event = block.event
    if not isinstance(event, AddFieldLineage) or not event.operations:
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
    event = block.event
    if not isinstance(event, AddFieldLineage):
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
            return
        found = block.event_name + (
            " without data" if isinstance(event, AddData | ExecuteTransform) else ""
        )
        raise RuleViolation(
            "lineage-data",
            f"expected data slices covering {promised}, before any other event; found {found}",
        )
    if isinstance(event, AddFieldLineage) and event.run.offsets is not None:
        offsets = event.run.offsets
        if offsets.start != state.next_offset or offsets.end < offsets.start:
            raise RuleViolation(
                "lineage-data",
                f"expected the run's offsets to start at the next offset {state.next_offset} "
                f"and end at or after it, found {offsets.start}..{offsets.end}",
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


# -- transactions ---------------------------------------------------------------------------------

MAX_TRANSACTION_VERSION = 2**63 - 1  # a signed 64-bit integer, as Delta's txnVersion


def transaction_problem(app_id: Any, version: Any) -> str | None:
    """What is wrong with a transaction pair, or None: the app id must be a non-empty string
    and the version an integer (not a bool) in 0..2**63-1."""
    if not isinstance(app_id, str) or not app_id:
        return f"the app id must be a non-empty string, found {app_id!r}"
    if isinstance(version, bool) or not isinstance(version, int):
        return f"the version must be an integer, found {version!r}"
    if not 0 <= version <= MAX_TRANSACTION_VERSION:
        return f"the version must be in 0..{MAX_TRANSACTION_VERSION}, found {version}"
    return None


def transaction_argument(transaction: Any) -> tuple[str, int]:
    """A writer's ``transaction=`` argument as ``(app_id, version)``, checked before anything
    runs; raises :class:`RuleViolation` (``transaction-version``) saying what is wrong."""
    if not isinstance(transaction, tuple | list) or len(transaction) != 2:
        raise RuleViolation(
            "transaction-version",
            f"transaction= takes a pair (app_id, version), found {transaction!r}",
        )
    app_id, version = transaction
    problem = transaction_problem(app_id, version)
    if problem is not None:
        raise RuleViolation("transaction-version", f"transaction={transaction!r}: {problem}")
    return app_id, version


def transaction_recorded(state: DatasetState, app_id: str, version: int) -> bool:
    """Does the chain already record ``version`` or a later one for ``app_id``? A writer given
    that pair appends nothing (a retried job whose first attempt did commit)."""
    last = state.transactions.get(app_id)
    return last is not None and version <= last


def check_transaction(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    value = transaction_of(block.event)
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise RuleViolation(
            "transaction-version",
            f"expected {TRANSACTION_KEY} to be an object {{app_id, version}}, found {value!r}",
        )
    app_id, version = value.get("app_id"), value.get("version")
    problem = transaction_problem(app_id, version)
    if problem is not None:
        raise RuleViolation("transaction-version", f"{TRANSACTION_KEY}: {problem}")
    if transaction_recorded(state, app_id, version):
        raise RuleViolation(
            "transaction-version",
            f"expected a version above {state.transactions[app_id]} for app id {app_id!r} "
            f"(versions must increase per app id), found {version}",
        )


def check_no_op(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    """Only odf_chain's own lineage event: ODF's events that change nothing are accepted (see
    the module docstring)."""
    event = block.event
    if isinstance(event, AddFieldLineage) and not event.operations:
        raise RuleViolation(
            "no-op",
            f"AddFieldLineage for run {event.run.run_id!r} of job {event.run.job_name!r} has "
            "no field operations",
        )


RULES: tuple[Rule, ...] = (
    check_seed,
    check_sequence,
    check_link,
    check_hash_algorithm,
    check_system_time,
    check_schema,
    check_data,
    check_dataset_kind,
    check_vocab,
    check_lineage_structure,
    check_lineage_writes,
    check_lineage_outputs,
    check_lineage_data,
    check_transaction,
    check_no_op,
)


# -- the same rules over a run of plain AddData blocks (verify's bulk step) ----------------------

# Offsets, sizes and sequence numbers below this compare and add up exactly in int64/uint64.
_SAFE = np.uint64(1 << 53)


def plain_run_passes(state: DatasetState, run: BlockColumns, hashes: np.ndarray) -> int:
    """How many leading blocks of ``run`` certainly pass every rule above, on ``state``.

    ``run``: plain AddData blocks (:mod:`odf_chain.format.columns`) in chain order, ``hashes``
    their own multihashes (one row of bytes each). Verify folds a long chain with this instead
    of one :func:`validate` per block. It is a sufficient condition and never looser: at the
    first block it cannot vouch for (a broken rule, a transaction, a value too large to add up
    exactly, a state it does not cover) it stops, and that block goes through :func:`validate`,
    which words the error. What it checks, per block against the one before (the first against
    ``state``): sequence-number, prev-block-hash, hash-algorithm, system-time, offsets,
    watermark; per run: a Seed and a schema before, a root dataset, no checkpoint and no
    lineage pending (these hold or fail for the whole run, since plain blocks change none).
    """
    m = len(run)
    if (
        m == 0
        or state.head is None
        or state.schema is None
        or state.dataset_kind not in (None, DatasetKind.ROOT)
        or state.last_checkpoint is not None
        or state.lineage_pending is not None
        or state.sequence_number + 1 >= _SAFE  # a chain whose numbers already broke the rule
    ):
        return 0
    code = state.head.code
    seq, start, end = run.sequence_number, run.start, run.end
    fine = (seq < _SAFE) & (start < _SAFE) & (end < _SAFE) & (run.size < _SAFE)
    fine &= ~run.has_prev_offset | (run.prev_offset < _SAFE)
    # sequence-number and prev-block-hash
    before_seq = np.concatenate(([np.uint64(state.sequence_number)], seq[:-1]))
    fine &= seq == before_seq + np.uint64(1)
    before_hash = np.concatenate((np.frombuffer(bytes(state.head), np.uint8)[None, :], hashes[:-1]))
    fine &= run.has_prev & (run.prev_hash == before_hash).all(axis=1)
    # hash-algorithm: the block's own hash and both of its slice's
    fine &= (hashes[:, 0] == code) & (run.logical_hash[:, 0] == code)
    fine &= run.physical_hash[:, 0] == code
    # system-time
    times = run.system_time_us
    first_time = (state.system_time - _EPOCH) // timedelta(microseconds=1)
    fine &= times >= np.concatenate(([first_time], times[:-1]))
    # offsets: prev_offset is the last offset, the slice starts right after it
    if state.last_offset is None:
        last = np.concatenate(([-1], end[:-1].astype(np.int64)))
        fine[0] &= not run.has_prev_offset[0]
        fine[1:] &= run.has_prev_offset[1:]
    else:
        last = np.concatenate(([state.last_offset], end[:-1].astype(np.int64)))
        fine &= run.has_prev_offset
    fine &= (run.prev_offset.astype(np.int64) == last) | ~run.has_prev_offset
    fine &= (start.astype(np.int64) == last + 1) & (end >= start)
    # watermark: once set (before the run or in it), carried and never decreasing
    has = run.has_watermark
    marks = np.where(has, run.watermark_us, np.iinfo(np.int64).min)
    if state.watermark is not None:
        carried = (state.watermark - _EPOCH) // timedelta(microseconds=1)
        set_before = np.ones(m, bool)
    else:
        carried = np.iinfo(np.int64).min
        set_before = np.concatenate(([False], np.logical_or.accumulate(has)[:-1]))
    highest = np.maximum.accumulate(np.concatenate(([carried], marks[:-1])))
    fine &= ~set_before | (has & (marks >= highest))
    # transaction-version: a block naming a transaction is left to the rule
    fine &= ~run.has_transaction
    return m if fine.all() else int(np.argmin(fine))


def validate(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    """Raise the first rule ``block`` breaks, located at the block; return if it breaks none."""
    for rule in RULES:
        try:
            rule(state, block, block_hash)
        except RuleViolation as violation:
            raise violation.at(block.sequence_number, str(block_hash)) from None
