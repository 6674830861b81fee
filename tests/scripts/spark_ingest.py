"""A real ingest in a process of its own, for tests/test_spark_crash.py to kill or to race.

    python tests/scripts/spark_ingest.py DATASET --start S --rows N --partitions P --tag T
        [--ready FILE --go FILE] [--pause-after-rename SECONDS] [--pause-after-head-move S]

Starts a local SparkSession, builds ``spark.range(S, S + N)`` in P partitions with the columns
``id``, ``v`` (= 3 * id) and ``tag`` (= T), and appends it with :func:`odf_chain.spark.write`.
With ``--ready``/``--go`` it touches FILE once Spark is up and waits for the go file before
writing, so that two processes can start their writes together. ``--pause-after-rename`` sleeps
after each slice is renamed into ``data/`` (the real rename, then a pause; odf_chain itself is
not changed), so that a parent watching ``data/`` can kill the process between the renames and
the head move however fast the disk is. ``--pause-after-head-move`` sleeps right after the head
moved, so that the parent can kill the process once the transaction is committed but before
the writer has cleaned up after itself.

Prints a JSON summary on stdout and exits 0 on success; prints ``ConflictError: ...`` on stderr
and exits 3 when another writer moved the head first; any other failure is a traceback, exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

EXIT_CONFLICT = 3


def session(work: Path):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # stay on loopback
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("odf_chain-crash-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        .config("spark.local.dir", str(work / "spark-local"))
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dataset")
    parser.add_argument("--start", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--tag", default="child")
    parser.add_argument("--work", default=None, help="scratch folder (default: next to DATASET)")
    parser.add_argument("--ready", default=None)
    parser.add_argument("--go", default=None)
    parser.add_argument("--pause-after-rename", type=float, default=0.0)
    parser.add_argument("--pause-after-head-move", type=float, default=0.0)
    args = parser.parse_args()

    work = Path(args.work or f"{args.dataset}.{args.tag}.work")
    work.mkdir(parents=True, exist_ok=True)
    spark = session(work)
    try:
        from pyspark.sql import functions as F

        from odf_chain.errors import ConflictError
        from odf_chain.spark import write

        df = spark.range(args.start, args.start + args.rows, numPartitions=args.partitions).select(
            F.col("id"), (F.col("id") * 3).alias("v"), F.lit(args.tag).alias("tag")
        )
        if args.pause_after_rename:
            from odf_chain.storage import LocalStorage

            commit_data = LocalStorage.commit_data

            def commit_then_pause(self, staged, name, size=None):
                done = commit_data(self, staged, name, size)
                time.sleep(args.pause_after_rename)
                return done

            LocalStorage.commit_data = commit_then_pause
        if args.pause_after_head_move:
            from odf_chain.storage import LocalStorage

            move_head = LocalStorage.compare_and_swap_head

            def move_then_pause(self, expected, new, **options):
                move_head(self, expected, new, **options)
                time.sleep(args.pause_after_head_move)

            LocalStorage.compare_and_swap_head = move_then_pause
        if args.ready:
            Path(args.ready).touch()
        if args.go:
            deadline = time.monotonic() + 120
            while not Path(args.go).exists():
                if time.monotonic() > deadline:
                    print("no go signal", file=sys.stderr)
                    return 2
                time.sleep(0.005)
        try:
            result = write(df, args.dataset, source={"writer": args.tag}, target_slice_bytes=None)
        except ConflictError as exc:
            print(f"ConflictError: {exc}", file=sys.stderr, flush=True)
            return EXIT_CONFLICT
        summary = {
            "rows": result.rows,
            "slices": result.slices,
            "head": str(result.head),
            "blocks": [str(b.hash) for b in result.blocks],
            "timings": result.timings,
        }
        print(json.dumps(summary), flush=True)
        return 0
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
