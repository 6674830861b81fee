"""Step 6: check the head log: a block that was once the head must still be the head or behind it.

A head that moved back (a restored backup, a mistake, tampering) leaves a chain every rule
accepts; only the log of past heads shows it, so a logged head the walk did not pass is an error.
"""

from __future__ import annotations

from datetime import UTC, datetime

from odf_chain.chain import parse_block_name
from odf_chain.chain_walk import Walk
from odf_chain.errors import FormatError, OdfChainError
from odf_chain.format.codec import decode_block
from odf_chain.storage import BlockStore, HeadStore
from odf_chain.storage.base import HEAD_LOG, HeadMove
from odf_chain.verify.report import VerifyReport


def read_head_log(storage: HeadStore, report: VerifyReport) -> list[HeadMove] | None:
    """The head log, read *before* the head: a writer appends its line after moving the head,
    so every head logged by then is the head read next or one of its ancestors. (Read after,
    the log could name a head a concurrent writer set after the walk began.)"""
    try:
        return storage.read_head_log()
    except OdfChainError as exc:  # malformed, too large, not a regular file
        report.add("error", "head-log", str(exc), path=HEAD_LOG)
        return None


def check_head_log(
    storage: BlockStore, moves: list[HeadMove] | None, walk: Walk, report: VerifyReport
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
    try:
        when = datetime.fromtimestamp(lost[newest] / 1000, UTC).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):  # a time past year 9999: shown as logged
        when = f"{lost[newest]} ms after 1970"
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
