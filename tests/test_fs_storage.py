"""The storage contract, held by both backends; and whole datasets on a non-local pyarrow.fs.

Every contract test runs against LocalStorage, FsStorage over the local filesystem,
FsStorage over pyarrow's in-memory filesystem (a filesystem with no local paths at all, as an
object store has none), and FsStorage on a real S3 API server (moto's, on 127.0.0.1, with
conditional writes): nothing above the storage layer may assume a local directory. The two
filesystems without conditional writes are opened with ``single_writer=True``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from odf_chain import Dataset, chain
from odf_chain.errors import (
    ConflictError,
    FormatError,
    IntegrityError,
    NotFoundError,
    OdfChainError,
    SchemaEvolutionError,
)
from odf_chain.events import SetInfo
from odf_chain.gc import collect_garbage
from odf_chain.storage import (
    FsStorage,
    LocalStorage,
    Storage,
    create_storage,
    local_path,
    open_storage,
)
from odf_chain.verify import verify

H0 = "f1e20" + "00" * 32
H1 = "f1e20" + "11" * 32

Backend = Callable[[Path], Storage]
BACKENDS: dict[str, Backend] = {
    "local": lambda tmp: LocalStorage.create(tmp / "ds"),
    "fs-local": lambda tmp: FsStorage.create(
        pafs.LocalFileSystem(), str(tmp / "ds"), single_writer=True
    ),
    "fs-memory": lambda tmp: FsStorage.create(
        pafs._MockFileSystem(), "bucket/ds", "mock://x", single_writer=True
    ),
}


@pytest.fixture(params=[*sorted(BACKENDS), pytest.param("s3", marks=pytest.mark.s3)])
def store(request, tmp_path: Path) -> Storage:
    if request.param == "s3":
        storage = create_storage(request.getfixturevalue("s3_bucket") + "/ds")
        assert isinstance(storage, FsStorage) and storage.head_moves_atomically
        return storage
    return BACKENDS[request.param](tmp_path)


def _stage(store: Storage, data: bytes) -> str:
    staged = str(store.stage_file(".parquet"))
    with store.filesystem.open_output_stream(staged) as f:
        f.write(data)
    return staged


def _read(store: Storage, fs_path: str) -> bytes:
    with store.filesystem.open_input_stream(fs_path) as f:
        return f.read()


def test_blocks_round_trip_and_say_what_they_created(store: Storage) -> None:
    assert store.block_names() == []
    assert store.write_block(H0, b"block zero") is True
    assert store.write_block(H0, b"block zero") is False  # same bytes: nothing to do
    assert store.read_block(H0) == b"block zero" and store.has_block(H0)
    with pytest.raises(IntegrityError, match=H0):
        store.write_block(H0, b"other bytes")
    with pytest.raises(NotFoundError, match=H1):
        store.read_block(H1)
    assert store.block_names() == [H0]
    assert store.remove_block(H0) is True and store.remove_block(H0) is False
    assert store.leftover_staging() == []  # the upload's temporary name is gone


def test_data_commit_keeps_what_is_stored(store: Storage) -> None:
    staged = _stage(store, b"PAR1 slice PAR1")
    assert store.leftover_staging() == [staged.rsplit("/", 1)[-1]]
    commit = store.commit_data(staged, H0)
    assert commit.created is True and store.has_data(H0) and store.data_names() == [H0]
    with store.open_data(H0) as fh:
        assert fh.read() == b"PAR1 slice PAR1"
    again = store.commit_data(_stage(store, b"PAR1 slice PAR1"), H0)
    assert again.created is False and store.leftover_staging() == []
    wrong = _stage(store, b"a different size")
    with pytest.raises(IntegrityError, match="size"):
        store.commit_data(wrong, H0)
    with store.open_data(H0) as fh:
        assert fh.read() == b"PAR1 slice PAR1"  # the committed slice is untouched
    store.discard(wrong)
    assert store.leftover_staging() == []
    with pytest.raises(OdfChainError, match="not in"):
        store.commit_data(store.fs_path("data/" + H0), H1)  # only staged files commit
    # the writer's own count of bytes: an upload the store holds at another size is refused
    altered = _stage(store, b"PAR1 another slice PAR1")
    with pytest.raises(
        IntegrityError, match=f"{H1}: its writer wrote 20 bytes, the store holds 23"
    ):
        store.commit_data(altered, H1, size=20)
    assert not store.has_data(H1) and len(store.leftover_staging()) == 1
    assert store.commit_data(altered, H1, size=23).created and store.has_data(H1)
    assert store.remove_data(H1) is True
    assert store.remove_data(H0) is True and store.data_names() == []
    with pytest.raises(NotFoundError, match=H0):
        store.open_data(H0)


def test_head_compare_and_swap(store: Storage) -> None:
    assert store.read_head() is None
    store.compare_and_swap_head(None, H0)
    assert store.read_head() == H0
    with pytest.raises(ConflictError, match="head moved"):
        store.compare_and_swap_head(None, H1)
    store.compare_and_swap_head(H0, H1)
    assert store.read_head() == H1
    with store.filesystem.open_output_stream(store.fs_path("refs/head")) as f:
        f.write(b"not a hash!")
    with pytest.raises(FormatError, match="invalid head"):
        store.read_head()


def test_head_log_and_the_files_a_head_move_needs(store: Storage) -> None:
    """Every backend logs each head move, and refuses one whose block or slice is gone."""
    assert store.read_head_log() == []
    store.write_block(H0, b"block zero")
    store.compare_and_swap_head(None, H0, blocks=[H0])
    with pytest.raises(ConflictError, match=rf"data/{H1} is missing at the head move"):
        store.compare_and_swap_head(H0, H1, data=[H1])
    with pytest.raises(ConflictError, match=rf"blocks/{H1} is missing at the head move"):
        store.compare_and_swap_head(H0, H1, blocks=[H1])
    assert store.read_head() == H0
    store.compare_and_swap_head(H0, H1)
    moves = store.read_head_log()
    assert [(m.old, m.new) for m in moves] == [(None, H0), (H0, H1)]
    assert moves[0].time_ms <= moves[1].time_ms
    log = _read(store, store.fs_path("logs/head")).decode()
    assert log == f"- {H0} {moves[0].time_ms}\n{H0} {H1} {moves[1].time_ms}\n"


def test_reads_are_bounded_and_take_files_only(store: Storage) -> None:
    fs = store.filesystem
    with fs.open_output_stream(store.fs_path("refs/head")) as f:
        f.write(b"f1e20" + b"0" * 2000)  # larger than any head
    with pytest.raises(OdfChainError, match=r"refs/head is larger than the 1,024-byte limit"):
        store.read_head()
    fs.create_dir(store.fs_path(f"blocks/{H1}"))  # a directory where a block should be
    with pytest.raises(IntegrityError, match=rf"block {H1} cannot be read.*not a regular file"):
        store.read_block(H1)
    fs.create_dir(store.fs_path(f"data/{H1}"))
    with pytest.raises(OdfChainError, match="not a regular file"):
        store.open_data(H1)


def test_leftovers_age_size_and_removal(store: Storage) -> None:
    staged = _stage(store, b"half a file")
    area = store.staging_area("spark")
    store.filesystem.create_dir(area)  # the writer (Spark) makes its folder
    with store.filesystem.open_output_stream(f"{area}/part-00000-x.parquet") as f:
        f.write(b"partial")
    names = store.leftover_staging()
    assert sorted(names) == sorted([staged.rsplit("/", 1)[-1], area.rsplit("/", 1)[-1]])
    info = store.entry_info(f".staging/{area.rsplit('/', 1)[-1]}")
    assert info is not None and info.size == len(b"partial")
    assert abs(info.mtime - time.time()) < 300
    assert store.entry_info(".staging/nothing-here") is None
    with pytest.raises(OdfChainError, match="not an entry"):
        store.remove_staged("../data")
    # the staged file is still claimed by its writer (this store): on local files, where
    # claims are locks, gc's removal leaves it; object stores have only the minimum age
    staged_name = staged.rsplit("/", 1)[-1]
    assert store.staged_in_use(staged_name) == isinstance(store, LocalStorage)
    for name in names:
        if store.staged_in_use(name):
            assert store.remove_staged(name) is False and name in store.leftover_staging()
            store.discard(staged)  # the writer gives up: its claim goes with the file
        else:
            assert store.remove_staged(name) is True
    assert store.leftover_staging() == []


def test_open_and_create_by_location(tmp_path: Path) -> None:
    assert local_path(f"file://{tmp_path}/a") == tmp_path / "a"
    assert local_path("s3://bucket/a") is None
    assert isinstance(create_storage(f"file://{tmp_path}/a"), LocalStorage)
    with pytest.raises(NotFoundError, match="not a dataset"):
        open_storage(f"file://{tmp_path}/nothing")
    with pytest.raises(OdfChainError, match="nosuchscheme://"):
        open_storage("nosuchscheme://bucket/x")


def test_spark_uris_name_the_same_files() -> None:
    memory = pafs._MockFileSystem()
    assert FsStorage(memory, "b/ds", "s3://b/ds").spark_uri("b/ds/data/x") == "s3a://b/ds/data/x"
    assert FsStorage(memory, "b/ds", "gs://b/ds").spark_uri("b/ds/data/x") == "gs://b/ds/data/x"
    hdfs = FsStorage(memory, "/user/me/ds", "hdfs://namenode:8020/user/me/ds")
    assert hdfs.spark_uri("/user/me/ds/data/x") == "hdfs://namenode:8020/user/me/ds/data/x"
    local = FsStorage(memory, "/tmp/ds", "file:///tmp/ds")
    assert local.spark_uri("/tmp/ds/data/x") == "file:///tmp/ds/data/x"


# -- a whole dataset on a filesystem with no local paths -------------------------------------


@pytest.fixture
def memory_dataset() -> Dataset:
    """A dataset on a filesystem configured in code (as an S3FileSystem with credentials)."""
    return Dataset.create("bucket/sales", filesystem=pafs._MockFileSystem(), single_writer=True)


def test_dataset_lifecycle_on_a_remote_filesystem(memory_dataset: Dataset) -> None:
    ds = memory_dataset
    ds.write(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}))
    ds.write(pa.table({"id": [4], "name": ["d"], "score": [0.5]}), evolve=True)  # a new column
    with pytest.raises(SchemaEvolutionError, match="id"):
        ds.write(pa.table({"id": ["not a number"]}))
    state = ds.refresh()
    assert (state.num_records, state.num_slices, state.next_offset) == (4, 2, 4)
    assert state.schema.names[-1] == "score"
    report = verify(ds.storage)
    assert report.ok and report.slices_checked == 2 and not report.warnings, [
        p.line() for p in report.errors
    ]
    # the slices are real Parquet on that filesystem, named by their hash
    fs = ds.storage.filesystem
    rows = sum(
        pq.read_metadata(fs.open_input_file(ds.storage.fs_path(f"data/{n}"))).num_rows
        for n in ds.storage.data_names()
    )
    assert rows == 4
    reopened = Dataset(FsStorage.open(fs, "bucket/sales"))
    assert reopened.refresh().head == state.head
    # Seed, schema, data, evolved schema, data
    assert [e.block.sequence_number for e in reopened.blocks()] == list(range(5))


def test_verify_and_gc_on_a_remote_filesystem(memory_dataset: Dataset) -> None:
    ds = memory_dataset
    ds.write(pa.table({"x": [1, 2]}))
    storage = ds.storage
    fs = storage.filesystem
    (name,) = storage.data_names()
    orphan = storage.fs_path("data/f1e20" + "ab" * 32)
    with fs.open_output_stream(orphan) as f:
        f.write(b"left by a losing writer")
    with fs.open_output_stream(storage.fs_path(".staging/data.abandoned.parquet")) as f:
        f.write(b"half")
    report = verify(storage)
    assert report.ok
    assert sorted(p.rule for p in report.warnings) == ["orphan-data", "staging-leftover"]
    assert collect_garbage(storage, min_age=3600).kept_young != []
    # no lock stops writers on such a store: below the default age only on the caller's word
    with pytest.raises(OdfChainError, match=r"no lock.*--single-writer"):
        collect_garbage(storage, min_age=0)
    assert len(storage.data_names()) == 2
    done = collect_garbage(storage, min_age=0, single_writer=True)
    assert sorted(done.removed) == sorted(
        ["data/f1e20" + "ab" * 32, ".staging/data.abandoned.parquet"]
    )
    assert verify(storage).warnings == [] and storage.data_names() == [name]
    # tampering with the committed slice is caught and named
    data = bytearray(_read(storage, storage.fs_path(f"data/{name}")))
    data[len(data) // 2] ^= 0xFF
    with fs.open_output_stream(storage.fs_path(f"data/{name}")) as f:
        f.write(bytes(data))
    problems = verify(storage).errors
    assert [p.rule for p in problems] == ["data-hash"] and problems[0].path == f"data/{name}"


def test_a_second_writer_on_a_stale_head_gets_a_conflict(memory_dataset: Dataset) -> None:
    ds = memory_dataset
    other = Dataset(FsStorage.open(ds.storage.filesystem, "bucket/sales", single_writer=True))
    other.refresh()
    ds.write(pa.table({"x": [1]}))
    before = ds.refresh().head
    # the other handle re-reads the head before appending: no conflict, a clean append
    other.write(pa.table({"x": [2]}))
    assert other.refresh().sequence_number == 3
    # a writer whose prepared block sits on an old head is refused at the head move
    stale = chain.prepare(ds.state_at(before), SetInfo(description="late"))
    with pytest.raises(ConflictError, match="head moved"):
        chain.commit(ds.storage, stale)
    assert verify(ds.storage).ok and ds.refresh().sequence_number == 3


def test_spark_names_filesystems_given_in_code(tmp_path: Path) -> None:
    local = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    store = FsStorage.create(local, "ds", single_writer=True)
    assert store.spark_uri(store.fs_path("data/x")) == f"file://{tmp_path}/ds/data/x"
    memory = FsStorage.create(pafs._MockFileSystem(), "bucket/ds", single_writer=True)
    with pytest.raises(OdfChainError, match="name the dataset by a URI"):
        memory.spark_uri(memory.fs_path("data/x"))
    # the local filesystem given as an object is served by the local backend (fsync, lock)
    assert isinstance(create_storage(tmp_path / "plain", pafs.LocalFileSystem()), LocalStorage)
    assert LocalStorage.open(tmp_path / "plain").spark_uri("/a b/#c") == "file:///a b/#c"


def test_a_committed_slice_looks_as_new_as_its_commit(tmp_path: Path) -> None:
    """gc judges age by modification time; a file Spark wrote long before the commit must not
    look old once it is in data/ (it is a fresh orphan until the head names it)."""
    import os

    store = LocalStorage.create(tmp_path / "ds")
    staged = store.stage_file(".parquet")
    staged.write_bytes(b"PAR1 old PAR1")
    then = time.time() - 7200
    os.utime(staged, (then, then))
    store.commit_data(staged, H0)
    info = store.entry_info(f"data/{H0}")
    assert info is not None and time.time() - info.mtime < 60
