"""One local SparkSession for the whole test run (starting one costs ~15 s).

Tests that need Spark take the ``spark`` fixture (defined in conftest.py); the session is
created on first use and stopped at the end of the run.
"""

from __future__ import annotations

import os
import tempfile

_session = None


def get_session():
    global _session
    if _session is None:
        from pyspark.sql import SparkSession

        os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # stay on loopback
        warehouse = tempfile.mkdtemp(prefix="odf-spark-warehouse-")
        _session = (
            SparkSession.builder.master("local[2]")
            .appName("odf_chain-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.warehouse.dir", warehouse)
            .config("spark.driver.memory", "2g")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        _session.sparkContext.setLogLevel("ERROR")
    return _session


def share_environment(env: dict[str, str]) -> None:
    """Give the Python workers of the shared session (if started) these variables: the
    executor environment of the context, which every Python function Spark runs carries."""
    if _session is not None:
        _session.sparkContext.environment.update(env)


def stop_session() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None
