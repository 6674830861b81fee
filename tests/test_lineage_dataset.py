"""Lineage recorded by hand through Dataset.write, replayed across datasets."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain import Dataset
from odf_chain.errors import RuleViolation
from odf_chain.events import AddData, AddFieldLineage, OffsetInterval, TransformationSubtype
from odf_chain.lineage import FieldRef, LineageRecorder
from odf_chain.schema.paths import v1_path
from tests.conftest import snapshot_tree


@pytest.fixture
def users(tmp_path: Path) -> Dataset:
    ds = Dataset.create(tmp_path / "users")
    ds.write(pa.table({"id": [1, 2], "first": ["Ada", "Alan"], "last": ["L", "T"]}))
    return ds


def _recorder(users: Dataset, *, read_field: str = "first") -> LineageRecorder:
    state = users.state
    rec = LineageRecorder("normalize", run_id="run-1")
    src = rec.dataset_input(
        "users", state.dataset_id, state.head, uri=str(users.path), fields=state.field_paths
    )
    read = rec.read("read", src, ["id", read_field, "last"])
    name = rec.transform(
        "concat",
        [read[read_field], read["last"]],
        ["name"],
        subtype=TransformationSubtype.TRANSFORMATION,
    )
    rec.write("write", {"id": read["id"], "name": name["name"]})
    return rec


def test_write_with_lineage_and_replay_across_datasets(users: Dataset, tmp_path: Path) -> None:
    out = Dataset.create(tmp_path / "people")
    blocks = out.write(
        pa.table({"id": [1, 2], "name": ["Ada L", "Alan T"]}), lineage=_recorder(users)
    )
    kinds = [type(b.block.event).__name__ for b in blocks]
    assert kinds == ["SetDataSchema", "AddFieldLineage", "AddData"]
    event = blocks[1].block.event
    assert isinstance(event, AddFieldLineage) and event.run.offsets == OffsetInterval(0, 1)
    assert event.run.started_at <= event.run.ended_at == blocks[2].block.system_time
    assert isinstance(blocks[2].block.event, AddData)
    assert out.verify().ok

    replayed = out.lineage()
    assert replayed.unreachable == []
    graph = replayed.graph
    people, src = replayed.dataset, users.state.dataset_id.to_did()
    up = {r.field for r in graph.upstream(replayed.field("name"), depth=None)}
    assert up == {replayed.field("first", src), replayed.field("last", src)}
    assert {f.path for f in up} == {
        "[version=2.0].[type=string].first",
        "[version=2.0].[type=string].last",
    }
    down = {r.field for r in graph.downstream(replayed.field("id", src), depth=None)}
    assert down == {FieldRef(people, "[version=2.0].[type=long].id")}
    assert graph.run_for_offset(people, 1).run_id == "run-1"


def test_lineage_naming_a_field_the_input_lacks_is_refused(users: Dataset, tmp_path: Path) -> None:
    out = Dataset.create(tmp_path / "people")
    before = snapshot_tree(tmp_path / "people")
    rec = _recorder(users)
    # the recorder was told the fields; build one that claims a field users never had
    state = users.state
    bad = LineageRecorder("normalize", run_id="run-2")
    src = bad.dataset_input("users", state.dataset_id, state.head, uri=str(users.path))
    bad.write("write", {"name": src["nickname"]})
    with pytest.raises(RuleViolation, match="nickname") as caught:
        out.write(pa.table({"name": ["x"]}), lineage=bad)
    assert caught.value.rule == "lineage-inputs"
    assert snapshot_tree(tmp_path / "people") == before  # nothing written
    assert rec is not None


def test_an_unreachable_input_is_listed_not_fatal(users: Dataset, tmp_path: Path) -> None:
    out = Dataset.create(tmp_path / "people")
    out.write(pa.table({"id": [1, 2], "name": ["Ada L", "Alan T"]}), lineage=_recorder(users))
    users_id = users.state.dataset_id.to_did()
    (tmp_path / "users").rename(tmp_path / "moved")
    replayed = out.lineage()
    assert [u.dataset_id for u in replayed.unreachable] == [users_id]
    assert "users" in replayed.unreachable[0].reason
    # this dataset's own edges are still there
    up = replayed.graph.upstream(replayed.field("name"))
    assert {v1_path(r.field.path) for r in up} == {"first", "last"}
