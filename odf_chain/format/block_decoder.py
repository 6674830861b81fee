"""MetadataBlock table -> event objects: the readers behind
:func:`odf_chain.format.codec.decode_block`.

:class:`TableReader` reads one table's fields with the bounds checks the generated code lacks;
one reader per event type turns an event table into its :mod:`odf_chain.events` object. Events
kept as plain data (ODF's source, transform and attachment events) go through the generated
object API and come back as dicts and tuples, the form the encoder writes back. The envelope
(manifest, block header) is :mod:`~odf_chain.format.codec`'s; every malformation here raises
:class:`FormatError` or a ``struct.error`` that ``decode_block`` reports as a corrupt block.
"""

from __future__ import annotations

import enum
import functools
import json
import re
import struct
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from odf_chain.errors import FormatError
from odf_chain.format.did import DatasetId
from odf_chain.format.events import (
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
from odf_chain.format.multihash import Multihash
from odf_chain.format.timestamp import read_timestamp

# ---------------------------------------------------------------------------------------------
# Decoding


def _object_api(table: str) -> type:
    """The generated object-API class of ``table`` (``DataSchemaT``...), imported when a block
    first needs it: each pulls in the generated modules of everything it nests (tens of
    milliseconds), which reading the common events (AddData, Seed, ...) does not need."""
    import importlib

    return getattr(importlib.import_module(f"odf_chain.format.generated.{table}"), f"{table}T")


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


class TableReader:
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

    def table(self, slot: int) -> TableReader | None:
        o = self._field(slot)
        if not o:
            return None
        return TableReader(self.buf, self._indirect(self.pos + o))

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

    def vector_tables(self, slot: int) -> list[TableReader] | None:
        o = self._field(slot)
        if not o:
            return None
        start, length = self._vector(o)
        if start + 4 * length > len(self.buf):
            raise FormatError(f"vector of {length} tables runs past the end of the buffer")
        return [TableReader(self.buf, self._indirect(start + 4 * i)) for i in range(length)]

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
        return read_timestamp(self.buf, self.pos + o)


def as_hash(raw: bytes | None) -> Multihash | None:
    return None if raw is None else Multihash.from_bytes(raw)


def _read_data_slice(r: TableReader | None) -> DataSlice | None:
    if r is None:
        return None
    interval = r.table(2)
    if interval is None:
        raise FormatError("DataSlice without offset_interval")
    return DataSlice(
        logical_hash=as_hash(r.ubytes(0)),
        physical_hash=as_hash(r.ubytes(1)),
        offset_interval=OffsetInterval(interval.scalar(0, "Q", 0), interval.scalar(1, "Q", 0)),
        size=r.scalar(3, "Q", 0),
    )


def _read_checkpoint(r: TableReader | None) -> Checkpoint | None:
    if r is None:
        return None
    return Checkpoint(physical_hash=as_hash(r.ubytes(0)), size=r.scalar(1, "Q", 0))


def _read_extra(r: TableReader | None) -> Mapping[str, Any] | None:
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


def _read_add_data(r: TableReader) -> AddData:
    state = r.table(5)
    return AddData(
        prev_checkpoint=as_hash(r.ubytes(0)),
        prev_offset=r.scalar(1, "Q"),
        new_data=_read_data_slice(r.table(2)),
        new_checkpoint=_read_checkpoint(r.table(3)),
        new_watermark=r.timestamp(4),
        new_source_state=None
        if state is None
        else SourceState(state.string(0), state.string(1), state.string(2)),
        extra=_read_extra(r.table(6)),
    )


def _read_execute_transform(r: TableReader) -> ExecuteTransform:
    inputs = tuple(
        ExecuteTransformInput(
            dataset_id=None if (raw := i.ubytes(0)) is None else DatasetId.from_bytes(raw),
            prev_block_hash=as_hash(i.ubytes(1)),
            new_block_hash=as_hash(i.ubytes(2)),
            prev_offset=i.scalar(3, "Q"),
            new_offset=i.scalar(4, "Q"),
        )
        for i in r.vector_tables(0) or ()
    )
    return ExecuteTransform(
        query_inputs=inputs,
        prev_checkpoint=as_hash(r.ubytes(1)),
        prev_offset=r.scalar(2, "Q"),
        new_data=_read_data_slice(r.table(3)),
        new_checkpoint=_read_checkpoint(r.table(4)),
        new_watermark=r.timestamp(5),
        extra=_read_extra(r.table(6)),
    )


def _read_seed(r: TableReader) -> Seed:
    raw = r.ubytes(0)
    if raw is None:
        raise FormatError("Seed without dataset_id")
    kind = r.scalar(1, "i", 0)
    try:
        dataset_kind = DatasetKind(kind)
    except ValueError:
        raise FormatError(f"unknown dataset kind {kind} in Seed") from None
    return Seed(dataset_id=DatasetId.from_bytes(raw), dataset_kind=dataset_kind)


def _read_set_vocab(r: TableReader) -> SetVocab:
    return SetVocab(r.string(0), r.string(1), r.string(2), r.string(3))


def _read_set_info(r: TableReader) -> SetInfo:
    return SetInfo(description=r.string(0), keywords=r.strings(1))


def _read_set_license(r: TableReader) -> SetLicense:
    return SetLicense(r.string(0), r.string(1), r.string(2), r.string(3))


def _read_set_data_schema(r: TableReader) -> SetDataSchema:
    raw = r.ubytes(0)
    structured = None
    if r.table(1) is not None:
        structured = _plain_object(r, 1, _object_api("DataSchema"))
    if raw is None and structured is None:
        raise FormatError("SetDataSchema carries neither raw_arrow_schema nor schema")
    return SetDataSchema(raw_arrow_schema=raw, schema=structured)


def _read_disable_push_source(r: TableReader) -> DisablePushSource:
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


def _read_transformation(r: TableReader | None) -> Transformation:
    if r is None:
        return Transformation()
    return Transformation(
        type=_enum(TransformationType, r.scalar(0, "B", 0), "Transformation.type"),
        subtype=_enum(TransformationSubtype, r.scalar(1, "B", 0), "Transformation.subtype"),
        masking=r.scalar(2, "?", False),
        opaque=r.scalar(3, "?", False),
    )


def _read_lineage_input(r: TableReader) -> LineageInput:
    raw_id = r.ubytes(2)
    return LineageInput(
        name=_required(r.string(0), "LineageInput.name"),
        uri=r.string(1),
        dataset_id=None if raw_id is None else DatasetId.from_bytes(raw_id),
        block_hash=as_hash(r.ubytes(3)),
        content_hash=as_hash(r.ubytes(4)),
    )


def _read_field_operation(r: TableReader) -> FieldOperation:
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


def _read_lineage_run(r: TableReader | None) -> LineageRun:
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


def _read_add_field_lineage(r: TableReader) -> AddFieldLineage:
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


def _plain_object(r: TableReader, slot: int | None, cls: Any) -> dict[str, Any]:
    """Decode a (sub)table with the generated object API and flatten it to plain data."""
    target = r if slot is None else r.table(slot)
    assert target is not None
    obj = cls.InitFromBuf(target.buf, target.pos)
    return _plain(obj)


def _read_set_polling_source(r: TableReader) -> SetPollingSource:
    data = _plain_object(r, None, _object_api("SetPollingSource"))
    return SetPollingSource(**data)


def _read_set_transform(r: TableReader) -> SetTransform:
    return SetTransform(**_plain_object(r, None, _object_api("SetTransform")))


def _read_add_push_source(r: TableReader) -> AddPushSource:
    return AddPushSource(**_plain_object(r, None, _object_api("AddPushSource")))


def _read_set_attachments(r: TableReader) -> SetAttachments:
    return SetAttachments(**_plain_object(r, None, _object_api("SetAttachments")))


def _read_disable_polling_source(r: TableReader) -> DisablePollingSource:
    return DisablePollingSource()


EVENT_READERS: dict[int, Callable[[TableReader], MetadataEvent]] = {
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
