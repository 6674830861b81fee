"""A derived write on a Spark cluster, as a driver process of its own (a process holds one
SparkContext, and the test run's is local).

    python tests/scripts/cluster_derive.py MASTER_URL UPSTREAM DERIVED

Reads UPSTREAM with :func:`odf_chain.spark.read`, keeps the hottest temperature per station
and appends it to DERIVED with :func:`odf_chain.spark.write`, lineage captured from the plan.
Prints a JSON summary on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from pyspark.sql import SparkSession, functions as F

    from odf_chain.spark import read, write

    master, upstream, derived = sys.argv[1:4]
    spark = (
        SparkSession.builder.master(master)
        .appName("odf_chain-cluster-derive")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "1g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        hottest = read(spark, upstream).groupBy("station").agg(F.max("temp").alias("hottest"))
        result = write(hottest, derived, create=True, job_name="hottest")
        # the executors the jobs ran on (local mode has none but the driver); asked after the
        # write, as executors register with the driver while the first job starts
        executors = spark.sparkContext._jsc.sc().getExecutorIds().size()
        print(
            json.dumps(
                {
                    "executors": executors,
                    "rows": result.rows,
                    "slices": result.slices,
                    "lineage_inputs": [str(i.block_hash) for i in result.lineage.inputs],
                }
            )
        )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
