"""From a captured :class:`PlanLineage` to the inputs and field operations of an
:class:`~odf_chain.events.AddFieldLineage` event.

Output fields are the v2 paths of the schema being written (``field_index(output_schema)``),
input fields the v2 paths of each input's schema. Output fields that depend on the same input
fields through the same transformation share one operation. Operations are sorted by the first
output field they write (in schema order), then by transformation; their names are the
transformation and a counter (``direct-identity-1``), so that the same plan over the same
inputs gives the same event in every run: nothing derived from expression ids is kept.

System columns (``offset``, ``op``, ``system_time``, ``event_time`` by default) are outputs
only when derived from the DataFrame (an ``event_time`` column the job computes): a column that
is not in the DataFrame, or that depends on nothing but the rows around it, is not listed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from odf_chain.events import FieldOperation, InputField, LineageInput, Transformation
from odf_chain.schema.paths import field_index
from odf_chain.spark.plan_lineage.capture import capture_plan_lineage
from odf_chain.spark.plan_lineage.model import NamePath, PlanLineage
from odf_chain.spark.plan_lineage.resolve import (
    SPARK_LOCAL_URI,
    SPARK_RDD_URI,
    InputResolver,
    ResolvedInput,
    ResolveInput,
)
from odf_chain.state import Vocabulary

_VOCAB = Vocabulary()
DEFAULT_SYSTEM_COLUMNS = (*_VOCAB.system_columns, _VOCAB.event_time_column)

LineageParts = tuple[tuple[LineageInput, ...], tuple[FieldOperation, ...]]


def _nearest(index: Mapping[NamePath, str], path: NamePath) -> str | None:
    """The v2 path of ``path``, or of its nearest enclosing field that has one."""
    for k in range(len(path), 0, -1):
        found = index.get(path[:k])
        if found is not None:
            return found
    return None


_IN_MEMORY = (SPARK_LOCAL_URI, SPARK_RDD_URI)


def _input_key(resolved: ResolvedInput, source: int, position: int) -> tuple:
    i = resolved.input
    if i.dataset_id is None and (i.uri is None or i.uri in _IN_MEMORY):
        return ("anonymous", source, position)  # in-memory rows: each leaf is its own input
        return ("anonymous", source, position)
    return (i.uri, str(i.dataset_id), str(i.block_hash), str(i.content_hash))


def _name_inputs(found: list[ResolvedInput]) -> list[ResolvedInput]:
    """Give every input a unique name: its own, then ``name-2``, ``name-3`` ... in a fixed
    order (by name, then URI, then pinned block)."""
    order = sorted(
        range(len(found)),
        key=lambda k: (
            found[k].input.name,
            found[k].input.uri or "",
            str(found[k].input.block_hash or ""),
            str(found[k].input.content_hash or ""),
        ),
    )
    used: set[str] = set()
    named = list(found)
    for k in order:
        base = found[k].input.name
        name, n = base, 1
        while name in used:
            n += 1
            name = f"{base}-{n}"
        used.add(name)
        named[k] = replace(found[k], input=replace(found[k].input, name=name))
    return named


def _transformation_key(t: Transformation, reason: str | None) -> tuple:
    return (t.type, t.subtype, t.masking, t.opaque, reason or "")


def operations_from_lineage(
    lineage: PlanLineage,
    output_schema: pa.Schema,
    resolve_input: ResolveInput,
    *,
    system_columns: Collection[str] = DEFAULT_SYSTEM_COLUMNS,
) -> LineageParts:
    """The event's inputs and operations for ``lineage`` written as ``output_schema``."""
    # inputs: resolve every source once, merge the same input met twice, name them
    distinct: dict[tuple, int] = {}
    found: list[ResolvedInput] = []
    per_source: list[list[int]] = []
    for s, source in enumerate(lineage.sources):
        mine = []
        for position, resolved in enumerate(resolve_input(source)):
            key = _input_key(resolved, s, position)
            if key not in distinct:
                distinct[key] = len(found)
                found.append(resolved)
            mine.append(distinct[key])
        per_source.append(mine)
    named = _name_inputs(found)
    indexes = [field_index(r.schema) if r.schema is not None else {} for r in named]

    # outputs: each v2 path of the written schema the DataFrame gives a value
    out_index = field_index(output_schema)
    rank: dict[str, int] = {}
    for v2 in out_index.values():
        rank.setdefault(v2, len(rank))
    columns = set(lineage.columns)
    system = set(system_columns)
    grouped: dict[tuple, set[str]] = {}
    for path, out_path in out_index.items():
        top = path[0]
        if top not in columns:
            continue
        if top in system and not lineage.value_dependencies((top,)):
            continue
        deps = lineage.fields.get(path)
        if deps is None:
            enclosing = next(
                (path[:k] for k in range(len(path) - 1, 0, -1) if path[:k] in lineage.fields), None
            )
            deps = lineage.fields.get(enclosing, frozenset()) if enclosing else frozenset()
        by_transformation: dict[tuple, set[InputField]] = {}
        transformations: dict[tuple, tuple[Transformation, str | None]] = {}
        for dep in deps:
            key = _transformation_key(dep.transformation, dep.reason)
            transformations[key] = (dep.transformation, dep.reason)
            target = by_transformation.setdefault(key, set())
            for k in per_source[dep.field.source]:
                v2 = _nearest(indexes[k], dep.field.path)
                if v2 is not None:
                    target.add(InputField(named[k].input.name, v2))
        for key, inputs in by_transformation.items():
            if not inputs:
                continue
            transformation, reason = transformations[key]
            group = (key, transformation, reason, frozenset(inputs))
            grouped.setdefault(group, set()).add(out_path)

    ordered = sorted(
        grouped.items(),
        key=lambda item: (
            min(rank[o] for o in item[1]),
            item[0][0],
            sorted((i.origin, i.field) for i in item[0][3]),
        ),
    )
    counters: dict[str, int] = {}
    operations = []
    for (_, transformation, reason, inputs), outputs in ordered:
        prefix = _operation_prefix(transformation)
        counters[prefix] = counters.get(prefix, 0) + 1
        operations.append(
            FieldOperation(
                name=f"{prefix}-{counters[prefix]}",
                inputs=tuple(sorted(inputs, key=lambda i: (i.origin, i.field))),
                outputs=tuple(sorted(outputs, key=lambda o: rank[o])),
                transformation=transformation,
                description=_describe(transformation, reason),
                writes=True,
            )
        )
    inputs = tuple(sorted((r.input for r in named), key=lambda i: i.name))
    return inputs, tuple(operations)


def _operation_prefix(t: Transformation) -> str:
    parts = [t.type.name.lower(), t.subtype.name.lower().replace("_", "-")]
    if t.masking:
        parts.append("masked")
    if t.opaque:
        parts.append("opaque")
    return "-".join(parts)


def _describe(t: Transformation, reason: str | None) -> str:
    text = f"{t.type.name} {t.subtype.name}"
    if t.masking:
        text += ", masking"
    if t.opaque:
        text += f", opaque ({reason})" if reason else ", opaque"
    return text + " (captured from the Spark plan)"


def lineage_from_plan(
    df: Any,
    output_schema: pa.Schema,
    resolve_input: ResolveInput | None = None,
    *,
    system_columns: Collection[str] = DEFAULT_SYSTEM_COLUMNS,
) -> LineageParts | None:
    """The inputs and field operations of ``df`` written as ``output_schema``, captured from
    its analyzed plan; None under Spark Connect (with a warning).

    ``resolve_input`` turns each of the plan's sources into event inputs (default: a fresh
    :class:`InputResolver`: odf_chain datasets pinned at a block, other files by content
    hash). ``system_columns`` are left out unless derived from the DataFrame.
    """
    lineage = capture_plan_lineage(df)
    if lineage is None:
        return None
    resolver = resolve_input if resolve_input is not None else InputResolver()
    return operations_from_lineage(lineage, output_schema, resolver, system_columns=system_columns)


__all__: Sequence[str] = [
    "DEFAULT_SYSTEM_COLUMNS",
    "lineage_from_plan",
    "operations_from_lineage",
]
