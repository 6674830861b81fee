"""The chain's rules, one by one, on hand-made blocks folded with ``chain.advance``.

No I/O: states are built by folding blocks constructed here; block hashes are made-up multihashes
(rules never hash bytes). For every rule named in ``odf_chain.rules``' docstring, a violating
block must raise :class:`RuleViolation` whose ``.rule`` is that name, located at the block
(sequence number and hash), with a message that says what was expected and what was found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from odf_chain import rules
from odf_chain.chain import advance
from odf_chain.errors import RuleViolation, SchemaEvolutionError
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    AddPushSource,
    Checkpoint,
    DatasetKind,
    DataSlice,
    DisablePollingSource,
    DisablePushSource,
    ExecuteTransform,
    ExecuteTransformInput,
    FieldOperation,
    InputField,
    LineageInput,
    LineageRun,
    MetadataBlock,
    MetadataEvent,
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
from odf_chain.format.multihash import BLAKE3, SHA3_256, Multihash
from odf_chain.schema.convert import AVRO_SCHEMA_KEY
from odf_chain.state import (
    EMPTY,
    LINEAGE_KEY,
    DatasetState,
    Vocabulary,
    lineage_extra,
    lineage_of,
)
from tests.helpers import non_utf8_schema

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
DID = DatasetId(bytes(range(32)))
SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("op", pa.int32(), nullable=False),
        pa.field("system_time", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("event_time", pa.timestamp("ms", tz="UTC")),
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
    ]
)


def mh(n: int, algorithm: str = BLAKE3) -> Multihash:
    """A made-up multihash: 32 bytes of ``n``."""
    return Multihash(algorithm, bytes([n % 256]) * 32)


def data_slice(start: int, end: int, *, n: int = 200, algorithm: str = BLAKE3) -> DataSlice:
    return DataSlice(
        logical_hash=mh(n, algorithm),
        physical_hash=mh(n + 1, algorithm),
        offset_interval=OffsetInterval(start, end),
        size=1000 + start,
    )


@dataclass
class Chain:
    """Hand-folds blocks: each block gets the next sequence number, links to the previous hash
    and is written one second after it, unless the test says otherwise."""

    state: DatasetState = EMPTY
    counter: int = 0

    def block(self, event: MetadataEvent, **overrides) -> tuple[MetadataBlock, Multihash]:
        self.counter += 1
        seq = self.state.sequence_number + 1
        block = MetadataBlock(
            system_time=T0 + timedelta(seconds=seq),
            prev_block_hash=self.state.head,
            sequence_number=seq,
            event=event,
        )
        block_hash = overrides.pop("block_hash", mh(self.counter))
        return replace(block, **overrides), block_hash

    def add(self, event: MetadataEvent, **overrides) -> MetadataBlock:
        block, block_hash = self.block(event, **overrides)
        self.state = advance(self.state, block, block_hash)
        return block

    def reject(self, event: MetadataEvent, rule: str, *fragments: str, **overrides):
        """Assert that ``event`` (as the next block) breaks ``rule``; the state stays put."""
        before = self.state
        block, block_hash = self.block(event, **overrides)
        with pytest.raises(RuleViolation) as info:
            advance(self.state, block, block_hash)
        violation = info.value
        assert violation.rule == rule, str(violation)
        assert violation.sequence_number == block.sequence_number
        assert violation.block_hash == str(block_hash)
        text = str(violation)
        assert f"block {block.sequence_number}" in text
        assert str(block_hash) in text
        assert f"rule {rule}" in text
        for fragment in fragments:
            assert fragment in text, f"{fragment!r} not in {text!r}"
        assert self.state is before
        COVERED.add(rule)
        return violation


COVERED: set[str] = set()


def seeded(algorithm: str = BLAKE3) -> Chain:
    c = Chain()
    c.add(Seed(dataset_id=DID), block_hash=mh(1, algorithm))
    return c


def with_schema(algorithm: str = BLAKE3) -> Chain:
    c = seeded(algorithm)
    c.add(SetDataSchema.from_arrow(SCHEMA), block_hash=mh(2, algorithm))
    return c


def with_data(algorithm: str = BLAKE3) -> Chain:
    """Seed, schema, then offsets 0..9 with a watermark at T0."""
    c = with_schema(algorithm)
    c.add(
        AddData(prev_offset=None, new_data=data_slice(0, 9, algorithm=algorithm), new_watermark=T0),
        block_hash=mh(3, algorithm),
    )
    return c


# -- a valid chain folds, and the state is what the blocks say -----------------------------------


def test_valid_chain_folds() -> None:
    c = with_data()
    c.add(AddData(prev_offset=9, new_data=data_slice(10, 14, n=50), new_watermark=T0))
    c.add(SetInfo(description="hello"))
    s = c.state
    assert s.sequence_number == 4
    assert s.head == mh(c.counter)
    assert s.dataset_id == DID
    assert s.schema.equals(SCHEMA)
    assert s.schema_sequence_number == 1
    assert s.last_offset == 14
    assert s.next_offset == 15
    assert s.num_records == 15
    assert s.num_slices == 2
    assert s.data_size == 1000 + 1010
    assert s.watermark == T0
    assert s.system_time == T0 + timedelta(seconds=4)


# -- seed-first / seed-unique --------------------------------------------------------------------


def test_first_block_must_be_a_seed() -> None:
    Chain().reject(SetInfo(description="x"), "seed-first", "Seed", "SetInfo")


def test_first_block_as_add_data() -> None:
    Chain().reject(AddData(new_data=data_slice(0, 0)), "seed-first", "Seed", "AddData")


def test_seed_at_sequence_one() -> None:
    Chain().reject(Seed(dataset_id=DID), "seed-first", "0", "found 1", sequence_number=1)


def test_seed_with_a_predecessor() -> None:
    Chain().reject(Seed(dataset_id=DID), "seed-first", str(mh(77)), prev_block_hash=mh(77))


def test_second_seed() -> None:
    c = with_data()
    c.reject(Seed(dataset_id=DatasetId(bytes(32))), "seed-unique", "Seed", str(DID))


# -- sequence-number / prev-block-hash -----------------------------------------------------------


def test_sequence_gap() -> None:
    c = seeded()
    c.add(SetInfo(description="one"))
    assert c.state.sequence_number == 1
    c.reject(
        SetInfo(description="two"), "sequence-number", "expected 2", "found 3", sequence_number=3
    )


def test_sequence_repeat() -> None:
    c = seeded()
    c.add(SetInfo(description="one"))
    c.reject(
        SetInfo(description="two"), "sequence-number", "expected 2", "found 1", sequence_number=1
    )


def test_wrong_prev_block_hash() -> None:
    c = seeded()
    c.add(SetInfo(description="one"))
    head = c.state.head
    c.reject(
        SetInfo(description="two"),
        "prev-block-hash",
        str(head),
        str(mh(99)),
        prev_block_hash=mh(99),
    )


def test_missing_prev_block_hash() -> None:
    c = seeded()
    head = c.state.head
    c.reject(SetInfo(description="x"), "prev-block-hash", str(head), "none", prev_block_hash=None)


# -- hash-algorithm ------------------------------------------------------------------------------


def test_sha3_block_in_blake3_chain() -> None:
    c = seeded(BLAKE3)
    c.reject(
        SetInfo(description="x"),
        "hash-algorithm",
        "blake3",
        "sha3-256",
        block_hash=mh(50, SHA3_256),
    )


def test_blake3_block_in_sha3_chain() -> None:
    c = seeded(SHA3_256)
    assert c.state.hash_algorithm == SHA3_256
    c.reject(SetInfo(description="x"), "hash-algorithm", "sha3-256", "blake3", block_hash=mh(50))


def test_sha3_slice_hash_in_blake3_chain() -> None:
    c = with_schema(BLAKE3)
    bad = replace(data_slice(0, 4), physical_hash=mh(9, SHA3_256))
    c.reject(AddData(new_data=bad), "hash-algorithm", "physical_hash", "blake3", "sha3-256")
    bad = replace(data_slice(0, 4), logical_hash=mh(9, SHA3_256))
    c.reject(AddData(new_data=bad), "hash-algorithm", "logical_hash", "blake3", "sha3-256")


def test_sha3_chain_accepts_sha3_slices() -> None:
    c = with_data(SHA3_256)
    c.add(
        AddData(prev_offset=9, new_data=data_slice(10, 10, algorithm=SHA3_256), new_watermark=T0),
        block_hash=mh(60, SHA3_256),
    )
    assert c.state.last_offset == 10


# -- system-time ---------------------------------------------------------------------------------


def test_system_time_going_back() -> None:
    c = seeded()
    c.add(SetInfo(description="one"))
    last = c.state.system_time
    earlier = last - timedelta(milliseconds=1)
    c.reject(
        SetInfo(description="two"),
        "system-time",
        last.isoformat(),
        earlier.isoformat(),
        system_time=earlier,
    )


def test_system_time_may_repeat() -> None:
    c = seeded()
    assert c.state.system_time == T0
    c.add(SetInfo(description="one"), system_time=T0)  # same instant as the Seed
    assert c.state.sequence_number == 1


# -- schema-before-data / schema-valid -----------------------------------------------------------


def test_add_data_before_any_schema() -> None:
    c = seeded()
    c.reject(AddData(new_data=data_slice(0, 4)), "schema-before-data", "SetDataSchema", "AddData")


def test_malformed_raw_arrow_schema() -> None:
    c = seeded()
    v = c.reject(SetDataSchema(raw_arrow_schema=b"\x00" * 24), "schema-valid")
    assert "schema" in v.detail.lower()
    c.reject(SetDataSchema(raw_arrow_schema=b"junk"), "schema-valid", "too short")


@pytest.mark.parametrize("nested", [False, True], ids=["top-level", "nested"])
def test_field_name_not_utf8(nested: bool) -> None:
    # pyarrow decodes field names lazily: this must fail as schema-valid, not as a
    # UnicodeDecodeError wherever a name is first read
    raw = non_utf8_schema(nested)
    seeded().reject(SetDataSchema(raw_arrow_schema=raw), "schema-valid", "utf-8")
    with_data().reject(SetDataSchema(raw_arrow_schema=raw), "schema-valid", "utf-8")


# -- schema-forms: a SetDataSchema's two forms describe one schema ---------------------------------


def _forms(raw: pa.Schema, structured: pa.Schema) -> SetDataSchema:
    return SetDataSchema(
        raw_arrow_schema=SetDataSchema.from_arrow(raw).raw_arrow_schema,
        schema=SetDataSchema.from_arrow(structured).schema,
    )


def test_forms_that_disagree_are_refused() -> None:
    head = list(SCHEMA)[:-1]  # SCHEMA without its last column, "name" (nullable string)
    changed = pa.schema([*head, pa.field("name", pa.large_string())])
    seeded().reject(
        _forms(SCHEMA, changed), "schema-forms", "differing first at name: string != large_string"
    )
    renamed = pa.schema([*head, pa.field("label", pa.string())])
    seeded().reject(_forms(SCHEMA, renamed), "schema-forms", "named 'name' in one, 'label'")
    required = pa.schema([*head, pa.field("name", pa.string(), nullable=False)])
    with_schema().reject(_forms(SCHEMA, required), "schema-forms", "name: nullable True != False")
    nested = [pa.field("s", pa.struct([pa.field("a", pa.list_(pa.int32()))]))]
    deeper = [pa.field("s", pa.struct([pa.field("a", pa.list_(pa.int64()))]))]
    seeded().reject(
        _forms(pa.schema(nested), pa.schema(deeper)), "schema-forms", "s.a.[item]: int32 != int64"
    )
    seeded().reject(_forms(SCHEMA, pa.schema(head)), "schema-forms", "'name' is in one")


def test_forms_that_agree_or_stand_alone_are_accepted() -> None:
    c = seeded()
    both = SetDataSchema.from_arrow(SCHEMA)
    assert both.raw_arrow_schema is not None and both.schema is not None
    c.add(both)
    assert c.state.schema == SCHEMA
    # metadata and list item names are not the structured form's: no disagreement
    spark = pa.schema(
        [*SCHEMA, pa.field("tags", pa.list_(pa.field("element", pa.string())))],
        metadata={"origin": "spark"},
    )
    c.add(_forms(spark, pa.schema([*SCHEMA, pa.field("tags", pa.list_(pa.string()))])))
    assert c.state.schema.equals(spark, check_metadata=True)
    # either form alone gives the same schema in force
    for alone in (
        SetDataSchema(raw_arrow_schema=both.raw_arrow_schema),
        SetDataSchema(schema=both.schema),
    ):
        d = seeded()
        d.add(alone)
        assert d.state.schema == SCHEMA


def test_malformed_structured_form_beside_a_raw_one() -> None:
    broken = {"fields": ({"name": "x", "type": {"kind": "DataTypeNope"}, "extra": None},)}
    event = SetDataSchema(raw_arrow_schema=SetDataSchema.from_arrow(SCHEMA).raw_arrow_schema)
    seeded().reject(
        replace(event, schema=broken), "schema-valid", "the structured schema", "x: unknown data"
    )


# -- offsets -------------------------------------------------------------------------------------


def test_prev_offset_wrong() -> None:
    c = with_data()
    c.reject(
        AddData(prev_offset=8, new_data=data_slice(10, 12), new_watermark=T0),
        "offsets",
        "prev_offset 9",
        "found 8",
    )


def test_prev_offset_missing_after_data() -> None:
    c = with_data()
    c.reject(
        AddData(prev_offset=None, new_data=data_slice(10, 12), new_watermark=T0),
        "offsets",
        "prev_offset 9",
        "found None",
    )


def test_prev_offset_on_first_slice() -> None:
    c = with_schema()
    c.reject(AddData(prev_offset=0, new_data=data_slice(1, 2)), "offsets", "None", "found 0")


def test_start_gap() -> None:
    c = with_data()
    c.reject(
        AddData(prev_offset=9, new_data=data_slice(11, 12), new_watermark=T0),
        "offsets",
        "start at offset 10",
        "found 11",
    )


def test_start_overlap() -> None:
    c = with_data()
    c.reject(
        AddData(prev_offset=9, new_data=data_slice(5, 12), new_watermark=T0),
        "offsets",
        "start at offset 10",
        "found 5",
    )


def test_first_slice_must_start_at_zero() -> None:
    c = with_schema()
    c.reject(AddData(new_data=data_slice(1, 5)), "offsets", "start at offset 0", "found 1")


def test_end_before_start() -> None:
    c = with_data()
    c.reject(
        AddData(prev_offset=9, new_data=data_slice(10, 9), new_watermark=T0),
        "offsets",
        "end >= start",
        "[10, 9]",
    )


# -- watermark -----------------------------------------------------------------------------------


def test_watermark_decreasing() -> None:
    c = with_data()
    earlier = T0 - timedelta(hours=1)
    c.reject(
        AddData(prev_offset=9, new_data=data_slice(10, 10), new_watermark=earlier),
        "watermark",
        T0.isoformat(),
        earlier.isoformat(),
    )


def test_watermark_dropped_after_being_set() -> None:
    c = with_data()
    c.reject(
        AddData(prev_offset=9, new_data=data_slice(10, 10)),
        "watermark",
        T0.isoformat(),
        "found none",
    )


def test_watermark_may_advance_or_stay() -> None:
    c = with_data()
    c.add(AddData(prev_offset=9, new_data=data_slice(10, 10), new_watermark=T0))
    later = T0 + timedelta(days=1)
    c.add(AddData(prev_offset=10, new_data=data_slice(11, 11), new_watermark=later))
    assert c.state.watermark == later
    # a watermark-only advance is a real change
    c.add(AddData(prev_offset=11, new_watermark=later + timedelta(days=1)))
    assert c.state.watermark == later + timedelta(days=1)


# -- checkpoint ----------------------------------------------------------------------------------


def test_prev_checkpoint_without_any_checkpoint() -> None:
    c = with_data()
    c.reject(
        AddData(
            prev_offset=9, prev_checkpoint=mh(42), new_data=data_slice(10, 10), new_watermark=T0
        ),
        "checkpoint",
        "expected prev_checkpoint none",
        str(mh(42)),
    )


def test_prev_checkpoint_mismatch() -> None:
    c = with_data()
    c.add(
        AddData(
            prev_offset=9,
            new_checkpoint=Checkpoint(physical_hash=mh(40), size=10),
            new_watermark=T0,
        )
    )
    assert c.state.last_checkpoint == mh(40)
    c.reject(
        AddData(
            prev_offset=9, prev_checkpoint=mh(41), new_data=data_slice(10, 10), new_watermark=T0
        ),
        "checkpoint",
        str(mh(40)),
        str(mh(41)),
    )
    c.reject(
        AddData(prev_offset=9, new_data=data_slice(10, 10), new_watermark=T0),
        "checkpoint",
        str(mh(40)),
        "found none",
    )
    c.add(
        AddData(
            prev_offset=9, prev_checkpoint=mh(40), new_data=data_slice(10, 10), new_watermark=T0
        )
    )
    assert c.state.last_offset == 10


# -- events that change nothing: ODF forbids none of them, so they are accepted ------------------


def test_empty_add_data_is_accepted() -> None:
    c = with_schema()
    c.add(AddData())
    assert c.state.last_offset is None and c.state.num_slices == 0


def test_add_data_repeating_the_watermark_only_is_accepted() -> None:
    c = with_data()
    c.add(AddData(prev_offset=9, new_watermark=T0))
    assert c.state.watermark == T0 and c.state.last_offset == 9


def test_identical_set_data_schema_is_accepted() -> None:
    c = with_data()
    # built again from a separate, equal schema object
    c.add(SetDataSchema.from_arrow(pa.schema(list(SCHEMA))))
    assert c.state.schema.equals(SCHEMA) and c.state.schema_sequence_number == 3


def test_set_vocab_restating_the_vocabulary_is_accepted_anywhere() -> None:
    """Another ODF writer may state the default names outright, or repeat the vocabulary in
    force; nothing is renamed, so it is harmless before and after the schema."""
    c = seeded()
    c.add(SetVocab())
    c.add(SetVocab(offset_column="offset", operation_type_column="op"))
    c.add(SetVocab(event_time_column="ts"))
    c.add(SetVocab(event_time_column="ts"))
    assert c.state.vocab.event_time_column == "ts"
    c.add(SetDataSchema.from_arrow(SCHEMA))
    c.add(SetVocab(offset_column="offset", event_time_column="ts"))  # the same names again
    c.add(AddData(new_data=data_slice(0, 9)))
    c.add(SetVocab(event_time_column="ts", system_time_column="system_time"))
    assert c.state.vocab == Vocabulary(event_time_column="ts")


def test_set_info_and_license_repeated_are_accepted() -> None:
    c = seeded()
    c.add(SetInfo())
    c.add(SetInfo(description="d", keywords=("a",)))
    c.add(SetInfo(description="d", keywords=("a",)))
    c.add(SetLicense(spdx_id="MIT"))
    c.add(SetLicense(spdx_id="MIT"))
    c.add(SetLicense())
    assert c.state.info == SetInfo(description="d", keywords=("a",))


def test_disabling_sources_that_are_not_there_is_accepted() -> None:
    c = seeded()
    c.add(DisablePushSource(source_name="nope"))
    c.add(DisablePollingSource())
    c.add(AddPushSource(source_name="kafka"))
    c.add(DisablePushSource(source_name="kafka"))
    c.add(SetPollingSource())
    c.add(DisablePollingSource())
    c.add(DisablePollingSource())
    assert c.state.push_sources == frozenset() and not c.state.polling_source


# -- dataset-kind, vocab-before-schema -----------------------------------------------------------


def test_execute_transform_in_a_root_dataset() -> None:
    c = with_schema()
    c.reject(
        ExecuteTransform(new_data=data_slice(0, 9)),
        "dataset-kind",
        "ExecuteTransform only in a derivative dataset",
        "found it in a root one",
    )


def test_add_data_in_a_derivative_dataset() -> None:
    c = Chain()
    c.add(Seed(dataset_id=DID, dataset_kind=DatasetKind.DERIVATIVE), block_hash=mh(1))
    c.add(SetDataSchema.from_arrow(SCHEMA))
    c.reject(
        AddData(new_data=data_slice(0, 9)),
        "dataset-kind",
        "AddData only in a root dataset",
        "found it in a derivative one",
    )
    c.add(_transform())
    c.add(ExecuteTransform(query_inputs=(_pin(None, mh(50), None, 4),), new_data=data_slice(0, 9)))
    assert c.state.last_offset == 9


_CSV = {"kind": "ReadStepCsv", "header": True}
_APPEND = {"kind": "MergeStrategyAppend"}
POLLING = SetPollingSource(
    fetch={"kind": "FetchStepUrl", "url": "https://example.org/data.csv"},
    read=_CSV,
    merge=_APPEND,
)


def _push_source(name: str, **read) -> AddPushSource:
    return AddPushSource(source_name=name, read=_CSV | read, merge=_APPEND)


def test_sources_in_a_derivative_dataset() -> None:
    """ODF: sources belong to root datasets (a derivative one's data comes from its transform);
    disabling a source it cannot have changes nothing and is accepted."""
    c = _derivative()
    for event in (POLLING, _push_source("kafka")):
        c.reject(
            event,
            "dataset-kind",
            f"{type(event).__name__} only in a root dataset",
            "found it in a derivative one",
        )
    c.add(DisablePushSource(source_name="kafka"))
    c.add(DisablePollingSource())


def test_push_and_polling_sources_are_mutually_exclusive() -> None:
    c = with_schema()
    c.add(_push_source("kafka"))
    c.add(_push_source("mqtt"))
    c.add(_push_source("kafka", separator=";"))  # a source of that name, redefined
    c.reject(POLLING, "sources", "no active push source", "'kafka', 'mqtt' active")
    c.add(DisablePushSource(source_name="kafka"))
    c.reject(POLLING, "sources", "push source 'mqtt' active", "disable it first")
    c.add(DisablePushSource(source_name="mqtt"))
    c.add(POLLING)
    c.add(POLLING)  # set again: the polling source is replaced
    c.reject(_push_source("kafka"), "sources", "no active polling source", "'kafka' is added")
    c.add(DisablePollingSource())
    c.add(_push_source("kafka"))
    assert c.state.push_sources == frozenset({"kafka"}) and not c.state.polling_source


def test_a_read_step_gives_its_columns_one_way() -> None:
    c = with_schema()
    both = _push_source("kafka", ddl_schema=("a INT",), schema={"fields": ()})
    c.reject(both, "sources", "AddPushSource's read step", "ddl_schema or as schema, found both")
    c.add(_push_source("kafka", ddl_schema=("a INT",)))


INPUT_A = DatasetId(bytes([7]) * 32)
INPUT_B = DatasetId(bytes([8]) * 32)


def _transform(*ids: DatasetId, query: str = "SELECT * FROM a") -> SetTransform:
    ids = ids or (INPUT_A,)
    return SetTransform(
        inputs=tuple({"dataset_ref": i.to_did(), "alias": f"in{n}"} for n, i in enumerate(ids)),
        transform={
            "kind": "TransformSql",
            "engine": "spark",
            "version": "4.0",
            "query": None,
            "queries": ({"alias": None, "query": query},),
            "temporal_tables": None,
        },
    )


def _pin(prev_block, new_block, prev_offset, new_offset, dataset_id=INPUT_A):
    return ExecuteTransformInput(dataset_id, prev_block, new_block, prev_offset, new_offset)


def _derivative() -> Chain:
    c = Chain()
    c.add(Seed(dataset_id=DID, dataset_kind=DatasetKind.DERIVATIVE), block_hash=mh(1))
    c.add(SetDataSchema.from_arrow(SCHEMA))
    return c


def test_execute_transform_without_a_transform() -> None:
    c = _derivative()
    c.reject(
        ExecuteTransform(query_inputs=(_pin(None, mh(50), None, 4),)),
        "transform-inputs",
        "expected a SetTransform before the first ExecuteTransform",
    )


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"inputs": ()}, "at least one input"),
        ({"inputs": ({"dataset_ref": "sensors", "alias": "s"},)}, "name a dataset id"),
        ({"inputs": ({"dataset_ref": INPUT_A.to_did(), "alias": ""},)}, "to have an alias"),
        (
            {
                "inputs": (
                    {"dataset_ref": INPUT_A.to_did(), "alias": "x"},
                    {"dataset_ref": INPUT_B.to_did(), "alias": "x"},
                )
            },
            "unique aliases",
        ),
        (
            {
                "inputs": (
                    {"dataset_ref": INPUT_A.to_did(), "alias": "x"},
                    {"dataset_ref": INPUT_A.to_did(), "alias": "y"},
                )
            },
            "each input once",
        ),
        ({"transform": None}, "TransformSql"),
        ({"transform": {"kind": "TransformSql", "engine": "", "queries": ()}}, "engine"),
        ({"transform": {"kind": "TransformSql", "engine": "spark", "queries": ()}}, "a query"),
    ],
)
def test_malformed_set_transform(change, fragment) -> None:
    c = _derivative()
    c.reject(replace(_transform(), **change), "transform", fragment)


def test_set_transform_in_a_root_dataset() -> None:
    c = seeded()
    c.reject(_transform(), "dataset-kind", "SetTransform only in a derivative dataset")


def test_runs_carry_on_where_the_last_run_stopped() -> None:
    c = _derivative()
    c.add(_transform(INPUT_A, INPUT_B))
    first = (_pin(None, mh(50), None, 4), _pin(None, mh(60), None, None, INPUT_B))
    c.add(ExecuteTransform(query_inputs=first, new_data=data_slice(0, 9)))
    assert c.state.last_pin(INPUT_A) == first[0]
    # inputs in another order, or one missing
    c.reject(
        ExecuteTransform(query_inputs=(first[1], first[0]), prev_offset=9),
        "transform-inputs",
        "the SetTransform's, in its order",
    )
    c.reject(
        ExecuteTransform(query_inputs=(_pin(mh(50), mh(51), 4, 8),), prev_offset=9),
        "transform-inputs",
    )
    b_same = _pin(mh(60), mh(60), None, None, INPUT_B)
    for wrong, fragment in [
        (_pin(mh(49), mh(51), 4, 8), "expected prev_block_hash"),
        (_pin(None, mh(51), None, 8), "expected prev_block_hash"),
        (_pin(mh(50), mh(51), 3, 8), "expected prev_offset 4"),
        (_pin(mh(50), mh(51), 4, 3), "expected new_offset >= prev_offset 4"),
        (_pin(mh(50), mh(51), 4, None), "expected new_offset >= prev_offset 4"),
        (_pin(mh(50), mh(50), 4, 6), "the same block read again"),
        (_pin(mh(50), None, 4, 8), "expected new_block_hash"),
    ]:
        c.reject(
            ExecuteTransform(query_inputs=(wrong, b_same), prev_offset=9),
            "transform-inputs",
            fragment,
        )
    c.add(ExecuteTransform(query_inputs=(_pin(mh(50), mh(51), 4, 8), b_same), prev_offset=9))
    # a new transform without input B: B's pins no longer matter; A carries on
    c.add(_transform(INPUT_A, query="SELECT 1 FROM a"))
    c.add(ExecuteTransform(query_inputs=(_pin(mh(51), mh(52), 8, 9),), prev_offset=9))
    assert c.state.transform.transform["queries"][0]["query"] == "SELECT 1 FROM a"


def test_set_vocab_after_the_schema() -> None:
    c = seeded()
    c.add(SetVocab(event_time_column="ts"))  # before any schema: fine
    c.add(SetDataSchema.from_arrow(SCHEMA))
    c.reject(
        SetVocab(event_time_column="when"),
        "vocab-before-schema",
        "renames a system column only before the first SetDataSchema",
        "event time column 'ts' to 'when'",
        "set at block 2",
    )
    # back to ODF's default name is a renaming too
    c.reject(SetVocab(), "vocab-before-schema", "event time column 'ts' to 'event_time'")


# -- schema-evolution ----------------------------------------------------------------------------


def _schema_with(*changes: tuple[str, pa.Field | None], extra: tuple[pa.Field, ...] = ()):
    by_name = dict(changes)
    fields = []
    for f in SCHEMA:
        if f.name in by_name:
            if by_name[f.name] is not None:
                fields.append(by_name[f.name])
        else:
            fields.append(f)
    return pa.schema([*fields, *extra])


NESTED = pa.schema(
    [
        *SCHEMA,
        pa.field(
            "address", pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int32())])
        ),
        pa.field("tags", pa.list_(pa.int64())),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
    ]
)


def _nested_with(name: str, field: pa.Field | None) -> pa.Schema:
    return pa.schema([(field if f.name == name else f) for f in NESTED if f.name != name or field])


def nested_chain() -> Chain:
    c = seeded()
    c.add(SetDataSchema.from_arrow(NESTED))
    c.add(AddData(new_data=data_slice(0, 3), new_watermark=T0))
    return c


BREAKING = {
    "field removed": (
        lambda: with_data(),
        _schema_with(("name", None)),
        ["name", "removed", "string"],
    ),
    "type changed int64 -> string": (
        lambda: with_data(),
        _schema_with(("id", pa.field("id", pa.string()))),
        ["id", "int64", "string", "type"],
    ),
    "optional -> required": (
        lambda: with_data(),
        _schema_with(("name", pa.field("name", pa.string(), nullable=False))),
        ["name", "optional", "required"],
    ),
    "new required field": (
        lambda: with_data(),
        _schema_with(extra=(pa.field("score", pa.float64(), nullable=False),)),
        ["score", "required", "double"],
    ),
    "nested struct field removed": (
        nested_chain,
        _nested_with("address", pa.field("address", pa.struct([pa.field("city", pa.string())]))),
        ["[version=2.0].[type=struct].[type=struct].address.[type=int].zip", "removed", "int32"],
    ),
    "list item type changed": (
        nested_chain,
        _nested_with("tags", pa.field("tags", pa.list_(pa.string()))),
        ["[version=2.0].[type=struct].[type=array].[type=long].tags [item]", "int64", "string"],
    ),
    "map value type changed": (
        nested_chain,
        _nested_with("attrs", pa.field("attrs", pa.map_(pa.string(), pa.float32()))),
        ["[version=2.0].[type=struct].[type=map].[type=long].attrs [value]", "int64", "float"],
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKING))
def test_breaking_schema_change(case: str) -> None:
    make, new_schema, fragments = BREAKING[case]
    c = make()
    in_force_since = c.state.schema_sequence_number
    v = c.reject(SetDataSchema.from_arrow(new_schema), "schema-evolution", *fragments)
    assert isinstance(v, SchemaEvolutionError)
    assert f"schema in force since block {in_force_since}" in str(v)


def test_breaking_change_before_any_data_is_still_refused() -> None:
    c = with_schema()
    c.reject(SetDataSchema.from_arrow(_schema_with(("id", None))), "schema-evolution", "id")


COMPATIBLE = {
    "new nullable field": (
        lambda: with_data(),
        _schema_with(extra=(pa.field("score", pa.float64()),)),
    ),
    "required -> optional": (
        lambda: with_data(),
        _schema_with(("offset", pa.field("offset", pa.int64(), nullable=True))),
    ),
    "nested new nullable struct member": (
        nested_chain,
        _nested_with(
            "address",
            pa.field(
                "address",
                pa.struct(
                    [
                        pa.field("city", pa.string()),
                        pa.field("zip", pa.int32()),
                        pa.field("street", pa.string()),
                    ]
                ),
            ),
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(COMPATIBLE))
def test_compatible_schema_change(case: str) -> None:
    make, new_schema = COMPATIBLE[case]
    c = make()
    block = c.add(SetDataSchema.from_arrow(new_schema))
    assert c.state.schema.equals(new_schema)
    assert c.state.schema_sequence_number == block.sequence_number


# -- field lineage: no-op, lineage-structure, lineage-writes, lineage-outputs, lineage-data -------

ID = "[version=2.0].[type=long].id"  # SCHEMA's int64 column ``id``, lakehouse convention
NAME = "[version=2.0].[type=string].name"
SOURCE = LineageInput("src", uri="file:///in/people.csv", content_hash=mh(90))
UPSTREAM_DID = DatasetId(bytes([9]) * 32)
UPSTREAM = LineageInput("up", dataset_id=UPSTREAM_DID, block_hash=mh(91, SHA3_256))


def op(name: str, *reads: tuple[str, str], outputs: tuple[str, ...] = (), writes: bool = True):
    return FieldOperation(
        name, tuple(InputField(origin, field) for origin, field in reads), outputs, writes=writes
    )


def lineage(
    *operations: FieldOperation,
    inputs: tuple[LineageInput, ...] = (SOURCE,),
    offsets: OffsetInterval | None = None,
) -> AddFieldLineage:
    return AddFieldLineage(
        run=LineageRun("nightly", "run-7", T0, T0 + timedelta(minutes=1), offsets),
        inputs=inputs,
        operations=operations,
    )


# A read of two source columns into intermediate names, then writes of both.
READ = op("read", ("src", "[version=2.0].[type=string].id"), outputs=("id", "name"), writes=False)
WRITE = op("write", ("read", "id"), ("read", "name"), outputs=(ID, NAME))


def test_lineage_event_without_operations() -> None:
    c = with_schema()
    c.reject(lineage(), "no-op", "AddFieldLineage", "run-7", "nightly", "no field operations")


def test_valid_lineage_folds() -> None:
    c = with_data()
    drop = op("drop", ("src", "[version=2.0].[type=string].secret"))
    block = c.add(lineage(READ, WRITE, drop, inputs=(SOURCE, UPSTREAM)))
    assert c.state.last_lineage_sequence_number == block.sequence_number
    assert c.state.lineage_pending is None  # no offsets: the run wrote nothing
    c.add(SetInfo(description="after a lineage event without offsets"))


def test_diamond_of_operations_is_not_a_cycle() -> None:
    c = with_schema()
    a = op("a", ("src", "x"), outputs=("x",), writes=False)
    b = op("b", ("a", "x"), outputs=("y",), writes=False)
    d = op("d", ("a", "x"), outputs=("z",), writes=False)
    e = op("e", ("b", "y"), ("d", "z"), outputs=(ID,))
    c.add(lineage(e, d, b, a))  # listed out of order on purpose: origins may come later


STRUCTURE_CASES = {
    "duplicate input": (
        lineage(WRITE, inputs=(SOURCE, SOURCE)),
        ["input 'src' is named twice"],
    ),
    "empty input name": (
        lineage(op("w", ("src", "x"), outputs=(ID,)), inputs=(SOURCE, replace(SOURCE, name=""))),
        ["input #1 has an empty name"],
    ),
    "dataset without block": (
        lineage(READ, inputs=(SOURCE, replace(UPSTREAM, block_hash=None))),
        ["input 'up'", str(UPSTREAM_DID), "no block_hash"],
    ),
    "neither dataset nor external": (
        lineage(READ, inputs=(LineageInput("src"),)),
        ["input 'src' is neither a dataset", "nor an external source (uri)"],
    ),
    "block hash without dataset": (
        lineage(READ, inputs=(replace(SOURCE, block_hash=mh(5)),)),
        ["input 'src' has a block_hash but no dataset_id"],
    ),
    "duplicate operation": (
        lineage(READ, READ),
        ["operation 'read' is named twice"],
    ),
    "empty operation name": (
        lineage(READ, op("", ("src", "x"))),
        ["operation #1 has an empty name"],
    ),
    "operation named like an input": (
        lineage(op("src", ("src", "x"), outputs=(ID,))),
        ["operation 'src' has the name of an input"],
    ),
    "unknown origin": (
        lineage(op("write", ("nowhere", "col"), outputs=(ID,))),
        ["operation 'write' reads field 'col' from 'nowhere'", "neither an input nor an operation"],
    ),
    "field not output by the origin": (
        lineage(READ, op("write", ("read", "age"), outputs=(ID,))),
        ["operation 'write' reads field 'age' from operation 'read'", "'id', 'name'"],
    ),
    "reading a drop": (
        lineage(op("drop", ("src", "x")), op("write", ("drop", "x"), outputs=(ID,))),
        ["operation 'write' reads field 'x' from operation 'drop'", "outputs: none"],
    ),
    "two-step cycle": (
        lineage(
            op("a", ("b", "y"), outputs=("x",), writes=False),
            op("b", ("a", "x"), outputs=("y",), writes=False),
        ),
        ["cycle: 'a' -> 'b' -> 'a'"],
    ),
    "operation reading itself": (
        lineage(op("a", ("src", "s"), ("a", "x"), outputs=("x",), writes=False)),
        ["cycle: 'a' -> 'a'"],
    ),
}


@pytest.mark.parametrize("case", sorted(STRUCTURE_CASES))
def test_malformed_lineage_structure(case: str) -> None:
    event, fragments = STRUCTURE_CASES[case]
    with_schema().reject(event, "lineage-structure", *fragments)


def test_operation_named_like_an_input_reads_the_input() -> None:
    v = with_schema().reject(lineage(op("src", ("src", "x"), outputs=(ID,))), "lineage-structure")
    assert "cycle" not in str(v)


def test_lineage_structure_reports_every_problem_briefly() -> None:
    reads = [("nowhere", f"c{i}") for i in range(25)]
    v = with_schema().reject(lineage(op("w", *reads)), "lineage-structure", "'c0'", "'c9'")
    assert "'c10'" not in str(v)
    assert "and 15 more" in str(v)


def test_long_cycle_is_found_without_recursion() -> None:
    # 5,000 operations, each reading the next; the last reads the first.
    n = 5000
    ops = [
        op(f"op{i}", (f"op{(i + 1) % n}", f"f{(i + 1) % n}"), outputs=(f"f{i}",), writes=False)
        for i in range(n)
    ]
    v = with_schema().reject(lineage(*ops), "lineage-structure", "'op0' -> 'op1' -> 'op2'")
    assert str(v).rstrip().endswith("'op4999' -> 'op0'")


def test_cycle_behind_a_valid_branch_is_named_exactly() -> None:
    # x reads y and z; z <-> w form the cycle; y is a clean leaf.
    ops = (
        op("x", ("y", "o"), ("z", "o"), outputs=(ID,)),
        op("y", ("src", "s"), outputs=("o",), writes=False),
        op("z", ("w", "o"), outputs=("o",), writes=False),
        op("w", ("z", "o"), outputs=("o",), writes=False),
    )
    v = with_schema().reject(lineage(*ops), "lineage-structure", "cycle: 'z' -> 'w' -> 'z'")
    assert "'x'" not in str(v).split("cycle:")[1]


def test_lineage_input_pinned_at_own_block_uses_the_chains_algorithm() -> None:
    c = with_schema(BLAKE3)
    own = LineageInput("self", dataset_id=DID, block_hash=mh(2, SHA3_256))
    reads_own = op("w", ("self", ID), outputs=(ID,))
    c.reject(
        lineage(reads_own, inputs=(own,)), "hash-algorithm", "input 'self'", "blake3", "sha3-256"
    )
    c.add(lineage(reads_own, inputs=(replace(own, block_hash=mh(2, BLAKE3)),)))


def test_lineage_input_of_another_dataset_may_use_any_algorithm() -> None:
    c = with_schema(BLAKE3)
    c.add(lineage(op("w", ("up", ID), outputs=(ID,)), inputs=(UPSTREAM,)))  # sha3 block hash


def test_lineage_writes_a_field_not_in_the_schema() -> None:
    c = with_schema()
    event = lineage(READ, op("write", ("read", "id"), outputs=(ID, "[version=2.0].[type=int].age")))
    c.reject(
        event,
        "lineage-outputs",
        "operation 'write' writes '[version=2.0].[type=int].age'",
        "not a field path of the schema in force",
        "block 1",
    )


def test_lineage_output_with_the_wrong_type_token() -> None:
    # ``id`` is int64: DataHub's lakehouse path says long, not int.
    c = with_schema()
    c.reject(
        lineage(op("w", ("src", "x"), outputs=("[version=2.0].[type=int].id",))),
        "lineage-outputs",
        "'[version=2.0].[type=int].id'",
    )


def test_lineage_writes_before_any_schema() -> None:
    c = seeded()
    c.reject(lineage(WRITE, READ), "lineage-outputs", "'write'", ID, "no schema is in force")


def test_lineage_that_writes_nothing_is_refused() -> None:
    """CDAP refuses an operation set without a write: an intermediate step and a drop reach no
    field of the dataset (this event used to be accepted, with or without a schema)."""
    for c in (seeded(), with_schema()):
        c.reject(
            lineage(READ, op("drop", ("read", "id"))),
            "lineage-writes",
            "run 'run-7' of job 'nightly' writes no field of the dataset",
            "'read' (intermediate outputs only), 'drop' (no outputs)",
        )


@pytest.mark.parametrize(
    ("operations", "listed"),
    [
        # a "write" that names no output, beside a read: nothing reaches the dataset
        ((READ, op("write", ("read", "id"))), "'read' (intermediate outputs only), 'write'"),
        # outputs, but none written into the dataset
        ((op("t", ("src", "x"), outputs=("y",), writes=False),), "'t' (intermediate outputs"),
    ],
)
def test_every_way_of_writing_nothing_names_the_operations(operations, listed) -> None:
    with_schema().reject(lineage(*operations), "lineage-writes", listed)


def test_one_written_field_is_enough() -> None:
    c = with_schema()
    c.add(lineage(READ, op("drop", ("read", "id")), op("w", ("read", "name"), outputs=(NAME,))))


def test_intermediate_outputs_are_not_schema_paths() -> None:
    c = with_schema()
    c.add(lineage(READ, WRITE))  # READ's "id"/"name" are not paths, and need not be


def test_lineage_outputs_of_a_nested_schema() -> None:
    c = seeded()
    c.add(
        SetDataSchema.from_arrow(pa.schema([pa.field("s", pa.struct([pa.field("a", pa.int32())]))]))
    )
    column = "[version=2.0].[type=struct].[type=struct].s"  # a complex column is wrapped once
    c.add(lineage(op("w", ("src", "x"), outputs=(f"{column}.[type=int].a", column))))
    c.reject(
        lineage(op("w", ("src", "x"), outputs=("[version=2.0].[type=int].a",))),
        "lineage-outputs",
    )


@pytest.mark.parametrize("writer_schema", ["not json", '{"type": "record"}'])
def test_lineage_outputs_when_the_schemas_paths_cannot_be_computed(writer_schema: str) -> None:
    c = seeded()
    c.add(SetDataSchema.from_arrow(SCHEMA.with_metadata({AVRO_SCHEMA_KEY: writer_schema})))
    c.reject(lineage(WRITE, READ), "lineage-outputs", "block 1", "cannot be computed")


def data_block(start: int, end: int, n: int = 210) -> AddData:
    prev = None if start == 0 else start - 1
    return AddData(prev_offset=prev, new_data=data_slice(start, end, n=n), new_watermark=T0)


def test_lineage_offsets_covered_by_the_next_slices() -> None:
    c = with_data()  # offsets 0..9 written
    seq = c.add(lineage(READ, WRITE, offsets=OffsetInterval(10, 19))).sequence_number
    pending = c.state.lineage_pending
    assert (pending.sequence_number, pending.uncovered) == (seq, OffsetInterval(10, 19))
    assert pending.block_hash == c.state.head
    c.add(data_block(10, 14))
    assert c.state.lineage_pending.uncovered == OffsetInterval(15, 19)
    assert c.state.lineage_pending.sequence_number == seq
    c.add(data_block(15, 19, n=220))
    assert c.state.lineage_pending is None
    assert c.state.last_lineage_sequence_number == seq
    c.add(SetInfo(description="free again"))
    c.add(lineage(READ, WRITE, offsets=OffsetInterval(20, 20)))
    c.add(data_block(20, 20, n=230))
    assert c.state.lineage_pending is None


def test_lineage_offsets_not_at_the_next_offset() -> None:
    c = with_data()  # next offset is 10
    c.reject(
        lineage(READ, WRITE, offsets=OffsetInterval(11, 19)),
        "lineage-data",
        "next offset 10",
        "found 11..19",
    )
    c.reject(lineage(READ, WRITE, offsets=OffsetInterval(10, 9)), "lineage-data", "found 10..9")


def test_lineage_offsets_on_an_empty_dataset_start_at_zero() -> None:
    c = with_schema()
    c.reject(lineage(READ, WRITE, offsets=OffsetInterval(1, 5)), "lineage-data", "next offset 0")
    c.add(lineage(READ, WRITE, offsets=OffsetInterval(0, 5)))
    c.add(AddData(new_data=data_slice(0, 5)))
    assert c.state.lineage_pending is None


def covered_from_10_to_19() -> Chain:
    c = with_data()
    c.add(lineage(READ, WRITE, offsets=OffsetInterval(10, 19)))
    return c


def test_schema_between_lineage_and_its_data() -> None:
    c = covered_from_10_to_19()
    wider = SCHEMA.append(pa.field("score", pa.float64()))
    c.reject(
        SetDataSchema.from_arrow(wider),
        "lineage-data",
        "offsets 10..19, which the run recorded at block 3 wrote",
        "found SetDataSchema",
    )


def test_other_event_while_lineage_is_uncovered() -> None:
    c = covered_from_10_to_19()
    c.add(data_block(10, 12))
    c.reject(SetInfo(description="x"), "lineage-data", "offsets 13..19", "found SetInfo")


def test_second_lineage_event_while_one_is_uncovered() -> None:
    c = covered_from_10_to_19()
    c.reject(
        lineage(READ, WRITE, offsets=OffsetInterval(10, 19)),
        "lineage-data",
        "offsets 10..19",
        "found AddFieldLineage",
    )
    c.reject(lineage(READ, WRITE), "lineage-data", "found AddFieldLineage")


def test_slice_running_past_the_runs_offsets() -> None:
    c = covered_from_10_to_19()
    c.reject(data_block(10, 25), "lineage-data", "within offsets 10..19,", "found offsets 10..25")


def test_watermark_only_add_data_while_lineage_is_uncovered() -> None:
    c = covered_from_10_to_19()
    later = T0 + timedelta(hours=1)
    c.reject(
        AddData(prev_offset=9, new_watermark=later),
        "lineage-data",
        "found AddData without data",
        "10..19",
    )


def test_lineage_data_rule_alone_checks_the_slice_start() -> None:
    # The offsets rule catches a wrong start first in a fold; the lineage rule holds on its own.
    c = covered_from_10_to_19()
    block, block_hash = c.block(data_block(11, 19))
    with pytest.raises(RuleViolation) as info:
        rules.check_lineage_data(c.state, block, block_hash)
    assert info.value.rule == "lineage-data"
    assert "starting at 10" in str(info.value)


# -- lineage carried by the AddData of the run's first slice (what odf_chain writes) ---------------


def carrying(event: AddFieldLineage, start: int, end: int, *, n: int = 240) -> AddData:
    """The AddData of slice ``start..end`` carrying ``event`` in its extra attributes."""
    return replace(data_block(start, end, n=n), extra=lineage_extra(event))


def test_lineage_carried_by_a_one_slice_run() -> None:
    c = with_data()  # offsets 0..9 written
    block = c.add(carrying(lineage(READ, WRITE, offsets=OffsetInterval(10, 14)), 10, 14))
    assert c.state.last_lineage_sequence_number == block.sequence_number
    assert c.state.lineage_pending is None
    assert lineage_of(block.event) == lineage(READ, WRITE, offsets=OffsetInterval(10, 14))
    c.add(SetInfo(description="nothing pending"))


def test_lineage_carried_by_the_first_of_several_slices() -> None:
    c = with_data()
    first = c.add(carrying(lineage(READ, WRITE, offsets=OffsetInterval(10, 19)), 10, 12))
    pending = c.state.lineage_pending
    assert (pending.sequence_number, pending.uncovered) == (
        first.sequence_number,
        OffsetInterval(13, 19),
    )
    assert pending.block_hash == c.state.head
    c.reject(SetInfo(description="x"), "lineage-data", "offsets 13..19", "found SetInfo")
    c.reject(
        carrying(lineage(READ, WRITE, offsets=OffsetInterval(13, 19)), 13, 19),
        "lineage-data",
        "carry no lineage of its own",
    )
    c.add(data_block(13, 19, n=250))
    assert c.state.lineage_pending is None
    assert c.state.last_lineage_sequence_number == first.sequence_number


def test_carried_lineage_must_start_with_the_slice() -> None:
    c = with_data()
    c.reject(
        carrying(lineage(READ, WRITE, offsets=OffsetInterval(11, 19)), 10, 19),
        "lineage-data",
        "starting with this block's slice (10..19)",
        "found 11..19",
    )
    c.reject(
        carrying(lineage(READ, WRITE, offsets=OffsetInterval(10, 12)), 10, 19),
        "lineage-data",
        "found 10..12",
    )
    c.reject(carrying(lineage(READ, WRITE), 10, 19), "lineage-data", "found none")


def test_carried_lineage_needs_a_slice() -> None:
    c = with_data()
    later = T0 + timedelta(hours=1)
    event = lineage(READ, WRITE, offsets=OffsetInterval(10, 10))
    c.reject(
        AddData(prev_offset=9, new_watermark=later, extra=lineage_extra(event)),
        "lineage-data",
        "run 'run-7'",
        "found no slice",
    )


def test_carried_lineage_obeys_the_lineage_rules() -> None:
    c = with_data()
    writes_unknown = op("w", ("src", "x"), outputs=("[version=2.0].[type=string].nope",))
    c.reject(
        carrying(lineage(writes_unknown, offsets=OffsetInterval(10, 10)), 10, 10),
        "lineage-outputs",
        "nope",
    )
    c.reject(carrying(lineage(offsets=OffsetInterval(10, 10)), 10, 10), "no-op")
    broken = replace(data_block(10, 10), extra={LINEAGE_KEY: {"version": 1, "run": 5}})
    c.reject(broken, "lineage-structure", LINEAGE_KEY)


# -- lineage_input_problems (needs other datasets: not a rule of the fold) ------------------------

UPSTREAM_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("city", pa.string())])


def test_lineage_input_problems() -> None:
    unreachable = LineageInput("gone", dataset_id=DatasetId(bytes([8]) * 32), block_hash=mh(92))
    event = lineage(
        op("a", ("up", ID), ("up", "[version=2.0].[type=string].city"), outputs=(ID,)),
        op("b", ("up", "[version=2.0].[type=int].id"), ("gone", "anything"), outputs=(NAME,)),
        op("c", ("src", "not checked"), ("a", ID), outputs=(ID,)),
        inputs=(SOURCE, UPSTREAM, unreachable),
    )
    asked: list[str] = []

    def schema_of(put: LineageInput) -> pa.Schema | None:
        asked.append(put.name)
        return UPSTREAM_SCHEMA if put.name == "up" else None

    problems = rules.lineage_input_problems(event, schema_of)
    assert asked == ["up", "gone"]  # external inputs are not looked up
    assert len(problems) == 1
    assert "operation 'b' reads field '[version=2.0].[type=int].id' from input 'up'" in problems[0]
    assert str(UPSTREAM_DID) in problems[0]
    assert str(UPSTREAM.block_hash) in problems[0]


def test_lineage_input_problems_control() -> None:
    event = lineage(op("a", ("up", ID), outputs=(ID,)), inputs=(UPSTREAM,))
    assert rules.lineage_input_problems(event, lambda put: UPSTREAM_SCHEMA) == []
    assert rules.lineage_input_problems(event, lambda put: pa.schema([])) != []


# -- transaction-version -------------------------------------------------------------------------


def _with_transaction(start: int, app_id, version, n: int = 60) -> AddData:
    return AddData(
        prev_offset=start - 1,
        new_data=data_slice(start, start + 4, n=n),
        new_watermark=T0,
        extra={"odf-chain.dev/transaction": {"app_id": app_id, "version": version}},
    )


def test_transaction_version_must_increase_per_app_id() -> None:
    c = with_data()
    c.add(_with_transaction(10, "job", 3))
    c.add(_with_transaction(15, "other", 0, n=70))  # another app id keeps its own versions
    assert dict(c.state.transactions) == {"job": 3, "other": 0}
    c.reject(_with_transaction(20, "job", 3, n=80), "transaction-version", "above 3", "found 3")
    c.reject(_with_transaction(20, "job", 2, n=80), "transaction-version", "'job'", "found 2")
    c.add(_with_transaction(20, "job", 4, n=80))
    assert dict(c.state.transactions) == {"job": 4, "other": 0}


@pytest.mark.parametrize(
    ("app_id", "version", "fragment"),
    [
        ("", 1, "non-empty string"),
        (None, 1, "non-empty string"),
        ("job", -1, "found -1"),
        ("job", 2**63, "0..9223372036854775807"),
        ("job", False, "must be an integer, found False"),
        ("job", "1", "must be an integer, found '1'"),
    ],
)
def test_malformed_transaction(app_id, version, fragment: str) -> None:
    with_data().reject(_with_transaction(10, app_id, version), "transaction-version", fragment)


# -- every rule is covered -----------------------------------------------------------------------


def _documented_rule_names() -> set[str]:
    doc = rules.__doc__
    table = doc.split("=" * 24, 1)[1]
    return set(re.findall(r"^([a-z][a-z-]+)\s{2,}", table, flags=re.MULTILINE))


RULE_TESTS = {
    "seed-first": test_first_block_must_be_a_seed,
    "seed-unique": test_second_seed,
    "sequence-number": test_sequence_gap,
    "prev-block-hash": test_wrong_prev_block_hash,
    "hash-algorithm": test_sha3_block_in_blake3_chain,
    "system-time": test_system_time_going_back,
    "schema-before-data": test_add_data_before_any_schema,
    "schema-valid": test_malformed_raw_arrow_schema,
    "schema-forms": test_forms_that_disagree_are_refused,
    "schema-evolution": test_breaking_change_before_any_data_is_still_refused,
    "offsets": test_start_gap,
    "watermark": test_watermark_decreasing,
    "checkpoint": test_prev_checkpoint_mismatch,
    "no-op": test_lineage_event_without_operations,
    "dataset-kind": test_execute_transform_in_a_root_dataset,
    "vocab-before-schema": test_set_vocab_after_the_schema,
    "lineage-structure": lambda: test_malformed_lineage_structure("two-step cycle"),
    "lineage-writes": test_lineage_that_writes_nothing_is_refused,
    "lineage-outputs": test_lineage_writes_a_field_not_in_the_schema,
    "lineage-data": test_schema_between_lineage_and_its_data,
    "transaction-version": test_transaction_version_must_increase_per_app_id,
    "transform": lambda: test_malformed_set_transform({"inputs": ()}, "at least one input"),
    "transform-inputs": test_runs_carry_on_where_the_last_run_stopped,
    "sources": test_push_and_polling_sources_are_mutually_exclusive,
}


def test_every_documented_rule_is_exercised() -> None:
    names = _documented_rule_names()
    assert names == {
        "seed-first",
        "seed-unique",
        "sequence-number",
        "prev-block-hash",
        "hash-algorithm",
        "system-time",
        "schema-before-data",
        "schema-valid",
        "schema-forms",
        "schema-evolution",
        "offsets",
        "watermark",
        "checkpoint",
        "dataset-kind",
        "vocab-before-schema",
        "lineage-structure",
        "lineage-writes",
        "lineage-outputs",
        "lineage-data",
        "transaction-version",
        "transform",
        "transform-inputs",
        "sources",
        "no-op",
    }
    assert set(RULE_TESTS) == names
    for rule, test in RULE_TESTS.items():
        COVERED.clear()
        test()
        assert rule in COVERED, f"{test.__name__} does not exercise {rule}"
