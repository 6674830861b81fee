"""The DataFrames odf_chain reads through Arrow tasks (:func:`arrow_tasks.read_in_tasks`),
known by the attribute ids of their ``MapInArrow`` node, so that field lineage sees such a read
as what it is: a scan of the dataset's slices, column by column, as it sees Spark's own Parquet
reader. Without this it would see a Python mapper over a list of paths, and record every column
of a derived dataset as coming from "spark:local-rows", which is not true.

Kept per process, the latest :data:`LIMIT` reads (a read no longer known makes lineage opaque
over the paths again, never wrong about the dataset).
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


_READS: OrderedDict[tuple[int, ...], ArrowRead] = OrderedDict()
_LOCK = threading.Lock()


def remember(frame: Any, read: ArrowRead) -> None:
    """Remember ``frame`` (whose analyzed plan is the ``MapInArrow`` node) as ``read``; under
    Spark Connect, or where the JVM does not answer, lineage sees an opaque mapper instead."""
    try:
        output = frame._jdf.queryExecution().analyzed().output()
        ids = tuple(int(output.apply(i).exprId().id()) for i in range(output.size()))
    except Exception:
        return
    if len(ids) != len(read.names):
        return
    with _LOCK:
        _READS[ids] = read
        _READS.move_to_end(ids)
        while len(_READS) > LIMIT:
            _READS.popitem(last=False)


def recall(ids: tuple[int | None, ...]) -> ArrowRead | None:
    """The read whose node outputs exactly the attributes ``ids``, if it is remembered."""
    with _LOCK:
        return _READS.get(ids)  # type: ignore[arg-type]
