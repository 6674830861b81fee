"""The rules of derivative datasets: the SetTransform and the runs (ExecuteTransform) it drives.

ODF pins every run to its inputs by block *and* offset, each run carrying on exactly where the
run before it stopped; these rules make a chain prove that continuity by itself. Whether the
pinned blocks exist in the inputs' chains, and whether re-running the query on them gives the
recorded output, needs the inputs: ``chain-verify --reproduce`` checks that
(:mod:`odf_chain.verify.reproduce`).
"""

from __future__ import annotations

from collections.abc import Mapping

from odf_chain.errors import FormatError, RuleViolation
from odf_chain.events import DatasetKind, ExecuteTransform, MetadataBlock, SetTransform
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import Multihash
from odf_chain.state import DatasetState


def transform_input_ids(event: SetTransform) -> list[DatasetId]:
    """The dataset ids a well-formed SetTransform reads, in its order."""
    return [DatasetId.from_did(i["dataset_ref"]) for i in event.inputs or ()]


def transform_problem(event: SetTransform) -> str | None:
    """What makes a SetTransform unusable, or None. ODF requires inputs named by dataset id once
    the block is accepted (a name can be reassigned; an id cannot)."""
    inputs = event.inputs or ()
    if not inputs:
        return "expected at least one input, found none"
    aliases: set[str] = set()
    ids: set[str] = set()
    for n, given in enumerate(inputs):
        ref, alias = given.get("dataset_ref"), given.get("alias")
        try:
            DatasetId.from_did(ref if isinstance(ref, str) else "")
        except (FormatError, ValueError):
            return f"expected input {n} to name a dataset id (did:odf:...), found {ref!r}"
        if not isinstance(alias, str) or not alias:
            return f"expected input {n} ({ref}) to have an alias, found {alias!r}"
        if alias in aliases:
            return f"expected unique aliases, found {alias!r} twice"
        if ref in ids:
            return f"expected each input once, found {ref} twice"
        aliases.add(alias)
        ids.add(ref)
    transform = event.transform
    if not isinstance(transform, Mapping) or transform.get("kind") != "TransformSql":
        return "expected a TransformSql transform"
    if not transform.get("engine"):
        return "expected the transform to name its engine"
    if not transform.get("query") and not transform.get("queries"):
        return "expected the transform to hold a query"
    return None


def check_transform(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    event = block.event
    if not isinstance(event, SetTransform):
        return
    if state.dataset_kind is not None and state.dataset_kind != DatasetKind.DERIVATIVE:
        raise RuleViolation(
            "dataset-kind",
            f"expected SetTransform only in a derivative dataset, found it in a "
            f"{state.dataset_kind.name.lower()} one",
        )
    problem = transform_problem(event)
    if problem is not None:
        raise RuleViolation("transform", problem)


def check_run_inputs(state: DatasetState, block: MetadataBlock, block_hash: Multihash) -> None:
    """An ExecuteTransform reads the inputs of the SetTransform in force, in its order, each
    from where the last run that read it stopped (``prev_*`` = that run's ``new_*``)."""
    event = block.event
    if not isinstance(event, ExecuteTransform):
        return
    if state.transform is None:
        raise RuleViolation(
            "transform-inputs", "expected a SetTransform before the first ExecuteTransform"
        )
    expected = transform_input_ids(state.transform)
    found = [i.dataset_id for i in event.query_inputs]
    if found != expected:
        raise RuleViolation(
            "transform-inputs",
            f"expected query inputs {[str(i) for i in expected]} (the SetTransform's, in its "
            f"order), found {[str(i) for i in found]}",
        )
    for given in event.query_inputs:
        last = state.last_pin(given.dataset_id)
        prev_block = None if last is None else last.new_block_hash
        prev_offset = None if last is None else last.new_offset
        where = f"input {given.dataset_id}"
        if given.new_block_hash is None:
            raise RuleViolation("transform-inputs", f"{where}: expected new_block_hash, found none")
        if given.prev_block_hash != prev_block:
            raise RuleViolation(
                "transform-inputs",
                f"{where}: expected prev_block_hash {prev_block} (where the last run stopped), "
                f"found {given.prev_block_hash}",
            )
        if given.prev_offset != prev_offset:
            raise RuleViolation(
                "transform-inputs",
                f"{where}: expected prev_offset {prev_offset} (where the last run stopped), "
                f"found {given.prev_offset}",
            )
        if given.prev_offset is not None and (
            given.new_offset is None or given.new_offset < given.prev_offset
        ):
            raise RuleViolation(
                "transform-inputs",
                f"{where}: expected new_offset >= prev_offset {given.prev_offset}, "
                f"found {given.new_offset}",
            )
        if given.new_block_hash == given.prev_block_hash and given.new_offset != given.prev_offset:
            raise RuleViolation(
                "transform-inputs",
                f"{where}: the same block read again cannot hold other offsets "
                f"(prev_offset {given.prev_offset}, new_offset {given.new_offset})",
            )
