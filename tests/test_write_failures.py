"""Writes that the filesystem refuses, for real: a full disk (a 1 MB tmpfs, when this user may
mount one), a file size limit (RLIMIT_FSIZE, any user), a read-only dataset (a tmpfs
remounted read-only, or permission bits for a user they stop). Each is a StorageError naming
the dataset and the path, the chain stays as it was, and the CLI says so in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain.dataset import Dataset
from odf_chain.errors import StorageError
from odf_chain.verify import verify_path
from tests.helpers import PERMISSIONS, snapshot_tree

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO)}


def incompressible(megabytes: float) -> pa.Table:
    rows = int(megabytes * 1024)
    return pa.table({"blob": pa.array([os.urandom(1024) for _ in range(rows)])})


def _run(*command: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=60)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs mounted for the test (skipped where this user may not mount)."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    if _run("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount
    finally:
        if _run("umount", mount).returncode != 0:
            _run("umount", "-l", mount)


def _assert_unchanged(root: Path, before: dict) -> None:
    assert snapshot_tree(root) == before
    report = verify_path(root)
    assert report.ok and report.problems == [], [p.line() for p in report.problems]


def test_write_on_a_full_disk(tmpfs: Path) -> None:
    """Before: pyarrow's bare OSError ("[Errno 28] Error writing bytes to file"), no path."""
    root = tmpfs / "ds"
    ds = Dataset.create(root)
    ds.write(incompressible(0.01))
    before = snapshot_tree(root)
    with pytest.raises(StorageError) as caught:
        ds.write(incompressible(2))
    message = str(caught.value)
    assert message.startswith(f"dataset {root}: cannot write the data slice {root}/.staging/")
    assert message.endswith(": No space left on device")
    _assert_unchanged(root, before)  # the staged file is gone, the space with it
    ds.write(incompressible(0.01))
    assert ds.state.last_offset == 19


_FILE_SIZE_LIMIT = textwrap.dedent(
    """
    import json, os, resource, sys
    import pyarrow as pa
    from odf_chain.dataset import Dataset

    ds = Dataset.open(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))
    table = pa.table({"blob": pa.array([os.urandom(1024) for _ in range(1024)])})
    try:
        ds.write(table)
        print(json.dumps([None, None]))
    except Exception as exc:
        print(json.dumps([type(exc).__name__, str(exc)]))
    """
)


def test_write_over_the_file_size_limit(tmp_path: Path) -> None:
    """A process may not write files over 256 KB (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the
    write fails with EFBIG): the same refusal as a full disk, for any user."""
    root = tmp_path / "ds"
    Dataset.create(root).write(incompressible(0.01))
    before = snapshot_tree(root)
    run = subprocess.run(
        [sys.executable, "-c", _FILE_SIZE_LIMIT, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    kind, message = json.loads(run.stdout.strip().splitlines()[-1])
    assert kind == "StorageError", message
    assert message.startswith(f"dataset {root}: cannot write the data slice {root}/.staging/")
    assert message.endswith(": File too large")
    _assert_unchanged(root, before)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[tuple[Path, Callable[[], None]]]:
    """A directory that refuses writes: a tmpfs remounted read-only where this user may mount,
    else permission bits where they stop this user."""
    place = tmp_path / "ro"
    place.mkdir()
    mounted = _run("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", place).returncode == 0
    if not mounted and not PERMISSIONS:
        pytest.skip("neither a read-only mount nor permission bits can stop this user")

    def lock() -> None:
        if mounted:
            assert _run("mount", "-o", "remount,ro", place).returncode == 0
        else:
            for path in [place, *place.rglob("*")]:
                if path.is_dir():
                    path.chmod(0o555)

    try:
        yield place, lock
    finally:
        if mounted:
            if _run("umount", place).returncode != 0:
                _run("umount", "-l", place)
        else:
            for path in [place, *place.rglob("*")]:
                if path.is_dir():
                    path.chmod(0o755)


def test_write_to_a_read_only_dataset(read_only: tuple[Path, Callable[[], None]]) -> None:
    place, lock = read_only
    root = place / "ds"
    ds = Dataset.create(root)
    ds.write(pa.table({"id": [1, 2]}))
    lock()
    before = snapshot_tree(root)
    with pytest.raises(StorageError) as caught:
        ds.write(pa.table({"id": [3]}))
    message = str(caught.value)
    assert f"{root}/.staging" in message
    assert "Read-only file system" in message or "Permission denied" in message
    _assert_unchanged(root, before)

    run = subprocess.run(
        [sys.executable, "-m", "odf_chain.cli", "init", str(place / "new")],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("odf-chain: error: "), run.stderr
    assert str(place / "new") in lines[0]


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_spark_write_on_a_full_disk(spark, tmpfs: Path, writer: str) -> None:
    """The write fails inside the tasks (Arrow's or Spark's own); the driver turns the worker's
    or the Java trace into the dataset's StorageError naming the file (it used to say only "An
    error occurred while calling o127.parquet")."""
    from pyspark.sql import functions as F

    from odf_chain.spark import write

    root = tmpfs / "ds"
    Dataset.create(root).write(pa.table({"h": ["x"]}))
    before = snapshot_tree(root)
    df = spark.range(0, 300_000, numPartitions=2).select(
        F.sha2(F.col("id").cast("string"), 256).alias("h")
    )
    with pytest.raises(StorageError) as caught:
        write(df, root, writer=writer)
    message = str(caught.value)
    assert message.startswith(f"dataset {root}: Spark could not write {root}/.staging/spark-")
    assert message.endswith(": No space left on device")
    _assert_unchanged(root, before)
