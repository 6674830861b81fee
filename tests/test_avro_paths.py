"""Avro -> DataHub v2 field paths: the seed's examples, differential tests against DataHub's own
converter (acryl-datahub, a test-only oracle), recursion, uniqueness and bad input."""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
import warnings
from contextlib import contextmanager
from itertools import count
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from odf_chain.errors import SchemaError
from odf_chain.schema import avro_paths
from odf_chain.schema.avro_compile import compile_schema as _compile
from odf_chain.schema.avro_paths import (
    _convert,
    _walk,
    avro_field_paths,
    avro_fields,
)
from odf_chain.schema.fields import FieldInfo
from tests.avro_strategies import PRIMITIVES, avro_schemas, recursive_chains

datahub_schema_util = pytest.importorskip("datahub.ingestion.extractor.schema_util")

V = "[version=2.0]"
K = "[version=2.0].[key=True]"


# --------------------------------------------------------------------------- the oracle


def datahub_fields(schema: Any, is_key_schema: bool = False) -> list[FieldInfo]:
    """DataHub's fields for a schema (JSON text, or decoded JSON other than a bare string), as
    FieldInfo (the type class without "TypeClass")."""
    text = schema if isinstance(schema, str) else json.dumps(schema)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # avro-python warns about ignored logical types
        fields = datahub_schema_util.avro_schema_to_mce_fields(
            text, is_key_schema=is_key_schema, swallow_exceptions=False
        )
    return [
        FieldInfo(
            f.fieldPath,
            type(f.type.type).__name__.removesuffix("TypeClass").lower(),
            f.nativeDataType,
            bool(f.nullable),
            f.description,
            f.isPartOfKey,
        )
        for f in fields
    ]


class _Timeout(Exception):
    pass


@contextmanager
def _bounded(seconds: float, frames: int):
    """Run DataHub with little stack and a deadline, for schemas on which it never finishes."""
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back

    def expire(signum: int, frame: Any) -> None:
        raise _Timeout

    limit = sys.getrecursionlimit()
    previous = signal.signal(signal.SIGALRM, expire)
    sys.setrecursionlimit(depth + frames)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.setrecursionlimit(limit)


def datahub_terminates(schema: Any, is_key_schema: bool = False) -> bool:
    try:
        with _bounded(5.0, 1000):
            datahub_fields(schema, is_key_schema)
    except (RecursionError, _Timeout):
        return False
    return True


@pytest.fixture(autouse=True)
def _quiet_datahub():
    logging.getLogger("datahub").setLevel(logging.CRITICAL)
    yield


def paths(schema: Any, is_key_schema: bool = False) -> list[str]:
    return avro_field_paths(schema, is_key_schema)


# --------------------------------------------------------------------------- the seed's examples
# Expected values are typed from ../shared/seeds/datahub-schema-field-path-v2.txt; each is also
# checked against DataHub. Where DataHub differs from the seed the DataHub value is asserted and
# the comment says why.


def test_seed_primitive():
    schema = '{"type": "string"}'
    assert paths(schema) == ["[version=2.0].[type=string]"]
    assert avro_fields(schema) == datahub_fields(schema)


# The seed's text lacks the comma after "doc"; fixed here. The dotted name wins over "namespace".
SEED_SIMPLE = """
{
  "type": "record",
  "name": "some.event.E",
  "namespace": "some.event.N",
  "doc": "this is the event record E",
  "fields": [
    {"name": "a", "type": "string", "doc": "this is string field a of E"},
    {"name": "b", "type": "string", "doc": "this is string field b of E"}
  ]
}
"""

SEED_NESTED = {
    "type": "record",
    "name": "SimpleNested",
    "namespace": "com.linkedin",
    "fields": [
        {
            "name": "nestedRcd",
            "type": {
                "type": "record",
                "name": "InnerRcd",
                "fields": [{"name": "aStringField", "type": "string"}],
            },
        }
    ],
}

SEED_RECURSIVE = {
    "type": "record",
    "name": "Recursive",
    "namespace": "com.linkedin",
    "fields": [
        {
            "name": "r",
            "type": {
                "type": "record",
                "name": "R",
                "fields": [
                    {"name": "anIntegerField", "type": "int"},
                    {"name": "aRecursiveField", "type": "com.linkedin.R"},
                ],
            },
        }
    ],
}

SEED_TREE = {
    "type": "record",
    "name": "TreeNode",
    "fields": [
        {"name": "value", "type": "long"},
        {"name": "children", "type": {"type": "array", "items": "TreeNode"}},
    ],
}

_A = {"type": "record", "name": "A", "fields": [{"name": "f", "type": "string"}]}
_B = {"type": "record", "name": "B", "fields": [{"name": "f", "type": "string"}]}

SEED_UNION = {
    "type": "record",
    "name": "ABUnion",
    "namespace": "com.linkedin",
    "fields": [{"name": "a", "type": [_A, _B]}],
}

SEED_ARRAY = {
    "type": "record",
    "name": "NestedArray",
    "namespace": "com.linkedin",
    "fields": [
        {
            "name": "ar",
            "type": {
                "type": "array",
                "items": {
                    "type": "array",
                    "items": [
                        "null",
                        {
                            "type": "record",
                            "name": "Foo",
                            "fields": [{"name": "a", "type": "long"}],
                        },
                    ],
                },
            },
        }
    ],
}

SEED_MAP = {
    "type": "record",
    "name": "R",
    "namespace": "some.namespace",
    "fields": [{"name": "a_map_of_longs_field", "type": {"type": "map", "values": "long"}}],
}

SEED_MIXED = {
    "type": "record",
    "name": "ABFooUnion",
    "namespace": "com.linkedin",
    "fields": [
        {
            "name": "a",
            "type": [
                _A,
                _B,
                {
                    "type": "array",
                    "items": {
                        "type": "array",
                        "items": [
                            "null",
                            {
                                "type": "record",
                                "name": "Foo",
                                "fields": [{"name": "f", "type": "long"}],
                            },
                        ],
                    },
                },
            ],
        }
    ],
}


def _seed_case(schema: Any, expected: list[str], is_key_schema: bool) -> None:
    assert paths(schema, is_key_schema) == expected
    assert avro_fields(schema, is_key_schema) == datahub_fields(schema, is_key_schema)
    # The same schema as a value (key) schema differs only by the key token.
    other = paths(schema, not is_key_schema)
    swap = (K, V) if is_key_schema else (V, K)
    assert other == [p.replace(*swap, 1) for p in expected]


def test_seed_simple_record():
    _seed_case(
        SEED_SIMPLE,
        ["[version=2.0].[type=E].[type=string].a", "[version=2.0].[type=E].[type=string].b"],
        False,
    )
    # DataHub's description is the field's doc.
    assert [f.doc for f in avro_fields(SEED_SIMPLE)] == [
        "this is string field a of E",
        "this is string field b of E",
    ]


def test_seed_nested_record():
    # The seed lists this example's paths with [key=True]: they are the key schema's.
    _seed_case(
        SEED_NESTED,
        [
            "[version=2.0].[key=True].[type=SimpleNested].[type=InnerRcd].nestedRcd",
            "[version=2.0].[key=True].[type=SimpleNested].[type=InnerRcd].nestedRcd.[type=string].aStringField",
        ],
        True,
    )
    assert all(f.is_part_of_key for f in avro_fields(SEED_NESTED, True))
    assert not any(f.is_part_of_key for f in avro_fields(SEED_NESTED))


def test_seed_recursive_record():
    _seed_case(
        SEED_RECURSIVE,
        [
            "[version=2.0].[type=Recursive].[type=R].r",
            "[version=2.0].[type=Recursive].[type=R].r.[type=int].anIntegerField",
            "[version=2.0].[type=Recursive].[type=R].r.[type=R].aRecursiveField",
        ],
        False,
    )


def test_seed_tree_node():
    _seed_case(
        SEED_TREE,
        [
            "[version=2.0].[type=TreeNode].[type=long].value",
            "[version=2.0].[type=TreeNode].[type=array].[type=TreeNode].children",
        ],
        False,
    )


def test_seed_union():
    # Listed with [key=True] in the seed: the key schema's paths.
    _seed_case(
        SEED_UNION,
        [
            "[version=2.0].[key=True].[type=ABUnion].[type=union].a",
            "[version=2.0].[key=True].[type=ABUnion].[type=union].[type=A].a",
            "[version=2.0].[key=True].[type=ABUnion].[type=union].[type=A].a.[type=string].f",
            "[version=2.0].[key=True].[type=ABUnion].[type=union].[type=B].a",
            "[version=2.0].[key=True].[type=ABUnion].[type=union].[type=B].a.[type=string].f",
        ],
        True,
    )


def test_seed_nested_array():
    _seed_case(
        SEED_ARRAY,
        [
            "[version=2.0].[type=NestedArray].[type=array].[type=array].[type=Foo].ar",
            "[version=2.0].[type=NestedArray].[type=array].[type=array].[type=Foo].ar.[type=long].a",
        ],
        False,
    )


def test_seed_map():
    _seed_case(
        SEED_MAP,
        ["[version=2.0].[type=R].[type=map].[type=long].a_map_of_longs_field"],
        False,
    )


def test_seed_mixed():
    _seed_case(
        SEED_MIXED,
        [
            "[version=2.0].[type=ABFooUnion].[type=union].a",
            "[version=2.0].[type=ABFooUnion].[type=union].[type=A].a",
            "[version=2.0].[type=ABFooUnion].[type=union].[type=A].a.[type=string].f",
            "[version=2.0].[type=ABFooUnion].[type=union].[type=B].a",
            "[version=2.0].[type=ABFooUnion].[type=union].[type=B].a.[type=string].f",
            "[version=2.0].[type=ABFooUnion].[type=union].[type=array].[type=array].[type=Foo].a",
            "[version=2.0].[type=ABFooUnion].[type=union].[type=array].[type=array].[type=Foo].a.[type=long].f",
        ],
        False,
    )


def test_seed_ambiguous_v1_example():
    # The seed lists only the two member fields. DataHub also emits the top-level union itself
    # (every union gets one path of its own), so that is what we assert.
    _seed_case(
        [_A, _B],
        [
            "[version=2.0].[type=union]",
            "[version=2.0].[type=union].[type=A].[type=string].f",
            "[version=2.0].[type=union].[type=B].[type=string].f",
        ],
        False,
    )


# --------------------------------------------------------------------------- DataHub's facts


def test_datahub_facts_per_field():
    """The FieldInfo values that look odd are DataHub's (and the differential tests agree)."""
    schema = {
        "type": "record",
        "name": "ns.R",
        "doc": "record doc",
        "fields": [
            {"name": "a", "type": "string", "doc": "a doc"},
            {"name": "b", "type": {"type": "array", "items": "int"}, "default": []},
            {"name": "c", "type": ["null", "string"], "default": None},
            {"name": "d", "type": ["int", "string"]},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X"], "doc": "e doc"}},
            {"name": "i", "type": {"type": "int", "logicalType": "date"}},
            {"name": "j", "type": "long", "logicalType": "timestamp-millis", "deprecated": "old"},
            {"name": "k", "type": {"type": "string", "native_data_type": "varchar(3)"}},
        ],
    }
    got = avro_fields(schema)
    assert got == datahub_fields(schema)
    R = "[version=2.0].[type=R]"
    assert got == [
        # nativeDataType is the field's own name unless its type is a union
        FieldInfo(f"{R}.[type=string].a", "string", "a", False, "a doc"),
        FieldInfo(
            f"{R}.[type=array].[type=int].b", "array", "b", False, "\nField default value: []"
        ),
        # a null default is not shown; the collapsed union makes the field nullable
        FieldInfo(f"{R}.[type=string].c", "string", "string", True, None),
        # union members carry the union's type class and the member's native type
        FieldInfo(f"{R}.[type=union].d", "union", "union", False, None),
        FieldInfo(f"{R}.[type=union].[type=int].d", "union", "int", False, None),
        FieldInfo(f"{R}.[type=union].[type=string].d", "union", "string", False, None),
        FieldInfo(f"{R}.[type=enum].e", "enum", "e", False, "e doc"),
        # logical types: physical type in the path, logical type class
        FieldInfo(f"{R}.[type=int].i", "date", "i", False, None),
        # a field-level logicalType counts too; "deprecated" without a doc empties it
        FieldInfo(f"{R}.[type=long].j", "time", "j", False, ""),
        FieldInfo(f"{R}.[type=string].k", "string", "varchar(3)", False, None),
    ]


def test_top_level_non_records():
    cases = {
        '"int"': ["[version=2.0].[type=int]"],
        '["null", "string"]': ["[version=2.0].[type=string]"],
        '["int", "string"]': [
            "[version=2.0].[type=union]",
            "[version=2.0].[type=union].[type=int]",
            "[version=2.0].[type=union].[type=string]",
        ],
        '{"type": "array", "items": {"type": "map", "values": "long"}}': [
            "[version=2.0].[type=array].[type=map].[type=long]"
        ],
        '{"type": "enum", "name": "E", "symbols": ["A"]}': ["[version=2.0].[type=enum]"],
        '{"type": "fixed", "name": "F", "size": 3}': ["[version=2.0].[type=fixed]"],
        '{"type": "bytes", "logicalType": "decimal", "precision": 4}': [
            "[version=2.0].[type=bytes]"
        ],
    }
    for text, expected in cases.items():
        assert paths(text) == expected, text
        for key in (False, True):
            assert avro_fields(text, key) == datahub_fields(text, key), text


# --------------------------------------------------------------------------- differential tests


@pytest.mark.slow
@settings(max_examples=2500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=avro_schemas(), is_key=st.booleans(), as_text=st.booleans())
def test_matches_datahub(schema, is_key, as_text):
    # (a top-level primitive can only be given as JSON text)
    got = avro_fields(json.dumps(schema) if as_text or isinstance(schema, str) else schema, is_key)
    assert got == datahub_fields(json.dumps(schema), is_key)
    assert avro_field_paths(json.dumps(schema), is_key) == [f.path for f in got]


def unroll_on_path(schema: Any) -> Any:
    """The schema with every named type written out in full under a fresh name (same short
    name), and every record already being expanded on the current path replaced by an empty
    record with the same short name, doc and properties.

    The result is not recursive, so DataHub terminates on it, and its answer there is the rule
    DataHub intends for the original: recursion ends at a record already on the path.
    """
    definitions: dict[str, tuple[dict, str]] = {}
    fresh = count()

    def full_name(js: dict, ns: str) -> str:
        name = js["name"]
        if "." in name:
            return name
        space = js.get("namespace", ns)
        return f"{space}.{name}" if space else name

    def named(js: dict, full: str, on_path: tuple) -> dict:
        out = {k: v for k, v in js.items() if k not in ("name", "namespace", "fields")}
        out["name"] = f"u{next(fresh)}.{full.rsplit('.', 1)[-1]}"
        if js["type"] not in ("record", "error"):
            return out
        if full in on_path:
            out["fields"] = []
            return out
        child_ns = full.rsplit(".", 1)[0] if "." in full else ""
        out["fields"] = [
            {**f, "type": go(f["type"], child_ns, (*on_path, full))} for f in js["fields"]
        ]
        return out

    def go(js: Any, ns: str, on_path: tuple) -> Any:
        if isinstance(js, str):
            if js in PRIMITIVES:
                return js
            full = js if "." in js or not ns else f"{ns}.{js}"
            definition, _ = definitions[full]
            return named(definition, full, on_path)
        if isinstance(js, list):
            return [go(m, ns, on_path) for m in js]
        t = js["type"]
        if t in ("record", "error", "enum", "fixed"):
            full = full_name(js, ns)
            definitions[full] = (js, ns)
            return named(js, full, on_path)
        if t == "array":
            return {**js, "items": go(js["items"], ns, on_path)}
        if t == "map":
            return {**js, "values": go(js["values"], ns, on_path)}
        return js

    return go(schema, "", ())


@pytest.mark.slow
@settings(max_examples=900, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=st.one_of(avro_schemas(recursive=True), recursive_chains()), is_key=st.booleans())
def test_recursive_schemas_against_datahub(schema, is_key):
    """Where DataHub terminates we equal it; where it does not, we say so exactly, and give
    DataHub's own answer for the schema with the recursion cut where a record is already on
    the path."""
    text = json.dumps(schema)
    got, diverged = _convert(text, is_key, paths_only=False)
    assume(len(got) <= 3000)
    on_path = _walk(_compile(schema), is_key, False, on_path=True)
    assert on_path == datahub_fields(json.dumps(unroll_on_path(schema)), is_key)
    if diverged:
        assert got == on_path
        assert not datahub_terminates(text, is_key)
    else:
        assert got == datahub_fields(text, is_key)


@pytest.mark.slow
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schema=st.one_of(
        avro_schemas(collision_free=True, max_depth=4),
        avro_schemas(collision_free=True, recursive=True),
    ),
    is_key=st.booleans(),
)
def test_paths_are_unique(schema, is_key):
    got = avro_field_paths(json.dumps(schema), is_key)
    assert len(got) == len(set(got))
    prefix = K if is_key else V
    assert all(p.startswith(prefix + ".") or p == prefix for p in got)


# --------------------------------------------------------------------------- recursion

LINKED_LIST = {
    "type": "record",
    "name": "Node",
    "fields": [
        {"name": "value", "type": "long"},
        {"name": "next", "type": ["null", "Node"]},
    ],
}


def test_recursion_through_an_optional_union():
    # DataHub does not check records met through ["null", X]: it recurses without end.
    assert not datahub_terminates(LINKED_LIST)
    got, diverged = _convert(LINKED_LIST, False, paths_only=False)
    assert diverged
    assert got == [
        FieldInfo("[version=2.0].[type=Node].[type=long].value", "number", "value", False),
        FieldInfo("[version=2.0].[type=Node].[type=Node].next", "record", "Node", True),
    ]


def test_second_back_reference():
    # DataHub forgets R after the first back-reference, expands it at the second, and so on.
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "R"}, {"name": "b", "type": "R"}],
    }
    assert not datahub_terminates(schema)
    assert paths(schema) == [
        "[version=2.0].[type=R].[type=R].a",
        "[version=2.0].[type=R].[type=R].b",
    ]


def test_recursion_in_containers_and_unions():
    schema = {
        "type": "record",
        "name": "T",
        "fields": [
            {"name": "kids", "type": {"type": "array", "items": ["null", "T"]}},
            {"name": "byName", "type": {"type": "map", "values": "T"}},
            {"name": "either", "type": ["int", "T"]},
        ],
    }
    assert not datahub_terminates(schema)  # the optional union inside the array
    assert paths(schema) == [
        "[version=2.0].[type=T].[type=array].[type=T].kids",
        "[version=2.0].[type=T].[type=map].[type=T].byName",
        "[version=2.0].[type=T].[type=union].either",
        "[version=2.0].[type=T].[type=union].[type=int].either",
        "[version=2.0].[type=T].[type=union].[type=T].either",
    ]


def test_terminating_mutual_recursion_matches_datahub_extra_level():
    # B refers to the enclosing A twice. After the first reference DataHub forgets A, so the
    # second expands A once more (then stops at B). DataHub terminates here, so we match it,
    # extra level included; the "on the path" rule would stop at c.
    schema = {
        "type": "record",
        "name": "A",
        "fields": [
            {
                "name": "b",
                "type": {
                    "type": "record",
                    "name": "B",
                    "fields": [{"name": "a", "type": "A"}, {"name": "c", "type": "A"}],
                },
            }
        ],
    }
    got, diverged = _convert(schema, False, paths_only=True)
    assert not diverged
    assert got == [f.path for f in datahub_fields(schema)]
    assert got == [
        "[version=2.0].[type=A].[type=B].b",
        "[version=2.0].[type=A].[type=B].b.[type=A].a",
        "[version=2.0].[type=A].[type=B].b.[type=A].c",
        "[version=2.0].[type=A].[type=B].b.[type=A].c.[type=B].b",
    ]


def test_reuse_is_not_recursion():
    # The same record in two places is expanded in both (DataHub: "allow reuse").
    point = {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]}
    schema = {
        "type": "record",
        "name": "Seg",
        "fields": [{"name": "start", "type": point}, {"name": "end", "type": "P"}],
    }
    assert paths(schema) == [
        "[version=2.0].[type=Seg].[type=P].start",
        "[version=2.0].[type=Seg].[type=P].start.[type=int].x",
        "[version=2.0].[type=Seg].[type=P].end",
        "[version=2.0].[type=Seg].[type=P].end.[type=int].x",
    ]
    assert avro_fields(schema) == datahub_fields(schema)


# --------------------------------------------------------------------------- documented corners


def test_datahub_collisions_are_reproduced():
    """DataHub's encoding is not injective here; we return what DataHub returns."""
    two_enums = {
        "type": "record",
        "name": "R",
        "fields": [
            {
                "name": "u",
                "type": [
                    {"type": "enum", "name": "E1", "symbols": ["A"]},
                    {"type": "enum", "name": "E2", "symbols": ["B"]},
                ],
            },
            {"name": "p.q", "type": "int"},
            {"name": "q", "type": "int"},
        ],
    }
    got = paths(two_enums)
    assert got == [f.path for f in datahub_fields(two_enums)]
    assert got.count("[version=2.0].[type=R].[type=union].[type=enum].u") == 2
    assert got.count("[version=2.0].[type=R].[type=int].q") == 2


def test_struct_names():
    schema = {
        "type": "record",
        "name": "__struct_0",
        "fields": [
            {"name": "__structn_3_x", "type": "int"},
            {"name": "s", "type": {"type": "record", "name": "__structn_2_y", "fields": []}},
        ],
    }
    assert paths(schema) == [
        "[version=2.0].[type=struct].[type=int].struct3",
        "[version=2.0].[type=struct].[type=struct2].s",
    ]
    assert avro_fields(schema) == datahub_fields(schema)


def test_error_records_are_records():
    # DataHub has no type class for "error" and fails an assertion (so returns no fields).
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "e", "type": {"type": "error", "name": "Oops", "fields": []}}],
    }
    with pytest.raises(AssertionError):
        datahub_fields(schema)
    assert avro_fields(schema) == [
        FieldInfo("[version=2.0].[type=R].[type=Oops].e", "record", "e", False)
    ]


def nested_record(levels: int) -> dict:
    schema: dict = {"type": "record", "name": "L0", "fields": [{"name": "leaf", "type": "int"}]}
    for i in range(1, levels):
        schema = {"type": "record", "name": f"L{i}", "fields": [{"name": f"f{i}", "type": schema}]}
    return schema


def nested_record_text(levels: int) -> str:
    # built as text: json.dumps itself recurses too deeply for 500 levels
    text = '{"type": "record", "name": "L0", "fields": [{"name": "leaf", "type": "int"}]}'
    for i in range(1, levels):
        text = (
            f'{{"type": "record", "name": "L{i}", "fields": [{{"name": "f{i}", "type": {text}}}]}}'
        )
    return text


def test_deep_schema_where_datahub_gives_up():
    # DataHub's recursive converter returns nothing (swallowed RecursionError) at 200 levels.
    schema = nested_record(200)
    assert datahub_schema_util.avro_schema_to_mce_fields(json.dumps(schema)) == []
    got = avro_fields(schema)
    assert len(got) == 200
    # ...while at 100 levels both agree
    assert avro_fields(nested_record(100)) == datahub_fields(nested_record(100))


# --------------------------------------------------------------------------- bad input


def _error(schema: Any, *words: str) -> str:
    with pytest.raises(SchemaError) as info:
        avro_fields(schema)
    message = str(info.value)
    for word in words:
        assert word in message, message
    return message


def _record(*fields: dict, name: str = "R") -> dict:
    return {"type": "record", "name": name, "fields": list(fields)}


def test_invalid_json():
    _error('{"type": "record", "name": "R", "fields": [}', "not valid JSON", "line 1")
    _error("", "not valid JSON")
    _error("string", "not valid JSON")  # a primitive is the JSON string '"string"'
    _error('{"type": "int"} x', "not valid JSON", "Extra data")


def test_unknown_named_type():
    _error(_record({"name": "a", "type": "Foo"}), "field R.a", "unknown type 'Foo'")
    _error(
        {**_record({"name": "a", "type": "Foo"}), "namespace": "com.x"},
        "unknown type 'Foo'",
        "com.x.Foo",
    )
    # a type defined later in the document is not yet known (as for avro and fastavro)
    _error(
        _record(
            {"name": "a", "type": "E"},
            {"name": "b", "type": {"type": "enum", "name": "E", "symbols": ["X"]}},
        ),
        "unknown type 'E'",
    )
    _error({"type": "R"}, "unknown type 'R'")
    _error({"type": "array", "items": "Nope"}, "array items", "unknown type 'Nope'")


def test_duplicate_field_names():
    _error(
        _record({"name": "a", "type": "int"}, {"name": "a", "type": "string"}),
        "field R.a",
        "duplicate field name",
    )


def test_bad_enums():
    _error({"type": "enum", "name": "E", "symbols": ["A", "A"]}, "enum 'E'", "duplicate symbol 'A'")
    _error({"type": "enum", "name": "E", "symbols": ["1A"]}, "enum 'E'", "invalid symbol '1A'")
    _error({"type": "enum", "name": "E"}, "enum 'E'", "symbols")
    _error({"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}, "default 'B'")


def test_other_malformed_schemas():
    _error(_record({"name": "a"}), "field R.a", 'missing "type"')
    _error(_record({"type": "int"}), "field 0", "name")
    _error(_record({"name": "a", "type": "int", "default": "x"}), "field R.a", "default 'x'")
    _error(_record({"name": "a", "type": ["null", "int"], "default": "x"}), "field R.a", "default")
    _error(_record({"name": "a", "type": "int", "order": "up"}), "field R.a", "order")
    _error(["int", "int"], "union member 1", "'int'")
    _error(["int", ["string"]], "union cannot contain a union")
    _error([{"type": "fixed", "name": "F", "size": 1}, "F"], "union member 1", "already has 'F'")
    _error(_record({"name": "a", "type": {"type": "fixed", "name": "R", "size": 1}}), "redefined")
    _error({"type": "fixed", "name": "F", "size": -1}, "fixed 'F'", "size")
    _error({"type": "fixed", "name": "int", "size": 1}, "primitive type")
    _error({"type": "record", "name": "R"}, "record 'R'", "fields")
    _error({"type": "record", "fields": []}, "name")
    _error({"type": "record", "name": "R", "namespace": 5, "fields": []}, "namespace")
    _error({"type": "array"}, '"items"')
    _error({"type": "map"}, '"values"')
    _error({"type": "foo"}, "unknown type 'foo'")
    _error({"type": {"type": "int"}}, '"type" must name a type')
    _error({"name": "x"}, '"type"')
    _error("5", "not an Avro schema")
    _error({"type": "bytes", "logicalType": "decimal", "precision": -1}, "precision")
    _error(
        {"type": "fixed", "name": "F", "size": 1, "logicalType": "decimal", "precision": 9},
        "does not fit",
    )
    _error({"type": "int", "logicalType": ["date"]}, "logicalType")
    _error(_record({"name": "a", "type": "int", "doc": 5}), "field R.a", '"doc" must be a string')
    _error({**_record(), "doc": ["x"]}, "record 'R'", '"doc" must be a string')
    with pytest.raises(TypeError):
        avro_fields(b'"int"')  # type: ignore[arg-type]


def test_500_level_nested_record():
    expected_last = (
        "[version=2.0].[type=L499]."
        + "".join(f"[type=L{i}].f{i + 1}." for i in range(498, 0, -1))
        + "[type=L0].f1.[type=int].leaf"
    )
    for schema in (nested_record(500), nested_record_text(500)):
        got = avro_fields(schema)
        assert len(got) == 500
        assert got[-1].path == expected_last
        assert got[0].path == "[version=2.0].[type=L499].[type=L498].f499"
        assert len(set(f.path for f in got)) == 500


def test_deeper_than_the_limit_is_refused():
    _error(nested_record_text(avro_paths.MAX_NESTING + 1), "deeper than")
    assert len(paths(nested_record(avro_paths.MAX_NESTING))) == avro_paths.MAX_NESTING


def test_10000_field_record():
    schema = _record(
        *(
            {"name": f"f{i}", "type": ["null", "string"] if i % 2 else "long", "doc": f"d{i}"}
            for i in range(10_000)
        ),
        name="Wide",
    )
    text = json.dumps(schema)
    start = time.perf_counter()
    got = avro_fields(text)
    elapsed = time.perf_counter() - start
    assert len(got) == 10_000
    assert got[1] == FieldInfo(
        "[version=2.0].[type=Wide].[type=string].f1", "string", "string", True, "d1"
    )
    assert elapsed < 5, elapsed  # typically ~0.05 s


def test_exponential_expansion_is_refused(monkeypatch):
    # Each level refers to the one below twice: 2**30 paths.
    schema: Any = {"type": "record", "name": "R0", "fields": [{"name": "x", "type": "int"}]}
    for i in range(1, 31):
        schema = {
            "type": "record",
            "name": f"R{i}",
            "fields": [{"name": "a", "type": schema}, {"name": "b", "type": f"R{i - 1}"}],
        }
    monkeypatch.setattr(avro_paths, "MAX_FIELDS", 10_000)
    _error(schema, "more than 10000 field paths")


def test_a_very_deep_default_value_does_not_exhaust_the_stack() -> None:
    # A 5000-deep list as the default of a string field: the mismatch must be reported as a
    # SchemaError naming the field; printing the value must not hit the recursion limit.
    deep: list = []
    inner = deep
    for _ in range(5000):
        nxt: list = []
        inner.append(nxt)
        inner = nxt
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "string", "default": deep}],
    }
    with pytest.raises(SchemaError, match="a"):
        avro_fields(schema)
