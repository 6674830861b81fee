#!/usr/bin/env python3
"""Benchmark: ``Dataset.to_table`` checked against unchecked, and ``pq.read_table`` as floor.

    python tools/bench_read.py [--gb 1.0] [--slice-mb 64] [--runs 5] [--quick]
                               [--dir PATH] [--keep]

A dataset of about ``--gb`` GB of Parquet slices is written by ``Dataset.write(...,
target_slice_bytes=--slice-mb MB)`` from generated rows, a realistic mix: a sequential id, a
customer id of a million values, an amount (float64) and a score (float32), a country of 60
values and a status of 5 (low-cardinality strings), a session token of mostly distinct values
and a free-text note with nulls (high-cardinality strings), an event time.

Then, in one process, side by side, alternating (floor, unchecked, checked, size, floor, ...)
after a warm-up read of each (the files in the page cache, as after the write):

* ``to_table(check="hash")``: each slice read once, its size and physical hash checked,
  decoded from the same bytes (the default);
* ``to_table(check=None)``: read and decoded the same way, nothing checked;
* ``to_table(check="size")``: the size only;
* ``pq.read_table`` over the same files: what pyarrow alone pays to read them.

Medians of wall time and of the process's CPU time (every thread) are printed with the ratios:
on a shared machine the CPU time is the steadier of the two. The bound: checked <= 1.15x
unchecked. ``--quick``: a
0.1 GB dataset, 3 runs. A dataset already in ``--dir`` with ``--keep`` is reused.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from odf_chain.dataset import Dataset

CHUNK_ROWS = 4 << 20  # rows per Dataset.write: four row groups
COUNTRIES = [f"country-{i:02d}" for i in range(60)]
STATUSES = ["new", "paid", "shipped", "returned", "cancelled"]


def chunk(rng: np.random.Generator, start: int, rows: int) -> pa.Table:
    """``rows`` generated rows, ids from ``start``."""
    ids = np.arange(start, start + rows, dtype=np.int64)
    tokens = pc.binary_join_element_wise(
        "s-", pc.cast(pa.array(rng.integers(0, 1 << 62, rows)), pa.string()), ""
    )
    words = pc.cast(pa.array(rng.integers(0, 200_000, rows)), pa.string())
    notes = pc.binary_join_element_wise("note about item ", words, "")
    notes = pc.if_else(pa.array(rng.random(rows) < 0.3), pa.scalar(None, pa.string()), notes)
    return pa.table(
        {
            "id": ids,
            "customer": rng.integers(0, 1_000_000, rows),
            "amount": np.round(rng.random(rows) * 1000, 2),
            "score": rng.normal(size=rows).astype(np.float32),
            "country": pa.array(COUNTRIES).take(pa.array(rng.integers(0, 60, rows))),
            "status": pa.array(STATUSES).take(pa.array(rng.integers(0, 5, rows))),
            "session": tokens,
            "note": notes,
            "event_time": pa.array(1_700_000_000_000 + ids * 10, pa.timestamp("ms", tz="UTC")),
        }
    )


def data_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "data").iterdir())


def build(root: Path, gigabytes: float, slice_mb: int) -> None:
    """Write chunks until the slices hold ``gigabytes`` GB."""
    dataset = Dataset.create(root)
    rng = np.random.default_rng(7)
    start = 0
    while data_bytes(root) < gigabytes * 1e9:
        dataset.write(chunk(rng, start, CHUNK_ROWS), target_slice_bytes=slice_mb << 20)
        start += CHUNK_ROWS


def timed(read: Callable[[], pa.Table]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of the process (every thread) and the rows read."""
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    table = read()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    rows = table.num_rows
    del table
    return seconds, cpu, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="Parquet bytes of the dataset")
    parser.add_argument("--slice-mb", type=int, default=64, help="target_slice_bytes in MiB")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="0.1 GB, 3 runs")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the dataset")
    args = parser.parse_args()
    if args.quick:
        args.gb, args.runs, args.slice_mb = 0.1, 3, min(args.slice_mb, 16)
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="odf-bench-read-"))
    scratch.mkdir(parents=True, exist_ok=True)
    root = scratch / f"read-{args.gb:g}gb-{args.slice_mb}mb"
    try:
        done = root.with_name(root.name + ".done")
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            start = time.perf_counter()
            build(root, args.gb, args.slice_mb)
            print(f"built {root.name} in {time.perf_counter() - start:.1f} s", flush=True)
            done.touch()
        dataset = Dataset.open(root)
        paths = [str(p) for p in sorted((root / "data").iterdir())]
        size = data_bytes(root)
        cases: dict[str, Callable[[], pa.Table]] = {
            "pq.read_table": lambda: pq.read_table(paths),
            "to_table(check=None)": lambda: dataset.to_table(check=None),
            'to_table(check="size")': lambda: dataset.to_table(check="size"),
            'to_table(check="hash")': lambda: dataset.to_table(),
        }
        seconds: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        rows = 0
        for read in cases.values():  # warm-up: page cache, allocator, thread pools
            timed(read)
        for run in range(args.runs):
            for name, read in cases.items():
                elapsed, used, rows = timed(read)
                seconds[name].append(elapsed)
                cpu[name].append(used)
            print(
                f"run {run + 1}/{args.runs}: "
                + ", ".join(
                    f"{name} {s[-1]:.2f} s ({cpu[name][-1]:.2f} CPU)" for name, s in seconds.items()
                ),
                flush=True,
            )
        medians = {name: statistics.median(s) for name, s in seconds.items()}
        cpu_medians = {name: statistics.median(s) for name, s in cpu.items()}
        floor, unchecked = medians["pq.read_table"], medians["to_table(check=None)"]
        unchecked_cpu = cpu_medians["to_table(check=None)"]
        print()
        print(
            f"{len(paths)} slices, {size / 1e9:.2f} GB of Parquet, {rows:,} rows, "
            f"medians of {args.runs} alternating runs"
        )
        print(
            f"{'':26}{'seconds':>9}{'MB/s':>8}{'/ unchecked':>13}{'/ pq.read_table':>17}"
            f"{'CPU s':>8}{'/ unchecked':>13}"
        )
        for name, median in medians.items():
            print(
                f"{name:26}{median:>9.2f}{size / 1e6 / median:>8,.0f}"
                f"{median / unchecked:>12.2f}x{median / floor:>16.2f}x"
                f"{cpu_medians[name]:>8.2f}{cpu_medians[name] / unchecked_cpu:>12.2f}x"
            )
        checked = 'to_table(check="hash")'
        print(
            f"checked / unchecked: {medians[checked] / unchecked:.2f}x wall, "
            f"{cpu_medians[checked] / unchecked_cpu:.2f}x CPU (bound: <= 1.15x)"
        )
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
