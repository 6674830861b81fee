"""verify --deep: every row of every slice is read back. A chain can be consistent block by
block and file by file (every hash right, every rule kept) and still lie about its rows: the
slices here are forged that way, written with pyarrow, hashed, and appended with the
library's own chain functions. Plain verify passes them; --deep names block, file, column and
the first bad row."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain import chain
from odf_chain.cli import chain_verify_main, main
from odf_chain.dataset import Dataset
from odf_chain.format.multihash import Multihash
from odf_chain.slices import add_data_for, logical_hash, parquet_logical_hash
from odf_chain.verify import VerifyReport, verify_path
from tests.helpers import multihash_name

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO)}
MS = pa.timestamp("ms", tz="UTC")


def _rows(report: VerifyReport) -> list[str]:
    return [p.line() for p in report.problems]


# -- clean datasets pass --------------------------------------------------------------------


def test_clean_dataset_passes_deep(tmp_path: Path) -> None:
    """Slices written by Dataset.write, with nulls of every kind, a pandas frame whose NaNs
    become nulls (the bytes under them are not zero in memory), a slice of several 65,536-row
    batches, and a schema change: all pass, every row counted."""
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.Table.from_pandas(pd.DataFrame({"x": [1.5, np.nan, 3.0]}), preserve_index=False))
    n = 150_000
    valid = np.arange(n) % 7 != 3
    ds.write(
        pa.table(
            {
                "x": pa.array(np.random.default_rng(1).random(n), mask=~valid),
                "s": pa.array([f"v{i}" if i % 5 else None for i in range(n)]),
                "b": pa.array(np.arange(n) % 3 == 0, mask=np.arange(n) % 11 == 0),
            }
        ),
        evolve=True,
    )
    ds.write(
        pa.table({"x": [None, 2.0], "st": [{"a": 1, "b": None}, None], "l": [[1], None]}),
        evolve=True,
    )
    report = ds.verify(deep=True)
    assert report.ok and report.problems == [], _rows(report)
    assert report.deep and report.slices_checked == 3
    assert report.rows_checked == 3 + n + 2
    plain = ds.verify()
    assert plain.ok and not plain.deep and plain.rows_checked == 0


# -- forged slices --------------------------------------------------------------------------


def _base(root: Path) -> Dataset:
    """Seed, schema, and offsets 0..4 written the normal way."""
    ds = Dataset.create(root)
    ds.write(pa.table({"id": pa.array(range(5), pa.int64()), "name": list("abcde")}))
    return ds


def _forge(
    ds: Dataset,
    *,
    offsets: list[int | None] | None = None,
    ops: list[int] | None = None,
    late_row: int | None = None,
    recorded_logical: pa.Table | None = None,
) -> tuple[int, str]:
    """Append a slice for offsets 5..9 whose file is built here, with the given defects; its
    physical hash is computed without odf_chain, and the block is appended by
    ``chain.append``, so every rule holds. Returns (sequence number, ``data/<name>``)."""
    state = ds.refresh()
    system_time = chain.now(state.system_time)
    times = [system_time] * 5
    if late_row is not None:
        times[late_row] = system_time + timedelta(milliseconds=1)
    table = pa.table(
        {
            "offset": pa.array(offsets or list(range(5, 10)), pa.int64()),
            "op": pa.array(ops or [0] * 5, pa.int32()),
            "system_time": pa.array(times, MS),
            "event_time": pa.array([system_time] * 5, MS),
            "id": pa.array(range(5, 10), pa.int64()),
            "name": list("fghij"),
        }
    )
    staged = ds.path / "forged.parquet"
    pq.write_table(table, staged)
    data = staged.read_bytes()
    name = multihash_name(data)
    shutil.move(staged, ds.path / "data" / name)
    with pq.ParquetFile(ds.path / "data" / name) as parquet:
        logical = parquet_logical_hash(parquet, "blake3")
    if recorded_logical is not None:
        logical = logical_hash(recorded_logical, "blake3")
    event = add_data_for(
        state,
        physical_hash=Multihash.from_multibase(name),
        logical_hash=logical,
        size=len(data),
        num_rows=5,
        watermark=system_time,
    )
    _, entry = chain.append(ds.storage, state, event, system_time=system_time)
    return entry.block.sequence_number, f"data/{name}"


def test_forged_slice_without_defects_passes(tmp_path: Path) -> None:
    """The forging itself is faithful: without a defect, deep verify finds nothing (so what
    the tests below find is their defect)."""
    ds = _base(tmp_path / "ds")
    _forge(ds)
    report = verify_path(ds.path, deep=True)
    assert report.ok and report.problems == [], _rows(report)
    assert report.rows_checked == 10


@pytest.mark.parametrize(
    ("defect", "rule", "message"),
    [
        (
            {"offsets": [5, 6, 6, 8, 9]},
            "data-offsets",
            "column 'offset': row 2 holds offset 6, expected 7 (the block's offsets 5..9, in "
            "order)",
        ),
        (
            {"offsets": [5, 7, 6, 8, 9]},
            "data-offsets",
            "column 'offset': row 1 holds offset 7, expected 6",
        ),
        ({"offsets": [6, 7, 8, 9, 10]}, "data-offsets", "row 0 holds offset 6, expected 5"),
        ({"offsets": [5, None, 7, 8, 9]}, "data-offsets", "column 'offset': row 1 is null"),
        (
            {"ops": [0, 0, 0, 9, 0]},
            "data-op",
            "column 'op': row 3 holds operation type 9; ODF's are 0 append, 1 retract, "
            "2 correct-from, 3 correct-to",
        ),
        ({"late_row": 4}, "data-system-time", "column 'system_time': row 4 holds "),
        (
            {"recorded_logical": pa.table({"other": [1]})},
            "data-logical-hash",
            "the rows hash to f1e20",
        ),
    ],
    ids=["duplicate", "out-of-order", "shifted", "null", "op", "system-time", "logical-hash"],
)
def test_deep_finds_a_forged_slice(tmp_path: Path, defect: dict, rule: str, message: str) -> None:
    ds = _base(tmp_path / "ds")
    seq, path = _forge(ds, **defect)
    head = (ds.path / "refs" / "head").read_text()

    assert verify_path(ds.path).problems == []  # every hash and rule holds
    report = verify_path(ds.path, deep=True)
    assert [(p.rule, p.sequence_number, p.block_hash, p.path) for p in report.problems] == [
        (rule, seq, head, path)
    ]
    assert message in report.problems[0].message
    assert report.rows_checked == 10


def test_system_time_error_shows_both_times(tmp_path: Path) -> None:
    ds = _base(tmp_path / "ds")
    _forge(ds, late_row=1)
    block_time = ds.blocks()[-1].block.system_time
    (problem,) = verify_path(ds.path, deep=True).problems
    late = (block_time + timedelta(milliseconds=1)).isoformat()
    assert problem.message == (
        f"column 'system_time': row 1 holds {late}, expected the block's system time "
        f"{block_time.isoformat()}"
    )


def test_cli_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = _base(tmp_path / "ds")
    seq, path = _forge(ds, offsets=[5, 6, 7, 8, 8])
    assert chain_verify_main([str(ds.path)]) == 0
    capsys.readouterr()

    assert chain_verify_main([str(ds.path), "--deep"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"ERROR block {seq} ")
    assert f"{path}: [data-offsets] column 'offset': row 4 holds offset 8, expected 9" in out[0]
    assert out[-1].startswith("FAILED: 4 blocks, 2 slices, 10 rows checked, ")

    assert main(["verify", str(ds.path), "--deep", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["deep"], report["rows_checked"], report["errors"]) == (True, 10, 1)

    assert main(["verify", str(ds.path), "--deep", "--no-data"]) == 2
    assert "--deep" in capsys.readouterr().err


def test_missing_system_column(tmp_path: Path) -> None:
    """A file without the op column (a forged chain can name one): named, not a crash."""
    ds = _base(tmp_path / "ds")
    state = ds.refresh()
    system_time = chain.now(state.system_time)
    table = pa.table(
        {
            "offset": pa.array(range(5, 10), pa.int64()),
            "system_time": pa.array([system_time] * 5, MS),
            "event_time": pa.array([system_time] * 5, MS),
            "id": pa.array(range(5), pa.int64()),
            "name": list("abcde"),
        }
    )
    file = tmp_path / "f.parquet"
    pq.write_table(table, file)
    name = multihash_name(file.read_bytes())
    shutil.copy(file, ds.path / "data" / name)
    with pq.ParquetFile(file) as parquet:
        logical = parquet_logical_hash(parquet, "blake3")
    chain.append(
        ds.storage,
        state,
        add_data_for(
            state,
            physical_hash=Multihash.from_multibase(name),
            logical_hash=logical,
            size=file.stat().st_size,
            num_rows=5,
            watermark=system_time,
        ),
        system_time=system_time,
    )
    rules = [(p.rule, p.message) for p in verify_path(ds.path, deep=True).problems]
    assert ("data-op", "the file has no 'op' column") in rules
    assert [r for r, _ in rules] == ["data-schema", "data-op"]


# -- bounded memory -------------------------------------------------------------------------

_DEEP_VERIFY = textwrap.dedent(
    """
    import json, resource, sys
    from odf_chain.verify import verify_path

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = verify_path(sys.argv[1], deep=True)
    growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(json.dumps({"ok": report.ok, "rows": report.rows_checked, "growth_mb": growth}))
    """
)


def test_deep_reads_in_bounded_memory(tmp_path: Path) -> None:
    """One slice of 6 million rows (252 MB as Arrow columns, system columns included; reading
    it as one table grows a process by more than that) is checked by a fresh process whose peak
    memory grows by well under that (94 MB measured): rows are read a row group at a time."""
    n = 6_000_000
    ds = Dataset.create(tmp_path / "ds")
    rng = np.random.default_rng(7)
    ds.write(pa.table({"a": rng.integers(0, 1 << 40, n), "b": rng.random(n)}))
    stored = pq.read_metadata(next((ds.path / "data").iterdir()))
    arrow_bytes = stored.num_rows * (8 + 4 + 8 + 8 + 8 + 8)
    run = subprocess.run(
        [sys.executable, "-c", _DEEP_VERIFY, str(ds.path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=ENV,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["ok"] and outcome["rows"] == n
    assert outcome["growth_mb"] < 0.6 * arrow_bytes / 2**20, (outcome, arrow_bytes)


# -- the Spark writer -----------------------------------------------------------------------


def test_spark_written_dataset_passes_deep(spark, tmp_path: Path) -> None:
    """Slices written by Spark tasks (several partitions, nulls, a struct) pass --deep: the
    logical hash the task recorded is the one verify recomputes. A DataFrame nested deeper than
    the limit is refused before Spark writes anything."""
    from pyspark.sql import functions as F

    from odf_chain.errors import SchemaError
    from odf_chain.spark import write

    n = 30_000
    df = spark.range(0, n, numPartitions=3).select(
        F.col("id"),
        F.when(F.col("id") % 3 == 0, None).otherwise(F.col("id").cast("string")).alias("s"),
        F.when(F.col("id") % 5 == 0, None)
        .otherwise(F.struct((F.col("id") / 2).alias("half"), F.lit("x").alias("tag")))
        .alias("st"),
    )
    root = tmp_path / "ds"
    result = write(df, root, create=True, target_slice_bytes=None)  # a slice per partition
    assert (result.rows, result.slices) == (n, 3)
    report = verify_path(root, deep=True)
    assert report.ok and report.problems == [], _rows(report)
    assert (report.slices_checked, report.rows_checked) == (3, n)

    column = F.col("id")
    for _ in range(64):
        column = F.struct(column.alias("f"))
    blocks = sorted(p.name for p in (root / "blocks").iterdir())
    with pytest.raises(SchemaError, match=r"field 'deep\.f\.f\.f \.\.\. f\.f\.f' holds fields "):
        write(spark.range(3).select(column.alias("deep")), root)
    assert sorted(p.name for p in (root / "blocks").iterdir()) == blocks
    assert [p.name for p in (root / ".staging").iterdir()] == []
    assert verify_path(root).ok


def test_system_time_check_is_exact_to_the_millisecond() -> None:
    """The block's system time (a datetime) and the column (epoch milliseconds) are compared
    as integers: a time that is not a whole millisecond cannot match a millisecond column."""
    moment = datetime(2024, 2, 29, 23, 59, 59, 999_000, tzinfo=UTC)
    column = pa.array([moment, moment], MS)
    from odf_chain.verify.deep import _SystemTime

    assert _SystemTime("system_time", moment).check(column, 0) is None
    late = pa.array([moment, moment + timedelta(milliseconds=1)], MS)
    assert "row 11 holds" in _SystemTime("system_time", moment).check(late, 10)
    finer = _SystemTime("system_time", moment + timedelta(microseconds=1))
    assert "cannot hold the block's system time" in finer.check(column, 0)


def test_system_time_beyond_a_datetime_is_shown_raw() -> None:
    """A forged system_time no datetime can hold (found by review: --deep crashed with
    OverflowError) is named with its raw count, like any other wrong time."""
    from odf_chain.verify.deep import _SystemTime

    moment = datetime(2024, 2, 29, 23, 59, 59, 999_000, tzinfo=UTC)
    huge = pa.array([2**62, 2**62], pa.int64()).cast(MS)
    message = _SystemTime("system_time", moment).check(huge, 0)
    assert message is not None and f"row 0 holds {2**62} ms since the epoch" in message
