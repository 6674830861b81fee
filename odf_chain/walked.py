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

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, overload

import numpy as np

from odf_chain import helper_process
from odf_chain.chain import BlockEntry, parse_block_name
from odf_chain.errors import FormatError
from odf_chain.events import AddData, DataSlice, ExecuteTransform
from odf_chain.format import extra_json
from odf_chain.format.codec import decode_block
from odf_chain.format.columns import HASH_SIZE, BlockColumns, decode_columns
from odf_chain.format.multihash import BLAKE3, SHA3_256, Multihash
from odf_chain.storage.block_pass import Found, Hashes, Pass

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A block name is "f" + hex(code, 0x20, 32 digest bytes): its first five characters name the
# algorithm.
BLOCK_NAMES = Hashes({str(Multihash(a, bytes(32)))[:5]: a for a in (BLAKE3, SHA3_256)}, 5 + 64)


# From this many ExtraAttributes texts on, a helper process judges them while the walk runs.
JSON_HELPER_MIN_TEXTS = 20_000


class BlockFiles:
    """One pass over ``blocks/``: every readable block file, hashed and decoded into columns.

    ``hash_ok[k]``: file ``k``'s name is the canonical name of its content's hash (anything
    else, a wrong hash or a name in another form, is left to the walk's checks by name).
    ``plain[k]``: the columns vouch for block ``k``; until :meth:`settle`, as far as its layout
    goes (its ExtraAttributes may still be refused: the walk only needs its link).
    """

    def __init__(self, found: Pass) -> None:
        """From :meth:`Storage.read_all_blocks` (given :data:`BLOCK_NAMES`). Each share of the
        pass is decoded as columns as soon as it is read (the first while the pass's helper
        still reads the rest) and its ExtraAttributes handed to a helper process of their own,
        while this one goes on: the walk only needs the blocks' links."""
        self._parts: list[BlockColumns] = []
        self._judging: list[_Judgement] = []
        self.listed: list[str] = []  # every block file name of the listing, read or not
        self.unread: list[str] = []  # those of them the pass left out (see block_pass)
        self.irregular = found.irregular  # what else the listing found (symlinks, FIFOs...)
        self.names: list[str] = []  # the files read, by row
        self.data: list[bytes] = []
        self.hash_ok: list[bool] = []
        try:
            self._add(found.first)
        except BaseException:
            found.rest()  # the pass's helper is waited for, its descriptor closed
            raise
        self._add(found.rest())
        columns = BlockColumns.concat(self._parts)
        self.columns = columns
        self.plain: list[bool] = columns.plain.tolist()
        self.sequence_numbers: list[int] = columns.sequence_number.tolist()
        # each rightly named file's hash (its name as bytes), zeros for the others
        named = np.flatnonzero(np.array(self.hash_ok, bool))
        self.name_hashes = np.zeros((len(self.names), HASH_SIZE), np.uint8)
        text = bytes.fromhex("".join([self.names[k][1:] for k in named.tolist()]))
        self.name_hashes[named] = np.frombuffer(text, np.uint8).reshape(-1, HASH_SIZE)
        self._by_hash = _HashIndex(self.name_hashes, named)
        self.sizes = np.fromiter(map(len, self.data), np.int64, len(self.data))
        if not any(j.pending for j in self._judging):
            self.settle()

    def _add(self, share: Found) -> None:
        """The files of ``share`` after those added; its readable files decoded as columns,
        their ExtraAttributes texts sent to be judged."""
        first = len(self.data)
        names, data, hash_ok = self.names, self.data, self.hash_ok
        unread = self.unread.append
        for name, (content, matches) in share.items():
            if content is not None:
                names.append(name)
                data.append(content)
                hash_ok.append(matches)
            else:
                unread(name)
        self.listed.extend(share)
        part = decode_columns(data[first:])
        self._parts.append(part)
        self._judging.append(_Judgement(part.extras))

    def settle(self) -> set[int]:
        """Take the ExtraAttributes verdicts in (waiting for the helpers, or judging here where
        one failed); return the rows that turned out not plain. Once only: later calls return
        nothing."""
        if not self._judging:
            return set()
        verdicts = b"".join(j.verdicts() for j in self._judging)
        self._judging = []
        return self._apply(verdicts)

    def _apply(self, verdicts: bytes) -> set[int]:
        before = self.columns.plain
        self.columns = self.columns.judged(verdicts)
        lost = np.flatnonzero(before & ~self.columns.plain).tolist()
        for k in lost:
            self.plain[k] = False
        return set(lost)

    def prev_name(self, k: int) -> str | None:
        """The name of plain block ``k``'s predecessor (None: it names none)."""
        if not (self.plain[k] and self.columns.has_prev[k]):
            return None
        return "f" + self.columns.prev_hash[k].tobytes().hex()

    def runs(self) -> Runs:
        """Where the walk can leap: see :class:`Runs` (as the rows stand now: :meth:`settle`
        may take some out)."""
        columns = self.columns
        rows = np.flatnonzero(columns.plain & np.array(self.hash_ok, bool))
        # newest first; among equal sequence numbers (a fork), by row: a run then stops there
        order = rows[np.argsort(columns.sequence_number[rows], kind="stable")[::-1]]
        place = np.full(len(self.data), -1, np.int64)
        place[order] = np.arange(len(order))
        prev = np.full(len(self.data), -1, np.int64)
        if not len(order):
            return Runs(order, place, np.zeros(0, np.int64), prev)
        # a block names the next one in this order as its predecessor: compared as whole hashes
        newer, older = order[:-1], order[1:]
        linked = columns.has_prev[newer] & (
            columns.prev_hash[newer] == self.name_hashes[older]
        ).all(axis=1)
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
        return self._by_hash.rows(*_name_hashes(names))

    def reader(self, by_name: Callable[[str], bytes]) -> Callable[[str], bytes]:
        """A block's bytes from this pass, or read by name when the pass did not read it under
        its right name."""

        def read(name: str) -> bytes:
            k = self.row(name)
            return by_name(name) if k is None else self.data[k]

        return read


def _name_hashes(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The multihash bytes each of ``names`` spells (one row each), and whether it spells one
    in the canonical form (``f`` and lowercase hex; zeros otherwise)."""
    width = 1 + 2 * HASH_SIZE
    hashes = np.zeros((len(names), HASH_SIZE), np.uint8)
    canonical = np.zeros(len(names), bool)
    if all(len(n) == width and n[0] == "f" for n in names):  # one hex parse for all
        digits = "".join([n[1:] for n in names])
        try:
            digests = bytes.fromhex(digits)
        except ValueError:
            digests = b""
        if digests.hex() == digits:
            hashes[:] = np.frombuffer(digests, np.uint8).reshape(-1, HASH_SIZE)
            canonical[:] = True
            return hashes, canonical
    for i, name in enumerate(names):  # some name is not of the form: one by one
        if len(name) == width and name[0] == "f":
            try:
                digest = bytes.fromhex(name[1:])
            except ValueError:
                continue
            if digest.hex() == name[1:]:
                hashes[i] = np.frombuffer(digest, np.uint8)
                canonical[i] = True
    return hashes, canonical


class _HashIndex:
    """The rows ``named`` by their name hashes (multihash bytes), sorted by 8 digest bytes: a
    row is found by a binary search and a comparison of the whole hash (two names sharing those
    8 bytes leave a -1, which only means "look it up by name")."""

    def __init__(self, name_hashes: np.ndarray, named: np.ndarray) -> None:
        self._hashes, self._named = name_hashes, named
        keys = np.ascontiguousarray(name_hashes[named, 2:10]).view("<u8").ravel()
        self._order = np.argsort(keys, kind="stable")
        self._keys = keys[self._order]

    def rows(self, hashes: np.ndarray, wanted: np.ndarray) -> np.ndarray:
        """For each row of ``hashes`` where ``wanted``, the row named by it, else -1."""
        found = np.full(len(hashes), -1, np.int64)
        rows = np.flatnonzero(wanted)
        if not len(rows) or not len(self._named):
            return found
        probes = np.ascontiguousarray(hashes[rows, 2:10]).view("<u8").ravel()
        at = np.minimum(np.searchsorted(self._keys, probes), len(self._keys) - 1)
        candidates = self._named[self._order[at]]
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


class _Judgement:
    """The verdicts on some ExtraAttributes texts: from a helper process when there are enough
    of them to pay for one, else judged right away."""

    def __init__(self, texts: list[bytes]) -> None:
        self._texts = texts
        self._helper = None
        self._verdicts = b""
        if len(texts) >= JSON_HELPER_MIN_TEXTS and helper_process.available():
            self._helper = extra_json.Helper(texts)
        else:
            self._verdicts = extra_json.judge(texts)

    @property
    def pending(self) -> bool:
        return self._helper is not None

    def verdicts(self) -> bytes:
        if self._helper is not None:
            self._verdicts = self._helper.result() or extra_json.judge(self._texts)
            self._helper = None
        return self._verdicts


class WalkedChain(Sequence[BlockEntry]):
    """The blocks a walk read, oldest first once :meth:`finish` is called.

    Each is either a row of :class:`BlockFiles` (a plain block, decoded only on request) or a
    :class:`BlockEntry` the walk decoded. Once finished, the plain blocks' columns are kept in
    chain order, so a run of them is a slice.
    """

    def __init__(self, files: BlockFiles | None = None) -> None:
        self._files = files
        self._items: list[int | BlockEntry] = []
        self._cache: dict[int, BlockEntry] = {}
        self._plain = np.zeros(0, bool)
        self._ordered: BlockColumns | None = None
        self._hashes = np.zeros((0, 34), np.uint8)
        self._decoded: list[tuple[int, BlockEntry]] = []
        self._added: list[int] = []  # where the decoded entries are among the items

    # -- building (newest first) ------------------------------------------------------------

    def add(self, entry: BlockEntry) -> None:
        """A block the walk decoded, after those taken."""
        self._added.append(len(self._items))
        self._items.append(entry)

    def extend_rows(self, rows: list[int]) -> None:
        """Rows of plain blocks, newest first, after those taken."""
        self._items.extend(rows)

    def plain_rows(self) -> set[int]:
        """The rows of :class:`BlockFiles` taken as plain blocks."""
        return {k for k in self._items if isinstance(k, int)}

    def finish(self) -> None:
        """The walk is done: oldest first from now on."""
        items = self._items
        items.reverse()
        rows = items.copy()
        last = len(items) - 1
        for i in reversed(self._added):
            self._decoded.append((last - i, items[last - i]))
            rows[last - i] = -1
        files = self._files
        if files is None:
            return
        picked = np.array(rows, np.int64)
        self._plain = picked >= 0
        self._ordered = files.columns.take(np.where(self._plain, picked, 0))
        self._hashes = files.name_hashes[np.where(self._plain, picked, 0)]
        self._hashes[~self._plain] = 0  # a plain block's was rightly named: the walk checked

    # -- Sequence[BlockEntry] ---------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, i: int) -> BlockEntry: ...
    @overload
    def __getitem__(self, i: slice) -> list[BlockEntry]: ...
    def __getitem__(self, i: int | slice) -> BlockEntry | list[BlockEntry]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        item = self._items[i]
        if not isinstance(item, int):
            return item
        entry = self._cache.get(item)
        if entry is None:
            files = self._files
            assert files is not None
            data, name = files.data[item], files.names[item]
            try:
                block = decode_block(data)
            except FormatError as exc:  # cannot happen: the columns vouched for it
                raise FormatError(f"block {name}: {exc}") from None
            entry = BlockEntry(parse_block_name(name), block, len(data))
            self._cache[item] = entry
        return entry

    def __iter__(self) -> Iterator[BlockEntry]:
        for i in range(len(self)):
            yield self[i]

    # -- without decoding ------------------------------------------------------------------

    def is_plain(self, i: int) -> bool:
        return isinstance(self._items[i], int)

    def name(self, i: int) -> str:
        item = self._items[i]
        if isinstance(item, int):
            return self._files.names[item]  # type: ignore[union-attr]
        return str(item.hash)

    def hash(self, i: int) -> Multihash:
        item = self._items[i]
        return parse_block_name(self.name(i)) if isinstance(item, int) else item.hash

    def hash_bytes(self, i: int) -> bytes:
        return bytes.fromhex(self.name(i)[1:])

    def sequence_number(self, i: int) -> int:
        item = self._items[i]
        if isinstance(item, int):
            return self._files.sequence_numbers[item]  # type: ignore[union-attr]
        return item.block.sequence_number

    def system_time_us(self, i: int) -> int:
        item = self._items[i]
        if isinstance(item, int):
            return int(self._files.columns.system_time_us[item])  # type: ignore[union-attr]
        return (item.block.system_time - _EPOCH) // timedelta(microseconds=1)

    def decoded(self) -> list[tuple[int, BlockEntry]]:
        """The blocks that are not plain (every event but AddData, mostly), with positions."""
        return self._decoded

    def plain_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions of the plain blocks, and of those of them that set a watermark."""
        if self._ordered is None:
            empty = np.zeros(0, np.int64)
            return empty, empty
        marked = self._plain & self._ordered.has_watermark
        return np.flatnonzero(self._plain), np.flatnonzero(marked)

    def plain_run_end(self, start: int, stop: int) -> int:
        """The end (exclusive, at most ``stop``) of the run of plain blocks from ``start``."""
        segment = self._plain[start:stop]
        if not len(segment) or segment.all():
            return start + len(segment)
        return start + int(np.argmin(segment))

    def plain_run(self, start: int, stop: int) -> tuple[BlockColumns, np.ndarray]:
        """The columns of plain blocks ``start..stop-1`` (views, in chain order) and their own
        hashes (as multihash bytes, one row each)."""
        assert self._ordered is not None
        return self._ordered.rows(start, stop), self._hashes[start:stop]

    def with_slices(self) -> Iterator[int]:
        """Positions of the blocks that add a data slice."""
        for i, item in enumerate(self._items):
            if isinstance(item, int) or _slice_of(item) is not None:
                yield i

    def has_slices(self) -> bool:
        """Does some block of the chain add a data slice?"""
        return bool(self._plain.any()) or any(_slice_of(e) for _, e in self._decoded)

    def names_slices(self, names: list[str]) -> list[bool]:
        """For each of ``names`` (of data files), does a block of the chain name it? Looked up
        in the plain blocks' hash column; the set of :meth:`slice_names` is built only when
        some name is not found there."""
        found = np.zeros(len(names), bool)
        if self._ordered is not None and len(names):
            column = self._ordered.physical_hash[self._plain]
            index = _HashIndex(column, np.arange(len(column)))
            found = index.rows(*_name_hashes(names)) >= 0
        if found.all():
            return found.tolist()
        named = self.slice_names()  # an orphan (or 8 shared hash bytes): exactly, by name
        return [f or name in named for f, name in zip(found.tolist(), names, strict=True)]

    def slice_names(self) -> set[str]:
        """The data files the chain names (every plain block names one)."""
        names = {str(data.physical_hash) for _, e in self._decoded if (data := _slice_of(e))}
        if self._ordered is not None:
            text = self._ordered.physical_hash[self._plain].tobytes().hex()
            width = 2 * 34
            names.update("f" + text[at : at + width] for at in range(0, len(text), width))
        return names


def _slice_of(entry: BlockEntry) -> DataSlice | None:
    event = entry.block.event
    return event.new_data if isinstance(event, AddData | ExecuteTransform) else None
