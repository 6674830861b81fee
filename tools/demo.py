#!/usr/bin/env python3
"""The odf_chain demo: real PySpark ingests into a local dataset, then replay, field paths,
reading back, a derived dataset made by `odf-chain derive` from the readings and a stations
dataset (field lineage captured from its plan, answered by `odf-chain lineage`, exported for
DataHub), corrected when late readings land, proved by `chain-verify --reproduce`, a forged
derived number caught; verification and tamper detection, a skipped re-ingest, and a receipt
catching a rolled-back head.

    bash tools/demo.sh            # sets up .venv, then runs this
    python tools/demo.py [DIR]    # default DIR: ./demo-output

Generates its own data (no downloads): 200,000 sensor readings in four Avro files, then
100,000 more in two Parquet files that add a nullable column (refused until `--evolve` asks for
it, as is a CSV whose header misspells a column), a small CSV of stations and their regions for
the derived dataset, and 5,000 late readings for days it already covers. Every step runs
through the same `odf-chain` / `chain-verify` commands a user would type, with local Spark
(`--master local[*]`).
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
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROWS_PER_FILE = 50_000
STATIONS = [f"station-{i:02d}" for i in range(24)]
REGIONS = ["north", "east", "south", "west"]
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
    stations = "station,region,elevation_m\n" + "".join(
        f"{name},{REGIONS[i % len(REGIONS)]},{10 * i}\n" for i, name in enumerate(STATIONS)
    )
    (inputs / "stations.csv").write_text(stations)
    # a late batch: more readings for days the derived statistics already cover
    late = pa.Table.from_pylist(readings(rng, start, 5_000))
    late = late.set_column(
        late.schema.get_field_index("event_time"),
        "event_time",
        late.column("event_time").cast(pa.timestamp("ms", tz="UTC")),
    )
    (inputs / "late").mkdir()
    pq.write_table(late, inputs / "late" / "readings-late.parquet")
    (inputs / "bad.csv").write_text(
        "station,temperature_c,event_time\nstation-01,warm,2026-11-07T00:00:00Z\n"
    )
    (inputs / "typo.csv").write_text(
        "station,temperature,event_time\nstation-01,12.5,2026-11-07T00:00:00Z\n"
    )


def first_data_block(dataset: Path) -> int:
    from odf_chain import AddData, Dataset

    return next(
        e.block.sequence_number
        for e in Dataset.open(dataset).blocks()
        if isinstance(e.block.event, AddData)
    )


def roll_back(dataset: Path, seq: int) -> None:
    """What restoring an old backup of refs/head does: the head names an older block."""
    from odf_chain import Dataset

    old = Dataset.open(dataset).state_at(seq).head
    (dataset / "refs" / "head").write_text(str(old))
    print(f"refs/head now names block {seq} ({str(old)[:16]}…)")


def spark_session(name: str):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[*]")
        .appName(name)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def read_back(dataset: Path, at: int) -> None:
    from pyspark.sql import functions as F

    from odf_chain.spark import read

    spark = spark_session("odf-chain demo read")
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


DERIVE_SQL = """\
SELECT s.region, CAST(r.event_time AS DATE) AS day,
       AVG(r.temperature_c) AS avg_temperature_c, MAX(r.temperature_c) AS max_temperature_c,
       COUNT(*) AS readings,
       CASE WHEN MAX(r.temperature_c) > 30 THEN 'hot' ELSE 'mild' END AS kind
FROM sensors r JOIN stations s ON r.station = s.station
GROUP BY s.region, CAST(r.event_time AS DATE)"""


def forge_last_run(dataset: Path) -> None:
    """What a forger with write access does to a derived number so that plain verify passes:
    the last run taken back, its slice rewritten with other values, the run appended again
    with every hash recomputed; the head log and the index, which would tell, removed."""
    from dataclasses import replace

    from odf_chain import Dataset, chain
    from odf_chain.format.multihash import Multihash
    from odf_chain.slices import parquet_logical_hash

    ds = Dataset.open(dataset)
    blocks = ds.blocks()
    last = blocks[-1]
    event = last.block.event
    old = dataset / "data" / str(event.new_data.physical_hash)
    table = pq.read_table(old)
    index = table.schema.get_field_index("avg_temperature_c")
    appended = pc.equal(table.column("op"), 0)  # the rows the run added (not its retractions)
    nudged = pc.if_else(appended, pc.add(table.column(index), 0.5), table.column(index))
    table = table.set_column(index, "avg_temperature_c", nudged)
    staged = dataset / "forged.parquet"
    pq.write_table(table, staged)
    name = str(Multihash.digest("blake3", staged.read_bytes()))
    size = staged.stat().st_size
    staged.rename(dataset / "data" / name)
    with pq.ParquetFile(dataset / "data" / name) as parquet:
        logical = parquet_logical_hash(parquet, "blake3")
    new_data = replace(
        event.new_data, physical_hash=Multihash.from_multibase(name), logical_hash=logical,
        size=size,
    )  # fmt: skip
    # (the run's recorded slice digest is left as it was: --deep would catch that one too)
    ds.storage.compare_and_swap_head(str(last.hash), str(blocks[-2].hash))
    (dataset / "logs" / "head").unlink()
    shutil.rmtree(dataset / "info", ignore_errors=True)
    (dataset / "blocks" / str(last.hash)).unlink()
    old.unlink()
    state = Dataset.open(dataset).refresh()
    forged = replace(event, new_data=new_data)
    chain.append(ds.storage, state, forged, system_time=last.block.system_time)
    print(f"rewrote the last run's slice (avg_temperature_c + 0.5) as data/{name[:16]}…")


def verified_numbers(target: Path, sensors: Path, inputs: Path) -> None:
    """A derivative dataset made by `odf-chain derive`: its field lineage, its export, a
    correction when late readings land, a proof by re-running it; then a forged number caught."""
    stations = target / "stations"
    banner("Stations as a dataset of their own (ingested like the readings)")
    run("odf-chain", "ingest", str(stations), str(inputs / "stations.csv"), "--format", "csv",
        "--create")  # fmt: skip
    daily = target / "daily-stats"
    derive_args = [
        "odf-chain", "derive", str(daily), "--sql", DERIVE_SQL,
        "--input", f"sensors={sensors}", "--input", f"stations={stations}",
    ]  # fmt: skip
    banner("odf-chain derive: daily statistics per region (a join, an aggregation, a CASE)")
    print(DERIVE_SQL)
    run(*derive_args, "--create")
    run("odf-chain", "log", str(daily))

    banner("Where does avg_temperature_c come from? Back to the source files")
    run("odf-chain", "lineage", str(daily), "avg_temperature_c", "--upstream", "--depth", "all")
    banner("The whole field graph of the derived dataset")
    run("odf-chain", "lineage", str(daily))
    banner("Export to DataHub (MCP JSON with schemaMetadata and fine-grained lineage)")
    exported = target / "daily-stats.datahub.json"
    run("odf-chain", "export", "datahub", str(daily), "-o", str(exported))

    banner("Late readings for days already covered arrive; derive again: those days corrected")
    run("odf-chain", "ingest", str(sensors), str(inputs / "late"), "--format", "parquet",
        "--event-time", "event_time", "--evolve")  # fmt: skip
    run(*derive_args)
    run("odf-chain", "log", str(daily), "-n", "1")
    banner("Which run wrote the last record, and exactly which input rows did it read?")
    from odf_chain import Dataset

    last = Dataset.open(daily).state.last_offset
    run("odf-chain", "lineage", str(daily), "avg_temperature_c", "--offset", str(last))

    banner("chain-verify --reproduce: every run re-run on exactly the input rows it pinned")
    run("chain-verify", str(daily), "--reproduce")
    banner("Forge a derived number in a copy (every hash recomputed): plain verify passes ...")
    forged = target / "daily-stats-forged"
    shutil.copytree(daily, forged)
    forge_last_run(forged)
    run("chain-verify", str(forged))
    banner("... --reproduce does not")
    code = run("chain-verify", str(forged), "--reproduce", check=False)
    if code != 1:
        raise SystemExit(f"demo: a forged derived number gave exit {code}, expected 1")
    print(f"chain-verify --reproduce exited {code}: the numbers are not what the inputs give")


MARKER = ".odf-chain-demo"  # a directory holding it is the demo's own output: safe to remove
MADE = {  # what the demo writes in its directory (an earlier version left no marker)
    MARKER, "inputs", "sensors", "sensors-tampered", "sensors-rolled-back", "sensors-receipt.json",
    "stations", "daily-stats", "daily-stats-forged", "daily-stats.datahub.json",
}  # fmt: skip


def _arguments(argv: list[str]) -> Path:
    import argparse

    parser = argparse.ArgumentParser(
        prog="tools/demo.py",
        description="Run the odf_chain demo (real Spark ingests, replay, lineage, a derived "
        "dataset, verify and tamper detection) on data it generates.",
    )
    parser.add_argument(
        "dir",
        nargs="?",
        default="demo-output",
        help="where to write (default ./demo-output); replaced only if an earlier demo made it",
    )
    return Path(parser.parse_args(argv[1:]).dir).resolve()


def _fresh(target: Path) -> None:
    """Empty ``target`` for the demo: a directory the demo made before is removed; anything
    else that exists (a file, a user's directory) is left alone and refused."""
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise SystemExit(f"demo: {target} exists and is not a directory the demo made: not touched")
    if target.exists():
        if not {entry.name for entry in target.iterdir()} <= MADE:
            raise SystemExit(
                f"demo: {target} exists and was not made by the demo: not removed (give a new "
                "or empty directory)"
            )
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / MARKER).write_text("made by tools/demo.py; removed by its next run\n")


def main(argv: list[str]) -> int:
    target = _arguments(argv)
    _fresh(target)
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

    banner("The same files again: already ingested (their content hashes are in the chain)")
    run(
        "odf-chain", "ingest", str(dataset), str(inputs / "avro"),
        "--format", "avro", "--event-time", "event_time",
    )  # fmt: skip

    banner("An incompatible input is refused before any block is appended")
    code = run(
        "odf-chain", "ingest", str(dataset), str(inputs / "bad.csv"), "--format", "csv",
        check=False,
    )  # fmt: skip
    if code == 0:
        raise SystemExit("demo: an incompatible schema change was accepted")

    banner("A misspelt column is refused too: a column once added stays for good")
    code = run(
        "odf-chain", "ingest", str(dataset), str(inputs / "typo.csv"), "--format", "csv",
        "--event-time", "event_time", check=False,
    )  # fmt: skip
    if code == 0:
        raise SystemExit("demo: a misspelt column was added without --evolve")

    banner("The Parquet files add a nullable column: refused unless asked for")
    parquet = [str(inputs / "parquet"), "--format", "parquet", "--event-time", "event_time"]
    code = run("odf-chain", "ingest", str(dataset), *parquet, check=False)
    if code == 0:
        raise SystemExit("demo: a new column was added without --evolve")

    banner("The same ingest with --evolve (schema evolution: SetDataSchema, then the data)")
    run("odf-chain", "ingest", str(dataset), *parquet, "--evolve")

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

    banner("Verify: every block hash, every rule, every slice; then take a receipt of the head")
    run("chain-verify", str(dataset))
    receipt = target / "sensors-receipt.json"
    run("odf-chain", "receipt", str(dataset), "-o", str(receipt))
    print(receipt.read_text(), end="")

    verified_numbers(target, dataset, inputs)

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

    banner("Restore an old refs/head in another copy: the head log catches it, and a receipt")
    rolled = target / "sensors-rolled-back"
    shutil.copytree(dataset, rolled)
    roll_back(rolled, first)
    code = run("chain-verify", str(rolled), check=False)
    if code == 0:
        raise SystemExit("demo: a rolled-back head went unnoticed")
    (rolled / "logs" / "head").unlink()
    print("removed logs/head as well (whoever can write the dataset can do that)")
    code = run("chain-verify", str(rolled), "--receipt", str(receipt), check=False)
    if code == 0:
        raise SystemExit("demo: the receipt did not catch the rolled-back head")
    print(f"chain-verify --receipt exited {code}: the chain no longer holds the receipt's block")
    print(f"\nDemo dataset left in {dataset}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
