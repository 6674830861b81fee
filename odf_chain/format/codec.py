"""Stored block bytes <-> :class:`MetadataBlock`.

A stored block is a ``Manifest`` flatbuffer (kind 0x400000, version 3) whose ``content`` is the
nested ``MetadataBlock`` flatbuffer. Its hash is taken over exactly these bytes, so the encoder
must build them the way the ODF reference implementation does: for every table, first create its
vectors, strings and sub-tables in schema field order (depth first), then start the table and add
its fields in schema field order; scalars equal to their default are omitted, optional scalars
are written whenever present. ``tests/test_vectors.py`` holds us to the reference bytes.

Version 2 manifests (Timestamp structs written with 1-byte alignment) are read too.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import re
import struct
import types
import typing
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import flatbuffers

from odf_chain.errors import FormatError
from odf_chain.events import (
    EVENT_TYPE_IDS,
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
from odf_chain.format.did import DatasetId
from odf_chain.format.generated import (
    AddData as fbAddData,
    AddFieldLineage as fbAddFieldLineage,
    AddPushSource as fbAddPushSource,
    Checkpoint as fbCheckpoint,
    DataSchema as fbDataSchema,
    DataSlice as fbDataSlice,
    DisablePollingSource as fbDisablePollingSource,
    DisablePushSource as fbDisablePushSource,
    ExecuteTransform as fbExecuteTransform,
    ExecuteTransformInput as fbExecuteTransformInput,
    ExtraAttributes as fbExtraAttributes,
    FieldOperation as fbFieldOperation,
    InputField as fbInputField,
    LineageInput as fbLineageInput,
    LineageRun as fbLineageRun,
    Manifest as fbManifest,
    MetadataBlock as fbMetadataBlock,
    OffsetInterval as fbOffsetInterval,
    Seed as fbSeed,
    SetAttachments as fbSetAttachments,
    SetDataSchema as fbSetDataSchema,
    SetInfo as fbSetInfo,
    SetLicense as fbSetLicense,
    SetPollingSource as fbSetPollingSource,
    SetTransform as fbSetTransform,
    SetVocab as fbSetVocab,
    SourceState as fbSourceState,
    Transformation as fbTransformation,
)
from odf_chain.format.multihash import Multihash

MANIFEST_KIND_METADATA_BLOCK = 0x400000
MANIFEST_VERSION = 3
READABLE_VERSIONS = (2, 3)
_TIMESTAMP_SIZE = 16
_INITIAL_BUFFER = 1024

# ---------------------------------------------------------------------------------------------
# Timestamps


def _timestamp_parts(moment: datetime) -> tuple[int, int, int, int]:
    if moment.tzinfo is None:
        raise FormatError(f"timestamps must be timezone-aware (UTC), got naive {moment}")
    utc = moment.astimezone(UTC)
    seconds = utc.hour * 3600 + utc.minute * 60 + utc.second
    return utc.year, utc.timetuple().tm_yday, seconds, utc.microsecond * 1000


def _prepend_timestamp(builder: flatbuffers.Builder, moment: datetime, alignment: int) -> int:
    """Write a Timestamp struct inline; ``alignment`` 4 is the current form, 1 the legacy one."""
    year, ordinal, seconds, nanos = _timestamp_parts(moment)
    builder.Prep(alignment, _TIMESTAMP_SIZE)
    # Place* writes without re-aligning each member, so the legacy form stays unaligned.
    builder.head -= _TIMESTAMP_SIZE
    struct.pack_into("<iHHII", builder.Bytes, builder.head, year, ordinal, 0, seconds, nanos)
    return builder.Offset()


_TIMESTAMP = struct.Struct("<iHHII")


@functools.lru_cache(maxsize=1024)
def _day(year: int, ordinal: int) -> datetime:
    """Midnight UTC of day ``ordinal`` of ``year``; cached, since a chain's blocks fall on few
    days (an invalid day raises every time: exceptions are not cached)."""
    try:
        day = datetime(year, 1, 1, tzinfo=UTC) + timedelta(days=ordinal - 1)
    except (ValueError, OverflowError):
        raise FormatError(f"invalid timestamp year {year}") from None
    if day.year != year:
        raise FormatError(f"invalid timestamp: day {ordinal} of {year}")
    return day


def _read_timestamp(buf: bytes, pos: int) -> datetime:
    year, ordinal, _, seconds, nanos = _TIMESTAMP.unpack_from(buf, pos)
    if not 1 <= ordinal <= 366 or seconds >= 86400 or nanos >= 1_000_000_000:
        raise FormatError(
            f"invalid timestamp (year {year}, day {ordinal}, second {seconds}, ns {nanos})"
        )
    return _day(year, ordinal) + timedelta(seconds=seconds, microseconds=nanos // 1000)


# ---------------------------------------------------------------------------------------------
# Encoding


class _Encoder:
    """Builds one MetadataBlock flatbuffer in reference-implementation order."""

    def __init__(self, timestamp_alignment: int) -> None:
        self.b = flatbuffers.Builder(_INITIAL_BUFFER)
        self.ts_align = timestamp_alignment

    # -- leaves -------------------------------------------------------------------------------

    def bytes_(self, value: bytes | Multihash | DatasetId | None) -> int | None:
        """A [ubyte] vector; hashes and ids are written in their binary form."""
        return None if value is None else self.b.CreateByteVector(bytes(value))

    def string(self, value: str | None) -> int | None:
        return None if value is None else self.b.CreateString(value)

    def strings(self, values: tuple[str, ...] | None) -> int | None:
        if values is None:
            return None
        offsets = [self.b.CreateString(v) for v in values]
        self.b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def tables(self, offsets: list[int]) -> int:
        self.b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def timestamp(self, moment: datetime) -> int:
        return _prepend_timestamp(self.b, moment, self.ts_align)

    @staticmethod
    def add(adder: Callable[[flatbuffers.Builder, Any], None], b, value: Any) -> None:
        if value is not None:
            adder(b, value)

    # -- parts --------------------------------------------------------------------------------

    def offset_interval(self, v: OffsetInterval) -> int:
        b = self.b
        fbOffsetInterval.Start(b)
        fbOffsetInterval.AddStart(b, v.start)
        fbOffsetInterval.AddEnd(b, v.end)
        return fbOffsetInterval.End(b)

    def data_slice(self, v: DataSlice | None) -> int | None:
        if v is None:
            return None
        logical = self.bytes_(v.logical_hash)
        physical = self.bytes_(v.physical_hash)
        interval = self.offset_interval(v.offset_interval)
        b = self.b
        fbDataSlice.Start(b)
        self.add(fbDataSlice.AddLogicalHash, b, logical)
        self.add(fbDataSlice.AddPhysicalHash, b, physical)
        fbDataSlice.AddOffsetInterval(b, interval)
        fbDataSlice.AddSize(b, v.size)
        return fbDataSlice.End(b)

    def checkpoint(self, v: Checkpoint | None) -> int | None:
        if v is None:
            return None
        physical = self.bytes_(v.physical_hash)
        b = self.b
        fbCheckpoint.Start(b)
        fbCheckpoint.AddPhysicalHash(b, physical)
        fbCheckpoint.AddSize(b, v.size)
        return fbCheckpoint.End(b)

    def source_state(self, v: SourceState | None) -> int | None:
        if v is None:
            return None
        return self.string_table(
            fbSourceState,
            [("AddSourceName", v.source_name), ("AddKind", v.kind), ("AddValue", v.value)],
        )

    def extra(self, v: Mapping[str, Any] | None) -> int | None:
        if v is None:
            return None
        try:
            text = json.dumps(dict(v), sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise FormatError(f"AddData.extra must be a JSON object: {exc}") from None
        entries = self.string(text)
        b = self.b
        fbExtraAttributes.Start(b)
        fbExtraAttributes.AddEntries(b, entries)
        return fbExtraAttributes.End(b)

    # -- events -------------------------------------------------------------------------------

    def add_data(self, e: AddData) -> int:
        prev_checkpoint = self.bytes_(e.prev_checkpoint)
        new_data = self.data_slice(e.new_data)
        new_checkpoint = self.checkpoint(e.new_checkpoint)
        new_source_state = self.source_state(e.new_source_state)
        extra = self.extra(e.extra)
        b = self.b
        fbAddData.Start(b)
        self.add(fbAddData.AddPrevCheckpoint, b, prev_checkpoint)
        self.add(fbAddData.AddPrevOffset, b, e.prev_offset)
        self.add(fbAddData.AddNewData, b, new_data)
        self.add(fbAddData.AddNewCheckpoint, b, new_checkpoint)
        if e.new_watermark is not None:
            fbAddData.AddNewWatermark(b, self.timestamp(e.new_watermark))
        self.add(fbAddData.AddNewSourceState, b, new_source_state)
        self.add(fbAddData.AddExtra, b, extra)
        return fbAddData.End(b)

    def execute_transform_input(self, e: ExecuteTransformInput) -> int:
        dataset_id = self.bytes_(e.dataset_id)
        prev_block_hash = self.bytes_(e.prev_block_hash)
        new_block_hash = self.bytes_(e.new_block_hash)
        b = self.b
        fbExecuteTransformInput.Start(b)
        self.add(fbExecuteTransformInput.AddDatasetId, b, dataset_id)
        self.add(fbExecuteTransformInput.AddPrevBlockHash, b, prev_block_hash)
        self.add(fbExecuteTransformInput.AddNewBlockHash, b, new_block_hash)
        self.add(fbExecuteTransformInput.AddPrevOffset, b, e.prev_offset)
        self.add(fbExecuteTransformInput.AddNewOffset, b, e.new_offset)
        return fbExecuteTransformInput.End(b)

    def execute_transform(self, e: ExecuteTransform) -> int:
        inputs = self.tables([self.execute_transform_input(i) for i in e.query_inputs])
        prev_checkpoint = self.bytes_(e.prev_checkpoint)
        new_data = self.data_slice(e.new_data)
        new_checkpoint = self.checkpoint(e.new_checkpoint)
        b = self.b
        fbExecuteTransform.Start(b)
        fbExecuteTransform.AddQueryInputs(b, inputs)
        self.add(fbExecuteTransform.AddPrevCheckpoint, b, prev_checkpoint)
        self.add(fbExecuteTransform.AddPrevOffset, b, e.prev_offset)
        self.add(fbExecuteTransform.AddNewData, b, new_data)
        self.add(fbExecuteTransform.AddNewCheckpoint, b, new_checkpoint)
        if e.new_watermark is not None:
            fbExecuteTransform.AddNewWatermark(b, self.timestamp(e.new_watermark))
        return fbExecuteTransform.End(b)

    def seed(self, e: Seed) -> int:
        dataset_id = self.bytes_(e.dataset_id)
        b = self.b
        fbSeed.Start(b)
        fbSeed.AddDatasetId(b, dataset_id)
        fbSeed.AddDatasetKind(b, int(e.dataset_kind))
        return fbSeed.End(b)

    def string_table(self, module: Any, fields: list[tuple[str, str | None]]) -> int:
        """A table whose fields are all optional strings, given as (adder name, value)."""
        offsets = [(adder, self.string(value)) for adder, value in fields]
        b = self.b
        module.Start(b)
        for adder, off in offsets:
            self.add(getattr(module, adder), b, off)
        return module.End(b)

    def set_vocab(self, e: SetVocab) -> int:
        return self.string_table(
            fbSetVocab,
            [
                ("AddOffsetColumn", e.offset_column),
                ("AddOperationTypeColumn", e.operation_type_column),
                ("AddSystemTimeColumn", e.system_time_column),
                ("AddEventTimeColumn", e.event_time_column),
            ],
        )

    def set_info(self, e: SetInfo) -> int:
        description, keywords = self.string(e.description), self.strings(e.keywords)
        b = self.b
        fbSetInfo.Start(b)
        self.add(fbSetInfo.AddDescription, b, description)
        self.add(fbSetInfo.AddKeywords, b, keywords)
        return fbSetInfo.End(b)

    def set_license(self, e: SetLicense) -> int:
        return self.string_table(
            fbSetLicense,
            [
                ("AddShortName", e.short_name),
                ("AddName", e.name),
                ("AddSpdxId", e.spdx_id),
                ("AddWebsiteUrl", e.website_url),
            ],
        )

    def set_data_schema(self, e: SetDataSchema) -> int:
        if e.schema is not None:
            raise FormatError("writing the structured SetDataSchema.schema form is not supported")
        if e.raw_arrow_schema is None:
            raise FormatError("SetDataSchema needs raw_arrow_schema")
        raw = self.bytes_(e.raw_arrow_schema)
        b = self.b
        fbSetDataSchema.Start(b)
        self.add(fbSetDataSchema.AddRawArrowSchema, b, raw)
        return fbSetDataSchema.End(b)

    def disable_push_source(self, e: DisablePushSource) -> int:
        return self.string_table(fbDisablePushSource, [("AddSourceName", e.source_name)])

    def disable_polling_source(self, e: DisablePollingSource) -> int:
        fbDisablePollingSource.Start(self.b)
        return fbDisablePollingSource.End(self.b)

    # -- field lineage ------------------------------------------------------------------------

    def transformation(self, v: Transformation) -> int:
        b = self.b
        fbTransformation.Start(b)
        fbTransformation.AddType(b, int(v.type))
        fbTransformation.AddSubtype(b, int(v.subtype))
        fbTransformation.AddMasking(b, v.masking)
        fbTransformation.AddOpaque(b, v.opaque)
        return fbTransformation.End(b)

    def lineage_input(self, v: LineageInput) -> int:
        name, uri = self.string(v.name), self.string(v.uri)
        dataset_id = self.bytes_(v.dataset_id)
        block_hash = self.bytes_(v.block_hash)
        content_hash = self.bytes_(v.content_hash)
        b = self.b
        fbLineageInput.Start(b)
        fbLineageInput.AddName(b, name)
        self.add(fbLineageInput.AddUri, b, uri)
        self.add(fbLineageInput.AddDatasetId, b, dataset_id)
        self.add(fbLineageInput.AddBlockHash, b, block_hash)
        self.add(fbLineageInput.AddContentHash, b, content_hash)
        return fbLineageInput.End(b)

    def input_field(self, v: InputField) -> int:
        origin, field = self.string(v.origin), self.string(v.field)
        b = self.b
        fbInputField.Start(b)
        fbInputField.AddOrigin(b, origin)
        fbInputField.AddField(b, field)
        return fbInputField.End(b)

    def field_operation(self, v: FieldOperation) -> int:
        name = self.string(v.name)
        inputs = self.tables([self.input_field(i) for i in v.inputs])
        outputs = self.strings(v.outputs)
        transformation = self.transformation(v.transformation)
        description = self.string(v.description)
        b = self.b
        fbFieldOperation.Start(b)
        fbFieldOperation.AddName(b, name)
        fbFieldOperation.AddInputs(b, inputs)
        fbFieldOperation.AddOutputs(b, outputs)
        fbFieldOperation.AddTransformation(b, transformation)
        self.add(fbFieldOperation.AddDescription, b, description)
        fbFieldOperation.AddWrites(b, v.writes)
        return fbFieldOperation.End(b)

    def lineage_run(self, v: LineageRun) -> int:
        job_name, run_id = self.string(v.job_name), self.string(v.run_id)
        offsets = None if v.offsets is None else self.offset_interval(v.offsets)
        b = self.b
        fbLineageRun.Start(b)
        fbLineageRun.AddJobName(b, job_name)
        fbLineageRun.AddRunId(b, run_id)
        fbLineageRun.AddStartedAt(b, self.timestamp(v.started_at))
        if v.ended_at is not None:
            fbLineageRun.AddEndedAt(b, self.timestamp(v.ended_at))
        self.add(fbLineageRun.AddOffsets, b, offsets)
        return fbLineageRun.End(b)

    def add_field_lineage(self, e: AddFieldLineage) -> int:
        run = self.lineage_run(e.run)
        inputs = self.tables([self.lineage_input(i) for i in e.inputs])
        operations = self.tables([self.field_operation(o) for o in e.operations])
        b = self.b
        fbAddFieldLineage.Start(b)
        fbAddFieldLineage.AddRun(b, run)
        fbAddFieldLineage.AddInputs(b, inputs)
        fbAddFieldLineage.AddOperations(b, operations)
        return fbAddFieldLineage.End(b)

    # -- dispatch -----------------------------------------------------------------------------

    def event(self, e: MetadataEvent) -> int:
        writer = _EVENT_WRITERS.get(type(e))
        if writer is None:
            raise FormatError(f"odf_chain cannot write {type(e).__name__} events (read-only)")
        return writer(self, e)

    def block(self, block: MetadataBlock) -> bytes:
        prev = self.bytes_(block.prev_block_hash)
        event = self.event(block.event)
        b = self.b
        fbMetadataBlock.Start(b)
        fbMetadataBlock.AddSystemTime(b, self.timestamp(block.system_time))
        self.add(fbMetadataBlock.AddPrevBlockHash, b, prev)
        fbMetadataBlock.AddSequenceNumber(b, block.sequence_number)
        fbMetadataBlock.AddEventType(b, EVENT_TYPE_IDS[type(block.event)])
        fbMetadataBlock.AddEvent(b, event)
        b.Finish(fbMetadataBlock.End(b))
        return bytes(b.Output())


_EVENT_WRITERS: dict[type, Callable[[_Encoder, Any], int]] = {
    AddData: _Encoder.add_data,
    ExecuteTransform: _Encoder.execute_transform,
    Seed: _Encoder.seed,
    SetVocab: _Encoder.set_vocab,
    SetInfo: _Encoder.set_info,
    SetLicense: _Encoder.set_license,
    SetDataSchema: _Encoder.set_data_schema,
    DisablePushSource: _Encoder.disable_push_source,
    DisablePollingSource: _Encoder.disable_polling_source,
    AddFieldLineage: _Encoder.add_field_lineage,
}


def _wrap_manifest(content: bytes, version: int) -> bytes:
    b = flatbuffers.Builder(len(content) + 64)
    payload = b.CreateByteVector(content)
    fbManifest.Start(b)
    fbManifest.AddKind(b, MANIFEST_KIND_METADATA_BLOCK)
    fbManifest.AddVersion(b, version)
    fbManifest.AddContent(b, payload)
    b.Finish(fbManifest.End(b))
    return bytes(b.Output())


_UINT64_MAX = 2**64 - 1


def _check_values(value: Any, where: str) -> None:
    """Refuse values the wire format cannot hold, naming the field (``AddData.prev_offset``)
    rather than letting the flatbuffers builder fail somewhere inside."""
    if isinstance(value, Multihash | DatasetId | enum.Enum) or value is None:
        return  # validated when constructed / written as its integer value
    if isinstance(value, bool):
        raise FormatError(f"{where}: expected a number or text, got a bool")
    if isinstance(value, int):
        if not 0 <= value <= _UINT64_MAX:
            raise FormatError(f"{where}: {value} is outside 0..2**64-1")
    elif isinstance(value, datetime):
        if value.tzinfo is None:
            raise FormatError(
                f"{where}: timestamps must be timezone-aware (UTC), got naive {value}"
            )
    elif isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FormatError(f"{where}: text is not encodable as UTF-8 ({exc.reason})") from None
    elif isinstance(value, bytes | bytearray | memoryview):
        return
    elif isinstance(value, tuple | list):
        for i, item in enumerate(value):
            _check_values(item, f"{where}[{i}]")
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.type == "bool" and isinstance(item, bool):
                continue  # a declared flag (FieldOperation.writes); elsewhere a bool is a mistake
            _check_values(item, f"{where}.{f.name}")
    elif not isinstance(value, Mapping):  # mappings (extra) are checked as JSON when encoded
        raise FormatError(f"{where}: unsupported value of type {type(value).__name__}")


@functools.cache
def _declared_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _check_types(value: Any, declared: Any, where: str) -> None:
    """Refuse a value that is not of its declared type, naming the field
    (``AddFieldLineage.operations[2].transformation.subtype``).

    Used for the lineage event, whose parts are all typed dataclasses: a wrong type there
    would otherwise surface as an AttributeError deep inside the encoder. A field without a
    default is required; ``None`` is accepted only where the declaration says ``| None``.
    """
    if typing.get_origin(declared) in (types.UnionType, typing.Union):
        members = [t for t in typing.get_args(declared) if t is not type(None)]
        if value is None and len(members) < len(typing.get_args(declared)):
            return
        declared = members[0] if len(members) == 1 else declared
    if value is None:
        raise FormatError(f"{where}: required, found nothing")
    if typing.get_origin(declared) is tuple:
        (item_type, *_) = typing.get_args(declared)
        if not isinstance(value, tuple):
            raise FormatError(f"{where}: expected a tuple, got {type(value).__name__}")
        for i, item in enumerate(value):
            _check_types(item, item_type, f"{where}[{i}]")
        return
    if declared is int and isinstance(value, bool):
        raise FormatError(f"{where}: expected a number, got a bool")
    if isinstance(declared, type) and issubclass(declared, enum.Enum):
        if not isinstance(value, declared):
            names = ", ".join(m.name for m in declared)
            raise FormatError(f"{where}: expected a {declared.__name__} ({names}), got {value!r}")
        return
    if isinstance(declared, type) and not isinstance(value, declared):
        raise FormatError(f"{where}: expected {declared.__name__}, got {type(value).__name__}")
    if dataclasses.is_dataclass(value):
        hints = _declared_types(type(value))
        for f in dataclasses.fields(value):
            _check_types(getattr(value, f.name), hints[f.name], f"{where}.{f.name}")


def _check_block(block: MetadataBlock) -> None:
    event = block.event
    if type(event) not in EVENT_TYPE_IDS:
        raise FormatError(f"block event must be a metadata event, got {type(event).__name__}")
    _check_values(block.sequence_number, "MetadataBlock.sequence_number")
    _check_values(block.system_time, "MetadataBlock.system_time")
    if block.prev_block_hash is not None and not isinstance(block.prev_block_hash, Multihash):
        raise FormatError("MetadataBlock.prev_block_hash must be a Multihash")
    if isinstance(event, AddFieldLineage):
        _check_types(event, AddFieldLineage, "AddFieldLineage")
    _check_values(event, type(event).__name__)
    keywords = getattr(event, "keywords", None)
    if keywords is not None and (
        isinstance(keywords, str) or not all(isinstance(k, str) for k in keywords)
    ):
        raise FormatError(f"{type(event).__name__}.keywords: expected a tuple of strings")


def encode_block(block: MetadataBlock, version: int = MANIFEST_VERSION) -> bytes:
    """The bytes to store (and hash) for ``block``.

    Only the current manifest version is written; the legacy layout exists for reading old
    chains (and, in tests, to prove we read it the way the reference implementation wrote it).
    """
    if version != MANIFEST_VERSION:
        raise FormatError(f"can only write manifest version {MANIFEST_VERSION}, not {version}")
    _check_block(block)
    try:
        return _wrap_manifest(_Encoder(timestamp_alignment=4).block(block), version)
    except (struct.error, OverflowError, TypeError) as exc:
        # flatbuffers packs with struct: an integer outside its field's range lands here.
        raise FormatError(
            f"cannot encode block {block.sequence_number}: a value is out of range for its "
            f"field ({exc})"
        ) from None


def _encode_legacy_v2(block: MetadataBlock) -> bytes:
    """Manifest version 2: Timestamp structs at 1-byte alignment. For tests only."""
    return _wrap_manifest(_Encoder(timestamp_alignment=1).block(block), 2)


# ---------------------------------------------------------------------------------------------
# Decoding


_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_VTABLE_SIZE = struct.Struct("<H")
_SCALARS: dict[str, struct.Struct] = {}


def _scalar_struct(fmt: str) -> struct.Struct:
    found = _SCALARS.get(fmt)
    if found is None:
        found = _SCALARS[fmt] = struct.Struct("<" + fmt)
    return found


@functools.cache
def _vtable_struct(count: int) -> struct.Struct:
    return struct.Struct(f"<{count}H")


class _Reader:
    """Field access on one table of a buffer, with bounds checks the generated code lacks.

    The vtable is located once per table and read with precompiled structs: the generated
    ``flatbuffers.Table`` re-reads it, and re-checks every number's range in Python, on every
    field access, which made decoding most of what verifying a long chain cost. Every offset
    here is non-negative (a struct never counts from the end of the buffer), and a read past
    the end raises ``struct.error``, which :func:`decode_block` reports as a corrupt block.
    """

    __slots__ = ("_fields", "_offsets", "buf", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        size = len(buf)
        if not 0 <= pos <= size - 4:
            raise FormatError(f"table offset {pos} outside the {size}-byte buffer")
        vtable = pos - _I32.unpack_from(buf, pos)[0]
        if not 0 <= vtable <= size - 4:
            raise FormatError(f"vtable offset {vtable} outside the buffer")
        self.buf = buf
        self.pos = pos
        # Every field's offset at once (one struct call, not one per field). A slot exists when
        # its entry starts inside the vtable's declared size, as ``Table.Offset`` has it; the
        # entries that fit in the buffer are read, one that does not fails when asked for.
        fields = (_VTABLE_SIZE.unpack_from(buf, vtable)[0] - 3) >> 1
        fit = (size - vtable - 4) >> 1
        if fit > fields:
            fit = fields
        self._fields = fields
        self._offsets = _vtable_struct(fit).unpack_from(buf, vtable + 4) if fit > 0 else ()

    def _field(self, slot: int) -> int:
        """The field's offset from the table's start, 0 when absent (as ``Table.Offset``)."""
        offsets = self._offsets
        if slot < len(offsets):
            return offsets[slot]
        if slot < self._fields:
            raise FormatError(f"vtable entry {slot} runs past the end of the buffer")
        return 0

    def _indirect(self, at: int) -> int:
        return at + _U32.unpack_from(self.buf, at)[0]

    def _vector(self, o: int) -> tuple[int, int]:
        """(start, length) of the vector whose offset is at field offset ``o``."""
        at = self._indirect(self.pos + o)
        return at + 4, _U32.unpack_from(self.buf, at)[0]

    def scalar(self, slot: int, fmt: str, default: Any = None) -> Any:
        o = self._field(slot)
        if not o:
            return default
        return _scalar_struct(fmt).unpack_from(self.buf, self.pos + o)[0]

    def table(self, slot: int) -> _Reader | None:
        o = self._field(slot)
        if not o:
            return None
        return _Reader(self.buf, self._indirect(self.pos + o))

    def ubytes(self, slot: int) -> bytes | None:
        o = self._field(slot)
        if not o:
            return None
        start, length = self._vector(o)
        if start + length > len(self.buf):
            raise FormatError(f"byte vector of {length} bytes runs past the end of the buffer")
        return bytes(self.buf[start : start + length])

    def string(self, slot: int) -> str | None:
        raw = self.ubytes(slot)
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError("string field is not valid UTF-8") from None

    def vector_tables(self, slot: int) -> list[_Reader] | None:
        o = self._field(slot)
        if not o:
            return None
        start, length = self._vector(o)
        if start + 4 * length > len(self.buf):
            raise FormatError(f"vector of {length} tables runs past the end of the buffer")
        return [_Reader(self.buf, self._indirect(start + 4 * i)) for i in range(length)]

    def strings(self, slot: int) -> tuple[str, ...] | None:
        o = self._field(slot)
        if not o:
            return None
        start, length = self._vector(o)
        if start + 4 * length > len(self.buf):
            raise FormatError(f"vector of {length} strings runs past the end of the buffer")
        out = []
        for i in range(length):
            pos = self._indirect(start + 4 * i)
            (n,) = _U32.unpack_from(self.buf, pos)
            if pos + 4 + n > len(self.buf):
                raise FormatError("string runs past the end of the buffer")
            out.append(bytes(self.buf[pos + 4 : pos + 4 + n]).decode("utf-8"))
        return tuple(out)

    def timestamp(self, slot: int) -> datetime | None:
        o = self._field(slot)
        if not o:
            return None
        return _read_timestamp(self.buf, self.pos + o)


def _hash(raw: bytes | None) -> Multihash | None:
    return None if raw is None else Multihash.from_bytes(raw)


def _read_data_slice(r: _Reader | None) -> DataSlice | None:
    if r is None:
        return None
    interval = r.table(2)
    if interval is None:
        raise FormatError("DataSlice without offset_interval")
    return DataSlice(
        logical_hash=_hash(r.ubytes(0)),
        physical_hash=_hash(r.ubytes(1)),
        offset_interval=OffsetInterval(interval.scalar(0, "Q", 0), interval.scalar(1, "Q", 0)),
        size=r.scalar(3, "Q", 0),
    )


def _read_checkpoint(r: _Reader | None) -> Checkpoint | None:
    if r is None:
        return None
    return Checkpoint(physical_hash=_hash(r.ubytes(0)), size=r.scalar(1, "Q", 0))


def _read_extra(r: _Reader | None) -> Mapping[str, Any] | None:
    if r is None:
        return None
    text = r.string(0)
    try:
        value = json.loads(text) if text is not None else {}
    except json.JSONDecodeError as exc:
        raise FormatError(f"ExtraAttributes is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError("ExtraAttributes must be a JSON object")
    return value


def _read_add_data(r: _Reader) -> AddData:
    state = r.table(5)
    return AddData(
        prev_checkpoint=_hash(r.ubytes(0)),
        prev_offset=r.scalar(1, "Q"),
        new_data=_read_data_slice(r.table(2)),
        new_checkpoint=_read_checkpoint(r.table(3)),
        new_watermark=r.timestamp(4),
        new_source_state=None
        if state is None
        else SourceState(state.string(0), state.string(1), state.string(2)),
        extra=_read_extra(r.table(6)),
    )


def _read_execute_transform(r: _Reader) -> ExecuteTransform:
    inputs = tuple(
        ExecuteTransformInput(
            dataset_id=None if (raw := i.ubytes(0)) is None else DatasetId.from_bytes(raw),
            prev_block_hash=_hash(i.ubytes(1)),
            new_block_hash=_hash(i.ubytes(2)),
            prev_offset=i.scalar(3, "Q"),
            new_offset=i.scalar(4, "Q"),
        )
        for i in r.vector_tables(0) or ()
    )
    return ExecuteTransform(
        query_inputs=inputs,
        prev_checkpoint=_hash(r.ubytes(1)),
        prev_offset=r.scalar(2, "Q"),
        new_data=_read_data_slice(r.table(3)),
        new_checkpoint=_read_checkpoint(r.table(4)),
        new_watermark=r.timestamp(5),
    )


def _read_seed(r: _Reader) -> Seed:
    raw = r.ubytes(0)
    if raw is None:
        raise FormatError("Seed without dataset_id")
    kind = r.scalar(1, "i", 0)
    try:
        dataset_kind = DatasetKind(kind)
    except ValueError:
        raise FormatError(f"unknown dataset kind {kind} in Seed") from None
    return Seed(dataset_id=DatasetId.from_bytes(raw), dataset_kind=dataset_kind)


def _read_set_vocab(r: _Reader) -> SetVocab:
    return SetVocab(r.string(0), r.string(1), r.string(2), r.string(3))


def _read_set_info(r: _Reader) -> SetInfo:
    return SetInfo(description=r.string(0), keywords=r.strings(1))


def _read_set_license(r: _Reader) -> SetLicense:
    return SetLicense(r.string(0), r.string(1), r.string(2), r.string(3))


def _read_set_data_schema(r: _Reader) -> SetDataSchema:
    raw = r.ubytes(0)
    structured = None
    if r.table(1) is not None:
        structured = _plain_object(r, 1, fbDataSchema.DataSchemaT)
    if raw is None and structured is None:
        raise FormatError("SetDataSchema carries neither raw_arrow_schema nor schema")
    return SetDataSchema(raw_arrow_schema=raw, schema=structured)


def _read_disable_push_source(r: _Reader) -> DisablePushSource:
    return DisablePushSource(source_name=r.string(0) or "")


def _required(value: Any, what: str) -> Any:
    if value is None:
        raise FormatError(f"{what} is missing")
    return value


def _enum(cls: type[enum.IntEnum], raw: int, what: str) -> Any:
    try:
        return cls(raw)
    except ValueError:
        raise FormatError(f"unknown {what} {raw}") from None


def _read_transformation(r: _Reader | None) -> Transformation:
    if r is None:
        return Transformation()
    return Transformation(
        type=_enum(TransformationType, r.scalar(0, "B", 0), "Transformation.type"),
        subtype=_enum(TransformationSubtype, r.scalar(1, "B", 0), "Transformation.subtype"),
        masking=r.scalar(2, "?", False),
        opaque=r.scalar(3, "?", False),
    )


def _read_lineage_input(r: _Reader) -> LineageInput:
    raw_id = r.ubytes(2)
    return LineageInput(
        name=_required(r.string(0), "LineageInput.name"),
        uri=r.string(1),
        dataset_id=None if raw_id is None else DatasetId.from_bytes(raw_id),
        block_hash=_hash(r.ubytes(3)),
        content_hash=_hash(r.ubytes(4)),
    )


def _read_field_operation(r: _Reader) -> FieldOperation:
    return FieldOperation(
        name=_required(r.string(0), "FieldOperation.name"),
        inputs=tuple(
            InputField(
                origin=_required(i.string(0), "InputField.origin"),
                field=_required(i.string(1), "InputField.field"),
            )
            for i in r.vector_tables(1) or ()
        ),
        outputs=r.strings(2) or (),
        transformation=_read_transformation(r.table(3)),
        description=r.string(4),
        writes=r.scalar(5, "?", True),
    )


def _read_lineage_run(r: _Reader | None) -> LineageRun:
    run = _required(r, "AddFieldLineage.run")
    offsets = run.table(4)
    return LineageRun(
        job_name=_required(run.string(0), "LineageRun.job_name"),
        run_id=_required(run.string(1), "LineageRun.run_id"),
        started_at=_required(run.timestamp(2), "LineageRun.started_at"),
        ended_at=run.timestamp(3),
        offsets=None
        if offsets is None
        else OffsetInterval(offsets.scalar(0, "Q", 0), offsets.scalar(1, "Q", 0)),
    )


def _read_add_field_lineage(r: _Reader) -> AddFieldLineage:
    return AddFieldLineage(
        run=_read_lineage_run(r.table(0)),
        inputs=tuple(_read_lineage_input(i) for i in r.vector_tables(1) or ()),
        operations=tuple(_read_field_operation(o) for o in r.vector_tables(2) or ()),
    )


# -- events kept as plain data ----------------------------------------------------------------


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _plain(value: Any) -> Any:
    """Object-API values -> plain, comparable data (tables -> dicts, lists -> tuples)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if isinstance(value, list):
        if value and all(isinstance(v, int) for v in value):
            return bytes(value)
        return tuple(_plain(v) for v in value)
    if hasattr(value, "tobytes"):  # numpy arrays of [ubyte]
        return value.tobytes()
    attrs = vars(value)
    out: dict[str, Any] = {}
    for key, item in attrs.items():
        if key.endswith("Type") and key[:-4] in attrs:
            continue  # a union's type tag; the member carries "kind" instead
        if f"{key}Type" in attrs and item is not None:
            out[_snake(key)] = {"kind": type(item).__name__.removesuffix("T"), **_plain(item)}
        else:
            out[_snake(key)] = _plain(item)
    return out


def _plain_object(r: _Reader, slot: int | None, cls: Any) -> dict[str, Any]:
    """Decode a (sub)table with the generated object API and flatten it to plain data."""
    target = r if slot is None else r.table(slot)
    assert target is not None
    obj = cls.InitFromBuf(target.buf, target.pos)
    return _plain(obj)


def _read_set_polling_source(r: _Reader) -> SetPollingSource:
    data = _plain_object(r, None, fbSetPollingSource.SetPollingSourceT)
    return SetPollingSource(**data)


def _read_set_transform(r: _Reader) -> SetTransform:
    return SetTransform(**_plain_object(r, None, fbSetTransform.SetTransformT))


def _read_add_push_source(r: _Reader) -> AddPushSource:
    return AddPushSource(**_plain_object(r, None, fbAddPushSource.AddPushSourceT))


def _read_set_attachments(r: _Reader) -> SetAttachments:
    return SetAttachments(**_plain_object(r, None, fbSetAttachments.SetAttachmentsT))


def _read_disable_polling_source(r: _Reader) -> DisablePollingSource:
    return DisablePollingSource()


_EVENT_READERS: dict[int, Callable[[_Reader], MetadataEvent]] = {
    1: _read_add_data,
    2: _read_execute_transform,
    3: _read_seed,
    4: _read_set_polling_source,
    5: _read_set_transform,
    6: _read_set_vocab,
    7: _read_set_attachments,
    8: _read_set_info,
    9: _read_set_license,
    10: _read_set_data_schema,
    11: _read_add_push_source,
    12: _read_disable_push_source,
    13: _read_disable_polling_source,
    EVENT_TYPE_IDS[AddFieldLineage]: _read_add_field_lineage,
}


def _root(buf: bytes, what: str) -> _Reader:
    if len(buf) < 8:
        raise FormatError(f"{what} is too short ({len(buf)} bytes) to be a flatbuffer")
    (root,) = struct.unpack_from("<I", buf, 0)
    return _Reader(buf, root)


def read_manifest(data: bytes) -> tuple[int, bytes]:
    """Check the manifest envelope; return (version, nested MetadataBlock bytes)."""
    manifest = _root(data, "block")
    kind = manifest.scalar(0, "q", 0)
    if kind != MANIFEST_KIND_METADATA_BLOCK:
        raise FormatError(
            f"unknown manifest kind 0x{kind:x}: expected 0x{MANIFEST_KIND_METADATA_BLOCK:x} "
            "(metadata block)"
        )
    version = manifest.scalar(1, "i", 0)
    if version not in READABLE_VERSIONS:
        raise FormatError(
            f"unsupported manifest version {version}: this reader knows versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    content = manifest.ubytes(2)
    if content is None:
        raise FormatError("manifest has no content")
    return version, content


def decode_block(data: bytes) -> MetadataBlock:
    """Parse stored block bytes. Any malformation raises :class:`FormatError`."""
    data = bytes(data)
    try:
        _, content = read_manifest(data)
        block = _root(content, "block content")
        system_time = block.timestamp(0)
        if system_time is None:
            raise FormatError("block has no system_time")
        event_type = block.scalar(3, "B", 0)
        reader = _EVENT_READERS.get(event_type)
        if reader is None:
            raise FormatError(f"unknown event type id {event_type}")
        event_table = block.table(4)
        if event_table is None:
            raise FormatError("block has no event")
        return MetadataBlock(
            system_time=system_time,
            prev_block_hash=_hash(block.ubytes(1)),
            sequence_number=block.scalar(2, "Q", 0),
            event=reader(event_table),
        )
    except FormatError:
        raise
    except (
        struct.error,
        IndexError,
        ValueError,
        TypeError,
        UnicodeDecodeError,
        KeyError,
        RecursionError,  # deeply nested tables or ExtraAttributes JSON in crafted input
    ) as exc:
        raise FormatError(f"corrupt block: {exc}") from None


def block_hash(data: bytes, algorithm: str) -> Multihash:
    """The hash of stored block bytes (never of a re-encoding)."""
    return Multihash.digest(algorithm, data)
