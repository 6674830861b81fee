"""check_evolution on its own: DataMine's four rules, applied recursively through structs, lists
and maps. Every expected violation is written out by hand (path, rule, old type, new type).

The rule tests name fields by dotted name path (``namer=dotted``) to keep them about the rules;
``test_violations_are_named_by_v2_path`` checks the default naming by DataHub v2 path."""

from __future__ import annotations

import pyarrow as pa
import pytest

from odf_chain.errors import NewColumnsError, SchemaEvolutionError
from odf_chain.schema.evolution import (
    EvolutionViolation,
    added_fields,
    check_evolution,
    check_new_columns,
    dotted,
)

BASE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field(
            "address",
            pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int32())]),
        ),
        pa.field("tags", pa.list_(pa.int64())),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
    ]
)


def _replace(schema: pa.Schema, name: str, field: pa.Field | None) -> pa.Schema:
    """``schema`` with the field ``name`` replaced by ``field`` (or dropped when None)."""
    fields = []
    for f in schema:
        if f.name != name:
            fields.append(f)
        elif field is not None:
            fields.append(field)
    return pa.schema(fields)


def _as_tuples(violations: list[EvolutionViolation]) -> list[tuple]:
    return [(v.path, v.rule, v.old, v.new) for v in violations]


def test_identical_schemas_are_compatible() -> None:
    assert check_evolution(BASE, BASE) == []
    # an equal schema built separately, not the same object
    copy = pa.schema(list(BASE))
    assert check_evolution(BASE, copy) == []


def test_field_order_does_not_matter() -> None:
    reordered = pa.schema(list(reversed(list(BASE))))
    assert check_evolution(BASE, reordered) == []


# -- incompatible changes ------------------------------------------------------------------------

INCOMPATIBLE = {
    "field removed": (
        _replace(BASE, "name", None),
        [("name", "field-removed", "string", None)],
    ),
    "type change int64 -> string": (
        _replace(BASE, "id", pa.field("id", pa.string(), nullable=False)),
        [("id", "type-change", "int64", "string")],
    ),
    "type widening int32 -> int64 is still a change": (
        _replace(
            BASE,
            "address",
            pa.field(
                "address",
                pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int64())]),
            ),
        ),
        [("address.zip", "type-change", "int32", "int64")],
    ),
    "optional -> required": (
        _replace(BASE, "name", pa.field("name", pa.string(), nullable=False)),
        [("name", "optional-to-required", "string", "string")],
    ),
    "new required field": (
        pa.schema([*BASE, pa.field("extra", pa.float64(), nullable=False)]),
        [("extra", "new-required-field", None, "double")],
    ),
    "nested struct field removed": (
        _replace(BASE, "address", pa.field("address", pa.struct([pa.field("city", pa.string())]))),
        [("address.zip", "field-removed", "int32", None)],
    ),
    "nested new required struct member": (
        _replace(
            BASE,
            "address",
            pa.field(
                "address",
                pa.struct(
                    [
                        pa.field("city", pa.string()),
                        pa.field("zip", pa.int32()),
                        pa.field("street", pa.string(), nullable=False),
                    ]
                ),
            ),
        ),
        [("address.street", "new-required-field", None, "string")],
    ),
    "nested optional -> required": (
        _replace(
            BASE,
            "address",
            pa.field(
                "address",
                pa.struct(
                    [pa.field("city", pa.string(), nullable=False), pa.field("zip", pa.int32())]
                ),
            ),
        ),
        [("address.city", "optional-to-required", "string", "string")],
    ),
    "list item type change": (
        _replace(BASE, "tags", pa.field("tags", pa.list_(pa.string()))),
        [("tags.[item]", "type-change", "int64", "string")],
    ),
    "list -> large_list": (
        _replace(BASE, "tags", pa.field("tags", pa.large_list(pa.int64()))),
        [("tags", "type-change", "list<item: int64>", "large_list<item: int64>")],
    ),
    "map value type change": (
        _replace(BASE, "attrs", pa.field("attrs", pa.map_(pa.string(), pa.string()))),
        [("attrs.[value]", "type-change", "int64", "string")],
    ),
    "map key type change": (
        _replace(BASE, "attrs", pa.field("attrs", pa.map_(pa.int32(), pa.int64()))),
        [("attrs.[key]", "type-change", "string", "int32")],
    ),
    "struct -> leaf": (
        _replace(BASE, "address", pa.field("address", pa.string())),
        [
            (
                "address",
                "type-change",
                "struct<city: string, zip: int32>",
                "string",
            )
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(INCOMPATIBLE))
def test_incompatible_change_is_named(case: str) -> None:
    new, expected = INCOMPATIBLE[case]
    violations = check_evolution(BASE, new, namer=dotted)
    assert _as_tuples(violations) == expected
    # the human text names the field path
    for violation, (path, *_rest) in zip(violations, expected, strict=True):
        assert path in str(violation)


def test_struct_inside_a_list_loses_a_member() -> None:
    item_old = pa.struct([pa.field("x", pa.int64()), pa.field("y", pa.string())])
    item_new = pa.struct([pa.field("x", pa.int64())])
    old = pa.schema([pa.field("points", pa.list_(item_old))])
    new = pa.schema([pa.field("points", pa.list_(item_new))])
    assert _as_tuples(check_evolution(old, new, namer=dotted)) == [
        ("points.[item].y", "field-removed", "string", None)
    ]


def test_messages_say_what_changed() -> None:
    new = _replace(BASE, "id", pa.field("id", pa.string(), nullable=False))
    (violation,) = check_evolution(BASE, new, namer=dotted)
    text = str(violation)
    assert "id" in text and "int64" in text and "string" in text
    (removed,) = check_evolution(BASE, _replace(BASE, "name", None), namer=dotted)
    assert "name" in str(removed) and "removed" in str(removed)


def test_several_violations_are_all_reported() -> None:
    new = pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),  # retyped
            # name removed
            pa.field("address", BASE.field("address").type),
            pa.field("tags", pa.list_(pa.int64())),
            pa.field("attrs", pa.map_(pa.string(), pa.int64())),
            pa.field("must", pa.int8(), nullable=False),  # new required
        ]
    )
    got = sorted(_as_tuples(check_evolution(BASE, new, namer=dotted)), key=lambda t: t[0])
    assert got == [
        ("id", "type-change", "int64", "string"),
        ("must", "new-required-field", None, "int8"),
        ("name", "field-removed", "string", None),
    ]


# -- compatible changes --------------------------------------------------------------------------

COMPATIBLE = {
    "new nullable field": pa.schema([*BASE, pa.field("extra", pa.float64())]),
    "required -> optional": _replace(BASE, "id", pa.field("id", pa.int64(), nullable=True)),
    "nested new nullable struct member": _replace(
        BASE,
        "address",
        pa.field(
            "address",
            pa.struct(
                [
                    pa.field("city", pa.string()),
                    pa.field("zip", pa.int32()),
                    pa.field("street", pa.string()),
                ]
            ),
        ),
    ),
    "new nullable nested struct column": pa.schema(
        [*BASE, pa.field("geo", pa.struct([pa.field("lat", pa.float64(), nullable=False)]))]
    ),
}


@pytest.mark.parametrize("case", sorted(COMPATIBLE))
def test_compatible_change_is_accepted(case: str) -> None:
    assert check_evolution(BASE, COMPATIBLE[case]) == []


V2_NAMES = {
    "field removed": "[version=2.0].[type=string].name",
    "type change int64 -> string": "[version=2.0].[type=long].id",
    "nested struct field removed": (
        "[version=2.0].[type=struct].[type=struct].address.[type=int].zip"
    ),
    "new required field": "[version=2.0].[type=double].extra",
    "list item type change": "[version=2.0].[type=struct].[type=array].[type=long].tags [item]",
    "map value type change": "[version=2.0].[type=struct].[type=map].[type=long].attrs [value]",
}


@pytest.mark.parametrize("case", sorted(V2_NAMES))
def test_violations_are_named_by_v2_path(case: str) -> None:
    new, _ = INCOMPATIBLE[case]
    (violation,) = check_evolution(BASE, new)
    assert violation.path == V2_NAMES[case]
    assert V2_NAMES[case] in str(violation)


# -- the writers' policy: no new column unless asked for ------------------------------------------

SENSORS = pa.schema(
    [
        pa.field("station", pa.string()),
        pa.field("temperature_c", pa.float64()),
        pa.field(
            "location", pa.struct([pa.field("lat", pa.float64()), pa.field("lon", pa.float64())])
        ),
        pa.field(
            "readings",
            pa.list_(pa.struct([pa.field("sensor", pa.string()), pa.field("value", pa.int32())])),
        ),
        pa.field("labels", pa.map_(pa.string(), pa.struct([pa.field("text", pa.string())]))),
    ]
)


def _added(new: pa.Schema) -> list[tuple[str, tuple[str, ...]]]:
    return [(a.path, a.suggestions) for a in added_fields(SENSORS, new)]


def _with(name: str, field: pa.Field) -> pa.Schema:
    return _replace(SENSORS, name, field)


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        # a misspelt column, in another case, and one close to nothing
        (
            SENSORS.append(pa.field("temperature", pa.float64())),
            [("temperature", ("temperature_c",))],
        ),
        (SENSORS.append(pa.field("Station", pa.string())), [("Station", ("station",))]),
        (SENSORS.append(pa.field("humidity_pct", pa.float64())), [("humidity_pct", ())]),
        # three-letter names sharing two letters are not offered as typos of each other
        (
            _with(
                "location",
                pa.field(
                    "location",
                    pa.struct(
                        [("lat", pa.float64()), ("lon", pa.float64()), ("alt", pa.float64())]
                    ),
                ),
            ),
            [("location.alt", ())],
        ),
        # nested: a struct member, a member of a list's item struct, of a map value's struct
        (
            _with(
                "location",
                pa.field(
                    "location",
                    pa.struct(
                        [("lat", pa.float64()), ("lon", pa.float64()), ("Lat", pa.float64())]
                    ),
                ),
            ),
            [("location.Lat", ("location.lat",))],
        ),
        (
            _with(
                "readings",
                pa.field(
                    "readings",
                    pa.list_(
                        pa.struct(
                            [("sensor", pa.string()), ("value", pa.int32()), ("values", pa.int32())]
                        )
                    ),
                ),
            ),
            [("readings.[item].values", ("readings.[item].value",))],
        ),
        (
            _with(
                "labels",
                pa.field(
                    "labels",
                    pa.map_(pa.string(), pa.struct([("text", pa.string()), ("txt", pa.string())])),
                ),
            ),
            [("labels.[value].txt", ("labels.[value].text",))],
        ),
        # a new struct column is one addition (its members come with it)
        (
            SENSORS.append(pa.field("location2", pa.struct([("lat", pa.float64())]))),
            [("location2", ("location",))],
        ),
    ],
)
def test_added_fields_and_their_closest_names(new: pa.Schema, expected: list) -> None:
    assert _added(new) == expected


def test_missing_and_reordered_fields_add_nothing() -> None:
    reordered = pa.schema([SENSORS.field("temperature_c"), SENSORS.field("station")])
    assert added_fields(SENSORS, reordered) == []
    assert added_fields(SENSORS, SENSORS) == []


def test_new_column_message_names_dataset_columns_and_the_way_out() -> None:
    new = SENSORS.append(pa.field("temperature", pa.float64())).append(pa.field("x", pa.int8()))
    with pytest.raises(NewColumnsError) as info:
        check_new_columns(SENSORS, new, evolve=False, dataset="/data/sensors")
    assert str(info.value) == (
        "/data/sensors: new column(s) temperature (did you mean temperature_c?), x; "
        "pass evolve=True (--evolve) to add them"
    )
    assert isinstance(info.value, SchemaEvolutionError) and info.value.rule == "new-column"
    # asked for, or the dataset's first schema: no objection
    check_new_columns(SENSORS, new, evolve=True, dataset="/data/sensors")
    check_new_columns(None, new, evolve=False, dataset="/data/sensors")


def test_several_close_names_are_all_offered() -> None:
    old = pa.schema([pa.field("temp_c", pa.float64()), pa.field("temp_f", pa.float64())])
    (added,) = added_fields(old, old.append(pa.field("temp", pa.float64())))
    assert sorted(added.suggestions) == ["temp_c", "temp_f"]
    first, second = added.suggestions
    assert str(added) == f"temp (did you mean {first} or {second}?)"
