"""A writer's deferred index updates (odf_chain/index/update.py, IndexBatch): a ``Dataset``
handle records its first commit at once and then every INDEX_BATCH-th; what waits is written by
``flush`` (the handle's end, the process's exit) under the head lock, and never over another
writer's later head. Whatever the index lags, readers answer what the full fold answers, verify
finds nothing, and a crash that loses the deferred update loses nothing but the update."""

from __future__ import annotations

import fcntl
import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain import replay
from odf_chain.dataset import Dataset
from odf_chain.events import SetInfo
from odf_chain.index import read as index_read, update
from odf_chain.index.update import INDEX_BATCH
from odf_chain.storage import open_storage
from odf_chain.transaction import Transaction
from odf_chain.verify import verify_path
from tests.test_index import append_plain, assert_truth, head_snapshot, index_names_head


def lag(root: Path) -> int:
    """Blocks between the head and the block the index's head snapshot names."""
    head = index_read.open_index(open_storage(root)).head.sequence_number
    return head - head_snapshot(root).sequence_number


def assert_no_index_finding(root: Path) -> None:
    report = verify_path(root)
    assert report.ok, report.errors
    assert not [p for p in report.warnings if p.rule.startswith("index")], report.warnings


def test_a_handle_records_its_first_commit_and_every_batch(tmp_path: Path) -> None:
    """Append by append the index's head snapshot lags the head by 0, 1, .. INDEX_BATCH - 1
    blocks, then names it again; at every step a new reader's answers equal the full fold's
    (caught up from the snapshot, ``checked`` only where it names the head) and verify finds
    nothing in the index."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    lags, hows = [], []
    for _ in range(2 * INDEX_BATCH + 1):
        append_plain(ds, 1)
        lags.append(lag(root))
        hows.append(index_read.open_index(open_storage(root)).how)
        assert_truth(root, refs=[0, ds.state.sequence_number])
    assert lags == [n % INDEX_BATCH for n in range(2 * INDEX_BATCH + 1)]
    assert hows == ["checked" if n == 0 else "caught up" for n in lags]
    assert lags[-1] == 0 and lag(root) == 0
    append_plain(ds, INDEX_BATCH - 1)
    assert lag(root) == INDEX_BATCH - 1
    assert_no_index_finding(root)


def test_flush_writes_what_was_deferred_under_the_head_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``flush`` records the deferred commits at once, with the head lock held; so does leaving
    a ``with`` block, and the handle's collection."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    append_plain(ds, 3)
    assert lag(root) == 2
    lock = root / "refs" / ".head.lock"
    held, real = [], update.record_commit

    def record(storage, *args, **kwargs):
        if os.path.realpath(storage.root) != os.path.realpath(root):
            return real(storage, *args, **kwargs)  # another test's handle, collected now
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(False)
        except BlockingIOError:
            held.append(True)
        finally:
            os.close(fd)
        return real(storage, *args, **kwargs)

    monkeypatch.setattr(update, "record_commit", record)
    ds.flush()
    assert held == [True] and lag(root) == 0 and index_names_head(root)
    ds.flush()  # nothing deferred: nothing written
    assert held == [True]
    with Dataset.open(root) as again:
        append_plain(again, 2)
        assert lag(root) == 1
    assert lag(root) == 0
    handle = Dataset.open(root)
    append_plain(handle, 3)
    assert lag(root) == 2
    del handle
    gc.collect()
    assert lag(root) == 0
    assert held == [True] * 5  # the flush; each handle's first commit, and its end
    assert_truth(root)
    assert_no_index_finding(root)


def test_another_writer_between_is_never_overwritten(tmp_path: Path) -> None:
    """Handle A defers a commit; handle B appends on top (its first commit: recorded at once,
    the index repaired up to B's head). A's flush then writes nothing (the head is no longer
    its last block), and A's next commit, not on top of its deferred one, is recorded at once."""
    root = tmp_path / "ds"
    a = Dataset.create(root)
    append_plain(a, 2)
    assert lag(root) == 1
    b = Dataset.open(root)
    append_plain(b, 1)
    assert lag(root) == 0
    b_head = head_snapshot(root).block_hash
    assert not a._index_batch.flush(a.storage)
    assert head_snapshot(root).block_hash == b_head and a._index_batch.pending == 0
    append_plain(a, 1)
    assert lag(root) == 0 and index_names_head(root)
    append_plain(b, 1)  # B's last block is not its base any more: recorded at once
    assert lag(root) == 0
    assert_truth(root)
    assert_no_index_finding(root)


def test_deferred_blocks_another_writer_came_after_are_left_to_the_repair(
    tmp_path: Path,
) -> None:
    """A defers a block, B commits on top (repairing the index up to B's head), and A commits
    again without a flush: A's deferred block is dropped from its batch (B's repair covered
    it) and A's commit, not on top of its batch, is recorded at once."""
    root = tmp_path / "ds"
    a = Dataset.create(root)
    append_plain(a, 2)
    assert a._index_batch.pending == 1
    append_plain(Dataset.open(root), 1)
    append_plain(a, 1)
    assert a._index_batch.pending == 0 and lag(root) == 0
    assert_truth(root)
    assert_no_index_finding(root)


def test_a_flush_never_writes_behind_a_head_that_moved_on(tmp_path: Path) -> None:
    """Another writer moved the head without touching the index (a tool that does not keep
    it): A's flush finds the head is not its last block and writes nothing, though the index
    would take its blocks; readers catch up from the head snapshot A's first commit wrote."""
    root = tmp_path / "ds"
    a = Dataset.create(root)
    append_plain(a, 3)
    written = head_snapshot(root)
    other = Dataset.open(root)
    tx = Transaction.begin(other.storage, other.state, hooks=())
    tx.add(SetInfo(description="no index kept"))
    tx.commit()
    assert not a._index_batch.flush(a.storage)
    assert head_snapshot(root) == written
    assert a._index_batch.pending == 0
    assert_truth(root)
    assert_no_index_finding(root)


def test_a_schema_or_lineage_commit_is_recorded_at_once(tmp_path: Path) -> None:
    """The schema history and lineage come from the index's lists, which must end at the
    head's: a commit that adds to them is written at once, deferred blocks with it."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    append_plain(ds, 2)
    assert lag(root) == 1
    ds.set_schema(pa.schema([("x", pa.int64())]))
    assert lag(root) == 0 and ds._index_batch.pending == 0
    history = replay.schema_history(open_storage(root))
    assert [c.entry.hash for c in history] == [ds.state.head]


_WRITER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from odf_chain.dataset import Dataset
    from tests.test_index import append_plain
    ds = Dataset.open(sys.argv[2])
    append_plain(ds, 3)
    sys.stdout.flush()
    if sys.argv[3] == "crash":
        os._exit(0)  # no atexit, no finalizer: the deferred update is lost
    """
)


@pytest.mark.parametrize("end", ["exit", "crash"])
def test_a_process_end_flushes_and_a_crash_loses_only_the_update(tmp_path: Path, end: str) -> None:
    """A writer process that ends normally leaves the index naming the head; one that dies
    leaves it two blocks behind, which readers catch up with (their answers are the fold's),
    verify does not report, and the next writer's first commit repairs."""
    root = tmp_path / "ds"
    append_plain(Dataset.create(root), 1)
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, str(repo), str(root), end],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert lag(root) == (0 if end == "exit" else 2)
    assert_truth(root)
    assert_no_index_finding(root)
    append_plain(Dataset.open(root), 1)
    assert lag(root) == 0 and index_names_head(root)
