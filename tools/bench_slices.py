#!/usr/bin/env python3
"""Benchmark: ``Dataset.to_table`` over many small slices, side by side with pyarrow.dataset
and DuckDB over the same files.

    python tools/bench_slices.py [--slices 16384] [--rows 64] [--runs 7] [--dir PATH]
        [--threads 2,3] [--core]

A dataset of ``--slices`` slices is built once under ``--dir`` (default
``/tmp/bench-slices``; reused by later runs: ``<dir>/slices-<N>.done`` marks it complete) by
``--slices`` calls of ``Dataset.write`` of ``--rows`` generated rows each: every slice its own
AddData, its own transaction, as an hourly ingest leaves a dataset after two years. What a
read of many slices pays on top of the Parquet files is listing them: every AddData up to the
block read, each checked against its hash and linked to the head.

Then, in one process, side by side, alternating after one warm-up read of each (files and
blocks in the page cache):

* ``to_table()``: the slices named at the head, each slice's size and physical hash checked
  (the default), decoded from the bytes checked, in its default threads
  (``slice_reader.READ_THREADS``), and ``to_table(threads=N)`` for each N of ``--threads``;
* ``pyarrow.dataset``: ``pads.dataset(files, schema=...).to_table()`` over the same files,
  listed in advance (no check of anything);
* DuckDB: ``read_parquet([...files])`` to Arrow, when ``duckdb`` is installed;
* ``before``: the reader as it was before issue 25's turn on decoding, rebuilt here from the
  same functions (the bulk listing; each slice read and checked one ahead in one thread and
  decoded alone through a pyarrow.dataset fragment in the caller's thread), and each listing
  alone, bulk and walked.

Medians of wall time with ratios to pyarrow.dataset, and the CPU time of the process (all
threads) beside it: on a machine shared with other jobs, the CPU a read spends is what it
costs when the cores are taken.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads

from odf_chain import replay, slice_reader
from odf_chain.dataset import Dataset


class _Rows:
    """A listing standing in for a table: its length as num_rows."""

    def __init__(self, found: list) -> None:
        self.num_rows = len(found)


def build(root: Path, slices: int, rows: int) -> None:
    rng = np.random.default_rng(7)
    dataset = Dataset.create(root)
    started = time.perf_counter()
    for i in range(slices):
        ids = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        dataset.write(
            pa.table(
                {
                    "id": ids,
                    "amount": np.round(rng.random(rows) * 1000, 2),
                    "station": pa.array([f"s-{k % 50}" for k in ids.tolist()]),
                }
            )
        )
        if (i + 1) % 1024 == 0:
            elapsed = time.perf_counter() - started
            print(f"  {i + 1}/{slices} slices written, {elapsed:.0f} s", flush=True)


def timed(read: Callable[[], pa.Table]) -> tuple[float, float, int]:
    """Wall and CPU seconds (all the process's threads) of one read, and its rows."""
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    table = read()
    return time.perf_counter() - start, time.process_time() - cpu, table.num_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=16384)
    parser.add_argument("--rows", type=int, default=64, help="rows per slice")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-slices"))
    parser.add_argument(
        "--threads",
        type=lambda v: [int(n) for n in v.split(",") if n],
        default=[2, 3],
        help="to_table(threads=N) rows beside the default's (comma-separated; '' for none)",
    )
    parser.add_argument(
        "--core",
        action="store_true",
        help="only pyarrow.dataset and the to_table rows (more runs in the same time)",
    )
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    root = args.dir / f"slices-{args.slices}"
    done = root.with_name(root.name + ".done")
    if not done.exists():
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        start = time.perf_counter()
        build(root, args.slices, args.rows)
        print(f"built {root.name} in {time.perf_counter() - start:.1f} s", flush=True)
        done.touch()
    dataset = Dataset.open(root)
    schema = dataset.state.schema
    paths = sorted(str(p) for p in (root / "data").iterdir())

    def before() -> pa.Table:
        """to_table() as it was before the decoding turn, from the same functions: the bulk
        listing, each slice read and checked one ahead in one thread (slice_reader.read_slice),
        decoded alone through a pyarrow.dataset fragment (as slice_reader.Decoder does for a
        slice of an older schema) in the calling thread."""
        state, found = replay.listed_slices_at(dataset.storage, "head")
        pieces = slice_reader.named_listing(dataset.storage, found)
        parquet = pads.ParquetFileFormat()
        tables = []
        with ThreadPoolExecutor(1) as pool:
            ahead = pool.submit(slice_reader.read_slice, dataset.storage, pieces[0], "hash")
            for following in [*pieces[1:], None]:
                data = ahead.result()
                if following is not None:
                    ahead = pool.submit(slice_reader.read_slice, dataset.storage, following, "hash")
                fragment = parquet.make_fragment(pa.BufferReader(data))
                tables.append(fragment.to_table(schema=state.schema))
        return pa.concat_tables(tables)

    cases: dict[str, Callable[[], pa.Table]] = {
        "pyarrow.dataset": lambda: pads.dataset(paths, schema=schema, format="parquet").to_table(),
        "to_table()": lambda: dataset.to_table(),
    }
    for threads in args.threads:
        cases[f"to_table(threads={threads})"] = lambda t=threads: dataset.to_table(threads=t)
    if not args.core:
        cases["before: to_table()"] = before
        cases["listing alone (bulk)"] = lambda: _Rows(replay.listed_slices_at(dataset.storage)[1])
        cases["listing alone (walk)"] = lambda: _Rows(replay.slice_blocks_at(dataset.storage)[1])
    try:
        import duckdb
    except ImportError:
        print("duckdb is not installed: its row is left out")
        duckdb = None
    if duckdb is not None and not args.core:
        listed = "[" + ", ".join(f"'{p}'" for p in paths) + "]"
        connection = duckdb.connect()
        cases["DuckDB read_parquet"] = lambda: connection.sql(
            f"select * from read_parquet({listed})"
        ).to_arrow_table()
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    rows: dict[str, int] = {}
    for read in cases.values():
        timed(read)
    for run in range(args.runs):
        order = list(cases.items())
        if run % 2:
            order.reverse()
        for name, read in order:
            elapsed, used, rows[name] = timed(read)
            seconds[name].append(elapsed)
            cpu[name].append(used)
        print(
            f"run {run + 1}/{args.runs}: "
            + ", ".join(f"{name} {s[-1]:.3f} s" for name, s in seconds.items()),
            flush=True,
        )
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    cpu_medians = {name: statistics.median(s) for name, s in cpu.items()}
    floor, cpu_floor = medians["pyarrow.dataset"], cpu_medians["pyarrow.dataset"]
    mismatched = [n for n, r in rows.items() if r != rows["pyarrow.dataset"] and "listing" not in n]
    if mismatched:
        print(f"rows differ from pyarrow.dataset's: {mismatched}")
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    print()
    print(f"{len(paths)} slices, {rows['to_table()']:,} rows, medians of {args.runs} runs")
    print(f"load average at the end: {load} ({os.cpu_count()} CPUs)")
    print("(listing rows: seconds for the listing alone; the ratio to the whole pyarrow read)")
    print(f"{'':24}{'seconds':>9}{'/ pyarrow':>11}{'µs / slice':>12}{'CPU s':>8}{'/ pyarrow':>11}")
    for name, median in medians.items():
        used = cpu_medians[name]
        print(
            f"{name:24}{median:>9.3f}{median / floor:>10.2f}x{median / len(paths) * 1e6:>12.1f}"
            f"{used:>8.3f}{used / cpu_floor:>10.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
