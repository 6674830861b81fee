"""The same rules over a run of plain AddData blocks, as numpy columns: verify's bulk step.

A second spelling of the rules, kept beside the first so that a change to one is seen next to
the other. It only ever vouches for blocks; anything it cannot vouch for goes through
:func:`odf_chain.rules.validate`, which words the error.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from odf_chain.events import DatasetKind
from odf_chain.format.columns import BlockColumns
from odf_chain.state import DatasetState

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Offsets, sizes and sequence numbers below this compare and add up exactly in int64/uint64.
_SAFE = np.uint64(1 << 53)


def plain_run_passes(state: DatasetState, run: BlockColumns, hashes: np.ndarray) -> int:
    """How many leading blocks of ``run`` certainly pass every rule above, on ``state``.

    ``run``: plain AddData blocks (:mod:`odf_chain.format.columns`) in chain order, ``hashes``
    their own multihashes (one row of bytes each). Verify folds a long chain with this instead
    of one :func:`validate` per block. It is a sufficient condition and never looser: at the
    first block it cannot vouch for (a broken rule, a transaction, a value too large to add up
    exactly, a state it does not cover) it stops, and that block goes through :func:`validate`,
    which words the error. What it checks, per block against the one before (the first against
    ``state``): sequence-number, prev-block-hash, hash-algorithm, system-time, offsets,
    watermark (for blocks with a slice and without one alike), schema-before-data; per run: a
    Seed before, a root dataset, no checkpoint and no lineage pending (these hold or fail for
    the whole run, since plain blocks change none).
    """
    m = len(run)
    if (
        m == 0
        or state.head is None
        or state.dataset_kind not in (None, DatasetKind.ROOT)
        or state.last_checkpoint is not None
        or state.lineage_pending is not None
        or state.sequence_number + 1 >= _SAFE  # a chain whose numbers already broke the rule
        or (state.last_offset or 0) >= _SAFE
    ):
        return 0
    code = state.head.code
    seq, start, end, data = run.sequence_number, run.start, run.end, run.has_data
    fine = (seq < _SAFE) & (start < _SAFE) & (end < _SAFE) & (run.size < _SAFE)
    fine &= ~run.has_prev_offset | (run.prev_offset < _SAFE)
    # sequence-number and prev-block-hash
    before_seq = np.concatenate(([np.uint64(state.sequence_number)], seq[:-1]))
    fine &= seq == before_seq + np.uint64(1)
    before_hash = np.concatenate((np.frombuffer(bytes(state.head), np.uint8)[None, :], hashes[:-1]))
    fine &= run.has_prev & (run.prev_hash == before_hash).all(axis=1)
    # hash-algorithm: the block's own hash and both of its slice's
    fine &= hashes[:, 0] == code
    fine &= ~data | ((run.logical_hash[:, 0] == code) & (run.physical_hash[:, 0] == code))
    # system-time
    times = run.system_time_us
    first_time = (state.system_time - _EPOCH) // timedelta(microseconds=1)
    fine &= times >= np.concatenate(([first_time], times[:-1]))
    # offsets: prev_offset is the last offset (none before the first slice), a slice starts
    # right after it; the last offset before each block is the end of the last slice before it
    slice_before = np.maximum.accumulate(np.where(data, np.arange(m), -1))
    slice_before = np.concatenate(([-1], slice_before[:-1]))
    start_last = -1 if state.last_offset is None else state.last_offset
    last = np.where(slice_before >= 0, end[slice_before].astype(np.int64), start_last)
    none_yet = (slice_before < 0) & (state.last_offset is None)
    fine &= np.where(none_yet, ~run.has_prev_offset, run.has_prev_offset)
    fine &= (run.prev_offset.astype(np.int64) == last) | ~run.has_prev_offset
    fine &= ~data | ((start.astype(np.int64) == last + 1) & (end >= start))
    # schema-before-data
    if state.schema is None:
        fine &= ~data
    # watermark: once set (before the run or in it), carried and never decreasing
    has = run.has_watermark
    marks = np.where(has, run.watermark_us, np.iinfo(np.int64).min)
    if state.watermark is not None:
        carried = (state.watermark - _EPOCH) // timedelta(microseconds=1)
        set_before = np.ones(m, bool)
    else:
        carried = np.iinfo(np.int64).min
        set_before = np.concatenate(([False], np.logical_or.accumulate(has)[:-1]))
    highest = np.maximum.accumulate(np.concatenate(([carried], marks[:-1])))
    fine &= ~set_before | (has & (marks >= highest))
    # transaction-version: a block naming a transaction is left to the rule
    fine &= ~run.has_transaction
    return m if fine.all() else int(np.argmin(fine))
