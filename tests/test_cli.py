"""The real console scripts, run as subprocesses: ``python -m odf_chain.cli`` and the installed
``chain-verify`` entry point."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.dataset import Dataset
from tests.cli_run import run_ingest
from tests.helpers import multihash_name, snapshot_tree

CHAIN_VERIFY = Path(sys.executable).parent / "chain-verify"
HASH = r"f(1e|16)20[0-9a-f]{64}"


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odf_chain.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def run_verify(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHAIN_VERIFY), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def assert_clean(p: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in p.stdout and "Traceback" not in p.stderr, p.stderr


def assert_one_line_error(p: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert_clean(p)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    (line,) = lines
    # each entry point names itself: the chain-verify process as chain-verify
    prog = "chain-verify" if Path(str(p.args[0])).name == "chain-verify" else "odf-chain"
    assert line.startswith(f"{prog}: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


@pytest.fixture(scope="module")
def evolved_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Seed; schema {id}; 2 rows; schema {id, name}; 1 row."""
    root = tmp_path_factory.mktemp("cli") / "ds"
    ds = Dataset.create(root)
    ds.write(pa.table({"id": pa.array([1, 2], pa.int64())}))
    ds.write(pa.table({"id": pa.array([3], pa.int64()), "name": pa.array(["c"])}), evolve=True)
    return root


def block_names_by_seq(root: Path) -> list[str]:
    return [str(e.hash) for e in Dataset.open(root).blocks()]


# -- init -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "algorithm"), [((), "blake3"), (("--hash", "sha3-256"), "sha3-256")]
)
def test_init(tmp_path: Path, flags: tuple[str, ...], algorithm: str) -> None:
    root = tmp_path / "new"
    p = run("init", root, *flags)
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    (name,) = [q.name for q in (root / "blocks").iterdir()]
    assert name == multihash_name((root / "blocks" / name).read_bytes(), algorithm)
    assert (root / "refs" / "head").read_text().strip() == name
    out = p.stdout
    assert f"created {root}" in out
    assert re.search(rf"hash\s+{algorithm}\b", out)
    assert re.search(rf"head\s+{name}\b", out)
    did = re.search(r"dataset id\s+(did:odf:fed01[0-9a-f]{64})\b", out)
    assert did is not None
    assert (
        bytes.fromhex(did.group(1).removeprefix("did:odf:fed01"))
        in (root / "blocks" / name).read_bytes()
    )


def test_init_over_existing_dataset(evolved_dataset: Path) -> None:
    before = snapshot_tree(evolved_dataset)
    assert_one_line_error(run("init", evolved_dataset), "already a dataset", str(evolved_dataset))
    assert_one_line_error(run("init", evolved_dataset, "--hash", "sha3-256"), "already a dataset")
    assert snapshot_tree(evolved_dataset) == before


def test_init_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert_one_line_error(run("init", tmp_path / "file" / "ds"), "file")


# -- log ------------------------------------------------------------------------------------------


def test_log_text(evolved_dataset: Path) -> None:
    p = run("log", evolved_dataset)
    assert_clean(p)
    assert p.returncode == 0 and p.stderr == ""
    names = block_names_by_seq(evolved_dataset)
    header, *lines = p.stdout.splitlines()
    assert header.split()[:2] == ["SEQ", "BLOCK"]
    assert len(lines) == 5
    expected_events = ["AddData", "SetDataSchema", "AddData", "SetDataSchema", "Seed"]
    for line, seq, event in zip(lines, [4, 3, 2, 1, 0], expected_events, strict=True):
        fields = line.split()
        assert fields[0] == str(seq)
        # the digest's first 12 hex digits, after the header 'f1e20' every block shares (more
        # while all are digits: a number would name a sequence number)
        digest, end = names[seq][5:], 12
        while end < len(digest) and digest[:end].isdigit():
            end += 1
        assert fields[1] == digest[:end]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", fields[2])
        assert fields[3] == event
        assert len(line) <= 100
    assert "offsets 2..2" in lines[0] and "offsets 0..1" in lines[2]
    assert "name" in lines[1]
    assert "did:odf:" in lines[4]


def test_log_json(evolved_dataset: Path) -> None:
    p = run("log", evolved_dataset, "--json")
    assert_clean(p)
    assert p.returncode == 0
    blocks = json.loads(p.stdout)
    names = block_names_by_seq(evolved_dataset)
    assert [b["sequence_number"] for b in blocks] == [4, 3, 2, 1, 0]
    assert [b["hash"] for b in blocks] == names[::-1]
    assert [b["prev_block_hash"] for b in blocks] == [*names[::-1][1:], None]
    for b in blocks:
        raw = (evolved_dataset / "blocks" / b["hash"]).read_bytes()
        assert b["hash"] == multihash_name(raw)
    assert [b["event_type"] for b in blocks] == [
        "AddData",
        "SetDataSchema",
        "AddData",
        "SetDataSchema",
        "Seed",
    ]
    add = blocks[0]["event"]
    assert add["prev_offset"] == 1
    assert add["new_data"]["offset_interval"] == {"start": 2, "end": 2}
    data_name = add["new_data"]["physical_hash"]
    data = (evolved_dataset / "data" / data_name).read_bytes()
    assert data_name == multihash_name(data)
    assert add["new_data"]["size"] == len(data)
    schema_names = [f["name"] for f in blocks[1]["event"]["fields"]]
    assert schema_names == ["offset", "op", "system_time", "event_time", "id", "name"]
    assert blocks[4]["event"]["dataset_id"].startswith("did:odf:fed01")


# -- schema ---------------------------------------------------------------------------------------


def test_schema_at_two_blocks_text(evolved_dataset: Path) -> None:
    names = block_names_by_seq(evolved_dataset)
    p = run("schema", evolved_dataset, "--at", "2")
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["block", "2", names[2]]
    assert lines[1] == "schema set at block 1"
    assert [line.split(":")[0] for line in lines[2:]] == [
        "offset",
        "op",
        "system_time",
        "event_time",
        "id",
    ]
    assert "id: int64" in lines

    p = run("schema", evolved_dataset, "--at", names[4])
    assert_clean(p)
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["block", "4", names[4]]
    assert lines[1] == "schema set at block 3"
    assert "name: string" in lines

    p = run("schema", evolved_dataset, "--at", "0")
    assert p.returncode == 0
    assert "no schema declared yet" in p.stdout


def test_schema_at_two_blocks_json(evolved_dataset: Path) -> None:
    names = block_names_by_seq(evolved_dataset)
    at2 = json.loads(run("schema", evolved_dataset, "--at", names[2], "--json").stdout)
    at4 = json.loads(run("schema", evolved_dataset, "--json").stdout)  # head
    assert (at2["sequence_number"], at2["head"], at2["schema_block"]) == (2, names[2], 1)
    assert (at4["sequence_number"], at4["head"], at4["schema_block"]) == (4, names[4], 3)
    assert [f["name"] for f in at2["schema"]] == ["offset", "op", "system_time", "event_time", "id"]
    assert at4["schema"][-1] == {"name": "name", "type": "string", "nullable": True}
    assert at4["schema"][0] == {"name": "offset", "type": "int64", "nullable": False}
    assert (at2["last_offset"], at2["num_records"]) == (1, 2)
    assert (at4["last_offset"], at4["num_records"]) == (2, 3)
    assert at2["dataset_id"] == at4["dataset_id"]


def test_schema_at_time(evolved_dataset: Path) -> None:
    blocks = json.loads(run("log", evolved_dataset, "--json").stdout)
    seed_time = blocks[-1]["system_time"]
    p = run("schema", evolved_dataset, "--at", seed_time, "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["sequence_number"] == 0


# -- verify ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("runner", ["odf-chain", "chain-verify"])
def test_verify_good_dataset(evolved_dataset: Path, runner: str) -> None:
    p = run("verify", evolved_dataset) if runner == "odf-chain" else run_verify(evolved_dataset)
    assert_clean(p)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr == ""
    (line,) = p.stdout.splitlines()
    assert line.startswith("OK: 5 blocks, 2 slices")
    assert "0 errors, 0 warnings" in line
    assert line.endswith(block_names_by_seq(evolved_dataset)[-1])

    p = (
        run_verify(evolved_dataset, "--json")
        if runner == "chain-verify"
        else run("verify", evolved_dataset, "--json")
    )
    report = json.loads(p.stdout)
    assert p.returncode == 0
    assert (report["ok"], report["errors"], report["blocks_checked"]) == (True, 0, 5)


def test_verify_no_data(evolved_dataset: Path) -> None:
    p = run_verify(evolved_dataset, "--no-data", "--json")
    assert p.returncode == 0
    assert json.loads(p.stdout)["slices_checked"] == 0


@pytest.fixture
def tampered(evolved_dataset: Path, tmp_path: Path) -> tuple[Path, int, str]:
    """A copy of the dataset with one byte of block 2 flipped."""
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(evolved_dataset, root)
    name = block_names_by_seq(root)[2]
    path = root / "blocks" / name
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40
    path.write_bytes(bytes(data))
    return root, 2, name


@pytest.mark.parametrize("runner", ["odf-chain", "chain-verify"])
def test_verify_tampered(tampered: tuple[Path, int, str], runner: str) -> None:
    root, _, name = tampered
    p = run("verify", root) if runner == "odf-chain" else run_verify(root)
    assert_clean(p)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    errors = [line for line in lines if line.startswith("ERROR ")]
    assert errors
    assert any(name in line for line in errors), errors
    assert lines[-1].startswith("FAILED: ")
    p = run("verify", root, "--json")
    report = json.loads(p.stdout)
    assert p.returncode == 1 and report["ok"] is False
    assert any(problem["block_hash"] == name for problem in report["problems"])


def test_verify_tampered_data(evolved_dataset: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(evolved_dataset, root)
    blocks = json.loads(run("log", root, "--json").stdout)
    add = blocks[0]
    data = root / "data" / add["event"]["new_data"]["physical_hash"]
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 1
    data.write_bytes(bytes(raw))
    p = run_verify(root)
    assert_clean(p)
    assert p.returncode == 1
    (error,) = [line for line in p.stdout.splitlines() if line.startswith("ERROR ")]
    assert f"block {add['sequence_number']}" in error
    assert add["hash"] in error and f"data/{data.name}" in error and "[data-hash]" in error


def test_tampered_block_makes_other_commands_fail_cleanly(tampered: tuple[Path, int, str]) -> None:
    root, _, name = tampered
    assert_one_line_error(run("log", root), name)
    # Reads go through the index and read only the blocks they need (issue 10): the schema as
    # of the tampered block reads it; the schema at the head does not (verify finds it).
    assert_one_line_error(run("schema", root, "--at", "2"), name)


# -- errors ---------------------------------------------------------------------------------------


def test_nonexistent_dir(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    for p in (
        run("log", missing),
        run("log", missing, "--json"),
        run("schema", missing),
        run("verify", missing),
        run_verify(missing),
    ):
        assert_one_line_error(p, str(missing))
        assert p.stdout == ""
    assert not missing.exists()


@pytest.mark.parametrize(
    ("ref", "fragment"),
    [
        ("bogus", "unrecognised ref 'bogus'"),
        ("99", "sequence number 99"),
        ("f1e20" + "00" * 32, "f1e20" + "00" * 32),
        ("1999-01-01T00:00:00Z", "1999-01-01"),
    ],
)
def test_bad_ref(evolved_dataset: Path, ref: str, fragment: str) -> None:
    p = run("schema", evolved_dataset, "--at", ref)
    assert_one_line_error(p, fragment)
    assert p.stdout == ""
    assert_one_line_error(run("schema", evolved_dataset, "--at", ref, "--json"), fragment)


def test_bad_head_is_one_line(evolved_dataset: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(evolved_dataset, root)
    (root / "refs" / "head").write_text("f1e20" + "ab" * 32)
    assert_one_line_error(run("log", root), "f1e20" + "ab" * 32)
    p = run_verify(root)
    assert_clean(p)
    assert p.returncode == 1
    assert any("[block-missing]" in line for line in p.stdout.splitlines())


def test_usage_errors_do_not_trace(tmp_path: Path) -> None:
    for p in (run(), run("frobnicate"), run("init", tmp_path / "x", "--hash", "md5"), run_verify()):
        assert_clean(p)
        assert p.returncode == 2
        error, hint = p.stderr.splitlines()  # one line, and where to read the usage
        assert ": error: " in error and hint.startswith("try: ") and hint.endswith(" --help")


def test_a_bug_is_one_line_and_exit_3(capsys, monkeypatch) -> None:
    """An exception odf_chain did not mean to raise still gives one line, not a traceback;
    ODF_CHAIN_DEBUG=1 lets the traceback through for a bug report."""
    import argparse

    from odf_chain.cli import _run

    def broken(args: argparse.Namespace) -> int:
        raise KeyError("a lookup went wrong\nsecond line")

    monkeypatch.delenv("ODF_CHAIN_DEBUG", raising=False)
    assert _run(broken, argparse.Namespace()) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("odf-chain: internal error: KeyError")
    assert "ODF_CHAIN_DEBUG=1" in err
    monkeypatch.setenv("ODF_CHAIN_DEBUG", "1")
    with pytest.raises(KeyError):
        _run(broken, argparse.Namespace())


def _ingest(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``odf-chain ingest``: its own local SparkSession, so a generous time limit."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [sys.executable, "-m", "odf_chain.cli", "ingest", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_ingest_refuses_a_misspelt_column_until_evolve(spark, tmp_path: Path) -> None:
    root = tmp_path / "sensors"
    ds = Dataset.create(root)
    ds.write(pa.table({"station": ["a"], "temperature_c": pa.array([12.5], pa.float64())}))
    (tmp_path / "typo.csv").write_text("station,temperature\nb,13.0\n")
    before = snapshot_tree(root)
    args = ("sensors", "typo.csv", "--format", "csv", "--master", "local[2]")

    p = _ingest(*args, cwd=tmp_path)
    assert_clean(p)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    # Spark's own output went to a log file, removed since Spark had nothing to say about
    # this refusal: stderr is our one line
    (error,) = p.stderr.splitlines()
    assert error == (
        "odf-chain: error: sensors: new column(s) temperature (did you mean temperature_c?); "
        "pass evolve=True (--evolve) to add them"
    ), p.stderr
    assert p.stdout == ""
    assert snapshot_tree(root) == before

    # the same command with --evolve, by its main on the shared session (tests/cli_run.py):
    # the process and its own Spark's output were the refusal's subject, above
    p = run_ingest(spark, [*args, "--evolve"], cwd=tmp_path)
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    state = Dataset.open(root).state
    assert state.schema.names[-3:] == ["station", "temperature_c", "temperature"]
    assert state.schema.field("temperature").type == pa.float64()
    assert state.next_offset == 2  # the CSV's one row went in after the first
    assert Dataset.open(root).verify().problems == []


def test_ingest_event_time_keeps_the_column_name(spark, tmp_path: Path) -> None:
    """``ingest --event-time last_order_ts``: the column keeps its name (a SetVocab names it);
    the same option on a dataset whose schema has another event time column is one line, exit
    2, nothing written; ``schema`` and ``verify`` answer on the dataset."""
    (tmp_path / "orders.csv").write_text(
        "id,last_order_ts\n1,2024-03-01T12:00:00Z\n2,2024-03-02T12:00:00Z\n"
    )
    args = ["orders", "orders.csv", "--format", "csv", "--create"]
    p = run_ingest(spark, [*args, "--event-time", "last_order_ts"], cwd=tmp_path)
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    state = Dataset.open(tmp_path / "orders").state
    assert state.vocab.event_time_column == "last_order_ts"
    assert "event_time" not in state.schema.names
    assert state.schema.names[:4] == ["offset", "op", "system_time", "last_order_ts"]
    assert state.watermark is not None and state.watermark.isoformat().startswith("2024-03-02T12")
    assert "last_order_ts" in run("schema", "orders", cwd=tmp_path).stdout
    assert run_verify(tmp_path / "orders").returncode == 0

    before = snapshot_tree(tmp_path / "orders")
    (tmp_path / "more.csv").write_text("id,id2\n3,4\n")
    p = run_ingest(
        spark, ["orders", "more.csv", "--format", "csv", "--event-time", "id2"], cwd=tmp_path
    )
    assert_one_line_error(p, "vocab-before-schema", "event_time='id2'", "'last_order_ts'")
    assert snapshot_tree(tmp_path / "orders") == before


def test_ingest_refuses_before_spark_starts(tmp_path: Path) -> None:
    """A missing dataset (without --create) or a missing input is one line, said before Spark
    starts: none of Spark's start-up lines appear."""
    (tmp_path / "in.csv").write_text("a,b\n1,2\n")
    missing = _ingest("nowhere", "in.csv", "--format", "csv", cwd=tmp_path)
    assert_clean(missing)
    assert missing.returncode != 0 and "log4j" not in missing.stderr, missing.stderr
    (line,) = missing.stderr.splitlines()
    assert line.startswith("odf-chain: error:") and "nowhere" in line
    assert line.endswith("; pass --create to create it")
    Dataset.create(tmp_path / "ds")
    absent = _ingest("ds", "in.csv", "gone.csv", "--format", "csv", cwd=tmp_path)
    assert_clean(absent)
    assert absent.returncode != 0 and "log4j" not in absent.stderr, absent.stderr
    (line,) = absent.stderr.splitlines()
    assert line.startswith("odf-chain: error:") and "gone.csv" in line
    assert not (tmp_path / "nowhere").exists()


def _two_lines_at_most(p: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """A failed ingest: exit 2, our error line and at most a hint line on stderr, nothing of
    Spark's (no trace, no raw bytes); returns the error line."""
    assert_clean(p)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2 and lines[0].startswith("odf-chain: error: "), p.stderr
    assert all(c.isprintable() for c in "".join(lines)), p.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    if len(lines) == 2:
        assert lines[1].startswith("hint: "), p.stderr
    return lines[0]


@pytest.mark.spark  # the command starts its own local Spark
def test_an_ingest_spark_cannot_read_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    """A Parquet file ingested as CSV, with --create: refused by its magic bytes before Spark
    reads it (Spark would fail on raw bytes, or read it into no rows or garbage rows); stderr
    is one line naming the file and the format, and no dataset is left. (Other inputs Spark
    refuses: tests/test_spark_sources.py, with the shared session.)"""
    pq.write_table(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}), tmp_path / "t.parquet")
    p = _ingest(
        "ds", "t.parquet", "--format", "csv", "--create", "--master", "local[1]", cwd=tmp_path
    )
    _two_lines_at_most(p, "t.parquet", "a Parquet file", "not csv", "--format parquet")
    lines = p.stderr.splitlines()
    if len(lines) == 2:  # Spark's output is kept when it logged an error
        Path(lines[1].removeprefix("hint: Spark's own output is in ")).unlink()
    assert not (tmp_path / "ds").exists(), sorted((tmp_path / "ds").rglob("*"))


def test_ingest_without_java_is_one_line_before_spark(tmp_path: Path) -> None:
    (tmp_path / "in.csv").write_text("a,b\n1,2\n")
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-jdk")}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "odf_chain.cli",
            "ingest",
            "ds",
            "in.csv",
            "--format=csv",
            "--create",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    line = _two_lines_at_most(p, "JAVA_HOME=", "no-jdk", "Java 17")
    assert "internal error" not in line
    assert not (tmp_path / "ds").exists()


def test_version() -> None:
    from importlib.metadata import version

    done = run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"odf-chain {version('odf-chain')}"


def test_counts_are_spelt_for_their_number(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "one")
    ds.write(pa.table({"a": [1]}))
    done = run("verify", tmp_path / "one", "--deep")
    assert_clean(done)
    assert done.stdout.startswith("OK: 3 blocks, 1 slice, 1 row checked, "), done.stdout
    assert ", 0 errors, 0 warnings; head " in done.stdout
