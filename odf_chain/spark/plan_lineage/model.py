"""What a capture finds: the plan's sources, and for each output field what it depends on.

A *name path* is a field's names from the top-level column down, with ``"[item]"``,
``"[key]"`` and ``"[value]"`` for list items and map keys and values (the convention of
:func:`odf_chain.schema.paths.field_index`), e.g. ``("addr", "city")``.

Within one value, lineage is kept as a *field tree*: a dict from the name path inside the value
(``()`` for the value itself) to the dependencies of that part. A dependency recorded at a path
applies to that part as a whole; :func:`deps_at` says how a part inherits from the parts around
it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from odf_chain.events import Transformation, TransformationSubtype, TransformationType

NamePath = tuple[str, ...]

DIRECT = TransformationType.DIRECT
INDIRECT = TransformationType.INDIRECT
S = TransformationSubtype

IDENTITY = Transformation()
TRANSFORMATION = Transformation(DIRECT, S.TRANSFORMATION)
AGGREGATION = Transformation(DIRECT, S.AGGREGATION)
MASKING = Transformation(DIRECT, S.TRANSFORMATION, masking=True)
MASKING_AGGREGATION = Transformation(DIRECT, S.AGGREGATION, masking=True)
CONDITION = Transformation(INDIRECT, S.CONDITIONAL)
FILTER = Transformation(INDIRECT, S.FILTER)
JOIN = Transformation(INDIRECT, S.JOIN)
GROUP_BY = Transformation(INDIRECT, S.GROUP_BY)
SORT = Transformation(INDIRECT, S.SORT)
WINDOW = Transformation(INDIRECT, S.WINDOW)

# How much of the input survives in the output, least lossy first: when a value passes through
# several steps the lossiest one names the edge (sum(cast(x)) is an aggregation of x). This is
# openlineage-spark's order (TransformationInfo.merge: AGGREGATION, then TRANSFORMATION, then
# IDENTITY); the capture pairs no other subtype with DIRECT.
_DIRECT_RANK = {
    S.IDENTITY: 0,
    S.TRANSFORMATION: 1,
    S.AGGREGATION: 2,
}


class SourceKind(enum.Enum):
    """Where a leaf of the plan gets its rows."""

    FILES = "files"  # a file relation (Parquet, CSV, JSON, ...): files and root paths known
    LOCAL = "local"  # in-memory rows (LocalRelation, a DataFrame made from Python objects)
    RDD = "rdd"  # an RDD Spark cannot see into (its origin is unknown)
    OTHER = "other"  # any other leaf (a table of another catalog, a stream): named, not located


@dataclass(frozen=True, eq=False)
class PlanSource:
    """One leaf relation of the plan (or a file scan found under an RDD round trip).

    ``schema`` is what Spark reads from it, as Arrow (converted from Spark's types), so that
    source name paths can be turned into v2 field paths. ``files`` are URIs as Spark lists them,
    ``roots`` the paths the relation was created with (a directory, a file, a glob).
    """

    kind: SourceKind
    node: str
    schema: pa.Schema
    files: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()
    format: str | None = None
    table: str | None = None
    note: str | None = None

    @property
    def label(self) -> str:
        """A short human name: the table, the single root's (or single file's) last part, or
        the kind."""
        if self.table:
            return self.table
        single = self.roots if len(self.roots) == 1 else self.files if not self.roots else ()
        if len(single) == 1:
            return single[0].rstrip("/").rsplit("/", 1)[-1] or self.kind.value
        return self.kind.value if self.kind is not SourceKind.OTHER else self.node


@dataclass(frozen=True, slots=True)
class SourceField:
    """A field of one source: its index in :attr:`PlanLineage.sources` and its name path."""

    source: int
    path: NamePath


@dataclass(frozen=True, slots=True)
class Dependency:
    """An output field depends on ``field`` through ``transformation``. ``reason`` says, for an
    opaque step, what could not be looked into (a Python UDF's name, mapInPandas, an RDD)."""

    field: SourceField
    transformation: Transformation
    reason: str | None = None
    _hash: int = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # hashed very often (sets of dependencies, memo keys): compute it once
        object.__setattr__(self, "_hash", hash((self.field, self.transformation, self.reason)))

    def __hash__(self) -> int:
        return self._hash

    def sort_key(self) -> tuple:
        t = self.transformation
        return (
            self.field.source,
            self.field.path,
            t.type,
            t.subtype,
            t.masking,
            t.opaque,
            self.reason or "",
        )


Deps = frozenset[Dependency]
FieldTree = dict[NamePath, Deps]
NO_DEPS: Deps = frozenset()


@dataclass(frozen=True, slots=True)
class Step:
    """What a step of the plan does to the values passing through it: a transformation to
    compose onto their dependencies, and, for an opaque step, why it is opaque."""

    transformation: Transformation = IDENTITY
    reason: str | None = None
    neutral: bool = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # asked for every dependency the step meets: decide it once
        object.__setattr__(self, "neutral", self.transformation == IDENTITY and self.reason is None)


NEUTRAL = Step()


def compose_transformations(outer: Transformation, inner: Transformation) -> Transformation:
    """The transformation of a dependency ``inner`` seen through a later step ``outer``.

    openlineage-spark's merge (``TransformationInfo.merge``): an INDIRECT outer step makes
    everything below it decide rows, not values (a filter on a derived column depends on that
    column's inputs as a filter). Under a DIRECT step, an INDIRECT dependency stays what it was;
    two DIRECT ones keep the lossier subtype. Masking and opacity survive everything (a filter
    on ``sha2(x)`` decides rows by a value that hides ``x``).
    """
    opaque = outer.opaque or inner.opaque
    masking = outer.masking or inner.masking
    if outer.type is INDIRECT:
        return Transformation(INDIRECT, outer.subtype, masking, opaque)
    if inner.type is INDIRECT:
        return Transformation(INDIRECT, inner.subtype, masking, opaque)
    subtype = max(outer.subtype, inner.subtype, key=lambda s: _DIRECT_RANK.get(s, 1))
    return Transformation(DIRECT, subtype, masking, opaque)


def then(first: Step, second: Step) -> Step:
    """``second`` applied inside ``first`` (``first`` is the outer, later step)."""
    reason = first.reason
    if second.reason and second.reason != reason:
        reason = f"{reason}; {second.reason}" if reason else second.reason
    return Step(compose_transformations(first.transformation, second.transformation), reason)


class Composer:
    """Applies steps to dependencies, remembering results (wide plans repeat the same pairs)."""

    def __init__(self) -> None:
        # step -> id(dependency) -> (dependency, result); keyed by identity, which is cheap,
        # the dependency kept alive by its entry so that its id is not reused meanwhile
        self._memo: dict[Step, dict[int, tuple[Dependency, Dependency]]] = {}

    def dep(self, step: Step, dep: Dependency) -> Dependency:
        if step.neutral:
            return dep
        return self._one(self._memo.setdefault(step, {}), step, dep)

    @staticmethod
    def _one(
        memo: dict[int, tuple[Dependency, Dependency]], step: Step, dep: Dependency
    ) -> Dependency:
        entry = memo.get(id(dep))
        if entry is not None and entry[0] is dep:
            return entry[1]
        transformation = compose_transformations(step.transformation, dep.transformation)
        reason = dep.reason
        if transformation.opaque and step.reason and step.reason != reason:
            reason = f"{step.reason}; {reason}" if reason else step.reason
        found = Dependency(dep.field, transformation, reason)
        memo[id(dep)] = (dep, found)
        return found

    def deps(self, step: Step, deps: Iterable[Dependency]) -> Deps:
        if step.neutral:
            return deps if isinstance(deps, frozenset) else frozenset(deps)
        memo = self._memo.setdefault(step, {})
        return frozenset(self._one(memo, step, d) for d in deps)

    def tree(self, step: Step, tree: FieldTree) -> FieldTree:
        if step.neutral:
            return tree
        return {path: self.deps(step, deps) for path, deps in tree.items()}


def has_direct(deps: Iterable[Dependency]) -> bool:
    return any(d.transformation.type is DIRECT for d in deps)


def deps_at(tree: Mapping[NamePath, Deps], path: NamePath) -> Deps:
    """The dependencies of the part of a value at ``path``.

    - INDIRECT dependencies of an enclosing part apply (a CASE choosing between two structs
      decides every field of the result);
    - the part's own dependencies, if any are DIRECT, say where its value comes from;
    - else, if it has parts of its own (a struct built with ``struct(...)``), it comes from
      all of them;
    - else the nearest enclosing part with a DIRECT dependency gave it as a whole (a field of
      a struct a UDF returned comes from the UDF's inputs).
    """
    own = tree.get(path, NO_DEPS)
    enclosing: list[Deps] = [tree[path[:k]] for k in range(len(path)) if path[:k] in tree]
    result = set(own)
    for deps in enclosing:
        result.update(d for d in deps if d.transformation.type is INDIRECT)
    if has_direct(own):
        return frozenset(result)
    size = len(path)
    inside = [deps for p, deps in tree.items() if len(p) > size and p[:size] == path]
    for deps in inside:
        result.update(deps)
    if any(has_direct(deps) for deps in inside):
        return frozenset(result)
    for deps in reversed(enclosing):
        if has_direct(deps):
            result.update(deps)
            break
    return frozenset(result)


def whole(tree: Mapping[NamePath, Deps]) -> Deps:
    """Everything a value as a whole depends on (its own, or its parts')."""
    if not tree:
        return NO_DEPS
    if len(tree) == 1 and () in tree:
        return tree[()]
    return deps_at(tree, ())


def subtree(tree: Mapping[NamePath, Deps], prefix: NamePath) -> FieldTree:
    """The part of a value at ``prefix``, as a value of its own (``GetStructField``)."""
    size = len(prefix)
    out: FieldTree = {p[size:]: deps for p, deps in tree.items() if p[:size] == prefix}
    extra = set()
    for k in range(size):
        extra.update(d for d in tree.get(prefix[:k], ()) if d.transformation.type is INDIRECT)
    if not any(has_direct(deps) for deps in out.values()):
        for k in range(size - 1, -1, -1):
            deps = tree.get(prefix[:k])
            if deps and has_direct(deps):
                extra.update(deps)
                break
    if extra:
        out[()] = out.get((), NO_DEPS) | frozenset(extra)
    return out


def nest(prefix: NamePath, tree: Mapping[NamePath, Deps]) -> FieldTree:
    """A value placed at ``prefix`` inside a bigger one (``struct(x AS a)``)."""
    return {prefix + p: deps for p, deps in tree.items()}


def merge(trees: Iterable[Mapping[NamePath, Deps]]) -> FieldTree:
    """Values that all flow into one (the branches of a CASE, the inputs of a UNION)."""
    out: FieldTree = {}
    for tree in trees:
        for path, deps in tree.items():
            if not deps and path in out:
                continue
            out[path] = out[path] | deps if path in out else deps
    return out


def add_at_root(tree: FieldTree, deps: Deps) -> FieldTree:
    if not deps:
        return tree
    out = dict(tree)
    out[()] = out.get((), NO_DEPS) | deps
    return out


def type_paths(data_type: object, prefix: NamePath = ()) -> list[NamePath]:
    """The name paths inside a Spark type given as JSON (``{"type": "struct", ...}``),
    ``prefix`` first, parents before children."""
    out: list[NamePath] = []
    stack: list[tuple[NamePath, object]] = [(prefix, data_type)]
    while stack:
        path, t = stack.pop()
        out.append(path)
        if not isinstance(t, dict):
            continue
        kind = t.get("type")
        if kind == "struct":
            for f in reversed(t.get("fields") or []):
                stack.append(((*path, str(f.get("name"))), f.get("type")))
        elif kind == "array":
            stack.append(((*path, "[item]"), t.get("elementType")))
        elif kind == "map":
            stack.append(((*path, "[value]"), t.get("valueType")))
            stack.append(((*path, "[key]"), t.get("keyType")))
    return out


@dataclass(frozen=True)
class PlanLineage:
    """The field lineage of one DataFrame, from its analyzed plan.

    ``fields`` maps every output name path (top-level columns and every nested field, list
    item, map key and value) to what it depends on: its value's dependencies plus
    ``row_dependencies``, the INDIRECT ones that decide which rows exist (filters, join keys,
    grouping keys, sort keys). ``unsupported`` names the plan nodes and expressions that were
    not understood and were treated as opaque over everything they could see.
    """

    sources: tuple[PlanSource, ...]
    columns: tuple[str, ...]
    fields: Mapping[NamePath, Deps]
    row_dependencies: Deps
    unsupported: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def value_dependencies(self, path: NamePath) -> Deps:
        """What the field's *value* depends on (its dependencies less the row ones)."""
        return self.fields.get(path, NO_DEPS) - self.row_dependencies
