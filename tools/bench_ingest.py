#!/usr/bin/env python3
"""Benchmark: odf_chain.spark.write against plain df.write.parquet, side by side in one run.

    python tools/bench_ingest.py [--rows 5000000] [--partitions 8] [--repeat 3] [--dir PATH]

All write the same generated DataFrame (computed from spark.range, so generation is part of
every timing) with the same compression (zstd) on the same local Spark: plain
``df.write.parquet``, then ``odf_chain.spark.write`` with each of its two slice writers
(``writer="spark"``: Spark's Parquet writer, then a task per file hashes it; ``writer="arrow"``:
each task writes its slices through Arrow and hashes them on the way). Runs alternate (plain,
spark, arrow, plain, ...) and the medians are compared. Each odf_chain writer also reports where
its time goes, from IngestResult.timings: counting (per-partition counts), sizing, the write
itself (Spark's write and the hashing tasks, or the Arrow tasks), renames and blocks.
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


def make_frame(spark, rows: int, partitions: int):
    from pyspark.sql import functions as F

    base = spark.range(0, rows, numPartitions=partitions)
    return base.select(
        F.col("id"),
        (F.col("id") % 1000).alias("station_id"),
        F.concat(F.lit("station-"), (F.col("id") % 977).cast("string")).alias("station"),
        (F.rand(1) * 40 - 10).alias("temperature_c"),
        (F.rand(2) * 100).alias("humidity_pct"),
        F.struct((F.rand(3) * 180 - 90).alias("lat"), (F.rand(4) * 360 - 180).alias("lon")).alias(
            "location"
        ),
        F.expr("timestamp_seconds(1700000000 + id)").alias("event_time"),
        F.sha2(F.col("id").cast("string"), 256).alias("payload"),
    )


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*.parquet"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--warmup", type=int, default=1, help="runs of each first, not counted (JVM warm-up)"
    )
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument(
        "--writers", default="spark,arrow", help="odf_chain writers to run, comma-separated"
    )
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    from odf_chain.spark import write

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need pyarrow, odf_chain
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("odf_chain ingest benchmark")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "6g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MILLIS")
    scratch = Path(tempfile.mkdtemp(prefix="odf-bench-ingest-", dir=args.dir))
    writers = tuple(args.writers.split(","))
    plain_times: list[float] = []
    odf_times: dict[str, list[float]] = {w: [] for w in writers}
    breakdowns: dict[str, list[dict[str, float]]] = {w: [] for w in writers}
    size = 0
    try:
        frame = make_frame(spark, args.rows, args.partitions)
        for i in range(args.warmup + args.repeat):
            counted = i >= args.warmup
            target = scratch / f"plain-{i}"
            start = time.perf_counter()
            frame.write.option("compression", "zstd").parquet(str(target))
            if counted:
                plain_times.append(time.perf_counter() - start)
            size = folder_size(target)
            shutil.rmtree(target)

            for writer in writers:
                target = scratch / f"odf-{writer}-{i}"
                start = time.perf_counter()
                result = write(frame, target, create=True, event_time="event_time", writer=writer)
                elapsed = time.perf_counter() - start
                if counted:
                    odf_times[writer].append(elapsed)
                    other = elapsed - sum(result.timings.values())
                    breakdowns[writer].append({**result.timings, "other": other})
                assert result.rows == args.rows
                shutil.rmtree(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        spark.stop()

    plain = statistics.median(plain_times)
    print(f"rows {args.rows:,}, {args.partitions} partitions, {size / 1e6:,.0f} MB of Parquet")
    print(f"{args.warmup} warm-up run(s) of each not counted; {args.repeat} counted, alternating")
    runs = [round(t, 2) for t in plain_times]
    print(f"plain df.write.parquet          median {plain:7.2f} s   runs {runs}")
    for writer in writers:
        median = statistics.median(odf_times[writer])
        runs = [round(t, 2) for t in odf_times[writer]]
        label = f'odf_chain writer="{writer}"'
        print(f"{label:<31} median {median:7.2f} s   runs {runs}   {median / plain:5.2f}x plain")
    print("(aim: at most 1.10x plain)")
    print("where odf_chain's time goes (median over runs, seconds):")
    keys = list(dict.fromkeys(k for w in writers for b in breakdowns[w] for k in b))
    print(f"  {'step':<12}" + "".join(f"{w:>10}" for w in writers))
    for key in keys:
        cells = []
        for w in writers:
            values = [b[key] for b in breakdowns[w] if key in b]
            cells.append(f"{statistics.median(values):10.2f}" if values else f"{'-':>10}")
        print(f"  {key:<12}" + "".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
