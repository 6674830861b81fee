"""``flatbuffers.Builder`` with its hot paths in fewer Python calls: the block encoder's.

Every append encodes a block, and the stock builder spends most of that time in bookkeeping
(a range check and a function call per scalar, a call per vtable entry). This subclass runs the
same layout algorithm, step for step (the same alignment, padding, buffer growth and vtable
sharing), so its bytes are the stock builder's: ``tests/test_codec.py`` encodes generated
blocks of every event type with both and compares them, and the reference vectors
(``tests/test_vectors.py``) hold for it.

What it leaves out is checking the caller: a value out of its type's range still fails (the
``struct`` packing raises ``struct.error`` where the stock builder raises a ``TypeError``; a
bool slot writes nothing but a bool, as the stock one), but a call out of order (a
field outside a table, a table inside a vector) is not diagnosed. The encoder's calls come in
one fixed order, which the tests above exercise; it refuses bad values itself, by field name,
before it calls the builder.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

import flatbuffers

_U8 = struct.Struct("<B").pack_into
_BOOL = struct.Struct("<?").pack_into
_I16 = struct.Struct("<h").pack_into
_U16 = struct.Struct("<H").pack_into
_I32 = struct.Struct("<i").pack_into
_U32 = struct.Struct("<I").pack_into
_I64 = struct.Struct("<q").pack_into
_U64 = struct.Struct("<Q").pack_into


@functools.cache
def _vtable_packer(entries: int) -> struct.Struct:
    """The packing of a vtable of ``entries`` 16-bit entries (its two sizes included)."""
    return struct.Struct(f"<{entries}H")


def _slot(width: int, pack: Callable[..., None]) -> Callable[..., None]:
    """A ``Prepend<Type>Slot`` method: the scalar, unless it is the default (and defaults are
    not forced), then its slot in the table's vtable."""

    def prepend_slot(self: Builder, o: int, x: Any, d: Any) -> None:
        self._scalar_slot(width, pack, o, x, d)

    return prepend_slot


def _scalar(width: int, pack: Callable[..., None]) -> Callable[..., None]:
    """A ``Prepend<Type>`` method: the scalar, aligned to its width."""

    def prepend(self: Builder, x: Any) -> None:
        self.Prep(width, 0)
        head = self.head - width
        pack(self.Bytes, head, x)
        self.head = head

    return prepend


class Builder(flatbuffers.Builder):
    """The stock builder, faster where the block encoder spends its time."""

    __slots__ = ()

    def Prep(self, size: int, additionalBytes: int) -> None:
        if size > self.minalign:
            self.minalign = size
        head = self.head
        align = -(len(self.Bytes) - head + additionalBytes) & (size - 1)
        needed = align + size + additionalBytes
        while head < needed:
            old = len(self.Bytes)
            self.GrowByteBuffer()
            head += len(self.Bytes) - old
        if align:
            self.Bytes[head - align : head] = bytes(align)
            head -= align
        self.head = head

    def _scalar_slot(self, width: int, pack, slot: int, value, default) -> None:
        if value != default or (self.forceDefaults and default is not None):
            self.Prep(width, 0)
            head = self.head - width
            pack(self.Bytes, head, value)
            self.head = head
            self.current_vtable[slot] = len(self.Bytes) - head

    def PrependBoolSlot(self, o: int, x, d) -> None:
        # "<?" packs anything as its truth: what is written must be a bool (an optional bool
        # left out, None with the default None, writes nothing, as in the stock builder)
        if (x != d or (self.forceDefaults and d is not None)) and not isinstance(x, bool):
            raise TypeError(f"flatbuffers: a bool slot given {type(x).__name__}")
        self._scalar_slot(1, _BOOL, o, x, d)

    # the base's names, each a scalar of one width and one packing
    PrependUint8Slot = PrependByteSlot = _slot(1, _U8)
    PrependInt16Slot, PrependUint16Slot = _slot(2, _I16), _slot(2, _U16)
    PrependInt32Slot, PrependUint32Slot = _slot(4, _I32), _slot(4, _U32)
    PrependInt64Slot, PrependUint64Slot = _slot(8, _I64), _slot(8, _U64)
    PrependUint8, PrependUint16 = _scalar(1, _U8), _scalar(2, _U16)
    PrependInt32, PrependUint32 = _scalar(4, _I32), _scalar(4, _U32)

    def PrependUOffsetTRelative(self, off: int) -> None:
        self.Prep(4, 0)
        offset = len(self.Bytes) - self.head
        if off > offset:
            raise flatbuffers.builder.OffsetArithmeticError("flatbuffers: Offset arithmetic error.")
        head = self.head - 4
        _U32(self.Bytes, head, offset - off + 4)
        self.head = head

    def PrependUOffsetTRelativeSlot(self, o: int, x: int, d: int) -> None:
        if x != d or self.forceDefaults:
            self.PrependUOffsetTRelative(x)
            self.current_vtable[o] = len(self.Bytes) - self.head

    def StartObject(self, numfields: int) -> None:
        self.current_vtable = [0] * numfields
        self.objectEnd = len(self.Bytes) - self.head
        self.nested = True

    def EndObject(self) -> int:
        """The base's ``WriteVtable``: the object's vtable offset slot, then the vtable (or a
        pointer to an equal one written before), its entries packed at once."""
        self.nested = False
        self.Prep(4, 0)  # the slot for the offset to the vtable, filled in below
        self.head -= 4
        object_offset = len(self.Bytes) - self.head
        fields = self.current_vtable
        used = len(fields)
        while used and not fields[used - 1]:  # trailing empty fields are left out
            used -= 1
        entries = [object_offset - f if f else 0 for f in fields[:used]]
        object_size = object_offset - self.objectEnd
        key = (*reversed(entries), object_size)  # the base's key: vtables are shared by it
        found = self.vtables.get(key)
        if found is None:
            size = 2 * (used + 2)
            self.Prep(2, size - 2)
            head = self.head - size
            _vtable_packer(used + 2).pack_into(self.Bytes, head, size, object_size, *entries)
            self.head = head
            vtable = len(self.Bytes) - head
            _I32(self.Bytes, len(self.Bytes) - object_offset, vtable - object_offset)
            self.vtables[key] = vtable
        else:  # the head is at the object's start still
            _I32(self.Bytes, self.head, found - object_offset)
        self.current_vtable = None
        return object_offset

    def StartVector(self, elemSize: int, numElems: int, alignment: int) -> int:
        self.nested = True
        self.vectorNumElems = numElems
        self.Prep(4, elemSize * numElems)
        self.Prep(alignment, elemSize * numElems)
        return len(self.Bytes) - self.head

    def EndVector(self, numElems: int | None = None) -> int:
        if numElems is not None:  # the base's deprecated form: its checks
            return super().EndVector(numElems)
        self.nested = False
        head = self.head - 4
        _U32(self.Bytes, head, self.vectorNumElems)
        self.head = head
        self.vectorNumElems = None
        return len(self.Bytes) - head

    def CreateString(self, s: str | bytes, encoding: str = "utf-8", errors: str = "strict") -> int:
        data = s.encode(encoding, errors) if isinstance(s, str) else s
        if not isinstance(data, bytes | bytearray):
            raise TypeError("non-string passed to CreateString")
        size = len(data)
        self.Prep(4, size + 1)
        head = self.head - 1 - size
        self.Bytes[head : head + size + 1] = data + b"\0"
        self.head = head
        self.vectorNumElems = size
        return self.EndVector()

    def CreateByteVector(self, x: bytes) -> int:
        if not isinstance(x, bytes | bytearray):
            raise TypeError("non-byte vector passed to CreateByteVector")
        size = len(x)
        self.Prep(4, size)
        head = self.head - size
        self.Bytes[head : head + size] = x
        self.head = head
        self.vectorNumElems = size
        return self.EndVector()
