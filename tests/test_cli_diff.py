"""``odf-chain diff DIR A B``: what the blocks after A, up to B, changed, on real datasets
(Dataset.write, set_schema, a LineageRecorder's run, a transaction, SetInfo, SetLicense,
SetVocab), run by the CLI's ``main`` in this process (tests/cli_run.py).

Every expected line is typed by hand: field paths from docs/field-paths.md (lakehouse
convention: int64 is ``long``), row counts and offsets from the writes below, block hashes
and slice sizes read from the dataset's files (``blocks/``, ``data/``), never from the code
under test."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain.dataset import Dataset
from odf_chain.events import SetInfo, SetLicense, SetVocab
from odf_chain.lineage.recorder import LineageRecorder
from tests.cli_run import run_main


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_main(["diff", *args])


def short(name: str) -> str:
    """What log prints of a block file's name: 12 hex digits after the 5-character header, or
    up to the first letter when those 12 are all digits (so it is never read as a number)."""
    assert name[:5] == "f1e20"
    digest = name[5:]
    end = 12
    while end < len(digest) and digest[:end].isdigit():
        end += 1
    return digest[:end]


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """0 Seed; 1 SetDataSchema (id, name); 2 AddData (3 rows); 3 SetInfo; 4 SetDataSchema
    (+ age); 5 AddData (2 rows, lineage of run r-1 of job load, transaction loader v7);
    6 SetLicense."""
    root = tmp_path_factory.mktemp("diff") / "people"
    ds = Dataset.create(root)
    ds.write(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}))
    ds.append(SetInfo(description="people", keywords=("a", "b")))
    ds.set_schema(pa.schema([("id", pa.int64()), ("name", pa.string()), ("age", pa.int64())]))
    rec = LineageRecorder("load", run_id="r-1")
    raw = rec.external_input("csv", "file:///src/people.csv")
    read = rec.read("read", raw, ["id", "name", "age"])
    rec.write("write", {"id": read["id"], "name": read["name"], "age": read["age"]})
    ds.write(
        pa.table(
            {"id": pa.array([4, 5], pa.int64()), "name": ["d", "e"], "age": pa.array([30, 40])}
        ),
        lineage=rec,
        transaction=("loader", 7),
    )
    ds.append(SetLicense(short_name="CC-BY", spdx_id="CC-BY-4.0"))
    return root


def blocks(root: Path) -> list[dict]:
    """The blocks as ``log --json`` gives them, oldest first."""
    return list(reversed(json.loads(run_main(["log", root, "--json"]).stdout)))


def slice_size(root: Path, block: dict) -> int:
    return os.path.getsize(root / "data" / block["event"]["new_data"]["physical_hash"])


def test_diff_names_the_fields_and_rows_added_and_what_was_recorded(people: Path) -> None:
    b = blocks(people)
    assert [x["event_type"] for x in b] == [
        "Seed", "SetDataSchema", "AddData", "SetInfo", "SetDataSchema", "AddData", "SetLicense",
    ]  # fmt: skip
    size = slice_size(people, b[5])
    p = run(people, "2", "5")
    assert (p.returncode, p.stderr) == (0, ""), p.stderr
    assert p.stdout.splitlines() == [
        f"from block 2 ({short(b[2]['hash'])}) to block 5 ({short(b[5]['hash'])}): 3 blocks",
        "  1 SetInfo, 1 SetDataSchema, 1 AddData",
        "schema (set at block 4):",
        "  + [version=2.0].[type=long].age",
        f"data: 2 rows added in 1 slice ({size:,} bytes), offsets 3..4",
        f"watermark: {b[2]['event']['new_watermark']} -> {b[5]['event']['new_watermark']}",
        "info:",
        "  description: (none) -> 'people'",
        "  keywords: (none) -> [a, b]",
        "lineage runs:",
        "  block 5: run r-1 of job load (2 field operations)",
        "transactions:",
        "  block 5: loader version 7",
    ]


def test_refs_are_taken_in_every_form(people: Path) -> None:
    b = blocks(people)
    expected = run(people, "2", "5").stdout
    assert run(people, short(b[2]["hash"]), short(b[5]["hash"])).stdout == expected
    assert run(people, b[2]["hash"], b[5]["hash"][:16]).stdout == expected
    # B defaults to head: the SetLicense too
    p = run(people, "5")
    assert p.stdout.splitlines() == [
        f"from block 5 ({short(b[5]['hash'])}) to block 6 ({short(b[6]['hash'])}): 1 block",
        "  1 SetLicense",
        "license:",
        "  short_name: (none) -> 'CC-BY'",
        "  spdx_id: (none) -> 'CC-BY-4.0'",
    ]
    assert run(people, "5", "HEAD").stdout == p.stdout


def test_from_the_seed_every_field_is_added(people: Path) -> None:
    b = blocks(people)
    p = run(people, "0", "2")
    assert p.stdout.splitlines() == [
        f"from block 0 ({short(b[0]['hash'])}) to block 2 ({short(b[2]['hash'])}): 2 blocks",
        "  1 SetDataSchema, 1 AddData",
        "schema (set at block 1):",
        "  + [version=2.0].[type=long].offset",
        "  + [version=2.0].[type=int].op",
        "  + [version=2.0].[type=int].system_time",
        "  + [version=2.0].[type=int].event_time",
        "  + [version=2.0].[type=long].id",
        "  + [version=2.0].[type=string].name",
        f"data: 3 rows added in 1 slice ({slice_size(people, b[2]):,} bytes), offsets 0..2",
        f"watermark: (none) -> {b[2]['event']['new_watermark']}",
    ]


def test_json(people: Path) -> None:
    b = blocks(people)
    p = run(people, "2", "5", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {
        "blocks": 3,
        "a": {"sequence_number": 2, "hash": b[2]["hash"], "system_time": b[2]["system_time"]},
        "b": {"sequence_number": 5, "hash": b[5]["hash"], "system_time": b[5]["system_time"]},
        "events": {"SetInfo": 1, "SetDataSchema": 1, "AddData": 1},
        "schema": {
            "added": ["[version=2.0].[type=long].age"],
            "removed": [],
            "retyped": [],
            "nullability": [],
            "blocks": [4],
        },
        "data": {
            "rows": 2,
            "slices": 1,
            "bytes": slice_size(people, b[5]),
            "offsets": [3, 4],
            "watermark": [b[2]["event"]["new_watermark"], b[5]["event"]["new_watermark"]],
        },
        "vocabulary": [],
        "info": [
            {"name": "description", "old": None, "new": "people"},
            {"name": "keywords", "old": None, "new": ["a", "b"]},
        ],
        "license": [],
        "lineage_runs": [{"block": 5, "run_id": "r-1", "job_name": "load", "operations": 2}],
        "transactions": [{"block": 5, "app_id": "loader", "version": 7}],
        "derive_runs": [],
    }


def test_the_same_block_is_no_change_and_an_older_b_is_refused(people: Path) -> None:
    b = blocks(people)
    p = run(people, "3", "3")
    assert p.stdout.splitlines() == [
        f"from block 3 ({short(b[3]['hash'])}) to block 3 ({short(b[3]['hash'])}): 0 blocks",
        "no change: the same block",
    ]
    p = run(people, "5", "2")
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr.splitlines() == [
        "odf-chain: error: block 2 (sequence number 2) comes before block 5 (5): give the "
        "older block first (diff DIR 2 5)"
    ]
    p = run(people, "2", "9")
    assert p.returncode == 2 and p.stderr.startswith("odf-chain: error: no block")


def test_a_vocabulary_change(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.append(SetVocab(event_time_column="observed_at"))
    p = run(tmp_path / "ds", "0", "1")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[1:] == [
        "  1 SetVocab",
        "vocabulary:",
        "  event_time_column: 'event_time' -> 'observed_at'",
    ]


@pytest.mark.spark
def test_derive_runs_in_between(spark, tmp_path: Path) -> None:
    from odf_chain.spark import derive

    sensors = Dataset.create(tmp_path / "sensors")
    sensors.write(pa.table({"station": ["a", "a", "b", "c"], "temp": [1.0, 2.0, 3.0, 4.0]}))
    sql = "SELECT station, COUNT(*) AS n FROM sensors GROUP BY station"
    derive(sql, {"sensors": sensors}, tmp_path / "counts", create=True, spark=spark)
    first = Dataset.open(tmp_path / "counts").state.sequence_number
    sensors.write(pa.table({"station": ["a", "b", "d"], "temp": [5.0, 6.0, 7.0]}))
    derive(sql, {"sensors": sensors}, tmp_path / "counts", spark=spark)
    b = blocks(tmp_path / "counts")
    assert b[first]["event_type"] == "ExecuteTransform"
    assert b[-1]["event_type"] == "ExecuteTransform" and len(b) == first + 2
    p = run(tmp_path / "counts", str(first))
    assert p.returncode == 0, p.stderr
    # the answer went from a 2, b 1, c 1 to a 3, b 2, c 1, d 1: a and b retracted and
    # appended anew, d appended (5 changelog rows, offsets after the first run's 3)
    lines = p.stdout.splitlines()[1:]
    assert lines[:2] == [
        "  1 ExecuteTransform",
        f"data: 5 rows added in 1 slice ({slice_size(tmp_path / 'counts', b[-1]):,} bytes), "
        "offsets 3..7",
    ]
    # the run's field lineage (captured from its plan; its run id is a fresh UUID)
    assert lines[2] == "lineage runs:"
    assert re.fullmatch(
        rf"  block {first + 1}: run [0-9a-f-]{{36}} of job .+ \(\d+ field operations?\)", lines[3]
    )
    assert lines[4:] == [
        "derive runs:",
        f"  block {first + 1}: 5 rows from {sensors.state.dataset_id} to offset 6",
    ]
