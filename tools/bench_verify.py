#!/usr/bin/env python3
"""Benchmark: structural verify and index rebuild of a long chain (time and memory), and data
verify, each against raw BLAKE3 hashing.

    python tools/bench_verify.py [--blocks 100000] [--runs 3] [--slices 16] [--slice-mb 16]
                                 [--dir PATH] [--keep] [--quick [--slice-less K]]
                                 [--chain DIR] [--no-data]

``--quick`` builds the chain with ``tools/quick_chain.py`` (a few microseconds a block: the way
to ten million), with ``--slice-less K`` blocks without a slice after each one with a slice (the
chain of a polling ingest that mostly finds nothing new); ``--chain DIR`` measures a chain
already built. Verify and the rebuild each run in a fresh process (so no cache of an earlier run
helps, and its memory is its own); their time is taken inside it around the call, and their
memory is the peak of the resident set size summed over the process and its helper processes,
sampled every 20 ms from outside. The rebuild first deletes the index (``info/odf-chain-index``)
and then rebuilds and saves it, as ``odf-chain index DIR`` does on a dataset copied without it.

Structural part: a chain of a Seed, a SetDataSchema and ``--blocks`` AddData blocks shaped as
a Spark ingest writes them (a slice with logical and physical hashes and its offsets, a
watermark, the source's input file in the extra attributes). It is built quickly: every block
is built and checked by every rule in memory (``chain.prepare``, the append path minus the
durable write), its file written without fsync (a scratch chain; durability is not what is
measured), and refs/head set once at the end. Slices are not written: ``check_data=False``.
The peer is the floor any structural verify pays: reading every block file once and BLAKE3
hashing it, with no decoding and no rules (``os.open``/``os.read`` per file, one thread, in
inode order as verify reads them: on a cold cache the order is most of the time).
Verify is timed twice: as it runs (from 20,000 blocks on a helper process reads, decodes and
judges a share of the block files) and with the helper off (one core).

Data part: ``--slices`` Parquet slices of about ``--slice-mb`` MB written by
``Dataset.write``; data verify (``verify(check_data=True)``) minus the structural verify of
the same chain, against the peer ``blake3`` over the same files read in 1 MiB chunks.

Runs are interleaved (peer, verify, rebuild, peer, verify, rebuild, ...) and medians printed:
the machine is shared. A chain already in ``--dir`` with ``--keep`` is reused (``--dir D
--keep`` twice).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import blake3
import numpy as np
import pyarrow as pa

from odf_chain import chain
from odf_chain.dataset import Dataset
from odf_chain.events import AddData, DataSlice, OffsetInterval
from odf_chain.format.multihash import BLAKE3, Multihash
from odf_chain.state import SOURCE_KEY
from odf_chain.storage import block_pass, open_storage
from odf_chain.verify import verify

ROWS_PER_SLICE = 50_000
HELPER_MIN_FILES = block_pass.HELPER_MIN_FILES


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


def _build(root: Path, args: argparse.Namespace) -> None:
    if args.quick:
        sys.path.insert(0, str(Path(__file__).parent))
        import quick_chain

        quick_chain.build(root, args.blocks, slice_less=args.slice_less)
    else:
        build_chain(root, args.blocks)


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
        with os.scandir(dir_fd) as entries:  # in inode order, as verify reads them
            names = [name for _, name in sorted((e.inode(), e.name) for e in entries)]
        for name in names:
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
    start = time.perf_counter()
    report = verify(open_storage(root), check_data=check_data)
    elapsed = time.perf_counter() - start
    if not report.ok:
        raise SystemExit(f"verify failed on the benchmark chain: {report.errors[:3]}")
    return elapsed, report.blocks_checked


def _probe(kind: str, root: Path) -> None:
    """In a fresh process: one verify or one rebuild of ``root``, its time as JSON on stdout."""
    if kind == "verify":
        elapsed, blocks = timed_verify(root, check_data=False)
    else:
        from odf_chain.index.read import rebuild

        shutil.rmtree(root / "info" / "odf-chain-index", ignore_errors=True)
        start = time.perf_counter()
        index = rebuild(open_storage(root), save=True)
        elapsed, blocks = time.perf_counter() - start, index.length
        if index.how != "rebuilt":
            raise SystemExit(f"the index was not rebuilt: {index.how}")
    print(json.dumps({"seconds": elapsed, "blocks": blocks}))


def _tree(pid: int) -> list[int]:
    out, at = [pid], 0
    while at < len(out):
        try:
            for task in os.listdir(f"/proc/{out[at]}/task"):
                with open(f"/proc/{out[at]}/task/{task}/children") as f:
                    out += [int(c) for c in f.read().split()]
        except OSError:
            pass
        at += 1
    return out


def _status_kib(pid: int, field: str = "VmRSS:") -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def rss_of_tree(pid: int) -> float:
    """The resident set size of ``pid`` and of each helper it started, summed, in MB. A child
    still running its parent's program (forked, not yet exec'd: for a millisecond it shows the
    parent's pages, which it shares) is not counted."""
    own = _cmdline(pid)
    total = _status_kib(pid)
    for child in _tree(pid)[1:]:
        if _cmdline(child) != own:
            total += _status_kib(child)
    return total / 1024


def measured(kind: str, root: Path) -> tuple[float, int, float]:
    """(seconds, blocks, peak MB of RSS over the process tree) of one probe."""
    command = [sys.executable, __file__, "--probe", kind, str(root)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    peak = 0
    while process.poll() is None:
        peak = max(peak, rss_of_tree(process.pid))
        time.sleep(0.02)
    out = process.stdout.read() if process.stdout else ""
    if process.returncode:
        raise SystemExit(f"{kind} probe failed ({process.returncode}): {out}")
    result = json.loads(out.strip().splitlines()[-1])
    return result["seconds"], result["blocks"], peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slices", type=int, default=16)
    parser.add_argument("--slice-mb", type=int, default=16)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the chains")
    parser.add_argument("--quick", action="store_true", help="build with tools/quick_chain.py")
    parser.add_argument(
        "--slice-less",
        type=int,
        default=0,
        help="with --quick: blocks without a slice after each with one",
    )
    parser.add_argument("--chain", type=Path, help="measure this chain (built already)")
    parser.add_argument("--no-data", action="store_true", help="skip the data part")
    parser.add_argument(
        "--no-warm-up", action="store_true", help="no untimed index rebuild before the runs"
    )
    parser.add_argument("--probe", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        _probe(args.probe[0], Path(args.probe[1]))
        return 0
    scratch = args.dir or Path(tempfile.mkdtemp(prefix="odf-bench-verify-"))
    scratch.mkdir(parents=True, exist_ok=True)
    if args.slice_less and not args.quick:
        parser.error("--slice-less needs --quick")
    suffix = f"-{args.slice_less}-slice-less" if args.slice_less else ""
    chain_root = args.chain or scratch / f"chain-{args.blocks}{suffix}"
    data_root = scratch / f"data-{args.slices}x{args.slice_mb}"
    try:
        builds = [] if args.chain else [(chain_root, lambda r: _build(r, args))]
        if not args.no_data:
            builds.append((data_root, lambda r: build_data(r, args.slices, args.slice_mb)))
        for root, build in builds:
            done = root.with_name(root.name + ".done")  # beside the dataset, not in it
            if not done.exists():
                shutil.rmtree(root, ignore_errors=True)
                start = time.perf_counter()
                build(root)
                print(f"built {root.name} in {time.perf_counter() - start:.1f} s")
                done.touch()

        if not args.no_warm_up:  # the index a writer keeps, so verify compares it every run
            measured("rebuild", chain_root)
        peer_s, verify_s, rebuild_s, verify_mb, rebuild_mb = [], [], [], [], []
        blocks = 0
        for _ in range(args.runs):
            peer_s.append(peer_blocks(chain_root))
            elapsed, blocks, mb = measured("verify", chain_root)
            verify_s.append(elapsed)
            verify_mb.append(mb)
            elapsed, _, mb = measured("rebuild", chain_root)
            rebuild_s.append(elapsed)
            rebuild_mb.append(mb)
        peer, ours = statistics.median(peer_s), statistics.median(verify_s)
        rebuilt = statistics.median(rebuild_s)
        print(f"structural verify and index rebuild, {blocks:,} blocks, median of {args.runs}:")
        print(f"  peer read+BLAKE3 blocks   {peer:8.2f} s  {blocks / peer:10,.0f} blocks/s")
        print(
            f"  verify(check_data=False)  {ours:8.2f} s  {ours / peer:5.2f}x the peer"
            f"  peak {max(verify_mb):6.0f} MB (RSS, all processes)"
        )
        print(
            f"  index rebuild, saved      {rebuilt:8.2f} s  {rebuilt / ours:5.2f}x verify"
            f"  peak {max(rebuild_mb):6.0f} MB (RSS, all processes)"
        )
        print(
            "  each run (s): peer "
            + " ".join(f"{x:.2f}" for x in peer_s)
            + "; verify "
            + " ".join(f"{x:.2f}" for x in verify_s)
            + "; rebuild "
            + " ".join(f"{x:.2f}" for x in rebuild_s)
            + "; rebuild/verify "
            + " ".join(f"{r / v:.2f}" for r, v in zip(rebuild_s, verify_s, strict=True))
        )
        if args.no_data:
            return 0

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
