"""The index rebuilt in bulk (verify's walk and fold, columns not objects) against the fold block
by block it replaces where the chain is sound; the fold still words what is wrong with a chain
that is not; what the walk keeps per block; and a rebuild on a terminal says what it does."""

# ruff: noqa: F811 (the fixtures rich and rich_copy are test_index's, imported by name)
from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from odf_chain.chain_walk import walk_chain
from odf_chain.errors import IntegrityError
from odf_chain.index import read as index_read, update as index_update
from odf_chain.storage import LocalStorage, block_pass, open_storage
from odf_chain.verify.report import VerifyReport
from tests.test_cli_ingest_phases import _read_all
from tests.test_index import INDEX, fold_states, index_files, rich, rich_copy, same_state  # noqa: F401
from tests.test_verify_columns import _run_events, _write_chain


@pytest.mark.parametrize("ahead", [False, True])
def test_the_bulk_rebuild_writes_byte_for_byte_what_the_fold_writes(
    rich_copy: Path, ahead: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ahead``: its files created empty while the chain is read (update.Prepared, from 65,536
    blocks on: here from the first), the ones not needed removed."""
    started: list[object] = []
    if ahead:
        monkeypatch.setattr(index_update, "PREPARE_MIN_BLOCKS", 1)
        start = index_update.Prepared.start
        monkeypatch.setattr(
            index_update.Prepared,
            "start",
            lambda *a: started.append(start(*a)) or started[-1],
        )
    storage = open_storage(rich_copy)
    shutil.rmtree(rich_copy / INDEX)
    by_fold = index_read._rebuild_by_fold(storage, storage_head(storage), save=True)
    assert by_fold._table is None
    folded = index_files(rich_copy)
    shutil.rmtree(rich_copy / INDEX)
    bulk = index_read.rebuild(storage, save=True)
    assert bulk._table is not None, "the rich chain is sound: the bulk path must have served"
    built = index_files(rich_copy)
    assert sorted(built) == sorted(folded) and len(built) > 6
    for name, data in folded.items():
        assert built[name] == data, name
    assert [p is not None for p in started] == ([True] if ahead else [])
    same_state(bulk.head, by_fold.head, "head")
    assert bulk.pointers == by_fold.pointers


def test_every_state_of_a_bulk_rebuild_equals_the_full_fold(rich_copy: Path) -> None:
    shutil.rmtree(rich_copy / INDEX)
    index = index_read.rebuild(open_storage(rich_copy))  # in memory only: a reader's
    assert index._table is not None and index_files(rich_copy) == {}
    _, states = fold_states(rich_copy)
    for seq in (0, 1, 5, 255, 256, 257, 300, 511, 512, len(states) - 2, len(states) - 1):
        same_state(index.state_at_seq(seq), states[seq], seq)
        assert index.entry(seq).block_hash == states[seq].head


def storage_head(storage):
    from odf_chain.chain import read_head

    return read_head(storage)


@pytest.mark.parametrize("ahead", [False, True])
def test_a_broken_chain_is_left_to_the_fold_which_names_the_block(
    rich_copy: Path, ahead: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if ahead:
        monkeypatch.setattr(index_update, "PREPARE_MIN_BLOCKS", 1)
    storage = open_storage(rich_copy)
    _, states = fold_states(rich_copy)
    damaged = rich_copy / "blocks" / str(states[300].head)
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    shutil.rmtree(rich_copy / INDEX)
    with pytest.raises(IntegrityError) as by_fold:
        index_read._rebuild_by_fold(storage, storage_head(storage), save=False)
    with pytest.raises(IntegrityError) as rebuilt:
        index_read.rebuild(storage, save=True)
    assert str(rebuilt.value) == str(by_fold.value) and str(states[300].head) in str(rebuilt.value)
    assert index_files(rich_copy) == {}  # nothing saved from a chain that does not hold


def test_the_walk_keeps_a_few_hundred_bytes_a_block_and_no_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What verify's walk (and a rebuild's) holds once it has read the chain, measured by the
    allocator's own count: columns, a name hash and a spill offset a block, not the blocks."""
    count = 6000
    root = tmp_path / "ds"
    _write_chain(root, _run_events(count))
    monkeypatch.setattr(block_pass, "CHUNK_FILES", 512)  # many chunks, as a long chain has
    monkeypatch.setattr(block_pass, "HELPER_MIN_FILES", 10**9)  # all of it in this process
    report = VerifyReport(dataset=str(root), deep=False)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        walk = walk_chain(LocalStorage(root), report)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert walk.complete and report.ok and len(walk.chain) == count + 2
    kept = (after - before) / count
    assert kept < 400, f"{kept:.0f} bytes a block kept after the walk"
    # one chunk's blocks (512 of ~500 bytes) at a time, whatever the length of the chain
    assert (peak - after) < 8 << 20, f"{(peak - after) >> 20} MiB above what the walk keeps"


def test_a_rebuild_on_a_terminal_says_what_it_does(rich_copy: Path) -> None:
    shutil.rmtree(rich_copy / INDEX)
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "odf_chain.cli", "index", str(rich_copy)],
        stdout=subprocess.PIPE,
        stderr=follower,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    os.close(follower)
    shown = _read_all(leader, process).decode("utf-8", "replace")
    stdout = process.stdout.read().decode()  # type: ignore[union-attr]
    assert process.wait(timeout=300) == 0, shown
    os.close(leader)
    lines = [re.sub(r"^\s*\d+\.\ds  ", "", line) for line in re.split(r"[\r\n]+", shown)]
    assert any("building its index (reading every block)" in line for line in lines), shown
    assert any(re.search(r"index of [\d,]+ blocks built and saved", line) for line in lines), shown
    assert "rebuilt" in stdout or "index of" in stdout, stdout
    # not on a pipe: the same command says nothing on stderr
    piped = subprocess.run(
        [sys.executable, "-m", "odf_chain.cli", "index", str(rich_copy), "--rebuild"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr


def test_checksums_in_columns_are_zlibs() -> None:
    """The bulk writers' CRC-32 of each record, a byte column at a time, against zlib's."""
    import zlib

    import numpy as np

    from odf_chain.index.records import crc32_rows

    rng = np.random.default_rng(25)
    for width in (0, 1, 16, 50):
        rows = rng.integers(0, 256, (300, width), dtype=np.uint8)
        rows[0] = 0  # all zeros
        rows[1] = 255
        assert crc32_rows(rows).tolist() == [zlib.crc32(r.tobytes()) for r in rows]
