"""The derived index (issue 10): reads that do not fold the chain, and an index that is never
believed before it is checked.

Every expected state below comes from the full fold (``replay.load_chain`` + ``chain.advance``),
never from the index; every damaged index must still give the full fold's answers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from odf_chain import chain, replay
from odf_chain.dataset import Dataset
from odf_chain.errors import NotFoundError
from odf_chain.events import AddData, SetInfo, SetLicense, SetVocab, SourceState
from odf_chain.index import read as index_read
from odf_chain.index.records import (
    LINEAGE_LIST,
    SNAPSHOT_INTERVAL,
    Pointer,
    Pointers,
    Snapshot,
    encode_list,
)
from odf_chain.lineage import LineageRecorder
from odf_chain.state import EMPTY, DatasetState, lineage_of
from odf_chain.storage import LocalStorage, open_storage
from odf_chain.transaction import Transaction
from tests.cli_run import run_main

INDEX = Path("info") / "odf-chain-index"


# -- helpers --------------------------------------------------------------------------------------


def same_state(got: DatasetState, want: DatasetState, where: object) -> None:
    """Field by field; schemas with their metadata (it decides the field-path convention)."""
    for name in DatasetState.__dataclass_fields__:
        a, b = getattr(got, name), getattr(want, name)
        if isinstance(b, pa.Schema):
            assert isinstance(a, pa.Schema) and a.equals(b, check_metadata=True), (where, name)
        else:
            assert a == b, (where, name, a, b)


def fold_states(root: Path) -> tuple[list, list[DatasetState]]:
    """Every block and the state after each, by the full fold (the reference)."""
    entries = replay.load_chain(open_storage(root))
    states, state = [], EMPTY
    for entry in entries:
        state = chain.advance(state, entry.block, entry.hash)
        states.append(state)
    return entries, states


def append_plain(ds: Dataset, count: int, *, watermark_from: datetime | None = None) -> None:
    for i in range(count):
        state = ds.state
        ds.append(
            AddData(
                prev_offset=state.last_offset,
                new_watermark=state.watermark  # once set, a watermark is carried
                if watermark_from is None
                else watermark_from + timedelta(i),
                new_source_state=SourceState("poll", "odf/etag", f"etag-{state.sequence_number}"),
            )
        )


def fast_chain(root: Path, count: int) -> None:
    """A chain of ``count`` blocks written quickly (block files without fsync; no index): the
    blocks are real and every rule ran on them (``chain.prepare``)."""
    from odf_chain.events import Seed
    from odf_chain.format.did import DatasetId

    LocalStorage.create(root)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    state = EMPTY
    for i in range(count):
        event = (
            Seed(dataset_id=DatasetId.generate())
            if i == 0
            else AddData(new_source_state=SourceState("poll", "odf/etag", f"e{i}"))
        )
        prepared = chain.prepare(state, event, system_time=base + timedelta(seconds=i))
        (root / "blocks" / str(prepared.entry.hash)).write_bytes(prepared.data)
        state = prepared.after
    (root / "refs" / "head").write_text(str(state.head))


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A chain of ~600 blocks written through Dataset (so the writers maintain the index):
    info, license, vocab, three schemas, transactions, lineage from another dataset, watermarks,
    and periodic snapshots at 0, 256 and 512."""
    base = tmp_path_factory.mktemp("index")
    users = Dataset.create(base / "users")
    users.write(pa.table({"id": [1, 2], "first": ["Ada", "Alan"]}))
    ds = Dataset.create(base / "rich")
    ds.append(SetInfo(description="rich chain"))
    ds.append(SetLicense(short_name="CC0"))
    ds.append(SetVocab(offset_column="off"))
    ds.write(pa.table({"id": pa.array([1, 2], pa.int64())}), transaction=("job", 1))
    append_plain(ds, 250)
    state = users.state
    rec = LineageRecorder("copy", run_id="r1")
    src = rec.dataset_input("users", state.dataset_id, state.head, uri=str(users.path))
    rec.write("write", {"id": src["[version=2.0].[type=long].id"]})
    ds.write(pa.table({"id": pa.array([3], pa.int64())}), lineage=rec)
    ds.write(pa.table({"id": [4], "name": ["d"]}), evolve=True, transaction=("job", 2))
    append_plain(ds, 290)
    ds.write(pa.table({"id": [5], "name": ["e"], "x": [1.5]}), evolve=True)
    append_plain(ds, 20, watermark_from=datetime(2100, 1, 1, tzinfo=UTC))
    return base / "rich"


@pytest.fixture
def rich_copy(rich: Path, tmp_path: Path) -> Path:
    """A private copy of the rich chain with its index (the users dataset stays shared)."""
    root = tmp_path / "rich"
    shutil.copytree(rich, root, symlinks=True)
    return root


def head_snapshot(root: Path) -> Snapshot:
    return Snapshot.decode((root / INDEX / "head").read_bytes(), "head")


def write_snapshot(path: Path, snapshot: Snapshot) -> None:
    path.write_bytes(snapshot.encode())


def assert_truth(root: Path, refs=None) -> None:
    """The reader's answers (head, several refs of each kind) equal the full fold's."""
    entries, states = fold_states(root)
    storage = open_storage(root)
    same_state(Dataset.open(root).state, states[-1], "open")
    n = len(entries)
    for k in refs or sorted({0, 1, 255, 256, 257, 300, n // 2, 511, 512, 513, n - 2, n - 1}):
        if k >= n:
            continue
        same_state(replay.state_at(storage, k), states[k], k)
    middle = entries[n // 2]
    same_state(replay.state_at(storage, middle.hash), states[n // 2], "hash")
    same_state(replay.state_at(storage, str(middle.hash)), states[n // 2], "hash text")
    when = middle.block.system_time
    expected = max(i for i, e in enumerate(entries) if e.block.system_time <= when)
    same_state(replay.state_at(storage, when), states[expected], "time")
    history = replay.schema_history(storage)
    schema_blocks = [e for e in entries if type(e.block.event).__name__ == "SetDataSchema"]
    assert [c.entry.hash for c in history] == [e.hash for e in schema_blocks]


def index_names_head(root: Path) -> bool:
    head = (root / "refs" / "head").read_text().strip()
    try:
        return str(head_snapshot(root).block_hash) == head
    except Exception:
        return False


# -- the index agrees with the fold ---------------------------------------------------------------


@pytest.mark.slow
def test_every_state_from_the_index_equals_the_full_fold(rich: Path) -> None:
    entries, states = fold_states(rich)
    assert len(entries) > 2 * SNAPSHOT_INTERVAL
    assert {type(e.block.event).__name__ for e in entries} >= {
        "SetInfo",
        "SetLicense",
        "SetVocab",
        "SetDataSchema",
        "AddData",
    }
    assert any(lineage_of(e.block.event) is not None for e in entries)
    assert states[-1].transactions == {"job": 2} and states[-1].watermark is not None
    storage = open_storage(rich)
    index = index_read.open_index(storage)
    assert index.how == "checked"  # the writers kept it up to date
    for k, want in enumerate(states):
        same_state(index.state_at_seq(k), want, k)
    for k in (0, 3, 255, 256, 257, len(entries) - 1):
        same_state(replay.state_at(storage, entries[k].hash), states[k], k)
        moment = entries[k].block.system_time
        last = max(i for i, e in enumerate(entries) if e.block.system_time <= moment)
        same_state(replay.state_at(storage, moment), states[last], k)
    with pytest.raises(NotFoundError, match="no block with sequence number"):
        replay.state_at(storage, len(entries))
    with pytest.raises(NotFoundError, match="no block was written at or before"):
        replay.state_at(storage, entries[0].block.system_time - timedelta(seconds=1))


def test_schema_history_and_lineage_read_only_their_blocks(rich: Path) -> None:
    entries, states = fold_states(rich)
    storage = open_storage(rich)
    history = replay.schema_history(storage)
    previous = None
    for change, entry in zip(
        history,
        [e for e in entries if type(e.block.event).__name__ == "SetDataSchema"],
        strict=True,
    ):
        assert change.entry.hash == entry.hash
        assert change.schema.equals(entry.block.event.arrow_schema, check_metadata=True)
        assert (change.diff is None) == (previous is None)
        previous = change.schema
    lineage = replay.lineage_at(storage)
    (event_block,) = [e for e in entries if lineage_of(e.block.event) is not None]
    assert lineage.unreachable == []
    assert lineage.schema.equals(states[-1].schema, check_metadata=True)
    upstream = lineage.graph.upstream(lineage.field("id"))
    assert any("users" not in str(f) for f in upstream)  # reached the users dataset's field
    assert event_block.block.sequence_number < len(entries)


# -- damage is detected and the truth still answered ----------------------------------------------


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at % len(data)] ^= 0x01
    path.write_bytes(bytes(data))


DAMAGE = ["head", "seq-00000000", "snap-000000000256", "snap-000000000512", "schemas", "lineage"]


@pytest.mark.parametrize("name", DAMAGE)
@pytest.mark.parametrize("how", ["delete", "truncate", "flip-start", "flip-middle", "flip-end"])
def test_damaged_index_file_is_detected_and_rebuilt(rich_copy: Path, name: str, how: str) -> None:
    path = rich_copy / INDEX / name
    size = path.stat().st_size
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        os.truncate(path, size - 7)
    else:
        _flip(path, {"flip-start": 3, "flip-middle": size // 2, "flip-end": size - 1}[how])
    damaged = index_files(rich_copy)
    assert_truth(rich_copy)
    assert index_files(rich_copy) == damaged  # readers never write: the truth, from the chain
    assert index_read.check_index(str(rich_copy)).saved  # odf-chain index repairs it
    assert index_names_head(rich_copy)
    assert index_read.open_index(open_storage(rich_copy)).how == "checked"  # repaired


def index_files(root: Path) -> dict[str, bytes]:
    folder = root / INDEX
    return (
        {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} if folder.exists() else {}
    )


def test_deleted_index_is_rebuilt_and_saved_when_asked(rich_copy: Path) -> None:
    shutil.rmtree(rich_copy / INDEX)
    assert index_read.open_index(open_storage(rich_copy)).how == "rebuilt"
    assert index_files(rich_copy) == {}  # a reader rebuilt it in memory only
    assert index_read.open_index(open_storage(rich_copy), save=True).how == "rebuilt"
    assert index_names_head(rich_copy)
    assert_truth(rich_copy)


def test_a_write_repairs_a_deleted_index(rich_copy: Path) -> None:
    """Readers never write; the writer's post-commit hook rebuilds what it cannot extend."""
    shutil.rmtree(rich_copy / INDEX)
    append_plain(Dataset.open(rich_copy), 1)
    assert index_names_head(rich_copy)
    assert index_read.open_index(open_storage(rich_copy)).how == "checked"
    assert_truth(rich_copy)


def _forge(snapshot: Snapshot, **changes) -> Snapshot:
    from dataclasses import replace

    return replace(snapshot, **changes)


def test_forged_head_snapshots_naming_the_genuine_head_are_not_believed(rich_copy: Path) -> None:
    from dataclasses import replace

    entries, states = fold_states(rich_copy)
    genuine = head_snapshot(rich_copy)
    older_schema = next(e for e in entries if type(e.block.event).__name__ == "SetDataSchema")
    info_block = next(e for e in entries if type(e.block.event).__name__ == "SetInfo")
    from odf_chain.index.records import Pointer

    forgeries = [
        _forge(genuine, num_records=genuine.num_records + 1),
        _forge(genuine, num_slices=0),
        _forge(
            genuine,
            pointers=replace(
                genuine.pointers,
                schema=Pointer(older_schema.block.sequence_number, older_schema.hash),
            ),
        ),
        _forge(
            genuine,
            pointers=replace(
                genuine.pointers, seed=Pointer(info_block.block.sequence_number, info_block.hash)
            ),
        ),
        _forge(genuine, sequence_number=genuine.sequence_number - 1),
        _forge(genuine, time_us=genuine.time_us + 1),
        _forge(genuine, last_lineage_sequence_number=genuine.sequence_number - 3),
    ]
    for forged in forgeries:
        write_snapshot(rich_copy / INDEX / "head", forged)
        storage = open_storage(rich_copy)
        index = index_read.open_index(storage)
        assert index.how == "rebuilt", forged
        same_state(index.head, states[-1], forged)
        assert head_snapshot(rich_copy) == forged  # a reader writes nothing ...
        assert index_read.check_index(str(rich_copy)).saved
        assert head_snapshot(rich_copy) == genuine  # ... odf-chain index saves the truth


def test_forged_periodic_snapshot_is_not_believed(rich_copy: Path) -> None:
    _, states = fold_states(rich_copy)
    path = rich_copy / INDEX / "snap-000000000256"
    genuine = Snapshot.decode(path.read_bytes(), "snap")
    write_snapshot(path, _forge(genuine, num_records=genuine.num_records + 5))
    storage = open_storage(rich_copy)
    same_state(replay.state_at(storage, 300), states[300], 300)
    assert Snapshot.decode(path.read_bytes(), "snap") != genuine  # a reader writes nothing
    index_read.check_index(str(rich_copy), from_scratch=True)  # odf-chain index --rebuild
    assert Snapshot.decode(path.read_bytes(), "snap") == genuine


def test_every_snapshot_a_read_starts_from_is_checked_against_the_lists(rich_copy: Path) -> None:
    """A snapshot naming an older (genuine) schema block is refused wherever a read starts
    from it: a periodic one (state_at) and one a catch-up walks back to, as the head's is."""
    from dataclasses import replace

    entries, states = fold_states(rich_copy)
    schemas = [e for e in entries if type(e.block.event).__name__ == "SetDataSchema"]

    def older_schema(snapshot: Snapshot) -> Snapshot:
        in_force = snapshot.pointers.schema.sequence_number
        (older, *_) = [e for e in schemas if e.block.sequence_number < in_force]
        schema = Pointer(older.block.sequence_number, older.hash)
        return _forge(snapshot, pointers=replace(snapshot.pointers, schema=schema))

    path = rich_copy / INDEX / "snap-000000000512"  # the second schema in force, the first older
    genuine = Snapshot.decode(path.read_bytes(), "snap")
    write_snapshot(path, older_schema(genuine))
    same_state(replay.state_at(open_storage(rich_copy), 520), states[520], 520)
    write_snapshot(path, genuine)

    # the head snapshot one block behind the head, as a writer's deferred update leaves it
    assert type(entries[-1].block.event).__name__ != "SetDataSchema"  # the schema stays
    pointers = Pointers()
    for entry in entries[:-1]:
        pointers = pointers.after(entry.block, entry.hash)
    behind = Snapshot.of_state(states[-2], pointers)
    write_snapshot(rich_copy / INDEX / "head", behind)
    assert index_read.open_index(open_storage(rich_copy)).how == "caught up"  # genuine: kept
    write_snapshot(rich_copy / INDEX / "head", older_schema(behind))
    index = index_read.open_index(open_storage(rich_copy))
    assert index.how == "rebuilt"
    same_state(index.head, states[-1], "head")
    same_state(Dataset.open(rich_copy).state, states[-1], "Dataset.open")


def test_a_lists_tail_is_checked_from_its_last_records(long_chain: Path, tmp_path: Path) -> None:
    """Every open checks the lists' tails: from the list's last records (one read of 64 of
    them), not the list, which has a record per write where writes carry lineage. Only when
    records past the block asked for fill that tail is the list read (once, then kept)."""
    root = tmp_path / "ds"
    shutil.copytree(long_chain, root)
    entries = replay.load_chain(open_storage(root))
    listed = [Pointer(i, entries[i].hash) for i in range(len(entries))]
    (root / "info" / LINEAGE_LIST).write_bytes(encode_list(listed))
    storage = CountingStorage(open_storage(root))
    index = index_read.ChainIndex(storage, EMPTY, Pointers())
    assert index._last_listed(LINEAGE_LIST, len(entries) - 1) == listed[-1]
    assert index._last_listed(LINEAGE_LIST, len(entries) - 30) == listed[-30]
    assert storage.derived_bytes <= 2 * 64 * 46, storage.derived_bytes  # 230,000 bytes whole
    assert index._last_listed(LINEAGE_LIST, 100) == listed[100]  # past the tail: read whole
    assert index._last_listed(LINEAGE_LIST, 99) == listed[99]  # ... once
    assert storage.derived_bytes == 3 * 64 * 46 + 46 * len(listed), storage.derived_bytes


def test_snapshots_of_another_dataset_are_not_believed(rich_copy: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    fast_chain(other, 600)
    assert index_read.check_index(str(other)).saved  # builds the other's index
    for name in ("head", "snap-000000000256", "seq-00000000"):
        shutil.copy(other / INDEX / name, rich_copy / INDEX / name)
    assert_truth(rich_copy)


def test_entries_past_a_rolled_back_head_are_dropped(rich_copy: Path) -> None:
    entries, states = fold_states(rich_copy)
    rolled = entries[300]
    (rich_copy / "refs" / "head").write_text(str(rolled.hash))  # an operator restores an old head
    # ... of a dataset from before the head log (where the log shows the rollback, writers
    # refuse to append: tests/test_trust.py)
    (rich_copy / "logs" / "head").unlink()
    storage = open_storage(rich_copy)
    index = index_read.open_index(storage, save=True)  # the repair a writer's hook makes
    assert index.how == "caught up"  # walked back to snap-256, folded 257..300
    same_state(index.head, states[300], "rolled back")
    with pytest.raises(NotFoundError, match=r"0\.\.300"):
        replay.state_at(storage, 400)
    names = sorted(p.name for p in (rich_copy / INDEX).iterdir())
    assert "snap-000000000512" not in names
    assert (rich_copy / INDEX / "seq-00000000").stat().st_size == 301 * 54
    # appends go on from the restored head; the index follows them
    ds = Dataset.open(rich_copy)
    append_plain(ds, 3)
    ds.flush()  # what the handle deferred (its last two commits'), written now
    entries, states = fold_states(rich_copy)
    assert index_read.open_index(open_storage(rich_copy)).how == "checked"
    assert_truth(rich_copy, refs=[0, 256, 300, 301, 303])


def test_writer_after_a_rollback_drops_what_the_old_branch_left(rich_copy: Path) -> None:
    """A writer whose state is the restored head (no reader repaired the index in between)
    drops the index's entries at and past its append: none of them may lie. Its post-commit
    hook then catches the index up to its own block (not the old branch's)."""
    entries, states = fold_states(rich_copy)
    (rich_copy / "refs" / "head").write_text(str(entries[300].hash))
    (
        rich_copy / "logs" / "head"
    ).unlink()  # from before the head log (else: refused, test_trust.py)
    tx = Transaction.begin(open_storage(rich_copy), states[300])
    tx.add(SetInfo(description="after the rollback"))
    tx.commit()  # its post-commit hook updates the index
    assert "snap-000000000512" not in {p.name for p in (rich_copy / INDEX).iterdir()}
    assert (rich_copy / INDEX / "seq-00000000").stat().st_size == 302 * 54
    assert head_snapshot(rich_copy).sequence_number == 301  # the new head's, not the old branch's
    assert_truth(rich_copy, refs=[0, 255, 256, 300, 301])


def test_crash_between_head_move_and_index_update_is_repaired(
    rich_copy: Path, tmp_path: Path
) -> None:
    saved = tmp_path / "saved-index"
    shutil.copytree(rich_copy / INDEX, saved)
    ds = Dataset.open(rich_copy)
    append_plain(ds, 5)  # the head moves five times; then "the index update never happened"
    shutil.rmtree(rich_copy / INDEX)
    shutil.copytree(saved, rich_copy / INDEX)
    index = index_read.open_index(open_storage(rich_copy), save=True)  # the next writer's hook
    assert index.how == "caught up"
    assert index_names_head(rich_copy)
    assert_truth(rich_copy)


def test_symlinked_index_file_and_dir_are_not_followed(rich_copy: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "head"
    target.write_bytes((rich_copy / INDEX / "head").read_bytes())
    (rich_copy / INDEX / "head").unlink()
    (rich_copy / INDEX / "head").symlink_to(target)
    before = target.read_bytes()
    assert index_read.open_index(open_storage(rich_copy), save=True).how != "checked"
    assert_truth(rich_copy)
    assert target.read_bytes() == before  # never written through
    assert not (rich_copy / INDEX / "head").is_symlink()  # replaced by a regular file

    shutil.move(rich_copy / INDEX, outside / "index")
    (rich_copy / INDEX).symlink_to(outside / "index")
    listing = sorted(p.name for p in (outside / "index").iterdir())
    assert_truth(rich_copy)
    assert sorted(p.name for p in (outside / "index").iterdir()) == listing


def test_reader_of_a_dataset_it_cannot_write_answers_the_truth(rich_copy: Path) -> None:
    shutil.rmtree(rich_copy / "info")
    (rich_copy / "info").write_bytes(b"not a directory: nothing below info/ can be written")
    status = index_read.check_index(str(rich_copy))
    assert status.how == "rebuilt" and not status.saved
    assert_truth(rich_copy, refs=[0, 256, 300])


@pytest.mark.skipif(os.geteuid() == 0, reason="permission bits do not stop root")
def test_reader_of_a_read_only_directory_answers_the_truth(rich_copy: Path) -> None:
    shutil.rmtree(rich_copy / INDEX)
    for path in (rich_copy / "info", rich_copy):
        path.chmod(0o555)
    try:
        assert not index_read.check_index(str(rich_copy)).saved
        assert_truth(rich_copy, refs=[0, 300])
    finally:
        for path in (rich_copy, rich_copy / "info"):
            path.chmod(0o755)


def test_fs_storage_backend_keeps_and_reads_the_index(tmp_path: Path) -> None:
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    ds = Dataset.create("ds", filesystem=fs, single_writer=True)
    ds.write(pa.table({"id": [1]}))
    append_plain(ds, SNAPSHOT_INTERVAL + 10)
    storage = open_storage("ds", fs)
    assert type(storage).__name__ == "FsStorage"
    assert index_read.open_index(storage).how == "checked"
    entries = replay.load_chain(storage)
    state = EMPTY
    for k, entry in enumerate(entries):
        state = chain.advance(state, entry.block, entry.hash)
        if k in (0, 2, 255, 256, 257, len(entries) - 1):
            same_state(replay.state_at(storage, k), state, k)


# -- bounded reads --------------------------------------------------------------------------------


class CountingStorage:
    """The real storage, counting what is read through it (not a stand-in: every call goes
    through to the files)."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.blocks = 0
        self.derived_bytes = 0

    def read_block(self, name: str) -> bytes:
        self.blocks += 1
        return self._inner.read_block(name)

    def read_derived(self, relative: str, limit: int) -> bytes | None:
        data = self._inner.read_derived(relative, limit)
        self.derived_bytes += len(data or b"")
        return data

    def read_derived_range(self, relative: str, start: int, length: int, limit: int):
        found = self._inner.read_derived_range(relative, start, length, limit)
        self.derived_bytes += 0 if found is None else len(found[1])
        return found

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


@pytest.fixture(scope="module")
def long_chain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("long") / "ds"
    fast_chain(root, 5000)
    index_read.rebuild(open_storage(root), save=True)
    return root


BOUND = SNAPSHOT_INTERVAL + 12  # one snapshot's blocks, a fold of < 256 blocks, two time checks


def test_reads_are_bounded_independently_of_the_chain_length(long_chain: Path) -> None:
    entries = replay.load_chain(open_storage(long_chain))
    refs = [
        "head",
        0,
        1,
        len(entries) // 2,
        len(entries) - 1,
        entries[2500].hash,
        entries[4000].block.system_time,
    ]
    for ref in refs:
        storage = CountingStorage(open_storage(long_chain))
        replay.state_at(storage, ref)
        assert storage.blocks <= BOUND, (ref, storage.blocks)
        assert storage.derived_bytes <= 8 * 64 * 1024, (ref, storage.derived_bytes)
    storage = CountingStorage(open_storage(long_chain))
    Dataset(storage).state  # noqa: B018 - what Dataset.open's first read does
    assert storage.blocks <= 10, storage.blocks
    storage = CountingStorage(open_storage(long_chain))
    assert len(list(Dataset(storage).log(10))) == 10
    assert storage.blocks == 10


def test_a_stale_index_is_caught_up_within_a_bounded_walk(long_chain: Path, tmp_path: Path):
    root = tmp_path / "ds"
    shutil.copytree(long_chain, root)
    (root / INDEX / "head").unlink()  # as if every update since block 4864 was lost
    storage = CountingStorage(open_storage(root))
    index = index_read.open_index(storage)
    assert index.how == "caught up"
    assert storage.blocks <= 5000 - 4864 + 12, storage.blocks


# -- the CLI --------------------------------------------------------------------------------------


def run(*args: object) -> subprocess.CompletedProcess[str]:
    """The command run by its ``main`` in this process, as a subprocess would run it."""
    return run_main([str(a) for a in args])


def test_log_streams_newest_first_and_reads_only_what_it_shows(rich_copy: Path) -> None:
    entries, _ = fold_states(rich_copy)
    p = run("log", rich_copy, "-n", 3)
    assert p.returncode == 0, p.stderr
    header, *lines = p.stdout.splitlines()  # a header, then 12 hex digits of each digest
    assert len(lines) == 3 and header.split()[:2] == ["SEQ", "BLOCK"]
    assert [
        str(e.hash)[5:17] in line for e, line in zip(reversed(entries[-3:]), lines, strict=True)
    ] == [True] * 3
    # a damaged block further back is never read by -n 3, and a full log prints what comes
    # before it (streaming), then one error line
    damaged = entries[-10]
    _flip(rich_copy / "blocks" / str(damaged.hash), 40)
    assert run("log", rich_copy, "-n", 3).returncode == 0
    p = run("log", rich_copy)
    assert p.returncode == 2
    assert len(p.stdout.splitlines()) == 1 + 9
    assert str(damaged.hash) in p.stderr and len(p.stderr.splitlines()) == 1


def test_index_command(rich_copy: Path) -> None:
    p = run("index", rich_copy)
    assert p.returncode == 0 and "checked, saved" in p.stdout, p.stdout + p.stderr
    head = head_snapshot(rich_copy)
    (rich_copy / INDEX / "head").write_bytes(b"garbage")
    p = run("index", rich_copy)
    assert p.returncode == 0 and "caught up, saved" in p.stdout, p.stdout + p.stderr
    assert head_snapshot(rich_copy) == head
    p = run("index", rich_copy, "--rebuild")
    assert p.returncode == 0 and "rebuilt, saved" in p.stdout, p.stdout + p.stderr


def test_snapshot_checksum_covers_every_byte() -> None:
    from odf_chain.format.multihash import Multihash
    from odf_chain.index.records import IndexDamage, Pointer, Pointers

    h = Multihash.digest("blake3", b"x")
    snap = Snapshot(5, h, 7, Pointers(seed=Pointer(0, h)), transactions=(("a", 1, 4),))
    data = snap.encode()
    assert Snapshot.decode(data, "s") == snap
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x20
        with pytest.raises(IndexDamage):
            Snapshot.decode(bytes(bad), "s")
    assert zlib.crc32(b"") == 0  # the records' checksum is CRC-32 (zlib)


# -- verify reports an index that lies ------------------------------------------------------------


def index_warnings(root: Path) -> list:
    from odf_chain.verify import verify_path

    report = verify_path(root, check_data=False)
    assert report.ok, [p.line() for p in report.errors]
    return [p for p in report.warnings if p.rule.startswith("index-")]


def index_errors(root: Path) -> list:
    """What verify finds of the index: every finding must be an error (an index that lies is
    one: readers take from it what they cannot prove), and nothing else may be wrong."""
    from odf_chain.verify import verify_path

    report = verify_path(root, check_data=False)
    assert not [p for p in report.warnings if p.rule.startswith("index-")]
    assert all(p.rule == "index-mismatch" for p in report.errors), [p.line() for p in report.errors]
    assert not report.ok
    return report.errors


def test_verify_is_silent_about_a_true_index_and_never_writes_it(rich_copy: Path) -> None:
    before = index_files(rich_copy)
    assert index_warnings(rich_copy) == []
    shutil.rmtree(rich_copy / INDEX)
    assert index_warnings(rich_copy) == []  # no index is no finding
    assert not (rich_copy / INDEX).exists()
    assert before  # there was an index to compare


def test_verify_fails_on_an_index_that_lies(rich_copy: Path) -> None:
    genuine = head_snapshot(rich_copy)
    # values a reader cannot check without a fold
    write_snapshot(rich_copy / INDEX / "head", _forge(genuine, data_size=genuine.data_size + 1))
    path = rich_copy / INDEX / "snap-000000000256"
    periodic = Snapshot.decode(path.read_bytes(), "snap")
    from dataclasses import replace

    from odf_chain.index.records import Pointer

    info = next(e for e in fold_states(rich_copy)[0] if type(e.block.event).__name__ == "SetInfo")
    wrong = replace(periodic.pointers, vocab=Pointer(info.block.sequence_number, info.hash))
    # a periodic snapshot that lies in a pointer and in a counter, with a valid checksum
    write_snapshot(path, _forge(periodic, pointers=wrong, num_records=periodic.num_records + 1))
    segment = rich_copy / INDEX / "seq-00000000"
    data = bytearray(segment.read_bytes())
    # block 7's system time, with a valid checksum: a well-formed entry that lies
    from odf_chain.index.records import SeqEntry, decode_seq, encode_seq

    entries = decode_seq(bytes(data), 0, "seq")
    lie = SeqEntry(7, entries[7].block_hash, entries[7].time_us + 1)
    data[7 * 54 : 8 * 54] = encode_seq([lie])
    segment.write_bytes(bytes(data))
    found = {(w.rule, w.sequence_number) for w in index_errors(rich_copy)}
    lines = " | ".join(w.line() for w in index_errors(rich_copy))
    assert ("index-mismatch", genuine.sequence_number) in found, lines
    assert ("index-mismatch", 256) in found, lines
    assert ("index-mismatch", 7) in found, lines
    assert "data_size" in lines and "vocab" in lines and "system time" in lines
    (at_256,) = [w.line() for w in index_errors(rich_copy) if w.sequence_number == 256]
    assert "num_records" in at_256 and "the vocab pointer" in at_256, at_256


def test_verify_warns_about_a_stale_index(rich_copy: Path) -> None:
    entries, _ = fold_states(rich_copy)
    (rich_copy / "refs" / "head").write_text(str(entries[300].hash))  # rolled back, index not told
    (rich_copy / "logs" / "head").unlink()  # else verify reports the rollback itself, an error
    rules = {w.rule for w in index_warnings(rich_copy)}
    assert rules == {"index-stale"}, rules


def test_verify_checks_a_head_snapshot_left_behind(rich_copy: Path) -> None:
    """A head snapshot a few blocks behind the head (a writer that does not keep the index) is
    no finding while it tells the truth, and is named when its values lie."""
    old = (rich_copy / INDEX / "head").read_bytes()
    Dataset.open(rich_copy).append(SetInfo(description="one more block, the index not told"))
    (rich_copy / INDEX / "head").write_bytes(old)  # as if that writer had not updated it
    assert index_warnings(rich_copy) == []
    behind = head_snapshot(rich_copy)
    write_snapshot(rich_copy / INDEX / "head", _forge(behind, data_size=behind.data_size + 1))
    (error,) = index_errors(rich_copy)
    assert error.rule == "index-mismatch" and error.sequence_number == behind.sequence_number
    assert "data_size" in error.line()
