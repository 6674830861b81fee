"""Field lineage as JSON (odf_chain.format.lineage_json): an exact, canonical round trip, and a
strict reader whose errors name the bad value's path."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings, strategies as st

from odf_chain.errors import FormatError
from odf_chain.format.events import AddFieldLineage, LineageRun, OffsetInterval
from odf_chain.format.lineage_json import lineage_from_json, lineage_to_json
from tests.test_codec import ADD_FIELD_LINEAGE, JSON_VALUES, LINEAGE_EVENT

WHERE = "block 12 extra['lineage']"

# What LINEAGE_EVENT (tests/test_codec.py: every part present) is written as, key order included:
# a change here is a change of the shape, which needs a new version.
LINEAGE_TEXT = (
    '{"v": 1, "run": {"job_name": "orders-daily", "run_id": "run-0042", '
    '"started_at": "2024-03-01T02:00:00.000500Z", "ended_at": "2024-03-01T02:05:00.000000Z", '
    '"offsets": {"start": 100, "end": 199}}, '
    '"inputs": [{"name": "customers", "uri": "file:///data/customers", '
    '"dataset_id": "did:odf:fed01' + bytes(range(100, 132)).hex() + '", '
    '"block_hash": "f1620' + "11" * 32 + '"}, '
    '{"name": "orders.csv", "uri": "s3://b/orders.csv", "content_hash": "f1e20'
    + "22"
    * 32
    + '"}], '
    '"operations": [{"name": "join", "inputs": ['
    '{"origin": "orders.csv", "field": "[version=2.0].[type=string].customer"}, '
    '{"origin": "customers", "field": "[version=2.0].[type=long].id"}], '
    '"outputs": ["customer"], "transformation": {"type": "INDIRECT", "subtype": "JOIN"}, '
    '"description": "orders join customers on id", "writes": false}, '
    '{"name": "mask", "inputs": [{"origin": "join", "field": "customer"}], '
    '"outputs": ["[version=2.0].[type=string].customer_hash"], '
    '"transformation": {"subtype": "TRANSFORMATION", "masking": true}}, '
    '{"name": "udf", "inputs": [{"origin": "orders.csv", '
    '"field": "[version=2.0].[type=string].note"}], "transformation": {"opaque": true}}]}'
)


def test_every_part_is_written_in_the_documented_shape():
    assert json.dumps(lineage_to_json(LINEAGE_EVENT)) == LINEAGE_TEXT


def test_defaults_are_left_out():
    event = AddFieldLineage(LineageRun("job", "run", datetime(2024, 1, 1, tzinfo=UTC)))
    assert lineage_to_json(event) == {
        "v": 1,
        "run": {"job_name": "job", "run_id": "run", "started_at": "2024-01-01T00:00:00.000000Z"},
    }


def test_years_before_1000_keep_four_digits():
    event = AddFieldLineage(LineageRun("j", "r", datetime(999, 1, 2, 3, 4, 5, 6, tzinfo=UTC)))
    doc = lineage_to_json(event)
    assert doc["run"]["started_at"] == "0999-01-02T03:04:05.000006Z"
    assert lineage_from_json(doc, WHERE) == event


def test_a_naive_time_is_not_written():
    event = AddFieldLineage(LineageRun("j", "r", datetime(2024, 1, 1)))
    with pytest.raises(FormatError, match="naive"):
        lineage_to_json(event)


# ---------------------------------------------------------------------------------------------
# Round trips


@settings(max_examples=300, deadline=None)
@given(event=ADD_FIELD_LINEAGE)
def test_round_trip(event):
    assert lineage_from_json(lineage_to_json(event), WHERE) == event


@settings(max_examples=300, deadline=None)
@given(event=ADD_FIELD_LINEAGE)
def test_json_text_round_trip(event):
    doc = lineage_to_json(event)
    # allow_nan=False and no default: anything but plain JSON values raises here
    for text in (
        json.dumps(doc, allow_nan=False),
        json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False),  # the encoder's
    ):
        parsed = json.loads(text)
        assert parsed == doc
        assert lineage_from_json(parsed, WHERE) == event


@settings(max_examples=200, deadline=None)
@given(
    event=ADD_FIELD_LINEAGE,
    shift=st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)),
)
def test_same_event_same_text(event, shift):
    """Equal events, even with their times in other zones, give the same text, key order
    included (nothing is sorted here)."""
    zone = timezone(shift)
    run = event.run
    moved = replace(
        event,
        run=replace(
            run,
            started_at=run.started_at.astimezone(zone),
            ended_at=None if run.ended_at is None else run.ended_at.astimezone(zone),
        ),
    )
    assert moved == event
    assert json.dumps(lineage_to_json(moved)) == json.dumps(lineage_to_json(event))


# ---------------------------------------------------------------------------------------------
# Strict reading


def _set(path: tuple, value: object) -> Callable[[dict], None]:
    def change(doc: dict) -> None:
        *parents, last = path
        for key in parents:
            doc = doc[key]
        doc[last] = value

    return change


def _drop(path: tuple) -> Callable[[dict], None]:
    def change(doc: dict) -> None:
        *parents, last = path
        for key in parents:
            doc = doc[key]
        del doc[last]

    return change


TIME = ("run", "started_at")
OFFSETS = ("run", "offsets")
T2 = ("operations", 2, "transformation")
MALFORMED = {
    # version
    "no version": (_drop(("v",)), "v"),
    "version 2": (_set(("v",), 2), "v"),
    "version true": (_set(("v",), True), "v"),
    "version as text": (_set(("v",), "1"), "v"),
    "version as float": (_set(("v",), 1.0), "v"),
    "unknown top key": (_set(("lineage",), {}), "lineage"),
    # run
    "no run": (_drop(("run",)), "run"),
    "run a list": (_set(("run",), []), "run"),
    "job name a number": (_set(("run", "job_name"), 7), "run.job_name"),
    "no run id": (_drop(("run", "run_id")), "run.run_id"),
    "unknown run key": (_set(("run", "status"), "ok"), "run.status"),
    "naive time": (_set(TIME, "2024-03-01T02:00:00.000500"), "run.started_at"),
    "time with offset": (_set(TIME, "2024-03-01T02:00:00.000500+00:00"), "run.started_at"),
    "time without micros": (_set(TIME, "2024-03-01T02:00:00Z"), "run.started_at"),
    "time with nanos": (_set(TIME, "2024-03-01T02:00:00.000500000Z"), "run.started_at"),
    "time with space": (_set(TIME, "2024-03-01 02:00:00.000500Z"), "run.started_at"),
    "time Feb 30": (_set(TIME, "2024-02-30T02:00:00.000500Z"), "run.started_at"),
    "time hour 24": (_set(TIME, "2024-03-01T24:00:00.000000Z"), "run.started_at"),
    "time other digits": (_set(TIME, "\uff12024-03-01T02:00:00.000500Z"), "run.started_at"),
    "time a number": (_set(TIME, 1709258400), "run.started_at"),
    "end time null": (_set(("run", "ended_at"), None), "run.ended_at"),
    "offsets a list": (_set(OFFSETS, [100, 199]), "run.offsets"),
    "offset negative": (_set((*OFFSETS, "start"), -1), "run.offsets.start"),
    "offset 2**64": (_set((*OFFSETS, "end"), 2**64), "run.offsets.end"),
    "offset true": (_set((*OFFSETS, "start"), True), "run.offsets.start"),
    "offset float": (_set((*OFFSETS, "end"), 199.0), "run.offsets.end"),
    "offset missing": (_drop((*OFFSETS, "end")), "run.offsets.end"),
    "unknown offsets key": (_set((*OFFSETS, "count"), 100), "run.offsets.count"),
    # inputs
    "inputs an object": (_set(("inputs",), {}), "inputs"),
    "inputs empty": (_set(("inputs",), []), "inputs"),
    "input a string": (_set(("inputs", 1), "orders.csv"), "inputs[1]"),
    "input without name": (_drop(("inputs", 0, "name")), "inputs[0].name"),
    "input uri null": (_set(("inputs", 1, "uri"), None), "inputs[1].uri"),
    "did not odf": (_set(("inputs", 0, "dataset_id"), "did:key:z6Mk"), "inputs[0].dataset_id"),
    "did upper case": (
        _set(("inputs", 0, "dataset_id"), "did:odf:fED01" + bytes(range(100, 132)).hex()),
        "inputs[0].dataset_id",
    ),
    "did short": (_set(("inputs", 0, "dataset_id"), "did:odf:fed01abcd"), "inputs[0].dataset_id"),
    "hash unknown code": (
        _set(("inputs", 0, "block_hash"), "f1220" + "11" * 32),
        "inputs[0].block_hash",
    ),
    "hash upper case": (
        _set(("inputs", 1, "content_hash"), "f1E20" + "22" * 32),
        "inputs[1].content_hash",
    ),
    "hash not multibase": (
        _set(("inputs", 1, "content_hash"), "1e20" + "22" * 32),
        "inputs[1].content_hash",
    ),
    "hash a number": (_set(("inputs", 1, "content_hash"), 0), "inputs[1].content_hash"),
    "unknown input key": (_set(("inputs", 1, "kind"), "file"), "inputs[1].kind"),
    # operations
    "operations empty": (_set(("operations",), []), "operations"),
    "operation a list": (_set(("operations", 1), ["mask"]), "operations[1]"),
    "operation name null": (_set(("operations", 0, "name"), None), "operations[0].name"),
    "field a number": (
        _set(("operations", 0, "inputs", 1, "field"), 3),
        "operations[0].inputs[1].field",
    ),
    "field missing": (
        _drop(("operations", 0, "inputs", 1, "origin")),
        "operations[0].inputs[1].origin",
    ),
    "unknown field key": (
        _set(("operations", 0, "inputs", 0, "path"), "x"),
        "operations[0].inputs[0].path",
    ),
    "operation inputs empty": (_set(("operations", 1, "inputs"), []), "operations[1].inputs"),
    "output null": (_set(("operations", 0, "outputs", 0), None), "operations[0].outputs[0]"),
    "outputs a string": (_set(("operations", 0, "outputs"), "customer"), "operations[0].outputs"),
    "description null": (_set(("operations", 0, "description"), None), "operations[0].description"),
    "writes true": (_set(("operations", 0, "writes"), True), "operations[0].writes"),
    "writes as text": (_set(("operations", 0, "writes"), "no"), "operations[0].writes"),
    "writes zero": (_set(("operations", 0, "writes"), 0), "operations[0].writes"),
    "unknown operation key": (_set(("operations", 2, "udf"), True), "operations[2].udf"),
    # transformations
    "unknown subtype": (_set((*T2, "subtype"), "NOPE"), "operations[2].transformation.subtype"),
    "subtype by number": (_set((*T2, "subtype"), 2), "operations[2].transformation.subtype"),
    "subtype lower case": (_set((*T2, "subtype"), "join"), "operations[2].transformation.subtype"),
    "subtype default": (_set((*T2, "subtype"), "IDENTITY"), "operations[2].transformation.subtype"),
    "type default": (_set((*T2, "type"), "DIRECT"), "operations[2].transformation.type"),
    "type dunder": (_set((*T2, "type"), "__class__"), "operations[2].transformation.type"),
    "opaque as text": (_set((*T2, "opaque"), "true"), "operations[2].transformation.opaque"),
    "opaque one": (_set((*T2, "opaque"), 1), "operations[2].transformation.opaque"),
    "masking false": (
        _set(("operations", 1, "transformation", "masking"), False),
        "operations[1].transformation.masking",
    ),
    "transformation empty": (_set(T2, {}), "operations[2].transformation"),
    "transformation a name": (_set(T2, "JOIN"), "operations[2].transformation"),
    "unknown transformation key": (_set((*T2, "kind"), "udf"), "operations[2].transformation.kind"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_document_names_the_bad_path(name):
    change, path = MALFORMED[name]
    doc = copy.deepcopy(lineage_to_json(LINEAGE_EVENT))
    lineage_from_json(doc, WHERE)  # the document is sound before the change
    change(doc)
    with pytest.raises(FormatError) as info:
        lineage_from_json(doc, WHERE)
    message = str(info.value)
    assert message.startswith(f"{WHERE}: ")
    assert f" at {path}: " in message


@pytest.mark.parametrize(
    "doc", [None, [], "lineage", 1, json.dumps(lineage_to_json(LINEAGE_EVENT))]
)
def test_not_an_object(doc):
    with pytest.raises(FormatError, match=r"^block 12 extra\['lineage'\]: .*expected an object"):
        lineage_from_json(doc, WHERE)


def test_a_later_version_is_refused_by_its_version_not_its_keys():
    with pytest.raises(FormatError, match=r" at v: unknown version 2"):
        lineage_from_json({"v": 2, "lineage": {}}, WHERE)


def test_largest_offsets_are_read():
    event = AddFieldLineage(
        LineageRun("j", "r", datetime(2024, 1, 1, tzinfo=UTC), offsets=OffsetInterval(0, 2**64 - 1))
    )
    assert lineage_from_json(lineage_to_json(event), WHERE) == event


def _paths(value: object, at: tuple = ()) -> list[tuple]:
    """Every place in a document (its keys and list items), the root included."""
    out = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*at, i))
    return out


# Values a lax reader might take for the right one: another type that Python finds equal, a
# default spelt out, an empty container.
NEAR_MISSES = [None, True, False, 0, 1, 1.0, -1, 2**64, "", [], {}, "DIRECT", "IDENTITY", "JOIN"]
# Keys of the shape (so an optional one is added where it was left out) and one of no shape.
KEYS = ["v", "inputs", "uri", "ended_at", "description", "writes", "masking", "type", "other"]


def _changes(doc: object) -> list[tuple[str, object]]:
    """Every document one change away from ``doc``: each place replaced by each near miss,
    each key dropped, each key of the shape added to each object; with what was done."""
    out: list[tuple[str, object]] = [(f"root = {v!r}", v) for v in NEAR_MISSES]
    for path in _paths(doc)[1:]:
        for value in [*NEAR_MISSES, _DROP]:
            changed = copy.deepcopy(doc)
            parent = changed
            for key in path[:-1]:
                parent = parent[key]
            if value is _DROP:
                if not isinstance(parent, dict):
                    continue
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            out.append((f"{path} = {'dropped' if value is _DROP else repr(value)}", changed))
    for path in _paths(doc):
        for key in KEYS:
            changed = copy.deepcopy(doc)
            target = changed
            for step in path:
                target = target[step]
            if isinstance(target, dict) and key not in target:
                target[key] = False if key in ("writes",) else "x"
                out.append((f"{path} + {key}", changed))
    return out


_DROP = object()


def _refused_or_canonical(doc: object) -> None:
    """``doc`` is refused with a FormatError (nothing else escapes), or is the one form its
    event is written as: the reader accepts no second spelling of an event."""
    try:
        event = lineage_from_json(doc, WHERE)
    except FormatError as exc:
        assert str(exc).startswith(f"{WHERE}: ")
        return
    # as text: 1.0 == 1 == True in Python, but not in the shape (key order is no part of it)
    assert json.dumps(lineage_to_json(event), sort_keys=True) == json.dumps(doc, sort_keys=True)


def test_one_change_away_is_refused_or_canonical():
    changes = _changes(lineage_to_json(LINEAGE_EVENT))
    assert len(changes) > 500
    for what, doc in changes:
        try:
            _refused_or_canonical(doc)
        except AssertionError as exc:
            raise AssertionError(f"after {what}") from exc


@st.composite
def _mutated(draw) -> object:
    """A generated event's document with one place replaced by any JSON value, or one key
    dropped or added."""
    doc = copy.deepcopy(lineage_to_json(draw(ADD_FIELD_LINEAGE)))
    path = draw(st.sampled_from(_paths(doc)))
    values = st.sampled_from(NEAR_MISSES) | JSON_VALUES
    if not path:
        return draw(values)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "drop":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.sampled_from(KEYS) | st.text(max_size=12))] = draw(values)
    else:
        parent[path[-1]] = draw(values)
    return doc


@settings(max_examples=300, deadline=None)
@given(doc=_mutated())
def test_what_is_read_is_exactly_what_would_be_written(doc):
    _refused_or_canonical(doc)
