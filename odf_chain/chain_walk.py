"""Walk a whole chain from the head to the Seed, hashing every stored block as stored (never
re-encoded): verify's step 1, and the first half of an index rebuild.

A long chain is walked through the one pass over ``blocks/`` (:meth:`Storage.read_all_blocks`),
following rows rather than names and keeping plain AddData blocks as columns
(:mod:`odf_chain.walked`); where that pass has nothing usable (a block missing, damaged, a
loop), the walk goes on block by block, by name, and reports exactly what it finds there. What
the walk saw (:class:`Walk`) is what every later step reads: nothing is read twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from odf_chain.chain import BlockEntry, parse_block_name
from odf_chain.errors import FormatError, NotFoundError, OdfChainError
from odf_chain.events import MetadataBlock
from odf_chain.format.codec import decode_block
from odf_chain.format.multihash import Multihash
from odf_chain.memory import release_free_memory
from odf_chain.storage import ChainStore
from odf_chain.walked import BLOCK_NAMES, BlockFiles, WalkedChain

Severity = Literal["error", "warning"]


class Findings(Protocol):
    """Where a walk or a fold reports what it finds (verify's :class:`VerifyReport`; an index
    rebuild's own, which only asks whether there was an error)."""

    head: str | None
    bytes_hashed: int
    blocks_checked: int

    def add(self, severity: Severity, rule: str, message: str, **where: Any) -> None: ...


class _Visited:
    """The block names the walk went through: rows of the one pass over ``blocks/`` (as a
    bool array: no set of a hundred thousand names is built) and names read one by one."""

    def __init__(self, files: BlockFiles | None = None) -> None:
        self._files = files
        self.rows = np.zeros(0 if files is None else len(files), bool)
        self.names: set[str] = set()

    def __contains__(self, name: object) -> bool:
        if name in self.names:
            return True
        if self._files is None or not isinstance(name, str):
            return False
        k = self._files.row(name)
        return k is not None and bool(self.rows[k])

    def add(self, name: str) -> None:
        self.names.add(name)

    def missing(self, names: list[str]) -> list[bool]:
        """For each of ``names``, is it not visited? (``not in`` for many names at once.)"""
        if self._files is None:
            return [name not in self.names for name in names]
        rows = self._files.rows_of(names)
        by_row = self.rows[np.maximum(rows, 0)] & (rows >= 0)
        return [
            not seen and name not in self.names
            for name, seen in zip(names, by_row.tolist(), strict=True)
        ]

    def others(self, listing: list[str] | None = None) -> list[str]:
        """The names of ``listing`` (a listing of ``blocks/``; None: the one pass's) not
        visited, sorted."""
        files = self._files
        if listing is not None or files is None:
            return sorted(name for name in listing or [] if name not in self)
        unvisited = [files.name(k) for k in np.flatnonzero(~self.rows).tolist()]
        return sorted(n for n in unvisited + files.unread if n not in self.names)


@dataclass
class Walk:
    """What the walk from the head saw."""

    chain: WalkedChain = field(default_factory=WalkedChain)  # oldest first once done
    complete: bool = False  # reached the Seed
    listed: bool = False  # the one pass over blocks/ listed its block files (see others())
    irregular: list[tuple[str, str]] | None = None  # and the other entries it found there
    visited: _Visited = field(default_factory=_Visited)  # every block the chain referenced


def walk_chain(
    storage: ChainStore,
    report: Findings,
    *,
    head: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Walk:
    """Blocks from the head (or from ``head``) back, each hash-checked before it is decoded.
    ``progress`` hears how many block files the pass over ``blocks/`` has read, as it goes."""
    walk = Walk()
    try:
        head_name = storage.read_head() if head is None else head
    except OdfChainError as exc:  # not a block name, or the filesystem refused the read
        report.add("error", "head", str(exc), path="refs/head")
        return walk
    if head_name is None:
        report.add("error", "head", "refs/head is missing", path="refs/head")
        return walk
    report.head = head_name
    try:
        current: Multihash | None = parse_block_name(head_name)
    except FormatError as exc:
        report.add("error", "head", str(exc), path="refs/head")
        return walk
    everything = storage.read_all_blocks(BLOCK_NAMES)
    files = BlockFiles(everything, storage.read_block, progress) if everything else None
    _walk_down(head_name, current, storage, files, walk, report)
    walk.chain.finish()
    release_free_memory()  # what finding the runs freed
    return walk


def _walk_down(
    head_name: str,
    head: Multihash,
    storage: ChainStore,
    files: BlockFiles | None,
    walk: Walk,
    report: Findings,
) -> None:
    """The walk from the head: through the one pass's blocks while it can, then by name."""
    walk.chain = WalkedChain(files)
    walk.visited = _Visited(files)
    walk.listed = files is not None
    walk.irregular = None if files is None else files.irregular
    current: Multihash | None = head
    with storage.block_reader() as by_name:
        read_block = by_name
        if files is not None:
            name = _walk_files(head_name, files, walk, report)
            current = None if name is None else parse_block_name(name)
            walk.complete = name is None
            read_block = files.reader(by_name)
        if current is not None:
            _walk_from(current, read_block, walk, report)


def _walk_files(name: str | None, files: BlockFiles, walk: Walk, report: Findings) -> str | None:
    """Follow the chain from block ``name`` through the blocks of the one pass over
    ``blocks/``, while each is there, hashes to its name, decodes and was not seen before;
    return the name where the walk block by block must take over (it reports what is wrong
    there), or None when the Seed was reached."""
    find, hash_ok, plain = files.row, files.hash_ok, files.plain
    prev_name, name_of, read = files.prev_name, files.name, files.read
    order, place, run_end, prev_rows = files.runs()
    seen = np.zeros(len(files), bool)  # by row: the walk starts here, nothing is visited yet
    chain = walk.chain
    take, add = chain.extend_rows, chain.add
    k = None if name is None else find(name)
    while k is not None:
        if not hash_ok[k] or seen[k]:
            name = name_of(k)
            break
        if plain[k]:  # its link is in the columns: follow it by row, no name built
            at = place[k]
            if at >= 0 and (last := run_end[at]) > at:  # a run from here: take it whole
                run = order[at:last]
                if not seen[run].any():
                    seen[run] = True
                    take(run)
                    k = int(order[last])
                    continue
            seen[k] = True
            take(np.array([k]))
            following = int(prev_rows[k])
            if following >= 0:
                k = following
                continue
            name = prev_name(k)  # None: no predecessor; else one the pass did not read
        else:
            data = read(k)
            try:
                block = decode_block(data)
            except FormatError:
                name = name_of(k)
                break
            seen[k] = True
            add(BlockEntry(parse_block_name(name_of(k)), block, len(data)))
            prev = block.prev_block_hash
            name = None if prev is None else str(prev)
        k = None if name is None else find(name)
    walk.visited.rows = seen
    report.bytes_hashed += int(files.sizes[seen].sum())
    return name


def _walk_from(
    current: Multihash | None, read_block: Callable[[str], bytes], walk: Walk, report: Findings
) -> None:
    chain = walk.chain  # newest first while walking
    expected_seq: int | None = None
    if len(chain):  # taking over from the walk through the one pass
        last = chain.sequence_number(-1)
        expected_seq = last - 1 if last else None
    while current is not None:
        name = str(current)
        if name in walk.visited:
            report.add("error", "block-link", "the chain loops back on itself", block_hash=name)
            break
        walk.visited.add(name)
        # Name the head as such when its sequence number cannot be known.
        head_note = "head block: " if not len(chain) else ""
        try:
            data = read_block(name)
        except NotFoundError:
            referrer = "refs/head" if not len(chain) else f"block {chain.sequence_number(-1)}"
            report.add(
                "error",
                "block-missing",
                f"referenced by {referrer} but not in blocks/",
                sequence_number=expected_seq,
                block_hash=name,
            )
            break
        except OdfChainError as exc:  # a directory or unreadable file where a block should be
            report.add(
                "error",
                "block-unreadable",
                f"{head_note}{exc}",
                sequence_number=expected_seq,
                block_hash=name,
            )
            break
        report.bytes_hashed += len(data)
        actual = Multihash.digest(current.algorithm, data)
        block: MetadataBlock | None = None
        format_error: FormatError | None = None
        try:
            block = decode_block(data)
        except FormatError as exc:
            format_error = exc
        seq = block.sequence_number if block is not None else expected_seq
        if seq is not None:
            head_note = ""
        if actual != current:
            report.add(
                "error",
                "block-hash",
                f"{head_note}content hashes to {actual}, not to its name: the block was altered",
                sequence_number=seq,
                block_hash=name,
            )
        if block is None:
            report.add(
                "error",
                "block-format",
                f"{head_note}{format_error}",
                sequence_number=seq,
                block_hash=name,
            )
            break
        chain.add(BlockEntry(current, block, len(data)))
        expected_seq = block.sequence_number - 1 if block.sequence_number else None
        current = block.prev_block_hash
    else:
        walk.complete = True
