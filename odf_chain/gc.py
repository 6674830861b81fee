"""Garbage collection: remove what interrupted or losing writers left behind.

Only what verify reports as a leftover is removed (data files no block names, blocks outside
the chain, abandoned staging entries), only in a dataset that verifies, and only when older
than ``min_age`` seconds, so a writer still in the middle of its transaction keeps its files.
Blocks that descend from the head are kept: they may be the evidence of a rolled-back head.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from odf_chain.errors import OdfChainError
from odf_chain.storage import Storage, open_storage
from odf_chain.verify import verify

DEFAULT_MIN_AGE = 600.0
_COLLECTABLE = ("orphan-data", "orphan-block", "staging-leftover")


@dataclass
class GcReport:
    removed: list[str] = field(default_factory=list)  # paths relative to the dataset
    kept_young: list[str] = field(default_factory=list)
    bytes_freed: int = 0


def collect_garbage(
    storage: Storage, *, min_age: float = DEFAULT_MIN_AGE, dry_run: bool = False
) -> GcReport:
    """Remove the dataset's leftovers older than ``min_age`` seconds; return what was done."""
    report = verify(storage, check_data=False)
    if not report.ok:
        raise OdfChainError(
            f"{storage.location} does not verify ({len(report.errors)} errors, first: "
            f"{report.errors[0].line()}); gc removes nothing from a damaged dataset"
        )
    now = time.time()
    result = GcReport()
    for problem in report.warnings:
        if problem.rule not in _COLLECTABLE or problem.path is None:
            continue
        info = storage.entry_info(problem.path)
        if info is None:
            continue
        if now - info.mtime < min_age:
            result.kept_young.append(problem.path)
            continue
        result.bytes_freed += info.size
        result.removed.append(problem.path)
        if dry_run:
            continue
        name = problem.path.rsplit("/", 1)[-1]
        if problem.rule == "orphan-data":
            storage.remove_data(name)
        elif problem.rule == "orphan-block":
            storage.remove_block(name)
        else:
            storage.remove_staged(name)
    return result


def collect_garbage_path(location: str, **options) -> GcReport:
    return collect_garbage(open_storage(location), **options)
