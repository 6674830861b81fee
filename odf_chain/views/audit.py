"""The audit report as a value: what ``odf-chain audit`` shows an auditor, built from library
calls only (verify, the chain, the schema history, the lineage replay, the receipts check).

A model apart from its HTML (:mod:`odf_chain.views.audit_html`) so that what the page claims
can be tested without parsing markup, and so another rendering (JSON, PDF) needs no new
reading of the dataset. Every part is bounded whatever the chain's length: the timeline keeps
its first and last blocks and counts the rest, the lineage picture caps fields per dataset.

The verdict is verify's, over the whole chain; ``at`` chooses the block the other sections
describe. When the chain is too damaged for a section (verify says why), the section is left
empty and a note says what could not be read: a broken dataset still gets a report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from odf_chain.chain import BlockEntry
from odf_chain.dataset import Dataset
from odf_chain.errors import OdfChainError
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    ExecuteTransform,
    Seed,
    SetDataSchema,
    SetTransform,
)
from odf_chain.receipt import Receipt, format_time, load_receipts
from odf_chain.replay import SchemaChange
from odf_chain.state import carries_lineage, lineage_of, transaction_of
from odf_chain.verify import VerifyReport
from odf_chain.verify.report import Problem, RunVerdict
from odf_chain.views.audit_graph import LineageGraph, lineage_graph
from odf_chain.views.blocks import summarize_event, to_jsonable
from odf_chain.views.lineage import LineageView

TIMELINE_ENDS = 25
"""Blocks the timeline shows at each end of a longer chain (the middle is counted)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    checks: tuple[str, ...]  # what was checked: "blocks and rules", "data files", ...
    blocks_checked: int
    slices_checked: int
    rows_checked: int
    bytes_hashed: int
    head: str | None
    problems: tuple[Problem, ...]  # errors first, in the order verify found them
    runs: tuple[RunVerdict, ...]  # with reproduction: one per derive run

    @property
    def errors(self) -> int:
        return sum(p.severity == "error" for p in self.problems)

    @property
    def warnings(self) -> int:
        return sum(p.severity == "warning" for p in self.problems)


@dataclass(frozen=True, slots=True)
class BlockRow:
    sequence_number: int
    block_hash: str
    system_time: str
    event: str  # the ODF event name
    kinds: tuple[str, ...]  # seed, schema, write, lineage, transaction, derive, transform, ...
    summary: str
    rows: int | None  # records of the slice it added
    size: int | None  # bytes of that slice
    detail: str = ""  # the transaction pair the block records, if any


@dataclass(frozen=True, slots=True)
class Timeline:
    first: tuple[BlockRow, ...]
    last: tuple[BlockRow, ...]  # empty when nothing was elided (``first`` is everything)
    elided: int  # blocks between ``first`` and ``last``
    elided_kinds: tuple[tuple[str, int], ...]  # what those blocks were, counted
    elided_rows: int
    elided_bytes: int
    blocks: int
    rows: int
    bytes: int
    kinds: tuple[tuple[str, int], ...]  # every block's kinds, counted


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    sequence_number: int
    block_hash: str
    system_time: str
    fields: tuple[tuple[str, str, bool], ...]  # name, type, nullable (top-level)
    initial: bool
    added: tuple[str, ...]  # v2 paths
    removed: tuple[str, ...]
    changed: tuple[tuple[str, str, str], ...]  # path, before, after (type or nullability)


@dataclass(frozen=True, slots=True)
class Upstream:
    """A dataset or source the chain read: pinned at a block when it is a dataset."""

    name: str  # the alias its runs read it under
    dataset_id: str | None
    block_hash: str | None  # the pinned block
    uri: str | None
    content_hash: str | None
    used_by: tuple[str, ...]  # "block 3 (job/run)"


@dataclass(frozen=True, slots=True)
class ReceiptRow:
    source: str
    dataset_id: str
    sequence_number: int
    block_hash: str
    system_time: str
    signed: bool | None  # None: unsigned; else whether the signature checks out
    held: bool
    messages: tuple[str, ...]  # verify's findings about this receipt


@dataclass(frozen=True, slots=True)
class AuditReport:
    location: str
    dataset_id: str | None
    kind: str | None  # root or derivative
    at_sequence_number: int | None
    at_hash: str | None
    generated_at: str
    verdict: Verdict
    timeline: Timeline | None
    schemas: tuple[SchemaVersion, ...]
    lineage: LineageGraph | None
    upstream: tuple[Upstream, ...]
    receipts: tuple[ReceiptRow, ...]
    notes: tuple[str, ...]  # sections that could not be built, and why


def build_audit(
    dataset: Dataset,
    *,
    at: str = "head",
    receipts: Iterable[Receipt | str | Path] = (),
    deep: bool = False,
    reproduce: bool = False,
    spark=None,
    inputs: dict[str, str] | None = None,
    ends: int = TIMELINE_ENDS,
    now: datetime | None = None,
) -> AuditReport:
    """Verify ``dataset`` (with ``receipts``, ``deep`` and ``reproduce`` as
    :meth:`Dataset.verify` takes them) and describe it as of block ``at``.

    A receipt file that cannot be read raises (bad input, as for verify); a ref that names no
    block raises unless verify already found the chain broken (then the report says so)."""
    held = load_receipts(receipts)
    report = dataset.verify(
        receipts=held, deep=deep, reproduce=reproduce, spark=spark, inputs=inputs
    )
    notes: list[str] = []
    verdict = _verdict(report, bool(held))
    try:
        state = dataset.state_at(at)
    except OdfChainError as exc:
        if report.ok:
            raise
        notes.append(f"the chain could not be read at {at}: {exc}")
        state = None
    timeline, schemas, graph, upstream, kind = None, (), None, (), None
    if state is not None and state.head is not None:
        limit = state.sequence_number
        try:
            entries = [e for e in dataset.blocks() if e.block.sequence_number <= limit]
            timeline = _timeline(entries, ends)
            seed = entries[0].block.event if entries else None
            kind = seed.dataset_kind.name.lower() if isinstance(seed, Seed) else None
            upstream = _upstream(entries)
        except OdfChainError as exc:
            notes.append(f"blocks not shown: {exc}")
        try:
            schemas = tuple(
                _schema_version(c)
                for c in dataset.schema_history()
                if c.entry.block.sequence_number <= limit
            )
        except OdfChainError as exc:
            notes.append(f"schema history not shown: {exc}")
        try:
            view = LineageView.build(
                dataset.lineage(state.head), dataset.location, limit, str(state.head)
            )
            graph = lineage_graph(view)
            notes.extend(
                f"lineage of {u.uri or u.dataset_id} not followed: {u.reason}"
                for u in view.replay.unreachable
            )
        except OdfChainError as exc:
            notes.append(f"lineage not shown: {exc}")
    return AuditReport(
        location=dataset.location,
        dataset_id=None if state is None else to_jsonable(state.dataset_id),
        kind=kind,
        at_sequence_number=None if state is None else state.sequence_number,
        at_hash=None if state is None or state.head is None else str(state.head),
        generated_at=f"{(now or datetime.now(UTC)).astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}",
        verdict=verdict,
        timeline=timeline,
        schemas=schemas,
        lineage=graph,
        upstream=upstream,
        receipts=tuple(_receipt_row(r, report) for r in held),
        notes=tuple(notes),
    )


def _verdict(report: VerifyReport, receipts: bool) -> Verdict:
    checks = ["blocks and rules", "head log"]
    if report.slices_checked or report.bytes_hashed:
        checks.append("data files")
    if report.deep:
        checks.append("every row (--deep)")
    if receipts:
        checks.append("receipts")
    if report.reproduce:
        checks.append("reproduction of derive runs")
    ordered = sorted(report.problems, key=lambda p: p.severity != "error")
    return Verdict(
        ok=report.ok,
        checks=tuple(checks),
        blocks_checked=report.blocks_checked,
        slices_checked=report.slices_checked,
        rows_checked=report.rows_checked,
        bytes_hashed=report.bytes_hashed,
        head=report.head,
        problems=tuple(ordered),
        runs=tuple(report.runs),
    )


@dataclass(frozen=True, slots=True)
class _Facts:
    """What the timeline counts of every block, shown or not (cheap: no summary)."""

    kinds: tuple[str, ...]
    rows: int | None
    size: int | None
    detail: str


def _facts(event: object) -> _Facts:
    kinds: list[str] = []
    rows = size = None
    match event:
        case Seed():
            kinds.append("seed")
        case SetDataSchema():
            kinds.append("schema")
        case SetTransform():
            kinds.append("transform")
        case AddFieldLineage():
            kinds.append("lineage")
        case AddData() | ExecuteTransform():
            kinds.append("derive" if isinstance(event, ExecuteTransform) else "write")
            if event.new_data is not None:
                rows, size = event.new_data.num_records, event.new_data.size
    if carries_lineage(event) and "lineage" not in kinds:
        kinds.append("lineage")  # the summary names its run
    detail = ""
    pair = transaction_of(event)
    if pair is not None:
        kinds.append("transaction")
        if isinstance(pair, dict):
            detail = f"transaction {pair.get('app_id')} v{pair.get('version')}"
        else:  # malformed: the rule transaction-version says so; shown as it is
            detail = f"transaction {pair!r}"
    return _Facts(tuple(kinds) or ("metadata",), rows, size, detail)


def _block_row(entry: BlockEntry, facts: _Facts) -> BlockRow:
    return BlockRow(
        entry.block.sequence_number,
        str(entry.hash),
        format_time(entry.block.system_time),
        entry.block.event_name,
        facts.kinds,
        summarize_event(entry.block.event),
        facts.rows,
        facts.size,
        facts.detail,
    )


def _timeline(entries: Sequence[BlockEntry], ends: int) -> Timeline:
    """The first and last ``ends`` blocks as rows, the ones between only counted: the page
    stays the same size for a chain of ten blocks or of a million (and only the rows shown
    are summarised)."""
    facts = [_facts(e.block.event) for e in entries]
    total = len(entries)
    cut = total > 2 * ends
    head = range(ends) if cut else range(total)
    tail = range(total - ends, total) if cut else range(0)
    middle = facts[ends : total - ends] if cut else []

    def kinds(selected: Iterable[_Facts]) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(Counter(k for f in selected for k in f.kinds).items()))

    return Timeline(
        first=tuple(_block_row(entries[i], facts[i]) for i in head),
        last=tuple(_block_row(entries[i], facts[i]) for i in tail),
        elided=len(middle),
        elided_kinds=kinds(middle),
        elided_rows=sum(f.rows or 0 for f in middle),
        elided_bytes=sum(f.size or 0 for f in middle),
        blocks=total,
        rows=sum(f.rows or 0 for f in facts),
        bytes=sum(f.size or 0 for f in facts),
        kinds=kinds(facts),
    )


def _schema_version(change: SchemaChange) -> SchemaVersion:
    block, diff = change.entry.block, change.diff
    changed: list[tuple[str, str, str]] = []
    if diff is not None:
        changed += diff.retyped
        changed += [
            (p, "nullable" if a else "required", "nullable" if b else "required")
            for p, a, b in diff.nullability
        ]
    return SchemaVersion(
        block.sequence_number,
        str(change.entry.hash),
        format_time(block.system_time),
        tuple((f.name, str(f.type), f.nullable) for f in change.schema),
        diff is None,
        tuple(diff.added) if diff is not None else (),
        tuple(diff.removed) if diff is not None else (),
        tuple(changed),
    )


def _upstream(entries: Sequence[BlockEntry]) -> tuple[Upstream, ...]:
    """Every input a lineage run or a derive run read, once per pin: the dataset id and the
    block it was read at (or an external source's URI and content hash)."""
    found: dict[tuple, tuple[dict, list[str]]] = {}
    aliases: dict[str, str] = {}  # dataset id -> the alias SetTransform gave it

    def add(key: tuple, fields: dict, use: str) -> None:
        found.setdefault(key, (fields, []))[1].append(use)

    for entry in entries:
        event, seq = entry.block.event, entry.block.sequence_number
        if isinstance(event, SetTransform):
            for item in event.inputs or ():
                aliases[str(item.get("dataset_ref"))] = str(item.get("alias"))
        carried = lineage_of(event)
        if carried is not None:
            use = f"block {seq} ({carried.run.job_name}/{carried.run.run_id})"
            for pin in carried.inputs:
                fields = {
                    "name": pin.name,
                    "dataset_id": to_jsonable(pin.dataset_id),
                    "block_hash": to_jsonable(pin.block_hash),
                    "uri": pin.uri,
                    "content_hash": to_jsonable(pin.content_hash),
                }
                add((fields["dataset_id"] or fields["uri"], fields["block_hash"]), fields, use)
        if isinstance(event, ExecuteTransform):
            for read in event.query_inputs:
                if read.dataset_id is None or read.new_block_hash is None:
                    continue
                did, pinned = read.dataset_id.to_did(), str(read.new_block_hash)
                fields = {
                    "name": aliases.get(did, ""),
                    "dataset_id": did,
                    "block_hash": pinned,
                    "uri": None,
                    "content_hash": None,
                }
                add((did, pinned), fields, f"block {seq} (derive)")
    return tuple(
        Upstream(**fields, used_by=tuple(dict.fromkeys(uses))) for fields, uses in found.values()
    )


def _receipt_row(receipt: Receipt, report: VerifyReport) -> ReceiptRow:
    """One receipt and what verify found about it (its findings start with its label)."""
    prefix = f"{receipt.label()}:"
    messages = tuple(
        p.message for p in report.problems if p.rule == "receipt" and p.message.startswith(prefix)
    )
    return ReceiptRow(
        receipt.source or receipt.label(),
        receipt.dataset_id.to_did(),
        receipt.sequence_number,
        str(receipt.block_hash),
        format_time(receipt.system_time),
        receipt.signature_valid,
        not messages,
        messages,
    )
