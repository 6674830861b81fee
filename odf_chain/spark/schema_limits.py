"""The schema limits of :mod:`odf_chain.format.arrow_schema`, applied to a Spark schema.

A DataFrame nested deeper than a dataset may be is refused before Spark writes anything: Spark
itself would write it, and the write would only fail afterwards, when the files are hashed.
"""

from __future__ import annotations

from odf_chain.format.arrow_schema import MAX_NESTING, shown_path, too_deep


def _children(data_type) -> list[tuple[str, object]]:
    """The types nested directly in a Spark type, with their path labels."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        return [(f.name, f.dataType) for f in data_type.fields]
    if isinstance(data_type, ArrayType):
        return [("[item]", data_type.elementType)]
    if isinstance(data_type, MapType):
        return [("[key]", data_type.keyType), ("[value]", data_type.valueType)]
    return []


def check_nesting(schema) -> None:
    """Refuse a Spark ``StructType`` whose columns nest fields deeper than
    :data:`~odf_chain.format.arrow_schema.MAX_NESTING` levels, naming the field (an iterative
    walk that stops at the limit)."""
    stack = [([f.name], f.dataType) for f in reversed(schema.fields)]
    while stack:
        path, data_type = stack.pop()
        children = _children(data_type)
        if children and len(path) >= MAX_NESTING:
            raise too_deep(shown_path(path), len(path) + 1)
        stack.extend(([*path, label], child) for label, child in reversed(children))
