"""A write through a Spark Connect session, as a client process of its own.

    python tests/scripts/connect_write.py sc://127.0.0.1:PORT DATASET

Builds a small DataFrame on the Connect server and appends it to DATASET twice with
:func:`odf_chain.spark.write`: first with lineage left to capture (which cannot see a Connect
plan: it warns, and the write goes on without field lineage), then with lineage recorded by
hand. Prints a JSON summary on stdout: the warnings seen and each write's rows and lineage.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    from pyspark.sql import SparkSession

    from odf_chain.lineage import LineageRecorder
    from odf_chain.spark import write

    remote, dataset = sys.argv[1:3]
    spark = SparkSession.builder.remote(remote).getOrCreate()
    summary: dict = {"connect": type(spark).__module__}
    try:
        df = spark.createDataFrame(
            [("a", 10.0), ("b", 3.0), ("a", 14.0)], "station string, temp double"
        )
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            first = write(df, dataset, create=True, job_name="captured")
        summary["warnings"] = [str(w.message) for w in seen]
        summary["first"] = {"rows": first.rows, "lineage": first.lineage is not None}
        recorder = LineageRecorder(job_name="recorded")
        source = recorder.external_input("src", "file:///landing/readings.csv")
        recorder.write("load", [source["station"], source["temp"]])
        second = write(df, dataset, lineage=recorder)
        summary["second"] = {"rows": second.rows, "lineage": second.lineage is not None}
    finally:
        spark.stop()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
