"""Issue 20: a cache is never a source of truth. A consistent forgery of the derived index
(records pointing at a fork's genuine blocks with their checksums fixed, the head snapshot's
transactions, its counters) must never make a read or a transactional write disagree with a
full fold of the chain while ``chain-verify`` passes.

Every expected answer comes from the full fold (``replay.load_chain`` + ``replay.fold``) or
from the rows as written, never from the code under test.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain import replay
from odf_chain.dataset import Dataset
from odf_chain.index import read as index_read
from odf_chain.index.records import SEQ_RECORD_BYTES, Snapshot
from odf_chain.storage import open_storage
from odf_chain.verify import verify_path
from tests.cli_run import run_main

INDEX = Path("info") / "odf-chain-index"


def rows(*names: str) -> pa.Table:
    return pa.table({"name": list(names)})


def full_fold_at(root: Path, seq: int):
    entries = replay.load_chain(open_storage(root))
    return replay.fold(entries[: seq + 1])


def names_read(table: pa.Table) -> list[str]:
    return table.sort_by("offset").column("name").to_pylist()


@pytest.fixture(scope="module")
def forged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12-block chain (Seed, schema, ten slices s0..s9) whose index names, for blocks 6..10,
    the genuine blocks of a fork (FORK0 with a new column, FORK1, ...) made on block 5, with
    every checksum valid: the forgery the issue describes."""
    root = tmp_path_factory.mktemp("trust") / "ds"
    ds = Dataset.create(root)
    for i in range(10):
        ds.write(rows(f"s{i}"))
    entries = ds.blocks()
    assert len(entries) == 12
    head, log = (root / "refs" / "head").read_text(), (root / "logs" / "head").read_bytes()
    # the fork: on block 5, written as a writer would (the head log set aside meanwhile)
    (root / "refs" / "head").write_text(str(entries[5].hash))
    (root / "logs" / "head").unlink()
    fork = Dataset.open(root)
    fork.write(pa.table({"name": ["FORK0"], "extra": [1]}), evolve=True)  # blocks 6 and 7
    for name in ("FORK1", "FORK2", "FORK3"):
        fork.write(rows(name))  # blocks 8, 9, 10
    fork.flush()  # the index records of its last commits, which the handle deferred
    segment = (root / INDEX / "seq-00000000").read_bytes()
    forged_records = segment[6 * SEQ_RECORD_BYTES : 11 * SEQ_RECORD_BYTES]
    # head and head log put back; the index rebuilt for the real chain, then forged
    (root / "refs" / "head").write_text(head)
    (root / "logs" / "head").write_bytes(log)
    index_read.rebuild(open_storage(root), save=True)
    path = root / INDEX / "seq-00000000"
    genuine = path.read_bytes()
    path.write_bytes(
        genuine[: 6 * SEQ_RECORD_BYTES] + forged_records + genuine[11 * SEQ_RECORD_BYTES :]
    )
    return root


@pytest.fixture()
def forged_copy(forged: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ds"
    shutil.copytree(forged, target, symlinks=True)
    return target


def test_the_forgery_is_what_the_issue_describes(forged_copy: Path) -> None:
    """The fast path still takes ancestry from the index (it cannot prove it without a fold):
    that is the forgery verify must fail on."""
    fast = Dataset.open(forged_copy).state_at(8)
    assert "extra" in fast.schema.names  # the fork's column: the index answered from the fork


def test_verify_fails_on_an_index_naming_another_branch(forged_copy: Path) -> None:
    report = verify_path(forged_copy, check_data=True)
    assert not report.ok
    mismatches = [p for p in report.errors if p.rule == "index-mismatch"]
    assert {p.sequence_number for p in mismatches} >= {6, 7, 8, 9, 10}, [
        p.line() for p in report.problems
    ]
    p = run_main([str(forged_copy)], entry="chain-verify")
    assert p.returncode != 0 and "index-mismatch" in p.stdout + p.stderr


def test_data_reads_are_proved_against_the_chain(forged_copy: Path) -> None:
    ds = Dataset.open(forged_copy)
    want = [f"s{i}" for i in range(7)]
    assert names_read(ds.to_table(at=8)) == want  # the fork's rows were returned before
    assert "extra" not in ds.to_table(at=8).schema.names
    assert names_read(ds.to_table(at=10)) == [f"s{i}" for i in range(9)]
    assert names_read(ds.to_table()) == [f"s{i}" for i in range(10)]


def test_verified_reads_answer_from_the_full_fold(forged_copy: Path) -> None:
    ds = Dataset.open(forged_copy)
    for seq in range(6, 11):
        truth = full_fold_at(forged_copy, seq)
        got = ds.state_at(seq, verified=True)
        assert (got.head, got.sequence_number) == (truth.head, truth.sequence_number)
        assert got.schema.equals(truth.schema, check_metadata=True)
    assert [c.entry.hash for c in ds.schema_history(verified=True)] == [
        c.entry.hash for c in Dataset.open(forged_copy).schema_history()
    ]
    # a verified read writes nothing; odf-chain index --rebuild replaces the forgery
    assert "extra" in Dataset.open(forged_copy).state_at(8).schema.names
    index_read.check_index(str(forged_copy), from_scratch=True)
    assert "extra" not in Dataset.open(forged_copy).state_at(8).schema.names
    assert verify_path(forged_copy, check_data=False).ok


@pytest.mark.parametrize("command", ["schema", "fields"])
def test_cli_verified_reads(forged_copy: Path, command: str) -> None:
    fast = run_main([command, str(forged_copy), "--at", "8"])
    assert fast.returncode == 0 and "extra" in fast.stdout  # what verify fails on
    proved = run_main([command, str(forged_copy), "--at", "8", "--verified"])
    assert proved.returncode == 0, proved.stderr
    assert "extra" not in proved.stdout and "name" in proved.stdout


# -- the head snapshot's values -------------------------------------------------------------------


def write_head_snapshot(root: Path, snapshot: Snapshot) -> None:
    (root / INDEX / "head").write_bytes(snapshot.encode())


def head_snapshot(root: Path) -> Snapshot:
    return Snapshot.decode((root / INDEX / "head").read_bytes(), "head")


@pytest.fixture()
def transactional(tmp_path: Path) -> Path:
    root = tmp_path / "tx"
    ds = Dataset.create(root)
    for version in range(1, 11):
        ds.write(rows(f"v{version}"), transaction=("app", version))
    ds.write(rows("plain"))
    assert Dataset.open(root).state.sequence_number == 12  # the index names the head
    return root


def test_a_forged_transaction_version_does_not_drop_a_write(transactional: Path) -> None:
    genuine = head_snapshot(transactional)
    (app,) = genuine.transactions
    write_head_snapshot(transactional, replace(genuine, transactions=(("app", 1000, app[2]),)))
    assert not verify_path(transactional, check_data=False).ok  # the lie is an error
    ds = Dataset.open(transactional)
    written = ds.write(rows("v11"), transaction=("app", 11))
    assert written, "a cache decided that a write does not happen"
    assert names_read(ds.to_table())[-1] == "v11"
    assert dict(ds.state.transactions) == {"app": 11}
    report = verify_path(transactional)
    assert report.ok and not report.errors, [p.line() for p in report.problems]


@pytest.mark.parametrize(
    "forgery",
    [
        lambda t: (),  # the app id never seen
        lambda t: (("app", 3, t[2]),),  # an older version, where the newest was recorded
        lambda t: (("app", 10, t[2] - 1),),  # the right version, said of another block
    ],
)
def test_a_forged_transaction_version_does_not_duplicate_a_write(
    transactional: Path, forgery
) -> None:
    genuine = head_snapshot(transactional)
    (app,) = genuine.transactions
    write_head_snapshot(transactional, replace(genuine, transactions=forgery(app)))
    ds = Dataset.open(transactional)
    before = ds.state.head
    assert ds.write(rows("v10 again"), transaction=("app", 10)) == []  # a retry: skipped
    assert Dataset.open(transactional).state.head == before
    report = verify_path(transactional)  # the forgery is still there (readers never write) ...
    assert {p.rule for p in report.errors} == {"index-mismatch"}
    index_read.check_index(str(transactional), from_scratch=True)
    assert verify_path(transactional).ok  # ... until odf-chain index --rebuild


def test_a_forged_slice_count_is_not_believed(transactional: Path) -> None:
    genuine = head_snapshot(transactional)
    write_head_snapshot(transactional, replace(genuine, num_slices=genuine.num_slices + 1))
    assert not verify_path(transactional, check_data=False).ok
    got = names_read(Dataset.open(transactional).to_table())
    assert got == [f"v{v}" for v in range(1, 11)] + ["plain"]
