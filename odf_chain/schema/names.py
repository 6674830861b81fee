"""Name paths: how the schema modules point at a nested field without a v2 path.

A name path is the tuple of names from a column down to a field (``("address", "zip")``), with
list items and map keys/values as the structural names ``[item]``, ``[key]`` and ``[value]``.
:mod:`~odf_chain.schema.evolution` walks two schemas by name path and
:mod:`~odf_chain.schema.paths` maps name paths to v2 paths; both need the same vocabulary, and
neither should import the other for it, so it lives here, below both.
"""

from __future__ import annotations

import pyarrow as pa

NamePath = tuple[str, ...]

ITEM, KEY, VALUE = "[item]", "[key]", "[value]"


def children(t: pa.DataType) -> list[tuple[str, pa.Field]] | None:
    """Named child fields of a nested type; None for a leaf type."""
    if pa.types.is_struct(t):
        return [(t.field(i).name, t.field(i)) for i in range(t.num_fields)]
    if pa.types.is_map(t):
        return [(KEY, t.key_field), (VALUE, t.item_field)]
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return [(ITEM, t.value_field)]
    return None
