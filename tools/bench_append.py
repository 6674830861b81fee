#!/usr/bin/env python3
"""Benchmark: append N small blocks, then replay and verify the chain.

    python tools/bench_append.py [--blocks 10000] [--dir PATH]

It also times each append with the derived index kept beside the same append with the index
update switched off, interleaved, and prints p50/p90 of both and their ratio.

Each append is a real one: build, encode, hash, check every rule, write the block file (staged,
fsynced, renamed, directory fsynced) and move the head under the lock (written the same way).
The peer, run side by side in the same process on the same disk, is the floor any durable
append must pay: the same number of plain "write a small file durably" operations (two per
block: the block and the head). Results are reported as ratios to that floor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from odf_chain import AddData, Dataset, SourceState
from odf_chain.verify import verify_path


def durable_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def bench_floor(root: Path, n: int, block_size: int) -> float:
    root.mkdir(parents=True)
    payload = os.urandom(block_size)
    start = time.perf_counter()
    for i in range(n):
        durable_write(root / f"block{i}", payload)
        durable_write(root / "head", str(i).encode())
    return time.perf_counter() - start


def bench_chain(root: Path, n: int) -> tuple[float, int]:
    dataset = Dataset.create(root)
    start = time.perf_counter()
    for i in range(n):
        dataset.append(_add_data(i))
    elapsed = time.perf_counter() - start
    sizes = [p.stat().st_size for p in (root / "blocks").iterdir()]
    return elapsed, sum(sizes) // len(sizes)


def _add_data(i: int) -> AddData:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    return AddData(
        new_watermark=base + timedelta(seconds=i),
        new_source_state=SourceState("poll", "odf/etag", f"etag-{i}"),
    )


def bench_index_cost(root: Path, n: int, chunk: int = 250) -> dict[str, list[float]]:
    """Per-append latency with the derived index kept (what ships) beside the same append with
    its index update switched off (the append before the index), interleaved chunk by chunk
    in one process so that load and disk state hit both alike."""
    from odf_chain.index import update

    kept = Dataset.create(root / "with-index")
    bare = Dataset.create(root / "without-index")
    samples: dict[str, list[float]] = {"with index": [], "without index": []}
    real = update.record_commit
    done = 0
    while done < n:
        for name, dataset, record in (
            ("with index", kept, real),
            ("without index", bare, lambda *_: True),  # "recorded": the hook repairs nothing
        ):
            update.record_commit = record  # what the transaction's post-commit hook calls
            try:
                for i in range(done, min(done + chunk, n)):
                    start = time.perf_counter()
                    dataset.append(_add_data(i))
                    samples[name].append(time.perf_counter() - start)
            finally:
                update.record_commit = real
        done += chunk
    return samples


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: tmp)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="odf-bench-", dir=args.dir))
    try:
        n = args.blocks
        chain_s, block_size = bench_chain(scratch / "dataset", n)
        floor_s = bench_floor(scratch / "floor", n, block_size)

        start = time.perf_counter()
        state = Dataset.open(scratch / "dataset").state
        replay_s = time.perf_counter() - start
        start = time.perf_counter()
        report = verify_path(scratch / "dataset")
        verify_s = time.perf_counter() - start
        assert report.ok and state.sequence_number == n, "benchmark chain did not verify"

        print(f"blocks appended        {n:,} (mean stored size {block_size} bytes)")
        print(
            f"append                 {chain_s:8.2f} s  {n / chain_s:8.0f} blocks/s  "
            f"{chain_s / n * 1e3:6.2f} ms/block"
        )
        print(
            f"floor (2 durable writes per block)  {floor_s:8.2f} s  "
            f"{floor_s / n * 1e3:6.2f} ms/block"
        )
        print(f"append / floor         {chain_s / floor_s:8.2f}x")
        print(f"replay {n:,} blocks      {replay_s:8.2f} s")
        print(f"verify {n:,} blocks      {verify_s:8.2f} s")
        samples = bench_index_cost(scratch / "index", n)
        p50 = {k: _quantile(v, 0.5) for k, v in samples.items()}
        for name, values in samples.items():
            print(
                f"append {name:<14} p50 {p50[name] * 1e3:6.2f} ms  "
                f"p90 {_quantile(values, 0.9) * 1e3:6.2f} ms  ({len(values):,} appends)"
            )
        print(f"append p50 with / without index  {p50['with index'] / p50['without index']:.2f}x")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
