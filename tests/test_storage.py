"""LocalStorage against the real filesystem: layout, blocks, data slices, and the head CAS
under real concurrent processes and a real SIGKILL."""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from odf_chain import chain
from odf_chain.dataset import Dataset
from odf_chain.errors import (
    ConflictError,
    FormatError,
    IntegrityError,
    NotFoundError,
    OdfChainError,
    StorageError,
)
from odf_chain.events import Seed
from odf_chain.format.did import DatasetId
from odf_chain.state import EMPTY
from odf_chain.storage import LocalStorage, local, write_atomic
from odf_chain.verify import verify
from tests.helpers import PERMISSIONS

H0 = "f1e20" + "00" * 32
H1 = "f1e20" + "11" * 32
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def store(tmp_path: Path) -> LocalStorage:
    return LocalStorage.create(tmp_path / "ds")


# -- layout -------------------------------------------------------------------------------------


def test_create_open_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "ds"
    created = LocalStorage.create(root)
    for sub in ("blocks", "refs", "data", "checkpoints", "info"):
        assert (root / sub).is_dir()
    created.write_block(H0, b"genesis")
    opened = LocalStorage.open(str(root))
    assert opened.root == root
    assert opened.read_block(H0) == b"genesis"
    assert opened.info_dir == root / "info"


def test_create_into_empty_dir(tmp_path: Path) -> None:
    LocalStorage.create(tmp_path)
    assert (tmp_path / "blocks").is_dir()


def test_open_non_dataset_names_path(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match=str(tmp_path)):
        LocalStorage.open(tmp_path)
    with pytest.raises(NotFoundError):
        LocalStorage.open(tmp_path / "missing")


def test_create_over_existing_dataset_raises(store: LocalStorage) -> None:
    store.compare_and_swap_head(None, H0)
    with pytest.raises(OdfChainError, match="already a dataset"):
        LocalStorage.create(store.root)
    other = LocalStorage.create(store.root.parent / "other")
    (other.root / "refs" / "head").mkdir()  # whatever sits there, it is not ours to replace
    with pytest.raises(OdfChainError, match="already a dataset"):
        LocalStorage.create(other.root)


def test_create_after_a_crash_between_block_and_head(tmp_path: Path) -> None:
    """A crash after the Seed block was written but before the head was must not leave the
    directory unusable: only a head makes a dataset."""
    root = tmp_path / "ds"
    store = LocalStorage.create(root)
    seed = chain.prepare(EMPTY, Seed(dataset_id=DatasetId.generate()))
    store.write_block(str(seed.entry.hash), seed.data)  # ... and the process dies here
    dataset = Dataset.create(root)
    assert dataset.state.sequence_number == 0
    assert dataset.state.dataset_id != seed.after.dataset_id
    report = verify(dataset.storage)
    assert report.ok
    assert [(p.rule, p.block_hash) for p in report.warnings] == [
        ("orphan-block", str(seed.entry.hash))
    ]


def test_two_creates_racing_one_wins(tmp_path: Path) -> None:
    """Both pass the no-head check; the expected-no-head head move lets exactly one seed."""
    first = LocalStorage.create(tmp_path / "ds")
    second = LocalStorage.create(tmp_path / "ds")
    first.compare_and_swap_head(None, H0)
    with pytest.raises(ConflictError):
        second.compare_and_swap_head(None, H1)
    assert second.read_head() == H0


# -- blocks -------------------------------------------------------------------------------------


def test_block_round_trip_and_idempotent(store: LocalStorage) -> None:
    assert not store.has_block(H0)
    store.write_block(H0, b"hello")
    store.write_block(H0, b"hello")
    assert store.read_block(H0) == b"hello"
    assert store.has_block(H0)
    store.write_block(H1, b"world")
    (store.root / "blocks" / ".junk.tmp").write_bytes(b"")
    assert store.block_names() == [H0, H1]
    assert store.leftover_staging() == []


def test_conflicting_block_rewrite_raises(store: LocalStorage) -> None:
    store.write_block(H0, b"hello")
    with pytest.raises(IntegrityError, match=H0):
        store.write_block(H0, b"tampered")
    assert store.read_block(H0) == b"hello"


def test_missing_block_names_it(store: LocalStorage) -> None:
    with pytest.raises(NotFoundError, match=H1):
        store.read_block(H1)


@pytest.mark.parametrize("bad", ["../x", "a/b", "", ".", "..", "/etc/passwd", "a b", "ä"])
def test_invalid_names_rejected(store: LocalStorage, bad: str) -> None:
    with pytest.raises(OdfChainError, match="invalid"):
        store.write_block(bad, b"x")
    with pytest.raises(OdfChainError, match="invalid"):
        store.read_block(bad)
    with pytest.raises(OdfChainError, match="invalid"):
        store.data_path(bad)
    with pytest.raises(OdfChainError, match="invalid"):
        store.compare_and_swap_head(None, bad)
    assert not (store.root / "x").exists()


# -- data slices --------------------------------------------------------------------------------


def test_stage_and_commit_data(store: LocalStorage) -> None:
    staged = store.stage_file(".parquet")
    assert staged.parent == store.staging_dir and staged.name.endswith(".parquet")
    staged.write_bytes(b"PAR1 slice PAR1")
    final, created = store.commit_data(staged, H0)
    assert created
    assert final == store.data_path(H0) == store.root / "data" / H0
    assert store.has_data(H0) and store.data_names() == [H0]
    with store.open_data(H0) as f:
        assert f.read() == b"PAR1 slice PAR1"
    assert store.leftover_staging() == []
    assert list(store.staging_dir.iterdir()) == []

    again = store.stage_file()
    again.write_bytes(b"PAR1 slice PAR1")
    assert store.commit_data(again, H0) == (final, False)
    assert not again.exists()

    wrong = store.stage_file()
    wrong.write_bytes(b"different size")
    with pytest.raises(IntegrityError):
        store.commit_data(wrong, H0)
    store.discard(wrong)
    store.discard(wrong)
    assert store.leftover_staging() == []


def test_commit_data_repairs_a_damaged_copy(store: LocalStorage) -> None:
    """An existing slice of the same size is replaced by the staged copy, whose name the
    writer just computed from its content: a damaged copy is repaired, not kept."""
    staged = store.stage_file()
    staged.write_bytes(b"PAR1 slice PAR1")
    store.commit_data(staged, H0)
    store.data_path(H0).write_bytes(b"PAR1 sl!ce PAR1")  # a flipped byte
    again = store.stage_file()
    again.write_bytes(b"PAR1 slice PAR1")
    commit = store.commit_data(again, H0)
    assert (commit.path, commit.created) == (store.data_path(H0), False)
    assert store.data_path(H0).read_bytes() == b"PAR1 slice PAR1"
    assert store.leftover_staging() == []


def test_write_block_and_commit_data_say_what_they_created(store: LocalStorage) -> None:
    assert store.write_block(H0, b"block") is True
    assert store.write_block(H0, b"block") is False
    assert store.leftover_staging() == []
    for expected in (True, False):
        staged = store.stage_file()
        staged.write_bytes(b"slice")
        assert store.commit_data(staged, H1).created is expected
    assert store.leftover_staging() == []


def test_remove_block_and_data(store: LocalStorage) -> None:
    store.write_block(H0, b"lost the race")
    staged = store.stage_file()
    staged.write_bytes(b"slice")
    store.commit_data(staged, H1)
    assert store.remove_block(H0) is True
    assert store.remove_block(H0) is False
    assert store.remove_data(H1) is True
    assert store.remove_data(H1) is False
    assert store.block_names() == [] and store.data_names() == []
    for bad in ("..", "../refs/head", ""):
        with pytest.raises(OdfChainError, match="invalid"):
            store.remove_block(bad)
        with pytest.raises(OdfChainError, match="invalid"):
            store.remove_data(bad)


def test_creation_without_hard_links(store: LocalStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """Filesystems without hard links fall back to rename (not atomic against a concurrent
    creator, still correct alone)."""

    def no_links(src, dst, *args, **kwargs):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(src), None, str(dst))

    monkeypatch.setattr(os, "link", no_links)
    assert store.write_block(H0, b"block") is True
    assert store.write_block(H0, b"block") is False
    for expected in (True, False):
        staged = store.stage_file()
        staged.write_bytes(b"slice")
        assert store.commit_data(staged, H1) == (store.data_path(H1), expected)
    assert store.read_block(H0) == b"block"
    assert store.data_path(H1).read_bytes() == b"slice"
    assert store.leftover_staging() == []


def _create_worker(root: str, kind: str, barrier: Barrier, results: Queue[tuple[int, str]]) -> None:
    store = LocalStorage.open(root)
    staged = None
    if kind == "data":
        staged = store.stage_file()
        staged.write_bytes(b"the same slice")
    barrier.wait()
    try:
        if staged is None:
            created = store.write_block(H0, b"the same block")
        else:
            created = store.commit_data(staged, H0).created
        results.put((os.getpid(), "created" if created else "existed"))
    except Exception as e:
        results.put((os.getpid(), f"error: {e!r}"))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["block", "data"])
def test_racing_writers_exactly_one_creates(store: LocalStorage, kind: str) -> None:
    """Writers that lose a head race delete what they created: of several writers storing
    the same name at once, exactly one may think it created the file."""
    n = 6
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_create_worker, args=(str(store.root), kind, barrier, results))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60)[1] for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(outcomes) == ["created"] + ["existed"] * (n - 1), outcomes
    assert store.leftover_staging() == []


def test_missing_data_and_foreign_staged_file(store: LocalStorage, tmp_path: Path) -> None:
    assert not store.has_data(H1)
    with pytest.raises(NotFoundError, match=H1):
        store.open_data(H1)
    outside = tmp_path / "outside"
    outside.write_bytes(b"x")
    with pytest.raises(OdfChainError):
        store.commit_data(outside, H1)
    with pytest.raises(OdfChainError):
        store.stage_file("/../x")


def test_leftover_staging_lists_orphans(store: LocalStorage) -> None:
    orphan = store.stage_file()
    assert store.leftover_staging() == [orphan.name]


def test_write_atomic_replaces(tmp_path: Path) -> None:
    target = tmp_path / "f"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["f"]


# -- head ---------------------------------------------------------------------------------------


def test_head_cas(store: LocalStorage) -> None:
    assert store.read_head() is None
    store.compare_and_swap_head(None, H0)
    assert store.read_head() == H0
    assert (store.root / "refs" / "head").read_text() == H0

    with pytest.raises(ConflictError, match="head moved: expected no head"):
        store.compare_and_swap_head(None, H1)
    with pytest.raises(ConflictError, match=f"expected {H1}, found {H0}"):
        store.compare_and_swap_head(H1, H1)
    assert store.read_head() == H0

    store.compare_and_swap_head(H0, H1)
    assert store.read_head() == H1
    assert store.leftover_staging() == []


def test_head_tolerates_newline_rejects_garbage(store: LocalStorage) -> None:
    head = store.root / "refs" / "head"
    head.write_text(H0 + "\n")
    assert store.read_head() == H0
    head.write_text("../../etc/passwd")
    with pytest.raises(FormatError):
        store.read_head()


def _cas_worker(
    root: str, expected: str, new: str, barrier: Barrier, results: Queue[tuple[str, str]]
) -> None:
    store = LocalStorage.open(root)
    barrier.wait()
    try:
        store.compare_and_swap_head(expected, new)
        results.put((new, "ok"))
    except ConflictError as e:
        results.put((new, f"conflict: {e}"))
    except Exception as e:
        results.put((new, f"error: {e!r}"))


@pytest.mark.slow
def test_concurrent_cas_exactly_one_wins(store: LocalStorage) -> None:
    n = 8
    store.compare_and_swap_head(None, H0)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    names = [f"f1e20{i:02x}" + "ab" * 31 for i in range(n)]
    procs = [
        ctx.Process(target=_cas_worker, args=(str(store.root), H0, name, barrier, results))
        for name in names
    ]
    for p in procs:
        p.start()
    # generous: 8 spawned interpreters importing pyarrow take a minute or more on a loaded
    # 2-core machine before the barrier lets them race (the race itself is instant)
    outcomes = dict(results.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0

    winners = [name for name, outcome in outcomes.items() if outcome == "ok"]
    losers = [o for o in outcomes.values() if o.startswith("conflict: head moved")]
    assert len(winners) == 1, outcomes
    assert len(losers) == n - 1, outcomes
    assert store.read_head() == winners[0]
    assert (store.root / "refs" / "head").read_text() == winners[0]
    assert store.leftover_staging() == []


def test_killed_lock_holder_does_not_block(store: LocalStorage) -> None:
    store.compare_and_swap_head(None, H0)
    script = textwrap.dedent(
        f"""
        import sys, time
        from odf_chain.storage import LocalStorage
        store = LocalStorage.open({str(store.root)!r})
        with store.head_lock():
            partial = store.stage_file()
            partial.write_bytes(b"{H1[:10]}")  # half-written new head, never renamed
            print("locked", flush=True)
            time.sleep(60)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(ConflictError, match="could not lock"):
            store.compare_and_swap_head(H0, H1, timeout=0.2)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()

    assert store.read_head() == H0
    assert len(store.leftover_staging()) == 1  # the crashed writer's orphan, for verify
    store.compare_and_swap_head(H0, H1, timeout=5)
    assert store.read_head() == H1


# -- OS-level failures are StorageErrors that name the path ---------------------------------------


@pytest.fixture
def read_only_fs(monkeypatch: pytest.MonkeyPatch):
    """Make every mutating syscall fail as on a read-only filesystem (works as root too, where
    permission bits would not stop a write)."""
    real_open = os.open
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def refuse(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    def open_(path, flags, *args, **kwargs):
        if flags & writes:
            refuse(path)
        return real_open(path, flags, *args, **kwargs)

    def start() -> None:
        monkeypatch.setattr(os, "open", open_)
        for name in ("mkdir", "rename", "replace", "link", "unlink"):
            monkeypatch.setattr(os, name, refuse)

    return start


def test_missing_listing_directory_is_not_found(store: LocalStorage) -> None:
    shutil.rmtree(store.root / "data")
    with pytest.raises(NotFoundError, match=str(store.root / "data")):
        store.data_names()
    shutil.rmtree(store.root / "blocks")
    with pytest.raises(NotFoundError, match=str(store.root / "blocks")):
        store.block_names()


def test_listing_a_file_instead_of_a_directory(store: LocalStorage) -> None:
    (store.root / "data").rmdir()
    (store.root / "data").write_bytes(b"")
    with pytest.raises(StorageError, match=str(store.root / "data")):
        store.data_names()
    (store.root / "data").unlink()  # one broken directory at a time: each is named
    (store.root / "data").mkdir()
    shutil.rmtree(store.root / ".staging", ignore_errors=True)
    (store.root / ".staging").write_bytes(b"")
    with pytest.raises(StorageError, match=str(store.root / ".staging")):
        store.leftover_staging()
    with pytest.raises(StorageError, match=str(store.root / ".staging")):
        store.stage_file()


def test_head_that_is_a_directory(store: LocalStorage) -> None:
    (store.root / "refs" / "head").mkdir()
    with pytest.raises(StorageError, match=str(store.root / "refs" / "head")):
        store.read_head()
    with pytest.raises(StorageError, match=str(store.root / "refs" / "head")):
        store.compare_and_swap_head(None, H0)


def test_create_on_a_regular_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"not a directory")
    with pytest.raises(OdfChainError, match=str(target)):
        LocalStorage.create(target)
    with pytest.raises(OdfChainError, match=str(target)):
        LocalStorage.create(target / "below")
    assert target.read_bytes() == b"not a directory"


@pytest.mark.skipif(not PERMISSIONS, reason="permission bits do not stop this user")
def test_permission_denied_data_file(store: LocalStorage) -> None:
    staged = store.stage_file()
    staged.write_bytes(b"slice")
    store.commit_data(staged, H0)
    store.data_path(H0).chmod(0)
    with pytest.raises(StorageError, match=str(store.data_path(H0))):
        store.open_data(H0)


def test_writes_into_a_read_only_dataset(store: LocalStorage, read_only_fs) -> None:
    store.write_block(H0, b"genesis")
    store.compare_and_swap_head(None, H0)
    staged = store.stage_file()
    read_only_fs()
    blocks, data, head = (store.root / d for d in ("blocks", "data", "refs"))
    with pytest.raises(StorageError, match=str(blocks / H1)) as info:
        store.write_block(H1, b"next")
    assert "Read-only file system" in str(info.value)
    with pytest.raises(StorageError, match=str(head)):  # the lock file, or the head
        store.compare_and_swap_head(H0, H1)
    with pytest.raises(StorageError, match=str(store.root / ".staging")):
        store.stage_file()
    with pytest.raises(StorageError, match=str(data / H1)):
        store.commit_data(staged, H1)
    with pytest.raises(StorageError, match=str(staged)):
        store.discard(staged)
    with pytest.raises(StorageError, match=str(store.root.parent / "new")):
        LocalStorage.create(store.root.parent / "new")
    assert store.read_head() == H0 and store.read_block(H0) == b"genesis"


@pytest.mark.skipif(not PERMISSIONS, reason="permission bits do not stop this user")
def test_writes_into_a_chmod_read_only_dataset(store: LocalStorage) -> None:
    store.write_block(H0, b"genesis")
    store.compare_and_swap_head(None, H0)
    store.staging_dir  # noqa: B018 - created while writable
    dirs = [store.root / d for d in ("blocks", "refs", "data", ".staging")]
    for d in dirs:
        d.chmod(0o555)
    try:
        with pytest.raises(StorageError, match=str(store.root)):
            store.write_block(H1, b"next")
        with pytest.raises(StorageError, match=str(store.root)):
            store.compare_and_swap_head(H0, H1)
    finally:
        for d in dirs:
            d.chmod(0o755)
    assert store.read_head() == H0


# -- nothing through a symlink ------------------------------------------------------------------


def test_removal_never_follows_a_symlink(store: LocalStorage, tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_bytes(b"not the dataset's")
    (store.root / "data" / H0).symlink_to(target)
    (store.root / "blocks" / H1).symlink_to(target)
    with pytest.raises(StorageError, match=rf"data/{H0} is a symlink: not removed"):
        store.remove_data(H0)
    with pytest.raises(StorageError, match=rf"blocks/{H1} is a symlink: not removed"):
        store.remove_block(H1)
    assert store.data_names() == [] and store.block_names() == []  # regular files only
    assert store.irregular_entries() == [(f"blocks/{H1}", "a symlink"), (f"data/{H0}", "a symlink")]
    assert target.read_bytes() == b"not the dataset's"


@pytest.mark.parametrize("directory", ["logs", "info", "checkpoints", "refs"])
def test_check_layout_refuses_a_symlinked_directory(store: LocalStorage, directory: str) -> None:
    store.check_layout()
    elsewhere = store.root.parent / "elsewhere"
    shutil.move(store.root / directory, elsewhere)
    (store.root / directory).symlink_to(elsewhere)
    with pytest.raises(StorageError, match=rf"{directory} is a symlink, not a directory"):
        store.check_layout()


def test_an_empty_layout_is_removed_and_nothing_else(tmp_path: Path) -> None:
    """What a create that committed nothing leaves: removed when every folder is empty (the root
    only if the create made it); kept whole when anything is in it, or a folder is a symlink."""
    made = LocalStorage.create(tmp_path / "made")
    made.remove_empty_layout()
    assert not (tmp_path / "made").exists()

    (tmp_path / "existing").mkdir()
    LocalStorage.create(tmp_path / "existing").remove_empty_layout()
    assert (tmp_path / "existing").is_dir() and list((tmp_path / "existing").iterdir()) == []

    busy = LocalStorage.create(tmp_path / "busy")
    (tmp_path / "busy" / ".staging").mkdir()
    (tmp_path / "busy" / ".staging" / "another-writer.parquet").write_bytes(b"x")
    busy.remove_empty_layout()
    assert (tmp_path / "busy" / "blocks").is_dir()
    assert (tmp_path / "busy" / ".staging" / "another-writer.parquet").exists()

    linked = LocalStorage.create(tmp_path / "linked")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked" / "data").rmdir()
    (tmp_path / "linked" / "data").symlink_to(elsewhere, target_is_directory=True)
    linked.remove_empty_layout()
    assert (tmp_path / "linked" / "data").is_symlink() and elsewhere.is_dir()
    assert (tmp_path / "linked" / "blocks").is_dir()  # nothing removed at all


@pytest.mark.parametrize(
    "name",
    [
        "f1e20abc",
        "Z9",
        "",
        "a.b",
        "a/b",
        "..",
        "a b",
        "a\n",
        "a-b",
        "\uff41",
        "\u0663",
        "\u00df",
        "x\u0301",
        "\u2167",
    ],
)
def test_names_are_ascii_letters_and_digits_only(name: str) -> None:
    assert local._is_name(name) == bool(re.fullmatch(r"[0-9a-zA-Z]+", name, re.ASCII))
    if not local._is_name(name):
        with pytest.raises(OdfChainError, match="invalid block name"):
            local.check_name(name, "block name")
