"""Schema evolution: DataMine's four rules, and a plain diff for history views.

A dataset's schema may only change in ways that old data and old readers survive:

1. no new required field (old slices have no value for it);
2. an optional field never becomes required (old slices hold nulls); required -> optional is fine;
3. no type change;
4. no field removal (queries and lineage point at it).

Both functions walk the two schemas together, into struct members, list items and map
keys/values, so a nested field is held to the same standard as a column. Fields are named by
their DataHub v2 path (the same URN lineage uses); the walk itself uses name paths
(``("address", "zip")``, ``("tags", "[item]")``), iteratively, so depth is no concern.

The rules say what a schema *may* become; :func:`check_new_columns` is the writers' policy on
top of them: a write adds a (nullable, so allowed) column only when asked to, since a column
once added can never be removed. The same walk finds the new fields and the names they may be
typos of.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from odf_chain.errors import NewColumnsError
from odf_chain.schema.names import ITEM, KEY, VALUE, NamePath, children
from odf_chain.schema.paths import field_index


def _shape(t: pa.DataType) -> str:
    """The type with its children abstracted away: what must not change at this level."""
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_map(t):
        return "map"
    if pa.types.is_fixed_size_list(t):
        return f"fixed_size_list[{t.list_size}]"
    if pa.types.is_large_list(t):
        return "large_list"
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return "list_view" if pa.types.is_list_view(t) else "large_list_view"
    if pa.types.is_list(t):
        return "list"
    return str(t)


def _describe(t: pa.DataType) -> str:
    return str(t)


@dataclass(frozen=True, slots=True)
class _Pair:
    path: NamePath
    old: pa.Field | None
    new: pa.Field | None


def _walk_pairs(old: pa.Schema, new: pa.Schema) -> Iterator[_Pair]:
    """Every field of either schema, matched by name path, parents before children.

    A field that changed shape is yielded but not descended into (its children are not
    comparable); a field present on one side only is yielded without its children.
    """
    stack: list[tuple[NamePath, list[tuple[str, pa.Field]], list[tuple[str, pa.Field]]]] = [
        ((), [(f.name, f) for f in old], [(f.name, f) for f in new])
    ]
    while stack:
        prefix, old_children, new_children = stack.pop()
        new_by_name = dict(new_children)
        old_names = {name for name, _ in old_children}
        level: list[_Pair] = []
        descend: list[tuple[NamePath, list, list]] = []
        for name, old_field in old_children:
            path = (*prefix, name)
            new_field = new_by_name.get(name)
            level.append(_Pair(path, old_field, new_field))
            if new_field is not None and _shape(old_field.type) == _shape(new_field.type):
                old_kids, new_kids = children(old_field.type), children(new_field.type)
                if old_kids is not None and new_kids is not None:
                    descend.append((path, old_kids, new_kids))
        for name, new_field in new_children:
            if name not in old_names:
                level.append(_Pair((*prefix, name), None, new_field))
        yield from level
        stack.extend(reversed(descend))


def same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    """Same column names in the same order, and the same types all the way down, nullability
    aside (a file may hold a field as required that the schema declares nullable)."""
    if a.names != b.names:
        return False
    return all(
        pair.old is not None
        and pair.new is not None
        and _shape(pair.old.type) == _shape(pair.new.type)
        for pair in _walk_pairs(a, b)
    )


Namer = Callable[[NamePath], str]


def dotted(path: NamePath) -> str:
    return ".".join(path)


@dataclass(frozen=True, slots=True)
class EvolutionViolation:
    path: str  # the field's v2 path (or dotted name path when no v2 path is known)
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


def _v2_namer(old: pa.Schema, new: pa.Schema) -> Namer:
    """Name fields by v2 path: the old schema's for fields it has, the new one's otherwise."""
    try:
        old_index, new_index = field_index(old), field_index(new)
    except Exception:  # a schema with no v2 mapping still gets checked, by dotted names
        return dotted

    def name(path: NamePath) -> str:
        v2 = old_index.get(path) or new_index.get(path)
        if v2 is None:
            return dotted(path)
        # Lakehouse paths give list items and map keys/values no entry of their own: name the
        # column's path and say which part of it changed.
        trailing = []
        while path and path[-1] in (ITEM, KEY, VALUE) and path[:-1] in old_index | new_index:
            if (old_index.get(path[:-1]) or new_index.get(path[:-1])) != v2:
                break
            trailing.append(path[-1])
            path = path[:-1]
        return " ".join([v2, *reversed(trailing)])

    return name


def check_evolution(
    old: pa.Schema, new: pa.Schema, *, namer: Namer | None = None
) -> list[EvolutionViolation]:
    """Every way ``new`` breaks the evolution rules relative to ``old`` (empty if compatible)."""
    name = namer or _v2_namer(old, new)
    out: list[EvolutionViolation] = []
    for pair in _walk_pairs(old, new):
        if pair.old is None:
            assert pair.new is not None
            if not pair.new.nullable:
                out.append(
                    EvolutionViolation(
                        name(pair.path), "new-required-field", None, _describe(pair.new.type)
                    )
                )
            continue
        if pair.new is None:
            out.append(
                EvolutionViolation(name(pair.path), "field-removed", _describe(pair.old.type), None)
            )
            continue
        if pair.old.nullable and not pair.new.nullable:
            out.append(
                EvolutionViolation(
                    name(pair.path),
                    "optional-to-required",
                    _describe(pair.old.type),
                    _describe(pair.new.type),
                )
            )
        if _shape(pair.old.type) != _shape(pair.new.type):
            out.append(
                EvolutionViolation(
                    name(pair.path),
                    "type-change",
                    _describe(pair.old.type),
                    _describe(pair.new.type),
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class AddedField:
    """A field the new schema has and the old one lacks, with the old names it may be a typo of."""

    path: str  # dotted name path: "temperature", "location.alt", "tags.[item].x"
    suggestions: tuple[str, ...]  # closest existing fields at the same level, dotted, best first

    def __str__(self) -> str:
        if not self.suggestions:
            return self.path
        *rest, last = self.suggestions
        options = f"{', '.join(rest)} or {last}" if rest else last
        return f"{self.path} (did you mean {options}?)"


def _closest(name: str, existing: list[str]) -> list[str]:
    """The existing names closest to ``name``, ignoring case (``Temperature_C`` is a typo of
    ``temperature_c`` as much as ``temperature`` is); only the same name when case is all that
    differs. The cutoff is above difflib's default, which pairs any two three-letter names
    sharing two letters (``alt``, ``lat``)."""
    by_folded: dict[str, list[str]] = {}
    for candidate in existing:
        by_folded.setdefault(candidate.casefold(), []).append(candidate)
    folded = name.casefold()
    if folded in by_folded:
        return by_folded[folded]
    hits = difflib.get_close_matches(folded, list(by_folded), n=3, cutoff=0.7)
    return [candidate for hit in hits for candidate in by_folded[hit]]


def added_fields(old: pa.Schema, new: pa.Schema) -> list[AddedField]:
    """Every field of ``new`` that ``old`` lacks, at any depth (a new column, a new member of a
    struct, of a list's item struct or of a map's value struct), parents first.

    A new field's own children are not listed: adding ``location2`` adds its members with it.
    """
    existing: dict[NamePath, list[str]] = {}  # parent path -> the old schema's names under it
    added: list[NamePath] = []
    for pair in _walk_pairs(old, new):  # one traversal: a level's old names come with it
        if pair.old is None:
            added.append(pair.path)
        else:
            existing.setdefault(pair.path[:-1], []).append(pair.path[-1])
    return [
        AddedField(
            dotted(path),
            tuple(
                dotted((*path[:-1], name))
                for name in _closest(path[-1], existing.get(path[:-1], []))
            ),
        )
        for path in added
    ]


def check_new_columns(
    in_force: pa.Schema | None, written: pa.Schema, *, evolve: bool, dataset: str
) -> None:
    """The writers' schema policy: a write may add columns only when asked to (``evolve``).

    The evolution rules allow a new nullable column, so without this a misspelt header would
    add a column for good (fields are never removed). The first write to a dataset without a
    schema sets it and is no evolution; columns the write lacks are the writers' business
    (nullable ones become nulls). Raises :class:`NewColumnsError`, naming each new field and
    the closest existing names, before the caller writes anything.
    """
    if evolve or in_force is None:
        return
    added = added_fields(in_force, written)
    if added:
        raise NewColumnsError(
            "new-column",
            f"{dataset}: new column(s) {', '.join(map(str, added))}; "
            "pass evolve=True (--evolve) to add them",
        )


@dataclass(frozen=True)
class SchemaDiff:
    """What changed between two schemas, field by field (v2 paths)."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    retyped: list[tuple[str, str, str]] = field(default_factory=list)  # path, old, new
    nullability: list[tuple[str, bool, bool]] = field(default_factory=list)  # path, old, new

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.retyped or self.nullability)

    def lines(self) -> list[str]:
        out = [f"+ {p}" for p in self.added]
        out += [f"- {p}" for p in self.removed]
        out += [f"~ {p}: {a} -> {b}" for p, a, b in self.retyped]
        out += [
            f"~ {p}: {'nullable' if a else 'required'} -> {'nullable' if b else 'required'}"
            for p, a, b in self.nullability
        ]
        return out


def diff_schemas(old: pa.Schema, new: pa.Schema, *, namer: Namer | None = None) -> SchemaDiff:
    """Added, removed and retyped fields, and nullability changes, from ``old`` to ``new``."""
    name = namer or _v2_namer(old, new)
    diff = SchemaDiff()
    for pair in _walk_pairs(old, new):
        if pair.old is None:
            diff.added.append(name(pair.path))
        elif pair.new is None:
            diff.removed.append(name(pair.path))
        else:
            if _shape(pair.old.type) != _shape(pair.new.type):
                diff.retyped.append(
                    (name(pair.path), _describe(pair.old.type), _describe(pair.new.type))
                )
            if pair.old.nullable != pair.new.nullable:
                diff.nullability.append((name(pair.path), pair.old.nullable, pair.new.nullable))
    return diff
