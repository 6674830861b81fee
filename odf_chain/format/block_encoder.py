"""Event objects -> MetadataBlock flatbuffer: the encoder behind
:func:`odf_chain.format.codec.encode_block`, and the checks that refuse, by field name, values
the wire format cannot hold.

The bytes must be the ODF reference implementation's (``tests/test_vectors.py``): for every
table, its vectors, strings and sub-tables are created first, in schema field order and depth
first; then the table is started and its fields added in schema field order; scalars equal to
their default are omitted, optional scalars are written whenever present. The manifest around
the block is :mod:`~odf_chain.format.codec`'s.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import json
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import flatbuffers

from odf_chain.errors import FormatError
from odf_chain.format.builder import Builder
from odf_chain.format.data_schema_encoder import pack_data_schema
from odf_chain.format.did import DatasetId
from odf_chain.format.events import (
    EVENT_TYPE_IDS,
    AddData,
    AddFieldLineage,
    AddPushSource,
    Checkpoint,
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
)
from odf_chain.format.generated import (
    AddData as fbAddData,
    AddFieldLineage as fbAddFieldLineage,
    Checkpoint as fbCheckpoint,
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
    MetadataBlock as fbMetadataBlock,
    OffsetInterval as fbOffsetInterval,
    Seed as fbSeed,
    SetDataSchema as fbSetDataSchema,
    SetInfo as fbSetInfo,
    SetLicense as fbSetLicense,
    SetVocab as fbSetVocab,
    SourceState as fbSourceState,
    Transformation as fbTransformation,
)
from odf_chain.format.multihash import Multihash
from odf_chain.format.plain_tables import ENUMS, LAYOUT, SCALARS, UNIONS, FieldType
from odf_chain.format.timestamp import prepend_timestamp

_INITIAL_BUFFER = 1024


# ---------------------------------------------------------------------------------------------
# Encoding


class BlockEncoder:
    """Builds one MetadataBlock flatbuffer in reference-implementation order. ``builder``: the
    flatbuffers builder class, :class:`~odf_chain.format.builder.Builder` (the stock builder's
    bytes, faster) unless another is given (tests and ``tools/bench_append.py`` give the stock
    one, to compare)."""

    def __init__(
        self, timestamp_alignment: int, builder: type[flatbuffers.Builder] = Builder
    ) -> None:
        self.b = builder(_INITIAL_BUFFER)
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
        return prepend_timestamp(self.b, moment, self.ts_align)

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

    def extra(self, v: Mapping[str, Any] | None, where: str) -> int | None:
        """ODF's ExtraAttributes: the mapping as compact JSON text, keys sorted."""
        if v is None:
            return None
        try:
            text = json.dumps(dict(v), sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise FormatError(f"{where} must be a JSON object: {exc}") from None
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
        extra = self.extra(e.extra, "AddData.extra")
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
        extra = self.extra(e.extra, "ExecuteTransform.extra")
        b = self.b
        fbExecuteTransform.Start(b)
        fbExecuteTransform.AddQueryInputs(b, inputs)
        self.add(fbExecuteTransform.AddPrevCheckpoint, b, prev_checkpoint)
        self.add(fbExecuteTransform.AddPrevOffset, b, e.prev_offset)
        self.add(fbExecuteTransform.AddNewData, b, new_data)
        self.add(fbExecuteTransform.AddNewCheckpoint, b, new_checkpoint)
        if e.new_watermark is not None:
            fbExecuteTransform.AddNewWatermark(b, self.timestamp(e.new_watermark))
        self.add(fbExecuteTransform.AddExtra, b, extra)
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
        """The forms the event carries, and only those (see :class:`SetDataSchema`)."""
        if e.raw_arrow_schema is None and e.schema is None:
            raise FormatError("SetDataSchema needs raw_arrow_schema, schema or both")
        raw = self.bytes_(e.raw_arrow_schema)
        schema = None
        if e.schema is not None:
            schema = pack_data_schema(self.b, e.schema, "SetDataSchema.schema")
        b = self.b
        fbSetDataSchema.Start(b)
        self.add(fbSetDataSchema.AddRawArrowSchema, b, raw)
        self.add(fbSetDataSchema.AddSchema, b, schema)
        return fbSetDataSchema.End(b)

    def disable_push_source(self, e: DisablePushSource) -> int:
        return self.string_table(fbDisablePushSource, [("AddSourceName", e.source_name)])

    def disable_polling_source(self, e: DisablePollingSource) -> int:
        fbDisablePollingSource.Start(self.b)
        return fbDisablePollingSource.End(self.b)

    # -- events kept as plain data (laid out by format/plain_tables.py) ------------------------

    def plain_event(self, e: Any) -> int:
        """SetTransform, SetPollingSource, AddPushSource or SetAttachments: the event's table."""
        table = type(e).__name__
        return self.plain_table({n: getattr(e, n) for n, _ in LAYOUT[table]}, table, table)

    def plain_table(self, value: Any, table: str, where: str, *, member: bool = False) -> int:
        """One table of plain data, as flatc's object API packs it: its strings, vectors,
        sub-tables and union members first, in field order, then the table, its fields added in
        field order (the generated adders leave out a scalar equal to its default). A union
        ``member`` carries its ``"kind"`` besides its fields."""
        layout = LAYOUT[table]
        names = tuple(name for name, _ in layout)
        fields = _plain_fields(value, ("kind", *names) if member else names, where)
        parts = [self.plain_part(fields[name], t, f"{where}.{name}") for name, t in layout]
        module = _generated(table)
        b = self.b
        module.Start(b)
        for (name, t), part in zip(layout, parts, strict=True):
            adder = "Add" + "".join(word.capitalize() for word in name.split("_"))
            if t.category == "union":
                union_type, part = part if part is not None else (0, None)
                getattr(module, adder + "Type")(b, union_type)
            self.add(getattr(module, adder), b, part)
        return module.End(b)

    def plain_part(self, value: Any, t: FieldType, where: str) -> Any:
        """What one field contributes: an offset (made now), (union type, offset), a scalar to
        add, or None when absent; refuses a value that does not fit, naming ``where``."""
        category = t.category
        if t.vector and (value is not None or t.required) and not isinstance(value, tuple | list):
            of = " of text" if category == "string" else ""
            raise FormatError(f"{where}: expected a tuple{of}, got {_kind(value)}")
        if value is None:
            if t.required or (category in ("scalar", "enum") and not t.optional_scalar):
                raise FormatError(f"{where}: required, found nothing")
            return None
        if t.vector:
            if category == "string":
                return self.strings(
                    tuple(_checked_text(v, f"{where}[{i}]") for i, v in enumerate(value))
                )
            return self.tables(
                [self.plain_table(v, t.name, f"{where}[{i}]") for i, v in enumerate(value)]
            )
        if category == "string":
            return self.string(_checked_text(value, where))
        if category == "bool":
            if not isinstance(value, bool):
                raise FormatError(f"{where}: expected a bool, got {_kind(value)}")
            return value
        if category == "scalar":
            low, high = SCALARS[t.name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise FormatError(f"{where}: expected an {t.name}, got {_kind(value)}")
            if not low <= value <= high:
                raise FormatError(f"{where}: {value} is outside the {t.name} range")
            return value
        if category == "enum":
            names = ENUMS[t.name]
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value not in range(len(names))
            ):
                listed = ", ".join(f"{i} {n}" for i, n in enumerate(names))
                raise FormatError(f"{where}: expected a {t.name} ({listed}), got {value!r}")
            return value
        if category == "union":
            members = UNIONS[t.name]
            kind = value.get("kind") if isinstance(value, Mapping) else None
            if kind not in members:
                expected = " or ".join(repr(m) for m in members)
                raise FormatError(f"{where}.kind: expected {expected}, got {kind!r}")
            return _union_type(t.name, kind), self.plain_table(value, kind, where, member=True)
        if category == "DataSchema":
            raise FormatError(
                f"{where}: writing the structured DataSchema is not supported yet (ddl_schema is)"
            )
        return self.plain_table(value, t.name, where)

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


_EVENT_WRITERS: dict[type, Callable[[BlockEncoder, Any], int]] = {
    AddData: BlockEncoder.add_data,
    ExecuteTransform: BlockEncoder.execute_transform,
    Seed: BlockEncoder.seed,
    SetTransform: BlockEncoder.plain_event,
    SetVocab: BlockEncoder.set_vocab,
    SetInfo: BlockEncoder.set_info,
    SetLicense: BlockEncoder.set_license,
    SetDataSchema: BlockEncoder.set_data_schema,
    DisablePushSource: BlockEncoder.disable_push_source,
    DisablePollingSource: BlockEncoder.disable_polling_source,
    SetPollingSource: BlockEncoder.plain_event,
    AddPushSource: BlockEncoder.plain_event,
    SetAttachments: BlockEncoder.plain_event,
    AddFieldLineage: BlockEncoder.add_field_lineage,
}


@functools.cache
def _generated(table: str) -> Any:
    """The flatc-generated module of ``table`` (its Start, Add... and End functions)."""
    return importlib.import_module(f"odf_chain.format.generated.{table}")


@functools.cache
def _union_type(union: str, member: str) -> int:
    """``member``'s type id in ``union``, as flatc generated it."""
    return getattr(getattr(_generated(union), union), member)


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _plain_fields(value: Any, names: tuple[str, ...], where: str) -> dict[str, Any]:
    """A plain-data table's fields by name (``None`` when left out), refusing a value that is
    not a mapping or has a key the table does not (a misspelt optional field would otherwise
    vanish without a word)."""
    if not isinstance(value, Mapping):
        raise FormatError(f"{where}: expected a mapping, got {_kind(value)}")
    unknown = [key for key in value if key not in names]
    if unknown:
        raise FormatError(f"{where}: unknown field {unknown[0]!r} (it has {', '.join(names)})")
    return {name: value.get(name) for name in names}


def _checked_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise FormatError(f"{where}: expected text, got {_kind(value)}")
    _check_values(value, where)  # UTF-8 encodable
    return value


_UINT64_MAX = 2**64 - 1


Where = str | tuple["Where", str]
"""A field's name for an error: text, or (the parent's, a part) spelt out only when needed."""


def _spelt(where: Where) -> str:
    if isinstance(where, str):
        return where
    parent, part = where
    return f"{_spelt(parent)}{part}"


@functools.cache
def _checked_fields(cls: type) -> tuple[tuple[str, str, bool], ...]:
    """A dataclass's fields as (name, ".name", declared a bool)."""
    return tuple((f.name, f".{f.name}", f.type == "bool") for f in dataclasses.fields(cls))


def _check_values(value: Any, where: Where) -> None:
    """Refuse values the wire format cannot hold, naming the field (``AddData.prev_offset``)
    rather than letting the flatbuffers builder fail somewhere inside. (Runs at every append:
    a field's name is spelt out only for an error.)"""
    if value is None or isinstance(value, Multihash | DatasetId | enum.Enum):
        return  # validated when constructed / written as its integer value
    if isinstance(value, bool):
        raise FormatError(f"{_spelt(where)}: expected a number or text, got a bool")
    if isinstance(value, int):
        if not 0 <= value <= _UINT64_MAX:
            raise FormatError(f"{_spelt(where)}: {value} is outside 0..2**64-1")
    elif isinstance(value, datetime):
        if value.tzinfo is None:
            raise FormatError(
                f"{_spelt(where)}: timestamps must be timezone-aware (UTC), got naive {value}"
            )
    elif isinstance(value, str):
        if value.isascii():
            return
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FormatError(
                f"{_spelt(where)}: text is not encodable as UTF-8 ({exc.reason})"
            ) from None
    elif isinstance(value, bytes | bytearray | memoryview):
        return
    elif isinstance(value, tuple | list):
        for i, item in enumerate(value):
            _check_values(item, (where, f"[{i}]"))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):  # not a class
        for name, part, flag in _checked_fields(type(value)):
            item = getattr(value, name)
            if item is None or (flag and isinstance(item, bool)):
                continue  # a declared flag (FieldOperation.writes); elsewhere a bool is a mistake
            _check_values(item, (where, part))
    elif not isinstance(value, Mapping):  # mappings (extra) are checked as JSON when encoded
        raise FormatError(f"{_spelt(where)}: unsupported value of type {type(value).__name__}")


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


def check_block(block: MetadataBlock) -> None:
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
