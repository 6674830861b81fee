"""Bare Arrow ``Schema`` flatbuffers built by hand with the flatbuffers builder, for forged
``SetDataSchema.raw_arrow_schema`` bytes that pyarrow would never write (strings that are not
UTF-8, nesting deeper than the limit). Table layouts and union ids are Arrow's ``Schema.fbs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import flatbuffers

# Type union ids (Schema.fbs)
INT, TIMESTAMP, STRUCT = 2, 10, 13
MILLISECOND = 1  # TimeUnit


@dataclass(frozen=True)
class Field:
    name: bytes
    type_id: int
    build_type: Callable[[flatbuffers.Builder], int]
    nullable: bool = True
    children: Sequence[Field] = ()
    metadata: Sequence[tuple[bytes, bytes]] = field(default_factory=tuple)


def int_type(bits: int = 64) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        b.StartObject(2)  # Int { bitWidth: int; is_signed: bool }
        b.PrependInt32Slot(0, bits, 0)
        b.PrependBoolSlot(1, True, False)
        return b.EndObject()

    return build


def timestamp_type(timezone: bytes) -> Callable[[flatbuffers.Builder], int]:
    def build(b: flatbuffers.Builder) -> int:
        tz = b.CreateString(timezone)
        b.StartObject(2)  # Timestamp { unit: TimeUnit (short); timezone: string }
        b.PrependInt16Slot(0, MILLISECOND, 0)
        b.PrependUOffsetTRelativeSlot(1, tz, 0)
        return b.EndObject()

    return build


def struct_type(b: flatbuffers.Builder) -> int:
    b.StartObject(0)  # Struct_ {}
    return b.EndObject()


def _vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        b.PrependUOffsetTRelative(offset)
    return b.EndVector()


def _key_values(b: flatbuffers.Builder, pairs: Sequence[tuple[bytes, bytes]]) -> int:
    built = []
    for key, value in pairs:
        k, v = b.CreateString(key), b.CreateString(value)
        b.StartObject(2)  # KeyValue { key: string; value: string }
        b.PrependUOffsetTRelativeSlot(0, k, 0)
        b.PrependUOffsetTRelativeSlot(1, v, 0)
        built.append(b.EndObject())
    return _vector(b, built)


def _field(b: flatbuffers.Builder, f: Field) -> int:
    # iterative over a chain of single children, so that thousands of levels can be built
    chain = [f]
    while len(chain[-1].children) == 1:
        chain.append(chain[-1].children[0])
    below = [_field(b, c) for c in chain[-1].children]  # a wider struct at the bottom
    for node in reversed(chain):
        type_table = node.build_type(b)
        children = _vector(b, below)
        metadata = _key_values(b, node.metadata) if node.metadata else None
        name = b.CreateString(node.name)
        # Field { name; nullable; type_type; type; dictionary; children; custom_metadata }
        b.StartObject(7)
        b.PrependUOffsetTRelativeSlot(0, name, 0)
        b.PrependBoolSlot(1, node.nullable, False)
        b.PrependUint8Slot(2, node.type_id, 0)
        b.PrependUOffsetTRelativeSlot(3, type_table, 0)
        b.PrependUOffsetTRelativeSlot(5, children, 0)
        if metadata is not None:
            b.PrependUOffsetTRelativeSlot(6, metadata, 0)
        below = [b.EndObject()]
    return below[0]


def schema(fields: Sequence[Field], metadata: Sequence[tuple[bytes, bytes]] = ()) -> bytes:
    """A bare Schema flatbuffer (the root table is Arrow's ``Schema``)."""
    b = flatbuffers.Builder(1024)
    built = _vector(b, [_field(b, f) for f in fields])
    custom = _key_values(b, metadata) if metadata else None
    b.StartObject(4)  # Schema { endianness; fields; custom_metadata; features }
    b.PrependUOffsetTRelativeSlot(1, built, 0)
    if custom is not None:
        b.PrependUOffsetTRelativeSlot(2, custom, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def system_fields(event_time_zone: bytes = b"UTC") -> list[Field]:
    """ODF's system columns as odf_chain declares them, event time in ``event_time_zone``."""
    return [
        Field(b"offset", INT, int_type(64), nullable=False),
        Field(b"op", INT, int_type(32), nullable=False),
        Field(b"system_time", TIMESTAMP, timestamp_type(b"UTC"), nullable=False),
        Field(b"event_time", TIMESTAMP, timestamp_type(event_time_zone), nullable=False),
    ]


def nested_struct(name: bytes, levels: int) -> Field:
    """A column of ``levels`` structs, one inside the other, around an int64 (its innermost
    field is at level ``levels + 1``)."""
    inner = Field(b"leaf", INT, int_type(64))
    for _ in range(levels):
        inner = Field(b"f", STRUCT, struct_type, children=(inner,))
    return Field(name, inner.type_id, inner.build_type, children=inner.children)
