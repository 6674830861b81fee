#!/usr/bin/env python3
"""Benchmark: ``Dataset.write`` beside ``pyarrow.parquet.write_table``, and wide writes.

    python tools/bench_write.py [--gb 1.0] [--runs 3] [--columns 20000] [--dir PATH]

Two cases, each against its own yardstick, run side by side in one run:

* **big**: a table of about ``--gb`` GB of Arrow memory (ints, floats, a timestamp, strings
  with nulls, a dictionary column) written by ``Dataset.write`` (system columns, logical and
  physical hashes, staged file fsynced and renamed, blocks, head) and by ``pq.write_table``
  with the same codec (zstd) to a plain file on the same disk. Time is the write call alone.
* **wide**: a table of ``--columns`` int64 columns and 10 rows, written twice to a fresh
  dataset: the second write lays the table out like the schema in force (``slice_schema``),
  which used to be quadratic in the column count; the yardstick is the first write.

The big table is generated once and saved as an Arrow IPC file. Each measurement runs in a
fresh process started with ``spawn``, which reads that file (exactly the table's buffers, no
temporaries: the allocator holds no freed memory that the write could reuse unseen), writes
its first 1,000 rows the same way as a warm-up (the first use of a code path costs memory once:
code pages, allocator arenas, a thread; ~45 MB of RSS for ``Dataset.write``), resets
the kernel's RSS high-water mark (``/proc/self/clear_refs``, 5), writes, and reads ``VmHWM``
from ``/proc/self/status``: peak extra memory = high-water mark - RSS before the write, as the
kernel counts it (pyarrow's pool, Python, the writer's threads). pyarrow's own pool peak
(``max_memory()`` after the write - ``bytes_allocated()`` before it; the peak before the write,
the warm-up's, must be within 16 MB of what is allocated, else the run fails) is printed
beside it. The cases alternate (ours, peer, wide, ours, peer, wide, ...) and medians are
printed with their ratios.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from queue import Empty

MB = 1 << 20


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak() -> int:
    """Reset the RSS high-water mark to the current RSS; return that RSS in bytes."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status_kb("VmRSS") * 1024


def _peak() -> int:
    return _status_kb("VmHWM") * 1024


def big_table(gigabytes: float):
    """About ``gigabytes`` GB of Arrow memory, built column by column with numpy (no peak
    above the table itself), the same for every process (fixed seed)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = int(gigabytes * 1e9 / 49)  # 8+8+8+4+8 bytes, ~9 of strings and offsets, 4 of dict
    rng = np.random.default_rng(7)
    ids = np.arange(rows, dtype=np.int64)
    codes = rng.integers(0, 1000, rows, dtype=np.int64)
    strings = pc.binary_join_element_wise("k-", pc.cast(pa.array(codes), pa.string()), "")
    strings = pc.if_else(pa.array(codes % 10 == 0), pa.scalar(None, pa.string()), strings)
    return pa.table(
        {
            "id": ids,
            "amount": rng.random(rows) * 1000,
            "score": rng.normal(size=rows),
            "bucket": pa.array(codes.astype(np.int32)),
            "event_time": pa.array(1_700_000_000_000 + ids * 1000, pa.timestamp("ms", tz="UTC")),
            "label": strings,
            "kind": pa.DictionaryArray.from_arrays(
                pa.array((codes % 4).astype(np.int32)), pa.array(["a", "b", "c", "d"])
            ),
        }
    )


def wide_table(columns: int):
    import pyarrow as pa

    return pa.table({f"c{i}": pa.array(range(i, i + 10), pa.int64()) for i in range(columns)})


def save_big_table(gigabytes: float, path: Path) -> None:
    import pyarrow as pa

    table = big_table(gigabytes)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=1 << 20)


def _run_case(case: str, size: float | str, where: str, queue) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from odf_chain import Dataset

    root = Path(where)
    if case == "wide":
        table = wide_table(int(size))
        dataset = Dataset.create(root / "ds")
        start = time.perf_counter()
        dataset.write(table)
        first = time.perf_counter() - start
        start = time.perf_counter()
        dataset.write(table)
        second = time.perf_counter() - start
        queue.put({"first": first, "second": second})
        return
    with pa.OSFile(str(size)) as source:
        table = pa.ipc.open_file(source).read_all()
    dataset = Dataset.create(root / "ds") if case == "odf" else None
    # warm-up: the first use of a code path costs memory once (code pages, allocator arenas,
    # the hashing thread), ~45 MB of RSS for Dataset.write; each writer writes 1,000 rows first
    if dataset is not None:
        Dataset.create(root / "warm-up").write(table.slice(0, 1000))
    else:
        pq.write_table(table.slice(0, 1000), root / "warm-up.parquet", compression="zstd")
    pool = pa.default_memory_pool()
    pool_before = pool.bytes_allocated()
    if pool.max_memory() - pool_before > 16 * MB:  # then the write's peak could hide below it
        raise RuntimeError(
            f"reading the table left a pool peak above it ({pool.max_memory()} > {pool_before})"
        )
    before = _reset_peak()
    start = time.perf_counter()
    if dataset is not None:
        dataset.write(table)
    else:
        pq.write_table(table, root / "peer.parquet", compression="zstd")
    seconds = time.perf_counter() - start
    queue.put(
        {
            "seconds": seconds,
            "extra": _peak() - before,
            "pool": pool.max_memory() - pool_before,
            "bytes": table.nbytes,
            "rows": len(table),
        }
    )


def measure(case: str, size: float | str, parent: Path) -> dict:
    """One measurement in a fresh spawned process, in a fresh folder under ``parent``."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    where = tempfile.mkdtemp(dir=parent)
    try:
        process = ctx.Process(target=_run_case, args=(case, size, where, queue))
        process.start()
        deadline = time.monotonic() + 1800
        while True:  # a child that dies puts nothing: do not wait for it forever
            try:
                result = queue.get(timeout=5)
                break
            except Empty:
                if not process.is_alive() or time.monotonic() > deadline:
                    process.kill()
                    raise RuntimeError(
                        f"{case} run failed (exit code {process.exitcode})"
                    ) from None
        process.join(timeout=120)
        if process.exitcode != 0:
            raise RuntimeError(f"{case} run failed (exit code {process.exitcode})")
        return result
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="size of the big table")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs per case")
    parser.add_argument("--columns", type=int, default=20_000, help="width of the wide table")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    args = parser.parse_args()
    parent = Path(tempfile.mkdtemp(prefix="bench-write-", dir=args.dir))
    try:
        ours: list[dict] = []
        peer: list[dict] = []
        wide: list[dict] = []
        source = parent / "big.arrow"
        save_big_table(args.gb, source)
        for run in range(args.runs):
            for name, results, case, size in (
                ("Dataset.write", ours, "odf", str(source)),
                ("pq.write_table", peer, "peer", str(source)),
                ("wide", wide, "wide", args.columns),
            ):
                results.append(measure(case, size, parent))
                print(f"run {run + 1}/{args.runs} {name}: {results[-1]}", flush=True)
    finally:
        shutil.rmtree(parent, ignore_errors=True)

    def med(results: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in results)

    rows, nbytes = ours[0]["rows"], ours[0]["bytes"]
    print()
    print(
        f"big table: {rows:,} rows, {nbytes / 1e9:.2f} GB in Arrow memory, zstd, "
        f"medians of {args.runs} interleaved runs"
    )
    print(f"{'':16}{'seconds':>10}{'RSS extra MB':>14}{'pool peak MB':>14}")
    for name, results in (("Dataset.write", ours), ("pq.write_table", peer)):
        print(
            f"{name:16}{med(results, 'seconds'):>10.2f}{med(results, 'extra') / MB:>14.0f}"
            f"{med(results, 'pool') / MB:>14.0f}"
        )
    print(
        f"{'ratio':16}{med(ours, 'seconds') / med(peer, 'seconds'):>9.2f}x"
        f"{med(ours, 'extra') / med(peer, 'extra'):>13.2f}x"
        f"{med(ours, 'pool') / med(peer, 'pool'):>13.2f}x   (targets: <= 1.3x, <= 2x)"
    )
    print()
    print(f"wide table: {args.columns:,} columns, 10 rows, medians of {args.runs} runs")
    first, second = med(wide, "first"), med(wide, "second")
    print(
        f"first write {first:.2f} s, second write {second:.2f} s, ratio {second / first:.2f}x"
        "   (target: <= 1.5x)"
    )


if __name__ == "__main__":
    main()
