"""Garbage collection: remove what interrupted or losing writers left behind, and nothing else.

What makes it safe, in the order it is checked:

- The layout directories must be real directories: through a symlinked ``data/`` gc would
  delete another directory's files (another dataset's slices, say). Refused, one line.
- The dataset must verify (blocks and rules, not data). A head that moved back is an error
  there (the head log says which blocks were heads), so a rolled-back suffix, which is
  evidence, is never touched.
- Only verify's leftovers are candidates: data files no block names and staging entries.
  Blocks outside the chain are never removed on gc's own judgement, nor the slices they name:
  a crashed or losing writer's blocks look exactly like a rolled-back suffix whose head log was
  restored or lost with it (evidence, and acknowledged writes), so they go only when named
  with ``discard_uncommitted``, and never a block ever logged as a head. (A writer that loses
  the head race removes the blocks and slices it created itself.) Symlinks and other
  irregular entries are never followed, never removed; whatever is younger than ``min_age``
  stays. Deletion goes through directory descriptors (see LocalStorage).
- Deletions happen under the writers' head lock, and the head is re-read before each. A head
  that moved between the plan and the lock adds what its new blocks name to what is kept.
  Writers put their slices in place before they take that lock (and, on an object store,
  their blocks), so gc may take one of them; the writer's head move then finds it missing and
  fails with nothing committed (see ``compare_and_swap_head``): an acknowledged write never
  loses a file. A local head move writes its blocks and the head's staging file under the
  lock, out of gc's reach. A staged file a live writer is still filling is not taken at all,
  whatever ``min_age``: the writer holds a shared lock on it (its claim) and gc removes a
  staged file only under an exclusive one.
- A backend without a lock (object stores) cannot exclude writers: there gc keeps everything
  younger than :data:`DEFAULT_MIN_AGE` unless the caller says no writer runs
  (``single_writer=True``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from odf_chain import chain
from odf_chain.errors import ConflictError, NotFoundError, OdfChainError, StorageError
from odf_chain.gc_age import DEFAULT_MIN_AGE, check_min_age
from odf_chain.index.read import open_index
from odf_chain.storage import Storage, check_name, open_storage
from odf_chain.storage.base import no_lock
from odf_chain.verify import VerifyReport, verify

_COLLECTABLE = ("orphan-data", "staging-leftover")

# why something that looked collectable was kept
YOUNG = "young"
DESCENDANT = "descendant"
DESCENDANT_DATA = "descendant-data"
UNCOMMITTED = "uncommitted"
UNCOMMITTED_DATA = "uncommitted-data"
IRREGULAR = "irregular"
LOGGED_HEAD = "logged-head"
COMMITTED = "committed"
IN_USE = "in-use"

_WHY = {
    YOUNG: "younger than the minimum age: a writer may still need it",
    DESCENDANT: "an uncommitted block that descends from the head (a crashed writer's, or a "
    "rolled-back head's): possible evidence; --discard-uncommitted removes it",
    DESCENDANT_DATA: "named by a block that descends from the head",
    UNCOMMITTED: "a block outside the chain (a losing or crashed writer's, or a rolled-back "
    "head's): possible evidence; --discard-uncommitted removes it",
    UNCOMMITTED_DATA: "named by a block outside the chain",
    IRREGULAR: "not a regular file: never followed, never removed",
    IN_USE: "a staged file a live writer holds (its claim, a lock, is held until it commits)",
    LOGGED_HEAD: "was once the head (head log): evidence",
    COMMITTED: "committed while gc ran",
}


@dataclass(frozen=True, slots=True)
class Kept:
    """A file gc left in place although it is not part of the chain, and why (a key of
    :data:`_WHY`, explained by :meth:`why`)."""

    path: str
    reason: str

    def why(self) -> str:
        return _WHY.get(self.reason, self.reason)


@dataclass(frozen=True)
class GcReport:
    removed: list[str] = field(default_factory=list)  # paths relative to the dataset
    kept: list[Kept] = field(default_factory=list)
    bytes_freed: int = 0

    @property
    def kept_young(self) -> list[str]:
        return [k.path for k in self.kept if k.reason == YOUNG]


@dataclass(frozen=True, slots=True)
class _Plan:
    """What verify showed: the head gc plans on, what it may remove and what it keeps."""

    head: str
    candidates: list[tuple[str, str]]  # (path, rule); rule "discard" for named blocks
    kept: list[Kept]
    logged_heads: frozenset[str]


def collect_garbage(
    storage: Storage,
    *,
    min_age: float = DEFAULT_MIN_AGE,
    dry_run: bool = False,
    discard_uncommitted: Iterable[str] = (),
    single_writer: bool = False,
) -> GcReport:
    """Remove the dataset's leftovers older than ``min_age`` seconds; return what was done.

    ``discard_uncommitted``: blocks outside the chain that descend from the head (a crashed
    writer's, by verify's warning) to remove as well, whatever their age; a block that was
    ever the head is refused. Their slices go in the same call, as ordinary leftovers.
    ``single_writer``: the caller guarantees that nothing writes to the dataset meanwhile;
    needed for a ``min_age`` below the default on a backend without a head lock.
    """
    check_min_age(min_age)
    # written so that a NaN, were one to get here, fails the guard instead of passing it
    if not storage.locks_head and not (min_age >= DEFAULT_MIN_AGE) and not single_writer:
        raise OdfChainError(
            f"{storage.location}: this storage has no lock that stops writers, so gc keeps "
            f"leftovers younger than {DEFAULT_MIN_AGE:g} s; pass --single-writer "
            "(single_writer=True) if nothing else writes to the dataset while gc runs"
        )
    discard = {check_name(name, "block name") for name in discard_uncommitted}
    result = _pass(storage, min_age=min_age, dry_run=dry_run, discard=discard)
    if discard and not dry_run:  # their slices are ordinary leftovers now
        again = _pass(storage, min_age=min_age, dry_run=False, discard=set())
        result = GcReport(
            result.removed + again.removed, again.kept, result.bytes_freed + again.bytes_freed
        )
    return result


def _pass(storage: Storage, *, min_age: float, dry_run: bool, discard: set[str]) -> GcReport:
    try:
        storage.check_layout()
    except StorageError as exc:
        raise StorageError(f"gc refuses to run on {storage.location}: {exc}") from None
    report = verify(storage, check_data=False)
    if not report.ok:
        raise OdfChainError(
            f"{storage.location} does not verify ({len(report.errors)} errors, first: "
            f"{report.errors[0].line()}); gc removes nothing from a damaged dataset"
        )
    plan = _plan(storage, report, discard)
    removed: list[str] = []
    kept = list(plan.kept)
    freed = 0
    with no_lock() if dry_run else storage.head_lock():
        head = storage.read_head()
        keep_blocks, keep_data, _ = _committed_since(storage, plan.head, head)
        now = time.time()
        for path, rule in plan.candidates:
            if storage.read_head() != head:  # under the lock only tampering moves it
                raise ConflictError(
                    f"the head of {storage.location} moved during gc's deletion pass (removed "
                    f"{len(removed)} so far); run gc again"
                )
            name = path.rsplit("/", 1)[-1]
            if rule in ("orphan-block", "discard") and name in plan.logged_heads:
                kept.append(Kept(path, LOGGED_HEAD))
                continue
            if name in (keep_blocks if path.startswith("blocks/") else keep_data):
                kept.append(Kept(path, COMMITTED))
                continue
            info = storage.entry_info(path)
            if info is None:  # gone meanwhile (a writer's own cleanup)
                continue
            if rule != "discard" and not (now - info.mtime >= min_age):
                kept.append(Kept(path, YOUNG))
                continue
            staged = rule == "staging-leftover"
            if staged and (
                storage.staged_in_use(name) if dry_run else not storage.remove_staged(name)
            ):
                kept.append(Kept(path, IN_USE))
                continue
            freed += info.size
            removed.append(path)
            if dry_run or staged:
                continue
            if rule == "orphan-data":
                storage.remove_data(name)
            else:
                storage.remove_block(name)
        if any(path.startswith("blocks/") for path in removed) and not dry_run:
            # the index may still describe the removed blocks (a rolled-back head's): align
            # it with the head now, as the next reader would (a cache: best effort)
            with contextlib.suppress(OdfChainError):
                open_index(storage, save=True)
    return GcReport(removed, kept, freed)


def _plan(storage: Storage, report: VerifyReport, discard: set[str]) -> _Plan:
    logged = frozenset(move.new for move in storage.read_head_log())
    for name in sorted(discard):
        if name in logged:
            raise OdfChainError(
                f"block {name} was once the head of {storage.location} (head log): it is "
                "evidence of a rolled-back head, not an uncommitted block; not discarded"
            )
        if name not in report.uncommitted:
            raise OdfChainError(
                f"block {name} is not an uncommitted block of {storage.location} (not in "
                "blocks/, or part of the chain): not discarded"
            )
    _check_discard_whole(report, discard)
    candidates = [
        (p.path, p.rule)
        for p in report.warnings
        if p.rule in _COLLECTABLE and p.path is not None and p.block_hash not in discard
    ]
    candidates += [(f"blocks/{name}", "discard") for name in sorted(discard)]
    kept = []
    for name, (_, slices) in sorted(report.uncommitted.items()):
        if name not in discard:
            descendant = name in report.descendants
            kept.append(Kept(f"blocks/{name}", DESCENDANT if descendant else UNCOMMITTED))
            why = DESCENDANT_DATA if descendant else UNCOMMITTED_DATA
            kept += [Kept(f"data/{s}", why) for s in slices]
    kept += [Kept(p.path, IRREGULAR) for p in report.warnings if p.rule == "irregular-entry"]
    assert report.head is not None  # a dataset that verifies has a head
    return _Plan(report.head, candidates, kept, logged)


def _check_discard_whole(report: VerifyReport, discard: set[str]) -> None:
    """Discarding a block but not the blocks built on it would leave those dangling: every
    uncommitted block built on a discarded one must be named too."""
    if not discard:
        return
    parent = {name: prev for name, (prev, _) in report.uncommitted.items()}
    for name in parent:
        if name in discard:
            continue
        above = parent[name]
        while above in parent:
            if above in discard:
                raise OdfChainError(
                    f"block {name} descends from block {above}: name it too to discard both"
                )
            above = parent[above]


def _committed_since(storage: Storage, planned: str, head: str | None) -> chain.Committed:
    """Blocks and slices the head gained since gc planned on ``planned``: kept, whatever the
    plan said (a writer may have committed a file identical to a leftover)."""
    if head is None:
        raise ConflictError(f"refs/head of {storage.location} disappeared while gc ran")
    since = chain.parse_block_name(planned)
    try:
        position = chain.load_block(storage, since).block.sequence_number
        committed = chain.committed_since(storage, chain.parse_block_name(head), since, position)
    except NotFoundError as exc:
        committed, reason = None, f" ({exc})"
    else:
        reason = ""
    if committed is None or not committed.reached:
        raise ConflictError(
            f"the head of {storage.location} moved while gc planned, not forward from where gc "
            f"looked{reason}; nothing removed, run gc again"
        )
    return committed


def collect_garbage_path(location: str, **options) -> GcReport:
    return collect_garbage(open_storage(location), **options)
