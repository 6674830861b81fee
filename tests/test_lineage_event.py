"""AddFieldLineage in real chains: appended through Dataset, read back, re-checked by verify.

The rules one by one are in ``test_rules.py`` and the bytes in ``test_codec.py``; here the event
travels the whole way (encode, store, hash, fold, replay, verify, log), and a bad lineage block
written behind append's back is caught by verify, named by block and rule.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from odf_chain.chain import load_block, now, read_head
from odf_chain.dataset import Dataset
from odf_chain.errors import RuleViolation
from odf_chain.events import (
    AddData,
    AddFieldLineage,
    FieldOperation,
    InputField,
    LineageInput,
    LineageRun,
    MetadataBlock,
    OffsetInterval,
    SetInfo,
    Transformation,
    TransformationSubtype,
    TransformationType,
)
from odf_chain.format.codec import decode_block, encode_block
from odf_chain.format.multihash import Multihash
from odf_chain.verify import verify_path
from odf_chain.views.blocks import log_line

ID = "[version=2.0].[type=long].id"
NAME = "[version=2.0].[type=string].name"
USER_SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
SOURCE = LineageInput(
    "people.csv", uri="file:///in/people.csv", content_hash=Multihash.digest("blake3", b"csv")
)
STARTED = datetime(2024, 5, 1, 8, 0, tzinfo=UTC)


def lineage(offsets: OffsetInterval | None, *, writes: tuple[str, ...] = (ID, NAME)):
    return AddFieldLineage(
        run=LineageRun("import-people", "run-1", STARTED, STARTED, offsets),
        inputs=(SOURCE,),
        operations=(
            FieldOperation(
                "read",
                (
                    InputField("people.csv", "[version=2.0].[type=string].id"),
                    InputField("people.csv", "[version=2.0].[type=string].name"),
                ),
                ("id", "name"),
                writes=False,
            ),
            FieldOperation(
                "cast",
                (InputField("read", "id"),),
                writes[:1],
                Transformation(TransformationType.DIRECT, TransformationSubtype.TRANSFORMATION),
            ),
            FieldOperation("copy", (InputField("read", "name"),), writes[1:]),
        ),
    )


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array([f"n{i}" for i in ids])})


def promise(ds: Dataset, event: AddFieldLineage):
    """Append a lineage event whose data follows in a separate write. Writers commit both in
    one transaction (chain.commit refuses a lineage event left uncovered), so this goes behind
    that check to build the in-between states the rules must handle; returns its entry."""
    _append_behind_the_rules(ds, event)
    return ds.blocks()[-1]


def with_schema(tmp_path) -> Dataset:
    ds = Dataset.create(tmp_path / "people")
    ds.set_schema(USER_SCHEMA)
    return ds


def test_chain_with_lineage_events_verifies(tmp_path) -> None:
    ds = with_schema(tmp_path)
    first = promise(ds, lineage(OffsetInterval(0, 2)))
    ds.write(rows(1, 2, 3))
    ds.append(lineage(None))  # a run that wrote nothing: nothing pending
    ds.append(SetInfo(description="people"))
    promise(ds, lineage(OffsetInterval(3, 4)))
    data_blocks = ds.write(rows(4, 5))
    assert [b.block.event_name for b in data_blocks] == ["AddData"]  # no schema block between

    report = verify_path(ds.path)
    assert report.ok, [p.line() for p in report.problems]
    assert report.blocks_checked == 8  # Seed, schema, 3 lineage, SetInfo, 2 AddData
    assert report.slices_checked == 2

    reopened = Dataset.open(ds.path)
    state = reopened.state
    assert state.lineage_pending is None
    assert state.last_lineage_sequence_number == 6
    assert state.num_records == 5
    stored = [
        e.block.event for e in reopened.blocks() if isinstance(e.block.event, AddFieldLineage)
    ]
    assert stored == [lineage(OffsetInterval(0, 2)), lineage(None), lineage(OffsetInterval(3, 4))]
    assert reopened.state_at(first.hash).lineage_pending.uncovered == OffsetInterval(0, 2)


def test_stored_lineage_block_re_encodes_to_its_stored_bytes(tmp_path) -> None:
    ds = with_schema(tmp_path)
    entry = promise(ds, lineage(OffsetInterval(0, 0)))
    stored = ds.storage.read_block(str(entry.hash))
    assert Multihash.digest("blake3", stored) == entry.hash
    assert encode_block(decode_block(stored)) == stored


def test_schema_change_between_lineage_and_data_is_refused(tmp_path) -> None:
    ds = with_schema(tmp_path)
    promise(ds, lineage(OffsetInterval(0, 1)))
    head = ds.storage.read_head()
    wider = rows(1, 2).append_column("age", pa.array([30, 40], pa.int32()))
    with pytest.raises(RuleViolation) as info:
        ds.write(
            wider, evolve=True
        )  # would need a SetDataSchema between the lineage event and its data
    assert info.value.rule == "lineage-data"
    assert "offsets 0..1" in str(info.value)
    assert ds.storage.read_head() == head
    assert ds.storage.data_names() == []
    ds.write(rows(1, 2))  # the promised data, as promised, is still welcome
    assert verify_path(ds.path).ok


def test_lineage_writing_unknown_field_is_refused_on_append(tmp_path) -> None:
    ds = with_schema(tmp_path)
    bad = lineage(None, writes=(ID, "[version=2.0].[type=string].nickname"))
    with pytest.raises(RuleViolation) as info:
        ds.append(bad)
    assert info.value.rule == "lineage-outputs"
    assert "'copy' writes '[version=2.0].[type=string].nickname'" in str(info.value)


def _append_behind_the_rules(ds: Dataset, event) -> tuple[int, str]:
    """Write a block straight to storage, as a tool that skipped the rules would (the chain
    is not folded: after a bad block it could not be)."""
    head = load_block(ds.storage, read_head(ds.storage))
    block = MetadataBlock(
        system_time=now(head.block.system_time),
        prev_block_hash=head.hash,
        sequence_number=head.block.sequence_number + 1,
        event=event,
    )
    data = encode_block(block)
    name = str(Multihash.digest(head.hash.algorithm, data))
    ds.storage.write_block(name, data)
    ds.storage.compare_and_swap_head(str(head.hash), name)
    return block.sequence_number, name


def test_verify_names_an_invalid_lineage_block_and_its_rule(tmp_path) -> None:
    ds = with_schema(tmp_path)
    ds.write(rows(1))
    bad = lineage(None, writes=(ID, "[version=2.0].[type=string].nickname"))
    seq, name = _append_behind_the_rules(ds, bad)

    report = verify_path(ds.path)
    assert not report.ok
    [problem] = report.errors
    assert (problem.rule, problem.sequence_number, problem.block_hash) == (
        "lineage-outputs",
        seq,
        name,
    )
    assert "nickname" in problem.message
    assert f"block {seq}" in problem.line()


def test_verify_names_a_dangling_field_reference(tmp_path) -> None:
    ds = with_schema(tmp_path)
    event = lineage(None)
    dangling = replace(event.operations[1], inputs=(InputField("raed", "id"),))
    seq, name = _append_behind_the_rules(
        ds, replace(event, operations=(event.operations[0], dangling, event.operations[2]))
    )
    [problem] = verify_path(ds.path).errors
    assert (problem.rule, problem.sequence_number, problem.block_hash) == (
        "lineage-structure",
        seq,
        name,
    )
    assert "operation 'cast' reads field 'id' from 'raed'" in problem.message


def test_verify_names_offsets_a_lineage_event_left_uncovered(tmp_path) -> None:
    ds = with_schema(tmp_path)
    lineage_seq, _ = _append_behind_the_rules(ds, lineage(OffsetInterval(0, 4)))
    seq, name = _append_behind_the_rules(ds, SetInfo(description="moving on"))
    _append_behind_the_rules(ds, SetInfo(description="and on"))
    report = verify_path(ds.path)
    [problem] = report.errors  # reported once, at the first block that should have been data
    assert (problem.rule, problem.sequence_number, problem.block_hash) == (
        "lineage-data",
        seq,
        name,
    )
    assert f"offsets 0..4, which the run recorded at block {lineage_seq} wrote" in problem.message
    assert "found SetInfo" in problem.message


def test_verify_names_a_slice_without_data_while_lineage_is_uncovered(tmp_path) -> None:
    ds = with_schema(tmp_path)
    _append_behind_the_rules(ds, lineage(OffsetInterval(0, 4)))
    seq, _ = _append_behind_the_rules(
        ds, AddData(new_data=None, new_watermark=datetime(2024, 1, 1, tzinfo=UTC))
    )
    [problem] = verify_path(ds.path).errors
    assert (problem.rule, problem.sequence_number) == ("lineage-data", seq)
    assert "found AddData without data" in problem.message


def test_log_line_summarises_the_run(tmp_path) -> None:
    ds = with_schema(tmp_path)
    entry = promise(ds, lineage(OffsetInterval(0, 2)))
    line = log_line(entry, full=True)  # the whole summary, not cut to 100 columns
    assert line.endswith(
        "AddFieldLineage  job import-people run run-1: 1 input, 3 operations; offsets 0..2"
    )
    ds.write(rows(1, 2, 3))
    none = log_line(ds.append(lineage(None)), full=True)
    assert none.endswith("1 input, 3 operations; no records")


def test_field_paths_are_computed_once_per_schema(tmp_path) -> None:
    ds = with_schema(tmp_path)
    before = ds.state
    ds.append(lineage(None))
    ds.append(SetInfo(description="x"))
    after = ds.state
    assert after.schema is before.schema
    assert after.field_path_set is before.field_path_set  # the cached set, not a recomputation
    assert {ID, NAME} <= after.field_path_set
    assert sorted(after.field_path_set) == sorted(after.field_paths)


# -- lineage carried by an AddData, among plain blocks verify checks in bulk ----------------------


def _recorded(run_id: str):
    from odf_chain.lineage import LineageRecorder

    rec = LineageRecorder("import-people", run_id=run_id)
    src = rec.external_input("csv", "file:///in/people.csv", fields=["id", "name"])
    rec.write("copy", {"id": src["id"], "name": src["name"]})
    return rec


def test_extra_attributes_carrying_lineage_are_never_folded_in_bulk() -> None:
    from odf_chain.format import extra_json
    from odf_chain.state import LINEAGE_KEY, TRANSACTION_KEY

    assert (extra_json.LINEAGE_KEY, extra_json.TRANSACTION_KEY) == (LINEAGE_KEY, TRANSACTION_KEY)
    verdicts = extra_json.judge([b'{"a": 1}', b'{"odf-chain.dev/field-lineage": {}}'])
    assert list(verdicts) == [extra_json.OBJECT, extra_json.REFUSED]


def test_a_long_chain_with_carried_lineage_verifies_and_a_bad_one_is_named(tmp_path) -> None:
    from odf_chain.state import lineage_extra, lineage_of

    ds = with_schema(tmp_path)
    for i in range(60):  # plain blocks, folded in bulk by verify
        ds.write(rows(i), lineage=_recorded("r-middle") if i == 30 else None)
    carriers = [e for e in ds.blocks() if lineage_of(e.block.event) is not None]
    assert [e.block.sequence_number for e in carriers] == [2 + 30]  # after Seed, schema, 30 writes
    report = verify_path(ds.path)
    assert report.ok, report.errors
    assert ds.lineage().graph.run_for_offset(ds.lineage().dataset, 30).run_id == "r-middle"

    last = ds.state
    bad = AddData(
        prev_offset=last.last_offset,
        new_watermark=last.watermark,
        extra=lineage_extra(lineage(OffsetInterval(60, 60))),
    )
    seq, name = _append_behind_the_rules(ds, bad)
    [problem] = verify_path(ds.path).errors
    assert (problem.rule, problem.sequence_number, problem.block_hash) == (
        "lineage-data",
        seq,
        name,
    )
    assert "found no slice" in problem.message


def test_log_line_of_an_add_data_names_the_run_it_carries(tmp_path) -> None:
    ds = with_schema(tmp_path)
    [entry] = ds.write(rows(1, 2), lineage=_recorded("r-9"))
    line = log_line(entry, full=True)
    assert " AddData " in line
    # the run it carries after the rows, before the watermark and the slice's file name
    assert "2 rows, " in line and "); lineage of import-people run r-9 (1 operation); " in line
    assert line.endswith(f"; data/{entry.block.event.new_data.physical_hash}"), line


def test_carried_lineage_is_decoded_once_per_fold_step(tmp_path, monkeypatch) -> None:
    """Each rule and the state ask for the lineage an AddData carries: within one fold step one
    decoding serves them all. Outside a step nothing is kept: a document changed in place and
    handed again (a retry) is read as it is now."""
    from odf_chain.chain import advance
    from odf_chain.format import lineage_json
    from odf_chain.state import LINEAGE_KEY, decoding_once, embedded_lineage

    decoded = []
    real = lineage_json.lineage_from_json

    def counting(doc, where):
        decoded.append(doc)
        return real(doc, where)

    monkeypatch.setattr(lineage_json, "lineage_from_json", counting)
    ds = with_schema(tmp_path)
    ds.write(rows(0), lineage=_recorded("r-1"))  # the rules check the block as it is appended
    assert len(decoded) == 1
    [carrier] = [e for e in ds.blocks() if "r-1" in str(getattr(e.block.event, "extra", ""))]
    before = ds.state_at(carrier.block.sequence_number - 1)
    decoded.clear()
    after = advance(before, carrier.block, carrier.hash)  # a block read anew: its own step
    assert len(decoded) == 1 and after.head == carrier.hash
    assert verify_path(ds.path).ok
    assert len(decoded) <= 3  # verify decodes it at most twice (8 times without the step)

    event = carrier.block.event
    with decoding_once(event):
        first = embedded_lineage(event)
        assert embedded_lineage(event) is first
    assert first.run.run_id == "r-1"
    event.extra[LINEAGE_KEY]["run"]["run_id"] = "r-2"  # in place, between two steps
    assert embedded_lineage(event).run.run_id == "r-2"
    with decoding_once(event):
        assert embedded_lineage(event).run.run_id == "r-2"


def test_a_null_lineage_document_is_refused_and_named(tmp_path) -> None:
    """JSON's null where the lineage belongs is malformed lineage: the append refuses it, and
    verify names it when it was written behind the rules (not an internal error)."""
    from odf_chain.state import LINEAGE_KEY

    ds = with_schema(tmp_path)
    ds.write(rows(0))
    last = ds.state
    bad = AddData(
        prev_offset=last.last_offset, new_watermark=last.watermark, extra={LINEAGE_KEY: None}
    )
    with pytest.raises(RuleViolation) as refused:
        ds.append(bad)
    assert refused.value.rule == "lineage-structure" and "null" in str(refused.value)
    seq, name = _append_behind_the_rules(ds, bad)
    errors = verify_path(ds.path).errors
    assert [(p.rule, p.sequence_number, p.block_hash) for p in errors] == [
        ("lineage-structure", seq, name)
    ], [p.line() for p in errors]


def test_a_document_swapped_within_a_step_is_read_anew(tmp_path) -> None:
    from odf_chain.state import LINEAGE_KEY, decoding_once, embedded_lineage, lineage_extra

    ds = with_schema(tmp_path)
    [carrier] = ds.write(rows(0), lineage=_recorded("r-1"))
    event = carrier.block.event
    with decoding_once(event):
        first = embedded_lineage(event)
        other = lineage_extra(replace(first, inputs=()))[LINEAGE_KEY]
        event.extra[LINEAGE_KEY] = other  # another document object, within the step
        assert embedded_lineage(event).inputs == () and first.inputs != ()
