"""Which Python a local Spark's workers run.

Spark starts its Python workers with ``PYSPARK_PYTHON`` (or ``spark.pyspark.python``), else
with ``python3`` from ``PATH``. A job run as ``.venv/bin/python job.py`` in a shell without the
venv activated then has workers on the system's Python, which lacks pyarrow and odf_chain: the
write fails in its first task, deep in a stack trace. With a local master the workers run on this
machine, so the interpreter running the driver is the right one for them too.
"""

from __future__ import annotations

import os
import sys

_DEFAULTS = ("python3", "python")  # what Spark falls back on when nothing names an interpreter


def use_this_python(spark) -> None:
    """Give a local session's Python workers this interpreter, unless the user named one.

    Clusters (their executors have their own Python) and Spark Connect sessions (no context on
    this side) are left as they are."""
    if os.environ.get("PYSPARK_PYTHON"):
        return
    try:
        context = spark.sparkContext
        master = context.master
        named = context.getConf().get("spark.pyspark.python", None)
    except Exception:  # Spark Connect: the server's workers are the server's business
        return
    if named or not master.startswith("local") or context.pythonExec not in _DEFAULTS:
        return
    context.pythonExec = sys.executable  # read by every Python function Spark builds from now
