"""Fold a whole walked chain oldest first with the step append uses, so every rule is re-run
exactly as it ran when the block was written: verify's step 2, and an index rebuild's fold.

Verify has no rules of its own: a block goes through :func:`chain.advance` (or, for a run of
plain AddData blocks, :func:`rules.plain_run_passes` and :func:`state.apply_plain_run`, which
stop at the first block they cannot vouch for). A violation is reported and the fold goes on
with :func:`state.apply`, so later, unrelated problems are reported too. The states it passes
on the way are what the slices (step 3) and the index (:mod:`odf_chain.index.check`) are
compared with: nothing is folded twice.
"""

from __future__ import annotations

from odf_chain.chain import advance
from odf_chain.chain_walk import Findings
from odf_chain.errors import FormatError, OdfChainError, RuleViolation
from odf_chain.events import AddData, ExecuteTransform
from odf_chain.rules import plain_run_passes
from odf_chain.state import EMPTY, DatasetState, apply, apply_plain_run
from odf_chain.walked import WalkedChain

_RUN_PLACES = 64  # snapshot places a run of plain blocks is checked across at once


def refold(
    chain: WalkedChain, report: Findings, *, every: int
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
        # a run is checked up to _RUN_PLACES snapshot places on (multiples of ``every``), and
        # applied one stretch at a time, each ending at such a place (inclusive): the state
        # there is one the index must describe
        stop = min(total, -(-n // every) * every + 1 + (_RUN_PLACES - 1) * every)
        end = chain.plain_run_end(n, stop)
        if end > n:
            run, hashes = chain.plain_run(n, end)
            good = plain_run_passes(state, run, hashes)
            at = n
            while at < n + good:
                until = min(n + good, -(-at // every) * every + 1)
                state = apply_plain_run(
                    state, run.rows(at - n, until - n), hashes[at - n : until - n]
                )
                with_data += [(r, state) for r in chain.sliced_ranges(at, until)]
                if (until - 1) % every == 0:
                    periodic[until - 1] = state
                at = until
            report.blocks_checked += good
            n += good
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


def _check_head_lineage(state: DatasetState, report: Findings) -> None:
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
