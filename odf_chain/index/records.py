"""The index's bytes: fixed-width records and snapshots, each carrying its own checksum. No I/O.

Files below ``info/odf-chain-index/``:

- ``seq-<n>``: the blocks ``n*1024 .. n*1024+1023``, one 54-byte record each (sequence number,
  system time in microseconds, block multihash, CRC-32 of the rest), at offset
  ``(seq % 1024) * 54``: a lookup by sequence number is one read, by time a binary search, and
  an append touches one small file.
- ``schemas`` and ``lineage``: a 46-byte record (sequence number, block hash, CRC-32) for every
  SetDataSchema and every AddFieldLineage, oldest first.
- ``head`` and ``snap-<seq>`` (every 256th block): a :class:`Snapshot` of the state.

The checksums catch damage (a torn write, a flipped bit), not forgery: a reader trusts nothing
here before checking it against the blocks it names (see :mod:`odf_chain.index.read`).
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from odf_chain.errors import FormatError
from odf_chain.events import (
    AddData,
    ExecuteTransform,
    MetadataBlock,
    OffsetInterval,
    Seed,
    SetDataSchema,
    SetInfo,
    SetLicense,
    SetTransform,
    SetVocab,
)
from odf_chain.format.multihash import Multihash
from odf_chain.state import DatasetState, PendingLineage, TransactionVersions

if TYPE_CHECKING:
    import numpy as np

INDEX_DIR = "odf-chain-index"
HEAD_SNAPSHOT = f"{INDEX_DIR}/head"
SCHEMA_LIST = f"{INDEX_DIR}/schemas"
LINEAGE_LIST = f"{INDEX_DIR}/lineage"
SEGMENT_ENTRIES = 1024
SNAPSHOT_INTERVAL = 256
HASH_BYTES = 34  # varint code, varint length 32, digest: both algorithms a chain may use
MAX_SNAPSHOT_BYTES = 16 * 1024 * 1024  # transactions grow with the number of app ids only
MAX_LIST_BYTES = 256 * 1024 * 1024

_SEQ = struct.Struct("<Qq34sI")
_LIST = struct.Struct("<Q34sI")
SEQ_RECORD_BYTES = _SEQ.size
_SEQ_DTYPE = [("seq", "<u8"), ("time", "<i8"), ("hash", f"S{HASH_BYTES}"), ("crc", "<u4")]
LIST_RECORD_BYTES = _LIST.size
SEGMENT_BYTES = SEGMENT_ENTRIES * SEQ_RECORD_BYTES
_MAGIC = b"odf-chain-index-snapshot 3 "  # 3: a derivative's transform and last run
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


class IndexDamage(Exception):
    """The index is missing, damaged or disagrees with the chain: never shown to users, the
    reader rebuilds instead (so this is deliberately not an OdfChainError)."""


def time_us(moment: datetime) -> int:
    """A block's system time as whole microseconds since the Unix epoch (what Python keeps)."""
    return (moment - _EPOCH) // _MICRO


def from_time_us(value: int) -> datetime:
    return _EPOCH + value * _MICRO


def _hash_bytes(block_hash: Multihash) -> bytes:
    raw = bytes(block_hash)
    if len(raw) != HASH_BYTES:
        raise FormatError(f"block hash {block_hash} does not fit the index ({len(raw)} bytes)")
    return raw


def _checked_hash(raw: bytes, where: str) -> Multihash:
    try:
        return Multihash.from_bytes(raw)
    except FormatError as exc:
        raise IndexDamage(f"{where}: {exc}") from None


# -- the sequence-number table ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SeqEntry:
    """Block ``sequence_number`` of the chain, as the index recorded it."""

    sequence_number: int
    block_hash: Multihash
    time_us: int


def segment_name(sequence_number: int) -> str:
    return f"{INDEX_DIR}/seq-{sequence_number // SEGMENT_ENTRIES:08d}"


def segment_offset(sequence_number: int) -> int:
    return sequence_number % SEGMENT_ENTRIES * SEQ_RECORD_BYTES


def raw_seq(data: bytes, first: int, where: str) -> list[tuple[int, int, bytes]]:
    """A segment's records as (sequence number, time, hash bytes), checked like
    :func:`decode_seq` but without building a Multihash each."""
    if len(data) % SEQ_RECORD_BYTES:
        raise IndexDamage(f"{where}: {len(data)} bytes, not whole records (torn or cut)")
    out = []
    for i, (seq, moment, raw, crc) in enumerate(_SEQ.iter_unpack(data)):
        if zlib.crc32(data[i * SEQ_RECORD_BYTES : (i + 1) * SEQ_RECORD_BYTES - 4]) != crc:
            raise IndexDamage(f"{where}: record {i} fails its checksum")
        if seq != first + i:
            raise IndexDamage(f"{where}: record {i} is block {seq}, expected {first + i}")
        out.append((seq, moment, raw))
    return out


def seq_records(data: bytes, first: int, where: str) -> np.ndarray:
    """A segment's records as a structured array (``seq``, ``time``, ``hash``), checked like
    :func:`decode_seq` but without an object per record: for verify's bulk compare."""
    import numpy as np

    if len(data) % SEQ_RECORD_BYTES:
        raise IndexDamage(f"{where}: {len(data)} bytes, not whole records (torn or cut)")
    records = np.frombuffer(data, _SEQ_DTYPE)
    body = SEQ_RECORD_BYTES - 4
    crcs = [zlib.crc32(data[at : at + body]) for at in range(0, len(data), SEQ_RECORD_BYTES)]
    bad = np.flatnonzero(records["crc"] != np.array(crcs, np.uint32))
    if len(bad):
        raise IndexDamage(f"{where}: record {int(bad[0])} fails its checksum")
    expected = np.arange(first, first + len(records), dtype=np.uint64)
    bad = np.flatnonzero(records["seq"] != expected)
    if len(bad):
        i = int(bad[0])
        raise IndexDamage(
            f"{where}: record {i} is block {int(records['seq'][i])}, expected {first + i}"
        )
    return records


def encode_seq(entries: list[SeqEntry]) -> bytes:
    out = bytearray()
    for e in entries:
        body = _SEQ.pack(e.sequence_number, e.time_us, _hash_bytes(e.block_hash), 0)[:-4]
        out += body + struct.pack("<I", zlib.crc32(body))
    return bytes(out)


class SeqTable:
    """The sequence-number table of a whole chain in columns (44 bytes a block, no object per
    block): what a bulk rebuild derives, holds and writes (:meth:`encode`)."""

    def __init__(self, hashes: np.ndarray, times: np.ndarray) -> None:
        self.hashes, self.times = hashes, times  # (n, 34) multihash bytes; microseconds

    def __len__(self) -> int:
        return len(self.times)

    def __getitem__(self, seq: int) -> SeqEntry:
        return SeqEntry(seq, Multihash.from_bytes(self.hashes[seq].tobytes()), int(self.times[seq]))

    def pairs(self) -> Iterator[tuple[int, bytes]]:
        """(sequence number, block hash bytes) of every block, oldest first."""
        for seq, raw in enumerate(self.hashes):
            yield seq, raw.tobytes()

    def encode(self, start: int, stop: int) -> bytes:
        """Records ``start..stop-1`` as :func:`encode_seq` writes them, built in columns (the
        checksums too: :func:`crc32_rows`)."""
        import numpy as np

        count = max(0, min(stop, len(self)) - start)
        records = np.zeros(count, _SEQ_DTYPE)
        records["seq"] = np.arange(start, start + count, dtype=np.uint64)
        records["time"] = self.times[start : start + count]
        records["hash"] = self.hashes[start : start + count].view(f"S{HASH_BYTES}").ravel()
        rows = records.view(np.uint8).reshape(count, SEQ_RECORD_BYTES)
        records["crc"] = crc32_rows(rows[:, : SEQ_RECORD_BYTES - 4])
        return records.tobytes()


_CRC_TABLE: np.ndarray | None = None


def crc32_rows(rows: np.ndarray) -> np.ndarray:
    """``zlib.crc32`` of each row of a 2-D uint8 array, in columns: one table step per byte
    of a row over all rows at once (the reflected CRC-32 of zlib, polynomial 0xEDB88320), so
    a million records cost a few dozen numpy operations, not a million calls."""
    import numpy as np

    global _CRC_TABLE
    if _CRC_TABLE is None:
        table = np.arange(256, dtype=np.uint32)
        for _ in range(8):
            table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1)
        _CRC_TABLE = table.astype(np.uint32)
    crc = np.full(len(rows), 0xFFFFFFFF, np.uint32)
    for column in range(rows.shape[1]):
        crc = _CRC_TABLE[(crc ^ rows[:, column]) & 0xFF] ^ (crc >> 8)
    return crc ^ np.uint32(0xFFFFFFFF)


def decode_seq(data: bytes, first: int, where: str) -> list[SeqEntry]:
    """The records of a segment whose first record is block ``first``; any damage raises."""
    if len(data) % SEQ_RECORD_BYTES:
        raise IndexDamage(f"{where}: {len(data)} bytes, not whole records (torn or cut)")
    entries = []
    for i in range(len(data) // SEQ_RECORD_BYTES):
        chunk = data[i * SEQ_RECORD_BYTES : (i + 1) * SEQ_RECORD_BYTES]
        seq, moment, raw, crc = _SEQ.unpack(chunk)
        if zlib.crc32(chunk[:-4]) != crc:
            raise IndexDamage(f"{where}: record {i} fails its checksum")
        if seq != first + i:
            raise IndexDamage(f"{where}: record {i} is block {seq}, expected {first + i}")
        entries.append(SeqEntry(seq, _checked_hash(raw, f"{where} record {i}"), moment))
    return entries


# -- the lists of SetDataSchema and AddFieldLineage blocks --------------------------------------


@dataclass(frozen=True, slots=True)
class Pointer:
    """A block the index names: where to find it and what it must hash to."""

    sequence_number: int
    block_hash: Multihash


def encode_list(pointers: list[Pointer]) -> bytes:
    out = bytearray()
    for p in pointers:
        body = _LIST.pack(p.sequence_number, _hash_bytes(p.block_hash), 0)[:-4]
        out += body + struct.pack("<I", zlib.crc32(body))
    return bytes(out)


def decode_list(data: bytes, where: str, first: int = 0) -> list[Pointer]:
    """The records of a list (or of its part from record ``first`` on), checked: whole,
    each against its checksum, in block order."""
    if len(data) % LIST_RECORD_BYTES:
        raise IndexDamage(f"{where}: {len(data)} bytes, not whole records (torn or cut)")
    pointers: list[Pointer] = []
    for i in range(len(data) // LIST_RECORD_BYTES):
        chunk = data[i * LIST_RECORD_BYTES : (i + 1) * LIST_RECORD_BYTES]
        pointer = decode_list_record(chunk, first + i, where)
        seq = pointer.sequence_number
        if pointers and seq <= pointers[-1].sequence_number:
            raise IndexDamage(f"{where}: record {first + i} (block {seq}) is out of order")
        pointers.append(pointer)
    return pointers


def decode_list_record(chunk: bytes, i: int, where: str) -> Pointer:
    """Record ``i`` of a list, its checksum checked."""
    seq, raw, crc = _LIST.unpack(chunk)
    if zlib.crc32(chunk[:-4]) != crc:
        raise IndexDamage(f"{where}: record {i} fails its checksum")
    return Pointer(seq, _checked_hash(raw, f"{where} record {i}"))


# -- snapshots ----------------------------------------------------------------------------------


def _data(event: object) -> bool:
    return isinstance(event, AddData | ExecuteTransform)


KINDS: dict[str, Callable[[object], bool]] = {
    "seed": lambda e: isinstance(e, Seed),
    "schema": lambda e: isinstance(e, SetDataSchema),
    "vocab": lambda e: isinstance(e, SetVocab),
    "info": lambda e: isinstance(e, SetInfo),
    "license": lambda e: isinstance(e, SetLicense),
    "data": lambda e: _data(e) and e.new_data is not None,  # type: ignore[attr-defined]
    "checkpoint": lambda e: _data(e) and e.new_checkpoint is not None,  # type: ignore[attr-defined]
    "watermark": lambda e: _data(e) and e.new_watermark is not None,  # type: ignore[attr-defined]
    "transform": lambda e: isinstance(e, SetTransform),
    "run": lambda e: isinstance(e, ExecuteTransform),
}
"""Each field of :class:`Pointers`: is an event of that kind (the block it names is one)?"""


@dataclass(frozen=True, slots=True)
class Pointers:
    """The last block that set each value which comes from one event. A snapshot keeps these
    instead of the values, so a reader takes the schema, vocab, info, license, last offset,
    checkpoint and watermark from genuine blocks it checks against their hashes."""

    seed: Pointer | None = None
    schema: Pointer | None = None
    vocab: Pointer | None = None
    info: Pointer | None = None
    license: Pointer | None = None
    data: Pointer | None = None  # the last block with new_data: last_offset
    checkpoint: Pointer | None = None  # the last block with new_checkpoint
    watermark: Pointer | None = None  # the last block with new_watermark
    transform: Pointer | None = None  # the last SetTransform
    run: Pointer | None = None  # the last ExecuteTransform: its input pins

    def after(self, block: MetadataBlock, block_hash: Multihash) -> Pointers:
        """The pointers once ``block`` is in the chain (which block last set what; the rules
        and the fold are elsewhere)."""
        here = Pointer(block.sequence_number, block_hash)
        event = block.event
        match event:
            case Seed():
                return replace(self, seed=here)
            case SetDataSchema():
                return replace(self, schema=here)
            case SetVocab():
                return replace(self, vocab=here)
            case SetInfo():
                return replace(self, info=here)
            case SetLicense():
                return replace(self, license=here)
            case SetTransform():
                return replace(self, transform=here)
            case AddData() | ExecuteTransform():
                changes = {"run": here} if isinstance(event, ExecuteTransform) else {}
                if event.new_data is not None:
                    changes["data"] = here
                if event.new_checkpoint is not None:
                    changes["checkpoint"] = here
                if event.new_watermark is not None:
                    changes["watermark"] = here
                return replace(self, **changes) if changes else self
        return self

    def named(self) -> list[tuple[str, Pointer]]:
        return [(k, getattr(self, k)) for k in self.__slots__ if getattr(self, k) is not None]


@dataclass(frozen=True)
class Snapshot:
    """Everything :class:`DatasetState` holds at one block: pointers for what one event sets,
    values for what accumulates (counters, push sources, transactions, lineage bookkeeping)."""

    sequence_number: int
    block_hash: Multihash
    time_us: int
    pointers: Pointers
    push_sources: tuple[str, ...] = ()
    polling_source: bool = False
    num_records: int = 0
    data_size: int = 0
    num_slices: int = 0
    lineage_pending: tuple[int, Multihash, int, int] | None = None  # seq, hash, start, end
    last_lineage_sequence_number: int | None = None
    transactions: tuple[tuple[str, int, int], ...] = field(default=())  # app, version, seq

    @classmethod
    def of_state(cls, state: DatasetState, pointers: Pointers) -> Snapshot:
        assert state.head is not None and state.system_time is not None
        pending = state.lineage_pending
        return cls(
            state.sequence_number,
            state.head,
            time_us(state.system_time),
            pointers,
            tuple(sorted(state.push_sources)),
            state.polling_source,
            state.num_records,
            state.data_size,
            state.num_slices,
            None
            if pending is None
            else (
                pending.sequence_number,
                pending.block_hash,
                pending.uncovered.start,
                pending.uncovered.end,
            ),
            state.last_lineage_sequence_number,
            tuple(state.transactions.triples()),
        )

    def encode(self) -> bytes:
        pending = self.lineage_pending
        body = json.dumps(
            {
                "seq": self.sequence_number,
                "hash": str(self.block_hash),
                "time_us": self.time_us,
                "pointers": {
                    k: [p.sequence_number, str(p.block_hash)] for k, p in self.pointers.named()
                },
                "push_sources": list(self.push_sources),
                "polling_source": self.polling_source,
                "num_records": self.num_records,
                "data_size": self.data_size,
                "num_slices": self.num_slices,
                "lineage_pending": None
                if pending is None
                else [pending[0], str(pending[1]), pending[2], pending[3]],
                "last_lineage_seq": self.last_lineage_sequence_number,
                "transactions": [list(t) for t in self.transactions],
            },
            separators=(",", ":"),
        ).encode("utf-8")
        return _MAGIC + b"%08x\n" % zlib.crc32(body) + body

    @classmethod
    def decode(cls, data: bytes, where: str) -> Snapshot:
        """A snapshot from its bytes; damage or a shape other than :meth:`encode`'s raises."""
        header, _, body = data.partition(b"\n")
        if not header.startswith(_MAGIC) or header[len(_MAGIC) :] != b"%08x" % zlib.crc32(body):
            raise IndexDamage(f"{where}: not a snapshot, or it fails its checksum")
        try:
            doc = json.loads(body)
            pointers = Pointers(
                **{
                    k: Pointer(_int(s), Multihash.from_multibase(h))
                    for k, (s, h) in doc["pointers"].items()
                }
            )
            pending = doc["lineage_pending"]
            return cls(
                _int(doc["seq"]),
                Multihash.from_multibase(doc["hash"]),
                _int(doc["time_us"], signed=True),
                pointers,
                tuple(_str(s) for s in doc["push_sources"]),
                _bool(doc["polling_source"]),
                _int(doc["num_records"]),
                _int(doc["data_size"]),
                _int(doc["num_slices"]),
                None
                if pending is None
                else (
                    _int(pending[0]),
                    Multihash.from_multibase(pending[1]),
                    _int(pending[2]),
                    _int(pending[3]),
                ),
                None if doc["last_lineage_seq"] is None else _int(doc["last_lineage_seq"]),
                tuple((_str(a), _int(v, signed=True), _int(s)) for a, v, s in doc["transactions"]),
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, FormatError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
            raise IndexDamage(f"{where}: malformed snapshot ({problem})") from None

    def values(self) -> dict:
        """The state's fields that the snapshot holds as values."""
        pending = self.lineage_pending
        return {
            "push_sources": frozenset(self.push_sources),
            "polling_source": self.polling_source,
            "num_records": self.num_records,
            "data_size": self.data_size,
            "num_slices": self.num_slices,
            "lineage_pending": None
            if pending is None
            else PendingLineage(pending[0], pending[1], OffsetInterval(pending[2], pending[3])),
            "last_lineage_sequence_number": self.last_lineage_sequence_number,
            "transactions": TransactionVersions(self.transactions),
        }


def _int(value: object, *, signed: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or (value < 0 and not signed):
        raise ValueError(f"expected a{'n' if signed else ' non-negative'} integer, got {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


# -- hash prefixes ------------------------------------------------------------------------------
#
# ``prefix/<xyz>`` (4,096 buckets, ``xyz`` the first 3 hex digits of a block's digest): one
# 20-byte record per block of the chain whose digest starts with them (the digest's first 8
# bytes, the block's sequence number, CRC-32 of the 16 bytes before it), in sequence order.
# ``prefixes`` (the coverage): the last block the buckets hold (sequence number and hash) and
# how many records each bucket holds up to it, with a CRC-32 of the whole: a bucket holding
# fewer records than its count is damaged (records past it, left by a crash between a bucket
# append and the coverage, are not read: the next writer writes over them). Writers bring the
# buckets and the coverage up to the head once every PREFIX_BATCH blocks (the 16 KB coverage is
# not rewritten at every append); readers match the blocks past the coverage, at most
# PREFIX_TAIL of them, through the seq table.

PREFIX_DIR = f"{INDEX_DIR}/prefix"
PREFIX_COVERAGE = f"{INDEX_DIR}/prefixes"
PREFIX_BUCKETS = 4096
PREFIX_BATCH = 64
"""Writers update the buckets when a commit reaches a multiple of this many blocks (and at the
Seed): the coverage lags the head by fewer blocks than this."""
PREFIX_TAIL = 4 * SEGMENT_ENTRIES
"""Blocks past the buckets' coverage a reader matches through the seq table before it lists
``blocks/`` instead; a writer finding the coverage further behind rewrites the buckets."""
PREFIX_KEY_BYTES = 8
_PREFIX = struct.Struct("<8sQI")
_COVERAGE_HEAD = struct.Struct("<Q34s")
PREFIX_RECORD_BYTES = _PREFIX.size
COVERAGE_BYTES = _COVERAGE_HEAD.size + 4 * PREFIX_BUCKETS + 4
_BIG_ENDIAN = sys.byteorder == "big"
assert array("I").itemsize == 4  # the counts are stored as 32-bit integers
MAX_BUCKET_BYTES = 1 << 30


def bucket_of(digest: bytes) -> int:
    """The bucket of a block whose digest (or its first two bytes) is ``digest``."""
    return digest[0] << 4 | digest[1] >> 4


def bucket_name(bucket: int) -> str:
    return f"{PREFIX_DIR}/{bucket:03x}"


def encode_prefix(digest: bytes, sequence_number: int) -> bytes:
    body = _PREFIX.pack(digest[:PREFIX_KEY_BYTES], sequence_number, 0)[:-4]
    return body + struct.pack("<I", zlib.crc32(body))


def decode_prefixes(data: bytes, count: int, where: str) -> list[tuple[bytes, int]]:
    """The first ``count`` records of a bucket as (8 digest bytes, sequence number); fewer
    records than that, or one failing its checksum, raises. Records past ``count`` are not
    read (a crash left them before the coverage counted them)."""
    if len(data) < count * PREFIX_RECORD_BYTES:
        raise IndexDamage(f"{where}: {len(data)} bytes, fewer than its {count} records")
    out = []
    for i, (key, seq, crc) in enumerate(_PREFIX.iter_unpack(data[: count * PREFIX_RECORD_BYTES])):
        start = i * PREFIX_RECORD_BYTES
        if zlib.crc32(data[start : start + PREFIX_RECORD_BYTES - 4]) != crc:
            raise IndexDamage(f"{where}: record {i} fails its checksum")
        out.append((key, seq))
    return out


@dataclass(frozen=True, slots=True)
class PrefixCoverage:
    """What the buckets hold: every block up to ``sequence_number`` (``block_hash``), and how
    many records each bucket holds up to it."""

    sequence_number: int
    block_hash: bytes  # multihash bytes
    counts: Sequence[int]  # an array of PREFIX_BUCKETS unsigned 32-bit counts, or any sequence

    def encode(self) -> bytes:
        counts = self.counts
        if not isinstance(counts, array) or counts.typecode != "I":
            counts = array("I", counts)
        if len(counts) != PREFIX_BUCKETS:
            raise ValueError(f"a coverage counts {PREFIX_BUCKETS} buckets, not {len(counts)}")
        if _BIG_ENDIAN:
            counts = array("I", counts)
            counts.byteswap()
        body = _COVERAGE_HEAD.pack(self.sequence_number, self.block_hash) + counts.tobytes()
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def decode(cls, data: bytes, where: str) -> PrefixCoverage:
        if (
            len(data) != COVERAGE_BYTES
            or zlib.crc32(data[:-4]) != struct.unpack("<I", data[-4:])[0]
        ):
            raise IndexDamage(f"{where}: not a prefix coverage, or it fails its checksum")
        seq, block_hash = _COVERAGE_HEAD.unpack_from(data)
        # an array, not a tuple: one copy of 16 KB instead of 4,096 ints made and, when the
        # buckets are brought up to the head, packed again
        counts = array("I", data[_COVERAGE_HEAD.size : -4])
        if _BIG_ENDIAN:
            counts.byteswap()
        _checked_hash(block_hash, where)
        return cls(seq, block_hash, counts)
