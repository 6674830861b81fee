"""odf-chain gc: leftovers of interrupted writers are removed, nothing else, never in haste."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from odf_chain import Dataset, OdfChainError
from odf_chain.gc import collect_garbage, collect_garbage_path
from tests.cli_run import run_main
from tests.helpers import snapshot_tree


@pytest.fixture
def two_writes_dataset(tmp_path: Path) -> Path:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"x": [1, 2, 3]}))
    ds.write(pa.table({"x": [4]}))
    return tmp_path / "ds"


def _age(path: Path, seconds: float) -> None:
    """Make ``path`` (and everything in it) look ``seconds`` old."""
    then = time.time() - seconds
    for p in [path, *(path.rglob("*") if path.is_dir() else ())]:
        os.utime(p, (then, then))


def _leave_leftovers(root: Path) -> list[str]:
    data = sorted((root / "data").iterdir())[0]
    orphan = root / "data" / "f1e20deadbeef"
    orphan.write_bytes(data.read_bytes())
    staging = root / ".staging"
    staging.mkdir(exist_ok=True)
    (staging / "data.abandoned.parquet").write_bytes(b"half a file")
    folder = staging / "spark-0123"
    folder.mkdir()
    (folder / "part-00000-x.parquet").write_bytes(b"partial")
    return ["data/f1e20deadbeef", ".staging/data.abandoned.parquet", ".staging/spark-0123"]


def test_young_leftovers_are_kept_old_ones_removed(two_writes_dataset: Path) -> None:
    committed = snapshot_tree(two_writes_dataset)
    leftovers = _leave_leftovers(two_writes_dataset)
    kept = collect_garbage_path(two_writes_dataset, min_age=3600)
    assert kept.removed == [] and sorted(kept.kept_young) == sorted(leftovers)
    for relative in leftovers:
        _age(two_writes_dataset / relative, 7200)
    dry = collect_garbage_path(two_writes_dataset, min_age=3600, dry_run=True)
    assert sorted(dry.removed) == sorted(leftovers)
    assert all((two_writes_dataset / p).exists() for p in leftovers)
    done = collect_garbage_path(two_writes_dataset, min_age=3600)
    assert sorted(done.removed) == sorted(leftovers)
    assert done.bytes_freed > 0
    assert not any((two_writes_dataset / p).exists() for p in leftovers)
    after = Dataset.open(two_writes_dataset).verify()
    assert after.ok and after.warnings == []
    # everything committed is exactly as it was
    now = snapshot_tree(two_writes_dataset)
    for name, content in committed.items():
        assert now.get(name) == content, name


def test_gc_refuses_a_damaged_dataset(two_writes_dataset: Path) -> None:
    _leave_leftovers(two_writes_dataset)
    victim = sorted((two_writes_dataset / "data").iterdir())[0]
    victim.write_bytes(victim.read_bytes()[:-1])  # not an orphan: a committed slice, damaged
    # gc does not check data contents (verify(check_data=False)), so damage a block instead
    block = next(p for p in (two_writes_dataset / "blocks").iterdir())
    block.write_bytes(block.read_bytes() + b"!")
    before = snapshot_tree(two_writes_dataset)
    with pytest.raises(OdfChainError, match="does not verify"):
        collect_garbage_path(two_writes_dataset, min_age=0)
    assert snapshot_tree(two_writes_dataset) == before


def test_cli_gc(two_writes_dataset: Path) -> None:
    leftovers = _leave_leftovers(two_writes_dataset)
    run = run_main(
        ["gc", two_writes_dataset, "--min-age", "0"]
    )  # as the process would (cli_run.py)
    assert run.returncode == 0, run.stderr
    for relative in leftovers:
        assert f"removed {relative}" in run.stdout
    assert f"removed {len(leftovers)} leftovers" in run.stdout
    bad = run_main(["gc", two_writes_dataset / "nope"])
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_a_writer_folder_with_a_fresh_file_is_young(two_writes_dataset: Path) -> None:
    """A Spark job still writing into its staging folder keeps the folder, however old the
    folder itself is: age is that of the newest file inside."""
    folder = two_writes_dataset / ".staging" / "spark-busy"
    (folder / "_temporary").mkdir(parents=True)
    (folder / "_temporary" / "part-00001.parquet").write_bytes(b"being written")
    then = time.time() - 7200
    os.utime(folder, (then, then))
    report = collect_garbage_path(two_writes_dataset, min_age=3600)
    assert report.kept_young == [".staging/spark-busy"] and report.removed == []
    assert (folder / "_temporary" / "part-00001.parquet").exists()


def test_a_staged_file_a_live_writer_holds_is_never_taken(two_writes_dataset: Path) -> None:
    """A writer's claim (a shared lock on its staged file) keeps gc off it whatever the minimum
    age, in a dry run too; once the writer lets go (commit or discard), the file is fair game."""
    writer = Dataset.open(two_writes_dataset).storage
    staged = Path(writer.stage_file(".parquet"))
    staged.write_bytes(b"half a slice, still being written")
    _age(staged, 3600)
    name = f".staging/{staged.name}"
    for dry_run in (True, False):
        report = collect_garbage_path(two_writes_dataset, min_age=0, dry_run=dry_run)
        assert name not in report.removed
        assert (name, "in-use") in {(k.path, k.reason) for k in report.kept}
    assert staged.read_bytes() == b"half a slice, still being written"
    # another process sees the claim too (flock, not a lock private to this process)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from odf_chain.gc import collect_garbage_path as g; "
            "r = g(sys.argv[1], min_age=0); print(sorted(k.reason for k in r.kept))",
            str(two_writes_dataset),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0 and "in-use" in probe.stdout, probe.stderr
    assert staged.exists()
    writer._release(staged)  # the writer dies or gives up: the claim goes with its descriptor
    report = collect_garbage_path(two_writes_dataset, min_age=0)
    assert name in report.removed and not staged.exists()


NOT_AN_AGE = [float("nan"), float("inf"), float("-inf"), -5, -0.5, "600", None, True]


@pytest.mark.parametrize("min_age", NOT_AN_AGE, ids=repr)
def test_a_minimum_age_that_is_no_age_is_refused(two_writes_dataset: Path, min_age: object) -> None:
    """A NaN minimum age made every leftover old (every comparison with NaN is false), an
    infinite or negative one means nothing: refused before anything is looked at."""
    leftovers = _leave_leftovers(
        two_writes_dataset
    )  # young: any real minimum age above 0 keeps them
    before = snapshot_tree(two_writes_dataset)
    for dry_run in (False, True):
        with pytest.raises(OdfChainError, match="finite number of seconds, 0 or more"):
            collect_garbage_path(two_writes_dataset, min_age=min_age, dry_run=dry_run)
    assert snapshot_tree(two_writes_dataset) == before
    assert all((two_writes_dataset / p).exists() for p in leftovers)


@pytest.mark.parametrize("min_age", [float("nan"), float("inf"), -5.0, 0, 10], ids=repr)
def test_a_store_without_a_lock_keeps_young_leftovers_whatever_the_minimum_age(
    min_age: float,
) -> None:
    """On a store without a head lock only the single-writer word lets gc below the default
    age; a NaN once passed that guard and removed a young orphan slice and staged file."""
    ds = Dataset.create("bucket/ds", filesystem=pafs._MockFileSystem(), single_writer=True)
    ds.write(pa.table({"x": [1, 2]}))
    storage = ds.storage
    fs = storage.filesystem
    young = [f"data/f1e20{'ab' * 32}", ".staging/data.abandoned.parquet"]
    for path in young:
        with fs.open_output_stream(storage.fs_path(path)) as out:
            out.write(b"left by a writer that may still be running")
    with pytest.raises(OdfChainError, match=r"finite number|no lock.*--single-writer"):
        collect_garbage(storage, min_age=min_age)
    assert all(fs.get_file_info(storage.fs_path(p)).is_file for p in young)
    assert sorted(collect_garbage(storage).kept_young) == sorted(young)


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "-5", "1e400", "ten"])
def test_cli_gc_refuses_a_minimum_age_that_is_no_age(two_writes_dataset: Path, text: str) -> None:
    leftovers = _leave_leftovers(two_writes_dataset)
    for relative in leftovers:
        _age(two_writes_dataset / relative, 7200)  # old enough for any real minimum age
    before = snapshot_tree(two_writes_dataset)
    run = run_main(
        ["gc", two_writes_dataset, f"--min-age={text}"]
    )  # "-inf" alone reads as an option
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr
    error, hint = run.stderr.splitlines()
    assert error.startswith("odf-chain gc: error: argument --min-age: ")
    assert f"not {text!r}" in error and "0 or more" in error
    assert hint == "try: odf-chain gc --help"
    assert snapshot_tree(two_writes_dataset) == before


def test_a_tree_is_removed_opening_nothing_but_folders(tmp_path: Path) -> None:
    """gc removes a staging folder under the head lock: a FIFO swapped in for it (or for a
    folder in it) is never opened, since opening one waits for a writer, forever; a symlink
    in it is unlinked, its target left alone."""
    import threading

    from odf_chain.errors import StorageError
    from odf_chain.storage.local_files import remove_tree

    area = tmp_path / "area"
    (area / "sub" / "deeper").mkdir(parents=True)
    (area / "sub" / "deeper" / "part-0.parquet").write_bytes(b"x")
    os.mkfifo(area / "sub" / "fifo")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_bytes(b"k")
    os.symlink(outside, area / "link")
    os.mkfifo(tmp_path / "swapped")  # the folder gc looked at, a FIFO by the time it opens it
    outcome: list[object] = []

    def remove() -> None:
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                remove_tree(fd, "swapped", tmp_path / "swapped")
            except StorageError as exc:
                outcome.append(exc)
            remove_tree(fd, "area", area)
            outcome.append("removed")
        finally:
            os.close(fd)

    worker = threading.Thread(target=remove, daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():  # blocked in an open of the FIFO: let it go, then fail
        os.close(os.open(tmp_path / "swapped", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("remove_tree waited on a FIFO")
    assert "no longer a folder" in str(outcome[0]) and outcome[1] == "removed"
    assert (tmp_path / "swapped").exists()  # refused, named, left
    assert not area.exists()
    assert (outside / "keep").read_bytes() == b"k"
