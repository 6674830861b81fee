"""chain-verify: prove that blocks and data are intact and every rule holds.

One module per step, run in this order by :func:`verify` (the numbers are the steps' own):

1. :mod:`odf_chain.chain_walk`: walk from the head to the Seed, hashing every stored block as
   stored (never re-encoded).
2. :mod:`odf_chain.chain_fold`: fold the chain oldest first with the same step append uses
   (:func:`chain.advance`), so every rule is re-run exactly as it ran when the block was written.

(Those two serve the index rebuild too: :func:`odf_chain.index.read.rebuild`.)
3. :mod:`.data`: check each data slice the chain names: present, size, physical hash, row count
   equal to its offset interval, columns as the schema in force says.
4. :mod:`.upstream`: follow the datasets lineage events pin: the pinned block must be in their
   chain, the input fields in their schema there (an input that cannot be opened is a warning).
5. :mod:`.leftovers`: report leftovers (unreferenced blocks and data files, abandoned staging
   files) as warnings: they are not part of the dataset, but an auditor wants to know.
6. :mod:`.head_log`: a block that was once the head must still be the head or behind it, so a
   head that moved back (a restored backup, a mistake, tampering) is an error.
7. :mod:`.receipts`: with receipts, the walked chain must still hold each receipt's block at its
   sequence number (:mod:`odf_chain.receipt`), or it was rolled back, truncated, rewritten or
   replaced.

After the fold, the index is compared with what the fold derived (:mod:`odf_chain.index.check`).
``deep=True`` also reads every row of every slice (:mod:`.deep`, in batches, never a whole file
at once): the logical hash is recomputed as writers compute it, and the system columns are
checked against the block; a derivative dataset's changelog must fold (:mod:`.changelog`).

Problems are collected, not raised, so one run reports everything it can see
(:mod:`.report`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from odf_chain.chain_fold import refold
from odf_chain.chain_walk import walk_chain
from odf_chain.index.check import report_index
from odf_chain.index.records import SNAPSHOT_INTERVAL
from odf_chain.receipt import Receipt, load_receipts
from odf_chain.state import EMPTY, DatasetState
from odf_chain.storage import Storage, open_storage
from odf_chain.verify.head_log import check_head_log, read_head_log
from odf_chain.verify.leftovers import check_leftovers
from odf_chain.verify.receipts import check_receipt_blocks
from odf_chain.verify.report import Problem, RunVerdict, Severity, VerifyReport
from odf_chain.verify.upstream import check_lineage_inputs

__all__ = [
    "DATA_THREADS",
    "OPERATION_CODES",
    "Problem",
    "RunVerdict",
    "Severity",
    "VerifyReport",
    "verify",
    "verify_path",
]


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
    moves = read_head_log(storage, report)
    walk = walk_chain(storage, report)
    check_head_log(storage, moves, walk, report)
    check_receipt_blocks(walk, held, report)
    chain = walk.chain
    with_data: list[tuple[range, DatasetState]] = []
    if walk.complete:
        with_data, head_state, periodic = refold(chain, report, every=SNAPSHOT_INTERVAL)
        chain.folded()
        check_lineage_inputs(chain, report)
        if report.ok:  # an index is compared with a sound chain only: else it is noise
            report_index(storage, chain, head_state, periodic, report.add)  # if the index lies
    else:
        report.add(
            "error", "chain-incomplete", "rules not re-run: the chain could not be read to the Seed"
        )
        with_data = [(range(i, i + 1), EMPTY) for i in chain.with_slices()]
    if check_data:  # the data side (pyarrow's Parquet reader) loads only for a data check
        from odf_chain.verify.changelog import check_changelog
        from odf_chain.verify.data import check_slice, hashed_slices

        entries = ((chain[i], state) for positions, state in with_data for i in positions)
        for entry, state, hashed in hashed_slices(storage, entries):
            check_slice(entry, state, hashed, report, report.deep)
        if report.deep and walk.complete:
            check_changelog(storage, chain, head_state, report)
    check_leftovers(storage, walk, report)
    return report


def __getattr__(name: str) -> object:
    """The data side's constants, loaded with it on first use (see :func:`verify`)."""
    if name == "DATA_THREADS":
        from odf_chain.verify.data import DATA_THREADS

        return DATA_THREADS
    if name == "OPERATION_CODES":
        from odf_chain.verify.deep import OPERATION_CODES

        return OPERATION_CODES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def verify_path(
    path: str | Path,
    *,
    check_data: bool = True,
    receipts: Iterable[Receipt | str | Path] = (),
    deep: bool = False,
) -> VerifyReport:
    return verify(open_storage(path), check_data=check_data, receipts=receipts, deep=deep)
