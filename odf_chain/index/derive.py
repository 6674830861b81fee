"""What the index holds, derived from a whole walked chain without a second fold: the pointers
at any block (which block last set each value), the schema and lineage lists, the
sequence-number table. Verify compares the index with these (:mod:`.check`); a rebuild writes
them (:func:`odf_chain.index.read.rebuild`)."""

from __future__ import annotations

import numpy as np

from odf_chain.events import SetDataSchema
from odf_chain.index.records import KINDS, Pointer, Pointers
from odf_chain.state import carries_lineage
from odf_chain.walked import WalkedChain


class Positions:
    """The positions of the blocks of one kind: a few decoded ones (sorted) and, for the kinds
    plain blocks have, a mask by position (a byte a block, not a position array of eight)."""

    def __init__(self, decoded: list[int], mask: np.ndarray | None = None) -> None:
        self._decoded = np.array(decoded, np.int64)
        self._mask = mask

    def last(self, at: int) -> int | None:
        """The last position at or before ``at``, if any."""
        k = int(np.searchsorted(self._decoded, at, side="right"))
        best = int(self._decoded[k - 1]) if k else -1
        mask, width = self._mask, 256
        if mask is not None:
            stop = min(at + 1, len(mask))
            while stop > best + 1:  # widening windows back from ``at``, down to ``best``
                start = max(best + 1, stop - width)
                hits = np.flatnonzero(mask[start:stop])
                if len(hits):
                    best = start + int(hits[-1])
                    break
                stop, width = start, width * 4
        return None if best < 0 else best


def kind_positions(entries: WalkedChain) -> dict[str, Positions]:
    """For each of the index's kinds (:data:`records.KINDS`), where its blocks are: cheap
    type tests on the decoded blocks, and the columns for the plain ones (AddData blocks, with
    data when they add a slice, with a watermark when they set one)."""
    found: dict[str, list[int]] = {kind: [] for kind in KINDS}
    for i, entry in entries.decoded():
        for kind, test in KINDS.items():
            if test(entry.block.event):
                found[kind].append(i)
    sliced, marked = entries.plain_masks()
    masks = {"data": sliced, "watermark": marked}
    return {kind: Positions(found[kind], masks.get(kind)) for kind in KINDS}


def _latest(positions: dict[str, Positions], at: int) -> dict[str, int]:
    """For each kind, the last position at or before ``at`` that is of it."""
    out = {}
    for kind, where in positions.items():
        last = where.last(at)
        if last is not None:
            out[kind] = last
    return out


def pointers_of(entries: WalkedChain) -> Pointers:
    """The head's pointers: for each kind, the last block of that kind (by its sequence number),
    from cheap type tests only (a second fold would double verify's time)."""
    found = _latest(kind_positions(entries), len(entries) - 1)
    pointers = {k: Pointer(entries.sequence_number(i), entries.hash(i)) for k, i in found.items()}
    if len(entries) and "seed" not in found:
        pointers["seed"] = Pointer(0, entries.hash(0))
    return Pointers(**pointers)


def pointers_from(entries: WalkedChain, positions: dict[str, Positions], at: int) -> Pointers:
    """The pointers at block ``at``, by place (a damaged chain's numbers lie)."""
    found = _latest(positions, at)
    return Pointers(**{k: Pointer(i, entries.hash(i)) for k, i in found.items()})


def lists_of(entries: WalkedChain) -> tuple[list[Pointer], list[Pointer]]:
    """The schema list and the lineage list: every SetDataSchema, every block that is or
    carries field lineage, oldest first (neither kind is ever a plain block)."""
    decoded = [e for _, e in entries.decoded()]
    schemas = [
        Pointer(e.block.sequence_number, e.hash)
        for e in decoded
        if isinstance(e.block.event, SetDataSchema)
    ]
    lineage = [
        Pointer(e.block.sequence_number, e.hash) for e in decoded if carries_lineage(e.block.event)
    ]
    return schemas, lineage
