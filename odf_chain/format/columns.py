"""Many stored blocks decoded at once into numpy columns: verify's bulk path.

Decoding a block into Python objects costs tens of microseconds, which made structural verify
of a long chain mostly decoding. Nearly every block of a long chain is an AddData of one shape,
so this module reads the fields of AddData blocks for all of them at once, with numpy gathers
over one buffer of all their bytes, and builds no object per block.

It decodes only what it can vouch for. A block is ``plain`` when it is an AddData whose layout
is in bounds everywhere this reader looks (stricter than :func:`codec.decode_block`, never
looser), with no checkpoint, a data slice (if any) whose hashes are two-byte-prefix
multihashes, a source state (if any) of UTF-8 strings, and ExtraAttributes that are a JSON
object (judged by :mod:`extra_json` as the block decoder parses them). AddData without a slice
(a poll that found nothing new records its watermark and source state so) are plain too: a
chain can be mostly such blocks. For a plain block,
:func:`codec.decode_block` would return exactly the values in the columns (tests hold the two to
that on valid, varied and damaged blocks).
Every other block (another event, a checkpoint, an odd or damaged layout) is left to
``decode_block``, one by one, which also words any error.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from odf_chain.format import extra_json
from odf_chain.format.codec import MANIFEST_KIND_METADATA_BLOCK, READABLE_VERSIONS
from odf_chain.format.events import EVENT_TYPE_IDS, AddData
from odf_chain.format.multihash import BLAKE3, SHA3_256, Multihash

ADD_DATA = EVENT_TYPE_IDS[AddData]
DIGEST_SIZE = 32
HASH_SIZE = 2 + DIGEST_SIZE  # a multihash whose code and length are one byte each
_CODES = np.array([Multihash(a, bytes(DIGEST_SIZE)).code for a in (BLAKE3, SHA3_256)], np.uint8)
_US_PER_DAY = 86_400_000_000


@dataclass(frozen=True, slots=True)
class BlockColumns:
    """The columns of ``n`` blocks; values are meaningful only where ``plain`` is True."""

    plain: np.ndarray  # bool: decoded here completely (an AddData of the plain shape)
    sequence_number: np.ndarray  # uint64
    system_time_us: np.ndarray  # int64 microseconds since the epoch, as decode_block truncates
    has_prev: np.ndarray  # bool
    prev_hash: np.ndarray  # (n, 34) uint8
    prev_offset: np.ndarray  # uint64
    has_prev_offset: np.ndarray  # bool
    has_data: np.ndarray  # bool: it adds a data slice (the five columns below: 0 where not)
    start: np.ndarray  # uint64: the slice's offset interval
    end: np.ndarray  # uint64
    size: np.ndarray  # uint64
    logical_hash: np.ndarray  # (n, 34) uint8
    physical_hash: np.ndarray  # (n, 34) uint8
    watermark_us: np.ndarray  # int64
    has_watermark: np.ndarray  # bool
    has_transaction: np.ndarray  # bool: its ExtraAttributes name a transaction
    extra_rows: np.ndarray  # int64: the rows whose ExtraAttributes text awaits a verdict
    extras: list[bytes]  # those texts, in that order

    def __len__(self) -> int:
        return len(self.plain)

    def take(self, rows: np.ndarray) -> BlockColumns:
        """These rows, in this order (a run of blocks in chain order); without the texts."""
        picked = {f.name: getattr(self, f.name)[rows] for f in fields(BlockColumns)[:-2]}
        return BlockColumns(**picked, extra_rows=np.zeros(0, np.int64), extras=[])

    @staticmethod
    def concat(parts: list[BlockColumns]) -> BlockColumns:
        """The rows of ``parts`` one after the other, texts included."""
        joined = {
            f.name: np.concatenate([getattr(p, f.name) for p in parts])
            for f in fields(BlockColumns)[:-2]
        }
        offsets = np.cumsum([0] + [len(p) for p in parts[:-1]])
        rows = np.concatenate(
            [p.extra_rows + offset for p, offset in zip(parts, offsets.tolist(), strict=True)]
        )
        return BlockColumns(**joined, extra_rows=rows, extras=[t for p in parts for t in p.extras])

    def rows(self, start: int, stop: int) -> BlockColumns:
        """Rows ``start..stop-1`` as views (no copy); without the texts."""
        picked = {f.name: getattr(self, f.name)[start:stop] for f in fields(BlockColumns)[:-2]}
        return BlockColumns(**picked, extra_rows=np.zeros(0, np.int64), extras=[])

    def judged(self, verdicts: bytes) -> BlockColumns:
        """These columns once every text of :attr:`extras` has its verdict
        (:func:`extra_json.judge`): a block whose text is refused is not plain."""
        codes = np.frombuffer(verdicts, np.uint8)
        plain, has_transaction = self.plain.copy(), self.has_transaction.copy()
        plain[self.extra_rows] &= codes != extra_json.REFUSED
        has_transaction[self.extra_rows] = codes == extra_json.TRANSACTION
        return replace(self, plain=plain, has_transaction=has_transaction, extras=[])


_INTEGERS = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}


class _Gather:
    """Little-endian reads at many absolute positions of one buffer, each checked against the
    extent ``[lo, hi)`` of the buffer it belongs to; a read outside clears ``ok``.

    One fancy index per read: a view whose row ``p`` is the ``width`` bytes from ``p`` on is
    indexed by the positions, and the rows reinterpreted as integers."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.a = np.frombuffer(data, np.uint8)

    def _rows(self, width: int) -> np.ndarray:
        a = self.a
        return np.lib.stride_tricks.as_strided(a, (max(len(a) - width + 1, 0), width), (1, 1))

    def read(
        self, pos: np.ndarray, width: int, lo: np.ndarray, hi: np.ndarray, ok: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(unsigned value, ok) for a ``width``-byte integer at each position."""
        ok = ok & (pos >= lo) & (pos + width <= hi)
        if len(self.a) < width:
            return np.zeros(len(pos), np.uint64), ok & False
        raw = self._rows(width)[np.where(ok, pos, 0)]
        value = raw.view(_INTEGERS[width])[:, 0].astype(np.uint64)
        return np.where(ok, value, np.uint64(0)), ok

    def take(self, pos: np.ndarray, length: int, ok: np.ndarray) -> np.ndarray:
        """(n, length) bytes at positions already checked (zeros where not ``ok``)."""
        if len(self.a) < length:
            return np.zeros((len(pos), length), np.uint8)
        rows = self._rows(length)[np.where(ok, pos, 0)]
        rows[~ok] = 0
        return rows


@dataclass(frozen=True, slots=True)
class _Table:
    pos: np.ndarray
    vtable: np.ndarray
    vsize: np.ndarray
    ok: np.ndarray


class _Reader:
    """Flatbuffer tables at many positions at once, each within its own buffer extent."""

    def __init__(self, g: _Gather, lo: np.ndarray, hi: np.ndarray) -> None:
        self.g, self.lo, self.hi = g, lo, hi

    def u(self, pos: np.ndarray, width: int, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.g.read(pos, width, self.lo, self.hi, ok)

    def table_at(self, pos: np.ndarray, ok: np.ndarray) -> _Table:
        back, ok = self.u(pos, 4, ok)
        back = back.astype(np.int64)
        vtable = pos - np.where(back >= 1 << 31, back - (1 << 32), back)  # a signed offset
        vsize, ok = self.u(vtable, 2, ok & (vtable >= self.lo) & (vtable + 4 <= self.hi))
        vsize = vsize.astype(np.int64)
        ok = ok & (vsize % 2 == 0) & (vsize >= 4) & (vtable + vsize <= self.hi)
        return _Table(pos, vtable, vsize, ok)

    def root(self, ok: np.ndarray) -> _Table:
        ok = ok & (self.hi - self.lo >= 8)
        offset, ok = self.u(self.lo, 4, ok)
        return self.table_at(self.lo + offset.astype(np.int64), ok)

    def field(self, t: _Table, slot: int) -> np.ndarray:
        """The field's offset from the table (0: absent), where ``t.ok``."""
        inside = t.ok & (4 + 2 * slot + 2 <= t.vsize)
        offset, _ = self.u(t.vtable + 4 + 2 * slot, 2, inside)
        return offset.astype(np.int64)

    def scalar(self, t: _Table, slot: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(value, present, ok): absent fields read as 0 with ``present`` False."""
        o = self.field(t, slot)
        present = t.ok & (o != 0)
        value, read_ok = self.u(t.pos + o, width, present)
        return value, present, t.ok & (read_ok | ~present)

    def child(self, t: _Table, slot: int) -> tuple[_Table, np.ndarray]:
        """(the table the field points to, present)."""
        o = self.field(t, slot)
        present = t.ok & (o != 0)
        at = t.pos + o
        rel, ok = self.u(at, 4, present)
        child = self.table_at(at + rel.astype(np.int64), ok)
        return child, present

    def vector(self, t: _Table, slot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(data start, length, present, ok) of a byte vector field."""
        o = self.field(t, slot)
        present = t.ok & (o != 0)
        at = t.pos + o
        rel, ok = self.u(at, 4, present)
        head = at + rel.astype(np.int64)
        length, ok = self.u(head, 4, ok)
        length = length.astype(np.int64)
        ok = ok & (head + 4 + length <= self.hi)
        return head + 4, length, present, t.ok & (ok | ~present)


def _timestamps(r: _Reader, t: _Table, slot: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(microseconds since the epoch, present, ok) of an inline Timestamp struct, valid exactly
    where decode_block's timestamp reader accepts it."""
    o = r.field(t, slot)
    present = t.ok & (o != 0)
    at = t.pos + o
    year, ok = r.u(at, 4, present)
    ordinal, ok = r.u(at + 4, 2, ok)
    seconds, ok = r.u(at + 8, 4, ok)
    nanos, ok = r.u(at + 12, 4, ok)
    year = year.astype(np.int64)
    year = np.where(year >= 1 << 31, year - (1 << 32), year)
    ordinal = ordinal.astype(np.int64)
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    ok = (
        ok
        & (year >= 1)
        & (year <= 9999)
        & (ordinal >= 1)
        & (ordinal <= 365 + leap)
        & (seconds < np.uint64(86_400))
        & (nanos < np.uint64(1_000_000_000))
    )
    safe_year = np.where(ok, year, 1970) - 1970
    jan1 = safe_year.astype("datetime64[Y]").astype("datetime64[D]").astype(np.int64)
    micros = (
        (jan1 + ordinal - 1) * _US_PER_DAY
        + seconds.astype(np.int64) * 1_000_000
        + (nanos // np.uint64(1000)).astype(np.int64)
    )
    return np.where(ok, micros, 0), present, t.ok & (ok | ~present)


def _short_multihash(raw: np.ndarray) -> np.ndarray:
    """Rows that ``Multihash.from_bytes`` reads in its short form (a known code, 32 bytes)."""
    return np.isin(raw[:, 0], _CODES) & (raw[:, 1] == DIGEST_SIZE)


def _utf8(
    buffer: bytes, strings: list[tuple[np.ndarray, np.ndarray, np.ndarray]], ok: np.ndarray
) -> np.ndarray:
    """Where every one of ``strings`` (start, length, present) of a row is UTF-8, as the block
    decoder requires. One decode of them all, each followed by a newline: an ASCII byte cannot
    continue a multi-byte sequence, so the whole is UTF-8 exactly when every string is; only
    when it is not is each string decoded on its own."""
    pieces: list[tuple[int, int, int]] = []
    for start, length, present in strings:
        rows = np.flatnonzero(ok & present)
        pieces += zip(rows.tolist(), start[rows].tolist(), length[rows].tolist(), strict=True)
    valid = np.ones(len(ok), bool)
    try:
        b"\n".join(buffer[s : s + n] for _, s, n in pieces).decode("utf-8")
    except UnicodeDecodeError:
        for k, s, n in pieces:
            try:
                buffer[s : s + n].decode("utf-8")
            except UnicodeDecodeError:
                valid[k] = False
    return valid


def decode_columns(blocks: list[bytes]) -> BlockColumns:
    """Decode ``blocks`` (stored block bytes) into columns; see the module docstring."""
    n = len(blocks)
    lengths = np.fromiter((len(b) for b in blocks), np.int64, n)
    lo = np.zeros(n, np.int64)
    if n:
        lo[1:] = np.cumsum(lengths)[:-1]
    hi = lo + lengths
    g = _Gather(b"".join(blocks))
    ok = np.ones(n, bool)

    # The manifest envelope, then the nested MetadataBlock in its own extent.
    outer = _Reader(g, lo, hi)
    manifest = outer.root(ok)
    kind, present, kind_ok = outer.scalar(manifest, 0, 8)
    version, _, version_ok = outer.scalar(manifest, 1, 4)
    ok = kind_ok & version_ok & present & (kind == np.uint64(MANIFEST_KIND_METADATA_BLOCK))
    ok &= np.isin(version, np.array(READABLE_VERSIONS, np.uint64))
    start, length, present, content_ok = outer.vector(manifest, 2)
    ok &= content_ok & present
    inner = _Reader(g, np.where(ok, start, 0), np.where(ok, start + length, 0))
    block = inner.root(ok)
    system_time, present, time_ok = _timestamps(inner, block, 0)
    ok = block.ok & time_ok & present
    prev_start, prev_len, has_prev, prev_ok = inner.vector(block, 1)
    ok &= prev_ok & (~has_prev | (prev_len == HASH_SIZE))
    seq, _, seq_ok = inner.scalar(block, 2, 8)
    event_type, _, type_ok = inner.scalar(block, 3, 1)
    ok &= seq_ok & type_ok & (event_type == np.uint64(ADD_DATA))
    event, present = inner.child(block, 4)
    ok &= present & event.ok

    # AddData: no checkpoint either way, a data slice.
    for slot in (0, 3):  # prev_checkpoint, new_checkpoint
        ok &= inner.field(event, slot) == 0
    source, has_source = inner.child(event, 5)  # three optional strings
    ok &= ~has_source | source.ok
    strings = []
    for slot in range(3):
        start, length, present, string_ok = inner.vector(source, slot)
        ok &= ~has_source | string_ok
        strings.append((start, length, present & has_source))
    prev_offset, has_prev_offset, po_ok = inner.scalar(event, 1, 8)
    ok &= po_ok
    watermark, has_watermark, wm_ok = _timestamps(inner, event, 4)
    ok &= wm_ok
    data, has_data = inner.child(event, 2)  # the slice, when there is one: all of it
    has_data &= ok
    whole = data.ok
    logical_start, logical_len, present, l_ok = inner.vector(data, 0)
    whole &= l_ok & present & (logical_len == HASH_SIZE)
    physical_start, physical_len, present, p_ok = inner.vector(data, 1)
    whole &= p_ok & present & (physical_len == HASH_SIZE)
    size, _, size_ok = inner.scalar(data, 3, 8)
    whole &= size_ok
    interval, present = inner.child(data, 2)
    whole &= present & interval.ok
    first, _, first_ok = inner.scalar(interval, 0, 8)
    last, _, last_ok = inner.scalar(interval, 1, 8)
    whole &= first_ok & last_ok
    ok &= ~has_data | whole
    extra_table, has_extra = inner.child(event, 6)
    ok &= ~has_extra | extra_table.ok
    text_start, text_len, has_text, text_ok = inner.vector(extra_table, 0)
    ok &= ~has_extra | text_ok

    # Everything below reads only where ok, so nothing reads out of bounds.
    has_data &= ok
    prev_hash = g.take(prev_start, HASH_SIZE, ok & has_prev)
    logical = g.take(logical_start, HASH_SIZE, has_data)
    physical = g.take(physical_start, HASH_SIZE, has_data)
    ok &= ~has_prev | _short_multihash(prev_hash)
    ok &= ~has_data | (_short_multihash(logical) & _short_multihash(physical))
    buffer = g.data
    ok &= _utf8(buffer, strings, ok)
    rows = np.flatnonzero(ok & has_extra & has_text)
    extras = [
        buffer[start : start + length]
        for start, length in zip(text_start[rows].tolist(), text_len[rows].tolist(), strict=True)
    ]
    return BlockColumns(
        plain=ok,
        sequence_number=seq,
        system_time_us=system_time,
        has_prev=has_prev & ok,
        prev_hash=prev_hash,
        prev_offset=prev_offset,
        has_prev_offset=has_prev_offset & ok,
        has_data=has_data & ok,
        start=np.where(has_data, first, np.uint64(0)),
        end=np.where(has_data, last, np.uint64(0)),
        size=np.where(has_data, size, np.uint64(0)),
        logical_hash=logical,
        physical_hash=physical,
        watermark_us=watermark,
        has_watermark=has_watermark & ok,
        has_transaction=np.zeros(n, bool),
        extra_rows=rows,
        extras=extras,
    )
