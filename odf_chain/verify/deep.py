"""``verify --deep``: read every row of a slice whose file hashes right.

The logical hash is recomputed as the writers compute it, and the system columns are checked
against the block. Rows are read in batches, never a whole file at once, so a slice of any size
is checked in bounded memory.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from odf_chain.chain import BlockEntry
from odf_chain.derived import RunRecord, slice_digest_columns
from odf_chain.errors import SchemaError
from odf_chain.events import DataSlice, ExecuteTransform
from odf_chain.row_digest import MultisetDigest, digest_text
from odf_chain.slices import LogicalHasher, read_batches
from odf_chain.state import DatasetState
from odf_chain.verify.report import VerifyReport

# ODF's operation types (the ``op`` column): append, retract, correct-from, correct-to.
OPERATION_CODES = {0: "append", 1: "retract", 2: "correct-from", 3: "correct-to"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _first(mask: np.ndarray) -> int | None:
    found = np.flatnonzero(mask)
    return int(found[0]) if found.size else None


def _integers(column: pa.Array, name: str, first_row: int) -> tuple[np.ndarray | None, str]:
    """The column's values as integers, or (None, what is wrong with its first bad row)."""
    if not pa.types.is_integer(column.type):
        return None, f"column {name!r} has type {column.type}, expected an integer type"
    if column.null_count:
        row = first_row + pc.index(pc.is_null(column), True).as_py()
        return None, f"column {name!r}: row {row} is null"
    return column.to_numpy(), ""


class _Offsets:
    """Row i of the slice holds offset start + i: the block's interval, in order, no gaps."""

    rule = "data-offsets"

    def __init__(self, name: str, start: int, end: int) -> None:
        self.name, self.start, self.end = name, start, end

    def check(self, column: pa.Array, first_row: int) -> str | None:
        values, problem = _integers(column, self.name, first_row)
        if values is None:
            return problem
        expected = np.arange(self.start + first_row, self.start + first_row + len(values))
        bad = _first(values != expected)
        if bad is None:
            return None
        return (
            f"column {self.name!r}: row {first_row + bad} holds offset {values[bad]}, expected "
            f"{expected[bad]} (the block's offsets {self.start}..{self.end}, in order)"
        )


class _Operations:
    """Every row's operation type is one of ODF's codes."""

    rule = "data-op"

    def __init__(self, name: str) -> None:
        self.name = name

    def check(self, column: pa.Array, first_row: int) -> str | None:
        values, problem = _integers(column, self.name, first_row)
        if values is None:
            return problem
        bad = _first(~np.isin(values, list(OPERATION_CODES)))
        if bad is None:
            return None
        codes = ", ".join(f"{code} {name}" for code, name in OPERATION_CODES.items())
        return (
            f"column {self.name!r}: row {first_row + bad} holds operation type {values[bad]}; "
            f"ODF's are {codes}"
        )


class _SystemTime:
    """Every row carries the system time of the block that added it."""

    rule = "data-system-time"

    def __init__(self, name: str, system_time: datetime) -> None:
        self.name, self.system_time = name, system_time
        self._micros = (system_time - _EPOCH) // timedelta(microseconds=1)

    def check(self, column: pa.Array, first_row: int) -> str | None:
        expected_text = f"the block's system time {self.system_time.isoformat()}"
        if not pa.types.is_timestamp(column.type):
            return f"column {self.name!r} has type {column.type}, expected a timestamp"
        if column.null_count:
            row = first_row + pc.index(pc.is_null(column), True).as_py()
            return f"column {self.name!r}: row {row} is null, expected {expected_text}"
        scale = _PER_SECOND[column.type.unit]
        expected, rest = divmod(self._micros * scale, 1_000_000)
        if rest:
            return (
                f"column {self.name!r} (unit {column.type.unit}) cannot hold {expected_text} "
                "exactly"
            )
        values = column.cast(pa.int64()).to_numpy()
        bad = _first(values != expected)
        if bad is None:
            return None
        try:
            value = column[bad].as_py()
            shown = value.isoformat() if isinstance(value, datetime) else value
        except (OverflowError, ValueError):  # beyond what a datetime can hold: the raw count
            shown = f"{values[bad]} {column.type.unit} since the epoch"
        return (
            f"column {self.name!r}: row {first_row + bad} holds {shown}, expected {expected_text}"
        )


def check_rows(
    parquet: pq.ParquetFile,
    entry: BlockEntry,
    state: DatasetState,
    report: VerifyReport,
    where: dict,
) -> None:
    """Read every row of a slice whose file hashes right: recompute its logical hash (as the
    writers compute it, :class:`~odf_chain.slices.LogicalHasher`) and check the system columns
    against the block: offsets exactly the block's interval in order, ODF operation codes,
    and the block's system time on every row. Each column reports its first bad row only.

    Event times are not checked: ODF's watermark promises that no *earlier* event is still to
    come, not that every event of a slice is at or before it (a watermark may lag by an
    allowed lateness).
    """
    event = entry.block.event
    data: DataSlice = event.new_data  # type: ignore[union-attr]
    interval = data.offset_interval
    vocab = state.vocab
    checks = [
        _Offsets(vocab.offset_column, interval.start, interval.end),
        _Operations(vocab.operation_type_column),
        _SystemTime(vocab.system_time_column, entry.block.system_time),
    ]
    names = parquet.schema_arrow.names
    for check in list(checks):
        if names.count(check.name) != 1:
            found = "no" if check.name not in names else "more than one"
            report.add("error", check.rule, f"the file has {found} {check.name!r} column", **where)
            checks.remove(check)
    row = 0
    run_digest = _run_digest(parquet.schema_arrow, event, vocab, report, where)
    try:
        hasher = LogicalHasher(parquet.schema_arrow, data.logical_hash.algorithm)
        for batch in read_batches(parquet):
            hasher.update(batch)
            if run_digest is not None:
                run_digest[0].update(batch)
            for check in list(checks):
                problem = check.check(batch.column(check.name), row)
                if problem is not None:
                    report.add("error", check.rule, problem, **where)
                    checks.remove(check)
            row += batch.num_rows
            report.rows_checked += batch.num_rows
        actual = hasher.multihash()
    except (pa.ArrowException, OSError) as exc:
        report.add("error", "data-format", f"cannot read the rows after row {row}: {exc}", **where)
        return
    if actual != data.logical_hash:
        report.add(
            "error",
            "data-logical-hash",
            f"the rows hash to {actual}, the block records {data.logical_hash}",
            **where,
        )
    if run_digest is not None:
        digest, recorded = run_digest
        found = digest_text(digest.digest())
        if found != recorded:
            report.add(
                "error",
                "data-digest",
                f"the rows digest to {found}, the run recorded {recorded}",
                **where,
            )


def _run_digest(
    schema: pa.Schema, event, vocab, report: VerifyReport, where
) -> tuple[MultisetDigest, str] | None:
    """For a derive run's slice, the order-independent digest its block records
    (:mod:`odf_chain.derived`: the rows as a multiset, whatever order they were written in),
    to be fed the rows as :func:`check_rows` reads them, and what the run recorded."""
    record = RunRecord.of(event) if isinstance(event, ExecuteTransform) else None
    if record is None or record.slice_digest is None:
        return None
    try:
        return MultisetDigest(schema, slice_digest_columns(schema, vocab)), record.slice_digest
    except SchemaError as exc:
        report.add("error", "data-digest", f"the rows cannot be digested: {exc}", **where)
        return None
