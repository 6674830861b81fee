#!/usr/bin/env python3
"""Benchmark: reads at 1k to 1M blocks, side by side with delta-rs at the same commit counts.

    python tools/bench_scale.py [--sizes 1k,10k,100k] [--work DIR] [--rounds 5]
                                [--delta-max 10k] [--no-delta] [--rebuild]

Add ``1m`` to ``--sizes`` for a million blocks (opt in: the build alone takes a long while).

**How the chains are built (once, cached under ``--work``, reused by later runs).**
``Dataset.create`` (the Seed), one ``Dataset.write`` of a one-row table (the SetDataSchema and
a first AddData with a real Parquet slice), then AddData blocks up to N blocks in all, each
prepared with ``chain.prepare`` and committed with ``chain.commit`` in a tight loop: no Spark,
no Parquet writing, no re-reading of the head between appends. Nothing a reader sees is
skipped: every AddData has its own offset interval (one row, contiguous with the one before),
``prev_offset``, a watermark that moves on, a source state, and the rules run on each; every
block is its own transaction (its own fsynced file, its own head move under the lock and its
own line in the head log), as an hourly ingest with one slice per run would leave it. All
AddData name the one shared slice: its content does not match their offsets, so the data check
(``verify`` with ``check_data``) is not timed, only structural verify. A chain's directory is
complete once ``<dir>.built.json`` exists; ``--rebuild`` builds again (say, after a change of
the block format). Chains of ``--patched-from`` blocks or more (default: 5m: ten million)
are built by ``tools/quick_chain.py`` (the same shape, every block naming one real one-row
slice with one-row offsets of its own; one real encoding with the varying fields patched in,
a few microseconds a block; their system times and watermarks are equal, which the rules
allow), then the index is rebuilt and saved once. Each probe also reports the peak resident
memory of its process and its helpers (``peak RSS``; the commands timed as processes show
none). Chains of ``--quick-from`` blocks or more (default: 1m) are built quickly,
as ``tools/bench_verify.py`` builds its chain: the same blocks, each checked by every rule in
memory, written as plain files without fsync, and the head set once at the end (one
transaction, one head-log line): a million durable transactions would take hours, and a
reader or verify sees the same blocks either way. The delta-rs table of N commits is built
with N ``write_deltalake(path, one_row_table, mode="append")`` calls, the real library and
its default checkpoint every 100 versions. That costs 50-70 ms a commit here and grows with
the table, so tables above ``--delta-max`` (default 10k) are not built: 100k would take hours.

**How it measures.** Every measurement runs in a fresh process, so no cache of a previous
measurement (open files, a handle's state, the interpreter's memory) helps it; the OS page
cache stays warm (dropping it needs root). Library calls (``Dataset.open``, ``.state``,
``state_at``, ``verify``, ``DeltaTable(...)``) are timed inside that process, around the call
only, after the imports. Commands (``odf-chain log DIR -n 10``, ``odf-chain schema DIR``) are
timed from the start of the process to its exit, as a user waits for them; their delta-rs
counterparts are a Python process that opens the table and prints ``history(10)`` or
``schema()``; the ``import`` rows give each side's floor (interpreter start and imports). When
``log`` has no ``-n``, ``odf-chain log DIR`` is timed until its tenth line arrives (what
``| head -n 10`` waits for), then stopped. Rounds interleave the two systems (odf_chain first in
even rounds, delta-rs first in odd ones) and the table shows medians, with two ratios: odf_chain
at N against odf_chain at the smallest N, and odf_chain against delta-rs at the same N. One
untimed warm-up per chain and table comes first (it also lets a reader that keeps a derived
index build it once). The checkout this file lives in is the one measured: its root goes first
on the ``PYTHONPATH`` of every process started.

``state_at`` first/middle/last means blocks 1, N//2 and N-1 (block 0 is the Seed); delta-rs
versions 1, N//2 and N-1 of its N versions 0..N-1. ``state_at prefix`` is ``state_at`` of the
first 16 hex digits of block N//2's digest (as ``odf-chain log`` prints it, without the
multihash header): the prefix resolved through the index's prefix buckets, then the state.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE_TIMEOUT = 1800.0  # seconds; a 1M-block fold on today's code takes minutes
LOG_LINES = 10

# -- building ---------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([km]?)\s*", text.lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (say 1000, 10k or 1m)")
    return int(match[1]) * {"": 1, "k": 1_000, "m": 1_000_000}[match[2]]


def label(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".built.json")


def _cached(path: Path, rebuild: bool) -> dict | None:
    marker = _marker(path)
    if not rebuild and marker.is_file() and path.is_dir():
        return json.loads(marker.read_text())
    marker.unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)
    return None


def _progress(what: str, done: int, total: int, started: float) -> None:
    elapsed = time.perf_counter() - started
    print(f"  {what}: {done:,}/{total:,} in {elapsed:.0f} s", file=sys.stderr, flush=True)


def build_chain(
    path: Path, n: int, rebuild: bool, *, quick: bool = False, patched: bool = False
) -> dict:
    """A chain of ``n`` blocks (see the module docstring); cached. ``quick``: the same blocks,
    checked by the same rules, written as scratch files (no fsync, no lock) and the head set
    once at the end, so one transaction in all."""
    cached = _cached(path, rebuild)
    if cached is not None:
        return cached
    import pyarrow as pa

    from odf_chain import AddData, Dataset, DataSlice, OffsetInterval, SourceState, chain
    from odf_chain.index import read as index_read
    from odf_chain.storage import open_storage

    if n < 3:
        raise SystemExit("a chain needs at least 3 blocks (Seed, SetDataSchema, AddData)")
    started = time.perf_counter()
    if patched:  # tools/quick_chain.py: the same shape, a few microseconds a block
        sys.path.insert(0, str(Path(__file__).parent))
        import quick_chain

        quick_chain.build(path, n, shared_slice=True)
        index_read.rebuild(open_storage(path), save=True)
        info = {"blocks": n, "build_seconds": round(time.perf_counter() - started, 1)}
        info["quick"] = "patched"
        _marker(path).write_text(json.dumps(info))
        return info
    dataset = Dataset.create(path)
    first = dataset.write(pa.table({"id": pa.array([0], pa.int64()), "v": ["x"]}))[-1]
    shared = first.block.event.new_data
    storage = dataset.storage
    state = dataset.state
    hour = timedelta(hours=1)
    watermark = state.watermark or datetime(2020, 1, 1, tzinfo=UTC)
    for seq in range(state.sequence_number + 1, n):
        start = state.next_offset
        watermark += hour
        event = AddData(
            prev_checkpoint=state.last_checkpoint,
            prev_offset=state.last_offset,
            new_data=DataSlice(
                shared.logical_hash, shared.physical_hash, OffsetInterval(start, start), shared.size
            ),
            new_watermark=watermark,
            new_source_state=SourceState("poll", "odf/etag", f"etag-{seq}"),
        )
        prepared = chain.prepare(state, event)
        if quick:
            (path / "blocks" / str(prepared.entry.hash)).write_bytes(prepared.data)
            state = prepared.after
        else:
            state = chain.commit(storage, prepared)
        if seq % 10_000 == 0:
            _progress(f"odf_chain {label(n)}", seq + 1, n, started)
    if quick:
        storage.compare_and_swap_head(str(dataset.state.head), str(state.head))
    # chain.commit moves the head only; the index a writer's post-commit hook would have kept
    # is built once here (readers never write it)
    index_read.rebuild(storage, save=True)
    if state.sequence_number != n - 1:
        raise SystemExit(f"built {state.sequence_number + 1} blocks, not {n}")
    info = {
        "blocks": n,
        "build_seconds": round(time.perf_counter() - started, 1),
        "quick": quick,
    }
    _marker(path).write_text(json.dumps(info))
    return info


def build_delta(path: Path, n: int, rebuild: bool) -> dict:
    """A Delta table of ``n`` commits, one one-row append each, by the real library; cached."""
    cached = _cached(path, rebuild)
    if cached is not None:
        return cached
    import pyarrow as pa
    from deltalake import write_deltalake

    started = time.perf_counter()
    for i in range(n):
        row = pa.table({"id": pa.array([i], pa.int64()), "v": ["x"]})
        write_deltalake(str(path), row, mode="append")
        if (i + 1) % 1_000 == 0:
            _progress(f"delta-rs {label(n)}", i + 1, n, started)
    info = {"commits": n, "build_seconds": round(time.perf_counter() - started, 1)}
    _marker(path).write_text(json.dumps(info))
    return info


# -- probes: each runs in a fresh process -----------------------------------------------------


def _timed(call: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def probe(system: str, kind: str, path: str, arg: int) -> dict:
    """One measurement, in this (fresh) process; returns seconds by name."""
    if system == "odf":
        from odf_chain import Dataset

        if kind == "open":
            opened, dataset = _timed(lambda: Dataset.open(path))
            state_s, state = _timed(lambda: dataset.state)
            assert state.sequence_number == arg, f"head is block {state.sequence_number}"
            return {"open": opened, "open+state": opened + state_s}
        if kind == "state_at":
            dataset = Dataset.open(path)
            seconds, state = _timed(lambda: dataset.state_at(arg))
            assert state.sequence_number == arg, f"state_at({arg}) gave {state.sequence_number}"
            return {"state_at": seconds}
        if kind == "state_at_prefix":  # the block's 16 hex digits as log prints them
            from odf_chain.index.prefixes import table_hash

            dataset = Dataset.open(path)
            raw = table_hash(dataset.storage, arg)  # untimed: the seq table's record
            assert raw is not None, f"no seq table entry for block {arg}"
            prefix = raw[2:].hex()[:16]
            seconds, state = _timed(lambda: dataset.state_at(prefix))
            assert state.sequence_number == arg, f"state_at({prefix}) gave {state.sequence_number}"
            return {"state_at_prefix": seconds}
        if kind == "verify":
            dataset = Dataset.open(path)
            seconds, report = _timed(lambda: dataset.verify(check_data=False))
            assert report.ok, "\n".join(p.line() for p in report.errors[:5])
            assert report.blocks_checked == arg, f"verify checked {report.blocks_checked} blocks"
            return {"verify": seconds}
    if system == "delta":
        from deltalake import DeltaTable

        if kind == "open":
            seconds, table = _timed(lambda: DeltaTable(path))
            assert table.version() == arg, f"version {table.version()}"
            return {"open+state": seconds}
        if kind == "state_at":
            seconds, table = _timed(lambda: DeltaTable(path, version=arg))
            assert table.version() == arg, f"version {table.version()}"
            return {"state_at": seconds}
    raise SystemExit(f"unknown probe {system} {kind}")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def run_probe(system: str, kind: str, path: Path, arg: int) -> dict:
    """The probe's seconds by name, and ``rss``: the peak, sampled every 20 ms, of the
    resident set size summed over the probe process and its helpers, in MB (see
    ``tools/bench_verify.py``)."""
    from bench_verify import rss_of_tree

    argv = [sys.executable, __file__, "--probe", system, kind, str(path), str(arg)]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    started, peak = time.monotonic(), 0.0
    while process.poll() is None:
        if time.monotonic() - started > PROBE_TIMEOUT:
            process.kill()
        peak = max(peak, rss_of_tree(process.pid))
        time.sleep(0.02)
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"probe {system} {kind} {path} {arg} failed:\n{err[-2000:]}")
    return {**json.loads(out.strip().splitlines()[-1]), "rss": peak}


def _odf_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "odf_chain.cli", *args]


def log_has_limit() -> bool:
    """Whether ``odf-chain log`` takes ``-n`` (being added as this benchmark is written)."""
    done = subprocess.run(
        _odf_cli("log", "--help"), capture_output=True, text=True, env=_env(), check=False
    )
    return re.search(r"(^|[\s\[,])-n\b", done.stdout) is not None


def time_process(argv: Sequence[str], *, expect: str, lines: int | None = None) -> float:
    """Seconds from start to exit of a fresh process; its output must contain ``expect``
    (and be ``lines`` lines long, when given)."""
    start = time.perf_counter()
    done = subprocess.run(
        argv, capture_output=True, text=True, env=_env(), timeout=PROBE_TIMEOUT, check=False
    )
    seconds = time.perf_counter() - start
    count = len(done.stdout.splitlines())
    if done.returncode != 0 or expect not in done.stdout or lines not in (None, count):
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def time_first_lines(argv: Sequence[str], lines: int) -> float:
    """Seconds from start until ``lines`` lines have arrived on stdout; the process is then
    stopped (what ``| head -n lines`` waits for)."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env())
    try:
        assert process.stdout is not None
        for seen in range(lines):
            if not process.stdout.readline():
                raise SystemExit(f"{' '.join(argv)} printed only {seen} lines")
        return time.perf_counter() - start
    finally:
        process.kill()
        process.wait(timeout=60)


_DELTA_HISTORY = (
    "import sys\nfrom deltalake import DeltaTable\n"
    "for h in DeltaTable(sys.argv[1]).history(10): print(h['version'], h['operation'])"
)
_DELTA_SCHEMA = (
    "import sys\nfrom deltalake import DeltaTable\nprint(DeltaTable(sys.argv[1]).schema())"
)


# -- the run ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measure:
    """One timed thing for one system: how to run it once, returning seconds by row."""

    system: str
    run: Callable[[], dict[str, float]]


def measures(n: int, odf: Path, delta: Path | None, log_n: bool) -> list[tuple[Measure, ...]]:
    """Pairs (odf_chain, delta-rs) to alternate; a pair has one member when delta-rs has none."""
    first, middle, last = 1, n // 2, n - 1

    def odf_probe(kind: str, arg: int, row: str | None = None) -> Measure:
        def run() -> dict[str, float]:
            result = run_probe("odf", kind, odf, arg)
            rss = result.pop("rss")
            out = result if row is None else {row: result[kind]}
            return {**out, **{f"{name} rss": rss for name in out}}

        return Measure("odf", run)

    def delta_probe(kind: str, arg: int, row: str | None = None) -> Measure:
        def run() -> dict[str, float]:
            result = run_probe("delta", kind, delta, arg)
            result.pop("rss")
            return result if row is None else {row: result[kind]}

        return Measure("delta", run)

    def process(
        system: str, row: str, argv: list[str], expect: str, lines: int | None = None
    ) -> Measure:
        return Measure(system, lambda: {row: time_process(argv, expect=expect, lines=lines)})

    if log_n:
        argv = _odf_cli("log", str(odf), "-n", str(LOG_LINES))
        log = process("odf", "log", argv, f"{last}", 1 + LOG_LINES)  # a header, then the lines
    else:
        argv = _odf_cli("log", str(odf))
        log = Measure("odf", lambda: {"log": time_first_lines(argv, LOG_LINES)})
    pairs: list[tuple[Measure, ...]] = [
        (odf_probe("open", last),),
        (odf_probe("state_at", first, "state_at first"),),
        (odf_probe("state_at", middle, "state_at middle"),),
        (odf_probe("state_at", last, "state_at last"),),
        (log,),
        (process("odf", "schema", _odf_cli("schema", str(odf)), "schema set at block"),),
        (process("odf", "import", [sys.executable, "-c", "import odf_chain.cli"], ""),),
        (odf_probe("verify", n),),
        (odf_probe("state_at_prefix", middle, "state_at prefix"),),
    ]
    if delta is not None:
        py = sys.executable
        others = [
            delta_probe("open", last),
            delta_probe("state_at", first, "state_at first"),
            delta_probe("state_at", middle, "state_at middle"),
            delta_probe("state_at", last, "state_at last"),
            process("delta", "log", [py, "-c", _DELTA_HISTORY, str(delta)], "WRITE", LOG_LINES),
            process("delta", "schema", [py, "-c", _DELTA_SCHEMA, str(delta)], "Schema"),
            process("delta", "import", [py, "-c", "import deltalake"], ""),
        ]
        pairs = [(pair[0], other) for pair, other in zip(pairs, others, strict=False)] + pairs[
            len(others) :
        ]
    return pairs


ROWS = [
    ("open", "`Dataset.open(p)`", ""),
    ("open+state", "`Dataset.open(p).state`", "`DeltaTable(p)`"),
    ("state_at first", "`state_at(1)`", "`DeltaTable(p, version=1)`"),
    ("state_at middle", "`state_at(N//2)`", "`version=N//2`"),
    ("state_at last", "`state_at(N-1)`", "`version=N-1`"),
    ("state_at prefix", "`state_at(<16 hex digits of block N//2>)`", ""),
    ("log", "`odf-chain log DIR -n 10` (process)", "`history(10)` (process)"),
    ("schema", "`odf-chain schema DIR` (process)", "`schema()` (process)"),
    ("import", "floor: `import odf_chain.cli` (process)", "`import deltalake` (process)"),
    ("verify", "structural verify", ""),
]


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def table(sizes: list[int], results: dict, log_label: str) -> str:
    base = sizes[0]
    peer = any(key[0] == "delta" for key in results)
    lines = [
        f"| operation | N | odf_chain | vs N={label(base)} | peak RSS | delta-rs "
        "| odf_chain / delta-rs |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, odf_name, delta_name in ROWS:
        if row == "log":
            odf_name = log_label
        name = f"{odf_name} / {delta_name}" if delta_name and peer else odf_name
        for n in sizes:
            mine = results.get(("odf", n, row))
            theirs = results.get(("delta", n, row))
            first = results.get(("odf", base, row))
            shown = fmt_seconds(mine)
            if row == "verify" and mine:
                shown += f" ({n / mine:,.0f} blocks/s)"
            scale = f"{mine / first:.2f}x" if mine and first and n != base else ""
            versus = f"{mine / theirs:.2f}x" if mine and theirs else ""
            rss = results.get(("odf", n, f"{row} rss"))
            memory = f"{rss:,.0f} MB" if rss else "—"
            lines.append(
                f"| {name} | {label(n)} | {shown} | {scale} | {memory} | {fmt_seconds(theirs)} "
                f"| {versus} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="1k,10k,100k",
        help="block counts, e.g. 1k,10k,100k,1m (default: %(default)s)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=Path.home() / ".cache" / "odf-chain-bench-scale",
        help="where chains and tables are built and kept between runs (default: %(default)s)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    parser.add_argument(
        "--delta-max",
        type=parse_size,
        default=10_000,
        help="largest delta-rs table built (default: 10k; see the docstring)",
    )
    parser.add_argument("--no-delta", action="store_true", help="odf_chain only")
    parser.add_argument(
        "--quick-from",
        type=parse_size,
        default=1_000_000,
        help="chains of at least this many blocks are built quickly (default: 1m; see the "
        "docstring)",
    )
    parser.add_argument(
        "--patched-from",
        type=parse_size,
        default=5_000_000,
        help="chains of at least this many blocks are built by tools/quick_chain.py "
        "(default: 5m; see the docstring)",
    )
    parser.add_argument("--rebuild", action="store_true", help="build chains and tables again")
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="build (or find) the chains and tables, time nothing",
    )
    parser.add_argument("--probe", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        system, kind, path, arg = args.probe
        print(json.dumps(probe(system, kind, path, int(arg))))
        return 0
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    sizes = sorted({parse_size(s) for s in args.sizes.split(",") if s.strip()})
    work: Path = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)

    builds: list[str] = []
    plan: dict[int, list[tuple[Measure, ...]]] = {}
    log_n = log_has_limit()
    for n in sizes:
        odf = work / f"odf-{label(n)}"
        patched = n >= args.patched_from
        info = build_chain(odf, n, args.rebuild, quick=n >= args.quick_from, patched=patched)
        how = {True: ", quick: one transaction", "patched": ", by tools/quick_chain.py"}.get(
            info.get("quick"), ""
        )
        builds.append(f"odf_chain {label(n)}: {info['build_seconds']} s to build{how}")
        delta = None
        if not args.no_delta and n <= args.delta_max:
            delta = work / f"delta-{label(n)}"
            info = build_delta(delta, n, args.rebuild)
            builds.append(f"delta-rs {label(n)}: {info['build_seconds']} s to build")
        if args.build_only:
            continue
        plan[n] = measures(n, odf, delta, log_n)
        print(f"warming up {label(n)}", file=sys.stderr, flush=True)
        for pair in plan[n][:1]:  # open: lets a reader build what it caches, once
            for measure in pair:
                measure.run()

    if args.build_only:
        print("\n".join(f"- {line}" for line in builds))
        return 0
    log_label = (
        "`odf-chain log DIR -n 10` (process)"
        if log_n
        else "`odf-chain log DIR` until its 10th line (no `-n` yet)"
    )
    samples: dict[tuple[str, int, str], list[float]] = {}
    for round_no in range(args.rounds):
        started = time.perf_counter()
        for n in sizes:
            for pair in plan[n]:
                ordered = pair if round_no % 2 == 0 else tuple(reversed(pair))
                for measure in ordered:
                    for row, seconds in measure.run().items():
                        samples.setdefault((measure.system, n, row), []).append(seconds)
        elapsed = time.perf_counter() - started
        print(f"round {round_no + 1}/{args.rounds}: {elapsed:.0f} s", file=sys.stderr, flush=True)
        if round_no + 1 < args.rounds:  # what an interrupted run would have shown
            partial = {key: statistics.median(values) for key, values in samples.items()}
            print(table(sizes, partial, log_label), file=sys.stderr, flush=True)

    results = {key: statistics.median(values) for key, values in samples.items()}
    peer = "delta-rs not run"
    if not args.no_delta:
        import deltalake

        peer = f"delta-rs {deltalake.__version__}"
    print(
        f"medians of {args.rounds} interleaved rounds, {os.cpu_count()} cores; {peer}; "
        f"built once under {work}"
    )
    print(table(sizes, results, log_label))
    print()
    for line in builds:
        print(f"- {line}")
    skipped = [label(n) for n in sizes if n > args.delta_max and not args.no_delta]
    if skipped:
        print(
            f"- delta-rs not built at {', '.join(skipped)}: N one-row appends at 50-70 ms each "
            f"(growing) would take too long; --delta-max raises the cap"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
