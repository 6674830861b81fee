"""Issue 21: one write transaction. ``Dataset.write`` and the Spark writer go through
:class:`odf_chain.transaction.Transaction`, so they fail the same way at the same step: what is
left behind, and what verify says, are the same.

The failures are real: another writer (a real one, committing a real block) moves the head
between the slices being put in place and the head move, or the head log shows the head was
rolled back.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain import Dataset
from odf_chain.errors import ConflictError, RuleViolation
from odf_chain.events import SetInfo
from odf_chain.transaction import Transaction
from odf_chain.verify import verify_path

ROWS = pa.table({"station": ["a", "b", "c"], "temperature_c": [14.2, 13.9, 12.0]})


def files(root: Path) -> dict[str, list[str]]:
    """Every file of the dataset's blocks/, data/ and .staging/ (recursively), by folder."""
    out = {}
    for folder in ("blocks", "data", ".staging"):
        base = root / folder
        out[folder] = (
            sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file())
            if base.exists()
            else []
        )
    return out


def write_with(kind: str, spark) -> Callable[[Path], object]:
    if kind == "dataset":
        return lambda root: Dataset.open(root).write(ROWS)
    from odf_chain.spark import write

    frame = spark.createDataFrame(ROWS.to_pandas())
    return lambda root: write(frame, root, lineage=False, target_slice_bytes=None)


@pytest.fixture(params=["dataset", pytest.param("spark", marks=pytest.mark.spark)])
def writer(request) -> tuple[str, Callable[[Path], object]]:
    spark = request.getfixturevalue("spark") if request.param == "spark" else None
    return request.param, write_with(request.param, spark)


@pytest.fixture
def sensors(tmp_path: Path) -> Path:
    """A dataset with one write in it, so both writers append to the same schema."""
    root = tmp_path / "sensors"
    Dataset.create(root).write(ROWS)
    return root


def test_a_head_moved_at_commit_leaves_nothing_behind(
    writer, sensors: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, write = writer
    before = files(sensors)
    real_commit = Transaction.commit

    def another_writer_first(self: Transaction):
        # a real writer commits a block between this write's slices and its head move
        other = Transaction.begin(self.storage, Dataset.open(sensors).state)
        other.add(SetInfo(description=f"another writer, during the {kind} write"))
        real_commit(other)
        return real_commit(self)

    monkeypatch.setattr(Transaction, "commit", another_writer_first)
    with pytest.raises(ConflictError, match="head moved"):
        write(sensors)
    monkeypatch.undo()
    after = files(sensors)
    # the other writer's one block is all that changed: no slice, block or staged file of ours
    assert after["data"] == before["data"], kind
    assert after[".staging"] == [], kind
    assert len(after["blocks"]) == len(before["blocks"]) + 1, kind
    report = verify_path(sensors)
    assert report.ok and report.problems == [], [p.line() for p in report.problems]
    write(sensors)  # a retry starts clean
    assert verify_path(sensors).ok


def test_a_rolled_back_head_is_refused_before_any_file(writer, sensors: Path) -> None:
    kind, write = writer
    Dataset.open(sensors).write(ROWS)
    head = (sensors / "refs" / "head").read_text()
    first = Dataset.open(sensors).blocks()[2]
    (sensors / "refs" / "head").write_text(str(first.hash))
    before = files(sensors)
    with pytest.raises(RuleViolation) as caught:
        write(sensors)
    assert caught.value.rule == "head-rollback" and head in str(caught.value), kind
    assert files(sensors) == before, kind
    assert [p.rule for p in verify_path(sensors).errors] == ["head-rollback"]
    (sensors / "refs" / "head").write_text(head)
    assert verify_path(sensors).ok


def test_a_dataframe_of_local_data_is_written(spark, tmp_path: Path) -> None:
    """``createDataFrame`` of a pandas frame or a list (a local relation over several
    partitions): Spark's ConvertToLocalRelation rule used to compute the count's partition ids
    on the driver (all 0), so the write's partitions disagreed and every such write failed."""
    from odf_chain.spark import write

    root = tmp_path / "local"
    frame = spark.createDataFrame(ROWS.to_pandas())
    listed = spark.createDataFrame([("d", 1.5), ("e", 2.5), ("f", 3.5)], list(ROWS.schema.names))
    assert frame.rdd.getNumPartitions() > 1  # else the test proves nothing
    assert write(frame, root, create=True, lineage=False, target_slice_bytes=None).rows == 3
    assert write(listed, root, lineage=False, target_slice_bytes=None).rows == 3
    got = Dataset.open(root).to_table().sort_by("offset").column("station").to_pylist()
    assert got == ["a", "b", "c", "d", "e", "f"]
    assert verify_path(root).ok
