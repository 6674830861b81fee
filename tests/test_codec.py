"""Block codec: round trips, determinism, read-only events, and malformed input.

Hand-built blocks below use only the flatc-generated bindings (``odf_chain.format.generated``)
and ``flatbuffers.Builder``, never the codec under test, so they check the codec against the
schema rather than against itself.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import itertools
import re
import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import flatbuffers
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import odf_chain.format.generated.AddData as fbAddData
import odf_chain.format.generated.AddFieldLineage as fbAddFieldLineage
import odf_chain.format.generated.DataField as fbDataField
import odf_chain.format.generated.DataSchema as fbDataSchema
import odf_chain.format.generated.DataTypeOption as fbDataTypeOption
import odf_chain.format.generated.DataTypeTimestamp as fbDataTypeTimestamp
import odf_chain.format.generated.ExecuteTransform as fbExecuteTransform
import odf_chain.format.generated.ExtraAttributes as fbExtra
import odf_chain.format.generated.Manifest as fbManifest
import odf_chain.format.generated.MetadataBlock as fbMetadataBlock
import odf_chain.format.generated.Seed as fbSeed
import odf_chain.format.generated.SetDataSchema as fbSetDataSchema
import odf_chain.format.generated.Timestamp as fbTimestamp
from odf_chain.errors import FormatError
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
    OffsetInterval,
    Seed,
    SetAttachments,
    SetDataSchema,
    SetInfo,
    SetLicense,
    SetPollingSource,
    SetTransform,
    SetVocab,
    SourceState,
    Transformation,
    TransformationSubtype,
    TransformationType,
)
from odf_chain.format.codec import decode_block, encode_block, read_manifest
from odf_chain.format.did import DatasetId
from odf_chain.format.generated.AddPushSource import AddPushSourceT
from odf_chain.format.generated.AttachmentEmbedded import AttachmentEmbeddedT
from odf_chain.format.generated.Attachments import Attachments
from odf_chain.format.generated.AttachmentsEmbedded import AttachmentsEmbeddedT
from odf_chain.format.generated.DataType import DataType
from odf_chain.format.generated.EventTimeSource import EventTimeSource
from odf_chain.format.generated.EventTimeSourceFromPath import EventTimeSourceFromPathT
from odf_chain.format.generated.FetchStep import FetchStep
from odf_chain.format.generated.FetchStepUrl import FetchStepUrlT
from odf_chain.format.generated.MergeStrategy import MergeStrategy
from odf_chain.format.generated.MergeStrategyAppend import MergeStrategyAppendT
from odf_chain.format.generated.MergeStrategyLedger import MergeStrategyLedgerT
from odf_chain.format.generated.MergeStrategySnapshot import MergeStrategySnapshotT
from odf_chain.format.generated.MetadataBlock import MetadataBlockT
from odf_chain.format.generated.ReadStep import ReadStep
from odf_chain.format.generated.ReadStepCsv import ReadStepCsvT
from odf_chain.format.generated.ReadStepNdJson import ReadStepNdJsonT
from odf_chain.format.generated.RequestHeader import RequestHeaderT
from odf_chain.format.generated.SetAttachments import SetAttachmentsT
from odf_chain.format.generated.SetPollingSource import SetPollingSourceT
from odf_chain.format.generated.SetTransform import SetTransformT
from odf_chain.format.generated.SqlQueryStep import SqlQueryStepT
from odf_chain.format.generated.TemporalTable import TemporalTableT
from odf_chain.format.generated.Transform import Transform
from odf_chain.format.generated.TransformInput import TransformInputT
from odf_chain.format.generated.TransformSql import TransformSqlT
from odf_chain.format.multihash import Multihash
from odf_chain.format.plain_tables import ENUMS, LAYOUT, SCALARS, UNIONS, FieldType

KIND_METADATA_BLOCK = 0x400000
UINT64_MAX = 2**64 - 1

# ---------------------------------------------------------------------------------------------
# Strategies

UINT64 = st.integers(min_value=0, max_value=UINT64_MAX)
HASHES = st.builds(
    Multihash, st.sampled_from(["blake3", "sha3-256"]), st.binary(min_size=32, max_size=32)
)
TEXT = st.text(max_size=20)
UTC_TIMES = st.datetimes(
    min_value=datetime(1970, 1, 1),
    max_value=datetime(2100, 12, 31, 23, 59, 59, 999_999),
    timezones=st.just(UTC),
)
# Any fixed offset: the instant is what is stored, and aware datetimes compare by instant.
OFFSET_TIMES = st.datetimes(
    min_value=datetime(1970, 1, 2),
    max_value=datetime(2100, 12, 30),
    timezones=st.builds(
        timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
    ),
)
TIMES = UTC_TIMES | OFFSET_TIMES
DATASET_IDS = st.builds(DatasetId, st.binary(min_size=32, max_size=32))

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(TEXT, JSON_VALUES, max_size=4)


def opt(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | strategy


SLICES = st.builds(
    DataSlice,
    logical_hash=HASHES,
    physical_hash=HASHES,
    offset_interval=st.builds(OffsetInterval, UINT64, UINT64),
    size=UINT64,
)
CHECKPOINTS = st.builds(Checkpoint, physical_hash=HASHES, size=UINT64)
SOURCE_STATES = st.builds(SourceState, opt(TEXT), opt(TEXT), opt(TEXT))

ADD_DATA = st.builds(
    AddData,
    prev_checkpoint=opt(HASHES),
    prev_offset=opt(UINT64),
    new_data=opt(SLICES),
    new_checkpoint=opt(CHECKPOINTS),
    new_watermark=opt(TIMES),
    new_source_state=opt(SOURCE_STATES),
    extra=opt(JSON_OBJECTS),
)
EXECUTE_TRANSFORM = st.builds(
    ExecuteTransform,
    query_inputs=st.lists(
        st.builds(
            ExecuteTransformInput,
            dataset_id=opt(DATASET_IDS),
            prev_block_hash=opt(HASHES),
            new_block_hash=opt(HASHES),
            prev_offset=opt(UINT64),
            new_offset=opt(UINT64),
        ),
        max_size=3,
    ).map(tuple),
    prev_checkpoint=opt(HASHES),
    prev_offset=opt(UINT64),
    new_data=opt(SLICES),
    new_checkpoint=opt(CHECKPOINTS),
    new_watermark=opt(TIMES),
    extra=opt(JSON_OBJECTS),
)
TRANSFORMATIONS = st.builds(
    Transformation,
    type=st.sampled_from(TransformationType),
    subtype=st.sampled_from(TransformationSubtype),
    masking=st.booleans(),
    opaque=st.booleans(),
)
FIELD_OPERATIONS = st.builds(
    FieldOperation,
    name=TEXT,
    inputs=st.lists(st.builds(InputField, origin=TEXT, field=TEXT), max_size=3).map(tuple),
    outputs=st.lists(TEXT, max_size=3).map(tuple),
    transformation=TRANSFORMATIONS,
    description=opt(TEXT),
    writes=st.booleans(),
)
LINEAGE_INPUTS = st.builds(
    LineageInput,
    name=TEXT,
    uri=opt(TEXT),
    dataset_id=opt(DATASET_IDS),
    block_hash=opt(HASHES),
    content_hash=opt(HASHES),
)
ADD_FIELD_LINEAGE = st.builds(
    AddFieldLineage,
    run=st.builds(
        LineageRun,
        job_name=TEXT,
        run_id=TEXT,
        started_at=TIMES,
        ended_at=opt(TIMES),
        offsets=opt(st.builds(OffsetInterval, UINT64, UINT64)),
    ),
    inputs=st.lists(LINEAGE_INPUTS, max_size=3).map(tuple),
    operations=st.lists(FIELD_OPERATIONS, max_size=4).map(tuple),
)


def seq(strategy: st.SearchStrategy, max_size: int = 3) -> st.SearchStrategy:
    """A list or a tuple (SetTransform takes either and keeps tuples)."""
    items = st.lists(strategy, max_size=max_size)
    return items | items.map(tuple)


# SetTransform's parts as plain data; optional keys are sometimes left out.
SET_TRANSFORM = st.builds(
    SetTransform,
    inputs=seq(st.fixed_dictionaries({"dataset_ref": TEXT}, optional={"alias": opt(TEXT)})),
    transform=st.fixed_dictionaries(
        {"kind": st.just("TransformSql"), "engine": TEXT},
        optional={
            "version": opt(TEXT),
            "query": opt(TEXT),
            "queries": opt(
                seq(st.fixed_dictionaries({"query": TEXT}, optional={"alias": opt(TEXT)}))
            ),
            "temporal_tables": opt(
                seq(st.fixed_dictionaries({"name": TEXT, "primary_key": seq(TEXT)}), max_size=2)
            ),
        },
    ),
)


def _required(t: FieldType) -> bool:
    return t.required or (t.category in ("scalar", "enum") and not t.optional_scalar)


def _field_strategy(t: FieldType) -> st.SearchStrategy | None:
    """Values of one plain-data field, from format/plain_tables.py's layout (the bytes are
    checked against flatc's object API, not against that layout). None: left out
    (the structured DataSchema, which odf_chain does not write yet)."""
    category = t.category
    if category == "DataSchema":
        return None
    if category == "string":
        one = TEXT
    elif category == "bool":
        one = st.booleans()
    elif category == "scalar":
        low, high = SCALARS[t.name]
        one = st.integers(low, high)
    elif category == "enum":
        one = st.integers(0, len(ENUMS[t.name]) - 1)
    elif category == "union":
        one = st.one_of(*(_table_strategy(m, member=True) for m in UNIONS[t.name]))
    else:
        one = _table_strategy(t.name)
    return seq(one, max_size=2) if t.vector else one


def _table_strategy(table: str, *, member: bool = False) -> st.SearchStrategy:
    required: dict[str, st.SearchStrategy] = {"kind": st.just(table)} if member else {}
    optional: dict[str, st.SearchStrategy] = {}
    for name, t in LAYOUT[table]:
        strategy = _field_strategy(t)
        if strategy is None:
            continue
        if _required(t):
            required[name] = strategy
        else:
            optional[name] = opt(strategy)
    return st.fixed_dictionaries(required, optional=optional)


def _plain_event_strategy(cls: type) -> st.SearchStrategy:
    return _table_strategy(cls.__name__).map(lambda fields: cls(**fields))


SET_POLLING_SOURCE = _plain_event_strategy(SetPollingSource)
ADD_PUSH_SOURCE = _plain_event_strategy(AddPushSource)
SET_ATTACHMENTS = _plain_event_strategy(SetAttachments)
PLAIN_EVENTS = st.one_of(SET_POLLING_SOURCE, ADD_PUSH_SOURCE, SET_ATTACHMENTS)

EVENTS = st.one_of(
    ADD_DATA,
    ADD_FIELD_LINEAGE,
    EXECUTE_TRANSFORM,
    SET_TRANSFORM,
    PLAIN_EVENTS,
    st.builds(Seed, dataset_id=DATASET_IDS, dataset_kind=st.sampled_from(DatasetKind)),
    st.builds(SetVocab, opt(TEXT), opt(TEXT), opt(TEXT), opt(TEXT)),
    st.builds(
        SetInfo,
        description=opt(TEXT),
        keywords=opt(st.lists(TEXT, max_size=5).map(tuple)),
    ),
    st.builds(SetLicense, opt(TEXT), opt(TEXT), opt(TEXT), opt(TEXT)),
    st.builds(SetDataSchema, raw_arrow_schema=st.binary(max_size=300)),
    st.builds(DisablePushSource, source_name=TEXT),
    st.just(DisablePollingSource()),
)
BLOCKS = st.builds(
    MetadataBlock,
    system_time=TIMES,
    prev_block_hash=opt(HASHES),
    sequence_number=UINT64,
    event=EVENTS,
)

# ---------------------------------------------------------------------------------------------
# One field-lineage block with every part present, values chosen by hand

LINEAGE_UPSTREAM_ID = DatasetId(bytes(range(100, 132)))
LINEAGE_EVENT = AddFieldLineage(
    run=LineageRun(
        job_name="orders-daily",
        run_id="run-0042",
        started_at=datetime(2024, 3, 1, 2, 0, 0, 500, tzinfo=UTC),
        ended_at=datetime(2024, 3, 1, 2, 5, tzinfo=UTC),
        offsets=OffsetInterval(100, 199),
    ),
    inputs=(
        LineageInput(
            "customers",
            uri="file:///data/customers",
            dataset_id=LINEAGE_UPSTREAM_ID,
            block_hash=Multihash("sha3-256", b"\x11" * 32),
        ),
        LineageInput(
            "orders.csv", uri="s3://b/orders.csv", content_hash=Multihash("blake3", b"\x22" * 32)
        ),
    ),
    operations=(
        FieldOperation(
            "join",
            inputs=(
                InputField("orders.csv", "[version=2.0].[type=string].customer"),
                InputField("customers", "[version=2.0].[type=long].id"),
            ),
            outputs=("customer",),
            transformation=Transformation(TransformationType.INDIRECT, TransformationSubtype.JOIN),
            description="orders join customers on id",
            writes=False,
        ),
        FieldOperation(
            "mask",
            inputs=(InputField("join", "customer"),),
            outputs=("[version=2.0].[type=string].customer_hash",),
            transformation=Transformation(
                TransformationType.DIRECT, TransformationSubtype.TRANSFORMATION, masking=True
            ),
        ),
        FieldOperation(
            "udf",
            inputs=(InputField("orders.csv", "[version=2.0].[type=string].note"),),
            transformation=Transformation(opaque=True),
        ),
    ),
)
LINEAGE_BLOCK = MetadataBlock(
    datetime(2024, 3, 1, 2, 5, 1, tzinfo=UTC), Multihash("blake3", b"\x33" * 32), 12, LINEAGE_EVENT
)

# ---------------------------------------------------------------------------------------------
# Helpers: hand-built bytes


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _hand_content(
    event_type: int,
    pack_event: Callable[[flatbuffers.Builder], int] | None,
    *,
    prev: bytes | None = b"\x16\x20" + bytes(range(32)),
    sequence_number: int = 7,
    timestamp: tuple[int, int, int, int] | None = (2021, 32, 3600, 5000),
) -> bytes:
    """A MetadataBlock flatbuffer built with the generated bindings only."""
    b = flatbuffers.Builder(0)
    prev_off = None if prev is None else b.CreateByteVector(prev)
    event_off = None if pack_event is None else pack_event(b)
    fbMetadataBlock.Start(b)
    if timestamp is not None:
        fbMetadataBlock.AddSystemTime(b, fbTimestamp.CreateTimestamp(b, *timestamp))
    if prev_off is not None:
        fbMetadataBlock.AddPrevBlockHash(b, prev_off)
    fbMetadataBlock.AddSequenceNumber(b, sequence_number)
    fbMetadataBlock.AddEventType(b, event_type)
    if event_off is not None:
        fbMetadataBlock.AddEvent(b, event_off)
    b.Finish(fbMetadataBlock.End(b))
    return bytes(b.Output())


def _hand_manifest(
    content: bytes | None, *, kind: int = KIND_METADATA_BLOCK, version: int = 3
) -> bytes:
    b = flatbuffers.Builder(0)
    payload = None if content is None else b.CreateByteVector(content)
    fbManifest.Start(b)
    fbManifest.AddKind(b, kind)
    fbManifest.AddVersion(b, version)
    if payload is not None:
        fbManifest.AddContent(b, payload)
    b.Finish(fbManifest.End(b))
    return bytes(b.Output())


def _empty_add_data(b: flatbuffers.Builder) -> int:
    fbAddData.Start(b)
    return fbAddData.End(b)


def _packer(obj) -> Callable[[flatbuffers.Builder], int]:
    return obj.Pack


# ---------------------------------------------------------------------------------------------
# Round trips


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=BLOCKS)
def test_round_trip(block):
    data = encode_block(block)
    assert decode_block(data) == block
    # The envelope is the current one.
    assert read_manifest(data)[0] == 3


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=BLOCKS)
def test_bytes_follow_flatc_builder_order(block):
    """Every event odf_chain writes is laid out as flatc's object API packs it (the order kamu's
    serializer follows too: tests/test_vectors.py), new fields such as ExecuteTransform.extra
    included."""
    data = encode_block(block)
    assert _repacked_by_flatc_object_api(data) == read_manifest(data)[1]


@settings(max_examples=150, deadline=None)
@given(block=BLOCKS)
def test_header_readable_by_generated_bindings(block):
    """The encoder agrees with flatc's own reader on the block header."""
    data = encode_block(block)
    manifest = fbManifest.Manifest.GetRootAs(data, 0)
    assert manifest.Kind() == KIND_METADATA_BLOCK
    assert manifest.Version() == 3
    content = _content_via_bindings(data)
    mb = fbMetadataBlock.MetadataBlock.GetRootAs(content, 0)
    assert mb.SequenceNumber() == block.sequence_number
    expected_types = {
        AddData: 1,
        ExecuteTransform: 2,
        Seed: 3,
        SetPollingSource: 4,
        SetTransform: 5,
        SetVocab: 6,
        SetAttachments: 7,
        SetInfo: 8,
        SetLicense: 9,
        SetDataSchema: 10,
        AddPushSource: 11,
        DisablePushSource: 12,
        DisablePollingSource: 13,
        AddFieldLineage: 200,
    }
    assert mb.EventType() == expected_types[type(block.event)]
    if block.prev_block_hash is None:
        assert mb.PrevBlockHashIsNone()
    else:
        prefix = {"blake3": b"\x1e\x20", "sha3-256": b"\x16\x20"}[block.prev_block_hash.algorithm]
        raw = bytes(mb.PrevBlockHash(i) for i in range(mb.PrevBlockHashLength()))
        assert raw == prefix + block.prev_block_hash.digest_bytes
    ts = mb.SystemTime()
    utc = block.system_time.astimezone(UTC)
    start_of_year = datetime(utc.year, 1, 1, tzinfo=UTC)
    assert ts.Year() == utc.year
    assert ts.Ordinal() == (utc - start_of_year).days + 1
    seconds = (utc - utc.replace(hour=0, minute=0, second=0, microsecond=0)).seconds
    assert ts.SecondsFromMidnight() == seconds
    assert ts.Nanoseconds() == utc.microsecond * 1000


_FULL_ADD_DATA_FIELDS = {
    "prev_checkpoint": Multihash("blake3", bytes(range(32))),
    "prev_offset": 41,
    "new_data": DataSlice(
        logical_hash=Multihash("sha3-256", b"\x01" * 32),
        physical_hash=Multihash("blake3", b"\x02" * 32),
        offset_interval=OffsetInterval(42, 99),
        size=12345,
    ),
    "new_checkpoint": Checkpoint(Multihash("sha3-256", b"\x03" * 32), 77),
    "new_watermark": _utc(2024, 2, 29, 23, 59, 59, 123456),
    "new_source_state": SourceState("src", "odf/etag", "W/abc"),
    "extra": {"odf/x": {"nested": [1, 2.5, None, True, "s"]}, "b": {}},
}


@pytest.mark.parametrize(
    "present",
    list(itertools.product([False, True], repeat=len(_FULL_ADD_DATA_FIELDS))),
    ids=lambda p: "".join("1" if x else "0" for x in p),
)
def test_add_data_every_combination_of_optional_fields(present):
    fields = {
        name: value
        for (name, value), keep in zip(_FULL_ADD_DATA_FIELDS.items(), present, strict=True)
        if keep
    }
    block = MetadataBlock(_utc(2022, 6, 1), Multihash.digest("blake3", b"p"), 3, AddData(**fields))
    assert decode_block(encode_block(block)) == block


@pytest.mark.parametrize(
    "moment",
    [
        _utc(1970, 1, 1),
        _utc(1972, 12, 31, 23, 59, 59, 999_999),
        _utc(2000, 12, 31, 12),
        _utc(2020, 12, 31, 0, 0, 0, 1),
        _utc(2096, 12, 31, 23, 59, 59, 999_999),
        _utc(2100, 12, 31, 23, 59, 59, 999_999),  # 2100 is not a leap year
        _utc(2100, 3, 1),
        _utc(2024, 2, 29, 6, 30),
        _utc(2023, 12, 31, 23, 59, 59),
    ],
    ids=str,
)
def test_calendar_edges(moment):
    for sequence_number in (0, 1, UINT64_MAX):
        block = MetadataBlock(
            moment, None, sequence_number, AddData(new_watermark=moment - timedelta(days=1))
        )
        data = encode_block(block)
        assert decode_block(data) == block
        # Independent check of the Timestamp struct: ordinal is the 1-based day of the year.
        content = _content_via_bindings(data)
        ts = fbMetadataBlock.MetadataBlock.GetRootAs(content, 0).SystemTime()
        assert (ts.Year(), ts.Ordinal()) == (moment.year, moment.timetuple().tm_yday)
        assert ts.SecondsFromMidnight() == moment.hour * 3600 + moment.minute * 60 + moment.second
        assert ts.Nanoseconds() == moment.microsecond * 1000


def test_dec_31_of_leap_year_is_day_366():
    data = encode_block(MetadataBlock(_utc(2020, 12, 31), None, 0, DisablePollingSource()))
    ts = fbMetadataBlock.MetadataBlock.GetRootAs(_content_via_bindings(data), 0).SystemTime()
    assert ts.Ordinal() == 366


def _content_via_bindings(data: bytes) -> bytes:
    manifest = fbManifest.Manifest.GetRootAs(data, 0)
    return bytes(manifest.Content(i) for i in range(manifest.ContentLength()))


def test_seed_with_generated_id_round_trips():
    for kind in DatasetKind:
        block = MetadataBlock(_utc(2021, 1, 1), None, 0, Seed(DatasetId.generate(), kind))
        decoded = decode_block(encode_block(block))
        assert decoded == block
        assert decoded.event.dataset_id.to_did() == block.event.dataset_id.to_did()


def test_non_utc_time_is_stored_as_its_utc_instant():
    plus_two = timezone(timedelta(hours=2))
    local = datetime(2021, 1, 1, 1, 0, tzinfo=plus_two)  # = 2020-12-31T23:00Z, day 366
    decoded = decode_block(encode_block(MetadataBlock(local, None, 1, DisablePollingSource())))
    assert decoded.system_time == _utc(2020, 12, 31, 23)
    assert decoded.system_time.utcoffset() == timedelta(0)


# ---------------------------------------------------------------------------------------------
# Determinism


@settings(max_examples=150, deadline=None)
@given(block=BLOCKS)
def test_encoding_is_deterministic(block):
    assert encode_block(block) == encode_block(block)
    assert encode_block(copy.deepcopy(block)) == encode_block(block)


@settings(max_examples=200, deadline=None)
@given(first=BLOCKS, second=BLOCKS)
def test_different_blocks_give_different_bytes(first, second):
    assume(first != second)
    assert encode_block(first) != encode_block(second)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (SetInfo(keywords=None), SetInfo(keywords=())),
        (AddData(extra=None), AddData(extra={})),
        (ExecuteTransform(extra=None), ExecuteTransform(extra={})),
        (AddData(prev_offset=None), AddData(prev_offset=0)),
        (SetVocab(offset_column=None), SetVocab(offset_column="")),
        (SetDataSchema(raw_arrow_schema=b""), SetDataSchema(raw_arrow_schema=b"\x00")),
        (
            SetTransform(inputs=(), transform={"kind": "TransformSql", "engine": "e"}),
            SetTransform(
                inputs=(), transform={"kind": "TransformSql", "engine": "e", "queries": ()}
            ),
        ),
    ],
    ids=["keywords", "extra", "transform_extra", "prev_offset", "vocab", "raw_schema", "queries"],
)
def test_absent_and_empty_are_distinct(left, right):
    a = encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, left))
    b = encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, right))
    assert a != b
    assert decode_block(a).event == left
    assert decode_block(b).event == right


def test_small_changes_change_bytes():
    base = MetadataBlock(_utc(2020, 1, 1), Multihash.digest("sha3-256", b"p"), 5, AddData())
    variants = [
        MetadataBlock(_utc(2020, 1, 1, 0, 0, 0, 1), base.prev_block_hash, 5, AddData()),
        MetadataBlock(base.system_time, Multihash.digest("blake3", b"p"), 5, AddData()),
        MetadataBlock(base.system_time, None, 5, AddData()),
        MetadataBlock(base.system_time, base.prev_block_hash, 6, AddData()),
        MetadataBlock(base.system_time, base.prev_block_hash, 5, DisablePollingSource()),
    ]
    encoded = {encode_block(b) for b in [base, *variants]}
    assert len(encoded) == len(variants) + 1


# ---------------------------------------------------------------------------------------------
# Events kept as plain data, built here with flatc's object API (SetTransform is written too;
# the others are only read)


def _set_polling_source_t() -> SetPollingSourceT:
    event = SetPollingSourceT()
    fetch = FetchStepUrlT()
    fetch.url = "https://example.org/data.csv"
    event_time = EventTimeSourceFromPathT()
    event_time.pattern = r"data-(\d+)\.csv"
    event_time.timestampFormat = "%Y%m%d"
    fetch.eventTimeType = EventTimeSource.EventTimeSourceFromPath
    fetch.eventTime = event_time
    header = RequestHeaderT()
    header.name = "Accept"
    header.value = "text/csv"
    fetch.headers = [header]
    event.fetchType = FetchStep.FetchStepUrl
    event.fetch = fetch
    read = ReadStepCsvT()
    read.ddlSchema = ["id BIGINT", "name STRING"]
    read.separator = ";"
    read.header = True
    read.nullValue = "NA"
    event.readType = ReadStep.ReadStepCsv
    event.read = read
    merge = MergeStrategyLedgerT()
    merge.primaryKey = ["id"]
    event.mergeType = MergeStrategy.MergeStrategyLedger
    event.merge = merge
    return event


_SET_POLLING_SOURCE_EXPECTED = SetPollingSource(
    fetch={
        "kind": "FetchStepUrl",
        "url": "https://example.org/data.csv",
        "event_time": {
            "kind": "EventTimeSourceFromPath",
            "pattern": r"data-(\d+)\.csv",
            "timestamp_format": "%Y%m%d",
        },
        "cache": None,
        "headers": ({"name": "Accept", "value": "text/csv"},),
    },
    prepare=None,
    read={
        "kind": "ReadStepCsv",
        "ddl_schema": ("id BIGINT", "name STRING"),
        "separator": ";",
        "encoding": None,
        "quote": None,
        "escape": None,
        "header": True,
        "infer_schema": None,
        "null_value": "NA",
        "date_format": None,
        "timestamp_format": None,
        "schema": None,
    },
    preprocess=None,
    merge={"kind": "MergeStrategyLedger", "primary_key": ("id",)},
)


def _set_transform_t() -> SetTransformT:
    event = SetTransformT()
    left, right = TransformInputT(), TransformInputT()
    left.datasetRef, left.alias = "did:odf:fed01" + "ab" * 32, "left"
    right.datasetRef, right.alias = "other", None
    event.inputs = [left, right]
    sql = TransformSqlT()
    sql.engine = "datafusion"
    sql.query = "select * from left"
    step = SqlQueryStepT()
    step.alias = "tmp"
    step.query = "select 1"
    sql.queries = [step]
    temporal = TemporalTableT()
    temporal.name = "right"
    temporal.primaryKey = ["k1", "k2"]
    sql.temporalTables = [temporal]
    event.transformType = Transform.TransformSql
    event.transform = sql
    return event


_SET_TRANSFORM_EXPECTED = SetTransform(
    inputs=(
        {"dataset_ref": "did:odf:fed01" + "ab" * 32, "alias": "left"},
        {"dataset_ref": "other", "alias": None},
    ),
    transform={
        "kind": "TransformSql",
        "engine": "datafusion",
        "version": None,
        "query": "select * from left",
        "queries": ({"alias": "tmp", "query": "select 1"},),
        "temporal_tables": ({"name": "right", "primary_key": ("k1", "k2")},),
    },
)


def _add_push_source_t() -> AddPushSourceT:
    event = AddPushSourceT()
    event.sourceName = "ingest"
    read = ReadStepNdJsonT()
    read.ddlSchema = ["a INT"]
    read.encoding = "utf-8"
    event.readType = ReadStep.ReadStepNdJson
    event.read = read
    pre = TransformSqlT()
    pre.engine = "spark"
    pre.query = "select a from input"
    event.preprocessType = Transform.TransformSql
    event.preprocess = pre
    merge = MergeStrategySnapshotT()
    merge.primaryKey = ["a"]
    merge.compareColumns = ["b", "c"]
    event.mergeType = MergeStrategy.MergeStrategySnapshot
    event.merge = merge
    return event


_ADD_PUSH_SOURCE_EXPECTED = AddPushSource(
    source_name="ingest",
    read={
        "kind": "ReadStepNdJson",
        "ddl_schema": ("a INT",),
        "date_format": None,
        "encoding": "utf-8",
        "timestamp_format": None,
        "schema": None,
    },
    preprocess={
        "kind": "TransformSql",
        "engine": "spark",
        "version": None,
        "query": "select a from input",
        "queries": None,
        "temporal_tables": None,
    },
    merge={"kind": "MergeStrategySnapshot", "primary_key": ("a",), "compare_columns": ("b", "c")},
)


def _set_attachments_t() -> SetAttachmentsT:
    event = SetAttachmentsT()
    embedded = AttachmentsEmbeddedT()
    readme, license_ = AttachmentEmbeddedT(), AttachmentEmbeddedT()
    readme.path, readme.content = "README.md", "# Data\n\nÜber alles ✓"
    license_.path, license_.content = "LICENSE", ""
    embedded.items = [readme, license_]
    event.attachmentsType = Attachments.AttachmentsEmbedded
    event.attachments = embedded
    return event


_SET_ATTACHMENTS_EXPECTED = SetAttachments(
    attachments={
        "kind": "AttachmentsEmbedded",
        "items": (
            {"path": "README.md", "content": "# Data\n\nÜber alles ✓"},
            {"path": "LICENSE", "content": ""},
        ),
    }
)

PLAIN_DATA_CASES = {
    "SetPollingSource": (4, _set_polling_source_t, _SET_POLLING_SOURCE_EXPECTED),
    "SetTransform": (5, _set_transform_t, _SET_TRANSFORM_EXPECTED),
    "SetAttachments": (7, _set_attachments_t, _SET_ATTACHMENTS_EXPECTED),
    "AddPushSource": (11, _add_push_source_t, _ADD_PUSH_SOURCE_EXPECTED),
}


def _plain_data_block_bytes(name: str) -> bytes:
    type_id, make, _ = PLAIN_DATA_CASES[name]
    return _hand_manifest(_hand_content(type_id, _packer(make())))


@pytest.mark.parametrize("name", sorted(PLAIN_DATA_CASES))
def test_plain_data_event_decodes(name):
    _, _, expected = PLAIN_DATA_CASES[name]
    block = decode_block(_plain_data_block_bytes(name))
    assert type(block.event) is type(expected)
    assert block.event == expected
    assert block.event_name == name
    # The header around it decodes as built.
    assert block.system_time == _utc(2021, 2, 1, 1, 0, 0, 5)
    assert block.prev_block_hash == Multihash("sha3-256", bytes(range(32)))
    assert block.sequence_number == 7


@pytest.mark.parametrize("name", sorted(PLAIN_DATA_CASES))
def test_plain_data_event_built_by_bindings_re_encodes_to_the_same_bytes(name):
    data = _plain_data_block_bytes(name)
    decoded = decode_block(data)
    assert encode_block(decoded) == data


@pytest.mark.parametrize("name", sorted(set(PLAIN_DATA_CASES) - {"SetTransform"}))
def test_plain_data_event_without_its_required_parts_is_refused(name):
    event = type(PLAIN_DATA_CASES[name][2])()
    with pytest.raises(FormatError, match=rf"^{name}\.[a-z_]+: required, found nothing"):
        encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, event))


def test_add_push_source_append_merge_without_optional_parts():
    event = AddPushSourceT()
    event.sourceName = "s"
    event.mergeType = MergeStrategy.MergeStrategyAppend
    event.merge = MergeStrategyAppendT()
    block = decode_block(_hand_manifest(_hand_content(11, event.Pack)))
    assert block.event == AddPushSource(
        source_name="s", read=None, preprocess=None, merge={"kind": "MergeStrategyAppend"}
    )


# -- SetTransform: written as flatc's object API packs it -------------------------------------


def _set_transform_variant(change: Callable[[SetTransformT], None]) -> bytes:
    event = _set_transform_t()
    change(event)
    return _hand_manifest(_hand_content(5, event.Pack))


def _no_aliases(event: SetTransformT) -> None:
    for i in event.inputs:
        i.alias = None
    event.transform.queries[0].alias = None


def _empty_vectors(event: SetTransformT) -> None:
    event.inputs = []
    event.transform.queries = []
    event.transform.temporalTables[0].primaryKey = []


def _kamu_like(event: SetTransformT) -> None:
    # kamu's own SetTransform test shape: a query, no steps, no temporal tables.
    event.transform.version = "3.5.0"
    event.transform.queries = None
    event.transform.temporalTables = None


SET_TRANSFORM_VARIANTS = {
    "full": lambda e: None,
    "no_aliases": _no_aliases,
    "empty_vectors": _empty_vectors,
    "kamu_like": _kamu_like,
}


@pytest.mark.parametrize("name", sorted(SET_TRANSFORM_VARIANTS))
def test_set_transform_built_by_bindings_re_encodes_to_the_same_bytes(name):
    data = _set_transform_variant(SET_TRANSFORM_VARIANTS[name])
    block = decode_block(data)
    assert encode_block(block) == data
    assert decode_block(encode_block(block)) == block


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block=st.builds(
        MetadataBlock,
        system_time=TIMES,
        prev_block_hash=opt(HASHES),
        sequence_number=UINT64,
        event=SET_TRANSFORM,
    )
)
def test_set_transform_bytes_follow_flatc_builder_order(block):
    data = encode_block(block)
    assert _repacked_by_flatc_object_api(data) == read_manifest(data)[1]
    assert decode_block(data) == block
    assert encode_block(decode_block(data)) == data


def test_set_transform_built_by_hand_equals_its_decoded_form():
    """Left-out optional fields and lists are filled in and made tuples when the event is made,
    so what an append folds equals what a replay decodes."""
    by_hand = SetTransform(
        inputs=[{"dataset_ref": "orders"}],
        transform={
            "kind": "TransformSql",
            "engine": "spark",
            "queries": [{"query": "select 1"}],
            "temporal_tables": [{"name": "t", "primary_key": ["k"]}],
        },
    )
    assert by_hand == SetTransform(
        inputs=({"dataset_ref": "orders", "alias": None},),
        transform={
            "kind": "TransformSql",
            "engine": "spark",
            "version": None,
            "query": None,
            "queries": ({"alias": None, "query": "select 1"},),
            "temporal_tables": ({"name": "t", "primary_key": ("k",)},),
        },
    )
    block = MetadataBlock(_utc(2020, 1, 1), None, 1, by_hand)
    assert decode_block(encode_block(block)) == block


def test_set_transform_does_not_share_the_callers_dicts():
    given_input = {"dataset_ref": "orders"}
    event = SetTransform(inputs=(given_input,), transform={"kind": "TransformSql", "engine": "x"})
    assert given_input == {"dataset_ref": "orders"}
    assert event.inputs[0] is not given_input


def _set_transform_with(**changes: Any) -> SetTransform:
    """_SET_TRANSFORM_EXPECTED with ``inputs`` or ``transform`` keys replaced (None deletes)."""
    transform = dict(_SET_TRANSFORM_EXPECTED.transform)
    inputs = [dict(i) for i in _SET_TRANSFORM_EXPECTED.inputs]
    for key, value in changes.items():
        if key == "inputs":
            inputs = value
        elif key.startswith("input0_"):
            inputs[0][key.removeprefix("input0_")] = value
        else:
            transform[key] = value
    return SetTransform(inputs=inputs, transform=transform)


@pytest.mark.parametrize(
    ("event", "named"),
    [
        (
            SetTransform(transform=_SET_TRANSFORM_EXPECTED.transform),
            "SetTransform.inputs: expected a tuple, got nothing",
        ),
        (SetTransform(inputs=()), "SetTransform.transform: required"),
        (_set_transform_with(inputs="orders"), "SetTransform.inputs: expected a tuple, got str"),
        (
            _set_transform_with(inputs=["orders"]),
            "SetTransform.inputs[0]: expected a mapping, got str",
        ),
        (
            _set_transform_with(input0_dataset_ref=None),
            "SetTransform.inputs[0].dataset_ref: required",
        ),
        (
            _set_transform_with(input0_alias=3),
            "SetTransform.inputs[0].alias: expected text, got int",
        ),
        (_set_transform_with(input0_aliass="x"), "SetTransform.inputs[0]: unknown field 'aliass'"),
        (
            _set_transform_with(input0_alias="\ud800"),
            "SetTransform.inputs[0].alias: text is not encodable",
        ),
        (
            SetTransform(inputs=(), transform="select 1"),
            "SetTransform.transform.kind: expected 'TransformSql'",
        ),
        (
            _set_transform_with(kind="TransformPython"),
            "SetTransform.transform.kind: expected 'TransformSql'",
        ),
        (
            SetTransform(inputs=(), transform={"engine": "spark"}),
            "SetTransform.transform.kind: expected 'TransformSql'",
        ),
        (_set_transform_with(engine=None), "SetTransform.transform.engine: required"),
        (_set_transform_with(querry="x"), "SetTransform.transform: unknown field 'querry'"),
        (
            _set_transform_with(query=b"select"),
            "SetTransform.transform.query: expected text, got bytes",
        ),
        (
            _set_transform_with(queries={"query": "x"}),
            "SetTransform.transform.queries: expected a tuple, got dict",
        ),
        (
            _set_transform_with(queries=[{"alias": "a"}]),
            "SetTransform.transform.queries[0].query: required",
        ),
        (
            _set_transform_with(temporal_tables=[{"name": "t"}]),
            "SetTransform.transform.temporal_tables[0].primary_key: "
            "expected a tuple of text, got nothing",
        ),
        (
            _set_transform_with(temporal_tables=[{"name": "t", "primary_key": "k"}]),
            "SetTransform.transform.temporal_tables[0].primary_key: "
            "expected a tuple of text, got str",
        ),
        (
            _set_transform_with(temporal_tables=[{"name": "t", "primary_key": ("k", 1)}]),
            "SetTransform.transform.temporal_tables[0].primary_key[1]: expected text, got int",
        ),
        (
            _set_transform_with(temporal_tables=[{"primary_key": ("k",)}]),
            "SetTransform.transform.temporal_tables[0].name: required",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_set_transform_bad_values_are_refused_naming_the_field(event, named):
    with pytest.raises(FormatError, match=re.escape(named)):
        encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, event))


def test_set_transform_bad_value_control():
    event = _set_transform_with()
    assert event == _SET_TRANSFORM_EXPECTED
    block = MetadataBlock(_utc(2020, 1, 1), None, 1, event)
    assert decode_block(encode_block(block)) == block


# -- SetPollingSource, AddPushSource, SetAttachments: written as flatc's object API packs them --


def _sample(table: str, choice: dict[str, str], *, full: bool, member: bool = False) -> dict:
    """A plain-data value of ``table``: every field (``full``) or only the required ones, the
    union members ``choice`` names (else each union's first), vectors as lists of two."""
    out: dict[str, Any] = {"kind": table} if member else {}
    for name, t in LAYOUT[table]:
        if t.category == "DataSchema" or not (full or _required(t)):
            continue
        if t.category == "union":
            kind = choice.get(t.name, UNIONS[t.name][0])
            one: Any = _sample(kind, choice, full=full, member=True)
        elif t.category == "string":
            one = f"{name} ✓"
        elif t.category == "bool":
            one = False  # an optional bool present as false is written
        elif t.category == "scalar":
            one = SCALARS[t.name][1]
        elif t.category == "enum":
            one = len(ENUMS[t.name]) - 1
        else:
            one = _sample(t.name, choice, full=full)
        out[name] = [one, copy.deepcopy(one)] if t.vector else one
    return out


# Where each union sits in which event (the event's tables reach it).
_UNION_HOMES = {
    "SetPollingSource": (
        "FetchStep",
        "EventTimeSource",
        "SourceCaching",
        "PrepStep",
        "ReadStep",
        "Transform",
        "MergeStrategy",
    ),
    "AddPushSource": ("ReadStep", "Transform", "MergeStrategy"),
    "SetAttachments": ("Attachments",),
}
_EVENT_CLASSES = {"SetPollingSource": SetPollingSource, "AddPushSource": AddPushSource}
_EVENT_CLASSES["SetAttachments"] = SetAttachments
MEMBER_CASES = [
    (event, union, member, full)
    for event, unions in _UNION_HOMES.items()
    for union in unions
    for member in UNIONS[union]
    for full in (True, False)
]


def _member_event(event: str, union: str, member: str, full: bool) -> Any:
    choice = {union: member}
    if union in ("EventTimeSource", "SourceCaching"):
        choice["FetchStep"] = "FetchStepUrl"
    return _EVENT_CLASSES[event](**_sample(event, choice, full=full))


@pytest.mark.parametrize("table", sorted(LAYOUT))
def test_plain_layout_has_the_generated_tables_fields(table):
    """format/plain_tables.py lists each table's fields as flatc generated them from the schema
    (their order is proved by the bytes: the tests below compare with flatc's object API)."""
    module = importlib.import_module(f"odf_chain.format.generated.{table}")
    attrs = vars(getattr(module, f"{table}T")())
    generated = [a for a in attrs if not (a.endswith("Type") and a[:-4] in attrs)]
    assert [re.sub(r"(?<!^)(?=[A-Z])", "_", a).lower() for a in generated] == [
        name for name, _ in LAYOUT[table]
    ]
    for name, t in LAYOUT[table]:
        camel = re.sub(r"_(.)", lambda m: m.group(1).upper(), name)
        assert (f"{camel}Type" in attrs) == (t.category == "union"), name


def _generated_constants(name: str) -> dict[str, int]:
    module = importlib.import_module(f"odf_chain.format.generated.{name}")
    return {k: v for k, v in vars(getattr(module, name)).items() if not k.startswith("_")}


def test_plain_layout_unions_and_enums_are_the_generated_ones():
    for union, members in UNIONS.items():
        expected = {"NONE": 0, **{m: i + 1 for i, m in enumerate(members)}}
        assert _generated_constants(union) == expected
    for enum_name, values in ENUMS.items():
        assert _generated_constants(enum_name) == {v: i for i, v in enumerate(values)}


def test_every_union_member_is_in_a_member_case():
    covered = {(union, member) for _, union, member, _ in MEMBER_CASES}
    assert covered == {(u, m) for u, members in UNIONS.items() for m in members}


@pytest.mark.parametrize(
    ("event", "union", "member", "full"),
    MEMBER_CASES,
    ids=lambda v: v if isinstance(v, str) else ("full" if v else "required"),
)
def test_plain_data_union_member_bytes_follow_flatc_builder_order(event, union, member, full):
    block = MetadataBlock(_utc(2020, 1, 1), _hash(), 3, _member_event(event, union, member, full))
    data = encode_block(block)
    assert _repacked_by_flatc_object_api(data) == read_manifest(data)[1]
    assert decode_block(data) == block  # lists given, tuples read: equal once made
    assert encode_block(decode_block(data)) == data


def _hash() -> Multihash:
    return Multihash("sha3-256", bytes(range(32)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block=st.builds(
        MetadataBlock,
        system_time=TIMES,
        prev_block_hash=opt(HASHES),
        sequence_number=UINT64,
        event=PLAIN_EVENTS,
    )
)
def test_plain_data_event_bytes_follow_flatc_builder_order(block):
    data = encode_block(block)
    assert _repacked_by_flatc_object_api(data) == read_manifest(data)[1]
    assert decode_block(data) == block
    assert encode_block(decode_block(data)) == data


def test_plain_data_event_built_by_hand_equals_its_decoded_form():
    by_hand = SetPollingSource(
        fetch={"kind": "FetchStepUrl", "url": "https://example.org/data.csv"},
        prepare=[{"value": {"kind": "PrepStepPipe", "command": ["gunzip"]}}],
        read={"kind": "ReadStepCsv", "header": True},
        merge={"kind": "MergeStrategyLedger", "primary_key": ["id"]},
    )
    assert by_hand == SetPollingSource(
        fetch={
            "kind": "FetchStepUrl",
            "url": "https://example.org/data.csv",
            "event_time": None,
            "cache": None,
            "headers": None,
        },
        prepare=({"value": {"kind": "PrepStepPipe", "command": ("gunzip",)}},),
        read=dict(_SET_POLLING_SOURCE_EXPECTED.read, ddl_schema=None, separator=None)
        | {"null_value": None},
        preprocess=None,
        merge={"kind": "MergeStrategyLedger", "primary_key": ("id",)},
    )
    block = MetadataBlock(_utc(2020, 1, 1), None, 1, by_hand)
    assert decode_block(encode_block(block)) == block


def test_plain_data_event_does_not_share_the_callers_dicts():
    fetch = {"kind": "FetchStepUrl", "url": "u"}
    event = SetPollingSource(fetch=fetch)
    assert fetch == {"kind": "FetchStepUrl", "url": "u"}
    assert event.fetch is not fetch


def _polling(**changes: Any) -> SetPollingSource:
    """A full SetPollingSource (FetchStepUrl, a decompress step, a CSV read, a ledger) with the
    parts at ``a__b__c`` replaced (``None`` deletes the key)."""
    choice = {"PrepStep": "PrepStepDecompress", "MergeStrategy": "MergeStrategyLedger"}
    fields = _sample("SetPollingSource", choice, full=True)
    for path, value in changes.items():
        *parents, last = path.split("__")
        target: Any = fields
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        key: Any = int(last) if last.isdigit() else last
        if value is None:
            del target[key]
        else:
            target[key] = value
    return SetPollingSource(**fields)


def _push(**changes: Any) -> AddPushSource:
    fields = _sample("AddPushSource", {}, full=False) | changes
    return AddPushSource(**fields)


@pytest.mark.parametrize(
    ("event", "named"),
    [
        (SetPollingSource(), "SetPollingSource.fetch: required, found nothing"),
        (_polling(fetch=None), "SetPollingSource.fetch: required, found nothing"),
        (
            _polling(fetch__kind="FetchStepFtp"),
            "SetPollingSource.fetch.kind: expected 'FetchStepUrl' or 'FetchStepFilesGlob' or",
        ),
        (_polling(fetch="https://x"), "SetPollingSource.fetch.kind: expected 'FetchStepUrl'"),
        (_polling(fetch__url=None), "SetPollingSource.fetch.url: required, found nothing"),
        (_polling(fetch__urll="x"), "SetPollingSource.fetch: unknown field 'urll'"),
        (_polling(fetch__url=b"x"), "SetPollingSource.fetch.url: expected text, got bytes"),
        (_polling(fetch__url="\ud800"), "SetPollingSource.fetch.url: text is not encodable"),
        (
            _polling(fetch__headers={"name": "a", "value": "b"}),
            "SetPollingSource.fetch.headers: expected a tuple, got dict",
        ),
        (
            _polling(fetch__headers__0__value=None),
            "SetPollingSource.fetch.headers[0].value: required, found nothing",
        ),
        (
            _polling(fetch__headers__1="Accept: */*"),
            "SetPollingSource.fetch.headers[1]: expected a mapping, got str",
        ),
        (
            _polling(fetch__event_time__kind="EventTimeSourceFromName"),
            "SetPollingSource.fetch.event_time.kind: expected 'EventTimeSourceFromMetadata'",
        ),
        (
            _polling(prepare__0__value__format=2),
            "SetPollingSource.prepare[0].value.format: expected a CompressionFormat "
            "(0 Gzip, 1 Zip), got 2",
        ),
        (
            _polling(prepare__0__value__format=True),
            "SetPollingSource.prepare[0].value.format: expected a CompressionFormat",
        ),
        (
            _polling(prepare__0__value__format=None),
            "SetPollingSource.prepare[0].value.format: required, found nothing",
        ),
        (
            _polling(prepare__0__value=None),
            "SetPollingSource.prepare[0].value: required, found nothing",
        ),
        (
            _polling(prepare={"value": {"kind": "PrepStepPipe", "command": ["x"]}}),
            "SetPollingSource.prepare: expected a tuple, got dict",
        ),
        (_polling(read=None), "SetPollingSource.read: required, found nothing"),
        (_polling(read__header="yes"), "SetPollingSource.read.header: expected a bool, got str"),
        (
            _polling(read__ddl_schema="a INT"),
            "SetPollingSource.read.ddl_schema: expected a tuple of text, got str",
        ),
        (
            _polling(read__ddl_schema=["a INT", 3]),
            "SetPollingSource.read.ddl_schema[1]: expected text, got int",
        ),
        (
            _polling(read__schema={"fields": ()}),
            "SetPollingSource.read.schema: writing the structured DataSchema is not supported",
        ),
        (
            _polling(preprocess__kind="TransformPython"),
            "SetPollingSource.preprocess.kind: expected 'TransformSql', got 'TransformPython'",
        ),
        (
            _polling(preprocess__engine=None),
            "SetPollingSource.preprocess.engine: required, found nothing",
        ),
        (_polling(merge=None), "SetPollingSource.merge: required, found nothing"),
        (
            _polling(merge__primary_key=None),
            "SetPollingSource.merge.primary_key: expected a tuple of text, got nothing",
        ),
        (
            _polling(merge__primary_key=("a", 1)),
            "SetPollingSource.merge.primary_key[1]: expected text, got int",
        ),
        (
            SetPollingSource(
                **_sample("SetPollingSource", {"FetchStep": "FetchStepMqtt"}, full=True)
                | {"fetch": {"kind": "FetchStepMqtt", "host": "h", "port": 2**31, "topics": []}}
            ),
            "SetPollingSource.fetch.port: 2147483648 is outside the int32 range",
        ),
        (
            SetPollingSource(
                **_sample("SetPollingSource", {}, full=True)
                | {"fetch": {"kind": "FetchStepMqtt", "host": "h", "port": "1883", "topics": []}}
            ),
            "SetPollingSource.fetch.port: expected an int32, got str",
        ),
        (
            SetPollingSource(
                **_sample("SetPollingSource", {}, full=True)
                | {"fetch": {"kind": "FetchStepMqtt", "host": "h", "topics": []}}
            ),
            "SetPollingSource.fetch.port: required, found nothing",
        ),
        (
            SetPollingSource(
                **_sample("SetPollingSource", {}, full=True)
                | {"fetch": {"kind": "FetchStepEthereumLogs", "chain_id": -1}}
            ),
            "SetPollingSource.fetch.chain_id: -1 is outside the uint64 range",
        ),
        (
            SetPollingSource(
                **_sample("SetPollingSource", {}, full=True)
                | {"fetch": {"kind": "FetchStepMqtt", "host": "h", "port": 1, "topics": None}}
            ),
            "SetPollingSource.fetch.topics: expected a tuple, got nothing",
        ),
        (_push(source_name=None), "AddPushSource.source_name: required, found nothing"),
        (_push(source_name=7), "AddPushSource.source_name: expected text, got int"),
        (_push(read={"kind": "ReadStepXml"}), "AddPushSource.read.kind: expected 'ReadStepCsv'"),
        (_push(merge={"kind": "MergeStrategyAppend", "x": 1}), "AddPushSource.merge: unknown"),
        (SetAttachments(), "SetAttachments.attachments: required, found nothing"),
        (
            SetAttachments({"kind": "AttachmentsEmbedded"}),
            "SetAttachments.attachments.items: expected a tuple, got nothing",
        ),
        (
            SetAttachments({"kind": "AttachmentsEmbedded", "items": [{"path": "README.md"}]}),
            "SetAttachments.attachments.items[0].content: required, found nothing",
        ),
        (
            SetAttachments({"kind": "AttachmentsLinked", "items": []}),
            "SetAttachments.attachments.kind: expected 'AttachmentsEmbedded'",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_plain_data_bad_values_are_refused_naming_the_field(event, named):
    with pytest.raises(FormatError, match=re.escape(named)):
        encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, event))


def test_plain_data_bad_value_controls():
    for event in (
        _polling(),
        _push(),
        SetAttachments({"kind": "AttachmentsEmbedded", "items": []}),
    ):
        block = MetadataBlock(_utc(2020, 1, 1), None, 1, event)
        assert decode_block(encode_block(block)) == block


def _data_schema_packer(depth: int = 1) -> Callable[[flatbuffers.Builder], int]:
    """SetDataSchema carrying only the structured ``schema`` (field id 1).

    One field ``a`` whose type is ``depth`` nested DataTypeOption around nothing.
    """

    def pack(b: flatbuffers.Builder) -> int:
        inner, inner_type = 0, DataType.NONE
        for _ in range(depth):
            fbDataTypeOption.Start(b)
            if inner:
                fbDataTypeOption.AddInnerType(b, inner_type)
                fbDataTypeOption.AddInner(b, inner)
            inner, inner_type = fbDataTypeOption.End(b), DataType.DataTypeOption
        name = b.CreateString("a")
        fbDataField.Start(b)
        fbDataField.AddName(b, name)
        fbDataField.AddTypeType(b, inner_type)
        fbDataField.AddType(b, inner)
        field = fbDataField.End(b)
        fbDataSchema.StartFieldsVector(b, 1)
        b.PrependUOffsetTRelative(field)
        fields = b.EndVector()
        fbDataSchema.Start(b)
        fbDataSchema.AddFields(b, fields)
        schema = fbDataSchema.End(b)
        fbSetDataSchema.Start(b)
        fbSetDataSchema.AddSchema(b, schema)
        return fbSetDataSchema.End(b)

    return pack


def test_structured_data_schema_is_read_as_plain_data():
    block = decode_block(_hand_manifest(_hand_content(10, _data_schema_packer(2))))
    assert block.event == SetDataSchema(
        raw_arrow_schema=None,
        schema={
            "fields": (
                {
                    "name": "a",
                    "type": {
                        "kind": "DataTypeOption",
                        "inner": {"kind": "DataTypeOption", "inner": None},
                    },
                    "extra": None,
                },
            ),
            "extra": None,
        },
    )


# ---------------------------------------------------------------------------------------------
# Malformed input: always FormatError, never another exception


def _valid_blocks() -> dict[str, bytes]:
    full = MetadataBlock(
        _utc(2024, 12, 31, 23, 59, 59, 999_999),
        Multihash.digest("blake3", b"prev"),
        UINT64_MAX,
        AddData(**_FULL_ADD_DATA_FIELDS),
    )
    transform = MetadataBlock(
        _utc(2000, 2, 29),
        Multihash.digest("sha3-256", b"prev"),
        9,
        ExecuteTransform(
            query_inputs=(
                ExecuteTransformInput(
                    DatasetId(bytes(range(32))),
                    Multihash.digest("blake3", b"a"),
                    Multihash.digest("blake3", b"b"),
                    1,
                    2,
                ),
            ),
            new_watermark=_utc(2000, 1, 1),
        ),
    )
    blocks = {
        "add_data": encode_block(full),
        "execute_transform": encode_block(transform),
        "seed": encode_block(
            MetadataBlock(_utc(2020, 1, 1), None, 0, Seed(DatasetId(b"\x07" * 32)))
        ),
        "set_info": encode_block(
            MetadataBlock(_utc(2020, 1, 1), None, 1, SetInfo("d", ("k1", "k2")))
        ),
        "set_data_schema": encode_block(
            MetadataBlock(_utc(2020, 1, 1), None, 2, SetDataSchema(b"\x0c\x00\x00\x00" * 8))
        ),
        "disable_push_source": encode_block(
            MetadataBlock(_utc(2020, 1, 1), None, 1, DisablePushSource("x"))
        ),
    }
    blocks["add_field_lineage"] = encode_block(LINEAGE_BLOCK)
    for name in PLAIN_DATA_CASES:
        blocks[name] = _plain_data_block_bytes(name)
    blocks["structured_schema"] = _hand_manifest(_hand_content(10, _data_schema_packer(3)))
    return blocks


VALID_BLOCKS = _valid_blocks()


def _decode_or_format_error(data: bytes) -> MetadataBlock | None:
    try:
        block = decode_block(data)
    except FormatError:
        return None
    assert isinstance(block, MetadataBlock)
    return block


def test_valid_blocks_decode():
    # Control for the corruption tests: the unmodified bytes are fine.
    for data in VALID_BLOCKS.values():
        assert isinstance(decode_block(data), MetadataBlock)


@pytest.mark.parametrize("length", range(8))
def test_too_short(length):
    with pytest.raises(FormatError):
        decode_block(bytes(length))
    with pytest.raises(FormatError):
        decode_block(b"\xff" * length)
    with pytest.raises(FormatError):
        decode_block(VALID_BLOCKS["add_data"][:length])


@pytest.mark.parametrize("name", sorted(VALID_BLOCKS))
def test_every_truncation(name):
    data = VALID_BLOCKS[name]
    for n in range(len(data)):
        with pytest.raises(FormatError):
            decode_block(data[:n])


@pytest.mark.parametrize("name", sorted(VALID_BLOCKS))
def test_byte_flip_at_every_position(name):
    data = VALID_BLOCKS[name]
    for pos in range(len(data)):
        for mask in (0x01, 0x10, 0x80, 0xFF):
            mutated = bytearray(data)
            mutated[pos] ^= mask
            _decode_or_format_error(bytes(mutated))


@settings(max_examples=3000, deadline=None)
@given(data=st.binary(max_size=600))
def test_random_bytes(data):
    _decode_or_format_error(data)


@settings(max_examples=800, deadline=None)
@given(
    name=st.sampled_from(sorted(VALID_BLOCKS)),
    edits=st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), max_size=6),
    cut=st.integers(min_value=0, max_value=8),
)
def test_random_corruption_of_valid_blocks(name, edits, cut):
    mutated = bytearray(VALID_BLOCKS[name])
    for pos, value in edits:
        mutated[pos % len(mutated)] = value
    _decode_or_format_error(bytes(mutated[: len(mutated) - cut]))


def test_hand_built_block_decodes():
    # Control for the envelope tests below: the hand-built bytes are valid as such.
    block = decode_block(_hand_manifest(_hand_content(1, _empty_add_data)))
    assert block == MetadataBlock(
        _utc(2021, 2, 1, 1, 0, 0, 5), Multihash("sha3-256", bytes(range(32))), 7, AddData()
    )


@pytest.mark.parametrize("kind", [0x400001, 0, 1, -0x400000, 0x7FFFFFFFFFFFFFFF])
def test_unknown_manifest_kind(kind):
    data = _hand_manifest(_hand_content(1, _empty_add_data), kind=kind)
    with pytest.raises(FormatError, match="kind"):
        decode_block(data)
    with pytest.raises(FormatError):
        read_manifest(data)


def test_unknown_manifest_kind_is_named():
    with pytest.raises(FormatError, match="0x400001"):
        decode_block(_hand_manifest(_hand_content(1, _empty_add_data), kind=0x400001))


@pytest.mark.parametrize("version", [1, 4, 0, -1, 2**31 - 1])
def test_unknown_manifest_version(version):
    data = _hand_manifest(_hand_content(1, _empty_add_data), version=version)
    with pytest.raises(FormatError, match=rf"version {version}\b"):
        decode_block(data)


def test_manifest_without_content():
    with pytest.raises(FormatError):
        decode_block(_hand_manifest(None))


@pytest.mark.parametrize("content", [b"", b"\x00" * 3, b"\x00" * 8, b"\xff" * 64])
def test_manifest_with_garbage_content(content):
    with pytest.raises(FormatError):
        decode_block(_hand_manifest(content))


@pytest.mark.parametrize("event_type", [99, 0, 14, 255])
def test_unknown_event_type(event_type):
    data = _hand_manifest(_hand_content(event_type, _empty_add_data))
    with pytest.raises(FormatError, match=rf"\b{event_type}\b"):
        decode_block(data)


def test_missing_event_table():
    with pytest.raises(FormatError):
        decode_block(_hand_manifest(_hand_content(1, None)))


def test_missing_system_time():
    with pytest.raises(FormatError):
        decode_block(_hand_manifest(_hand_content(1, _empty_add_data, timestamp=None)))


@pytest.mark.parametrize(
    "timestamp",
    [
        (2021, 0, 0, 0),  # ordinal is 1-based
        (2021, 366, 0, 0),  # 2021 is not a leap year
        (2020, 367, 0, 0),
        (2021, 1, 86400, 0),
        (2021, 1, 0, 1_000_000_000),
        (0, 1, 0, 0),  # year 0 does not exist
        (-5, 1, 0, 0),
        (2**31 - 1, 1, 0, 0),
    ],
)
def test_invalid_timestamp(timestamp):
    with pytest.raises(FormatError):
        decode_block(_hand_manifest(_hand_content(1, _empty_add_data, timestamp=timestamp)))


@pytest.mark.parametrize(
    "prev",
    [
        b"\x12\x20" + bytes(32),  # sha2-256
        b"\x16\x20" + bytes(31),
        b"\x16\x21" + bytes(33),
        b"",
        b"\x1e",
    ],
)
def test_bad_prev_block_hash(prev):
    with pytest.raises(FormatError):
        decode_block(_hand_manifest(_hand_content(1, _empty_add_data, prev=prev)))


def test_unknown_multihash_code_is_named():
    data = _hand_manifest(_hand_content(1, _empty_add_data, prev=b"\x12\x20" + bytes(32)))
    with pytest.raises(FormatError, match="0x12"):
        decode_block(data)


def _add_data_with_extra(text: str) -> bytes:
    def pack(b: flatbuffers.Builder) -> int:
        entries = b.CreateString(text)
        fbExtra.Start(b)
        fbExtra.AddEntries(b, entries)
        extra = fbExtra.End(b)
        fbAddData.Start(b)
        fbAddData.AddExtra(b, extra)
        return fbAddData.End(b)

    return _hand_manifest(_hand_content(1, pack))


def _execute_transform_with_extra(text: str) -> bytes:
    def pack(b: flatbuffers.Builder) -> int:
        entries = b.CreateString(text)
        fbExtra.Start(b)
        fbExtra.AddEntries(b, entries)
        extra = fbExtra.End(b)
        fbExecuteTransform.StartQueryInputsVector(b, 0)
        inputs = b.EndVector()
        fbExecuteTransform.Start(b)
        fbExecuteTransform.AddQueryInputs(b, inputs)
        fbExecuteTransform.AddExtra(b, extra)
        return fbExecuteTransform.End(b)

    return _hand_manifest(_hand_content(2, pack))


WITH_EXTRA = {"AddData": _add_data_with_extra, "ExecuteTransform": _execute_transform_with_extra}


@pytest.mark.parametrize("event", sorted(WITH_EXTRA))
def test_extra_control(event):
    assert decode_block(WITH_EXTRA[event]('{"a":[1]}')).event.extra == {"a": [1]}


@pytest.mark.parametrize("event", sorted(WITH_EXTRA))
@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '"s"', "1", "null", "{'a': 1}"])
def test_extra_must_be_a_json_object(event, text):
    with pytest.raises(FormatError):
        decode_block(WITH_EXTRA[event](text))


@pytest.mark.parametrize(
    "event",
    [AddData(extra={"a": float("nan")}), ExecuteTransform(extra={"a": object()})],
    ids=["AddData", "ExecuteTransform"],
)
def test_unencodable_extra_is_refused_naming_the_event(event):
    name = type(event).__name__
    with pytest.raises(FormatError, match=rf"^{name}\.extra must be a JSON object"):
        encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, event))


def test_execute_transform_extra_is_written_as_add_data_writes_it():
    """The same ExtraAttributes table, JSON text and all, as the last field (id 6) of both."""
    extra = {"odf-chain.dev/run": {"id": "r1", "rows": 3}, "a/b": [1.5, None]}
    content = {
        event: _content_via_bindings(
            encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, cls(extra=extra)))
        )
        for event, cls in (("AddData", AddData), ("ExecuteTransform", ExecuteTransform))
    }
    texts = []
    for event, data in content.items():
        table = fbMetadataBlock.MetadataBlock.GetRootAs(data, 0).Event()
        module = fbAddData.AddData if event == "AddData" else fbExecuteTransform.ExecuteTransform
        reader = module()
        reader.Init(table.Bytes, table.Pos)
        assert _field_present(reader, 6)
        texts.append(reader.Extra().Entries())
    assert texts[0] == texts[1] == b'{"a/b":[1.5,null],"odf-chain.dev/run":{"id":"r1","rows":3}}'


def test_execute_transform_without_extra_has_no_field_6():
    # Absent extra leaves ODF's layout as it was (kamu's vector in test_vectors.py shows the
    # bytes); the vtable ends before the new field.
    event = ExecuteTransform(new_watermark=_utc(2020, 1, 1))
    data = _content_via_bindings(encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, event)))
    table = fbMetadataBlock.MetadataBlock.GetRootAs(data, 0).Event()
    reader = fbExecuteTransform.ExecuteTransform()
    reader.Init(table.Bytes, table.Pos)
    assert not _field_present(reader, 6)
    assert reader.Extra() is None


def test_deeply_nested_extra_json_is_a_format_error():
    depth = 100_000
    with pytest.raises(FormatError):
        decode_block(_add_data_with_extra('{"a":' + "[" * depth + "]" * depth + "}"))


def test_deeply_nested_structured_schema_is_a_format_error():
    with pytest.raises(FormatError):
        decode_block(_hand_manifest(_hand_content(10, _data_schema_packer(5000))))


def _seed(dataset_id: bytes | None, kind: int) -> bytes:
    def pack(b: flatbuffers.Builder) -> int:
        raw = None if dataset_id is None else b.CreateByteVector(dataset_id)
        fbSeed.Start(b)
        if raw is not None:
            fbSeed.AddDatasetId(b, raw)
        fbSeed.AddDatasetKind(b, kind)
        return fbSeed.End(b)

    return _hand_manifest(_hand_content(3, pack))


def test_seed_control():
    event = decode_block(_seed(b"\xed\x01" + bytes(32), 1)).event
    assert event == Seed(DatasetId(bytes(32)), DatasetKind.DERIVATIVE)


@pytest.mark.parametrize(
    ("dataset_id", "kind"),
    [
        (None, 0),
        (b"\xed\x01" + bytes(32), 2),
        (b"\xed\x01" + bytes(32), -1),
        (b"\xed\x02" + bytes(32), 0),
        (b"\xed\x01" + bytes(31), 0),
    ],
)
def test_bad_seed(dataset_id, kind):
    with pytest.raises(FormatError):
        decode_block(_seed(dataset_id, kind))


def test_set_data_schema_with_neither_form():
    def pack(b: flatbuffers.Builder) -> int:
        fbSetDataSchema.Start(b)
        return fbSetDataSchema.End(b)

    with pytest.raises(FormatError):
        decode_block(_hand_manifest(_hand_content(10, pack)))


def test_invalid_utf8_string():
    def pack(b: flatbuffers.Builder) -> int:
        entries = b.CreateByteVector(b"\xff\xfe")  # a string is a byte vector on the wire
        fbExtra.Start(b)
        fbExtra.AddEntries(b, entries)
        extra = fbExtra.End(b)
        fbAddData.Start(b)
        fbAddData.AddExtra(b, extra)
        return fbAddData.End(b)

    with pytest.raises(FormatError):
        decode_block(_hand_manifest(_hand_content(1, pack)))


# -- encoder input errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "block",
    [
        MetadataBlock(datetime(2020, 1, 1), None, 1, AddData()),
        MetadataBlock(_utc(2020, 1, 1), None, 1, AddData(new_watermark=datetime(2020, 1, 1))),
        MetadataBlock(
            _utc(2020, 1, 1), None, 1, ExecuteTransform(new_watermark=datetime(2020, 1, 1))
        ),
    ],
    ids=["system_time", "add_data_watermark", "execute_transform_watermark"],
)
def test_naive_datetime_is_refused(block):
    with pytest.raises(FormatError, match="naive"):
        encode_block(block)


def test_negative_sequence_number_is_refused():
    with pytest.raises(FormatError):
        encode_block(MetadataBlock(_utc(2020, 1, 1), None, -1, AddData()))


@pytest.mark.parametrize("version", [2, 4])
def test_only_current_version_is_written(version):
    with pytest.raises(FormatError):
        encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, AddData()), version=version)


def test_set_data_schema_with_neither_form_is_not_written():
    with pytest.raises(FormatError, match="raw_arrow_schema, schema or both"):
        encode_block(MetadataBlock(_utc(2020, 1, 1), None, 1, SetDataSchema()))


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ([], "SetDataSchema.schema: expected a mapping"),
        ({"fields": (), "columns": ()}, "unknown field 'columns'"),
        ({"fields": [{"name": "a", "type": {"kind": "Int64"}}]}, r"fields\[0\].type.kind"),
        (
            {"fields": [{"name": "a", "type": {"kind": "DataTypeTime", "unit": "ms"}}]},
            r"fields\[0\].type.unit: expected a number",
        ),
        (
            {"fields": [{"name": "a", "type": {"kind": "DataTypeBinary", "fixed_length": -1}}]},
            "fixed_length: -1 is outside",
        ),
        (
            {"fields": [{"name": "a", "type": {"kind": "DataTypeDecimal", "scale": 2}}]},
            "precision: required",
        ),
        (
            {"fields": [{"name": "a", "type": {"kind": "DataTypeMap", "keys_sorted": 1}}]},
            "keys_sorted: expected a bool",
        ),
        ({"fields": [{"name": 7, "type": None}]}, r"fields\[0\].name: expected text"),
        ({"fields": [{"name": "a", "extra": {"entries": "{}", "x": 1}}]}, "unknown field 'x'"),
        ({"fields": {"name": "a"}}, "fields: expected a tuple"),
    ],
)
def test_malformed_structured_schema_is_refused_by_path(schema, fragment):
    block = MetadataBlock(_utc(2020, 1, 1), None, 1, SetDataSchema(schema=schema))
    with pytest.raises(FormatError, match=fragment):
        encode_block(block)


_STRUCTURED = SetDataSchema.from_arrow(
    pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("system_time", pa.timestamp("ms", tz="UTC"), nullable=False),
            pa.field("tags", pa.list_(pa.field("element", pa.string()))),
            pa.field("attrs", pa.map_(pa.string(), pa.decimal128(10, 2), keys_sorted=True)),
            pa.field(
                "s", pa.struct([pa.field("b", pa.large_binary()), pa.field("d", pa.date64())])
            ),
            pa.field("t", pa.time64("ns")),
            pa.field("blob", pa.binary(16), nullable=False),
        ]
    )
)


@pytest.mark.parametrize(
    "event",
    [
        _STRUCTURED,
        SetDataSchema(schema=_STRUCTURED.schema),
        SetDataSchema(raw_arrow_schema=_STRUCTURED.raw_arrow_schema),
    ],
    ids=["both", "structured-only", "raw-only"],
)
def test_set_data_schema_forms_round_trip_in_flatc_order(event):
    """Each form the event carries, and only those, is written; the bytes are flatc's."""
    block = MetadataBlock(_utc(2020, 1, 1), None, 1, event)
    data = encode_block(block)
    assert decode_block(data) == block
    assert encode_block(decode_block(data)) == data
    assert _repacked_by_flatc_object_api(data) == read_manifest(data)[1]
    table = fbMetadataBlock.MetadataBlock.GetRootAs(read_manifest(data)[1], 0).Event()
    sds = fbSetDataSchema.SetDataSchema()
    sds.Init(table.Bytes, table.Pos)
    assert sds.RawArrowSchemaIsNone() == (event.raw_arrow_schema is None)
    assert (sds.Schema() is None) == (event.schema is None)


def _timestamp_schema_by_hand(b: flatbuffers.Builder) -> int:
    """A structured-only SetDataSchema built with explicit builder calls in ODF's reference
    order (strings and sub-tables first, in field order; then fields in field order), as another
    ODF tool writes it: one column ``ts``, an optional timestamp(us, "+01:00") with an extra."""
    name = b.CreateString("ts")
    timezone = b.CreateString("+01:00")
    fbDataTypeTimestamp.Start(b)
    fbDataTypeTimestamp.AddUnit(b, 2)
    fbDataTypeTimestamp.AddTimezone(b, timezone)
    timestamp = fbDataTypeTimestamp.End(b)
    fbDataTypeOption.Start(b)
    fbDataTypeOption.AddInnerType(b, DataType.DataTypeTimestamp)
    fbDataTypeOption.AddInner(b, timestamp)
    option = fbDataTypeOption.End(b)
    entries = b.CreateString('{"example.com/note":"x"}')
    fbExtra.Start(b)
    fbExtra.AddEntries(b, entries)
    extra = fbExtra.End(b)
    fbDataField.Start(b)
    fbDataField.AddName(b, name)
    fbDataField.AddTypeType(b, DataType.DataTypeOption)
    fbDataField.AddType(b, option)
    fbDataField.AddExtra(b, extra)
    field = fbDataField.End(b)
    fbDataSchema.StartFieldsVector(b, 1)
    b.PrependUOffsetTRelative(field)
    fields = b.EndVector()
    fbDataSchema.Start(b)
    fbDataSchema.AddFields(b, fields)
    schema = fbDataSchema.End(b)
    fbSetDataSchema.Start(b)
    fbSetDataSchema.AddSchema(b, schema)
    return fbSetDataSchema.End(b)


def test_structured_schema_strings_that_are_not_utf8_re_encode_as_read():
    """The decoder keeps such a name as bytes (the schema-valid rule refuses it, naming the
    field); writing the event back gives the block's own bytes, not a re-spelt name."""

    def pack(b: flatbuffers.Builder) -> int:
        name = b.CreateString(b"caf\xe9")  # as a string: NUL-terminated
        fbDataField.Start(b)
        fbDataField.AddName(b, name)
        field = fbDataField.End(b)
        fbDataSchema.StartFieldsVector(b, 1)
        b.PrependUOffsetTRelative(field)
        fields = b.EndVector()
        fbDataSchema.Start(b)
        fbDataSchema.AddFields(b, fields)
        schema = fbDataSchema.End(b)
        fbSetDataSchema.Start(b)
        fbSetDataSchema.AddSchema(b, schema)
        return fbSetDataSchema.End(b)

    data = _hand_manifest(_hand_content(10, pack))
    block = decode_block(data)
    assert block.event.schema["fields"][0]["name"] == b"caf\xe9"
    assert encode_block(block) == data


def test_structured_schema_of_another_tool_re_encodes_to_its_bytes():
    data = _hand_manifest(_hand_content(10, _timestamp_schema_by_hand))
    block = decode_block(data)
    assert block.event.raw_arrow_schema is None
    assert block.event.to_arrow() == pa.schema([pa.field("ts", pa.timestamp("us", tz="+01:00"))])
    assert encode_block(block) == data


def test_manifest_struct_layout_is_flatbuffers():
    """Sanity: the stored bytes start with a root uoffset inside the buffer."""
    data = VALID_BLOCKS["add_data"]
    (root,) = struct.unpack_from("<I", data, 0)
    assert 4 <= root < len(data)


# ---------------------------------------------------------------------------------------------
# Field lineage (AddFieldLineage, union id 200)

LINEAGE_BLOCKS = st.builds(
    MetadataBlock,
    system_time=TIMES,
    prev_block_hash=opt(HASHES),
    sequence_number=UINT64,
    event=ADD_FIELD_LINEAGE,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=LINEAGE_BLOCKS)
def test_lineage_round_trip_and_identical_re_encoding(block):
    data = encode_block(block)
    decoded = decode_block(data)
    assert decoded == block
    assert encode_block(decoded) == data


def _repacked_by_flatc_object_api(data: bytes) -> bytes:
    """The block content unpacked and packed again by flatc's generated object API."""
    content = read_manifest(data)[1]
    builder = flatbuffers.Builder(0)
    builder.Finish(MetadataBlockT.InitFromPackedBuf(content, 0).Pack(builder))
    return bytes(builder.Output())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=LINEAGE_BLOCKS)
def test_lineage_bytes_follow_flatc_builder_order(block):
    """flatc's object API packs every table as ODF's reference does (vectors, strings and
    sub-tables first, in field order; defaults omitted): our bytes must be exactly its bytes."""
    data = encode_block(block)
    assert _repacked_by_flatc_object_api(data) == read_manifest(data)[1]


def test_lineage_block_read_by_generated_bindings():
    content = _content_via_bindings(encode_block(LINEAGE_BLOCK))
    mb = fbMetadataBlock.MetadataBlock.GetRootAs(content, 0)
    assert mb.EventType() == 200
    assert mb.SequenceNumber() == 12
    table = mb.Event()
    event = fbAddFieldLineage.AddFieldLineage()
    event.Init(table.Bytes, table.Pos)

    run = event.Run()
    assert run.JobName() == b"orders-daily"
    assert run.RunId() == b"run-0042"
    started = run.StartedAt()
    # 2024-03-01 is day 31 + 29 + 1 = 61 of a leap year; 02:00:00.0005 = 7200 s + 500,000 ns.
    assert (started.Year(), started.Ordinal(), started.SecondsFromMidnight()) == (2024, 61, 7200)
    assert started.Nanoseconds() == 500_000
    assert run.EndedAt().SecondsFromMidnight() == 7500
    assert (run.Offsets().Start(), run.Offsets().End()) == (100, 199)

    assert event.InputsLength() == 2
    customers = event.Inputs(0)
    assert customers.Name() == b"customers"
    assert customers.Uri() == b"file:///data/customers"
    assert customers.DatasetIdAsNumpy().tobytes() == b"\xed\x01" + bytes(range(100, 132))
    assert customers.BlockHashAsNumpy().tobytes() == b"\x16\x20" + b"\x11" * 32
    assert customers.ContentHashIsNone()
    orders = event.Inputs(1)
    assert orders.DatasetIdIsNone() and orders.BlockHashIsNone()
    assert orders.ContentHashAsNumpy().tobytes() == b"\x1e\x20" + b"\x22" * 32

    assert event.OperationsLength() == 3
    join = event.Operations(0)
    assert join.Name() == b"join"
    assert [(join.Inputs(i).Origin(), join.Inputs(i).Field()) for i in range(2)] == [
        (b"orders.csv", b"[version=2.0].[type=string].customer"),
        (b"customers", b"[version=2.0].[type=long].id"),
    ]
    assert [join.Outputs(i) for i in range(join.OutputsLength())] == [b"customer"]
    assert (join.Transformation().Type(), join.Transformation().Subtype()) == (
        1,
        3,
    )  # INDIRECT JOIN
    assert join.Description() == b"orders join customers on id"
    assert join.Writes() is False
    mask = event.Operations(1)
    assert mask.Writes() is True
    assert mask.Transformation().Subtype() == 1  # TRANSFORMATION
    assert mask.Transformation().Masking() is True
    assert mask.Transformation().Opaque() is False
    assert mask.Description() is None
    udf = event.Operations(2)
    assert udf.OutputsLength() == 0 and not udf.OutputsIsNone()  # a drop: present and empty
    assert udf.Transformation().Opaque() is True


def _field_present(table, slot: int) -> bool:
    return table._tab.Offset(4 + 2 * slot) != 0


def test_lineage_defaults_are_not_written():
    content = _content_via_bindings(encode_block(LINEAGE_BLOCK))
    table = fbMetadataBlock.MetadataBlock.GetRootAs(content, 0).Event()
    event = fbAddFieldLineage.AddFieldLineage()
    event.Init(table.Bytes, table.Pos)
    join, mask, udf = (event.Operations(i) for i in range(3))
    assert _field_present(join, 5)  # writes=False differs from the schema default (true)
    assert not _field_present(mask, 5)  # writes=True is the default
    udf_transformation = udf.Transformation()
    assert [_field_present(udf_transformation, s) for s in range(4)] == [False, False, False, True]
    assert not _field_present(mask.Transformation(), 0)  # DIRECT = 0, the default
    assert _field_present(mask.Transformation(), 1)


def test_lineage_block_re_encodes_to_the_same_bytes():
    data = encode_block(LINEAGE_BLOCK)
    assert decode_block(data) == LINEAGE_BLOCK
    assert encode_block(decode_block(data)) == data


def _lineage_variant(change: Callable[[Any], None]) -> bytes:
    """LINEAGE_BLOCK as flatc's object API sees it, changed by ``change``, packed again."""
    content = read_manifest(encode_block(LINEAGE_BLOCK))[1]
    block = MetadataBlockT.InitFromPackedBuf(content, 0)
    change(block.event)
    builder = flatbuffers.Builder(0)
    builder.Finish(block.Pack(builder))
    return _hand_manifest(bytes(builder.Output()))


def test_lineage_variant_control():
    assert decode_block(_lineage_variant(lambda e: None)) == LINEAGE_BLOCK


def _set(path: str, value: Any) -> Callable[[Any], None]:
    def change(event: Any) -> None:
        *parents, last = path.split(".")
        target = event
        for part in parents:
            target = target[int(part)] if part.isdigit() else getattr(target, part)
        setattr(target, last, value)

    return change


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_set("run", None), "AddFieldLineage.run"),
        (_set("run.jobName", None), "LineageRun.job_name"),
        (_set("run.runId", None), "LineageRun.run_id"),
        (_set("run.startedAt", None), "LineageRun.started_at"),
        (_set("inputs.1.name", None), "LineageInput.name"),
        (_set("operations.0.name", None), "FieldOperation.name"),
        (_set("operations.0.inputs.1.origin", None), "InputField.origin"),
        (_set("operations.1.inputs.0.field", None), "InputField.field"),
        (_set("operations.0.transformation.subtype", 9), "Transformation.subtype 9"),
        (_set("operations.0.transformation.type", 2), "Transformation.type 2"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_lineage_block_missing_or_unknown_parts(change, named):
    with pytest.raises(FormatError, match=re.escape(named)):
        decode_block(_lineage_variant(change))


def test_lineage_absent_vectors_read_as_empty():
    def strip(event: Any) -> None:
        event.inputs = None
        event.operations[0].inputs = None
        event.operations[0].outputs = None
        event.operations[0].transformation = None

    decoded = decode_block(_lineage_variant(strip)).event
    assert decoded.inputs == ()
    assert decoded.operations[0].inputs == ()
    assert decoded.operations[0].outputs == ()
    assert decoded.operations[0].transformation == Transformation()


def _with_event(change: Callable[[AddFieldLineage], AddFieldLineage]) -> MetadataBlock:
    return dataclasses.replace(LINEAGE_BLOCK, event=change(LINEAGE_EVENT))


def _op(**changes: Any) -> Callable[[AddFieldLineage], AddFieldLineage]:
    return lambda e: dataclasses.replace(
        e, operations=(dataclasses.replace(e.operations[0], **changes), *e.operations[1:])
    )


def _run(**changes: Any) -> Callable[[AddFieldLineage], AddFieldLineage]:
    return lambda e: dataclasses.replace(e, run=dataclasses.replace(e.run, **changes))


def _input(**changes: Any) -> Callable[[AddFieldLineage], AddFieldLineage]:
    return lambda e: dataclasses.replace(
        e, inputs=(dataclasses.replace(e.inputs[0], **changes), *e.inputs[1:])
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda e: dataclasses.replace(e, run=None), "AddFieldLineage.run: required"),
        (_run(job_name=None), "AddFieldLineage.run.job_name: required"),
        (_run(started_at=None), "AddFieldLineage.run.started_at: required"),
        (_run(started_at=datetime(2024, 1, 1)), "AddFieldLineage.run.started_at: timestamps"),
        (_run(ended_at=datetime(2024, 1, 1)), "AddFieldLineage.run.ended_at: timestamps"),
        (_run(offsets=OffsetInterval(-1, 5)), "AddFieldLineage.run.offsets.start: -1"),
        (_run(offsets=OffsetInterval(0, 2**64)), "AddFieldLineage.run.offsets.end"),
        (_run(offsets=(0, 5)), "AddFieldLineage.run.offsets: expected OffsetInterval"),
        (_run(run_id=7), "AddFieldLineage.run.run_id: expected str"),
        (_input(name=None), "AddFieldLineage.inputs[0].name: required"),
        (_input(block_hash=b"\x16\x20" + bytes(32)), "AddFieldLineage.inputs[0].block_hash"),
        (_input(dataset_id="did:odf:x"), "AddFieldLineage.inputs[0].dataset_id"),
        (_input(uri="\ud800"), "AddFieldLineage.inputs[0].uri: text is not encodable"),
        (
            lambda e: dataclasses.replace(e, inputs=list(e.inputs)),
            "AddFieldLineage.inputs: expected a tuple",
        ),
        (
            lambda e: dataclasses.replace(e, operations=("join",)),
            "AddFieldLineage.operations[0]: expected FieldOperation",
        ),
        (_op(writes=1), "AddFieldLineage.operations[0].writes: expected bool"),
        (_op(writes=None), "AddFieldLineage.operations[0].writes: required"),
        (_op(outputs=("a", None)), "AddFieldLineage.operations[0].outputs[1]: required"),
        (_op(outputs="abc"), "AddFieldLineage.operations[0].outputs: expected a tuple"),
        (_op(inputs=(("a", "b"),)), "AddFieldLineage.operations[0].inputs[0]: expected InputField"),
        (
            _op(transformation=Transformation(subtype=3)),
            "AddFieldLineage.operations[0].transformation.subtype: "
            "expected a TransformationSubtype",
        ),
        (
            _op(transformation=Transformation(type=TransformationSubtype.JOIN)),
            "AddFieldLineage.operations[0].transformation.type: expected a TransformationType",
        ),
        (
            _op(transformation=Transformation(masking="no")),
            "AddFieldLineage.operations[0].transformation.masking: expected bool",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_lineage_bad_values_are_refused_naming_the_field(change, named):
    with pytest.raises(FormatError, match=re.escape(named)):
        encode_block(_with_event(change))


def test_lineage_bad_value_control():
    # The helpers themselves build a valid block when they change nothing.
    assert decode_block(encode_block(_with_event(_op()))) == LINEAGE_BLOCK
    assert decode_block(encode_block(_with_event(_run()))) == LINEAGE_BLOCK
    assert decode_block(encode_block(_with_event(_input()))) == LINEAGE_BLOCK


@pytest.mark.parametrize("version", [2, 3])
def test_the_hand_packed_manifest_is_the_builders(version: int) -> None:
    """The Manifest envelope packed by hand equals, byte for byte, what flatbuffers' own
    Builder makes of the same fields, for every content length mod 8 and sizes around the
    limits of the alignment arithmetic."""
    import os

    from odf_chain.format import codec
    from odf_chain.format.generated import Manifest as fbManifest

    def builder(content: bytes) -> bytes:
        b = flatbuffers.Builder(len(content) + 64)
        payload = b.CreateByteVector(content)
        fbManifest.Start(b)
        fbManifest.AddKind(b, codec.MANIFEST_KIND_METADATA_BLOCK)
        fbManifest.AddVersion(b, version)
        fbManifest.AddContent(b, payload)
        b.Finish(fbManifest.End(b))
        return bytes(b.Output())

    for size in [*range(0, 130), 255, 256, 257, 4093, 65_536, 65_537]:
        content = os.urandom(size)
        assert codec._wrap_manifest(content, version) == builder(content), size


# ---------------------------------------------------------------------------------------------
# The encoder's builder (odf_chain.format.builder): the stock builder's bytes, faster


def _encoded_with(builder_class: type[flatbuffers.Builder], block, alignment: int) -> bytes:
    from odf_chain.format.block_encoder import BlockEncoder

    return BlockEncoder(alignment, builder_class).block(block)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=BLOCKS | LINEAGE_BLOCKS, alignment=st.sampled_from([4, 1]))
def test_fast_builder_writes_the_stock_builders_bytes(block, alignment):
    """Every event type, both timestamp alignments (current and legacy): the same calls give
    the same bytes, vtables shared alike (several tables of one shape in a block)."""
    from odf_chain.format.builder import Builder

    assert _encoded_with(Builder, block, alignment) == _encoded_with(
        flatbuffers.Builder, block, alignment
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=BLOCKS | LINEAGE_BLOCKS, initial=st.sampled_from([0, 1, 7, 64]))
def test_fast_builder_grows_its_buffer_as_the_stock_one(block, initial):
    """Packed by flatc's object API into a buffer too small from the start, so it grows in the
    middle of vtables, strings and vectors: the bytes are still the stock builder's."""
    from odf_chain.format.builder import Builder

    content = read_manifest(encode_block(block))[1]
    packed = []
    for builder in (Builder(initial), flatbuffers.Builder(initial)):
        builder.Finish(MetadataBlockT.InitFromPackedBuf(content, 0).Pack(builder))
        packed.append(bytes(builder.Output()))
    assert packed[0] == packed[1]


@pytest.mark.parametrize(
    ("slot", "value", "error"),
    [
        ("PrependUint8Slot", 256, struct.error),
        ("PrependInt32Slot", 2**31, struct.error),
        ("PrependUint64Slot", -1, struct.error),
        ("PrependBoolSlot", 2, TypeError),
        ("PrependBoolSlot", "no", TypeError),
        ("PrependBoolSlot", None, TypeError),
    ],
)
def test_fast_builder_still_refuses_a_value_out_of_range(slot, value, error):
    """It drops the stock builder's range check per scalar; the packing still refuses, and a
    bool slot takes nothing but a bool (``struct`` would pack any value as its truth)."""
    from odf_chain.format.builder import Builder

    builder = Builder(0)
    builder.StartObject(1)
    with pytest.raises(error):
        getattr(builder, slot)(0, value, False if slot == "PrependBoolSlot" else 0)


@pytest.mark.parametrize(
    ("slot", "value", "default"),
    [
        ("PrependBoolSlot", None, None),  # an optional bool left out (ReadStepCsv.header)
        ("PrependBoolSlot", False, False),
        ("PrependBoolSlot", True, None),
        ("PrependBoolSlot", False, None),
        ("PrependInt32Slot", None, None),
        ("PrependUint64Slot", 0, 0),
        ("PrependUint64Slot", 0, None),
    ],
)
@pytest.mark.parametrize("force", [False, True])
def test_fast_builder_writes_optional_and_default_scalars_as_the_stock_one(
    slot, value, default, force
):
    """A scalar equal to its default, or an optional one left out, writes nothing (with
    forceDefaults, what the stock builder writes); found by the growth test above, where
    flatc's object API passes None for an optional bool."""
    from odf_chain.format.builder import Builder

    made = []
    for builder in (Builder(0), flatbuffers.Builder(0)):
        builder.ForceDefaults(force)
        builder.StartObject(2)
        getattr(builder, slot)(1, value, default)
        builder.Finish(builder.EndObject())
        made.append(bytes(builder.Output()))
    assert made[0] == made[1]


def _object_api_classes() -> list[type]:
    """Every table flatc generated an object API class for (``<Table>T`` with ``Pack``)."""
    import pkgutil

    import odf_chain.format.generated as generated

    found = []
    for info in pkgutil.iter_modules(generated.__path__):
        module = importlib.import_module(f"{generated.__name__}.{info.name}")
        cls = getattr(module, f"{info.name}T", None)
        if cls is not None and hasattr(cls, "Pack"):
            found.append(cls)
    return found


@pytest.mark.parametrize("cls", _object_api_classes(), ids=lambda c: c.__name__)
def test_fast_builder_packs_every_generated_table_left_empty_as_the_stock_one(cls):
    """Each table flatc generated, every field left at its default (optional scalars None,
    no strings, no vectors), packed by its object API: the same bytes, or the same refusal."""
    from odf_chain.format.builder import Builder

    made = []
    for builder in (Builder(0), flatbuffers.Builder(0)):
        try:
            builder.Finish(cls().Pack(builder))
            made.append(bytes(builder.Output()))
        except Exception as exc:  # a table that cannot be empty: both must refuse it
            made.append(type(exc))
    assert made[0] == made[1]


def test_a_dataclass_class_where_a_value_belongs_is_refused_by_field_name():
    """``dataclasses.is_dataclass`` is true of the class too: given where an instance
    belongs, it is a FormatError naming the field, not a TypeError from inside the check."""
    block = MetadataBlock(
        system_time=datetime(2024, 1, 1, tzinfo=UTC),
        prev_block_hash=None,
        sequence_number=0,
        event=AddData(new_data=DataSlice),  # type: ignore[arg-type]
    )
    with pytest.raises(FormatError, match=r"^AddData\.new_data: unsupported value of type type"):
        encode_block(block)
