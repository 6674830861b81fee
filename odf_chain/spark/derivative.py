"""Derivative datasets written by Spark: a SQL query over odf_chain datasets, run again as its
inputs grow, each run pinned to the exact input blocks and offsets it read.

A run (see :mod:`odf_chain.derived` for the semantics) reads every input as of its head (each
slice checked against its hash), runs the query in a session of its own, and appends, in one
transaction: a SetTransform when the query, the inputs or the Spark version changed, a
SetDataSchema when the answer's schema did, and one ExecuteTransform whose ``query_inputs`` pin
each input's block and offset interval and whose slice holds the changelog from the answer in
force to the new one.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from odf_chain import chain, derived, slice_writer
from odf_chain.chain import BlockEntry, PreparedBlock
from odf_chain.dataset import Dataset
from odf_chain.emit.live_run import LiveRun, live_run
from odf_chain.errors import NotFoundError, OdfChainError, StorageError, UnsyncedCommitError
from odf_chain.events import (
    AddFieldLineage,
    DatasetKind,
    DataSlice,
    ExecuteTransform,
    ExecuteTransformInput,
    LineageRun,
    OffsetInterval,
)
from odf_chain.format.lineage_json import lineage_to_json
from odf_chain.format.multihash import BLAKE3
from odf_chain.replay import settle_lineage
from odf_chain.schema.widening import adopt_schema, refuse_narrowing
from odf_chain.slices import os_reason
from odf_chain.spark import transform_run
from odf_chain.state import LINEAGE_KEY
from odf_chain.transaction import POST_COMMIT_HOOKS, Transaction

_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class DeriveResult:
    """What one :func:`derive` did."""

    output: str
    blocks: list[BlockEntry] = field(default_factory=list)
    answer_rows: int = 0
    appended: int = 0
    retracted: int = 0
    nondeterministic: tuple[str, ...] = ()
    message: str = ""

    @property
    def reproducible(self) -> bool:
        return not self.nondeterministic


def _where(dataset: Dataset) -> str:
    """Where a dataset was read, as a verifier elsewhere can open it: an absolute path, or the
    URI of a dataset on an object store."""
    path = dataset.path
    return str(path.absolute()) if isinstance(path, Path) else path


def _open_output(output: str | Path | Dataset, *, create: bool, hash: str):
    if isinstance(output, Dataset):
        return output, None
    try:
        return Dataset.open(output), None
    except NotFoundError:
        if not create:
            raise NotFoundError(
                f"{output} is not a dataset (give --create / create=True to make it)"
            ) from None
    return Dataset.lay_out(output, hash=hash, kind=DatasetKind.DERIVATIVE)


def _inputs(inputs: Mapping[str, str | Path | Dataset]) -> list[tuple[str, Dataset]]:
    if not inputs:
        raise OdfChainError("a derived dataset needs at least one input (alias=dataset)")
    opened = []
    for alias, given in inputs.items():
        if not _ALIAS.fullmatch(alias):
            raise OdfChainError(
                f"input alias {alias!r} is not a SQL identifier (letters, digits, underscores)"
            )
        opened.append((alias, given if isinstance(given, Dataset) else Dataset.open(given)))
    return opened


def _pins(state, pinned: list[transform_run.PinnedInput]) -> tuple[ExecuteTransformInput, ...]:
    """Each input's interval: from where the last run that read it stopped to its pinned block."""
    pins = []
    for given in pinned:
        last = state.last_pin(given.state.dataset_id)
        pins.append(
            ExecuteTransformInput(
                dataset_id=given.state.dataset_id,
                prev_block_hash=None if last is None else last.new_block_hash,
                new_block_hash=given.block_hash,
                prev_offset=None if last is None else last.new_offset,
                new_offset=given.state.last_offset,
            )
        )
    return tuple(pins)


def derive(
    sql: str,
    inputs: Mapping[str, str | Path | Dataset],
    output: str | Path | Dataset,
    *,
    create: bool = False,
    spark=None,
    hash: str = BLAKE3,
    job_name: str = "odf-chain derive",
    progress: Callable[[str], None] | None = None,
) -> DeriveResult:
    """Run ``sql`` over ``inputs`` (alias -> dataset; each a temporary view under its alias,
    as of its head) and bring the derivative dataset ``output`` up to date with its answer.

    ``create`` makes ``output`` (a Seed of kind Derivative, with ``hash``) when it does not
    exist; an existing root dataset is refused. When no input moved since the last run and the
    query is the same, nothing is appended (``result.message`` says so). The answer is
    collected on the driver (as Arrow): derive is for answers that fit in its memory
    (aggregates, reports, joins that reduce).

    The run's ``ExecuteTransform`` records why a re-run could answer differently
    (``result.nondeterministic``: ``rand()``, clocks, UDFs, row-order-dependent aggregates, ...),
    read from the analyzed plan before anything is written; ``chain-verify --reproduce``
    re-runs every other run and compares.

    The field lineage of the run is captured from the query's analyzed plan (as
    :func:`odf_chain.spark.write` captures it) and carried in the ExecuteTransform's extra
    attributes (:data:`odf_chain.state.LINEAGE_KEY`), for the run ``job_name``.

    ``progress``, when given, is called with the name of each phase as it starts (pinning the
    inputs, running the query, comparing with the answer in force, writing the changes,
    committing): ``odf-chain derive`` prints them on a terminal."""
    from pyspark.sql import SparkSession

    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise OdfChainError("derive needs a SparkSession (none is active)")
    opened = _inputs(inputs)
    out, seed = _open_output(output, create=create, hash=hash)
    emitting = live_run(out.storage, job_name, str(uuid.uuid4()), chain.now())
    try:
        return _derive(spark, sql, opened, out, seed, emitting, progress or _quiet)
    except UnsyncedCommitError:
        raise  # committed and visible, its durability unsure: no FAIL, the outbox kept
    except BaseException as exc:
        emitting.failed(exc, discard=seed is not None)  # a run that began ends with FAIL
        if seed is not None:
            out.abandon_layout()
        raise


def _derive(
    spark,
    sql: str,
    opened: list[tuple[str, Dataset]],
    out: Dataset,
    seed: PreparedBlock | None,
    emitting: LiveRun,
    progress: Callable[[str], None],
) -> DeriveResult:
    hooks = (*POST_COMMIT_HOOKS, emitting.committed)
    if seed is None:
        state = out.refresh()
        if state.dataset_kind != DatasetKind.DERIVATIVE:
            raise OdfChainError(
                f"{out.location} is a root dataset: derive writes derivative datasets "
                "(give a new OUTPUT with --create)"
            )
        tx = Transaction.begin(out.storage, state, hooks=hooks)
    else:
        tx = Transaction.create(out.storage, seed, hooks=hooks)
    state = tx.state
    progress(f"pinning {len(opened)} input{'s' if len(opened) != 1 else ''} at their heads")
    pinned = [transform_run.pin(alias, dataset) for alias, dataset in opened]
    transform = derived.sql_transform(
        [(p.alias, p.state.dataset_id) for p in pinned], sql, spark.version
    )
    pins = _pins(state, pinned)
    changed = state.transform != transform
    if not changed and all(p.prev_block_hash == p.new_block_hash for p in pins):
        return DeriveResult(
            out.location,
            message=f"no new input data since block {state.sequence_number}: nothing appended",
        )
    emitting.start(state)  # a run: before Spark runs anything
    if changed:
        tx.add(transform)  # checked by the rules now, before Spark runs anything
    progress("running the query")
    conf = transform_run.run_conf(spark)
    session = transform_run.isolated_session(spark, conf)
    df = transform_run.run_queries(session, pinned, derived.transform_queries(transform))
    reasons = transform_run.nondeterminism(df)
    answer = transform_run.answer_table(df)
    if state.schema is not None:
        answer = derived.comparable(answer, state.schema)
    progress(f"comparing its {answer.num_rows:,} rows with the answer in force")
    live = None
    if state.num_slices:
        live = out.to_table(at=str(state.head))
    changes = derived.changes(live, answer, state.vocab, tx.system_time)
    progress(
        f"writing the changes ({changes.retracted:,} retracted, {changes.appended:,} appended)"
    )
    run = _Run(
        df, emitting.job_name, emitting.run_id, emitting.started_at, reasons, spark.version, conf
    )
    block = _write_run(tx, out, pinned, pins, answer, changes, run)
    progress("committing")
    with tx:
        if block is not None:
            tx.commit_data(*block)
        tx.commit()
    what = (
        f"{changes.appended} row(s) appended, {changes.retracted} retracted"
        if changes.table.num_rows
        else "the answer did not change"
    )
    return DeriveResult(
        out.location,
        [p.entry for p in tx.prepared],
        answer.num_rows,
        changes.appended,
        changes.retracted,
        reasons,
        f"{what} (answer: {answer.num_rows} row(s))",
    )


def _quiet(_: str) -> None:
    """No progress wanted."""


@dataclass(frozen=True)
class _Run:
    """What a run knows besides its data: the query's DataFrame, for its plan."""

    df: object
    job_name: str
    run_id: str  # decided when the run began: its START carries it
    started_at: datetime
    reasons: tuple[str, ...]
    version: str
    conf: Mapping[str, str | None]


def _lineage(run: _Run, tx: Transaction, offsets: OffsetInterval | None) -> AddFieldLineage | None:
    """The run's field lineage from the query's analyzed plan, settled on the schema in force
    (plain names as v2 paths, input fields checked); None when the plan gives none."""
    from odf_chain.spark.plan_lineage import lineage_from_plan

    schema = tx.state.schema
    if schema is None:
        return None
    parts = lineage_from_plan(run.df, schema, system_columns=set(tx.state.vocab.system_columns))
    if parts is None or not parts[1]:
        return None
    inputs, operations = parts
    record = LineageRun(
        job_name=run.job_name,
        run_id=run.run_id,
        started_at=run.started_at,
        ended_at=chain.now(tx.system_time),
        offsets=offsets,
    )
    event = AddFieldLineage(run=record, inputs=tuple(inputs), operations=tuple(operations))
    return settle_lineage(event, schema)


def _write_run(
    tx: Transaction,
    out: Dataset,
    pinned: list[transform_run.PinnedInput],
    pins: tuple[ExecuteTransformInput, ...],
    answer: pa.Table,
    changes: derived.Changes,
    run: _Run,
) -> tuple[str, str, int] | None:
    """Prepare the run's blocks (SetDataSchema if needed, the ExecuteTransform) and write its
    slice to staging; return (staged path, name, size) of the slice, or None without one."""
    state = tx.state
    vocab = state.vocab
    op = vocab.operation_type_column
    rows = changes.table
    staged_slice = None
    slice_digest = None
    facts = None
    if rows.num_rows:
        user = rows.drop_columns([op])
        nulls = {n for n, c in zip(user.column_names, user.columns, strict=True) if c.null_count}
        schema = slice_writer.slice_schema(user.schema, state.schema, vocab, with_nulls=nulls)
        refuse_narrowing(adopt_schema(schema, state.schema)[1], f"{out.location}: the answer")
        tx.declare_schema(schema)  # by the evolution rules, before any file is written
        spec = slice_writer.SliceSpec(
            schema, vocab, state.next_offset, tx.system_time, tx.algorithm, changelog=True
        )
        stored = derived.comparable(rows, schema)
        slice_digest = derived.answer_digest(stored, derived.slice_digest_columns(schema, vocab))
        staged = str(out.storage.stage_file(".parquet"))
        try:
            with out.storage.filesystem.open_output_stream(staged, compression=None) as sink:
                sinks: list[BinaryIO] = [sink]
                written = slice_writer.write_slices(rows, spec, lambda _: sinks[0])
        except OSError as exc:
            out.storage.discard(staged)
            raise StorageError(
                f"dataset {out.location}: cannot write the run's slice {staged}: {os_reason(exc)}"
            ) from exc
        except BaseException:
            out.storage.discard(staged)
            raise
        (facts,) = written
        staged_slice = (staged, str(facts.physical_hash), facts.size)
    in_force = tx.state.schema
    compared = answer if in_force is None else derived.comparable(answer, in_force)
    record = derived.RunRecord(
        engine_version=run.version,
        conf=run.conf,
        input_uris={p.alias: _where(p.dataset) for p in pinned},
        columns=tuple(answer.column_names),
        answer_rows=answer.num_rows,
        answer_digest=derived.answer_digest(compared),
        slice_digest=slice_digest,
        retracted=changes.retracted,
        appended=changes.appended,
        nondeterministic=run.reasons,
    )
    extra = record.as_extra()
    lineage = _lineage(run, tx, None if facts is None else facts.offsets)
    if lineage is not None:
        extra[LINEAGE_KEY] = lineage_to_json(lineage)
    event = ExecuteTransform(
        query_inputs=pins,
        prev_checkpoint=state.last_checkpoint,
        prev_offset=state.last_offset,
        new_data=None
        if facts is None
        else DataSlice(facts.logical_hash, facts.physical_hash, facts.offsets, facts.size),
        extra=extra,
    )
    try:
        tx.add(event)
    except BaseException:
        if staged_slice is not None:
            out.storage.discard(staged_slice[0])
        raise
    return staged_slice
