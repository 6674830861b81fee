"""Session settings a write needs while it runs (and puts back after), shared by writes in several
threads of one session.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Mapping

from odf_chain.spark.sizing import RowBytes, arrow_batch_rows

# Session settings for the write: timestamps in milliseconds, as ODF's system columns are, and
# one file per partition, since a partition's offsets are promised to one slice.
_WRITE_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
    "spark.sql.files.maxRecordsPerFile": "0",  # one file per partition: a slice per partition
}
_EXCLUDED_RULES = "spark.sql.optimizer.excludedRules"
_LOCAL_RELATION_RULE = "org.apache.spark.sql.catalyst.optimizer.ConvertToLocalRelation"


def _write_conf(spark) -> dict[str, str]:
    """:data:`_WRITE_CONF`, and Spark's ``ConvertToLocalRelation`` rule excluded (beside any
    rules the session already excludes): on a DataFrame made from local data
    (``createDataFrame`` of a pandas frame or a list) that rule evaluates the count's
    ``spark_partition_id()`` on the driver, where every row is in partition 0, while the write
    runs in the real partitions, so the count and the write disagreed and every such write
    was refused."""
    excluded = [r.strip() for r in (spark.conf.get(_EXCLUDED_RULES, None) or "").split(",")]
    rules = [r for r in excluded if r]
    if _LOCAL_RELATION_RULE not in rules:
        rules.append(_LOCAL_RELATION_RULE)
    return {**_WRITE_CONF, _EXCLUDED_RULES: ",".join(rules)}


_conf_lock = threading.Lock()
_conf_holders: dict[int, tuple[int, dict[str, str | None]]] = {}  # per session: writers, saved


@contextlib.contextmanager
def _session_conf(spark, settings: Mapping[str, str]) -> Iterator[None]:
    """Set ``settings`` on the session while any write in this process needs them, then put
    back what was there before the first: writes in several threads of one session share the
    settings instead of restoring each other's."""
    key = id(spark)
    with _conf_lock:
        holders, saved = _conf_holders.get(key, (0, {}))
        if holders == 0:
            saved = _set_conf(spark, settings)
        _conf_holders[key] = (holders + 1, saved)
    try:
        yield
    finally:
        with _conf_lock:
            holders, saved = _conf_holders.pop(key)
            if holders > 1:
                _conf_holders[key] = (holders - 1, saved)
            else:
                _set_conf(spark, saved)


def _set_conf(spark, settings: Mapping[str, str | None]) -> dict[str, str | None]:
    """Set ``settings`` on the session (None: unset); return what they replaced."""
    saved = {name: spark.conf.get(name, None) for name in settings}
    for name, value in settings.items():
        if value is None:
            spark.conf.unset(name)
        else:
            spark.conf.set(name, value)
    return saved


_MAX_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
_MAX_BATCH_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"
_SPARK_BATCH_BYTES = 64 * 1024 * 1024  # Spark's default maxBytesPerBatch
_batch_locks: dict[int, threading.Lock] = {}


def _conf_bytes(value: str | None) -> int | None:
    """A byte size as Spark's conf shows or takes it (``67108864b``, ``64m``, ``1g``); None
    when unset or not such a size."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([bkmgt]?)b?\s*", str(value).lower())
    if match is None:
        return None
    return int(match.group(1)) * 1024 ** "bkmgt".index(match.group(2) or "b")


@contextlib.contextmanager
def _arrow_batches(spark, row_bytes: RowBytes | None) -> Iterator[None]:
    """The Arrow writer's job gets batches of rows sized from the sample
    (:func:`~odf_chain.spark.sizing.arrow_batch_rows`) and Spark's byte check after every row
    off (:data:`~odf_chain.spark.sizing.ARROW_BATCH_BYTES` says why). These are settings of
    the session: one such job at a time per session holds them, and puts back what was there.
    Spark's own settings stay without a sample of rows (none could be taken), and when the
    session's ``maxBytesPerBatch`` is not Spark's default: someone chose a bound to keep."""
    if row_bytes is None or not row_bytes.sampled:
        yield
        return
    with _conf_lock:
        lock = _batch_locks.setdefault(id(spark), threading.Lock())
    with lock:
        chosen = spark.conf.get(_MAX_BATCH_BYTES, None)  # None: not set, Spark's default
        if chosen is not None and _conf_bytes(chosen) != _SPARK_BATCH_BYTES:
            yield
            return
        try:
            limit = int(str(spark.conf.get(_MAX_BATCH_RECORDS, "10000")))
        except ValueError:
            limit = 10_000
        limit = limit if limit > 0 else 10_000  # Spark reads 0 or less as no limit
        settings = {
            _MAX_BATCH_BYTES: str(2**31 - 1),  # Spark's "no limit": no size asked per row
            _MAX_BATCH_RECORDS: str(arrow_batch_rows(row_bytes, limit)),
        }
        saved = _set_conf(spark, settings)
        try:
            yield
        finally:
            _set_conf(spark, saved)
