"""LineageRecorder: the events it builds (written out by hand, operation by operation), how it
finds fields by path or dotted name, and every mistake it refuses at record time."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from odf_chain.errors import OdfChainError
from odf_chain.events import (
    AddFieldLineage,
    FieldOperation,
    InputField,
    LineageInput,
    LineageRun,
    OffsetInterval,
    Transformation,
    TransformationSubtype as S,
    TransformationType as T,
)
from odf_chain.format.did import DatasetId
from odf_chain.format.multihash import Multihash
from odf_chain.lineage import LineageError, LineageRecorder

USERS_ID = DatasetId(bytes([0x11]) * 32)
USERS_BLOCK = Multihash("blake3", bytes([0x22]) * 32)
RAW_HASH = Multihash("blake3", bytes([0x33]) * 32)
START = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
END = datetime(2024, 5, 1, 12, 5, tzinfo=UTC)

ID = "[version=2.0].[type=long].id"
FIRST = "[version=2.0].[type=string].first"
LAST = "[version=2.0].[type=string].last"
DOB = "[version=2.0].[type=string].dob"
CITY = "[version=2.0].[type=struct].[type=struct].address.[type=string].city"
USER_PATHS = [ID, FIRST, LAST, DOB, CITY]

OUT_ID = "[version=2.0].[type=long].id"
OUT_NAME = "[version=2.0].[type=string].name"
OUT_CITY = "[version=2.0].[type=string].city"
OUT_PATHS = [OUT_ID, OUT_NAME, OUT_CITY]

IDENTITY = Transformation()


def _recorder(**kwargs) -> LineageRecorder:
    return LineageRecorder("normalize", "run-1", **kwargs)


def test_cdap_normalizer_event_written_out_by_hand() -> None:
    """CDAP's example: read users, concatenate first and last names into name, drop both and
    the birth date, write id and name."""
    rec = _recorder()
    users = rec.dataset_input("users", USERS_ID, USERS_BLOCK, uri="file:///lake/users")
    r = rec.read("read", users, [ID, FIRST, LAST, DOB])
    concat = rec.transform(
        "concat", [r[FIRST], r[LAST]], ["name"], description="first and last name joined"
    )
    rec.drop("drop names", [r[FIRST], r[LAST]])
    rec.drop("drop dob", [r[DOB]], description="not needed downstream")
    rec.write("write", {OUT_ID: r[ID], OUT_NAME: concat["name"]})
    event = rec.event(started_at=START, ended_at=END, offsets=OffsetInterval(0, 99))

    users_input = LineageInput(
        name="users", uri="file:///lake/users", dataset_id=USERS_ID, block_hash=USERS_BLOCK
    )
    expected = AddFieldLineage(
        run=LineageRun("normalize", "run-1", START, END, OffsetInterval(0, 99)),
        inputs=(users_input,),
        operations=(
            FieldOperation(
                "read",
                (
                    InputField("users", ID),
                    InputField("users", FIRST),
                    InputField("users", LAST),
                    InputField("users", DOB),
                ),
                (ID, FIRST, LAST, DOB),
                IDENTITY,
                None,
                writes=False,
            ),
            FieldOperation(
                "concat",
                (InputField("read", FIRST), InputField("read", LAST)),
                ("name",),
                Transformation(T.DIRECT, S.TRANSFORMATION),
                "first and last name joined",
                writes=False,
            ),
            FieldOperation(
                "drop names",
                (InputField("read", FIRST), InputField("read", LAST)),
                (),
                IDENTITY,
                None,
                writes=False,
            ),
            FieldOperation(
                "drop dob", (InputField("read", DOB),), (), IDENTITY, "not needed downstream", False
            ),
            FieldOperation(
                "write",
                (InputField("read", ID), InputField("concat", "name")),
                (OUT_ID, OUT_NAME),
                IDENTITY,
                None,
                writes=True,
            ),
        ),
    )
    assert event == expected
    assert rec.inputs == expected.inputs
    assert rec.operations == expected.operations


def test_run_id_defaults_to_a_fresh_uuid4_and_the_run_carries_the_job() -> None:
    first, second = LineageRecorder("job"), LineageRecorder("job")
    assert uuid.UUID(first.run_id).version == 4
    assert first.run_id != second.run_id
    assert LineageRecorder("job", "given").run_id == "given"
    assert first.run(started_at=START) == LineageRun("job", first.run_id, START, None, None)


def test_text_forms_of_dataset_id_and_hashes_are_accepted() -> None:
    rec = _recorder()
    users = rec.dataset_input("users", USERS_ID.to_did(), USERS_BLOCK.to_multibase())
    raw = rec.external_input("raw", "file:///in/x.csv", content_hash=RAW_HASH.to_multibase())
    assert users.input == LineageInput("users", None, USERS_ID, USERS_BLOCK, None)
    assert raw.input == LineageInput("raw", "file:///in/x.csv", None, None, RAW_HASH)
    assert users.input.is_dataset and not raw.input.is_dataset


def test_operations_may_read_inputs_directly_without_a_read_step() -> None:
    rec = _recorder()
    raw = rec.external_input("raw", "file:///in/x.csv")
    up = rec.transform("upper", [raw["name"]], [OUT_NAME], writes=True)
    assert rec.operations == (
        FieldOperation(
            "upper",
            (InputField("raw", "name"),),
            (OUT_NAME,),
            Transformation(T.DIRECT, S.TRANSFORMATION),
            None,
            writes=True,
        ),
    )
    assert up.fields == (InputField("upper", OUT_NAME),)


def test_fields_are_found_by_exact_path_or_unique_dotted_name() -> None:
    rec = _recorder(output_fields=OUT_PATHS)
    users = rec.dataset_input("users", USERS_ID, USERS_BLOCK, fields=USER_PATHS)
    assert users["address.city"] == InputField("users", CITY)
    assert users[ID] == InputField("users", ID)
    r = rec.read("read", users, ["id", "address.city"])
    assert r.operation.outputs == (ID, CITY)
    assert r["address.city"] == InputField("read", CITY)
    w = rec.write("write", [r["id"], r["address.city"]], ["id", "city"])
    assert w.operation.outputs == (OUT_ID, OUT_CITY)
    assert users.fields == tuple(InputField("users", p) for p in USER_PATHS)


def test_read_can_name_its_outputs() -> None:
    rec = _recorder()
    users = rec.dataset_input("users", USERS_ID, USERS_BLOCK, fields=USER_PATHS)
    r = rec.read("read", users, {"given": "first", "family": LAST})
    assert r.operation.inputs == (InputField("users", FIRST), InputField("users", LAST))
    assert r.operation.outputs == ("given", "family")
    assert r["family"] == InputField("read", "family")


def test_write_defaults_outputs_to_the_names_it_is_given() -> None:
    rec = _recorder()
    raw = rec.external_input("raw", "file:///in/x.csv")
    r = rec.read("read", raw, [ID, FIRST])
    w = rec.write("write", r.fields)
    assert w.operation.inputs == (InputField("read", ID), InputField("read", FIRST))
    assert w.operation.outputs == (ID, FIRST)
    assert w.operation.transformation == IDENTITY and w.operation.writes


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, Transformation(T.DIRECT, S.TRANSFORMATION)),
        ({"subtype": S.AGGREGATION}, Transformation(T.DIRECT, S.AGGREGATION)),
        ({"subtype": S.FILTER}, Transformation(T.INDIRECT, S.FILTER)),
        ({"subtype": S.JOIN}, Transformation(T.INDIRECT, S.JOIN)),
        ({"subtype": S.GROUP_BY}, Transformation(T.INDIRECT, S.GROUP_BY)),
        ({"subtype": S.SORT}, Transformation(T.INDIRECT, S.SORT)),
        ({"subtype": S.WINDOW}, Transformation(T.INDIRECT, S.WINDOW)),
        ({"subtype": S.CONDITIONAL}, Transformation(T.INDIRECT, S.CONDITIONAL)),
        ({"subtype": S.WINDOW, "type": T.INDIRECT}, Transformation(T.INDIRECT, S.WINDOW)),
        ({"masking": True}, Transformation(T.DIRECT, S.TRANSFORMATION, masking=True)),
        ({"opaque": True}, Transformation(T.DIRECT, S.TRANSFORMATION, opaque=True)),
    ],
)
def test_transform_type_follows_the_subtype_unless_given(kwargs, expected) -> None:
    rec = _recorder()
    raw = rec.external_input("raw", "file:///in/x.csv")
    op = rec.transform("t", [raw["a"]], ["b"], **kwargs)
    assert op.operation.transformation == expected


@pytest.mark.parametrize(
    ("subtype", "kind", "owner"),
    [
        (S.CONDITIONAL, T.DIRECT, "INDIRECT"),  # what the Spark capture once wrote
        (S.WINDOW, T.DIRECT, "INDIRECT"),
        (S.IDENTITY, T.INDIRECT, "DIRECT"),
        (S.AGGREGATION, T.INDIRECT, "DIRECT"),
    ],
)
def test_pairs_outside_openlineages_vocabulary_are_refused(subtype, kind, owner) -> None:
    rec = _recorder()
    raw = rec.external_input("raw", "file:///in/x.csv")
    expected = (
        rf"{kind.name} {subtype.name} is not in OpenLineage's vocabulary: "
        rf"{subtype.name} is {owner}"
    )
    with pytest.raises(LineageError, match=rf"transform 't': {expected}"):
        rec.transform("t", [raw["a"]], ["b"], subtype=subtype, type=kind)
    hand_built = FieldOperation("h", (raw["a"],), ("b",), Transformation(kind, subtype))
    with pytest.raises(LineageError, match=rf"operation 'h': {expected}"):
        rec.record(hand_built)
    assert rec.operations == ()


def test_record_takes_a_hand_built_operation_and_checks_it() -> None:
    rec = _recorder()
    rec.external_input("raw", "file:///in/x.csv")
    op = FieldOperation("copy", (InputField("raw", "a"),), ("a",), writes=True)
    assert rec.record(op).operation == op
    with pytest.raises(LineageError, match=r"operation 'bad' reads 'a' from 'nowhere'"):
        rec.record(FieldOperation("bad", (InputField("nowhere", "a"),), ("a",)))


def test_event_needs_an_operation() -> None:
    rec = _recorder()
    rec.external_input("raw", "file:///in/x.csv")
    with pytest.raises(LineageError, match="no operation recorded"):
        rec.event(started_at=START)


def test_lineage_error_is_an_odf_chain_error_and_a_value_error() -> None:
    assert issubclass(LineageError, OdfChainError)
    assert issubclass(LineageError, ValueError)


# ---------------------------------------------------------------------------------------------
# Mistakes refused at record time


@pytest.fixture
def rec() -> LineageRecorder:
    recorder = _recorder(output_fields=OUT_PATHS)
    users = recorder.dataset_input("users", USERS_ID, USERS_BLOCK, fields=USER_PATHS)
    recorder.external_input("raw", "file:///in/x.csv")
    recorder.read("read", users, [ID, FIRST, LAST])
    return recorder


def test_refuses_a_second_operation_of_the_same_name(rec: LineageRecorder) -> None:
    users = rec.input("users")
    with pytest.raises(LineageError, match=r"operation 'read': an operation already has"):
        rec.read("read", users, [DOB])


def test_refuses_names_shared_by_an_input_and_an_operation(rec: LineageRecorder) -> None:
    with pytest.raises(LineageError, match=r"operation 'raw': an input already has this name"):
        rec.drop("raw", [rec.input("users")[DOB]])
    with pytest.raises(LineageError, match=r"input 'read': an operation already has this name"):
        rec.external_input("read", "file:///y.csv")
    with pytest.raises(LineageError, match=r"input 'users': an input already has this name"):
        rec.dataset_input("users", USERS_ID, USERS_BLOCK)


def test_refuses_an_unknown_output_of_an_operation(rec: LineageRecorder) -> None:
    with pytest.raises(LineageError, match=r"operation 'read' has no field 'dob'"):
        rec.operation("read")["dob"]
    hand_made = InputField("read", DOB)
    with pytest.raises(
        LineageError,
        match=r"operation 'concat' reads '\[version=2.0\]\.\[type=string\]\.dob' "
        r"from operation 'read', which has no such output",
    ):
        rec.transform("concat", [hand_made], ["name"])


def test_refuses_an_unknown_field_of_an_input_whose_fields_are_known(
    rec: LineageRecorder,
) -> None:
    with pytest.raises(LineageError, match=r"input 'users' has no field 'zip'"):
        rec.input("users")["zip"]
    with pytest.raises(LineageError, match=r"operation 't' reads 'zip' from input 'users'"):
        rec.transform("t", [InputField("users", "zip")], ["z"])
    # Without known fields, any path is taken as given.
    assert rec.input("raw")["zip"] == InputField("raw", "zip")


def test_refuses_an_ambiguous_dotted_name() -> None:
    rec = _recorder()
    u = rec.external_input(
        "u",
        "file:///u.avro",
        fields=["[version=2.0].[type=u].[type=int].v", "[version=2.0].[type=u].[type=string].v"],
    )
    with pytest.raises(LineageError, match=r"input 'u': 'v' names several fields"):
        u["v"]


def test_refuses_references_to_unknown_or_later_operations(rec: LineageRecorder) -> None:
    with pytest.raises(
        LineageError,
        match=r"operation 't' reads 'x' from 'later', which is neither an input nor an "
        r"earlier operation",
    ):
        rec.transform("t", [InputField("later", "x")], ["y"])
    with pytest.raises(LineageError, match=r"operation 'r2' reads 'nope', which is not an input"):
        rec.read("r2", "nope", ["a"])
    with pytest.raises(LineageError, match=r"operation 't' reads \('raw', 'a'\)"):
        rec.transform("t", [("raw", "a")], ["y"])  # type: ignore[list-item]


def test_refuses_reading_what_a_write_put_into_the_dataset(rec: LineageRecorder) -> None:
    rec.write("write", {"id": rec.operation("read")[ID]})
    with pytest.raises(LineageError, match=r"operation 't' reads .* from 'write', which writes"):
        rec.transform("t", [InputField("write", OUT_ID)], ["y"])


def test_refuses_writes_that_do_not_pair_fields_with_outputs(rec: LineageRecorder) -> None:
    r = rec.operation("read")
    with pytest.raises(LineageError, match=r"write 'w': 2 fields but 1 outputs"):
        rec.write("w", [r[ID], r[FIRST]], ["id"])
    with pytest.raises(LineageError, match=r"write 'w': outputs come from the mapping's keys"):
        rec.write("w", {"id": r[ID]}, ["id"])
    with pytest.raises(LineageError, match=r"write 'w' writes no field"):
        rec.write("w", [])


def test_refuses_writing_a_field_the_dataset_does_not_have(rec: LineageRecorder) -> None:
    r = rec.operation("read")
    with pytest.raises(LineageError, match=r"operation 'w': the dataset has no field 'zip'"):
        rec.write("w", {"zip": r[ID]})
    with pytest.raises(LineageError, match=r"operation 'w' writes 'zip', which the dataset"):
        rec.record(FieldOperation("w", (r[ID],), ("zip",), writes=True))


def test_refuses_empty_operations_and_duplicate_outputs(rec: LineageRecorder) -> None:
    r = rec.operation("read")
    with pytest.raises(LineageError, match=r"read 'r2' reads no field"):
        rec.read("r2", "users", [])
    with pytest.raises(LineageError, match=r"drop 'd' drops no field"):
        rec.drop("d", [])
    with pytest.raises(LineageError, match=r"transform 't' has no outputs"):
        rec.transform("t", [r[ID]], [])
    with pytest.raises(LineageError, match=r"operation 't' outputs 'x' twice"):
        rec.transform("t", [r[ID]], ["x", "x"])
    with pytest.raises(LineageError, match=r"operation 't' has an empty output name"):
        rec.transform("t", [r[ID]], [""])
    with pytest.raises(LineageError, match=r"an operation needs a name"):
        rec.transform("", [r[ID]], ["x"])


def test_refuses_an_external_input_without_uri_and_a_recorder_without_job() -> None:
    with pytest.raises(LineageError, match=r"external input 'raw' needs a URI"):
        _recorder().external_input("raw", "")
    with pytest.raises(LineageError, match="needs a job name"):
        LineageRecorder("")


def test_a_refused_operation_leaves_the_recorder_unchanged(rec: LineageRecorder) -> None:
    before = rec.operations
    with pytest.raises(LineageError):
        rec.transform("t", [InputField("read", "missing")], ["x"])
    assert rec.operations == before
    rec.transform("t", [rec.operation("read")[ID]], ["x"])  # the name is still free
    assert [op.name for op in rec.operations] == ["read", "t"]


def test_lookups_of_unknown_handles_are_refused(rec: LineageRecorder) -> None:
    with pytest.raises(LineageError, match=r"no input named 'x'"):
        rec.input("x")
    with pytest.raises(LineageError, match=r"no operation named 'x'"):
        rec.operation("x")
    with pytest.raises(LineageError, match=r"input 'raw': its fields were not given"):
        _ = rec.input("raw").fields
