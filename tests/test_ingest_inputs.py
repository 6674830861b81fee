"""Inputs in another format than the one given (issue 20): odf-chain ingest refuses a file that
holds bytes but gives no rows, or a Parquet or Avro file given as text, in one line naming the
file and the format given, and writes (or creates) nothing; an explicitly empty input (a
header-only CSV, blank JSON lines) appends nothing and says so."""

from __future__ import annotations

from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.dataset import Dataset
from tests.cli_run import run_ingest
from tests.helpers import snapshot_tree


def _one_error_line(p, *fragments: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith("odf-chain: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def _parquet(path: Path, rows: int) -> Path:
    pq.write_table(pa.table({"a": list(range(rows)), "b": [str(i) for i in range(rows)]}), path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("rows", [1, 1000])
def test_a_parquet_file_given_as_text_is_refused_and_creates_nothing(
    spark, tmp_path: Path, fmt: str, rows: int
) -> None:
    """One row: Spark read it as CSV into no rows (exit 0, an empty dataset created); 1000
    rows: into 879 rows of garbage. Both are refused by the file's magic bytes."""
    _parquet(tmp_path / "x.parquet", rows)
    p = run_ingest(spark, ["ds", "x.parquet", "--format", fmt, "--create"], cwd=tmp_path)
    line = _one_error_line(p, "x.parquet", f"not {fmt}", "Parquet", "--format parquet")
    assert "<binary" not in line
    assert not (tmp_path / "ds").exists()


def test_an_avro_file_given_as_csv_is_refused(spark, tmp_path: Path) -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}
    with open(tmp_path / "x.avro", "wb") as fh:
        fastavro.writer(fh, schema, [{"a": 1}, {"a": 2}])
    p = run_ingest(spark, ["ds", "x.avro", "--format", "csv", "--create"], cwd=tmp_path)
    _one_error_line(p, "x.avro", "not csv", "Avro", "--format avro")
    assert not (tmp_path / "ds").exists()


def test_a_file_that_gives_no_rows_is_named_among_several(spark, tmp_path: Path) -> None:
    """Binary data without a newline reads as a CSV header and no rows: refused, named among
    the inputs (from per-file row counts), with the format given; nothing of the other files
    is appended."""
    root = tmp_path / "ds"
    (tmp_path / "good.csv").write_text("a,b\n1,x\n2,y\n")
    p = run_ingest(spark, ["ds", "good.csv", "--format", "csv", "--create"], cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    before = snapshot_tree(root)
    (tmp_path / "more.csv").write_text("a,b\n3,z\n")
    (tmp_path / "blob.csv").write_bytes(bytes(range(256)).replace(b"\n", b"").replace(b"\r", b""))
    # --evolve: Spark may take the blob's bytes for the header, new columns refused otherwise
    args = ["ds", "more.csv", "blob.csv", "--format", "csv", "--evolve"]
    p = run_ingest(spark, args, cwd=tmp_path)
    line = _one_error_line(p, "input blob.csv:", "no rows read as csv", "--format csv")
    assert "more.csv" not in line
    assert snapshot_tree(root) == before


@pytest.mark.parametrize(
    ("name", "content", "fmt"),
    [
        ("header.csv", "a,b\n", "csv"),
        ("header-blank.csv", "a,b\r\n\r\n", "csv"),
        ("blank.json", "\n  \n", "json"),
    ],
)
def test_an_explicitly_empty_input_appends_nothing_and_says_so(
    spark, tmp_path: Path, name: str, content: str, fmt: str
) -> None:
    root = tmp_path / "ds"
    Dataset.create(root).write(pa.table({"a": [1], "b": ["x"]}))
    before = snapshot_tree(root)
    (tmp_path / name).write_text(content)
    p = run_ingest(spark, ["ds", name, "--format", fmt], cwd=tmp_path)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout == f"ingested   0 rows from 1 input file ({name}: no rows): nothing appended\n"
    assert snapshot_tree(root) == before
