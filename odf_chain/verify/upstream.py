"""Step 4: follow the datasets that lineage events pin, the one check that reads other datasets.

The pinned block must be in the input's chain and the input fields in its schema there; an
input that cannot be opened is only a warning (a dataset may move), never proof of a lie.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odf_chain.chain import BlockEntry, advance
from odf_chain.errors import OdfChainError
from odf_chain.events import Seed
from odf_chain.replay import load_chain
from odf_chain.rules import lineage_input_problems
from odf_chain.state import EMPTY, lineage_of
from odf_chain.storage import open_storage
from odf_chain.verify.report import VerifyReport
from odf_chain.walked import WalkedChain

if TYPE_CHECKING:
    import pyarrow as pa


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


def check_lineage_inputs(chain: WalkedChain, report: VerifyReport) -> None:
    """Follow every pinned dataset input of every lineage event: an input that cannot be
    opened is a warning (it may have moved); a pinned block the input's chain does not have is
    a dangling reference, and input fields its schema there lacks are wrong: both errors."""
    upstream = _Upstream()
    for _, entry in chain.decoded():  # a lineage event is never a plain block
        event = lineage_of(entry.block.event)
        if event is None:
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
