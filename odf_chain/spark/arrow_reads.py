"""The DataFrames odf_chain reads through Arrow tasks (:func:`arrow_tasks.read_in_tasks`), known by
the id of their ``MapInArrow`` node's Python function (``resultId``: kept when Spark gives a
copy of the node new attribute ids, as in a self-join; a user's own mapper has its own), so that
field lineage sees such a read as what it is: a scan of the dataset's slices, column by column,
as it sees Spark's own Parquet reader. Without this it would see a Python mapper over a list of
paths, and record every column of a derived dataset as coming from "spark:local-rows", which is
not true.

Kept per process, the latest :data:`LIMIT` reads (a read no longer known is seen as a mapper
again).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

LIMIT = 1024


@dataclass(frozen=True)
class ArrowRead:
    """One read: the slice files (URIs Spark's own reader would list) and the dataset's
    column names, in the order of the node's output."""

    files: tuple[str, ...]
    names: tuple[str, ...]


Key = tuple[str, int]  # the JVM's id and the function's result id

_READS: OrderedDict[Key, ArrowRead] = OrderedDict()
_LOCK = threading.Lock()


def remember(frame: Any, read: ArrowRead) -> None:
    """Remember ``frame`` (whose analyzed plan is the ``MapInArrow`` node) as ``read``; under
    Spark Connect, or where the JVM does not answer, lineage sees an opaque mapper instead."""
    try:
        result = frame._jdf.queryExecution().analyzed().functionExpr().resultId()
        key = (str(result.jvmId()), int(result.id()))
    except Exception:
        return
    with _LOCK:
        _READS[key] = read
        _READS.move_to_end(key)
        while len(_READS) > LIMIT:
            _READS.popitem(last=False)


def recall(function: dict[str, Any], outputs: int) -> ArrowRead | None:
    """The read made by the Python function ``function`` (a ``MapInArrow`` node's
    ``functionExpr``, as plan JSON), if it is remembered and outputs ``outputs`` columns."""
    result = function.get("resultId")
    if not isinstance(result, dict):
        return None
    key = (str(result.get("jvmId")), result.get("id"))
    with _LOCK:
        read = _READS.get(key)  # type: ignore[arg-type]
    return read if read is not None and len(read.names) == outputs else None
