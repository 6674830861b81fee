"""Schema evolution rules (DataMine's four), applied recursively.

A dataset's schema may only grow in ways old readers and old data survive:

1. no new required field (old slices cannot have a value for it);
2. an optional field never becomes required (old slices hold nulls); required -> optional is fine;
3. no type change;
4. no field removal (old queries and lineage point at it).

The rules recurse into structs, list items and map keys/values, so a nested field is held to
the same standard as a top-level column.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class EvolutionViolation:
    path: str  # the field, e.g. "address.city" or "tags.[item]"
    rule: str  # new-required-field | optional-to-required | type-change | field-removed
    old: str | None
    new: str | None

    def __str__(self) -> str:
        messages = {
            "new-required-field": f"new field {self.path} is required ({self.new}); "
            "new fields must be nullable",
            "optional-to-required": f"field {self.path} changed from optional to required",
            "type-change": f"field {self.path} changed type from {self.old} to {self.new}",
            "field-removed": f"field {self.path} ({self.old}) was removed",
        }
        return messages[self.rule]


def _children(t: pa.DataType) -> list[tuple[str, pa.Field]] | None:
    """Named child fields of a nested type; None for a leaf type."""
    if pa.types.is_struct(t):
        return [(t.field(i).name, t.field(i)) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [("[key]", t.key_field), ("[value]", t.item_field)]
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return [("[item]", t.value_field)]
    return None


def _shape(t: pa.DataType) -> str:
    """The type with nested children abstracted away: what must not change at this level."""
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_fixed_size_list(t):
        return f"fixed_size_list[{t.list_size}]"
    if pa.types.is_large_list(t):
        return "large_list"
    if pa.types.is_list(t):
        return "list"
    return str(t)


def _compare_fields(
    old: list[tuple[str, pa.Field]],
    new: list[tuple[str, pa.Field]],
    prefix: str,
    out: list[EvolutionViolation],
) -> None:
    new_by_name = dict(new)
    old_names = {name for name, _ in old}
    for name, old_field in old:
        path = f"{prefix}{name}"
        new_field = new_by_name.get(name)
        if new_field is None:
            out.append(EvolutionViolation(path, "field-removed", str(old_field.type), None))
            continue
        _compare_field(old_field, new_field, path, out)
    for name, new_field in new:
        if name not in old_names and not new_field.nullable:
            out.append(
                EvolutionViolation(
                    f"{prefix}{name}", "new-required-field", None, str(new_field.type)
                )
            )


def _compare_field(old: pa.Field, new: pa.Field, path: str, out: list[EvolutionViolation]) -> None:
    if old.nullable and not new.nullable:
        out.append(EvolutionViolation(path, "optional-to-required", str(old.type), str(new.type)))
    # Iterative descent is not needed for realistic depth, but keep recursion bounded by the
    # schema itself (Arrow types are finite trees).
    old_children, new_children = _children(old.type), _children(new.type)
    if _shape(old.type) != _shape(new.type) or (old_children is None) != (new_children is None):
        out.append(EvolutionViolation(path, "type-change", str(old.type), str(new.type)))
        return
    if old_children is not None and new_children is not None:
        _compare_fields(old_children, new_children, f"{path}.", out)


def check_evolution(old: pa.Schema, new: pa.Schema) -> list[EvolutionViolation]:
    """Every way ``new`` breaks the evolution rules relative to ``old`` (empty if compatible)."""
    out: list[EvolutionViolation] = []
    _compare_fields([(f.name, f) for f in old], [(f.name, f) for f in new], "", out)
    return out
