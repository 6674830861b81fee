"""The field graph: events resolved into field-to-field edges (combined transformations, the
operations on the way, drops), several runs and datasets folded together, traversals with depth
limits, CDAP-style summaries and the run of an offset. Every expected edge, drop and summary is
written out by hand from what the hand-built operations mean."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

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
from odf_chain.lineage import (
    SIGNIFICANCE,
    BlockRef,
    EventRef,
    FieldDrop,
    FieldGraph,
    FieldRef,
    LineageError,
    LineageRecorder,
    Reached,
    RunOperations,
    combine,
    combine_all,
    copies_pairwise,
    resolve,
)

T0 = datetime(2024, 3, 1, tzinfo=UTC)

IDENT = Transformation()
TRANSFORM = Transformation(T.DIRECT, S.TRANSFORMATION)
AGGREGATE = Transformation(T.DIRECT, S.AGGREGATION)
FILTER = Transformation(T.INDIRECT, S.FILTER)
GROUP = Transformation(T.INDIRECT, S.GROUP_BY)
JOIN = Transformation(T.INDIRECT, S.JOIN)
SORT = Transformation(T.INDIRECT, S.SORT)
WINDOW = Transformation(T.INDIRECT, S.WINDOW)
CONDITIONAL = Transformation(T.INDIRECT, S.CONDITIONAL)
MASK = Transformation(T.DIRECT, S.TRANSFORMATION, masking=True)
UDF = Transformation(T.DIRECT, S.TRANSFORMATION, opaque=True)


def _did(byte: int) -> DatasetId:
    return DatasetId(bytes([byte]) * 32)


def _hash(byte: int) -> Multihash:
    return Multihash("blake3", bytes([byte]) * 32)


A_ID, B_ID, C_ID = _did(0xA1), _did(0xB2), _did(0xC3)
A, B, C = A_ID.to_did(), B_ID.to_did(), C_ID.to_did()
assert A < B < C  # level order in traversals is by dataset key, then path


def _run(run_id: str, minute: int, offsets: tuple[int, int] | None = None) -> LineageRun:
    interval = None if offsets is None else OffsetInterval(*offsets)
    return LineageRun("job", run_id, T0 + timedelta(minutes=minute), None, interval)


def _op(
    name: str,
    inputs: list[tuple[str, str]],
    outputs: list[str] | tuple[str, ...] = (),
    step: Transformation = IDENT,
    *,
    writes: bool = False,
) -> FieldOperation:
    refs = tuple(InputField(origin, field) for origin, field in inputs)
    return FieldOperation(name, refs, tuple(outputs), step, None, writes)


def _pinned(name: str, dataset: DatasetId, block: int) -> LineageInput:
    return LineageInput(name, dataset_id=dataset, block_hash=_hash(block))


def _external(name: str, uri: str) -> LineageInput:
    return LineageInput(name, uri=uri)


def _edges(edges) -> set[tuple]:
    return {(e.source, e.target, e.transformation, e.operations, e.run.run_id) for e in edges}


def _all_edges(graph: FieldGraph) -> set[tuple]:
    return {
        view
        for dataset in graph.datasets()
        for path in graph.fields(dataset)
        for view in _edges(graph.edges_into(FieldRef(dataset, path)))
    }


def _drops(drops) -> set[tuple]:
    return {(d.field, d.operation, d.operations, d.only_dropped, d.run.run_id) for d in drops}


# ---------------------------------------------------------------------------------------------
# Composing transformations


@pytest.mark.parametrize(
    ("first", "then", "expected"),
    [
        (IDENT, IDENT, IDENT),
        (IDENT, TRANSFORM, TRANSFORM),
        (TRANSFORM, AGGREGATE, AGGREGATE),
        (AGGREGATE, SORT, SORT),
        (SORT, CONDITIONAL, CONDITIONAL),
        (CONDITIONAL, WINDOW, WINDOW),
        (WINDOW, FILTER, FILTER),
        (FILTER, GROUP, GROUP),
        (GROUP, JOIN, JOIN),
        (AGGREGATE, FILTER, FILTER),
        (MASK, AGGREGATE, Transformation(T.DIRECT, S.AGGREGATION, masking=True)),
        (UDF, FILTER, Transformation(T.INDIRECT, S.FILTER, opaque=True)),
        (MASK, UDF, Transformation(T.DIRECT, S.TRANSFORMATION, masking=True, opaque=True)),
        # An INDIRECT step with a direct subtype still makes the chain indirect.
        (Transformation(T.INDIRECT, S.TRANSFORMATION), IDENT, Transformation(T.INDIRECT, 1)),
        # An older chain's DIRECT CONDITIONAL (a value chosen among candidates) is read as
        # OpenLineage's DIRECT TRANSFORMATION, and composes as one.
        (Transformation(T.DIRECT, S.CONDITIONAL), IDENT, TRANSFORM),
        (Transformation(T.DIRECT, S.CONDITIONAL), AGGREGATE, AGGREGATE),
        (
            Transformation(T.DIRECT, S.CONDITIONAL, masking=True),
            FILTER,
            Transformation(T.INDIRECT, S.FILTER, masking=True),
        ),
        (Transformation(T.DIRECT, S.WINDOW), SORT, SORT),
    ],
)
def test_combine(first, then, expected) -> None:
    assert combine(first, then) == expected
    assert combine(then, first) == expected


def test_combine_all_and_the_significance_order() -> None:
    assert combine_all([]) == IDENT
    assert combine_all([TRANSFORM, MASK, GROUP, AGGREGATE]) == Transformation(
        T.INDIRECT, S.GROUP_BY, masking=True
    )
    assert sorted(SIGNIFICANCE) == sorted(S)
    assert SIGNIFICANCE[0] == S.IDENTITY and SIGNIFICANCE[-1] == S.JOIN


# ---------------------------------------------------------------------------------------------
# One event


def test_cdap_normalizer_edges_and_drops() -> None:
    """Read users (A), concatenate first and last into name, drop them, drop ssn unused, write
    uid, name, dob and zip into B."""
    event = AddFieldLineage(
        _run("r1", 0, (0, 9)),
        (_pinned("users", A_ID, 4),),
        (
            _op(
                "read",
                [("users", f) for f in ["uid", "first", "last", "dob", "zip", "ssn"]],
                ["uid", "first", "last", "dob", "zip", "ssn"],
            ),
            _op("concat", [("read", "first"), ("read", "last")], ["name"], TRANSFORM),
            _op("drop names", [("read", "first"), ("read", "last")]),
            _op("drop secret", [("read", "ssn")]),
            _op(
                "write",
                [("read", "uid"), ("concat", "name"), ("read", "dob"), ("read", "zip")],
                ["uid", "name", "dob", "zip"],
                writes=True,
            ),
        ),
    )
    graph = FieldGraph()
    assert graph.add_event(B, event, (5, "fblock5"))

    def a(path: str) -> FieldRef:
        return FieldRef(A, path)

    def b(path: str) -> FieldRef:
        return FieldRef(B, path)

    assert _all_edges(graph) == {
        (a("uid"), b("uid"), IDENT, ("read", "write"), "r1"),
        (a("first"), b("name"), TRANSFORM, ("read", "concat", "write"), "r1"),
        (a("last"), b("name"), TRANSFORM, ("read", "concat", "write"), "r1"),
        (a("dob"), b("dob"), IDENT, ("read", "write"), "r1"),
        (a("zip"), b("zip"), IDENT, ("read", "write"), "r1"),
    }
    assert _drops(graph.drops_of(a("first"))) == {
        (a("first"), "drop names", ("read", "drop names"), False, "r1")
    }
    assert _drops(graph.drops_of(a("last"))) == {
        (a("last"), "drop names", ("read", "drop names"), False, "r1")
    }
    assert _drops(graph.drops_of(a("ssn"))) == {
        (a("ssn"), "drop secret", ("read", "drop secret"), True, "r1")
    }
    assert graph.drops_of(a("uid")) == ()
    assert set(graph.fields(B)) == {"uid", "name", "dob", "zip"}
    assert set(graph.fields(A)) == {"uid", "first", "last", "dob", "zip", "ssn"}

    ref = EventRef(B, _run("r1", 0, (0, 9)), BlockRef(5, "fblock5"))
    assert graph.events() == (ref,)
    edge = graph.edges_into(b("uid"))[0]
    assert edge.event == ref and edge.run.run_id == "r1"
    assert edge.source_input == _pinned("users", A_ID, 4)

    incoming = graph.incoming(b("name"))
    assert incoming.origins == (a("first"), a("last"))
    assert incoming.runs == (RunOperations(ref, ("read", "concat", "write")),)

    outgoing = graph.outgoing(a("first"))
    assert outgoing.destinations == (b("name"),)
    assert _drops(outgoing.drops) == {
        (a("first"), "drop names", ("read", "drop names"), False, "r1")
    }
    assert outgoing.runs == (RunOperations(ref, ("read", "concat", "drop names", "write")),)

    lost = graph.outgoing(a("ssn"))
    assert lost.destinations == ()
    assert [(d.operation, d.only_dropped) for d in lost.drops] == [("drop secret", True)]
    assert lost.runs == (RunOperations(ref, ("read", "drop secret")),)


def test_a_field_read_and_used_by_nothing_is_kept_with_its_read() -> None:
    """CDAP keeps a field that is read but used by no later operation, with its read: here
    ``nickname`` and ``ssn`` are read and go nowhere (``ssn`` is not even dropped), ``first``
    is read twice, once into a write and once into nothing."""
    event = AddFieldLineage(
        _run("r1", 0),
        (_pinned("users", A_ID, 4),),
        (
            _op("read", [("users", f) for f in ["uid", "nickname", "ssn"]], ["uid", "nick", "ssn"]),
            _op("peek", [("users", "first")], ["first"]),
            _op("name", [("users", "first")], ["name"], TRANSFORM),
            _op("write", [("read", "uid"), ("name", "name")], ["uid", "name"], writes=True),
        ),
    )
    graph = FieldGraph()
    graph.add_event(B, event, (5, "fblock5"))
    ref = EventRef(B, _run("r1", 0), BlockRef(5, "fblock5"))

    def a(path: str) -> FieldRef:
        return FieldRef(A, path)

    assert set(graph.fields(A)) == {"uid", "nickname", "ssn", "first"}
    kept = {
        (u.field, u.operation, u.output, u.transformation, u.operations, u.only_unused)
        for path in ("uid", "nickname", "ssn", "first")
        for u in graph.unused_of(a(path))
    }
    assert kept == {
        (a("nickname"), "read", "nick", IDENT, ("read",), True),
        (a("ssn"), "read", "ssn", IDENT, ("read",), True),
        (a("first"), "peek", "first", IDENT, ("peek",), False),  # it also reaches name
    }
    (unused,) = graph.unused_of(a("ssn"))
    assert unused.event == ref and unused.source_input == _pinned("users", A_ID, 4)

    lost = graph.outgoing(a("ssn"))
    assert lost.destinations == () and lost.drops == ()
    assert [(u.operation, u.output) for u in lost.unused] == [("read", "ssn")]
    assert lost.runs == (RunOperations(ref, ("read",)),)  # CDAP's outgoing operations: the read
    first = graph.outgoing(a("first"))
    assert first.destinations == (FieldRef(B, "name"),)
    assert first.runs == (RunOperations(ref, ("peek", "name", "write")),)

    resolution = resolve(event)
    assert {(u.source, u.operation, u.output) for u in resolution.unused} == {
        ("nickname", "read", "nick"),
        ("ssn", "read", "ssn"),
        ("first", "peek", "first"),
    }


def test_outputs_that_are_dropped_or_written_are_not_unused() -> None:
    event = AddFieldLineage(
        _run("r1", 0),
        (_external("raw", "file:///in/r.csv"),),
        (
            _op("read", [("raw", "a"), ("raw", "b")], ["a", "b"]),
            _op("drop b", [("read", "b")]),
            _op("write", [("read", "a")], ["a"], writes=True),
        ),
    )
    assert resolve(event).unused == ()
    graph = FieldGraph()
    graph.add_event(B, event)
    assert graph.unused_of(FieldRef("file:///in/r.csv", "b")) == ()
    assert graph.outgoing(FieldRef("file:///in/r.csv", "b")).unused == ()


def test_identity_copies_pairwise_every_other_operation_all_to_all() -> None:
    raw = "file:///in/r.csv"
    event = AddFieldLineage(
        _run("r1", 0),
        (_external("raw", raw), _external("other", "file:///in/o.csv")),
        (
            _op("copy", [("raw", "a"), ("raw", "b")], ["a", "b"], writes=True),
            _op("mix", [("raw", "a"), ("raw", "b")], ["s", "d"], TRANSFORM, writes=True),
            _op("fan", [("raw", "c")], ["c1", "c2"], writes=True),
            # Two inputs copied into one output: a union.
            _op("union", [("raw", "n"), ("other", "n")], ["n", "n"], writes=True),
        ),
    )
    assert [copies_pairwise(op) for op in event.operations] == [True, False, False, True]
    graph = FieldGraph()
    graph.add_event(B, event)

    def r(path: str) -> FieldRef:
        return FieldRef(raw, path)

    def b(path: str) -> FieldRef:
        return FieldRef(B, path)

    assert _all_edges(graph) == {
        (r("a"), b("a"), IDENT, ("copy",), "r1"),
        (r("b"), b("b"), IDENT, ("copy",), "r1"),
        (r("a"), b("s"), TRANSFORM, ("mix",), "r1"),
        (r("b"), b("s"), TRANSFORM, ("mix",), "r1"),
        (r("a"), b("d"), TRANSFORM, ("mix",), "r1"),
        (r("b"), b("d"), TRANSFORM, ("mix",), "r1"),
        (r("c"), b("c1"), IDENT, ("fan",), "r1"),
        (r("c"), b("c2"), IDENT, ("fan",), "r1"),
        (r("n"), b("n"), IDENT, ("union",), "r1"),
        (FieldRef("file:///in/o.csv", "n"), b("n"), IDENT, ("union",), "r1"),
    }


def test_many_paths_one_edge_per_combined_transformation_in_any_listing_order() -> None:
    """raw.a reaches x through p and through q (both TRANSFORMATION: one edge naming p, q and x)
    and through the filter f (another edge); the event lists x before what it reads."""
    event = AddFieldLineage(
        _run("r1", 0),
        (_external("raw", "file:///r"),),
        (
            _op("x", [("p", "p"), ("q", "q")], ["x"], TRANSFORM, writes=True),
            _op("p", [("raw", "a")], ["p"], TRANSFORM),
            _op("q", [("raw", "a")], ["q"], TRANSFORM),
            _op("f", [("raw", "a")], ["x"], FILTER, writes=True),
        ),
    )
    graph = FieldGraph()
    graph.add_event(B, event)
    source, target = FieldRef("file:///r", "a"), FieldRef(B, "x")
    assert _edges(graph.edges_into(target)) == {
        (source, target, TRANSFORM, ("p", "q", "x"), "r1"),
        (source, target, FILTER, ("f",), "r1"),
    }
    assert graph.edge_count == 2
    assert graph.upstream(target) == (Reached(source, 1),)


def test_masking_opaque_and_indirect_steps_propagate_along_the_chain() -> None:
    event = AddFieldLineage(
        _run("r1", 0),
        (_external("raw", "file:///r"),),
        (
            _op("hash", [("raw", "email")], ["h"], MASK),
            _op("upper", [("hash", "h")], ["u"], TRANSFORM),
            _op("w1", [("upper", "u")], ["email_hash"], writes=True),
            _op("filt", [("hash", "h")], ["kept"], FILTER, writes=True),
            _op("udf", [("raw", "score")], ["s"], UDF),
            _op("agg", [("udf", "s")], ["total"], AGGREGATE, writes=True),
            _op("group", [("raw", "country")], ["total"], GROUP, writes=True),
            _op("join", [("raw", "k")], ["j"], JOIN),
            _op("cond", [("join", "j")], ["flag"], CONDITIONAL, writes=True),
        ),
    )
    graph = FieldGraph()
    graph.add_event(B, event)

    def r(path: str) -> FieldRef:
        return FieldRef("file:///r", path)

    def b(path: str) -> FieldRef:
        return FieldRef(B, path)

    assert _all_edges(graph) == {
        (r("email"), b("email_hash"), MASK, ("hash", "upper", "w1"), "r1"),
        (
            r("email"),
            b("kept"),
            Transformation(T.INDIRECT, S.FILTER, masking=True),
            ("hash", "filt"),
            "r1",
        ),
        (
            r("score"),
            b("total"),
            Transformation(T.DIRECT, S.AGGREGATION, opaque=True),
            ("udf", "agg"),
            "r1",
        ),
        (r("country"), b("total"), GROUP, ("group",), "r1"),
        (r("k"), b("flag"), JOIN, ("join", "cond"), "r1"),
    }


def test_a_written_field_without_sources_is_a_node_with_no_origin() -> None:
    event = AddFieldLineage(_run("r1", 0), (), (_op("const", [], ["one"], writes=True),))
    graph = FieldGraph()
    graph.add_event(B, event)
    assert graph.fields(B) == ("one",)
    assert graph.edge_count == 0
    summary = graph.incoming(FieldRef(B, "one"))
    assert summary.origins == () and summary.runs == ()


# ---------------------------------------------------------------------------------------------
# Several runs into one dataset

JAN, FEB = "file:///in/jan.csv", "file:///in/feb.csv"


def _monthly_runs() -> list[tuple[AddFieldLineage, tuple[int, str]]]:
    """r1 and r3 copy jan.csv into B; r2 trims feb.csv's full_name into name; r4 wrote nothing.
    ``name`` is written by r1, r2 and r3."""
    copy_jan = (_op("write", [("jan", "id"), ("jan", "name")], ["id", "name"], writes=True),)
    r1 = AddFieldLineage(_run("r1", 1, (0, 9)), (_external("jan", JAN),), copy_jan)
    r2 = AddFieldLineage(
        _run("r2", 2, (10, 24)),
        (_external("feb", FEB),),
        (
            _op("copy id", [("feb", "id")], ["id"], writes=True),
            _op("trim", [("feb", "full_name")], ["name"], TRANSFORM, writes=True),
        ),
    )
    r3 = AddFieldLineage(_run("r3", 3, (25, 30)), (_external("jan", JAN),), copy_jan)
    r4 = AddFieldLineage(_run("r4", 4), (_external("jan", JAN),), copy_jan)
    return [(r1, (3, "fb3")), (r3, (8, "fb8")), (r2, (6, "fb6")), (r4, (9, "fb9"))]


def test_several_runs_write_the_same_field() -> None:
    graph = FieldGraph()
    for event, block in _monthly_runs():
        graph.add_event(B, event, block)
    name = FieldRef(B, "name")
    jan_name, feb_name = FieldRef(JAN, "name"), FieldRef(FEB, "full_name")
    assert _edges(graph.edges_into(name)) == {
        (jan_name, name, IDENT, ("write",), "r1"),
        (feb_name, name, TRANSFORM, ("trim",), "r2"),
        (jan_name, name, IDENT, ("write",), "r3"),
        (jan_name, name, IDENT, ("write",), "r4"),
    }
    assert graph.edge_count == 8
    up = graph.upstream(name, with_edges=True)
    assert [(r.field, r.distance) for r in up] == [(feb_name, 1), (jan_name, 1)]
    assert {e.run.run_id for e in up[1].edges} == {"r1", "r3", "r4"}
    assert graph.downstream(jan_name) == (Reached(name, 1),)

    incoming = graph.incoming(name)
    assert incoming.origins == (feb_name, jan_name)
    # Nearest first, then in chain order (blocks 3, 6, 8, 9).
    assert [(r.event.run.run_id, r.event.block, r.operations) for r in incoming.runs] == [
        ("r1", BlockRef(3, "fb3"), ("write",)),
        ("r2", BlockRef(6, "fb6"), ("trim",)),
        ("r3", BlockRef(8, "fb8"), ("write",)),
        ("r4", BlockRef(9, "fb9"), ("write",)),
    ]


def test_the_run_of_an_offset() -> None:
    graph = FieldGraph()
    for event, block in _monthly_runs():
        graph.add_event(B, event, block)
    expected = {-1: None, 0: "r1", 9: "r1", 10: "r2", 24: "r2", 25: "r3", 30: "r3", 31: None}
    for offset, run_id in expected.items():
        found = graph.run_for_offset(B, offset)
        assert (None if found is None else found.run_id) == run_id, offset
    assert graph.event_for_offset(B, 12).block == BlockRef(6, "fb6")
    assert graph.run_for_offset(A, 0) is None
    assert [e.run.run_id for e in graph.events(B)] == ["r1", "r3", "r2", "r4"]


def test_an_event_is_added_once() -> None:
    graph = FieldGraph()
    (event, block), *_ = _monthly_runs()
    assert graph.add_event(B, event, block) is True
    assert graph.add_event(B, event, block) is False
    assert graph.edge_count == 2
    assert len(graph.events()) == 1


# ---------------------------------------------------------------------------------------------
# Across datasets

F = "s3://bucket/raw.json"


def _a_event() -> AddFieldLineage:
    """A reads the external F: w cleaned into z, v copied."""
    return AddFieldLineage(
        _run("ra", 0, (0, 99)),
        (_external("raw", F),),
        (
            _op("clean", [("raw", "w")], ["z"], TRANSFORM, writes=True),
            _op("copy", [("raw", "v")], ["v"], writes=True),
        ),
    )


def _b_event() -> AddFieldLineage:
    """B reads A at its block 4: z copied into y, v read and dropped."""
    return AddFieldLineage(
        _run("rb", 10, (0, 49)),
        (_pinned("a", A_ID, 4),),
        (
            _op("read", [("a", "z"), ("a", "v")], ["z", "v"]),
            _op("write y", [("read", "z")], ["y"], writes=True),
            _op("drop v", [("read", "v")]),
        ),
    )


def _c_event() -> AddFieldLineage:
    """C reads B and A: x sums B.y; v copies A.v; k joins on A.z and keeps B.y."""
    return AddFieldLineage(
        _run("rc", 20, (0, 9)),
        (_pinned("b", B_ID, 2), _pinned("a", A_ID, 4)),
        (
            _op("sum", [("b", "y")], ["x"], AGGREGATE, writes=True),
            _op("copy v", [("a", "v")], ["v"], writes=True),
            _op("key", [("a", "z")], ["k"], JOIN, writes=True),
            _op("keep", [("b", "y")], ["k"], writes=True),
        ),
    )


def _three_datasets() -> FieldGraph:
    """Each dataset's graph built on its own and merged, as a replay across datasets would:
    B's graph holds A's events too, so A's arrive twice in C's."""
    graph_a = FieldGraph()
    graph_a.add_event(A_ID, _a_event(), (4, "fa4"))  # a DatasetId is keyed by its text
    graph_b = FieldGraph()
    graph_b.add_event(B, _b_event(), (2, "fb2"))
    graph_b.merge(graph_a)
    graph_c = FieldGraph()
    graph_c.add_event(C, _c_event(), (7, "fc7"))
    graph_c.merge(graph_b)
    graph_c.merge(graph_a)
    return graph_c


def test_merging_counts_each_event_once() -> None:
    graph = _three_datasets()
    assert graph.edge_count == 7  # A: 2, B: 1, C: 4
    assert [(e.dataset, e.run.run_id) for e in graph.events()] == [
        (C, "rc"),
        (B, "rb"),
        (A, "ra"),
    ]
    assert graph.datasets() == tuple(sorted([A, B, C, F]))


def test_upstream_across_datasets_with_depth_limits() -> None:
    graph = _three_datasets()
    x = FieldRef(C, "x")
    y, z, w = FieldRef(B, "y"), FieldRef(A, "z"), FieldRef(F, "w")
    assert graph.upstream(x) == (Reached(y, 1),)
    assert graph.upstream(x, depth=1) == (Reached(y, 1),)
    assert graph.upstream(x, depth=2) == (Reached(y, 1), Reached(z, 2))
    assert graph.upstream(x, depth=3) == (Reached(y, 1), Reached(z, 2), Reached(w, 3))
    assert graph.upstream(x, depth=None) == graph.upstream(x, depth=3)
    assert graph.upstream(x, depth=50) == graph.upstream(x, depth=3)
    # k is reached from A.z directly and through B.y: A.z counts at its shortest distance.
    k = FieldRef(C, "k")
    assert graph.upstream(k, depth=None) == (Reached(z, 1), Reached(y, 1), Reached(w, 2))
    assert graph.upstream(w, depth=None) == ()


def test_downstream_across_datasets_with_depth_limits() -> None:
    graph = _three_datasets()
    w = FieldRef(F, "w")
    z, y, k, x = FieldRef(A, "z"), FieldRef(B, "y"), FieldRef(C, "k"), FieldRef(C, "x")
    assert graph.downstream(w) == (Reached(z, 1),)
    assert graph.downstream(w, depth=2) == (Reached(z, 1), Reached(y, 2), Reached(k, 2))
    assert graph.downstream(w, depth=None) == (
        Reached(z, 1),
        Reached(y, 2),
        Reached(k, 2),
        Reached(x, 3),
    )
    with pytest.raises(LineageError, match="depth must be at least 1"):
        graph.downstream(w, depth=0)


def test_traversal_edges_link_each_field_to_the_nearer_ones() -> None:
    graph = _three_datasets()
    k = FieldRef(C, "k")
    z, y, w = FieldRef(A, "z"), FieldRef(B, "y"), FieldRef(F, "w")
    found = graph.upstream(k, depth=None, with_edges=True)
    assert [(r.field, _edges(r.edges)) for r in found] == [
        (z, {(z, k, JOIN, ("key",), "rc")}),
        (y, {(y, k, IDENT, ("keep",), "rc")}),
        (w, {(w, z, TRANSFORM, ("clean",), "ra")}),
    ]
    (edge,) = found[0].edges
    assert edge.source_input == _pinned("a", A_ID, 4)


def test_incoming_summary_across_datasets() -> None:
    graph = _three_datasets()
    summary = graph.incoming(FieldRef(C, "x"))
    assert summary.origins == (FieldRef(F, "w"),)
    assert [(r.event.run.run_id, r.operations) for r in summary.runs] == [
        ("rc", ("sum",)),
        ("rb", ("read", "write y")),
        ("ra", ("clean",)),
    ]
    k = graph.incoming(FieldRef(C, "k"))
    assert k.origins == (FieldRef(F, "w"),)
    assert [(r.event.run.run_id, r.operations) for r in k.runs] == [
        ("rc", ("key", "keep")),
        ("ra", ("clean",)),
        ("rb", ("read", "write y")),
    ]


def test_outgoing_summary_across_datasets_with_a_downstream_drop() -> None:
    graph = _three_datasets()
    v_f, v_a, v_c = FieldRef(F, "v"), FieldRef(A, "v"), FieldRef(C, "v")
    summary = graph.outgoing(v_f)
    assert summary.destinations == (v_a, v_c)
    assert summary.drops == (
        FieldDrop(
            v_a,
            "drop v",
            IDENT,
            ("read", "drop v"),
            EventRef(B, _run("rb", 10, (0, 49)), BlockRef(2, "fb2")),
            _pinned("a", A_ID, 4),
            only_dropped=True,
        ),
    )
    assert [(r.event.run.run_id, r.operations) for r in summary.runs] == [
        ("ra", ("copy",)),
        ("rb", ("read", "drop v")),
        ("rc", ("copy v",)),
    ]
    w = graph.outgoing(FieldRef(F, "w"))
    assert w.destinations == (
        FieldRef(A, "z"),
        FieldRef(B, "y"),
        FieldRef(C, "k"),
        FieldRef(C, "x"),
    )
    assert w.drops == ()


def test_a_cycle_across_datasets_is_walked_once() -> None:
    """A at one block derived p from B.q; B later derived q from A.p."""
    graph = FieldGraph()
    graph.add_event(
        A,
        AddFieldLineage(
            _run("ra", 0), (_pinned("b", B_ID, 1),), (_op("w", [("b", "q")], ["p"], writes=True),)
        ),
    )
    graph.add_event(
        B,
        AddFieldLineage(
            _run("rb", 1), (_pinned("a", A_ID, 2),), (_op("w", [("a", "p")], ["q"], writes=True),)
        ),
    )
    p, q = FieldRef(A, "p"), FieldRef(B, "q")
    assert graph.upstream(p, depth=None) == (Reached(q, 1),)
    assert graph.downstream(p, depth=None) == (Reached(q, 1),)
    summary = graph.incoming(p)
    assert summary.origins == ()
    assert [r.event.run.run_id for r in summary.runs] == ["ra", "rb"]


# ---------------------------------------------------------------------------------------------
# The recorder's events in the graph


def test_a_recorded_event_folds_into_the_expected_edges() -> None:
    rec = LineageRecorder("enrich", "run-7")
    users = rec.dataset_input("users", A_ID, _hash(4))
    raw = rec.external_input("raw", "file:///in/x.csv")
    r = rec.read("read users", users, ["id", "first", "last", "dob"])
    name = rec.transform("concat", [r["first"], r["last"]], ["name"])
    rec.drop("drop dob", [r["dob"]])
    country = rec.transform("lookup", [raw["code"]], ["country"], subtype=S.CONDITIONAL)
    rec.write("write", {"id": r["id"], "name": name["name"], "country": country["country"]})
    graph = FieldGraph()
    graph.add_event(B, rec.event(started_at=T0, offsets=OffsetInterval(0, 4)), (3, "fb3"))

    def a(path: str) -> FieldRef:
        return FieldRef(A, path)

    def b(path: str) -> FieldRef:
        return FieldRef(B, path)

    x = FieldRef("file:///in/x.csv", "code")
    assert _all_edges(graph) == {
        (a("id"), b("id"), IDENT, ("read users", "write"), "run-7"),
        (a("first"), b("name"), TRANSFORM, ("read users", "concat", "write"), "run-7"),
        (a("last"), b("name"), TRANSFORM, ("read users", "concat", "write"), "run-7"),
        (x, b("country"), CONDITIONAL, ("lookup", "write"), "run-7"),
    }
    assert _drops(graph.drops_of(a("dob"))) == {
        (a("dob"), "drop dob", ("read users", "drop dob"), True, "run-7")
    }
    assert graph.run_for_offset(B, 4).run_id == "run-7"


# ---------------------------------------------------------------------------------------------
# Events that cannot be resolved


@pytest.mark.parametrize(
    ("operations", "message"),
    [
        (
            [_op("a", [("b", "x")], ["x"]), _op("b", [("a", "x")], ["x"], writes=True)],
            "operations read from each other in a cycle: a, b",
        ),
        ([_op("a", [("a", "x")], ["x"], writes=True)], "in a cycle: a"),
        (
            [_op("a", [("nowhere", "x")], ["x"], writes=True)],
            "operation 'a' reads from 'nowhere', which is neither an input nor an operation",
        ),
        (
            [_op("a", [("raw", "x")], ["y"]), _op("b", [("a", "x")], ["x"], writes=True)],
            "operation 'b' reads 'x' from operation 'a', which has no such output",
        ),
        (
            [_op("a", [("raw", "x")], ["x"], writes=True), _op("a", [("raw", "y")], ["y"])],
            "two operations are named 'a'",
        ),
        ([_op("raw", [("raw", "x")], ["x"], writes=True)], "operation 'raw' has the name of"),
    ],
)
def test_unresolvable_events_are_refused(operations, message) -> None:
    event = AddFieldLineage(_run("r", 0), (_external("raw", "file:///r"),), tuple(operations))
    graph = FieldGraph()
    with pytest.raises(LineageError, match=message):
        graph.add_event(B, event)
    assert graph.events() == () and graph.edge_count == 0


def test_an_input_with_neither_dataset_id_nor_uri_is_refused() -> None:
    event = AddFieldLineage(
        _run("r", 0), (LineageInput("ghost"),), (_op("w", [("ghost", "x")], ["x"], writes=True),)
    )
    with pytest.raises(LineageError, match="input 'ghost' has neither a dataset id nor a URI"):
        FieldGraph().add_event(B, event)


# ---------------------------------------------------------------------------------------------
# Size


def test_a_wide_event_and_its_downstream_build_a_ten_thousand_edge_graph() -> None:
    """B reads 5,000 fields of A, transforms every even one by its own operation and writes
    them all; C copies all of B: 10,000 edges."""
    width = 5000
    names = [f"f{i}" for i in range(width)]
    uppers = [
        _op(f"upper {i}", [("read", names[i])], [names[i]], TRANSFORM) for i in range(0, width, 2)
    ]
    sources = [("upper " + n[1:] if i % 2 == 0 else "read", n) for i, n in enumerate(names)]
    wide = AddFieldLineage(
        _run("rb", 0, (0, 999)),
        (_pinned("a", A_ID, 1),),
        (
            _op("read", [("a", n) for n in names], names),
            *uppers,
            _op("write", sources, names, writes=True),
        ),
    )
    copy = AddFieldLineage(
        _run("rc", 1, (0, 999)),
        (_pinned("b", B_ID, 2),),
        (_op("copy", [("b", n) for n in names], names, writes=True),),
    )
    graph = FieldGraph()
    graph.add_event(B, wide, (2, "fb2"))
    graph.add_event(C, copy, (3, "fc3"))
    assert graph.edge_count == 2 * width
    assert len(graph.fields(B)) == width
    even, odd = "f4998", "f4999"
    assert _edges(graph.edges_into(FieldRef(B, even))) == {
        (FieldRef(A, even), FieldRef(B, even), TRANSFORM, ("read", "upper 4998", "write"), "rb")
    }
    assert _edges(graph.edges_into(FieldRef(B, odd))) == {
        (FieldRef(A, odd), FieldRef(B, odd), IDENT, ("read", "write"), "rb")
    }
    assert graph.upstream(FieldRef(C, even), depth=None) == (
        Reached(FieldRef(B, even), 1),
        Reached(FieldRef(A, even), 2),
    )
    assert graph.incoming(FieldRef(C, odd)).origins == (FieldRef(A, odd),)
