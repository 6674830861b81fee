"""A ``flatbuffers.Builder`` that writes the same bytes with less Python per value.

The encoder checks every value by field name before it reaches the builder
(:mod:`~odf_chain.format.block_encoder`), so the builder's own check of each number
(``number_types.enforce_number``, a third of its time) and the helper calls around each write
are dropped here; the algorithm (alignment, padding, offsets, vtables and their sharing) is the
pinned ``flatbuffers`` release's, method for method. ``tests/test_vectors.py`` and
``tests/test_codec.py`` compare the bytes with the reference implementation's and with the
generic builder's.
"""

from __future__ import annotations

import flatbuffers
from flatbuffers import packer
from flatbuffers.builder import OffsetArithmeticError

_UOFFSET = packer.uoffset
_VOFFSET = packer.voffset
_SOFFSET = packer.soffset


class LeanBuilder(flatbuffers.Builder):
    """``flatbuffers.Builder`` (25.12.19) with its hot methods inlined; same bytes."""

    def Prep(self, size: int, additionalBytes: int) -> None:
        if size > self.minalign:
            self.minalign = size
        head = self.head
        buf_len = len(self.Bytes)
        align = -(buf_len - head + additionalBytes) & (size - 1)
        needed = align + size + additionalBytes
        while head < needed:
            old = buf_len
            self.GrowByteBuffer()
            buf_len = len(self.Bytes)
            head += buf_len - old
        if align:
            self.Bytes[head - align : head] = bytes(align)
            head -= align
        self.head = head

    def Place(self, x, flags) -> None:
        head = self.head - flags.bytewidth
        self.head = head
        flags.packer_type.pack_into(self.Bytes, head, x)

    def PlaceUOffsetT(self, x: int) -> None:
        head = self.head - 4
        self.head = head
        _UOFFSET.pack_into(self.Bytes, head, x)

    def PlaceVOffsetT(self, x: int) -> None:
        head = self.head - 2
        self.head = head
        _VOFFSET.pack_into(self.Bytes, head, x)

    def PlaceSOffsetT(self, x: int) -> None:
        head = self.head - 4
        self.head = head
        _SOFFSET.pack_into(self.Bytes, head, x)

    def Prepend(self, flags, off) -> None:
        self.Prep(flags.bytewidth, 0)
        head = self.head - flags.bytewidth
        self.head = head
        flags.packer_type.pack_into(self.Bytes, head, off)

    def PrependVOffsetT(self, x: int) -> None:
        self.Prep(2, 0)
        head = self.head - 2
        self.head = head
        _VOFFSET.pack_into(self.Bytes, head, x)

    def PrependSlot(self, flags, o: int, x, d) -> None:
        if x != d or (self.forceDefaults and d is not None):
            self.Prepend(flags, x)
            self.Slot(o)

    def PrependUOffsetTRelative(self, off: int) -> None:
        self.Prep(4, 0)
        offset = len(self.Bytes) - self.head
        if not off <= offset:
            raise OffsetArithmeticError("flatbuffers: Offset arithmetic error.")
        head = self.head - 4
        self.head = head
        _UOFFSET.pack_into(self.Bytes, head, offset - off + 4)
