"""The chain as verify walked it: its blocks oldest first, the plain ones kept as columns.

Verify of a long chain used to build a Python object for every field of every block, and that
was most of its time. Here the blocks of one pass over ``blocks/`` are decoded at once into
columns (:mod:`odf_chain.format.columns`); a block is turned into objects only when something
asks for it as a :class:`BlockEntry`. Blocks the columns cannot vouch for (other events, odd
layouts) are decoded one by one as before, so every error is still worded by
:func:`codec.decode_block` and the rules.

:class:`WalkedChain` is a ``Sequence[BlockEntry]`` (what receipts, the index check and the data
checks index into), with cheap accessors (name, hash, sequence number, system time) that do not
decode, and :meth:`WalkedChain.plain_run` for the fold's bulk step.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, overload

import numpy as np

from odf_chain.block_parts import Part, name_hashes, worker
from odf_chain.chain import BlockEntry, parse_block_name
from odf_chain.errors import FormatError, IntegrityError
from odf_chain.events import AddData, DataSlice, ExecuteTransform
from odf_chain.format.codec import decode_block
from odf_chain.format.columns import HASH_SIZE, BlockColumns, decode_columns
from odf_chain.format.multihash import BLAKE3, SHA3_256, Multihash
from odf_chain.memory import release_free_memory
from odf_chain.storage.base import STRAY_BLOCK_FILE
from odf_chain.storage.block_pass import Hashes, Pass

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A block name is "f" + hex(code, 0x20, 32 digest bytes): its first five characters name the
# algorithm.
BLOCK_NAMES = Hashes({str(Multihash(a, bytes(32)))[:5]: a for a in (BLAKE3, SHA3_256)}, 5 + 64)

# What only the walk and the fold read: released once the fold is done (see BlockFiles.folded):
# 79 bytes a block as the pass keeps them.
_FOLD_ONLY = (
    "has_prev",
    "prev_hash",
    "prev_offset",
    "has_prev_offset",
    "has_data",
    "start",
    "end",
    "size",
    "logical_hash",
    "watermark_us",
    "has_transaction",
)
_TRIM_EVERY = 16  # shares of the pass between two returns of freed memory to the system
_LINK_CHECK_ROWS = 65_536  # rows compared at a time when runs are found (bounded temporaries)


class _Released:
    """A column released after the fold: any use of it is a bug, and says so (never an empty
    array that would answer "nothing")."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"column {self._name} was released once the fold was done")

    __getitem__ = __len__ = __iter__ = __array__ = __array_ufunc__ = __bool__ = _refuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse  # type: ignore[assignment]
    __and__ = __rand__ = __or__ = __ror__ = __invert__ = __add__ = __radd__ = _refuse
    __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __hash__ = None  # type: ignore[assignment]

    def __getattr__(self, attribute: str) -> None:
        self._refuse()


class BlockFiles:
    """One pass over ``blocks/``: every readable block file, hashed and decoded into columns,
    kept in compact form (about 200 bytes a block: columns and its name's hash), never as a
    Python object per block.

    ``hash_ok[k]``: file ``k``'s name is the canonical name of its content's hash (anything
    else, a wrong hash or a name in another form, is left to the walk's checks by name).
    ``plain[k]``: the columns vouch for block ``k``, its ExtraAttributes judged.
    """

    def __init__(
        self,
        found: Pass,
        read_again: Callable[[str], bytes],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """From :meth:`Storage.read_all_blocks` (given :data:`BLOCK_NAMES`). Each chunk of the
        pass is decoded as columns, its ExtraAttributes judged, by whichever process reads it
        (:mod:`odf_chain.block_parts`); only the columns stay. A block wanted whole later is
        read again by name (``read_again``: the storage's read) and hash-checked: the same
        bytes, or an error."""
        self._read_again = read_again
        self.unread: list[str] = []  # the block files the pass left out (see block_pass)
        self._odd: dict[int, str] = {}  # rows whose names are not in the canonical form
        parts: list[dict[str, np.ndarray]] = []
        rows = 0
        part: Part
        for part in found.shares(worker()):
            self.unread += part.unread
            self._odd.update((rows + i, name) for i, name in part.odd)
            parts.append(part.arrays)
            rows += part.rows
            del part
            if len(parts) % _TRIM_EVERY == 0:
                release_free_memory()  # the chunks' freed buffers, kept by the allocator
            if progress is not None:
                progress(rows)
        # what else the listing found: symlinks, FIFOs..., files named like no block
        self.irregular = found.irregular
        if self.irregular is not None:
            self.irregular += [(f"blocks/{name}", STRAY_BLOCK_FILE) for name in found.stray]
        joined = _concat(parts)
        self.name_hashes: np.ndarray = joined.pop("name_hashes")
        self.hash_ok: np.ndarray = joined.pop("hash_ok")
        self.sizes: np.ndarray = joined.pop("sizes")
        self.columns = BlockColumns(**joined, extra_rows=np.zeros(0, np.int64), extras=[])
        self.plain: np.ndarray = self.columns.plain
        named = None if self.hash_ok.all() else np.flatnonzero(self.hash_ok)
        self._by_hash = _HashIndex(self.name_hashes, named)
        release_free_memory()

    def __len__(self) -> int:
        return len(self.hash_ok)

    def folded(self) -> None:
        """The walk and the fold are done: release the columns only they read (the links,
        offsets, sizes and watermarks: 79 bytes a block, 79 MB at a million), so what comes
        after (the index check, the data checks) adds to less. Names, sequence numbers,
        times, slice hashes and the watermark flags stay."""
        released = {name: _Released(name) for name in _FOLD_ONLY}
        self.columns = replace(self.columns, **released)  # type: ignore[arg-type]
        release_free_memory()

    def name(self, k: int) -> str:
        """The name of the file read as row ``k``."""
        odd = self._odd.get(k)
        return "f" + self.name_hashes[k].tobytes().hex() if odd is None else odd

    def read(self, k: int) -> bytes:
        """The bytes of row ``k``, read again by name: for a row the pass found rightly named,
        the hash of what is read now proves it the bytes the pass read."""
        name = self.name(k)
        data = self._read_again(name)
        if self.hash_ok[k] and Multihash.digest(parse_block_name(name).algorithm, data) != (
            parse_block_name(name)
        ):
            raise IntegrityError(f"block {name} changed while it was being read")
        return data

    def prev_name(self, k: int) -> str | None:
        """The name of plain block ``k``'s predecessor (None: it names none)."""
        if not (self.plain[k] and self.columns.has_prev[k]):
            return None
        return "f" + self.columns.prev_hash[k].tobytes().hex()

    def runs(self) -> Runs:
        """Where the walk can leap: see :class:`Runs`."""
        columns = self.columns
        rows = np.flatnonzero(columns.plain & self.hash_ok)
        order = _newest_first(rows, columns.sequence_number[rows])
        small = np.int32 if len(self) < 2**31 else np.int64  # half the memory, a million rows
        place = np.full(len(self), -1, small)
        place[order] = np.arange(len(order), dtype=small)
        prev = np.full(len(self), -1, small)
        if not len(order):
            return Runs(order, place, np.zeros(0, np.int64), prev)
        # a block names the next one in this order as its predecessor: compared as whole hashes
        newer, older = order[:-1], order[1:]
        linked = columns.has_prev[newer]
        for at in range(0, len(newer), _LINK_CHECK_ROWS):
            part = slice(at, at + _LINK_CHECK_ROWS)
            same = columns.prev_hash[newer[part]] == self.name_hashes[older[part]]
            linked[part] &= same.all(axis=1)
        prev[newer[linked]] = older[linked]
        breaks = np.append(np.flatnonzero(~linked), len(order) - 1)
        ends = order[breaks]  # where a run ends, the predecessor is found by its hash
        prev[ends] = self._by_hash.rows(columns.prev_hash[ends], columns.has_prev[ends])
        return Runs(order, place, breaks[np.searchsorted(breaks, np.arange(len(order)))], prev)

    def row(self, name: str) -> int | None:
        """The row of the file named ``name`` when the pass read it and it hashes to that name;
        None otherwise (reading it by name then reports what is wrong with it)."""
        k = int(self.rows_of([name])[0])
        return None if k < 0 else k

    def rows_of(self, names: list[str]) -> np.ndarray:
        """:meth:`row` of each of ``names`` at once, -1 for None."""
        return self._by_hash.rows(*name_hashes(names))

    def reader(self, by_name: Callable[[str], bytes]) -> Callable[[str], bytes]:
        """A block's bytes from this pass, or read by name when the pass did not read it under
        its right name."""

        def read(name: str) -> bytes:
            k = self.row(name)
            return by_name(name) if k is None else self.read(k)

        return read


def _newest_first(rows: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """``rows`` by their sequence ``numbers``, newest first; among equal numbers (a fork), by
    row, so a run stops there. A chain's numbers are usually each number of a range once: then
    each row is put in its place directly, no sort."""
    if len(rows):
        low = numbers.min()
        places = (numbers - low).astype(np.int64)  # wraps above 2**63: then not a range
        if places.min() >= 0 and places.max() == len(rows) - 1:
            placed = np.full(len(rows), -1, np.int64)
            placed[places] = rows
            if (placed >= 0).all():  # every place taken once: a permutation
                return placed[::-1]
    return rows[np.argsort(numbers, kind="stable")[::-1]]


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The parts' arrays joined, one name at a time, each part's array released as it is
    joined: the peak is the parts plus one joined array, not twice the whole."""
    joined: dict[str, np.ndarray] = {}
    for key in list(parts[0]) if parts else []:
        joined[key] = np.concatenate([p.pop(key) for p in parts])
        release_free_memory()  # the parts' arrays just freed, scattered among the others
    if not parts:  # no block file at all
        empty = decode_columns([])
        joined = {f.name: getattr(empty, f.name) for f in fields(BlockColumns)[:-2]}
        joined |= {
            "name_hashes": np.zeros((0, HASH_SIZE), np.uint8),
            "hash_ok": np.zeros(0, bool),
            "sizes": np.zeros(0, np.uint32),
        }
    return joined


class _HashIndex:
    """The rows ``named`` (None: every row) by their name hashes (multihash bytes), sorted by 8
    digest bytes: a row is found by a binary search and a comparison of the whole hash (two
    names sharing those 8 bytes leave a -1, which only means "look it up by name")."""

    def __init__(self, name_hashes: np.ndarray, named: np.ndarray | None) -> None:
        self._hashes, self._named = name_hashes, named
        picked = name_hashes[:, 2:10] if named is None else name_hashes[named, 2:10]
        keys = np.ascontiguousarray(picked).view("<u8").ravel()
        self._order = np.argsort(keys, kind="stable")
        self._keys = keys[self._order]

    def rows(self, hashes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """For each row of ``hashes`` where ``wanted``, the row named by it, else -1."""
        found = np.full(len(hashes), -1, np.int64)
        rows = np.flatnonzero(wanted)
        if not len(rows) or not len(self._keys):
            return found
        probes = np.ascontiguousarray(hashes[rows, 2:10]).view("<u8").ravel()
        at = np.minimum(np.searchsorted(self._keys, probes), len(self._keys) - 1)
        candidates = self._order[at]
        if self._named is not None:
            candidates = self._named[candidates]
        same = (self._hashes[candidates] == hashes[rows]).all(axis=1)
        found[rows[same]] = candidates[same]
        return found


class Runs(NamedTuple):
    """The plain, rightly named rows of a :class:`BlockFiles` by sequence number, newest first
    (``order``); each row's place there (``place``, -1 when it is not there); for each place,
    the last place of the run from it (``run_end``): rows each naming the next as their
    predecessor. In a chain without forks one run holds every plain block between two other
    events, so the walk takes it whole instead of block by block."""

    order: np.ndarray
    place: np.ndarray
    run_end: np.ndarray
    prev: np.ndarray  # each row's predecessor's row, -1 when the pass did not read it rightly named


class WalkedChain(Sequence[BlockEntry]):
    """The blocks a walk read, oldest first once :meth:`finish` is called.

    Each is either a row of :class:`BlockFiles` (a plain block, decoded only on request, read
    again by name) or a :class:`BlockEntry` the walk decoded (every other event: few). What
    it holds per plain block is its row number: the columns stay in :class:`BlockFiles`, and
    a run of them is taken out when the fold asks for it.
    """

    def __init__(self, files: BlockFiles | None = None) -> None:
        self._files = files
        self._parts: list[np.ndarray | BlockEntry] = []  # newest first while walking
        self._count = 0
        self._rows = np.zeros(0, np.int64)  # by position once finished; -1: a decoded entry
        self._plain = np.zeros(0, bool)
        self._sliced = np.zeros(0, bool)  # by position: a plain block that adds a slice
        self._entries: dict[int, BlockEntry] = {}
        self._decoded: list[tuple[int, BlockEntry]] = []

    # -- building (newest first) ------------------------------------------------------------

    def add(self, entry: BlockEntry) -> None:
        """A block the walk decoded, after those taken."""
        self._parts.append(entry)
        self._count += 1

    def extend_rows(self, rows: np.ndarray) -> None:
        """Rows of plain blocks, newest first, after those taken."""
        self._parts.append(np.asarray(rows, np.int64))
        self._count += len(rows)

    def finish(self) -> None:
        """The walk is done: oldest first from now on."""
        rows = np.full(self._count, -1, np.int64)
        at = self._count
        for part in self._parts:  # newest first: filled from the end
            if isinstance(part, BlockEntry):
                at -= 1
                self._entries[at] = part
            else:
                rows[at - len(part) : at] = part[::-1]
                at -= len(part)
        self._parts = []
        self._rows = rows
        self._plain = rows >= 0
        self._sliced = self._plain.copy()
        if self._files is not None and self._plain.any():
            self._sliced[self._plain] = self._files.columns.has_data[rows[self._plain]]
        self._decoded = sorted(self._entries.items(), key=lambda item: item[0])

    # -- Sequence[BlockEntry] ---------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> BlockEntry: ...
    @overload
    def __getitem__(self, i: slice) -> list[BlockEntry]: ...
    def __getitem__(self, i: int | slice) -> BlockEntry | list[BlockEntry]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = self._position(i)
        row = int(self._rows[i])
        if row < 0:
            return self._entries[i]
        files = self._files
        assert files is not None
        data, name = files.read(row), files.name(row)
        try:
            block = decode_block(data)
        except FormatError as exc:  # cannot happen: the columns vouched for it
            raise FormatError(f"block {name}: {exc}") from None
        return BlockEntry(parse_block_name(name), block, len(data))

    def __iter__(self) -> Iterator[BlockEntry]:
        for i in range(len(self)):
            yield self[i]

    def _position(self, i: int) -> int:
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        return i

    # -- without decoding ------------------------------------------------------------------

    def _last(self) -> int | BlockEntry:
        """While walking: the oldest block taken so far (a row, or an entry)."""
        part = self._parts[-1]
        return part if isinstance(part, BlockEntry) else int(part[-1])

    def _item(self, i: int) -> int | BlockEntry:
        if self._parts and (i == -1 or i == self._count - 1):
            return self._last()
        i = self._position(i)
        row = int(self._rows[i])
        return self._entries[i] if row < 0 else row

    def is_plain(self, i: int) -> bool:
        return isinstance(self._item(i), int)

    def name(self, i: int) -> str:
        item = self._item(i)
        if isinstance(item, int):
            return self._files.name(item)  # type: ignore[union-attr]
        return str(item.hash)

    def hash(self, i: int) -> Multihash:
        item = self._item(i)
        return parse_block_name(self.name(i)) if isinstance(item, int) else item.hash

    def hash_bytes(self, i: int) -> bytes:
        return bytes.fromhex(self.name(i)[1:])

    def sequence_number(self, i: int) -> int:
        item = self._item(i)
        if isinstance(item, int):
            return int(self._files.columns.sequence_number[item])  # type: ignore[union-attr]
        return item.block.sequence_number

    def system_time_us(self, i: int) -> int:
        item = self._item(i)
        if isinstance(item, int):
            return int(self._files.columns.system_time_us[item])  # type: ignore[union-attr]
        return (item.block.system_time - _EPOCH) // timedelta(microseconds=1)

    def hashes_and_times(
        self, start: int = 0, stop: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The own hash (multihash bytes, one row each) and system time (microseconds) of the
        blocks at positions ``start..stop-1``: the index's sequence-number table, without
        decoding."""
        stop = self._count if stop is None else min(stop, self._count)
        count = max(0, stop - start)
        hashes = np.zeros((count, HASH_SIZE), np.uint8)
        times = np.zeros(count, np.int64)
        plain = self._plain[start:stop]
        if self._files is not None and plain.any():
            rows = self._rows[start:stop][plain]
            hashes[plain] = self._files.name_hashes[rows]
            times[plain] = self._files.columns.system_time_us[rows]
        at = bisect.bisect_left(self._decoded, start, key=lambda item: item[0])
        for i, entry in self._decoded[at:]:
            if i >= stop:
                break
            raw = bytes(entry.hash)
            if len(raw) != HASH_SIZE:
                raise FormatError(f"block {entry.hash}: a hash of {len(raw)} bytes")
            hashes[i - start] = np.frombuffer(raw, np.uint8)
            times[i - start] = self.system_time_us(i)
        return hashes, times

    def decoded(self) -> list[tuple[int, BlockEntry]]:
        """The blocks that are not plain (every event but AddData, mostly), with positions."""
        return self._decoded

    def plain_masks(self) -> tuple[np.ndarray, np.ndarray]:
        """By position: is the block a plain one that adds a slice, and one that sets a
        watermark?"""
        if self._files is None or not self._plain.any():
            return self._sliced, self._plain
        marked = self._plain.copy()
        marked[self._plain] = self._files.columns.has_watermark[self._rows[self._plain]]
        return self._sliced, marked

    def sliced_ranges(self, start: int, stop: int) -> list[range]:
        """The positions ``start..stop-1`` of plain blocks that add a slice, as ranges."""
        segment = self._sliced[start:stop]
        stop = start + len(segment)
        if segment.all():
            return [range(start, stop)] if stop > start else []
        edges = np.flatnonzero(np.diff(np.concatenate(([False], segment, [False])).astype(np.int8)))
        return [range(start + a, start + b) for a, b in edges.reshape(-1, 2).tolist()]

    def plain_run_end(self, start: int, stop: int) -> int:
        """The end (exclusive, at most ``stop``) of the run of plain blocks from ``start``."""
        segment = self._plain[start:stop]
        if not len(segment) or segment.all():
            return start + len(segment)
        return start + int(np.argmin(segment))

    def plain_run(self, start: int, stop: int) -> tuple[BlockColumns, np.ndarray]:
        """The columns of plain blocks ``start..stop-1`` (in chain order) and their own hashes
        (as multihash bytes, one row each): taken out of the pass's columns for this run."""
        assert self._files is not None
        rows = self._rows[start:stop]
        return self._files.columns.take(rows), self._files.name_hashes[rows]

    def folded(self) -> None:
        """The fold is done: see :meth:`BlockFiles.folded`."""
        if self._files is not None:
            self._files.folded()

    def with_slices(self) -> Iterator[int]:
        """Positions of the blocks that add a data slice, in order."""
        decoded = [i for i, e in self._decoded if _slice_of(e) is not None]
        positions = np.union1d(np.flatnonzero(self._sliced), np.array(decoded, np.int64))
        yield from positions.tolist()

    def has_slices(self) -> bool:
        """Does some block of the chain add a data slice?"""
        return bool(self._sliced.any()) or any(_slice_of(e) for _, e in self._decoded)

    def _plain_slice_hashes(self) -> np.ndarray:
        if self._files is None:
            return np.zeros((0, HASH_SIZE), np.uint8)
        return self._files.columns.physical_hash[self._rows[self._sliced]]

    def names_slices(self, names: list[str]) -> list[bool]:
        """For each of ``names`` (of data files), does a block of the chain name it? Looked up
        in the plain blocks' hash column; the set of :meth:`slice_names` is built only when
        some name is not found there."""
        found = np.zeros(len(names), bool)
        if self._sliced.any() and len(names):
            column = self._plain_slice_hashes()
            index = _HashIndex(column, None)
            found = index.rows(*name_hashes(names)) >= 0
        if found.all():
            return found.tolist()
        named = self.slice_names()  # an orphan (or 8 shared hash bytes): exactly, by name
        return [f or name in named for f, name in zip(found.tolist(), names, strict=True)]

    def slice_names(self) -> set[str]:
        """The data files the chain names."""
        names = {str(data.physical_hash) for _, e in self._decoded if (data := _slice_of(e))}
        text = self._plain_slice_hashes().tobytes().hex()
        width = 2 * HASH_SIZE
        names.update("f" + text[at : at + width] for at in range(0, len(text), width))
        return names


def _slice_of(entry: BlockEntry) -> DataSlice | None:
    event = entry.block.event
    return event.new_data if isinstance(event, AddData | ExecuteTransform) else None
