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
hash-algorithm            every block and slice hash uses the chain's algorithm
system-time               system time never decreases
schema-before-data        a SetDataSchema precedes the first data slice
schema-valid              the SetDataSchema's Arrow schema decodes
schema-evolution          schema changes follow the evolution rules
offsets                   slices are contiguous: prev_offset = last offset, start = prev + 1,
                          end >= start
watermark                 once set, the watermark is carried and never decreases
checkpoint                prev_checkpoint = the last checkpoint
dataset-kind              AddData only in root datasets, ExecuteTransform only in derivative ones
vocab-before-schema       SetVocab only before the first SetDataSchema (the schema names the
                          system columns)
no-op                     no empty event and no event that changes nothing
========================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Callable

from odf_chain.errors import FormatError, RuleViolation, SchemaEvolutionError
from odf_chain.events import (
    AddData,
    DatasetKind,
    DisablePollingSource,
    DisablePushSource,
    ExecuteTransform,
    MetadataBlock,
    Seed,
    SetDataSchema,
    SetInfo,
    SetLicense,
    SetVocab,
)
from odf_chain.format.multihash import Multihash
from odf_chain.schema.evolution import check_evolution
from odf_chain.state import DatasetState, Vocabulary

Rule = Callable[[DatasetState, MetadataBlock, Multihash], None]


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
    if new.equals(state.schema, check_metadata=True):
        raise RuleViolation("no-op", "SetDataSchema is identical to the schema in force")
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
    changes_nothing = (
        event.new_data is None
        and event.new_checkpoint is None
        and event.new_source_state is None
        and (event.new_watermark is None or event.new_watermark == state.watermark)
        if isinstance(event, AddData)
        else event.new_data is None
        and event.new_checkpoint is None
        and (event.new_watermark is None or event.new_watermark == state.watermark)
    )
    if changes_nothing:
        raise RuleViolation("no-op", f"{kind} adds no data, checkpoint, watermark or source state")


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
    if isinstance(block.event, SetVocab) and state.schema is not None:
        raise RuleViolation(
            "vocab-before-schema",
            "expected SetVocab before the first SetDataSchema, found it after the schema "
            f"was set at block {state.schema_sequence_number} (the schema names the system "
            "columns; renaming them would orphan every slice)",
        )


def check_no_op(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = block.event
    if isinstance(event, SetVocab) and Vocabulary.from_event(event) == state.vocab:
        raise RuleViolation("no-op", "SetVocab leaves every column name as it is")
    if isinstance(event, SetInfo) and (
        event == state.info or (state.info is None and event == SetInfo())
    ):
        raise RuleViolation("no-op", "SetInfo is identical to the info in force")
    if isinstance(event, SetLicense) and (event == state.license or event == SetLicense()):
        raise RuleViolation("no-op", "SetLicense is empty or identical to the license in force")
    if isinstance(event, DisablePushSource) and event.source_name not in state.push_sources:
        raise RuleViolation(
            "no-op", f"DisablePushSource names {event.source_name!r}, which is not an active source"
        )
    if isinstance(event, DisablePollingSource) and not state.polling_source:
        raise RuleViolation("no-op", "DisablePollingSource, but no polling source is set")


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
    check_no_op,
)


def validate(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    """Raise the first rule ``block`` breaks, located at the block; return if it breaks none."""
    for rule in RULES:
        try:
            rule(state, block, block_hash)
        except RuleViolation as violation:
            raise violation.at(block.sequence_number, str(block_hash)) from None
