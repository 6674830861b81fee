#!/usr/bin/env python3
"""Benchmark: structural verify of a long chain, and data verify against raw BLAKE3 hashing.

    python tools/bench_verify.py [--blocks 100000] [--runs 3] [--slices 16] [--slice-mb 16]
                                 [--dir PATH] [--keep]

Structural part: a chain of a Seed, a SetDataSchema and ``--blocks`` AddData blocks shaped as
a Spark ingest writes them (a slice with logical and physical hashes and its offsets, a
watermark, the source's input file in the extra attributes). It is built quickly: every block
is built and checked by every rule in memory (``chain.prepare``, the append path minus the
durable write), its file written without fsync (a scratch chain; durability is not what is
measured), and refs/head set once at the end. Slices are not written: ``check_data=False``.
The peer is the floor any structural verify pays: reading every block file once and BLAKE3
hashing it, with no decoding and no rules (``os.open``/``os.read`` per file, one thread).
Verify is timed twice: as it runs (a helper process reads a share of the block files and
another judges ExtraAttributes, from 20,000 blocks on) and with both helpers off (one core).

Data part: ``--slices`` Parquet slices of about ``--slice-mb`` MB written by
``Dataset.write``; data verify (``verify(check_data=True)``) minus the structural verify of
the same chain, against the peer ``blake3`` over the same files read in 1 MiB chunks.

Runs are interleaved (peer, verify, peer, verify, ...) and medians printed: the machine is
shared. A chain already in ``--dir`` with ``--keep`` is reused (``--dir D --keep`` twice).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import blake3
import numpy as np
import pyarrow as pa

from odf_chain import chain, walked
from odf_chain.dataset import Dataset
from odf_chain.events import AddData, DataSlice, OffsetInterval
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.state import SOURCE_KEY
from odf_chain.storage import block_pass, open_storage
from odf_chain.verify import verify

ROWS_PER_SLICE = 50_000
HELPER_MIN_FILES, JSON_HELPER_MIN_TEXTS = block_pass.HELPER_MIN_FILES, walked.JSON_HELPER_MIN_TEXTS


def build_chain(root: Path, n: int) -> None:
    """Seed + schema + ``n`` AddData blocks, each checked by the rules before it is written."""
    dataset = Dataset.create(root)
    dataset.set_schema(
        pa.schema(
            [
                ("event_time", pa.timestamp("ms", tz="UTC")),
                ("customer_id", pa.int64()),
                ("product", pa.string()),
                ("amount", pa.float64()),
            ]
        )
    )
    state = dataset.refresh()
    first = state.head
    base = state.system_time  # hourly ingests from the schema on
    blocks = root / "blocks"
    for i in range(n):
        moment = base + timedelta(hours=i)
        event = AddData(
            prev_offset=state.last_offset,
            new_data=DataSlice(
                logical_hash=Multihash.digest(BLAKE3, b"logical %d" % i),
                physical_hash=Multihash.digest(BLAKE3, b"physical %d" % i),
                offset_interval=OffsetInterval(
                    state.next_offset, state.next_offset + ROWS_PER_SLICE - 1
                ),
                size=4_000_000 + i,
            ),
            new_watermark=moment,
            extra={
                SOURCE_KEY: {
                    "format": "parquet",
                    "inputs": [
                        {
                            "uri": f"s3://landing/sales/{moment:%Y/%m/%d/%H}/part-0.parquet",
                            "size": 3_900_000 + i,
                            "hash": str(Multihash.digest(BLAKE3, b"input %d" % i)),
                        }
                    ],
                }
            },
        )
        prepared = chain.prepare(state, event, system_time=moment + timedelta(minutes=5))
        (blocks / str(prepared.entry.hash)).write_bytes(prepared.data)
        state = prepared.after
    open_storage(root).compare_and_swap_head(str(first), str(state.head))


def build_data(root: Path, slices: int, slice_mb: int) -> None:
    """``slices`` Parquet slices of about ``slice_mb`` MB of incompressible numbers."""
    dataset = Dataset.create(root)
    rows = slice_mb * (1 << 20) // 16
    rng = np.random.default_rng(7)
    for _ in range(slices):
        dataset.write(
            pa.table(
                {
                    "a": pa.array(rng.integers(0, 2**62, rows)),
                    "b": pa.array(rng.random(rows)),
                }
            )
        )


def peer_blocks(root: Path) -> float:
    """Read + BLAKE3 every block file: the floor of any structural verify."""
    start = time.perf_counter()
    directory = root / "blocks"
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(dir_fd):
            fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
            try:
                blake3.blake3(os.read(fd, 1 << 16)).digest()
            finally:
                os.close(fd)
    finally:
        os.close(dir_fd)
    return time.perf_counter() - start


def peer_data(root: Path) -> tuple[float, int]:
    """BLAKE3 of every slice file, read in 1 MiB chunks (what any data verify must do)."""
    start = time.perf_counter()
    total = 0
    for path in sorted((root / "data").iterdir()):
        hasher = blake3.blake3()
        with path.open("rb", buffering=0) as fh:
            while chunk := fh.read(1 << 20):
                hasher.update(chunk)
                total += len(chunk)
        hasher.digest()
    return time.perf_counter() - start, total


def timed_verify(root: Path, *, check_data: bool, helpers: bool = True) -> tuple[float, int]:
    block_pass.HELPER_MIN_FILES = HELPER_MIN_FILES if helpers else 1 << 62
    walked.JSON_HELPER_MIN_TEXTS = JSON_HELPER_MIN_TEXTS if helpers else 1 << 62
    start = time.perf_counter()
    report = verify(open_storage(root), check_data=check_data)
    elapsed = time.perf_counter() - start
    if not report.ok:
        raise SystemExit(f"verify failed on the benchmark chain: {report.errors[:3]}")
    return elapsed, report.blocks_checked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slices", type=int, default=16)
    parser.add_argument("--slice-mb", type=int, default=16)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the chains")
    args = parser.parse_args()
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="odf-bench-verify-"))
    scratch.mkdir(parents=True, exist_ok=True)
    chain_root = scratch / f"chain-{args.blocks}"
    data_root = scratch / f"data-{args.slices}x{args.slice_mb}"
    try:
        for root, build in (
            (chain_root, lambda r: build_chain(r, args.blocks)),
            (data_root, lambda r: build_data(r, args.slices, args.slice_mb)),
        ):
            done = root.with_name(root.name + ".done")  # beside the dataset, not in it
            if not done.exists():
                shutil.rmtree(root, ignore_errors=True)
                start = time.perf_counter()
                build(root)
                print(f"built {root.name} in {time.perf_counter() - start:.1f} s")
                done.touch()

        peer_s, verify_s, alone_s = [], [], []
        blocks = 0
        for _ in range(args.runs):
            peer_s.append(peer_blocks(chain_root))
            elapsed, blocks = timed_verify(chain_root, check_data=False)
            verify_s.append(elapsed)
            alone_s.append(timed_verify(chain_root, check_data=False, helpers=False)[0])
        peer, ours = statistics.median(peer_s), statistics.median(verify_s)
        alone = statistics.median(alone_s)
        print(f"structural verify, {blocks:,} blocks, median of {args.runs}:")
        print(f"  verify(check_data=False)  {ours:7.3f} s  {blocks / ours:10,.0f} blocks/s")
        print(f"  the same, helpers off     {alone:7.3f} s  {blocks / alone:10,.0f} blocks/s")
        print(f"  peer read+BLAKE3 blocks   {peer:7.3f} s  {blocks / peer:10,.0f} blocks/s")
        print(f"  verify / peer time        {ours / peer:7.2f}x (helpers off: {alone / peer:.2f}x)")

        raw_s, data_s = [], []
        size = 0
        for _ in range(args.runs):
            raw, size = peer_data(data_root)
            raw_s.append(raw)
            with_data, _ = timed_verify(data_root, check_data=True)
            structural, _ = timed_verify(data_root, check_data=False)
            data_s.append(with_data - structural)
        raw, ours = statistics.median(raw_s), statistics.median(data_s)
        mb = size / 1e6
        print(f"data verify, {args.slices} slices, {mb:,.0f} MB, median of {args.runs}:")
        print(f"  verify data part          {ours:7.3f} s  {mb / ours:8,.0f} MB/s")
        print(f"  peer blake3 of the files  {raw:7.3f} s  {mb / raw:8,.0f} MB/s")
        print(f"  throughput ratio          {raw / ours:7.2f}x of raw BLAKE3")
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
