"""Writing the index's hash-prefix buckets (``prefix/<xyz>`` and their coverage, ``prefixes``:
see :mod:`odf_chain.index.records`), which let a hash prefix a user typed be resolved by reading
one bucket (:meth:`odf_chain.index.read.ChainIndex.blocks_with_prefix`) instead of listing
``blocks/``.

Best effort like the rest of the index: nothing here raises to a writer, and readers believe
nothing here before checking it against the seq table and the blocks. Order makes a crash
harmless: bucket records first, the coverage last; a bucket record past its coverage count is
never read, and the next writer writes over it.
"""

from __future__ import annotations

import contextlib
import itertools
from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from typing import TYPE_CHECKING

from odf_chain.errors import OdfChainError
from odf_chain.format.multihash import Multihash
from odf_chain.index.records import (
    COVERAGE_BYTES,
    PREFIX_BATCH,
    PREFIX_BUCKETS,
    PREFIX_COVERAGE,
    PREFIX_DIR,
    PREFIX_KEY_BYTES,
    PREFIX_RECORD_BYTES,
    PREFIX_TAIL,
    SEGMENT_BYTES,
    SEGMENT_ENTRIES,
    IndexDamage,
    PrefixCoverage,
    SeqEntry,
    bucket_name,
    bucket_of,
    crc32_rows,
    encode_prefix,
    raw_seq,
    segment_name,
)
from odf_chain.storage import DerivedStore

if TYPE_CHECKING:
    import numpy as np

WRITE_BUFFER = 16 << 20
"""Bytes of records :func:`write_prefixes` holds before appending them to their buckets."""

_ERRORS = (OdfChainError, OSError, ValueError, IndexDamage)


def write_prefixes(
    storage: DerivedStore,
    blocks: Iterable[tuple[int, Multihash | bytes]],
    *,
    buffer_bytes: int = WRITE_BUFFER,
) -> bool:
    """Write the prefix buckets whole from ``blocks``: (sequence number, block hash) of every
    block of the chain, in sequence order from the Seed (0, 1, 2, ...), streamed: at most
    ``buffer_bytes`` of records are held before they are appended to their buckets, whatever
    the chain's length. What was there is removed first, the coverage written last. True when
    written; never raises (False: readers list ``blocks/`` until a writer succeeds)."""
    with contextlib.suppress(*_ERRORS), storage.derived_batch():
        storage.remove_derived(PREFIX_COVERAGE)
        storage.remove_derived(PREFIX_DIR)
        pending: dict[int, bytearray] = defaultdict(bytearray)
        counts = [0] * PREFIX_BUCKETS
        held = 0
        last: bytes | None = None
        expected = 0
        for seq, block_hash in blocks:
            raw = bytes(block_hash)
            if seq != expected:
                raise ValueError(f"block {seq} given where block {expected} was expected")
            digest = raw[2:]
            bucket = bucket_of(digest)
            pending[bucket] += encode_prefix(digest, seq)
            held += PREFIX_RECORD_BYTES
            if held >= buffer_bytes:
                _flush(storage, pending, counts)
                held = 0
            expected, last = seq + 1, raw
        if last is None:
            return False
        _flush(storage, pending, counts)
        storage.write_derived(
            PREFIX_COVERAGE, PrefixCoverage(expected - 1, last, tuple(counts)).encode()
        )
        return True
    return False


_GROUPS = 16  # bucket_records derives the buckets a sixteenth at a time (first hex digit)


def prefix_keys(hashes: np.ndarray) -> np.ndarray:
    """The 8 first digest bytes of each block (rows of multihash bytes, 34 each): what a
    prefix record holds of its block, one row each (a view: no copy)."""
    return hashes[:, 2 : 2 + PREFIX_KEY_BYTES]


def bucket_records(keys: np.ndarray) -> Iterator[tuple[int, bytes]]:
    """What each bucket holds for the blocks ``0..len(keys)-1`` (``keys``: their
    :func:`prefix_keys`, in sequence order): (bucket, its records as :func:`write_prefixes`
    writes them, in sequence order) for every bucket that has any, in bucket order. Built in
    columns a sixteenth of the buckets at a time (a few bytes a block of that sixteenth held at
    once, no object per block): the one derivation a bulk rebuild writes and verify compares
    (:mod:`odf_chain.index.check`)."""
    import numpy as np

    dtype = np.dtype([("key", f"S{PREFIX_KEY_BYTES}"), ("seq", "<u8"), ("crc", "<u4")])
    assert dtype.itemsize == PREFIX_RECORD_BYTES  # records.encode_prefix's layout
    top = keys[:, 0] >> 4 if len(keys) else np.zeros(0, np.uint8)
    for group in range(_GROUPS):
        seqs = np.flatnonzero(top == group)
        if not len(seqs):
            continue
        group_keys = keys[seqs]
        buckets = group_keys[:, 0].astype(np.uint16) << 4 | group_keys[:, 1] >> 4
        order = np.argsort(buckets, kind="stable")  # by bucket, in sequence order within one
        seqs, buckets, group_keys = seqs[order], buckets[order], group_keys[order]
        records = np.zeros(len(seqs), dtype)
        records["key"] = group_keys.view(f"S{PREFIX_KEY_BYTES}").ravel()
        records["seq"] = seqs
        rows = records.view(np.uint8).reshape(len(seqs), PREFIX_RECORD_BYTES)
        records["crc"] = crc32_rows(rows[:, : PREFIX_RECORD_BYTES - 4])
        raw = records.tobytes()
        per = PREFIX_BUCKETS // _GROUPS
        bounds = np.searchsorted(buckets, np.arange(group * per, (group + 1) * per + 1))
        for k in range(per):
            start, stop = int(bounds[k]), int(bounds[k + 1])
            if stop > start:
                yield group * per + k, raw[start * PREFIX_RECORD_BYTES : stop * PREFIX_RECORD_BYTES]


def write_bucket_table(
    storage: DerivedStore, hashes: np.ndarray, *, emptied: bool = False
) -> list[str] | None:
    """The buckets of :func:`write_prefixes` for a whole chain held in columns (``hashes``:
    the multihash bytes of blocks ``0..n-1``, a row each; a bulk rebuild's table), the same
    bytes built by :func:`bucket_records`, each bucket written once and in place; the names
    of the buckets written, for :func:`write_coverage` to follow. What was there is removed
    first (``emptied``: the caller did), so a bucket torn by a crash holds fewer or broken
    records than the coverage, written after them, counts: readers then list ``blocks/``.
    Never raises (None: not written)."""
    with contextlib.suppress(*_ERRORS), storage.derived_batch():
        storage.remove_derived(PREFIX_COVERAGE)
        if not emptied:
            storage.remove_derived(PREFIX_DIR)
        if not len(hashes):
            return None
        written = []
        for bucket, raw in bucket_records(prefix_keys(hashes)):
            storage.overwrite_derived(bucket_name(bucket), raw)
            written.append(bucket_name(bucket))
        return written
    return None


def write_coverage(storage: DerivedStore, hashes: np.ndarray) -> bool:
    """After :func:`write_bucket_table`: the coverage of its buckets (every block of
    ``hashes``). Never raises."""
    with contextlib.suppress(*_ERRORS):
        import numpy as np

        buckets = hashes[:, 2].astype(np.uint16) << 4 | hashes[:, 3] >> 4
        counts = np.bincount(buckets, minlength=PREFIX_BUCKETS).tolist()
        coverage = PrefixCoverage(len(hashes) - 1, hashes[-1].tobytes(), tuple(counts))
        storage.write_derived(PREFIX_COVERAGE, coverage.encode())
        return True
    return False


def _flush(
    storage: DerivedStore, pending: dict[int, bytearray], counts: MutableSequence[int]
) -> None:
    """Append each bucket's pending records after its ``counts`` records."""
    for bucket, records in sorted(pending.items()):
        offset = counts[bucket] * PREFIX_RECORD_BYTES
        if not storage.patch_derived(bucket_name(bucket), offset, bytes(records)):
            raise IndexDamage(f"{bucket_name(bucket)} lacks records before its end")
        counts[bucket] += len(records) // PREFIX_RECORD_BYTES
    pending.clear()


def _coverage(storage: DerivedStore) -> PrefixCoverage | None:
    raw = storage.read_derived(PREFIX_COVERAGE, COVERAGE_BYTES)
    return None if raw is None else PrefixCoverage.decode(raw, PREFIX_COVERAGE)


def due(first: int, last: int) -> bool:
    """Does a commit of blocks ``first..last`` bring the buckets up to date? At the Seed, and when
    it reaches the end of a batch of :data:`PREFIX_BATCH` blocks: the coverage then lags the
    head by fewer blocks than that, which readers match through the seq table."""
    return first == 0 or (last + 1) // PREFIX_BATCH > first // PREFIX_BATCH


def extend_records(storage: DerivedStore, entries: Sequence[SeqEntry]) -> bytes | None:
    """Bring the buckets up to the last of ``entries`` (consecutive blocks just committed, their
    seq records written): :func:`_extend_to`, the blocks before ``entries`` read from the seq
    table."""
    known = [(e.sequence_number, bytes(e.block_hash)) for e in entries]
    return _extend_to(storage, known[-1][0], known[-1][1], known)


def _extend_to(
    storage: DerivedStore, upto: int, head: bytes, known: Sequence[tuple[int, bytes]] = ()
) -> bytes | None:
    """The buckets brought up to block ``upto`` (``head`` its hash bytes): the records of the
    blocks past the coverage appended to their buckets (past the coverage's counts: not read
    until it counts them), ``known`` (sequence number, hash bytes) of the last of them, the
    others read from the seq table; the new coverage returned, written last by the caller.
    None when the buckets cannot be extended: the coverage is missing, damaged, not a block of
    the seq table (another branch's), past the blocks to add or more than :data:`PREFIX_TAIL`
    blocks behind them, or the table does not end at ``head``."""
    first = known[0][0] if known else upto + 1  # the first block not read from the table
    between: Iterable[tuple[int, bytes]] = ()
    if first == 0:
        counts = array("I", bytes(4 * PREFIX_BUCKETS))
        storage.remove_derived(PREFIX_DIR)
    else:
        coverage = _coverage(storage)
        if coverage is None:
            return None
        covered = coverage.sequence_number
        if not first - PREFIX_TAIL <= covered < first:
            return None
        if table_hash(storage, covered) != coverage.block_hash:
            return None
        counts = array("I", coverage.counts)
        between = table_blocks(storage, first - 1, start=covered + 1)
    pending: dict[int, bytearray] = defaultdict(bytearray)
    last = None
    for seq, raw_hash in itertools.chain(between, known):
        digest = raw_hash[2:]
        pending[bucket_of(digest)] += encode_prefix(digest, seq)
        last = (seq, raw_hash)
    if last != (upto, head):  # nothing to add, or the table ends elsewhere
        return None
    _flush(storage, pending, counts)
    return PrefixCoverage(upto, head, counts).encode()


def table_blocks(
    storage: DerivedStore, upto: int, *, start: int = 0
) -> Iterable[tuple[int, bytes]]:
    """(sequence number, hash bytes) of blocks ``start..upto`` from the seq table's segments,
    one segment at a time; IndexDamage where a segment is missing, damaged or short."""
    if start > upto:
        return
    for number in range(start // SEGMENT_ENTRIES, upto // SEGMENT_ENTRIES + 1):
        name = segment_name(number * SEGMENT_ENTRIES)
        raw = storage.read_derived(name, SEGMENT_BYTES)
        if raw is None:
            raise IndexDamage(f"{name} is missing")
        records = raw_seq(raw, number * SEGMENT_ENTRIES, name)
        end = min(upto + 1 - number * SEGMENT_ENTRIES, SEGMENT_ENTRIES)
        if len(records) < end:
            raise IndexDamage(f"{name} ends before block {number * SEGMENT_ENTRIES + end - 1}")
        for seq, _, raw_hash in records[max(start - number * SEGMENT_ENTRIES, 0) : end]:
            yield seq, raw_hash


def record_blocks(
    storage: DerivedStore, entries: Sequence[SeqEntry], *, rewrite: bool = True
) -> bool:
    """After the seq table took ``entries`` (consecutive blocks ending at the head): bring the
    buckets up to them (:func:`extend_records`), or, when they cannot be extended (missing,
    damaged, far behind, or of a rolled-back branch), write them anew from the seq table (once
    per such repair: an index written before the buckets existed, say), unless ``rewrite`` is
    False (then False, nothing removed: records a failure left past the counts are never
    read). Never raises."""
    if not entries:
        return True
    with contextlib.suppress(*_ERRORS), storage.derived_batch():
        coverage = extend_records(storage, entries)
        if coverage is not None:
            storage.overwrite_derived(PREFIX_COVERAGE, coverage)
            return True
        if not rewrite:
            return False
        storage.remove_derived(PREFIX_COVERAGE)
        return write_prefixes(storage, table_blocks(storage, entries[-1].sequence_number))
    if rewrite:  # a rewrite that failed: the buckets no coverage counts are not read
        with contextlib.suppress(*_ERRORS):
            storage.remove_derived(PREFIX_COVERAGE)
    return False


def table_hash(storage: DerivedStore, seq: int) -> bytes | None:
    """The seq table's hash bytes of block ``seq`` (None: not there)."""
    with contextlib.suppress(*_ERRORS):
        name = segment_name(seq)
        raw = storage.read_derived(name, SEGMENT_BYTES)
        if raw is not None:
            records = raw_seq(raw, seq - seq % SEGMENT_ENTRIES, name)
            if seq % SEGMENT_ENTRIES < len(records):
                return records[seq % SEGMENT_ENTRIES][2]
    return None


def ensure(storage: DerivedStore, upto: int, head: bytes) -> bool:
    """Make the buckets cover blocks ``0..upto`` (``head`` the hash of block ``upto``): kept
    when their coverage already ends there, extended from the seq table when it is behind (as
    appends leave it, up to :data:`PREFIX_BATCH` - 1 blocks), else written anew from the seq
    table (``odf-chain index`` on an index saved before buckets existed, or left far behind).
    Never raises."""
    with contextlib.suppress(*_ERRORS), storage.derived_batch():
        coverage = _coverage(storage)
        if coverage is not None and (coverage.sequence_number, coverage.block_hash) == (
            upto,
            head,
        ):
            return True
        extended = None if coverage is None else _extend_to(storage, upto, head)
        if extended is not None:
            storage.overwrite_derived(PREFIX_COVERAGE, extended)
            return True
        return write_prefixes(storage, table_blocks(storage, upto))
    return False
