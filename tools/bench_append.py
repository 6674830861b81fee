#!/usr/bin/env python3
"""Benchmark: append latency at 1k and 1M blocks, side by side with the durable-write floor.

    python tools/bench_append.py [--sizes 1k,1m] [--work /tmp/bench-append] [--appends 300]
                                 [--rounds 3] [--baseline DIR]
    python tools/bench_append.py --index-cost 3000

**What is timed.** ``Dataset.append`` of one small AddData (a watermark and a source state),
as a writer calls it: re-read the head, build, encode, hash, check every rule, write the block
file, move the head under the lock, log the move and update the derived index. Each append is
timed on its own; the table shows p50 and p90.

**The floor**, timed in the same process, interleaved append by append (so load and disk state
hit both alike): the least any durable write of one small file must do — write it to a staging
name, fsync, rename it into place, fsync the directory — in a folder of the chain's own
``.staging/``, beside the files the append creates: a filesystem can be slower to create files
in one place than in another for a while (45 against 23 µs, measured after building a chain),
which a floor elsewhere would put on one side only. ``/floor`` is the median over probes of
a probe's append p50 over its own floor p50 (neighbours in time: this machine's load swings
several-fold within seconds, which a ratio of pooled medians would mix in).

**Sizes.** The chains are built once under ``--work`` (``chain-<N>``, reused by later runs; the
builder of ``tools/bench_scale.py``; from 100k blocks up ``tools/quick_chain.py``'s: one real
encoding patched per block, files written without fsync and the head set once, so a million
blocks take about ten minutes, not hours) and grow by the appends measured. ``/1k`` is the
median over rounds of a probe's append p50 over the same tree's at 1k in the same round.
Before timing, each chain's ``blocks/`` is listed once, so that its directory is in memory
as a busy writer's is (:func:`warm_listing` says why, and the time it took is printed).

**Before and after.** ``--baseline DIR`` names another checkout of ``odf_chain`` (say
``git archive <commit> odf_chain | tar -x -C DIR``), measured in the same run: every
measurement is a fresh process whose ``PYTHONPATH`` starts with its tree, and rounds
interleave trees and sizes. ``syncs`` counts the fsync and fdatasync calls of one append in
that process (wrappers that count and make the real call). On ext4 the journal's commits
(``/proc/fs/jbd2``) are counted around each append and each floor write too: what the syncs
cost, and what an append's syncs made at once save. They count every writer to that
filesystem: give ``--work`` a filesystem of its own (a loop-mounted image) for exact figures.

``--index-cost N`` instead times N appends to a fresh dataset with the derived index kept
beside N with its update switched off, interleaved in chunks of 250 in one process.

``--encode-cost N`` instead times N encodings of the appended block (``encode_block``'s work:
the value checks and the flatbuffer) with the encoder's builder (``odf_chain.format.builder``)
beside N with the stock ``flatbuffers.Builder``, interleaved in chunks of 500 in one process:
the same calls, the same bytes (checked here too).
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICK_FROM = 100_000
BLOCK_BYTES = 256  # about what one of these AddData blocks takes on disk


# -- in the probe process ------------------------------------------------------------------------


def durable_write(directory: Path, name: str, data: bytes) -> None:
    """The floor: write, fsync, rename into place, fsync the directory."""
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, directory / name)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def journal_info(path: Path) -> Path | None:
    """``/proc/fs/jbd2/<device>/info`` of the ext4 filesystem holding ``path`` (its first line
    counts the journal's commits), or None (another filesystem, another OS)."""
    dev = os.stat(path).st_dev
    try:
        name = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").resolve().name
    except OSError:
        return None
    info = Path(f"/proc/fs/jbd2/{name}-8/info")
    return info if info.is_file() else None


def journal_commits(info: Path | None) -> int:
    return 0 if info is None else int(info.read_text().split(maxsplit=1)[0])


def _event(state, tag: str):
    """The next AddData on ``state``: no new rows, the watermark a second on, a new source
    state (what a poll that found nothing new records)."""
    from odf_chain import AddData, SourceState

    watermark = state.watermark or datetime(2020, 1, 1, tzinfo=UTC)
    return AddData(
        prev_checkpoint=state.last_checkpoint,
        prev_offset=state.last_offset,
        new_watermark=watermark + timedelta(seconds=1),
        new_source_state=SourceState("poll", "odf/etag", f"{tag}-{state.sequence_number}"),
    )


def probe(dataset: Path, appends: int, floor_dir: Path) -> dict:
    """Time ``appends`` appends to ``dataset`` and as many floor writes, interleaved."""
    counted = {"syncs": 0}
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name, None)
        if real is None:
            continue

        def counting(fd: int, _real=real) -> None:
            counted["syncs"] += 1
            _real(fd)

        setattr(os, name, counting)

    floor_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _probe(dataset, appends, floor_dir, counted)
    finally:
        shutil.rmtree(floor_dir, ignore_errors=True)


def _probe(dataset: Path, appends: int, floor_dir: Path, counted: dict[str, int]) -> dict:
    from odf_chain import Dataset

    ds = Dataset.open(dataset)
    start_seq = ds.state.sequence_number
    tag = f"bench-{os.getpid()}"
    ds.append(_event(ds.state, tag))  # warm-up: the rules, the codec, the index's files
    payload = os.urandom(BLOCK_BYTES)
    durable_write(floor_dir, "warm", payload)
    journal = journal_info(dataset)  # on ext4: the journal's commits, counted between probes
    append_s, floor_s, syncs = [], [], []
    commits = {"append": 0, "floor": 0}
    for i in range(1, appends + 1):
        event = _event(ds.state, tag)
        before = counted["syncs"]
        j0 = journal_commits(journal)
        t0 = time.perf_counter()
        ds.append(event)
        t1 = time.perf_counter()
        j1 = journal_commits(journal)
        syncs.append(counted["syncs"] - before)
        t2 = time.perf_counter()
        durable_write(floor_dir, f"f{i % 8}", payload)
        t3 = time.perf_counter()
        commits["append"] += j1 - j0
        commits["floor"] += journal_commits(journal) - j1
        append_s.append(t1 - t0)
        floor_s.append(t3 - t2)
    return {
        "blocks_before": start_seq + 1,
        "append": append_s,
        "floor": floor_s,
        "syncs": statistics.median(syncs),
        "commits": None if journal is None else {k: v / appends for k, v in commits.items()},
    }


FLOOR_FOLDER = "bench-floor"
"""The floor's folder, in the chain's ``.staging/`` (removed after each probe; gc would take
it as a leftover otherwise)."""


def index_cost(root: Path, n: int, chunk: int = 250) -> dict[str, list[float]]:
    """Per-append latency with the derived index kept (what ships) beside the same append with
    its index update switched off (the append before the index), interleaved chunk by chunk
    in one process so that load and disk state hit both alike."""
    from odf_chain import Dataset
    from odf_chain.index import update

    kept = Dataset.create(root / "with-index")
    bare = Dataset.create(root / "without-index")
    samples: dict[str, list[float]] = {"with index": [], "without index": []}
    real = update.record_commit
    done = 0
    while done < n:
        for name, dataset, record in (
            ("with index", kept, real),
            ("without index", bare, lambda *_, **__: True),  # "recorded": nothing to repair
        ):
            update.record_commit = record  # the head move's usual update and the hook's repair
            try:
                for _ in range(done, min(done + chunk, n)):
                    event = _event(dataset.state, "index")
                    start = time.perf_counter()
                    dataset.append(event)
                    samples[name].append(time.perf_counter() - start)
            finally:
                update.record_commit = real
        done += chunk
    return samples


def encode_cost(root: Path, n: int, chunk: int = 500) -> dict[str, list[float]]:
    """Per-block encoding time with the encoder's builder beside the stock one, interleaved
    chunk by chunk in one process; the block is the one an append of the benchmark's event
    builds (a new dataset, a few blocks in)."""
    import flatbuffers

    from odf_chain import Dataset, chain
    from odf_chain.format.block_encoder import BlockEncoder, check_block
    from odf_chain.format.builder import Builder

    dataset = Dataset.create(root / "encode")
    for _ in range(3):
        dataset.append(_event(dataset.state, "encode"))
    block = chain.prepare(dataset.state, _event(dataset.state, "encode")).entry.block
    builders = {"encoder's builder": Builder, "stock builder": flatbuffers.Builder}
    made = {BlockEncoder(4, b).block(block) for b in builders.values()}
    if len(made) != 1:
        raise SystemExit("the two builders made different bytes")
    samples: dict[str, list[float]] = {name: [] for name in builders}
    done = 0
    while done < n:
        for name, builder in builders.items():
            for _ in range(done, min(done + chunk, n)):
                start = time.perf_counter()
                encoder = BlockEncoder(4, builder)
                check_block(block)
                encoder.block(block)
                samples[name].append(time.perf_counter() - start)
        done += chunk
    return samples


# -- in the driver ---------------------------------------------------------------------------


GROWTH = 1.1
"""A cached chain the probes of earlier runs grew past this many times its size is built anew
(each probe appends to it): its label must stay true."""


def _outgrown(path: Path, n: int) -> bool:
    from odf_chain import Dataset
    from odf_chain.errors import OdfChainError

    try:
        return Dataset.open(path).state.sequence_number + 1 > n * GROWTH
    except OdfChainError:
        return False  # none yet (or not a chain): build_chain decides


def build(work: Path, n: int) -> Path:
    """The chain of ``n`` blocks under ``work``, rebuilt when earlier runs grew it past
    ``GROWTH`` times ``n``. An outgrown chain is moved aside, not deleted, and removed once the
    run is over (:func:`remove_outgrown`): on ext4 without a journal every file made in the
    next minute or more would otherwise walk past the thousands of inodes its deletion freed
    (``docs/performance.md#head-exchange``), the floor's and the appends' alike."""
    sys.path.insert(0, str(ROOT / "tools"))
    import bench_scale

    path = work / f"chain-{n}"
    outgrown = _outgrown(path, n)
    if outgrown and path.is_dir():
        aside = work / f"{OUTGROWN}{n}-{os.getpid()}"
        path.rename(aside)
        print(f"chain of {bench_scale.label(n)} blocks outgrown: moved to {aside}", file=sys.stderr)
    big = n >= QUICK_FROM  # tools/quick_chain.py: a million blocks in about ten minutes
    info = bench_scale.build_chain(path, n, outgrown, quick=big, patched=big)
    print(f"chain of {bench_scale.label(n)} blocks: {path} ({info})", file=sys.stderr)
    return path


OUTGROWN = "outgrown-chain-"


def remove_outgrown(work: Path) -> None:
    """Delete the chains :func:`build` moved aside, once nothing is timed any more."""
    for aside in work.glob(f"{OUTGROWN}*"):
        shutil.rmtree(aside, ignore_errors=True)


def run_probe(tree: Path, dataset: Path, appends: int, floor_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])}
    argv = [sys.executable, str(Path(__file__).resolve()), "--probe"]
    argv += [str(dataset), str(appends), str(floor_dir)]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"probe failed ({tree}, {dataset}):\n{out.stderr}")
    return json.loads(out.stdout)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def label(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def parse_size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(text.rstrip("km")) * scale


def side_by_side(what: str, samples: dict[str, list[float]]) -> None:
    """Print two variants' p50 and p90 (in ms) and the first's p50 over the second's."""
    p50 = {k: statistics.median(v) for k, v in samples.items()}
    for name, values in samples.items():
        print(
            f"{what}, {name:<17} p50 {p50[name] * 1e3:7.3f} ms  "
            f"p90 {quantile(values, 0.9) * 1e3:7.3f} ms  ({len(values):,})"
        )
    first, second = p50
    print(f"{what} p50, {first} / {second}  {p50[first] / p50[second]:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1k,1m", help="chain sizes (default: 1k,1m)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-append"))
    parser.add_argument("--appends", type=int, default=300, help="per probe (default: 300)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured alongside")
    parser.add_argument(
        "--index-cost",
        type=int,
        metavar="N",
        help="instead: N appends with the index update beside N without it, interleaved",
    )
    parser.add_argument(
        "--encode-cost",
        type=int,
        metavar="N",
        help="instead: N block encodings with the encoder's builder beside N with the stock one",
    )
    parser.add_argument("--probe", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        dataset, appends, floor_dir = args.probe
        print(json.dumps(probe(Path(dataset), int(appends), Path(floor_dir))))
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    for n, measure, what, prefix in (
        (args.encode_cost, encode_cost, "encode", "encode-cost-"),
        (args.index_cost, index_cost, "append", "index-cost-"),
    ):
        if n:
            scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=args.work))
            try:
                samples = measure(scratch, n)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            side_by_side(what, samples)
            return 0

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    chains = {n: build(args.work, n) for n in sizes}
    for n, chain in chains.items():
        warm_listing(chain, n)
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    results: dict[tuple[str, int], dict[str, list[float]]] = {}
    probes: dict[tuple[str, int], list[tuple[float, float]]] = {}  # per probe: p50s
    syncs: dict[tuple[str, int], float] = {}
    commits: dict[tuple[str, int], list[dict]] = {}
    for r in range(args.rounds):
        order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
        for name, tree in order:
            for n in sizes if r % 2 == 0 else reversed(sizes):
                floor_dir = chains[n] / ".staging" / FLOOR_FOLDER  # beside the append's files
                got = run_probe(tree, chains[n], args.appends, floor_dir)
                into = results.setdefault((name, n), {"append": [], "floor": []})
                into["append"] += got["append"]
                into["floor"] += got["floor"]
                a50, f50 = statistics.median(got["append"]), statistics.median(got["floor"])
                probes.setdefault((name, n), []).append((a50, f50))
                syncs[(name, n)] = got["syncs"]
                if got["commits"] is not None:
                    commits.setdefault((name, n), []).append(got["commits"])
                print(
                    f"  round {r + 1}: {name} at {label(n)} ({got['blocks_before']:,} blocks): "
                    f"append p50 {a50 * 1e3:.2f} ms, floor p50 {f50 * 1e3:.2f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    report(trees, sizes, results, probes, syncs, args)
    remove_outgrown(args.work)
    if commits:
        print("ext4 journal commits (all writers to that filesystem: alone on it, these are ours)")
        for (name, n), got in commits.items():
            a = statistics.mean(c["append"] for c in got)
            f = statistics.mean(c["floor"] for c in got)
            print(f"  {name} at {label(n)}: {a:.2f} per append, {f:.2f} per floor write")
    return 0


def warm_listing(chain: Path, n: int) -> None:
    """List ``blocks/`` once before timing. An append links a new name into it, and the
    filesystem first looks that name up in the directory block its hash falls in: at 1M
    blocks (a directory of about 80 MB) a block not in memory is a read from disk each time
    (a link took 163 µs with the directory evicted, 12 µs with it in memory, measured on
    this machine's root disk). A chain a writer appends to often has its directory in memory;
    one evicted between runs would make the run measure the disk's reads, not the append."""
    start = time.perf_counter()
    with os.scandir(chain / "blocks") as entries:
        count = sum(1 for _ in entries)
    took = time.perf_counter() - start
    print(f"  {label(n)}: blocks/ listed ({count:,} names) in {took:.2f} s", file=sys.stderr)


def report(trees, sizes, results, probes, syncs, args) -> None:
    """Pooled p50/p90 over every append, and the ratios as medians over the probes: each
    probe's append p50 against the floor p50 of the same process, and against the probe of
    the same round at the smallest size (or of the baseline at the same size). On a machine
    whose load swings several-fold from one second to the next, a ratio of neighbours is
    steadier than a ratio of pooled medians."""
    small = min(sizes)
    print(
        f"append latency, {args.rounds} rounds x {args.appends} appends per tree and size; "
        "floor = write + fsync + rename + directory fsync, interleaved in the same process"
    )
    header = (
        f"{'tree':<10} {'blocks':>6} {'syncs':>5} {'append p50':>10} {'p90':>7} "
        f"{'floor p50':>9} {'p90':>7} {'/floor':>7} {f'/{label(small)}':>7}"
    )
    print(header)
    print("-" * len(header))

    def ratio(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
        return statistics.median(x[0] / y[0] for x, y in zip(a, b, strict=True))

    for name in trees:
        for n in sizes:
            got = results[(name, n)]
            per_floor = statistics.median(a / f for a, f in probes[(name, n)])
            print(
                f"{name:<10} {label(n):>6} {syncs[(name, n)]:>5g} "
                f"{statistics.median(got['append']) * 1e3:>7.2f} ms "
                f"{quantile(got['append'], 0.9) * 1e3:>7.2f} "
                f"{statistics.median(got['floor']) * 1e3:>6.2f} ms "
                f"{quantile(got['floor'], 0.9) * 1e3:>7.2f} {per_floor:>6.2f}x "
                f"{ratio(probes[(name, n)], probes[(name, small)]):>6.2f}x"
            )
    if "baseline" in trees:
        for n in sizes:
            change = ratio(probes[("this tree", n)], probes[("baseline", n)])
            print(f"this tree / baseline at {label(n)}: {change:.2f}x (append p50, per round)")


if __name__ == "__main__":
    raise SystemExit(main())
