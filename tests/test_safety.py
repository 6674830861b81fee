"""Storage safety (issue 9): gc that cannot hurt, the head log and rollback detection, bounded
regular-file reads. Each test here is a case that lost data, hung or leaked on the code before.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from odf_chain import Dataset, chain
from odf_chain.errors import ConflictError, OdfChainError, RuleViolation, StorageError
from odf_chain.events import AddData, SetInfo
from odf_chain.gc import collect_garbage_path
from odf_chain.storage import FsStorage, LocalStorage
from odf_chain.storage.base import MAX_BLOCK_BYTES, MAX_HEAD_LOG_BYTES
from odf_chain.verify import verify_path
from tests.helpers import snapshot_tree

REPO = Path(__file__).resolve().parents[1]
SECRET = "TOPSECRET-0451"


def _dataset(root: Path, writes: int = 5) -> Path:
    ds = Dataset.create(root)
    for i in range(writes):
        ds.write(pa.table({"x": list(range(i * 10, i * 10 + 3))}))
    return root


def _slices(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (root / "data").iterdir()}


def _chain_slices(root: Path) -> list[str]:
    return [
        str(e.block.event.new_data.physical_hash)
        for e in Dataset.open(root).blocks()
        if isinstance(e.block.event, AddData)
    ]


def _log_lines(root: Path) -> list[str]:
    return (root / "logs" / "head").read_text().splitlines()


def _cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """The real command in a subprocess; the timeout is what a hang would hit."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "odf_chain.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        cwd=REPO,
    )


def _outside(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A directory outside any dataset, with files named as gc would collect them."""
    outside = tmp_path / "outside"
    outside.mkdir()
    files = {"passwd": b"root:x:0:0", "shadow": b"root:*:1", "f1e20" + "ab" * 32: b"PAR1 x"}
    for name, content in files.items():
        (outside / name).write_bytes(content)
    old = time.time() - 86400
    for path in outside.iterdir():
        os.utime(path, (old, old))
    return outside, files


# -- gc never deletes outside the dataset --------------------------------------------------------


@pytest.mark.parametrize("directory", ["data", ".staging", "blocks"])
def test_gc_refuses_a_symlinked_layout_directory(tmp_path: Path, directory: str) -> None:
    root = _dataset(tmp_path / "ds", writes=2)
    outside, files = _outside(tmp_path)
    real = root / directory
    if real.exists():  # move the dataset's own files there, so the dataset still "works"
        for entry in real.iterdir():
            shutil.move(str(entry), outside / entry.name)
        real.rmdir()
    real.symlink_to(outside)
    before = snapshot_tree(outside)
    for dry_run in (True, False):
        with pytest.raises(StorageError, match=rf"gc refuses.*{directory} is a symlink"):
            collect_garbage_path(root, min_age=0, dry_run=dry_run)
    run = _cli("gc", str(root), "--min-age", "0")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "symlink" in run.stderr and "Traceback" not in run.stderr
    assert snapshot_tree(outside) == before
    assert {n: (outside / n).read_bytes() for n in files} == files


@pytest.mark.parametrize("directory", ["data", ".staging", "blocks"])
def test_a_write_refuses_a_symlinked_layout_directory(tmp_path: Path, directory: str) -> None:
    """Reads and gc refuse a symlinked ``data/``; a write through it would put slices outside
    the dataset (and a head move would then fail on them): refused before any file is written."""
    root = _dataset(tmp_path / "ds", writes=2)
    outside, _ = _outside(tmp_path)
    real = root / directory
    if real.exists():
        for entry in real.iterdir():
            shutil.move(str(entry), outside / entry.name)
        real.rmdir()
    real.symlink_to(outside)
    before, head = snapshot_tree(outside), (root / "refs" / "head").read_bytes()
    # blocks/ is refused already by the read of the head block, data/ and .staging/ by the write
    with pytest.raises(OdfChainError, match=rf"{directory} is a symlink, not a directory"):
        Dataset.open(root).write(pa.table({"x": [7]}))
    assert snapshot_tree(outside) == before
    assert (root / "refs" / "head").read_bytes() == head


@pytest.mark.parametrize("directory", ["refs", "logs", ".staging", "blocks", "info", "data"])
def test_an_append_goes_through_no_symlinked_folder(tmp_path: Path, directory: str) -> None:
    """A handle that set the head itself appends without reading anything first (the move
    checks under the lock): a layout folder turned into a symlink since is refused all the
    same, before anything is written, nothing outside touched (a SetInfo writes no slice: even
    a symlinked data/ it would not go through is refused, as reads and gc refuse it)."""
    root = _dataset(tmp_path / "ds", writes=2)
    dataset = Dataset.open(root)
    dataset.append(SetInfo(description="before"))  # the handle's own head from now on
    outside = tmp_path / "outside"
    shutil.copytree(root / directory, outside, symlinks=True)
    shutil.rmtree(root / directory)
    (root / directory).symlink_to(outside)
    before, head = snapshot_tree(outside), (outside if directory == "refs" else root / "refs")
    head_bytes = (head / "head").read_bytes()
    for n in range(4):  # past the index's batch: its writes too would go through info/
        with pytest.raises(OdfChainError, match=rf"{directory}\S* is a symlink"):
            dataset.append(SetInfo(description=f"after {n}"))
    assert snapshot_tree(outside) == before
    assert (head / "head").read_bytes() == head_bytes


def test_two_datasets_sharing_data_through_a_symlink(tmp_path: Path) -> None:
    a = _dataset(tmp_path / "a", writes=3)
    b = _dataset(tmp_path / "b", writes=2)
    for entry in (b / "data").iterdir():
        shutil.move(str(entry), a / "data" / entry.name)
    (b / "data").rmdir()
    (b / "data").symlink_to(a / "data")
    old = time.time() - 86400
    for path in (a / "data").iterdir():
        os.utime(path, (old, old))
    a_slices = {n: (a / "data" / n).read_bytes() for n in _chain_slices(a)}
    with pytest.raises(StorageError, match="symlink"):
        collect_garbage_path(b, min_age=0)
    assert {n: (a / "data" / n).read_bytes() for n in a_slices} == a_slices
    assert verify_path(a).ok


def test_a_symlink_inside_data_is_neither_followed_nor_removed(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    outside, files = _outside(tmp_path)
    link = root / "data" / ("f1e20" + "cd" * 32)
    link.symlink_to(outside / "passwd")
    (root / ".staging").mkdir(exist_ok=True)
    (root / ".staging" / "spark-evil").symlink_to(outside)
    old = time.time() - 86400
    os.utime(link, (old, old), follow_symlinks=False)
    report = verify_path(root)
    irregular = sorted(p.path for p in report.warnings if p.rule == "irregular-entry")
    assert report.ok and irregular == [".staging/spark-evil", f"data/{link.name}"]
    result = collect_garbage_path(root, min_age=0)
    assert result.removed == []
    assert sorted(k.path for k in result.kept if k.reason == "irregular") == irregular
    assert link.is_symlink() and (root / ".staging" / "spark-evil").is_symlink()
    assert {n: (outside / n).read_bytes() for n in files} == files


def test_a_file_in_data_named_like_no_slice_is_reported_and_kept(tmp_path: Path) -> None:
    """No block can name data/extra.parquet, but Spark or DuckDB reading data/ as a folder
    would read its rows: verify warns of it (it listed data/ by slice names only), gc keeps
    it (evidence, not a leftover of ours)."""
    root = _dataset(tmp_path / "ds", writes=1)
    (root / "data" / "extra.parquet").write_bytes(b"PAR1 rows nobody wrote PAR1")
    (root / "data" / ".hidden").write_bytes(b"x")
    report = verify_path(root)
    stray = sorted(p.path for p in report.warnings if p.rule == "irregular-entry")
    assert report.ok and stray == ["data/.hidden", "data/extra.parquet"]
    assert all("a tool reading data/ as a folder" in p.message for p in report.warnings)
    result = collect_garbage_path(root, min_age=0)
    assert result.removed == []
    assert (root / "data" / "extra.parquet").exists() and (root / "data" / ".hidden").exists()


def test_a_file_in_blocks_named_like_no_block_is_reported_and_kept(tmp_path: Path) -> None:
    """No head can name blocks/notes.txt, but a tool listing blocks/ would take it for a
    block: verify warns of such files (its one pass over blocks/ had dropped them unsaid), as
    the storage's own listing does, and gc keeps them. (A name of a block's shape that no
    block has is an orphan-block warning already.)"""
    root = _dataset(tmp_path / "ds", writes=1)
    block = next(p.name for p in (root / "blocks").iterdir())
    strays = ["notes.txt", ".hidden", block + ".tmp", "a-b"]
    for name in strays:
        (root / "blocks" / name).write_bytes(b"not a block")
    report = verify_path(root)
    found = sorted(p.path for p in report.warnings if p.rule == "irregular-entry")
    assert report.ok and found == sorted(f"blocks/{n}" for n in strays)
    assert all("a tool listing blocks/ would take it" in p.message for p in report.warnings)
    listed = LocalStorage(root).irregular_entries(("blocks",))
    assert sorted(path for path, _ in listed) == found
    result = collect_garbage_path(root, min_age=0)
    assert result.removed == []
    assert all((root / "blocks" / n).exists() for n in strays)


# -- rollback: an error, gc refuses, restoring the head makes it whole ----------------------------


@pytest.mark.parametrize("back", [1, 2, 3, 5, "seed"])
def test_a_rolled_back_head_is_an_error_and_gc_keeps_its_data(tmp_path: Path, back) -> None:
    root = _dataset(tmp_path / "ds", writes=5)
    entries = Dataset.open(root).blocks()
    real_head = (root / "refs" / "head").read_text()
    slices = _slices(root)
    assert len(slices) == 5
    # Each write after the first is one AddData; the first also declared the schema.
    target = entries[0] if back == "seed" else entries[len(entries) - 1 - back]
    (root / "refs" / "head").write_text(str(target.hash))
    for path in (root / "data").iterdir():  # old enough for any gc to take
        os.utime(path, (time.time() - 86400,) * 2)

    report = verify_path(root)
    (error,) = report.errors
    assert error.rule == "head-rollback" and error.path == "refs/head"
    assert f"block {len(entries) - 1} {real_head}" in error.message
    assert f"the head is now block {target.block.sequence_number}" in error.message
    run = _cli("verify", str(root))
    assert run.returncode == 1 and "[head-rollback]" in run.stdout
    before = snapshot_tree(root)
    with pytest.raises(OdfChainError, match=r"does not verify.*head-rollback"):
        collect_garbage_path(root, min_age=0)
    assert _cli("gc", str(root), "--min-age", "0").returncode == 2
    assert snapshot_tree(root) == before

    (root / "refs" / "head").write_text(real_head)
    report = verify_path(root)
    assert report.ok and report.problems == [] and report.slices_checked == 5
    assert _slices(root) == slices


def test_a_head_restored_with_its_log_keeps_the_rolled_back_suffix(tmp_path: Path) -> None:
    """refs/ and logs/ restored together from a backup: the log no longer shows the lost heads,
    and after the next write the lost blocks no longer descend from the head. They still were
    acknowledged writes: gc keeps them and their slices until they are named explicitly."""
    root = _dataset(tmp_path / "ds", writes=1)
    backup = {p: (root / p).read_bytes() for p in ("refs/head", "logs/head")}
    ds = Dataset.open(root)
    lost = [ds.write(pa.table({"x": [100 + i]}))[-1] for i in range(3)]
    for path, content in backup.items():
        (root / path).write_bytes(content)
    Dataset.open(root).write(pa.table({"x": [7]}))
    old = time.time() - 86400
    for path in (*(root / "data").iterdir(), *(root / "blocks").iterdir()):
        os.utime(path, (old, old))
    lost_blocks = {str(e.hash) for e in lost}
    lost_slices = {str(e.block.event.new_data.physical_hash) for e in lost}

    report = verify_path(root)
    assert report.ok  # nothing in the dataset can tell (a receipt can)
    assert {p.block_hash for p in report.warnings if p.rule == "orphan-block"} == lost_blocks
    assert not [p for p in report.warnings if p.rule == "orphan-data"]
    result = collect_garbage_path(root, min_age=0)
    assert result.removed == []
    assert {k.path for k in result.kept} == {f"blocks/{n}" for n in lost_blocks} | {
        f"data/{n}" for n in lost_slices
    }
    assert all((root / "data" / n).is_file() for n in lost_slices)

    # named explicitly (all three: the later ones are built on the first), they go with their data
    with pytest.raises(OdfChainError, match="name it too"):
        collect_garbage_path(root, min_age=0, discard_uncommitted=[str(lost[0].hash)])
    result = collect_garbage_path(root, min_age=0, discard_uncommitted=sorted(lost_blocks))
    assert set(result.removed) == {f"blocks/{n}" for n in lost_blocks} | {
        f"data/{n}" for n in lost_slices
    }
    assert verify_path(root).problems == []


def test_a_writer_that_loses_the_head_race_removes_what_it_created(tmp_path: Path) -> None:
    from odf_chain import chain
    from odf_chain.events import SetInfo
    from odf_chain.format.multihash import Multihash

    root = _dataset(tmp_path / "ds", writes=1)
    stale = Dataset.open(root).state
    Dataset.open(root).write(pa.table({"x": [9]}))  # the head moves on
    storage = LocalStorage.open(root)
    staged = storage.stage_file(".bin")
    staged.write_bytes(b"a slice only this writer made")
    name = str(Multihash.digest("blake3", b"a slice only this writer made"))
    assert storage.commit_data(staged, name).created
    late = chain.prepare(stale, SetInfo(description="late"))
    with pytest.raises(ConflictError, match="head moved"):
        chain.commit(storage, late, created_data=[name])
    assert not (root / "blocks" / str(late.entry.hash)).exists()
    assert not (root / "data" / name).exists()
    assert verify_path(root).problems == []


def test_a_write_on_a_rolled_back_head_is_refused_and_the_repair_verifies(tmp_path: Path) -> None:
    """Issue 20 (6): a write on a head the head log shows rolled back used to be acknowledged,
    and the repair verify asks for (writing the logged head back) then orphaned it. Writers
    now refuse, naming the logged head and the repair, and the repair leaves a clean chain."""
    root = _dataset(tmp_path / "ds", writes=3)
    entries = Dataset.open(root).blocks()
    real = (root / "refs" / "head").read_text()
    (root / "refs" / "head").write_text(str(entries[-3].hash))
    files = sorted(p.name for d in ("blocks", "data") for p in (root / d).iterdir())
    for write in (
        lambda ds: ds.write(pa.table({"x": [99]})),
        lambda ds: ds.append(SetInfo(description="on the old head")),
    ):
        with pytest.raises(RuleViolation) as caught:
            write(Dataset.open(root))
        assert caught.value.rule == "head-rollback"
        assert str(entries[-1].hash) in str(caught.value) and "refs/head" in str(caught.value)
    assert sorted(p.name for d in ("blocks", "data") for p in (root / d).iterdir()) == files
    report = verify_path(root)
    assert [p.rule for p in report.errors] == ["head-rollback"]
    assert str(entries[-1].hash) in report.errors[0].message
    (root / "refs" / "head").write_text(real)  # the repair verify names
    assert verify_path(root).ok
    Dataset.open(root).write(pa.table({"x": [100]}))
    report = verify_path(root)
    assert report.ok and not report.errors, [p.line() for p in report.errors]


def _names(root: Path) -> list[str]:
    return sorted(p.name for d in ("blocks", "data") for p in (root / d).iterdir())


def test_a_handle_on_its_own_head_has_the_rollback_checked_by_the_move(tmp_path: Path) -> None:
    """A handle whose state is the head it set reads neither the head nor the log before it
    appends: the head move checks both under the lock. Its head moved back by hand, its next
    append is refused as a rollback all the same, and nothing it wrote stays."""
    root = _dataset(tmp_path / "ds", writes=3)
    ds = Dataset.open(root)
    ds.append(SetInfo(description="mine"))  # the handle's state is now the head it set
    entries = ds.blocks()
    (root / "refs" / "head").write_text(str(entries[-3].hash))
    files = _names(root)
    with pytest.raises(RuleViolation) as caught:
        ds.append(SetInfo(description="on the old head"))
    assert caught.value.rule == "head-rollback"
    assert str(entries[-1].hash) in str(caught.value)
    assert _names(root) == files  # the block the first try wrote was withdrawn
    (root / "refs" / "head").write_text(str(entries[-1].hash))
    assert verify_path(root).ok


def test_a_handle_whose_head_came_back_to_it_after_others_is_refused(tmp_path: Path) -> None:
    """Handle A set H1, another writer appended H2 and H3, and an operator wrote H1 back: the
    head is A's own again, and only the head log (its last line names H3) tells the rollback.
    The move checks it under the lock, so A's append is refused all the same."""
    root = _dataset(tmp_path / "ds", writes=2)
    mine = Dataset.open(root)
    own = mine.append(SetInfo(description="mine"))
    theirs = Dataset.open(root)
    theirs.append(SetInfo(description="theirs 1"))
    last = theirs.append(SetInfo(description="theirs 2"))
    (root / "refs" / "head").write_text(str(own.hash))
    files = _names(root)
    with pytest.raises(RuleViolation) as caught:
        mine.append(SetInfo(description="on the old head"))
    assert caught.value.rule == "head-rollback" and str(last.hash) in str(caught.value)
    assert _names(root) == files
    assert (root / "refs" / "head").read_text() == str(own.hash)


def test_a_handle_whose_head_moved_back_is_refused_without_a_log(tmp_path: Path) -> None:
    """No head log to tell (a dataset from before it): a handle that saw later blocks as the
    head still refuses to write on a head moved back below them, and its reads say the head
    is not on its line instead of answering from another state."""
    root = _dataset(tmp_path / "ds", writes=2)
    shutil.rmtree(root / "logs")
    ds = Dataset.open(root)
    first = ds.append(SetInfo(description="one"))
    ds.append(SetInfo(description="two"))
    (root / "refs" / "head").write_text(str(first.hash))
    files = _names(root)
    with pytest.raises(RuleViolation) as caught:
        ds.append(SetInfo(description="on the old head"))
    assert caught.value.rule == "head-rollback"
    assert _names(root) == files
    with pytest.raises(OdfChainError, match="not an ancestor"):
        ds.state  # noqa: B018
    assert Dataset.open(root).state.head == first.hash  # a new handle reads that head


def test_a_handle_on_its_own_head_repairs_a_log_that_lost_lines(tmp_path: Path) -> None:
    """The log lost its last line (a power loss): the move refuses the unread way, and the
    append is made again the checked way, which finds the log only behind and repairs it."""
    root = _dataset(tmp_path / "ds", writes=2)
    ds = Dataset.open(root)
    ds.append(SetInfo(description="mine"))
    head = (root / "refs" / "head").read_text()
    lines = _log_lines(root)
    (root / "logs" / "head").write_text("\n".join(lines[:-1]) + "\n")
    entry = ds.append(SetInfo(description="after the loss"))
    after = _log_lines(root)
    assert after[: len(lines) - 1] == lines[:-1]
    assert [line.split()[:2] for line in after[len(lines) - 1 :]] == [
        [lines[-2].split()[1], head],
        [head, str(entry.hash)],
    ]
    report = verify_path(root)
    assert report.ok and report.problems == [], [p.line() for p in report.problems]


def test_a_handle_on_its_own_head_appends_after_another_writer(tmp_path: Path) -> None:
    """Another writer appended since the handle's last commit: the move refuses the unread
    try, the append is made again on the new head, and the first try leaves no file."""
    root = _dataset(tmp_path / "ds", writes=2)
    mine, theirs = Dataset.open(root), Dataset.open(root)
    mine.append(SetInfo(description="mine"))
    other = theirs.append(SetInfo(description="theirs"))
    entry = mine.append(SetInfo(description="mine again"))
    assert entry.block.prev_block_hash == other.hash
    assert len(_names(root)) == len(Dataset.open(root).blocks()) + 2  # and the two slices
    report = verify_path(root)
    assert report.ok and report.problems == [], [p.line() for p in report.problems]


def test_without_a_head_log_rolled_back_data_is_kept_as_descendants(tmp_path: Path) -> None:
    """A dataset from before the head log: a rollback is only a warning, but gc still keeps
    the rolled-back blocks and every slice they name (the old code deleted those slices)."""
    root = _dataset(tmp_path / "ds", writes=5)
    shutil.rmtree(root / "logs")
    entries = Dataset.open(root).blocks()
    real_head = (root / "refs" / "head").read_text()
    slices = _slices(root)
    (root / "refs" / "head").write_text(str(entries[-4].hash))
    old = time.time() - 86400
    for path in [*(root / "data").iterdir(), *(root / "blocks").iterdir()]:
        os.utime(path, (old, old))
    assert verify_path(root).ok
    result = collect_garbage_path(root, min_age=0)
    assert result.removed == []
    kept = {(k.path.split("/")[0], k.reason) for k in result.kept}
    assert kept == {("blocks", "descendant"), ("data", "descendant-data")}
    assert len([k for k in result.kept if k.reason == "descendant-data"]) == 3
    (root / "refs" / "head").write_text(real_head)
    report = verify_path(root)
    assert report.ok and report.problems == [] and _slices(root) == slices


# -- the head log --------------------------------------------------------------------------------


def test_every_head_move_is_logged(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=2)
    ds = Dataset.open(root)
    moves = ds.storage.read_head_log()
    heads = [str(e.hash) for e in ds.blocks()]
    # create: the Seed; first write: schema + data in one move; second write: data
    assert [m.new for m in moves] == [heads[0], heads[2], heads[3]]
    assert [m.old for m in moves] == [None, heads[0], heads[2]]
    assert all(a.time_ms <= b.time_ms for a, b in itertools.pairwise(moves))
    assert _log_lines(root)[0] == f"- {heads[0]} {moves[0].time_ms}"
    assert abs(moves[-1].time_ms / 1000 - time.time()) < 600


def test_a_crash_between_head_move_and_log_line_is_repaired(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=2)
    log = root / "logs" / "head"
    lines = _log_lines(root)
    log.write_text("\n".join(lines[:-1]) + "\n")  # the last move's line never made it
    head = (root / "refs" / "head").read_text()
    assert verify_path(root).ok  # the log lacks the head: no claim is wrong
    blocks = Dataset.open(root).write(pa.table({"x": [7]}))
    after = _log_lines(root)
    assert after[: len(lines) - 1] == lines[:-1]
    repaired, new = after[len(lines) - 1 :]
    assert repaired.split()[:2] == [lines[-2].split()[1], head]
    assert new.split()[:2] == [head, str(blocks[-1].hash)]
    assert verify_path(root).ok


def test_a_torn_log_line_is_cut_off(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    lines = _log_lines(root)
    with open(root / "logs" / "head", "ab") as f:
        f.write(b"f1e20abcdef f1e2")  # an append a crash cut short
    assert verify_path(root).ok  # not read as a move
    blocks = Dataset.open(root).write(pa.table({"x": [7]}))
    after = _log_lines(root)
    assert after[:-1] == lines and after[-1].split()[1] == str(blocks[-1].hash)
    assert verify_path(root).ok


def test_a_dataset_from_before_the_log_starts_one(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    shutil.rmtree(root / "logs")
    head = (root / "refs" / "head").read_text()
    assert Dataset.open(root).storage.read_head_log() == []
    blocks = Dataset.open(root).write(pa.table({"x": [7]}))
    first, second = _log_lines(root)
    assert first.split()[:2] == ["-", head]
    assert second.split()[:2] == [head, str(blocks[-1].hash)]
    assert verify_path(root).ok


@pytest.mark.parametrize(
    "damage",
    ["malformed", "bad-hash", "fifo", "symlink", "too-large"],
)
def test_a_damaged_head_log_is_an_error_naming_it(tmp_path: Path, damage: str) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    log = root / "logs" / "head"
    if damage == "malformed":
        log.write_text(log.read_text() + f"{SECRET} only two\n")
    elif damage == "bad-hash":
        log.write_text(log.read_text() + "- zz99 123\n")
    else:
        log.unlink()
        if damage == "fifo":
            os.mkfifo(log)
        elif damage == "symlink":
            secret = tmp_path / "secret"
            secret.write_text(SECRET + "\n")
            log.symlink_to(secret)
        else:
            with open(log, "wb") as f:
                f.truncate(MAX_HEAD_LOG_BYTES + 1)  # sparse: costs no disk
    run = _cli("verify", str(root), "--no-data", timeout=60)
    assert run.returncode == 1, run.stderr
    (line,) = [ln for ln in run.stdout.splitlines() if "[head-log]" in ln]
    assert "logs/head" in line and "Traceback" not in run.stderr
    if damage in ("fifo", "symlink"):
        assert ("FIFO" if damage == "fifo" else "symlink") in line
        assert SECRET not in run.stdout  # a link is not followed: nothing of it is shown


# -- bounded, regular-file reads -----------------------------------------------------------------


def _replace(path: Path, kind: str, tmp_path: Path) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "secret-symlink":
        secret = tmp_path / "secret"
        secret.write_text(SECRET)
        path.symlink_to(secret)
    else:  # too large
        with open(path, "wb") as f:
            f.truncate(MAX_BLOCK_BYTES + 1)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "secret-symlink"])
def test_a_hostile_head_gives_one_line_quickly(tmp_path: Path, kind: str) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    _replace(root / "refs" / "head", kind, tmp_path)
    started = time.monotonic()
    for command in ("log", "fields", "schema"):
        run = _cli(command, str(root), timeout=60)
        assert run.returncode == 2 and run.stdout == ""
        assert run.stderr.count("\n") == 1 and "refs/head" in run.stderr
        assert SECRET not in run.stderr and "Traceback" not in run.stderr
    run = _cli("verify", str(root), timeout=60)
    assert run.returncode == 1 and SECRET not in run.stdout + run.stderr
    (line,) = [ln for ln in run.stdout.splitlines() if "[head]" in ln]
    assert ("FIFO" if kind == "fifo" else "symlink") in line
    with pytest.raises(StorageError, match="refs/head"):
        Dataset.open(root)
    assert time.monotonic() - started < 300  # each command alone is bounded by its timeout


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-large"])
def test_a_hostile_block_gives_one_line_quickly(tmp_path: Path, kind: str) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    seed = Dataset.open(root).blocks()[0].hash
    _replace(root / "blocks" / str(seed), kind, tmp_path)
    run = _cli("log", str(root), timeout=60)
    # log streams newest first: a header, the two blocks above the Seed, then one line about
    # the Seed
    assert run.returncode == 2 and run.stderr.count("\n") == 1
    assert len(run.stdout.splitlines()) == 1 + 2 and str(seed)[5:17] not in run.stdout
    assert str(seed) in run.stderr and "Traceback" not in run.stderr
    run = _cli("verify", str(root), timeout=60)
    assert run.returncode == 1
    (line,) = [ln for ln in run.stdout.splitlines() if "[block-unreadable]" in ln]
    expected = {"fifo": "FIFO", "dev-zero": "symlink", "too-large": "limit"}[kind]
    assert str(seed) in line and expected in line


def test_a_hostile_slice_is_not_followed(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    (name,) = _slices(root)
    _replace(root / "data" / name, "fifo", tmp_path)
    run = _cli("verify", str(root), timeout=60)
    assert run.returncode == 1
    (line,) = [ln for ln in run.stdout.splitlines() if f"data/{name}" in ln]
    assert "[data-unreadable]" in line and "FIFO" in line


def test_schema_files_are_bounded_regular_files(tmp_path: Path) -> None:
    fifo = tmp_path / "schema.avsc"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero):
        run = _cli("init", str(tmp_path / f"ds-{path.stem}"), "--schema", str(path), timeout=60)
        assert run.returncode == 2 and "not a regular file" in run.stderr, run.stderr
        assert run.stderr.count("\n") == 1
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(64 * 1024 * 1024 + 1)
    run = _cli("init", str(tmp_path / "ds-big"), "--schema", str(big), timeout=60)
    assert run.returncode == 2 and "limit" in run.stderr and run.stderr.count("\n") == 1
    # a symlink to a real schema file is the user's own choice, and fine
    real = tmp_path / "real.avsc"
    real.write_text('{"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}')
    (tmp_path / "link.avsc").symlink_to(real)
    run = _cli("init", str(tmp_path / "ds-ok"), "--schema", str(tmp_path / "link.avsc"))
    assert run.returncode == 0, run.stderr


# -- staging paths -------------------------------------------------------------------------------


def test_discard_area_outside_staging_is_refused(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    store = LocalStorage.open(root)
    before = snapshot_tree(root)
    for bad in (f"{root}/.staging/..", f"{root}/.staging", f"{root}/.staging/../data"):
        with pytest.raises(OdfChainError, match="not in"):
            store.discard_area(bad)
        with pytest.raises(OdfChainError, match="not in"):
            store.discard(bad)
    fs_store = FsStorage.open(pafs.LocalFileSystem(), str(root))
    with pytest.raises(OdfChainError, match="not in"):
        fs_store.discard_area(f"{root}/.staging/..")
    assert snapshot_tree(root) == before and verify_path(root).ok
    area = Path(store.staging_area("spark"))
    (area / "sub").mkdir(parents=True)
    (area / "sub" / "part-0.parquet").write_bytes(b"x")
    store.discard_area(str(area))
    assert not area.exists() and verify_path(root).ok


# -- writers and gc --------------------------------------------------------------------------


def test_a_head_move_whose_slice_was_taken_commits_nothing(tmp_path: Path) -> None:
    """What gc beside a writer can do: take the writer's slice after it was put in place,
    before the head moved. The head move checks, under the lock gc deletes under."""
    root = _dataset(tmp_path / "ds", writes=1)
    ds = Dataset.open(root)
    head = ds.state.head
    storage = ds.storage
    original = storage.remove_data
    taken = []

    class TakesTheSlice(LocalStorage):  # a real storage; the "gc" deletes a real file
        def compare_and_swap_head(self, *args: Any, **kwargs: Any) -> None:
            for slice_name in storage.data_names():
                if slice_name not in _chain_slices(root):
                    taken.append(slice_name)
                    original(slice_name)
            super().compare_and_swap_head(*args, **kwargs)

    blocks = set(storage.block_names())
    racing = Dataset(TakesTheSlice(root))
    with pytest.raises(ConflictError, match=r"missing at the head move.*nothing was"):
        racing.write(pa.table({"x": [5]}))
    assert len(taken) == 1 and Dataset.open(root).state.head == head
    report = verify_path(root)
    assert report.ok and not report.warnings, report.warnings
    # the blocks the move wrote under the lock were withdrawn under it
    assert set(storage.block_names()) == blocks


class _AnotherWriterFirst(LocalStorage):
    """A real storage whose first head move lets another writer commit just before it: the
    interleaving of two processes, made deterministic."""

    def __init__(self, root: Path, other: Callable[[], object]) -> None:
        super().__init__(root)
        self._other: Callable[[], object] | None = other

    def compare_and_swap_head(self, *args: Any, **kwargs: Any) -> None:
        if self._other is not None:
            other, self._other = self._other, None
            other()
        super().compare_and_swap_head(*args, **kwargs)


def test_a_writer_that_loses_the_race_keeps_the_block_the_winner_shares(tmp_path: Path) -> None:
    """Two writers appending the same event at the same millisecond make the same block file.
    The first creates it; the second finds it in place, and wins the head. The loser must not
    remove "its" block: the winner's chain runs through it (CI saw this with four writers)."""
    root = tmp_path / "ds"
    state = Dataset.create(root).state
    moment = chain.now(state.system_time)
    shared = SetInfo(description="set by two writers at one instant")
    loser = [chain.prepare(state, shared, system_time=moment)]
    loser.append(chain.prepare(loser[0].after, SetInfo("the loser's"), system_time=moment))
    winner = [chain.prepare(state, shared, system_time=moment)]
    winner.append(chain.prepare(winner[0].after, SetInfo("the winner's"), system_time=moment))
    assert winner[0].entry.hash == loser[0].entry.hash

    racing = _AnotherWriterFirst(root, lambda: chain.commit(LocalStorage.open(root), *winner))
    with pytest.raises(ConflictError, match="head moved"):
        chain.commit(racing, *loser)

    ds = Dataset.open(root)
    assert ds.state.head == winner[-1].entry.hash
    report = verify_path(root)
    assert report.ok and not report.warnings, [p.line() for p in report.problems]
    # the loser's own second block went; the shared one stayed
    assert not (root / "blocks" / str(loser[1].entry.hash)).exists()
    assert (root / "blocks" / str(shared_hash := loser[0].entry.hash)).is_file()
    assert [e.hash for e in ds.blocks()][1] == shared_hash


def test_a_writer_that_loses_the_race_keeps_the_slice_the_winner_shares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for data: the same rows written at the same offsets and instant are the same
    slice file, which the loser created and the winner committed."""
    root = _dataset(tmp_path / "ds", writes=1)
    instant = chain.now(Dataset.open(root).state.system_time)
    monkeypatch.setattr(chain, "now", lambda not_before=None: instant)  # one millisecond
    rows = pa.table({"x": [7, 8, 9]})
    winner: list = []

    def win() -> None:
        winner.extend(Dataset.open(root).write(rows))

    with pytest.raises(ConflictError, match="head moved"):
        Dataset(_AnotherWriterFirst(root, win)).write(rows)

    ds = Dataset.open(root)
    assert ds.state.head == winner[-1].hash
    assert _chain_slices(root)[-1] == str(winner[-1].block.event.new_data.physical_hash)
    report = verify_path(root)
    assert report.ok and not report.warnings, [p.line() for p in report.problems]
    assert ds.to_table().column("x").to_pylist()[-3:] == [7, 8, 9]


def test_a_losing_writer_removes_nothing_it_cannot_prove_unreferenced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More blocks appended since the loser's state than withdraw reads: its files stay, as
    leftovers verify reports (and gc may remove), rather than a guess. (A local loser writes
    no block at all: the head move writes them under the lock, once the head is checked. A
    store that writes blocks before the move, an object store's, withdraws this way.)"""
    root = tmp_path / "ds"
    state = Dataset.create(root).state
    mine = chain.prepare(state, SetInfo("mine"), system_time=chain.now(state.system_time))

    def three_more() -> None:
        ds = Dataset.open(root)
        for n in range(3):
            ds.append(SetInfo(f"theirs {n}"))

    with pytest.raises(ConflictError, match="head moved"):
        chain.commit(_AnotherWriterFirst(root, three_more), mine)
    assert not (root / "blocks" / str(mine.entry.hash)).exists()
    assert not verify_path(root).warnings

    storage = LocalStorage.open(root)  # the loser's block, as a store writing first leaves it
    storage.write_block(str(mine.entry.hash), mine.data)
    monkeypatch.setattr(chain, "WITHDRAW_WALK_LIMIT", 2)
    chain.withdraw(storage, state, blocks=[str(mine.entry.hash)])
    assert (root / "blocks" / str(mine.entry.hash)).is_file()
    report = verify_path(root)
    assert report.ok and [w.rule for w in report.warnings] == ["orphan-block"]

    monkeypatch.setattr(chain, "WITHDRAW_WALK_LIMIT", 3)  # now the walk reaches the loser's base
    chain.withdraw(storage, state, blocks=[str(mine.entry.hash)])
    assert not (root / "blocks" / str(mine.entry.hash)).exists()


def _writer(root: str, worker: int, writes: int, out: str) -> None:
    """One of the writer processes beside gc: ``writes`` acknowledged writes (retrying what
    fails), recording every acknowledged block and the type of every failure."""
    acknowledged: list[tuple[str, str]] = []
    failures: dict[str, int] = {}
    deadline = time.monotonic() + 120
    while len(acknowledged) < writes and time.monotonic() < deadline:
        try:
            blocks = Dataset.open(root).write(pa.table({"x": [worker * 1000 + len(acknowledged)]}))
            add = blocks[-1]
            acknowledged.append((str(add.hash), str(add.block.event.new_data.physical_hash)))
        except Exception as exc:  # every kind is recorded, and judged by the test
            kind = type(exc).__name__ if isinstance(exc, OdfChainError) else f"!{exc!r}"
            failures[kind] = failures.get(kind, 0) + 1
    Path(out).write_text(json.dumps({"acknowledged": acknowledged, "failures": failures}))


@pytest.mark.slow
def test_gc_in_a_loop_beside_four_writers_loses_no_acknowledged_write(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    writers, writes = 4, 6
    ctx = mp.get_context("spawn")
    outs = [tmp_path / f"writer-{i}.json" for i in range(writers)]
    procs = [
        ctx.Process(target=_writer, args=(str(root), i, writes, str(outs[i])))
        for i in range(writers)
    ]
    for p in procs:
        p.start()
    passes, removed, gc_failures = 0, 0, []
    deadline = time.monotonic() + 150
    try:
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            try:
                result = collect_garbage_path(root, min_age=0)
                passes += 1
                removed += len(result.removed)
            except OdfChainError as exc:  # a lock timeout, say: judged below, never lost data
                gc_failures.append(str(exc))
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
    results = [json.loads(out.read_text()) for out in outs]
    foreign = [k for r in results for k in r["failures"] if k.startswith("!")]
    assert foreign == [], foreign  # a writer never sees a raw FileNotFoundError (or any other)
    acknowledged = [tuple(a) for r in results for a in r["acknowledged"]]
    assert len(acknowledged) == writers * writes, results
    assert passes >= 3, gc_failures
    # verify (in gc) never mistakes a writer's head move for a rollback, nor anything else
    assert [f for f in gc_failures if "does not verify" in f] == []
    collect_garbage_path(root, min_age=0)  # and once more, with no writer left
    chain_blocks = {str(e.hash) for e in Dataset.open(root).blocks()}
    missing = [a for a in acknowledged if a[0] not in chain_blocks]
    assert missing == []
    present = set(LocalStorage.open(root).data_names())
    assert [a for a in acknowledged if a[1] not in present] == []
    report = verify_path(root)
    assert report.ok, [p.line() for p in report.errors]
    print(
        f"gc passes {passes}, removed {removed}, gc failures {gc_failures}, "
        f"writer failures {[r['failures'] for r in results]}"
    )


# -- discarding a crashed writer's blocks ---------------------------------------------------------


def _crashed_write(root: Path) -> tuple[str, str]:
    """The state a writer killed just before its head move leaves: its blocks and slice in
    place, the head and the log as before. Returns (block, slice)."""
    head = (root / "refs" / "head").read_text()
    log = (root / "logs" / "head").read_bytes()
    (add,) = Dataset.open(root).write(pa.table({"x": [42]}))
    (root / "refs" / "head").write_text(head)
    (root / "logs" / "head").write_bytes(log)
    return str(add.hash), str(add.block.event.new_data.physical_hash)


def test_uncommitted_blocks_go_only_when_named(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=2)
    block, data = _crashed_write(root)
    old = time.time() - 86400
    os.utime(root / "blocks" / block, (old, old))
    os.utime(root / "data" / data, (old, old))
    report = verify_path(root)
    assert report.ok and report.descendants == {block: (data,)}
    kept = collect_garbage_path(root, min_age=0)
    assert kept.removed == [] and {(k.path, k.reason) for k in kept.kept} == {
        (f"blocks/{block}", "descendant"),
        (f"data/{data}", "descendant-data"),
    }
    chain_block = str(Dataset.open(root).blocks()[-1].hash)
    with pytest.raises(OdfChainError, match="not an uncommitted block"):
        collect_garbage_path(root, min_age=0, discard_uncommitted=[chain_block])
    run = _cli("gc", str(root), "--min-age", "0", "--discard-uncommitted", block)
    assert run.returncode == 0, run.stderr
    assert f"removed blocks/{block}" in run.stdout and f"removed data/{data}" in run.stdout
    report = verify_path(root)
    assert report.ok and report.problems == []


def test_discarding_a_block_needs_its_descendants_named(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "ds", writes=1)
    head = (root / "refs" / "head").read_text()
    log = (root / "logs" / "head").read_bytes()
    ds = Dataset.open(root)
    first = ds.write(pa.table({"x": [1]}))[-1]
    second = ds.write(pa.table({"x": [2]}))[-1]
    (root / "refs" / "head").write_text(head)
    (root / "logs" / "head").write_bytes(log)  # as if neither move had been logged
    with pytest.raises(OdfChainError, match=f"{second.hash} descends from block {first.hash}"):
        collect_garbage_path(root, min_age=0, discard_uncommitted=[str(first.hash)])
    done = collect_garbage_path(
        root, min_age=0, discard_uncommitted=[str(first.hash), str(second.hash)]
    )
    assert sorted(p for p in done.removed if p.startswith("blocks/")) == sorted(
        [f"blocks/{first.hash}", f"blocks/{second.hash}"]
    )
    assert verify_path(root).problems == []


def test_a_staging_folder_a_writer_just_touched_is_young(tmp_path: Path) -> None:
    """A Spark write's folder whose files are old but which just gained a task attempt folder
    is at work: its age is its newest entry, folders included (found by review)."""
    root = _dataset(tmp_path / "ds", writes=1)
    area = root / ".staging" / "spark-0123"
    old_part = area / "_temporary" / "0" / "_temporary" / "attempt_1" / "part-00000.parquet"
    old_part.parent.mkdir(parents=True)
    old_part.write_bytes(b"PAR1")
    old = time.time() - 1200
    for path in (old_part, *old_part.parents):
        if path == root / ".staging":
            break
        os.utime(path, (old, old))
    (old_part.parent.parent / "attempt_2").mkdir()  # a task starts now
    result = collect_garbage_path(root)  # the default minimum age, 600 s
    assert result.removed == [] and result.kept_young == [".staging/spark-0123"]
    assert old_part.is_file()


@pytest.mark.parametrize("length", [0, 1, 69, 1024, 1025, 5000])
def test_a_bounded_read_of_a_known_size_reads_the_file_whole_and_no_more(
    tmp_path: Path, length: int
) -> None:
    """``read_at_most`` asks a file of known size for one byte more than it holds: the whole
    file comes back, and a file over the limit comes back at ``limit + 1`` bytes."""
    from odf_chain.storage.user_files import read_at_most

    path = tmp_path / "f"
    path.write_bytes(os.urandom(length))
    reads: list[int] = []
    real_read = os.read

    def counting(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    for size in (length, None):
        fd = os.open(path, os.O_RDONLY)
        try:
            reads.clear()
            os.read, got = counting, None
            try:
                got = read_at_most(fd, 1024, size)
            finally:
                os.read = real_read
        finally:
            os.close(fd)
        assert got == path.read_bytes()[:1025]
        if size is not None and length <= 1024:
            assert reads == [length + 1]  # one read, of the size found and one byte


def test_a_bounded_read_of_a_file_that_grew_stops_past_the_limit(tmp_path: Path) -> None:
    from odf_chain.storage.user_files import read_at_most

    path = tmp_path / "f"
    path.write_bytes(b"x" * 3000)
    fd = os.open(path, os.O_RDONLY)
    try:  # found at 100 bytes, 3,000 now: the read goes on to limit + 1, and no further
        assert len(read_at_most(fd, 2000, 100)) == 2001
    finally:
        os.close(fd)
