"""``chain-verify --reproduce``: re-run every derive run of a derivative dataset on exactly the
input rows it pinned, and compare the answer with what the dataset holds at that run's block.

For each ExecuteTransform, oldest first: the SetTransform in force gives the query and the
inputs; the run's record (:class:`odf_chain.derived.RunRecord`) where they were read and the
session settings the answer depends on. Each input is opened there, must carry the pinned
dataset id, hold the pinned block in its chain (a walk from its head) and end at the pinned
offset at that block; its slices are checked against their hashes as they are read. The
re-run's answer and the dataset's rows as of the block (the changelog folded) are compared as
multisets by their order-independent digests, so Spark's partitioning, shuffle parallelism and
adaptive execution cannot make equal answers look different.

Verdicts: ``reproduced``; ``not reproducible`` when the run recorded why a re-run may differ
(rand(), clocks, UDFs, ... found in its plan when it ran) or was made by another tool (a
warning); ``mismatch`` (an error naming the block, the run's slice and its offsets). Floating
point sums depend on the order of addition: answers that differ only in float values within a
relative 1e-9 are reproduced, and the verdict says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from odf_chain import changelog, derived, row_digest, slice_reader
from odf_chain.chain import BlockEntry
from odf_chain.dataset import Dataset
from odf_chain.errors import OdfChainError
from odf_chain.events import DatasetKind, ExecuteTransform, SetDataSchema, SetTransform, SetVocab
from odf_chain.spark import transform_run
from odf_chain.state import Vocabulary
from odf_chain.verify.report import RunVerdict, VerifyReport

FLOAT_TOLERANCE = 1e-9
_MAX_COMPARED_ROWS = 100_000


@dataclass
class _Folded:
    """The dataset's live rows as the runs go by (each slice read once, checked by hash)."""

    ledger: pa.Table | None = None
    schemas: list[pa.Schema] = field(default_factory=list)

    def add(self, table: pa.Table, vocab: Vocabulary) -> None:
        self.ledger = derived.fold_onto(self.ledger, table, vocab)


def reproduce(
    dataset: Dataset,
    report: VerifyReport,
    *,
    spark=None,
    recursive: bool = False,
    inputs: Mapping[str, str] | None = None,
    _seen=None,
) -> None:
    """Re-run every derive run of ``dataset`` and add a verdict per run (and problems) to
    ``report``; with ``recursive``, derivative inputs are reproduced first, once each. Spark:
    ``spark``, or the active session. ``inputs`` (alias -> location) opens an input elsewhere
    than where the runs read it (a copy, another machine); its dataset id is checked as
    always. (The ``spark`` engine of :mod:`odf_chain.engines`.)"""
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise OdfChainError("reproducing a Spark transform needs a SparkSession (none active)")
    seen: set[str] = set() if _seen is None else _seen
    seen.add(str(dataset.refresh().dataset_id))
    report.reproduce = True
    transform: SetTransform | None = None
    schema: pa.Schema | None = None
    vocab = Vocabulary()
    folded = _Folded()
    for entry in dataset.blocks():
        event = entry.block.event
        if isinstance(event, SetTransform):
            transform = event
        elif isinstance(event, SetDataSchema):
            schema = event.arrow_schema
        elif isinstance(event, SetVocab):
            vocab = Vocabulary.from_event(event)
        if not isinstance(event, ExecuteTransform):
            continue
        if event.new_data is not None:
            assert schema is not None  # rule schema-before-data
            (piece,) = slice_reader.named_slices(dataset.storage, [(entry, event.new_data)])
            try:
                rows = slice_reader.read_table(dataset.storage, [piece], schema, check="hash")
                folded.add(rows, vocab)
            except OdfChainError as exc:  # a damaged slice, or a retraction of nothing
                detail = f"the dataset's rows at this block cannot be read back: {exc}"
                _mismatch(report, dataset, entry, detail, _where(entry))
                return  # what later runs hold depends on this one: nothing to compare them to
        if transform is None:  # rule transform-inputs: the fold reports it
            continue
        _reproduce_run(
            dataset, entry, transform, schema, folded, report, spark, recursive, seen, inputs or {}
        )


def _verdict(report: VerifyReport, dataset: Dataset, entry: BlockEntry, verdict: str, detail: str):
    report.runs.append(
        RunVerdict(entry.block.sequence_number, str(entry.hash), verdict, detail, dataset.location)
    )


def _where(entry: BlockEntry) -> dict:
    event = entry.block.event
    where = {"sequence_number": entry.block.sequence_number, "block_hash": str(entry.hash)}
    if event.new_data is not None:
        where["path"] = f"data/{event.new_data.physical_hash}"
    return where


def _reproduce_run(
    dataset: Dataset,
    entry: BlockEntry,
    transform: SetTransform,
    schema: pa.Schema | None,
    folded: _Folded,
    report: VerifyReport,
    spark,
    recursive: bool,
    seen: set[str],
    moved: Mapping[str, str],
) -> None:
    event: ExecuteTransform = entry.block.event  # type: ignore[assignment]
    where = _where(entry)
    record = derived.RunRecord.of(event)
    if record is None:
        detail = "no run record: not made by odf-chain derive"
        report.add("warning", "not-reproducible", detail, **where)
        _verdict(report, dataset, entry, "not reproducible", detail)
        return
    if record.nondeterministic:
        detail = "the query uses " + "; ".join(record.nondeterministic)
        report.add("warning", "not-reproducible", detail, **where)
        _verdict(report, dataset, entry, "not reproducible", detail)
        return
    if record.engine_version != spark.version:
        report.add(
            "warning",
            "engine-version",
            f"run with Spark {record.engine_version}, re-run with Spark {spark.version}",
            **where,
        )
    try:
        pinned = _pinned_inputs(event, transform, record, report, spark, recursive, seen, moved)
    except OdfChainError as exc:
        report.add("error", "reproduce-input", str(exc), **where)
        _verdict(report, dataset, entry, "mismatch", f"inputs: {exc}")
        return
    session = transform_run.isolated_session(spark, record.conf)
    df = transform_run.run_queries(session, pinned, derived.transform_queries(transform))
    answer = transform_run.answer_table(df)
    if schema is not None:
        try:
            answer = derived.comparable(answer, schema)
        except OdfChainError as exc:  # the query's answer is not of the stored types
            _mismatch(report, dataset, entry, f"the answer does not fit the dataset: {exc}", where)
            return
    held = folded.ledger
    columns = list(answer.column_names)
    if held is None:
        held = answer.schema.empty_table()
    missing = [c for c in columns if c not in held.column_names]
    if missing:
        _mismatch(report, dataset, entry, f"the dataset has no column(s) {missing}", where)
        return
    held = held.select(columns)
    held = held if held.schema.equals(answer.schema) else held.cast(answer.schema)
    ours = derived.answer_digest(answer, columns)
    theirs = derived.answer_digest(held, columns)
    if ours == theirs:
        if record.answer_digest != ours:
            report.add(
                "warning",
                "reproduce-record",
                f"the run recorded answer digest {record.answer_digest}, the rows give {ours}",
                **where,
            )
        _verdict(report, dataset, entry, "reproduced", f"{answer.num_rows} row(s), digest {ours}")
        return
    gone, new = changelog.diff(held, answer, columns)
    if _within_rounding(held.take(gone), answer.take(new), columns):
        _verdict(
            report,
            dataset,
            entry,
            "reproduced",
            f"{answer.num_rows} row(s); {len(new)} differ only by floating-point rounding "
            f"(relative {FLOAT_TOLERANCE:g})",
        )
        return
    interval = event.new_data.offset_interval if event.new_data is not None else None
    offsets = (
        "" if interval is None else f", its slice holds offsets [{interval.start}, {interval.end}]"
    )
    _mismatch(
        report,
        dataset,
        entry,
        f"re-running the query gives {answer.num_rows} row(s), the dataset holds {held.num_rows} "
        f"at this block: {len(new)} row(s) of the re-run are not in the dataset, {len(gone)} of "
        f"the dataset are not in the re-run{offsets}",
        where,
    )


def _mismatch(report, dataset, entry, detail: str, where: dict) -> None:
    report.add("error", "reproduce-mismatch", detail, **where)
    _verdict(report, dataset, entry, "mismatch", detail)


def _pinned_inputs(
    event: ExecuteTransform,
    transform: SetTransform,
    record: derived.RunRecord,
    report: VerifyReport,
    spark,
    recursive: bool,
    seen: set[str],
    moved: Mapping[str, str],
) -> list[transform_run.PinnedInput]:
    pinned = []
    for (alias, dataset_id), pin in zip(
        derived.transform_inputs(transform), event.query_inputs, strict=True
    ):
        location = moved.get(alias, record.input_uris.get(alias))
        if location is None:
            raise OdfChainError(f"input {alias}: the run did not record where it was read")
        try:
            dataset = Dataset.open(location)
        except OdfChainError as exc:
            raise OdfChainError(f"input {alias} cannot be opened at {location}: {exc}") from None
        found = dataset.state.dataset_id
        if found != dataset_id:
            raise OdfChainError(
                f"input {alias} at {location} is dataset {found}, the transform reads {dataset_id}"
            )
        assert pin.new_block_hash is not None  # rule transform-inputs
        try:
            given = transform_run.pin(alias, dataset, pin.new_block_hash)
        except OdfChainError as exc:
            raise OdfChainError(
                f"input {alias}: pinned block {pin.new_block_hash} is not in its chain ({exc})"
            ) from None
        if given.state.last_offset != pin.new_offset:
            raise OdfChainError(
                f"input {alias}: at block {pin.new_block_hash} its last offset is "
                f"{given.state.last_offset}, the run pinned {pin.new_offset}"
            )
        if (
            recursive
            and given.state.dataset_kind == DatasetKind.DERIVATIVE
            and str(found) not in seen
        ):
            reproduce(dataset, report, spark=spark, recursive=True, _seen=seen)
        pinned.append(given)
    return pinned


def _within_rounding(held: pa.Table, answer: pa.Table, columns: Sequence[str]) -> bool:
    """Whether the rows that differ pair up one to one, equal in every column but floating
    point ones, and those within a relative :data:`FLOAT_TOLERANCE`."""
    if held.num_rows != answer.num_rows or not held.num_rows:
        return False
    if held.num_rows > _MAX_COMPARED_ROWS:
        return False
    floats = [c for c in columns if pa.types.is_floating(answer.schema.field(c).type)]
    if not floats:
        return False
    exact = [c for c in columns if c not in floats]
    keys_a = row_digest.row_keys(held, exact) if exact else None
    keys_b = row_digest.row_keys(answer, exact) if exact else None
    order_a = _order(keys_a, held, floats)
    order_b = _order(keys_b, answer, floats)
    if keys_a is not None and any(
        bytes(keys_a[i]) != bytes(keys_b[j]) for i, j in zip(order_a, order_b, strict=True)
    ):
        return False
    a_rows = held.select(floats).to_pylist()
    b_rows = answer.select(floats).to_pylist()
    for i, j in zip(order_a, order_b, strict=True):
        for name in floats:
            x, y = a_rows[i][name], b_rows[j][name]
            if x is None or y is None:
                if x is not y:
                    return False
            elif not math.isclose(x, y, rel_tol=FLOAT_TOLERANCE, abs_tol=0.0) and not (
                math.isnan(x) and math.isnan(y)
            ):
                return False
    return True


def _order(keys, table: pa.Table, floats: Sequence[str]) -> list[int]:
    """Rows sorted by their exact columns' keys, then their float values (pairs equal rows)."""
    values = table.select(list(floats)).to_pylist()

    def sort_key(i: int):
        prefix = b"" if keys is None else bytes(keys[i])
        return (prefix, tuple((v is None, v if v is not None else 0.0) for v in values[i].values()))

    return sorted(range(table.num_rows), key=sort_key)
