"""Step 7: the walked chain must still hold each receipt's block at its sequence number.

A receipt is an anchor kept outside the writer's reach; the head log lives beside the chain and
can be rewritten with it. The check itself is :func:`odf_chain.receipt.check_receipts`, over
the blocks the walk already read; this step puts its findings in the report.
"""

from __future__ import annotations

from odf_chain.chain_walk import Walk
from odf_chain.receipt import Receipt, check_receipts
from odf_chain.verify.report import VerifyReport


def check_receipt_blocks(walk: Walk, receipts: list[Receipt], report: VerifyReport) -> None:
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
