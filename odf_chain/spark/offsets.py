"""Steps 1 and 2 of the write (:mod:`odf_chain.spark.write_frame`): rows counted per partition,
offsets assigned without a funnel, and the plan of slices (partitions merged or cut to the target
size, from :mod:`odf_chain.spark.sizing`).
"""

from __future__ import annotations

from collections.abc import Mapping

from odf_chain.errors import SchemaError
from odf_chain.spark.columns import _quoted
from odf_chain.spark.errors import _spark_failure
from odf_chain.spark.sizing import RowBytes, bytes_per_row, merge_to, records_per_file
from odf_chain.state import Vocabulary

_ROW_BITS = 33  # monotonically_increasing_id: partition id above, row within partition below


def _shuffles(df) -> bool:
    """Does ``df``'s physical plan move rows between partitions (an Exchange)?"""
    try:
        return "Exchange" in df._jdf.queryExecution().executedPlan().toString()
    except Exception:  # no plan to look at (Spark Connect): cache to be safe
        return True


def _count_partitions(
    df,
    vocab: Vocabulary,
    *,
    check_timestamps: bool = True,
    per_file: dict[str, int] | None = None,
    check_nested: bool = False,
) -> dict[int, int]:
    """Rows per partition (partitions without rows are left out), one small row each.

    The same pass checks that timestamp columns (the event time too) hold whole milliseconds:
    the files store timestamps in milliseconds (as ODF's system columns), and finer ones would
    be truncated without a word. Given ``per_file``, it also fills it with rows per input file
    (Spark's ``input_file_name``, files without rows left out): one more grouping key in the
    same job. ``check_nested``: timestamps inside a struct, a list or a map too (Spark's own
    writer stores them in milliseconds as well; the Arrow writer's tasks check them).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    stamps = [
        (f.name, found)
        for f in df.schema.fields
        if check_timestamps
        and f.name not in vocab.system_columns
        and (isinstance(f.dataType, TimestampType) or check_nested)
        and (found := _finer_than_ms(F.col(_quoted(f.name)), f.dataType)) is not None
    ]
    finer = [F.max(found.cast("int")).alias(f"_sub{i}") for i, (_, found) in enumerate(stamps)]
    keys = [F.spark_partition_id().alias("pid")]
    if per_file is not None:
        keys.append(F.input_file_name().alias("file"))
    rows = df.groupBy(*keys).agg(F.count("*").alias("n"), *finer)
    counts: dict[int, int] = {}
    for row in rows.collect():
        counts[row["pid"]] = counts.get(row["pid"], 0) + row["n"]
        if per_file is not None:
            per_file[row["file"]] = per_file.get(row["file"], 0) + row["n"]
        for i, (name, _) in enumerate(stamps):
            if row[f"_sub{i}"]:
                raise SchemaError(
                    f"column {name!r} holds timestamps finer than a millisecond; datasets store "
                    "timestamps in milliseconds: truncate them first "
                    f"(F.date_trunc('millisecond', {name!r})), store them as another type, or "
                    "pass truncate_timestamps=True (odf-chain ingest --truncate-timestamps)"
                )
    return counts


def _finer_than_ms(column, kind):
    """A boolean column: does ``column`` (of Spark type ``kind``) hold a timestamp finer than a
    millisecond, at its top or anywhere inside its structs, lists and maps? None when its type
    holds no timestamp."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType, TimestampType

    if not _holds_timestamps(kind):
        return None
    if isinstance(kind, TimestampType):
        return F.unix_micros(column) % 1000 != 0
    if isinstance(kind, ArrayType):
        return _any_item(column, kind.elementType)
    if isinstance(kind, MapType):
        parts = [
            _any_item(side(column), t)
            for side, t in ((F.map_keys, kind.keyType), (F.map_values, kind.valueType))
            if _holds_timestamps(t)
        ]
    else:
        assert isinstance(kind, StructType)
        parts = [
            _finer_than_ms(column.getField(f.name), f.dataType)
            for f in kind.fields
            if _holds_timestamps(f.dataType)
        ]
    parts = [F.coalesce(p, F.lit(False)) for p in parts]  # a null part: not finer
    return parts[0] if len(parts) == 1 else F.greatest(*parts)


def _any_item(items, kind):
    """Does any item of the list ``items`` (of Spark type ``kind``) hold a finer timestamp? (A
    function of one argument: Spark passes a lambda of two the item's index.)"""
    from pyspark.sql import functions as F

    return F.exists(items, lambda item: _finer_than_ms(item, kind))


def _holds_timestamps(kind) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType, TimestampType

    if isinstance(kind, TimestampType):
        return True
    if isinstance(kind, StructType):
        return any(_holds_timestamps(f.dataType) for f in kind.fields)
    if isinstance(kind, ArrayType):
        return _holds_timestamps(kind.elementType)
    if isinstance(kind, MapType):
        return _holds_timestamps(kind.keyType) or _holds_timestamps(kind.valueType)
    return False


def _assign_offsets(df, counts: Mapping[int, int], vocab: Vocabulary, first_offset: int):
    """``df`` with its offsets, without moving rows: a partition's first offset (prefix sums
    of ``counts``) plus the row's index within the partition."""
    from pyspark.sql import functions as F

    # partitions as the count saw them (the plan's own number can differ under adaptive
    # execution); a write that saw others gets null offsets, which the per-file check refuses
    partitions = max(counts, default=-1) + 1
    firsts, running = [], first_offset
    for pid in range(partitions):
        firsts.append(running)
        running += counts.get(pid, 0)
    pid = F.spark_partition_id()
    within = F.monotonically_increasing_id() - F.shiftleft(pid.cast("long"), _ROW_BITS)
    base = F.try_element_at(F.array(*[F.lit(x).cast("long") for x in firsts]), pid + 1)
    with_offsets = df.select(
        (base + within).cast("long").alias(vocab.offset_column),
        *[F.col(_quoted(c)) for c in df.columns],
    )
    return with_offsets


def _merged_counts(merged, counts: Mapping[int, int]) -> dict[int, int] | None:
    """Rows per partition of ``merged`` (a coalesced frame) from the groups Spark's coalescer
    makes of the counted partitions, read from the JVM plan without running a job; None when
    there is no plan to read (Spark Connect) or it has another shape.

    The groups follow the partitions' locations, not their numbers (cached partitions are
    spread over all groups), and are computed again, the same way, for the write: the input is
    persisted and already cached, or has no shuffle, so the locations do not move between."""
    try:
        node = merged._jdf.queryExecution().executedPlan()
        while node.nodeName() != "Coalesce":
            if node.nodeName() == "AdaptiveSparkPlan":
                node = node.executedPlan()
            elif node.children().size() == 1:
                node = node.children().apply(0)
            else:
                return None
        groups = {p.index(): list(p.parentsIndices()) for p in node.execute().partitions()}
    except Exception:  # Spark Connect (no _jdf), or a plan of another shape: count instead
        return None
    merged_counts = {i: sum(counts.get(j, 0) for j in parents) for i, parents in groups.items()}
    if sum(merged_counts.values()) != sum(counts.values()):
        return None  # the groups do not cover the counted partitions: count instead
    return {i: n for i, n in merged_counts.items() if n}


def _size_slices(
    df,
    counts: dict[int, int],
    vocab: Vocabulary,
    target: int | None,
    row_bytes: RowBytes | None = None,
):
    """Step 2's plan: (the frame to write, its rows per partition, rows per file), from
    ``row_bytes`` (sampled while the count ran), or from a sample taken now.

    Merging uses ``coalesce``, whose groups of partitions follow their locations (cached
    blocks, file splits), not their numbers, so the merged partitions' rows are summed from
    the groups the JVM plan shows, or counted anew where there is no plan to read (both ways
    see a persisted or shuffle-free input whose locations no longer move, as the write does;
    step 3 checks that it did). A merge into one partition holds every row."""
    if target is None:
        return df, counts, 0
    per_row = (row_bytes or bytes_per_row(df, counts)).parquet
    merged = merge_to(counts, per_row, target)
    if merged is not None:
        df = df.coalesce(merged)
        if merged == 1:
            counts = {0: sum(counts.values())}
        elif (summed := _merged_counts(df, counts)) is not None:
            counts = summed
        else:
            try:
                counts = _count_partitions(df, vocab, check_timestamps=False)
            except Exception as exc:
                raise _spark_failure("count the merged partitions", exc) from exc
    return df, counts, records_per_file(counts, per_row, target)
