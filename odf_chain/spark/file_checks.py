"""Step 3 of the write (:mod:`odf_chain.spark.write_frame`): each file a writer wrote is checked
against its planned slice, so a count and a write that saw different partitions is an error,
never a silent gap.
"""

from __future__ import annotations

from dataclasses import dataclass

from odf_chain.events import OffsetInterval
from odf_chain.spark.errors import IngestError
from odf_chain.spark.sizing import PlannedSlice


@dataclass(frozen=True, slots=True)
class WrittenSlice:
    """What the per-file task found out about one Parquet file Spark wrote."""

    file_name: str
    partition: int
    physical_hash: str
    logical_hash: str
    size: int
    num_rows: int
    offset_min: int | None
    offset_max: int | None
    file_number: int = 0  # which of its partition's files (a partition cut into several)


_UNSTABLE = (
    "; the input's partitions came out differently in the count and in the write "
    "(nothing was appended): pass persist=True to cache it between the two"
)


def _check_files(written: list[WrittenSlice], planned: list[PlannedSlice]) -> list[OffsetInterval]:
    """Each file holds exactly the offsets planned for it (the files of a partition in the
    order Spark wrote them); returns the intervals, which tile the write's offsets."""
    expected = sorted({p.partition for p in planned})
    seen = sorted({w.partition for w in written})
    if seen != expected:
        raise IngestError(
            f"Spark wrote files for partitions {seen}, expected {expected}" + _UNSTABLE
        )
    for w, plan in zip(written, planned, strict=False):
        start, end = plan.interval.start, plan.interval.end
        if w.partition != plan.partition or (w.num_rows, w.offset_min, w.offset_max) != (
            plan.rows,
            start,
            end,
        ):
            raise IngestError(
                f"{w.file_name}: expected offsets {start}..{end} ({plan.rows} rows, file "
                f"{plan.index + 1} of partition {plan.partition}), found "
                f"{w.offset_min}..{w.offset_max} ({w.num_rows} rows)" + _UNSTABLE
            )
    if len(written) != len(planned):
        raise IngestError(
            f"Spark wrote {len(written)} files with rows, expected {len(planned)}" + _UNSTABLE
        )
    return [plan.interval for plan in planned]
