"""Idempotent ingest (issue 9, item 6): the same input twice appends its rows once, and a
retried job that passes the same ``transaction=(app_id, version)`` appends nothing twice.

The rule ``transaction-version`` is exercised below the writers (``chain.prepare``, and blocks
written straight to storage for verify), so that the rule, not the writers' own check, is what
refuses them.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import blake3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from odf_chain import chain
from odf_chain.dataset import Dataset
from odf_chain.errors import ConflictError, NotFoundError, RuleViolation
from odf_chain.events import AddData
from odf_chain.format.codec import encode_block
from odf_chain.format.multihash import Multihash
from odf_chain.replay import ingested_inputs
from odf_chain.slices import add_data_for
from odf_chain.state import SOURCE_KEY, TRANSACTION_KEY, lineage_of
from odf_chain.verify import verify_path
from tests.cli_run import run_ingest
from tests.helpers import snapshot_tree

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


def adds(dataset: Dataset) -> list:
    return [e for e in dataset.blocks() if isinstance(e.block.event, AddData)]


def stored_rows(path: Path) -> list[int]:
    """The ``id`` column of every slice the chain names, in offset order (pyarrow, not odf_chain's
    readers)."""
    ids: list[int] = []
    for entry in adds(Dataset.open(path)):
        name = str(entry.block.event.new_data.physical_hash)
        ids += pq.read_table(path / "data" / name).column("id").to_pylist()
    return ids


def content_hash(path: Path) -> str:
    return "f1e20" + blake3.blake3(path.read_bytes()).hexdigest()


# -- Dataset.write(transaction=) ------------------------------------------------------------------


def test_dataset_write_skips_a_transaction_it_already_has(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    first = ds.write(ROWS, transaction=("job", 1))
    assert [e.block.event_name for e in first] == ["SetDataSchema", "AddData"]
    assert first[-1].block.event.extra == {TRANSACTION_KEY: {"app_id": "job", "version": 1}}

    before = snapshot_tree(tmp_path / "ds")
    assert ds.write(ROWS, transaction=("job", 1)) == []  # the retry
    assert ds.write(ROWS, transaction=["job", 0]) == []  # an older version
    assert Dataset.open(tmp_path / "ds").write(ROWS, transaction=("job", 1)) == []  # new handle
    assert snapshot_tree(tmp_path / "ds") == before  # not a file written

    assert len(ds.write(ROWS, transaction=("job", 2))) == 1
    assert len(ds.write(ROWS, transaction=("other", 1))) == 1
    assert len(ds.write(ROWS)) == 1  # no transaction: appended as always
    state = Dataset.open(tmp_path / "ds").state
    assert dict(state.transactions) == {"job": 2, "other": 1}
    assert state.num_records == 4 * 3
    assert stored_rows(tmp_path / "ds") == [1, 2, 3] * 4
    report = ds.verify()
    assert report.ok and not report.warnings, [p.line() for p in report.problems]


@pytest.mark.parametrize(
    ("transaction", "fragment"),
    [
        (("", 1), "app id must be a non-empty string"),
        ((7, 1), "app id must be a non-empty string"),
        (("job", -1), "version must be in 0.."),
        (("job", 2**63), "version must be in 0.."),
        (("job", True), "version must be an integer, found True"),
        (("job", 1.0), "version must be an integer"),
        (("job", "1"), "version must be an integer"),
        ("job", "takes a pair (app_id, version)"),
        (("job", 1, 2), "takes a pair (app_id, version)"),
    ],
)
def test_bad_transaction_arguments_are_refused_before_anything_is_written(
    tmp_path: Path, transaction, fragment: str
) -> None:
    ds = Dataset.create(tmp_path / "ds")
    before = snapshot_tree(tmp_path / "ds")
    with pytest.raises(RuleViolation, match=re.escape(fragment)) as caught:
        ds.write(ROWS, transaction=transaction)
    assert caught.value.rule == "transaction-version"
    assert snapshot_tree(tmp_path / "ds") == before


# -- the rule, below the writers ------------------------------------------------------------------


def _add_data(state, extra) -> AddData:
    """An AddData for three rows on top of ``state`` carrying ``extra`` (its slice is never read:
    chain.prepare checks rules only)."""
    digest = Multihash.digest("blake3", b"a slice")
    return add_data_for(
        state,
        physical_hash=digest,
        logical_hash=digest,
        size=7,
        num_rows=3,
        watermark=None,
        extra=extra,
    )


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"app_id": "job", "version": 5}, "expected a version above 5 for app id 'job'"),
        ({"app_id": "job", "version": 4}, "expected a version above 5 for app id 'job'"),
        ({"app_id": "", "version": 9}, "app id must be a non-empty string"),
        ({"version": 9}, "app id must be a non-empty string, found None"),
        ({"app_id": "job", "version": -1}, "version must be in 0.."),
        ({"app_id": "job", "version": True}, "version must be an integer"),
        ({"app_id": "job", "version": 9.5}, "version must be an integer"),
        ({"app_id": "job", "version": 2**63}, "version must be in 0.."),
        (["job", 9], "to be an object {app_id, version}"),
    ],
)
def test_the_rule_refuses_a_bad_or_repeated_version_on_append(
    tmp_path: Path, value, fragment: str
) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(ROWS, transaction=("job", 5))
    state = ds.state
    with pytest.raises(RuleViolation, match=re.escape(fragment)) as caught:
        chain.prepare(state, _add_data(state, {TRANSACTION_KEY: value}))
    assert caught.value.rule == "transaction-version"
    assert caught.value.sequence_number == state.sequence_number + 1
    # the same block with a higher version, or another app id, passes the rule
    for good in ({"app_id": "job", "version": 6}, {"app_id": "other", "version": 0}):
        after = chain.prepare(state, _add_data(state, {TRANSACTION_KEY: good})).after
        assert dict(after.transactions) == {"job": 5, good["app_id"]: good["version"]}


def test_verify_reports_a_version_that_does_not_increase(tmp_path: Path) -> None:
    """A chain whose last AddData repeats an earlier version (written straight to storage, as
    a tool that ignores the rule would) fails verify, at that block, by that rule."""
    path = tmp_path / "ds"
    ds = Dataset.create(path)
    ds.write(ROWS, transaction=("job", 1))
    ds.write(ROWS, transaction=("job", 2))
    (real,) = ds.write(ROWS, transaction=("job", 3))  # real data, then its block is rewritten
    forged = dataclasses.replace(
        real.block,
        event=dataclasses.replace(
            real.block.event, extra={TRANSACTION_KEY: {"app_id": "job", "version": 2}}
        ),
    )
    data = encode_block(forged)
    name = str(Multihash.digest("blake3", data))
    ds.storage.write_block(name, data)
    ds.storage.compare_and_swap_head(str(real.hash), name)

    report = verify_path(path)
    assert not report.ok
    # the head log also shows that the real last block was the head once (head-rollback)
    assert {e.rule for e in report.errors} == {"transaction-version", "head-rollback"}
    (error,) = [e for e in report.errors if e.rule == "transaction-version"]
    assert error.sequence_number == forged.sequence_number
    assert error.block_hash == name
    assert "expected a version above 2 for app id 'job'" in error.message
    # opening it folds the chain by the same rule, and refuses it
    with pytest.raises(RuleViolation, match="transaction-version"):
        _ = Dataset.open(path).state  # open only checks the head; the state is read lazily


# -- what the chain records as ingested -----------------------------------------------------------


def test_ingested_inputs_reads_the_sources_of_add_data(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(ROWS)  # a slice with no source
    state = ds.state

    def source(*hashes: str) -> dict:
        return {
            SOURCE_KEY: {
                "format": "csv",
                "inputs": [{"uri": f"file:///in/{h}.csv", "size": 1, "hash": h} for h in hashes],
            }
        }

    blocks = []
    for extra in (
        source("fa", "fb"),
        {SOURCE_KEY: {"inputs": "not a list"}},  # a caller's own source= shape names nothing
        {SOURCE_KEY: ["neither"]},
        source("fb", "fc"),  # fb again (--allow-duplicates): its first record is kept
    ):
        blocks.append(chain.prepare(state, _add_data(state, extra)))
        state = blocks[-1].after
    # a head move needs the slices it names in data/ (what _add_data says is there)
    (tmp_path / "ds" / "data" / str(Multihash.digest("blake3", b"a slice"))).write_bytes(b"a slice")
    chain.commit(ds.storage, *blocks)
    middle = blocks[1].entry

    found = ingested_inputs(ds.storage)
    assert {h: (i.sequence_number, i.uri) for h, i in found.items()} == {
        "fa": (3, "file:///in/fa.csv"),
        "fb": (3, "file:///in/fb.csv"),
        "fc": (6, "file:///in/fc.csv"),
    }
    assert found["fa"].block_hash == blocks[0].entry.hash
    # only what came after a block
    assert set(ingested_inputs(ds.storage, since=middle.hash)) == {"fb", "fc"}
    assert ingested_inputs(ds.storage, since=blocks[-1].entry.hash) == {}


# -- Spark: write(transaction=) -------------------------------------------------------------------


def _jobs_in_group(spark, group: str) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_spark_write_skips_a_transaction_it_already_has(spark, tmp_path: Path) -> None:
    from odf_chain.spark import write

    path = tmp_path / "ds"
    df = spark.range(0, 40, numPartitions=2)
    first = write(
        df, path, create=True, transaction=("job", 1), lineage=False, target_slice_bytes=None
    )
    assert first.skipped_transaction is None and first.rows == 40
    first_adds = adds(Dataset.open(path))
    assert len(first_adds) == 2  # two slices: the pair is on the first AddData only
    assert first_adds[0].block.event.extra == {TRANSACTION_KEY: {"app_id": "job", "version": 1}}
    assert first_adds[1].block.event.extra is None

    before = snapshot_tree(path)
    sc = spark.sparkContext
    sc.setJobGroup("odf-transaction-retry", "a retried write")
    try:
        again = write(df, path, transaction=("job", 1), lineage=False)
        ran = _jobs_in_group(spark, "odf-transaction-retry")
        after_retry = snapshot_tree(path)
        again2 = write(df, path, transaction=("job", 2), lineage=False, target_slice_bytes=None)
        assert again2.rows == 40
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert again.skipped_transaction == ("job", 1)
    assert (again.rows, again.slices, again.blocks) == (0, 0, [])
    assert again.head == first.head
    assert ran == []  # the retry ran no Spark job ...
    assert _jobs_in_group(spark, "odf-transaction-retry")  # ... the next version did
    assert after_retry == before  # not a file written
    assert len(adds(Dataset.open(path))) == 4

    assert write(df, path, transaction=("other", 1), lineage=False).rows == 40
    assert write(df, path, transaction=("other", 1), lineage=False).skipped_transaction
    dataset = Dataset.open(path)
    assert dict(dataset.state.transactions) == {"job": 2, "other": 1}
    assert sorted(stored_rows(path)) == sorted(list(range(40)) * 3)
    report = dataset.verify()
    assert report.ok and not report.warnings, [p.line() for p in report.problems]


def test_spark_write_refuses_a_bad_transaction_before_creating_anything(spark, tmp_path) -> None:
    from odf_chain.spark import write

    with pytest.raises(RuleViolation, match="app id must be a non-empty string"):
        write(spark.range(3), tmp_path / "new", create=True, transaction=("", 1))
    assert not (tmp_path / "new").exists()


# -- ingest_files: a writer that ingests the same file meanwhile ----------------------------------


class _Interleaved(Dataset):
    """A handle on which another writer ingests ``csv`` right when the write opens it (after
    ingest_files looked the inputs up): a deterministic interleaving of two real writers."""

    def interleave(self, spark, csv: Path) -> None:
        self.spark, self.csv, self.calls = spark, csv, 0

    def refresh(self):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 2:  # 1: ingest_files' lookup; 2: the write opening the dataset
            from odf_chain.spark.ingest import ingest_files

            ingest_files(self.spark, self.path, [str(self.csv)], "csv")
        return super().refresh()


def test_a_file_ingested_meanwhile_is_a_conflict_then_skipped(spark, tmp_path: Path) -> None:
    from odf_chain.spark.ingest import ingest_files

    csv = tmp_path / "a.csv"
    csv.write_text("id\n1\n2\n")
    path = tmp_path / "ds"
    Dataset.create(path)
    racing = _Interleaved.open(path)
    racing.interleave(spark, csv)
    with pytest.raises(ConflictError, match=r"ingested 1 of these input files meanwhile") as err:
        ingest_files(spark, racing, [str(csv)], "csv")
    assert "a.csv" in str(err.value) and "run it again" in str(err.value)
    assert stored_rows(path) == [1, 2]  # the other writer's rows, once

    done = ingest_files(spark, path, [str(csv)], "csv")  # run again: skipped
    assert done.result is None and [s.file.name for s in done.skipped] == ["a.csv"]
    assert stored_rows(path) == [1, 2]
    assert Dataset.open(path).verify().ok


def test_ingest_files_into_a_missing_dataset_needs_create(spark, tmp_path: Path) -> None:
    from odf_chain.spark.ingest import ingest_files

    csv = tmp_path / "a.csv"
    csv.write_text("id\n1\n")
    with pytest.raises(NotFoundError):
        ingest_files(spark, tmp_path / "none", [str(csv)], "csv")
    assert not (tmp_path / "none").exists()


# -- odf-chain ingest, by its main on the shared session -----------------------------------------


def ingest(spark, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command in this process on the shared SparkSession (tests/cli_run.py): a JVM per
    command run was the slow part of this suite, and the command's own Spark start is
    tests/test_cli.py's subject."""
    return run_ingest(spark, [*args, "--format", "csv", "--master", "local[1]"])


def ok(p: subprocess.CompletedProcess[str]) -> list[str]:
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    return p.stdout.splitlines()


def test_cli_the_same_csv_twice_is_ingested_once(spark, tmp_path: Path) -> None:
    """The command's second run skips; the first and the forced third go through the library
    call it makes."""
    from odf_chain.spark.ingest import ingest_files

    csv = tmp_path / "a.csv"
    csv.write_text("id,name\n1,x\n2,y\n")
    path = tmp_path / "ds"
    ingest_files(spark, path, [str(csv)], "csv", create=True)
    assert stored_rows(path) == [1, 2]
    (first,) = adds(Dataset.open(path))
    source = first.block.event.extra[SOURCE_KEY]
    assert [i["hash"] for i in source["inputs"]] == [content_hash(csv)]

    blocks = snapshot_tree(path / "blocks")
    head = (path / "refs" / "head").read_bytes()
    lines = ok(ingest(spark, path, csv))
    assert lines == [
        f"skipped 1 file already ingested at block {first.block.sequence_number} (a.csv): "
        "nothing appended"
    ]
    assert snapshot_tree(path / "blocks") == blocks
    assert (path / "refs" / "head").read_bytes() == head
    assert stored_rows(path) == [1, 2]

    forced = ingest_files(spark, path, [str(csv)], "csv", allow_duplicates=True)
    assert not forced.skipped and forced.result is not None and forced.result.rows == 2
    assert stored_rows(path) == [1, 2, 1, 2]
    assert Dataset.open(path).verify().ok


def test_cli_ingests_only_new_contents_and_each_once(spark, tmp_path: Path) -> None:
    from odf_chain.spark.ingest import ingest_files

    old, new, copy = tmp_path / "old.csv", tmp_path / "new.csv", tmp_path / "new-copy.csv"
    old.write_text("id\n1\n2\n")
    new.write_text("id\n3\n4\n5\n")
    copy.write_bytes(new.read_bytes())  # the same bytes under another name
    path = tmp_path / "ds"
    first = ingest_files(spark, path, [str(old)], "csv", create=True)
    at = first.result.blocks[-1].block.sequence_number

    lines = ok(ingest(spark, path, old, new, copy))
    assert lines[:3] == [
        f"skipped 1 file already ingested at block {at} (old.csv)",
        "skipped 1 file with the same content as an earlier input (new-copy.csv = new.csv)",
        "ingested   3 rows from 1 input file",
    ]
    assert stored_rows(path) == [1, 2, 3, 4, 5]
    last = adds(Dataset.open(path))[-1].block.event.extra[SOURCE_KEY]
    assert [(i["uri"].rsplit("/", 1)[-1], i["hash"]) for i in last["inputs"]] == [
        ("new.csv", content_hash(new))
    ]
    lineage = lineage_of([e.block.event for e in Dataset.open(path).blocks()][-1])
    assert lineage is not None
    assert [i.name for i in lineage.inputs] == ["new.csv"]
    assert Dataset.open(path).verify().ok


def test_state_fold_keeps_transactions_immutable(tmp_path: Path) -> None:
    ds = Dataset.create(tmp_path / "ds")
    ds.write(ROWS, transaction=("job", 1))
    versions = ds.state.transactions
    with pytest.raises(TypeError):
        versions["job"] = 5  # type: ignore[index]
    assert hash(ds.state) == hash(Dataset.open(tmp_path / "ds").state)  # hashable, by value
