"""The rules on a block as such: its place in the chain, its hashes and time, the schema and the
data it adds, the dataset's kind and vocabulary.

These hold for any ODF block (hash-algorithm also covers a lineage input pinned at a block of
this very dataset); the rules on what odf_chain adds to ODF (its field lineage event, the
transaction pair) are in their own modules, so ODF's rules read on their own.
"""

from __future__ import annotations

import pyarrow as pa

from odf_chain.errors import FormatError, RuleViolation, SchemaEvolutionError
from odf_chain.events import (
    AddData,
    AddPushSource,
    DatasetKind,
    ExecuteTransform,
    MetadataBlock,
    Seed,
    SetDataSchema,
    SetPollingSource,
    SetVocab,
)
from odf_chain.format.data_schema import data_schema_to_arrow, first_difference
from odf_chain.format.multihash import Multihash
from odf_chain.schema.evolution import check_evolution
from odf_chain.state import DatasetState, Vocabulary, lineage_of


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
    lineage = lineage_of(event)
    if lineage is not None and state.dataset_id is not None:
        # A block of another dataset carries that dataset's algorithm; one of ours, ours.
        for put in lineage.inputs:
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
    if event.raw_arrow_schema is not None and event.schema is not None:
        _check_forms_agree(new, event)
    if state.schema is None:
        return
    violations = check_evolution(state.schema, new)
    if violations:
        raise SchemaEvolutionError(
            "schema-evolution",
            "; ".join(str(v) for v in violations)
            + f" (schema in force since block {state.schema_sequence_number})",
        )


def _check_forms_agree(raw: pa.Schema, event: SetDataSchema) -> None:
    """A block carrying both forms of its schema must describe one schema with them: readers
    take either (odf_chain the raw bytes, a tool past ODF's migration the structured form), so
    two different schemas would make the same chain mean two things. What the structured form
    cannot hold (metadata, the names of list items and map entries) is not compared."""
    try:
        structured = data_schema_to_arrow(event.schema)
    except FormatError as exc:
        raise RuleViolation("schema-valid", f"the structured schema: {exc}") from None
    difference = first_difference(raw, structured)
    if difference is not None:
        raise RuleViolation(
            "schema-forms",
            "expected raw_arrow_schema and the structured schema to describe one schema, "
            f"found them differing first at {difference} (raw vs structured)",
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


# Data is added to a root dataset by its sources (ODF: sources belong to root datasets); a
# derivative dataset's data comes from running its transform. Disabling a source that a
# derivative dataset cannot have changes nothing and is not refused (see odf_chain.rules).
_KIND_OF = {
    AddData: DatasetKind.ROOT,
    SetPollingSource: DatasetKind.ROOT,
    AddPushSource: DatasetKind.ROOT,
    ExecuteTransform: DatasetKind.DERIVATIVE,
}


def check_dataset_kind(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = block.event
    expected = _KIND_OF.get(type(event))
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
