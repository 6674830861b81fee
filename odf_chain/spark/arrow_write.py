"""The ``writer="arrow"`` path of the write (:mod:`odf_chain.spark.write_frame`), on the driver:
the schema decided before the job, then the tasks of :mod:`odf_chain.spark.arrow_tasks` write
and hash their planned slices in one pass.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pyarrow as pa
import pyarrow.fs as pafs

from odf_chain.errors import StorageError
from odf_chain.slice_writer import SliceSpec, slice_schema
from odf_chain.slices import os_reason
from odf_chain.spark.arrow_tasks import SURPLUS, arrow_schema_of, write_in_tasks
from odf_chain.spark.columns import _quoted
from odf_chain.spark.conf import _arrow_batches
from odf_chain.spark.declared import _schema_to_declare
from odf_chain.spark.errors import IngestError, _spark_failure
from odf_chain.spark.file_checks import _UNSTABLE, WrittenSlice, _check_files
from odf_chain.spark.sizing import PlannedSlice, RowBytes
from odf_chain.state import DatasetState


def _write_in_tasks(
    framed,
    planned: list[PlannedSlice],
    state: DatasetState,
    system_time: datetime,
    algorithm: str,
    avro_schema: str | None,
    storage,
    staging: str,
    *,
    truncate_timestamps: bool,
    before_job: Callable[[pa.Schema], None] | None = None,
    row_bytes: RowBytes | None = None,
) -> tuple[list[WrittenSlice], pa.Schema, datetime | None]:
    """Steps 2 and 3 in one pass (:mod:`odf_chain.spark.arrow_tasks`): each task writes its
    planned slices through Arrow to the store, hashing them on the way. The schema is decided
    (and checked against the evolution rules) before the job runs, and given to ``before_job``
    then (the writer refuses there a schema the rules refuse)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    vocab = state.vocab
    system = set(vocab.system_columns)

    def column(field):
        # Files hold milliseconds: timestamps (the event time too) are truncated to them only
        # when asked (the count refused finer ones otherwise)
        name = field.name
        if isinstance(field.dataType, TimestampType) and truncate_timestamps:
            return F.date_trunc("millisecond", F.col(_quoted(name))).alias(name)
        return F.col(_quoted(name))

    frame = framed.select(*[column(f) for f in framed.schema.fields if f.name not in system])
    written_schema = slice_schema(arrow_schema_of(frame.schema), state.schema, vocab)
    schema = _schema_to_declare(written_schema, state, avro_schema)
    if before_job is not None:  # the writer checks the schema change here, before any task
        before_job(schema)
    spec = SliceSpec(schema, vocab, state.next_offset, system_time, algorithm)
    if isinstance(storage.filesystem, pafs.LocalFileSystem):  # object stores need no folder
        try:
            storage.filesystem.create_dir(staging)
        except OSError as exc:
            raise StorageError(
                f"dataset {storage.location}: cannot create the staging folder {staging}: "
                f"{os_reason(exc)}"
            ) from exc
    try:
        with _arrow_batches(frame.sparkSession, row_bytes):
            found = write_in_tasks(
                frame, planned, spec, storage.filesystem, staging, dataset=storage.location
            )
    except Exception as exc:  # py4j / Spark errors: the job failed, nothing appended
        raise _spark_failure("write the slices", exc) from exc
    surplus = [f for f in found if f.file_number == SURPLUS]
    if surplus:
        rows = sum(f.num_rows for f in surplus)
        partitions = sorted(f.partition for f in surplus)
        raise IngestError(
            f"partitions {partitions} held {rows} more rows in the write than in the count"
            + _UNSTABLE
        )
    written = sorted(
        (
            WrittenSlice(
                f.path.rsplit("/", 1)[-1],
                f.partition,
                f.physical_hash,
                f.logical_hash,
                f.size,
                f.num_rows,
                f.offset_min,
                f.offset_max,
                f.file_number,
            )
            for f in found
        ),
        key=lambda w: (w.partition, w.file_number),
    )
    _check_files(written, planned)
    times = [f.max_event_time for f in found if f.max_event_time is not None]
    return written, schema, max(times, default=None)
