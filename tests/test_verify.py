"""verify: a clean dataset checks out; any single flipped byte in any block or data file is caught
and located; leftovers are warnings; the JSON report says what was checked."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain.dataset import Dataset
from odf_chain.events import AddData, DataSlice, OffsetInterval
from odf_chain.format.multihash import Multihash
from odf_chain.verify import VerifyReport, verify_path
from tests.helpers import PERMISSIONS, multihash_name, snapshot_tree

MS_UTC = pa.timestamp("ms", tz="UTC")


def build(root: Path, algorithm: str = "blake3") -> Dataset:
    """Four writes, one of which evolves the schema (a new nullable column)."""
    ds = Dataset.create(root, hash=algorithm)
    ds.write(
        pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "name": pa.array(["a", "b", None]),
                "event_time": pa.array(
                    [datetime(2024, 1, d, tzinfo=UTC) for d in (1, 2, 3)], MS_UTC
                ),
            }
        )
    )
    ds.write(pa.table({"id": pa.array([4], pa.int64()), "name": pa.array(["d"])}))
    ds.write(
        pa.table(
            {
                "id": pa.array([5, 6], pa.int64()),
                "name": pa.array(["e", "f"]),
                "score": pa.array([0.5, None], pa.float64()),
            }
        ),
        evolve=True,
    )
    ds.write(pa.table({"id": pa.array([7], pa.int64())}))
    return ds


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify") / "ds"
    build(root)
    return root


@pytest.fixture
def pristine_copy(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(pristine, root)
    return root


def chain_info(root: Path) -> tuple[list, dict[str, tuple[int, str]]]:
    """(blocks oldest first, {data file name: (sequence number, block hash) of its AddData})."""
    entries = Dataset.open(root).blocks()
    referenced = {
        str(e.block.event.new_data.physical_hash): (e.block.sequence_number, str(e.hash))
        for e in entries
        if isinstance(e.block.event, AddData)
    }
    return entries, referenced


def test_clean_dataset_verifies(pristine_copy: Path) -> None:
    report = verify_path(pristine_copy)
    assert report.ok
    assert report.errors == [] and report.warnings == [] and report.problems == []
    entries, referenced = chain_info(pristine_copy)
    assert [e.block.event_name for e in entries] == [
        "Seed",
        "SetDataSchema",
        "AddData",
        "AddData",
        "SetDataSchema",
        "AddData",
        "AddData",
    ]
    assert report.blocks_checked == 7
    assert report.slices_checked == 4
    block_bytes = sum(p.stat().st_size for p in (pristine_copy / "blocks").iterdir())
    data_bytes = sum(p.stat().st_size for p in (pristine_copy / "data").iterdir())
    assert report.bytes_hashed == block_bytes + data_bytes
    assert report.head == (pristine_copy / "refs" / "head").read_text().strip()
    assert sorted(referenced) == sorted(p.name for p in (pristine_copy / "data").iterdir())


def _flip(path: Path, pos: int) -> bytes:
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[pos] ^= 0xFF if pos % 2 == 0 else 1 << (pos % 8)
    path.write_bytes(bytes(damaged))
    return original


def _positions(size: int, limit: int) -> list[int]:
    if size <= limit:
        return list(range(size))
    step = (size - 1) / (limit - 1)
    return sorted({round(i * step) for i in range(limit)} | {0, size - 1})


@pytest.mark.slow
def test_every_flipped_byte_is_caught(pristine_copy: Path) -> None:
    """The acceptance property: flip one byte anywhere in any block or data file, and verify
    fails with an error that names the affected block."""
    entries, referenced = chain_info(pristine_copy)
    by_hash = {str(e.hash): e.block.sequence_number for e in entries}
    before = snapshot_tree(pristine_copy)
    cases = 0

    def check(path: Path, pos: int, seq: int, block_hash: str) -> None:
        nonlocal cases
        original = _flip(path, pos)
        try:
            report = verify_path(pristine_copy)
        finally:
            path.write_bytes(original)
        cases += 1
        where = f"{path.relative_to(pristine_copy)} byte {pos}"
        assert not report.ok, where
        lines = [p.line() for p in report.errors]
        assert any(block_hash in line or f"block {seq} " in line for line in lines), (where, lines)

    for path in sorted((pristine_copy / "blocks").iterdir()):
        size = path.stat().st_size
        assert size <= 1536  # every position of every block, and still fast (the largest, a
        # SetDataSchema with both of its forms, is about 1.1 kB)
        for pos in range(size):
            check(path, pos, by_hash[path.name], path.name)
    for path in sorted((pristine_copy / "data").iterdir()):
        seq, block_hash = referenced[path.name]
        for pos in _positions(path.stat().st_size, 50):
            check(path, pos, seq, block_hash)

    block_bytes = sum(p.stat().st_size for p in (pristine_copy / "blocks").iterdir())
    assert cases >= block_bytes + 4 * 50
    assert snapshot_tree(pristine_copy) == before
    assert verify_path(pristine_copy).ok


def test_flipped_data_byte_names_block_and_file(pristine_copy: Path) -> None:
    _, referenced = chain_info(pristine_copy)
    name, (seq, block_hash) = sorted(referenced.items())[0]
    _flip(pristine_copy / "data" / name, 100)
    (problem,) = verify_path(pristine_copy).errors
    assert problem.rule == "data-hash"
    assert (problem.sequence_number, problem.block_hash, problem.path) == (
        seq,
        block_hash,
        f"data/{name}",
    )


@pytest.mark.parametrize("algorithm", ["sha3-256"])
def test_flips_caught_in_sha3_datasets(tmp_path: Path, algorithm: str) -> None:
    root = tmp_path / "ds"
    build(root, algorithm)
    assert verify_path(root).problems == []
    entries, referenced = chain_info(root)
    targets = [(root / "blocks" / str(e.hash), str(e.hash)) for e in entries]
    targets += [(root / "data" / n, h) for n, (_, h) in referenced.items()]
    for path, block_hash in targets:
        for pos in (0, path.stat().st_size // 2, path.stat().st_size - 1):
            original = _flip(path, pos)
            report = verify_path(root)
            path.write_bytes(original)
            assert not report.ok
            assert any(block_hash in p.line() for p in report.errors)


# -- what check_data skips ------------------------------------------------------------------------


def test_check_data_false_skips_data(pristine_copy: Path) -> None:
    _, referenced = chain_info(pristine_copy)
    for name in referenced:
        (pristine_copy / "data" / name).unlink()
    full = verify_path(pristine_copy)
    assert not full.ok
    assert {p.rule for p in full.errors} == {"data-missing"}
    assert len(full.errors) == 4
    blocks_only = verify_path(pristine_copy, check_data=False)
    assert blocks_only.ok and blocks_only.problems == []
    assert blocks_only.slices_checked == 0
    block_bytes = sum(p.stat().st_size for p in (pristine_copy / "blocks").iterdir())
    assert blocks_only.bytes_hashed == block_bytes
    assert Dataset.open(pristine_copy).verify(check_data=False).ok


def test_check_data_false_still_catches_block_damage(pristine_copy: Path) -> None:
    head = (pristine_copy / "refs" / "head").read_text().strip()
    _flip(pristine_copy / "blocks" / head, 40)
    report = verify_path(pristine_copy, check_data=False)
    assert not report.ok
    assert any(p.block_hash == head for p in report.errors)


# -- leftovers are warnings -----------------------------------------------------------------------


def test_orphan_data_file_is_a_warning(pristine_copy: Path) -> None:
    stray = b"not referenced by any block"
    name = multihash_name(stray)
    (pristine_copy / "data" / name).write_bytes(stray)
    report = verify_path(pristine_copy)
    assert report.ok
    (warning,) = report.warnings
    assert (warning.severity, warning.rule, warning.path) == (
        "warning",
        "orphan-data",
        f"data/{name}",
    )
    assert warning.line().startswith("WARNING ") and f"data/{name}" in warning.line()


def test_orphan_block_is_a_warning(pristine_copy: Path, tmp_path: Path) -> None:
    other = Dataset.create(tmp_path / "other")
    (seed,) = other.blocks()
    shutil.copy(tmp_path / "other" / "blocks" / str(seed.hash), pristine_copy / "blocks")
    report = verify_path(pristine_copy)
    assert report.ok
    (warning,) = report.warnings
    assert (warning.rule, warning.block_hash) == ("orphan-block", str(seed.hash))
    assert warning.path == f"blocks/{seed.hash}"


def test_staging_leftover_is_a_warning(pristine_copy: Path) -> None:
    staging = pristine_copy / ".staging"
    staging.mkdir(exist_ok=True)
    (staging / "data.abc123.parquet").write_bytes(b"half a file")
    report = verify_path(pristine_copy)
    assert report.ok
    (warning,) = report.warnings
    assert (warning.rule, warning.path) == ("staging-leftover", ".staging/data.abc123.parquet")


def test_all_leftovers_together(pristine_copy: Path, tmp_path: Path) -> None:
    (pristine_copy / "data" / multihash_name(b"x")).write_bytes(b"x")
    other = Dataset.create(tmp_path / "other")
    (seed,) = other.blocks()
    shutil.copy(tmp_path / "other" / "blocks" / str(seed.hash), pristine_copy / "blocks")
    (pristine_copy / ".staging").mkdir(exist_ok=True)
    (pristine_copy / ".staging" / "leftover").write_bytes(b"")
    report = verify_path(pristine_copy)
    assert report.ok
    assert sorted(p.rule for p in report.warnings) == [
        "orphan-block",
        "orphan-data",
        "staging-leftover",
    ]
    assert report.to_dict()["warnings"] == 3 and report.to_dict()["errors"] == 0


# -- slices that hash fine but do not hold what their block says -----------------------------------


def _append_file_slice(ds: Dataset, data: bytes, start: int, end: int) -> tuple[str, str]:
    """Store ``data`` as a slice under its true hash and append an AddData naming it."""
    name = multihash_name(data)
    (ds.path / "data" / name).write_bytes(data)
    entry = ds.append(
        AddData(
            prev_offset=ds.state.last_offset,
            new_data=DataSlice(
                logical_hash=Multihash.from_multibase(name),
                physical_hash=Multihash.from_multibase(name),
                offset_interval=OffsetInterval(start, end),
                size=len(data),
            ),
            new_watermark=ds.state.watermark,
        )
    )
    return name, str(entry.hash)


def _parquet_bytes(table: pa.Table, tmp_path: Path) -> bytes:
    path = tmp_path / "slice.parquet"
    pq.write_table(table, path)
    return path.read_bytes()


def test_row_count_mismatch(pristine_copy: Path, tmp_path: Path) -> None:
    ds = Dataset.open(pristine_copy)
    schema = ds.state.schema
    # a slice with the right columns but 2 rows, declared as offsets 7..9 (3 rows)
    rows = {
        "offset": [7, 8],
        "op": [0, 0],
        "system_time": [datetime(2024, 5, 1, tzinfo=UTC)] * 2,
        "event_time": [datetime(2024, 5, 1, tzinfo=UTC)] * 2,
        "id": [8, 9],
        "name": ["x", "y"],
        "score": [None, None],
    }
    data = _parquet_bytes(pa.table(rows, schema=schema), tmp_path)
    name, block_hash = _append_file_slice(ds, data, 7, 9)
    (problem,) = verify_path(pristine_copy).errors
    assert (problem.rule, problem.block_hash, problem.path) == (
        "data-rows",
        block_hash,
        f"data/{name}",
    )
    assert "3 rows" in problem.message and "2" in problem.message


def test_columns_differ_from_schema(pristine_copy: Path, tmp_path: Path) -> None:
    ds = Dataset.open(pristine_copy)
    data = _parquet_bytes(pa.table({"id": pa.array([8], pa.int64())}), tmp_path)
    name, block_hash = _append_file_slice(ds, data, 7, 7)
    (problem,) = verify_path(pristine_copy).errors
    assert (problem.rule, problem.block_hash, problem.path) == (
        "data-schema",
        block_hash,
        f"data/{name}",
    )


def test_slice_that_is_not_parquet(pristine_copy: Path) -> None:
    ds = Dataset.open(pristine_copy)
    name, block_hash = _append_file_slice(ds, b"definitely not parquet", 7, 7)
    (problem,) = verify_path(pristine_copy).errors
    assert (problem.rule, problem.block_hash, problem.path) == (
        "data-format",
        block_hash,
        f"data/{name}",
    )


# -- the report ------------------------------------------------------------------------------------


def test_report_to_dict(pristine_copy: Path) -> None:
    _, referenced = chain_info(pristine_copy)
    name, (seq, block_hash) = sorted(referenced.items())[-1]
    (pristine_copy / "data" / name).unlink()
    report = verify_path(pristine_copy)
    d = report.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert set(d) == {
        "dataset",
        "ok",
        "head",
        "blocks_checked",
        "slices_checked",
        "bytes_hashed",
        "deep",
        "rows_checked",
        "errors",
        "warnings",
        "problems",
    }
    assert (d["deep"], d["rows_checked"]) == (False, 0)
    assert d["dataset"] == str(pristine_copy)
    assert d["ok"] is False
    assert d["head"] == (pristine_copy / "refs" / "head").read_text().strip()
    assert (d["blocks_checked"], d["slices_checked"], d["errors"], d["warnings"]) == (7, 4, 1, 0)
    block_bytes = sum(p.stat().st_size for p in (pristine_copy / "blocks").iterdir())
    data_bytes = sum(p.stat().st_size for p in (pristine_copy / "data").iterdir())
    assert d["bytes_hashed"] == block_bytes + data_bytes
    assert d["problems"] == [
        {
            "severity": "error",
            "rule": "data-missing",
            "message": "data slice file is missing",
            "sequence_number": seq,
            "block_hash": block_hash,
            "path": f"data/{name}",
        }
    ]


def test_report_ok_reflects_errors_only() -> None:
    report = VerifyReport(dataset="x")
    assert report.ok
    report.add("warning", "orphan-data", "w", path="data/f")
    assert report.ok and report.to_dict()["ok"] is True
    report.add("error", "block-hash", "e", sequence_number=3, block_hash="fab")
    assert not report.ok
    assert report.problems[-1].line() == "ERROR block 3 fab: [block-hash] e"


# -- verify reports what the filesystem refuses; it never raises -----------------------------------


def test_missing_data_directory(pristine_copy: Path) -> None:
    _, referenced = chain_info(pristine_copy)
    shutil.rmtree(pristine_copy / "data")
    report = verify_path(pristine_copy)
    assert not report.ok
    layout = [p for p in report.errors if p.rule == "layout"]
    assert len(layout) == 1 and layout[0].path == "data/"
    missing = sorted(p.path for p in report.errors if p.rule == "data-missing")
    assert missing == sorted(f"data/{name}" for name in referenced)
    assert len(report.errors) == 1 + len(referenced)
    assert report.blocks_checked == 7
    report = verify_path(pristine_copy, check_data=False)
    assert [p.rule for p in report.problems] == ["layout"]


def test_head_that_is_a_directory(pristine_copy: Path) -> None:
    (pristine_copy / "refs" / "head").unlink()
    (pristine_copy / "refs" / "head").mkdir()
    report = verify_path(pristine_copy)
    assert not report.ok
    head = [p for p in report.errors if p.rule == "head"]
    assert len(head) == 1 and head[0].path == "refs/head"
    assert str(pristine_copy / "refs" / "head") in head[0].message
    # every block is then unreferenced: reported, not raised; the slices they name stay theirs
    assert {p.rule for p in report.warnings} == {"orphan-block"}
    assert len(report.uncommitted) == len(list((pristine_copy / "blocks").iterdir()))


def test_data_file_whose_read_fails(pristine_copy: Path) -> None:
    """A slice that is a symlink (here to /proc/self/mem, whose read fails with EIO) is
    reported, not raised, and not followed: nothing is read from its target."""
    _, referenced = chain_info(pristine_copy)
    name, (seq, block_hash) = sorted(referenced.items())[0]
    (pristine_copy / "data" / name).unlink()
    (pristine_copy / "data" / name).symlink_to("/proc/self/mem")
    report = verify_path(pristine_copy)
    problems = [p for p in report.errors if p.path == f"data/{name}"]
    assert [p.rule for p in problems] == ["data-unreadable"]
    assert (problems[0].sequence_number, problems[0].block_hash) == (seq, block_hash)
    assert str(pristine_copy / "data" / name) in problems[0].message
    assert "symlink" in problems[0].message
    assert len(report.errors) == 1


@pytest.mark.skipif(not PERMISSIONS, reason="permission bits do not stop this user")
def test_data_file_without_read_permission(pristine_copy: Path) -> None:
    _, referenced = chain_info(pristine_copy)
    name, (_, block_hash) = sorted(referenced.items())[0]
    (pristine_copy / "data" / name).chmod(0)
    report = verify_path(pristine_copy)
    (problem,) = report.errors
    assert (problem.rule, problem.path, problem.block_hash) == (
        "data-unreadable",
        f"data/{name}",
        block_hash,
    )
    assert str(pristine_copy / "data" / name) in problem.message


@pytest.mark.skipif(not PERMISSIONS, reason="permission bits do not stop this user")
def test_unlistable_data_directory(pristine_copy: Path) -> None:
    (pristine_copy / "data").chmod(0o300)  # writable, not listable
    try:
        report = verify_path(pristine_copy)
    finally:
        (pristine_copy / "data").chmod(0o755)
    assert [p.rule for p in report.errors] == ["layout"]


# -- which block, which problems -------------------------------------------------------------------


def test_truncated_block_reports_hash_and_format(pristine_copy: Path) -> None:
    """The hash is checked before decoding: a block that does not decode is also reported as
    not matching its name, and it is not mistaken for a leftover."""
    entries, _ = chain_info(pristine_copy)
    damaged = entries[3]
    path = pristine_copy / "blocks" / str(damaged.hash)
    path.write_bytes(path.read_bytes()[:-7])
    report = verify_path(pristine_copy)
    located = [
        (p.rule, p.sequence_number) for p in report.errors if p.block_hash == str(damaged.hash)
    ]
    assert located == [("block-hash", 3), ("block-format", 3)]
    assert "chain-incomplete" in {p.rule for p in report.errors}
    orphans = {p.block_hash for p in report.warnings if p.rule == "orphan-block"}
    assert str(damaged.hash) not in orphans
    # the blocks below it could not be reached, so they are listed, saying why
    assert orphans == {str(e.hash) for e in entries[:3]}
    assert all("stopped" in p.message for p in report.warnings if p.rule == "orphan-block")


def test_truncated_head_is_named_as_the_head(pristine_copy: Path) -> None:
    head = (pristine_copy / "refs" / "head").read_text().strip()
    path = pristine_copy / "blocks" / head
    path.write_bytes(path.read_bytes()[:10])
    report = verify_path(pristine_copy)
    located = [p for p in report.errors if p.block_hash == head]
    assert [p.rule for p in located] == ["block-hash", "block-format"]
    for problem in located:
        assert problem.sequence_number is None
        assert problem.message.startswith("head block: ")
        assert problem.line().startswith(f"ERROR {head}: [{problem.rule}] head block: ")
    assert head not in {p.block_hash for p in report.warnings}


def test_unreadable_head_is_named_as_the_head(pristine_copy: Path) -> None:
    head = (pristine_copy / "refs" / "head").read_text().strip()
    (pristine_copy / "blocks" / head).unlink()
    (pristine_copy / "blocks" / head).mkdir()
    report = verify_path(pristine_copy)
    (problem,) = [p for p in report.errors if p.block_hash == head]
    assert problem.rule == "block-unreadable"
    assert problem.sequence_number is None and problem.message.startswith("head block: ")


# -- blocks that descend from the head: an interrupted write, or a head moved backwards ------------


def _descendant_warnings(report: VerifyReport) -> list:
    return [p for p in report.warnings if p.rule == "unreferenced-descendants"]


def test_head_rolled_back(pristine_copy: Path) -> None:
    entries, referenced = chain_info(pristine_copy)
    old_head = entries[3]
    (pristine_copy / "refs" / "head").write_text(str(old_head.hash))
    # the head log knows block 6 was the head: an error (tests/test_safety.py has more)
    report = verify_path(pristine_copy)
    assert [p.rule for p in report.errors] == ["head-rollback"]
    # a dataset from before the head log: only the descendants heuristic, a warning
    shutil.rmtree(pristine_copy / "logs")
    report = verify_path(pristine_copy)
    assert report.ok and report.blocks_checked == 4
    (warning,) = _descendant_warnings(report)
    assert (warning.block_hash, warning.sequence_number) == (str(old_head.hash), 3)
    assert "3 unreferenced blocks descend from the head" in warning.message
    assert "rolled back" in warning.message and "at most two" in warning.message
    assert "4..6" in warning.message
    assert not [p for p in report.warnings if p.rule == "orphan-block"]
    # the rolled-back blocks' slices are kept with them, not reported as orphans
    later_slices = {n for n, (seq, _) in referenced.items() if seq > 3}
    assert later_slices and not [p for p in report.warnings if p.rule == "orphan-data"]
    assert {n for names in report.descendants.values() for n in names} == later_slices


def test_interrupted_write_leaves_one_descendant(pristine_copy: Path, tmp_path: Path) -> None:
    from odf_chain import chain
    from odf_chain.events import SetInfo

    ds = Dataset.open(pristine_copy)
    prepared = chain.prepare(ds.state, SetInfo(description="never made it"))
    ds.storage.write_block(str(prepared.entry.hash), prepared.data)  # the head never moved
    other = Dataset.create(tmp_path / "other")  # and an unrelated leftover
    (seed,) = other.blocks()
    shutil.copy(tmp_path / "other" / "blocks" / str(seed.hash), pristine_copy / "blocks")
    report = verify_path(pristine_copy)
    assert report.ok
    (warning,) = _descendant_warnings(report)
    assert warning.message.startswith("1 unreferenced block descends from the head")
    assert str(prepared.entry.hash) in warning.message
    orphans = [p.block_hash for p in report.warnings if p.rule == "orphan-block"]
    assert orphans == [str(seed.hash)]
    assert len(report.warnings) == 2


def test_damaged_descendant_is_a_plain_orphan(pristine_copy: Path) -> None:
    entries, _ = chain_info(pristine_copy)
    (pristine_copy / "refs" / "head").write_text(str(entries[5].hash))
    shutil.rmtree(pristine_copy / "logs")  # from before the head log: rollback is a heuristic
    path = pristine_copy / "blocks" / str(entries[6].hash)
    path.write_bytes(path.read_bytes()[:-1])
    report = verify_path(pristine_copy)
    assert report.ok
    assert _descendant_warnings(report) == []
    assert [p.block_hash for p in report.warnings if p.rule == "orphan-block"] == [
        str(entries[6].hash)
    ]


def test_slices_hashed_ahead_are_reported_in_chain_order(tmp_path: Path) -> None:
    """Slices are hashed a few ahead, in threads: problems still come in chain order, each
    named by its own block, and every file opened ahead is closed."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    for i in range(12):
        ds.write(pa.table({"id": pa.array([i, i + 100], pa.int64())}))
    slices = [
        (
            entry.block.sequence_number,
            str(entry.hash),
            str(entry.block.event.new_data.physical_hash),
        )
        for entry in ds.blocks()
        if isinstance(entry.block.event, AddData)
    ]
    damaged = {1: "data-missing", 5: "data-hash", 6: "data-size", 10: "data-missing"}
    for k, rule in damaged.items():
        path = root / "data" / slices[k][2]
        if rule == "data-missing":
            path.unlink()
        elif rule == "data-hash":
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0x01
            path.write_bytes(bytes(data))
        else:
            path.write_bytes(path.read_bytes()[:-3])
    open_before = len(os.listdir("/proc/self/fd"))
    report = verify_path(root)
    assert len(os.listdir("/proc/self/fd")) == open_before
    # the truncated file is not the one the block names by its size: not hashed
    rules = {
        1: ["data-missing"],
        5: ["data-hash"],
        6: ["data-size"],
        10: ["data-missing"],
    }
    expected = [(rule, *slices[k][:2]) for k in sorted(rules) for rule in rules[k]]
    assert [(p.rule, p.sequence_number, p.block_hash) for p in report.errors] == expected
    assert report.slices_checked == 12


def test_a_slice_of_another_size_is_not_hashed(tmp_path: Path) -> None:
    """A slice whose size is not the block's is reported by its size alone, unread: a sparse
    file of terabytes (made in an instant, taking no disk) would otherwise keep verify hashing
    for hours. (256 MiB here, which the old way hashed in a second or two.)"""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    ds.write(pa.table({"id": pa.array([1, 2], pa.int64())}))
    ds.write(pa.table({"id": pa.array([3], pa.int64())}))
    (entry, *_) = [e for e in ds.blocks() if isinstance(e.block.event, AddData)]
    path = root / "data" / str(entry.block.event.new_data.physical_hash)
    with path.open("r+b") as f:
        f.truncate(1 << 28)
    report = verify_path(root)
    assert [(p.rule, p.sequence_number) for p in report.errors] == [
        ("data-size", entry.block.sequence_number)
    ]
    assert f"found {1 << 28:,}" in report.errors[0].message
    assert report.bytes_hashed < 1 << 20, report.bytes_hashed


def _forged_slice(root: Path, table: pa.Table, edit=None) -> int:
    """Append by hand (as anyone with write access can) an AddData whose slice is ``table``
    written as Parquet (bytes changed by ``edit``), its hashes and size right: the block's
    sequence number."""
    import io

    from odf_chain.chain import prepare

    state = Dataset.open(root).state
    buffer = io.BytesIO()
    pq.write_table(table, buffer, store_schema=False)
    data = buffer.getvalue() if edit is None else edit(buffer.getvalue())
    name = Multihash.digest("blake3", data)
    (root / "data" / str(name)).write_bytes(data)
    start = state.next_offset
    interval = OffsetInterval(start, start + table.num_rows - 1)
    event = AddData(
        prev_offset=state.last_offset,
        new_data=DataSlice(name, name, interval, len(data)),
        new_watermark=state.watermark,
    )
    prepared = prepare(state, event)
    (root / "blocks" / str(prepared.entry.hash)).write_bytes(prepared.data)
    (root / "refs" / "head").write_text(str(prepared.entry.hash))
    return prepared.entry.block.sequence_number


def test_crafted_slices_are_reported_not_crashed_on(tmp_path: Path) -> None:
    """A slice whose Parquet footer names a column in bytes that are not UTF-8, and one with
    the offset column twice: errors naming the block, with and without --deep (each crashed
    verify: UnicodeDecodeError, KeyError)."""
    root = tmp_path / "ds"
    Dataset.create(root).write(pa.table({"id": pa.array([1], pa.int64())}))
    seq = _forged_slice(
        root,
        pa.table({"zzzq": pa.array([1], pa.int64())}),
        edit=lambda data: data.replace(b"zzzq", b"zz\xff\xfe"),
    )
    for deep in (False, True):
        report = verify_path(root, deep=deep)
        assert not report.ok and {p.sequence_number for p in report.errors} == {seq}, deep
    root = tmp_path / "twice"
    Dataset.create(root).write(pa.table({"id": pa.array([1], pa.int64())}))
    columns = [pa.array([1], pa.int64()), pa.array([1], pa.int64()), pa.array([0], pa.int32())]
    seq = _forged_slice(root, pa.table(columns, names=["offset", "offset", "op"]))
    for deep in (False, True):
        report = verify_path(root, deep=deep)
        assert not report.ok and {p.sequence_number for p in report.errors} == {seq}, deep
    assert any("more than one 'offset' column" in p.message for p in report.errors)


def test_a_rollback_whose_logged_time_is_past_year_9999_is_still_reported(tmp_path: Path):
    """The head log's grammar allows 15-digit times; formatting one crashed verify and lost
    the report (a rollback among it)."""
    root = tmp_path / "ds"
    ds = Dataset.create(root)
    ds.write(pa.table({"id": pa.array([1], pa.int64())}))
    previous = ds.state.head
    ds.write(pa.table({"id": pa.array([2], pa.int64())}))
    lines = (root / "logs" / "head").read_text().splitlines()
    old, new, _ = lines[-1].split()
    lines[-1] = f"{old} {new} 999999999999999"
    (root / "logs" / "head").write_text("\n".join(lines) + "\n")
    (root / "refs" / "head").write_text(str(previous))
    report = verify_path(root)
    assert [p.rule for p in report.errors] == ["head-rollback"]
    assert "999999999999999 ms after 1970" in report.errors[0].message
