"""Crash safety and concurrency of odf_chain.spark.write.

Real ingests run in processes of their own (tests/scripts/spark_ingest.py, each with its own
local SparkSession) and are killed with SIGKILL, the whole process group (Python driver and JVM)
at once, at points found by watching the dataset's files; or two of them race for the same
head. In-process writes on the shared session fail on purpose at each later step.
After each: the chain verifies, holds exactly the blocks it had (or the whole transaction),
earlier data is untouched, and what was left behind is reported as warnings.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from odf_chain.dataset import Dataset
from odf_chain.errors import ConflictError, OdfChainError, StorageError
from odf_chain.events import AddData
from odf_chain.gc import collect_garbage_path
from odf_chain.spark import IngestError, read, write
from odf_chain.storage import LocalStorage
from tests.helpers import snapshot_tree

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "spark_ingest.py"
EXIT_CONFLICT = 3
BASE_ROWS = 500  # the committed write every dataset starts with
CHILD_TIMEOUT = 150.0
LEFTOVER_RULES = {"staging-leftover", "orphan-data", "orphan-block", "unreferenced-descendants"}


# -- helpers --------------------------------------------------------------------------------------


def frame(spark, start: int, rows: int, partitions: int, tag: str):
    """The same shape of rows the child script writes."""
    return spark.range(start, start + rows, numPartitions=partitions).select(
        F.col("id"), (F.col("id") * 3).alias("v"), F.lit(tag).alias("tag")
    )


@pytest.fixture
def committed_dataset(spark, tmp_path) -> Path:
    """A dataset holding one committed write: offsets 0..BASE_ROWS-1, tag "base"."""
    path = tmp_path / "ds"
    write(frame(spark, 0, BASE_ROWS, 2, "base"), path, create=True)
    return path


class Children:
    """Child ingests started in new sessions, so that a kill reaches the JVM and Python
    workers too; any still running at the end of the test are killed."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []

    def start(self, dataset: Path, *, start: int, rows: int, partitions: int, tag: str, **sync):
        args = [sys.executable, str(SCRIPT), str(dataset), "--start", str(start)]
        args += ["--rows", str(rows), "--partitions", str(partitions), "--tag", tag]
        args += ["--work", str(self.tmp_path / f"work-{tag}")]
        for key, value in sync.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        out = open(self.tmp_path / f"{tag}.out", "wb")  # noqa: SIM115 - closed with the process
        err = open(self.tmp_path / f"{tag}.err", "wb")  # noqa: SIM115
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(
            args, stdout=out, stderr=err, env=env, cwd=ROOT, start_new_session=True
        )
        out.close()
        err.close()
        proc.tag = tag  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def output(self, proc) -> tuple[str, str]:
        tag = proc.tag
        return (
            (self.tmp_path / f"{tag}.out").read_text(errors="replace"),
            (self.tmp_path / f"{tag}.err").read_text(errors="replace"),
        )

    @staticmethod
    def kill(proc) -> None:
        """SIGKILL the child's whole process group (it leads its own session)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def kill_when(self, proc, condition: Callable[[], bool]) -> float:
        """Poll ``condition`` and kill the child the moment it holds; return when that was."""
        deadline = time.monotonic() + CHILD_TIMEOUT
        while time.monotonic() < deadline:
            if condition():
                self.kill(proc)
                return time.monotonic()
            if proc.poll() is not None:
                err = self.output(proc)[1]
                pytest.fail(f"the ingest ended ({proc.returncode}) before the kill point\n{err}")
            time.sleep(0.002)
        self.kill(proc)
        pytest.fail("the kill point never came")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)


@pytest.fixture
def children(tmp_path):
    started = Children(tmp_path)
    yield started
    started.close()


def chain_hashes(path: Path) -> list[str]:
    return [str(e.hash) for e in Dataset.open(path).blocks()]


def committed(snapshot: dict) -> dict:
    """The part of a snapshot a transaction must never change: blocks, head, data."""
    return {k: v for k, v in snapshot.items() if k.split("/")[0] in ("blocks", "refs", "data")}


def check_after_failure(path: Path, before: dict, before_chain: list[str]) -> list:
    """The chain is exactly as it was, every committed file untouched, leftovers only warned
    about; returns the warnings."""
    assert chain_hashes(path) == before_chain
    after = snapshot_tree(path)
    for name, content in committed(before).items():
        assert after.get(name, "missing") == content, name
    report = Dataset.open(path).verify()
    assert report.ok, [p.line() for p in report.errors]
    assert {p.rule for p in report.warnings} <= LEFTOVER_RULES, [p.line() for p in report.warnings]
    return report.warnings


def check_offsets(spark, path: Path, rows: int, tags: dict[str, int]) -> None:
    """Read back at head (one Spark job): offsets 0..rows-1 once each, ``tags`` rows per tag,
    every row intact."""
    got = read(spark, path).select("offset", "id", "v", "tag").collect()
    assert sorted(r["offset"] for r in got) == list(range(rows))
    assert Counter(r["tag"] for r in got) == tags
    assert all(r["v"] == 3 * r["id"] for r in got)


def check_transaction_tail(path: Path, before_chain: list[str], start: int, rows: int) -> None:
    """The blocks after ``before_chain`` are one whole write of ``rows`` rows from ``start``."""
    entries = Dataset.open(path).blocks()
    assert [str(e.hash) for e in entries[: len(before_chain)]] == before_chain
    new = entries[len(before_chain) :]
    assert new and all(isinstance(e.block.event, AddData) for e in new)
    assert len({e.block.system_time for e in new}) == 1
    intervals = [e.block.event.new_data.offset_interval for e in new]
    assert intervals[0].start == start and intervals[-1].end == start + rows - 1
    assert all(b.start == a.end + 1 for a, b in itertools.pairwise(intervals))


def staging_folders(path: Path) -> list[Path]:
    return sorted((path / ".staging").glob("spark-*"))


def follow_up(spark, path: Path, rows_before: int, tags: dict[str, int]) -> None:
    """After a failure the dataset takes the next write, offsets going on from the chain."""
    result = write(frame(spark, 10_000, 40, 2, "after"), path)
    assert result.blocks[0].block.event.new_data.offset_interval.start == rows_before
    report = Dataset.open(path).verify()
    assert report.ok, [p.line() for p in report.errors]
    check_offsets(spark, path, rows_before + 40, {**tags, "after": 40})


# -- SIGKILL of a real ingest ----------------------------------------------------------------------


def test_kill_during_the_spark_write(spark, committed_dataset, children):
    before, before_chain = snapshot_tree(committed_dataset), chain_hashes(committed_dataset)
    proc = children.start(
        committed_dataset, start=BASE_ROWS, rows=8000, partitions=24, tag="killed"
    )

    def spark_is_writing() -> bool:
        return any(p.is_file() for p in (committed_dataset / ".staging").glob("spark-*/**/*"))

    children.kill_when(proc, spark_is_writing)

    assert proc.returncode == -signal.SIGKILL
    (folder,) = staging_folders(committed_dataset)
    assert not (folder / "_SUCCESS").exists()  # the kill came while Spark was writing
    assert sorted(os.listdir(committed_dataset / "data")) == sorted(
        k.split("/")[1] for k in before if k.startswith("data/")
    )
    warnings = check_after_failure(committed_dataset, before, before_chain)
    assert [(p.rule, p.path) for p in warnings] == [
        ("staging-leftover", str(folder.relative_to(committed_dataset)))
    ]
    check_offsets(spark, committed_dataset, BASE_ROWS, {"base": BASE_ROWS})
    follow_up(spark, committed_dataset, BASE_ROWS, {"base": BASE_ROWS})


def test_kill_between_the_data_renames_and_the_head_move(spark, committed_dataset, children):
    before, before_chain = snapshot_tree(committed_dataset), chain_hashes(committed_dataset)
    known = set(os.listdir(committed_dataset / "data"))
    rows, partitions = 8000, 12
    # the child pauses after each rename (a test hook in the child script, not in odf_chain),
    # so the kill lands between the renames and the head move on any disk
    proc = children.start(
        committed_dataset,
        start=BASE_ROWS,
        rows=rows,
        partitions=partitions,
        tag="killed",
        pause_after_rename=0.5,
    )

    def a_slice_was_renamed() -> bool:
        return bool(set(os.listdir(committed_dataset / "data")) - known)

    children.kill_when(proc, a_slice_was_renamed)

    assert proc.returncode == -signal.SIGKILL
    new_files = set(os.listdir(committed_dataset / "data")) - known
    assert new_files
    assert len(new_files) < partitions
    warnings = check_after_failure(committed_dataset, before, before_chain)
    # no block was written; the renamed slices are orphans, the rest is still in Spark's
    # folder, reported as one leftover
    assert Counter(p.rule for p in warnings) == {
        "orphan-data": len(new_files),
        "staging-leftover": 1,
    }
    orphans = {p.path for p in warnings if p.rule == "orphan-data"}
    assert orphans == {f"data/{name}" for name in new_files}
    (folder,) = staging_folders(committed_dataset)
    assert [p.path for p in warnings if p.rule == "staging-leftover"] == [
        str(folder.relative_to(committed_dataset))
    ]
    # the orphans are not read: the data is what the chain names
    check_offsets(spark, committed_dataset, BASE_ROWS, {"base": BASE_ROWS})
    follow_up(spark, committed_dataset, BASE_ROWS, {"base": BASE_ROWS})


def test_kill_right_after_the_head_move(spark, committed_dataset, children):
    """Killed once the head has moved, before the writer cleaned up: the whole transaction is
    in the chain, nothing else changed, and what the writer did not get to remove (Spark's
    folder with its marker files) is a leftover for gc."""
    before, before_chain = snapshot_tree(committed_dataset), chain_hashes(committed_dataset)
    head_before = (committed_dataset / "refs" / "head").read_text()
    rows, partitions = 3000, 6
    proc = children.start(
        committed_dataset,
        start=BASE_ROWS,
        rows=rows,
        partitions=partitions,
        tag="killed",
        pause_after_head_move=30,
    )

    def head_moved() -> bool:
        return (committed_dataset / "refs" / "head").read_text() != head_before

    children.kill_when(proc, head_moved)

    assert proc.returncode == -signal.SIGKILL
    after = snapshot_tree(committed_dataset)
    for name, content in committed(before).items():
        if name != "refs/head":  # the one file a commit changes
            assert after.get(name, "missing") == content, name  # nothing else was altered
    check_transaction_tail(committed_dataset, before_chain, BASE_ROWS, rows)
    report = Dataset.open(committed_dataset).verify()
    assert report.ok, [p.line() for p in report.errors]
    (folder,) = staging_folders(committed_dataset)
    assert [(p.rule, p.path) for p in report.warnings] == [
        ("staging-leftover", str(folder.relative_to(committed_dataset)))
    ]
    check_offsets(spark, committed_dataset, BASE_ROWS + rows, {"base": BASE_ROWS, "killed": rows})
    removed = collect_garbage_path(str(committed_dataset), min_age=0)
    assert removed.removed == [str(folder.relative_to(committed_dataset))]
    assert Dataset.open(committed_dataset).verify().warnings == []
    follow_up(spark, committed_dataset, BASE_ROWS + rows, {"base": BASE_ROWS, "killed": rows})


# -- two ingests at once ---------------------------------------------------------------------------


def test_two_ingests_at_once(spark, committed_dataset, children, tmp_path):
    before_chain = chain_hashes(committed_dataset)
    go = tmp_path / "go"
    rows = {"one": 3000, "two": 5000}
    procs = {
        tag: children.start(
            committed_dataset,
            start=BASE_ROWS + (0 if tag == "one" else 100_000),
            rows=n,
            partitions=2,
            tag=tag,
            ready=tmp_path / f"{tag}.ready",
            go=go,
        )
        for tag, n in rows.items()
    }
    deadline = time.monotonic() + CHILD_TIMEOUT
    while not all((tmp_path / f"{tag}.ready").exists() for tag in rows):
        for proc in procs.values():
            if proc.poll() is not None:
                pytest.fail(f"{proc.tag} ended early:\n{children.output(proc)[1]}")
        assert time.monotonic() < deadline, "the ingests never got ready"
        time.sleep(0.01)
    go.touch()  # both start writing now
    codes = {}
    for tag, proc in procs.items():
        codes[tag] = proc.wait(timeout=CHILD_TIMEOUT)
    outputs = {tag: children.output(proc) for tag, proc in procs.items()}
    for tag, code in codes.items():
        assert code in (0, EXIT_CONFLICT), f"{tag} exited {code}:\n{outputs[tag][1]}"

    report = Dataset.open(committed_dataset).verify()
    assert report.ok, [p.line() for p in report.errors]
    assert {p.rule for p in report.warnings} <= LEFTOVER_RULES
    winners = [tag for tag, code in codes.items() if code == 0]
    if len(winners) == 1:
        (winner,) = winners
        (loser,) = set(rows) - {winner}
        assert "ConflictError" in outputs[loser][1]
        assert "head moved" in outputs[loser][1]
        # the loser removed the blocks and slices it made (gc would keep them: evidence?)
        assert not {p.rule for p in report.warnings} & {"orphan-block", "orphan-data"}
        summary = json.loads(outputs[winner][0].strip().splitlines()[-1])
        assert chain_hashes(committed_dataset) == before_chain + summary["blocks"]
        check_transaction_tail(committed_dataset, before_chain, BASE_ROWS, rows[winner])
        check_offsets(
            spark,
            committed_dataset,
            BASE_ROWS + rows[winner],
            {"base": BASE_ROWS, winner: rows[winner]},
        )
    else:
        # they did not overlap: the chain holds both transactions, one after the other
        assert winners == list(rows), codes
        assert report.warnings == []
        total = BASE_ROWS + sum(rows.values())
        check_offsets(spark, committed_dataset, total, {"base": BASE_ROWS, **rows})


# -- in-process failures at each later step --------------------------------------------------------


def _fail_on_call(monkeypatch, owner, name: str, n: int, error: Exception) -> None:
    """Make ``owner.name`` raise ``error`` on its ``n``-th call (1-based), and after."""
    original = getattr(owner, name)
    calls = {"n": 0}

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] >= n:
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)


def _failing_rows(value):
    if value == 3 * (BASE_ROWS + 123):
        raise ValueError("bad row")
    return value


@pytest.mark.parametrize(
    "step", ["input", "spark-write", "task-write", "data-rename", "block-write", "head-move"]
)
def test_a_failure_at_any_step_leaves_the_chain_as_it_was(
    spark, committed_dataset, monkeypatch, step
):
    from pyspark.sql.types import LongType

    before, before_chain = snapshot_tree(committed_dataset), chain_hashes(committed_dataset)
    df = frame(spark, BASE_ROWS, 1000, 4, "failed")
    expected: type[OdfChainError] = StorageError
    writer = None
    if step == "input":  # a task of the user's own plan fails
        df = df.withColumn("v", F.udf(_failing_rows, LongType(), useArrow=False)(F.col("v")))
        expected = IngestError
    elif step == "spark-write":  # Spark refuses its output folder
        taken = str((committed_dataset / ".staging" / "spark-taken").absolute())
        monkeypatch.setattr(LocalStorage, "staging_area", lambda self, prefix: taken)
        (committed_dataset / ".staging" / "spark-taken").write_bytes(b"in the way")
        expected, writer = IngestError, "spark"
    elif step == "task-write":  # the second task cannot create its slice: a folder is there
        staging = (committed_dataset / ".staging" / "spark-tasks").absolute()
        monkeypatch.setattr(LocalStorage, "staging_area", lambda self, prefix: str(staging))
        (staging / "part-00001-0000-a0.parquet").mkdir(parents=True)
        expected, writer = StorageError, "arrow"  # the store refused: it names the file
    elif step == "data-rename":
        _fail_on_call(monkeypatch, LocalStorage, "commit_data", 3, StorageError("disk gone"))
    elif step == "block-write":  # the head move writes the blocks, under the head lock
        from odf_chain.storage import local_head

        _fail_on_call(monkeypatch, local_head, "place_new", 2, StorageError("disk gone"))
    else:
        _fail_on_call(
            monkeypatch, LocalStorage, "compare_and_swap_head", 1, ConflictError("head moved")
        )
        expected = ConflictError

    with pytest.raises(expected):
        write(
            df, committed_dataset, target_slice_bytes=None, writer=writer
        )  # a slice per partition
    monkeypatch.undo()

    if step == "spark-write":
        (committed_dataset / ".staging" / "spark-taken").unlink()
    warnings = check_after_failure(committed_dataset, before, before_chain)
    left = Counter(p.rule for p in warnings)
    assert (
        left
        == {
            "input": {},
            "spark-write": {},
            "task-write": {},
            # two slices renamed before the third rename failed: the transaction's failure
            # policy withdraws them (as Dataset.write's, the same Transaction)
            "data-rename": {},
            # every slice renamed, the first block written: both withdrawn (the block by the
            # head move, under the lock; the slices by the transaction)
            "block-write": {},
            # a lost head race: the writer removes the blocks and slices it created
            "head-move": {},
        }[step]
    ), [p.line() for p in warnings]
    assert list((committed_dataset / ".staging").iterdir()) == []
    follow_up(spark, committed_dataset, BASE_ROWS, {"base": BASE_ROWS})


@pytest.mark.parametrize("step", ["input", "task-write"])
def test_a_write_that_creates_the_dataset_and_fails_leaves_no_dataset(
    spark, tmp_path, monkeypatch, step
):
    """``create=True``: the Seed is committed with the write's own blocks, so a write that
    fails (its input, or a task that cannot store its slice) leaves nothing at the path."""
    from pyspark.sql.types import LongType

    (tmp_path / "new").mkdir()  # a folder that existed before the write is not the write's
    root = tmp_path / "new" / "ds"
    df = frame(spark, BASE_ROWS, 1000, 4, "failed")
    if step == "input":
        df = df.withColumn("v", F.udf(_failing_rows, LongType(), useArrow=False)(F.col("v")))
        expected: type[OdfChainError] = IngestError
    else:  # the staging folder is a file: no task can create its slice under it
        (root / ".staging").mkdir(parents=True)
        (root / ".staging" / "in-the-way").write_bytes(b"a file, not a folder")
        monkeypatch.setattr(
            LocalStorage,
            "staging_area",
            lambda self, prefix: str(self.root / ".staging/in-the-way"),
        )
        expected = StorageError
    with pytest.raises(expected):
        write(df, root, create=True, target_slice_bytes=None)
    monkeypatch.undo()
    if step == "input":
        assert not root.exists(), sorted(root.rglob("*"))
    else:  # the file in the way is not the write's: it stays, and the layout with it (a file
        # anywhere in it may be another writer's, creating the same dataset right now)
        left = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
        layout = ["blocks", "checkpoints", "data", "info", "logs", "refs"]
        assert left == sorted([".staging", ".staging/in-the-way", *layout]), left
        assert not (root / "refs" / "head").exists()  # still no dataset
    assert (tmp_path / "new").is_dir()
    # the path still takes a dataset: nothing half-made is in the way
    assert write(df.limit(0), root, create=True).rows == 0
    assert Dataset.open(root).state.sequence_number == 0
