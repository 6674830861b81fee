"""Readers check what they read (DESIGN.md, "Trust"): ``to_table`` and ``to_pyarrow_dataset``
refuse a slice whose size or physical hash is not what the AddData that added it records, and
name the slice and that block; whatever the check, a slice that does not decode is an
OdfChainError naming it, never a bare OSError or ArrowInvalid. Real files, real Parquet."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from odf_chain import Dataset
from odf_chain.chain import BlockEntry
from odf_chain.errors import IntegrityError, NotFoundError, OdfChainError
from odf_chain.events import AddData
from odf_chain.format.multihash import SHA3_256

FLIPS = 200


def _dataset(root: Path, hash: str = "blake3") -> Dataset:
    ds = Dataset.create(root, hash=hash)
    ds.write(pa.table({"station": ["a", "b", "c"], "temperature_c": [14.2, 13.9, 12.5]}))
    ds.write(pa.table({"station": ["d"] * 50, "temperature_c": [float(i) for i in range(50)]}))
    ds.write(pa.table({"station": ["e", "f"], "temperature_c": [9.5, 21.0]}))
    return ds


@pytest.fixture
def sensors(tmp_path: Path) -> Dataset:
    return _dataset(tmp_path / "sensors")


def _slices(ds: Dataset) -> list[tuple[Path, int, str]]:
    """Each slice's file, oldest first, with the sequence number and hash of its block."""
    found = []
    for entry in ds.blocks():
        if isinstance(event := entry.block.event, AddData) and event.new_data is not None:
            path = ds.path / "data" / str(event.new_data.physical_hash)
            found.append((path, entry.block.sequence_number, str(entry.hash)))
    return found


def _names(entries: list[BlockEntry]) -> list[str]:
    return [str(e.block.event.new_data.physical_hash) for e in entries]  # type: ignore[union-attr]


def _names_it(exc: BaseException, victim: tuple[Path, int, str]) -> None:
    path, sequence_number, block_hash = victim
    message = str(exc)
    assert path.name in message, message
    assert f"block {sequence_number} {block_hash}" in message, message


@pytest.mark.parametrize("hash", ["blake3", SHA3_256])
def test_a_slice_swapped_with_another_valid_slice_is_refused(tmp_path: Path, hash: str) -> None:
    ds = _dataset(tmp_path / "sensors", hash)
    first, second, _ = _slices(ds)
    shutil.copyfile(second[0], first[0])  # a valid slice of the same dataset, under A's name
    for read in (ds.to_table, ds.to_pyarrow_dataset, lambda: ds.to_table(check="size")):
        with pytest.raises(IntegrityError) as caught:
            read()
        _names_it(caught.value, first)


def test_a_slice_rewritten_with_other_values_is_refused(sensors: Dataset) -> None:
    victim = _slices(sensors)[0]
    rows = pq.read_table(victim[0])
    forged = rows.set_column(
        rows.schema.get_field_index("temperature_c"),
        "temperature_c",
        pa.array([99.0, 99.0, 99.0]),
    )
    pq.write_table(forged, victim[0])  # a valid Parquet file of the dataset's schema
    for read in (sensors.to_table, sensors.to_pyarrow_dataset):
        with pytest.raises(IntegrityError) as caught:
            read()
        _names_it(caught.value, victim)


def test_every_single_bit_flip_is_an_error_naming_the_slice(sensors: Dataset) -> None:
    """Checked, every flip is refused by its hash; unchecked, a flip that breaks the decoding
    is still an OdfChainError naming the slice (a flip that does not is read as it is)."""
    victim = min(_slices(sensors), key=lambda s: s[0].stat().st_size)
    original = victim[0].read_bytes()
    rng = random.Random(20)
    unchecked_errors = 0
    try:
        for bit in rng.sample(range(len(original) * 8), FLIPS):
            flipped = bytearray(original)
            flipped[bit // 8] ^= 1 << (bit % 8)
            victim[0].write_bytes(flipped)
            with pytest.raises(OdfChainError, match="hashes to") as caught:
                sensors.to_table()
            _names_it(caught.value, victim)
            try:
                sensors.to_table(check=None)
            except OdfChainError as exc:
                _names_it(exc, victim)
                unchecked_errors += 1
    finally:
        victim[0].write_bytes(original)
    assert unchecked_errors > 0  # the flips do reach the decoder's error paths
    assert sensors.to_table().num_rows == 55


def test_size_only_catches_a_size_mismatch(sensors: Dataset) -> None:
    victim = _slices(sensors)[1]
    with victim[0].open("ab") as fh:
        fh.write(b"\0")
    for read in (
        lambda: sensors.to_table(check="size"),
        lambda: sensors.to_pyarrow_dataset(check="size"),
    ):
        with pytest.raises(IntegrityError, match="where its AddData records") as caught:
            read()
        _names_it(caught.value, victim)


def test_unchecked_reads_without_hashing_but_wraps_decode_errors(sensors: Dataset) -> None:
    first, second, third = _slices(sensors)
    shutil.copyfile(third[0], first[0])  # swapped: read as it is when nothing is checked
    rows = sensors.to_table(check=None)
    assert rows.column("station").to_pylist() == ["e", "f"] + ["d"] * 50 + ["e", "f"]
    assert sensors.to_pyarrow_dataset(check=None).count_rows() == 54
    second[0].write_bytes(b"not parquet at all")
    with pytest.raises(IntegrityError, match="does not decode") as caught:
        sensors.to_table(check=None)
    _names_it(caught.value, second)
    assert not isinstance(caught.value, OSError | pa.ArrowException)


def test_projection_and_filter_work_checked(sensors: Dataset) -> None:
    picked = sensors.to_table(columns=["station"], filter=pc.field("temperature_c") > 14.0)
    assert picked.column_names == ["station"]
    assert picked.column("station").to_pylist() == ["a"] + ["d"] * 35 + ["f"]
    assert sensors.to_table(filter=pc.field("station") == "z").num_rows == 0
    victim = _slices(sensors)[2]
    data = bytearray(victim[0].read_bytes())
    data[len(data) // 2] ^= 0x01
    victim[0].write_bytes(data)
    with pytest.raises(IntegrityError) as caught:  # projection does not skip the check
        sensors.to_table(columns=["station"], filter=pc.field("temperature_c") > 14.0)
    _names_it(caught.value, victim)


def test_a_missing_slice_names_its_block_and_a_bad_check_is_refused(sensors: Dataset) -> None:
    victim = _slices(sensors)[1]
    victim[0].unlink()
    with pytest.raises(NotFoundError) as caught:
        sensors.to_table()
    _names_it(caught.value, victim)
    with pytest.raises(OdfChainError, match="check must be"):
        sensors.to_table(check="md5")  # type: ignore[arg-type]
    with pytest.raises(OdfChainError, match="check must be"):
        sensors.to_pyarrow_dataset(check=False)  # type: ignore[arg-type]


def test_a_dataset_on_another_filesystem_is_checked_alike() -> None:
    """Through ``pyarrow.fs`` (an object store's path): the same checks, the same errors."""
    import pyarrow.fs as pafs

    memory = pafs._MockFileSystem()
    ds = Dataset.create("bucket/ds", filesystem=memory, single_writer=True)
    ds.write(pa.table({"x": [1, 2]}))
    ds.write(pa.table({"x": [3, 4, 5]}))
    assert ds.to_table().column("x").to_pylist() == [1, 2, 3, 4, 5]
    entries = [e for e in ds.blocks() if isinstance(e.block.event, AddData)]
    first, second = (ds.storage.fs_path(f"data/{name}") for name in _names(entries))
    memory.copy_file(second, first)
    for read in (ds.to_table, ds.to_pyarrow_dataset):
        with pytest.raises(IntegrityError, match=f"block {entries[0].block.sequence_number}"):
            read()
    assert ds.to_table(check=None).column("x").to_pylist() == [3, 4, 5, 3, 4, 5]
