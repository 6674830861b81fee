"""The slices a data read lists, in bulk (replay.listed_slices_at: the seq table's hashes as
hints, every block read in sequence order, hash-checked and linked to the one before it, the
AddData blocks decoded as columns), against the walk from the head it replaces
(replay.slice_blocks_at): the same slices, blocks and errors, and a table that names another
branch's block never puts that block's slice in a read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from odf_chain import chain, replay
from odf_chain.dataset import Dataset
from odf_chain.errors import IntegrityError
from odf_chain.events import AddData, DataSlice, OffsetInterval
from odf_chain.index import update
from odf_chain.index.records import SeqEntry, decode_seq, encode_seq, time_us
from odf_chain.storage import open_storage
from tests.test_index import CountingStorage, rich  # noqa: F401  (the fixture)

WRITES = 70


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset of 70 one-row writes (a SetDataSchema, then 40 AddData with slices), an
    evolution in the middle."""
    root = tmp_path_factory.mktemp("bulk") / "ds"
    ds = Dataset.create(root)
    for i in range(WRITES):
        row = {"id": pa.array([i], pa.int64())}
        if i >= WRITES // 2:
            row["name"] = pa.array([f"n{i}"])
        ds.write(pa.table(row), evolve=i == WRITES // 2)
    return root


def as_walked(storage, ref) -> tuple:
    state, found = replay.slice_blocks_at(storage, ref)
    return state.head, [(e.block.sequence_number, e.hash, data) for e, data in found]


def as_listed(storage, ref) -> tuple:
    state, found = replay.listed_slices_at(storage, ref)
    return state.head, [(s.sequence_number, s.block_hash, s.data) for s in found]


def test_the_bulk_listing_is_the_walks_at_every_block(many: Path) -> None:
    storage = open_storage(many)
    n = Dataset.open(many).state.sequence_number + 1
    for ref in range(n):
        assert as_listed(storage, ref) == as_walked(storage, ref), ref
    assert len(as_listed(storage, "head")[1]) == WRITES


def test_the_bulk_listing_reads_no_block_one_by_one(many: Path) -> None:
    counting = CountingStorage(open_storage(many))
    _, found = replay.listed_slices_at(counting, "head")
    assert len(found) == WRITES
    # only what state_at reads (the head snapshot's blocks): the listing reads through one
    # directory descriptor (block_reader), not read_block per block as the walk does
    assert counting.blocks < 10, counting.blocks
    walking = CountingStorage(open_storage(many))
    replay.slice_blocks_at(walking, "head")
    assert walking.blocks > WRITES


def test_a_chain_of_every_kind_of_event(rich: Path) -> None:  # noqa: F811
    storage = open_storage(rich)
    n = Dataset.open(rich).state.sequence_number + 1
    for ref in sorted({0, 3, 4, 5, 255, 256, 300, n // 2, n - 2, n - 1}):
        assert as_listed(storage, ref) == as_walked(storage, ref), ref


def test_a_table_naming_another_branchs_block_is_not_believed(many: Path, tmp_path: Path) -> None:
    """Someone who can write info/ makes the table name, at block 20, a genuine block of
    another branch whose slice names other data: the listing must not contain it."""
    root = tmp_path / "ds"
    shutil.copytree(many, root)
    storage = open_storage(root)
    truth = as_walked(storage, "head")
    before = replay.state_at(storage, 19)
    fake = DataSlice(
        truth[1][0][2].logical_hash,
        truth[1][0][2].physical_hash,
        OffsetInterval(before.next_offset, before.next_offset),
        truth[1][0][2].size,
    )
    event = AddData(prev_offset=before.last_offset, new_data=fake, new_watermark=before.watermark)
    prepared = chain.prepare(before, event)
    storage.write_block(str(prepared.entry.hash), prepared.data)
    segment = root / "info" / update.segment_name(0)
    entries = decode_seq(segment.read_bytes(), 0, "seq")
    entries[20] = SeqEntry(20, prepared.entry.hash, time_us(prepared.entry.block.system_time))
    segment.write_bytes(encode_seq(entries))  # checksums right: damage is not what this is
    assert as_listed(storage, "head") == truth
    assert as_listed(storage, 25) == as_walked(storage, 25)


def test_a_damaged_block_is_the_walks_error(many: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(many, root)
    storage = open_storage(root)
    _, found = as_walked(storage, "head")
    _, victim, _ = found[10]
    path = root / "blocks" / str(victim)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(data)
    with pytest.raises(IntegrityError, match=str(victim)) as listed:
        replay.listed_slices_at(open_storage(root), "head")
    with pytest.raises(IntegrityError) as walked:
        replay.slice_blocks_at(open_storage(root), "head")
    assert str(listed.value) == str(walked.value)


def test_a_read_of_many_slices_is_every_slice_in_chain_order(many: Path) -> None:
    ds = Dataset.open(many)
    _, found = as_walked(open_storage(many), "head")
    files = [pq.read_table(many / "data" / str(data.physical_hash)) for _, _, data in found]
    table = ds.to_table()
    assert table.column("id").to_pylist() == [i for f in files for i in f.column("id").to_pylist()]
    assert table.column("name").to_pylist()[: WRITES // 2] == [None] * (WRITES // 2)
    picked = ds.to_table(columns=["id"], filter=pc.field("id") >= WRITES - 3)
    assert picked.column("id").to_pylist() == list(range(WRITES - 3, WRITES))


def test_a_read_of_many_slices_names_the_first_bad_slice(many: Path, tmp_path: Path) -> None:
    root = tmp_path / "ds"
    shutil.copytree(many, root)
    _, found = as_walked(open_storage(root), "head")
    late, early = found[60], found[30]
    for _, _, data in (late, early):
        path = root / "data" / str(data.physical_hash)
        path.write_bytes(b"not parquet at all")
    with pytest.raises(IntegrityError, match="altered or replaced") as caught:
        Dataset.open(root).to_table()
    assert str(early[2].physical_hash) in str(caught.value)
    assert f"block {early[0]} " in str(caught.value)
    with pytest.raises(IntegrityError, match="does not decode") as caught:
        Dataset.open(root).to_table(check=None)
    assert str(early[2].physical_hash) in str(caught.value)
