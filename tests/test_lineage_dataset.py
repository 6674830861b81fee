"""Lineage recorded by hand through Dataset.write, replayed across datasets."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain import Dataset, chain
from odf_chain.errors import RuleViolation
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    MetadataBlock,
    OffsetInterval,
    TransformationSubtype,
)
from odf_chain.format.codec import encode_block
from odf_chain.format.multihash import Multihash
from odf_chain.lineage import FieldRef, LineageRecorder
from odf_chain.schema.paths import v1_path
from odf_chain.state import LINEAGE_KEY, lineage_of
from tests.helpers import snapshot_tree


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
    assert kinds == ["SetDataSchema", "AddData"]  # the lineage rides on the AddData
    data = blocks[1].block.event
    assert isinstance(data, AddData) and set(data.extra or {}) == {LINEAGE_KEY}
    event = lineage_of(data)
    assert event is not None and event.run.offsets == OffsetInterval(0, 1)
    assert event.run.started_at <= blocks[1].block.system_time <= event.run.ended_at
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


def test_a_run_ends_when_its_slices_are_written(users, tmp_path, monkeypatch) -> None:
    """The run's end is taken after the slices are written, not when the write begins."""
    from datetime import UTC, datetime

    from odf_chain import slice_writer

    written_at = []
    real = slice_writer.write_slices

    def write_slowly(*args, **kwargs):  # the real writer, then a pause a clock can see
        facts = real(*args, **kwargs)
        time.sleep(0.05)
        written_at.append(datetime.now(UTC))
        return facts

    monkeypatch.setattr(slice_writer, "write_slices", write_slowly)
    before = datetime.now(UTC)
    blocks = Dataset.create(tmp_path / "people").write(
        pa.table({"id": [1, 2], "name": ["Ada L", "Alan T"]}), lineage=_recorder(users)
    )
    run = lineage_of(blocks[1].block.event).run
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= run.started_at
    (done,) = written_at
    assert run.ended_at >= done.replace(microsecond=done.microsecond // 1000 * 1000)
    assert run.ended_at - run.started_at >= timedelta(milliseconds=50)


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


def _force(dataset: Dataset, *prepared) -> None:
    """Store blocks and move the head without chain.commit's transaction checks, as a buggy
    or hostile writer could."""
    for block in prepared:
        dataset.storage.write_block(str(block.entry.hash), block.data)
    before = prepared[0].before.head
    dataset.storage.compare_and_swap_head(str(before), str(prepared[-1].entry.hash))


def _event(
    users: Dataset,
    *,
    block_hash=None,
    field: str = "[version=2.0].[type=string].first",
    start: int = 0,
) -> AddFieldLineage:
    state = users.state
    rec = LineageRecorder("copy", run_id="r")
    src = rec.dataset_input(
        "users", state.dataset_id, block_hash or state.head, uri=str(users.path)
    )
    rec.write("write", {"[version=2.0].[type=string].name": src[field]})
    return rec.event(started_at=state.system_time, offsets=OffsetInterval(start, start))


def _people(tmp_path: Path) -> Dataset:
    out = Dataset.create(tmp_path / "people")
    out.set_schema(pa.schema([("name", pa.string())]))
    return out


def test_a_lineage_event_without_its_data_is_not_committed(users, tmp_path) -> None:
    out = _people(tmp_path)
    before = snapshot_tree(tmp_path / "people")
    with pytest.raises(RuleViolation, match=r"offsets 0\.\.0") as caught:
        out.append(_event(users))
    assert caught.value.rule == "lineage-data"
    assert snapshot_tree(tmp_path / "people") == before


def test_verify_reports_a_promise_the_chain_ends_before(users, tmp_path) -> None:
    out = _people(tmp_path)
    prepared = chain.prepare(out.refresh(), _event(users))
    _force(out, prepared)
    (problem,) = out.verify().errors
    assert (problem.rule, problem.sequence_number) == ("lineage-data", 2)
    assert problem.block_hash == str(prepared.entry.hash) and "0..0" in problem.message


def test_verify_follows_pinned_inputs(users, tmp_path) -> None:
    """A pin to a block the input does not have is dangling (an error), a field the input
    lacks is wrong (an error), an input that cannot be opened is a warning."""
    out = _people(tmp_path)
    state = out.refresh()
    fake_block = Multihash.digest("blake3", b"no such block")
    for kind in ("dangling", "no such field"):
        if kind == "dangling":
            event = _event(users, block_hash=fake_block, start=state.next_offset)
        else:
            event = _event(users, field="nickname", start=state.next_offset)
        lineage = chain.prepare(state, event)
        data = chain.prepare(lineage.after, _slice(lineage.after))
        _force(out, lineage, data)
        state = data.after
    report = out.verify(check_data=False)  # the slices' files were never written
    assert [(p.rule, p.sequence_number) for p in report.errors] == [
        ("lineage-input-dangling", 2),
        ("lineage-inputs", 4),
    ]
    assert str(fake_block) in report.errors[0].message
    assert "nickname" in report.errors[1].message
    # append would have refused both
    with pytest.raises(RuleViolation) as caught:
        out.write(pa.table({"name": ["x"]}), lineage=_recording(users, fake_block))
    assert caught.value.rule == "lineage-input-dangling"
    (tmp_path / "users").rename(tmp_path / "gone")
    report = out.verify(check_data=False)
    assert report.errors == []
    assert [(p.rule, p.sequence_number) for p in report.warnings] == [
        ("lineage-input-unreachable", 2),
        ("lineage-input-unreachable", 4),
    ]


def _recording(users: Dataset, block_hash) -> LineageRecorder:
    state = users.state
    rec = LineageRecorder("copy", run_id="r2")
    src = rec.dataset_input("users", state.dataset_id, block_hash, uri=str(users.path))
    rec.write("write", {"name": src["first"]})
    return rec


def _slice(state) -> AddData:
    """An AddData for one row whose file is never written (these tests verify without data)."""
    from odf_chain.events import DataSlice

    h = Multihash.digest("blake3", b"slice")
    return AddData(
        prev_offset=state.last_offset,
        new_data=DataSlice(h, h, OffsetInterval(state.next_offset, state.next_offset), 1),
    )


# -- CDAP: an operation set that writes nothing ------------------------------------------------


def _writes_nothing(users: Dataset) -> AddFieldLineage:
    """users' fields read, one dropped, none written: CDAP refuses such an operation set."""
    state = users.state
    rec = LineageRecorder("peek", run_id="peek-1")
    src = rec.dataset_input(
        "users", state.dataset_id, state.head, uri=str(users.path), fields=state.field_paths
    )
    read = rec.read("read", src, ["id", "first"])
    rec.drop("forget", [read["first"]])
    return rec.event(started_at=state.system_time)


def test_a_lineage_event_that_writes_nothing_is_refused(users, tmp_path) -> None:
    out = _people(tmp_path)
    before = snapshot_tree(tmp_path / "people")
    with pytest.raises(RuleViolation, match=r"'read' \(intermediate outputs only\)") as caught:
        out.append(_writes_nothing(users))
    assert caught.value.rule == "lineage-writes"
    assert "run 'peek-1' of job 'peek' writes no field" in str(caught.value)
    assert snapshot_tree(tmp_path / "people") == before


def test_verify_reports_a_lineage_event_that_writes_nothing(users, tmp_path) -> None:
    """A chain written before the rule (or by another tool) holds such an event: the block is
    encoded and stored directly, and verify names the rule, the block and the operations."""
    out = _people(tmp_path)
    state = out.refresh()
    block = MetadataBlock(
        system_time=state.system_time + timedelta(seconds=1),
        prev_block_hash=state.head,
        sequence_number=state.sequence_number + 1,
        event=_writes_nothing(users),
    )
    data = encode_block(block)
    block_hash = Multihash.digest(state.hash_algorithm, data)
    out.storage.write_block(str(block_hash), data)
    out.storage.compare_and_swap_head(str(state.head), str(block_hash))

    report = out.verify()
    (problem,) = report.errors
    assert (problem.rule, problem.sequence_number) == ("lineage-writes", block.sequence_number)
    assert problem.block_hash == str(block_hash)
    assert "'read' (intermediate outputs only), 'forget' (no outputs)" in problem.message
    line = problem.line()
    assert f"block {block.sequence_number} {block_hash}" in line and "[lineage-writes]" in line
