"""Durability of an append (issue 25, part 4): the syncs an append makes, their order, and the
head log that is no longer synced.

The syncs are counted by wrapping ``os.fsync``, ``os.fdatasync``, ``os.link`` and ``os.rename``
in this process (its sync threads too): each wrapper makes the real call and records it once it
has returned, so the files are as durable as without it (measuring, not mocking), and a sync
recorded before the rename had ended before the rename was made. A power loss cannot be
simulated here; what it can leave of an unsynced head log (its last lines gone, or zeroed) is
written by hand.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain import Dataset, chain
from odf_chain.errors import RuleViolation
from odf_chain.events import AddData, SourceState
from odf_chain.storage import LocalStorage, local_head
from odf_chain.storage.local_head import HELD_FILES
from odf_chain.transaction import Transaction
from odf_chain.verify import verify_path

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="names synced descriptors through /proc"
)

BASE = datetime(2026, 1, 1, tzinfo=UTC)


def _event(i: int) -> AddData:
    return AddData(
        new_watermark=BASE + timedelta(seconds=i),
        new_source_state=SourceState("poll", "odf/etag", f"etag-{i}"),
    )


def _dataset(root: Path, appends: int) -> Dataset:
    ds = Dataset.create(root)
    for i in range(appends):
        ds.append(_event(i))
    return ds


def _where(root: Path, path: str) -> str:
    """A path as the dataset sees it: ``blocks/``, ``refs/head``, ``refs/head next``..."""
    relative = os.path.relpath(path, root)
    parent, _, name = relative.rpartition("/")
    if parent == ".staging":
        if name.startswith("data."):
            return ".staging/slice tmp"
        return ".staging/block tmp"
    if relative == "refs/.head.next":
        return "refs/head next"
    if parent == "blocks":
        return "blocks/<block>"
    if parent == "data":
        return "data/<slice>"
    return relative + "/" if os.path.isdir(path) else relative


@pytest.fixture
def syscalls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], list[tuple]]]:
    """Records every fsync, fdatasync, link and rename this process makes (each also made for
    real); the fixture's value gives them, named relative to a dataset root."""
    calls: list[tuple[str, str, str | None]] = []

    def by_descriptor(name: str) -> Callable[[int], None]:
        real = getattr(os, name)

        def call(fd: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            if path.endswith(" (deleted)"):  # a file written in .staging/ and linked elsewhere
                path = ("inode", os.fstat(fd).st_ino)
            real(fd)
            calls.append((name, path, None))  # list.append: safe from the sync threads

        return call

    def by_path(name: str, shown: str | None = None) -> Callable[..., None]:
        real = getattr(os, name)

        def at(path, dir_fd: int | None) -> str:  # a name in a directory descriptor's folder
            if dir_fd is None:
                return os.fspath(path)
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)

        def call(src, dst, *args, **kwargs) -> None:
            real(src, dst, *args, **kwargs)
            where = (at(src, kwargs.get("src_dir_fd")), at(dst, kwargs.get("dst_dir_fd")))
            calls.append((shown or name, *where))

        return call

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, by_descriptor(name))
    monkeypatch.setattr(os, "link", by_path("link"))
    # a head move renames or, where the filesystem can, exchanges: either is "move"
    renaming, real_rename = by_path("rename", "move"), os.rename

    def rename(src, dst, *args, **kwargs) -> None:
        if {os.fspath(src), os.fspath(dst)} == {".head.next", ".head.spare"}:
            return real_rename(src, dst, *args, **kwargs)  # naming the spare: not a move
        return renaming(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    real_exchange = local_head.exchange_at

    def exchange(dir_fd: int, a: str, b: str) -> bool:
        done = real_exchange(dir_fd, a, b)
        if done:
            folder = os.readlink(f"/proc/self/fd/{dir_fd}")
            calls.append(("move", os.path.join(folder, a), os.path.join(folder, b)))
        return done

    monkeypatch.setattr(local_head, "exchange_at", exchange)

    def named(root: Path) -> list[tuple]:
        root = Path(os.path.realpath(root))
        linked = {}  # the names of the files synced through a staging name since removed
        for folder in ("blocks", "data"):
            with os.scandir(root / folder) as entries:
                linked.update({e.inode(): e.path for e in entries})
        shown = []
        for name, first, second in calls:
            if isinstance(first, tuple):
                first = linked[first[1]]
            if second is None:
                shown.append((name, _where(root, first)))
            else:
                shown.append((name, _where(root, first), _where(root, second)))
        calls.clear()
        return shown

    yield named


def _fail_fsync_of(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """Make ``os.fsync`` of a folder whose path ends with ``suffix`` fail with EIO."""
    real = os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(suffix):
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", failing)


SYNCS_BEFORE_RENAME = {
    ("fdatasync", "blocks/<block>"),  # 1: the block's bytes
    ("fsync", "blocks/"),  # 2: its name
    ("fdatasync", "refs/head next"),  # 3: the new head's bytes
}
RENAME = ("move", "refs/head next", "refs/head")


def _syncs(calls: list[tuple]) -> list[tuple]:
    return [c for c in calls if c[0] in ("fsync", "fdatasync")]


def test_an_append_syncs_four_times_blocks_before_the_head(tmp_path: Path, syscalls) -> None:
    """One block: linked into blocks/, then its bytes, blocks/ and the head's bytes synced at
    once (in any order, all ended before the head is renamed), then (the head renamed)
    refs/. No sync of the head log nor of the index."""
    ds = _dataset(tmp_path / "ds", 3)
    syscalls(ds.storage.root)
    entry = ds.append(_event(3))
    calls = syscalls(ds.storage.root)
    assert calls[0] == ("link", ".staging/block tmp", "blocks/<block>")
    assert set(calls[1:4]) == SYNCS_BEFORE_RENAME
    assert calls[4:] == [RENAME, ("fsync", "refs/")]
    assert (ds.storage.root / "refs" / "head").read_text() == str(entry.hash)
    assert verify_path(ds.storage.root).ok


def test_a_transaction_of_three_blocks_syncs_six_times(tmp_path: Path, syscalls) -> None:
    """k blocks: k files, blocks/ once, the head's two: k + 3. Every block file is linked
    before the syncs, and its bytes and name are synced before the head is renamed."""
    ds = _dataset(tmp_path / "ds", 1)
    syscalls(ds.storage.root)
    tx = Transaction.begin(ds.storage, ds.state)
    for i in range(1, 4):
        tx.add(_event(i))
    after = tx.commit()
    calls = syscalls(ds.storage.root)
    rename = calls.index(RENAME)
    assert calls[:3] == [("link", ".staging/block tmp", "blocks/<block>")] * 3
    assert sorted(calls[3:rename]) == sorted(
        [("fdatasync", "blocks/<block>")] * 3
        + [("fsync", "blocks/"), ("fdatasync", "refs/head next")]
    )
    assert calls[rename:] == [RENAME, ("fsync", "refs/")]
    assert len(_syncs(calls)) == 6
    assert Dataset.open(ds.storage.root).state.head == after.head
    assert verify_path(ds.storage.root).ok


def test_a_long_transaction_syncs_every_block_before_the_rename(tmp_path: Path, syscalls) -> None:
    """More blocks than a head move holds open at once (``HELD_FILES``): the first ones are
    synced (and closed) first, every one still before the head is renamed; k + 3 syncs."""
    ds = _dataset(tmp_path / "ds", 1)
    k = HELD_FILES + 6
    syscalls(ds.storage.root)
    tx = Transaction.begin(ds.storage, ds.state)
    for i in range(1, k + 1):
        tx.add(_event(i))
    after = tx.commit()
    calls = syscalls(ds.storage.root)
    rename = calls.index(RENAME)
    links = [c for c in calls[:rename] if c[0] == "link"]
    assert links == [("link", ".staging/block tmp", "blocks/<block>")] * k
    assert sorted(c for c in calls[:rename] if c[0] != "link") == sorted(
        [("fdatasync", "blocks/<block>")] * k
        + [("fsync", "blocks/"), ("fdatasync", "refs/head next")]
    )
    assert calls[rename:] == [RENAME, ("fsync", "refs/")]
    assert Dataset.open(ds.storage.root).state.head == after.head
    assert verify_path(ds.storage.root).ok


def test_a_write_of_several_slices_syncs_each_folder_once(tmp_path: Path, syscalls) -> None:
    """s slices, each with its AddData: each slice file synced before it is named (commit_data,
    before the lock); then, all at once and ended before the head is renamed, the s block
    files, blocks/ and data/ once each, and the head's bytes; then refs/: 2s + 4."""
    ds = Dataset.create(tmp_path / "ds")
    ds.write(pa.table({"x": pa.array(range(10), pa.int64())}))  # the schema first
    before = ds.state.sequence_number
    syscalls(ds.storage.root)
    rows = (1 << 20) + 1  # a slice holds whole row groups of at most 2**20 rows: two slices
    ds.write(pa.table({"x": pa.array(range(rows), pa.int64())}), target_slice_bytes=1)
    calls = syscalls(ds.storage.root)
    added = [e for e in Dataset.open(ds.storage.root).blocks() if e.block.sequence_number > before]
    slices = {str(e.block.event.new_data.physical_hash) for e in added}
    assert len(slices) == len(added) > 1
    s = len(added)
    rename = calls.index(RENAME)
    assert calls[rename:] == [RENAME, ("fsync", "refs/")]
    slice_syncs = [i for i, c in enumerate(calls) if c == ("fdatasync", ".staging/slice tmp")]
    slice_links = [
        i for i, c in enumerate(calls) if c == ("link", ".staging/slice tmp", "data/<slice>")
    ]
    block_links = [
        i for i, c in enumerate(calls) if c == ("link", ".staging/block tmp", "blocks/<block>")
    ]
    assert len(slice_syncs) == len(slice_links) == len(block_links) == s
    # each slice's bytes are durable before it gets its name
    assert all(sync < link for sync, link in zip(slice_syncs, slice_links, strict=True))
    together = calls[max(block_links + slice_links) + 1 : rename]
    assert sorted(together) == sorted(
        [("fdatasync", "blocks/<block>")] * s
        + [("fsync", "blocks/"), ("fsync", "data/"), ("fdatasync", "refs/head next")]
    )
    assert len(_syncs(calls)) == 2 * s + 4
    assert verify_path(ds.storage.root).ok


def _log(root: Path) -> Path:
    return root / "logs" / "head"


def _lines(root: Path) -> list[str]:
    return _log(root).read_text().splitlines()


@pytest.mark.parametrize(
    ("lost", "zeroed"),
    [(1, False), (3, False), (3, True), (40, True)],
    ids=["last-line", "three-lines", "three-lines-zeroed", "40-lines-zeroed-past-4KiB"],
)
def test_a_head_log_a_power_loss_cut_short_is_repaired(
    tmp_path: Path, lost: int, zeroed: bool
) -> None:
    """The log line is not synced: a power loss after an append returned can take it (and the
    lines before it that were not on the disk yet), or leave zeros where they were (the size
    reached the disk, the bytes did not). The head is intact (it was synced). Verify passes
    (a log that lags names only ancestors of the head: not a rollback), the next append is
    not refused, and it repairs the log from the head."""
    root = tmp_path / "ds"
    ds = _dataset(root, 45)
    lines = _lines(root)
    head = (root / "refs" / "head").read_text()
    kept = lines[:-lost]
    cut = "".join(line + "\n" for line in kept).encode()
    gone = len(_log(root).read_bytes()) - len(cut)
    _log(root).write_bytes(cut + (b"\0" * gone if zeroed else b""))
    if zeroed:
        assert gone > (4096 if lost == 40 else 0)

    report = verify_path(root)
    assert report.ok, [p.line() for p in report.problems]
    entry = Dataset.open(root).append(_event(100))

    after = _lines(root)
    assert after[: len(kept)] == kept
    repair, new = after[len(kept) :]
    assert repair.split()[:2] == [kept[-1].split()[1], head]  # the last logged head -> the head
    assert new.split()[:2] == [head, str(entry.hash)]
    assert b"\0" not in _log(root).read_bytes()
    assert verify_path(root).ok
    assert [m.new for m in ds.storage.read_head_log()][-2:] == [head, str(entry.hash)]


def test_a_rollback_past_the_lagging_log_is_still_seen(tmp_path: Path) -> None:
    """What the unsynced log still promises: a head moved back behind the last line that
    reached the disk is a rollback, for verify and for the next write."""
    root = tmp_path / "ds"
    ds = _dataset(root, 6)
    heads = [str(e.hash) for e in ds.blocks()]  # oldest first
    lines = _lines(root)
    _log(root).write_text("".join(line + "\n" for line in lines[:-1]))  # the last line lost
    (root / "refs" / "head").write_text(heads[-4])  # behind the last logged head, heads[-2]
    report = verify_path(root)
    assert not report.ok
    assert [p.rule for p in report.errors] == ["head-rollback"]
    with pytest.raises(RuleViolation, match="moved back"):
        Dataset.open(root).append(_event(100))


def test_a_torn_file_under_a_block_name_is_named_for_what_it_is(tmp_path: Path) -> None:
    """A crash before the head move can leave a torn file under the name of the block being
    written (its bytes are synced with the head move). Writing that same block again is refused
    with an error that says so and names the file; the file is kept (it is a leftover like any
    other, verify warns of it), and nothing committed changes."""
    from odf_chain.chain import prepare
    from odf_chain.errors import IntegrityError
    from odf_chain.storage import open_storage

    dataset = Dataset.create(tmp_path / "ds")
    dataset.write(pa.table({"id": pa.array([1], pa.int64())}))
    state = dataset.refresh()
    event = AddData(prev_offset=state.last_offset, new_data=None, new_watermark=state.watermark)
    moment = state.system_time + timedelta(seconds=1)
    prepared = prepare(state, event, system_time=moment)
    name = str(prepared.entry.hash)
    storage = open_storage(tmp_path / "ds")
    torn = prepared.data[: len(prepared.data) // 2]
    (tmp_path / "ds" / "blocks" / name).write_bytes(torn)
    with pytest.raises(IntegrityError, match="is not that block") as caught:
        storage.write_block(name, prepared.data)
    assert name in str(caught.value) and f"{len(torn):,} bytes" in str(caught.value)
    assert (tmp_path / "ds" / "blocks" / name).read_bytes() == torn  # kept
    assert storage.read_head() == str(state.head)
    report = verify_path(tmp_path / "ds")
    assert report.ok and [p.rule for p in report.warnings] == ["orphan-block"]


def test_the_index_is_written_once_the_move_is_durable_under_the_head_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append's index update is made after the head's rename and the one sync of ``refs/``
    that makes it durable, while the head lock is still held (no other writer's update can
    come between); the repair path is not taken, and the index names the new head when the
    append returns."""
    import fcntl

    from odf_chain.index import read as index_read, update

    monkeypatch.setattr(
        update, "INDEX_BATCH", 1
    )  # each commit's (a handle's batch: test_index_batch)
    ds = _dataset(tmp_path / "ds", 2)
    refs = os.path.realpath(ds.storage.root / "refs")
    lock = ds.storage.root / "refs" / ".head.lock"
    order: list[str] = []
    real_fsync, real_rename, real_record = os.fsync, os.rename, update.record_commit

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if os.readlink(f"/proc/self/fd/{fd}") == refs:
            order.append("refs synced")  # ended

    def rename(src, dst, *args, **kwargs):
        folder = kwargs.get("dst_dir_fd")
        if folder is not None:  # a name in a directory descriptor's folder
            dst = os.path.join(os.readlink(f"/proc/self/fd/{folder}"), dst)
        if os.fspath(dst).endswith(os.path.join("refs", "head")):
            order.append("head renamed")
        real_rename(src, dst, *args, **kwargs)

    def record(*args, repair: bool = True):
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            order.append("index, the lock free" if not repair else "repair")
        except BlockingIOError:
            order.append("index, the lock held" if not repair else "repair, the lock held")
        finally:
            os.close(fd)
        return real_record(*args, repair=repair)

    def exchange(dir_fd: int, a: str, b: str) -> bool:
        done = real_exchange(dir_fd, a, b)
        if done and b == "head":
            order.append("head renamed")
        return done

    real_exchange = local_head.exchange_at
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(local_head, "exchange_at", exchange)
    monkeypatch.setattr(update, "record_commit", record)
    entry = ds.append(_event(2))
    assert order == ["head renamed", "refs synced", "index, the lock held"]
    index = index_read.open_index(ds.storage)
    assert (index.how, index.head.head) == ("checked", entry.hash)  # its files name the head


@pytest.mark.parametrize("damage", ["no-coverage", "no-index"])
def test_an_index_to_repair_is_repaired_once_the_head_lock_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """Beside the head move only the usual update is made; a repair (a prefix coverage
    missing: buckets rewritten from the seq table; the index gone: a rebuild, which reads the
    whole chain) waits until the head lock is released, so other writers never wait for it.
    After the append the index names the head either way."""
    import fcntl
    import shutil

    from odf_chain.index import prefixes, read as index_read, update
    from odf_chain.index.records import PREFIX_BATCH

    monkeypatch.setattr(
        update, "INDEX_BATCH", 1
    )  # each commit's (a handle's batch: test_index_batch)
    ds = _dataset(tmp_path / "ds", PREFIX_BATCH - 2)  # the next block ends a batch: buckets due
    index_dir = ds.storage.root / "info" / "odf-chain-index"
    if damage == "no-coverage":
        (index_dir / "prefixes").unlink()
    else:
        shutil.rmtree(index_dir)
    lock_free = []

    def lock_is_free() -> bool:
        fd = os.open(ds.storage.root / "refs" / ".head.lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    def watching(real):
        def call(*args, **kwargs):
            if kwargs.get("repair", True):  # not the usual path, made under the lock
                lock_free.append(lock_is_free())
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(update, "record_commit", watching(update.record_commit))
    monkeypatch.setattr(prefixes, "write_prefixes", watching(prefixes.write_prefixes))
    entry = ds.append(_event(PREFIX_BATCH))
    assert lock_free and all(lock_free), lock_free  # the repair ran, and not under the lock
    index = index_read.open_index(ds.storage)
    assert (index.how, index.head.head) == ("checked", entry.hash)
    assert (index_dir / "prefixes").is_file()
    assert verify_path(ds.storage.root).ok


@pytest.mark.parametrize("kind", ["local", "fs-local"])
def test_once_moved_runs_after_a_move_never_after_a_refusal(tmp_path: Path, kind: str) -> None:
    """``once_moved`` runs once the head has moved, and a failure in it is not the move's; a
    refused move (another writer's head) never runs it. Local storage and the object-store
    code (over local files)."""
    import pyarrow.fs as pafs

    from odf_chain.chain import prepare
    from odf_chain.errors import ConflictError
    from odf_chain.storage import FsStorage

    ds = _dataset(tmp_path / "ds", 1)
    storage = ds.storage
    if kind == "fs-local":
        storage = FsStorage.open(pafs.LocalFileSystem(), str(storage.root), single_writer=True)
    state = ds.state
    prepared = prepare(state, _event(1))
    storage.write_block(str(prepared.entry.hash), prepared.data)
    new, calls = str(prepared.entry.hash), []

    def failing() -> None:
        calls.append(storage.read_head())  # the head has moved when it runs
        raise OSError("a cache that cannot be written")

    with pytest.raises(ConflictError):
        storage.compare_and_swap_head("f" * 68, new, once_moved=failing)
    assert calls == []
    assert storage.read_head() == str(state.head)
    storage.compare_and_swap_head(str(state.head), new, once_moved=failing)
    assert calls == [new]
    assert storage.read_head() == new
    assert verify_path(ds.storage.root).ok


def test_sync_together_makes_every_sync_and_raises_once_all_have_ended(tmp_path: Path) -> None:
    """Every sync is made, the first by this thread and the others by the sync threads; a
    failure is raised only once every sync has ended (no descriptor is closed under one)."""
    import threading

    from odf_chain.storage.local_files import sync_together

    path = tmp_path / "f"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    try:
        ended, threads = [], []

        def sync(fd: int) -> None:
            threads.append(threading.current_thread().name)
            os.fsync(fd)
            ended.append(fd)

        sync_together([(sync, fd), (sync, fd), (sync, fd)])
        assert len(ended) == 3
        assert threads.count(threading.current_thread().name) == 1
        assert sum(name.startswith("odf-chain-sync-") for name in threads) == 2

        def failing_sync(fd: int) -> None:
            raise OSError("sync failed")

        def slow_sync(fd: int) -> None:
            threading.Event().wait(0.2)
            sync(fd)

        with pytest.raises(OSError, match="sync failed"):
            sync_together([(failing_sync, fd), (slow_sync, fd)])
        assert len(ended) == 4  # the other sync had ended when the error was raised
    finally:
        os.close(fd)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("handle", ["opened", "its own head"])
def test_an_append_holds_its_folders_once_and_leaves_no_descriptor_open(
    tmp_path: Path, handle: str
) -> None:
    """An append opens the dataset's root twice, to read the head and to commit, and within
    each of those each folder it uses once (a batch holds them); it closes all of them, refused
    or not. A handle whose state is the head it set itself reads nothing first: the head move
    checks the head and the head log under the lock (one root, each folder once)."""
    from odf_chain.errors import ConflictError

    ds = _dataset(tmp_path / "ds", 3)
    if handle == "opened":
        ds = Dataset.open(ds.storage.root)
    root = os.path.realpath(ds.storage.root)
    opened: list[str] = []
    real_open = os.open

    def counting_open(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        if flags & os.O_DIRECTORY:
            opened.append(os.readlink(f"/proc/self/fd/{fd}"))
        return fd

    real_commit = Transaction.commit

    def commit(self):
        opened.append("commit")
        return real_commit(self)

    before = _open_descriptors()
    os.open = counting_open
    Transaction.commit = commit
    try:
        ds.append(_event(3))
    finally:
        os.open, Transaction.commit = real_open, real_commit
    head_read, committing = opened[: opened.index("commit")], opened[opened.index("commit") + 1 :]
    batches = (head_read, committing) if handle == "opened" else (committing,)
    if handle != "opened":
        assert head_read == [], opened  # nothing read before the transaction
    for batch in batches:
        assert batch.count(root) == 1, opened
        assert len(batch) == len(set(batch)), opened  # no folder opened twice
    assert _open_descriptors() == before

    stale = Dataset.open(ds.storage.root).state  # a second writer, on the same head
    ds.append(_event(4))
    tx = Transaction.begin(ds.storage, stale)
    tx.add(_event(5))
    with pytest.raises(ConflictError):
        tx.commit()
    assert _open_descriptors() == before
    assert verify_path(ds.storage.root).ok


def _next_block(tmp_path: Path):
    """A dataset at ``tmp_path/ds`` with one slice, and an AddData prepared on its head."""
    dataset = Dataset.create(tmp_path / "ds")
    dataset.write(pa.table({"id": pa.array([1], pa.int64())}))
    state = dataset.refresh()
    event = AddData(prev_offset=state.last_offset, new_data=None, new_watermark=state.watermark)
    return state, chain.prepare(state, event, system_time=state.system_time + timedelta(seconds=1))


def test_the_head_move_refuses_a_torn_file_under_its_block_name_and_keeps_it(
    tmp_path: Path,
) -> None:
    """The head move writes the blocks under the head lock (a local store): a torn file already
    under a block's name is refused there as by ``write_block``, kept, and the head stays."""
    from odf_chain.errors import IntegrityError

    state, prepared = _next_block(tmp_path)
    name = str(prepared.entry.hash)
    torn = prepared.data[: len(prepared.data) // 2]
    (tmp_path / "ds" / "blocks" / name).write_bytes(torn)
    storage = LocalStorage.open(tmp_path / "ds")
    with pytest.raises(IntegrityError, match="is not that block") as caught:
        chain.commit(storage, prepared)
    assert name in str(caught.value)
    assert (tmp_path / "ds" / "blocks" / name).read_bytes() == torn  # kept
    assert storage.read_head() == str(state.head)
    assert not list((tmp_path / "ds" / ".staging").iterdir())


def test_the_head_move_takes_a_block_already_in_place_and_a_dead_writers_staging_file(
    tmp_path: Path,
) -> None:
    """A block file already there with the block's bytes (a retry's) is used as it is; a
    staging file of the block's name left by a writer that died holding the lock is replaced.
    Either way the head moves, the block's bytes are the block's, and no leftover stays."""
    _, prepared = _next_block(tmp_path)
    name = str(prepared.entry.hash)
    root = tmp_path / "ds"
    (root / ".staging").mkdir(exist_ok=True)
    (root / ".staging" / f".{name}.tmp").write_bytes(b"half a block")
    chain.commit(LocalStorage.open(root), prepared)
    assert (root / "blocks" / name).read_bytes() == prepared.data
    assert not list((root / ".staging").iterdir())
    assert verify_path(root).ok and not verify_path(root).warnings

    _, again = _next_block(tmp_path / "second")
    root = tmp_path / "second" / "ds"
    (root / "blocks" / str(again.entry.hash)).write_bytes(again.data)
    chain.commit(LocalStorage.open(root), again)
    assert LocalStorage.open(root).read_head() == str(again.entry.hash)
    report = verify_path(root)
    assert report.ok and not report.warnings


def test_a_head_move_refused_after_its_blocks_were_written_withdraws_them(
    tmp_path: Path,
) -> None:
    """The blocks a local head move wrote under the lock are removed again, still under it,
    when the move is refused later (here: the slice the block names is not in ``data/``), so
    even a bare ``chain.commit`` (no transaction to clean up after it) leaves nothing."""
    from odf_chain.errors import ConflictError
    from odf_chain.format.events import DataSlice, OffsetInterval
    from odf_chain.format.multihash import Multihash

    state, _ = _next_block(tmp_path)
    root = tmp_path / "ds"
    blocks = sorted(os.listdir(root / "blocks"))
    fake = Multihash.digest("blake3", b"no such slice")
    start = 0 if state.last_offset is None else state.last_offset + 1
    event = AddData(
        prev_offset=state.last_offset,
        new_data=DataSlice(fake, fake, OffsetInterval(start, start), 10),
        new_watermark=state.watermark,
    )
    prepared = chain.prepare(state, event, system_time=state.system_time + timedelta(seconds=1))
    with pytest.raises(ConflictError, match=r"missing at the head move"):
        chain.commit(LocalStorage.open(root), prepared)
    assert sorted(os.listdir(root / "blocks")) == blocks
    assert LocalStorage.open(root).read_head() == str(state.head)
    report = verify_path(root)
    assert report.ok and not report.warnings


def test_a_head_move_that_fails_after_its_rename_keeps_its_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the head is renamed it may name the new blocks, acknowledged or not: a failure
    after that (the sync of ``refs/`` here) is reported as what it is (the head moved, its
    durability unsure: not a failed write, not to be made again), and nothing the head names
    is removed (the head move reads the head again before it withdraws anything)."""
    from odf_chain.errors import UnsyncedCommitError

    ds = _dataset(tmp_path / "ds", 2)
    refs = os.path.realpath(ds.storage.root / "refs")
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == refs:
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    prepared = chain.prepare(ds.state, _event(2), system_time=chain.now(ds.state.system_time))
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(UnsyncedCommitError, match="Input/output error") as raised:
        chain.commit(ds.storage, prepared)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert raised.value.head == str(prepared.entry.hash)
    assert f"the head moved to {prepared.entry.hash}" in str(raised.value)
    assert "Do not write it again" in str(raised.value)
    assert ds.storage.read_head() == str(prepared.entry.hash)
    assert (ds.storage.root / "blocks" / str(prepared.entry.hash)).read_bytes() == prepared.data
    assert verify_path(ds.storage.root).ok


def test_a_dataset_whose_seed_moved_the_head_keeps_its_key_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dataset.create(key_file=...) removes the key it made when the dataset is not made; when
    the Seed's head move happened and only its last sync failed, the dataset exists with that
    key's id, and the key stays."""
    from odf_chain.errors import UnsyncedCommitError

    key = tmp_path / "keys" / "new.key"
    key.parent.mkdir()
    with monkeypatch.context() as patched:
        _fail_fsync_of(patched, "/new/refs")
        with pytest.raises(UnsyncedCommitError):
            Dataset.create(tmp_path / "new", key_file=key)
    assert key.is_file()
    assert verify_path(tmp_path / "new").ok
    assert Dataset.open(tmp_path / "new").state.sequence_number == 0


def test_a_transaction_refused_at_its_second_block_withdraws_its_first(tmp_path: Path) -> None:
    """Three blocks, a torn file under the second's name: the move is refused naming it, the
    first block (written by this move) is removed again, the torn file stays, the head too."""
    from odf_chain.errors import IntegrityError

    ds = _dataset(tmp_path / "ds", 1)
    root = ds.storage.root
    before = sorted(os.listdir(root / "blocks"))
    tx = Transaction.begin(ds.storage, ds.state)
    prepared = [tx.add(_event(i)) for i in range(1, 4)]
    second = str(prepared[1].entry.hash)
    (root / "blocks" / second).write_bytes(prepared[1].data[:10])
    with pytest.raises(IntegrityError, match=f"{second}.*is not that block"):
        chain.commit(ds.storage, *prepared)
    assert sorted(os.listdir(root / "blocks")) == sorted([*before, second])
    assert ds.storage.read_head() == str(ds.state.head)


def test_the_head_staging_file_is_reused_unless_unsafe_and_a_folder_there_is_refused(
    tmp_path: Path,
) -> None:
    """The head is staged as ``refs/.head.next`` under the head lock. A regular file of one
    link there (the previous head, or a half-written one a writer that died left) is overwritten
    in place; a symlink is removed without being followed; a file another name also links (a
    hard-link backup) is left as it is and a new one made; a folder is refused, named, with
    nothing committed or left."""
    from odf_chain.errors import StorageError

    ds = _dataset(tmp_path / "ds", 2)
    staged = ds.storage.root / "refs" / ".head.next"
    staged.unlink(missing_ok=True)
    outside = tmp_path / "outside"
    outside.write_text("keep me")
    staged.symlink_to(outside)
    ds.append(_event(2))
    assert outside.read_text() == "keep me"
    staged.unlink(missing_ok=True)
    staged.write_text("half a head, and more bytes than a head has: " + "x" * 100)
    entry = ds.append(_event(3))
    assert ds.storage.read_head() == str(entry.hash)

    staged.unlink(missing_ok=True)
    staged.write_text("a backup's")
    backup = tmp_path / "backup-of-next"
    os.link(staged, backup)
    entry = ds.append(_event(4))
    assert ds.storage.read_head() == str(entry.hash)
    assert backup.read_text() == "a backup's"

    staged.unlink(missing_ok=True)
    staged.mkdir()
    blocks = sorted(os.listdir(ds.storage.root / "blocks"))
    with pytest.raises(StorageError, match=r"refs/\.head\.next is in the way"):
        ds.append(_event(5))
    assert ds.storage.read_head() == str(entry.hash)
    assert sorted(os.listdir(ds.storage.root / "blocks")) == blocks  # the new block withdrawn
    staged.rmdir()
    assert verify_path(ds.storage.root).ok


def _can_exchange(folder: Path) -> bool:
    from odf_chain.storage.local_files import exchange_at

    (folder / "a").write_text("a")
    (folder / "b").write_text("b")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return exchange_at(fd, "a", "b")
    finally:
        os.close(fd)
        (folder / "a").unlink()
        (folder / "b").unlink()


def test_a_head_move_frees_no_file_where_names_can_be_exchanged(tmp_path: Path) -> None:
    """Where the filesystem can exchange two names at once (Linux ``RENAME_EXCHANGE``) the
    new head takes the name ``refs/head`` and the old head's file becomes the next move's
    staging file, overwritten then: after two moves ``refs/head`` is the same file again. A
    filesystem without a journal skips every file freed in the last minute when it makes one,
    so a head move that freed one made every later write slower."""
    if not _can_exchange(tmp_path):
        pytest.skip("this filesystem cannot exchange names")
    ds = _dataset(tmp_path / "ds", 2)
    refs = ds.storage.root / "refs"
    first = os.stat(refs / "head").st_ino
    previous = (refs / "head").read_text()
    entry = ds.append(_event(2))
    assert os.stat(refs / ".head.spare").st_ino == first
    assert (refs / ".head.spare").read_text() == previous
    assert not (refs / ".head.next").exists()
    assert os.stat(refs / "head").st_ino != first
    entry = ds.append(_event(3))
    assert os.stat(refs / "head").st_ino == first
    assert (refs / "head").read_text() == str(entry.hash)
    report = verify_path(ds.storage.root)
    assert report.ok and not report.warnings


def test_a_head_staging_file_that_is_the_head_is_refused(tmp_path: Path) -> None:
    """``refs/.head.next`` naming the head's own file (what a crash on a filesystem without a
    journal can leave) is never written through: the move is refused, naming it."""
    from odf_chain.errors import StorageError

    ds = _dataset(tmp_path / "ds", 2)
    refs = ds.storage.root / "refs"
    (refs / ".head.next").unlink(missing_ok=True)
    os.link(refs / "head", refs / ".head.next")
    head = (refs / "head").read_text()
    with pytest.raises(StorageError, match=r"refs/\.head\.next is the same file"):
        ds.append(_event(2))
    assert (refs / "head").read_text() == head
    assert ds.storage.read_head() == head


@pytest.mark.parametrize("how", ["sync 4 failed", "killed before sync 4", "log line lost"])
def test_only_a_move_after_an_unfinished_one_syncs_refs_before_rewriting_the_old_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, syscalls, how: str
) -> None:
    """The exchange leaves the old head's file as ``refs/.head.next``; once ``refs/`` is synced
    the move names it ``refs/.head.spare``, which the next move rewrites in place. A move that
    did not get that far (its sync 4 failed, or its writer was killed before it) leaves
    ``.head.next``, a file the disk may still hold as ``refs/head``: the next move syncs
    ``refs/`` before writing a head into it. A lost head log line proves nothing either way and
    costs nothing."""
    from odf_chain.errors import UnsyncedCommitError

    ds = _dataset(tmp_path / "ds", 3)
    refs = ds.storage.root / "refs"
    if not (refs / ".head.spare").exists():
        pytest.skip("this filesystem cannot exchange names")
    if how == "sync 4 failed":
        with monkeypatch.context() as patched:
            _fail_fsync_of(patched, "/refs")
            with pytest.raises(UnsyncedCommitError):
                ds.append(_event(3))
        assert (refs / ".head.next").exists() and not (refs / ".head.spare").exists()
    elif how == "killed before sync 4":  # what its exchange leaves: the old head's file
        (refs / ".head.spare").rename(refs / ".head.next")
    else:
        log = ds.storage.root / "logs" / "head"
        log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:-1]))
    syscalls(ds.storage.root)
    Dataset.open(ds.storage.root).append(_event(4))
    syncs = _syncs(syscalls(ds.storage.root))
    if how == "log line lost":
        assert syncs.count(("fsync", "refs/")) == 1
    else:
        assert syncs.count(("fsync", "refs/")) == 2
        assert syncs.index(("fsync", "refs/")) < syncs.index(("fdatasync", "refs/head next"))
    assert (refs / ".head.spare").exists() and not (refs / ".head.next").exists()
    Dataset.open(ds.storage.root).append(_event(5))  # settled now: refs/ once, after the move
    assert _syncs(syscalls(ds.storage.root)).count(("fsync", "refs/")) == 1
    assert verify_path(ds.storage.root).ok


def test_a_head_read_whose_open_meets_a_move_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader checks ``refs/head``, a writer moves the head, the reader opens the new file:
    not the file it checked, so it reads again and answers with the new head; a reader is never
    refused because a writer appended meanwhile."""
    from odf_chain.storage import local_files

    ds = _dataset(tmp_path / "ds", 2)
    reader = LocalStorage(ds.storage.root)
    real_lstat = local_files.lstat_at
    moved: list[str] = []

    def move_after_the_check(name: str, dir_fd: int):
        found = real_lstat(name, dir_fd)
        if name == "head" and not moved:
            moved.append("")  # before the append: it checks the head too
            moved[0] = str(ds.append(_event(2)).hash)
        return found

    monkeypatch.setattr(local_files, "lstat_at", move_after_the_check)
    assert reader.read_head() == moved[0]


def test_a_head_read_that_straddles_two_moves_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader opens ``refs/head``; before it reads, a move swaps that file out and a second
    move, which then fails, writes a head into it that the chain never moved to. The reader
    must not answer with that head: it finds the file no longer named ``refs/head`` and reads
    again."""
    from odf_chain.errors import StorageError
    from odf_chain.storage import local_files

    ds = _dataset(tmp_path / "ds", 2)
    if not _can_exchange(tmp_path):
        pytest.skip("this filesystem cannot exchange names")
    reader = LocalStorage(ds.storage.root)
    real_read, real_sync = local_files.read_at_most, os.fdatasync
    moved: list[str] = []
    started: list[bool] = []

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".head.next"):
            raise OSError(5, "Input/output error")
        real_sync(fd)

    def read_between_moves(fd: int, *args):
        if not started:  # the reader's read (the moves read files too)
            started.append(True)
            moved.append(str(ds.append(_event(2)).hash))  # swaps the reader's file out
            monkeypatch.setattr(os, "fdatasync", failing)
            with pytest.raises(StorageError, match="Input/output error"):
                ds.append(_event(3))  # writes its head into the reader's file, then fails
            monkeypatch.setattr(os, "fdatasync", real_sync)
        return real_read(fd, *args)

    monkeypatch.setattr(local_files, "read_at_most", read_between_moves)
    assert reader.read_head() == moved[0]
    monkeypatch.setattr(local_files, "read_at_most", real_read)
    assert verify_path(ds.storage.root).ok


def test_a_head_move_whose_sync_fails_leaves_no_staging_file_and_no_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync before the rename fails: the move is reported, the head stays, the head's staging
    file and the block the move wrote are both removed."""
    from odf_chain.errors import StorageError

    ds = _dataset(tmp_path / "ds", 2)
    root = ds.storage.root
    blocks = sorted(os.listdir(root / "blocks"))
    head = ds.storage.read_head()
    real = os.fdatasync

    def failing(fd: int) -> None:
        if ".head." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(StorageError, match="Input/output error"):
        ds.append(_event(2))
    monkeypatch.setattr(os, "fdatasync", real)
    assert ds.storage.read_head() == head
    assert sorted(os.listdir(root / "blocks")) == blocks
    assert not [p.name for p in (root / ".staging").iterdir()]
    assert not (root / "refs" / ".head.next").exists()
    assert verify_path(root).ok


def test_the_head_move_places_blocks_without_hard_links_and_names_a_failed_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the filesystem has no hard links the head move renames each block into place
    (it holds the lock: no other writer can race it there); a block it cannot write is named
    as ``blocks/<hash>``, not by its staging name, with nothing committed."""
    import errno

    from odf_chain.errors import StorageError

    ds = _dataset(tmp_path / "ds", 1)
    root = ds.storage.root
    real_link = os.link

    def no_links(src, dst, *args, **kwargs):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(src), None, str(dst))

    monkeypatch.setattr(os, "link", no_links)
    entry = ds.append(_event(1))
    assert (root / "blocks" / str(entry.hash)).is_file()
    assert not [p.name for p in (root / ".staging").iterdir()]
    report = verify_path(root)
    assert report.ok and not report.warnings

    def full(src, dst, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), None, str(dst))

    monkeypatch.setattr(os, "link", full)
    prepared = chain.prepare(ds.state, _event(2), system_time=chain.now(ds.state.system_time))
    with pytest.raises(StorageError, match=rf"blocks/{prepared.entry.hash}: No space left"):
        chain.commit(ds.storage, prepared)
    monkeypatch.setattr(os, "link", real_link)
    assert ds.storage.read_head() == str(entry.hash)
    assert not (root / "blocks" / str(prepared.entry.hash)).exists()
    assert not [p.name for p in (root / ".staging").iterdir()]


def test_a_new_dataset_syncs_the_folders_its_own_names_are_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder's name is durable once the folder holding it is synced: creating a dataset at
    a new path syncs the folder above each folder it made (and the dataset's own, for its
    layout folders)."""
    synced: list[int] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    Dataset.create(tmp_path / "new" / "deeper" / "ds")
    monkeypatch.setattr(os, "fsync", real_fsync)
    deeper = tmp_path / "new" / "deeper"
    for folder in (tmp_path, tmp_path / "new", deeper, deeper / "ds"):
        assert folder.stat().st_ino in synced, folder
