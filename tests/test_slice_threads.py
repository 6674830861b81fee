"""``to_table`` reads, checks and decodes slices in several threads (slice_reader.read_table):
whatever the number of threads, the rows come in chain order, the slice refused is the first
bad one in chain order, named with its block, and a slice swapped after the listing is
refused. The reference is pyarrow.dataset over the same files, in the order the blocks name
them. Real files, real Parquet."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pytest

from odf_chain import replay, slice_reader
from odf_chain.dataset import Dataset
from odf_chain.errors import IntegrityError, OdfChainError
from odf_chain.events import AddData

SLICES = 48
EVOLVED_AT = 24
THREADS = (1, 2, 3, 8)


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """48 slices of three rows each (ids 3i..3i+2); from the 24th on a ``name`` column too, so
    the older slices decode through the fragment (columns they lack read as nulls) and the
    newer ones directly, interleaved across the threads."""
    root = tmp_path_factory.mktemp("threads") / "ds"
    ds = Dataset.create(root)
    for i in range(SLICES):
        rows = {"id": pa.array(range(3 * i, 3 * i + 3), pa.int64())}
        if i >= EVOLVED_AT:
            rows["name"] = pa.array([f"n{k}" for k in range(3 * i, 3 * i + 3)])
        ds.write(pa.table(rows), evolve=i == EVOLVED_AT)
    return root


def _files(root: Path) -> list[tuple[Path, int, str]]:
    """Each slice's file in chain order (oldest first), with its block's number and hash."""
    found = []
    for entry in Dataset.open(root).blocks():
        if isinstance(event := entry.block.event, AddData) and event.new_data is not None:
            path = root / "data" / str(event.new_data.physical_hash)
            found.append((path, entry.block.sequence_number, str(entry.hash)))
    return found


def _copy(many: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(many, root)
    return root


def _names(message: str, victim: tuple[Path, int, str]) -> bool:
    path, sequence_number, block_hash = victim
    return path.name in message and f"block {sequence_number} {block_hash}" in message


def test_every_thread_count_reads_the_slices_in_chain_order(many: Path) -> None:
    ds = Dataset.open(many)
    files = _files(many)
    assert len(files) == SLICES
    schema = ds.state.schema
    expected = pads.dataset([str(f[0]) for f in files], schema=schema, format="parquet")
    whole = expected.to_table()
    assert whole.column("id").to_pylist() == list(range(3 * SLICES))  # the files' own order
    picked = expected.to_table(columns=["name", "id"])
    for threads in THREADS:
        table = ds.to_table(threads=threads)
        assert table.schema == schema, threads
        assert table.equals(whole), threads
        assert table.column("name").to_pylist()[: 3 * EVOLVED_AT] == [None] * (3 * EVOLVED_AT)
        assert ds.to_table(columns=["name", "id"], threads=threads).equals(picked), threads
        for check in ("size", None):
            assert ds.to_table(check=check, threads=threads).equals(whole), (threads, check)


def test_a_bad_slice_in_the_middle_is_the_one_named_whatever_the_threads(
    many: Path, tmp_path: Path
) -> None:
    root = _copy(many, tmp_path)
    files = _files(root)
    middle, later = files[SLICES // 2 - 3], files[SLICES - 5]
    data = bytearray(middle[0].read_bytes())
    data[len(data) // 2] ^= 0x10  # same size, other content
    middle[0].write_bytes(bytes(data))
    later[0].write_bytes(b"not parquet at all")  # a later slice, wrong in another way
    ds = Dataset.open(root)
    for threads in THREADS:
        for _ in range(3):  # threads finish in any order; the error is always the first slice's
            with pytest.raises(IntegrityError, match="hashes to") as caught:
                ds.to_table(threads=threads)
            assert _names(str(caught.value), middle), (threads, str(caught.value))
    middle[0].write_bytes(b"PAR1 not parquet either PAR1")
    for threads in THREADS:
        with pytest.raises(IntegrityError, match="does not decode") as caught:
            ds.to_table(check=None, threads=threads)
        assert _names(str(caught.value), middle), (threads, str(caught.value))


def test_a_slice_swapped_after_the_listing_is_refused(many: Path, tmp_path: Path) -> None:
    """The listing names files; what is read is checked whatever happened to them since."""
    root = _copy(many, tmp_path)
    ds = Dataset.open(root)
    state, listed = replay.listed_slices_at(ds.storage, "head")
    pieces = slice_reader.named_listing(ds.storage, listed)
    files = _files(root)
    victim, other = files[30], files[31]
    shutil.copyfile(other[0], victim[0])  # a valid slice of the dataset under another's name
    for threads in THREADS:
        with pytest.raises(IntegrityError, match="altered or replaced") as caught:
            slice_reader.read_table(ds.storage, pieces, state.schema, threads=threads)
        assert _names(str(caught.value), victim), threads


def test_the_number_of_threads_is_checked(many: Path) -> None:
    ds = Dataset.open(many)
    for threads in (0, -1, 1.5, True, "2", None):
        with pytest.raises(OdfChainError, match="threads must be a positive integer"):
            ds.to_table(threads=threads)  # type: ignore[arg-type]


def _open_descriptors() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
def test_a_missing_slice_opened_ahead_is_its_own_error_and_nothing_stays_open(
    many: Path, tmp_path: Path
) -> None:
    """Files are opened ahead of the read (slice_reader.OPEN_AHEAD): a missing one is the
    error of its slice when its turn comes, after every slice before it was read, and the
    files opened ahead of a failed read are closed."""
    root = _copy(many, tmp_path)
    files = _files(root)
    missing, bad = files[20], files[10]
    missing[0].unlink()
    ds = Dataset.open(root)
    before = _open_descriptors()
    for threads in THREADS:
        with pytest.raises(OdfChainError, match="is missing") as caught:
            ds.to_table(threads=threads)
        assert _names(str(caught.value), missing), threads
        assert _open_descriptors() == before, threads
    bad[0].write_bytes(b"not parquet at all")  # before the missing one: this is the error now
    for threads in THREADS:
        with pytest.raises(IntegrityError, match="altered or replaced") as caught:
            ds.to_table(threads=threads)
        assert _names(str(caught.value), bad), threads
        assert _open_descriptors() == before, threads
