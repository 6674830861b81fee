#!/usr/bin/env python3
"""The odf_chain demo: real PySpark ingests into a local dataset, then replay, field paths,
reading back, verification and tamper detection.

    bash tools/demo.sh            # sets up .venv, then runs this
    python tools/demo.py [DIR]    # default DIR: ./demo-output

Generates its own data (no downloads): 200,000 sensor readings in four Avro files, then
100,000 more in two Parquet files that add a nullable column. Every step runs through the same
`odf-chain` / `chain-verify` commands a user would type, with local Spark (`--master local[*]`).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

ROWS_PER_FILE = 50_000
STATIONS = [f"station-{i:02d}" for i in range(24)]
AVRO_SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "demo.sensors",
    "doc": "One reading of one weather station",
    "fields": [
        {"name": "station", "type": "string"},
        {"name": "temperature_c", "type": "double"},
        {
            "name": "location",
            "type": {
                "type": "record",
                "name": "Location",
                "fields": [{"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}],
            },
        },
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


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


def readings(rng: random.Random, start: datetime, n: int) -> list[dict]:
    return [
        {
            "station": STATIONS[i % len(STATIONS)],
            "temperature_c": round(rng.gauss(14.0, 6.0), 2),
            "location": {"lat": 59.3 + rng.random(), "lon": 18.0 + rng.random()},
            "event_time": start + timedelta(seconds=i),
        }
        for i in range(n)
    ]


def generate(inputs: Path) -> None:
    rng = random.Random(7)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    (inputs / "avro").mkdir(parents=True)
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    for i in range(4):
        with (inputs / "avro" / f"readings-{i}.avro").open("wb") as fh:
            rows = readings(rng, start + timedelta(days=i), ROWS_PER_FILE)
            fastavro.writer(fh, parsed, rows, codec="deflate")
    (inputs / "parquet").mkdir()
    for i in range(2):
        rows = readings(rng, start + timedelta(days=4 + i), ROWS_PER_FILE)
        for row in rows:
            row["humidity_pct"] = round(rng.uniform(20, 95), 1) if rng.random() > 0.1 else None
        table = pa.Table.from_pylist(rows)
        table = table.set_column(
            table.schema.get_field_index("event_time"),
            "event_time",
            table.column("event_time").cast(pa.timestamp("ms", tz="UTC")),
        )
        pq.write_table(table, inputs / "parquet" / f"readings-{i}.parquet")
    (inputs / "bad.csv").write_text(
        "station,temperature_c,event_time\nstation-01,warm,2026-11-07T00:00:00Z\n"
    )


def first_data_block(dataset: Path) -> int:
    from odf_chain import AddData, Dataset

    return next(
        e.block.sequence_number
        for e in Dataset.open(dataset).blocks()
        if isinstance(e.block.event, AddData)
    )


def read_back(dataset: Path, at: int) -> None:
    from pyspark.sql import SparkSession, functions as F

    from odf_chain.spark import read

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[*]")
        .appName("odf-chain demo read")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        frame = read(spark, dataset, at=at)
        summary = frame.agg(
            F.count("*").alias("rows"),
            F.min("offset").alias("first"),
            F.max("offset").alias("last"),
        ).first()
        print(f">>> odf_chain.spark.read(spark, {dataset.name!r}, at={at})")
        print(
            f"{summary['rows']:,} rows, offsets {summary['first']}..{summary['last']}, "
            f"columns: {', '.join(frame.columns)}"
        )
    finally:
        spark.stop()


def main(argv: list[str]) -> int:
    target = Path(argv[1] if len(argv) > 1 else "demo-output").resolve()
    if target.exists():
        shutil.rmtree(target)
    inputs, dataset = target / "inputs", target / "sensors"

    banner("Generate 300,000 readings: four Avro files, two Parquet files with a new column")
    generate(inputs)
    for path in sorted(inputs.rglob("*.*")):
        print(f"{path.relative_to(target)}  {path.stat().st_size:,} bytes")

    banner("Ingest the Avro files with Spark (creates the dataset: Seed, SetDataSchema, AddData)")
    run(
        "odf-chain", "ingest", str(dataset), str(inputs / "avro"),
        "--format", "avro", "--event-time", "event_time", "--create",
    )  # fmt: skip

    banner("An incompatible input is refused before any block is appended")
    code = run(
        "odf-chain", "ingest", str(dataset), str(inputs / "bad.csv"), "--format", "csv",
        check=False,
    )  # fmt: skip
    if code == 0:
        raise SystemExit("demo: an incompatible schema change was accepted")

    banner("Ingest the Parquet files, which add a nullable column (schema evolution)")
    run(
        "odf-chain", "ingest", str(dataset), str(inputs / "parquet"),
        "--format", "parquet", "--event-time", "event_time",
    )  # fmt: skip

    banner("The chain")
    run("odf-chain", "log", str(dataset))

    banner("Schema history")
    run("odf-chain", "schema", str(dataset), "--history")

    first = first_data_block(dataset)
    banner(f"DataHub v2 field paths at block {first} (first data) and at head (Avro convention)")
    run("odf-chain", "fields", str(dataset), "--at", str(first))
    run("odf-chain", "fields", str(dataset), "--at", "head")

    banner(f"Read the data back as of block {first}")
    read_back(dataset, first)

    banner("Verify: every block hash, every rule, every slice")
    run("chain-verify", str(dataset))

    banner("Tamper with one bit of one slice in a copy, and verify again")
    tampered = target / "sensors-tampered"
    shutil.copytree(dataset, tampered)
    victim = sorted((tampered / "data").iterdir())[0]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    victim.write_bytes(bytes(raw))
    print(f"flipped one bit in data/{victim.name[:16]}…")
    code = run("chain-verify", str(tampered), check=False)
    if code == 0:
        raise SystemExit("demo: tampering went unnoticed")
    print(f"chain-verify exited {code}: tampering detected")
    print(f"\nDemo dataset left in {dataset}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
