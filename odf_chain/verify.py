"""chain-verify: prove that blocks and data are intact and every rule holds.

1. Walk from the head to the Seed, hashing every stored block as stored (never re-encoded).
2. Fold the chain oldest first with the same step append uses (:func:`chain.advance`), so every
   rule is re-run exactly as it ran when the block was written.
3. Check each data slice the chain names: present, size, physical hash, row count equal to its
   offset interval, columns as the schema in force says.
4. Follow the datasets lineage events pin: the pinned block must be in their chain, the input
   fields in their schema there (an input that cannot be opened is a warning).
5. Report leftovers (unreferenced blocks and data files, abandoned staging files) as warnings:
   they are not part of the dataset, but an auditor wants to know.
6. Check the head log: a block that was once the head must still be the head or behind it, so
   a head that moved back (a restored backup, a mistake, tampering) is an error.
7. With receipts: the walked chain must still hold each receipt's block at its sequence number
   (:mod:`odf_chain.receipt`), or it was rolled back, truncated, rewritten or replaced.

``deep=True`` also reads every row of every slice (in batches, never a whole file at once):
the logical hash is recomputed as writers compute it, and the system columns are checked
against the block (see :func:`_check_rows`).

Problems are collected, not raised, so one run reports everything it can see.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from odf_chain.chain import BlockEntry, advance, parse_block_name
from odf_chain.errors import (
    FormatError,
    NotFoundError,
    OdfChainError,
    RuleViolation,
)
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    DataSlice,
    ExecuteTransform,
    MetadataBlock,
    Seed,
)
from odf_chain.format.codec import decode_block
from odf_chain.format.multihash import Multihash
from odf_chain.index.check import report_index
from odf_chain.index.records import SNAPSHOT_INTERVAL
from odf_chain.receipt import Receipt, check_receipts, load_receipts
from odf_chain.replay import load_chain
from odf_chain.rules import lineage_input_problems, plain_run_passes
from odf_chain.schema.evolution import same_columns
from odf_chain.slices import LogicalHasher, read_batches
from odf_chain.state import EMPTY, DatasetState, apply, apply_plain_run
from odf_chain.storage import Storage, open_storage
from odf_chain.storage.base import HEAD_LOG, STAGING, HeadMove
from odf_chain.walked import BLOCK_NAMES, BlockFiles, WalkedChain

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Problem:
    severity: Severity
    rule: str
    message: str
    sequence_number: int | None = None
    block_hash: str | None = None
    path: str | None = None

    def line(self) -> str:
        where = []
        if self.sequence_number is not None:
            where.append(f"block {self.sequence_number}")
        if self.block_hash is not None:
            where.append(self.block_hash)
        if self.path is not None:
            where.append(self.path)
        location = " ".join(where) or "dataset"
        return f"{self.severity.upper()} {location}: [{self.rule}] {self.message}"


@dataclass
class VerifyReport:
    dataset: str
    head: str | None = None
    blocks_checked: int = 0
    slices_checked: int = 0
    bytes_hashed: int = 0
    deep: bool = False  # rows were read: logical hashes and system columns checked
    rows_checked: int = 0
    receipts_checked: int = 0
    receipts_held: int = 0  # receipts whose block the chain holds, without any problem
    receipts_signed: int = 0  # receipts whose signature checked out
    problems: list[Problem] = field(default_factory=list)
    # unreferenced blocks that descend from the head, each with the data slices it names: what
    # gc keeps as possible evidence (not in to_dict: the warning says it)
    descendants: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # every readable block outside the chain: its predecessor and the slices it names (gc keeps
    # them all unless named: a rolled-back suffix whose head log went too looks just like this)
    uncommitted: dict[str, tuple[str | None, tuple[str, ...]]] = field(default_factory=dict)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        """True when every block, rule and slice checks out (warnings allowed)."""
        return not self.errors

    def to_dict(self) -> dict:
        doc = {
            "dataset": self.dataset,
            "ok": self.ok,
            "head": self.head,
            "blocks_checked": self.blocks_checked,
            "slices_checked": self.slices_checked,
            "bytes_hashed": self.bytes_hashed,
            "deep": self.deep,
            "rows_checked": self.rows_checked,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "problems": [asdict(p) for p in self.problems],
        }
        if self.receipts_checked:  # only when receipts were given
            doc["receipts"] = {
                "checked": self.receipts_checked,
                "held": self.receipts_held,
                "signed": self.receipts_signed,
            }
        return doc

    def add(self, severity: Severity, rule: str, message: str, **where) -> None:
        self.problems.append(Problem(severity, rule, message, **where))


class _Visited:
    """The block names the walk went through: rows of the one pass over ``blocks/`` (as a
    bool array: no set of a hundred thousand names is built) and names read one by one."""

    def __init__(self, files: BlockFiles | None = None) -> None:
        self._files = files
        self.rows = np.zeros(0 if files is None else len(files.data), bool)
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

    def others(self, listing: list[str]) -> list[str]:
        """The names of ``listing`` (a listing of ``blocks/``) not visited, sorted."""
        files = self._files
        if files is None or listing is not files.listed:
            return sorted(name for name in listing if name not in self)
        names = files.names  # the pass's own listing: its rows not visited, and its unread
        unvisited = [names[k] for k in np.flatnonzero(~self.rows).tolist()]
        return sorted(n for n in unvisited + files.unread if n not in self.names)


@dataclass
class _Walk:
    """What the walk from the head saw."""

    chain: WalkedChain = field(default_factory=WalkedChain)  # oldest first once done
    complete: bool = False  # reached the Seed
    listed: list[str] | None = None  # the block files the one pass over blocks/ listed
    irregular: list[tuple[str, str]] | None = None  # and the other entries it found there
    visited: _Visited = field(default_factory=_Visited)  # every block the chain referenced


def _walk(storage: Storage, report: VerifyReport) -> _Walk:
    """Blocks from the head back, each hash-checked before it is decoded."""
    walk = _Walk()
    try:
        head_name = storage.read_head()
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
    files = BlockFiles(everything) if everything else None
    hashed, found = report.bytes_hashed, len(report.problems)
    _walk_down(head_name, current, storage, files, walk, report)
    # the verdicts on ExtraAttributes (a helper process may still be judging them; without
    # one, they were taken in already and this finds nothing)
    if files is not None and (lost := files.settle()) and lost & walk.chain.plain_rows():
        # a block the walk took as plain has ExtraAttributes the decoder refuses: walk again,
        # decoding it, so that the walk reports it as it reports any malformed block
        del report.problems[found:]
        report.bytes_hashed = hashed
        walk = _Walk(listed=walk.listed, irregular=walk.irregular)
        _walk_down(head_name, current, storage, files, walk, report)
    walk.chain.finish()
    return walk


def _walk_down(
    head_name: str,
    head: Multihash,
    storage: Storage,
    files: BlockFiles | None,
    walk: _Walk,
    report: VerifyReport,
) -> None:
    """The walk from the head: through the one pass's blocks while it can, then by name."""
    walk.chain = WalkedChain(files)
    walk.visited = _Visited(files)
    walk.listed = None if files is None else files.listed
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


def _walk_files(
    name: str | None, files: BlockFiles, walk: _Walk, report: VerifyReport
) -> str | None:
    """Follow the chain from block ``name`` through the blocks of the one pass over
    ``blocks/``, while each is there, hashes to its name, decodes and was not seen before;
    return the name where the walk block by block must take over (it reports what is wrong
    there), or None when the Seed was reached."""
    find, hash_ok, plain = files.row, files.hash_ok, files.plain
    prev_name, names, data = files.prev_name, files.names, files.data
    order, place, run_end, prev_rows = files.runs()
    seen = np.zeros(len(data), bool)  # by row: the walk starts here, nothing is visited yet
    chain = walk.chain
    take, add = chain.extend_rows, chain.add
    k = None if name is None else find(name)
    while k is not None:
        if not hash_ok[k] or seen[k]:
            name = names[k]
            break
        if plain[k]:  # its link is in the columns: follow it by row, no name built
            at = place[k]
            if at >= 0 and (last := run_end[at]) > at:  # a run from here: take it whole
                run = order[at:last]
                if not seen[run].any():
                    seen[run] = True
                    take(run.tolist())
                    k = int(order[last])
                    continue
            seen[k] = True
            take([k])
            following = int(prev_rows[k])
            if following >= 0:
                k = following
                continue
            name = prev_name(k)  # None: no predecessor; else one the pass did not read
        else:
            try:
                block = decode_block(data[k])
            except FormatError:
                name = names[k]
                break
            seen[k] = True
            add(BlockEntry(parse_block_name(names[k]), block, len(data[k])))
            prev = block.prev_block_hash
            name = None if prev is None else str(prev)
        k = None if name is None else find(name)
    walk.visited.rows = seen
    report.bytes_hashed += int(files.sizes[seen].sum())
    return name


def _walk_from(
    current: Multihash | None, read_block: Callable[[str], bytes], walk: _Walk, report: VerifyReport
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


def _fold(
    chain: WalkedChain, report: VerifyReport, every: int = SNAPSHOT_INTERVAL
) -> tuple[list[tuple[range, DatasetState]], DatasetState, dict[int, DatasetState]]:
    """Re-run every rule; return the positions of the data-carrying blocks with the state after
    them (its schema and vocab are what their slices must have), the state at the head, and
    the states at every ``every``-th block (what the index's periodic snapshots must describe).

    Runs of plain AddData blocks are checked and applied a run at a time
    (:func:`rules.plain_run_passes`, :func:`state.apply_plain_run`); any block the run check
    does not vouch for, and every other block, goes through :func:`chain.advance`."""
    state = EMPTY
    with_data: list[tuple[range, DatasetState]] = []
    periodic: dict[int, DatasetState] = {}
    n, total = 0, len(chain)
    while n < total:
        # a run ends at the next snapshot's place (the next multiple of ``every``), inclusive
        stop = min(total, -(-n // every) * every + 1)
        end = chain.plain_run_end(n, stop)
        if end > n:
            run, hashes = chain.plain_run(n, end)
            good = plain_run_passes(state, run, hashes)
            if good:
                if good < len(run):
                    run, hashes = run.take(np.arange(good)), hashes[:good]
                state = apply_plain_run(state, run, hashes)
                report.blocks_checked += good
                with_data.append((range(n, n + good), state))
                n += good
                if (n - 1) % every == 0:
                    periodic[n - 1] = state
                if n == end:
                    continue
        try:
            entry = chain[n]
        except FormatError as exc:  # the columns vouched for a block the decoder refuses
            report.add("error", "block-format", str(exc), block_hash=chain.name(n))
            return with_data, state, periodic
        report.blocks_checked += 1
        try:
            next_state = advance(state, entry.block, entry.hash)
        except RuleViolation as violation:
            report.add(
                "error",
                violation.rule,
                violation.detail,
                sequence_number=entry.block.sequence_number,
                block_hash=str(entry.hash),
            )
            try:  # keep going so later, unrelated problems are reported too
                next_state = apply(state, entry.block, entry.hash)
            except OdfChainError:
                return with_data, state, periodic
        event = entry.block.event
        if isinstance(event, AddData | ExecuteTransform) and event.new_data is not None:
            with_data.append((range(n, n + 1), next_state))
        state = next_state
        if n % every == 0:
            periodic[n] = state
        n += 1
    _check_head_lineage(state, report)
    return with_data, state, periodic


def _check_head_lineage(state: DatasetState, report: VerifyReport) -> None:
    """A lineage event's promise that no block after it kept: no later block can break the rule
    when the chain ends right there, so it is checked at the head."""
    pending = state.lineage_pending
    if pending is not None:
        gap = pending.uncovered
        report.add(
            "error",
            "lineage-data",
            f"the lineage event promised offsets {gap.start}..{gap.end}, and the chain ends "
            "before any data slice covers them",
            sequence_number=pending.sequence_number,
            block_hash=str(pending.block_hash),
        )


class _Upstream:
    """Other datasets that lineage events pin, each opened and read once."""

    def __init__(self) -> None:
        self._chains: dict[str, list[BlockEntry] | OdfChainError] = {}
        self._schemas: dict[str, list[pa.Schema | None]] = {}

    def schema_at(self, uri: str, index: int) -> pa.Schema | None:
        """The schema in force at block ``index`` of the chain at ``uri`` (one fold per chain,
        however many blocks of it are pinned)."""
        schemas = self._schemas.get(uri)
        if schemas is None:
            schemas, state = [], EMPTY
            for entry in self.chain(uri):
                state = advance(state, entry.block, entry.hash)
                schemas.append(state.schema)
            self._schemas[uri] = schemas
        return schemas[index]

    def chain(self, uri: str) -> list[BlockEntry]:
        found = self._chains.get(uri)
        if found is None:
            try:
                found = load_chain(open_storage(uri))
            except OdfChainError as exc:
                found = exc
            self._chains[uri] = found
        if isinstance(found, OdfChainError):
            raise found
        return found


def _check_lineage_inputs(chain: WalkedChain, report: VerifyReport) -> None:
    """Follow every pinned dataset input of every lineage event: an input that cannot be
    opened is a warning (it may have moved); a pinned block the input's chain does not have is
    a dangling reference, and input fields its schema there lacks are wrong: both errors."""
    upstream = _Upstream()
    for _, entry in chain.decoded():  # a lineage event is never a plain block
        event = entry.block.event
        if not isinstance(event, AddFieldLineage):
            continue
        where = {
            "sequence_number": entry.block.sequence_number,
            "block_hash": str(entry.hash),
        }
        schemas: dict[str, pa.Schema | None] = {}
        for pinned in event.inputs:
            if pinned.dataset_id is None or pinned.block_hash is None:
                continue
            label = f"input {pinned.name!r} ({pinned.dataset_id})"
            if pinned.uri is None:
                report.add(
                    "warning", "lineage-input-unreachable", f"{label} names no location", **where
                )
                continue
            try:
                other = upstream.chain(pinned.uri)
            except OdfChainError as exc:
                report.add(
                    "warning",
                    "lineage-input-unreachable",
                    f"{label} cannot be read at {pinned.uri}: {exc}",
                    **where,
                )
                continue
            seed = other[0].block.event if other else None
            if not isinstance(seed, Seed) or seed.dataset_id != pinned.dataset_id:
                report.add(
                    "warning",
                    "lineage-input-unreachable",
                    f"{label}: {pinned.uri} now holds another dataset",
                    **where,
                )
                continue
            index = next((i for i, e in enumerate(other) if e.hash == pinned.block_hash), None)
            if index is None:
                report.add(
                    "error",
                    "lineage-input-dangling",
                    f"{label} is pinned at block {pinned.block_hash}, which its chain at "
                    f"{pinned.uri} does not have",
                    **where,
                )
                continue
            try:
                schemas[pinned.name] = upstream.schema_at(pinned.uri, index)
            except OdfChainError as exc:
                report.add(
                    "warning",
                    "lineage-input-unreachable",
                    f"{label} does not verify up to its pinned block: {exc}",
                    **where,
                )
        for problem in lineage_input_problems(event, lambda p, found=schemas: found.get(p.name)):
            report.add("error", "lineage-inputs", problem, **where)


@dataclass
class _Hashed:
    """One slice file opened and hashed, off the reporting thread; ``problem`` is set instead
    of the rest when it could not be (``rule``, message)."""

    fh: BinaryIO | None = None
    size: int = 0
    digest: Multihash | None = None
    hashed: int = 0
    problem: tuple[str, str] | None = None


# Slices hashed ahead of the one being reported, in threads: BLAKE3 and file reads release the
# GIL, so two threads use both cores. The window bounds the open files and the memory held.
DATA_THREADS = 2
_DATA_WINDOW = 4


def _hash_slice(storage: Storage, data: DataSlice) -> _Hashed:
    name = str(data.physical_hash)
    try:
        if not storage.has_data(name):  # also when data/ itself is missing
            return _Hashed(problem=("data-missing", "data slice file is missing"))
        fh = storage.open_data(name)
    except NotFoundError:  # removed since has_data looked
        return _Hashed(problem=("data-missing", "data slice file is missing"))
    except OdfChainError as exc:
        return _Hashed(problem=("data-unreadable", str(exc)))
    try:
        size = fh.size() if hasattr(fh, "size") else os.fstat(fh.fileno()).st_size
        digest, hashed = Multihash.digest_stream(data.physical_hash.algorithm, fh)
    except OSError as exc:
        fh.close()
        path = storage.fs_path(f"data/{name}")
        return _Hashed(problem=("data-unreadable", f"cannot read {path}: {exc}"))
    return _Hashed(fh, size, digest, hashed)


def _hashed_slices(
    storage: Storage, entries: Iterable[tuple[BlockEntry, DatasetState]]
) -> Iterator[tuple[BlockEntry, DatasetState, _Hashed]]:
    """Each slice-carrying entry with its file hashed, in chain order, ``_DATA_WINDOW`` ahead."""
    pending: deque = deque()
    with ThreadPoolExecutor(DATA_THREADS, thread_name_prefix="odf-chain-verify-data") as pool:
        try:
            for entry, state in entries:
                data = entry.block.event.new_data  # type: ignore[union-attr]
                pending.append((entry, state, pool.submit(_hash_slice, storage, data)))
                if len(pending) >= _DATA_WINDOW:
                    entry, state, future = pending.popleft()
                    yield entry, state, future.result()
            while pending:
                entry, state, future = pending.popleft()
                yield entry, state, future.result()
        finally:  # the caller stopped early: close what was opened ahead
            for _, _, future in pending:
                if future.exception() is None and (fh := future.result().fh) is not None:
                    fh.close()


def _check_slice(
    entry: BlockEntry,
    state: DatasetState,
    hashed: _Hashed,
    report: VerifyReport,
    deep: bool = False,
) -> None:
    event = entry.block.event
    assert isinstance(event, AddData | ExecuteTransform)
    data: DataSlice = event.new_data  # type: ignore[assignment]
    name = str(data.physical_hash)
    where = {
        "sequence_number": entry.block.sequence_number,
        "block_hash": str(entry.hash),
        "path": f"data/{name}",
    }
    report.slices_checked += 1
    if hashed.problem is not None:
        report.add("error", *hashed.problem, **where)
        return
    assert hashed.fh is not None
    with hashed.fh as fh:
        if hashed.size != data.size:
            report.add(
                "error", "data-size", f"expected {data.size} bytes, found {hashed.size}", **where
            )
        report.bytes_hashed += hashed.hashed
        if hashed.digest != data.physical_hash:
            report.add(
                "error",
                "data-hash",
                f"content hashes to {hashed.digest}: the file was altered or replaced",
                **where,
            )
            return  # the Parquet checks below would only restate the damage
        try:
            fh.seek(0)
            parquet = pq.ParquetFile(fh)
            metadata = parquet.metadata
            file_schema = parquet.schema_arrow
        except (pa.ArrowException, OSError) as exc:
            report.add("error", "data-format", f"not a readable Parquet file: {exc}", **where)
            return
        if metadata.num_rows != data.num_records:
            interval = data.offset_interval
            report.add(
                "error",
                "data-rows",
                f"offsets [{interval.start}, {interval.end}] promise {data.num_records} rows, "
                f"the file holds {metadata.num_rows}",
                **where,
            )
        if state.schema is not None and not same_columns(file_schema, state.schema):
            report.add(
                "error",
                "data-schema",
                "the file's columns differ from the schema in force "
                f"(block {state.schema_sequence_number})",
                **where,
            )
        if deep:
            _check_rows(parquet, entry, state, report, where)


# -- verify --deep: every row of a slice -----------------------------------------------------

# ODF's operation types (the ``op`` column): append, retract, correct-from, correct-to.
OPERATION_CODES = {0: "append", 1: "retract", 2: "correct-from", 3: "correct-to"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _first(mask: np.ndarray) -> int | None:
    found = np.flatnonzero(mask)
    return int(found[0]) if found.size else None


def _integers(column: pa.Array, name: str, first_row: int) -> tuple[np.ndarray | None, str]:
    """The column's values as integers, or (None, what is wrong with its first bad row)."""
    if not pa.types.is_integer(column.type):
        return None, f"column {name!r} has type {column.type}, expected an integer type"
    if column.null_count:
        row = first_row + pc.index(pc.is_null(column), True).as_py()
        return None, f"column {name!r}: row {row} is null"
    return column.to_numpy(), ""


class _Offsets:
    """Row i of the slice holds offset start + i: the block's interval, in order, no gaps."""

    rule = "data-offsets"

    def __init__(self, name: str, start: int, end: int) -> None:
        self.name, self.start, self.end = name, start, end

    def check(self, column: pa.Array, first_row: int) -> str | None:
        values, problem = _integers(column, self.name, first_row)
        if values is None:
            return problem
        expected = np.arange(self.start + first_row, self.start + first_row + len(values))
        bad = _first(values != expected)
        if bad is None:
            return None
        return (
            f"column {self.name!r}: row {first_row + bad} holds offset {values[bad]}, expected "
            f"{expected[bad]} (the block's offsets {self.start}..{self.end}, in order)"
        )


class _Operations:
    """Every row's operation type is one of ODF's codes."""

    rule = "data-op"

    def __init__(self, name: str) -> None:
        self.name = name

    def check(self, column: pa.Array, first_row: int) -> str | None:
        values, problem = _integers(column, self.name, first_row)
        if values is None:
            return problem
        bad = _first(~np.isin(values, list(OPERATION_CODES)))
        if bad is None:
            return None
        codes = ", ".join(f"{code} {name}" for code, name in OPERATION_CODES.items())
        return (
            f"column {self.name!r}: row {first_row + bad} holds operation type {values[bad]}; "
            f"ODF's are {codes}"
        )


class _SystemTime:
    """Every row carries the system time of the block that added it."""

    rule = "data-system-time"

    def __init__(self, name: str, system_time: datetime) -> None:
        self.name, self.system_time = name, system_time
        self._micros = (system_time - _EPOCH) // timedelta(microseconds=1)

    def check(self, column: pa.Array, first_row: int) -> str | None:
        expected_text = f"the block's system time {self.system_time.isoformat()}"
        if not pa.types.is_timestamp(column.type):
            return f"column {self.name!r} has type {column.type}, expected a timestamp"
        if column.null_count:
            row = first_row + pc.index(pc.is_null(column), True).as_py()
            return f"column {self.name!r}: row {row} is null, expected {expected_text}"
        scale = _PER_SECOND[column.type.unit]
        expected, rest = divmod(self._micros * scale, 1_000_000)
        if rest:
            return (
                f"column {self.name!r} (unit {column.type.unit}) cannot hold {expected_text} "
                "exactly"
            )
        values = column.cast(pa.int64()).to_numpy()
        bad = _first(values != expected)
        if bad is None:
            return None
        try:
            value = column[bad].as_py()
            shown = value.isoformat() if isinstance(value, datetime) else value
        except (OverflowError, ValueError):  # beyond what a datetime can hold: the raw count
            shown = f"{values[bad]} {column.type.unit} since the epoch"
        return (
            f"column {self.name!r}: row {first_row + bad} holds {shown}, expected {expected_text}"
        )


def _check_rows(
    parquet: pq.ParquetFile,
    entry: BlockEntry,
    state: DatasetState,
    report: VerifyReport,
    where: dict,
) -> None:
    """Read every row of a slice whose file hashes right: recompute its logical hash (as the
    writers compute it, :class:`~odf_chain.slices.LogicalHasher`) and check the system columns
    against the block: offsets exactly the block's interval in order, ODF operation codes,
    and the block's system time on every row. Each column reports its first bad row only.

    Event times are not checked: ODF's watermark promises that no *earlier* event is still to
    come, not that every event of a slice is at or before it (a watermark may lag by an
    allowed lateness).
    """
    event = entry.block.event
    data: DataSlice = event.new_data  # type: ignore[union-attr]
    interval = data.offset_interval
    vocab = state.vocab
    checks = [
        _Offsets(vocab.offset_column, interval.start, interval.end),
        _Operations(vocab.operation_type_column),
        _SystemTime(vocab.system_time_column, entry.block.system_time),
    ]
    names = parquet.schema_arrow.names
    for check in list(checks):
        if check.name not in names:
            report.add("error", check.rule, f"the file has no {check.name!r} column", **where)
            checks.remove(check)
    row = 0
    try:
        hasher = LogicalHasher(parquet.schema_arrow, data.logical_hash.algorithm)
        for batch in read_batches(parquet):
            hasher.update(batch)
            for check in list(checks):
                problem = check.check(batch.column(check.name), row)
                if problem is not None:
                    report.add("error", check.rule, problem, **where)
                    checks.remove(check)
            row += batch.num_rows
            report.rows_checked += batch.num_rows
        actual = hasher.multihash()
    except (pa.ArrowException, OSError) as exc:
        report.add("error", "data-format", f"cannot read the rows after row {row}: {exc}", **where)
        return
    if actual != data.logical_hash:
        report.add(
            "error",
            "data-logical-hash",
            f"the rows hash to {actual}, the block records {data.logical_hash}",
            **where,
        )


def _listing(list_names, directory: str, report: VerifyReport, *, needed: bool) -> list:
    """A directory listing, or [] with a ``layout`` problem (an error when the chain needs the
    directory) when the directory is missing or cannot be listed."""
    try:
        return list_names()
    except OdfChainError as exc:
        missing = isinstance(exc, NotFoundError)
        message = f"the {directory} directory is missing" if missing else str(exc)
        report.add("error" if needed else "warning", "layout", message, path=directory)
        return []


_LISTED = 5


def _descendants(
    storage: Storage, walk: _Walk, orphans: list[str], report: VerifyReport
) -> dict[str, int]:
    """Unreferenced blocks that descend from the head (their ``prev_block_hash`` is the head, or
    another such block), by name with their sequence numbers; reported as one warning, and
    recorded with the slices they name in ``report.descendants`` (gc keeps them all).

    A write that dies between writing its blocks and moving the head leaves at most two of them
    (a schema block and its AddData); more mean the head was moved backwards.
    """
    if not orphans:
        return {}
    children: dict[str, list[tuple[str, int]]] = {}
    slices: dict[str, tuple[str, ...]] = {}
    for name in orphans:
        try:
            expected = parse_block_name(name)
            data = storage.read_block(name)
            if Multihash.digest(expected.algorithm, data) != expected:
                continue  # damaged: its link cannot be trusted
            block = decode_block(data)
        except OdfChainError:
            continue
        report.bytes_hashed += len(data)
        prev = None if block.prev_block_hash is None else str(block.prev_block_hash)
        if prev is not None:
            children.setdefault(prev, []).append((name, block.sequence_number))
        event = block.event
        if isinstance(event, AddData | ExecuteTransform) and event.new_data is not None:
            slices[name] = (str(event.new_data.physical_hash),)
        report.uncommitted[name] = (prev, slices.get(name, ()))
    found: dict[str, int] = {}
    frontier = [report.head] if report.head is not None else []
    while frontier:
        parent = frontier.pop()
        for name, seq in children.get(parent, ()):
            if name not in found and name not in walk.visited:
                found[name] = seq
                frontier.append(name)
    if not found:
        return found
    report.descendants = {name: slices.get(name, ()) for name in found}
    named = sum(len(v) for v in report.descendants.values())
    kept = f"; they name {named} data file{'s' if named != 1 else ''}" if named else ""
    by_seq = sorted(found, key=lambda n: (found[n], n))
    n = len(found)
    listed = ", ".join(by_seq[:_LISTED]) + (f" and {n - _LISTED} more" if n > _LISTED else "")
    low, high = found[by_seq[0]], found[by_seq[-1]]
    seqs = f"sequence number {low}" if low == high else f"sequence numbers {low}..{high}"
    head_seq = walk.chain.sequence_number(-1) if len(walk.chain) else None
    report.add(
        "warning",
        "unreferenced-descendants",
        f"{n} unreferenced block{'s descend' if n > 1 else ' descends'} from the head "
        f"({seqs}: {listed}){kept}: the head may have been rolled back (an interrupted write "
        "leaves at most two); gc keeps them",
        sequence_number=head_seq,
        block_hash=report.head,
        path="refs/head",
    )
    return found


def _leftovers(storage: Storage, walk: _Walk, report: VerifyReport) -> None:
    if walk.complete:
        why = (
            "block is not part of the chain (a writer's that lost or crashed, or a rolled-back "
            "head's): gc keeps it and the slice it names unless --discard-uncommitted names it"
        )
    else:
        why = (
            "block is not reachable from the head (the walk stopped early: it may be in the chain)"
        )
    # a damaged block the chain names is not a leftover
    listing = walk.listed  # the one pass's, else a listing now
    if listing is None:
        listing = _listing(storage.block_names, "blocks/", report, needed=True)
    orphans = walk.visited.others(listing)
    descendants = _descendants(storage, walk, orphans, report)
    for name in orphans:
        if name not in descendants:
            report.add("warning", "orphan-block", why, block_hash=name, path=f"blocks/{name}")
    # a slice a block outside the chain names is kept with it (a rolled-back suffix's data?)
    kept = {n for _, names in report.uncommitted.values() for n in names}
    data_names = _listing(storage.data_names, "data/", report, needed=walk.chain.has_slices())
    named = walk.chain.names_slices(data_names)
    for name, is_named in zip(data_names, named, strict=True):
        if not is_named and name not in kept:
            report.add(
                "warning",
                "orphan-data",
                "data file is not named by any block (an interrupted write?)",
                path=f"data/{name}",
            )
    for name in _listing(storage.leftover_staging, ".staging/", report, needed=False):
        report.add(
            "warning",
            "staging-leftover",
            "abandoned in-flight file",
            path=f".staging/{name}",
        )
    if walk.irregular is None:
        irregular = storage.irregular_entries()
    else:  # blocks/ as the one pass listed it
        irregular = sorted(walk.irregular + storage.irregular_entries(("data", STAGING)))
    for path, kind in irregular:
        folder, _, name = path.partition("/")
        if folder == "blocks":
            ours = name in walk.visited
        else:
            ours = folder == "data" and walk.chain.names_slices([name])[0]
        if not ours:  # the chain's own are errors already, where they are read
            report.add(
                "warning",
                "irregular-entry",
                f"not a regular file ({kind}): never read or followed, not removed by gc",
                path=path,
            )


def _read_head_log(storage: Storage, report: VerifyReport) -> list[HeadMove] | None:
    """The head log, read *before* the head: a writer appends its line after moving the head,
    so every head logged by then is the head read next or one of its ancestors. (Read after,
    the log could name a head a concurrent writer set after the walk began.)"""
    try:
        return storage.read_head_log()
    except OdfChainError as exc:  # malformed, too large, not a regular file
        report.add("error", "head-log", str(exc), path=HEAD_LOG)
        return None


def _check_head_log(
    storage: Storage, moves: list[HeadMove] | None, walk: _Walk, report: VerifyReport
) -> None:
    """Every head the log records must still be the head or one of its ancestors; one that is
    not means refs/head moved back (a restored backup, an operator's mistake, tampering), which
    no rule on the blocks can see. Datasets from before the log have none: nothing to check."""
    if moves is None:
        return
    logged: dict[str, int] = {}  # head -> when it last became the head
    for number, move in enumerate(moves, 1):
        try:
            for name in (move.old, move.new):
                if name is not None:
                    parse_block_name(name)
        except FormatError as exc:
            report.add("error", "head-log", f"line {number}: {exc}", path=HEAD_LOG)
            return
        logged[move.new] = max(logged.get(move.new, 0), move.time_ms)
    if not walk.complete or report.head is None:
        return  # the chain's own errors say enough; its ancestry is not known
    gone = walk.visited.missing(list(logged))
    lost = {n: t for (n, t), g in zip(logged.items(), gone, strict=True) if g and n != report.head}
    if not lost:
        return
    newest = max(lost, key=lambda n: (lost[n], n))
    when = datetime.fromtimestamp(lost[newest] / 1000, UTC).isoformat(timespec="milliseconds")
    try:
        was = f"block {decode_block(storage.read_block(newest)).sequence_number} {newest}"
    except OdfChainError:
        was = f"block {newest} (not readable in blocks/)"
    head_seq = walk.chain.sequence_number(-1)
    more = len(lost) - 1
    others = f" ({more} more logged head{'s are' if more > 1 else ' is'} not in the chain)"
    report.add(
        "error",
        "head-rollback",
        f"refs/head moved back: {was} was the head at {when}; the head is now block "
        f"{head_seq}{others if more else ''}; writing that hash back to refs/head restores it",
        sequence_number=head_seq,
        block_hash=report.head,
        path="refs/head",
    )


def _check_receipts(walk: _Walk, receipts: list[Receipt], report: VerifyReport) -> None:
    """Each receipt's block must still be in the chain at its sequence number (from the blocks
    the walk read: nothing is read again)."""
    if not receipts:
        return
    result = check_receipts(walk.chain, receipts, complete=walk.complete)
    report.receipts_checked += result.checked
    report.receipts_held += result.held
    report.receipts_signed += result.signed
    for finding in result.findings:
        report.add(
            "error",
            "receipt",
            finding.message,
            sequence_number=finding.sequence_number,
            block_hash=finding.block_hash,
        )


def verify(
    storage: Storage,
    *,
    check_data: bool = True,
    receipts: Iterable[Receipt | str | Path] = (),
    deep: bool = False,
) -> VerifyReport:
    """Check the whole dataset; never raises for problems found, only reports them.

    ``receipts`` (Receipt objects or receipt files) are read first: one that cannot be read
    raises, as bad input, before the dataset is looked at. ``deep`` also reads every row of
    every slice (ignored without ``check_data``).
    """
    held = load_receipts(receipts)
    report = VerifyReport(dataset=storage.location, deep=deep and check_data)
    moves = _read_head_log(storage, report)
    walk = _walk(storage, report)
    _check_head_log(storage, moves, walk, report)
    _check_receipts(walk, held, report)
    chain = walk.chain
    with_data: list[tuple[range, DatasetState]] = []
    if walk.complete:
        with_data, head_state, periodic = _fold(chain, report)
        _check_lineage_inputs(chain, report)
        if report.ok:  # an index is compared with a sound chain only: else it is noise
            report_index(storage, chain, head_state, periodic, report.add)  # if the index lies
    else:
        report.add(
            "error", "chain-incomplete", "rules not re-run: the chain could not be read to the Seed"
        )
        with_data = [(range(i, i + 1), EMPTY) for i in chain.with_slices()]
    if check_data:
        entries = ((chain[i], state) for positions, state in with_data for i in positions)
        for entry, state, hashed in _hashed_slices(storage, entries):
            _check_slice(entry, state, hashed, report, report.deep)
    _leftovers(storage, walk, report)
    return report


def verify_path(
    path: str | Path,
    *,
    check_data: bool = True,
    receipts: Iterable[Receipt | str | Path] = (),
    deep: bool = False,
) -> VerifyReport:
    return verify(open_storage(path), check_data=check_data, receipts=receipts, deep=deep)
