"""Step 3b (``--deep``, derivative datasets): the changelog folds.

A derive run's slice retracts rows of the answer in force; each retraction must cancel a row
that is live at that point (:func:`odf_chain.derived.fold`). A slice forged with consistent
hashes and digests can still retract a row that never was: the answer at that block is then no
answer at all. This step folds the ledger slice by slice, oldest first, and reports the first
slice that does not fold, at its block.
"""

from __future__ import annotations

import pyarrow as pa

from odf_chain import derived, slice_reader
from odf_chain.errors import FormatError, IntegrityError, OdfChainError
from odf_chain.events import DatasetKind
from odf_chain.state import DatasetState
from odf_chain.storage import Storage
from odf_chain.verify.report import VerifyReport
from odf_chain.walked import WalkedChain


def check_changelog(
    storage: Storage, chain: WalkedChain, head: DatasetState, report: VerifyReport
) -> None:
    if head.dataset_kind != DatasetKind.DERIVATIVE or head.schema is None:
        return
    live: pa.Table | None = None
    for i in chain.with_slices():
        entry = chain[i]
        data = entry.block.event.new_data  # type: ignore[union-attr]
        (piece,) = slice_reader.named_slices(storage, [(entry, data)])
        try:
            rows = slice_reader.read_table(storage, [piece], head.schema, check="hash")
        except OdfChainError:
            return  # a damaged slice: the data checks report it, and nothing after it folds
        try:
            live = derived.fold_onto(live, rows, head.vocab)
        except (IntegrityError, FormatError) as exc:  # rows that break it, an op it has not
            report.add(
                "error",
                "data-changelog",
                f"the changelog does not fold here: {exc}",
                sequence_number=entry.block.sequence_number,
                block_hash=str(entry.hash),
                path=f"data/{data.physical_hash}",
            )
            return
