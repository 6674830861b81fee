"""Let people name fields the way they think of them.

v2 paths (``[version=2.0].[type=struct].[type=long].id``) are what the chain stores, because
they are what DataHub shows; nobody types them. Where a lineage event names a field of a known
schema by its plain dotted name (``id``, ``address.city``), :func:`with_v2_paths` replaces the
name by the one v2 path that has it. Names that already are v2 paths, and names no field or
several fields have, are left as they are for the rules to judge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from odf_chain.errors import NotFoundError
from odf_chain.events import AddFieldLineage, InputField
from odf_chain.schema.paths import v1_path


def _lookup(paths: Iterable[str]) -> dict[str, str]:
    """Plain dotted name -> v2 path, for the names exactly one path has (and each path itself)."""
    by_name: dict[str, list[str]] = {}
    for path in paths:
        by_name.setdefault(v1_path(path), []).append(path)
    table = {name: found[0] for name, found in by_name.items() if len(found) == 1}
    for found in by_name.values():
        for path in found:
            table[path] = path
    return table


def with_v2_paths(
    event: AddFieldLineage,
    output_paths: Iterable[str],
    input_paths: Mapping[str, Iterable[str]] | None = None,
) -> AddFieldLineage:
    """``event`` with written outputs and input fields given by plain names turned into the v2
    paths of ``output_paths`` (this dataset's schema) and ``input_paths`` (per input name)."""
    outputs = _lookup(output_paths)
    inputs = {name: _lookup(paths) for name, paths in (input_paths or {}).items()}
    operations = []
    for op in event.operations:
        reads = tuple(
            InputField(f.origin, inputs[f.origin].get(f.field, f.field))
            if f.origin in inputs
            else f
            for f in op.inputs
        )
        writes = tuple(outputs.get(o, o) for o in op.outputs) if op.writes else op.outputs
        operations.append(replace(op, inputs=reads, outputs=writes))
    return replace(event, operations=tuple(operations))


def resolve_name(name: str, paths: Iterable[str], *, where: str) -> str:
    """The v2 path among ``paths`` that ``name`` means (itself, or the one path with that
    plain name); NotFoundError naming ``where`` and the candidates otherwise."""
    paths = list(paths)
    if name in paths:
        return name
    matches = sorted(p for p in paths if v1_path(p) == name)
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise NotFoundError(f"{name!r} names several fields of {where}: {', '.join(matches)}")
    close = sorted(p for p in paths if name.lower() in v1_path(p).lower())[:5]
    hint = f" (similar: {', '.join(close)})" if close else ""
    raise NotFoundError(f"{where} has no field {name!r}{hint}")
