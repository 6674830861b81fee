#!/usr/bin/env python3
"""The odf_chain demo: build a dataset, evolve its schema, inspect it, verify it, tamper with it.

    bash tools/demo.sh            # sets up .venv, then runs this
    python tools/demo.py [DIR]    # default DIR: ./demo-output

Generates its own data (no downloads), writes real Parquet slices and real blocks, and shows
each step through the same `odf-chain` / `chain-verify` commands a user would type.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from odf_chain import Dataset, SchemaEvolutionError

ROWS_PER_SLICE = 20_000


def banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def run(*args: str, check: bool = True) -> int:
    """Run a CLI command the way a user would, echoing it."""
    exe = Path(sys.executable).parent
    command = [str(exe / args[0]) if (exe / args[0]).exists() else args[0], *args[1:]]
    print(f"$ {' '.join(args)}", flush=True)
    code = subprocess.run(command, check=False).returncode
    if check and code != 0:
        raise SystemExit(f"demo: '{' '.join(args)}' exited {code}")
    return code


def sensor_readings(rng: random.Random, start: datetime, n: int, with_humidity: bool) -> pa.Table:
    """Synthetic IoT readings: one row per sensor per second."""
    stations = [f"station-{i:02d}" for i in range(12)]
    columns = {
        "event_time": pa.array(
            [start + timedelta(seconds=i) for i in range(n)], type=pa.timestamp("ms", tz="UTC")
        ),
        "station": [stations[i % len(stations)] for i in range(n)],
        "temperature_c": [round(rng.gauss(14.0, 6.0), 2) for _ in range(n)],
        "location": pa.array(
            [{"lat": 59.3 + rng.random(), "lon": 18.0 + rng.random()} for _ in range(n)],
            type=pa.struct([("lat", pa.float64()), ("lon", pa.float64())]),
        ),
    }
    if with_humidity:
        columns["humidity_pct"] = [round(rng.uniform(20, 95), 1) for _ in range(n)]
    return pa.table(columns)


def main(argv: list[str]) -> int:
    target = Path(argv[1] if len(argv) > 1 else "demo-output").resolve()
    dataset_dir = target / "sensors"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    rng = random.Random(7)
    start = datetime(2026, 11, 1, tzinfo=UTC)

    banner("Create a dataset (Seed block, fresh did:odf id, BLAKE3 hashes)")
    run("odf-chain", "init", str(dataset_dir))

    banner("Write three slices, then evolve the schema with a new nullable column")
    dataset = Dataset.open(dataset_dir)
    for i in range(3):
        table = sensor_readings(rng, start + timedelta(hours=i), ROWS_PER_SLICE, False)
        blocks = dataset.write(table)
        print(f"wrote {table.num_rows:,} rows -> {', '.join(b.block.event_name for b in blocks)}")
    table = sensor_readings(rng, start + timedelta(hours=3), ROWS_PER_SLICE, True)
    blocks = dataset.write(table)
    print(
        f"wrote {table.num_rows:,} rows with humidity_pct -> "
        f"{', '.join(b.block.event_name for b in blocks)}"
    )

    banner("An incompatible change is refused before anything is written")
    bad = sensor_readings(rng, start + timedelta(hours=4), 10, True)
    bad = bad.set_column(
        bad.schema.get_field_index("temperature_c"),
        "temperature_c",
        bad.column("temperature_c").cast(pa.string()),
    )
    print("writing temperature_c as strings instead of doubles ...")
    try:
        dataset.write(bad)
    except SchemaEvolutionError as exc:
        print(f"refused: {exc}")
    else:
        raise SystemExit("demo: an incompatible schema change was accepted")

    banner("The chain")
    run("odf-chain", "log", str(dataset_dir))

    banner("Schema at the first data block, and at head")
    run("odf-chain", "schema", str(dataset_dir), "--at", "1")
    run("odf-chain", "schema", str(dataset_dir), "--at", "head")

    banner("DataHub v2 field paths at the first data block, and at head")
    run("odf-chain", "fields", str(dataset_dir), "--at", "1")
    run("odf-chain", "fields", str(dataset_dir), "--at", "head")

    banner("Schema history: every SetDataSchema and what it changed")
    run("odf-chain", "schema", str(dataset_dir), "--history")

    banner("Verify: every block hash, every rule, every slice")
    run("chain-verify", str(dataset_dir))

    banner("Tamper with one byte of one slice in a copy, and verify again")
    tampered = target / "sensors-tampered"
    shutil.copytree(dataset_dir, tampered)
    victim = sorted((tampered / "data").iterdir())[0]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    victim.write_bytes(bytes(raw))
    print(f"flipped one bit in data/{victim.name[:16]}…")
    code = run("chain-verify", str(tampered), check=False)
    if code == 0:
        raise SystemExit("demo: tampering went unnoticed")
    print(f"chain-verify exited {code}: tampering detected")
    print(f"\nDemo dataset left in {dataset_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
