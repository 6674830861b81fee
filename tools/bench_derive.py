#!/usr/bin/env python3
"""Benchmark: re-running a derived dataset (``verify(reproduce=True)``) against the runs that
wrote it (``odf_chain.spark.derive``), side by side in one Spark session.

    python tools/bench_derive.py [--rows 2000000] [--runs 4] [--repeat 3] [--quick] [--dir PATH]

A ``sensors`` dataset grows by ``--rows / --runs`` generated readings before each run (a
station of 500, a temperature, an event time over 30 days, late readings for days already
covered), next to a ``stations`` dataset of 500 rows; after each growth, one ``derive`` of the
daily statistics per region and day (a join, a GROUP BY with avg/max/count and a CASE) brings
the derived dataset up to date (after one untimed warm-up run of each). Then
``verify(reproduce=True)`` re-runs every run on the input rows it pinned, and plain
``verify()`` gives the part of that which is not the re-run.

Reported: the sum of the derive times (the original runs), the re-run time (reproduce minus
plain verify), and their ratio; the bound is re-run <= 1.3x the original runs. ``--repeat``
reproduces several times and takes the median (the derives are each measured once: they
change the dataset). ``--quick``: 200,000 rows, 3 runs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from odf_chain.dataset import Dataset

SQL = """
SELECT s.region, CAST(r.event_time AS DATE) AS day,
       AVG(r.temperature_c) AS avg_temperature_c, MAX(r.temperature_c) AS max_temperature_c,
       COUNT(*) AS readings,
       CASE WHEN MAX(r.temperature_c) > 30 THEN 'hot' ELSE 'mild' END AS kind
FROM sensors r JOIN stations s ON r.station = s.station
GROUP BY s.region, CAST(r.event_time AS DATE)
"""
STATIONS = 500
START = datetime(2026, 11, 1, tzinfo=UTC)


def readings(rng: np.random.Generator, rows: int) -> pa.Table:
    seconds = rng.integers(0, 30 * 86_400, rows)
    times = np.datetime64(START.replace(tzinfo=None), "ms") + seconds.astype("timedelta64[s]")
    return pa.table(
        {
            "station": pa.array([f"station-{i:03d}" for i in rng.integers(0, STATIONS, rows)]),
            "temperature_c": rng.normal(15.0, 8.0, rows),
            "event_time": pa.array(times, pa.timestamp("ms", tz="UTC")),
        }
    )


def stations() -> pa.Table:
    return pa.table(
        {
            "station": [f"station-{i:03d}" for i in range(STATIONS)],
            "region": [("north", "east", "south", "west")[i % 4] for i in range(STATIONS)],
        }
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.runs = 200_000, 3
    from pyspark.sql import SparkSession

    from odf_chain.spark import derive

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench_derive")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-derive-"))
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    try:
        rng = np.random.default_rng(7)
        sensors = Dataset.create(root / "sensors")
        where = Dataset.create(root / "stations")
        where.write(stations())
        out = root / "daily"
        per_run = args.rows // args.runs
        # warm-up, untimed: the JVM's first jobs (class loading, code generation) would
        # otherwise be charged to the first run only
        sensors.write(readings(rng, 1_000))
        scratch = root / "warm-up"
        derive(SQL, {"sensors": sensors, "stations": where}, scratch, create=True, spark=spark)
        Dataset.open(scratch).verify(reproduce=True, spark=spark)
        derive_times = []
        for run in range(args.runs):
            sensors.write(readings(rng, per_run))
            started = time.perf_counter()
            result = derive(
                SQL, {"sensors": sensors, "stations": where}, out, create=True, spark=spark
            )
            derive_times.append(time.perf_counter() - started)
            print(
                f"run {run + 1}: {sensors.state.num_records:,} input rows, "
                f"{result.message}: {derive_times[-1]:.2f} s",
                flush=True,
            )
        daily = Dataset.open(out)
        plain, full = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            report = daily.verify()
            plain.append(time.perf_counter() - started)
            assert report.ok, [p.line() for p in report.problems]
            started = time.perf_counter()
            report = daily.verify(reproduce=True, spark=spark)
            full.append(time.perf_counter() - started)
            verdicts = {r.verdict for r in report.runs}
            assert report.ok and verdicts == {"reproduced"}, [r.line() for r in report.runs]
        original = sum(derive_times)
        rerun = statistics.median(full) - statistics.median(plain)
        print(
            f"\n{args.runs} runs over {sensors.state.num_records:,} input rows in the end\n"
            f"original runs (derive)      {original:8.2f} s\n"
            f"re-run (reproduce - verify) {rerun:8.2f} s   (verify alone "
            f"{statistics.median(plain):.2f} s, median of {args.repeat})\n"
            f"ratio re-run / original     {rerun / original:8.2f}x   (bound: 1.3x)"
        )
    finally:
        spark.stop()
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
