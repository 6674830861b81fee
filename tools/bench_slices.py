#!/usr/bin/env python3
"""Benchmark: ``Dataset.to_table`` over many small slices, side by side with pyarrow.dataset
and DuckDB over the same files.

    python tools/bench_slices.py [--slices 16384] [--rows 64] [--runs 7] [--dir PATH]

A dataset of ``--slices`` slices is built once under ``--dir`` (default
``/tmp/bench-slices``; reused by later runs: ``<dir>/slices-<N>.done`` marks it complete) by
``--slices`` calls of ``Dataset.write`` of ``--rows`` generated rows each: every slice its own
AddData, its own transaction, as an hourly ingest leaves a dataset after two years. What a
read of many slices pays on top of the Parquet files is listing them: every AddData up to the
block read, each checked against its hash and linked to the head.

Then, in one process, side by side, alternating after one warm-up read of each (files and
blocks in the page cache):

* ``to_table()``: the slices named at the head, each slice's size and physical hash checked
  (the default), decoded from the bytes checked;
* ``pyarrow.dataset``: ``pads.dataset(files, schema=...).to_table()`` over the same files,
  listed in advance (no check of anything);
* DuckDB: ``read_parquet([...files])`` to Arrow, when ``duckdb`` is installed;
* ``to_table()`` as it was before the bulk listing, from the same
  functions (a walk from the head, block by block: ``replay.slice_blocks_at``; then each
  slice decoded alone), and each listing alone, bulk and walked.

Medians of wall time with ratios to pyarrow.dataset.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
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


def timed(read: Callable[[], pa.Table]) -> tuple[float, int]:
    gc.collect()
    start = time.perf_counter()
    table = read()
    return time.perf_counter() - start, table.num_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=16384)
    parser.add_argument("--rows", type=int, default=64, help="rows per slice")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-slices"))
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
        """to_table() as it was before this change, from the same functions: the slices
        listed by a walk from the head, block by block (replay.slice_blocks_at, kept as the
        fallback), each slice decoded alone (slice_reader.decode) as it arrives checked."""
        state, found = replay.slice_blocks_at(dataset.storage, "head")
        pieces = slice_reader.named_slices(dataset.storage, found)
        arrived = slice_reader._read_ahead(dataset.storage, pieces, "hash")
        return pa.concat_tables(
            [slice_reader.decode(piece, data, state.schema, None, None) for piece, data in arrived]
        )

    cases: dict[str, Callable[[], pa.Table]] = {
        "pyarrow.dataset": lambda: pads.dataset(paths, schema=schema, format="parquet").to_table(),
        "to_table()": lambda: dataset.to_table(),
    }
    if hasattr(replay, "listed_slices_at"):
        cases["before: to_table()"] = before
        cases["listing alone (bulk)"] = lambda: _Rows(replay.listed_slices_at(dataset.storage)[1])
        cases["listing alone (walk)"] = lambda: _Rows(replay.slice_blocks_at(dataset.storage)[1])
    try:
        import duckdb

        listed = "[" + ", ".join(f"'{p}'" for p in paths) + "]"
        connection = duckdb.connect()
        cases["DuckDB read_parquet"] = lambda: connection.sql(
            f"select * from read_parquet({listed})"
        ).to_arrow_table()
    except ImportError:
        print("duckdb is not installed: its row is left out")
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    rows: dict[str, int] = {}
    for read in cases.values():
        timed(read)
    for run in range(args.runs):
        order = list(cases.items())
        if run % 2:
            order.reverse()
        for name, read in order:
            elapsed, rows[name] = timed(read)
            seconds[name].append(elapsed)
        print(
            f"run {run + 1}/{args.runs}: "
            + ", ".join(f"{name} {s[-1]:.3f} s" for name, s in seconds.items()),
            flush=True,
        )
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    floor = medians["pyarrow.dataset"]
    print()
    print(f"{len(paths)} slices, {rows['to_table()']:,} rows, medians of {args.runs} runs")
    print("(listing rows: seconds for the listing alone; the ratio to the whole pyarrow read)")
    print(f"{'':24}{'seconds':>9}{'/ pyarrow.dataset':>19}{'µs / slice':>12}")
    for name, median in medians.items():
        print(f"{name:24}{median:>9.3f}{median / floor:>18.2f}x{median / len(paths) * 1e6:>12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
