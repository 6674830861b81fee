"""How fast the CLI answers, side by side with Python's own floor and a peer, in one run.

Each command is a fresh process (as a shell runs it), timed wall-clock from spawn to exit;
the commands take turns, round after round, so a load that comes and goes falls on all of
them alike; the median of the rounds is reported, with its ratio to ``python -c pass``, to
``python -c "import pyarrow"`` and to ``python -c "import deltalake"`` (the peer: a Rust-backed
table format whose import is what its CLI-free users pay).

``odf-chain`` and ``chain-verify`` run as their installed entry points run them
(``from odf_chain.cli import main; sys.exit(main())``) from the source tree given by
``--source`` (default: this checkout), so two trees can be compared in one run with
``--before DIR`` (say ``git archive <commit> | tar -x -C /tmp/before``).

The dataset: a small one written here (5 writes of 1,000 rows: 7 blocks).

Run: ``python tools/bench_cli_startup.py [-n ROUNDS] [--before DIR]`` (with the dev venv's
python, which has deltalake).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENTRY = "import sys; from odf_chain.cli import {name}; sys.exit({name}())"


def _dataset(where: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    import pyarrow as pa

    from odf_chain import Dataset

    ds = Dataset.create(where / "ds")
    for i in range(5):
        ds.write(pa.table({"id": range(i * 1000, (i + 1) * 1000), "v": [float(i)] * 1000}))
    return where / "ds"


def _commands(source: Path, label: str, ds: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    odf = [sys.executable, "-c", ENTRY.format(name="main")]
    verify = [sys.executable, "-c", ENTRY.format(name="chain_verify_main")]
    return [
        (f"{label}odf-chain --version", [*odf, "--version"], env),
        (f"{label}odf-chain --help", [*odf, "--help"], env),
        (f"{label}odf-chain log -n 1 DIR", [*odf, "log", "-n", "1", str(ds)], env),
        (f"{label}odf-chain log -n 5 DIR", [*odf, "log", "-n", "5", str(ds)], env),
        (f"{label}chain-verify DIR", [*verify, str(ds)], env),
    ]


def _time(argv: list[str], env: dict[str, str]) -> float:
    """Wall-clock seconds of ``argv``, run in a neutral directory: ``python -c`` puts its
    working directory first on sys.path, which would shadow ``--source``."""
    started = time.perf_counter()
    done = subprocess.run(
        argv, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=False
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{argv[-1]!r} failed ({done.returncode}): {done.stderr.strip()}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--rounds", type=int, default=15, help="rounds (default 15)")
    parser.add_argument("--source", type=Path, default=ROOT, help="odf_chain source tree")
    parser.add_argument("--before", type=Path, help="another source tree, measured beside it")
    args = parser.parse_args()
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    floor = [
        ("python -c pass", [sys.executable, "-c", "pass"], clean),
        ("python -c 'import pyarrow'", [sys.executable, "-c", "import pyarrow"], clean),
        ("python -c 'import deltalake'", [sys.executable, "-c", "import deltalake"], clean),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ds = _dataset(Path(tmp))
        commands = floor + _commands(args.source.resolve(), "", ds)
        if args.before is not None:
            commands += _commands(args.before.resolve(), "before: ", ds)
        for _, argv, env in commands:  # warm the page cache and the .pyc files
            _time(argv, env)
        times: dict[str, list[float]] = {name: [] for name, _, _ in commands}
        for _ in range(args.rounds):
            for name, argv, env in commands:
                times[name].append(_time(argv, env))
    median = {name: statistics.median(t) for name, t in times.items()}
    base, arrow, delta = (median[name] for name, _, _ in floor)
    load = os.getloadavg()[0]
    print(
        f"CLI start-up, median of {args.rounds} fresh processes each, interleaved "
        f"({os.cpu_count()} cores, load {load:.1f}, Python {sys.version.split()[0]})"
    )
    print(f"{'command':<36} {'median':>8} {'x pass':>7} {'x pyarrow':>9} {'x deltalake':>11}")
    for name in times:
        m = median[name]
        print(
            f"{name:<36} {m * 1000:>6.0f}ms {m / base:>7.1f} {m / arrow:>9.2f} {m / delta:>11.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
