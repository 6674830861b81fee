#!/usr/bin/env python3
"""Benchmark: field-lineage capture from a Spark plan, on very wide projections.

    python tools/bench_lineage_capture.py [--columns 1000 5000] [--repeat 5] [--dir PATH]

For each width N the plan reads a small Parquet table with an ``id``, a ``region`` and N value
columns, joins it with a small dimension table on ``id``, projects every value column through
an expression (``c_i * weight``), groups by region and sums each of them: N outputs, each from
one input column through a join, a projection and an aggregation. Only capture is timed (the
plan is built once; nothing runs on the data). Reported, as medians over ``--repeat`` runs after
one warm-up:

- ``toJSON``: the one py4j call that brings the analyzed plan over (JVM serialisation and
  transfer), timed on its own;
- ``capture``: :func:`capture_plan_lineage` (toJSON, parse, the walk, the file probes);
- ``event``: :func:`lineage_from_plan` (capture, then inputs resolved with their content hashes
  and the field operations built against the output schema).

OpenLineage's Spark integration stops column lineage above 1,000 columns; the aim here is well
under a second at 1,000.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def build_plan(spark, scratch: Path, width: int):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    columns = [f"c{i}" for i in range(width)]
    wide = {"id": [1, 2], "region": ["eu", "us"]}
    wide.update({c: [float(i), float(i + 1)] for i, c in enumerate(columns)})
    pq.write_table(pa.table(wide), scratch / f"wide-{width}.parquet")
    pq.write_table(pa.table({"id": [1, 2], "weight": [0.5, 2.0]}), scratch / "dim.parquet")
    base = spark.read.parquet(str(scratch / f"wide-{width}.parquet"))
    dim = spark.read.parquet(str(scratch / "dim.parquet"))
    projected = base.join(dim, "id").select(
        "region", *[(F.col(c) * F.col("weight")).alias(c) for c in columns]
    )
    return projected.groupBy("region").agg(*[F.sum(c).alias(c) for c in columns])


def median_time(run, repeat: int) -> tuple[float, object]:
    result = run()  # warm-up (JIT on the JVM side, caches on ours)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from odf_chain.spark.plan_lineage import capture_plan_lineage, lineage_from_plan

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odf_chain lineage capture benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    scratch = Path(tempfile.mkdtemp(prefix="odf-bench-lineage-", dir=args.dir))
    rows = []
    try:
        for width in args.columns:
            df = build_plan(spark, scratch, width)
            output = pa.schema(
                [("region", pa.string())] + [(f"c{i}", pa.float64()) for i in range(width)]
            )
            analyzed = df._jdf.queryExecution().analyzed()
            json_time, text = median_time(analyzed.toJSON, args.repeat)
            capture_time, lineage = median_time(lambda d=df: capture_plan_lineage(d), args.repeat)
            event_time, parts = median_time(
                lambda d=df, o=output: lineage_from_plan(d, o), args.repeat
            )
            fields = len(lineage.fields)
            operations = len(parts[1])
            rows.append(
                (width, len(text) / 1e6, json_time, capture_time, event_time, fields, operations)
            )
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"lineage capture, median of {args.repeat} runs after a warm-up; cores: {os.cpu_count()}")
    header = ("columns", "JSON MB", "toJSON s", "capture s", "event s", "fields", "operations")
    print("  ".join(f"{h:>10}" for h in header))
    for width, size, json_time, capture_time, event_time, fields, operations in rows:
        print(
            f"{width:>10}  {size:>10.1f}  {json_time:>10.3f}  {capture_time:>10.3f}  "
            f"{event_time:>10.3f}  {fields:>10}  {operations:>10}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
