"""Field lineage through odf_chain.spark.write: captured from the plan by default, recorded by
hand when given, none when turned off; appended with the data, one transaction."""

from __future__ import annotations

from pathlib import Path

import blake3
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from odf_chain.dataset import Dataset
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    OffsetInterval,
    TransformationSubtype,
    TransformationType,
)
from odf_chain.lineage import LineageRecorder
from odf_chain.schema.paths import v1_path
from odf_chain.spark import read, write
from odf_chain.state import lineage_of
from tests.test_official_bindings import _content, odf  # noqa: F401 (odf: a fixture)


@pytest.fixture
def readings(tmp_path: Path) -> Path:
    csv = tmp_path / "readings.csv"
    csv.write_text("station,temp\na,10.0\na,14.0\nb,3.0\n")
    return csv


def kinds(dataset: Dataset) -> list[str]:
    return [e.block.event_name for e in dataset.blocks()]


def test_the_plan_s_lineage_is_appended_with_the_data(spark, tmp_path, readings, odf) -> None:  # noqa: F811
    # one dataset ingested from a CSV, a second derived from it with an aggregation
    raw = spark.read.csv(str(readings), header=True, inferSchema=True).coalesce(1)
    first = write(raw, tmp_path / "raw", create=True, job_name="load")
    raw_ds = Dataset.open(tmp_path / "raw")
    assert kinds(raw_ds) == ["Seed", "SetDataSchema", "AddData"]
    event = first.lineage
    assert lineage_of(raw_ds.blocks()[2].block.event) == event  # carried by the AddData
    assert isinstance(event, AddFieldLineage) and event.run.job_name == "load"
    assert event.run.offsets == OffsetInterval(0, 2)
    (source,) = event.inputs
    assert source.uri.endswith("readings.csv") and source.dataset_id is None
    assert str(source.content_hash) == "f1e20" + blake3.blake3(readings.read_bytes()).hexdigest()

    stats = read(spark, tmp_path / "raw").groupBy("station").agg(F.max("temp").alias("hottest"))
    result = write(stats, tmp_path / "stats", create=True, job_name="stats")
    stats_ds = Dataset.open(tmp_path / "stats")
    entries = stats_ds.blocks()
    assert [e.block.event_name for e in entries][2:] == ["AddData"]
    assert lineage_of(entries[2].block.event) == result.lineage
    pinned = result.lineage.inputs
    assert [(p.dataset_id, p.block_hash) for p in pinned] == [
        (raw_ds.state.dataset_id, raw_ds.state.head)  # the block that named the slice read
    ]
    assert stats_ds.verify().ok
    for dataset in (raw_ds, stats_ds):  # what kamu sees: ODF's events only, lineage in extra
        for entry in dataset.blocks():
            data = (dataset.path / "blocks" / str(entry.hash)).read_bytes()
            block = odf("MetadataBlock").MetadataBlock.GetRootAs(_content(odf, data), 0)
            assert block.EventType() == getattr(
                odf("MetadataEvent").MetadataEvent, entry.block.event_name
            )

    replay = stats_ds.lineage()
    hottest = replay.field("hottest")
    ups = {(r.field, r.distance) for r in replay.graph.upstream(hottest, depth=None)}
    raw_key = raw_ds.state.dataset_id.to_did()
    assert (replay.field("temp", raw_key), 1) in ups
    assert (replay.field("station", raw_key), 1) in ups  # the group-by key, indirectly
    # and on, through the first dataset's own lineage, to the CSV file it was loaded from
    at_file = {f for f, d in ups if d == 2}
    assert {f.dataset for f in at_file} == {source.uri}
    assert {v1_path(f.path) for f in at_file} == {"station", "temp"}
    (edge,) = [
        e for e in replay.graph.edges_into(hottest) if e.source == replay.field("temp", raw_key)
    ]
    assert (edge.transformation.type, edge.transformation.subtype) == (
        TransformationType.DIRECT,
        TransformationSubtype.AGGREGATION,
    )


def test_recorded_lineage_replaces_capture_and_false_records_none(spark, tmp_path) -> None:
    df = spark.createDataFrame([(1, "x"), (2, "y")], "id long, label string")
    rec = LineageRecorder("by-hand", run_id="r-1")
    src = rec.external_input("ids", "file:///src/ids.txt", fields=["id", "label"])
    rec.write("copy", {"id": src["id"], "label": src["label"]})
    result = write(df, tmp_path / "ds", create=True, lineage=rec)
    assert result.lineage.run.run_id == "r-1" and result.lineage.run.job_name == "by-hand"
    assert result.lineage.run.offsets == OffsetInterval(0, 1)
    ds = Dataset.open(tmp_path / "ds")
    written = [c for e in ds.blocks() if (c := lineage_of(e.block.event)) is not None]
    assert written == [result.lineage]
    (op,) = written[0].operations
    assert op.outputs == ("[version=2.0].[type=long].id", "[version=2.0].[type=string].label")

    again = write(df, tmp_path / "ds", lineage=False)
    assert again.lineage is None
    assert kinds(Dataset.open(tmp_path / "ds"))[-1:] == ["AddData"]
    assert not any(lineage_of(b.block.event) for b in again.blocks)
    assert all(isinstance(b.block.event, AddData) for b in again.blocks)


def test_lineage_naming_a_missing_input_field_stops_the_write(spark, tmp_path) -> None:
    users = Dataset.create(tmp_path / "users")
    users.write(pa.table({"id": [1]}))
    rec = LineageRecorder("bad")
    src = rec.dataset_input("users", users.state.dataset_id, users.state.head, uri=str(users.path))
    rec.write("copy", {"id": src["nickname"]})
    df = spark.createDataFrame([(1,)], "id long")
    from odf_chain.errors import RuleViolation

    with pytest.raises(RuleViolation, match="nickname"):
        write(df, tmp_path / "out", create=True, lineage=rec)
    assert not (tmp_path / "out").exists()  # nothing appended, nothing staged: not even the Seed
