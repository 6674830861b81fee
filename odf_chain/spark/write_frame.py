"""Writing Spark DataFrames into a dataset (reading them back: :mod:`odf_chain.spark.read_frame`).

The write is one transaction, preceded by the new-column check: a DataFrame whose schema has
columns the schema in force lacks is refused, before Spark runs any job, unless ``evolve=True``.
Each step has a module of its own (this one drives them, in one transaction):
:mod:`~odf_chain.spark.columns` shapes the DataFrame, :mod:`~odf_chain.spark.offsets` counts
and plans (steps 1 and 2, with :mod:`~odf_chain.spark.sizing`), :mod:`~odf_chain.spark.arrow_write`
or :mod:`~odf_chain.spark.spark_parquet` writes, :mod:`~odf_chain.spark.file_checks` checks
(step 3), :mod:`~odf_chain.spark.declared` decides the schema (step 4); the session settings
are :mod:`~odf_chain.spark.conf`'s, the lineage :mod:`~odf_chain.spark.write_lineage`'s.

1. **Offsets without a funnel.** Rows are counted per partition (one small row per partition
   reaches the driver; counting reads no column values), prefix sums give each partition its
   first offset, and a row's offset is that plus its index within the partition (numbered by
   the task that writes it, or the low 33 bits of ``monotonically_increasing_id``). Offsets are
   contiguous and gap-free across the write. The count and the write are two jobs, and must see
   the same partitions. A plan that shuffles cannot promise that (the count prunes columns, so
   adaptive execution re-plans it differently; a sort samples its ranges per job; a window the
   count does not need is dropped with its shuffle), so such an input is persisted first and
   both jobs read the cache; a plan without a shuffle (files read, narrow steps) is partitioned
   the same every time and is not cached. Whatever still differs is caught by step 3's check.
2. **Slices of about ``target_slice_bytes``, decided before Spark writes.** The rows' Parquet
   size is estimated as rows (known from the counts) times bytes per row, measured by writing
   a small sample (the first rows, one task as a rule; for a shuffle-free input, taken in a
   driver thread while the count runs: :mod:`odf_chain.spark.beside`) to Parquet in memory;
   Catalyst's ``sizeInBytes`` is no help after joins and aggregates, and absent under Spark
   Connect.
   Partitions much smaller than the target are merged with ``coalesce`` (no shuffle); since
   Spark's coalescer groups partitions by locality, not by index, the offsets are assigned
   after it, from the rows of the merged partitions (summed from the groups the JVM plan
   shows, or counted again under Spark Connect). A partition larger than the target is cut
   into files of a fixed number of rows (Spark's ``maxRecordsPerFile``). The plan is a list
   of slices, each a contiguous group of rows of one partition with its offset range; a
   writer other than Spark's can follow it.
   The slices are then written into a staging folder inside the dataset, one file per
   planned slice, with ODF's system columns (``offset`` Int64, ``op`` Int32 = 0,
   ``system_time`` timestamp(ms, UTC) of the transaction, the event time column), by one of two
   writers. **Arrow, in the tasks** (the default; :mod:`odf_chain.spark.arrow_tasks`): each
   task gets its partition's rows through ``mapInArrow``, writes its planned slices through
   ``pyarrow.fs`` straight to the store (no Hadoop connector), numbers the rows from the
   planned offsets, hashes the bytes and the rows on their way, and returns only the facts.
   Spark hands those tasks batches bounded by rows sized from the sample, not by a size it
   would otherwise ask each batch for after every row (see
   :func:`odf_chain.spark.conf._arrow_batches`).
   **Spark's Parquet writer** (``writer="spark"``): the offsets become a column, Spark writes
   the files through the store's Hadoop connector, and step 3 reads each back.
3. **Each file is checked against its plan**: physical and logical hash, size, row count and
   offset range, which must be exactly the range planned for it: the files of a partition tile
   its offsets, and the partitions tile the write's. A mismatch (a partition with more or fewer
   rows than counted) is an error, never a silent gap. Spark's writer needs a task per file to
   hash it and read the offsets from its Parquet statistics; the Arrow writer reports them as it
   writes (and reports rows beyond its plan instead of writing them).
4. **The schema written** (the files' Arrow schema; for the Arrow writer, decided from the
   DataFrame's schema before the job, as Spark's writer would store it) becomes a
   SetDataSchema if it differs from the schema in force, after the evolution check; an
   incompatible write stops here (the Arrow writer: before the job), before anything leaves
   staging. Both writers declare the same schema for the same DataFrame.
5. **Commit**: files are renamed to ``data/<physical hash>`` (each must hold the bytes its
   writer counted), then one AddData per file in
   offset order (after the SetDataSchema, if any) is appended with a single move of the head.

A failure or a kill at any point leaves the chain exactly as it was, or with the whole
transaction; what it leaves in staging or ``data/`` is reported by verify and removed by gc.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from odf_chain import chain, rules
from odf_chain.chain import BlockEntry
from odf_chain.dataset import Dataset
from odf_chain.emit.live_run import live_run
from odf_chain.errors import NotFoundError, OdfChainError, SchemaError, UnsyncedCommitError
from odf_chain.events import AddFieldLineage, LineageRun, OffsetInterval
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.lineage.recorder import LineageRecorder
from odf_chain.schema.evolution import check_new_columns
from odf_chain.schema.widening import refuse_narrowing
from odf_chain.spark.arrow_write import _write_in_tasks
from odf_chain.spark.beside import Beside
from odf_chain.spark.columns import (
    _adopt_declared_types,
    _names_only,
    _refuse_duplicate_columns,
    _with_system_columns,
)
from odf_chain.spark.conf import _session_conf, _write_conf
from odf_chain.spark.errors import IngestError, _spark_failure
from odf_chain.spark.offsets import _count_partitions, _shuffles, _size_slices
from odf_chain.spark.schema_limits import check_nesting
from odf_chain.spark.sizing import (
    DEFAULT_TARGET_SLICE_BYTES,
    SAMPLE_ROWS,
    bytes_per_row,
    planned_slices,
    sampled_bytes_per_row,
    target_slice_bytes as checked_target,
)
from odf_chain.spark.spark_parquet import _write_with_spark
from odf_chain.spark.storage_failures import storage_failures
from odf_chain.spark.workers import use_this_python
from odf_chain.spark.write_lineage import _lineage_event, _plan_lineage
from odf_chain.state import SOURCE_KEY, DatasetState
from odf_chain.transaction import POST_COMMIT_HOOKS, Transaction


@dataclass(frozen=True)
class IngestResult:
    """What one :func:`write` appended."""

    dataset: Path | str
    rows: int
    slices: int
    bytes: int
    blocks: list[BlockEntry]
    head: Multihash | None
    timings: dict[str, float] = field(default_factory=dict)
    lineage: AddFieldLineage | None = None  # the field lineage the first AddData carries
    # the (app_id, version) given, when the chain already records that version or a later
    # one for app_id: nothing was appended
    skipped_transaction: tuple[str, int] | None = None


def _open(
    dataset: str | Path | Dataset, *, create: bool, hash: str
) -> tuple[Dataset, chain.PreparedBlock | None]:
    """The dataset, and its unwritten Seed when it is new: the Seed is committed with the
    write's blocks, so a write that fails leaves no dataset behind."""
    if isinstance(dataset, Dataset):
        dataset.refresh()
        return dataset, None
    try:
        return Dataset.open(dataset), None
    except NotFoundError:
        if not create:
            raise
    return Dataset.lay_out(dataset, hash=hash)


def _refuse_what_is_no_spark_dataframe(df: object) -> None:
    """``write`` takes a Spark DataFrame (classic or Connect) and nothing else, refused in one
    line before anything is opened: a pandas-on-Spark DataFrame would otherwise fail on its
    first attribute, and converting it for the caller would have to guess its index's fate
    (``to_spark()`` drops it), the loss a named index must not suffer."""
    from pyspark.sql import DataFrame

    if isinstance(df, DataFrame):
        return
    kind = type(df)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if kind.__module__.split(".")[:2] == ["pyspark", "pandas"]:
        how = (
            "convert it with df.to_spark(index_col=...) (a column name, a list of them for a "
            "MultiIndex) to keep its index as columns, or df.to_spark() to drop the index"
        )
    elif kind.__module__.split(".")[0] in ("pandas", "polars", "pyarrow"):
        how = "write it with Dataset.write, or convert it with spark.createDataFrame(...)"
    else:
        how = "convert it with spark.createDataFrame(...)"
    raise OdfChainError(f"spark.write takes a Spark DataFrame, not a {name}: {how}")


@storage_failures
def write(
    df,
    dataset: str | Path | Dataset,
    *,
    event_time: str | None = None,
    source: Mapping[str, Any] | None = None,
    create: bool = False,
    hash: str = BLAKE3,
    avro_schema: str | None = None,
    persist: bool | None = None,
    lineage: LineageRecorder | bool = True,
    job_name: str | None = None,
    truncate_timestamps: bool = False,
    evolve: bool = False,
    transaction: tuple[str, int] | None = None,
    target_slice_bytes: int | str | None = DEFAULT_TARGET_SLICE_BYTES,
    writer: Literal["arrow", "spark"] | None = None,
    _check_state: Callable[[Dataset, DatasetState], None] | None = None,
    _input: str | None = None,
    _check_rows: Callable[[dict[str, int]], None] | None = None,
    _phase: Callable[[str], None] | None = None,
) -> IngestResult:
    """Append a Spark DataFrame to ``dataset`` (a path, a ``pyarrow.fs`` URI such as
    ``s3://bucket/sales``, or an open :class:`Dataset`) as Parquet slices. A pandas-on-Spark
    DataFrame is refused in one line: ``df.to_spark(index_col=...)`` keeps its index as columns.

    ``event_time`` names the column holding event times. It keeps its name: a dataset without
    a schema gets a SetVocab naming it as the event time column (ODF's way), appended before
    the SetDataSchema in the same transaction; one whose vocabulary already names it needs
    none; one whose schema is set with another event time column refuses it (rule
    ``vocab-before-schema``) before Spark runs any job. Without it, the column the vocabulary
    names (``event_time`` by default) is the event time, and an input without that column gets
    the transaction's system time there. The watermark is the latest event time written.

    ``source`` is recorded in every AddData's extra attributes (input files and their hashes, or
    an upstream dataset's id and head block). ``create`` makes the dataset (with ``hash``) if it
    does not exist. ``avro_schema`` keeps an Avro writer schema with the SetDataSchema, so field
    paths follow the Avro convention. ``persist`` caches the input between counting and writing
    so both see the same partitions: None (the default) when its plan shuffles, True always (an
    input that is not reproducible for another reason), False never.

    ``lineage``: True (the default) derives the field lineage of ``df`` from its analyzed plan;
    a :class:`LineageRecorder` gives it by hand instead (also the way under Spark Connect, where
    no plan is reachable); False records none. The lineage is carried by the first AddData of
    the write (its extra attributes: see :data:`odf_chain.state.LINEAGE_KEY`), for the run
    ``job_name`` (default: the Spark application's name).

    Timestamps are stored in milliseconds (as ODF's system columns); a user column holding finer
    ones is refused, not silently truncated, unless ``truncate_timestamps`` says to truncate.

    ``evolve`` allows columns (or struct fields) the schema in force lacks; without it such a
    write raises :class:`NewColumnsError` naming them, from the DataFrame's schema, before
    Spark runs any job (missing nullable columns become nulls either way).

    A column of a type that widens into the type the schema in force declares (int into long,
    float into double, ...: :mod:`odf_chain.schema.widening`) is cast to it, so the write adopts
    the schema in force; any other type change is refused with :class:`TypeChangeError` naming
    the column and field, once the count found rows (an empty input appends nothing: a
    header-only CSV's columns are strings), before any file or block is written.

    ``transaction=(app_id, version)`` makes a retried job append nothing twice (Delta's
    txnAppId/txnVersion): the pair is recorded with the first AddData, and a write whose
    version is not above the last one the chain records for ``app_id`` appends nothing and
    returns ``skipped_transaction`` set, before Spark runs any job. Two attempts racing each
    other: one commits, the other gets :class:`ConflictError`, and running it again skips it.
    An empty DataFrame records no transaction (it appends nothing).

    ``target_slice_bytes`` (default 256 MiB; an int, or a string such as ``"64MiB"``) is the
    Parquet size each slice aims at: partitions far smaller are merged (a 100-row aggregate
    over 200 shuffle partitions is one slice), larger ones are cut, from an estimate (a sample
    of rows written to Parquet in memory), so slices come out about that size, not exactly.
    Fewer slices also means fewer tasks writing them: about one per ``target_slice_bytes``.
    None keeps one slice per non-empty partition, as the DataFrame is partitioned.

    ``writer`` says who writes the slices. ``"arrow"``: each Spark task writes its slices itself
    through Arrow, straight to the dataset's store, hashing them on the way (one pass, no Hadoop
    connector needed for ``s3://``, ``gs://``, ``abfs://``). ``"spark"``: Spark's own Parquet
    writer, then a task per file reads it back to hash it (object stores then need the Hadoop
    connector on the classpath, e.g. ``hadoop-aws``). None (the default) is ``"arrow"``, the
    faster of the two on local paths too (``tools/bench_ingest.py``).
    """
    from pyspark import StorageLevel

    _refuse_what_is_no_spark_dataframe(df)
    use_this_python(df.sparkSession)
    if transaction is not None:  # refused before anything is opened or created
        transaction = rules.transaction_argument(transaction)
    target = checked_target(target_slice_bytes)
    if writer not in (None, "arrow", "spark"):
        raise OdfChainError(f"writer must be 'arrow' or 'spark' (or None), not {writer!r}")

    timings: dict[str, float] = {}
    started_at = chain.now()
    clock = time.perf_counter()
    spark = df.sparkSession
    # the run's job and id are decided now: START carries them, and so do the lineage and COMPLETE
    if isinstance(lineage, LineageRecorder):
        run_job, run_id = lineage.job_name, lineage.run_id
    else:
        run_job = job_name or spark.conf.get("spark.app.name", "spark")
        run_id = str(uuid.uuid4())
    dataset, seed = _open(dataset, create=create, hash=hash)
    live = live_run(dataset.storage, run_job, run_id, started_at)  # never raises
    hooks = (*POST_COMMIT_HOOKS, live.committed)
    try:
        path = dataset.path
        storage = dataset.storage
        state = seed.after if seed is not None else dataset.refresh()
        if _check_state is not None:  # ingest_files: were its inputs ingested meanwhile?
            _check_state(dataset, state)
        # a new dataset's Seed is the transaction's first block: a failed write creates none
        if seed is not None:
            tx = Transaction.create(storage, seed, transaction=transaction, hooks=hooks)
        else:  # refuses a rolled-back head, proves the transaction pair, before any job
            tx = Transaction.begin(storage, state, transaction=transaction, hooks=hooks)
        if tx.already_recorded:
            return IngestResult(
                path, 0, 0, 0, [], tx.base.head, timings, skipped_transaction=transaction
            )
        live.start(tx.state)  # before Spark runs any job
        state = tx.state
        algorithm = tx.algorithm
        system_time = tx.system_time  # one time for the transaction's blocks and rows

        _refuse_duplicate_columns(df)
        check_nesting(df.schema)
        if event_time is not None and event_time not in df.columns:
            raise SchemaError(f"event time column {event_time!r} is not in the input")
        # the column keeps its name: a SetVocab names it, the write's first block after the Seed
        tx.name_event_time(event_time)
        state = tx.state
        vocab = state.vocab
        df, narrowed = _adopt_declared_types(df, state.schema, vocab, event_time)
        shaped = _with_system_columns(df, vocab, system_time, state.schema)
        check_new_columns(
            state.schema, _names_only(shaped.schema), evolve=evolve, dataset=dataset.location
        )
        if persist is None:
            persist = _shuffles(shaped)
        if persist:
            shaped = shaped.persist(StorageLevel.MEMORY_AND_DISK)
        in_tasks = writer != "spark"
        staging = storage.staging_area("spark")
        beside: list[Beside] = []  # driver-side work run while a job runs; stopped on the way out
        try:
            with _session_conf(spark, _write_conf(spark)):
                sampling = None
                wants_sample = target is not None or in_tasks  # slice sizes, batch sizes
                if wants_sample and not persist and Beside.possible(spark):
                    # a shuffle-free input: its first rows are sampled while the count runs
                    # (a persisted one is sampled from the cache the count fills)
                    sampling = Beside(
                        spark, "sample", lambda: sampled_bytes_per_row(shaped, SAMPLE_ROWS)
                    )
                    beside.append(sampling)
                per_file: dict[str, int] | None = None if _check_rows is None else {}
                if _phase is not None:  # the CLI on a terminal: each phase as it starts
                    _phase("counting rows")
                try:
                    counts = _count_partitions(
                        shaped,
                        vocab,
                        check_timestamps=not truncate_timestamps,
                        per_file=per_file,
                        # the Arrow writer checks those inside a struct, list or map itself
                        check_nested=not in_tasks,
                    )
                except Exception as exc:  # a task of the input's own plan failed: nothing appended
                    raise _spark_failure("count the input", exc) from exc
                if _check_rows is not None:  # ingest_files: rows from every file that has bytes?
                    _check_rows(per_file or {})
                total = sum(counts.values())
                timings["offsets"] = time.perf_counter() - clock
                if total == 0:
                    if seed is not None:  # an empty first write still creates the dataset
                        Transaction.create(storage, seed, hooks=hooks).commit()
                    else:
                        live.unchanged(state)
                    return IngestResult(path, 0, 0, 0, [], state.head, timings)
                # refused once there are rows: a header-only CSV's columns are strings by default
                refuse_narrowing(narrowed, f"{dataset.location}: {_input or 'the DataFrame'}")

                if _phase is not None:
                    _phase(f"sizing slices for {total:,} rows")
                clock = time.perf_counter()
                # the sample gets as long again as the count took: its first task is as a rule
                # done by then; cancelling it and sampling anew is for inputs whose first
                # partitions hold too few rows (limit then reads them round after round)
                row_bytes = None
                if sampling is not None:
                    row_bytes = sampling.done_or_cancel(wait=timings["offsets"])[1]
                if row_bytes is None and wants_sample:
                    row_bytes = bytes_per_row(shaped, counts)
                framed, counts, records = _size_slices(shaped, counts, vocab, target, row_bytes)
                planned = planned_slices(counts, state.next_offset, records)
                timings["sizing"] = time.perf_counter() - clock
                if _phase is not None:
                    _phase(f"writing {len(planned):,} slice{'s' if len(planned) != 1 else ''}")
                clock = time.perf_counter()
                captured: Beside | None = None

                def before_tasks(schema: pa.Schema) -> None:
                    tx.check_schema(schema)  # a schema the rules refuse: before any task runs
                    # the plan's lineage is read on the driver while the tasks write
                    nonlocal captured
                    if lineage is True and Beside.possible(spark):
                        captured = Beside(
                            spark, "lineage", lambda: _plan_lineage(shaped, schema, vocab)
                        )
                        beside.append(captured)

                if in_tasks:
                    written, schema, watermark = _write_in_tasks(
                        framed,
                        planned,
                        state,
                        system_time,
                        algorithm,
                        avro_schema,
                        storage,
                        staging,
                        truncate_timestamps=truncate_timestamps,
                        before_job=before_tasks,
                        row_bytes=row_bytes,
                    )
                    timings["task_write"] = time.perf_counter() - clock
                else:
                    written, schema, watermark = _write_with_spark(
                        framed,
                        counts,
                        planned,
                        records,
                        state,
                        algorithm,
                        avro_schema,
                        storage,
                        staging,
                        timings,
                    )
            if _phase is not None:
                _phase("committing blocks")
            with tx:  # the failure policy: what the transaction created is withdrawn
                clock = time.perf_counter()
                tx.declare_schema(schema)
                current = tx.state
                timings["renames"] = time.perf_counter() - clock

                clock = time.perf_counter()
                event = _lineage_event(
                    shaped,  # with the system columns: event_time's source shows, literals not
                    lineage,
                    schema,
                    run=LineageRun(
                        job_name=live.job_name,
                        run_id=live.run_id,
                        started_at=started_at,
                        ended_at=chain.now(system_time),  # the slices are written: run done
                        offsets=OffsetInterval(
                            current.next_offset, current.next_offset + total - 1
                        ),
                    ),
                    vocab=vocab,
                    captured=None if captured is None else captured.result,
                )
                if event is not None:
                    tx.describe_run(event)
                timings["lineage"] = time.perf_counter() - clock
                clock = time.perf_counter()
                extra = None if source is None else {SOURCE_KEY: dict(source)}
                for slice_info, plan in zip(written, planned, strict=True):
                    if plan.interval.start != tx.state.next_offset:  # _check_files: end to end
                        raise IngestError(f"{slice_info.file_name}: offsets out of order")
                    tx.add_slice(
                        physical_hash=Multihash.from_multibase(slice_info.physical_hash),
                        logical_hash=Multihash.from_multibase(slice_info.logical_hash),
                        size=slice_info.size,
                        num_rows=slice_info.num_rows,
                        watermark=watermark,
                        extra=extra,
                    )
                for slice_info in written:
                    tx.commit_data(
                        f"{staging}/{slice_info.file_name}",
                        slice_info.physical_hash,
                        slice_info.size,
                    )
                timings["renames"] += time.perf_counter() - clock

                clock = time.perf_counter()
                new_state = tx.commit()
                timings["blocks"] = time.perf_counter() - clock
            dataset.refresh()
            return IngestResult(
                dataset=path,
                rows=total,
                slices=len(written),
                bytes=sum(w.size for w in written),
                blocks=[p.entry for p in tx.prepared],
                head=new_state.head,
                timings=timings,
                lineage=event,
            )
        finally:
            for work in beside:
                work.done_or_cancel()
            if persist:
                shaped.unpersist()
            storage.discard_area(staging)
    except UnsyncedCommitError:
        raise  # committed and visible, its durability unsure: no FAIL, the outbox kept
    except BaseException as exc:
        # a run that began ends with FAIL (one that committed has sent its COMPLETE)
        live.failed(exc, discard=seed is not None)
        if seed is not None:  # this call laid the dataset out: no head, so no dataset
            dataset.abandon_layout()
        raise
